//! Detection: from what a write changed and who made it, to [`Detection`]s. Pure: no
//! IO, the clock is a parameter. (A detection is watch's own type, not a plumb-findings
//! `Finding`: it becomes a live event with time, actor and latency, not a report item.)
//!
//! - **foreign-change**: chains, rules or hook rules owned by kube-proxy, kubelet or a
//!   CNI (plumb-ruleset's ownership catalogue) deleted, flushed or modified by a
//!   writer that is not their owner (data/actors.json says who writes what); also
//!   rules inserted ahead of owned hook rules by a non-Kubernetes writer, canary and
//!   hint chains vanishing, whole-table flushes.
//! - **owner-change**: an owner's own writes (kube-proxy syncs, Felix refreshes): never
//!   reported as tampering.
//! - **rewrite**: owned chains rewritten with the same rules in the same order by a
//!   writer that is not their owner (a restore of a saved ruleset): no net change,
//!   so not tampering; reported for information (who else writes these chains).
//!   Hook rules removed and put back in the same transaction are not "unhooked".
//! - **policy-change**: a base chain's policy changed (`FORWARD` to DROP by ufw).
//! - **fight**: the same owned objects removed by one party and restored by their
//!   owner again and again within a window: the two parties, the count, the period.
//! - **resync**: changes found by a full re-read after lost events: writer unknown.

use crate::actor::Actor;
use crate::changes::{ChangeSet, HookRule, TableChanges, is_builtin_chain};
use plumb_ruleset::owner::{owner_name_of_chain, table_owner};
use serde::Serialize;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

/// Chains listed in one detection or event at most (the count is always complete).
pub const MAX_LISTED_CHAINS: usize = 200;
/// Event kinds of the JSON contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// `foreign-change`: owned chains, rules or hook rules changed by a writer that is
    /// not their owner, or rules inserted ahead of owned hook rules.
    ForeignChange,
    /// `fight`: the same owned objects removed again and again by one party and
    /// restored by their owner.
    Fight,
    /// `policy-change`: a base chain's policy changed.
    PolicyChange,
    /// `owner-change`: an owner's own write (not tampering).
    OwnerChange,
    /// `rewrite`: owned chains rewritten with the same rules by another writer (no
    /// net change; information).
    Rewrite,
    /// `resync`: what a full re-read after lost notifications found changed; the
    /// writer is unknown.
    Resync,
    /// `gap`: the kernel dropped notifications; a resync follows.
    Gap,
}

impl Kind {
    /// The kind's name in the JSON contract and the metrics (`foreign-change`).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::ForeignChange => "foreign-change",
            Kind::Fight => "fight",
            Kind::PolicyChange => "policy-change",
            Kind::OwnerChange => "owner-change",
            Kind::Rewrite => "rewrite",
            Kind::Resync => "resync",
            Kind::Gap => "gap",
        }
    }
}

/// What happened to the objects, in words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// Chains deleted.
    Deleted,
    /// Chains emptied (rules removed, chain kept).
    Flushed,
    /// Rules added or removed.
    Modified,
    /// Chains created.
    Added,
    /// Chains re-created (or refilled) after someone removed them.
    Restored,
    /// Chains rewritten with the same rules: no net change.
    Rewritten,
    /// Rules inserted ahead of owned hook rules.
    Inserted,
    /// Hook rules (jumps into owned chains from built-in chains) removed.
    Unhooked,
    /// A base-chain policy changed.
    Policy,
    /// Objects removed and restored repeatedly.
    Fight,
    /// Changes found by a re-read, writer unknown.
    Changed,
}

impl Action {
    /// The verb of the human line (`deleted`, `rewrote`, `changed the policy of`);
    /// the JSON form is the variant's kebab-case name instead.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Deleted => "deleted",
            Action::Flushed => "flushed",
            Action::Modified => "modified",
            Action::Added => "added",
            Action::Restored => "restored",
            Action::Rewritten => "rewrote",
            Action::Inserted => "inserted",
            Action::Unhooked => "unhooked",
            Action::Policy => "changed the policy of",
            Action::Fight => "fight",
            Action::Changed => "changed",
        }
    }
}

