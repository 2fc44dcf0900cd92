//! The chains plumb believes each nf_tables table holds, kept current from netlink
//! notifications, so one transaction's messages become a [`ChangeSet`] without
//! re-reading the ruleset. Pure.
//!
//! Seeded from a full dump ([`NftState::from_ruleset`]) and re-seeded after every
//! gap. Only what detection needs is kept: per chain its rule count, whether it is
//! a base chain and its policy, and for base chains how many rules jump to owned
//! chains (kube-proxy's and the CNI's hooks). Net effects are computed per
//! transaction: a chain flushed and refilled by kube-proxy's `iptables-restore`
//! shows as N rules removed and N added, a chain deleted and re-created as both.

use crate::changes::{ChainDelta, ChangeSet, HookRule, PolicyDelta, TableChanges, is_owned_chain};
use crate::nft_events::{Batch, NftEvent, Op, family_name};
use plumb_ruleset::{Backend, Family, Ruleset};
// Fx hashing: chain names come from the kernel, written by root; SipHash was a third
// of the time spent applying a 10k-service sync.
use plumb_ruleset::fasthash::FastMap as HashMap;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct ChainState {
    rules: usize,
    base: bool,
    policy: Option<u32>,
    /// Base chains: rules jumping to owned chains.
    owned_hooks: usize,
}

#[derive(Clone, Debug, Default)]
struct TableState {
    chains: HashMap<String, ChainState>,
}

/// Tables of one network namespace, keyed by (NFPROTO family, name).
#[derive(Clone, Debug, Default)]
pub struct NftState {
    tables: HashMap<(u8, String), TableState>,
}

/// `NFPROTO_*` code of a model family.
pub fn family_code(f: Family) -> u8 {
    match f {
        Family::Inet => 1,
        Family::Ip => 2,
        Family::Arp => 3,
        Family::Netdev => 5,
        Family::Bridge => 7,
        Family::Ip6 => 10,
        _ => 0,
    }
}

fn policy_code(p: &plumb_ruleset::Policy) -> Option<u32> {
    match p.as_iptables() {
        "ACCEPT" => Some(1),
        "DROP" => Some(0),
        _ => None,
    }
}

fn policy_name(code: u32) -> &'static str {
    match code {
        0 => "DROP",
        1 => "ACCEPT",
        _ => "OTHER",
    }
}

impl NftState {
    /// Seeds from a full dump: its iptables-nft and native nftables tables.
    pub fn from_ruleset(rs: &Ruleset) -> NftState {
        let mut s = NftState::default();
        for t in rs
            .tables
            .iter()
            .filter(|t| matches!(t.backend, Backend::IptablesNft | Backend::Nftables))
        {
            let ts = s
                .tables
                .entry((family_code(t.family), t.name.to_string()))
                .or_default();
            for c in &t.chains {
                let owned_hooks = c
                    .rules
                    .iter()
                    .filter(|r| {
                        crate::changes::jump_target(&r.text).is_some_and(|j| is_owned_chain(&j))
                    })
                    .count();
                ts.chains.insert(
                    c.name.to_string(),
                    ChainState {
                        rules: c.rules.len(),
                        base: c.base.is_some(),
                        policy: c.policy().and_then(policy_code),
                        owned_hooks,
                    },
                );
            }
        }
        s
    }

    /// Number of chains known in table (family, name).
    pub fn chain_count(&self, family: u8, table: &str) -> usize {
        self.tables
            .get(&(family, table.to_string()))
            .map_or(0, |t| t.chains.len())
    }

    /// Chain names per table (for the chains-per-owner gauge).
    pub fn chain_names(&self) -> impl Iterator<Item = &str> {
        self.tables
            .values()
            .flat_map(|t| t.chains.keys().map(String::as_str))
    }

    /// Applies one transaction and returns what it changed.
    pub fn apply(&mut self, batch: &Batch) -> ChangeSet {
        let mut t = Transaction::default();
        for m in &batch.messages {
            t.push(self, &m.as_event());
        }
        t.finish(self)
    }
}

/// What one transaction did to one chain.
#[derive(Default)]
struct Touched {
    /// State before the transaction (None: did not exist).
    before: Option<ChainState>,
    added: usize,
    removed: usize,
}

