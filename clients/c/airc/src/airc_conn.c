/* The AIRC connection: ordering, reassembly, acknowledgement, retransmission, priority.
 *
 * Slot 0 of each stream table is stream 255 (signalling), so that answers to the peer's
 * signalling never depend on how many data streams are in use; slots 1..AIRC_MAX_STREAMS are
 * data streams, taken on first use and kept for the connection's life (their seqs continue
 * if a StreamID is used again), as in the Python codec. */
#include "airc_mem.h"

#include "airc.h"

#define SIG_SLOT 0
#define FAST_RETRANSMIT_DUP_ACKS 3
#define STREAM_SLOTS (AIRC_MAX_STREAMS + 1)

/* u32 microsecond clocks wrap: "a is at or after b" in serial arithmetic. */
static int reached(uint32_t now, uint32_t deadline) { return airc_serial_diff(now, deadline) >= 0; }

static uint32_t stamp_of(const airc_conn *c, uint32_t now) { return now - c->start; }

static void emit(airc_event_fn fn, void *ctx, airc_event *event) {
    if (fn != NULL) {
        fn(ctx, event);
    }
}

void airc_conn_init(airc_conn *c, uint32_t now) {
    memset(c, 0, sizeof(*c));
    airc_decoder_init(&c->decoder, AIRC_RX_PAYLOAD);
    c->start = c->now = now;
    c->rto = AIRC_INITIAL_RTO_US;
    c->next_nonce = 1;
    c->send[SIG_SLOT].used = 1;
    c->send[SIG_SLOT].stream_id = AIRC_SIGNALLING_STREAM;
    c->send[SIG_SLOT].next_seq = 1;
    c->recv[SIG_SLOT].stream_id = AIRC_SIGNALLING_STREAM;
    c->recv[SIG_SLOT].expected = 1;
}

/* ---- round-trip time (RFC 6298 in microseconds, values kept x8 for precision) --------- */

static void observe_rtt(airc_conn *c, uint32_t rtt) {
    uint32_t r8 = rtt > 0x0FFFFFFFu ? 0xFFFFFFF0u / 8 * 8 : rtt * 8;
    uint32_t rto;
    if (c->srtt8 == 0) {
        c->srtt8 = r8 == 0 ? 1 : r8;
        c->rttvar4 = r8 / 2; /* rttvar = rtt / 2, kept x8 */
    } else {
        uint32_t d = c->srtt8 > r8 ? c->srtt8 - r8 : r8 - c->srtt8;
        c->rttvar4 = (uint32_t)(((uint64_t)c->rttvar4 * 3 + d) / 4);
        c->srtt8 = (uint32_t)(((uint64_t)c->srtt8 * 7 + r8) / 8);
    }
    rto = (uint32_t)(((uint64_t)c->srtt8 + 4 * (uint64_t)c->rttvar4) / 8);
    c->rto = rto < AIRC_MIN_RTO_US ? AIRC_MIN_RTO_US : rto > AIRC_MAX_RTO_US ? AIRC_MAX_RTO_US : rto;
}

/* The timeout after `retries` retransmissions of one frame: doubled each time, capped. */
static uint32_t backoff(const airc_conn *c, unsigned retries) {
    uint32_t t = c->rto;
    while (retries-- > 0 && t < AIRC_MAX_RTO_US) {
        t <<= 1;
    }
    return t > AIRC_MAX_RTO_US ? AIRC_MAX_RTO_US : t;
}

/* ---- stream tables -------------------------------------------------------------------- */

static airc_send_stream *find_send(airc_conn *c, uint16_t id) {
    unsigned i;
    if (id == AIRC_SIGNALLING_STREAM) {
        return &c->send[SIG_SLOT];
    }
    for (i = 1; i < STREAM_SLOTS; i++) {
        if (c->send[i].used && c->send[i].stream_id == id) {
            return &c->send[i];
        }
    }
    return NULL;
}

static const airc_send_stream *find_send_const(const airc_conn *c, uint16_t id) {
    return find_send((airc_conn *)c, id);
}

static airc_send_stream *take_send(airc_conn *c, uint16_t id) {
    unsigned i;
    airc_send_stream *s = find_send(c, id);
    if (s != NULL) {
        return s;
    }
    for (i = 1; i < STREAM_SLOTS; i++) {
        if (!c->send[i].used) {
            s = &c->send[i];
            memset(s, 0, sizeof(*s));
            s->used = 1;
            s->stream_id = id;
            s->next_seq = 1;
            return s;
        }
    }
    return NULL;
}

