//! The watch loop: listeners on threads, one detection loop, events to a sink.
//!
//! ```text
//!  nft listener (in netns) ──Batch+Actor──┐
//!  audit listener (init netns) ──Audit────┼──> loop: state.apply → detect → Event → sink, metrics
//!  timers (resync, legacy re-read/poll) ──┘
//! ```
//!
//! The writer of an nf_tables batch is resolved on the listener thread the moment
//! NEWGEN arrives (short-lived writers exit quickly). When the process is already gone
//! and audit is available, the batch waits up to [`AUDIT_JOIN_WAIT`] for the audit
//! event of the same generation (exe, ppid, argv). Lost notifications (ENOBUFS) produce
//! a `gap` event and a debounced full re-read whose differences are a `resync` event.

use crate::actor::{self, Actor, Hints};
use crate::audit::{Assembler, AuditListener, NetfilterAudit};
use crate::changes::{ChangeSet, from_rulesets};
use crate::detect::{FightPolicy, FightTracker, Kind, Source, detect};
use crate::event::Event;
use crate::listener::{Listener, ProbeNaming};
use crate::messages::{Committed, Msg};
use crate::metrics::{ErrorKind, Metrics};
use crate::nft_events::NftListener;
use crate::writer_probe::WriterProbe;
use plumb_os::runner::SystemRunner;
use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long a batch whose writer is gone waits for its audit record.
pub const AUDIT_JOIN_WAIT: Duration = Duration::from_millis(30);

/// When a resync's dump failed, how long before the next attempt.
const RESYNC_RETRY: Duration = Duration::from_secs(2);
/// Attaches the eBPF writer probe for the watched namespace; None (and why, in the
/// summary) when it cannot. The listener thread reads its ring buffer.
fn attach_writer_probe(
    netns: Option<&str>,
    loader: Option<&std::path::Path>,
    summary: &mut Summary,
) -> Option<WriterProbe> {
    use crate::writer_probe::{current_netns_inode, netns_inode_by_name};
    let inode = match netns {
        Some(n) => netns_inode_by_name(n),
        None => current_netns_inode(),
    };
    let probe = inode.map_err(|e| e.to_string()).and_then(|i| {
        match loader {
            Some(exe) => crate::probe_handoff::attach_via_helper(exe, i),
            None => WriterProbe::attach(i),
        }
        .map_err(|e| e.to_string())
    });
    match probe {
        Ok(p) => {
            summary.probe = "attached".into();
            Some(p)
        }
        Err(e) => {
            summary.probe = format!("unavailable: {e}");
            None
        }
    }
}

/// What the baseline read could not do: counted as a re-read error and said in the
/// summary's notes.
fn note_baseline_problems(problems: &[String], metrics: &Metrics, summary: &mut Summary) {
    if !problems.is_empty() {
        metrics.error(ErrorKind::Reread);
        summary
            .notes
            .extend(problems.iter().map(|p| format!("baseline: {p}")));
    }
}

/// The summary's `legacy` field (how iptables-legacy changes are found) and, when
/// they are found by polling, a note that says what that costs.
fn note_legacy_mode(present: bool, audit_ok: bool, summary: &mut Summary) {
    summary.legacy = match (present, audit_ok) {
        (false, _) => "none".into(),
        (true, true) => "audit".into(),
        (true, false) => "polling".into(),
    };
    if present && !audit_ok {
        summary.notes.push(
            "iptables-legacy tables present and audit unavailable: legacy changes are found by polling; attribution and latency are degraded".into(),
        );
    }
}

/// Starts the audit listener thread when asked and possible. Returns the summary's
/// `audit` field and whether audit is listening.
fn start_audit_listener(
    wanted: bool,
    metrics: &Metrics,
    stop: &Arc<AtomicBool>,
    tx: &mpsc::Sender<Msg>,
) -> (String, bool) {
    if !wanted {
        return ("off".into(), false);
    }
    if !crate::audit::in_initial_netns() {
        metrics.error(ErrorKind::AuditUnavailable);
        return (
            "unavailable: plumb is not in the initial network namespace".into(),
            false,
        );
    }
    match AuditListener::open() {
        Ok(listener) => {
            let stop = stop.clone();
            let tx = tx.clone();
            let _ = std::thread::Builder::new()
                .name("plumb-audit".into())
                .spawn(move || read_audit(listener, &stop, &tx));
            ("listening".into(), true)
        }
        Err(e) => {
            metrics.error(ErrorKind::AuditUnavailable);
            (format!("unavailable: {e} (needs CAP_AUDIT_READ)"), false)
        }
    }
}