#[derive(Default)]
struct Acc {
    table_existed: bool,
    table_exists: bool,
    chains: HashMap<String, Touched>,
    hooks: Vec<HookRule>,
    rules_before: usize,
}

/// One nf_tables transaction being applied, message by message, as notifications
/// arrive (so the work overlaps with receiving them); [`Transaction::finish`] at
/// NEWGEN gives its net effect. Hot path (a 10k-service sync is ~150k messages): no
/// allocation per message except for chain names first seen in the transaction, and
/// three hash lookups (table, touched chain, chain state).
#[derive(Default)]
pub struct Transaction {
    /// Per table, in order of first appearance (a transaction touches few tables).
    accs: Vec<((u8, String), Acc)>,
    /// Index in `accs` of the table of the previous message.
    current: Option<usize>,
    messages: usize,
}

impl Transaction {
    /// Messages applied so far.
    pub fn len(&self) -> usize {
        self.messages
    }

    pub fn is_empty(&self) -> bool {
        self.messages == 0
    }

    fn table_index(&mut self, state: &NftState, family: u8, table: &str) -> usize {
        if let Some(i) = self.current
            && let Some(((f, t), _)) = self.accs.get(i)
            && *f == family
            && t == table
        {
            return i;
        }
        let i = match self
            .accs
            .iter()
            .position(|((f, t), _)| *f == family && t == table)
        {
            Some(i) => i,
            None => {
                let key = (family, table.to_string());
                let t = state.tables.get(&key);
                let acc = Acc {
                    table_existed: t.is_some(),
                    table_exists: t.is_some(),
                    rules_before: t.map_or(0, |t| t.chains.values().map(|c| c.rules).sum()),
                    ..Acc::default()
                };
                self.accs.push((key, acc));
                self.accs.len() - 1
            }
        };
        self.current = Some(i);
        i
    }

    /// Applies one notification to `state`, remembering what it was before.
    pub fn push(&mut self, state: &mut NftState, m: &NftEvent<'_>) {
        let (family, table) = match *m {
            NftEvent::Table { family, name, .. } => (family, name),
            NftEvent::Chain { family, table, .. } | NftEvent::Rule { family, table, .. } => {
                (family, table)
            }
            _ => return,
        };
        self.messages += 1;
        let i = self.table_index(state, family, table);
        let Some((key, a)) = self.accs.get_mut(i) else {
            return;
        };
        if matches!(m, NftEvent::Table { op: Op::Del, .. }) {
            if let Some(t) = state.tables.remove(&*key) {
                for (name, c) in t.chains {
                    a.chains.entry(name).or_insert_with(|| Touched {
                        before: Some(c),
                        ..Touched::default()
                    });
                }
            }
            a.table_exists = false;
            return;
        }
        let t = match state.tables.get_mut(&*key) {
            Some(t) => t,
            None => state.tables.entry(key.clone()).or_default(),
        };
        a.table_exists = true;
        let chain = match *m {
            NftEvent::Chain { name, .. } => name,
            NftEvent::Rule { chain, .. } => chain,
            _ => return,
        };
        let touched = match a.chains.get_mut(chain) {
            Some(x) => x,
            None => a
                .chains
                .entry(chain.to_string())
                .or_insert_with(|| Touched {
                    before: t.chains.get(chain).cloned(),
                    ..Touched::default()
                }),
        };
        match *m {
            NftEvent::Chain {
                op: Op::New,
                hook,
                policy,
                ..
            } => {
                let c = match t.chains.get_mut(chain) {
                    Some(c) => c,
                    None => t.chains.entry(chain.to_string()).or_default(),
                };
                c.base |= hook.is_some();
                if policy.is_some() {
                    c.policy = policy;
                }
            }
            NftEvent::Chain { op: Op::Del, .. } => {
                t.chains.remove(chain);
            }
            NftEvent::Rule {
                op,
                appended,
                jump,
                verdict,
                ..
            } => {
                let c = match t.chains.get_mut(chain) {
                    Some(c) => c,
                    None => t.chains.entry(chain.to_string()).or_default(),
                };
                // Hooks matter only in base chains: skip the catalogue lookup elsewhere.
                let hook_chain = c.base || crate::changes::is_builtin_chain(chain);
                let owned_jump = hook_chain && jump.is_some_and(is_owned_chain);
                let hooks_before = c.owned_hooks;
                match op {
                    Op::New => {
                        c.rules += 1;
                        touched.added += 1;
                        if owned_jump {
                            c.owned_hooks += 1;
                        }
                    }
                    Op::Del => {
                        c.rules = c.rules.saturating_sub(1);
                        touched.removed += 1;
                        if owned_jump {
                            c.owned_hooks = c.owned_hooks.saturating_sub(1);
                        }
                    }
                }
                if hook_chain {
                    let added = op == Op::New;
                    a.hooks.push(HookRule {
                        chain: chain.to_string(),
                        added,
                        jump: jump.map(str::to_string),
                        verdict: verdict.map(str::to_string),
                        inserted: added.then_some(!appended),
                        ahead_of_owned_hooks: added && !appended && hooks_before > 0,
                        text: None,
                    });
                }
            }
            _ => {}
        }
    }