static airc_recv_stream *find_recv(airc_conn *c, uint16_t id, int *budget_exceeded) {
    unsigned i;
    airc_recv_stream *free_slot = NULL;
    *budget_exceeded = 0;
    if (id == AIRC_SIGNALLING_STREAM) {
        c->recv[SIG_SLOT].used = 1;
        return &c->recv[SIG_SLOT];
    }
    for (i = 1; i < STREAM_SLOTS; i++) {
        if (c->recv[i].used && c->recv[i].stream_id == id) {
            return &c->recv[i];
        }
        if (!c->recv[i].used && free_slot == NULL) {
            free_slot = &c->recv[i];
        }
    }
    if (free_slot == NULL) {
        *budget_exceeded = 1;
        return NULL;
    }
    free_slot->used = 1;
    free_slot->stream_id = id;
    free_slot->expected = 1;
    free_slot->partial_len = 0;
    free_slot->held_count = 0;
    free_slot->since_ack = 0;
    free_slot->owes_ack = 0;
    free_slot->partial_priority = 0;
    return free_slot;
}

static airc_in_flight *slot_at(airc_send_stream *s, unsigned i) {
    return &s->slots[(s->head + i) % AIRC_SEND_WINDOW];
}

/* ---- ending --------------------------------------------------------------------------- */

/* The reason text of the GOAWAY for each code (lengths counted by the compiler: the library
 * takes nothing from libc but memcpy and memset). */
#define REASON(text) {text, sizeof(text) - 1}
static const struct {
    const char *text;
    uint8_t len;
} reasons[AIRC_LAST_ERROR_CODE + 1] = {
    REASON(""),           REASON("bad magic"),       REASON("bad version"),
    REASON("reserved flags"), REASON("bad crc"),     REASON("bad length"),
    REASON("oversize"),   REASON("bad signalling"),  REASON("unknown signal"),
    REASON("message too large"), REASON("ack timeout"), REASON("too many streams"),
    REASON("flow control"), REASON("internal error"), REASON("peer goaway"),
    REASON("auth failed")};

static void end(airc_conn *c, uint16_t code, const char *reason, size_t reason_len, int by_peer,
                airc_event_fn fn, void *ctx) {
    airc_event event;
    unsigned i;
    if (c->closed) {
        return;
    }
    c->closed = 1;
    if (!by_peer) {
        if (reason == NULL) {
            unsigned known = code <= AIRC_LAST_ERROR_CODE ? code : AIRC_INTERNAL_ERROR;
            reason = reasons[known].text;
            reason_len = reasons[known].len;
        }
        c->goaway_pending = 1;
        c->goaway_code = code;
        c->goaway_stamp = stamp_of(c, c->now);
        c->reason_len = (uint16_t)(reason_len > AIRC_MAX_REASON ? AIRC_MAX_REASON : reason_len);
        memcpy(c->reason, reason, c->reason_len);
    }
    /* What is in flight will never be acknowledged now. Signalling not yet sent still goes
     * out before the GOAWAY, so that the peer, reading stream 255 in order, reaches it. */
    for (i = 1; i < STREAM_SLOTS; i++) {
        c->send[i].count = c->send[i].sent = 0;
    }
    for (i = 0; i < c->send[SIG_SLOT].sent; i++) {
        c->send[SIG_SLOT].head = (uint8_t)((c->send[SIG_SLOT].head + 1) % AIRC_SEND_WINDOW);
    }
    c->send[SIG_SLOT].count = (uint8_t)(c->send[SIG_SLOT].count - c->send[SIG_SLOT].sent);
    c->send[SIG_SLOT].sent = 0;
    memset(&event, 0, sizeof(event));
    event.kind = AIRC_EV_CLOSED;
    event.code = code;
    event.by_peer = (uint8_t)by_peer;
    emit(fn, ctx, &event);
}

void airc_close(airc_conn *c, airc_error code, const char *reason, size_t reason_len) {
    end(c, (uint16_t)code, reason == NULL ? "" : reason, reason == NULL ? 0 : reason_len, 0, NULL,
        NULL);
}

/* ---- sending ------------------------------------------------------------------------- */

