//! What a trace returns: outcomes (verdict, NAT, probability, conditions) and the
//! steps that led to each, plus their JSON form.

use crate::index::Index;
use crate::ir::HookId;
use serde::Serialize;
use std::borrow::Cow;
use std::net::IpAddr;

/// The packet's fate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Verdict {
    /// Delivered: to a local process, or sent/forwarded out of the node.
    Accept,
    /// Discarded silently (`DROP`, a DROP policy, nft `drop`).
    Drop,
    /// Discarded with an ICMP error or TCP reset sent back (`REJECT`, nft `reject`).
    Reject,
    /// Handed to userspace (QUEUE/NFQUEUE): plumb cannot follow it.
    Queue,
    /// plumb cannot tell (an unmodelled target, a missing chain, a loop).
    Indeterminate,
}

impl Verdict {
    /// The verdict as plumb prints it (`ACCEPT`, `DROP`, `REJECT`, `QUEUE`, `INDETERMINATE`).
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Accept => "ACCEPT",
            Verdict::Drop => "DROP",
            Verdict::Reject => "REJECT",
            Verdict::Queue => "QUEUE",
            Verdict::Indeterminate => "INDETERMINATE",
        }
    }
}

/// Where an accepted packet ends up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Delivery {
    /// To a process on the node (INPUT).
    Local,
    /// Routed through the node (FORWARD) and out.
    Forwarded,
    /// Sent by the node out of an interface (OUTPUT, POSTROUTING).
    Sent,
}

/// What happened at one step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepKind {
    /// The rule matched (its target ran).
    Matched,
    /// The rule did not match; the condition index that failed, if known.
    NotMatched(Option<u16>),
    /// The chain ended and its policy applied.
    Policy,
    /// The routing decision after PREROUTING / the reroute after OUTPUT.
    Route,
    /// Rules skipped by the dispatch index (they cannot match this packet).
    Skipped(u32),
    /// A hook's NAT chains were not consulted (not a NEW connection, or NAT already set).
    NatSkipped,
}

/// One part of a step's note.
#[derive(Clone, Debug, PartialEq)]
pub enum NotePart {
    /// Text, verbatim.
    Text(Box<str>),
    /// `random: chosen with probability P`.
    Chosen(f64),
    /// `random: not chosen (probability P)`.
    NotChosen(f64),
}

impl std::fmt::Display for NotePart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotePart::Text(t) => f.write_str(t),
            NotePart::Chosen(p) => write!(
                f,
                "random: chosen with probability {}",
                probability_text(*p)
            ),
            NotePart::NotChosen(p) => write!(
                f,
                "random: not chosen (probability {})",
                probability_text(*p)
            ),
        }
    }
}

impl From<String> for NotePart {
    fn from(s: String) -> NotePart {
        NotePart::Text(s.into_boxed_str())
    }
}

/// A step's note: parts kept as data and joined with "; " when printed (formatting
/// a probability at every random branch cost more than the rest of the trace).
#[derive(Clone, Debug, PartialEq)]
pub struct Note {
    first: NotePart,
    more: Vec<NotePart>,
}

impl Note {
    /// A note with one part.
    pub fn new(part: impl Into<NotePart>) -> Note {
        Note {
            first: part.into(),
            more: Vec::new(),
        }
    }

    /// Adds a part, printed after the others with "; " between.
    pub fn push(&mut self, part: impl Into<NotePart>) {
        self.more.push(part.into());
    }

    /// The parts in order.
    pub fn parts(&self) -> impl Iterator<Item = &NotePart> {
        std::iter::once(&self.first).chain(&self.more)
    }
}

impl std::fmt::Display for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, p) in self.parts().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

/// One step of a path. `rule` indexes the chain's rules (for rule steps).
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The hook the step was taken at.
    pub hook: HookId,
    /// The chain, as an id of the [`Index`] ([`Index::chain`]).
    pub chain: u32,
    /// 0-based index of the rule in the chain's rules (for rule steps; unused for
    /// policy and route steps).
    pub rule: u32,
    /// What happened: the rule matched, did not, a policy, a routing decision, a skip.
    pub kind: StepKind,
    /// For branches: the probability taken or the assumption made; for routes: the decision.
    pub note: Option<Note>,
}

