//! The simulator: walks a packet through the hooks in kernel order and forks at
//! every branch (random `statistic`/`numgen`, and conditions plumb cannot decide).
//!
//! Hook order (net/ipv4): locally generated packets take OUTPUT (raw, mangle, nat,
//! filter, security), are rerouted after DNAT, then POSTROUTING (mangle, nat); a
//! destination that is local loops back through PREROUTING and INPUT without NAT
//! (the connection's NAT is already set up). Arriving packets take PREROUTING, the
//! routing decision on the (possibly DNATed) destination, then INPUT or FORWARD and
//! POSTROUTING. NAT chains run only for NEW, tracked connections, in priority order
//! until one sets up a NAT binding (nf_nat_inet_fn).

use crate::index::{HookId, Index, Item};
use crate::matches::{Cond, Eval, View, ct_bits};
use crate::outcome::{Delivery, Note, NotePart, Outcome, Step, StepKind, Trace, Verdict};
use crate::packet::{CtState, Node, Origin, Packet};
use crate::targets::{Action, Jump, MapVerdict};
use std::borrow::Cow;
use std::net::IpAddr;

/// Steps a path has room for before its vector grows (a kube-proxy ClusterIP path
/// has about 30).
const STEPS_RESERVE: usize = 48;

/// A copy of `path` for a branch, with room for the steps it will add.
fn fork<'i>(path: &Path<'i>) -> Path<'i> {
    let mut alt = path.clone();
    alt.steps.reserve(STEPS_RESERVE.min(path.steps.len() + 16));
    alt
}

/// Limits that keep every trace bounded.
#[derive(Clone, Copy, Debug)]
pub struct TraceOptions {
    /// Paths explored before the rest is reported as one INDETERMINATE outcome.
    pub max_paths: usize,
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
            max_paths: 4096,
            max_steps: 1_000_000,
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

#[derive(Clone, Debug)]
struct Frame<'i> {
    chain: u32,
    cursor: Cursor<'i>,
    /// Index of the rule after the last one this frame looked at (to count the
    /// rules a dispatch table skipped).
    seen: u32,
}

/// The state of one path through the ruleset.
#[derive(Clone, Debug)]
struct Path<'i> {
    src: Option<IpAddr>,
    sport: Option<u16>,
    dst: IpAddr,
    dport: Option<u16>,
    mark: u32,
    ct_mark: u32,
    ct_state: CtState,
    dnat_done: bool,
    snat_done: bool,
    hook: HookId,
    base_pos: usize,
    looped: bool,
    nat_set_here: bool,
    in_iface: Option<&'i str>,
    out_iface: Option<&'i str>,
    stack: Vec<Frame<'i>>,
    prob: f64,
    conditions: Vec<String>,
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

pub fn trace_with(
    index: &Index<'_>,
    packet: &Packet,
    node: &Node,
    options: &TraceOptions,
) -> Trace {
    let sim = Sim {
        index,
        packet,
        node,
        options,
    };
    sim.run()
}

struct Sim<'a, 'i> {
    index: &'a Index<'i>,
    packet: &'a Packet,
    node: &'a Node,
    options: &'a TraceOptions,
}