static int queue_message(airc_conn *c, airc_send_stream *s, const uint8_t *data, size_t len,
                         uint8_t base_flags) {
    size_t frames = len == 0 ? 1 : (len + AIRC_TX_PAYLOAD - 1) / AIRC_TX_PAYLOAD;
    size_t i;
    if (frames > AIRC_SEND_WINDOW) {
        return AIRC_E_INVALID; /* larger than the whole window: it could never go */
    }
    if (frames > (size_t)(AIRC_SEND_WINDOW - s->count)) {
        return AIRC_E_WOULD_BLOCK;
    }
    for (i = 0; i < frames; i++) {
        airc_in_flight *f = slot_at(s, s->count);
        size_t piece = len - i * AIRC_TX_PAYLOAD;
        if (piece > AIRC_TX_PAYLOAD) {
            piece = AIRC_TX_PAYLOAD;
        }
        f->seq = s->next_seq++;
        f->length = (uint16_t)piece;
        f->flags = (uint8_t)(base_flags | (i + 1 == frames ? AIRC_FLAG_EOM : 0));
        f->retries = 0;
        f->resend = 0;
        if (piece > 0) {
            memcpy(f->payload, data + i * AIRC_TX_PAYLOAD, piece);
        }
        s->count++;
    }
    c->stats.messages_sent++;
    return 0;
}

int airc_send(airc_conn *c, uint16_t stream_id, const uint8_t *data, size_t len, int priority,
              uint32_t now) {
    airc_send_stream *s;
    c->now = now;
    if (c->closed) {
        return AIRC_E_CLOSED;
    }
    if (stream_id == AIRC_ANY_STREAM || (data == NULL && len > 0)) {
        return AIRC_E_INVALID;
    }
    s = take_send(c, stream_id);
    if (s == NULL) {
        return AIRC_E_INVALID; /* AIRC_MAX_STREAMS data streams are in use */
    }
    return queue_message(c, s, data, len, priority ? AIRC_FLAG_PRIORITY : 0);
}

int airc_can_send(const airc_conn *c, uint16_t stream_id, size_t len) {
    const airc_send_stream *s = find_send_const(c, stream_id);
    size_t frames = len == 0 ? 1 : (len + AIRC_TX_PAYLOAD - 1) / AIRC_TX_PAYLOAD;
    unsigned i, free_data = 0;
    if (c->closed || stream_id == AIRC_ANY_STREAM) {
        return 0;
    }
    if (s != NULL) {
        return frames <= (size_t)(AIRC_SEND_WINDOW - s->count);
    }
    for (i = 1; i < STREAM_SLOTS; i++) {
        free_data += !c->send[i].used;
    }
    return free_data > 0 && frames <= AIRC_SEND_WINDOW;
}

unsigned airc_unacknowledged(const airc_conn *c, uint16_t stream_id) {
    const airc_send_stream *s = find_send_const(c, stream_id);
    return s == NULL ? 0 : s->count;
}

static int send_signal(airc_conn *c, const uint8_t *payload, size_t len) {
    return queue_message(c, &c->send[SIG_SLOT], payload, len, AIRC_FLAG_PRIORITY);
}

int airc_request_clock(airc_conn *c, uint32_t now) {
    uint8_t buf[5];
    airc_writer w;
    int rc;
    c->now = now;
    if (c->closed) {
        return AIRC_E_CLOSED;
    }
    airc_writer_init(&w, buf, sizeof(buf));
    airc_put_u8(&w, AIRC_SIG_TIME_REQUEST);
    airc_put_u32(&w, c->next_nonce);
    rc = send_signal(c, buf, w.len);
    if (rc == 0) {
        c->time_nonce = c->next_nonce++;
        if (c->next_nonce == 0) {
            c->next_nonce = 1;
        }
    }
    return rc;
}

/* ---- receiving ----------------------------------------------------------------------- */

static uint32_t get32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static void owe_ack(airc_conn *c, airc_recv_stream *r, uint32_t now, int at_once) {
    r->owes_ack = 1;
    /* AIRC_ACK_EVERY frames on one stream send the ACK without waiting for the delay. */
    if (at_once || r->since_ack >= AIRC_ACK_EVERY) {
        c->ack_now = 1;
    } else if (!c->ack_pending) {
        c->ack_pending = 1;
        c->ack_deadline = now + AIRC_ACK_DELAY_US;
    }
}

