// SPDX-License-Identifier: MIT OR GPL-2.0-only
//
// Licence: this one file is MIT or GPL-2.0 (the rest of plumb is Apache-2.0): the
// kernel lets only programs with a GPL-compatible licence call the helpers used here
// (bpf_probe_read_kernel), and MIT is compatible with both.
//
// drops.bpf.c: reports the packets the kernel drops in one network namespace, with
// the kernel's drop reason (plumb-observe, src/drops.rs loads it).
//
// Attached to tp_btf/kfree_skb: kfree_skb(struct sk_buff *skb, void *location,
// enum skb_drop_reason reason, ...) -- the BTF form of tracepoint skb:kfree_skb (no
// tracefs needed). Frees that are not drops (the reasons user space names in
// skip_reason_*: SKB_NOT_DROPPED_YET, SKB_CONSUMED, SKB_DROP_REASON_NOT_SPECIFIED,
// looked up by name in the running kernel's BTF) and packets of other namespaces are
// rejected in the kernel, first, then drops that do not match the user's filters
// (filter_* below), so the ring buffer only carries what is asked for.
// The namespace of a packet is its device's (skb->dev), or its socket's when it has
// no device yet (locally generated packets in the OUTPUT hook).
//
// Kernel structs are declared here with only the fields used and relocated with
// CO-RE against the running kernel's BTF (no vmlinux.h). Build:
//   clang -O2 -g -target bpf -D__TARGET_ARCH_x86 -c drops.bpf.c -o drops.bpf.o
// (build.rs does this through build-support/bpf_clang.rs.)

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed char __s8;
typedef short __s16;
typedef int __s32;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#define BPF_MAP_TYPE_PERCPU_ARRAY 6
#define BPF_MAP_TYPE_RINGBUF 27
#define BPF_RB_NO_WAKEUP 1
#define BPF_RB_FORCE_WAKEUP 2
#define BPF_RB_AVAIL_DATA 0
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define IPPROTO_ICMP 1
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17
#define IPPROTO_ICMPV6 58
#define IPPROTO_SCTP 132

// Set by user space before load (.rodata). 0 watches every namespace.
const volatile __u64 watched_netns_inum = 0;
// Reasons that are not drops; 0xffffffff when unused (--all-reasons).
const volatile __u32 skip_reason_1 = 0xffffffff;
const volatile __u32 skip_reason_2 = 0xffffffff;
const volatile __u32 skip_reason_3 = 0xffffffff;
// The user's filters (--reason, --protocol, --port, --ip), applied here so drops that
// do not match never reach user space (counted in counters[2]). A count of 0 leaves
// that filter off; user space applies the same filters again, and alone when a list
// is longer than these slots. Ports in host order; an address as 16 bytes (IPv4 in
// the first 4) with its l3 protocol (ETH_P_IP or ETH_P_IPV6).
#define FILTER_REASONS 8
#define FILTER_PROTOCOLS 4
#define FILTER_PORTS 8
#define FILTER_IPS 4
const volatile __u32 n_filter_reasons = 0;
const volatile __u32 filter_reasons[FILTER_REASONS] = {};
const volatile __u32 n_filter_protocols = 0;
const volatile __u8 filter_protocols[FILTER_PROTOCOLS] = {};
const volatile __u32 n_filter_ports = 0;
const volatile __u16 filter_ports[FILTER_PORTS] = {};
const volatile __u32 n_filter_ips = 0;
const volatile __u16 filter_ip_l3[FILTER_IPS] = {};
const volatile __u8 filter_ips[FILTER_IPS][16] = {};
// Ring buffer bytes waiting before a consumer is woken: batching the wakeups is what
// lets a million drops a second through (user space also polls with a timeout).
const volatile __u64 wakeup_bytes = 64 * 1024;

struct ns_common {
	unsigned int inum;
} __attribute__((preserve_access_index));

struct net {
	struct ns_common ns;
} __attribute__((preserve_access_index));

typedef struct {
	struct net *net;
} possible_net_t;

struct net_device {
	possible_net_t nd_net;
	int ifindex;
} __attribute__((preserve_access_index));

struct sock_common {
	possible_net_t skc_net;
} __attribute__((preserve_access_index));

struct sock {
	struct sock_common __sk_common;
} __attribute__((preserve_access_index));

struct sk_buff {
	struct net_device *dev;
	struct sock *sk;
	unsigned char *head;
	__u16 network_header;
	__be16 protocol;
} __attribute__((preserve_access_index));

