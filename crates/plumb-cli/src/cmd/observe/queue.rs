//! The hand-over from the reader threads to the main thread: batches of flows or
//! drops through one bounded queue (events beyond the bound are counted as lost; a
//! reader never blocks), and the aggregation of identical drops the drop reader does
//! while the output is behind.

use plumb_observe::conntrack::Flow;
use plumb_observe::drops::DroppedPacket;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::time::{Duration, Instant};

/// Events waiting for the main thread at most; beyond, they are counted as lost.
pub(super) const QUEUE_EVENTS: usize = 65_536;
/// Batches waiting for the main thread at most (a bound on the channel besides the
/// events': a batch holds at most [`BATCH`] events, and at least one).
pub(super) const QUEUE: usize = 4096;
/// Events handed to the main thread at once, at most.
pub(super) const BATCH: usize = 1024;

/// A drop and how many identical ones it stands for (1, or more when aggregated).
pub(super) type Counted = (DroppedPacket, u64);

pub(super) enum Observed {
    Flows(Vec<Flow>),
    Drops(Vec<Counted>),
}

impl Observed {
    pub(super) fn len(&self) -> usize {
        match self {
            Observed::Flows(f) => f.len(),
            Observed::Drops(d) => d.len(),
        }
    }
}

/// How long identical drops are gathered into one line while the main thread is
/// behind.
pub(super) const AGGREGATE_WINDOW: Duration = Duration::from_millis(100);

/// Gathers identical drops (same addresses, ports or ICMP type, protocol, reason and
/// interface) into one entry with a count, for [`AGGREGATE_WINDOW`] at a time: what
/// the reader thread does instead of losing drops while the main thread (the output)
/// is behind.
#[derive(Default)]
pub(super) struct Aggregator {
    pub(super) index: HashMap<AggregateKey, usize>,
    pub(super) items: Vec<Counted>,
    /// When the first entry of this window was added.
    pub(super) since: Option<Instant>,
}

pub(super) type AggregateKey = (
    u32,
    Option<(IpAddr, IpAddr)>,
    u8,
    Option<(u16, u16)>,
    Option<(u8, u8)>,
    u32,
);

impl Aggregator {
    pub(super) fn add(&mut self, d: DroppedPacket) {
        let key = (
            d.reason,
            d.addresses,
            d.protocol,
            d.ports,
            d.icmp,
            d.ifindex,
        );
        match self.index.get(&key) {
            Some(&i) => self.items[i].1 += 1,
            None => {
                self.index.insert(key, self.items.len());
                self.items.push((d, 1));
                self.since.get_or_insert_with(Instant::now);
            }
        }
    }

    /// The window is over (or holds a whole batch of distinct drops).
    pub(super) fn due(&self) -> bool {
        self.items.len() >= BATCH || self.since.is_some_and(|t| t.elapsed() >= AGGREGATE_WINDOW)
    }

    /// The entries of this window (the first drop of each, with its count).
    pub(super) fn take(&mut self) -> Vec<Counted> {
        self.index.clear();
        self.since = None;
        std::mem::take(&mut self.items)
    }
}

/// The reader threads' side of the bounded hand-over to the main thread: at most
/// [`QUEUE_EVENTS`] events wait, in at most [`QUEUE`] batches. A batch that does not
/// fit is counted as lost, whole; sending never blocks a reader.
#[derive(Clone)]
pub(super) struct Queue {
    pub(super) tx: SyncSender<Observed>,
    /// What was sent and not yet taken by the main thread.
    pub(super) waiting: Arc<Waiting>,
    /// Events that did not fit.
    pub(super) lost: Arc<AtomicU64>,
}

/// Events and batches in the queue: either bound can be the one that fills it (many
/// small batches fill the channel long before their events fill half the queue).
#[derive(Default)]
pub(super) struct Waiting {
    pub(super) events: AtomicUsize,
    pub(super) batches: AtomicUsize,
}

impl Queue {
    pub(super) fn new() -> (Queue, Receiver<Observed>) {
        let (tx, rx) = sync_channel(QUEUE);
        let q = Queue {
            tx,
            waiting: Arc::new(Waiting::default()),
            lost: Arc::new(AtomicU64::new(0)),
        };
        (q, rx)
    }