/// A revert fight between two parties.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FightInfo {
    /// The party removing the owner's objects.
    pub remover: String,
    /// The owner's writer restoring them.
    pub restorer: String,
    /// Removals of these objects within the window (this one included).
    pub reverts: u32,
    /// Restores of them by the owner since the first removal in the window.
    pub restores: u32,
    /// Seconds from the first removal in the window to this one.
    pub span_s: f64,
    /// Mean seconds between removals.
    pub period_s: f64,
}

/// One detection result (the watcher adds time, actor and latency to make an event).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Detection {
    /// What kind of change.
    pub kind: Kind,
    /// What happened to the chains.
    pub action: Action,
    /// The table's family (`ip`, `ip6`, `inet`, ...).
    pub family: String,
    /// The table's name.
    pub table: String,
    /// Whose chains they are; None for detections not about owned chains (policy
    /// changes, insertions, resyncs).
    pub owner: Option<String>,
    /// Affected chains, sorted; the first [`MAX_LISTED_CHAINS`] only.
    pub chains: Vec<String>,
    /// Number of affected chains (a 10k-service revert affects 40k).
    pub chain_count: usize,
    /// Rules added to the affected chains.
    pub rules_added: usize,
    /// Rules removed from the affected chains.
    pub rules_removed: usize,
    /// Extra facts: "canary chain KUBE-PROXY-CANARY vanished", "whole table flushed", ...
    pub details: Vec<String>,
    /// For removals: the how-many-th removal of these objects within the window.
    pub revert: Option<u32>,
    /// For a removal that makes a fight (and for the fight detection): the fight.
    pub fight: Option<FightInfo>,
}

impl Detection {
    fn new(kind: Kind, action: Action, t: &TableChanges, owner: Option<String>) -> Detection {
        Detection {
            kind,
            action,
            family: t.family.clone(),
            table: t.table.clone(),
            owner,
            chains: Vec::new(),
            chain_count: 0,
            rules_added: 0,
            rules_removed: 0,
            details: Vec::new(),
            revert: None,
            fight: None,
        }
    }
    /// Sets the affected chains from a sorted, deduplicated list: counts them all,
    /// keeps the first [`MAX_LISTED_CHAINS`] (no copy of the rest).
    fn set_chains<'s>(&mut self, sorted: impl Iterator<Item = &'s str>) {
        self.chains.clear();
        self.chain_count = 0;
        for c in sorted {
            if self.chains.len() < MAX_LISTED_CHAINS {
                self.chains.push(c.to_string());
            }
            self.chain_count += 1;
        }
    }

    /// `nat`, `ip6 nat`, `inet kube-proxy`.
    pub fn table_label(&self) -> String {
        match self.family.as_str() {
            "ip" | "" => self.table.clone(),
            f => format!("{f} {}", self.table),
        }
    }
}

/// Canary and hint chains: their disappearance is what kube-proxy and kubelet watch for.
const CANARIES: &[&str] = &[
    "KUBE-PROXY-CANARY",
    "KUBE-KUBELET-CANARY",
    "KUBE-IPTABLES-HINT",
];

/// Table names the iptables-nft compatibility layer uses (ownership by chain name).
fn is_xtables_table(name: &str) -> bool {
    matches!(name, "filter" | "nat" | "mangle" | "raw" | "security")
}

/// Owners of the chains of one table: native nft tables by table name, else by chain
/// name; none for built-in chains and chains no catalogue entry claims. For
/// classifying thousands of chains: the table's owner is looked up once.
struct Owners {
    /// A native nft table's owner: it owns every chain of the table.
    table: Option<String>,
}

impl Owners {
    fn of_table(t: &TableChanges) -> Owners {
        let table = (!is_xtables_table(&t.table))
            .then(|| {
                let fam =
                    plumb_ruleset::Family::parse(&t.family).unwrap_or(plumb_ruleset::Family::Ip);
                let table = plumb_ruleset::Table::new(
                    fam,
                    plumb_ruleset::Backend::Nftables,
                    &t.table,
                    plumb_ruleset::Location::default(),
                );
                table_owner(&table).map(|a| a.owner.0)
            })
            .flatten();
        Owners { table }
    }

    fn of(&self, chain: &str) -> Option<&str> {
        match &self.table {
            Some(o) => Some(o),
            None if is_builtin_chain(chain) => None,
            None => owner_name_of_chain(chain),
        }
    }
}

/// Writers whose insertions into hook chains are normal (they own hooks themselves).
fn inserts_hooks_legitimately(actor: &Actor) -> bool {
    actor
        .identity
        .as_ref()
        .is_some_and(|i| matches!(i.kind.as_str(), "kubernetes" | "cni" | "container-runtime"))
}