/// The audit listener thread: assembles NETFILTER_CFG, SYSCALL and PROCTITLE records
/// into events (a record group older than 50 ms is complete) and sends them to the
/// detection loop until `stop` is set or the loop is gone.
fn read_audit(mut listener: AuditListener, stop: &AtomicBool, tx: &mpsc::Sender<Msg>) {
    let mut asm = Assembler::default();
    while !stop.load(Ordering::Relaxed) {
        let now = unix_ms(SystemTime::now());
        let mut done = Vec::new();
        match listener.receive() {
            Ok(records) => {
                for r in records {
                    done.extend(asm.push(r, now));
                }
            }
            Err(e) => {
                let _ = tx.send(Msg::Error(ErrorKind::AuditReceive, e.to_string()));
                // A persistent error (e.g. ENOBUFS after a burst) must not spin a core;
                // the nftables listener waits the same.
                std::thread::park_timeout(Duration::from_millis(100));
            }
        }
        done.extend(asm.flush_older(now, 50));
        for ev in done {
            if tx.send(Msg::Audit(Box::new(ev))).is_err() {
                return;
            }
        }
    }
}

/// How to watch.
#[derive(Clone, Debug)]
pub struct WatchOptions {
    /// Network namespace name (under /run/netns) or path; None: this one.
    pub netns: Option<String>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Listen to audit when possible.
    pub audit: bool,
    /// Quiet time before a re-read after a burst (resync, legacy).
    pub debounce: Duration,
    /// Legacy fingerprint poll interval when audit is unavailable.
    pub legacy_poll: Duration,
    /// How many removals within which window make a fight.
    pub fight: FightPolicy,
    /// Netlink receive buffer asked for (bytes).
    pub receive_buffer: usize,
    /// Set once subscribed and the baseline is read (tests wait for it).
    pub ready: Option<Arc<AtomicBool>>,
    /// Name the writer of a big transaction while it is committed, with the eBPF writer
    /// probe ([`crate::writer_probe`]) when it can be attached. Costs every syscall of
    /// the machine ~60 ns while watch runs (an attached sys_enter tracepoint).
    pub writer_probe: bool,
    /// Load the probe in a helper process running this executable
    /// ([`crate::probe_handoff`]; it must call `serve_if_asked` first in main), so its
    /// ~40 MB BTF parse stays out of watch's memory. None: load it in this process.
    pub probe_loader: Option<std::path::PathBuf>,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            netns: None,
            duration: None,
            audit: true,
            debounce: Duration::from_millis(100),
            legacy_poll: Duration::from_secs(2),
            fight: FightPolicy::default(),
            ready: None,
            receive_buffer: crate::nft_events::RECEIVE_BUFFER,
            writer_probe: true,
            probe_loader: None,
        }
    }
}

/// Why watch could not run.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The nftables notification socket could not be opened or subscribed (in the
    /// namespace, when one was given).
    #[error(
        "cannot subscribe to nftables notifications{} (needs CAP_NET_ADMIN, and CAP_SYS_ADMIN to enter a namespace)",
        .netns.as_deref().map(|n| format!(" in network namespace {n}")).unwrap_or_default()
    )]
    Subscribe {
        /// The namespace asked for; None: plumb's own.
        netns: Option<String>,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}

/// What a watch run saw (printed at the end; its serde form is the JSON summary).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Summary {
    /// Seconds from [`Watcher::start`] to the end (the baseline read included).
    pub duration_s: f64,
    /// Events emitted, by kind (`foreign-change`, `gap`, ...); preliminary events
    /// are counted under `preliminary`, not under their kind.
    pub events: BTreeMap<String, u64>,
    /// Complete nf_tables transactions judged (with or without an event).
    pub batches: u64,
    /// Times the kernel dropped notifications (each a `gap` event).
    pub gaps: u64,
    /// `listening`, `unavailable: <why>` or `off`.
    pub audit: String,
    /// `none`, `audit` (attributed) or `polling` (degraded).
    pub legacy: String,
    /// The eBPF writer probe: `attached`, `unavailable: <why>` or `off`.
    pub probe: String,
    /// Sentences about what the run could not do or saw only in part (baseline
    /// problems, legacy polling, transactions already in the dump, the probe's
    /// namings and dropped reports).
    pub notes: Vec<String>,
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64
}

