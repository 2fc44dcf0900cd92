//! What the scout learns of a transaction: a sample of its notifications (the first
//! one of each datagram its socket filter lets through, one in eight) and, at its
//! NEWGEN, its writer. Pure.
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

/// Sampled notifications from which a transaction counts as big (a preliminary event
/// at its NEWGEN): smaller ones end long before a preliminary event would help (every
/// test, UFW, a hand-typed rule, a 100-service sync). 32 samples are ~256 datagrams
/// (one in eight is sampled); a 10k-service revert has ~14k.
pub const BIG_TRANSACTION_SAMPLES: usize = 32;

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

/// One line of `/proc/net/netlink`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetlinkSocket {
    pub protocol: u32,
    pub portid: u32,
    /// The first 32 multicast groups joined.
    pub groups: u32,
    /// A dump is running on the socket.
    pub dumping: bool,
    pub inode: u64,
}

/// Parses `/proc/net/netlink` (header line, then `sk Eth Pid Groups Rmem Wmem Dump
/// Locks Drops Inode`). Lines that do not parse are skipped.
pub fn parse_proc_netlink(text: &str) -> Vec<NetlinkSocket> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            Some(NetlinkSocket {
                protocol: w.get(1)?.parse().ok()?,
                portid: w.get(2)?.parse().ok()?,
                groups: u32::from_str_radix(w.get(3)?, 16).ok()?,
                dumping: *w.get(6)? != "0",
                inode: w.get(9)?.parse().ok()?,
            })
        })
        .collect()
}

/// `NETLINK_NETFILTER`.
const NETLINK_NETFILTER: u32 = 12;

/// The sockets that may be committing a transaction: `NETLINK_NETFILTER` sockets of
/// the namespace bound to a port that joined no group (listeners such as plumb's own
/// and `nft monitor` do) and run no dump (`iptables-save`, `nft list` do). A writer
/// holds such a socket while the kernel sends its transaction's notifications. The
/// port id is the writer's pid for iptables and nft (autobind); the caller checks
/// that this pid owns the socket (`/proc/PID/fd`) before naming it.
pub fn quiet_netfilter_sockets(sockets: &[NetlinkSocket], own_pid: u32) -> Vec<NetlinkSocket> {
    sockets
        .iter()
        .filter(|s| {
            s.protocol == NETLINK_NETFILTER
                && s.portid != 0
                && s.portid != own_pid
                && s.groups == 0
                && !s.dumping
        })
        .copied()
        .collect()
}

/// `sendmsg` on x86_64 and aarch64 (the commit runs inside the writer's `sendmsg`).
#[cfg(target_arch = "x86_64")]
const SYS_SENDMSG: &str = "46";
#[cfg(target_arch = "aarch64")]
const SYS_SENDMSG: &str = "211";
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const SYS_SENDMSG: &str = "";

/// What /proc says about a process holding a quiet netfilter socket, as evidence
/// that it is the one committing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitEvidence {
    /// Runnable, and its kernel stack (`/proc/PID/stack`, root only) is inside
    /// nfnetlink's batch processing: the commit itself.
    InBatch,
    /// Runnable (state `R`) inside `sendmsg`: the commit runs in the writer's
    /// `sendmsg`, and a writer waiting for another's commit sleeps (`D`) instead.
    InSendmsg,
    /// On a CPU right now (`/proc/PID/syscall` says `running`): committing, or busy
    /// in user space (an `iptables-save` printing).
    Running,
    /// In user space while not on a CPU, in another system call, or asleep.
    No,
}

/// Evidence from the state letter of `/proc/PID/stat`, `/proc/PID/syscall` (which
/// says `running` for any runnable task, on a CPU or not) and `/proc/PID/stack`.
pub fn commit_evidence(state: char, syscall: &str, stack: &str) -> CommitEvidence {
    let first = syscall.split_whitespace().next().unwrap_or("");
    if state == 'R' && stack.contains("nfnetlink_rcv") {
        CommitEvidence::InBatch
    } else if first == "running" {
        CommitEvidence::Running
    } else if state == 'R' && !SYS_SENDMSG.is_empty() && first == SYS_SENDMSG {
        CommitEvidence::InSendmsg
    } else {
        CommitEvidence::No
    }
}

