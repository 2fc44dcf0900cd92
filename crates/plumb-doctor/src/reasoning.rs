//! From findings to a root cause: each candidate cause lists the symptoms it would explain;
//! a candidate's score is its severity plus two points per explained symptom that is
//! present. The best problem candidate (severity medium or worse) is the root cause; the
//! problems it explains are its supporting evidence; `ok` findings are what was ruled out.
//!
//! The table encodes two incidents: a security agent deleting
//! kube-proxy's chains explains the ClusterIP timeout, the restore failures, the missing
//! chains and install-cni's crash loop; UFW explains kube-proxy's failing /healthz and
//! the FORWARD drops, where probe semantics and RBAC denials are red herrings.

use crate::context::Ctx;
use plumb_findings::{Conclusion, Confidence, Finding, Severity, Status};

/// Causes that prove themselves when their own finding is critical: a kernel setting read
/// as off, an iptables that cannot write at all, a missing `nft`, a kube-proxy that may
/// not set its sysctls. Nothing else is needed to be sure of them.
const SELF_EVIDENT: &[&str] = &[
    "sysctl-requirement",
    "iptables-userspace-incompatible",
    "kube-proxy-nft-unavailable",
    "kube-proxy-conntrack-permission",
];

/// A cap on how sure a cause can be, because its decisive signal is missing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limit {
    /// The finding id of the capped cause.
    pub cause: &'static str,
    /// The highest confidence it may be reported with.
    pub at_most: Confidence,
    /// The missing signal and how to get it.
    pub to_confirm: String,
}

/// A conclusion and what would make it sure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The root cause, its confidence and the findings it explains.
    pub conclusion: Conclusion,
    /// What would make the conclusion sure, when a cap lowered its confidence.
    pub to_confirm: Option<String>,
}

/// The caps the facts impose: a cause inferred without its decisive signal.
pub fn limits(ctx: &Ctx) -> Vec<Limit> {
    let mut out = Vec::new();
    if let Some(how) = crate::checks::agents::tamper_inferred(ctx) {
        out.push(Limit {
            cause: crate::checks::agents::ID_TAMPER,
            at_most: Confidence::Medium,
            to_confirm: how,
        });
    }
    out
}

/// Findings that make a cause only together with a symptom they explain: an installed
/// agent or an unloaded module is not a failure by itself.
const NEEDS_SUPPORT: &[&str] = &["security-agent-present", "kernel-module-missing"];

/// Candidate causes and the finding ids they explain.
const CAUSES: &[(&str, &[&str])] = &[
    (
        "cni-kube-proxy-conflict",
        &[
            "clusterip-unreachable",
            "kube-proxy-restore-failures",
            "kube-proxy-rules-missing",
            "kubernetes-service-not-translated",
            "kube-proxy-service-unreachable",
            "kube-proxy-canary-missing",
            "dangling-reference",
            "stale-chain",
            "cni-not-initialized",
            "kube-proxy-unhealthy",
        ],
    ),
    (
        "security-agent-tamper",
        &[
            "clusterip-unreachable",
            "kube-proxy-restore-failures",
            "kube-proxy-rules-missing",
            "kubernetes-service-not-translated",
            "kube-proxy-service-unreachable",
            "kube-proxy-canary-missing",
            "dangling-reference",
            "stale-chain",
            "cni-not-initialized",
            "security-agent-present",
            "kube-proxy-unhealthy",
        ],
    ),
    (
        "host-firewall-ufw",
        &[
            "forward-drop-blocks-pods",
            "input-drop-blocks-node",
            "kube-proxy-unhealthy",
            "kube-proxy-probe-semantics",
            "clusterip-unreachable",
            "cni-not-initialized",
        ],
    ),
    (
        "host-firewall-firewalld",
        &[
            "kube-proxy-rules-missing",
            "kubernetes-service-not-translated",
            "kube-proxy-restore-failures",
            "kube-proxy-service-unreachable",
            "kube-proxy-canary-missing",
            "dangling-reference",
            "stale-chain",
            "forward-drop-blocks-pods",
            "input-drop-blocks-node",
            "clusterip-unreachable",
            "cni-not-initialized",
            "kube-proxy-unhealthy",
        ],
    ),
    (
        "sysctl-requirement",
        &[
            "clusterip-unreachable",
            "cni-not-initialized",
            "kube-proxy-unhealthy",
        ],
    ),
    (
        "iptables-backend-mix",
        &[
            "kube-proxy-rules-missing",
            "kubernetes-service-not-translated",
            "clusterip-unreachable",
            "stale-chain",
        ],
    ),
    (
        "api-server-unhealthy",
        &["clusterip-unreachable", "cni-not-initialized"],
    ),
    ("conntrack-pressure", &["clusterip-unreachable"]),
    (
        "garbled-nat-target",
        &["clusterip-unreachable", "kube-proxy-restore-failures"],
    ),
    (
        "iptables-userspace-incompatible",
        &[
            "kube-proxy-restore-failures",
            "kube-proxy-rules-missing",
            "kubernetes-service-not-translated",
            "clusterip-unreachable",
            "cni-not-initialized",
            "kube-proxy-unhealthy",
        ],
    ),
    (
        "kube-proxy-nft-unavailable",
        &[
            "kube-proxy-rules-missing",
            "kubernetes-service-not-translated",
            "clusterip-unreachable",
            "cni-not-initialized",
            "kube-proxy-unhealthy",
        ],
    ),
    (
        "kube-proxy-conntrack-permission",
        &[
            "kube-proxy-unhealthy",
            "clusterip-unreachable",
            "cni-not-initialized",
        ],
    ),
    (
        "host-firewall-reject",
        &[
            "forward-drop-blocks-pods",
            "input-drop-blocks-node",
            "clusterip-unreachable",
            "cni-not-initialized",
        ],
    ),
    ("service-no-endpoints", &[]),
    ("kube-proxy-probe-semantics", &["kube-proxy-unhealthy"]),
    (
        "security-agent-present",
        &[
            "kube-proxy-rules-missing",
            "kubernetes-service-not-translated",
            "kube-proxy-restore-failures",
            "clusterip-unreachable",
            "cni-not-initialized",
        ],
    ),
    (
        "kube-proxy-restore-failures",
        &[
            "clusterip-unreachable",
            "kube-proxy-unhealthy",
            "cni-not-initialized",
        ],
    ),
    (
        "kube-proxy-rules-missing",
        &[
            "kubernetes-service-not-translated",
            "clusterip-unreachable",
            "kube-proxy-service-unreachable",
            "cni-not-initialized",
        ],
    ),
    ("kernel-module-missing", &[]),
];