    /// The net effect of the transaction on `state` (which it has already changed).
    pub fn finish(self, state: &NftState) -> ChangeSet {
        let mut accs = self.accs;
        accs.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out = ChangeSet::default();
        for (key, a) in accs {
            let now = state.tables.get(&key);
            let (family, table) = key;
            let mut tc = TableChanges {
                family: family_name(family).to_string(),
                table,
                table_added: !a.table_existed && a.table_exists,
                table_removed: a.table_existed && !a.table_exists,
                hook_rules: a.hooks,
                ..TableChanges::default()
            };
            // Names move from the transaction into the change set (a 10k-service sync
            // touches 40k chains: one copy of each name, not four).
            let mut names: Vec<(String, Touched)> = a.chains.into_iter().collect();
            names.sort_unstable_by(|x, y| x.0.cmp(&y.0));
            for (name, touched) in names {
                let after = now.and_then(|t| t.chains.get(&name));
                match (&touched.before, after) {
                    (None, Some(c)) => tc.chains_added.push(ChainDelta {
                        name,
                        rules: c.rules,
                    }),
                    (Some(b), None) => tc.chains_removed.push(ChainDelta {
                        name,
                        rules: b.rules,
                    }),
                    (Some(b), Some(c)) => {
                        if let Some(to) = c.policy.filter(|p| Some(*p) != b.policy) {
                            tc.policies.push(PolicyDelta {
                                chain: name.clone(),
                                from: b.policy.map(|p| policy_name(p).to_string()),
                                to: policy_name(to).to_string(),
                            });
                        }
                        // rules_after only where detection reads it: rules removed and
                        // none added (flushed or modified?).
                        match (touched.added, touched.removed) {
                            (0, 0) => {}
                            (0, rm) => {
                                tc.rules_after.insert(name.clone(), c.rules);
                                tc.rules_removed.insert(name, rm);
                            }
                            (ad, 0) => {
                                tc.rules_added.insert(name, ad);
                            }
                            (ad, rm) => {
                                tc.rules_added.insert(name.clone(), ad);
                                tc.rules_removed.insert(name, rm);
                            }
                        }
                    }
                    (None, None) => {}
                }
            }
            let rules_now: usize = now.map_or(0, |t| t.chains.values().map(|c| c.rules).sum());
            tc.whole_table_flushed = a.rules_before > 0 && rules_now == 0;
            if !tc.is_empty() {
                out.tables.push(tc);
            }
        }
        out
    }
}

