//! `plumb observe`, first part: the connections a node's netfilter lets through, as
//! conntrack reports them — each new connection and each one that ends, with its
//! original and reply tuples, so a ClusterIP connection shows the endpoint kube-proxy's
//! DNAT chose.
//!
//! - [`conntrack`]: the pure decoder of ctnetlink event messages into [`Flow`]s;
//! - [`listener`]: a read-only subscription to conntrack's NEW and DESTROY multicast
//!   groups in one network namespace (it never sends a request to the kernel).
//!
//! Not here yet: drops (the eBPF kfree_skb program), the rule that dropped a packet,
//! UPDATE events and byte counters, names from the service map.

#![deny(missing_docs)]

pub mod conntrack;
pub mod listener;

pub use conntrack::{Event, Flow, Tuple};
