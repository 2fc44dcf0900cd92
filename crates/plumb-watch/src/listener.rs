//! The nftables listener thread: reads every notification of the watched namespace,
//! applies each to the chain state as it arrives ([`crate::state::Transaction`]), and
//! hands the detection loop each committed transaction with its writer.
//!
//! The writer is named three ways, best first: while the kernel still sends the
//! transaction, from the eBPF writer probe's pending batch sends
//! ([`crate::pending_sends`]), which is also when a big transaction gets a
//! *preliminary* event of what it has done so far; at NEWGEN from /proc (pid and comm
//! from the kernel); later from audit (in the detection loop) when the writer is gone.
//!
//! One reader for everything: the listener keeps up with the kernel over a transaction
//! (it costs ~0.3 µs of CPU per notification, the kernel ~1 µs to send one), though
//! within one it may lag some milliseconds; [`PendingSends::committing`] then names
//! nobody rather than guess (where the probe's view itself misleads, NEWGEN
//! contradicts the name: see [`PendingSends`]). One reader is enough: a second
//! subscription with a socket filter passing NEWGEN and a sample would cost CPU and add
//! nothing while the listener keeps pace with the kernel.
//!
//! Gaps (ENOBUFS, a cut datagram) and resyncs: see `Listener::resync`.

use crate::actor::{self, Actor, Hints};
use crate::messages::{Committed, Msg};
use crate::metrics::{ErrorKind, Metrics};
use crate::nft_events::{LISTENER_BATCH, NftEvent, NftListener, Received};
use crate::pending_sends::{PendingSends, Sent, may_be_in_sendmsg};
use crate::state::{NftState, Transaction};
use crate::writer_probe::WriterProbe;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

/// Notifications from which a transaction counts as big (a preliminary event while
/// it is still being sent). Smaller ones end within a few milliseconds, before a
/// preliminary event would help (every test, UFW, a hand-typed rule, a 100-service
/// sync, a 12-service revert of ~200 notifications); a 10k-service revert is ~150k.
pub const BIG_TRANSACTION: usize = 4096;

/// Longest the listener waits for more of a transaction's datagrams to queue once its
/// queue is drained: a 300k-notification sync then costs a wake-up per batch of
/// datagrams rather than per datagram (adds at most this to an event's latency).
const GATHER: Duration = Duration::from_millis(2);
/// How often the listener tries again to name the writer of the transaction it reads
/// when it could not (no pending send yet, or it lags behind a writer that left
/// `sendmsg`): at most this much later than it could have.
const NAME_RETRY: Duration = Duration::from_millis(1);
/// Longest a resync spends discarding what is queued before its dump.
const DISCARD_LIMIT: Duration = Duration::from_secs(2);

/// How a preliminary event knows its writer.
pub const BY_PROBE: &str = "writer: the process the eBPF writer probe saw sending the batch being committed (its NEWGEN confirms it in the complete event)";

/// Counts of naming by the writer probe, for the summary: transactions named before
/// their NEWGEN, and of those the NEWGEN confirmed and contradicted.
pub type ProbeNaming = Arc<[AtomicU64; 3]>;

/// The generation after `g` (the kernel skips 0 when it wraps).
fn next_generation(g: u32) -> u32 {
    match g.wrapping_add(1) {
        0 => 1,
        n => n,
    }
}

/// Whether a transaction whose NEWGEN carries `id` is already in a state dumped at
/// generation `dumped`: notifications queued while the dump was read (the listener
/// subscribes first) belong to transactions up to the dump's generation as well as
/// after it; the former are undone (`Transaction::roll_back`), not applied twice.
/// Generations wrap (`u32`).
fn already_in_dump(id: u32, dumped: Option<u32>) -> bool {
    dumped.is_some_and(|g| (id.wrapping_sub(g) as i32) <= 0)
}

/// Whether thread `s` may be inside `sendmsg` now (/proc; gone: no).
fn in_sendmsg(s: &Sent) -> bool {
    std::fs::read_to_string(format!("/proc/{}/task/{}/syscall", s.pid, s.tid))
        .is_ok_and(|t| may_be_in_sendmsg(&t))
}

