//! Reader for the `iptables -nvL` / `-vnxL` listing format (sosreport, Rancher's collector).
//!
//! TODO(issue 2): full reader; this placeholder keeps the model's shape.

use crate::model::{ChainRef, TransferKind};

/// A rule read from a listing: columns plus the translated option text, approximate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListedRule {
    pub target: Option<String>,
    pub comment: Option<String>,
}

impl ListedRule {
    pub fn chain_reference(&self) -> Option<ChainRef<'_>> {
        let t = self.target.as_deref()?;
        (!super::TARGET_EXTENSIONS.contains(&t)).then_some(ChainRef {
            kind: TransferKind::Jump,
            chain: t,
        })
    }
}

/// Reads a listing. TODO(issue 2): replaced by the listing reader.
pub fn parse(_text: &str, _family: crate::Family, _default_table: Option<&str>) -> crate::Ruleset {
    crate::Ruleset::default()
}
