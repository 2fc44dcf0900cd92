//! Native nftables: `nft list ruleset` text and `nft -j list ruleset` JSON readers,
//! and the rule/set model they produce.

use crate::model::ChainRef;
use serde::Serialize;

/// A native nft rule: statements in order. TODO(issue 2): full expression model.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NftRule {
    pub statements: Vec<String>,
}

impl NftRule {
    pub fn chain_references(&self) -> Vec<ChainRef<'_>> {
        Vec::new()
    }
    pub fn comments(&self) -> impl Iterator<Item = &str> {
        std::iter::empty()
    }
}

/// An nft set or map with its elements.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NftSet {
    pub name: Box<str>,
}

/// Reads `nft list ruleset` text. TODO(issue 2): replaced by the nft reader.
pub fn parse_text(_text: &str) -> crate::Ruleset {
    crate::Ruleset::default()
}

/// Reads `nft -j list ruleset` JSON. TODO(issue 2): replaced by the nft reader.
pub fn parse_json(_text: &str) -> crate::Ruleset {
    crate::Ruleset::default()
}
