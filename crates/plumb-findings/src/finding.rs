//! The `Finding`: one conclusion about a node, with the evidence that supports it.
//!
//! Every command that judges a node (`check`, `doctor`) emits these. Plain data with a
//! stable JSON shape:
//! `{"id","status","severity","title","evidence":[{"source","line","text"}],
//!   "explanation","remediation":[...],"do_not":[...]}`, plus `"approximate":"reason"`
//! when the finding rests on lossy input (an `iptables -L` listing).
//! `id` is a stable kebab-case code (one per check module); `status` says whether the
//! check found a problem, ruled one out (`ok`) or could not tell (`unknown`).

use serde::Serialize;
use std::fmt;

/// Did the check find a problem?
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The check found the problem it looks for.
    Problem,
    /// The check ruled its problem out.
    Ok,
    /// The input does not allow a conclusion (partial or truncated input, missing data).
    Unknown,
}

/// How much a finding matters. Ordered: `Info < Low < Medium < High < Critical`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing; nothing is broken.
    Info,
    /// Untidy or risky, not failing.
    Low,
    /// Something may fail under some conditions (e.g. a missing canary chain).
    Medium,
    /// Some traffic or a component fails.
    High,
    /// Service traffic is broken now (e.g. ClusterIPs not captured).
    Critical,
}

impl Severity {
    /// Lower-case name, as in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Low => "low",
            Severity::Medium => "medium",
            Severity::High => "high",
            Severity::Critical => "critical",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One quoted piece of evidence: where it was read and what it said.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Evidence {
    /// File name, or the command that printed it (`iptables-nft-save`, `nft list ruleset`).
    pub source: String,
    /// 1-based line in that source, when known.
    pub line: Option<u32>,
    /// The text as read (a rule, a chain declaration).
    pub text: String,
}

impl fmt::Display for Evidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{l}: {}", self.source, self.text),
            None => write!(f, "{}: {}", self.source, self.text),
        }
    }
}

/// A conclusion with its evidence, explanation and what to do about it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Stable code, e.g. `dangling-reference`.
    pub id: String,
    /// Whether the check found its problem, ruled it out, or could not tell.
    pub status: Status,
    /// How much it matters when it is a problem (JSON: `info` … `critical`).
    pub severity: Severity,
    /// One line, specific to this node ("KUBE-SERVICES is empty while 42 KUBE-SVC chains exist").
    pub title: String,
    /// What the conclusion rests on, quoted from the node's own output and files;
    /// through [`Finding::with_evidence`], at most [`MAX_EVIDENCE`] items and a line
    /// saying how many more.
    pub evidence: Vec<Evidence>,
    /// Why it matters, for a platform engineer.
    pub explanation: String,
    /// Steps to fix it, in order, quoting the node's own names and addresses; empty
    /// when there is nothing to do.
    pub remediation: Vec<String>,
    /// What not to do (the write-ups warn against flushing rules, for instance).
    pub do_not: Vec<String>,
    /// Set when the input the finding rests on is lossy (rules read from an `iptables -L`
    /// listing): why the conclusion is approximate. Absent from JSON when `None`, so
    /// findings from exact input keep their shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approximate: Option<String>,
}

/// Evidence lists are capped so a 10k-service node does not print 10k lines per finding.
pub const MAX_EVIDENCE: usize = 20;

impl Finding {
    /// A problem finding; fill the rest with the builder methods.
    pub fn problem(id: &str, severity: Severity, title: impl Into<String>) -> Finding {
        Finding {
            id: id.into(),
            status: Status::Problem,
            severity,
            title: title.into(),
            evidence: Vec::new(),
            explanation: String::new(),
            remediation: Vec::new(),
            do_not: Vec::new(),
            approximate: None,
        }
    }

    /// "Checked, nothing wrong".
    pub fn ok(id: &str, title: impl Into<String>) -> Finding {
        Finding {
            status: Status::Ok,
            ..Finding::problem(id, Severity::Info, title)
        }
    }

    /// "Could not tell" (with the reason in the title or explanation).
    pub fn unknown(id: &str, severity: Severity, title: impl Into<String>) -> Finding {
        Finding {
            status: Status::Unknown,
            ..Finding::problem(id, severity, title)
        }
    }

    /// Sets why the finding matters.
    pub fn explain(mut self, text: impl Into<String>) -> Finding {
        self.explanation = text.into();
        self
    }

    /// Adds a remediation step.
    pub fn fix(mut self, step: impl Into<String>) -> Finding {
        self.remediation.push(step.into());
        self
    }

    /// Adds something the user must not do (phrased without "do not", which the
    /// renderer adds: `flush iptables: it removes ...`).
    pub fn do_not(mut self, what: impl Into<String>) -> Finding {
        self.do_not.push(what.into());
        self
    }

    /// Marks the finding approximate, with the reason (what the input did not show).
    pub fn approximate(mut self, reason: impl Into<String>) -> Finding {
        self.approximate = Some(reason.into());
        self
    }

    /// Adds evidence up to [`MAX_EVIDENCE`] items; beyond that one line says how many more.
    pub fn with_evidence(mut self, evidence: impl IntoIterator<Item = Evidence>) -> Finding {
        let mut more = 0usize;
        for e in evidence {
            if self.evidence.len() < MAX_EVIDENCE {
                self.evidence.push(e);
            } else {
                more += 1;
            }
        }
        if more > 0 {
            self.evidence.push(Evidence {
                source: "plumb".into(),
                line: None,
                text: format!("... and {more} more"),
            });
        }
        self
    }

    /// True for [`Status::Problem`].
    pub fn is_problem(&self) -> bool {
        self.status == Status::Problem
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_shape_is_stable() {
        let f = Finding::problem("dangling-reference", Severity::High, "t")
            .with_evidence([Evidence {
                source: "dump".into(),
                line: Some(3),
                text: "-A X -j Y".into(),
            }])
            .explain("e")
            .fix("r");
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"id":"dangling-reference","status":"problem","severity":"high",
            "title":"t","evidence":[{"source":"dump","line":3,"text":"-A X -j Y"}],
            "explanation":"e","remediation":["r"],"do_not":[]})
        );
    }

    #[test]
    fn approximate_is_serialised_only_when_set() {
        let exact = serde_json::to_value(Finding::unknown("x", Severity::Low, "t")).unwrap();
        assert!(exact.get("approximate").is_none(), "{exact}");
        let f = Finding::problem("x", Severity::Low, "t").approximate("read from a listing");
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["approximate"], "read from a listing");
    }

    #[test]
    fn evidence_is_capped() {
        let ev = (0..30).map(|i| Evidence {
            source: "s".into(),
            line: Some(i),
            text: String::new(),
        });
        let f = Finding::problem("x", Severity::Low, "t").with_evidence(ev);
        assert_eq!(f.evidence.len(), MAX_EVIDENCE + 1);
        assert!(f.evidence.last().unwrap().text.contains("10 more"));
    }
}
