//! The trace index: a ruleset compiled once for many traces.
//!
//! Chain names are resolved to ids, every rule is compiled into [`Item`]s, base
//! chains are ordered per hook by priority (iptables tables by their fixed
//! priorities, nft chains by theirs), and large chains get a dispatch table: rules
//! that only match one exact `destination + protocol + destination port` (kube-proxy's
//! KUBE-SERVICES) are found by hash; every other rule stays on a fallback list, and
//! the two lists are merged in rule order so first-match semantics are exact.

use crate::matches::{AddrMatch, Cond};
use crate::nft::{CompiledSet, Compiler};
use crate::targets::Action;
use plumb_ruleset::{Backend, Chain, Family, Hook, Policy, RuleBody, Ruleset, Table};
use std::collections::HashMap;
use std::net::IpAddr;

/// A compiled condition or action of a rule, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    Cond(Cond),
    Act(Action),
}

/// A compiled rule.
#[derive(Clone, Debug)]
pub struct CompiledRule {
    pub items: Box<[Item]>,
    /// Index of the rule in its chain's `rules` (position - 1).
    pub rule: u32,
}

/// The hooks plumb traces, in an array-friendly order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum HookId {
    Prerouting = 0,
    Input = 1,
    Forward = 2,
    Output = 3,
    Postrouting = 4,
}

impl HookId {
    pub fn name(self) -> &'static str {
        match self {
            HookId::Prerouting => "PREROUTING",
            HookId::Input => "INPUT",
            HookId::Forward => "FORWARD",
            HookId::Output => "OUTPUT",
            HookId::Postrouting => "POSTROUTING",
        }
    }

    fn from_hook(h: &Hook) -> Option<HookId> {
        Some(match h {
            Hook::Prerouting => HookId::Prerouting,
            Hook::Input => HookId::Input,
            Hook::Forward => HookId::Forward,
            Hook::Output => HookId::Output,
            Hook::Postrouting => HookId::Postrouting,
            _ => return None,
        })
    }

    /// NAT at this hook rewrites the destination (true) or the source (false).
    pub fn is_dst_nat(self) -> bool {
        matches!(self, HookId::Prerouting | HookId::Output)
    }
}

/// A base chain attached to a hook.
#[derive(Clone, Debug)]
pub struct BaseRef {
    pub chain: u32,
    pub priority: i32,
    pub nat: bool,
}

/// Exact-key dispatch of a large chain.
#[derive(Clone, Debug, Default)]
pub struct Dispatch {
    pub exact: HashMap<(IpAddr, u8, u16), Vec<u32>>,
    pub rest: Vec<u32>,
}

/// A compiled chain.
#[derive(Debug)]
pub struct CompiledChain<'r> {
    pub table: u32,
    pub chain: &'r Chain,
    pub rules: Vec<CompiledRule>,
    pub dispatch: Option<Dispatch>,
}

/// Chains with at least this many rules get a dispatch table.
pub const DISPATCH_MIN_RULES: usize = 16;

/// How to build the index.
#[derive(Clone, Copy, Debug)]
pub struct IndexOptions {
    /// Build dispatch tables (off: a plain linear walk, for comparison).
    pub dispatch: bool,
}

impl Default for IndexOptions {
    fn default() -> Self {
        IndexOptions { dispatch: true }
    }
}

/// A ruleset compiled for tracing. Borrows the ruleset for rule texts.
#[derive(Debug)]
pub struct Index<'r> {
    pub ruleset: &'r Ruleset,
    pub tables: Vec<&'r Table>,
    pub chains: Vec<CompiledChain<'r>>,
    pub sets: Vec<CompiledSet>,
    /// Base chains per [v4, v6] per hook, ordered by priority.
    hooks: [[Vec<BaseRef>; 5]; 2],
}

