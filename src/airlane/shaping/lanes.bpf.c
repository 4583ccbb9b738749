/* Airlane's lane classifier for the traffic-control hook (clsact, direct action).
 *
 * Egress: a packet's lane is that of its socket, if Airlane put the socket's cookie in
 * `airlane_flows` (a connection that declared its lane), else that of its DSCP code point
 * (`airlane_dscp`, which `airlane shaping attach` fills from [lanes]), else none. A packet with a
 * lane gets `skb->priority` from `airlane_priority`: the qdisc below then queues it in that
 * lane's band (HTB: the class id; pfifo_fast: the band of that priority). Nothing is dropped or
 * delayed here: the program only sorts.
 *
 * Ingress: no socket is known yet, so the lane comes from the DSCP alone; ingress only counts.
 *
 * `airlane_counters` counts packets and bytes per direction and lane (index direction * 4 +
 * lane, lane 3 meaning none), per CPU; Airlane sums them for /metrics.
 *
 * There is no kernel helper that sets a rate ceiling from a classifier (the seed's
 * `bpf_skb_mark_ceil` does not exist): a classifier sets the priority, the mark or the class
 * id, and the qdisc does the scheduling.
 *
 * Build: clang -O2 -g -target bpf -I/usr/include/$(uname -m)-linux-gnu -c lanes.bpf.c
 */

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define LANES 3          /* control, interactive, bulk */
#define NO_LANE 3        /* counter slot of traffic with no lane */
#define SLOTS 4          /* counter slots per direction */
#define EGRESS 0
#define INGRESS 1

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);   /* the socket's cookie (SO_COOKIE) */
	__type(value, __u32); /* its lane */
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} airlane_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 64);
	__type(key, __u32);   /* DSCP code point */
	__type(value, __u32); /* its lane + 1; 0: no lane */
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} airlane_dscp SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LANES);
	__type(key, __u32);   /* lane */
	__type(value, __u32); /* skb->priority for it; 0: left as the socket set it */
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} airlane_priority SEC(".maps");

struct counter {
	__u64 packets;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2 * SLOTS);
	__type(key, __u32);
	__type(value, struct counter);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} airlane_counters SEC(".maps");

/* The DSCP code point of an IPv4 or IPv6 packet; -1 for anything else. Read relative to the
 * network header, so the same program works on Ethernet-like devices (veth, NICs) and on
 * devices with no link layer (TUN, WireGuard). */
static __always_inline int packet_dscp(struct __sk_buff *skb)
{
	__u8 bytes[2];

	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		if (bpf_skb_load_bytes_relative(skb, 1, bytes, 1, BPF_HDR_START_NET) < 0)
			return -1;
		return bytes[0] >> 2;
	}
	if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		if (bpf_skb_load_bytes_relative(skb, 0, bytes, 2, BPF_HDR_START_NET) < 0)
			return -1;
		/* The traffic class straddles the version nibble and the flow label. */
		return (((bytes[0] & 0x0f) << 4) | (bytes[1] >> 4)) >> 2;
	}
	return -1;
}

static __always_inline __u32 dscp_lane(struct __sk_buff *skb)
{
	int dscp = packet_dscp(skb);
	__u32 key;
	__u32 *lane;

	if (dscp < 0)
		return NO_LANE;
	key = dscp;
	lane = bpf_map_lookup_elem(&airlane_dscp, &key);
	if (!lane || *lane == 0 || *lane > LANES)
		return NO_LANE;
	return *lane - 1;
}

static __always_inline void count(__u32 direction, __u32 lane, __u32 len)
{
	__u32 slot = direction * SLOTS + (lane < LANES ? lane : NO_LANE);
	struct counter *counter = bpf_map_lookup_elem(&airlane_counters, &slot);

	if (counter) {
		counter->packets += 1;
		counter->bytes += len;
	}
}

SEC("tc/egress")
int airlane_egress(struct __sk_buff *skb)
{
	__u64 cookie = bpf_get_socket_cookie(skb);
	__u32 lane = NO_LANE;

	if (cookie) {
		__u32 *flow = bpf_map_lookup_elem(&airlane_flows, &cookie);

		if (flow && *flow < LANES)
			lane = *flow;
	}
	if (lane == NO_LANE)
		lane = dscp_lane(skb);
	if (lane < LANES) {
		__u32 *priority = bpf_map_lookup_elem(&airlane_priority, &lane);

		if (priority && *priority)
			skb->priority = *priority;
	}
	count(EGRESS, lane, skb->len);
	return TC_ACT_OK;
}

SEC("tc/ingress")
int airlane_ingress(struct __sk_buff *skb)
{
	count(INGRESS, dscp_lane(skb), skb->len);
	return TC_ACT_OK;
}

/* No GPL-only helper is called: the program carries the project's licence. */
char LICENSE[] SEC("license") = "Apache-2.0";
