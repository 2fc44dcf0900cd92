//! plumb-findings: the findings layer. Every command that judges a node emits
//! [`Finding`]s (a stable id, a status, a severity, the evidence quoted with its source
//! and line, why it matters, what to do and what not to do); a diagnosis adds a
//! [`Conclusion`]. This crate owns those types, the order they are reported in
//! ([`sort`], [`sort_with`]) and the one text renderer ([`render`]). JSON is their serde
//! form. Commands choose only the layout and the format.
//!
//! Pure leaf crate: no IO, depends on nothing of plumb's.

#![deny(missing_docs)]

pub mod conclusion;
pub mod finding;
pub mod inbound;
pub mod order;
pub mod render;

pub use conclusion::{Conclusion, Confidence};
pub use finding::{Evidence, Finding, MAX_EVIDENCE, Severity, Status};
pub use inbound::Inbound;
pub use order::{sort, sort_with};
pub use render::Style;