/// Watches until `stop` is set or the duration ends; every event goes to `sink`
/// ([`Watcher::start`], then [`Watcher::run`]).
pub fn watch(
    opts: &WatchOptions,
    metrics: &Metrics,
    stop: Arc<AtomicBool>,
    sink: &mut dyn FnMut(&Event),
) -> Result<Summary, WatchError> {
    Ok(Watcher::start(opts, metrics, stop)?.run(sink))
}

/// A watch that can watch: subscribed to nftables notifications, baseline read,
/// listener threads running. Until [`Watcher::run`] reads them, notifications wait
/// in a queue; nothing is lost. `plumb watch` serves `/metrics` only once it has one.
/// Dropped without running, it stops its threads.
pub struct Watcher {
    started: Instant,
    opts: WatchOptions,
    metrics: Metrics,
    summary: Summary,
    rx: mpsc::Receiver<Msg>,
    resync_tx: mpsc::Sender<()>,
    legacy_rs: crate::legacy::LegacyRead,
    legacy_present: bool,
    audit_ok: bool,
    probe_naming: ProbeNaming,
    probe_dropped: Arc<std::sync::atomic::AtomicU32>,
    threads: Threads,
}

/// Stops the listener threads and waits for the nftables listener, when dropped.
struct Threads {
    stop: Arc<AtomicBool>,
    nft: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Threads {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.nft.take() {
            let _ = t.join();
        }
    }
}

impl Watcher {
    /// Subscribes to nftables notifications (in `opts.netns`), reads the baseline,
    /// starts the listener threads (audit too, when asked and available) and sets
    /// `opts.ready`. An error means watch cannot watch at all (no subscription);
    /// what it can do without (audit, the eBPF probe, parts of the baseline) is said
    /// in the summary's fields and notes instead.
    pub fn start(
        opts: &WatchOptions,
        metrics: &Metrics,
        stop: Arc<AtomicBool>,
    ) -> Result<Watcher, WatchError> {
        let started = Instant::now();
        let netns = opts.netns.as_deref();
        let mut summary = Summary::default();
        let nft = NftListener::open(netns, opts.receive_buffer).map_err(|source| {
            WatchError::Subscribe {
                netns: opts.netns.clone(),
                source,
            }
        })?;
        let (tx, rx) = mpsc::channel::<Msg>();
        // Subscribe first, then read the baseline: nothing committed in between is missed.
        let runner = SystemRunner;
        let baseline = crate::baseline::read(netns);
        let dumped_at_ns = crate::listener::monotonic_ns();
        note_baseline_problems(&baseline.problems, metrics, &mut summary);
        let legacy_rs = crate::legacy::read(&runner, netns);
        let legacy_present = !legacy_rs.ruleset.tables.is_empty();

        // nftables listener thread: owns the chain state and applies each notification
        // as it is decoded, so a 150k-message sync is done when its NEWGEN arrives; names
        // writers, with the eBPF writer probe when it is attached (`listener`).
        let (resync_tx, resync_rx) = mpsc::channel::<()>();
        metrics.set_chains(baseline.state.chain_names());
        let probe_naming: ProbeNaming = Arc::default();
        let probe_dropped = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let probe = if opts.writer_probe {
            attach_writer_probe(netns, opts.probe_loader.as_deref(), &mut summary)
        } else {
            summary.probe = "off".into();
            None
        };
        let listener = Listener {
            nft,
            netns: netns.map(str::to_string),
            state: baseline.state,
            dumped: baseline.generation,
            dumped_at_ns,
            tx: tx.clone(),
            resync: resync_rx,
            metrics: metrics.clone(),
            probe,
            probe_dropped: probe_dropped.clone(),
            naming: probe_naming.clone(),
        };
        let nft_stop = stop.clone();
        let nft_thread = std::thread::Builder::new()
            .name("plumb-nft".into())
            .spawn(move || listener.run(&nft_stop))
            .ok();

        // Audit listener thread (initial namespace only).
        let (audit, audit_ok) = start_audit_listener(opts.audit, metrics, &stop, &tx);
        summary.audit = audit;
        drop(tx);
        note_legacy_mode(legacy_present, audit_ok, &mut summary);

        if let Some(r) = &opts.ready {
            r.store(true, Ordering::SeqCst);
        }
        Ok(Watcher {
            started,
            opts: opts.clone(),
            metrics: metrics.clone(),
            summary,
            rx,
            resync_tx,
            legacy_rs,
            legacy_present,
            audit_ok,
            probe_naming,
            probe_dropped,
            threads: Threads {
                stop,
                nft: nft_thread,
            },
        })
    }

