//! What the scout learns of a transaction: a sample of its notifications (those at
//! the head of each datagram its socket filter lets through, one in eight), who is
//! committing it while the kernel sends it ([`PendingSends`], from the eBPF writer
//! probe's batch sends) and, at its NEWGEN, its writer. Pure.
//!
//! The kernel names the writer of an nf_tables transaction only in NEWGEN, after all
//! of the transaction's notifications. A 10k-service revert is ~150k notifications
//! (~14k datagrams) that the listener needs hundreds of milliseconds to decode, and
//! longer when it is still busy with the kube-proxy sync that came before. The scout's
//! socket queues NEWGEN and a random eighth of the other datagrams, cut to their heads
//! ([`crate::socket_filter`]), so it reads NEWGEN as the kernel sends it. [`Sample::changes`]
//! turns the sample into a [`ChangeSet`] that detection judges like any other; the
//! watcher reports its findings as *preliminary* events (counts are lower bounds, a
//! chain whose rules were sampled as removed shows as flushed) and the listener's
//! complete event of the same generation follows.

use crate::changes::{ChainDelta, ChangeSet, TableChanges};
use crate::nft_events::{NftEvent, Op, family_name};
use std::collections::BTreeMap;

/// Sampled notifications from which a transaction counts as big (a preliminary event):
/// smaller ones end long before a preliminary event would help (every test, UFW, a
/// hand-typed rule, a 100-service sync). A sampled datagram's 512-byte head holds 1–8
/// notifications and one datagram in eight is sampled, so 128 samples are ~130–1000
/// datagrams; a 12-service revert (~20 datagrams) stays well below even when many of
/// its datagrams happen to be sampled, a 10k-service revert (~14k) is far above.
pub const BIG_TRANSACTION_SAMPLES: usize = 128;

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

/// A batch the writer probe ([`crate::writer_probe`]) saw being sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sent {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
}

/// Batches sent that no NEWGEN has answered yet, oldest first (at most this many).
pub const MAX_PENDING_SENDS: usize = 64;

/// The batches sent into the watched namespace whose transaction the scout has not
/// seen end, so that a transaction's writer is known from its first notifications.
///
/// The kernel commits batches one at a time (nfnetlink's per-subsystem mutex) in about
/// the order their writers entered `sendmsg`, and sends a transaction's notifications
/// and NEWGEN before that `sendmsg` returns. So while the scout reads a transaction
/// live, its writer is the oldest pending send whose thread is still inside `sendmsg`;
/// older pending sends that are not were batches the kernel refused (they commit
/// nothing and get no NEWGEN) and are dropped. The NEWGEN confirms or contradicts it.
#[derive(Clone, Debug, Default)]
pub struct PendingSends {
    sends: std::collections::VecDeque<Sent>,
}

impl PendingSends {
    pub fn push(&mut self, s: Sent) {
        if self.sends.len() == MAX_PENDING_SENDS {
            self.sends.pop_front();
        }
        self.sends.push_back(s);
    }

    pub fn len(&self) -> usize {
        self.sends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sends.is_empty()
    }

    /// A NEWGEN by `pid` was read: that process's oldest pending send and every
    /// older one are done. A NEWGEN whose writer sent nothing pending (a writer the
    /// probe does not see) leaves the others waiting.
    pub fn committed(&mut self, pid: Option<u32>) {
        if let Some(i) = pid.and_then(|p| self.sends.iter().position(|s| s.pid == p)) {
            self.sends.drain(..=i);
        }
    }

    /// The writer of the transaction being sent now: the oldest pending send for
    /// which `in_sendmsg` holds; the older ones are dropped.
    pub fn committing(&mut self, in_sendmsg: impl Fn(&Sent) -> bool) -> Option<&Sent> {
        while let Some(s) = self.sends.front() {
            if in_sendmsg(s) {
                return self.sends.front();
            }
            self.sends.pop_front();
        }
        None
    }
}

/// `sendmsg` on x86_64 and aarch64.
#[cfg(target_arch = "x86_64")]
const SYS_SENDMSG: &str = "46";
#[cfg(target_arch = "aarch64")]
const SYS_SENDMSG: &str = "211";
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const SYS_SENDMSG: &str = "";

/// Whether `/proc/PID/task/TID/syscall` says the thread may be inside `sendmsg`:
/// blocked or preempted in it, or on a CPU (`running`: the kernel cannot say where a
/// running thread is, and a writer committing a big batch is on a CPU).
pub fn may_be_in_sendmsg(proc_syscall: &str) -> bool {
    let first = proc_syscall.split_whitespace().next().unwrap_or("");
    first == "running" || (!SYS_SENDMSG.is_empty() && first == SYS_SENDMSG)
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
        for i in 0..BIG_TRANSACTION_SAMPLES + 40 {
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
        assert_eq!(nat.rules_removed.len(), BIG_TRANSACTION_SAMPLES + 40);
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
    fn the_writer_is_the_oldest_send_still_in_sendmsg_and_newgen_settles_it() {
        let sent = |pid: u32| Sent {
            pid,
            tid: pid,
            comm: format!("w{pid}"),
        };
        let mut p = PendingSends::default();
        // kube-proxy (1) commits while the agent (2) waits on the mutex.
        p.push(sent(1));
        p.push(sent(2));
        assert_eq!(p.committing(|_| true).map(|s| s.pid), Some(1));
        p.committed(Some(1));
        assert_eq!(p.committing(|_| true).map(|s| s.pid), Some(2));
        // A refused batch (3 returned from sendmsg without a commit) is skipped.
        p.committed(Some(2));
        p.push(sent(3));
        p.push(sent(4));
        assert_eq!(p.committing(|s| s.pid != 3).map(|s| s.pid), Some(4));
        assert_eq!(p.len(), 1);
        // A NEWGEN by a writer the probe did not see leaves the others waiting.
        p.committed(Some(99));
        assert_eq!(p.len(), 1);
        p.committed(Some(4));
        assert!(p.is_empty());
        assert_eq!(p.committing(|_| true), None);
        // Bounded.
        for i in 0..(MAX_PENDING_SENDS as u32 + 5) {
            p.push(sent(100 + i));
        }
        assert_eq!(p.len(), MAX_PENDING_SENDS);
        assert_eq!(p.committing(|_| true).map(|s| s.pid), Some(105));
        // /proc/PID/task/TID/syscall.
        assert!(may_be_in_sendmsg("running"));
        assert!(!may_be_in_sendmsg("-1 0x7ffd 0x7f12"));
        assert!(!may_be_in_sendmsg(
            "7 0x1 0x2 0x3 0x4 0x5 0x6 0x7ffd 0x7f12"
        ));
        assert!(!may_be_in_sendmsg(""));
        #[cfg(target_arch = "x86_64")]
        assert!(may_be_in_sendmsg(
            "46 0x3 0x7ffd 0x0 0x0 0x0 0x0 0x7ffd 0x7f12"
        ));
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