/// Resolves a writer (pid and comm from NEWGEN or the probe) from /proc, now.
fn resolve_writer(pid: Option<u32>, comm: Option<String>) -> Actor {
    match pid {
        Some(pid) if pid > 0 => actor::resolve(
            pid,
            &Hints {
                comm,
                ..Hints::default()
            },
        ),
        _ => Actor {
            comm,
            ..Actor::unknown()
        },
    }
}

/// CLOCK_MONOTONIC now, in nanoseconds: the eBPF probe's clock (`bpf_ktime_get_ns`).
pub(crate) fn monotonic_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which `t` is.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}

/// A writer named by the probe while it was sending.
struct Named {
    /// Resolved from /proc while it was inside `sendmsg`.
    actor: Actor,
    /// The sending thread: NEWGEN names a thread, and confirms the name if it is this.
    tid: u32,
    /// When its send began (CLOCK_MONOTONIC ns).
    at_ns: u64,
}

/// The transaction being read.
struct Open {
    t: Transaction,
    /// When its first notification was read (≈ the commit).
    started: SystemTime,
    named: Option<Named>,
    /// No attempt to name its writer before this (each costs a /proc read and maybe a
    /// peek: at most one per [`NAME_RETRY`], not one per batch of datagrams).
    next_naming: Instant,
    /// Whether it had its preliminary event.
    early_sent: bool,
}

impl Open {
    fn new() -> Open {
        Open {
            t: Transaction::default(),
            started: SystemTime::now(),
            named: None,
            next_naming: Instant::now(),
            early_sent: false,
        }
    }
}

/// A transaction read up to its NEWGEN.
struct Ended {
    started: SystemTime,
    named: Option<Named>,
    /// None: it was in the dump the state came from already, and was rolled back.
    changes: Option<crate::changes::ChangeSet>,
    generation: u32,
    /// The writing thread, from NEWGEN.
    pid: Option<u32>,
    comm: Option<String>,
}

/// The listener thread's state. Built by the watcher, then [`Listener::run`].
pub(crate) struct Listener {
    pub(crate) nft: NftListener,
    pub(crate) netns: Option<String>,
    pub(crate) state: NftState,
    /// Generation of the dump `state` came from, until a transaction after it is seen.
    pub(crate) dumped: Option<u32>,
    /// When that dump was finished ([`monotonic_ns`]).
    pub(crate) dumped_at_ns: u64,
    pub(crate) tx: mpsc::Sender<Msg>,
    /// Resync requests from the detection loop (after a gap, debounced).
    pub(crate) resync: mpsc::Receiver<()>,
    pub(crate) metrics: Metrics,
    /// The eBPF writer probe, when it is attached: its ring buffer is read here,
    /// each time notifications arrive (a batch's send is reported before its first
    /// notification), not on a thread of its own that might be scheduled too late.
    pub(crate) probe: Option<WriterProbe>,
    /// Reports the probe's ring buffer dropped (the largest count seen).
    pub(crate) probe_dropped: Arc<AtomicU32>,
    pub(crate) naming: ProbeNaming,
}

/// What the listener keeps from one receive to the next.
struct Reading {
    /// The transaction being read, if one has begun.
    open: Option<Open>,
    /// The last generation read (NEWGEN or dump): the open transaction's is the next.
    last_gen: Option<u32>,
    /// Batches the probe saw sent whose NEWGEN has not been read.
    pending: PendingSends,
    /// The state changed since the chain gauge was last set.
    dirty: bool,
    /// When the chain gauge was last set.
    last_gauge: Instant,
}

/// Keeps level with the kernel when CPU is short: a lower nice value for the calling
/// thread only. Not allowed without CAP_SYS_NICE: then it stays as it is.
fn raise_priority() {
    // SAFETY: gettid and setpriority on this thread; no memory involved.
    unsafe {
        let tid = libc::gettid();
        let _ = libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, -5);
    }
}