    /// Reports events to `sink` until `stop` is set or the duration ends; returns
    /// the summary.
    pub fn run(self, sink: &mut dyn FnMut(&Event)) -> Summary {
        let Watcher {
            started,
            opts,
            metrics,
            summary,
            rx,
            resync_tx,
            legacy_rs,
            legacy_present,
            audit_ok,
            probe_naming,
            probe_dropped,
            threads,
        } = self;
        let stop = threads.stop.clone();
        let mut lp = DetectionLoop::new(
            &opts,
            &metrics,
            sink,
            summary,
            resync_tx,
            LegacyWatch::new(legacy_rs, legacy_present, audit_ok, &opts),
            audit_ok,
        );
        while !stop.load(Ordering::Relaxed) && !lp.duration_over() {
            match rx.recv_timeout(lp.time_to_next_due()) {
                Ok(msg) => lp.handle(msg),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
            lp.release_due_pending();
            lp.request_due_resync();
            lp.reread_legacy_if_due();
        }
        let mut summary = lp.finish();
        drop(threads);
        add_probe_notes(&mut summary, &probe_naming, &probe_dropped);
        summary.duration_s = started.elapsed().as_secs_f64();
        summary
    }
}

/// A committed transaction waiting in the detection loop for the audit record that
/// names its writer, until `deadline`.
struct Pending {
    c: Box<Committed>,
    deadline: Instant,
}

/// How many generations the detection loop remembers as completed (a preliminary
/// event arriving after its complete event is stale).
const COMPLETED_REMEMBERED: usize = 64;
/// How many generations the detection loop remembers as having had a preliminary
/// event (one per transaction).
const EARLY_REMEMBERED: usize = 16;
/// How many audit events the detection loop keeps to join with later transactions.
const AUDIT_REMEMBERED: usize = 256;
/// Longest sleep of the detection loop when nothing is due.
const IDLE_WAKE: Duration = Duration::from_millis(500);

/// iptables-legacy as the detection loop sees it: the last read, and when the next
/// re-read is due (after an audit trigger, or by polling without audit).
struct LegacyWatch {
    /// The last read of the legacy tables; changes are diffed against it.
    last: crate::legacy::LegacyRead,
    /// Legacy tables existed at start and audit cannot say when they change: poll.
    polling: bool,
    /// When the next poll is due (meaningful only when `polling`).
    next_poll: Instant,
    poll_every: Duration,
    /// An audit-triggered re-read: when it is due (debounced) and the writer audit named.
    triggered: Option<(Instant, Actor)>,
}

impl LegacyWatch {
    fn new(
        last: crate::legacy::LegacyRead,
        present: bool,
        audit_ok: bool,
        opts: &WatchOptions,
    ) -> LegacyWatch {
        LegacyWatch {
            last,
            polling: present && !audit_ok,
            next_poll: Instant::now() + opts.legacy_poll,
            poll_every: opts.legacy_poll,
            triggered: None,
        }
    }

    /// Takes a fresh read: the changes since the last one, or `None` when there is
    /// nothing to report. A read where a tool failed is not compared at all (its missing
    /// tables would read as every chain deleted by an unknown writer) and does not
    /// become the reference either.
    fn accept(&mut self, fresh: crate::legacy::LegacyRead) -> Option<ChangeSet> {
        if !fresh.errors.is_empty() || fresh.fingerprint == self.last.fingerprint {
            return None;
        }
        let changes = from_rulesets(&self.last.ruleset, &fresh.ruleset);
        self.last = fresh;
        Some(changes)
    }
}

/// The detection loop's state between messages: what waits for audit, the fight
/// tracker, the timers (resync, legacy) and the summary being built. [`Watcher::run`]
/// feeds it one message at a time and then lets it do what is due.
struct DetectionLoop<'a> {
    opts: &'a WatchOptions,
    metrics: &'a Metrics,
    sink: &'a mut dyn FnMut(&Event),
    summary: Summary,
    runner: SystemRunner,
    /// --duration counts from here: reading a 10k-service baseline takes seconds.
    watching: Instant,
    fights: FightTracker,
    /// Transactions waiting for their audit record, in commit order.
    pending: VecDeque<Pending>,
    /// The last [`AUDIT_REMEMBERED`] audit events, for transactions committed after them.
    recent_audit: VecDeque<NetfilterAudit>,
    /// Whether audit is listening at all.
    audit_ok: bool,
    /// Whether audit has delivered a record (the kernel may have audit disabled: then
    /// nothing ever comes, and no transaction waits for it).
    audit_seen: bool,
    /// When the debounced full resync after a gap is due.
    resync_at: Option<Instant>,
    /// Asks the listener thread for a resync.
    resync_tx: mpsc::Sender<()>,
    /// Transactions queued while a dump was read and already in it (`already_in_dump`).
    in_dump: u64,
    /// Generations that already had a preliminary event (one per transaction).
    early_reported: VecDeque<u32>,
    /// Generations whose complete event is out: a preliminary one arriving later is stale.
    completed: VecDeque<u32>,
    legacy: LegacyWatch,
}

