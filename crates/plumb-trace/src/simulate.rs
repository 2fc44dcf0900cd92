//! The simulator: walks a packet through the hooks in kernel order and forks at
//! every branch (random `statistic`/`numgen`, and conditions plumb cannot decide).
//!
//! What forks: a random match (`statistic`, `numgen`, `--every`) forks into "chosen"
//! and "not chosen" with their probabilities. A condition on something plumb was not
//! told (the source address or port when `--src` does not give it, an interface,
//! the NAT status of an existing connection, a session-affinity entry, a rate limit,
//! an ipset without `--ipsets`, a match plumb does not evaluate) forks into "matches"
//! and "does not match" only when the path's [`Constraints`] leave both possible:
//! each branch keeps what it assumed, as sets of values per field (intersected for
//! "matches", subtracted for "does not"), so a condition met again is decided, and a
//! branch whose sets are empty is a path that cannot happen and is dropped.
//!
//! Exploration: depth-first, each path to its end. When merging (below), live paths
//! wait in a queue ordered by how far through the ruleset they are (hook, base
//! chain, then the rule position in every frame of the call stack), and the least
//! advanced path runs until it passes the next one, so forks of one rule meet again
//! where their routes join.
//!
//! Merging: a trace that fits in [`TraceOptions::merge_above`] paths (and a quarter
//! of the work bound) reports every route as an outcome of its own, with its steps
//! and conditions: that is what a reader compares with the kernel's rule counters,
//! so small traces never trade a route for a summary. A bigger trace is explored
//! again with merging, where two paths at the same position with the same state
//! (packet fields, marks, conntrack and NAT state, call stack, pending verdict)
//! become one:
//!
//! - with equal constraints, their probabilities add (two disjoint random choices;
//!   kube-proxy's endpoint choices never meet, as each rewrites the destination
//!   differently, so its per-endpoint outcomes stay apart);
//! - with equal probabilities and constraints that differ in one field where they
//!   have no value in common (the two sides of a condition plumb could not decide,
//!   met again where the routes join), the constraints are united.
//!
//! Finished outcomes merge by the same two rules when their verdict, reason, NAT
//! and final packet are equal. A merged outcome's `steps` are those of its most
//! probable route; `routes` counts the routes it stands for. With merging, a chain
//! of independent conditional jumps costs one path per position instead of one per
//! combination of answers.
//!
//! Bounds: at most [`TraceOptions::max_paths`] live paths and outcomes together, and
//! at most [`TraceOptions::max_work`] steps recorded or copied by all paths; beyond
//! either the trace stops and reports the unexplored part as one INDETERMINATE
//! outcome (`Trace::incomplete` says which bound). Per path, `max_steps`,
//! `max_depth` and `max_transfers` end loops in malformed rulesets.
//!
//! Hook order (net/ipv4): locally generated packets take OUTPUT (raw, mangle, nat,
//! filter, security), are rerouted after DNAT, then POSTROUTING (mangle, nat); a
//! destination that is local loops back through PREROUTING and INPUT without NAT
//! (the connection's NAT is already set up). Arriving packets take PREROUTING, the
//! routing decision on the (possibly DNATed) destination, then INPUT or FORWARD and
//! POSTROUTING. NAT chains run only for NEW, tracked connections, in priority order
//! until one sets up a NAT binding (nf_nat_inet_fn).

use crate::addr::PortRange;
use crate::constraint::{Constraints, Fact};
use crate::index::Index;
use crate::ir::{Action, Cond, Field, HookId, Item, Jump, MapVerdict, NatSpec, SetRef, ct_bits};
use crate::matches::{Eval, FactContext, View};
use crate::outcome::{Delivery, Note, NotePart, Outcome, Step, StepKind, Trace, Verdict};
use crate::packet::{CtState, Node, Origin, Packet};
use plumb_ruleset::fasthash::{FastMap, FxHasher};
use std::borrow::Cow;
use std::cell::Cell;
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::hash::{Hash, Hasher};
use std::net::IpAddr;

/// Steps a path has room for before its vector grows (a kube-proxy ClusterIP path
/// has about 30).
const STEPS_RESERVE: usize = 48;

/// Limits that keep every trace bounded.
#[derive(Clone, Copy, Debug)]
pub struct TraceOptions {
    /// Traces that need more paths than this merge equivalent branches (module docs);
    /// smaller ones report every route separately.
    pub merge_above: usize,
    /// Live paths and finished outcomes together; beyond, the trace stops and the
    /// unexplored part is one INDETERMINATE outcome.
    pub max_paths: usize,
    /// Steps recorded or copied (at forks) by all paths together: bounds the time and
    /// memory of a trace. Beyond, the trace stops like at `max_paths`.
    pub max_work: usize,
    /// Steps per path (a jump loop in a malformed dump ends here).
    pub max_steps: usize,
    /// Chain call depth.
    pub max_depth: usize,
    /// Jumps and gotos per path (a goto loop in a malformed dump ends here).
    pub max_transfers: usize,
}

impl Default for TraceOptions {
    fn default() -> Self {
        TraceOptions {
            // Above what real rulesets need (a Service's endpoints, twice with session
            // affinity), so only traces that would otherwise grow without bound merge.
            merge_above: 256,
            // A Service with hundreds of endpoints has one outcome per endpoint (two
            // with session affinity).
            max_paths: 1024,
            // About 36 MB of steps at most (a step is 72 bytes), and as many steps in
            // the output: a kube-proxy trace takes about 100 steps per outcome, a
            // linear walk of a 10,000-rule chain 10,000.
            max_work: 500_000,
            max_steps: 100_000,
            max_depth: 64,
            max_transfers: 10_000,
        }
    }
}

/// The rules of a chain a path will look at, in rule order.
#[derive(Clone, Copy, Debug)]
enum Cursor<'i> {
    /// Every rule.
    Linear(u32),
    /// The merge of sorted candidate lists (a dispatch table's lists for this packet).
    Merge([&'i [u32]; 4]),
}

impl Cursor<'_> {
    fn next(&mut self, len: usize) -> Option<u32> {
        match self {
            Cursor::Linear(i) => {
                if (*i as usize) < len {
                    *i += 1;
                    Some(*i - 1)
                } else {
                    None
                }
            }
            Cursor::Merge(lists) => {
                let mut best: Option<(usize, u32)> = None;
                for (k, l) in lists.iter().enumerate() {
                    if let Some(&r) = l.first()
                        && best.is_none_or(|(_, b)| r < b)
                    {
                        best = Some((k, r));
                    }
                }
                let (k, r) = best?;
                lists[k] = &lists[k][1..];
                Some(r)
            }
        }
    }
}

impl Cursor<'_> {
    /// The same rules ahead (dispatch lists compared by address: equal lists of one
    /// chain and key are the same slices).
    fn same(&self, other: &Cursor<'_>) -> bool {
        match (self, other) {
            (Cursor::Linear(a), Cursor::Linear(b)) => a == b,
            (Cursor::Merge(a), Cursor::Merge(b)) => a
                .iter()
                .zip(b)
                .all(|(x, y)| std::ptr::eq(x.as_ptr(), y.as_ptr()) && x.len() == y.len()),
            _ => false,
        }
    }
}

#[derive(Clone, Debug)]
struct Frame<'i> {
    chain: u32,
    cursor: Cursor<'i>,
    /// Index of the rule after the last one this frame looked at (to count the
    /// rules a dispatch table skipped).
    seen: u32,
}

impl Frame<'_> {
    /// Index of the rule after the last one the cursor yielded.
    fn next_pos(&self) -> u32 {
        match self.cursor {
            Cursor::Linear(i) => i,
            Cursor::Merge(_) => self.seen,
        }
    }
}