impl Listener {
    /// Reads until `stop` is set or the detection loop is gone.
    pub(crate) fn run(mut self, stop: &AtomicBool) {
        raise_priority();
        let mut r = Reading {
            open: None,
            last_gen: self.dumped,
            pending: PendingSends::default(),
            dirty: false,
            last_gauge: Instant::now(),
        };
        while !stop.load(Ordering::Relaxed) {
            if self.resync.try_recv().is_ok() && !self.resync_now(&mut r) {
                return;
            }
            let (ended, received) = self.receive(&mut r);
            let Some(live) = self.on_received(received, &mut r) else {
                return;
            };
            self.read_probe(&mut r.pending);
            if !self.report_ended(ended, &mut r) {
                return;
            }
            if let Some(o) = &mut r.open {
                if !self.preview(o, &mut r.pending, r.last_gen) {
                    return;
                }
                if live {
                    // Mid-transaction with the queue drained: the kernel is still
                    // sending it. Let it queue more before the next call.
                    std::thread::sleep(GATHER);
                }
            }
            self.update_chain_gauge(&mut r);
        }
    }

    /// The resync the detection loop asked for. The queue is discarded: the open
    /// transaction's rest and NEWGENs are gone, whether the dump worked or not. False
    /// when the detection loop is gone.
    fn resync_now(&mut self, r: &mut Reading) -> bool {
        r.open = None;
        r.pending.clear();
        r.last_gen = self.resync();
        match r.last_gen {
            Some(_) => r.dirty = true,
            None => return self.tx.send(Msg::ResyncFailed).is_ok(),
        }
        true
    }

    /// Applies what is queued on the socket to the state, notification by
    /// notification; returns the transactions whose NEWGEN was read (those already in
    /// the dump the state came from rolled back) and what the receive said.
    fn receive(&mut self, r: &mut Reading) -> (Vec<Ended>, io::Result<Received>) {
        let (state, dumped) = (&mut self.state, &mut self.dumped);
        let (open, last_gen) = (&mut r.open, &mut r.last_gen);
        let mut ended: Vec<Ended> = Vec::new();
        let received = self.nft.receive_each(&mut |e| match e {
            NftEvent::Gen { id, pid, comm } => {
                *last_gen = Some(id);
                let Open {
                    t, started, named, ..
                } = open.take().unwrap_or_else(Open::new);
                let changes = if already_in_dump(id, *dumped) {
                    // Queued while the dump was read, and in it: applied twice.
                    // Undo it; it happened before the state's time.
                    t.roll_back(state);
                    None
                } else {
                    *dumped = None;
                    Some(t.finish(state))
                };
                ended.push(Ended {
                    started,
                    named,
                    changes,
                    generation: id,
                    pid,
                    comm: comm.map(str::to_string),
                });
            }
            e => open.get_or_insert_with(Open::new).t.push(state, &e),
        });
        (ended, received)
    }

    /// Acts on what a receive said: a gap drops the open transaction and the pending
    /// sends and is reported; an error is reported and waited out. Returns whether the
    /// queue was drained (what is being read is what the kernel is sending now), or
    /// None when the detection loop is gone.
    fn on_received(&mut self, received: io::Result<Received>, r: &mut Reading) -> Option<bool> {
        match received {
            Ok(Received::Gap) => {
                r.open = None;
                r.last_gen = None;
                r.pending.clear();
                self.tx.send(Msg::Gap).ok()?;
                Some(false)
            }
            Ok(Received::Data { datagrams }) => Some(datagrams < LISTENER_BATCH),
            Ok(Received::Idle | Received::Batches(_)) => Some(false),
            Err(e) => {
                let _ = self
                    .tx
                    .send(Msg::Error(ErrorKind::NetlinkReceive, e.to_string()));
                std::thread::sleep(Duration::from_millis(100));
                Some(false)
            }
        }
    }

