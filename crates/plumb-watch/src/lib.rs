//! plumb-watch: who is changing the firewall, the moment it happens.
//!
//! An edge crate. Sources: nftables netlink notifications in the watched network
//! namespace ([`nft_events`], NEWGEN names the writer), the audit multicast group
//! ([`audit`], read-only: exe/ppid/argv of the writer, and the only trigger for
//! iptables-legacy, see [`legacy`]), and /proc ([`actor`]). Pure parts, testable
//! without a kernel: the decoders (on [`plumb_os::netlink`]'s framing), [`state`] (chains per table kept
//! from notifications), [`changes`], [`detect`] (foreign changes, owner changes,
//! policy changes, hook insertions, fights) and [`event`] (the JSON line contract).
//! [`listener`] is the thread that reads every notification, keeps the state and names
//! each transaction's writer (before its NEWGEN with the eBPF probe's
//! [`pending_sends`]). [`watcher`] wires them;
//! [`metrics`] keeps Prometheus metrics and [`http`] serves them; [`impersonate`] runs iptables under
//! another process name for tests and the lab. [`writer_probe`] (eBPF, optional)
//! names the writer when it sends its batch, before any notification; [`probe_handoff`]
//! loads it in a helper process so its BTF parse stays out of watch's memory.
//!
//! Read-only: plumb never sends a request that changes netfilter or audit state. It
//! only listens on multicast groups, sends GET requests (the generation, the table
//! list) and runs dump commands. The eBPF probe observes syscalls; it changes nothing.

#![deny(missing_docs)]

pub mod actor;
pub mod audit;
pub mod audit_control;
pub mod baseline;
pub mod chain_name;
pub mod chain_table;
pub mod changes;
pub mod detect;
pub mod event;
pub mod http;
pub mod impersonate;
pub mod legacy;
pub mod listener;
mod messages;
pub mod metrics;
pub mod nft_events;
pub mod pending_sends;
pub mod probe_handoff;
pub mod signals;
pub mod state;
pub mod watcher;
pub mod writer_probe;

pub use actor::Actor;
pub use detect::{Detection, Kind};
pub use event::Event;
pub use watcher::{Summary, WatchError, WatchOptions, Watcher, watch};
