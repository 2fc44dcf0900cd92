//! plumb-ruleset: a lossless model of a node's netfilter rulesets and the parsers
//! that build it from every format real nodes and support bundles contain.
//!
//! Pure crate: no IO, no clock, no processes. Callers hand in text; they get a
//! [`Ruleset`] plus [`Diagnostic`]s with line and column. See ARCHITECTURE.md.

pub mod diagnostic;
pub mod fasthash;
pub mod iptables;
pub mod model;
pub mod nft;

pub use diagnostic::{Diagnostic, InputError, Severity};
pub use model::*;
pub mod format;
pub mod owner;
pub mod parallel;

pub use format::{Format, ParseOptions, Parsed, parse_bytes};
pub mod diff;
pub mod summary;
