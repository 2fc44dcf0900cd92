//! What the scout learns of a transaction: a sample of its notifications (the first
//! one of each datagram the kernel sends) and, at its NEWGEN, its writer. Pure.
//!
//! The kernel names the writer of an nf_tables transaction only in NEWGEN, after all
//! of the transaction's notifications. A 10k-service revert is ~150k notifications
//! (~60 MB) that the listener needs hundreds of milliseconds to decode, and longer
//! when it is still busy with the kube-proxy sync that came before. The scout's
//! socket copies only the head of each datagram, so it reaches NEWGEN within a few
//! milliseconds of the listener's first message, with one notification in ten or so
//! sampled. [`Sample::changes`] turns the sample into a [`ChangeSet`] that detection
//! judges like any other; the watcher reports its findings as *preliminary* events
//! (counts are lower bounds, a chain whose rules were sampled as removed shows as
//! flushed) and the listener's complete event of the same generation follows.

use crate::changes::{ChainDelta, ChangeSet, TableChanges};
use crate::nft_events::{NftEvent, Op, family_name};
use std::collections::BTreeMap;

/// Sampled notifications from which a transaction counts as big: smaller ones end
/// long before a preliminary event would help (every test, UFW, a hand-typed rule).
pub const BIG_TRANSACTION_SAMPLES: usize = 200;

/// Chain names remembered per transaction at most (memory bound; counts go on).
pub const MAX_SAMPLED_CHAINS: usize = 8192;

#[derive(Clone, Debug, Default)]
struct ChainSample {
    created: bool,
    deleted: bool,
    rules_added: usize,
    rules_removed: usize,
}

#[derive(Clone, Debug, Default)]
struct TableSample {
    created: bool,
    deleted: bool,
    chains: BTreeMap<String, ChainSample>,
}

/// The sampled notifications of one transaction, up to its NEWGEN.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    tables: BTreeMap<(u8, String), TableSample>,
    samples: usize,
    chains: usize,
}

impl Sample {
    /// Notifications sampled so far.
    pub fn len(&self) -> usize {
        self.samples
    }

    pub fn is_empty(&self) -> bool {
        self.samples == 0
    }

    /// Whether the transaction is big enough for a preliminary event.
    pub fn is_big(&self) -> bool {
        self.samples >= BIG_TRANSACTION_SAMPLES
    }

    /// Adds one sampled notification (NEWGEN and other kinds are ignored).
    pub fn push(&mut self, e: &NftEvent<'_>) {
        let (family, table, chain, op, rule) = match *e {
            NftEvent::Table { op, family, name } => (family, name, None, op, false),
            NftEvent::Chain {
                op,
                family,
                table,
                name,
                ..
            } => (family, table, Some(name), op, false),
            NftEvent::Rule {
                op,
                family,
                table,
                chain,
                ..
            } => (family, table, Some(chain), op, true),
            _ => return,
        };
        if table.is_empty() || chain.is_some_and(str::is_empty) {
            return;
        }
        self.samples += 1;
        let t = match self.tables.get_mut(&(family, table.to_string())) {
            Some(t) => t,
            None => self.tables.entry((family, table.to_string())).or_default(),
        };
        let Some(chain) = chain else {
            match op {
                Op::New => t.created = true,
                Op::Del => t.deleted = true,
            }
            return;
        };
        let c = match t.chains.get_mut(chain) {
            Some(c) => c,
            None if self.chains < MAX_SAMPLED_CHAINS => {
                self.chains += 1;
                t.chains.entry(chain.to_string()).or_default()
            }
            None => return,
        };
        match (rule, op) {
            (true, Op::New) => c.rules_added += 1,
            (true, Op::Del) => c.rules_removed += 1,
            (false, Op::New) => c.created = true,
            (false, Op::Del) => c.deleted = true,
        }
    }

