/*
 * Compile-time limits of the AIRC C library. Every buffer is sized by these; override any of
 * them with -D on the compiler's command line. The defaults are the device profile that
 * docs/airc-c.md measures against the seed's 3.2 KB budget: one data stream beside
 * signalling, 4 frames in flight per stream, no reordering (TCP and serial links never
 * reorder; a frame ahead of a gap is dropped and comes again), frames and messages of up to
 * 512 bytes from the gateway, 128-byte frames to it (so messages of up to 512 bytes).
 *
 * The Python codec takes the same limits from AircConfig:
 *   AIRC_RX_PAYLOAD     max_receive_payload   largest frame payload accepted
 *   AIRC_TX_PAYLOAD     max_frame_payload     largest payload put in one frame
 *   AIRC_MAX_MESSAGE    max_message_size      largest reassembled message accepted
 *   AIRC_SEND_WINDOW    send_window           frames in flight per stream
 *   AIRC_REORDER_WINDOW reorder_window        1: nothing held ahead of a gap
 *   AIRC_MAX_STREAMS    max_streams           data StreamIDs per direction
 *   AIRC_MAX_RECEIVE_BUFFER max_receive_buffer bytes held for the peer
 */
#ifndef AIRC_CONFIG_H
#define AIRC_CONFIG_H

#ifndef AIRC_MAX_STREAMS
#define AIRC_MAX_STREAMS 1
#endif
#ifndef AIRC_RX_PAYLOAD
#define AIRC_RX_PAYLOAD 512 /* the gateway's largest event to a reader, `done` with its usage,
                               is about 400 bytes in one frame */
#endif
#ifndef AIRC_TX_PAYLOAD
#define AIRC_TX_PAYLOAD 128
#endif
#ifndef AIRC_MAX_MESSAGE
#define AIRC_MAX_MESSAGE 512
#endif
#ifndef AIRC_SEND_WINDOW
#define AIRC_SEND_WINDOW 4
#endif
#ifndef AIRC_REORDER_WINDOW
#define AIRC_REORDER_WINDOW 1
#endif
#ifndef AIRC_MAX_RECEIVE_BUFFER
#define AIRC_MAX_RECEIVE_BUFFER ((AIRC_MAX_STREAMS + 1) * AIRC_MAX_MESSAGE)
#endif
#ifndef AIRC_ACK_EVERY
#define AIRC_ACK_EVERY 16
#endif
#ifndef AIRC_ACK_DELAY_US
#define AIRC_ACK_DELAY_US 10000u
#endif
#ifndef AIRC_INITIAL_RTO_US
#define AIRC_INITIAL_RTO_US 1000000u
#endif
#ifndef AIRC_MIN_RTO_US
#define AIRC_MIN_RTO_US 200000u
#endif
#ifndef AIRC_MAX_RTO_US
#define AIRC_MAX_RTO_US 8000000u
#endif
#ifndef AIRC_MAX_RETRANSMITS
#define AIRC_MAX_RETRANSMITS 6
#endif
#ifndef AIRC_MAX_REASON
#define AIRC_MAX_REASON 32 /* GOAWAY reason bytes we send (the peer's may be longer) */
#endif

#if AIRC_SEND_WINDOW < 1 || AIRC_SEND_WINDOW > 255
#error "AIRC_SEND_WINDOW must be in 1..255"
#endif
#if AIRC_REORDER_WINDOW < 1 || AIRC_REORDER_WINDOW > 255
#error "AIRC_REORDER_WINDOW must be in 1..255"
#endif
#if AIRC_RX_PAYLOAD > 0xFFFF || AIRC_TX_PAYLOAD < 1 || AIRC_TX_PAYLOAD > 0xFFFF
#error "AIRC_RX_PAYLOAD must be at most 65535, AIRC_TX_PAYLOAD in 1..65535"
#endif
#if AIRC_MAX_STREAMS < 1
#error "AIRC_MAX_STREAMS must be at least 1"
#endif

#endif /* AIRC_CONFIG_H */
