//! Native nftables readers: the `nft list ruleset` text reader ([`parse_text`]), which
//! also reads `nft -f` scripts, and the `nft -j list ruleset` JSON reader
//! ([`parse_json`]).
//!
//! Both build the nft part of the model, [`crate::model::nft`] (rules as statement
//! sequences, sets and maps); its types are re-exported here, where callers have always
//! found them. Readers depend on the model, never the reverse.

pub mod iptables_nft;
mod json;
pub(crate) mod text;

pub use json::parse_json;
pub use text::{
    parse_text, parse_text_holding, parse_text_streamed, parse_text_translated,
    parse_text_translated_owned,
};

pub use crate::model::nft::{
    NatKind, NftRule, NftSet, Op, SetElement, SetKind, Statement, StatementKind, Value, Verdict,
    VerdictMapRef, table_chain_references,
};
