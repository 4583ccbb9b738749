/*
 * A device that speaks AIRC to an Airlane gateway over TCP: it asks for a generation, prints
 * each event as it arrives, and leaves when the gateway says the stream is over.
 *
 *     cc -std=c99 -Os -Iinclude examples/device.c src/airc_*.c -o device
 *     ./device 127.0.0.1 8421 "Hello"            # AIRC/TCP: `airlane serve`'s HTTP port + 1
 *     AIRLANE_API_KEY=... ./device 127.0.0.1 8421 "Hello"
 *
 * Everything AIRC is the library's (clients/c/airc); this file is the part a board's firmware
 * would write itself: a socket, a clock, a loop. The library's state is one static struct,
 * no allocation; the socket and the clock are POSIX here, a TCP stack and a timer on a board.
 *
 * Output, one line each: "authenticated <principal>", "stream <id> <airlane stream>",
 * "clock offset_us=<x> delay_us=<y>", "event <json>", "end last_seq=<n>", then
 * "closed code=<c>" (0: a clean end). Exit status 0 after a clean end, 1 otherwise.
 */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "airc.h"

#define GEN_REQUEST_ID 1
#define AUTH_REQUEST_ID 2

static airc_conn conn;
static int sock = -1;
static int our_stream = -1; /* the AIRC StreamID the gateway gave our generation */
static int done = 0;        /* 1: the stream ended and we said goodbye; 2: failed */
static const char *prompt;
static int generation_wanted = 0; /* GEN_REQ waits for room in the signalling window */

static uint32_t now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint32_t)((uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u);
}

static uint16_t get16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }

static uint64_t get64(const uint8_t *p) {
    uint64_t v = 0;
    int i;
    for (i = 0; i < 8; i++) {
        v = (v << 8) | p[i];
    }
    return v;
}

/* Write everything the connection has to send. */
static int flush(void) {
    uint8_t out[1024];
    size_t n;
    while ((n = airc_output(&conn, now_us(), out, sizeof(out))) > 0) {
        size_t sent = 0;
        while (sent < n) {
            ssize_t w = send(sock, out + sent, n - sent, 0);
            if (w < 0 && errno == EINTR) {
                continue;
            }
            if (w <= 0) {
                return -1;
            }
            sent += (size_t)w;
        }
    }
    return 0;
}

/* GEN_REQ: an OpenAI chat request as JSON, the gateway picks the StreamID. */
static void request_generation(void) {
    uint8_t buf[AIRC_SEND_WINDOW * AIRC_TX_PAYLOAD];
    char body[384];
    airc_writer w;
    int len = snprintf(body, sizeof(body),
                       "{\"model\":\"airlane-synthetic\",\"max_tokens\":24,"
                       "\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}",
                       prompt);
    if (len < 0 || (size_t)len >= sizeof(body)) {
        fprintf(stderr, "prompt too long for this device's buffers\n");
        exit(2);
    }
    airc_writer_init(&w, buf, sizeof(buf));
    airc_put_u8(&w, AIRC_SIG_GEN_REQUEST);
    airc_put_u16(&w, GEN_REQUEST_ID);
    airc_put_u16(&w, AIRC_ANY_STREAM);
    airc_put_u32(&w, 0); /* sample rate: not media */
    airc_put_sized(&w, 1, (const uint8_t *)"", 0);
    airc_put_sized(&w, 4, (const uint8_t *)body, (size_t)len);
    if (w.overflow) {
        fprintf(stderr, "prompt too long for this device's buffers\n");
        exit(2);
    }
    /* Window full (the clock request or AUTH not yet acknowledged): try again later. */
    generation_wanted = airc_send(&conn, AIRC_SIGNALLING_STREAM, buf, w.len, 1, now_us()) != 0;
}