/// One possible fate of the packet.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The packet's fate on this path.
    pub verdict: Verdict,
    /// Probability of this outcome given its `conditions`.
    pub probability: f64,
    /// The part of the space of unknown facts the outcome covers, counting each
    /// undecided condition as an even split (for [`Trace::total_mass`]).
    pub share: f64,
    /// Routes through the ruleset this outcome stands for (more than 1 when
    /// equivalent branches were merged; `steps` are those of the most probable).
    /// A float: their number can grow exponentially with the rules.
    pub routes: f64,
    /// The DNAT destination this path applied (`10.42.0.5:6443`, `[fd00::5]:53`, or a
    /// range as written); `None` without DNAT.
    pub dnat: Option<String>,
    /// The SNAT this path applied: the `--to-source` text, or `masquerade (eth0)`; `None`
    /// without SNAT.
    pub snat: Option<String>,
    /// Assumptions this outcome depends on (unknown fields, session affinity, limits),
    /// in words: `constraints` rendered, one line per field.
    pub conditions: Vec<String>,
    /// The same assumptions as sets of values per unknown field.
    pub constraints: crate::constraint::Constraints,
    /// Where an accepted packet ends up; `None` for other verdicts.
    pub delivery: Option<Delivery>,
    /// The destination address after every rewrite on the path.
    pub final_dst: IpAddr,
    /// The destination port after every rewrite; `None` when unknown or for protocols without
    /// ports.
    pub final_dport: Option<u16>,
    /// The packet's mark at the end of the path.
    pub mark: u32,
    /// Why the trace ended here, in words.
    pub why: String,
    /// The path's steps in order, hooks in kernel order.
    pub steps: Vec<Step>,
}

/// All outcomes of a trace, most probable first.
#[derive(Clone, Debug)]
pub struct Trace {
    /// Every outcome found (for a truncated trace: before the bound, plus the unexplored
    /// part), most probable first.
    pub outcomes: Vec<Outcome>,
    /// Exploration stopped at a bound (`incomplete` says which); the unexplored part
    /// is one INDETERMINATE outcome.
    pub truncated: bool,
    /// The bound reached (`more than 1024 paths`), when the trace is incomplete.
    pub incomplete: Option<String>,
}

impl Trace {
    /// Sum over outcomes of probability × share: 1 for every trace, complete or not
    /// (an incomplete trace's INDETERMINATE outcome carries the unexplored part).
    pub fn total_mass(&self) -> f64 {
        self.outcomes.iter().map(|o| o.probability * o.share).sum()
    }
}