impl<'a> DetectionLoop<'a> {
    fn new(
        opts: &'a WatchOptions,
        metrics: &'a Metrics,
        sink: &'a mut dyn FnMut(&Event),
        summary: Summary,
        resync_tx: mpsc::Sender<()>,
        legacy: LegacyWatch,
        audit_ok: bool,
    ) -> Self {
        DetectionLoop {
            opts,
            metrics,
            sink,
            summary,
            runner: SystemRunner,
            watching: Instant::now(),
            fights: FightTracker::new(opts.fight),
            pending: VecDeque::new(),
            recent_audit: VecDeque::new(),
            audit_ok,
            audit_seen: false,
            resync_at: None,
            resync_tx,
            in_dump: 0,
            early_reported: VecDeque::new(),
            completed: VecDeque::new(),
            legacy,
        }
    }

    fn netns(&self) -> Option<&'a str> {
        self.opts.netns.as_deref()
    }

    /// Whether `--duration` has passed since watching began.
    fn duration_over(&self) -> bool {
        self.opts
            .duration
            .is_some_and(|d| self.watching.elapsed() >= d)
    }

    /// How long to sleep until the next thing that can be due (few wake-ups when idle).
    fn time_to_next_due(&self) -> Duration {
        let now = Instant::now();
        let mut next = now + IDLE_WAKE;
        if let Some(p) = self.pending.front() {
            next = next.min(p.deadline.max(now + Duration::from_millis(1)));
        }
        if let Some(t) = self.resync_at {
            next = next.min(t);
        }
        if let Some((t, _)) = &self.legacy.triggered {
            next = next.min(*t);
        }
        if self.legacy.polling {
            next = next.min(self.legacy.next_poll);
        }
        if let Some(d) = self.opts.duration {
            next = next.min(self.watching + d);
        }
        next.saturating_duration_since(now)
    }

    /// Counts an event in the summary (and, unless preliminary, in the metrics) and
    /// hands it to the sink.
    fn emit(&mut self, e: Event) {
        // A preliminary event is not counted as one of its kind (its complete event is).
        let key = if e.preliminary {
            "preliminary"
        } else {
            self.metrics
                .event(&e, unix_ms(SystemTime::now()) as f64 / 1000.0);
            e.kind.as_str()
        };
        *self.summary.events.entry(key.to_string()).or_default() += 1;
        (self.sink)(&e);
    }

    /// Detects and emits what a complete transaction did.
    fn report(&mut self, c: &Committed) {
        let netns = self.netns();
        for e in process(c, &mut self.fights, netns, &mut self.summary) {
            self.emit(e);
        }
    }

    fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Committed(c) => self.on_committed(c),
            Msg::Early(c, how) => self.on_early(&c, how),
            Msg::Resync(changes) => {
                let netns = self.netns();
                for e in resync_events(&changes, &mut self.fights, netns) {
                    self.emit(e);
                }
            }
            Msg::Audit(a) => self.on_audit(*a),
            Msg::Gap => self.on_gap(),
            Msg::AlreadyInDump(n) => self.in_dump += n,
            Msg::ResyncFailed => self.resync_at = Some(Instant::now() + RESYNC_RETRY),
            Msg::Error(kind, _msg) => self.metrics.error(kind),
        }
    }

    /// A complete transaction: reported now, or queued behind earlier ones or until
    /// the audit record that names its writer (when the writer is already gone).
    fn on_committed(&mut self, mut c: Box<Committed>) {
        if self.completed.len() >= COMPLETED_REMEMBERED {
            self.completed.pop_front();
        }
        self.completed.push_back(c.generation);
        // Wait for audit only once audit has shown it delivers records.
        if c.actor.gone && self.audit_ok && self.audit_seen {
            // Try a join with an audit event already here.
            if let Some(a) = self
                .recent_audit
                .iter()
                .find(|a| a.generation() == Some(c.generation))
            {
                c.actor = enrich(std::mem::take(&mut c.actor), a);
                self.report(&c);
            } else {
                self.pending.push_back(Pending {
                    c,
                    deadline: Instant::now() + AUDIT_JOIN_WAIT,
                });
            }
        } else if !self.pending.is_empty() {
            // Keep order: later transactions wait behind earlier ones.
            self.pending.push_back(Pending {
                c,
                deadline: Instant::now(),
            });
        } else {
            self.report(&c);
        }
    }

    /// What a big transaction has done so far: preliminary events, once per
    /// generation, and never after its complete event.
    fn on_early(&mut self, c: &Committed, how: &str) {
        if self.early_reported.contains(&c.generation) || self.completed.contains(&c.generation) {
            return;
        }
        let events = preliminary(c, how, &self.fights, self.netns());
        if !events.is_empty() {
            if self.early_reported.len() >= EARLY_REMEMBERED {
                self.early_reported.pop_front();
            }
            self.early_reported.push_back(c.generation);
        }
        for e in events {
            self.emit(e);
        }
    }

    /// An audit event: names the writer of a waiting transaction of its generation,
    /// triggers a legacy re-read when it records an iptables-legacy write in the
    /// watched namespace, and is kept for transactions that come after it.
    fn on_audit(&mut self, a: NetfilterAudit) {
        self.audit_seen = true;
        if let Some(p) = self
            .pending
            .iter_mut()
            .find(|p| a.generation() == Some(p.c.generation))
        {
            p.c.actor = enrich(std::mem::take(&mut p.c.actor), &a);
            p.deadline = Instant::now();
        }
        let legacy_change = a.changes.iter().any(|c| c.op == "xt_replace");
        if legacy_change && audit_pid_in_netns(&a, self.netns()) {
            let actor = a
                .pid()
                .map(|p| actor::resolve(p, &audit_hints(&a)))
                .unwrap_or_default();
            self.legacy.triggered = Some((Instant::now() + self.opts.debounce, actor));
        }
        self.recent_audit.push_back(a);
        while self.recent_audit.len() > AUDIT_REMEMBERED {
            self.recent_audit.pop_front();
        }
    }

    /// The kernel dropped notifications: a `gap` event, and a debounced resync.
    fn on_gap(&mut self) {
        self.summary.gaps += 1;
        self.emit(Event::gap(
            SystemTime::now(),
            self.netns(),
            "the kernel dropped nftables notifications (ENOBUFS)",
        ));
        self.resync_at = Some(Instant::now() + self.opts.debounce);
    }

    /// Reports the transactions whose audit wait is over, in order.
    fn release_due_pending(&mut self) {
        while self
            .pending
            .front()
            .is_some_and(|p| p.deadline <= Instant::now())
        {
            if let Some(p) = self.pending.pop_front() {
                self.report(&p.c);
            }
        }
    }

    /// Asks the listener thread for the debounced full resync after a gap, once due.
    /// The listener dumps, swaps the state and reports what changed while events were
    /// lost.
    fn request_due_resync(&mut self) {
        if self.resync_at.is_some_and(|t| t <= Instant::now()) {
            self.resync_at = None;
            let _ = self.resync_tx.send(());
        }
    }

    /// Re-reads the legacy tables when an audit trigger or a poll is due, and reports
    /// what changed since the last read.
    fn reread_legacy_if_due(&mut self) {
        let poll_due = self.legacy.polling && Instant::now() >= self.legacy.next_poll;
        let trigger_due = self
            .legacy
            .triggered
            .as_ref()
            .is_some_and(|(t, _)| *t <= Instant::now());
        if !(poll_due || trigger_due) {
            return;
        }
        self.legacy.next_poll = Instant::now() + self.legacy.poll_every;
        let (actor, source) = match self.legacy.triggered.take() {
            Some((_, a)) if trigger_due => (a, Source::Write),
            other => {
                self.legacy.triggered = other;
                (Actor::unknown(), Source::Poll)
            }
        };
        let netns = self.netns();
        let fresh = crate::legacy::read(&self.runner, netns);
        if !fresh.errors.is_empty() {
            self.metrics.error(ErrorKind::Reread);
            // Retry the audit-named write at the next poll, with its writer.
            if source == Source::Write {
                self.legacy.triggered = Some((self.legacy.next_poll, actor.clone()));
            }
        }
        let Some(changes) = self.legacy.accept(fresh) else {
            return;
        };
        let at = SystemTime::now();
        for f in detect(&changes, &actor, source, unix_ms(at), &mut self.fights) {
            self.emit(Event::from_finding(f, at, netns, &actor, None, None));
        }
    }

    /// Reports what still waits for audit and returns the summary (without the
    /// probe's notes and the duration, which [`Watcher::run`] adds).
    fn finish(mut self) -> Summary {
        if self.in_dump > 0 {
            self.summary.notes.push(format!(
                "{} transactions committed while the ruleset was being dumped were in \
                 the dump already: not reported",
                self.in_dump
            ));
        }
        while let Some(p) = self.pending.pop_front() {
            self.report(&p.c);
        }
        self.summary
    }
}

