//! What one write did to the ruleset, per table: chains added and removed, rules
//! added and removed per chain, chains rewritten with the same rules (no net
//! change), base-chain policies, rules in built-in (hook) chains. Pure.
//!
//! Two sources fill a [`ChangeSet`]: the netlink notifications of one nf_tables
//! transaction (via [`crate::state::NftState`], milliseconds after the commit), and
//! the semantic diff of two full dumps ([`ChangeSet::from_diff`], used for legacy
//! tables, resyncs and polls). Detection ([`crate::detect`]) reads only this type.

use plumb_ruleset::diff::Change;
use plumb_ruleset::owner::owner_name_of_chain;
use serde::Serialize;
use std::collections::BTreeMap;

/// A chain that appeared or went away, with the rules it held.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChainDelta {
    /// The chain's name.
    pub name: String,
    /// Rules it held when it was deleted, or holds once created (as the change set's
    /// source saw them).
    pub rules: usize,
}

/// A base-chain policy change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PolicyDelta {
    /// The base chain's name.
    pub chain: String,
    /// None: the base chain is new (its hook had no chain, so no verdict, before).
    pub from: Option<String>,
    /// The new policy (`ACCEPT`, `DROP`, or nft's `accept`, `drop`).
    pub to: String,
}

/// A rule added to or removed from a built-in (hook) chain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HookRule {
    /// The built-in chain (`PREROUTING`, `FORWARD`, ...).
    pub chain: String,
    /// True for a rule added, false for one removed.
    pub added: bool,
    /// Chain the rule jumps to, when known.
    pub jump: Option<String>,
    /// Its verdict or target extension (`accept`, `DNAT`), when known.
    pub verdict: Option<String>,
    /// Inserted ahead of existing rules (`-I`) rather than appended; None when unknown.
    pub inserted: Option<bool>,
    /// True when the chain held rules jumping to owned (kube-proxy, CNI) chains
    /// before this change, i.e. an inserted rule now runs before those hooks.
    pub ahead_of_owned_hooks: bool,
    /// The rule text, when the source is a dump.
    pub text: Option<String>,
}

/// The changes of one table.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TableChanges {
    /// `ip`, `ip6`, `inet`, ...
    pub family: String,
    /// The table's name (`nat`, `kube-proxy`).
    pub table: String,
    /// The table was created by this change.
    pub table_added: bool,
    /// The table was deleted by this change.
    pub table_removed: bool,
    /// Chains created.
    pub chains_added: Vec<ChainDelta>,
    /// Chains deleted.
    pub chains_removed: Vec<ChainDelta>,
    /// Rules added per surviving chain.
    pub rules_added: BTreeMap<String, usize>,
    /// Rules removed per surviving chain.
    pub rules_removed: BTreeMap<String, usize>,
    /// Rules per surviving chain after the change (for "flushed" vs "modified"): at
    /// least for every chain with rules removed and none added (the notification path
    /// fills only those: a 10k-service sync would otherwise name 40k chains once more).
    pub rules_after: BTreeMap<String, usize>,
    /// Surviving chains whose rules were all removed and the same rules added back
    /// in the same order (a restore of what was there): no net change; their rule
    /// counts. Not in `rules_added` or `rules_removed`, and their hook rules are not
    /// in `hook_rules`. Filled from notifications only ([`crate::state`]).
    pub rules_rewritten: BTreeMap<String, usize>,
    /// Base chains whose policy changed.
    pub policies: Vec<PolicyDelta>,
    /// Rules added to or removed from built-in chains, net of those removed and put
    /// back in the same change ([`net_hook_rules`]).
    pub hook_rules: Vec<HookRule>,
    /// Every rule of the table is gone while chains remain (`iptables -t nat -F`),
    /// or the table itself was deleted with rules in it.
    pub whole_table_flushed: bool,
}

impl TableChanges {
    /// Whether nothing changed in the table.
    pub fn is_empty(&self) -> bool {
        !self.table_added
            && !self.table_removed
            && self.chains_added.is_empty()
            && self.chains_removed.is_empty()
            && self.rules_added.is_empty()
            && self.rules_removed.is_empty()
            && self.rules_rewritten.is_empty()
            && self.policies.is_empty()
            && self.hook_rules.is_empty()
    }