/// The one committing among candidates with their evidence: the strongest evidence
/// present (in a batch, then in `sendmsg`) must name exactly one; None when that does
/// not single one out. Merely runnable is not enough: when the writer is already out
/// of the kernel, another runnable socket holder (an `iptables-save` printing) would
/// be named instead.
pub fn committing_among<T: Copy>(candidates: &[(T, CommitEvidence)]) -> Option<T> {
    use CommitEvidence::*;
    let strongest = [InBatch, InSendmsg]
        .into_iter()
        .find(|e| candidates.iter().any(|c| c.1 == *e))?;
    let mut it = candidates.iter().filter(|c| c.1 == strongest);
    let one = it.next()?;
    it.next().is_none().then_some(one.0)
}

/// The state letter of `/proc/PID/stat` (after the `(comm)`).
pub fn stat_state(stat: &str) -> Option<char> {
    stat.get(stat.rfind(')')? + 1..)?
        .trim_start()
        .chars()
        .next()
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
    fn the_committing_socket_is_the_only_quiet_netfilter_socket() {
        let text = "sk               Eth Pid        Groups   Rmem     Wmem     Dump  Locks    Drops    Inode
0000000042d3ec3b 0   0          00000000 0        0        0     2        0        94
00000000aaaaaaaa 12  0          00000000 0        0        0     2        0        95
00000000bbbbbbbb 12  4211       00000000 0        0        0     2        0        7001
00000000cccccccc 12  900        00000040 0        0        0     2        0        7002
00000000dddddddd 12  901        00000000 0        0        1     2        0        7003
00000000eeeeeeee 9   4212       00000000 0        0        0     2        0        7004
garbage
";
        let socks = parse_proc_netlink(text);
        assert_eq!(socks.len(), 6);
        let w = quiet_netfilter_sockets(&socks, 900);
        assert_eq!(w.len(), 1);
        assert_eq!((w[0].portid, w[0].inode), (4211, 7001));
        // Our own socket is never the writer.
        assert!(quiet_netfilter_sockets(&socks, 4211).is_empty());
        use CommitEvidence::*;
        let batch = "[<0>] nf_tables_commit+0x1f/0x1a0 [nf_tables]\n[<0>] nfnetlink_rcv_batch+0x6a0/0x9b0 [nfnetlink]\n[<0>] nfnetlink_rcv+0x11c/0x150 [nfnetlink]\n";
        let user = "[<0>] irqentry_exit_to_user_mode+0x11f/0x1b0\n";
        assert_eq!(commit_evidence('R', "running", batch), InBatch);
        assert_eq!(commit_evidence('D', "46 0x3", batch), No);
        assert_eq!(commit_evidence('R', "running", user), Running);
        assert_eq!(commit_evidence('R', "-1 0x7ffd 0x7f12", ""), No);
        assert_eq!(
            commit_evidence('S', "1 0x1 0x2 0x3 0x4 0x5 0x6 0x7ffd 0x7f12", ""),
            No
        );
        assert_eq!(commit_evidence('R', "", ""), No);
        #[cfg(target_arch = "x86_64")]
        {
            let sendmsg = "46 0x3 0x7ffd 0x0 0x0 0x0 0x0 0x7ffd 0x7f12";
            assert_eq!(commit_evidence('R', sendmsg, ""), InSendmsg);
            // A writer waiting for another's commit sleeps in sendmsg: not it.
            assert_eq!(commit_evidence('D', sendmsg, ""), No);
        }
        assert_eq!(stat_state("42 (a b) c) R 1 2"), Some('R'));
        // The committing writer preempted in sendmsg, an iptables-save printing on a CPU.
        assert_eq!(committing_among(&[(1, InSendmsg), (2, Running)]), Some(1));
        // Both runnable (the save printing, the writer committing): its stack tells.
        assert_eq!(committing_among(&[(1, Running), (2, InBatch)]), Some(2));
        assert_eq!(committing_among(&[(1, InBatch), (2, InBatch)]), None);
        assert_eq!(committing_among(&[(1, Running), (2, No)]), None);
        assert_eq!(committing_among(&[(1, Running), (2, Running)]), None);
        assert_eq!(committing_among(&[(1, InSendmsg), (2, InSendmsg)]), None);
        assert_eq!(committing_among::<u32>(&[]), None);
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