/// Chain names borrowed from a change set, sorted and unique. Filled in name order
/// (the change set's lists and maps are sorted), so a 40k-chain sync costs pushes,
/// not tree inserts.
#[derive(Default)]
struct Names<'a>(Vec<&'a str>);

impl<'a> Names<'a> {
    fn push(&mut self, name: &'a str) {
        self.0.push(name);
    }

    /// Restores the invariant whatever order the names came in.
    fn seal(&mut self) {
        if !self.0.is_sorted() {
            self.0.sort_unstable();
        }
        self.0.dedup();
    }

    fn contains(&self, name: &str) -> bool {
        self.0.binary_search(&name).is_ok()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn iter(&self) -> impl Iterator<Item = &'a str> + '_ {
        self.0.iter().copied()
    }
}

/// The sorted union of sorted name lists (a stable sort merges the runs in linear
/// time).
fn union<'a>(lists: &[&[&'a str]]) -> Vec<&'a str> {
    let mut v = lists.concat();
    v.sort();
    v.dedup();
    v
}

/// Chains of one owner touched by one write, borrowed from the change set (a
/// 10k-service revert names 40k chains: no copies).
#[derive(Default)]
struct Group<'a> {
    removed: Names<'a>,
    flushed: Names<'a>,
    modified: Names<'a>,
    added: Names<'a>,
    /// Rewritten with the same rules (no net change).
    rewritten: Names<'a>,
    unhooked: BTreeSet<String>,
    rules_added: usize,
    rules_removed: usize,
}

impl Group<'_> {
    fn seal(&mut self) {
        for n in [
            &mut self.removed,
            &mut self.flushed,
            &mut self.modified,
            &mut self.added,
            &mut self.rewritten,
        ] {
            n.seal();
        }
    }
}

/// How long a fight is remembered, and how many removals make one.
#[derive(Clone, Copy, Debug)]
pub struct FightPolicy {
    /// How long removals and restores are remembered, in milliseconds.
    pub window_ms: u64,
    /// Removals of the same objects by one party within the window that make a
    /// fight (when the owner restored them in between: at least this many minus one
    /// restores).
    pub min_reverts: u32,
}

impl Default for FightPolicy {
    fn default() -> Self {
        FightPolicy {
            window_ms: 10 * 60 * 1000,
            min_reverts: 3,
        }
    }
}

#[derive(Clone, Debug, Default)]
struct FightState {
    reverts: Vec<u64>,
    restores: Vec<(u64, String)>,
    chains: BTreeSet<String>,
}

/// Remembers removals and restores of owned objects to recognise fights.
/// Memory is bounded by the window and by [`MAX_FIGHTS`].
#[derive(Clone, Debug, Default)]
pub struct FightTracker {
    policy: FightPolicy,
    /// (table label, owner, remover) -> state.
    fights: BTreeMap<(String, String, String), FightState>,
}

/// Most parties tracked at once.
pub const MAX_FIGHTS: usize = 1024;
/// Most chain names remembered per fight: a sample (the first names in sorted order)
/// is enough to tell "the same objects again" from "other objects", since a repeated
/// revert or a restore names the same chains; 40k names per fight cost megabytes.
const MAX_CHAINS: usize = 1024;

impl FightTracker {
    /// A tracker that remembers nothing yet.
    pub fn new(policy: FightPolicy) -> FightTracker {
        FightTracker {
            policy,
            fights: BTreeMap::new(),
        }
    }

    fn prune(&mut self, now: u64) {
        let w = self.policy.window_ms;
        self.fights.retain(|_, f| {
            f.reverts.retain(|&t| now.saturating_sub(t) <= w);
            f.restores.retain(|(t, _)| now.saturating_sub(*t) <= w);
            !f.reverts.is_empty()
        });
    }

