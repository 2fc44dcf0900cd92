// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * The lab's stand-in for Cilium's socket load balancer (kube-proxy replacement):
 * cgroup connect4/sendmsg4 programs that translate a Service address to one of its
 * backends at connect() time, reading Cilium's own LB maps in Cilium's 1.13+ layouts
 * (cilium_lb4_services_v2, cilium_lb4_backends_v3; see plumb-cilium's layout module).
 * cilium_lb4_reverse_nat is declared so that the lab pins all three maps a reader
 * expects; the programs do not need it (no recvmsg4 rewrite).
 * Written for plumb's lab from the layouts alone; it is not Cilium's code and does
 * only the part a node's Services need: slot-0 lookup (the socket's protocol first,
 * then "any"), a random active slot, the backend's address and port.
 * A frontend without backends refuses the connection, as Cilium's does.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct lb4_key {
	__u32 address;      /* network order */
	__u16 dport;        /* network order */
	__u16 backend_slot; /* 0: the frontend itself */
	__u8 proto;         /* 0: any */
	__u8 scope;
	__u8 pad[2];
};

struct lb4_service {
	__u32 backend_id;
	__u16 count;
	__u16 rev_nat_index;
	__u8 flags;
	__u8 flags2;
	__u16 qcount;
};

struct lb4_backend {
	__u32 address; /* network order */
	__u16 port;    /* network order */
	__u8 proto;
	__u8 flags;
	__u16 cluster_id;
	__u8 zone;
	__u8 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct lb4_key);
	__type(value, struct lb4_service);
	__uint(max_entries, 65536);
} cilium_lb4_services_v2 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct lb4_backend);
	__uint(max_entries, 65536);
} cilium_lb4_backends_v3 SEC(".maps");

struct lb4_reverse_nat {
	__u32 address; /* network order */
	__u16 port;    /* network order */
} __attribute__((packed));

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u16); /* network order */
	__type(value, struct lb4_reverse_nat);
	__uint(max_entries, 65536);
} cilium_lb4_reverse_nat SEC(".maps");

static __always_inline int xlate(struct bpf_sock_addr *ctx)
{
	struct lb4_key key = {};
	struct lb4_service *svc;
	struct lb4_service *slot;
	struct lb4_backend *be;
	__u32 backend_id;

	key.address = ctx->user_ip4;
	key.dport = (__u16)ctx->user_port;
	key.proto = (__u8)ctx->protocol;
	svc = bpf_map_lookup_elem(&cilium_lb4_services_v2, &key);
	if (!svc) {
		key.proto = 0;
		svc = bpf_map_lookup_elem(&cilium_lb4_services_v2, &key);
	}
	if (!svc)
		return 1; /* not a Service: leave the socket alone */
	if (svc->count == 0)
		return 0; /* a Service without backends: refuse */
	key.backend_slot = (__u16)(bpf_get_prandom_u32() % svc->count) + 1;
	slot = bpf_map_lookup_elem(&cilium_lb4_services_v2, &key);
	if (!slot)
		return 0;
	backend_id = slot->backend_id;
	be = bpf_map_lookup_elem(&cilium_lb4_backends_v3, &backend_id);
	if (!be)
		return 0;
	ctx->user_ip4 = be->address;
	ctx->user_port = (__u32)be->port;
	return 1;
}

SEC("cgroup/connect4")
int sock4_connect(struct bpf_sock_addr *ctx)
{
	return xlate(ctx);
}

SEC("cgroup/sendmsg4")
int sock4_sendmsg(struct bpf_sock_addr *ctx)
{
	return xlate(ctx);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