/// What audit says about the writer of an iptables-legacy write, for [`actor::resolve`].
fn audit_hints(a: &NetfilterAudit) -> Hints {
    Hints {
        comm: a.changes.iter().find_map(|c| c.comm.clone()),
        exe: a.syscall.as_ref().and_then(|s| s.exe.clone()),
        ppid: a.syscall.as_ref().and_then(|s| s.ppid),
        uid: a.syscall.as_ref().and_then(|s| s.uid),
        argv: a.argv.clone(),
    }
}

/// The summary's notes on the eBPF writer probe: how many writers it named before
/// their NEWGEN (confirmed, contradicted) and how many reports its full ring buffer
/// dropped.
fn add_probe_notes(
    summary: &mut Summary,
    naming: &ProbeNaming,
    dropped: &std::sync::atomic::AtomicU32,
) {
    let named: Vec<u64> = naming.iter().map(|n| n.load(Ordering::Relaxed)).collect();
    if named[0] > 0 {
        summary.notes.push(format!(
            "transactions whose writer the eBPF probe named before their NEWGEN: {} ({} confirmed by the NEWGEN, {} contradicted)",
            named[0], named[1], named[2]
        ));
    }
    let dropped = dropped.load(Ordering::Relaxed);
    if dropped > 0 {
        summary.notes.push(format!(
            "eBPF writer probe: {dropped} reports dropped (its ring buffer was full): those \
             writers were named at their NEWGEN"
        ));
    }
}

