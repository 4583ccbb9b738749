/* AIRC signalling: the check that a stream-255 message is well formed, and a writer. */
#include "airc_mem.h"

#include "airc.h"

/* One field of a message layout, in two bytes (the table is 20 types x 9 fields). Fixed-size
 * integers are their byte count (1, 2, 4, 8); the other kinds are flagged above that. A sized
 * field carries its prefix size in the low bits and the index of its limit in `limits`. */
enum { F_BOOL = 16, F_CODE = 17, F_TEXT = 32, F_BLOB = 64 };

typedef struct {
    uint8_t kind;  /* 1, 2, 4, 8, F_BOOL, F_CODE, or F_TEXT/F_BLOB | prefix size */
    uint8_t limit; /* sized fields: an index into limits */
} field;

enum { L_64, L_200, L_255, L_1K, L_4K, L_64K1, L_64K, L_1M };
static const uint32_t limits[] = {64, 200, 255, 1024, 4096, 0xFFFF, 65536, 1u << 20};

#define U8 {1, 0}
#define U16 {2, 0}
#define U32 {4, 0}
#define U64 {8, 0}
#define BOOL {F_BOOL, 0}
#define CODE {F_CODE, 0}
#define TEXT(prefix, limit) {F_TEXT | (prefix), (limit)}
#define BLOB(prefix, limit) {F_BLOB | (prefix), (limit)}
#define STREAM_NAME TEXT(1, L_200)
#define EPOCH TEXT(1, L_64)
#define SDP TEXT(4, L_64K)
#define END {0, 0}

/* The layouts of signalling.py's _LAYOUTS, types 0x01..0x14, in field order. */
static const field layouts[AIRC_SIG_LAST][9] = {
    /* 0x01 GEN_REQ */ {U16, U16, U32, TEXT(1, L_64), BLOB(4, L_1M), END},
    /* 0x02 GEN_ACK */ {U16, U16, U32, U32, U32, U32, STREAM_NAME, EPOCH, END},
    /* 0x03 OPEN */ {U16, U16, STREAM_NAME, EPOCH, U64, END},
    /* 0x04 OPENED */ {U16, U16, STREAM_NAME, EPOCH, U64, BOOL, END},
    /* 0x05 CLOSE */ {U16, U64, END},
    /* 0x06 CANCEL */ {U16, U16, END},
    /* 0x07 CANCELLED */ {U16, U16, BOOL, END},
    /* 0x08 ERROR */ {U16, TEXT(1, L_255), TEXT(2, L_1K), END},
    /* 0x09 TIME_REQ */ {U32, END},
    /* 0x0A TIME_RESP */ {U32, U32, U32, END},
    /* 0x0B GOAWAY */ {CODE, TEXT(2, L_64K1), END},
    /* 0x0C AUTH */ {U16, TEXT(2, L_4K), END},
    /* 0x0D AUTHENTICATED */ {U16, TEXT(1, L_255), END},
    /* 0x0E RTC_OFFER */ {U16, SDP, END},
    /* 0x0F RTC_ANSWER */ {U16, TEXT(1, L_255), SDP, END},
    /* 0x10 RTC_CANDIDATES */ {U16, TEXT(1, L_255), SDP, END},
    /* 0x11 RTC_CLOSE */ {U16, TEXT(1, L_255), END},
    /* 0x12 SET_LANE */ {U16, U8, END},
    /* 0x13 LANE_SET */ {U16, U8, TEXT(1, L_255), END},
    /* 0x14 CANCEL_STREAM */ {U16, STREAM_NAME, END},
};

/* Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing above U+10FFFF. */
static int valid_utf8(const uint8_t *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        uint8_t c = s[i];
        size_t n;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            n = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            n = 2;
            if (c == 0xE0) {
                lo = 0xA0;
            } else if (c == 0xED) {
                hi = 0x9F;
            }
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 3;
            if (c == 0xF0) {
                lo = 0x90;
            } else if (c == 0xF4) {
                hi = 0x8F;
            }
        } else {
            return 0;
        }
        if (len - i <= n || s[i + 1] < lo || s[i + 1] > hi) {
            return 0;
        }
        if ((n >= 2 && (s[i + 2] & 0xC0) != 0x80) || (n == 3 && (s[i + 3] & 0xC0) != 0x80)) {
            return 0;
        }
        i += n + 1;
    }
    return 1;
}

airc_error airc_signal_check(const uint8_t *payload, size_t len) {
    const field *f;
    size_t at = 1;
    if (len == 0) {
        return AIRC_BAD_SIGNALLING;
    }
    if (payload[0] == 0 || payload[0] > AIRC_SIG_LAST) {
        return AIRC_UNKNOWN_SIGNAL;
    }
    for (f = layouts[payload[0] - 1]; f->kind != 0; f++) {
        if (f->kind <= 8) {
            if (len - at < f->kind) {
                return AIRC_BAD_SIGNALLING;
            }
            at += f->kind;
        } else if (f->kind == F_BOOL) {
            if (len - at < 1 || payload[at] > 1) {
                return AIRC_BAD_SIGNALLING;
            }
            at += 1;
        } else if (f->kind == F_CODE) {
            if (len - at < 2 || (unsigned)((payload[at] << 8) | payload[at + 1]) > AIRC_LAST_ERROR_CODE) {
                return AIRC_BAD_SIGNALLING;
            }
            at += 2;
        } else {
            size_t prefix = f->kind & 0x0F, size = 0, i;
            if (len - at < prefix) {
                return AIRC_BAD_SIGNALLING;
            }
            for (i = 0; i < prefix; i++) {
                size = (size << 8) | payload[at + i];
            }
            at += prefix;
            if (size > limits[f->limit] || len - at < size) {
                return AIRC_BAD_SIGNALLING;
            }
            if ((f->kind & F_TEXT) != 0 && !valid_utf8(payload + at, size)) {
                return AIRC_BAD_SIGNALLING;
            }
            at += size;
        }
    }
    return at == len ? AIRC_NO_ERROR : AIRC_BAD_SIGNALLING;
}

void airc_writer_init(airc_writer *w, uint8_t *buf, size_t cap) {
    w->buf = buf;
    w->cap = cap;
    w->len = 0;
    w->overflow = 0;
}

static void put_be(airc_writer *w, uint64_t v, unsigned size) {
    unsigned i;
    if (w->cap - w->len < size) {
        w->overflow = 1;
        return;
    }
    for (i = 0; i < size; i++) {
        w->buf[w->len + i] = (uint8_t)(v >> (8 * (size - 1 - i)));
    }
    w->len += size;
}

void airc_put_u8(airc_writer *w, uint8_t v) { put_be(w, v, 1); }

void airc_put_u16(airc_writer *w, uint16_t v) { put_be(w, v, 2); }

void airc_put_u32(airc_writer *w, uint32_t v) { put_be(w, v, 4); }

void airc_put_u64(airc_writer *w, uint64_t v) { put_be(w, v, 8); }

void airc_put_sized(airc_writer *w, unsigned prefix_size, const uint8_t *data, size_t len) {
    if (prefix_size < 4 && len >= ((size_t)1 << (8 * prefix_size))) {
        w->overflow = 1; /* the length does not fit its prefix */
        return;
    }
    put_be(w, len, prefix_size);
    if (w->overflow) {
        return;
    }
    if (w->cap - w->len < len) {
        w->overflow = 1;
        return;
    }
    if (len > 0) {
        memcpy(w->buf + w->len, data, len);
    }
    w->len += len;
}
