//! `plumb observe`'s library: what a node's netfilter lets through and what the
//! kernel drops, in one network namespace.
//!
//! - [`conntrack`]: the pure decoder of ctnetlink event messages into [`Flow`]s;
//! - [`listener`]: a read-only subscription to conntrack's multicast groups in one
//!   network namespace (it never sends a request to the kernel);
//! - [`reasons`]: the names of the kernel's drop reasons, from its BTF (pure);
//! - [`drops`]: the eBPF program on kfree_skb that reports drops with their reason;
//! - [`attribution`]: the netfilter rule that dropped, from counter deltas (pure; its
//!   netlink plan reads only the counters of the chains that can drop);
//! - [`names`]: Service names for addresses, from kube-proxy's rules, and Cilium's
//!   load-balancer frontends (pure);
//! - [`accounting`]: whether conntrack counts bytes and keeps timestamps (read; set
//!   only when asked, and restored, after a SIGKILL at the next start);
//! - [`trace`]: nftrace confirmation of an attribution (writes one table of its own;
//!   lab or non-host namespaces only).

#![deny(missing_docs)]

pub mod accounting;
pub mod attribution;
pub mod conntrack;
pub mod drops;
pub mod listener;
pub mod names;
pub mod reasons;
pub mod trace;

pub use conntrack::{Event, Flow, Tuple};