/* A signalling message, whole: checked, then handled here (TIME, GOAWAY) or reported. */
static void on_signal(airc_conn *c, const uint8_t *data, size_t len, uint32_t timestamp,
                      uint32_t now, airc_event_fn fn, void *ctx) {
    airc_error error = airc_signal_check(data, len);
    uint32_t received_at = stamp_of(c, now);
    airc_event event;
    if (error != AIRC_NO_ERROR) {
        end(c, (uint16_t)error, NULL, 0, 0, fn, ctx);
        return;
    }
    memset(&event, 0, sizeof(event));
    if (data[0] == AIRC_SIG_TIME_REQUEST) {
        uint8_t buf[13];
        airc_writer w;
        airc_writer_init(&w, buf, sizeof(buf));
        airc_put_u8(&w, AIRC_SIG_TIME_RESPONSE);
        airc_put_u32(&w, get32(data + 1));
        airc_put_u32(&w, timestamp);
        airc_put_u32(&w, received_at);
        /* Best effort: with the signalling window full the answer is dropped (the peer may
         * ask again); the peer's input must never make this side fail. */
        (void)send_signal(c, buf, w.len);
    } else if (data[0] == AIRC_SIG_TIME_RESPONSE) {
        uint32_t t1 = get32(data + 5), t2 = get32(data + 9), t3 = timestamp, t4 = received_at;
        if (c->time_nonce != 0 && get32(data + 1) == c->time_nonce) {
            c->time_nonce = 0;
            event.kind = AIRC_EV_CLOCK;
            event.offset_us2 = airc_serial_diff(t2, t1) + airc_serial_diff(t3, t4);
            event.delay_us = airc_serial_diff(t4, t1) - airc_serial_diff(t3, t2);
            /* A negative delay is impossible on honest clocks (the answer came before the
             * request left): no estimate from it. */
            if (event.delay_us >= 0) {
                emit(fn, ctx, &event);
            }
        }
    } else if (data[0] == AIRC_SIG_GOAWAY) {
        uint16_t code = (uint16_t)((data[1] << 8) | data[2]);
        size_t reason_len = ((size_t)data[3] << 8) | data[4];
        end(c, code, (const char *)data + 5, reason_len, 1, fn, ctx);
    } else {
        event.kind = AIRC_EV_SIGNAL;
        event.stream_id = AIRC_SIGNALLING_STREAM;
        event.data = data;
        event.length = len;
        event.timestamp = timestamp;
        event.priority = 1;
        emit(fn, ctx, &event);
    }
}

/* One in-order frame's part of a message: kept if a fragment, else the message goes out. */
static void deliver(airc_conn *c, airc_recv_stream *r, const uint8_t *payload, uint16_t length,
                    uint8_t flags, uint32_t timestamp, uint32_t now, airc_event_fn fn,
                    void *ctx) {
    int priority = (flags & AIRC_FLAG_PRIORITY) != 0 || r->partial_priority;
    const uint8_t *data = payload;
    size_t len = length;
    if ((flags & AIRC_FLAG_EOM) == 0) {
        memcpy(r->partial + r->partial_len, payload, length);
        r->partial_len += length;
        c->received_bytes += length;
        r->partial_priority = (uint8_t)priority;
        return;
    }
    if (r->partial_len > 0) {
        memcpy(r->partial + r->partial_len, payload, length);
        data = r->partial;
        len = r->partial_len + length;
        c->received_bytes -= r->partial_len;
        r->partial_len = 0;
    }
    r->partial_priority = 0;
    if (c->closed) {
        return; /* a GOAWAY earlier in this frame's chain: nothing after it counts */
    }
    c->stats.messages_received++;
    if (r->stream_id == AIRC_SIGNALLING_STREAM) {
        on_signal(c, data, len, timestamp, now, fn, ctx);
    } else {
        airc_event event;
        memset(&event, 0, sizeof(event));
        event.kind = AIRC_EV_MESSAGE;
        event.stream_id = r->stream_id;
        event.data = data;
        event.length = len;
        event.timestamp = timestamp;
        event.priority = (uint8_t)priority;
        emit(fn, ctx, &event);
    }
}

#if AIRC_REORDER_WINDOW > 1
static int find_held(const airc_recv_stream *r, uint32_t seq) {
    int i;
    for (i = 0; i < r->held_count; i++) {
        if (r->held[i].seq == seq) {
            return i;
        }
    }
    return -1;
}
#endif

/* Would delivering this frame and the held frames it unblocks overflow a message, or the
 * connection's receive budget? The Python codec finds out before it reports anything, so
 * nothing from such a frame is delivered: check first, deliver after. */