fn weight(s: Severity) -> u32 {
    match s {
        Severity::Info => 0,
        Severity::Low => 1,
        Severity::Medium => 2,
        Severity::High => 3,
        Severity::Critical => 4,
    }
}

/// [`conclude_with`] without caps.
pub fn conclude(findings: &[Finding]) -> Option<Conclusion> {
    conclude_with(findings, &[]).map(|o| o.conclusion)
}

/// How sure a cause is: one explained symptom is medium, two or more high; a self-evident
/// cause whose own finding is critical is high on its own; a cap lowers it.
pub fn confidence(cause: &Finding, supporting: usize, limits: &[Limit]) -> Confidence {
    let mut c = match supporting {
        0 => Confidence::Low,
        1 => Confidence::Medium,
        _ => Confidence::High,
    };
    if SELF_EVIDENT.contains(&cause.id.as_str()) && cause.severity == Severity::Critical {
        c = Confidence::High;
    }
    for l in limits.iter().filter(|l| l.cause == cause.id) {
        c = c.min(l.at_most);
    }
    c
}

/// The root cause of `findings`, its confidence under `limits`, and what would confirm it.
pub fn conclude_with(findings: &[Finding], limits: &[Limit]) -> Option<Outcome> {
    let problem = |id: &str| {
        findings
            .iter()
            .find(|f| f.id == id && f.status == Status::Problem)
    };
    let mut scored: Vec<(String, u32, Vec<String>)> = CAUSES
        .iter()
        .filter_map(|(cause, explains)| {
            let own = problem(cause).filter(|f| f.severity >= Severity::Medium)?;
            let supporting: Vec<String> = explains
                .iter()
                .filter(|s| problem(s).is_some())
                .map(|s| s.to_string())
                .collect();
            if supporting.is_empty() && NEEDS_SUPPORT.contains(cause) {
                return None;
            }
            Some((
                cause.to_string(),
                weight(own.severity) + 2 * supporting.len() as u32,
                supporting,
            ))
        })
        .collect();
    // Highest score first; ties keep the table's order (more specific causes come first).
    scored.sort_by_key(|c| std::cmp::Reverse(c.1));
    if scored.is_empty() {
        // Nothing in the table explains what is wrong: the worst high or critical problem
        // leads on its own (a symptom whose cause plumb could not see), low confidence.
        let worst = findings
            .iter()
            .filter(|f| f.status == Status::Problem && f.severity >= Severity::High)
            .max_by_key(|f| f.severity)?;
        return Some(outcome(worst, Vec::new(), limits));
    }
    let (root, _, supporting) = scored.first().cloned()?;
    let own = problem(&root)?;
    Some(outcome(own, supporting, limits))
}