    /// Hands `batch` over, or counts its events as lost.
    pub(super) fn send(&self, batch: Observed) {
        let n = batch.len();
        let fits = self.waiting.events.fetch_add(n, Ordering::AcqRel) + n <= QUEUE_EVENTS;
        if fits {
            self.waiting.batches.fetch_add(1, Ordering::AcqRel);
        }
        if !fits || self.tx.try_send(batch).is_err() {
            self.waiting.events.fetch_sub(n, Ordering::AcqRel);
            if fits {
                self.waiting.batches.fetch_sub(1, Ordering::AcqRel);
            }
            self.lost.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// The main thread is behind: half the queue is waiting, counted in events or in
    /// batches.
    pub(super) fn behind(&self) -> bool {
        self.waiting.events.load(Ordering::Acquire) > QUEUE_EVENTS / 2
            || self.waiting.batches.load(Ordering::Acquire) > QUEUE / 2
    }
}

/// The main thread took `batch` out of the queue whose counts are `waiting`.
pub(super) fn taken(waiting: &Waiting, batch: &Observed) {
    waiting.events.fetch_sub(batch.len(), Ordering::AcqRel);
    waiting.batches.fetch_sub(1, Ordering::AcqRel);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Identical drops become one entry whose count is their number; different ones
    /// stay apart; a taken window starts empty.
    #[test]
    fn the_aggregator_counts_identical_drops() {
        let base = plumb_observe::drops::decode(&[0u8; plumb_observe::drops::RECORD_SIZE]).unwrap();
        let mut agg = Aggregator::default();
        for i in 0..1000u64 {
            agg.add(DroppedPacket {
                monotonic_ns: i,
                ..base.clone()
            });
        }
        for port in 0..10u16 {
            agg.add(DroppedPacket {
                ports: Some((1, port)),
                ..base.clone()
            });
        }
        agg.add(DroppedPacket {
            reason: 9,
            ..base.clone()
        });
        let items = agg.take();
        assert_eq!(items.len(), 12);
        assert_eq!(items[0].1, 1000);
        assert_eq!(items[0].0.monotonic_ns, 0, "the first drop stands for them");
        assert_eq!(items.iter().map(|(_, n)| n).sum::<u64>(), 1011);
        assert!(agg.take().is_empty() && !agg.due());
    }

    fn drops(n: usize) -> Observed {
        let d = plumb_observe::drops::decode(&[0u8; plumb_observe::drops::RECORD_SIZE]).unwrap();
        Observed::Drops(vec![(d, 1); n])
    }

    /// With the main thread stalled, the readers' hand-over neither blocks nor grows:
    /// it holds at most QUEUE_EVENTS events and counts every event beyond as lost; once
    /// the main thread takes batches out, room comes back.
    #[test]
    fn a_stalled_consumer_makes_lost_events_never_a_blocked_reader() {
        let (q, rx) = Queue::new();
        let sender = q.clone();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        // 100 full batches and 5,000 single events, from a reader thread.
        std::thread::spawn(move || {
            for _ in 0..100 {
                sender.send(drops(BATCH));
            }
            for _ in 0..5_000 {
                sender.send(drops(1));
            }
            let _ = done_tx.send(());
        });
        done_rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the reader went on while nobody read the queue");
        let sent = (100 * BATCH + 5_000) as u64;
        assert_eq!(q.waiting.events.load(Ordering::SeqCst), QUEUE_EVENTS);
        assert_eq!(q.lost.load(Ordering::SeqCst), sent - QUEUE_EVENTS as u64);
        let mut queued = 0;
        while let Ok(b) = rx.try_recv() {
            queued += b.len();
            taken(&q.waiting, &b);
        }
        assert_eq!(queued, QUEUE_EVENTS);
        assert_eq!(q.waiting.events.load(Ordering::SeqCst), 0);
        assert_eq!(q.waiting.batches.load(Ordering::SeqCst), 0);
        // Room again: a batch now goes through.
        q.send(drops(10));
        assert_eq!(rx.try_recv().map(|b| b.len()).ok(), Some(10));
        assert_eq!(q.lost.load(Ordering::SeqCst), sent - QUEUE_EVENTS as u64);
    }

    /// Small batches fill the channel's batch bound long before their events fill half
    /// the queue: the reader must see the queue as behind (and aggregate) before a
    /// single batch is lost, whatever the batches' size.
    #[test]
    fn many_small_batches_make_the_queue_behind_before_anything_is_lost() {
        let (q, _rx) = Queue::new();
        let mut sent = 0;
        while !q.behind() {
            q.send(drops(1));
            sent += 1;
            assert!(
                sent <= QUEUE,
                "{sent} single-event batches and the queue is not behind"
            );
        }
        assert_eq!(q.lost.load(Ordering::SeqCst), 0);
        assert_eq!(sent, QUEUE / 2 + 1);
    }
}
