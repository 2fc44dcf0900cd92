//! iptables (xtables) rules: the rule index, the line-format reader, the `-nvL`
//! listing reader and the canonical printer that reproduces `iptables-save` text.

pub mod canonical;
pub mod listing;
mod rule;
pub mod save;
pub mod words;

pub use rule::{
    IndexScratch, SpecProblem, TARGET_EXTENSIONS, XtBuf, XtCell, XtMatchView, XtMatchViewOf,
    XtOptionView, XtOptionViewOf, XtRule, XtTargetRef, XtTargetView, XtTargetViewOf, XtView,
    XtViewOf,
};