fn outcome(cause: &Finding, supporting: Vec<String>, limits: &[Limit]) -> Outcome {
    Outcome {
        conclusion: Conclusion {
            root_cause: cause.id.clone(),
            confidence: confidence(cause, supporting.len(), limits),
            supporting,
        },
        to_confirm: limits
            .iter()
            .find(|l| l.cause == cause.id)
            .map(|l| l.to_confirm.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(id: &str, s: Severity) -> Finding {
        Finding::problem(id, s, id)
    }

    #[test]
    fn the_agent_explains_seed_000_symptoms() {
        let f = vec![
            p("clusterip-unreachable", Severity::Critical),
            p("kube-proxy-restore-failures", Severity::High),
            p("cni-not-initialized", Severity::High),
            p("security-agent-present", Severity::Medium),
            p("security-agent-tamper", Severity::Critical),
            p("rbac-transient-denial", Severity::Info),
        ];
        let c = conclude(&f).unwrap();
        assert_eq!(c.root_cause, "security-agent-tamper");
        assert_eq!(c.confidence, Confidence::High);
        assert!(c.supporting.contains(&"cni-not-initialized".to_string()));
        assert!(!c.supporting.contains(&"rbac-transient-denial".to_string()));
    }

    #[test]
    fn ufw_beats_probe_semantics_and_nothing_is_no_conclusion() {
        let f = vec![
            p("kube-proxy-unhealthy", Severity::High),
            p("kube-proxy-probe-semantics", Severity::Medium),
            p("host-firewall-ufw", Severity::High),
            p("forward-drop-blocks-pods", Severity::High),
        ];
        assert_eq!(conclude(&f).unwrap().root_cause, "host-firewall-ufw");
        let ok = vec![
            Finding::ok("host-firewall-ufw", "inactive"),
            p("rbac-transient-denial", Severity::Info),
        ];
        assert_eq!(conclude(&ok), None);
    }

    /// Signal combinations and the confidence they earn: several independent symptoms
    /// are high, one is medium, none is low; a self-evident critical cause is high on its
    /// own; an inferred cause is capped; a present-but-unproven agent is never a cause.
    #[test]
    fn confidence_table() {
        use Severity::*;
        let cap = |cause: &'static str| Limit {
            cause,
            at_most: Confidence::Medium,
            to_confirm: "read the agent's log".into(),
        };
        #[allow(clippy::type_complexity)]
        let table: &[(&[(&str, Severity)], &[Limit], Option<(&str, Confidence)>)] = &[
            (
                &[("sysctl-requirement", Critical)],
                &[],
                Some(("sysctl-requirement", Confidence::High)),
            ),
            (
                &[("sysctl-requirement", High)],
                &[],
                Some(("sysctl-requirement", Confidence::Low)),
            ),
            (
                &[("kube-proxy-nft-unavailable", Critical)],
                &[],
                Some(("kube-proxy-nft-unavailable", Confidence::High)),
            ),
            (
                &[
                    ("kube-proxy-probe-semantics", Medium),
                    ("kube-proxy-unhealthy", High),
                ],
                &[],
                Some(("kube-proxy-probe-semantics", Confidence::Medium)),
            ),
            (
                &[
                    ("host-firewall-ufw", High),
                    ("kube-proxy-probe-semantics", Medium),
                    ("kube-proxy-unhealthy", High),
                ],
                &[],
                Some(("host-firewall-ufw", Confidence::High)),
            ),
            (
                &[
                    ("security-agent-tamper", High),
                    ("security-agent-present", Medium),
                    ("kube-proxy-restore-failures", High),
                ],
                &[cap("security-agent-tamper")],
                Some(("security-agent-tamper", Confidence::Medium)),
            ),
            (
                &[
                    ("security-agent-tamper", Critical),
                    ("security-agent-present", Medium),
                    ("kube-proxy-restore-failures", High),
                ],
                &[],
                Some(("security-agent-tamper", Confidence::High)),
            ),
            (&[("security-agent-present", Medium)], &[], None),
            (
                &[
                    ("security-agent-present", Medium),
                    ("kube-proxy-restore-failures", High),
                ],
                &[],
                Some(("security-agent-present", Confidence::Medium)),
            ),
            (
                &[("kube-proxy-restore-failures", High)],
                &[],
                Some(("kube-proxy-restore-failures", Confidence::Low)),
            ),
        ];
        for (i, (findings, limits, want)) in table.iter().enumerate() {
            let f: Vec<Finding> = findings.iter().map(|(id, s)| p(id, *s)).collect();
            let got = conclude_with(&f, limits)
                .map(|o| (o.conclusion.root_cause, o.conclusion.confidence));
            let want = want.map(|(id, c)| (id.to_string(), c));
            assert_eq!(got, want, "row {i}: {findings:?}");
        }
    }
}