/// Fixed priorities of iptables tables (include/uapi/linux/netfilter_ipv4.h).
fn iptables_priority(table: &str, hook: HookId) -> i32 {
    match table {
        "raw" => -300,
        "mangle" => -150,
        "nat" if hook.is_dst_nat() => -100,
        "nat" => 100,
        "security" => 50,
        _ => 0,
    }
}

/// nft priority text: a number, a keyword, or `keyword +/- N`.
fn nft_priority(s: &str) -> i32 {
    let s = s.trim();
    let base = |k: &str| -> Option<i32> {
        Some(match k {
            "raw" => -300,
            "mangle" => -150,
            "dstnat" => -100,
            "filter" => 0,
            "security" => 50,
            "srcnat" => 100,
            n => n.parse().ok()?,
        })
    };
    if let Some(v) = base(s) {
        return v;
    }
    let words: Vec<&str> = s.split_whitespace().collect();
    match words.as_slice() {
        [k, "+", n] => base(k).unwrap_or(0) + n.parse::<i32>().unwrap_or(0),
        [k, "-", n] => base(k).unwrap_or(0) - n.parse::<i32>().unwrap_or(0),
        _ => 0,
    }
}

fn families(f: Family) -> &'static [usize] {
    match f {
        Family::Ip => &[0],
        Family::Ip6 => &[1],
        Family::Inet => &[0, 1],
        _ => &[],
    }
}

impl<'r> Index<'r> {
    pub fn build(ruleset: &'r Ruleset) -> Index<'r> {
        Index::build_with(ruleset, IndexOptions::default())
    }

    pub fn build_with(ruleset: &'r Ruleset, options: IndexOptions) -> Index<'r> {
        let mut index = Index {
            ruleset,
            tables: Vec::new(),
            chains: Vec::new(),
            sets: Vec::new(),
            hooks: Default::default(),
        };
        for table in &ruleset.tables {
            if families(table.family).is_empty() {
                continue;
            }
            let t = index.tables.len() as u32;
            index.tables.push(table);
            let first = index.chains.len() as u32;
            let mut names: HashMap<&str, u32> = HashMap::with_capacity(table.chains.len());
            for (i, c) in table.chains.iter().enumerate() {
                names.entry(&c.name).or_insert(first + i as u32);
            }
            let resolve = |n: &str| names.get(n).copied();
            let mut set_cache = HashMap::new();
            let iptables = table.backend != Backend::Nftables;
            for (ci, chain) in table.chains.iter().enumerate() {
                let mut rules = Vec::with_capacity(chain.rules.len());
                for (ri, rule) in chain.rules.iter().enumerate() {
                    let items: Vec<Item> = match &rule.body {
                        RuleBody::Xt(_) => {
                            let Some(view) = rule.xt() else { continue };
                            let mut items: Vec<Item> = crate::matches::xt::compile(&view)
                                .into_iter()
                                .map(Item::Cond)
                                .collect();
                            if let Some(target) = view.target() {
                                items
                                    .push(Item::Act(crate::targets::compile_xt(&target, &resolve)));
                            }
                            items
                        }
                        RuleBody::Nft(n) => {
                            let mut compiler = Compiler {
                                table_sets: &table.sets,
                                resolve: &resolve,
                                sets: &mut index.sets,
                                cache: &mut set_cache,
                            };
                            compiler.compile(n)
                        }
                        RuleBody::Approximate(_) => vec![Item::Act(Action::Unknown(format!(
                            "{} (read from a lossy listing; its exact matches are unknown)",
                            rule.text
                        )))],
                    };
                    rules.push(CompiledRule {
                        items: items.into_boxed_slice(),
                        rule: ri as u32,
                    });
                }
                let dispatch = (options.dispatch && rules.len() >= DISPATCH_MIN_RULES)
                    .then(|| build_dispatch(&rules));
                let id = first + ci as u32;
                if let Some(base) = &chain.base
                    && let Some(hook) = HookId::from_hook(&base.hook)
                {
                    let (priority, nat) = if iptables {
                        (iptables_priority(&table.name, hook), &*table.name == "nat")
                    } else {
                        (
                            base.priority.as_deref().map(nft_priority).unwrap_or(0),
                            base.chain_type.as_deref() == Some("nat"),
                        )
                    };
                    for &fam in families(table.family) {
                        index.hooks[fam][hook as usize].push(BaseRef {
                            chain: id,
                            priority,
                            nat,
                        });
                    }
                }
                index.chains.push(CompiledChain {
                    table: t,
                    chain,
                    rules,
                    dispatch,
                });
            }
        }
        for fam in &mut index.hooks {
            for list in fam.iter_mut() {
                list.sort_by_key(|b| b.priority);
            }
        }
        index
    }

    /// Base chains of a hook for IPv4 (`v6 == false`) or IPv6, by priority.
    pub fn bases(&self, v6: bool, hook: HookId) -> &[BaseRef] {
        &self.hooks[v6 as usize][hook as usize]
    }

    pub fn chain(&self, id: u32) -> &CompiledChain<'r> {
        &self.chains[id as usize]
    }

    pub fn table_of(&self, chain: u32) -> &'r Table {
        self.tables[self.chains[chain as usize].table as usize]
    }

