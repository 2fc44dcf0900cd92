//! The chains plumb believes each nf_tables table holds, kept current from netlink
//! notifications, so one transaction's messages become a [`ChangeSet`] without
//! re-reading the ruleset. Pure.
//!
//! Seeded from netlink dumps of the whole ruleset ([`crate::baseline`], or in tests
//! from a parsed one, [`NftState::from_ruleset`]) and re-seeded after every gap.
//! Only what detection needs is kept: per chain its rule count, whether it is
//! a base chain and its policy, and for base chains how many rules jump to owned
//! chains (kube-proxy's and the CNI's hooks). Net effects are computed per
//! transaction: a chain flushed and refilled by kube-proxy's `iptables-restore`
//! shows as N rules removed and N added, a chain deleted and re-created as both —
//! unless the rules put back are the rules taken out, in the same order: then the
//! chain is *rewritten* with no net change ([`TableChanges::rules_rewritten`]), and
//! its hook rules are not reported as removed and added.
//!
//! Rewrites are recognised without keeping rules: each rule notification carries a
//! fingerprint of the rule ([`crate::nft_events::rule_fingerprint`]), and per chain
//! a transaction folds the fingerprints of the rules it removes and of those it adds
//! into two order-dependent hashes. The chain is rewritten when the transaction
//! removed every rule the chain had, in the chain's order, before adding any, then
//! appended as many rules as it removed, and the two hashes agree. Removals are in
//! the chain's order when their handles rise and the chain's order is its handles'
//! order (`ChainState::ordered`: every rule was appended, as iptables-restore and
//! kube-proxy do). Anything else (an insert, a removal out of order or after an
//! addition) is reported as rules removed and added, as before.

use crate::chain_name::ChainName;
use crate::chain_table::ChainTable;
use crate::changes::{
    ChainDelta, ChangeSet, HookRule, PolicyDelta, TableChanges, is_owned_chain, net_hook_rules,
};
use crate::nft_events::{Batch, NftEvent, Op, family_name};
use plumb_ruleset::{Backend, Family, Ruleset};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct ChainState {
    rules: u32,
    /// Base chains: rules jumping to owned chains.
    owned_hooks: u32,
    policy: Option<u32>,
    base: bool,
    /// Its rules are in the order of their handles (each was appended, or the
    /// baseline dump listed them with rising handles): removals with rising handles
    /// are then removals in the chain's order. False when unknown.
    ordered: bool,
}

/// A chain as plumb believes it is, and what the open transaction did to it. Keeping
/// both in one map entry makes applying a notification one hash lookup.
#[derive(Clone, Debug, Default)]
struct ChainEntry {
    /// None: deleted. A deleted entry is kept until the transaction that deleted it
    /// finishes, so that it can be reported (and revived without allocating: a
    /// kube-proxy sync deletes and re-creates every chain of its tables).
    now: Option<ChainState>,
    /// Id of the last transaction that touched the entry; `before`, `added` and
    /// `removed` are that transaction's.
    txn: u64,
    before: Option<ChainState>,
    added: u32,
    removed: u32,
    /// Order-dependent hashes of the fingerprints of the rules the transaction
    /// removed and added ([`fold`]).
    removed_seq: u64,
    added_seq: u64,
    /// Handle of the last rule the transaction removed.
    last_removed: u64,
    /// Nothing the transaction did yet rules out a rewrite with the same rules
    /// (see the module doc).
    may_rewrite: bool,
}

