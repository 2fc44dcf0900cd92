//! From findings to a root cause: each candidate cause lists the symptoms it would explain;
//! a candidate's score is its severity plus two points per explained symptom that is
//! present. The best problem candidate (severity medium or worse) is the root cause; the
//! problems it explains are its supporting evidence; `ok` findings are what was ruled out.
//!
//! The table encodes two incidents plumb was built around: a security agent deleting
//! kube-proxy's chains explains the ClusterIP timeout, the restore failures, the missing
//! chains and install-cni's crash loop; UFW explains kube-proxy's failing /healthz and
//! the FORWARD drops, where probe semantics and RBAC denials are red herrings.

use plumb_findings::{Conclusion, Confidence, Finding, Severity, Status};

/// Findings that make a cause only together with a symptom they explain: an installed
/// agent or an unloaded module is not a failure by itself.
const NEEDS_SUPPORT: &[&str] = &["security-agent-present", "kernel-module-missing"];

/// Candidate causes and the finding ids they explain.
const CAUSES: &[(&str, &[&str])] = &[
    (
        "security-agent-tamper",
        &[
            "clusterip-unreachable",
            "kube-proxy-restore-failures",
            "kube-proxy-rules-missing",
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
            "kube-proxy-restore-failures",
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
    ("service-no-endpoints", &[]),
    ("kube-proxy-probe-semantics", &["kube-proxy-unhealthy"]),
    (
        "security-agent-present",
        &[
            "kube-proxy-rules-missing",
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

pub fn conclude(findings: &[Finding]) -> Option<Conclusion> {
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
        return Some(Conclusion {
            root_cause: worst.id.clone(),
            confidence: Confidence::Low,
            supporting: Vec::new(),
        });
    }
    let (root, _, supporting) = scored.first().cloned()?;
    let confidence = match supporting.len() {
        0 => Confidence::Low,
        1 => Confidence::Medium,
        _ => Confidence::High,
    };
    Some(Conclusion {
        root_cause: root,
        confidence,
        supporting,
    })
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
}
