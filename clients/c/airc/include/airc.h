/*
 * AIRC v1.2 for microcontrollers: the frame codec and the connection state machine.
 *
 * C99, no dynamic allocation, nothing from libc but memcpy and memset. Every buffer is a
 * member of a struct the caller allocates (statically, on the stack, wherever), sized by the
 * compile-time limits in airc_config.h. No I/O and no clock: bytes go in and out through the
 * caller's buffers, and time is the `now` (microseconds, a wrapping u32) the caller passes.
 *
 * The semantics are those of Airlane's Python codec (airlane.wire.airc), which the tests
 * check by feeding both the same byte streams:
 *
 *   - a frame is a 20-byte header and a payload, CRC-16/CCITT-FALSE over both;
 *   - the first malformed byte ends the connection: a GOAWAY with the error code goes out,
 *     and nothing more is read;
 *   - per stream and direction, seqs 1, 2, 3 ... (wrapping); the receiver delivers each
 *     message once, in order, reassembled from EOM fragments, and acknowledges cumulatively
 *     (after AIRC_ACK_EVERY frames or AIRC_ACK_DELAY_US, at once after a gap or duplicate);
 *   - the sender keeps up to AIRC_SEND_WINDOW frames unacknowledged and retransmits the
 *     oldest after the RFC 6298 timeout (doubled per retry) or three repeated ACKs;
 *   - PRIORITY frames leave before others, pure ACKs before everything.
 *
 * One difference by design: the Python sender queues messages beyond the window; here the
 * window is the queue, and airc_send refuses (AIRC_E_WOULD_BLOCK) a message whose fragments
 * do not fit in it. The caller tries again after an AIRC_EV_ACKNOWLEDGED event.
 */
#ifndef AIRC_H
#define AIRC_H

#include <stddef.h>
#include <stdint.h>

#include "airc_config.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AIRC_MAGIC 0x41495243u /* "AIRC" */
#define AIRC_VERSION 0x02u
#define AIRC_HEADER_SIZE 20u
#define AIRC_MAX_PAYLOAD 0xFFFFu
#define AIRC_SIGNALLING_STREAM 255u
#define AIRC_ANY_STREAM 0xFFFFu

#define AIRC_FLAG_ACK 0x01u
#define AIRC_FLAG_EOM 0x02u
#define AIRC_FLAG_PRIORITY 0x04u

/* Why a connection ended: the u16 a GOAWAY carries (Python's ErrorCode). */
typedef enum {
    AIRC_NO_ERROR = 0,
    AIRC_BAD_MAGIC = 1,
    AIRC_BAD_VERSION = 2,
    AIRC_RESERVED_FLAGS = 3,
    AIRC_BAD_CRC = 4,
    AIRC_BAD_LENGTH = 5,
    AIRC_OVERSIZE = 6,
    AIRC_BAD_SIGNALLING = 7,
    AIRC_UNKNOWN_SIGNAL = 8,
    AIRC_MESSAGE_TOO_LARGE = 9,
    AIRC_ACK_TIMEOUT = 10,
    AIRC_TOO_MANY_STREAMS = 11,
    AIRC_FLOW_CONTROL = 12,
    AIRC_INTERNAL_ERROR = 13,
    AIRC_PEER_GOAWAY = 14,
    AIRC_AUTH_FAILED = 15
} airc_error;

#define AIRC_LAST_ERROR_CODE 15u

/* What the calls below return besides a count (negative, so never a valid size). */
#define AIRC_E_WOULD_BLOCK (-1) /* the send window has no room for the whole message */
#define AIRC_E_INVALID (-2)     /* a caller's mistake: bad stream, too long, no space */
#define AIRC_E_CLOSED (-3)      /* the connection is over */

/* Signalling message types (the first byte of a stream-255 message). */
enum {
    AIRC_SIG_GEN_REQUEST = 0x01,
    AIRC_SIG_GEN_ACK = 0x02,
    AIRC_SIG_OPEN = 0x03,
    AIRC_SIG_OPENED = 0x04,
    AIRC_SIG_CLOSE = 0x05,
    AIRC_SIG_CANCEL = 0x06,
    AIRC_SIG_CANCELLED = 0x07,
    AIRC_SIG_ERROR = 0x08,
    AIRC_SIG_TIME_REQUEST = 0x09,
    AIRC_SIG_TIME_RESPONSE = 0x0A,
    AIRC_SIG_GOAWAY = 0x0B,
    AIRC_SIG_AUTH = 0x0C,
    AIRC_SIG_AUTHENTICATED = 0x0D,
    AIRC_SIG_LAST = 0x14
};

/* ---- serial-number arithmetic (RFC 1982) on u32 seqs and timestamps ------------------- */

/* a - b as a signed distance; right while the two are less than 2^31 apart. */
static inline int32_t airc_serial_diff(uint32_t a, uint32_t b) {
    uint32_t d = a - b;
    return d < 0x80000000u ? (int32_t)d : -(int32_t)(~d) - 1;
}