    /// Records a removal of `chains` (owned by `owner`) by `remover`; returns the fight
    /// state after it.
    fn revert(
        &mut self,
        table: &str,
        owner: &str,
        remover: &str,
        chains: &[&str],
        now: u64,
    ) -> (u32, Option<FightInfo>) {
        self.prune(now);
        let key = (table.to_string(), owner.to_string(), remover.to_string());
        // At the cap a new party is not tracked; the ones already tracked still are.
        if self.fights.len() >= MAX_FIGHTS && !self.fights.contains_key(&key) {
            return (1, None);
        }
        let f = self.fights.entry(key).or_default();
        let overlaps = f.chains.is_empty() || chains.iter().any(|c| f.chains.contains(*c));
        if !overlaps {
            // Other objects: a new episode.
            *f = FightState::default();
        }
        f.reverts.push(now);
        for c in chains {
            if f.chains.len() >= MAX_CHAINS {
                break;
            }
            f.chains.insert((*c).to_string());
        }
        let n = f.reverts.len() as u32;
        let first = f.reverts[0];
        let restores: Vec<&(u64, String)> =
            f.restores.iter().filter(|(t, _)| *t >= first).collect();
        let fight = (n >= self.policy.min_reverts
            && restores.len() as u32 + 1 >= self.policy.min_reverts)
            .then(|| {
                let span = now.saturating_sub(first) as f64 / 1000.0;
                FightInfo {
                    remover: remover.into(),
                    restorer: restores
                        .last()
                        .map(|(_, p)| p.clone())
                        .unwrap_or_else(|| owner.into()),
                    reverts: n,
                    restores: restores.len() as u32,
                    span_s: span,
                    period_s: if n > 1 { span / f64::from(n - 1) } else { 0.0 },
                }
            });
        (n, fight)
    }

    /// Records that `restorer` (writing for `owner`) put back `chains`.
    fn restore(
        &mut self,
        table: &str,
        owner: &str,
        restorer: &str,
        chains: &[&Names<'_>],
        now: u64,
    ) -> bool {
        let mut any = false;
        for ((t, o, _), f) in self.fights.iter_mut() {
            if t == table
                && o == owner
                && chains
                    .iter()
                    .any(|set| set.iter().any(|c| f.chains.contains(c)))
            {
                f.restores.push((now, restorer.into()));
                any = true;
            }
        }
        any
    }
}

/// Where a change set came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A write the kernel attributed (NEWGEN pid/comm, audit).
    Write,
    /// A full re-read after lost events: the writer is unknown.
    Resync,
    /// A poll without audit (legacy): the writer is unknown, removals are still flagged.
    Poll,
}

/// Detects what is to be reported in `changes` written by `actor` at `now_ms`.
pub fn detect(
    changes: &ChangeSet,
    actor: &Actor,
    source: Source,
    now_ms: u64,
    fights: &mut FightTracker,
) -> Vec<Detection> {
    let mut out = Vec::new();
    let write = Write {
        actor,
        party: actor.metric_label(),
        source,
        now_ms,
    };
    for t in &changes.tables {
        if source == Source::Resync {
            out.extend(resync_detection(t));
            continue;
        }
        let owners = Owners::of_table(t);
        let (groups, inserted) = group_by_owner(t, &owners, actor);
        for (owner, mut g) in groups {
            g.seal();
            judge_owner(&mut out, t, owner, &g, &write, fights);
        }
        out.extend(inserted_detection(t, &inserted));
        out.extend(policy_detections(t));
    }
    out
}

/// Who wrote a change set, and how it was found: what judging a group needs besides
/// the group.
struct Write<'a> {
    actor: &'a Actor,
    /// The writer's metric label: the party a fight is counted against.
    party: String,
    source: Source,
    now_ms: u64,
}

/// A resync's changes to one table, writer unknown; None when the table did not change.
fn resync_detection(t: &TableChanges) -> Option<Detection> {
    if t.is_empty() {
        return None;
    }
    let mut f = Detection::new(Kind::Resync, Action::Changed, t, None);
    let names: BTreeSet<&str> = t
        .chains_added
        .iter()
        .chain(&t.chains_removed)
        .map(|c| c.name.as_str())
        .chain(t.rules_added.keys().map(String::as_str))
        .chain(t.rules_removed.keys().map(String::as_str))
        .collect();
    f.set_chains(names.into_iter());
    f.rules_added = t.rules_added.values().sum();
    f.rules_removed = t.rules_removed.values().sum();
    f.details.push(format!(
        "{} chains added, {} removed while events were lost; writer unknown",
        t.chains_added.len(),
        t.chains_removed.len()
    ));
    Some(f)
}