// One drop; mirrored by `decode` in src/drops.rs. Addresses and ports in network
// byte order as on the wire.
struct drop_event {
	__u64 ktime_ns;
	__u64 location;
	__u32 netns_inum;
	__u32 reason;
	__u32 ifindex;
	__u16 l3_proto;
	__u8 ip_proto;
	__u8 has_ports;
	__u16 sport;
	__u16 dport;
	__u8 saddr[16];
	__u8 daddr[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 * 1024 * 1024);
} events SEC(".maps");

// Per CPU: [0] drops reported, [1] drops the ring buffer had no room for, [2] drops
// of the watched namespace the filters left out.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 3);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline void count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &idx);
	if (c)
		*c += 1;
}

#define IPV6_HOPOPTS 0
#define IPV6_ROUTING 43
#define IPV6_FRAGMENT 44
#define IPV6_AH 51
#define IPV6_DSTOPTS 60
// Extension headers walked at most before the upper-layer header; a packet with more
// is reported without ports.
#define IPV6_EXT_MAX 6

// Walks the IPv6 extension headers from `p` (the first one's type `next`): sets
// *proto to the upper-layer protocol and returns where its header starts, or 0 when
// the ports cannot be read (a fragment after the first, too many headers, an
// unreadable header). Hop-by-hop, routing and destination options are 8-byte units
// after the first 8; AH counts 4-byte units after the first 8; a fragment header is 8
// bytes and only the fragment at offset 0 holds the ports.
static __always_inline unsigned char *ipv6_upper_layer(unsigned char *p, __u8 next, __u8 *proto)
{
	int first_fragment = 1;
#pragma unroll
	for (int i = 0; i < IPV6_EXT_MAX; i++) {
		if (next == IPV6_HOPOPTS || next == IPV6_ROUTING || next == IPV6_DSTOPTS ||
		    next == IPV6_AH) {
			__u8 x[2];
			if (bpf_probe_read_kernel(x, sizeof(x), p)) {
				*proto = next;
				return 0;
			}
			__u32 len = next == IPV6_AH ? ((__u32)x[1] + 2) * 4 : ((__u32)x[1] + 1) * 8;
			next = x[0];
			p += len;
		} else if (next == IPV6_FRAGMENT) {
			__u8 x[4];
			if (bpf_probe_read_kernel(x, sizeof(x), p)) {
				*proto = next;
				return 0;
			}
			if ((((__u16)x[2] << 8) | x[3]) & 0xfff8)
				first_fragment = 0;
			next = x[0];
			p += 8;
		} else {
			break;
		}
	}
	*proto = next;
	if (!first_fragment || next == IPV6_HOPOPTS || next == IPV6_ROUTING ||
	    next == IPV6_FRAGMENT || next == IPV6_AH || next == IPV6_DSTOPTS)
		return 0;
	return p;
}

static __always_inline int same_ip(const __u8 *a, int i, __u16 l3)
{
	if (filter_ip_l3[i] != l3)
		return 0;
	int len = l3 == ETH_P_IP ? 4 : 16;
#pragma unroll
	for (int k = 0; k < 16; k++)
		if (k < len && a[k] != filter_ips[i][k])
			return 0;
	return 1;
}

// 1 when `e` passes the filters set (the reason was checked before).
static __always_inline int wanted(const struct drop_event *e)
{
	if (n_filter_protocols) {
		int hit = 0;
#pragma unroll
		for (int i = 0; i < FILTER_PROTOCOLS; i++)
			if (i < n_filter_protocols && e->ip_proto == filter_protocols[i])
				hit = 1;
		if (!hit)
			return 0;
	}
	if (n_filter_ports) {
		if (e->has_ports != 1)
			return 0;
		__u16 s = __builtin_bswap16(e->sport), d = __builtin_bswap16(e->dport);
		int hit = 0;
#pragma unroll
		for (int i = 0; i < FILTER_PORTS; i++)
			if (i < n_filter_ports && (s == filter_ports[i] || d == filter_ports[i]))
				hit = 1;
		if (!hit)
			return 0;
	}
	if (n_filter_ips) {
		if (e->l3_proto != ETH_P_IP && e->l3_proto != ETH_P_IPV6)
			return 0;
		int hit = 0;
#pragma unroll
		for (int i = 0; i < FILTER_IPS; i++)
			if (i < n_filter_ips &&
			    (same_ip(e->saddr, i, e->l3_proto) || same_ip(e->daddr, i, e->l3_proto)))
				hit = 1;
		if (!hit)
			return 0;
	}
	return 1;
}