static uint16_t check_chain(const airc_conn *c, const airc_recv_stream *r, uint16_t length,
                            uint8_t flags) {
    uint32_t partial = r->partial_len, received = c->received_bytes;
#if AIRC_REORDER_WINDOW > 1
    uint32_t seq = r->expected;
    int i;
#endif
    for (;;) {
        if (partial + length > AIRC_MAX_MESSAGE) {
            return AIRC_MESSAGE_TOO_LARGE;
        }
        if ((flags & AIRC_FLAG_EOM) != 0) {
            received -= partial;
            partial = 0;
        } else {
            partial += length;
            received += length;
        }
#if AIRC_REORDER_WINDOW > 1
        seq++;
        i = find_held(r, seq);
        if (i < 0) {
            break;
        }
        received -= r->held[i].length;
        length = r->held[i].length;
        flags = r->held[i].flags;
#else
        break;
#endif
    }
    return received > AIRC_MAX_RECEIVE_BUFFER ? AIRC_FLOW_CONTROL : 0;
}

static void on_data(airc_conn *c, const airc_frame *f, uint32_t now, airc_event_fn fn,
                    void *ctx) {
    int exceeded;
    int32_t ahead;
    uint16_t error;
    airc_event event;
    airc_recv_stream *r = find_recv(c, f->stream_id, &exceeded);
    if (r == NULL) {
        end(c, AIRC_TOO_MANY_STREAMS, NULL, 0, 0, fn, ctx);
        return;
    }
    memset(&event, 0, sizeof(event));
    ahead = airc_serial_diff(f->seq, r->expected);
#if AIRC_REORDER_WINDOW > 1
    if (ahead < 0 || find_held(r, f->seq) >= 0) {
#else
    if (ahead < 0) {
#endif
        c->stats.duplicates++;
        owe_ack(c, r, now, 1); /* a repeated ACK starts the sender's fast retransmit */
        return;
    }
    if (ahead >= AIRC_REORDER_WINDOW) {
        c->stats.beyond_window++; /* dropped: it comes again */
        owe_ack(c, r, now, 1);
        return;
    }
#if AIRC_REORDER_WINDOW > 1
    if (ahead > 0) {
        airc_held_frame *h = &r->held[r->held_count];
        if (c->received_bytes + f->length > AIRC_MAX_RECEIVE_BUFFER) {
            end(c, AIRC_FLOW_CONTROL, NULL, 0, 0, fn, ctx);
            return;
        }
        h->seq = f->seq;
        h->length = f->length;
        h->flags = f->flags;
        h->timestamp = f->timestamp;
        memcpy(h->payload, f->payload, f->length);
        r->held_count++;
        c->received_bytes += f->length;
        if (r->held_count == 1) {
            c->stats.gaps++;
            event.kind = AIRC_EV_GAP;
            event.stream_id = f->stream_id;
            event.expected = r->expected;
            event.seq = f->seq;
            emit(fn, ctx, &event);
        }
        owe_ack(c, r, now, 1);
        return;
    }
#endif
    error = check_chain(c, r, f->length, f->flags);
    if (error != 0) {
        end(c, error, NULL, 0, 0, fn, ctx);
        return;
    }
    r->expected++;
    r->since_ack++;
    deliver(c, r, f->payload, f->length, f->flags, f->timestamp, now, fn, ctx);
#if AIRC_REORDER_WINDOW > 1
    for (;;) {
        int i = find_held(r, r->expected);
        airc_held_frame h;
        if (i < 0) {
            break;
        }
        h = r->held[i]; /* out of the table first: delivery may report its payload */
        r->held[i] = r->held[--r->held_count];
        c->received_bytes -= h.length;
        r->expected++;
        r->since_ack++;
        deliver(c, r, h.payload, h.length, h.flags, h.timestamp, now, fn, ctx);
    }
#endif
    if (!c->closed) {
        owe_ack(c, r, now, r->held_count > 0); /* at once while a gap remains */
    }
}

static void resend(airc_conn *c, airc_in_flight *f, uint32_t now) {
    f->retries++;
    f->deadline = now + backoff(c, f->retries);
    f->resend = 1;
    c->stats.retransmits++;
}

static void on_ack(airc_conn *c, const airc_frame *f, uint32_t now, airc_event_fn fn, void *ctx) {
    airc_send_stream *s;
    uint32_t last_sent;
    unsigned acked = 0;
    airc_in_flight *newest = NULL;
    if (f->length != 0) {
        end(c, AIRC_BAD_LENGTH, NULL, 0, 0, fn, ctx);
        return;
    }
    s = find_send(c, f->stream_id);
    if (s == NULL || (f->stream_id == AIRC_SIGNALLING_STREAM && s->next_seq == 1)) {
        end(c, AIRC_FLOW_CONTROL, NULL, 0, 0, fn, ctx); /* an ACK on a stream that sent nothing */
        return;
    }
    last_sent = s->next_seq - 1 - (uint32_t)(s->count - s->sent);
    if (airc_serial_diff(f->seq, last_sent) > 0) {
        end(c, AIRC_FLOW_CONTROL, NULL, 0, 0, fn, ctx); /* an ACK of a frame never sent */
        return;
    }
    while (s->sent > 0 && airc_serial_diff(slot_at(s, 0)->seq, f->seq) <= 0) {
        newest = slot_at(s, 0);
        s->head = (uint8_t)((s->head + 1) % AIRC_SEND_WINDOW);
        s->count--;
        s->sent--;
        acked++;
    }
    if (acked > 0) {
        airc_event event;
        s->dup_acks = 0;
        if (newest->retries == 0) {
            observe_rtt(c, now - newest->sent_at); /* Karn: only frames sent once */
        }
        if (s->sent > 0) {
            /* The oldest frame left gets a fresh timeout (RFC 6298, rule 5.3). */
            slot_at(s, 0)->deadline = now + backoff(c, slot_at(s, 0)->retries);
        }
        memset(&event, 0, sizeof(event));
        event.kind = AIRC_EV_ACKNOWLEDGED;
        event.stream_id = f->stream_id;
        event.seq = f->seq;
        emit(fn, ctx, &event);
    } else if (s->sent > 0) {
        if (s->dup_acks < 0xFF && ++s->dup_acks == FAST_RETRANSMIT_DUP_ACKS) {
            resend(c, slot_at(s, 0), now);
        }
    }
}

void airc_receive(airc_conn *c, const uint8_t *data, size_t len, uint32_t now,
                  airc_event_fn fn, void *ctx) {
    size_t at = 0;
    if (c->closed) {
        return;
    }
    c->now = now;
    while (!c->closed) {
        airc_frame frame;
        at += airc_decoder_feed(&c->decoder, data + at, len - at, &frame);
        if (c->decoder.error != 0) {
            end(c, c->decoder.error, NULL, 0, 0, fn, ctx);
            return;
        }
        if (frame.payload == NULL) {
            return; /* everything taken, no whole frame left */
        }
        c->stats.frames_received++;
        if ((frame.flags & AIRC_FLAG_ACK) != 0) {
            on_ack(c, &frame, now, fn, ctx);
        } else {
            on_data(c, &frame, now, fn, ctx);
        }
    }
}

/* ---- timers ---------------------------------------------------------------------------- */

int airc_next_timer(const airc_conn *c, uint32_t *deadline) {
    unsigned i;
    int any = 0;
    if (c->closed) {
        return 0;
    }
    if (c->ack_pending) {
        *deadline = c->ack_deadline;
        any = 1;
    }
    for (i = 0; i < STREAM_SLOTS; i++) {
        const airc_send_stream *s = &c->send[i];
        if (s->sent > 0) {
            uint32_t due = s->slots[s->head].deadline;
            if (!any || airc_serial_diff(due, *deadline) < 0) {
                *deadline = due;
                any = 1;
            }
        }
    }
    return any;
}

void airc_handle_timer(airc_conn *c, uint32_t now, airc_event_fn fn, void *ctx) {
    unsigned i;
    if (c->closed) {
        return;
    }
    c->now = now;
    if (c->ack_pending && reached(now, c->ack_deadline)) {
        c->ack_now = 1;
    }
    for (i = 0; i < STREAM_SLOTS; i++) {
        airc_send_stream *s = &c->send[i];
        airc_in_flight *oldest;
        if (s->sent == 0) {
            continue;
        }
        oldest = slot_at(s, 0);
        if (!reached(now, oldest->deadline)) {
            continue;
        }
        if (oldest->retries >= AIRC_MAX_RETRANSMITS) {
            end(c, AIRC_ACK_TIMEOUT, NULL, 0, 0, fn, ctx);
            return;
        }
        resend(c, oldest, now);
    }
}

/* ---- output ---------------------------------------------------------------------------- */

static size_t put_frame(uint8_t *out, size_t cap, size_t *at, uint16_t stream_id, uint32_t seq,
                        uint32_t stamp, uint8_t flags, const uint8_t *payload, uint16_t length) {
    size_t n = airc_encode_frame(out + *at, cap - *at, stream_id, seq, stamp, flags, payload,
                                 length);
    *at += n;
    return n;
}

/* New frames of one pass (priority ones only, or any), one frame per stream per round, so
 * that streams interleave; within a stream always in seq order. */
static int transmit(airc_conn *c, uint32_t now, int priority_only, uint8_t *out, size_t cap,
                    size_t *at) {
    uint32_t stamp = stamp_of(c, now);
    int moved = 1;
    unsigned i;
    while (moved) {
        moved = 0;
        for (i = 0; i < STREAM_SLOTS; i++) {
            airc_send_stream *s = &c->send[i];
            airc_in_flight *f;
            if (s->sent == s->count) {
                continue;
            }
            f = slot_at(s, s->sent);
            if (priority_only && (f->flags & AIRC_FLAG_PRIORITY) == 0) {
                continue;
            }
            if (!put_frame(out, cap, at, s->stream_id, f->seq, stamp, f->flags, f->payload,
                           f->length)) {
                return 0; /* out is full: the rest next call */
            }
            f->stamp = stamp;
            f->sent_at = now;
            f->deadline = now + c->rto;
            s->sent++;
            c->stats.frames_sent++;
            moved = 1;
        }
    }
    return 1;
}

size_t airc_output(airc_conn *c, uint32_t now, uint8_t *out, size_t cap) {
    size_t at = 0;
    unsigned i, j;
    c->now = now;
    if (c->closed) {
        airc_send_stream *s = &c->send[SIG_SLOT];
        uint8_t goaway[5 + AIRC_MAX_REASON];
        airc_writer w;
        if (!c->goaway_pending) {
            return 0;
        }
        /* Signalling queued before the close goes first, window or not. */
        while (s->count > 0) {
            airc_in_flight *f = slot_at(s, 0);
            if (!put_frame(out, cap, &at, AIRC_SIGNALLING_STREAM, f->seq, c->goaway_stamp,
                           f->flags, f->payload, f->length)) {
                return at;
            }
            s->head = (uint8_t)((s->head + 1) % AIRC_SEND_WINDOW);
            s->count--;
        }
        airc_writer_init(&w, goaway, sizeof(goaway));
        airc_put_u8(&w, AIRC_SIG_GOAWAY);
        airc_put_u16(&w, c->goaway_code);
        airc_put_sized(&w, 2, (const uint8_t *)c->reason, c->reason_len);
        if (put_frame(out, cap, &at, AIRC_SIGNALLING_STREAM, s->next_seq, c->goaway_stamp,
                      AIRC_FLAG_PRIORITY | AIRC_FLAG_EOM, goaway, (uint16_t)w.len)) {
            s->next_seq++;
            c->goaway_pending = 0;
        }
        return at;
    }
    if (c->ack_now || (c->ack_pending && reached(now, c->ack_deadline))) {
        uint32_t stamp = stamp_of(c, now);
        for (i = 0; i < STREAM_SLOTS; i++) {
            airc_recv_stream *r = &c->recv[i];
            if (!r->owes_ack) {
                continue;
            }
            if (!put_frame(out, cap, &at, r->stream_id, r->expected - 1, stamp, AIRC_FLAG_ACK,
                           NULL, 0)) {
                return at;
            }
            r->owes_ack = 0;
            r->since_ack = 0;
        }
        c->ack_now = 0;
        c->ack_pending = 0;
    }
    for (i = 0; i < STREAM_SLOTS; i++) {
        airc_send_stream *s = &c->send[i];
        for (j = 0; j < s->sent; j++) {
            airc_in_flight *f = slot_at(s, j);
            if (!f->resend) {
                continue;
            }
            if (!put_frame(out, cap, &at, s->stream_id, f->seq, f->stamp, f->flags, f->payload,
                           f->length)) {
                return at;
            }
            f->resend = 0;
        }
    }
    if (transmit(c, now, 1, out, cap, &at)) {
        transmit(c, now, 0, out, cap, &at);
    }
    return at;
}