/// The state of one path through the ruleset.
#[derive(Clone, Debug)]
struct Path<'i> {
    /// `None`: the original source, unknown (constrained by `constraints`).
    src: Option<IpAddr>,
    /// The source before any SNAT (conntrack's original tuple).
    orig_src: Option<IpAddr>,
    sport: Option<u16>,
    dst: IpAddr,
    dport: Option<u16>,
    orig_dport: Option<u16>,
    mark: u32,
    ct_mark: u32,
    ct_state: CtState,
    dnat_done: bool,
    snat_done: bool,
    hook: HookId,
    /// Hooks passed so far (the first key of the exploration order).
    hook_seq: u32,
    base_pos: usize,
    looped: bool,
    nat_set_here: bool,
    in_iface: Option<&'i str>,
    out_iface: Option<&'i str>,
    stack: Vec<Frame<'i>>,
    /// Probability of this path given its constraints.
    prob: f64,
    /// The part of the unknown-facts space the path covers, each undecided fork
    /// halving it: the sum of `prob * share` over all paths stays 1.
    share: f64,
    /// Routes merged into this path.
    routes: f64,
    constraints: Constraints,
    steps: Vec<Step>,
    /// The NAT rules' texts (borrowed from the index until the outcome is made).
    dnat: Option<Cow<'i, str>>,
    snat: Option<Cow<'i, str>>,
    recent_added: Vec<String>,
    /// A verdict chosen by a map lookup in a forked path, to apply first.
    pending: Option<MapVerdict>,
    /// DNAT to a range (reported as written, not as one member).
    dnat_range: bool,
    transfers: usize,
    /// An unknown `src` is still the original source (no MASQUERADE rewrote it).
    src_is_orig: bool,
    /// Rewrites of the packet or its marks so far (see `View::generation`).
    generation: u32,
    /// Turns of the walk loop so far, and the turn at which the path last looked
    /// for equivalent paths at its position (once per position is enough: a path
    /// that arrives later looks for it).
    moves: u64,
    absorbed_at: u64,
    /// Length of `steps` at which the walk checks the bounds next (0: at once; it
    /// stays 0 while merging, and a fork resets it: the number of paths changed).
    check_at: usize,
}

impl Path<'_> {
    /// Where the path is, as a sequence compared lexicographically: hooks passed,
    /// then the base chain (odd: inside it, even: between chains), then per call
    /// frame the rule position (odd: inside that rule, a call or a pending verdict;
    /// even: before the next rule) and the chain. Along one path it only grows,
    /// except at a `goto`.
    fn position(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        let top = self.stack.len().wrapping_sub(1);
        let base = (2 * self.base_pos as u32).saturating_sub(!self.stack.is_empty() as u32);
        [(self.hook_seq, 0), (base, 0)]
            .into_iter()
            .chain(self.stack.iter().enumerate().map(move |(i, f)| {
                let inside = i < top || self.pending.is_some();
                ((2 * f.next_pos()).saturating_sub(inside as u32), f.chain)
            }))
    }

    /// Two paths whose futures are the same: everything but the route taken, its
    /// probability and its constraints.
    fn same_state(&self, o: &Path<'_>) -> bool {
        self.src == o.src
            && self.orig_src == o.orig_src
            && self.sport == o.sport
            && self.dst == o.dst
            && self.dport == o.dport
            && self.orig_dport == o.orig_dport
            && self.mark == o.mark
            && self.ct_mark == o.ct_mark
            && self.ct_state == o.ct_state
            && self.dnat_done == o.dnat_done
            && self.snat_done == o.snat_done
            && self.hook == o.hook
            && self.hook_seq == o.hook_seq
            && self.base_pos == o.base_pos
            && self.looped == o.looped
            && self.nat_set_here == o.nat_set_here
            && self.in_iface == o.in_iface
            && self.out_iface == o.out_iface
            && self.stack.len() == o.stack.len()
            && self
                .stack
                .iter()
                .zip(&o.stack)
                .all(|(a, b)| a.chain == b.chain && a.seen == b.seen && a.cursor.same(&b.cursor))
            && self.dnat == o.dnat
            && self.snat == o.snat
            && self.recent_added == o.recent_added
            && self.pending == o.pending
            && self.dnat_range == o.dnat_range
            && self.src_is_orig == o.src_is_orig
            && self.generation == o.generation
    }

    /// A hash of the position and of fields `same_state` compares.
    fn state_hash(&self) -> u64 {
        let mut h = FxHasher::default();
        for p in self.position() {
            p.hash(&mut h);
        }
        (
            self.src,
            self.sport,
            self.dst,
            self.dport,
            self.mark,
            self.ct_mark,
        )
            .hash(&mut h);
        (
            self.generation,
            self.dnat_done,
            self.snat_done,
            self.pending.is_some(),
        )
            .hash(&mut h);
        h.finish()
    }
}

fn cmp_position(a: &Path<'_>, b: &Path<'_>) -> Ordering {
    a.position().cmp(b.position())
}

/// Probabilities equal up to rounding (1/3 reached as 1/3, or as 2/3 * 1/2).
fn same_probability(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs())
}

/// Whether two paths are equivalent (module docs): same position and state, and
/// equal constraints, or equal probabilities and constraints with a disjoint union.
fn can_merge(path: &Path<'_>, other: &Path<'_>) -> bool {
    cmp_position(path, other) == Ordering::Equal
        && path.same_state(other)
        && (path.constraints == other.constraints
            || (same_probability(path.prob, other.prob)
                && path
                    .constraints
                    .disjoint_union(&other.constraints)
                    .is_some()))
}

/// Merges `other` into `path`; they are equivalent (`can_merge`).
fn merge_paths(path: &mut Path<'_>, other: Path<'_>) {
    let keep_other = other.prob > path.prob;
    if path.constraints == other.constraints {
        let p = path.prob + other.prob;
        if p > 0.0 {
            path.share = (path.prob * path.share + other.prob * other.share) / p;
        }
        path.prob = p;
    } else if let Some(u) = path.constraints.disjoint_union(&other.constraints) {
        path.constraints = u;
        path.share += other.share;
    }
    if keep_other {
        path.steps = other.steps;
    }
    path.routes = (path.routes + other.routes).min(f64::MAX);
    path.transfers = path.transfers.max(other.transfers);
}

/// The rules an outcome's route matched, in order (to order outcomes of equal probability).
fn matched_rules(o: &Outcome) -> impl Iterator<Item = (u8, u32, u32)> + '_ {
    o.steps
        .iter()
        .filter(|s| s.kind == StepKind::Matched)
        .map(|s| (s.hook as u8, s.chain, s.rule))
}

/// Two outcomes with the same result: verdict, reason, NAT and final packet.
fn same_end(a: &Outcome, b: &Outcome) -> bool {
    a.verdict == b.verdict
        && a.final_dst == b.final_dst
        && a.final_dport == b.final_dport
        && a.mark == b.mark
        && a.delivery == b.delivery
        && a.why == b.why
        && a.dnat == b.dnat
        && a.snat == b.snat
}

/// Adds a finished outcome, merging it with equivalent ones (module docs).
fn add_outcome(outcomes: &mut Vec<Outcome>, mut o: Outcome) {
    'again: loop {
        for i in 0..outcomes.len() {
            let e = &outcomes[i];
            if !same_end(e, &o) {
                continue;
            }
            let keep_e = e.probability >= o.probability;
            if e.constraints == o.constraints {
                let e = outcomes.swap_remove(i);
                let p = e.probability + o.probability;
                if p > 0.0 {
                    o.share = (e.probability * e.share + o.probability * o.share) / p;
                }
                o.probability = p;
                if keep_e {
                    o.steps = e.steps;
                }
                o.routes = (o.routes + e.routes).min(f64::MAX);
                continue 'again;
            }
            if same_probability(e.probability, o.probability)
                && let Some(u) = e.constraints.disjoint_union(&o.constraints)
            {
                let e = outcomes.swap_remove(i);
                o.constraints = u;
                o.share += e.share;
                if keep_e {
                    o.steps = e.steps;
                }
                o.routes = (o.routes + e.routes).min(f64::MAX);
                continue 'again;
            }
        }
        outcomes.push(o);
        return;
    }
}

/// A waiting path's place in the queue: its position, then arrival order.
#[derive(PartialEq, Eq)]
struct Entry {
    key: Vec<(u32, u32)>,
    seq: u64,
    slot: usize,
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    /// Reversed: `BinaryHeap` pops the least advanced, earliest queued path first.
    fn cmp(&self, other: &Self) -> Ordering {
        other.key.cmp(&self.key).then(other.seq.cmp(&self.seq))
    }
}

