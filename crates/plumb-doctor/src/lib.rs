//! plumb-doctor: node-local root-cause diagnosis from a node's [`Facts`]. Pure: facts in
//! (gathered live, from a namespace, or from a bundle by plumb-collect), report out.
//!
//! - [`checks`]: node checks (one module each, stable ids); the ruleset integrity checks
//!   come from plumb-check and run over the same facts.
//! - [`reasoning`]: ranks candidate causes by the symptoms they explain.
//! - [`report`]: the versioned JSON report and its human rendering.
//! - [`verify`]: what changed since an earlier report (`plumb doctor --verify`).

#![deny(missing_docs)]

pub mod checks;
pub mod context;
pub mod reasoning;
pub mod report;
pub mod verify;

pub use report::{REPORT_VERSION, Report};

use context::{Ctx, KUBERNETES_SERVICE_PORT, KubernetesDnat, NodeValues};
use plumb_facts::{Facts, SourceKind};
use plumb_findings::Finding;

/// Id of the finding that says the facts show no Kubernetes node at all.
pub const ID_NOT_A_NODE: &str = "not-a-kubernetes-node";

/// Id of the finding that says no ruleset could be read, so the rules were not checked.
pub const ID_RULESET_UNREADABLE: &str = "ruleset-unreadable";

/// Id of the finding that says a ruleset read did not work (a table the node has could
/// not be read: `nft list table` timed out, a save tool failed), so what it holds was
/// not checked.
pub const ID_RULESET_READ_FAILED: &str = "ruleset-read-failed";

/// Whether a native nft table of this name is a Kubernetes component's: kube-proxy's
/// nftables mode (`table ip|ip6 kube-proxy`) and Flannel's (`flannel-ipv4`,
/// `flannel-ipv6`) name tables, not chains.
fn is_kubernetes_nft_table(name: &str) -> bool {
    name == "kube-proxy" || name.starts_with("flannel-ipv")
}

/// The reads of the node's rulesets that left tables it has out of the model (the
/// reader decides: a failed read, a missing tool for tables the node was seen to have;
/// not a read the tools replaced, nor a `skipped` one, which had nothing to read).
fn failed_reads(facts: &Facts) -> impl Iterator<Item = &plumb_facts::RulesetRead> {
    facts.ruleset_reads.iter().filter(|r| r.left_out)
}

/// `FAMILY NAME` of the native table a failed read was for (plumb names the read
/// `nft list table FAMILY NAME`).
fn unread_nft_table(r: &plumb_facts::RulesetRead) -> Option<(&str, &str)> {
    r.source.strip_prefix("nft list table ")?.split_once(' ')
}

/// Signs that `facts` describe a Kubernetes node; empty when there is none.
pub fn kubernetes_signs(facts: &Facts) -> Vec<String> {
    let mut signs = Vec::new();
    if let Some(src) = facts.rke2_config.source() {
        signs.push(format!("RKE2 config {src}"));
    }
    if let Some(rs) = facts.ruleset.value()
        && let Some(t) = rs.tables.iter().find(|t| {
            t.chains.iter().any(|c| {
                c.name.starts_with("KUBE-")
                    || c.name.starts_with("cali-")
                    || c.name.starts_with("CILIUM_")
                    || c.name.starts_with("FLANNEL")
            })
        })
    {
        signs.push(format!("Kubernetes/CNI chains in {} {}", t.backend, t.name));
    } else if let Some(rs) = facts.ruleset.value()
        && let Some(t) = rs.tables.iter().find(|t| {
            // kube-proxy's nftables mode (`table ip|ip6 kube-proxy`) and Flannel's
            // (`flannel-ipv4`, `flannel-ipv6`) name tables, not chains.
            t.backend == plumb_ruleset::Backend::Nftables && is_kubernetes_nft_table(&t.name)
        })
    {
        signs.push(format!("nftables table {} {}", t.family.as_str(), t.name));
    } else if let Some((family, name)) = failed_reads(facts)
        .filter_map(unread_nft_table)
        .find(|(_, name)| is_kubernetes_nft_table(name))
    {
        // Listed by the netlink dump, its rules not read (a timeout on a big table):
        // still a node, whose diagnosis says what could not be read.
        signs.push(format!(
            "nftables table {family} {name} (its rules could not be read)"
        ));
    }
    if let Some(p) = facts.processes.value().and_then(|ps| {
        ps.iter()
            .find(|p| matches!(p.comm.as_str(), "kubelet" | "kube-proxy" | "k3s" | "rke2"))
    }) {
        signs.push(format!("process {}[{}]", p.comm, p.pid));
    }
    if !facts.pod_logs.is_empty() {
        signs.push(format!("{} pod logs", facts.pod_logs.len()));
    }
    if facts.kube_proxy_probes.value().is_some() {
        signs.push("kube-proxy static pod manifest".into());
    }
    if let Some(d) = &facts.distribution {
        signs.push(format!("{d}'s files"));
    }
    if let Some(src) = facts.cilium.source() {
        signs.push(format!("Cilium's load balancer state ({src})"));
    }
    signs
}

