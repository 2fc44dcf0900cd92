//! The summary `plumb ruleset show|parse` prints: backends, tables, chains and
//! rules per owner, and problems. Its JSON shape is a documented contract
//! (README "JSON output"): `tables[]`, `owners` (chains per owner), `diagnostics[]`.

use crate::diagnostic::Diagnostic;
use crate::model::{Backend, Completeness, Ruleset};
use crate::owner;
use serde::Serialize;
use std::collections::BTreeMap;

/// One table's size.
#[derive(Clone, Debug, Serialize)]
pub struct TableSummary {
    /// Address family as nft spells it (`ip`, `ip6`, `inet`).
    pub family: String,
    /// Table name (`nat`, `filter`, `kube-proxy`).
    pub name: String,
    /// Which kernel interface holds the table.
    pub backend: Backend,
    /// Chains declared in the table, built-in chains included.
    pub chains: usize,
    /// Rules in all its chains.
    pub rules: usize,
}

/// What a ruleset holds, for people and scripts.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// The distinct backends of the tables, sorted (empty for a ruleset with no tables).
    pub backends: Vec<Backend>,
    /// Whether absence in this ruleset means absence on the node.
    pub completeness: Completeness,
    /// Rules come from a lossy listing (`iptables -nvL`).
    pub approximate: bool,
    /// One entry per table, in input order.
    pub tables: Vec<TableSummary>,
    /// Chains per owner.
    pub owners: BTreeMap<String, usize>,
    /// Rules per owner.
    pub owner_rules: BTreeMap<String, usize>,
    /// IPVS virtual services read (`ipvsadm -ln`); absent from JSON when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub ipvs_virtual_services: usize,
    /// ipsets read (`ipset list`); absent from JSON when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub ipsets: usize,
    /// Every diagnostic of the read, in input order.
    pub diagnostics: Vec<Diagnostic>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Summarises a parsed ruleset: per-table sizes, owners' chain and rule counts (from
/// [`crate::owner`]), and its diagnostics.
pub fn summarize(ruleset: &Ruleset) -> Summary {
    let mut backends: Vec<Backend> = ruleset.tables.iter().map(|t| t.backend).collect();
    backends.sort();
    backends.dedup();
    let counts = owner::count(ruleset);
    Summary {
        backends,
        completeness: ruleset.completeness,
        approximate: ruleset.approximate,
        tables: ruleset
            .tables
            .iter()
            .map(|t| TableSummary {
                family: t.family.to_string(),
                name: t.name.to_string(),
                backend: t.backend,
                chains: t.chains.len(),
                rules: t.rule_count(),
            })
            .collect(),
        owners: counts.chains,
        owner_rules: counts.rules,
        ipvs_virtual_services: ruleset.ipvs.len(),
        ipsets: ruleset.ipsets.len(),
        diagnostics: ruleset.diagnostics.clone(),
    }
}
