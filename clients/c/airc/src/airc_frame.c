/* AIRC frames: CRC-16/CCITT-FALSE, the encoder, and the streaming decoder. */
#include "airc_mem.h"

#include "airc.h"

/* CRC-16/CCITT-FALSE (poly 0x1021, no reflection) one byte at a time: 512 bytes of flash
 * for about a quarter of the bit-by-bit loop's time, which dominates a full frame's parse. */
static const uint16_t crc_table[256] = {
    0x0000, 0x1021, 0x2042, 0x3063, 0x4084, 0x50A5, 0x60C6, 0x70E7,
    0x8108, 0x9129, 0xA14A, 0xB16B, 0xC18C, 0xD1AD, 0xE1CE, 0xF1EF,
    0x1231, 0x0210, 0x3273, 0x2252, 0x52B5, 0x4294, 0x72F7, 0x62D6,
    0x9339, 0x8318, 0xB37B, 0xA35A, 0xD3BD, 0xC39C, 0xF3FF, 0xE3DE,
    0x2462, 0x3443, 0x0420, 0x1401, 0x64E6, 0x74C7, 0x44A4, 0x5485,
    0xA56A, 0xB54B, 0x8528, 0x9509, 0xE5EE, 0xF5CF, 0xC5AC, 0xD58D,
    0x3653, 0x2672, 0x1611, 0x0630, 0x76D7, 0x66F6, 0x5695, 0x46B4,
    0xB75B, 0xA77A, 0x9719, 0x8738, 0xF7DF, 0xE7FE, 0xD79D, 0xC7BC,
    0x48C4, 0x58E5, 0x6886, 0x78A7, 0x0840, 0x1861, 0x2802, 0x3823,
    0xC9CC, 0xD9ED, 0xE98E, 0xF9AF, 0x8948, 0x9969, 0xA90A, 0xB92B,
    0x5AF5, 0x4AD4, 0x7AB7, 0x6A96, 0x1A71, 0x0A50, 0x3A33, 0x2A12,
    0xDBFD, 0xCBDC, 0xFBBF, 0xEB9E, 0x9B79, 0x8B58, 0xBB3B, 0xAB1A,
    0x6CA6, 0x7C87, 0x4CE4, 0x5CC5, 0x2C22, 0x3C03, 0x0C60, 0x1C41,
    0xEDAE, 0xFD8F, 0xCDEC, 0xDDCD, 0xAD2A, 0xBD0B, 0x8D68, 0x9D49,
    0x7E97, 0x6EB6, 0x5ED5, 0x4EF4, 0x3E13, 0x2E32, 0x1E51, 0x0E70,
    0xFF9F, 0xEFBE, 0xDFDD, 0xCFFC, 0xBF1B, 0xAF3A, 0x9F59, 0x8F78,
    0x9188, 0x81A9, 0xB1CA, 0xA1EB, 0xD10C, 0xC12D, 0xF14E, 0xE16F,
    0x1080, 0x00A1, 0x30C2, 0x20E3, 0x5004, 0x4025, 0x7046, 0x6067,
    0x83B9, 0x9398, 0xA3FB, 0xB3DA, 0xC33D, 0xD31C, 0xE37F, 0xF35E,
    0x02B1, 0x1290, 0x22F3, 0x32D2, 0x4235, 0x5214, 0x6277, 0x7256,
    0xB5EA, 0xA5CB, 0x95A8, 0x8589, 0xF56E, 0xE54F, 0xD52C, 0xC50D,
    0x34E2, 0x24C3, 0x14A0, 0x0481, 0x7466, 0x6447, 0x5424, 0x4405,
    0xA7DB, 0xB7FA, 0x8799, 0x97B8, 0xE75F, 0xF77E, 0xC71D, 0xD73C,
    0x26D3, 0x36F2, 0x0691, 0x16B0, 0x6657, 0x7676, 0x4615, 0x5634,
    0xD94C, 0xC96D, 0xF90E, 0xE92F, 0x99C8, 0x89E9, 0xB98A, 0xA9AB,
    0x5844, 0x4865, 0x7806, 0x6827, 0x18C0, 0x08E1, 0x3882, 0x28A3,
    0xCB7D, 0xDB5C, 0xEB3F, 0xFB1E, 0x8BF9, 0x9BD8, 0xABBB, 0xBB9A,
    0x4A75, 0x5A54, 0x6A37, 0x7A16, 0x0AF1, 0x1AD0, 0x2AB3, 0x3A92,
    0xFD2E, 0xED0F, 0xDD6C, 0xCD4D, 0xBDAA, 0xAD8B, 0x9DE8, 0x8DC9,
    0x7C26, 0x6C07, 0x5C64, 0x4C45, 0x3CA2, 0x2C83, 0x1CE0, 0x0CC1,
    0xEF1F, 0xFF3E, 0xCF5D, 0xDF7C, 0xAF9B, 0xBFBA, 0x8FD9, 0x9FF8,
    0x6E17, 0x7E36, 0x4E55, 0x5E74, 0x2E93, 0x3EB2, 0x0ED1, 0x1EF0,
};

