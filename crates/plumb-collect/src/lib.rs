//! plumb-collect: the edge that reads the live firewall.
//!
//! Everything here is read-only: plumb only runs dump commands (`*-save`, `nft
//! list`) and reads /proc. Every external command goes through one [`Runner`]
//! so tests can substitute it, and every command is bounded by a timeout.

pub mod archive;
pub mod bundle_writer;
pub mod facts;
pub mod new_file;
pub mod nft_netlink;
pub mod node;
pub mod privilege;
pub mod probe;
pub mod rulesets;
mod tempdir;

/// The OS edge collect reads through (plumb-os), re-exported for its callers.
pub use plumb_os::{netns, runner};

pub use rulesets::{Collected, ToolOutcome, collect_live_rulesets, collect_rulesets};
pub use runner::{CommandOutput, Runner, SystemRunner};