impl<'a, 'i> Sim<'a, 'i> {
    fn run(&self) -> Trace {
        let p = self.packet;
        let host = p.origin == Origin::Host;
        let src = p.src.or_else(|| {
            if host {
                self.node
                    .local_addrs
                    .iter()
                    .find(|c| c.addr.is_ipv4() == p.dst.is_ipv4() && !c.addr.is_loopback())
                    .map(|c| c.addr)
            } else {
                None
            }
        });
        let start = Path {
            src,
            sport: p.sport,
            dst: p.dst,
            dport: if p.proto.has_ports() { p.dport } else { None },
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
            conditions: Vec::new(),
            steps: Vec::with_capacity(STEPS_RESERVE),
            dnat: None,
            snat: None,
            recent_added: Vec::new(),
            pending: None,
            dnat_range: false,
            transfers: 0,
        };
        let mut work = vec![start];
        let mut outcomes = Vec::new();
        let mut truncated = false;
        while let Some(mut path) = work.pop() {
            if outcomes.len() + work.len() >= self.options.max_paths {
                truncated = true;
                let mut cut = vec![path];
                cut.append(&mut work);
                for mut c in cut {
                    outcomes.push(self.finish(
                        &mut c,
                        Verdict::Indeterminate,
                        format!(
                            "more than {} branches: plumb stopped exploring here",
                            self.options.max_paths
                        ),
                    ));
                }
                break;
            }
            let out = self.walk(&mut path, &mut work);
            outcomes.push(out);
        }
        outcomes.sort_by(|a, b| {
            b.probability
                .partial_cmp(&a.probability)
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        Trace {
            outcomes,
            truncated,
        }
    }

    fn v6(&self) -> bool {
        self.packet.dst.is_ipv6()
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
            dnat,
            snat: path.snat.take().map(Cow::into_owned),
            conditions: std::mem::take(&mut path.conditions),
            delivery,
            final_dst: path.dst,
            final_dport: path.dport,
            mark: path.mark,
            why,
            steps: std::mem::take(&mut path.steps),
        }
    }

    fn step(&self, path: &mut Path<'a>, chain: u32, rule: u32, kind: StepKind, note: Option<Note>) {
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
        let out_known = |path: &Path<'a>| {
            path.out_iface
                .or_else(|| (self.node.is_local(path.dst)).then_some("lo"))
        };
        match path.hook {
            HookId::Prerouting | HookId::Input => (path.in_iface, Some("")),
            HookId::Forward => (path.in_iface, out_known(path)),
            HookId::Output => (Some(""), out_known(path)),
            HookId::Postrouting => (if host { Some("") } else { path.in_iface }, out_known(path)),
        }
    }