/// The paths waiting to run. Without merging, a stack: the last fork runs first, as
/// a depth-first walk (no path waits for another). With merging, a heap by position
/// over a slab (paths never move while they wait) and an index by position and
/// state, so a path finds the equivalent paths at its position without looking at
/// the others.
struct Queue<'i> {
    /// Without merging: the waiting paths, last forked on top.
    stack: Vec<Path<'i>>,
    /// Arrival number, state hash (when indexing) and the path.
    slab: Vec<Option<(u64, u64, Path<'i>)>>,
    free: Vec<usize>,
    heap: BinaryHeap<Entry>,
    by_state: FastMap<u64, Vec<usize>>,
    index: bool,
    seq: u64,
    len: usize,
}

impl<'i> Queue<'i> {
    fn new(index: bool) -> Queue<'i> {
        Queue {
            stack: Vec::new(),
            slab: Vec::new(),
            free: Vec::new(),
            heap: BinaryHeap::new(),
            by_state: FastMap::default(),
            index,
            seq: 0,
            len: 0,
        }
    }

    fn len(&self) -> usize {
        self.len + self.stack.len()
    }

    fn push(&mut self, path: Path<'i>) {
        if !self.index {
            self.stack.push(path);
            return;
        }
        self.seq += 1;
        let key = path.position().collect();
        let hash = path.state_hash();
        let entry = Some((self.seq, hash, path));
        let slot = match self.free.pop() {
            Some(s) => {
                self.slab[s] = entry;
                s
            }
            None => {
                self.slab.push(entry);
                self.slab.len() - 1
            }
        };
        self.by_state.entry(hash).or_default().push(slot);
        self.heap.push(Entry {
            key,
            seq: self.seq,
            slot,
        });
        self.len += 1;
    }

    /// Drops heap entries of paths merged away.
    fn clean(&mut self) {
        while let Some(e) = self.heap.peek() {
            match &self.slab[e.slot] {
                Some((seq, _, _)) if *seq == e.seq => return,
                _ => {
                    self.heap.pop();
                }
            }
        }
    }

    /// Takes the path in `slot` out of the queue.
    fn take(&mut self, slot: usize) -> Option<Path<'i>> {
        let (_, hash, path) = self.slab[slot].take()?;
        self.free.push(slot);
        self.len -= 1;
        if let Some(v) = self.by_state.get_mut(&hash) {
            v.retain(|s| *s != slot);
            if v.is_empty() {
                self.by_state.remove(&hash);
            }
        }
        Some(path)
    }

    /// The next path to run: the least advanced one, or without merging the last fork.
    fn pop(&mut self) -> Option<Path<'i>> {
        if !self.index {
            return self.stack.pop();
        }
        self.clean();
        let e = self.heap.pop()?;
        self.take(e.slot)
    }

    /// How `path`'s position compares with the least advanced waiting path's (`None`
    /// without merging: paths do not wait for each other).
    fn cmp_top(&mut self, path: &Path<'_>) -> Option<Ordering> {
        if !self.index {
            return None;
        }
        self.clean();
        let e = self.heap.peek()?;
        Some(path.position().cmp(e.key.iter().copied()))
    }

    /// Merges into `path` every waiting path equivalent to it (module docs).
    fn absorb(&mut self, path: &mut Path<'i>) {
        let hash = path.state_hash();
        let Some(slots) = self.by_state.get(&hash) else {
            return;
        };
        // One at a time: each merge changes `path`'s probability or constraints.
        for slot in slots.clone() {
            if self.slab[slot]
                .as_ref()
                .is_some_and(|(_, _, other)| can_merge(path, other))
                && let Some(other) = self.take(slot)
            {
                merge_paths(path, other);
            }
        }
    }

    /// Every waiting path.
    fn drain(&mut self) -> Vec<Path<'i>> {
        self.heap.clear();
        self.by_state.clear();
        self.len = 0;
        let mut all = std::mem::take(&mut self.stack);
        all.extend(
            std::mem::take(&mut self.slab)
                .into_iter()
                .flatten()
                .map(|(_, _, p)| p),
        );
        all
    }
}

/// How a turn of `walk` ended.
#[allow(clippy::large_enum_variant)] // one at a time, moved once: a box would cost an allocation per outcome
enum End {
    Done(Outcome),
    /// Another path is less advanced: the caller queues this one again.
    Yield,
    /// A bound of `TraceOptions` was reached: stop exploring.
    Limit(String),
}

enum Flow {
    NextItem,
    /// Stop this rule (a jump pushed a frame, or a map miss).
    NextRule,
    /// The base chain accepted the packet (ACCEPT, or NAT done).
    EndBase,
    Final(Verdict, String),
}

/// Traces `packet` through `index` on `node`.
pub fn trace(index: &Index<'_>, packet: &Packet, node: &Node) -> Trace {
    trace_with(index, packet, node, &TraceOptions::default())
}

/// [`trace`] with explicit bounds.
pub fn trace_with(
    index: &Index<'_>,
    packet: &Packet,
    node: &Node,
    options: &TraceOptions,
) -> Trace {
    run(index, packet, node, options, None)
}

/// [`trace_with`], also returning every test of the source address the trace made
/// ([`SourceTests`]): a packet that differs only in its source and gets the same
/// answer from each of them has the same trace.
pub fn trace_noting_sources(
    index: &Index<'_>,
    packet: &Packet,
    node: &Node,
    options: &TraceOptions,
) -> (Trace, SourceTests) {
    let tests = std::cell::RefCell::new(SourceTests::default());
    let t = run(index, packet, node, options, Some(&tests));
    (t, tests.into_inner())
}

/// The conditions on the source address a trace evaluated, or that it read the
/// source another way ([`SourceTests::opaque`]).
///
/// A trace reads the source only through the conditions it evaluates (the walk's
/// other decisions use the destination, the protocol, the ports, the interfaces
/// and the marks). So if a second source gives the same answer as the first to
/// every test noted here, the walk takes the same branches and the trace is the
/// same: each test decides one branch, and the branches decide which tests come
/// next. Tests evaluated on a rewritten source (after SNAT) are noted too; they
/// only make the comparison stricter.
#[derive(Clone, Debug, Default)]
pub struct SourceTests {
    tests: Vec<Cond>,
    /// The noted conditions' addresses in the index, to note each once.
    seen: Vec<usize>,
    opaque: bool,
}

/// Beyond this many distinct tests a trace's sources are compared exactly.
const MAX_SOURCE_TESTS: usize = 64;

impl SourceTests {
    fn note(&mut self, c: &Cond) {
        let reads = match c {
            Cond::Src(..) | Cond::CtOrigSrc(..) | Cond::AddrType { dst: false, .. } => true,
            // Set lookups keyed on the source: its value, not a prefix test.
            Cond::IpSet { .. } => {
                self.opaque = true;
                false
            }
            Cond::NftSet { fields, .. } if fields.contains(&Field::Src) => {
                self.opaque = true;
                false
            }
            _ => false,
        };
        let at = std::ptr::from_ref(c) as usize;
        if reads && !self.seen.contains(&at) {
            if self.tests.len() == MAX_SOURCE_TESTS {
                self.opaque = true;
            } else {
                self.seen.push(at);
                self.tests.push(c.clone());
            }
        }
    }

    /// The trace read the source other than by prefix, range or address type (an
    /// ipset, an nft set or verdict map keyed on it): only the same address is
    /// known to give the same trace.
    pub fn opaque(&self) -> bool {
        self.opaque
    }

    /// The tests noted, in the order first evaluated.
    pub fn len(&self) -> usize {
        self.tests.len()
    }

    /// Whether no test of the source was made.
    pub fn is_empty(&self) -> bool {
        self.tests.is_empty()
    }

