/* Parse time per frame on the host, for the table beside the Python codec's: the cases of
 * m4_parse.c, each repeated until about a fifth of a second has passed; prints
 * "case nanoseconds-per-frame" lines. */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <time.h>

#include "airc.h"

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static volatile size_t sink;

static void on_event(void *ctx, const airc_event *event) {
    (void)ctx;
    sink += event->length;
}

static airc_conn conn;
static uint8_t frame[AIRC_HEADER_SIZE + AIRC_RX_PAYLOAD];
static uint8_t payload[AIRC_RX_PAYLOAD];

int main(void) {
    size_t size, i;
    long n, rounds;
    double start, took;
    airc_decoder decoder;
    airc_frame out;
    for (i = 0; i < sizeof(payload); i++) {
        payload[i] = (uint8_t)(i * 7);
    }
    /* 1: the decoder alone, largest frame. */
    size = airc_encode_frame(frame, sizeof(frame), 1, 1, 0, AIRC_FLAG_EOM, payload,
                             AIRC_RX_PAYLOAD);
    for (rounds = 1000;; rounds *= 2) {
        start = seconds();
        for (n = 0; n < rounds; n++) {
            airc_decoder_init(&decoder, AIRC_RX_PAYLOAD);
            sink += airc_decoder_feed(&decoder, frame, size, &out);
        }
        took = seconds() - start;
        if (took > 0.2) {
            break;
        }
    }
    printf("decoder %.1f\n", took / (double)rounds * 1e9);
    /* 2: the connection, one message per largest frame, in order (a fresh connection every
     * 2^31 frames is never needed: seqs wrap by design). */
    airc_conn_init(&conn, 0);
    for (rounds = 1000;; rounds *= 2) {
        start = seconds();
        for (n = 0; n < rounds; n++) {
            uint32_t seq = conn.recv[1].used ? conn.recv[1].expected : 1;
            size = airc_encode_frame(frame, sizeof(frame), 1, seq, 0, AIRC_FLAG_EOM, payload,
                                     AIRC_RX_PAYLOAD);
            airc_receive(&conn, frame, size, (uint32_t)n, on_event, NULL);
        }
        took = seconds() - start;
        if (took > 0.2) {
            break;
        }
    }
    /* That loop also encodes each frame; time the encoding alone and take it off. */
    start = seconds();
    for (n = 0; n < rounds; n++) {
        size = airc_encode_frame(frame, sizeof(frame), 1, (uint32_t)n, 0, AIRC_FLAG_EOM, payload,
                                 AIRC_RX_PAYLOAD);
    }
    took -= seconds() - start;
    printf("connection %.1f\n", took / (double)rounds * 1e9);
    return conn.closed != 0;
}