/* ---- frames -------------------------------------------------------------------------- */

typedef struct {
    uint16_t stream_id;
    uint32_t seq;
    uint32_t timestamp;
    uint8_t flags;
    uint16_t length;
    const uint8_t *payload; /* `length` bytes, valid until the next call on the decoder */
} airc_frame;

/* CRC-16/CCITT-FALSE of data, continuing from crc (start with 0xFFFF). */
uint16_t airc_crc16(const uint8_t *data, size_t len, uint16_t crc);

/* Write one frame to out; return its size, or 0 if it does not fit in `cap` or a field is
 * invalid (reserved flag bits). */
size_t airc_encode_frame(uint8_t *out, size_t cap, uint16_t stream_id, uint32_t seq,
                         uint32_t timestamp, uint8_t flags, const uint8_t *payload,
                         uint16_t length);

/* Frames from a byte stream fed in any pieces; holds at most one incomplete frame. */
typedef struct {
    uint8_t buf[AIRC_HEADER_SIZE + AIRC_RX_PAYLOAD];
    uint32_t have;         /* bytes of the current frame in buf */
    uint16_t max_payload;  /* a longer announced length is AIRC_OVERSIZE */
    uint8_t error;         /* 0, or the airc_error that stopped it (sticky) */
} airc_decoder;

void airc_decoder_init(airc_decoder *d, uint16_t max_payload);

/* Take bytes from data[0..len) until a frame completes or an error is found. Returns the
 * bytes taken; sets *frame->payload (non-NULL) when a frame completed, and d->error when the
 * input is malformed (then nothing more is ever taken). Call again with the rest. */
size_t airc_decoder_feed(airc_decoder *d, const uint8_t *data, size_t len, airc_frame *frame);

/* ---- signalling ---------------------------------------------------------------------- */

/* 0 if payload is a well-formed signalling message (Python's decode_signal accepts exactly
 * these), else AIRC_UNKNOWN_SIGNAL or AIRC_BAD_SIGNALLING. */
airc_error airc_signal_check(const uint8_t *payload, size_t len);

/* A little writer for building signalling messages in a caller's buffer. */
typedef struct {
    uint8_t *buf;
    size_t cap;
    size_t len;
    int overflow;
} airc_writer;

void airc_writer_init(airc_writer *w, uint8_t *buf, size_t cap);
void airc_put_u8(airc_writer *w, uint8_t v);
void airc_put_u16(airc_writer *w, uint16_t v);
void airc_put_u32(airc_writer *w, uint32_t v);
void airc_put_u64(airc_writer *w, uint64_t v);
/* A length-prefixed field: prefix_size 1, 2 or 4 bytes, then len bytes. */
void airc_put_sized(airc_writer *w, unsigned prefix_size, const uint8_t *data, size_t len);

/* ---- the connection ------------------------------------------------------------------ */

typedef enum {
    AIRC_EV_MESSAGE = 1,      /* a whole message on a data stream */
    AIRC_EV_SIGNAL = 2,       /* a checked signalling message (not TIME or GOAWAY) */
    AIRC_EV_GAP = 3,          /* a frame arrived ahead of `expected` */
    AIRC_EV_ACKNOWLEDGED = 4, /* the peer acknowledged stream up to seq: window room */
    AIRC_EV_CLOCK = 5,        /* a TIME exchange finished: offset_us, delay_us */
    AIRC_EV_CLOSED = 6        /* the connection is over: code, by_peer */
} airc_event_kind;

typedef struct {
    airc_event_kind kind;
    uint16_t stream_id;
    const uint8_t *data; /* MESSAGE/SIGNAL: valid only during the callback */
    size_t length;
    uint32_t timestamp; /* MESSAGE/SIGNAL: the sender's clock on the last frame */
    uint8_t priority;   /* MESSAGE */
    uint32_t expected;  /* GAP */
    uint32_t seq;       /* GAP: the frame received; ACKNOWLEDGED: the seq acknowledged */
    int32_t offset_us2; /* CLOCK: twice the offset (server - ours), in microseconds */
    int32_t delay_us;   /* CLOCK */
    uint16_t code;      /* CLOSED: an airc_error */
    uint8_t by_peer;    /* CLOSED */
} airc_event;

typedef void (*airc_event_fn)(void *ctx, const airc_event *event);

/* A frame of the send window: queued (not yet sent) or sent and awaiting its ACK. It is
 * encoded straight into airc_output's buffer, and again, byte for byte, when retransmitted. */
typedef struct {
    uint32_t seq;
    uint32_t stamp;   /* the header timestamp, fixed when first sent */
    uint32_t sent_at;
    uint32_t deadline;
    uint16_t length;
    uint8_t flags;
    uint8_t retries;
    uint8_t resend;   /* due again: the next airc_output writes it */
    uint8_t payload[AIRC_TX_PAYLOAD];
} airc_in_flight;