/// Sorts what a write did to one table by the owner of each chain (chains no owner
/// claims are left out), and collects the hook rules put ahead of owned ones by a
/// writer that does not insert hooks legitimately.
fn group_by_owner<'t, 'o>(
    t: &'t TableChanges,
    owners: &'o Owners,
    actor: &Actor,
) -> (BTreeMap<&'o str, Group<'t>>, Vec<&'t HookRule>) {
    let mut groups: BTreeMap<&str, Group> = BTreeMap::new();
    for c in &t.chains_removed {
        if let Some(o) = owners.of(&c.name) {
            let g = groups.entry(o).or_default();
            g.removed.push(&c.name);
            g.rules_removed += c.rules;
        }
    }
    for c in &t.chains_added {
        if let Some(o) = owners.of(&c.name) {
            let g = groups.entry(o).or_default();
            g.added.push(&c.name);
            g.rules_added += c.rules;
        }
    }
    for chain in t.rules_rewritten.keys() {
        if let Some(o) = owners.of(chain) {
            groups.entry(o).or_default().rewritten.push(chain);
        }
    }
    group_rule_changes(t, owners, &mut groups);
    // Hook rules: removal of a jump into an owned chain, or insertion ahead of one.
    let mut inserted = Vec::new();
    for h in &t.hook_rules {
        let target_owner = h.jump.as_deref().and_then(|j| owners.of(j));
        match (h.added, target_owner) {
            (false, Some(o)) => {
                let g = groups.entry(o).or_default();
                g.unhooked.insert(format!(
                    "{} -j {}",
                    h.chain,
                    h.jump.as_deref().unwrap_or("?")
                ));
            }
            (true, _) if h.ahead_of_owned_hooks && !inserts_hooks_legitimately(actor) => {
                inserted.push(h)
            }
            _ => {}
        }
    }
    (groups, inserted)
}

/// Surviving chains with rules removed, added or both, into their owner's group as
/// flushed (rules removed, none added, none left) or modified: one pass over the two
/// sorted maps together.
fn group_rule_changes<'t, 'o>(
    t: &'t TableChanges,
    owners: &'o Owners,
    groups: &mut BTreeMap<&'o str, Group<'t>>,
) {
    let mut removed = t.rules_removed.iter().peekable();
    let mut added = t.rules_added.iter().peekable();
    loop {
        let order = match (removed.peek(), added.peek()) {
            (None, None) => break,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some((r, _)), Some((a, _))) => r.cmp(a),
        };
        let rm = (order != Ordering::Greater)
            .then(|| removed.next())
            .flatten();
        let ad = (order != Ordering::Less).then(|| added.next()).flatten();
        let Some(chain) = rm.or(ad).map(|(c, _)| c) else {
            break;
        };
        let Some(o) = owners.of(chain) else { continue };
        let (rm, ad) = (rm.map(|(_, n)| *n), ad.map(|(_, n)| *n));
        let g = groups.entry(o).or_default();
        g.rules_removed += rm.unwrap_or(0);
        g.rules_added += ad.unwrap_or(0);
        let none_left = || t.rules_after.get(chain).copied().unwrap_or(0) == 0;
        if rm.is_some() && ad.unwrap_or(0) == 0 && none_left() {
            g.flushed.push(chain);
        } else {
            g.modified.push(chain);
        }
    }
}

/// Judges what one write did to one owner's chains (`g`, sealed): a rewrite with the
/// same rules, the owner's own change (or a poll that lost nothing), or a foreign
/// change (and then maybe a fight).
fn judge_owner(
    out: &mut Vec<Detection>,
    t: &TableChanges,
    owner: &str,
    g: &Group<'_>,
    write: &Write<'_>,
    fights: &mut FightTracker,
) {
    let legit = write.actor.writes(owner);
    let unchanged =
        g.added.is_empty() && g.removed.is_empty() && g.modified.is_empty() && g.flushed.is_empty();
    if unchanged && g.unhooked.is_empty() {
        out.push(rewrite_detection(t, owner, g, legit));
        return;
    }
    let unhooked: Vec<&str> = g
        .unhooked
        .iter()
        .filter_map(|h| h.split_once(" -j ").map(|(_, target)| target))
        .collect();
    let lost = union(&[&g.removed.0, &g.flushed.0, &unhooked]);
    let foreign = !(legit || (write.source == Source::Poll && lost.is_empty()));
    let mut f = if foreign {
        foreign_change(t, owner, g)
    } else {
        owner_change(t, owner, g, write, fights)
    };
    // Rewrites are mentioned next to chain changes, not next to hook removals alone.
    if !g.rewritten.is_empty() && !unchanged {
        f.details.push(format!(
            "also rewrote {} {owner} chains with the same rules (no net change)",
            g.rewritten.len()
        ));
    }
    if !foreign {
        out.push(f);
        return;
    }
    if write.source == Source::Poll {
        f.details
            .push("writer unknown: found by polling (no audit)".into());
    }
    if lost.is_empty() {
        out.push(f);
    } else {
        record_removal(out, f, t, owner, &lost, write, fights);
    }
}