    /// The sample as a change set. A chain deleted and created again in the
    /// transaction shows as modified; rules after the change are unknown, so a chain
    /// with sampled removals and no sampled additions shows as flushed.
    pub fn changes(&self) -> ChangeSet {
        let mut out = ChangeSet::default();
        for ((family, table), t) in &self.tables {
            let mut tc = TableChanges {
                family: family_name(*family).to_string(),
                table: table.clone(),
                table_added: t.created && !t.deleted,
                table_removed: t.deleted && !t.created,
                ..TableChanges::default()
            };
            for (name, c) in &t.chains {
                match (c.created, c.deleted) {
                    (true, false) => tc.chains_added.push(ChainDelta {
                        name: name.clone(),
                        rules: c.rules_added,
                    }),
                    (false, true) => tc.chains_removed.push(ChainDelta {
                        name: name.clone(),
                        rules: c.rules_removed,
                    }),
                    _ => {
                        // Re-created, or only its rules touched.
                        let (ad, rm) = if c.created {
                            (c.rules_added.max(1), c.rules_removed.max(1))
                        } else {
                            (c.rules_added, c.rules_removed)
                        };
                        if ad > 0 {
                            tc.rules_added.insert(name.clone(), ad);
                        }
                        if rm > 0 {
                            tc.rules_removed.insert(name.clone(), rm);
                        }
                        if ad > 0 || rm > 0 {
                            tc.rules_after.insert(name.clone(), ad);
                        }
                    }
                }
            }
            tc.whole_table_flushed = t.deleted && !t.created;
            if !tc.is_empty() {
                out.tables.push(tc);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actor::{Actor, ProcInfo};
    use crate::detect::{Action, FightTracker, Kind, Source, detect};

    fn rule<'a>(op: Op, chain: &'a str) -> NftEvent<'a> {
        NftEvent::Rule {
            op,
            family: 2,
            table: "nat",
            chain,
            handle: None,
            appended: true,
            jump: None,
            verdict: None,
        }
    }

    fn chain<'a>(op: Op, name: &'a str) -> NftEvent<'a> {
        NftEvent::Chain {
            op,
            family: 2,
            table: "nat",
            name,
            hook: None,
            policy: None,
        }
    }

    fn actor(comm: &str) -> Actor {
        Actor::from_chain(&[ProcInfo {
            pid: 7,
            comm: Some(comm.into()),
            ..ProcInfo::default()
        }])
    }

    /// An agent's revert of a big ruleset, sampled: rules of kube-proxy chains, then the
    /// chains themselves, then the table.
    fn revert() -> Sample {
        let mut s = Sample::default();
        for i in 0..300 {
            s.push(&rule(Op::Del, &format!("KUBE-SEP-{i:04}")));
        }
        s.push(&chain(Op::Del, "KUBE-SERVICES"));
        s.push(&NftEvent::Table {
            op: Op::Del,
            family: 2,
            name: "nat",
        });
        s.push(&NftEvent::Table {
            op: Op::New,
            family: 2,
            name: "nat",
        });
        s
    }

    #[test]
    fn a_sampled_revert_is_a_foreign_change_by_the_agent_and_an_owner_sync_is_not() {
        let s = revert();
        assert!(s.is_big());
        let changes = s.changes();
        let nat = &changes.tables[0];
        assert_eq!(nat.chains_removed[0].name, "KUBE-SERVICES");
        assert_eq!(nat.rules_removed.len(), 300);
        let f = detect(
            &changes,
            &actor("venAgent"),
            Source::Write,
            0,
            &mut FightTracker::default(),
        );
        let foreign = f
            .iter()
            .find(|f| f.kind == Kind::ForeignChange)
            .expect("foreign change");
        assert_eq!(foreign.owner.as_deref(), Some("kube-proxy"));
        assert_eq!(foreign.action, Action::Deleted);
        // The same messages from kube-proxy (a full sync deletes before it re-adds).
        let f = detect(
            &changes,
            &actor("kube-proxy"),
            Source::Write,
            0,
            &mut FightTracker::default(),
        );
        assert!(f.iter().all(|f| f.kind == Kind::OwnerChange), "{f:?}");
    }

    #[test]
    fn recreated_chains_are_modified_and_memory_is_bounded() {
        let mut s = Sample::default();
        s.push(&chain(Op::Del, "KUBE-SVC-A"));
        s.push(&chain(Op::New, "KUBE-SVC-A"));
        s.push(&rule(Op::New, "KUBE-SVC-A"));
        let c = s.changes();
        assert!(c.tables[0].chains_removed.is_empty() && c.tables[0].chains_added.is_empty());
        assert_eq!(c.tables[0].rules_added["KUBE-SVC-A"], 1);
        assert_eq!(c.tables[0].rules_removed["KUBE-SVC-A"], 1);
        assert!(!s.is_big());
        let mut s = Sample::default();
        for i in 0..MAX_SAMPLED_CHAINS + 10 {
            s.push(&rule(Op::Del, &format!("KUBE-SEP-{i}")));
        }
        assert_eq!(s.len(), MAX_SAMPLED_CHAINS + 10);
        assert_eq!(
            s.changes().tables[0].rules_removed.len(),
            MAX_SAMPLED_CHAINS
        );
        // Empty names (a cut message) are not sampled.
        s.push(&rule(Op::Del, ""));
        assert_eq!(s.len(), MAX_SAMPLED_CHAINS + 10);
    }
}