/// Folds a rule fingerprint into an order-dependent hash of a sequence of rules.
fn fold(seq: u64, fingerprint: u64) -> u64 {
    (seq.rotate_left(23) ^ fingerprint).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

impl ChainEntry {
    fn existing(c: ChainState) -> ChainEntry {
        ChainEntry {
            now: Some(c),
            ..ChainEntry::default()
        }
    }

    /// Records the state before transaction `txn` at its first touch.
    fn touch(&mut self, txn: u64) {
        if self.txn != txn {
            self.txn = txn;
            self.before = self.now;
            self.added = 0;
            self.removed = 0;
            self.removed_seq = 0;
            self.added_seq = 0;
            self.last_removed = 0;
            self.may_rewrite = true;
        }
    }

    /// The chain now, created empty when absent (a rule names its chain).
    fn now_or_new(&mut self) -> &mut ChainState {
        self.now.get_or_insert_with(ChainState::default)
    }
}

#[derive(Clone, Debug)]
struct TableState {
    family: u8,
    name: String,
    /// False once deleted; kept, like a deleted chain, until the deleting transaction
    /// finishes.
    live: bool,
    chains: ChainTable<ChainEntry>,
    /// Rules in all its chains (kept current: a whole-table flush is seen without
    /// summing 40k chains).
    rules: usize,
}

impl TableState {
    fn live_chains(&self) -> impl Iterator<Item = (&str, &ChainState)> {
        self.chains
            .iter()
            .filter_map(|(n, e)| Some((n.as_str(), e.now.as_ref()?)))
    }

    fn chain(&self, name: &str) -> Option<&ChainState> {
        self.chains.get(name)?.now.as_ref()
    }
}

/// Tables of one network namespace, by (NFPROTO family, name). A node has a handful
/// of tables: a vector, so the table of a notification is found by comparing names
/// (usually with the previous notification's) rather than hashing.
#[derive(Clone, Debug, Default)]
pub struct NftState {
    tables: Vec<TableState>,
    /// Id of the last transaction started on this state.
    last_txn: u64,
}

/// `NFPROTO_*` code of a model family ([`Family::nfproto`]).
pub fn family_code(f: Family) -> u8 {
    f.nfproto()
}

fn policy_code(p: &plumb_ruleset::Policy) -> Option<u32> {
    match p.as_iptables() {
        "ACCEPT" => Some(1),
        "DROP" => Some(0),
        _ => None,
    }
}

/// A chain's policy set to another value (a policy cleared is not reported).
fn policy_change(name: &str, before: &ChainState, after: &ChainState) -> Option<PolicyDelta> {
    let to = after.policy.filter(|p| Some(*p) != before.policy)?;
    Some(PolicyDelta {
        chain: name.to_string(),
        from: before.policy.map(|p| policy_name(p).to_string()),
        to: policy_name(to).to_string(),
    })
}

/// A base chain created with policy DROP: what its hook passed before (no chain, no
/// verdict) it now drops by default, as when ufw creates `FORWARD` with policy DROP
/// in a table where iptables-nft had not created it yet. Reported as a policy change
/// from none.
fn new_chain_policy(name: &str, c: &ChainState) -> Option<PolicyDelta> {
    (c.base && c.policy == Some(0)).then(|| PolicyDelta {
        chain: name.to_string(),
        from: None,
        to: policy_name(0).to_string(),
    })
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
            let ts = s.table_mut(family_code(t.family), &t.name);
            for c in &t.chains {
                let owned_hooks = c
                    .rules
                    .iter()
                    .filter(|r| {
                        crate::changes::jump_target(&r.text).is_some_and(|j| is_owned_chain(&j))
                    })
                    .count();
                let state = ChainState {
                    rules: c.rules.len() as u32,
                    base: c.base.is_some(),
                    policy: c.policy().and_then(policy_code),
                    owned_hooks: owned_hooks as u32,
                    // A parsed ruleset has no handles.
                    ordered: false,
                };
                ts.rules += c.rules.len();
                if let Some(old) = ts
                    .chains
                    .insert(&c.name, ChainEntry::existing(state))
                    .and_then(|e| e.now)
                {
                    ts.rules -= old.rules as usize;
                }
            }
        }
        s
    }

    fn table_index(&self, family: u8, name: &str) -> Option<usize> {
        self.tables
            .iter()
            .position(|t| t.family == family && t.name == name)
    }

    fn live_table(&self, family: u8, name: &str) -> Option<&TableState> {
        let t = &self.tables[self.table_index(family, name)?];
        t.live.then_some(t)
    }

    /// Table (family, name), created empty (and live) when absent.
    fn table_mut(&mut self, family: u8, name: &str) -> &mut TableState {
        let i = match self.table_index(family, name) {
            Some(i) => i,
            None => {
                self.tables.push(TableState {
                    family,
                    name: name.to_string(),
                    live: true,
                    chains: ChainTable::default(),
                    rules: 0,
                });
                self.tables.len() - 1
            }
        };
        &mut self.tables[i]
    }

    fn live_tables(&self) -> impl Iterator<Item = &TableState> {
        self.tables.iter().filter(|t| t.live)
    }

    /// Number of chains known in table (family, name).
    pub fn chain_count(&self, family: u8, table: &str) -> usize {
        self.live_table(family, table)
            .map_or(0, |t| t.live_chains().count())
    }

    /// Chain names per table (for the chains-per-owner gauge).
    pub fn chain_names(&self) -> impl Iterator<Item = &str> {
        self.live_tables()
            .flat_map(|t| t.live_chains().map(|(n, _)| n))
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

/// What one transaction did to one table; what it did to its chains is kept in their
/// entries ([`ChainEntry`]).
struct Acc {
    /// Index in `NftState::tables` (stable while the transaction is open).
    table: usize,
    existed: bool,
    rules_before: usize,
    hooks: Vec<HookRule>,
    /// A chain-delete message came: dead entries to forget at the end.
    deleted: bool,
}

/// One nf_tables transaction being applied, message by message, as notifications
/// arrive (so the work overlaps with receiving them); [`Transaction::finish`] at
/// NEWGEN gives its net effect. Hot path (a 10k-service sync is ~300k messages): one
/// hash lookup per message (the chain), no allocation except for chains new to
/// plumb. A transaction dropped unfinished (a gap) leaves its effects in the state;
/// the next one starts from there.
#[derive(Default)]
pub struct Transaction {
    /// Its id on the state (0 until its first message).
    id: u64,
    /// Per table, in order of first appearance (a transaction touches few tables).
    accs: Vec<Acc>,
    /// Index in `accs` of the table of the previous message.
    current: usize,
    messages: usize,
}

/// Applies one rule notification to its chain's entry `e` (in chain `chain`): the
/// rule counts (`table_rules` is the table's), whether the chain is still in handle
/// order, the fingerprints of rules added and removed (for rewrites), and a
/// [`HookRule`] for rules of built-in and base chains.
fn apply_rule(
    e: &mut ChainEntry,
    table_rules: &mut usize,
    hooks: &mut Vec<HookRule>,
    chain: &str,
    m: &NftEvent<'_>,
) {
    let NftEvent::Rule {
        op,
        handle,
        appended,
        jump,
        verdict,
        fingerprint,
        ..
    } = *m
    else {
        return;
    };
    let c = e.now_or_new();
    // Hooks matter only in base chains: skip the catalogue lookup elsewhere.
    let hook_chain = c.base || crate::changes::is_builtin_chain(chain);
    let owned_jump = u32::from(hook_chain && jump.is_some_and(is_owned_chain));
    let hooks_before = c.owned_hooks;
    let added = op == Op::New;
    if added {
        // Inserted ahead of rules with lower handles: the chain's order is
        // no longer its handles' order.
        let inserted = !appended && c.rules > 0;
        c.ordered = !inserted && (c.ordered || c.rules == 0);
        c.rules += 1;
        c.owned_hooks += owned_jump;
        e.added += 1;
        e.added_seq = fold(e.added_seq, fingerprint);
        e.may_rewrite &= !inserted;
        *table_rules += 1;
    } else {
        if c.rules > 0 {
            c.rules -= 1;
            *table_rules -= 1;
        }
        c.owned_hooks = c.owned_hooks.saturating_sub(owned_jump);
        // One rule left, or none: in order, whatever came before.
        c.ordered |= c.rules <= 1;
        e.removed += 1;
        e.removed_seq = fold(e.removed_seq, fingerprint);
        match handle {
            Some(h) if e.added == 0 && h > e.last_removed => e.last_removed = h,
            _ => e.may_rewrite = false,
        }
    }
    if hook_chain {
        hooks.push(HookRule {
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

impl Transaction {
    /// Messages applied so far.
    pub fn len(&self) -> usize {
        self.messages
    }

    /// Whether no message has been applied yet.
    pub fn is_empty(&self) -> bool {
        self.messages == 0
    }

    fn acc_index(&mut self, state: &mut NftState, family: u8, table: &str) -> usize {
        let same = |a: &Acc| {
            let t = &state.tables[a.table];
            t.family == family && t.name == table
        };
        if self.accs.get(self.current).is_some_and(same) {
            return self.current;
        }
        self.current = match self.accs.iter().position(same) {
            Some(i) => i,
            None => {
                let table = match state.table_index(family, table) {
                    Some(i) => i,
                    None => {
                        state.table_mut(family, table).live = false;
                        state.tables.len() - 1
                    }
                };
                let t = &state.tables[table];
                self.accs.push(Acc {
                    table,
                    existed: t.live,
                    rules_before: if t.live { t.rules } else { 0 },
                    hooks: Vec::new(),
                    deleted: false,
                });
                self.accs.len() - 1
            }
        };
        self.current
    }

    /// Applies one notification to `state`, remembering what it was before.
    pub fn push(&mut self, state: &mut NftState, m: &NftEvent<'_>) {
        let (family, table, chain) = match *m {
            NftEvent::Table { family, name, .. } => (family, name, None),
            NftEvent::Chain {
                family,
                table,
                name,
                ..
            } => (family, table, Some(name)),
            NftEvent::Rule {
                family,
                table,
                chain,
                ..
            } => (family, table, Some(chain)),
            _ => return,
        };
        if self.id == 0 {
            state.last_txn += 1;
            self.id = state.last_txn;
        }
        self.messages += 1;
        let i = self.acc_index(state, family, table);
        let a = &mut self.accs[i];
        let t = &mut state.tables[a.table];
        if matches!(m, NftEvent::Table { op: Op::Del, .. }) {
            for e in t.chains.values_mut() {
                e.touch(self.id);
                e.now = None;
            }
            a.deleted = true;
            t.live = false;
            t.rules = 0;
            return;
        }
        t.live = true;
        let Some(chain) = chain else { return };
        let e = t.chains.get_or_default(chain);
        e.touch(self.id);
        match *m {
            NftEvent::Chain {
                op: Op::New,
                hook,
                policy,
                ..
            } => {
                let c = e.now_or_new();
                c.base |= hook.is_some();
                if policy.is_some() {
                    c.policy = policy;
                }
            }
            NftEvent::Chain { op: Op::Del, .. } => {
                a.deleted = true;
                if let Some(c) = e.now.take() {
                    t.rules -= c.rules as usize;
                }
            }
            NftEvent::Rule { .. } => apply_rule(e, &mut t.rules, &mut a.hooks, chain, m),
            _ => {}
        }
    }

    /// Undoes the transaction: `state` is again what it was before its first message
    /// (for a transaction whose effects were already in the dump `state` came from).
    pub fn roll_back(self, state: &mut NftState) {
        for a in &self.accs {
            let t = &mut state.tables[a.table];
            t.live = a.existed;
            for e in t.chains.values_mut() {
                if e.txn == self.id {
                    e.now = e.before;
                    e.txn = 0;
                }
            }
            t.chains.retain(|e| e.now.is_some());
            t.rules = t
                .chains
                .iter()
                .filter_map(|(_, e)| e.now.map(|c| c.rules as usize))
                .sum();
        }
        state.tables.retain(|t| t.live);
    }

    /// What the transaction has done so far (its net effect if it ended now), without
    /// changing `state`: for a preliminary event while the kernel still sends it.
    pub fn changes_so_far(&self, state: &NftState) -> ChangeSet {
        let mut accs: Vec<&Acc> = self.accs.iter().collect();
        accs.sort_by_key(|a| {
            let t = &state.tables[a.table];
            (t.family, t.name.as_str())
        });
        let mut out = ChangeSet::default();
        for a in accs {
            let tc = self.table_changes(a, &state.tables[a.table]);
            if !tc.is_empty() {
                out.tables.push(tc);
            }
        }
        out
    }

    /// What the transaction did to one table (`a` is its record of that table).
    fn table_changes(&self, a: &Acc, t: &TableState) -> TableChanges {
        let mut tc = TableChanges {
            family: family_name(t.family).to_string(),
            table: t.name.clone(),
            table_added: !a.existed && t.live,
            table_removed: a.existed && !t.live,
            whole_table_flushed: a.rules_before > 0 && t.rules == 0,
            ..TableChanges::default()
        };
        let mut touched: Vec<(&ChainName, &ChainEntry)> =
            t.chains.iter().filter(|(_, e)| e.txn == self.id).collect();
        touched.sort_unstable_by(|x, y| x.0.cmp(y.0));
        // Filled in name order, then built in bulk (no tree search per chain: a
        // sync changes the rules of 40k chains).
        let (mut added, mut removed, mut after) = (Vec::new(), Vec::new(), Vec::new());
        let mut rewritten: Vec<(String, usize)> = Vec::new();
        for (name, e) in touched {
            let name = name.as_str();
            match (&e.before, &e.now) {
                (None, Some(c)) => {
                    tc.chains_added.push(ChainDelta {
                        name: name.to_string(),
                        rules: c.rules as usize,
                    });
                    tc.policies.extend(new_chain_policy(name, c));
                }
                (Some(b), None) => tc.chains_removed.push(ChainDelta {
                    name: name.to_string(),
                    rules: b.rules as usize,
                }),
                (Some(b), Some(c)) => {
                    tc.policies.extend(policy_change(name, b, c));
                    if rewrote_same_rules(e, b, c) {
                        rewritten.push((name.to_string(), c.rules as usize));
                        continue;
                    }
                    // rules_after only where detection reads it: rules removed and
                    // none added (flushed or modified?).
                    if e.added > 0 {
                        added.push((name.to_string(), e.added as usize));
                    }
                    if e.removed > 0 {
                        removed.push((name.to_string(), e.removed as usize));
                        if e.added == 0 {
                            after.push((name.to_string(), c.rules as usize));
                        }
                    }
                }
                (None, None) => {}
            }
        }
        tc.rules_added = added.into_iter().collect();
        tc.rules_removed = removed.into_iter().collect();
        tc.rules_after = after.into_iter().collect();
        // Hook rules of rewritten chains were removed and put back: no change.
        tc.hook_rules = a
            .hooks
            .iter()
            .filter(|h| {
                rewritten
                    .binary_search_by(|(n, _)| n.as_str().cmp(&h.chain))
                    .is_err()
            })
            .cloned()
            .collect();
        net_hook_rules(&mut tc.hook_rules);
        tc.rules_rewritten = rewritten.into_iter().collect();
        tc
    }

    /// The net effect of the transaction on `state` (which it has already changed);
    /// forgets the chains and tables it deleted.
    pub fn finish(self, state: &mut NftState) -> ChangeSet {
        let out = self.changes_so_far(state);
        for a in &self.accs {
            // Forget deleted chains (also any left by a transaction dropped at a gap);
            // a dead table goes as a whole below.
            let t = &mut state.tables[a.table];
            if a.deleted && t.live {
                t.chains.retain(|e| e.now.is_some());
            }
        }
        state.tables.retain(|t| t.live);
        out
    }
}

/// Whether the open transaction of entry `e` took out every rule of the chain (`b`
/// before, `c` now) and put the same rules back in the same order (module doc).
fn rewrote_same_rules(e: &ChainEntry, b: &ChainState, c: &ChainState) -> bool {
    e.may_rewrite
        && e.removed > 0
        && (b.ordered || b.rules <= 1)
        && e.removed == b.rules
        && e.added == e.removed
        && e.added == c.rules
        && e.removed_seq == e.added_seq
        && b.base == c.base
}

impl NftState {
    /// What changed from `self` (what plumb believed) to `newer` (a fresh dump):
    /// used after lost events, when the writer is unknown.
    pub fn diff_to(&self, newer: &NftState) -> ChangeSet {
        let mut keys: Vec<(u8, &str)> = self
            .live_tables()
            .chain(newer.live_tables())
            .map(|t| (t.family, t.name.as_str()))
            .collect();
        keys.sort();
        keys.dedup();
        let mut out = ChangeSet::default();
        for (family, table) in keys {
            let (old, new) = (
                self.live_table(family, table),
                newer.live_table(family, table),
            );
            let mut tc = TableChanges {
                family: family_name(family).to_string(),
                table: table.to_string(),
                table_added: old.is_none(),
                table_removed: new.is_none(),
                ..TableChanges::default()
            };
            let mut names: Vec<&str> = old
                .into_iter()
                .chain(new)
                .flat_map(|t| t.live_chains().map(|(n, _)| n))
                .collect();
            names.sort();
            names.dedup();
            for name in names {
                let (a, b) = (
                    old.and_then(|t| t.chain(name)),
                    new.and_then(|t| t.chain(name)),
                );
                match (a, b) {
                    (None, Some(c)) => {
                        tc.chains_added.push(ChainDelta {
                            name: name.to_string(),
                            rules: c.rules as usize,
                        });
                        tc.policies.extend(new_chain_policy(name, c));
                    }
                    (Some(c), None) => tc.chains_removed.push(ChainDelta {
                        name: name.to_string(),
                        rules: c.rules as usize,
                    }),
                    (Some(a), Some(b)) => {
                        let (ra, rb) = (a.rules as usize, b.rules as usize);
                        if rb > ra {
                            tc.rules_added.insert(name.to_string(), rb - ra);
                        } else if ra > rb {
                            tc.rules_removed.insert(name.to_string(), ra - rb);
                        }
                        if ra != rb {
                            tc.rules_after.insert(name.to_string(), rb);
                        }
                        tc.policies.extend(policy_change(name, a, b));
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

    /// Whether table (family, name) is known.
    pub fn has_table(&self, family: u8, table: &str) -> bool {
        self.live_table(family, table).is_some()
    }
}