/// Events for a complete transaction (counted in the summary's batches); fights are
/// remembered.
fn process(
    c: &Committed,
    fights: &mut FightTracker,
    netns: Option<&str>,
    summary: &mut Summary,
) -> Vec<Event> {
    summary.batches += 1;
    detect(
        &c.changes,
        &c.actor,
        Source::Write,
        unix_ms(c.started),
        fights,
    )
    .into_iter()
    .map(|f| {
        let now = SystemTime::now();
        let latency = now
            .duration_since(c.started)
            .map(|d| d.as_secs_f64() * 1000.0)
            .ok();
        Event::from_finding(f, now, netns, &c.actor, Some(c.generation), latency)
    })
    .collect()
}

/// Preliminary events for a transaction still being read: foreign changes, fights and
/// policy changes in what it has done so far. Fights are judged on a copy of the
/// tracker: only the complete event of the transaction is remembered.
fn preliminary(c: &Committed, how: &str, fights: &FightTracker, netns: Option<&str>) -> Vec<Event> {
    let mut scratch = fights.clone();
    detect(
        &c.changes,
        &c.actor,
        Source::Write,
        unix_ms(c.started),
        &mut scratch,
    )
    .into_iter()
    .filter(|f| {
        matches!(
            f.kind,
            Kind::ForeignChange | Kind::Fight | Kind::PolicyChange
        )
    })
    .map(|mut f| {
        f.details.push(
            "preliminary: what a big transaction has done so far, while the kernel is still sending it; the complete event follows and may differ (a chain deleted so far may be re-created later)".into(),
        );
        f.details.push(how.to_string());
        let now = SystemTime::now();
        let latency = now
            .duration_since(c.started)
            .map(|d| d.as_secs_f64() * 1000.0)
            .ok();
        let mut e = Event::from_finding(f, now, netns, &c.actor, Some(c.generation), latency);
        e.preliminary = true;
        e
    })
    .collect()
}

