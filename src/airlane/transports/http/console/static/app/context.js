/** What every view of the console shares: the client, the API key, the streams seen. */
import { AirlaneClient } from "@airlane/client";
const KEY = "airlane.console.key";
const RECENT = "airlane.console.recent";
/** The console's state across views (kept in the tab's session storage). */
export class ConsoleContext {
    client;
    constructor() {
        this.client = this.#make();
    }
    /** The API key in use ("" without one). */
    get apiKey() {
        return sessionStorage.getItem(KEY) ?? "";
    }
    /** Use `key` from now on (the gateway checks it on every call). */
    setApiKey(key) {
        if (key)
            sessionStorage.setItem(KEY, key);
        else
            sessionStorage.removeItem(KEY);
        this.client = this.#make();
    }
    /** Streams this tab started or opened, newest first (at most 20). */
    get recent() {
        return JSON.parse(sessionStorage.getItem(RECENT) ?? "[]");
    }
    /** Remember `streamId` as recently seen. */
    remember(streamId) {
        const recent = [streamId, ...this.recent.filter((id) => id !== streamId)].slice(0, 20);
        sessionStorage.setItem(RECENT, JSON.stringify(recent));
    }
    #make() {
        const key = this.apiKey;
        return new AirlaneClient({ baseUrl: location.origin, ...(key ? { apiKey: key } : {}) });
    }
}
