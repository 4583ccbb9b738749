/* A flat interface to the library for bindings that cannot see its structs (cffi's ABI mode):
 * sizes, and calls whose results (frames, events, stats) come back as a byte log.
 *
 * Log records, all integers big-endian:
 *   frame:  'F' stream u16, seq u32, timestamp u32, flags u8, length u16, payload
 *   event:  'E' kind u8, stream u16, timestamp u32, priority u8, expected u32, seq u32,
 *               offset_us2 i32, delay_us i32, code u16, by_peer u8, length u32, data
 * A record that does not fit sets the log's overflow flag; the caller retries with more room.
 */
#include <string.h>

#include "airc.h"

typedef struct {
    uint8_t *buf;
    size_t cap;
    size_t len;
    int overflow;
} shim_log;

static void put(shim_log *log, const void *data, size_t len) {
    if (log->overflow || log->cap - log->len < len) {
        log->overflow = 1;
        return;
    }
    if (len > 0) {
        memcpy(log->buf + log->len, data, len);
    }
    log->len += len;
}

static void put_be(shim_log *log, uint32_t v, unsigned size) {
    uint8_t b[4];
    unsigned i;
    for (i = 0; i < size; i++) {
        b[i] = (uint8_t)(v >> (8 * (size - 1 - i)));
    }
    put(log, b, size);
}

size_t shim_conn_size(void) { return sizeof(airc_conn); }

size_t shim_decoder_size(void) { return sizeof(airc_decoder); }

uint32_t shim_limit(int which) {
    switch (which) {
    case 0: return AIRC_MAX_STREAMS;
    case 1: return AIRC_RX_PAYLOAD;
    case 2: return AIRC_TX_PAYLOAD;
    case 3: return AIRC_MAX_MESSAGE;
    case 4: return AIRC_SEND_WINDOW;
    case 5: return AIRC_REORDER_WINDOW;
    case 6: return AIRC_MAX_RECEIVE_BUFFER;
    case 7: return AIRC_ACK_EVERY;
    default: return 0;
    }
}

/* Feed data to the decoder until it is all taken or an error stops it; log each frame.
 * Returns the decoder's error (0 for none); *buffered is what it holds afterwards. */
int shim_decode(airc_decoder *d, const uint8_t *data, size_t len, uint8_t *out, size_t cap,
                size_t *out_len, int *overflow, uint32_t *buffered) {
    shim_log log = {out, cap, 0, 0};
    size_t at = 0;
    while (d->error == 0) {
        airc_frame frame;
        at += airc_decoder_feed(d, data + at, len - at, &frame);
        if (frame.payload == NULL) {
            if (at == len || d->error != 0) {
                break;
            }
            continue;
        }
        put(&log, "F", 1);
        put_be(&log, frame.stream_id, 2);
        put_be(&log, frame.seq, 4);
        put_be(&log, frame.timestamp, 4);
        put_be(&log, frame.flags, 1);
        put_be(&log, frame.length, 2);
        put(&log, frame.payload, frame.length);
    }
    *out_len = log.len;
    *overflow = log.overflow;
    *buffered = d->have;
    return d->error;
}

static void log_event(void *ctx, const airc_event *e) {
    shim_log *log = (shim_log *)ctx;
    put(log, "E", 1);
    put_be(log, (uint32_t)e->kind, 1);
    put_be(log, e->stream_id, 2);
    put_be(log, e->timestamp, 4);
    put_be(log, e->priority, 1);
    put_be(log, e->expected, 4);
    put_be(log, e->seq, 4);
    put_be(log, (uint32_t)e->offset_us2, 4);
    put_be(log, (uint32_t)e->delay_us, 4);
    put_be(log, e->code, 2);
    put_be(log, e->by_peer, 1);
    put_be(log, (uint32_t)e->length, 4);
    put(log, e->data, e->length);
}

size_t shim_receive(airc_conn *c, const uint8_t *data, size_t len, uint32_t now, uint8_t *out,
                    size_t cap, int *overflow) {
    shim_log log = {out, cap, 0, 0};
    airc_receive(c, data, len, now, log_event, &log);
    *overflow = log.overflow;
    return log.len;
}

size_t shim_handle_timer(airc_conn *c, uint32_t now, uint8_t *out, size_t cap, int *overflow) {
    shim_log log = {out, cap, 0, 0};
    airc_handle_timer(c, now, log_event, &log);
    *overflow = log.overflow;
    return log.len;
}

void shim_stats(const airc_conn *c, uint32_t out[9]) {
    out[0] = c->stats.frames_sent;
    out[1] = c->stats.frames_received;
    out[2] = c->stats.messages_sent;
    out[3] = c->stats.messages_received;
    out[4] = c->stats.retransmits;
    out[5] = c->stats.duplicates;
    out[6] = c->stats.gaps;
    out[7] = c->stats.beyond_window;
    out[8] = c->decoder.have;
}
