/* Parse-time benchmark for a Cortex-M4, run under QEMU (mps2-an386) with one instruction per
 * translation block and an execution trace: benchmarks/airc_c_fit.py counts the instructions
 * between airc_mark_start() and airc_mark_end() for each case, and the exit code says whether
 * every case delivered what it should.
 *
 * No C library: the reset handler is the entry, memcpy/memset are the loops below, and the
 * program ends through a semihosting SYS_EXIT, which QEMU turns into its own exit status. */
#include <stddef.h>
#include <stdint.h>

#include "airc.h"

/* A word-at-a-time memcpy, as a device's C library has (newlib's for the M4 is faster
 * still): a byte loop here would charge the library for the harness's copying. */
void *memcpy(void *dest, const void *src, size_t n) {
    uint8_t *d = dest;
    const uint8_t *s = src;
    if ((((uintptr_t)d | (uintptr_t)s) & 3u) == 0) {
        for (; n >= 4; n -= 4, d += 4, s += 4) {
            *(uint32_t *)(void *)d = *(const uint32_t *)(const void *)s;
        }
    }
    while (n--) {
        *d++ = *s++;
    }
    return dest;
}

void *memset(void *dest, int c, size_t n) {
    uint8_t *d = dest;
    if (((uintptr_t)d & 3u) == 0) {
        uint32_t word = (uint8_t)c * 0x01010101u;
        for (; n >= 4; n -= 4, d += 4) {
            *(uint32_t *)(void *)d = word;
        }
    }
    while (n--) {
        *d++ = (uint8_t)c;
    }
    return dest;
}

/* Out of line, so that their addresses bracket a case in the trace. */
__attribute__((noinline)) void airc_mark_start(unsigned which) { __asm volatile("" ::"r"(which)); }
__attribute__((noinline)) void airc_mark_end(unsigned which) { __asm volatile("" ::"r"(which)); }

static airc_conn conn;
static uint8_t frames[2][AIRC_HEADER_SIZE + AIRC_RX_PAYLOAD];
static uint8_t payload[AIRC_RX_PAYLOAD];
static volatile size_t delivered;

static void on_event(void *ctx, const airc_event *event) {
    (void)ctx;
    if (event->kind == AIRC_EV_MESSAGE) {
        delivered += event->length;
    }
}

static void semihost_exit(int status) {
    /* SYS_EXIT_EXTENDED (0x20): [ADP_Stopped_ApplicationExit, status] */
    static uint32_t block[2];
    block[0] = 0x20026;
    block[1] = (uint32_t)status;
    __asm volatile("mov r0, #0x20\n mov r1, %0\n bkpt 0xAB" ::"r"(block) : "r0", "r1", "memory");
    for (;;) {
    }
}

int main(void) {
    size_t i, first, second, frame = 0;
    airc_decoder decoder;
    airc_frame out;
    int ok = 1;
    for (i = 0; i < sizeof(payload); i++) {
        payload[i] = (uint8_t)(i * 7);
    }
    /* Cases 1 and 2: the decoder alone, on an empty frame and on the largest accepted. */
    for (i = 0; i < 2; i++) {
        uint16_t length = i == 0 ? 0 : AIRC_RX_PAYLOAD;
        first = airc_encode_frame(frames[0], sizeof(frames[0]), 1, 1, 0, 0, payload, length);
        airc_decoder_init(&decoder, AIRC_RX_PAYLOAD);
        airc_mark_start(1 + (unsigned)i);
        frame = airc_decoder_feed(&decoder, frames[0], first, &out);
        airc_mark_end(1 + (unsigned)i);
        ok &= frame == first && out.payload != NULL && decoder.error == 0;
    }

    /* Cases 3 and 4: the connection, one whole message in one frame, in one read: empty,
     * then the largest. */
    for (i = 0; i < 2; i++) {
        uint16_t length = i == 0 ? 0 : AIRC_RX_PAYLOAD;
        delivered = 0;
        first = airc_encode_frame(frames[0], sizeof(frames[0]), 1, 1, 0, AIRC_FLAG_EOM, payload,
                                  length);
        airc_conn_init(&conn, 0);
        airc_mark_start(3 + (unsigned)i);
        airc_receive(&conn, frames[0], first, 100, on_event, NULL);
        airc_mark_end(3 + (unsigned)i);
        ok &= delivered == length && !conn.closed;
    }

    /* Case 5, the worst: a frame as large as a message allows ends a message whose first
     * (one-byte) fragment is held, so the whole message is copied together; it arrives split
     * over two reads, so it is also copied through the decoder's buffer. */
    delivered = 0;
    airc_conn_init(&conn, 0);
    first = airc_encode_frame(frames[0], sizeof(frames[0]), 1, 1, 0, 0, payload, 1);
    second = airc_encode_frame(frames[1], sizeof(frames[1]), 1, 2, 0, AIRC_FLAG_EOM, payload,
                               AIRC_MAX_MESSAGE - 1 < AIRC_RX_PAYLOAD ? AIRC_MAX_MESSAGE - 1
                                                                     : AIRC_RX_PAYLOAD);
    airc_receive(&conn, frames[0], first, 100, on_event, NULL);
    airc_mark_start(5);
    airc_receive(&conn, frames[1], second / 2, 200, on_event, NULL);
    airc_receive(&conn, frames[1] + second / 2, second - second / 2, 200, on_event, NULL);
    airc_mark_end(5);
    ok &= delivered == 1 + second - AIRC_HEADER_SIZE && !conn.closed;
    semihost_exit(ok ? 0 : 1);
    return 0;
}

/* The vector table: the initial stack pointer, then the reset handler. */
extern uint32_t __stack_top;
void reset(void);
__attribute__((section(".vectors"), used)) static const void *const vectors[2] = {
    &__stack_top, (const void *)reset};

void reset(void) {
    /* .bss holds only zero-initialised statics; QEMU's RAM starts zeroed, and .data is
     * empty (the library has no initialised writable data). */
    semihost_exit(main());
}