/// Runs every check over `facts` and concludes. Facts read from a source that shows no
/// Kubernetes node at all get a single "nothing to diagnose" finding; facts built by hand
/// (no source, as in tests) are always diagnosed.
pub fn diagnose(facts: &Facts) -> Report {
    if facts.source.is_some() && kubernetes_signs(facts).is_empty() {
        // A machine that is not a node: its ip_forward=0 or absent API server are not faults.
        return Report {
            version: REPORT_VERSION,
            source: facts.source.clone(),
            distribution: facts.distribution.clone(),
            root_cause: None,
            confidence: None,
            supporting: Vec::new(),
            to_confirm: Vec::new(),
            network: None,
            timeline: Default::default(),
            findings: vec![Finding::unknown(
                ID_NOT_A_NODE,
                plumb_findings::Severity::Info,
                "no sign of a Kubernetes node here (no RKE2 config, no Kubernetes or CNI chains, no kubelet or kube-proxy process, no pod logs): nothing to diagnose",
            )],
        };
    }
    let values = NodeValues::from_facts(facts);
    let (ruleset_findings, kubernetes_dnat) = match facts.ruleset.value() {
        Some(rs) => {
            let origin = match &facts.source {
                Some(s) if matches!(s.kind, SourceKind::Live | SourceKind::Namespace) => {
                    plumb_check::Origin::Live { netns: None }
                }
                _ => plumb_check::Origin::File(
                    facts.ruleset.source().unwrap_or("ruleset").to_string(),
                ),
            };
            let check_facts = plumb_check::CheckInput::new(rs, origin, false);
            let dnat = kubernetes_dnat(
                &check_facts,
                &values.kubernetes_clusterip,
                facts.ruleset.source().unwrap_or("the ruleset"),
            );
            (plumb_check::run(check_facts), dnat)
        }
        None => (
            vec![Finding::unknown(
                ID_RULESET_UNREADABLE,
                plumb_findings::Severity::High,
                "no ruleset could be read, so kube-proxy's and the CNI's rules were not checked",
            )],
            KubernetesDnat::NotJudged("no ruleset could be read".into()),
        ),
    };
    let mut ruleset_findings = ruleset_findings;
    ruleset_findings.extend(read_failures(facts));
    let mut ctx = Ctx {
        facts,
        ruleset_findings,
        values,
        timeline: plumb_facts::timeline::build(facts),
        kubernetes_dnat,
    };
    if checks::kube_proxy::kube_proxy_expected(&ctx).is_none()
        && let Some(why) = checks::cilium::kube_proxy_free(facts)
    {
        let why = format!("kube-proxy-free node ({why}): kube-proxy's rules are not expected here");
        ctx.ruleset_findings = without_kube_proxy(std::mem::take(&mut ctx.ruleset_findings), &why);
    }
    let mut findings: Vec<Finding> = checks::ALL.iter().flat_map(|c| c(&ctx)).collect();
    findings.extend(ctx.ruleset_findings.iter().cloned());
    let limits = reasoning::limits(&ctx);
    let outcome = reasoning::conclude_with(&findings, &limits);
    let conclusion = outcome.as_ref().map(|o| o.conclusion.clone());
    plumb_findings::sort_with(&mut findings, conclusion.as_ref());
    Report {
        version: REPORT_VERSION,
        source: facts.source.clone(),
        distribution: facts.distribution.clone(),
        root_cause: conclusion.as_ref().map(|c| c.root_cause.clone()),
        confidence: conclusion.as_ref().map(|c| c.confidence),
        supporting: conclusion.map(|c| c.supporting).unwrap_or_default(),
        to_confirm: outcome.and_then(|o| o.to_confirm).into_iter().collect(),
        network: Some(ctx.values.network.clone()),
        timeline: ctx.timeline,
        findings,
    }
}

