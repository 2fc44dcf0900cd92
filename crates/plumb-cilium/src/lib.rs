//! Cilium's service load balancer as plumb reads it, without a Cilium agent.
//!
//! A kube-proxy-free node has no KUBE-* rules: Cilium's eBPF programs translate
//! Service addresses with three pinned BPF hash maps (under
//! `/sys/fs/bpf/tc/globals/`): *services* (one entry per frontend and backend slot),
//! *backends* (backend id -> address) and *reverse NAT* (rev-NAT id -> frontend).
//! This crate turns their raw entries, or the text `cilium-dbg bpf lb list` prints
//! from them, into [`Frontend`]s: the same "address -> endpoints" map `plumb services`
//! shows for kube-proxy, with the inconsistencies a healthy agent never leaves (a
//! slot naming a missing backend, a frontend with no backends).
//!
//! - [`agent`]: what the agent says itself (`cilium-dbg status`, `service list -o json`).
//! - [`conflicts`]: what on the node a move runs into (tunnel ports, CIDR overlaps,
//!   hostPort users, NetworkPolicies in use).
//! - [`hubble`]: Hubble's flows (a sysdump's `hubble-flows-*.json`) summed up: the
//!   drops by reason and destination.
//! - [`config`]: the RKE2 and Helm configuration derived from the node's own facts.
//! - [`layout`]: the maps' key and value layouts per Cilium version, decoded from and
//!   encoded to bytes (the encoder serves tests and the lab, which fills real maps).
//! - [`lbmap`]: raw entries -> frontends, with the problems found on the way.
//! - [`lb_list`]: the `cilium-dbg bpf lb list` text (sysdumps, support tickets) ->
//!   frontends.
//! - [`service_list`]: `cilium-dbg service list`, the agent's own view, to compare
//!   with the maps.
//! - [`migration`]: kube-proxy's Services before the move against Cilium's maps now.
//! - [`preflight`]: before installing, can this kernel run Cilium with kube-proxy
//!   replacement (release, configuration, BTF, BPF types, mounts)?
//! - [`verify`]: after a migration, is the node kube-proxy-free and the old CNI gone,
//!   and do the maps hold consistent Services (findings and a verdict).
//!
//! Layout facts (sizes, byte orders, flag bits per version) come from Cilium's
//! `bpf/lib/common.h` / `lb.h` and `pkg/loadbalancer`; each type cites its fields.
//! Pure: no IO; reading the pinned maps is plumb-collect's job (through plumb-os).

#![deny(missing_docs)]

pub mod agent;
pub mod config;
pub mod conflicts;
pub mod hubble;
pub mod layout;
pub mod lb_list;
pub mod lbmap;
pub mod migration;
pub mod preflight;
pub mod service_list;
pub mod verify;

pub use lbmap::{BackendRef, Frontend, FrontendKind, LbMaps, Problem};