    /// Whether sources `a` and `b` get the same answer from every test noted (and,
    /// for an opaque trace, are the same address).
    pub fn agree(&self, a: IpAddr, b: IpAddr, node: &Node) -> bool {
        if a == b {
            return true;
        }
        if self.opaque || a.is_ipv4() != b.is_ipv4() {
            return false;
        }
        self.tests.iter().all(|c| match c {
            Cond::Src(m, _) | Cond::CtOrigSrc(m, _) => m.contains(a) == m.contains(b),
            Cond::AddrType { types, .. } => {
                types.contains(&node.addr_type(a)) == types.contains(&node.addr_type(b))
            }
            _ => false,
        })
    }
}

fn run(
    index: &Index<'_>,
    packet: &Packet,
    node: &Node,
    options: &TraceOptions,
    sources: Option<&std::cell::RefCell<SourceTests>>,
) -> Trace {
    // Every route on its own while that stays small.
    let detail = TraceOptions {
        max_paths: options.max_paths.min(options.merge_above),
        max_work: options.max_work / 4,
        ..*options
    };
    let sim = |options, merge| Sim {
        index,
        packet,
        node,
        options,
        merge,
        work: Cell::new(0),
        sources,
    };
    let t = sim(&detail, false).run();
    if t.incomplete.is_none() {
        return t;
    }
    sim(options, true).run()
}

struct Sim<'a, 'i> {
    index: &'a Index<'i>,
    packet: &'a Packet,
    node: &'a Node,
    options: &'a TraceOptions,
    /// Merge equivalent branches.
    merge: bool,
    /// Steps recorded and copied so far, by all paths.
    work: Cell<usize>,
    /// Where to note the source tests made, when asked ([`trace_noting_sources`]).
    sources: Option<&'a std::cell::RefCell<SourceTests>>,
}

/// Steps between two checks of the bounds while one path runs (without merging):
/// the work bound is passed by at most this much.
const CHECK_EVERY: usize = 64;

impl<'a, 'i> Sim<'a, 'i> {
    /// Notes a condition about to be evaluated, when the caller asked for them.
    #[inline]
    fn note(&self, c: &Cond) {
        if let Some(s) = self.sources {
            s.borrow_mut().note(c);
        }
    }

    fn run(&self) -> Trace {
        let p = self.packet;
        let host = p.origin == Origin::Host;
        let src = crate::packet::source_of(p, self.node);
        let dport = if p.proto.has_ports() { p.dport } else { None };
        let start = Path {
            src,
            orig_src: src,
            sport: p.sport,
            dst: p.dst,
            dport,
            orig_dport: dport,
            mark: p.mark,
            ct_mark: p.ct_mark,
            ct_state: p.ct_state,
            dnat_done: false,
            snat_done: false,
            hook: if host {
                HookId::Output
            } else {
                HookId::Prerouting
            },
            hook_seq: 0,
            base_pos: 0,
            looped: false,
            nat_set_here: false,
            in_iface: if host {
                Some("")
            } else {
                p.in_iface.as_deref()
            },
            out_iface: p.out_iface.as_deref(),
            stack: Vec::new(),
            prob: 1.0,
            share: 1.0,
            routes: 1.0,
            constraints: Constraints::default(),
            steps: Vec::with_capacity(STEPS_RESERVE),
            dnat: None,
            snat: None,
            recent_added: Vec::new(),
            pending: None,
            dnat_range: false,
            transfers: 0,
            src_is_orig: true,
            generation: 0,
            moves: 0,
            absorbed_at: u64::MAX,
            check_at: 0,
        };
        let mut queue: Queue<'a> = Queue::new(self.merge);
        let mut outcomes: Vec<Outcome> = Vec::new();
        let mut incomplete = None;
        let mut next = Some(start);
        while let Some(mut path) = next.take().or_else(|| queue.pop()) {
            match self.walk(&mut path, &mut queue, outcomes.len()) {
                End::Done(o) if self.merge => add_outcome(&mut outcomes, o),
                End::Done(o) => outcomes.push(o),
                End::Yield => queue.push(path),
                End::Limit(why) => {
                    outcomes.push(self.cut(path, queue, &why));
                    incomplete = Some(why);
                    break;
                }
            }
        }
        for o in &mut outcomes {
            o.conditions = o.constraints.conditions();
        }
        // Most probable first. Ties: in the depth-first walk, in the order found (rule
        // order: a rule's "matches" branch is followed first); when merging, whose
        // exploration order depends on positions, in rule order of the matched rules.
        let by_probability = |a: &Outcome, b: &Outcome| {
            b.probability
                .partial_cmp(&a.probability)
                .unwrap_or(Ordering::Equal)
        };
        if self.merge {
            outcomes.sort_by(|a, b| {
                by_probability(a, b)
                    .then_with(|| matched_rules(a).cmp(matched_rules(b)))
                    .then_with(|| a.why.cmp(&b.why))
                    .then_with(|| a.conditions.cmp(&b.conditions))
            });
        } else {
            outcomes.sort_by(by_probability);
        }
        Trace {
            outcomes,
            truncated: incomplete.is_some(),
            incomplete,
        }
    }

    /// The outcome standing for every path not explored when a bound was reached.
    fn cut(&self, mut path: Path<'a>, mut queue: Queue<'a>, why: &str) -> Outcome {
        let rest = queue.drain();
        let mass = path.prob * path.share + rest.iter().map(|p| p.prob * p.share).sum::<f64>();
        let routes = (path.routes + rest.iter().map(|p| p.routes).sum::<f64>()).min(f64::MAX);
        let n = rest.len() + 1;
        let mut o = self.finish(
            &mut path,
            Verdict::Indeterminate,
            format!(
                "{why}: plumb stopped exploring here ({n} path{} not followed)",
                if n == 1 { "" } else { "s" }
            ),
        );
        // Unconditional: the probability of ending anywhere in the unexplored part.
        o.probability = mass;
        o.share = 1.0;
        o.constraints = Constraints::default();
        o.routes = routes;
        o
    }

    fn v6(&self) -> bool {
        self.packet.dst.is_ipv6()
    }

    /// A copy of `path` for a branch, with room for the steps it will add.
    fn fork(&self, path: &Path<'a>) -> Path<'a> {
        self.work.set(self.work.get() + path.steps.len());
        let mut alt = path.clone();
        alt.check_at = 0;
        alt.steps.reserve(STEPS_RESERVE.min(path.steps.len() + 16));
        alt
    }

    fn done(&self, path: &mut Path<'a>, verdict: Verdict, why: String) -> End {
        End::Done(self.finish(path, verdict, why))
    }

    fn finish(&self, path: &mut Path<'a>, verdict: Verdict, why: String) -> Outcome {
        let delivery = (verdict == Verdict::Accept).then(|| {
            if self.node.is_local(path.dst) {
                Delivery::Local
            } else if self.packet.origin == Origin::Host {
                Delivery::Sent
            } else {
                Delivery::Forwarded
            }
        });
        let dnat = path.dnat.as_ref().map(|text| match path.dport {
            _ if path.dnat_range => text.to_string(),
            Some(p) if path.dst.is_ipv6() => format!("[{}]:{p}", path.dst),
            Some(p) => format!("{}:{p}", path.dst),
            None => path.dst.to_string(),
        });
        Outcome {
            verdict,
            probability: path.prob,
            share: path.share,
            routes: path.routes,
            dnat,
            snat: path.snat.take().map(Cow::into_owned),
            conditions: Vec::new(),
            constraints: std::mem::take(&mut path.constraints),
            delivery,
            final_dst: path.dst,
            final_dport: path.dport,
            mark: path.mark,
            why,
            steps: std::mem::take(&mut path.steps),
        }
    }

    fn step(&self, path: &mut Path<'a>, chain: u32, rule: u32, kind: StepKind, note: Option<Note>) {
        self.work.set(self.work.get() + 1);
        path.steps.push(Step {
            hook: path.hook,
            chain,
            rule,
            kind,
            note,
        });
    }

    /// Interfaces as the current hook sees them.
    fn ifaces(&self, path: &Path<'a>) -> (Option<&'a str>, Option<&'a str>) {
        let host = self.packet.origin == Origin::Host && !path.looped;
        // A local destination is reached through lo, whatever the packet would
        // otherwise leave on.
        let out_known = |path: &Path<'a>| {
            if self.node.is_local(path.dst) {
                Some("lo")
            } else {
                path.out_iface
            }
        };
        match path.hook {
            HookId::Prerouting | HookId::Input => (path.in_iface, Some("")),
            HookId::Forward => (path.in_iface, out_known(path)),
            HookId::Output => (Some(""), out_known(path)),
            HookId::Postrouting => (if host { Some("") } else { path.in_iface }, out_known(path)),
        }
    }