/// One finding per ruleset read that did not work while others did (when none did,
/// [`ID_RULESET_UNREADABLE`] says so): the tables it was for are not in the model, so
/// nothing in them was checked and their absence proves nothing. The ruleset is then
/// marked damaged by the reader, and the checks judge no absence.
fn read_failures(facts: &Facts) -> Vec<Finding> {
    if facts.ruleset.value().is_none() {
        return Vec::new();
    }
    failed_reads(facts)
        .map(|r| {
            let kubernetes = unread_nft_table(r).is_some_and(|(_, n)| is_kubernetes_nft_table(n));
            let severity = if kubernetes {
                plumb_findings::Severity::High
            } else {
                plumb_findings::Severity::Medium
            };
            let what = if kubernetes {
                "kube-proxy's or the CNI's rules in it were not checked"
            } else {
                "the rules it holds were not checked"
            };
            Finding::unknown(
                ID_RULESET_READ_FAILED,
                severity,
                format!("could not read {}: {what}", r.source),
            )
            .with_evidence([plumb_findings::Evidence {
                source: r.source.clone(),
                line: None,
                text: r.outcome.clone(),
            }])
            .explain(
                "A table the node has was not read, so plumb cannot say what it holds; findings \
                 that rest on a rule being absent are not made while part of the ruleset is \
                 missing.",
            )
            .fix(format!(
                "read it again when the node is less busy, or save it yourself (`{}` > \
                 FILE) and run `plumb check FILE`",
                r.source
            ))
        })
        .collect()
}

/// plumb-check's findings about kube-proxy's own rules (its hooks, canary, chain hashes,
/// service chains, the CNI chains it expects beside it), on a node that runs no
/// kube-proxy by design: nothing of kube-proxy's is expected, so each is `ok` with the
/// reason; what is left of its rules is `kube-proxy-rules-remain` (Cilium's check).
/// Stale chains stay reported as they are.
const KUBE_PROXY_RULE_IDS: &[&str] = &[
    "kube-proxy-rules-missing",
    "kube-proxy-service-unreachable",
    "kube-proxy-canary-missing",
    "kube-proxy-chain-hash-mismatch",
    "kube-proxy-mode-mix",
    "service-no-endpoints",
    "cni-chains-missing",
];

fn without_kube_proxy(findings: Vec<Finding>, why: &str) -> Vec<Finding> {
    let mut out: Vec<Finding> = Vec::with_capacity(findings.len());
    for f in findings {
        if !KUBE_PROXY_RULE_IDS.contains(&f.id.as_str()) {
            out.push(f);
        } else if !out.iter().any(|o| o.id == f.id) {
            out.push(Finding::ok(&f.id, why));
        }
    }
    out
}

/// Whether kube-proxy's rules (its service map recovered from the ruleset) translate the
/// `kubernetes` ClusterIP:443 now.
fn kubernetes_dnat(
    facts: &plumb_check::CheckInput,
    clusterip: &str,
    source: &str,
) -> KubernetesDnat {
    if !facts.is_full() {
        return KubernetesDnat::NotJudged(format!(
            "{source} is partial or truncated: a missing rule proves nothing"
        ));
    }
    let Ok(ip) = clusterip.parse::<std::net::IpAddr>() else {
        return KubernetesDnat::NotJudged(format!(
            "the kubernetes ClusterIP {clusterip:?} is no address"
        ));
    };
    let services = facts.services.iter().map(|m| m.services.len()).sum();
    let endpoints: Vec<String> = facts
        .services
        .iter()
        .flat_map(|m| &m.services)
        .filter(|s| s.cluster_ip == Some(ip) && s.port.is_none_or(|p| p == KUBERNETES_SERVICE_PORT))
        .flat_map(|s| &s.endpoints)
        .map(|e| {
            e.address()
                .map(str::to_string)
                .or_else(|| e.chain().map(str::to_string))
                .unwrap_or_else(|| "an endpoint".into())
        })
        .collect();
    if endpoints.is_empty() {
        KubernetesDnat::Absent {
            services,
            source: source.to_string(),
        }
    } else {
        KubernetesDnat::Present {
            endpoints,
            source: source.to_string(),
        }
    }
}
