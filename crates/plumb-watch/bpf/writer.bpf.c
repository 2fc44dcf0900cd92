// SPDX-License-Identifier: MIT OR GPL-2.0-only
//
// Licence: this one file is MIT or GPL-2.0 (the rest of plumb is Apache-2.0). The
// kernel lets only programs with a GPL-compatible licence call the helpers this one
// needs (bpf_probe_read_kernel), the program says so in its "license" section below,
// and Apache-2.0 is not compatible with GPL-2.0; MIT is compatible with both.
//
// writer.bpf.c: names the process that sends an nfnetlink batch, at the moment it
// sends it (plumb-watch, src/writer_probe.rs loads it).
//
// Attached to tp_btf/sys_enter, so it runs on every syscall entry of the machine:
// anything but sendmsg is one compare and a return. For sendmsg(fd, msg, flags) it
// follows current->files->fdt->fd[fd] to the socket and reports the send when the
// socket is AF_NETLINK / NETLINK_NETFILTER and belongs to the watched network
// namespace (the socket's namespace: the one the kernel applies the batch to). The
// report carries the type of the message's first nlmsghdr (first iovec), so user
// space can tell a batch (NFNL_MSG_BATCH_BEGIN, 0x10) from anything else.
//
// Kernel structs are declared here with only the fields used, and relocated with
// CO-RE against the running kernel's BTF (no vmlinux.h). Build:
//   clang -O2 -g -target bpf -D__TARGET_ARCH_x86 -c writer.bpf.c -o writer.bpf.o
// (build.rs does this; -D__TARGET_ARCH_arm64 on aarch64.)

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

#define BPF_MAP_TYPE_RINGBUF 27
#define AF_NETLINK 16
#define NETLINK_NETFILTER 12
#define S_IFMT 00170000
#define S_IFSOCK 0140000

// Set by user space before load (.rodata): the watched namespace's inode and the
// architecture's sendmsg syscall number (x86_64: 46, aarch64: 211).
const volatile __u64 watched_netns_inum = 0;
const volatile __s64 sendmsg_nr = -1;

struct pt_regs {
#if defined(__TARGET_ARCH_x86)
	unsigned long di;
	unsigned long si;
#elif defined(__TARGET_ARCH_arm64)
	__u64 regs[31];
	__u64 orig_x0;
#else
#error "set __TARGET_ARCH_x86 or __TARGET_ARCH_arm64"
#endif
} __attribute__((preserve_access_index));

struct ns_common {
	unsigned int inum;
} __attribute__((preserve_access_index));

struct net {
	struct ns_common ns;
} __attribute__((preserve_access_index));

typedef struct {
	struct net *net;
} possible_net_t;

struct sock_common {
	unsigned short skc_family;
	possible_net_t skc_net;
} __attribute__((preserve_access_index));

struct sock {
	struct sock_common __sk_common;
	__u16 sk_protocol;
} __attribute__((preserve_access_index));

struct socket {
	struct sock *sk;
} __attribute__((preserve_access_index));

struct inode {
	unsigned short i_mode;
} __attribute__((preserve_access_index));

struct file {
	void *private_data;
	struct inode *f_inode;
} __attribute__((preserve_access_index));

struct fdtable {
	unsigned int max_fds;
	struct file **fd;
} __attribute__((preserve_access_index));

struct files_struct {
	struct fdtable *fdt;
} __attribute__((preserve_access_index));

struct task_struct {
	struct files_struct *files;
} __attribute__((preserve_access_index));

// User ABI (fixed layout on 64-bit): struct user_msghdr's first fields, struct
// iovec, and struct nlmsghdr.
struct user_msghdr_head {
	void *msg_name;
	int msg_namelen;
	void *msg_iov;
};

struct iovec_head {
	void *iov_base;
	__u64 iov_len;
};

struct nlmsghdr_head {
	__u32 nlmsg_len;
	__u16 nlmsg_type;
	__u16 nlmsg_flags;
};

// One report; mirrored by RawEvent in src/writer_probe.rs.
struct batch_send {
	__u64 ktime_ns;
	__u32 tgid;
	__u32 tid;
	char comm[16];
	__u16 nlmsg_type;
	__u16 type_valid;
	// Reports dropped (ring buffer full) since the program was loaded, before this
	// one: user space learns of drops from the next report that gets through.
	__u32 dropped;
};

// Reports the ring buffer had no room for (.bss: a map the program holds).
__u64 dropped_reports = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} events SEC(".maps");

SEC("tp_btf/sys_enter")
int writer_sys_enter(__u64 *ctx)
{
	// sys_enter(struct pt_regs *regs, long id)
	if ((__s64)ctx[1] != sendmsg_nr)
		return 0;

	// Cost matters on this path too (a busy UDP sender makes sendmsg frequent), so
	// BTF pointers are read directly (regs, task, files, fdt: plain loads the
	// verifier allows from tp_btf's typed arguments and bpf_get_current_task_btf)
	// and an unrelated socket is rejected after four bpf_probe_read_kernel calls
	// (fd[fd], private_data, sk, family).
	struct pt_regs *regs = (struct pt_regs *)ctx[0];
#if defined(__TARGET_ARCH_x86)
	__u64 fd = regs->di;
#else
	__u64 fd = regs->orig_x0;
#endif
	struct task_struct *task = bpf_get_current_task_btf();
	struct fdtable *fdt = task->files->fdt;
	if (fd >= fdt->max_fds)
		return 0;
	struct file **fds = fdt->fd;
	struct file *file = 0;
	if (bpf_probe_read_kernel(&file, sizeof(file), &fds[fd]) || !file)
		return 0;
	// private_data is a struct socket only for sockets: the family and protocol
	// checks first (anything else is almost surely rejected by them), then the
	// proof that it is a socket (its inode is S_IFSOCK).
	struct socket *sock = BPF_CORE_READ(file, private_data);
	struct sock *sk = BPF_CORE_READ(sock, sk);
	if (!sk || BPF_CORE_READ(sk, __sk_common.skc_family) != AF_NETLINK)
		return 0;
	if (BPF_CORE_READ(sk, sk_protocol) != NETLINK_NETFILTER)
		return 0;
	if ((BPF_CORE_READ(file, f_inode, i_mode) & S_IFMT) != S_IFSOCK)
		return 0;
	if (BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum) != watched_netns_inum)
		return 0;

	struct batch_send *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		__sync_fetch_and_add(&dropped_reports, 1);
		return 0;
	}
	__u64 id = bpf_get_current_pid_tgid();
	e->ktime_ns = bpf_ktime_get_ns();
	e->tgid = id >> 32;
	e->tid = (__u32)id;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	e->nlmsg_type = 0;
	e->type_valid = 0;
	e->dropped = (__u32)dropped_reports;

#if defined(__TARGET_ARCH_x86)
	void *umsg = (void *)regs->si;
#else
	void *umsg = (void *)regs->regs[1];
#endif
	struct user_msghdr_head mh;
	struct iovec_head iov;
	struct nlmsghdr_head nlh;
	if (!bpf_probe_read_user(&mh, sizeof(mh), umsg) &&
	    !bpf_probe_read_user(&iov, sizeof(iov), mh.msg_iov) &&
	    iov.iov_len >= sizeof(nlh) &&
	    !bpf_probe_read_user(&nlh, sizeof(nlh), iov.iov_base)) {
		e->nlmsg_type = nlh.nlmsg_type;
		e->type_valid = 1;
	}
	bpf_ringbuf_submit(e, 0);
	return 0;
}

// The licence the kernel checks: this file's (see the top).
char LICENSE[] SEC("license") = "Dual MIT/GPL";