    /// The view of `path` for a rule of `chain` (whose compiled sets its lookups name).
    fn view<'v>(&'v self, path: &'v Path<'a>, chain: u32) -> View<'v> {
        let (in_iface, out_iface) = self.ifaces(path);
        let ct = match path.ct_state {
            CtState::New => Some(
                ct_bits::NEW
                    | if path.dnat_done { ct_bits::DNAT } else { 0 }
                    | if path.snat_done { ct_bits::SNAT } else { 0 },
            ),
            CtState::Untracked => Some(ct_bits::UNTRACKED),
            CtState::Invalid => Some(ct_bits::INVALID),
            // NAT status of an existing connection is not known.
            CtState::Established | CtState::Related => None,
        };
        let p = self.packet;
        View {
            src: path.src,
            dst: path.dst,
            sport: path.sport,
            dport: path.dport,
            proto: p.proto.number(),
            icmp_type: p.icmp_type,
            in_iface,
            out_iface,
            physdev_in: p.physdev_in.as_deref(),
            physdev_out: p.physdev_out.as_deref(),
            mark: path.mark,
            ct_mark: path.ct_mark,
            ct,
            orig_src: path.orig_src,
            orig_dst: p.dst,
            orig_dport: path.orig_dport,
            node: self.node,
            recent_added: &path.recent_added,
            sets: &self.index.code(chain).sets,
        }
    }

    /// Fields the path's constraints pin to one value are known. Apart from `view`
    /// (which callers then build in place: a view returned from a variable is copied).
    #[inline]
    fn pin(&self, v: &mut View<'_>, path: &Path<'a>) {
        if path.constraints.has_ranges() {
            self.pin_ranges(v, &path.constraints, path.src_is_orig);
        }
    }

    #[cold]
    fn pin_ranges(&self, v: &mut View<'_>, c: &Constraints, src_is_orig: bool) {
        if v.src.is_none() && src_is_orig {
            v.src = c.single_src();
        }
        if v.orig_src.is_none() {
            v.orig_src = c.single_src();
        }
        if v.sport.is_none() {
            v.sport = c.single_sport();
        }
        if self.packet.proto.has_ports() {
            v.dport = v.dport.or_else(|| c.single_dport());
            v.orig_dport = v.orig_dport.or_else(|| c.single_dport());
        }
    }

    /// The destination port, known or pinned by the constraints.
    fn dport(&self, path: &Path<'a>) -> Option<u16> {
        path.dport.or_else(|| {
            if self.packet.proto.has_ports() {
                path.constraints.single_dport()
            } else {
                None
            }
        })
    }

    /// The next base chain of the current hook to enter, skipping NAT chains that do not run.
    fn next_base(&self, path: &mut Path<'a>) -> Option<u32> {
        let bases = self.index.bases(self.v6(), path.hook);
        while let Some(b) = bases.get(path.base_pos) {
            path.base_pos += 1;
            if b.nat {
                let done = if path.hook.is_dst_nat() {
                    path.dnat_done
                } else {
                    path.snat_done
                };
                if path.ct_state != CtState::New || path.looped || done || path.nat_set_here {
                    let why = if path.ct_state != CtState::New {
                        format!(
                            "conntrack state {}: NAT chains only see NEW connections",
                            path.ct_state.as_str()
                        )
                    } else if path.looped {
                        "looped-back packet: its connection's NAT is already set up".to_string()
                    } else {
                        "NAT already set up for this connection at this hook".to_string()
                    };
                    if !path
                        .steps
                        .last()
                        .is_some_and(|s| s.kind == StepKind::NatSkipped && s.hook == path.hook)
                    {
                        self.step(
                            path,
                            b.chain,
                            u32::MAX,
                            StepKind::NatSkipped,
                            Some(Note::new(why)),
                        );
                    }
                    continue;
                }
            }
            return Some(b.chain);
        }
        None
    }

    fn frame(&self, chain: u32, path: &Path<'a>) -> Frame<'a> {
        let index: &'a Index<'i> = self.index;
        let proto = self.packet.proto.number();
        let cursor = match (index.dispatch(chain), self.dport(path)) {
            (Some(d), Some(port)) => Cursor::Merge([
                d.exact.get(&(path.dst, proto, port)),
                d.port.get(&(proto, port)),
                d.dst.get(&path.dst),
                &d.rest,
            ]),
            // No ports: rules keyed by a port cannot match (their port test fails).
            (Some(d), None) if !self.packet.proto.has_ports() => {
                Cursor::Merge([&[], &[], d.dst.get(&path.dst), &d.rest])
            }
            // A port plumb does not know: port tests are undecided, walk every rule.
            _ => Cursor::Linear(0),
        };
        Frame {
            chain,
            cursor,
            seen: 0,
        }
    }

    /// Runs `path` until it ends, another queued path is less advanced, or a bound
    /// is reached; forks go to `queue`. `done` counts finished outcomes.
    fn walk(&self, path: &mut Path<'a>, queue: &mut Queue<'a>, done: usize) -> End {
        loop {
            // Bounds: every turn when merging, else every CHECK_EVERY steps and after
            // each fork.
            if path.steps.len() >= path.check_at && path.pending.is_none() {
                if !self.merge {
                    path.check_at = path.steps.len() + CHECK_EVERY;
                }
                if path.steps.len() > self.options.max_steps {
                    return self.done(
                        path,
                        Verdict::Indeterminate,
                        format!(
                            "more than {} steps: the ruleset probably loops",
                            self.options.max_steps
                        ),
                    );
                }
                if self.work.get() > self.options.max_work {
                    return End::Limit(format!(
                        "more than {} steps explored",
                        self.options.max_work
                    ));
                }
                if done + queue.len() + 1 > self.options.max_paths {
                    return End::Limit(format!("more than {} paths", self.options.max_paths));
                }
                if self.merge {
                    match queue.cmp_top(path) {
                        Some(Ordering::Greater) => return End::Yield,
                        Some(Ordering::Equal) if path.absorbed_at != path.moves => {
                            path.absorbed_at = path.moves;
                            queue.absorb(path);
                        }
                        _ => {}
                    }
                    path.moves += 1;
                }
            }
            if let Some(v) = path.pending.take() {
                match self.apply_map_verdict(path, &v) {
                    Flow::Final(v, why) => return self.done(path, v, why),
                    Flow::EndBase => self.end_base(path),
                    _ => {}
                }
                continue;
            }
            let Some(frame) = path.stack.last_mut() else {
                if let Some(chain) = self.next_base(path) {
                    let f = self.frame(chain, path);
                    path.stack.push(f);
                    continue;
                }
                match self.advance_hook(path) {
                    Some((v, why)) => return self.done(path, v, why),
                    None => continue,
                }
            };
            let chain_id = frame.chain;
            let merge = matches!(frame.cursor, Cursor::Merge(_));
            let rules_len = self.index.rules(chain_id).len();
            let next = frame.cursor.next(rules_len);
            // Record rules the dispatch index skipped.
            if merge {
                let upto = next.unwrap_or(rules_len as u32);
                let skipped = upto.saturating_sub(frame.seen);
                if let Some(r) = next {
                    frame.seen = r + 1;
                }
                if skipped > 0 {
                    self.step(path, chain_id, u32::MAX, StepKind::Skipped(skipped), None);
                }
            }
            let Some(r) = next else {
                // End of chain: return to the caller, or the base chain's policy.
                path.stack.pop();
                if path.stack.is_empty()
                    && let Some(v) = self.policy(path)
                {
                    return self.done(path, v.0, v.1);
                }
                continue;
            };
            match self.eval_rule(path, chain_id, r, queue) {
                Flow::NextItem | Flow::NextRule => {}
                Flow::EndBase => self.end_base(path),
                Flow::Final(v, why) => return self.done(path, v, why),
            }
        }
    }

    /// Policy of the base chain whose frame just ended. `Some` ends the trace.
    fn policy(&self, path: &mut Path<'a>) -> Option<(Verdict, String)> {
        let base = self
            .index
            .bases(self.v6(), path.hook)
            .get(path.base_pos.wrapping_sub(1))?
            .chain;
        self.step(path, base, u32::MAX, StepKind::Policy, None);
        match self.index.policy(base) {
            Some(plumb_ruleset::Policy::Drop) => Some((
                Verdict::Drop,
                format!(
                    "policy DROP of {} {}",
                    self.index.table_of(base).name,
                    self.index.chain(base).chain.name
                ),
            )),
            Some(plumb_ruleset::Policy::Other(p)) => {
                Some((Verdict::Indeterminate, format!("unknown policy {p}")))
            }
            _ => None,
        }
    }

    fn end_base(&self, path: &mut Path<'a>) {
        path.stack.clear();
    }

    /// Moves to the next hook; `Some` when the packet leaves netfilter.
    fn advance_hook(&self, path: &mut Path<'a>) -> Option<(Verdict, String)> {
        path.base_pos = 0;
        path.hook_seq += 1;
        path.nat_set_here = false;
        let host = self.packet.origin == Origin::Host;
        let local = self.node.is_local(path.dst);
        let anchor = self
            .index
            .bases(self.v6(), path.hook)
            .first()
            .map(|b| b.chain);
        let route = |path: &mut Path<'a>, text: String| {
            if let Some(c) = anchor {
                self.step(path, c, u32::MAX, StepKind::Route, Some(Note::new(text)));
            }
        };
        match path.hook {
            HookId::Output => {
                path.hook = HookId::Postrouting;
                if local {
                    route(
                        path,
                        format!("{} is a local address: the packet goes out on lo", path.dst),
                    );
                }
                None
            }
            HookId::Postrouting => {
                if host && local && !path.looped {
                    path.looped = true;
                    path.in_iface = Some("lo");
                    path.hook = HookId::Prerouting;
                    return None;
                }
                Some((
                    Verdict::Accept,
                    if path.looped {
                        "delivered to a local process (via lo)".into()
                    } else if host {
                        format!("sent to {}", path.dst)
                    } else {
                        format!("forwarded to {}", path.dst)
                    },
                ))
            }
            HookId::Prerouting => {
                if local {
                    route(path, format!("{} is a local address: INPUT", path.dst));
                    path.hook = HookId::Input;
                } else {
                    route(
                        path,
                        format!("{} is not a local address: FORWARD", path.dst),
                    );
                    path.hook = HookId::Forward;
                }
                None
            }
            HookId::Input => Some((Verdict::Accept, "delivered to a local process".into())),
            HookId::Forward => {
                path.hook = HookId::Postrouting;
                None
            }
        }
    }

    /// Queues the branch of a fork where the rule's condition `cond` does not match,
    /// with probability `prob` and, for an undecided condition, the fact it assumes.
    #[allow(clippy::too_many_arguments)]
    fn fork_not_matched(
        &self,
        path: &Path<'a>,
        chain: u32,
        r: u32,
        cond: u16,
        prob: f64,
        assume: Option<(&Fact, bool)>,
        note: NotePart,
        queue: &mut Queue<'a>,
    ) {
        let mut alt = self.fork(path);
        alt.prob = prob;
        if let Some((fact, holds)) = assume {
            alt.constraints.assume(fact, holds);
        }
        self.step(
            &mut alt,
            chain,
            r,
            StepKind::NotMatched(Some(cond)),
            Some(Note::new(note)),
        );
        queue.push(alt);
    }

    /// Forks at a condition the path's constraints leave undecided: the branch where
    /// it does not match is queued, `path` goes on assuming it matches. Returns the
    /// note for the matched step.
    #[allow(clippy::too_many_arguments)]
    #[cold]
    fn fork_undecided(
        &self,
        path: &mut Path<'a>,
        chain: u32,
        r: u32,
        item: usize,
        fact: Fact,
        neg: bool,
        why: String,
        queue: &mut Queue<'a>,
    ) -> NotePart {
        // The condition matches exactly when `fact` holds != `neg`.
        let fact = match fact {
            // A fact of one rule (a rate limit): say which.
            Fact::Atom { key, text } if key.starts_with('@') => Fact::Atom {
                key,
                text: format!("{text} [{}]", self.rule_why("", chain, r).trim()).into(),
            },
            f => f,
        };
        path.share /= 2.0;
        self.fork_not_matched(
            path,
            chain,
            r,
            item as u16,
            path.prob,
            Some((&fact, neg)),
            format!("assumed not: {why}").into(),
            queue,
        );
        path.constraints.assume_owned(fact, !neg);
        path.check_at = 0;
        format!("assumed: {why}").into()
    }

    fn eval_rule(&self, path: &mut Path<'a>, chain: u32, r: u32, queue: &mut Queue<'a>) -> Flow {
        let index: &'a Index<'i> = self.index;
        let rule = &index.rules(chain)[r as usize];
        let items = index.items(chain, rule);
        // Pass 1: a pure condition that fails (or that the path's constraints rule
        // out) decides without forking. The ones that match are noted: nothing before
        // the rule's first action changes their answer, so pass 2 does not ask again.
        let mut matched_before: u64 = 0;
        let assumed = !path.constraints.is_empty();
        {
            let mut view = self.view(path, chain);
            self.pin(&mut view, path);
            for (i, item) in items.iter().enumerate() {
                match item {
                    Item::Cond(c) if c.is_pure() => {
                        self.note(c);
                        let no = match c.eval(&view) {
                            Eval::No => true,
                            Eval::Yes => {
                                if i < 64 {
                                    matched_before |= 1 << i;
                                }
                                false
                            }
                            // Without assumptions, only pass 2 can tell.
                            Eval::Unknown(why) if assumed => {
                                ruled_out(&view, path, c, &why, (chain, rule.rule, i as u16))
                            }
                            _ => false,
                        };
                        if no {
                            // Side effects of earlier `recent --set` still happen in the kernel.
                            let added: Vec<String> = items[..i]
                                .iter()
                                .filter_map(|it| match it {
                                    Item::Cond(Cond::Recent {
                                        name,
                                        mode: crate::ir::RecentMode::Set,
                                        ..
                                    }) => Some(name.clone()),
                                    _ => None,
                                })
                                .collect();
                            path.recent_added.extend(added);
                            self.step(
                                path,
                                chain,
                                rule.rule,
                                StepKind::NotMatched(Some(i as u16)),
                                None,
                            );
                            return Flow::NextRule;
                        }
                    }
                    Item::Cond(_) => {}
                    Item::Act(_) => break,
                }
            }
        }
        let mut notes: Option<Note> = None;
        let add = |notes: &mut Option<Note>, part: NotePart| match notes {
            Some(n) => n.push(part),
            None => *notes = Some(Note::new(part)),
        };
        let mut matched_recorded = false;
        for (i, item) in items.iter().enumerate() {
            match item {
                Item::Cond(_) if i < 64 && matched_before & (1 << i) != 0 => {}
                Item::Cond(c) => {
                    self.note(c);
                    let d = {
                        let mut view = self.view(path, chain);
                        self.pin(&mut view, path);
                        decide(&view, path, c, (chain, rule.rule, i as u16))
                    };
                    match d {
                        Decided::Yes => {
                            if let Cond::Recent {
                                name,
                                mode: crate::ir::RecentMode::Set,
                                ..
                            } = c
                            {
                                path.recent_added.push(name.clone());
                            }
                        }
                        Decided::No => {
                            self.step(
                                path,
                                chain,
                                rule.rule,
                                StepKind::NotMatched(Some(i as u16)),
                                None,
                            );
                            return Flow::NextRule;
                        }
                        Decided::Random(p) => {
                            if p <= 0.0 {
                                self.step(
                                    path,
                                    chain,
                                    rule.rule,
                                    StepKind::NotMatched(Some(i as u16)),
                                    Some(Note::new("probability 0".to_string())),
                                );
                                return Flow::NextRule;
                            }
                            if p < 1.0 {
                                self.fork_not_matched(
                                    path,
                                    chain,
                                    rule.rule,
                                    i as u16,
                                    path.prob * (1.0 - p),
                                    None,
                                    NotePart::NotChosen(1.0 - p),
                                    queue,
                                );
                                path.prob *= p;
                                path.check_at = 0;
                                add(&mut notes, NotePart::Chosen(p));
                            }
                        }
                        Decided::Fork { fact, neg, why } => {
                            let note = self
                                .fork_undecided(path, chain, rule.rule, i, fact, neg, why, queue);
                            add(&mut notes, note);
                        }
                    }
                }
                Item::Act(a) => {
                    if !matched_recorded {
                        matched_recorded = true;
                        let note = notes.take();
                        self.step(path, chain, rule.rule, StepKind::Matched, note);
                    }
                    match self.act(path, a, chain, rule.rule, queue) {
                        Flow::NextItem => {}
                        other => return other,
                    }
                }
            }
        }
        if !matched_recorded {
            self.step(path, chain, rule.rule, StepKind::Matched, notes);
        }
        Flow::NextRule
    }

    fn push_chain(&self, path: &mut Path<'a>, j: &Jump, goto: bool) -> Flow {
        match j {
            Jump::Chain(c) => {
                path.transfers += 1;
                if path.transfers > self.options.max_transfers {
                    return Flow::Final(
                        Verdict::Indeterminate,
                        format!(
                            "more than {} jumps: the ruleset loops, or calls its chains more often than plumb follows",
                            self.options.max_transfers
                        ),
                    );
                }
                if path.stack.len() >= self.options.max_depth {
                    return Flow::Final(
                        Verdict::Indeterminate,
                        format!(
                            "chain calls nest deeper than {}: the ruleset probably loops",
                            self.options.max_depth
                        ),
                    );
                }
                if goto {
                    // The goto'd chain replaces this one: its end returns to our
                    // caller, or (from the base chain) applies the base policy.
                    path.stack.pop();
                }
                let f = self.frame(*c, path);
                path.stack.push(f);
                Flow::NextRule
            }
            Jump::Missing(name) => Flow::Final(
                Verdict::Indeterminate,
                format!("the rule jumps to chain {name}, which the ruleset does not define"),
            ),
        }
    }

    /// RETURN: back to the caller, or the base chain's policy.
    fn ret(&self, path: &mut Path<'a>) -> Flow {
        path.stack.pop();
        if path.stack.is_empty()
            && let Some((v, why)) = self.policy(path)
        {
            return Flow::Final(v, why);
        }
        Flow::NextRule
    }

    fn nat_allowed(&self, path: &Path<'a>, dst: bool) -> bool {
        path.ct_state == CtState::New && path.hook.is_dst_nat() == dst && !path.looped
    }

    /// What one action does to the path: a verdict, a jump, a rewrite or a fork.
    fn act(
        &self,
        path: &mut Path<'a>,
        a: &'a Action,
        chain: u32,
        rule: u32,
        queue: &mut Queue<'a>,
    ) -> Flow {
        match a {
            Action::Accept => Flow::EndBase,
            Action::Drop => Flow::Final(Verdict::Drop, self.rule_why("dropped by", chain, rule)),
            Action::Reject(w) => Flow::Final(
                Verdict::Reject,
                format!(
                    "{}{}",
                    self.rule_why("rejected by", chain, rule),
                    w.as_deref()
                        .map(|w| format!(" (with {w})"))
                        .unwrap_or_default()
                ),
            ),
            Action::Queue(q) => Flow::Final(
                Verdict::Queue,
                format!("{q}: handed to a userspace program"),
            ),
            Action::Return => self.ret(path),
            Action::Continue | Action::NoEffect(_) | Action::Log(_) => Flow::NextItem,
            Action::Jump(j) => self.push_chain(path, j, false),
            Action::Goto(j) => self.push_chain(path, j, true),
            Action::Dnat(spec) => self.dnat(path, spec),
            Action::Redirect(ports) => self.redirect(path, ports),
            Action::Snat(spec) => self.snat(path, spec),
            Action::Masquerade(_) => self.masquerade(path),
            Action::Mark(op) => {
                path.mark = op.apply(path.mark);
                path.generation += 1;
                Flow::NextItem
            }
            Action::ConnMark(op) => {
                path.ct_mark = op.apply(path.ct_mark);
                path.generation += 1;
                Flow::NextItem
            }
            Action::SaveMark { nfmask, ctmask } => {
                path.ct_mark = (path.ct_mark & !ctmask) ^ (path.mark & nfmask);
                path.generation += 1;
                Flow::NextItem
            }
            Action::RestoreMark { nfmask, ctmask } => {
                path.mark = (path.mark & !nfmask) ^ (path.ct_mark & ctmask);
                path.generation += 1;
                Flow::NextItem
            }
            Action::NoTrack => {
                if path.ct_state == CtState::New {
                    path.ct_state = CtState::Untracked;
                }
                path.generation += 1;
                Flow::NextItem
            }
            Action::Numgen {
                modulus,
                offset,
                entries,
            } => self.numgen(path, *modulus, *offset, entries, queue),
            Action::VerdictMap { fields, set } => self.verdict_map(path, fields, set, chain),
            Action::Unknown(text) => Flow::Final(
                Verdict::Indeterminate,
                format!("plumb does not model `{text}`"),
            ),
        }
    }

    /// DNAT: the destination (and port) rewritten; the base chain ends.
    fn dnat(&self, path: &mut Path<'a>, spec: &'a NatSpec) -> Flow {
        if !self.nat_allowed(path, true) {
            return Flow::Final(
                Verdict::Indeterminate,
                "DNAT outside a NEW connection's PREROUTING/OUTPUT".into(),
            );
        }
        if let Some(a) = spec.addr {
            path.dst = a;
        }
        if let Some(p) = spec.ports
            && self.packet.proto.has_ports()
        {
            path.dport = Some(p.from);
        }
        path.generation += 1;
        // A range: the kernel picks one member; `dnat` reports the range.
        path.dnat_range = spec.addr_to.is_some() || spec.ports.is_some_and(|p| p.from != p.to);
        path.dnat = Some(Cow::Borrowed(&spec.text));
        path.dnat_done = true;
        path.nat_set_here = true;
        Flow::EndBase
    }

    /// REDIRECT: DNAT to the node itself (loopback for the host's own packets).
    fn redirect(&self, path: &mut Path<'a>, ports: &Option<PortRange>) -> Flow {
        if !self.nat_allowed(path, true) {
            return Flow::Final(
                Verdict::Indeterminate,
                "REDIRECT outside a NEW connection's PREROUTING/OUTPUT".into(),
            );
        }
        path.dst = if self.packet.origin == Origin::Host {
            if self.v6() {
                IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)
            } else {
                IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)
            }
        } else {
            match self.node.local_addrs.iter().find(|c| c.addr.is_ipv6() == self.v6()) {
                Some(c) => c.addr,
                None => return Flow::Final(Verdict::Indeterminate, "REDIRECT to the input interface's address, which is not known (pass --local-addr)".into()),
            }
        };
        if let Some(p) = ports
            && self.packet.proto.has_ports()
        {
            path.dport = Some(p.from);
        }
        path.generation += 1;
        path.dnat = Some(Cow::Borrowed("redirect"));
        path.dnat_done = true;
        path.nat_set_here = true;
        Flow::EndBase
    }

    /// SNAT: the source rewritten; the base chain ends.
    fn snat(&self, path: &mut Path<'a>, spec: &'a NatSpec) -> Flow {
        if !self.nat_allowed(path, false) {
            return Flow::Final(
                Verdict::Indeterminate,
                "SNAT outside a NEW connection's POSTROUTING/INPUT".into(),
            );
        }
        if let Some(a) = spec.addr {
            path.src = Some(a);
        }
        path.generation += 1;
        path.snat = Some(Cow::Borrowed(&spec.text));
        path.snat_done = true;
        path.nat_set_here = true;
        Flow::EndBase
    }

    /// MASQUERADE: the source becomes the output interface's address.
    fn masquerade(&self, path: &mut Path<'a>) -> Flow {
        if !self.nat_allowed(path, false) || path.hook != HookId::Postrouting {
            return Flow::Final(
                Verdict::Indeterminate,
                "MASQUERADE outside a NEW connection's POSTROUTING".into(),
            );
        }
        let (_, out) = self.ifaces(path);
        // The new source is the address of the output interface: an unknown
        // source is no longer the original one.
        path.src_is_orig = false;
        path.generation += 1;
        path.snat = Some(match out {
            Some(i) if !i.is_empty() => Cow::Owned(format!("masquerade ({i})")),
            _ => Cow::Borrowed("masquerade"),
        });
        path.snat_done = true;
        path.nat_set_here = true;
        Flow::EndBase
    }

    /// `numgen random mod N vmap { ... }`: one path per entry, each with its probability,
    /// and one for the values no entry covers.
    fn numgen(
        &self,
        path: &mut Path<'a>,
        modulus: u32,
        offset: u32,
        entries: &'a [(u32, u32, MapVerdict)],
        queue: &mut Queue<'a>,
    ) -> Flow {
        // One fork per entry, all at once: more than the path bound cannot be
        // followed (and would hold as many copies of the path).
        if entries.len() > self.options.max_paths {
            return Flow::Final(
                Verdict::Indeterminate,
                format!(
                    "numgen map with {} entries: more than {} paths",
                    entries.len(),
                    self.options.max_paths
                ),
            );
        }
        let m = modulus as f64;
        let mut covered = 0.0;
        let mut first: Option<(f64, MapVerdict, String)> = None;
        for (a, b, v) in entries {
            let lo = (*a).max(offset);
            let hi = (*b).min(offset.saturating_add(modulus - 1));
            if lo > hi {
                continue;
            }
            let p = (hi - lo + 1) as f64 / m;
            covered += p;
            let note = format!(
                "numgen: value {a}{} of {modulus}, probability {}",
                if a != b {
                    format!("-{b}")
                } else {
                    String::new()
                },
                crate::outcome::probability_text(p)
            );
            if first.is_none() {
                first = Some((p, v.clone(), note));
            } else {
                let mut alt = self.fork(path);
                alt.prob *= p;
                alt.pending = Some(v.clone());
                self.annotate_last(&mut alt, note);
                queue.push(alt);
            }
        }
        let miss = (1.0 - covered).max(0.0);
        if miss > 1e-12 {
            let mut alt = self.fork(path);
            alt.prob *= miss;
            self.annotate_last(
                &mut alt,
                format!(
                    "numgen: no entry (probability {})",
                    crate::outcome::probability_text(miss)
                ),
            );
            alt.pending = Some(MapVerdict::Continue);
            queue.push(alt);
        }
        path.check_at = 0;
        match first {
            Some((p, v, note)) => {
                path.prob *= p;
                self.annotate_last(path, note);
                self.apply_map_verdict(path, &v)
            }
            None => Flow::NextRule,
        }
    }

    /// A verdict map lookup (`ip daddr . th dport vmap @service-ips`).
    fn verdict_map(&self, path: &mut Path<'a>, fields: &[Field], set: &SetRef, chain: u32) -> Flow {
        if fields.contains(&Field::Src)
            && let Some(s) = self.sources
        {
            s.borrow_mut().opaque = true;
        }
        let mut view = self.view(path, chain);
        self.pin(&mut view, path);
        let mut key = Vec::with_capacity(fields.len());
        for f in fields {
            match view.atom(*f) {
                Some(a) => key.push(a),
                None => {
                    return Flow::Final(
                        Verdict::Indeterminate,
                        "a verdict map key field is not known".into(),
                    );
                }
            }
        }
        let sets = &self.index.code(chain).sets;
        match crate::ir::lookup(sets, set, &key) {
            Some(Some(i)) => {
                let s = &sets[*set as usize];
                if let Some(c) = s.comment(i) {
                    self.annotate_last(path, format!("map @{}: {c}", s.name));
                } else {
                    self.annotate_last(path, format!("map @{} has an entry", s.name));
                }
                match s.verdict(i).cloned() {
                    Some(v) => self.apply_map_verdict(path, &v),
                    None => {
                        Flow::Final(Verdict::Indeterminate, "map entry without a verdict".into())
                    }
                }
            }
            Some(None) => {
                let name = sets[*set as usize].name.clone();
                self.annotate_last(path, format!("no entry in map @{name}"));
                Flow::NextRule
            }
            None => Flow::Final(
                Verdict::Indeterminate,
                "a map element could not be read".into(),
            ),
        }
    }

    fn annotate_last(&self, path: &mut Path<'a>, note: String) {
        if let Some(s) = path.steps.last_mut() {
            match &mut s.note {
                Some(old) => old.push(note),
                None => s.note = Some(Note::new(note)),
            }
        }
    }

    fn apply_map_verdict(&self, path: &mut Path<'a>, v: &MapVerdict) -> Flow {
        let (chain, rule) = path
            .steps
            .last()
            .map(|s| (s.chain, s.rule))
            .unwrap_or((0, 0));
        match v {
            MapVerdict::Accept => Flow::EndBase,
            MapVerdict::Drop => {
                Flow::Final(Verdict::Drop, self.rule_why("dropped by", chain, rule))
            }
            MapVerdict::Reject => {
                Flow::Final(Verdict::Reject, self.rule_why("rejected by", chain, rule))
            }
            MapVerdict::Queue => Flow::Final(Verdict::Queue, "queued to userspace".into()),
            MapVerdict::Continue => Flow::NextRule,
            MapVerdict::Return => self.ret(path),
            MapVerdict::Jump(j) => self.push_chain(path, j, false),
            MapVerdict::Goto(j) => self.push_chain(path, j, true),
        }
    }

    fn rule_why(&self, what: &str, chain: u32, rule: u32) -> String {
        let c = self.index.chain(chain);
        let t = self.index.table_of(chain);
        let pos = c
            .chain
            .rules
            .get(rule as usize)
            .map(|_| plumb_ruleset::position_at(rule as usize))
            .unwrap_or(0);
        format!("{what} {} {} rule {pos}", t.name, c.chain.name)
    }
}