    /// `nat` for ip tables, `ip6 nat`, `inet kube-proxy`: the name users know.
    pub fn label(&self) -> String {
        match self.family.as_str() {
            "ip" | "" => self.table.clone(),
            f => format!("{f} {}", self.table),
        }
    }
}

/// Everything one write (or one resync) changed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ChangeSet {
    /// One entry per table the write touched (tables it did not touch are absent).
    pub tables: Vec<TableChanges>,
}

impl ChangeSet {
    /// Whether no table changed.
    pub fn is_empty(&self) -> bool {
        self.tables.iter().all(TableChanges::is_empty)
    }

    /// Builds a change set from a semantic diff of two full dumps.
    /// `owned_hooks_before(table_label, chain)` tells whether a built-in chain held
    /// jumps to owned chains before (for "ahead of kube-proxy's hooks").
    pub fn from_diff(
        changes: &[Change],
        owned_hooks_before: &dyn Fn(&str, &str) -> bool,
    ) -> ChangeSet {
        let mut out: BTreeMap<String, TableChanges> = BTreeMap::new();
        for c in changes {
            let label = c.table().to_string();
            let t = out.entry(label.clone()).or_insert_with(|| {
                let (family, table) = match label.split_once(' ') {
                    Some((f, t)) => (f.to_string(), t.to_string()),
                    None => ("ip".to_string(), label.clone()),
                };
                TableChanges {
                    family,
                    table,
                    ..TableChanges::default()
                }
            });
            match c {
                Change::TableAdded { .. } => t.table_added = true,
                Change::TableRemoved { .. } => t.table_removed = true,
                Change::ChainAdded { chain, rules, .. } => t.chains_added.push(ChainDelta {
                    name: chain.clone(),
                    rules: *rules,
                }),
                Change::ChainRemoved { chain, rules, .. } => t.chains_removed.push(ChainDelta {
                    name: chain.clone(),
                    rules: *rules,
                }),
                Change::PolicyChanged {
                    chain, from, to, ..
                } => t.policies.push(PolicyDelta {
                    chain: chain.clone(),
                    from: Some(from.clone()),
                    to: to.clone(),
                }),
                Change::RuleAdded {
                    chain,
                    position,
                    rule,
                    ..
                }
                | Change::RuleRemoved {
                    chain,
                    position,
                    rule,
                    ..
                } => {
                    let added = matches!(c, Change::RuleAdded { .. });
                    let map = if added {
                        &mut t.rules_added
                    } else {
                        &mut t.rules_removed
                    };
                    *map.entry(chain.clone()).or_default() += 1;
                    if is_builtin_chain(chain) {
                        t.hook_rules.push(HookRule {
                            chain: chain.clone(),
                            added,
                            jump: jump_target(rule),
                            verdict: None,
                            inserted: Some(added && *position == 1),
                            ahead_of_owned_hooks: added
                                && *position == 1
                                && owned_hooks_before(&label, chain),
                            text: Some(rule.clone()),
                        });
                    }
                }
                Change::RuleMoved { .. } => {}
            }
        }
        ChangeSet {
            tables: out.into_values().collect(),
        }
    }
}