typedef struct {
    uint16_t stream_id;
    uint8_t used;
    uint8_t dup_acks;
    uint32_t next_seq; /* the seq of the next frame queued */
    uint8_t head;      /* the oldest of `count` frames in slots (a ring) ... */
    uint8_t count;
    uint8_t sent;      /* ... of which the first `sent` went out (a stream sends in order) */
    airc_in_flight slots[AIRC_SEND_WINDOW];
} airc_send_stream;

typedef struct {
    uint32_t seq;
    uint16_t length;
    uint8_t flags;
    uint32_t timestamp;
    uint8_t payload[AIRC_RX_PAYLOAD];
} airc_held_frame;

typedef struct {
    uint16_t stream_id;
    uint8_t used;
    uint8_t owes_ack;
    uint8_t partial_priority;
    uint8_t held_count;
    uint16_t since_ack;
    uint32_t expected;
    uint32_t partial_len;
    uint8_t partial[AIRC_MAX_MESSAGE];
#if AIRC_REORDER_WINDOW > 1
    airc_held_frame held[AIRC_REORDER_WINDOW - 1];
#endif
} airc_recv_stream;

typedef struct {
    uint32_t frames_sent, frames_received, messages_sent, messages_received;
    uint32_t retransmits, duplicates, gaps, beyond_window;
} airc_stats;

typedef struct {
    airc_decoder decoder;
    airc_send_stream send[AIRC_MAX_STREAMS + 1]; /* + stream 255 */
    airc_recv_stream recv[AIRC_MAX_STREAMS + 1];
    airc_stats stats;
    uint32_t start;          /* `now` at init: timestamps count from here */
    uint32_t now;            /* the latest `now` a caller passed */
    uint32_t srtt8;          /* smoothed RTT x 8, us (0: no sample yet) */
    uint32_t rttvar4;        /* RTT variance x 4, us */
    uint32_t rto;            /* retransmission timeout, us */
    uint32_t ack_deadline;
    uint32_t received_bytes; /* held for the peer: frames ahead of gaps, partial messages */
    uint32_t next_nonce;
    uint32_t time_nonce;     /* the clock request awaiting an answer (0: none) */
    uint8_t ack_pending;     /* ack_deadline is set */
    uint8_t ack_now;
    uint8_t closed;
    uint8_t goaway_pending;  /* closed by us: queued signalling, then GOAWAY, go out */
    uint16_t goaway_code;
    uint32_t goaway_stamp;
    uint16_t reason_len;
    char reason[AIRC_MAX_REASON];
} airc_conn;

void airc_conn_init(airc_conn *c, uint32_t now);

/* Feed bytes from the peer; events go to fn(ctx, event) as they happen. Never fails for
 * bad input: a violation closes the connection (an AIRC_EV_CLOSED event, GOAWAY queued). */
void airc_receive(airc_conn *c, const uint8_t *data, size_t len, uint32_t now,
                  airc_event_fn fn, void *ctx);

/* Queue one message on stream_id (0..0xFFFE), fragmented by AIRC_TX_PAYLOAD. Returns 0,
 * AIRC_E_WOULD_BLOCK (window full: nothing queued), AIRC_E_CLOSED, or AIRC_E_INVALID (a
 * message over AIRC_SEND_WINDOW x AIRC_TX_PAYLOAD bytes, which could never go, or no free
 * stream slot). */
int airc_send(airc_conn *c, uint16_t stream_id, const uint8_t *data, size_t len, int priority,
              uint32_t now);

/* Start a clock exchange (TIME_REQUEST); the answer is an AIRC_EV_CLOCK event. */
int airc_request_clock(airc_conn *c, uint32_t now);

/* Close with a GOAWAY(code, reason); idempotent. */
void airc_close(airc_conn *c, airc_error code, const char *reason, size_t reason_len);

/* Write what is due (ACKs, retransmissions, priority frames, the rest; a GOAWAY after a
 * close) into out, whole frames only; return the bytes written. Call until it returns 0. */
size_t airc_output(airc_conn *c, uint32_t now, uint8_t *out, size_t cap);

/* When airc_handle_timer should run next: 1 and *deadline set, or 0 if nothing is pending. */
int airc_next_timer(const airc_conn *c, uint32_t *deadline);

/* Run what is due at now: delayed ACKs, retransmissions (or AIRC_ACK_TIMEOUT). */
void airc_handle_timer(airc_conn *c, uint32_t now, airc_event_fn fn, void *ctx);

/* Frames of stream_id sent and not yet acknowledged (queued ones included). */
unsigned airc_unacknowledged(const airc_conn *c, uint16_t stream_id);

/* True if a message of len bytes on stream_id would be accepted by airc_send now. */
int airc_can_send(const airc_conn *c, uint16_t stream_id, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* AIRC_H */