    /// Tables a trace of this family needs but the ruleset lacks. With iptables
    /// tables present, `filter` and `nat` must both be there (a dump of one table
    /// says nothing about the other); with none at all, every table is missing.
    pub fn missing_tables(&self, v6: bool) -> Vec<String> {
        let fam = if v6 { Family::Ip6 } else { Family::Ip };
        let relevant: Vec<&&Table> = self
            .tables
            .iter()
            .filter(|t| t.family == fam || t.family == Family::Inet)
            .collect();
        if relevant.is_empty() {
            return vec![format!("any {} table", if v6 { "IPv6" } else { "IPv4" })];
        }
        let xt: Vec<&&&Table> = relevant
            .iter()
            .filter(|t| t.backend != Backend::Nftables)
            .collect();
        if xt.is_empty() {
            return Vec::new();
        }
        ["filter", "nat"]
            .iter()
            .filter(|n| !xt.iter().any(|t| &*t.name == **n))
            .map(|n| format!("{} {n}", fam.as_str()))
            .collect()
    }

    /// The policy of a base chain (`None` for user chains).
    pub fn policy(&self, chain: u32) -> Option<&'r Policy> {
        self.chains[chain as usize].chain.policy()
    }
}

/// The exact `(dst, proto, dport)` a rule requires, if its leading conditions pin all three.
fn exact_key(items: &[Item]) -> Option<(IpAddr, u8, u16)> {
    let (mut dst, mut proto, mut port) = (None, None, None);
    for item in items {
        let Item::Cond(c) = item else { break };
        match c {
            Cond::Dst(AddrMatch::Net(n), false) if n.is_host() => dst = Some(n.addr),
            Cond::Proto(p, false) | Cond::ModuleProto(p) => {
                if proto.is_some_and(|q| q != *p) {
                    return None;
                }
                proto = Some(*p);
            }
            Cond::Dport(r, false) if r.len() == 1 && r[0].from == r[0].to => port = Some(r[0].from),
            _ => {}
        }
    }
    Some((dst?, proto?, port?))
}

fn build_dispatch(rules: &[CompiledRule]) -> Dispatch {
    let mut d = Dispatch::default();
    for (i, r) in rules.iter().enumerate() {
        match exact_key(&r.items) {
            Some(k) => d.exact.entry(k).or_default().push(i as u32),
            None => d.rest.push(i as u32),
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities() {
        assert_eq!(nft_priority("dstnat - 10"), -110);
        assert_eq!(nft_priority("srcnat"), 100);
        assert_eq!(nft_priority("-90"), -90);
        assert_eq!(nft_priority("filter + 5"), 5);
    }
}