uint16_t airc_crc16(const uint8_t *data, size_t len, uint16_t crc) {
    size_t i;
    for (i = 0; i < len; i++) {
        crc = (uint16_t)((crc << 8) ^ crc_table[(uint8_t)((crc >> 8) ^ data[i])]);
    }
    return crc;
}

static uint16_t get16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }

static uint32_t get32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

#define RESERVED_FLAGS ((uint8_t)~(AIRC_FLAG_ACK | AIRC_FLAG_EOM | AIRC_FLAG_PRIORITY))

size_t airc_encode_frame(uint8_t *out, size_t cap, uint16_t stream_id, uint32_t seq,
                         uint32_t timestamp, uint8_t flags, const uint8_t *payload,
                         uint16_t length) {
    uint16_t crc;
    size_t size = AIRC_HEADER_SIZE + (size_t)length;
    if (size > cap || (flags & RESERVED_FLAGS) != 0) {
        return 0;
    }
    put32(out, AIRC_MAGIC);
    out[4] = AIRC_VERSION;
    out[5] = flags;
    put16(out + 6, stream_id);
    put32(out + 8, seq);
    put32(out + 12, timestamp);
    put16(out + 16, length);
    out[18] = 0;
    out[19] = 0;
    if (length > 0) {
        memcpy(out + AIRC_HEADER_SIZE, payload, length);
    }
    crc = airc_crc16(out, size, 0xFFFFu);
    put16(out + 18, crc);
    return size;
}

void airc_decoder_init(airc_decoder *d, uint16_t max_payload) {
    d->have = 0;
    d->max_payload = max_payload > AIRC_RX_PAYLOAD ? AIRC_RX_PAYLOAD : max_payload;
    d->error = 0;
}

/* The first problem in a header's first `have` bytes (4 or more), in the order the Python
 * decoder checks them: magic, then (with the whole header) version, flags, length. */
static uint8_t header_error(const airc_decoder *d, const uint8_t *h, size_t have) {
    if (get32(h) != AIRC_MAGIC) {
        return AIRC_BAD_MAGIC;
    }
    if (have < AIRC_HEADER_SIZE) {
        return 0;
    }
    if (h[4] != AIRC_VERSION) {
        return AIRC_BAD_VERSION;
    }
    if ((h[5] & RESERVED_FLAGS) != 0) {
        return AIRC_RESERVED_FLAGS;
    }
    if (get16(h + 16) > d->max_payload) {
        return AIRC_OVERSIZE;
    }
    return 0;
}

/* Fill *frame from a whole frame at p (header checked), or return AIRC_BAD_CRC. */
static uint8_t finish(const uint8_t *p, airc_frame *frame) {
    uint16_t length = get16(p + 16);
    uint16_t crc = airc_crc16(p, 18, 0xFFFFu);
    static const uint8_t zero[2] = {0, 0};
    crc = airc_crc16(zero, 2, crc);
    crc = airc_crc16(p + AIRC_HEADER_SIZE, length, crc);
    if (crc != get16(p + 18)) {
        return AIRC_BAD_CRC;
    }
    frame->flags = p[5];
    frame->stream_id = get16(p + 6);
    frame->seq = get32(p + 8);
    frame->timestamp = get32(p + 12);
    frame->length = length;
    frame->payload = p + AIRC_HEADER_SIZE;
    return 0;
}

size_t airc_decoder_feed(airc_decoder *d, const uint8_t *data, size_t len, airc_frame *frame) {
    size_t taken = 0;
    frame->payload = NULL;
    if (d->error != 0) {
        return 0;
    }
    if (d->have == 0 && len >= AIRC_HEADER_SIZE) {
        /* The whole header is in the caller's bytes: check it there, and parse the frame in
         * place when its payload is too (no copy on the common path). */
        uint8_t error = header_error(d, data, AIRC_HEADER_SIZE);
        size_t size = AIRC_HEADER_SIZE + (size_t)get16(data + 16);
        if (error == 0 && len >= size) {
            error = finish(data, frame);
            if (error == 0) {
                return size;
            }
        }
        if (error != 0) {
            d->error = error;
            return 0;
        }
    }
    while (taken < len) {
        size_t want;
        if (d->have < AIRC_HEADER_SIZE) {
            want = (d->have < 4 ? 4 : AIRC_HEADER_SIZE) - d->have;
        } else {
            want = AIRC_HEADER_SIZE + (size_t)get16(d->buf + 16) - d->have;
        }
        if (want > len - taken) {
            want = len - taken;
        }
        memcpy(d->buf + d->have, data + taken, want);
        d->have += (uint32_t)want;
        taken += want;
        if (d->have == 4 || d->have == AIRC_HEADER_SIZE) {
            uint8_t error = header_error(d, d->buf, d->have);
            if (error != 0) {
                d->error = error;
                d->have = 0;
                return taken;
            }
        }
        if (d->have >= AIRC_HEADER_SIZE &&
            d->have == AIRC_HEADER_SIZE + (uint32_t)get16(d->buf + 16)) {
            uint8_t error = finish(d->buf, frame);
            d->have = 0;
            if (error != 0) {
                d->error = error;
            }
            return taken;
        }
    }
    return taken;
}
