/**
 * Typed errors: every failure a gateway reports carries one of Airlane's stable error codes
 * (docs/errors.md), the same on every wire. `AirlaneError.code` is typed by that list, so a
 * caller can branch on it; the list is checked against the gateway's own by the tests.
 */
/** Every error code a gateway may report (never renamed; new failures get new codes). */
export const ERROR_CODES = [
    "invalid_request", "invalid_parameter", "invalid_json", "invalid_message", "invalid_event",
    "invalid_metadata", "invalid_stream_id", "bad_resume_token", "invalid_resume",
    "body_too_large", "not_found", "method_not_allowed", "unknown_op", "unsupported",
    "unsupported_subprotocol", "unsupported_media_type", "client_disconnected",
    "stream_not_found", "stream_exists", "stream_ended", "stream_too_large", "unknown_stream",
    "already_subscribed", "not_subscribed", "too_many_subscriptions", "too_many_requests",
    "too_slow", "producer_lost", "overloaded", "hub_full", "hub_unavailable", "hub_error",
    "shutting_down", "unauthenticated", "permission_denied", "quota_exceeded", "backend_error",
    "upstream_error", "upstream_http_error", "upstream_unavailable", "upstream_timeout",
    "upstream_connection_error", "upstream_protocol_error", "event_log_error",
    "invalid_log_name", "log_not_found", "group_not_found", "group_settings_conflict",
    "log_exists", "event_too_large", "capacity_exceeded", "event_log_unavailable",
    "broker_error", "registry_error", "invalid_subject", "invalid_compatibility",
    "subject_not_found", "version_not_found", "incompatible_schema", "registration_conflict",
    "invalid_schema", "schema_violation", "unknown_event_type", "registry_unavailable",
    "invalid_room", "invalid_room_request", "invalid_sync_data", "clock_drift", "read_only",
    "room_unavailable", "artifact_error", "malformed_artifact", "verification_failed",
    "bad_signature", "delta_base_mismatch", "range_not_satisfiable", "internal_error",
];
/** Codes that mean "not now": the same request may succeed later. */
const TRANSIENT = new Set([
    "overloaded", "too_many_requests", "too_slow", "hub_full", "hub_unavailable",
    "shutting_down", "upstream_unavailable", "upstream_timeout", "upstream_connection_error",
    "event_log_unavailable", "registry_unavailable", "room_unavailable",
]);
/** What the gateway said, on any wire. */
export class AirlaneError extends Error {
    name = "AirlaneError";
    /** The gateway's error code (`client_error` for a failure on this side). */
    code;
    /** The HTTP status (0 where none was involved, as on a WebSocket). */
    status;
    /** The request parameter at fault, when the gateway names one. */
    param;
    /** Seconds the gateway asked to wait before trying again (`Retry-After`), if it did. */
    retryAfterS;
    constructor(message, options) {
        super(message, options.cause === undefined ? undefined : { cause: options.cause });
        this.code = options.code;
        this.status = options.status ?? 0;
        this.param = options.param ?? null;
        this.retryAfterS = options.retryAfterS ?? null;
    }
    /** Whether sending the same request again later may succeed. */
    get transient() {
        return TRANSIENT.has(this.code) || this.status === 429 || this.status >= 500;
    }
}
/** The connection failed or dropped and could not be resumed within the retry budget. */
export class ConnectionLost extends AirlaneError {
    name = "ConnectionLost";
    constructor(message, cause) {
        super(message, { code: "client_error", cause });
    }
}
/** The stream ended with an `error` event (its `code` says why, e.g. `producer_lost`). */
export class StreamFailed extends AirlaneError {
    name = "StreamFailed";
}
/** Whether `value` is one of the gateway's error codes. */
export function isErrorCode(value) {
    return typeof value === "string" && ERROR_CODES.includes(value);
}
/** The `AirlaneError` of a response with a non-2xx status (its JSON error body). */
export async function errorFromResponse(response) {
    let body = null;
    const text = await response.text().catch(() => "");
    try {
        body = JSON.parse(text);
    }
    catch {
        // not JSON: a proxy's page, say; the status still tells
    }
    const error = body?.error ?? {};
    const code = isErrorCode(error.code) ? error.code : codeOfStatus(response.status);
    const message = typeof error.message === "string" ? error.message : text.slice(0, 200);
    const retryAfter = Number.parseFloat(response.headers.get("retry-after") ?? "");
    return new AirlaneError(message || `HTTP ${response.status}`, {
        code,
        status: response.status,
        param: typeof error.param === "string" ? error.param : null,
        retryAfterS: Number.isFinite(retryAfter) ? retryAfter : null,
    });
}
/** A code for a status that came without one. */
function codeOfStatus(status) {
    if (status === 401)
        return "unauthenticated";
    if (status === 403)
        return "permission_denied";
    if (status === 404)
        return "not_found";
    if (status === 429)
        return "too_many_requests";
    if (status === 503)
        return "overloaded";
    return status >= 500 ? "internal_error" : "invalid_request";
}