    /// Counts the transactions that were in the dump already and reports the others.
    /// False when the detection loop is gone.
    fn report_ended(&mut self, ended: Vec<Ended>, r: &mut Reading) -> bool {
        let in_dump = ended.iter().filter(|e| e.changes.is_none()).count();
        if in_dump > 0 && self.tx.send(Msg::AlreadyInDump(in_dump as u64)).is_err() {
            return false;
        }
        for e in ended {
            r.dirty = true;
            if !self.report(e, &mut r.pending) {
                return false;
            }
        }
        true
    }

    /// Sets the chain gauge, at most once a second, only after changes and between
    /// transactions (a 10k-service state has 40k chains to classify).
    fn update_chain_gauge(&mut self, r: &mut Reading) {
        if r.dirty && r.open.is_none() && r.last_gauge.elapsed() >= Duration::from_secs(1) {
            r.dirty = false;
            r.last_gauge = Instant::now();
            self.metrics.set_chains(self.state.chain_names());
        }
    }

    /// The batch sends the probe reported since the last call (none without a probe).
    /// Reports the ring buffer dropped make the order of the pending ones unreliable:
    /// they are forgotten (names lost, not wrong).
    fn read_probe(&mut self, pending: &mut PendingSends) {
        let Some(probe) = &mut self.probe else { return };
        for b in probe.drain() {
            let before = self
                .probe_dropped
                .fetch_max(b.dropped_before, Ordering::Relaxed);
            if b.dropped_before > before {
                pending.clear();
            }
            if b.batch {
                pending.push(Sent {
                    pid: b.pid,
                    tid: b.tid,
                    comm: b.comm,
                    at_ns: b.monotonic_ns,
                });
            }
        }
    }

    /// Settles a transaction read up to its NEWGEN: its writer's pending send, the
    /// probe's naming counts, and (unless it was rolled back) hands it to the
    /// detection loop with its writer. False when the loop is gone.
    fn report(&self, e: Ended, pending: &mut PendingSends) -> bool {
        pending.committed(e.pid);
        // Named by the probe while it was in sendmsg (alive, surely), unless the NEWGEN
        // says otherwise; else resolved now: it may exit any moment.
        let named = match e.named {
            Some(n) if Some(n.tid) == e.pid => {
                self.naming[1].fetch_add(1, Ordering::Relaxed);
                Some(n.actor)
            }
            Some(_) => {
                self.naming[2].fetch_add(1, Ordering::Relaxed);
                None
            }
            None => None,
        };
        let Some(changes) = e.changes else {
            return true;
        };
        let c = Committed {
            changes,
            actor: named.unwrap_or_else(|| resolve_writer(e.pid, e.comm)),
            generation: e.generation,
            started: e.started,
        };
        self.tx.send(Msg::Committed(Box::new(c))).is_ok()
    }

    /// While a transaction is read: names its writer from the probe's pending sends
    /// ([`PendingSends::committing`]), and once it is big and its writer named, sends
    /// a preliminary event of what it has done so far. False when the detection loop
    /// is gone.
    fn preview(&mut self, o: &mut Open, pending: &mut PendingSends, last_gen: Option<u32>) -> bool {
        let now = Instant::now();
        if o.named.is_none() && o.next_naming <= now {
            o.next_naming = now + NAME_RETRY;
            let nft = &mut self.nft;
            if let Some(s) = pending.committing(in_sendmsg, || nft.queue_is_empty()) {
                self.naming[0].fetch_add(1, Ordering::Relaxed);
                o.named = Some(Named {
                    actor: resolve_writer(Some(s.pid), Some(s.comm.clone())),
                    tid: s.tid,
                    at_ns: s.at_ns,
                });
            }
        }
        if o.early_sent || o.t.len() < BIG_TRANSACTION {
            return true;
        }
        let (Some(n), Some(last)) = (&o.named, last_gen) else {
            return true;
        };
        // Its generation is the one after the last read, unless it may be in the dump
        // the state came from (no NEWGEN after the dump read yet, and sent before the
        // dump ended): then it may be rolled back at its NEWGEN, and gets no
        // preliminary event.
        if self.dumped.is_some() && n.at_ns <= self.dumped_at_ns {
            return true;
        }
        o.early_sent = true;
        let c = Committed {
            changes: o.t.changes_so_far(&self.state),
            actor: n.actor.clone(),
            generation: next_generation(last),
            started: o.started,
        };
        self.tx.send(Msg::Early(Box::new(c), BY_PROBE)).is_ok()
    }

