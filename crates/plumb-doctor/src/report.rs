//! The doctor's report: the findings in report order and the conclusion drawn from
//! them, as data. JSON is versioned (`version`); the human form is plumb-findings'
//! diagnosis layout, chosen by the CLI.

use plumb_facts::SourceInfo;
use plumb_facts::cluster::ClusterNetwork;
use plumb_facts::timeline::Timeline;
use plumb_findings::{Conclusion, Confidence, Finding, Status};
use serde::Serialize;

/// JSON schema version of [`Report`].
pub const REPORT_VERSION: u32 = 1;

/// What `plumb doctor` concluded about a node.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// [`REPORT_VERSION`].
    pub version: u32,
    /// What was diagnosed (this machine, a namespace, a bundle).
    pub source: Option<SourceInfo>,
    /// The distribution the node's files show (`rke2`, `k3s`, `kubeadm`, `eks`,
    /// `microshift`), when known: it decides where configs and logs were looked for and
    /// which defaults apply.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub distribution: Option<String>,
    /// Finding id of the root cause, or null when no problem explains anything.
    pub root_cause: Option<String>,
    /// How sure the root cause is.
    pub confidence: Option<Confidence>,
    /// Problem ids the root cause explains.
    pub supporting: Vec<String>,
    /// What is missing to be sure of the root cause, and how to get it (empty when sure).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub to_confirm: Vec<String>,
    /// The node's network settings doctor used, each with its source (defaults marked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<ClusterNetwork>,
    /// The node's history: every dated signal from the logs read, oldest first; findings
    /// quote entries as `[timeline #N]`.
    pub timeline: Timeline,
    /// Every finding: root cause, supporting, other problems, unknown, ok (ruled out).
    pub findings: Vec<Finding>,
}

impl Report {
    /// The problem findings.
    pub fn problems(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| f.status == Status::Problem)
    }

    /// The conclusion, when there is a root cause.
    pub fn conclusion(&self) -> Option<Conclusion> {
        Some(Conclusion {
            root_cause: self.root_cause.clone()?,
            confidence: self.confidence?,
            supporting: self.supporting.clone(),
        })
    }
}