/// A foreign change that removed `lost` (owned chains deleted, flushed or unhooked):
/// counted against the writer as a revert, and followed by a fight detection when the
/// removals and the owner's restores make one.
fn record_removal(
    out: &mut Vec<Detection>,
    mut f: Detection,
    t: &TableChanges,
    owner: &str,
    lost: &[&str],
    write: &Write<'_>,
    fights: &mut FightTracker,
) {
    let (n, fight) = fights.revert(&t.label(), owner, &write.party, lost, write.now_ms);
    f.revert = Some(n);
    f.fight = fight.clone();
    out.push(f.clone());
    if let Some(fi) = fight {
        let mut ff = Detection::new(Kind::Fight, Action::Fight, t, Some(owner.to_string()));
        ff.chains = f.chains;
        ff.chain_count = f.chain_count;
        ff.revert = Some(n);
        ff.fight = Some(fi);
        out.push(ff);
    }
}

/// Only rewrites with the same rules: by the owner, its own write; by anyone else,
/// information, not tampering.
fn rewrite_detection(t: &TableChanges, owner: &str, g: &Group<'_>, legit: bool) -> Detection {
    let kind = if legit {
        Kind::OwnerChange
    } else {
        Kind::Rewrite
    };
    let mut f = Detection::new(kind, Action::Rewritten, t, Some(owner.to_string()));
    f.set_chains(g.rewritten.iter());
    f.details.push(format!(
        "every rule of these chains removed and the same rules added back in \
         the same order: no net change{}",
        if legit { "" } else { "; not a foreign change" }
    ));
    f
}

/// The owner's own change; chains it adds or modifies that a fight removed are
/// recorded as restored.
fn owner_change(
    t: &TableChanges,
    owner: &str,
    g: &Group<'_>,
    write: &Write<'_>,
    fights: &mut FightTracker,
) -> Detection {
    let restored = !(g.added.is_empty() && g.modified.is_empty())
        && fights.restore(
            &t.label(),
            owner,
            &write.party,
            &[&g.added, &g.modified],
            write.now_ms,
        );
    let action = if restored {
        Action::Restored
    } else if !g.added.is_empty() {
        Action::Added
    } else if !g.removed.is_empty() {
        Action::Deleted
    } else {
        Action::Modified
    };
    let mut f = Detection::new(Kind::OwnerChange, action, t, Some(owner.to_string()));
    f.set_chains(union(&[&g.added.0, &g.removed.0, &g.modified.0, &g.flushed.0]).into_iter());
    f.rules_added = g.rules_added;
    f.rules_removed = g.rules_removed;
    f
}