/// A condition's answer on a path.
enum Decided {
    Yes,
    No,
    Random(f64),
    /// Both answers are possible: it matches exactly when `fact` holds != `neg`.
    Fork {
        fact: Fact,
        neg: bool,
        why: String,
    },
}

/// Whether the path's constraints rule out an undecided condition.
#[cold]
#[inline(never)]
fn ruled_out(view: &View<'_>, path: &Path<'_>, c: &Cond, why: &str, site: (u32, u32, u16)) -> bool {
    let (fact, neg) = c.fact(view, &fact_context(path, site), why);
    path.constraints.decide(&fact).is_some_and(|h| h == neg)
}

/// What `Cond::fact` needs about `path`, for the condition at `site`.
fn fact_context(path: &Path<'_>, site: (u32, u32, u16)) -> FactContext {
    FactContext {
        ct_base: match path.ct_state {
            CtState::Established => ct_bits::ESTABLISHED,
            CtState::Related => ct_bits::RELATED,
            _ => 0,
        },
        src_is_orig: path.src_is_orig,
        hook: path.hook,
        generation: path.generation,
        site,
    }
}

/// Evaluates `c`, deciding a condition on something unknown by what the path's
/// constraints already allow.
#[inline]
fn decide(view: &View<'_>, path: &Path<'_>, c: &Cond, site: (u32, u32, u16)) -> Decided {
    match c.eval(view) {
        Eval::Yes => Decided::Yes,
        Eval::No => Decided::No,
        Eval::Random(p) => Decided::Random(p),
        Eval::Unknown(why) => {
            let (fact, neg) = c.fact(view, &fact_context(path, site), &why);
            match path.constraints.decide(&fact) {
                Some(holds) if holds != neg => Decided::Yes,
                Some(_) => Decided::No,
                None => Decided::Fork { fact, neg, why },
            }
        }
    }
}