static void on_signal(const uint8_t *m, size_t len) {
    /* airc_signal_check has vouched for every length and field below. */
    if (m[0] == AIRC_SIG_AUTHENTICATED) {
        printf("authenticated %.*s\n", m[3], (const char *)m + 4);
        request_generation();
    } else if (m[0] == AIRC_SIG_GEN_ACK) {
        /* request_id, stream, jitter_buffer_us, origin_ts, receive_ts, clock_offset_us, name */
        our_stream = get16(m + 3);
        printf("stream %d %.*s\n", our_stream, m[21], (const char *)m + 22);
    } else if (m[0] == AIRC_SIG_CLOSE && get16(m + 1) == our_stream) {
        printf("end last_seq=%llu\n", (unsigned long long)get64(m + 3));
        airc_close(&conn, AIRC_NO_ERROR, "done", 4);
        done = 1;
    } else if (m[0] == AIRC_SIG_ERROR) {
        uint8_t code_len = m[3];
        uint16_t text_len = get16(m + 4 + code_len);
        printf("error %.*s: %.*s\n", code_len, (const char *)m + 4, text_len,
               (const char *)m + 6 + code_len);
        airc_close(&conn, AIRC_NO_ERROR, "error", 5);
        done = 2;
    }
    (void)len;
}

static void on_event(void *ctx, const airc_event *e) {
    (void)ctx;
    switch (e->kind) {
    case AIRC_EV_MESSAGE:
        if (e->stream_id == our_stream) {
            printf("event %.*s\n", (int)e->length, (const char *)e->data);
        }
        break;
    case AIRC_EV_SIGNAL:
        on_signal(e->data, e->length);
        break;
    case AIRC_EV_CLOCK:
        printf("clock offset_us=%.1f delay_us=%ld\n", e->offset_us2 / 2.0, (long)e->delay_us);
        break;
    case AIRC_EV_CLOSED:
        printf("closed code=%u\n", e->code);
        if (!done) {
            done = 2;
        }
        break;
    default:
        break;
    }
}

int main(int argc, char **argv) {
    struct sockaddr_in addr;
    const char *key = getenv("AIRLANE_API_KEY");
    int one = 1;
    if (argc != 4) {
        fprintf(stderr, "usage: %s HOST PORT PROMPT\n", argv[0]);
        return 2;
    }
    prompt = argv[3];
    memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)atoi(argv[2]));
    if (inet_pton(AF_INET, argv[1], &addr.sin_addr) != 1) {
        fprintf(stderr, "not an IPv4 address: %s\n", argv[1]);
        return 2;
    }
    sock = socket(AF_INET, SOCK_STREAM, 0);
    if (sock < 0 || connect(sock, (struct sockaddr *)&addr, sizeof(addr)) != 0) {
        perror("connect");
        return 1;
    }
    setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

    airc_conn_init(&conn, now_us());
    if (key != NULL && *key != '\0') {
        uint8_t buf[AIRC_SEND_WINDOW * AIRC_TX_PAYLOAD];
        airc_writer w;
        airc_writer_init(&w, buf, sizeof(buf));
        airc_put_u8(&w, AIRC_SIG_AUTH);
        airc_put_u16(&w, AUTH_REQUEST_ID);
        airc_put_sized(&w, 2, (const uint8_t *)key, strlen(key));
        if (w.overflow || airc_send(&conn, AIRC_SIGNALLING_STREAM, buf, w.len, 1, now_us())) {
            fprintf(stderr, "API key too long for this device's buffers\n");
            return 2;
        }
    } else {
        request_generation();
    }
    airc_request_clock(&conn, now_us());

    while (!conn.closed || conn.goaway_pending) {
        struct pollfd p = {0};
        uint32_t deadline, now;
        int timeout_ms = 1000;
        if (generation_wanted) {
            request_generation();
        }
        if (flush() != 0) {
            fprintf(stderr, "the gateway closed the connection\n");
            return 1;
        }
        if (conn.closed) {
            break;
        }
        now = now_us();
        if (airc_next_timer(&conn, &deadline)) {
            int32_t wait = airc_serial_diff(deadline, now);
            timeout_ms = wait <= 0 ? 0 : (int)(wait / 1000) + 1;
        }
        p.fd = sock;
        p.events = POLLIN;
        if (poll(&p, 1, timeout_ms) > 0) {
            uint8_t in[512];
            ssize_t n = recv(sock, in, sizeof(in), 0);
            if (n <= 0) {
                fprintf(stderr, "the gateway closed the connection\n");
                return 1;
            }
            airc_receive(&conn, in, (size_t)n, now_us(), on_event, NULL);
        }
        if (airc_next_timer(&conn, &deadline) && airc_serial_diff(now_us(), deadline) >= 0) {
            airc_handle_timer(&conn, now_us(), on_event, NULL);
        }
        fflush(stdout);
    }
    flush();
    close(sock);
    if (done == 1) {
        printf("closed code=0\n");
    }
    return done == 1 ? 0 : 1;
}
