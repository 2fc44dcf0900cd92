//! plumb-ruleset: a lossless model of a node's netfilter rulesets and the parsers
//! that build it from every format real nodes and support bundles contain.
//!
//! Pure crate: no IO, no clock, no processes. Callers hand in text; they get a
//! [`Ruleset`] plus [`Diagnostic`]s with line and column. See ARCHITECTURE.md.
//!
//! # Layers
//!
//! Modules depend only on the layers below them; nothing points back up (no module
//! cycles; `tests/layering.rs` checks the model's side of this):
//!
//! ```text
//! analyses   owner (who wrote a chain), diff (semantic), summary
//!               │ use the printer, the readers (format) and the model
//! printer    iptables::canonical: model -> iptables-save text
//! readers    format (detects the format, dispatches), iptables::{save, listing},
//!            nft::{text, json}, ipvs (ipvsadm, ipset list): text -> model + diagnostics
//!               │ use the model
//! model      model (Ruleset, Table, Chain, Rule) with the rule bodies it owns:
//!            model::xt (xtables rule index and word splitter), model::nft
//!            (statements, sets), model::listed (`-nvL` listing rules),
//!            model::ipvs (IPVS virtual services, ipset listings)
//!               │ uses
//! leaves     diagnostic, fasthash, parallel
//! ```
//!
//! The readers re-export the model types of their format (`nft::NftRule`,
//! `iptables::XtView`, `iptables::listing::ListedRule`) for callers' convenience; those
//! re-exports point down, from reader to model.

#![deny(missing_docs)]

pub mod diagnostic;
pub mod fasthash;
pub mod iptables;
pub mod ipvs;
pub mod model;
pub mod nft;

pub use diagnostic::{Diagnostic, InputError, Severity};
pub use model::{
    Backend, BaseChain, Chain, ChainRef, Completeness, Counters, Family, Hook, Location, Placed,
    Policy, Rule, RuleBody, RuleText, Ruleset, Source, SourceText, Table, TransferKind,
    position_at,
};
pub mod format;
pub mod owner;
pub mod parallel;
pub mod session;

pub use format::{Format, ParseOptions, Parsed, parse_bytes};
pub mod diff;
pub mod summary;
