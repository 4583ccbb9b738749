/** What every view of the console shares: the client and the API key. */
import { AirlaneClient } from "@airlane/client";
const KEY = "airlane.console.key";
/** The console's state across views (the key is kept in the tab's session storage). */
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
    #make() {
        const key = this.apiKey;
        return new AirlaneClient({ baseUrl: location.origin, ...(key ? { apiKey: key } : {}) });
    }
}
