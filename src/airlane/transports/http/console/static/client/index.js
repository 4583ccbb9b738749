/**
 * `@airlane/client`: a browser and Node client for Airlane gateways.
 *
 * - `AirlaneClient`: chat completions that stream and resume after a drop, stream events
 *   from any position, cancel, the usage ledger (HTTP + SSE).
 * - `AirlaneSocket`: many streams on one WebSocket, reconnecting and resuming each.
 * - `AirlaneError` and its `code`: the gateway's stable error codes.
 */
export { AirlaneClient, ChatStream, backoff, sleep, streamPath } from "./client.js";
export { AirlaneError, ConnectionLost, ERROR_CODES, StreamFailed, errorFromResponse, isErrorCode } from "./errors.js";
export { TextState, isTerminal, parseEvent } from "./events.js";
export { SSEParser, readSSE } from "./sse.js";
export { AirlaneSocket, Subscription } from "./ws.js";
