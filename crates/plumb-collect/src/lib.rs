//! plumb-collect: the edge that reads a node — this machine, a network namespace with a
//! file tree standing for a node, or a support bundle ([`node`]) — into rulesets
//! ([`rulesets`]) and [`plumb_facts::Facts`] ([`facts`]), and writes plumb's own
//! redacted bundle ([`bundle_writer`]).
//!
//! Everything here is read-only towards the node: plumb only runs dump and status
//! commands (`*-save`, `nft list`, `systemctl`, `ss`) and reads files and /proc. Every
//! external command goes through one [`Runner`] so tests can substitute it, and every
//! command is bounded by a timeout.

#![deny(missing_docs)]

pub mod archive;
pub mod bundle_writer;
pub mod cilium;
pub mod facts;
pub mod new_file;
pub mod nft_netlink;
pub mod node;
pub mod privilege;
pub mod probe;
pub mod rulesets;
mod tempdir;
pub mod xt_legacy;

pub use rulesets::{Collected, ToolOutcome, collect_live_rulesets, collect_rulesets};