/// A step as JSON: table, chain, rule number, rule text, matched.
#[derive(Clone, Debug, Serialize)]
pub struct StepReport {
    /// Table label: `nat`, or `FAMILY NAME` for native nft (`ip kube-proxy`).
    pub table: String,
    /// Chain name.
    pub chain: String,
    /// 1-based rule number; `null` for policies, routing and skips.
    pub rule: Option<u32>,
    /// The rule as read; `policy ACCEPT`, `routing decision` or a skip summary for other steps.
    pub text: String,
    /// Whether the rule matched (policies and routing decisions count as matched).
    pub matched: bool,
    /// The hook the step was taken at.
    pub hook: HookId,
    /// Why a rule did not match, which branch was taken, or what routing decided; absent
    /// when there is nothing to add.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// An outcome as JSON.
#[derive(Clone, Debug, Serialize)]
pub struct OutcomeReport {
    /// The packet's fate.
    pub verdict: Verdict,
    /// Probability of this outcome given its `conditions` (0 to 1).
    pub probability: f64,
    /// DNAT destination (`10.42.0.5:6443`), `null` without DNAT.
    pub dnat: Option<String>,
    /// SNAT applied (`--to-source` text or `masquerade (eth0)`), `null` without SNAT.
    pub snat: Option<String>,
    /// Assumptions the outcome depends on, one line per unknown field; empty when it holds
    /// for every packet the description allows.
    pub conditions: Vec<String>,
    /// Routes merged into this outcome; `steps` show the most probable one.
    pub routes: f64,
    /// Where an accepted packet ends up; `null` for other verdicts.
    pub delivery: Option<Delivery>,
    /// Why the trace ended here, in words.
    pub why: String,
    /// Service and endpoint names from kube-proxy comments along the path.
    pub service: Option<String>,
    /// Endpoint (`ip:port`) the path went to, from kube-proxy's rule comments or nftables
    /// chain names; `null` when the path went through no endpoint.
    pub endpoint: Option<String>,
    /// The path's steps (left out of a `plumb trace --flows` line unless `--verbose`;
    /// a single trace always has them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepReport>,
}

/// The JSON document of `plumb trace --json`: `steps` is the path of the first
/// (most probable) outcome; every outcome carries its own.
#[derive(Clone, Debug, Serialize)]
pub struct TraceReport {
    /// Every outcome, most probable first.
    pub outcomes: Vec<OutcomeReport>,
    /// The steps of the first outcome (the most probable).
    pub steps: Vec<StepReport>,
    /// Exploration stopped at a bound: one INDETERMINATE outcome stands for the unexplored
    /// part.
    pub truncated: bool,
    /// `more than N paths` / `more than N steps explored` when plumb stopped exploring:
    /// the outcomes are incomplete.
    pub incomplete: Option<String>,
}

impl Step {
    /// The step as JSON, with the table, chain and rule text looked up in `index` (the
    /// index the trace ran on).
    pub fn report(&self, index: &Index<'_>) -> StepReport {
        let c = index.chain(self.chain);
        let table = index.tables[c.table as usize];
        let table_name = if table.backend == plumb_ruleset::Backend::Nftables {
            format!("{} {}", table.family, table.name)
        } else {
            table.name.to_string()
        };
        let rule = c.chain.rules.get(self.rule as usize);
        let note = self.note.as_ref().map(|n| n.to_string());
        let (rule_no, text, matched, why) = match self.kind {
            StepKind::Matched => (
                rule.map(|_| plumb_ruleset::position_at(self.rule as usize)),
                rule.map(|r| r.text.to_string()).unwrap_or_default(),
                true,
                note,
            ),
            StepKind::NotMatched(cond) => {
                let why = note.or_else(|| {
                    let cond = cond?;
                    let rule = index
                        .rules(self.chain)
                        .iter()
                        .find(|r| r.rule == self.rule)?;
                    match index.items(self.chain, rule).get(cond as usize)? {
                        crate::ir::Item::Cond(c) => {
                            Some(format!("`{}` does not match", c.describe()))
                        }
                        _ => None,
                    }
                });
                (
                    rule.map(|_| plumb_ruleset::position_at(self.rule as usize)),
                    rule.map(|r| r.text.to_string()).unwrap_or_default(),
                    false,
                    why,
                )
            }
            StepKind::Policy => {
                let p = index
                    .policy(self.chain)
                    .map(|p| p.as_iptables().to_string())
                    .unwrap_or_else(|| "RETURN".into());
                (None, format!("policy {p}"), true, note)
            }
            StepKind::Route => (None, "routing decision".into(), true, note),
            StepKind::Skipped(n) => (
                None,
                format!("{n} rules skipped: the destination index shows they cannot match"),
                false,
                None,
            ),
            StepKind::NatSkipped => (None, "NAT chains not consulted".into(), false, note),
        };
        StepReport {
            table: table_name,
            chain: c.chain.name.to_string(),
            rule: rule_no,
            text,
            matched,
            hook: self.hook,
            why,
        }
    }
}

impl Outcome {
    /// The outcome as JSON: steps as [`Step::report`], plus service and endpoint names
    /// from kube-proxy comments and chain names along the path.
    pub fn report(&self, index: &Index<'_>) -> OutcomeReport {
        let (service, endpoint) = service_and_endpoint(index, self);
        OutcomeReport {
            verdict: self.verdict,
            probability: self.probability,
            dnat: self.dnat.clone(),
            snat: self.snat.clone(),
            conditions: self.conditions.clone(),
            routes: self.routes,
            delivery: self.delivery,
            why: self.why.clone(),
            service,
            endpoint,
            steps: self.steps.iter().map(|s| s.report(index)).collect(),
        }
    }
}

impl Trace {
    /// The trace as JSON (`plumb trace --json`).
    pub fn report(&self, index: &Index<'_>) -> TraceReport {
        let outcomes: Vec<OutcomeReport> = self.outcomes.iter().map(|o| o.report(index)).collect();
        let steps = outcomes
            .first()
            .map(|o| o.steps.clone())
            .unwrap_or_default();
        TraceReport {
            outcomes,
            steps,
            truncated: self.truncated,
            incomplete: self.incomplete.clone(),
        }
    }
}

/// A probability as reports print it: at most four decimals, no trailing zeros,
/// `<0.0001` for a path that is possible but rarer than that.
pub(crate) fn probability_text(p: f64) -> String {
    if p > 0.0 && p < 0.00005 {
        return "<0.0001".to_string();
    }
    let s = format!("{p:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

/// Service (`ns/name:port`) and endpoint (`ip:port`) of an outcome, from kube-proxy
/// comments (`"ns/svc:p cluster IP"`, `"ns/svc:p -> 10.42.1.5:8443"`) and nft chain names.
pub fn service_and_endpoint(index: &Index<'_>, o: &Outcome) -> (Option<String>, Option<String>) {
    service_and_endpoint_with(index, o, |chain, rule| {
        let c = index.chain(chain);
        let (s, e) = c
            .chain
            .rules
            .get(rule as usize)
            .map(rule_service_and_endpoint)
            .unwrap_or_default();
        (s.map(Cow::Owned), e.map(Cow::Owned))
    })
}

/// The service (the first named) and endpoint (the last named) a rule's kube-proxy
/// comments give.
pub fn rule_service_and_endpoint(rule: &plumb_ruleset::Rule) -> (Option<String>, Option<String>) {
    let (mut service, mut endpoint) = (None, None);
    for comment in rule.comments() {
        if let Some((svc, ep)) = comment.split_once(" -> ") {
            service.get_or_insert_with(|| svc.to_string());
            endpoint = Some(ep.to_string());
        } else if let Some(svc) = [
            "cluster IP",
            "loadbalancer IP",
            "external IP",
            "has no endpoints",
        ]
        .iter()
        .find_map(|suffix| comment.strip_suffix(suffix))
        {
            service.get_or_insert_with(|| svc.trim().to_string());
        }
    }
    (service, endpoint)
}

/// [`service_and_endpoint`] with each matched rule's contribution from `rule_names`
/// (chain, rule index): a batch of traces computes it once per rule, and lends it.
pub fn service_and_endpoint_with<'n>(
    index: &'n Index<'_>,
    o: &Outcome,
    mut rule_names: impl FnMut(u32, u32) -> (Option<Cow<'n, str>>, Option<Cow<'n, str>>),
) -> (Option<String>, Option<String>) {
    let (mut service, mut endpoint): (Option<Cow<'n, str>>, Option<Cow<'n, str>>) = (None, None);
    for s in &o.steps {
        if s.kind != StepKind::Matched {
            continue;
        }
        let c = index.chain(s.chain);
        let (svc, ep) = rule_names(s.chain, s.rule);
        if service.is_none() {
            service = svc;
        }
        if ep.is_some() {
            endpoint = ep;
        }
        // nftables mode: service-HASH-ns/name/proto/port, endpoint-HASH-ns/name/proto/port__ip/port.
        let name: &'n str = &c.chain.name;
        if let Some(rest) = name
            .strip_prefix("service-")
            .and_then(|r| r.split_once('-'))
            .map(|(_, r)| r)
        {
            service.get_or_insert(Cow::Borrowed(rest));
        }
        if let Some((_, ep)) = name
            .strip_prefix("endpoint-")
            .and_then(|r| r.split_once("__"))
        {
            endpoint = Some(Cow::Owned(ep.replacen('/', ":", 1)));
        }
    }
    let service = service.map(Cow::into_owned);
    let mut endpoint = endpoint.map(Cow::into_owned);
    if service.is_none() {
        endpoint = None;
    }
    (service, endpoint)
}