SEC("tp_btf/kfree_skb")
int plumb_kfree_skb(__u64 *ctx)
{
	__u32 reason = (__u32)ctx[2];
	if (reason == skip_reason_1 || reason == skip_reason_2 || reason == skip_reason_3)
		return 0;
	// tp_btf's arguments are typed kernel pointers: plain loads (relocated by CO-RE,
	// checked by the verifier) instead of bpf_probe_read_kernel calls, because this
	// runs for every packet freed on the machine.
	struct sk_buff *skb = (struct sk_buff *)ctx[0];
	struct net_device *dev = skb->dev;
	__u32 inum = 0;
	int ifindex = 0;
	if (dev) {
		inum = dev->nd_net.net->ns.inum;
		ifindex = dev->ifindex;
	} else {
		struct sock *sk = skb->sk;
		if (sk)
			inum = sk->__sk_common.skc_net.net->ns.inum;
	}
	if (watched_netns_inum && inum != watched_netns_inum)
		return 0;
	if (n_filter_reasons) {
		int hit = 0;
#pragma unroll
		for (int i = 0; i < FILTER_REASONS; i++)
			if (i < n_filter_reasons && reason == filter_reasons[i])
				hit = 1;
		if (!hit) {
			count(2);
			return 0;
		}
	}

	// Built on the stack and copied into the ring buffer only when it passes the
	// filters, so a full buffer counts only drops that were wanted.
	struct drop_event ev;
	struct drop_event *e = &ev;
	__builtin_memset(e, 0, sizeof(*e));
	e->ktime_ns = bpf_ktime_get_ns();
	e->location = ctx[1];
	e->netns_inum = inum;
	e->reason = reason;
	e->ifindex = ifindex;

	unsigned char *head = skb->head;
	__u16 nh = skb->network_header;
	__u16 l3 = __builtin_bswap16(skb->protocol);
	e->l3_proto = l3;
	unsigned char *ip = head + nh;
	unsigned char *l4 = 0;
	if (nh == 0xffff) {
		// no network header set
	} else if (l3 == ETH_P_IP) {
		// One read of the fixed header: version/ihl at 0, frag at 6, protocol at 9,
		// addresses at 12 and 16.
		__u8 h[20];
		if (!bpf_probe_read_kernel(h, sizeof(h), ip)) {
			e->ip_proto = h[9];
			__builtin_memcpy(e->saddr, h + 12, 4);
			__builtin_memcpy(e->daddr, h + 16, 4);
			// Ports only in the first fragment (offset 0).
			__u16 frag = ((__u16)(h[6] & 0x1f) << 8) | h[7];
			if ((h[0] >> 4) == 4 && frag == 0)
				l4 = ip + (h[0] & 0xf) * 4;
		}
	} else if (l3 == ETH_P_IPV6) {
		// The fixed header in one read: next header at 6, addresses at 8 and 24.
		__u8 h[40];
		if (!bpf_probe_read_kernel(h, sizeof(h), ip)) {
			__builtin_memcpy(e->saddr, h + 8, 16);
			__builtin_memcpy(e->daddr, h + 24, 16);
			l4 = ipv6_upper_layer(ip + 40, h[6], &e->ip_proto);
		}
	}
	if (l4) {
		__u8 p = e->ip_proto;
		if (p == IPPROTO_TCP || p == IPPROTO_UDP || p == IPPROTO_SCTP) {
			if (!bpf_probe_read_kernel(&e->sport, 4, l4))
				e->has_ports = 1;
		} else if (p == IPPROTO_ICMP || p == IPPROTO_ICMPV6) {
			// type and code in sport's two bytes
			if (!bpf_probe_read_kernel(&e->sport, 2, l4))
				e->has_ports = 2;
		}
	}
	if (!wanted(e)) {
		count(2);
		return 0;
	}
	__u64 flags = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes
			      ? BPF_RB_FORCE_WAKEUP
			      : BPF_RB_NO_WAKEUP;
	if (bpf_ringbuf_output(&events, e, sizeof(*e), flags)) {
		count(1);
		return 0;
	}
	count(0);
	return 0;
}

// The licence the kernel checks: this file's (see the top).
char LICENSE[] SEC("license") = "Dual MIT/GPL";