/// Events for what a resync found changed while notifications were lost (writer
/// unknown).
fn resync_events(
    changes: &ChangeSet,
    fights: &mut FightTracker,
    netns: Option<&str>,
) -> Vec<Event> {
    let at = SystemTime::now();
    let unknown = Actor::unknown();
    detect(changes, &unknown, Source::Resync, unix_ms(at), fights)
        .into_iter()
        .map(|f| {
            debug_assert_eq!(f.kind, Kind::Resync);
            Event::from_finding(f, at, netns, &unknown, None, None)
        })
        .collect()
}

/// Adds what an audit event knows about the writer (exe, ppid, uid, argv) and
/// re-identifies it through its parent.
fn enrich(actor: Actor, a: &NetfilterAudit) -> Actor {
    let Some(pid) = actor.pid.or_else(|| a.pid()) else {
        return actor;
    };
    let s = a.syscall.clone().unwrap_or_default();
    let hints = Hints {
        comm: actor.comm.clone().or(s.comm),
        exe: actor.exe.clone().or(s.exe),
        ppid: actor.ppid.or(s.ppid),
        uid: actor.uid.or(s.uid),
        argv: actor.argv.clone().or_else(|| a.argv.clone()),
    };
    let mut out = actor::resolve_with(pid, &hints, &|_| None);
    // The parent usually outlives the writer: look it up for the identity.
    if let Some(pp) = hints.ppid {
        let mut chain = vec![crate::actor::ProcInfo {
            pid,
            comm: hints.comm.clone(),
            exe: hints.exe.clone(),
            ppid: Some(pp),
            argv: hints.argv.clone(),
            ..Default::default()
        }];
        let mut next = Some(pp);
        while let Some(p) = next.filter(|&p| p > 1 && chain.len() <= crate::actor::MAX_ANCESTORS) {
            match crate::actor::ProcInfo::read(p) {
                Some(info) => {
                    next = info.ppid;
                    chain.push(info);
                }
                None => break,
            }
        }
        out.identity = crate::actor::identify(&chain);
    }
    out.gone = true;
    out
}

/// Whether the writer of an audit event lives in the watched namespace (true when
/// it cannot be told: the process is gone).
fn audit_pid_in_netns(a: &NetfilterAudit, netns: Option<&str>) -> bool {
    let Some(pid) = a.pid() else { return true };
    let watched = match netns {
        Some(n) => plumb_os::netns::inode_of(n),
        None => plumb_os::netns::inode(Path::new("/proc/self/ns/net")),
    };
    match (
        watched,
        plumb_os::netns::inode(Path::new(&format!("/proc/{pid}/ns/net"))),
    ) {
        (Ok(w), Ok(p)) => w == p,
        _ => true,
    }
}

#[cfg(test)]
mod legacy_watch_tests {
    use super::*;
    use crate::legacy::LegacyRead;
    use plumb_ruleset::iptables::save::{IptablesInput, parse};

    fn read(text: &str, fingerprint: u64, errors: &[&str]) -> LegacyRead {
        LegacyRead {
            ruleset: parse(text, &IptablesInput::default()),
            fingerprint,
            errors: errors.iter().map(|e| e.to_string()).collect(),
        }
    }

    const WITH: &str =
        "*filter\n:INPUT ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n-A INPUT -j KUBE-SERVICES\nCOMMIT\n";
    const WITHOUT: &str = "*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n";

    #[test]
    fn a_failed_reread_is_neither_a_change_nor_the_new_reference() {
        let mut w = LegacyWatch::new(read(WITH, 1, &[]), true, true, &WatchOptions::default());
        // The save timed out: nothing read, which must not look like every chain deleted.
        let failed = read("", 2, &["iptables-legacy-save: did not finish within 30s"]);
        assert!(w.accept(failed).is_none());
        assert_eq!(
            w.last.fingerprint, 1,
            "the failed read became the reference"
        );
        // The next good read is compared with the last good one: no change.
        assert!(w.accept(read(WITH, 1, &[])).is_none());
        // A real deletion is still reported, once.
        let changes = w.accept(read(WITHOUT, 3, &[])).expect("the deletion");
        assert!(!changes.is_empty(), "{changes:?}");
        assert!(w.accept(read(WITHOUT, 3, &[])).is_none());
    }
}