/// The net effect of one transaction on hook rules (`hooks`, in the order the
/// transaction made them):
/// - a rule jumping to chain J removed from chain C and a rule jumping to J added to
///   C cancel out, pair by pair, in order (the hook is still there): only a hook
///   removed and not put back is one less (unhooked);
/// - a rule appended to C before a jump to an owned chain was put back (a chain
///   rebuilt with something new on top) now runs ahead of that hook:
///   `ahead_of_owned_hooks`, as if it had been inserted there.
pub fn net_hook_rules(hooks: &mut Vec<HookRule>) {
    let key = |h: &HookRule| h.jump.as_ref().map(|j| (h.chain.clone(), j.clone()));
    // Per (chain, jump): rules removed and added; the pairs are the smaller count.
    let mut counts: BTreeMap<(String, String), (usize, usize)> = BTreeMap::new();
    for h in hooks.iter() {
        if let Some(k) = key(h) {
            let c = counts.entry(k).or_default();
            if h.added {
                c.1 += 1;
            } else {
                c.0 += 1;
            }
        }
    }
    counts.retain(|_, (removed, added)| {
        let pairs = (*removed).min(*added);
        (*removed, *added) = (pairs, pairs);
        pairs > 0
    });
    if counts.is_empty() {
        return;
    }
    let cancelled: Vec<bool> = hooks
        .iter()
        .map(|h| {
            let Some(c) = key(h).and_then(|k| counts.get_mut(&k)) else {
                return false;
            };
            let left = if h.added { &mut c.1 } else { &mut c.0 };
            let cancel = *left > 0;
            *left = left.saturating_sub(1);
            cancel
        })
        .collect();
    // Per chain, the position of the last owned hook put back: what was appended
    // before it is ahead of it.
    let mut last_put_back: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, h) in hooks.iter().enumerate() {
        if cancelled[i] && h.added && h.jump.as_deref().is_some_and(is_owned_chain) {
            last_put_back.insert(&h.chain, i);
        }
    }
    let ahead: Vec<bool> = hooks
        .iter()
        .enumerate()
        .map(|(i, h)| {
            !cancelled[i]
                && h.added
                && h.inserted == Some(false)
                && last_put_back.get(h.chain.as_str()).is_some_and(|&j| j > i)
        })
        .collect();
    let mut i = 0;
    hooks.retain_mut(|h| {
        let keep = !cancelled[i];
        h.ahead_of_owned_hooks |= ahead[i];
        i += 1;
        keep
    });
}

/// The built-in chains of iptables tables (the hook chains).
pub fn is_builtin_chain(name: &str) -> bool {
    matches!(
        name,
        "PREROUTING" | "INPUT" | "FORWARD" | "OUTPUT" | "POSTROUTING"
    )
}

/// `-j CHAIN` / `-g CHAIN` target of an iptables rule text, or `jump CHAIN` of nft.
pub fn jump_target(rule: &str) -> Option<String> {
    let mut words = rule.split_whitespace();
    while let Some(w) = words.next() {
        if matches!(w, "-j" | "-g" | "--jump" | "--goto" | "jump" | "goto") {
            return words.next().map(str::to_string);
        }
    }
    None
}

/// True when `chain` (a jump target) belongs to an owner (not built-in, not unknown).
pub fn is_owned_chain(chain: &str) -> bool {
    owner_name_of_chain(chain).is_some()
}

/// The changes from `old` to `new` (two full dumps), with rule counts after and
/// whole-table flushes filled in.
pub fn from_rulesets(old: &plumb_ruleset::Ruleset, new: &plumb_ruleset::Ruleset) -> ChangeSet {
    let diff = plumb_ruleset::diff::diff(old, new);
    let label_of = |t: &plumb_ruleset::Table| match (t.backend, t.family) {
        (plumb_ruleset::Backend::Nftables, f) => format!("{f} {}", t.name),
        (_, plumb_ruleset::Family::Ip6) => format!("ip6 {}", t.name),
        _ => t.name.to_string(),
    };
    let owned_hooks = |label: &str, chain: &str| {
        old.tables
            .iter()
            .filter(|t| label_of(t) == label)
            .filter_map(|t| t.chain(chain))
            .any(|c| {
                c.rules
                    .iter()
                    .any(|r| jump_target(&r.text).is_some_and(|j| is_owned_chain(&j)))
            })
    };
    let mut set = ChangeSet::from_diff(&diff, &owned_hooks);
    for tc in &mut set.tables {
        let find = |rs: &plumb_ruleset::Ruleset| {
            rs.tables
                .iter()
                .find(|t| label_of(t) == tc.label())
                .map(|t| {
                    (
                        t.rule_count(),
                        t.chains
                            .iter()
                            .map(|c| (c.name.to_string(), c.rules.len()))
                            .collect::<Vec<_>>(),
                    )
                })
        };
        let before = find(old);
        let after = find(new);
        if let Some((_, chains)) = &after {
            for (name, n) in chains {
                if tc.rules_added.contains_key(name) || tc.rules_removed.contains_key(name) {
                    tc.rules_after.insert(name.clone(), *n);
                }
            }
        }
        let had = before.as_ref().map(|b| b.0).unwrap_or(0);
        let has = after.as_ref().map(|a| a.0).unwrap_or(0);
        tc.whole_table_flushed = had > 0 && has == 0;
    }
    set
}