/// A change to `owner`'s chains by a writer that is not theirs, named by its worst
/// action (deleted, flushed, unhooked, added, modified), with the rest in details.
fn foreign_change(t: &TableChanges, owner: &str, g: &Group<'_>) -> Detection {
    let action = if !g.removed.is_empty() {
        Action::Deleted
    } else if !g.flushed.is_empty() {
        Action::Flushed
    } else if !g.unhooked.is_empty() {
        Action::Unhooked
    } else if !g.added.is_empty() && g.modified.is_empty() {
        Action::Added
    } else {
        Action::Modified
    };
    let mut f = Detection::new(Kind::ForeignChange, action, t, Some(owner.to_string()));
    match action {
        Action::Deleted => f.set_chains(g.removed.iter()),
        Action::Flushed => f.set_chains(g.flushed.iter()),
        Action::Unhooked => f.set_chains(g.unhooked.iter().map(String::as_str)),
        _ => f.set_chains(union(&[&g.added.0, &g.modified.0]).into_iter()),
    }
    if action == Action::Deleted && !g.flushed.is_empty() {
        f.details
            .push(format!("also flushed {} {owner} chains", g.flushed.len()));
    }
    if !g.unhooked.is_empty() && action != Action::Unhooked {
        f.details.push(format!(
            "removed hook rules: {}",
            g.unhooked.iter().cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    for c in CANARIES {
        if g.removed.contains(c) || g.flushed.contains(c) {
            f.details.push(format!("canary/hint chain {c} vanished"));
        }
    }
    if t.whole_table_flushed {
        f.details.push(format!("whole {} table flushed", t.label()));
    }
    f.rules_added = g.rules_added;
    f.rules_removed = g.rules_removed;
    f
}

/// Rules a writer that does not own hooks inserted ahead of kube-proxy's or a CNI's
/// hook rules, as one foreign change; None when there are none.
fn inserted_detection(t: &TableChanges, inserted: &[&HookRule]) -> Option<Detection> {
    if inserted.is_empty() {
        return None;
    }
    let mut f = Detection::new(Kind::ForeignChange, Action::Inserted, t, None);
    let names: BTreeSet<&str> = inserted.iter().map(|h| h.chain.as_str()).collect();
    f.set_chains(names.into_iter());
    f.rules_added = inserted.len();
    for h in inserted {
        f.details.push(match (&h.text, &h.jump) {
            (Some(text), _) => format!("{}: {text}", h.chain),
            (None, Some(j)) => format!("{}: -j {j}", h.chain),
            (None, None) => match &h.verdict {
                Some(v) => format!("{}: a rule ending in {v}", h.chain),
                None => format!("{}: a rule", h.chain),
            },
        });
    }
    f.details
        .push("inserted ahead of kube-proxy/CNI hook rules".into());
    Some(f)
}

/// One policy-change detection per base chain whose policy changed.
fn policy_detections(t: &TableChanges) -> impl Iterator<Item = Detection> + '_ {
    t.policies.iter().map(move |p| {
        let mut f = Detection::new(Kind::PolicyChange, Action::Policy, t, None);
        f.set_chains(std::iter::once(p.chain.as_str()));
        f.details.push(format!(
            "{} policy {} -> {}",
            p.chain,
            p.from.as_deref().unwrap_or("none (new chain)"),
            p.to
        ));
        f
    })
}

/// Convenience for callers and tests: detect the changes from `old` to `new`.
pub fn detect_rulesets(
    old: &plumb_ruleset::Ruleset,
    new: &plumb_ruleset::Ruleset,
    actor: &Actor,
    now_ms: u64,
    fights: &mut FightTracker,
) -> Vec<Detection> {
    let changes = crate::changes::from_rulesets(old, new);
    detect(&changes, actor, Source::Write, now_ms, fights)
}

#[cfg(test)]
mod fight_cap_tests {
    use super::*;

    #[test]
    fn at_the_cap_a_tracked_fight_goes_on_and_a_new_party_is_not_tracked() {
        let mut t = FightTracker::new(FightPolicy::default());
        let key = (
            "ip filter".to_string(),
            "kube-proxy".to_string(),
            "agent".to_string(),
        );
        let revert = |t: &mut FightTracker, remover: &str, now: u64| {
            t.revert("ip filter", "kube-proxy", remover, &["KUBE-SERVICES"], now)
        };
        assert_eq!(revert(&mut t, "agent", 1_000).0, 1);
        for i in 1..MAX_FIGHTS {
            revert(&mut t, &format!("other-{i}"), 1_000);
        }
        assert_eq!(t.fights.len(), MAX_FIGHTS);
        // kube-proxy restores between the agent's removals.
        t.fights
            .get_mut(&key)
            .unwrap()
            .restores
            .push((2_000, "kube-proxy".into()));
        assert_eq!(revert(&mut t, "agent", 3_000).0, 2);
        t.fights
            .get_mut(&key)
            .unwrap()
            .restores
            .push((4_000, "kube-proxy".into()));
        let (n, fight) = revert(&mut t, "agent", 5_000);
        assert_eq!(n, 3);
        let fight = fight.expect("the tracked fight is reported at the cap");
        assert_eq!(fight.remover, "agent");
        assert_eq!(fight.restores, 2);
        // A party never seen before is not tracked once the cap is reached.
        assert_eq!(revert(&mut t, "newcomer", 5_000), (1, None));
        assert_eq!(t.fights.len(), MAX_FIGHTS);
    }
}