    /// Re-reads the ruleset after a gap and reports what changed meanwhile; returns
    /// the dump's generation, or None when the dump failed (the ruleset kept changing):
    /// the old state is kept (stale, but not empty) and the detection loop retries.
    ///
    /// Dumped here, on this thread, as at start: notifications queue on the socket
    /// meanwhile, and those of transactions already in the dump are rolled back
    /// (`already_in_dump`). What is queued before the dump is in it: discarded first,
    /// which also clears the socket's congestion (while congested, the kernel drops
    /// notifications without reporting it).
    fn resync(&mut self) -> Option<u32> {
        if let Err(e) = self.nft.discard_queued(DISCARD_LIMIT) {
            let _ = self
                .tx
                .send(Msg::Error(ErrorKind::NetlinkReceive, e.to_string()));
        }
        let fresh = crate::baseline::read(self.netns.as_deref());
        let Some(g) = fresh.generation else {
            self.metrics.error(ErrorKind::Reread);
            return None;
        };
        let changes = self.state.diff_to(&fresh.state);
        self.state = fresh.state;
        self.dumped = Some(g);
        self.dumped_at_ns = monotonic_ns();
        // A send error means the detection loop is gone; `run` notices next.
        let _ = self.tx.send(Msg::Resync(Box::new(changes)));
        Some(g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actor::ProcInfo;
    use crate::detect::{Action, FightTracker, Kind, Source, detect};
    use crate::nft_events::Op;

    #[test]
    fn a_transaction_up_to_the_dumps_generation_is_already_in_it() {
        assert!(already_in_dump(7, Some(7)));
        assert!(already_in_dump(6, Some(7)));
        assert!(!already_in_dump(8, Some(7)));
        assert!(!already_in_dump(8, None));
        // Across the wrap: 1 comes after u32::MAX (the kernel skips 0).
        assert!(!already_in_dump(1, Some(u32::MAX)));
        assert!(already_in_dump(u32::MAX, Some(1)));
        assert_eq!(next_generation(7), 8);
        assert_eq!(next_generation(u32::MAX), 1);
    }

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
            fingerprint: 0,
        }
    }

    fn actor(comm: &str) -> Actor {
        Actor::from_chain(&[ProcInfo {
            pid: 7,
            comm: Some(comm.into()),
            ..ProcInfo::default()
        }])
    }

    /// What a preliminary event judges: an agent's revert half-read (kube-proxy's
    /// chains emptied, not yet deleted) is a foreign change by the agent; the same
    /// notifications from kube-proxy (a full sync deletes before it re-adds) are not.
    #[test]
    fn a_revert_half_read_is_a_foreign_change_by_the_agent_and_not_by_kube_proxy() {
        let names: Vec<String> = (0..50).map(|i| format!("KUBE-SEP-{i:04}")).collect();
        let mut state = NftState::default();
        let mut sync = Transaction::default();
        for n in &names {
            sync.push(&mut state, &rule(Op::New, n));
            sync.push(&mut state, &rule(Op::New, n));
        }
        sync.finish(&mut state);
        let mut revert = Transaction::default();
        for n in &names[..30] {
            revert.push(&mut state, &rule(Op::Del, n));
            revert.push(&mut state, &rule(Op::Del, n));
        }
        let so_far = revert.changes_so_far(&state);
        assert_eq!(so_far.tables[0].rules_removed.len(), 30);
        let f = detect(
            &so_far,
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
        assert_eq!(foreign.action, Action::Flushed);
        let f = detect(
            &so_far,
            &actor("kube-proxy"),
            Source::Write,
            0,
            &mut FightTracker::default(),
        );
        assert!(f.iter().all(|f| f.kind == Kind::OwnerChange), "{f:?}");
        // Looking did not change the state: the revert still finishes the same.
        assert_eq!(revert.finish(&mut state), so_far);
    }
}