    fn view<'v>(&'v self, path: &'v Path<'a>) -> View<'v> {
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
            CtState::Established => None,
            CtState::Related => None,
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
            ct: ct.or(match path.ct_state {
                CtState::Established => None,
                _ => None,
            }),
            orig_src: p.src,
            orig_dst: p.dst,
            orig_dport: p.dport,
            node: self.node,
            recent_added: &path.recent_added,
            sets: &self.index.sets,
        }
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
        let cursor = match (index.dispatch(chain), path.dport) {
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

    /// Runs one path to its end, pushing forks onto `work`.
    fn walk(&self, path: &mut Path<'a>, work: &mut Vec<Path<'a>>) -> Outcome {
        loop {
            if path.steps.len() > self.options.max_steps {
                return self.finish(
                    path,
                    Verdict::Indeterminate,
                    format!(
                        "more than {} steps: the ruleset probably loops",
                        self.options.max_steps
                    ),
                );
            }
            if let Some(v) = path.pending.take() {
                match self.apply_map_verdict(path, &v) {
                    Flow::Final(v, why) => return self.finish(path, v, why),
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
                    Some((v, why)) => return self.finish(path, v, why),
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
                    return self.finish(path, v.0, v.1);
                }
                continue;
            };
            match self.eval_rule(path, chain_id, r, work) {
                Flow::NextItem | Flow::NextRule => {}
                Flow::EndBase => self.end_base(path),
                Flow::Final(v, why) => return self.finish(path, v, why),
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

    #[allow(clippy::too_many_arguments)]
    fn fork_not_matched(
        &self,
        path: &Path<'a>,
        chain: u32,
        r: u32,
        cond: u16,
        prob: f64,
        condition: Option<String>,
        note: NotePart,
        work: &mut Vec<Path<'a>>,
    ) {
        let mut alt = fork(path);
        alt.prob = prob;
        if let Some(c) = condition {
            alt.conditions.push(c);
        }
        self.step(
            &mut alt,
            chain,
            r,
            StepKind::NotMatched(Some(cond)),
            Some(Note::new(note)),
        );
        work.push(alt);
    }

    fn eval_rule(&self, path: &mut Path<'a>, chain: u32, r: u32, work: &mut Vec<Path<'a>>) -> Flow {
        let index: &'a Index<'i> = self.index;
        let rule = &index.rules(chain)[r as usize];
        let items = index.items(chain, rule);
        // Pass 1: a pure condition that fails decides without forking.
        {
            let view = self.view(path);
            for (i, item) in items.iter().enumerate() {
                match item {
                    Item::Cond(c) if c.is_pure() => {
                        if c.eval(&view) == Eval::No {
                            // Side effects of earlier `recent --set` still happen in the kernel.
                            let added: Vec<String> = items[..i]
                                .iter()
                                .filter_map(|it| match it {
                                    Item::Cond(Cond::Recent {
                                        name,
                                        mode: crate::matches::RecentMode::Set,
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
                Item::Cond(c) => {
                    let e = c.eval(&self.view(path));
                    match e {
                        Eval::Yes => {
                            if let Cond::Recent {
                                name,
                                mode: crate::matches::RecentMode::Set,
                                ..
                            } = c
                            {
                                path.recent_added.push(name.clone());
                            }
                        }
                        Eval::No => {
                            self.step(
                                path,
                                chain,
                                rule.rule,
                                StepKind::NotMatched(Some(i as u16)),
                                None,
                            );
                            return Flow::NextRule;
                        }
                        Eval::Random(p) => {
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
                                    work,
                                );
                                path.prob *= p;
                                add(&mut notes, NotePart::Chosen(p));
                            }
                        }
                        Eval::Unknown(why) => {
                            self.fork_not_matched(
                                path,
                                chain,
                                rule.rule,
                                i as u16,
                                path.prob,
                                Some(format!("not: {why}")),
                                format!("assumed not: {why}").into(),
                                work,
                            );
                            add(&mut notes, format!("assumed: {why}").into());
                            path.conditions.push(why);
                        }
                    }
                }
                Item::Act(a) => {
                    if !matched_recorded {
                        matched_recorded = true;
                        let note = notes.take();
                        self.step(path, chain, rule.rule, StepKind::Matched, note);
                    }
                    match self.act(path, a, chain, rule.rule, work) {
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
                            "more than {} jumps: the ruleset loops",
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

    fn nat_allowed(&self, path: &Path<'a>, dst: bool) -> bool {
        path.ct_state == CtState::New && path.hook.is_dst_nat() == dst && !path.looped
    }

    fn act(
        &self,
        path: &mut Path<'a>,
        a: &'a Action,
        chain: u32,
        rule: u32,
        work: &mut Vec<Path<'a>>,
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
            Action::Return => {
                path.stack.pop();
                if path.stack.is_empty()
                    && let Some((v, why)) = self.policy(path)
                {
                    return Flow::Final(v, why);
                }
                Flow::NextRule
            }
            Action::Continue | Action::NoEffect(_) | Action::Log(_) => Flow::NextItem,
            Action::Jump(j) => self.push_chain(path, j, false),
            Action::Goto(j) => self.push_chain(path, j, true),
            Action::Dnat(spec) => {
                if !self.nat_allowed(path, true) {
                    return Flow::Final(
                        Verdict::Indeterminate,
                        "DNAT outside a NEW connection's PREROUTING/OUTPUT".into(),
                    );
                }
                if let Some(a) = spec.addr {
                    path.dst = a;
                }
                if let (Some(p), Some(_)) = (spec.ports, path.dport) {
                    path.dport = Some(p.from);
                }
                // A range: the kernel picks one member; `dnat` reports the range.
                path.dnat_range =
                    spec.addr_to.is_some() || spec.ports.is_some_and(|p| p.from != p.to);
                path.dnat = Some(Cow::Borrowed(&spec.text));
                path.dnat_done = true;
                path.nat_set_here = true;
                Flow::EndBase
            }
            Action::Redirect(ports) => {
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
                if let (Some(p), Some(_)) = (ports, path.dport) {
                    path.dport = Some(p.from);
                }
                path.dnat = Some(Cow::Borrowed("redirect"));
                path.dnat_done = true;
                path.nat_set_here = true;
                Flow::EndBase
            }
            Action::Snat(spec) => {
                if !self.nat_allowed(path, false) {
                    return Flow::Final(
                        Verdict::Indeterminate,
                        "SNAT outside a NEW connection's POSTROUTING/INPUT".into(),
                    );
                }
                if let Some(a) = spec.addr {
                    path.src = Some(a);
                }
                path.snat = Some(Cow::Borrowed(&spec.text));
                path.snat_done = true;
                path.nat_set_here = true;
                Flow::EndBase
            }
            Action::Masquerade(_) => {
                if !self.nat_allowed(path, false) || path.hook != HookId::Postrouting {
                    return Flow::Final(
                        Verdict::Indeterminate,
                        "MASQUERADE outside a NEW connection's POSTROUTING".into(),
                    );
                }
                let (_, out) = self.ifaces(path);
                path.snat = Some(match out {
                    Some(i) if !i.is_empty() => Cow::Owned(format!("masquerade ({i})")),
                    _ => Cow::Borrowed("masquerade"),
                });
                path.snat_done = true;
                path.nat_set_here = true;
                Flow::EndBase
            }
            Action::Mark(op) => {
                path.mark = op.apply(path.mark);
                Flow::NextItem
            }
            Action::ConnMark(op) => {
                path.ct_mark = op.apply(path.ct_mark);
                Flow::NextItem
            }
            Action::SaveMark { nfmask, ctmask } => {
                path.ct_mark = (path.ct_mark & !ctmask) ^ (path.mark & nfmask);
                Flow::NextItem
            }
            Action::RestoreMark { nfmask, ctmask } => {
                path.mark = (path.mark & !nfmask) ^ (path.ct_mark & ctmask);
                Flow::NextItem
            }
            Action::NoTrack => {
                if path.ct_state == CtState::New {
                    path.ct_state = CtState::Untracked;
                }
                Flow::NextItem
            }
            Action::Numgen {
                modulus,
                offset,
                entries,
            } => {
                let m = *modulus as f64;
                let mut covered = 0.0;
                let mut first: Option<(f64, MapVerdict, String)> = None;
                for (a, b, v) in entries {
                    let lo = (*a).max(*offset);
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
                        fmt_p(p)
                    );
                    if first.is_none() {
                        first = Some((p, v.clone(), note));
                    } else {
                        let mut alt = fork(path);
                        alt.prob *= p;
                        alt.pending = Some(v.clone());
                        self.annotate_last(&mut alt, note);
                        work.push(alt);
                    }
                }
                let miss = (1.0 - covered).max(0.0);
                if miss > 1e-12 {
                    let mut alt = fork(path);
                    alt.prob *= miss;
                    self.annotate_last(
                        &mut alt,
                        format!("numgen: no entry (probability {})", fmt_p(miss)),
                    );
                    alt.pending = Some(MapVerdict::Continue);
                    work.push(alt);
                }
                match first {
                    Some((p, v, note)) => {
                        path.prob *= p;
                        self.annotate_last(path, note);
                        self.apply_map_verdict(path, &v)
                    }
                    None => Flow::NextRule,
                }
            }
            Action::VerdictMap { fields, set } => {
                let view = self.view(path);
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
                match crate::nft::lookup(&self.index.sets, set, &key) {
                    Some(Some(i)) => {
                        let s = &self.index.sets[*set as usize];
                        if let Some(c) = s.comments.get(i).cloned().flatten() {
                            self.annotate_last(path, format!("map @{}: {c}", s.name));
                        } else {
                            self.annotate_last(path, format!("map @{} has an entry", s.name));
                        }
                        match s.verdicts.get(i).cloned().flatten() {
                            Some(v) => self.apply_map_verdict(path, &v),
                            None => Flow::Final(
                                Verdict::Indeterminate,
                                "map entry without a verdict".into(),
                            ),
                        }
                    }
                    Some(None) => {
                        let name = self.index.sets[*set as usize].name.clone();
                        self.annotate_last(path, format!("no entry in map @{name}"));
                        Flow::NextRule
                    }
                    None => Flow::Final(
                        Verdict::Indeterminate,
                        "a map element could not be read".into(),
                    ),
                }
            }
            Action::Unknown(text) => Flow::Final(
                Verdict::Indeterminate,
                format!("plumb does not model `{text}`"),
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
            MapVerdict::Return => self.act(path, &Action::Return, chain, rule, &mut Vec::new()),
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
            .map(|r| r.position)
            .unwrap_or(0);
        format!("{what} {} {} rule {pos}", t.name, c.chain.name)
    }
}

pub(crate) fn fmt_p(p: f64) -> String {
    let s = format!("{p:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}
