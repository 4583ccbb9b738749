/** What every view of the console shares: the client, the API key, the streams seen. */

import { AirlaneClient } from "@airlane/client";

const KEY = "airlane.console.key";
const RECENT = "airlane.console.recent";

/** The console's state across views (kept in the tab's session storage). */
export class ConsoleContext {
  client: AirlaneClient;

  constructor() {
    this.client = this.#make();
  }

  /** The API key in use ("" without one). */
  get apiKey(): string {
    return sessionStorage.getItem(KEY) ?? "";
  }

  /** Use `key` from now on (the gateway checks it on every call). */
  setApiKey(key: string): void {
    if (key) sessionStorage.setItem(KEY, key);
    else sessionStorage.removeItem(KEY);
    this.client = this.#make();
  }

  /** Streams this tab started or opened, newest first (at most 20). */
  get recent(): string[] {
    return JSON.parse(sessionStorage.getItem(RECENT) ?? "[]") as string[];
  }

  /** Remember `streamId` as recently seen. */
  remember(streamId: string): void {
    const recent = [streamId, ...this.recent.filter((id) => id !== streamId)].slice(0, 20);
    sessionStorage.setItem(RECENT, JSON.stringify(recent));
  }

  #make(): AirlaneClient {
    const key = this.apiKey;
    return new AirlaneClient({ baseUrl: location.origin, ...(key ? { apiKey: key } : {}) });
  }
}

/** A view: mounts itself into `root`; returns what to run when the view is left. */
export type View = (root: HTMLElement, context: ConsoleContext, params: URLSearchParams) => () => void;
