//! What a trace returns: outcomes (verdict, NAT, probability, conditions) and the
//! steps that led to each, plus their JSON form.

use crate::index::{HookId, Index};
use serde::Serialize;
use std::net::IpAddr;

/// The packet's fate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Verdict {
    /// Delivered: to a local process, or sent/forwarded out of the node.
    Accept,
    Drop,
    Reject,
    /// Handed to userspace (QUEUE/NFQUEUE): plumb cannot follow it.
    Queue,
    /// plumb cannot tell (an unmodelled target, a missing chain, a loop).
    Indeterminate,
}

impl Verdict {
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
                crate::simulate::fmt_p(*p)
            ),
            NotePart::NotChosen(p) => write!(
                f,
                "random: not chosen (probability {})",
                crate::simulate::fmt_p(*p)
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
    pub fn new(part: impl Into<NotePart>) -> Note {
        Note {
            first: part.into(),
            more: Vec::new(),
        }
    }

    pub fn push(&mut self, part: impl Into<NotePart>) {
        self.more.push(part.into());
    }

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
    pub hook: HookId,
    pub chain: u32,
    pub rule: u32,
    pub kind: StepKind,
    /// For branches: the probability taken or the assumption made; for routes: the decision.
    pub note: Option<Note>,
}

/// One possible fate of the packet.
#[derive(Clone, Debug)]
pub struct Outcome {
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
    pub dnat: Option<String>,
    pub snat: Option<String>,
    /// Assumptions this outcome depends on (unknown fields, session affinity, limits),
    /// in words: `constraints` rendered, one line per field.
    pub conditions: Vec<String>,
    /// The same assumptions as sets of values per unknown field.
    pub constraints: crate::constraint::Constraints,
    pub delivery: Option<Delivery>,
    pub final_dst: IpAddr,
    pub final_dport: Option<u16>,
    pub mark: u32,
    /// Why the trace ended here, in words.
    pub why: String,
    pub steps: Vec<Step>,
}

/// All outcomes of a trace, most probable first.
#[derive(Clone, Debug)]
pub struct Trace {
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
    pub table: String,
    pub chain: String,
    /// 1-based rule number; `null` for policies, routing and skips.
    pub rule: Option<u32>,
    pub text: String,
    pub matched: bool,
    pub hook: HookId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// An outcome as JSON.
#[derive(Clone, Debug, Serialize)]
pub struct OutcomeReport {
    pub verdict: Verdict,
    pub probability: f64,
    pub dnat: Option<String>,
    pub snat: Option<String>,
    pub conditions: Vec<String>,
    /// Routes merged into this outcome; `steps` show the most probable one.
    pub routes: f64,
    pub delivery: Option<Delivery>,
    pub why: String,
    /// Service and endpoint names from kube-proxy comments along the path.
    pub service: Option<String>,
    pub endpoint: Option<String>,
    pub steps: Vec<StepReport>,
}

/// The JSON document of `plumb trace --json`: `steps` is the path of the first
/// (most probable) outcome; every outcome carries its own.
#[derive(Clone, Debug, Serialize)]
pub struct TraceReport {
    pub outcomes: Vec<OutcomeReport>,
    pub steps: Vec<StepReport>,
    pub truncated: bool,
    /// `more than N paths` / `more than N steps explored` when plumb stopped exploring:
    /// the outcomes are incomplete.
    pub incomplete: Option<String>,
}

impl Step {
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
                rule.map(|r| r.position),
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
                        crate::index::Item::Cond(c) => {
                            Some(format!("`{}` does not match", c.describe()))
                        }
                        _ => None,
                    }
                });
                (
                    rule.map(|r| r.position),
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
    pub fn report(&self, index: &Index<'_>) -> OutcomeReport {
        let (service, endpoint) = crate::explain::service_and_endpoint(index, self);
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
