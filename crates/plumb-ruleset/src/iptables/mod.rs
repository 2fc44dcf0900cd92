//! iptables (xtables) readers and printer: the line-format reader (`iptables-save`,
//! restore payloads, `-S`), the `-nvL` listing reader and the canonical printer that
//! reproduces `iptables-save` text.
//!
//! The rule index and its views ([`XtView`], [`XtBuf`], ...) and the word splitter
//! ([`words`]) belong to the model ([`crate::model::xt`]); they are re-exported here,
//! where callers have always found them. Readers depend on the model, never the reverse.

pub mod canonical;
mod chain_index;
pub mod listing;
pub mod save;
pub mod tables;

pub use crate::model::xt::words;
pub use crate::model::xt::{
    ADDR_TYPES, IndexScratch, SpecProblem, TARGET_EXTENSIONS, XtBuf, XtCell, XtIndexBuf,
    XtMatchView, XtMatchViewOf, XtOptionView, XtOptionViewOf, XtRule, XtTargetRef, XtTargetView,
    XtTargetViewOf, XtView, XtViewOf,
};