impl NftState {
    /// What changed from `self` (what plumb believed) to `newer` (a fresh dump):
    /// used after lost events, when the writer is unknown.
    pub fn diff_to(&self, newer: &NftState) -> ChangeSet {
        let mut keys: Vec<&(u8, String)> = self.tables.keys().chain(newer.tables.keys()).collect();
        keys.sort();
        keys.dedup();
        let mut out = ChangeSet::default();
        let empty = TableState::default();
        for key in keys {
            let (old, new) = (self.tables.get(key), newer.tables.get(key));
            let mut tc = TableChanges {
                family: family_name(key.0).to_string(),
                table: key.1.clone(),
                table_added: old.is_none(),
                table_removed: new.is_none(),
                ..TableChanges::default()
            };
            let (o, n) = (old.unwrap_or(&empty), new.unwrap_or(&empty));
            let mut names: Vec<&String> = o.chains.keys().chain(n.chains.keys()).collect();
            names.sort();
            names.dedup();
            for name in names {
                match (o.chains.get(name), n.chains.get(name)) {
                    (None, Some(c)) => tc.chains_added.push(ChainDelta {
                        name: name.clone(),
                        rules: c.rules,
                    }),
                    (Some(c), None) => tc.chains_removed.push(ChainDelta {
                        name: name.clone(),
                        rules: c.rules,
                    }),
                    (Some(a), Some(b)) => {
                        if b.rules > a.rules {
                            tc.rules_added.insert(name.clone(), b.rules - a.rules);
                        } else if a.rules > b.rules {
                            tc.rules_removed.insert(name.clone(), a.rules - b.rules);
                        }
                        if a.rules != b.rules {
                            tc.rules_after.insert(name.clone(), b.rules);
                        }
                        if let Some(to) = b.policy.filter(|p| Some(*p) != a.policy) {
                            tc.policies.push(PolicyDelta {
                                chain: name.clone(),
                                from: a.policy.map(|p| policy_name(p).to_string()),
                                to: policy_name(to).to_string(),
                            });
                        }
                    }
                    (None, None) => {}
                }
            }
            if !tc.is_empty() {
                out.tables.push(tc);
            }
        }
        out
    }
}

impl NftState {
    /// Whether table (family, name) is known.
    pub fn has_table(&self, family: u8, table: &str) -> bool {
        self.tables.contains_key(&(family, table.to_string()))
    }

    /// Adds the nf_tables-backed tables of a parsed ruleset (native nft tables).
    pub fn add_ruleset(&mut self, rs: &Ruleset) {
        let other = NftState::from_ruleset(rs);
        self.tables.extend(other.tables);
    }

    /// Seeds from iptables-save text (see [`SaveScanner`]).
    pub fn scan_iptables_save<S: AsRef<str>>(
        &mut self,
        family: u8,
        lines: impl Iterator<Item = S>,
    ) {
        let mut sc = SaveScanner::new(family);
        for l in lines {
            sc.line(self, l.as_ref());
        }
    }
}

/// Seeds [`NftState`] from iptables-save text one line at a time, without building
/// the ruleset model: only chain names, policies, rule counts and owned hook jumps
/// are kept, so a 10k-service dump costs a few MB instead of a full parse.
#[derive(Debug)]
pub struct SaveScanner {
    family: u8,
    table: Option<String>,
}

impl SaveScanner {
    pub fn new(family: u8) -> SaveScanner {
        SaveScanner {
            family,
            table: None,
        }
    }

    /// Feeds one line of iptables-save output.
    pub fn line(&mut self, state: &mut NftState, line: &str) {
        let line = line.trim_end();
        if let Some(t) = line.strip_prefix('*') {
            let t = t.trim().to_string();
            state.tables.entry((self.family, t.clone())).or_default();
            self.table = Some(t);
            return;
        }
        let Some(t) = &self.table else { return };
        let Some(ts) = state.tables.get_mut(&(self.family, t.clone())) else {
            return;
        };
        if let Some(rest) = line.strip_prefix(':') {
            let mut words = rest.split_whitespace();
            let (Some(name), policy) = (words.next(), words.next()) else {
                return;
            };
            let policy = match policy {
                Some("ACCEPT") => Some(1),
                Some("DROP") => Some(0),
                _ => None,
            };
            let c = ts.chains.entry(name.to_string()).or_default();
            c.base = policy.is_some();
            c.policy = policy;
            return;
        }
        // `-A CHAIN ...`, or `[p:b] -A CHAIN ...` (iptables-save -c).
        let rest = match line.strip_prefix("-A ") {
            Some(r) => r,
            None => match line.find("] -A ") {
                Some(i) if line.starts_with('[') => &line[i + 5..],
                _ => return,
            },
        };
        let Some(name) = rest.split_whitespace().next() else {
            return;
        };
        let c = ts.chains.entry(name.to_string()).or_default();
        c.rules += 1;
        if c.base && crate::changes::jump_target(rest).is_some_and(|j| is_owned_chain(&j)) {
            c.owned_hooks += 1;
        }
    }
}
