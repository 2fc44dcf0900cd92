//! plumb-os: the edge where plumb touches the operating system to read state.
//!
//! - [`netns`]: one naming rule for network namespaces, entering one for exactly one
//!   operation (a short-lived thread, or a child before exec), private namespaces for
//!   tests and the lab;
//! - [`runner`]: external commands, optionally inside a namespace, each bounded by a
//!   deadline, behind a [`runner::Runner`] trait tests can substitute;
//! - [`netlink`]: netlink message and attribute framing, decoded defensively;
//! - [`nftables`]: nf_tables GET dumps (tables, chains, rules chain by chain, sets,
//!   generation) in a namespace, handed on as the kernel's messages;
//! - [`bpf`]: pinned BPF maps opened read-only and dumped (Cilium's LB maps);
//! - [`xtables`]: the legacy iptables tables of a namespace through getsockopt, only
//!   those the namespace lists (asking for another would create it);
//! - [`process`]: whether a process recorded earlier still runs (leftovers of a killed run).
//!
//! The rules each module keeps: plumb's own threads never change namespace (a
//! namespace is entered on a short-lived thread, [`netns::on_thread`], or in a child
//! before exec); every command has a deadline and its pipes are drained on threads;
//! the netlink framing never trusts a length field; [`nftables`] sends GET requests
//! only (its rule dump runs on up to 4 sockets on threads that take chains in batches
//! while the chain dump still runs, since the kernel restarts that dump's walk at each
//! batch); [`bpf`] issues only OBJ_GET, GET_INFO, GET_NEXT_KEY and LOOKUP; [`xtables`]
//! asks only for the tables /proc lists, with bounded sizes.
//!
//! Nothing here writes to the firewall: callers decide what they run, and plumb only
//! runs dump commands.

#![deny(missing_docs)]

pub mod bpf;
pub mod bpf_error;
pub mod netlink;
pub mod netns;
pub mod nftables;
pub mod process;
pub mod runner;
pub mod xtables;
