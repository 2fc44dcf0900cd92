//! Cilium as the node's service dataplane. `cilium-service-dataplane`: on a node where
//! Cilium is seen (its LB maps, its agent's status or service list, RKE2's `cni:
//! cilium`, its CILIUM_* chains) doctor names what translates Services — Cilium's eBPF
//! load balancer, with its frontends and where they were read — so a node without
//! kube-proxy is judged as what it is, not as a node whose kube-proxy is missing.
//!
//! On a kube-proxy-free node it also reports what `plumb cilium verify` finds, with
//! the same ids (`kube-proxy-rules-remain`, `kube-proxy-still-deployed`,
//! `old-cni-config`, `cilium-lb-maps`, `cilium-frontend-without-backends`,
//! `cilium-lb-maps-inconsistent`): leftovers of kube-proxy and of the previous CNI, and
//! the maps' own problems. Where Cilium runs beside kube-proxy only the maps' problems
//! are judged (kube-proxy's chains are then no leftover). A node without any sign of
//! Cilium gets no finding from this module.
//!
//! `cilium-hubble-drops`: the flows Hubble saw dropped (a sysdump's flows file), by
//! reason and destination, as information (severity info, which is never a root cause).

use plumb_cilium::verify::{MigratedNode, ids};
use plumb_facts::Facts;
use plumb_findings::{Evidence, Finding, Severity};

use crate::context::Ctx;

/// Finding id: what translates the node's Services when Cilium is there.
pub const ID_DATAPLANE: &str = "cilium-service-dataplane";
/// Finding id: endpoints Cilium's agent holds in a state they do not leave by themselves.
pub const ID_ENDPOINTS: &str = "cilium-endpoints-not-ready";
/// Finding id: the flows Hubble saw dropped (a sysdump's `hubble-flows-*.json`),
/// grouped by reason and destination. Information only (severity info): a drop by
/// policy is often the policy working, so it is evidence for a reader, never a root
/// cause by itself.
pub const ID_HUBBLE_DROPS: &str = "cilium-hubble-drops";

/// Why the node runs without kube-proxy by design, when it says so: Cilium's agent
/// reports kube-proxy replacement, RKE2's `disable-kube-proxy: true`, or k3s runs with
/// `--disable-kube-proxy`.
pub fn kube_proxy_free(facts: &Facts) -> Option<String> {
    if let Some((c, src)) = facts.cilium.value().zip(facts.cilium.source())
        && c.replaces_kube_proxy() == Some(true)
    {
        let src = c.status_source.as_deref().unwrap_or(src);
        return Some(format!(
            "Cilium's agent reports KubeProxyReplacement {} ({src})",
            c.kube_proxy_replacement.as_deref().unwrap_or("")
        ));
    }
    if let Some((cfg, src)) = facts.rke2_config.value().zip(facts.rke2_config.source())
        && cfg.disable_kube_proxy == Some(true)
    {
        return Some(format!("disable-kube-proxy: true in {src}"));
    }
    facts
        .processes
        .value()
        .and_then(|ps| {
            ps.iter()
                .find(|p| p.comm == "k3s" && p.args.contains("--disable-kube-proxy"))
        })
        .map(|p| format!("k3s[{}] runs with --disable-kube-proxy", p.pid))
}

/// The first sign of Cilium on the node, when there is one.
fn cilium_sign(facts: &Facts) -> Option<String> {
    if let Some(src) = facts.cilium.source() {
        return Some(format!("Cilium's state read from {src}"));
    }
    if let Some((cfg, src)) = facts.rke2_config.value().zip(facts.rke2_config.source())
        && cfg.cni().contains(&"cilium")
    {
        return Some(format!("cni: cilium in {src}"));
    }
    let rs = facts.ruleset.value()?;
    rs.tables.iter().find_map(|t| {
        t.chains
            .iter()
            .find(|c| c.name.starts_with("CILIUM_"))
            .map(|c| format!("chain {} in {} {}", c.name, t.backend, t.name))
    })
}

/// Answers `cilium-service-dataplane` and, on a kube-proxy-free node, verify's ids.
pub fn check(ctx: &Ctx) -> Vec<Finding> {
    let facts = ctx.facts;
    let Some(sign) = cilium_sign(facts) else {
        return Vec::new();
    };
    let cilium = facts.cilium.value();
    let frontends = cilium.and_then(|c| c.frontends.as_deref());
    let lb_source = cilium
        .and_then(|c| c.lb_source.clone())
        .unwrap_or_else(|| "Cilium's load balancer".into());
    let kpr = kube_proxy_free(facts);
    let mut out = vec![dataplane(
        facts,
        &sign,
        kpr.as_deref(),
        frontends,
        &lb_source,
    )];
    let lb = frontends.map(|f| (f, lb_source.clone()));
    let manifests: Vec<String> = facts
        .kube_proxy_probes
        .source()
        .map(str::to_string)
        .into_iter()
        .collect();
    let verified = plumb_cilium::verify::verify(&MigratedNode {
        ruleset: facts.ruleset.value(),
        cni_files: facts.cni_conf_files.value().cloned(),
        kube_proxy_manifests: manifests,
        // doctor reads no interface list; `plumb cilium verify` does on a live node.
        interfaces: None,
        lb,
        before: None,
    });
    let lb_ids = [
        ids::LB_MAPS,
        ids::FRONTEND_WITHOUT_BACKENDS,
        ids::LB_MAPS_INCONSISTENT,
    ];
    out.extend(verified.findings.into_iter().filter(|f| {
        // Beside kube-proxy, its chains and static pod are no leftover, and the CNI
        // directory is not judged (chaining setups keep another plugin's file).
        kpr.is_some() || lb_ids.contains(&f.id.as_str())
    }));
    if let Some((endpoints, source)) = cilium.and_then(|c| c.endpoints.as_ref()) {
        out.push(endpoints_finding(endpoints, source));
    }
    if let Some((flows, source)) = cilium.and_then(|c| c.hubble.as_ref()) {
        out.push(hubble_finding(flows, source));
    }
    // Read problems of the maps or the agent's output, as evidence of the maps finding.
    if let Some(c) = cilium
        && !c.problems.is_empty()
        && let Some(f) = out.iter_mut().find(|f| f.id == ids::LB_MAPS)
    {
        f.evidence.extend(c.problems.iter().map(|p| Evidence {
            source: lb_source.clone(),
            line: None,
            text: p.clone(),
        }));
    }
    out
}

fn hubble_finding(flows: &plumb_cilium::hubble::FlowSummary, source: &str) -> Finding {
    let nodes = if flows.nodes.is_empty() {
        String::new()
    } else {
        format!(" on {}", flows.nodes.join(", "))
    };
    if flows.dropped == 0 {
        return Finding::ok(
            ID_HUBBLE_DROPS,
            format!(
                "Hubble saw {} flows{nodes}, none dropped ({source})",
                flows.flows
            ),
        );
    }
    let mut evidence: Vec<Evidence> = flows
        .groups
        .iter()
        .map(|g| Evidence {
            source: source.to_string(),
            line: None,
            text: format!(
                "{} x {} -> {} (first: {})",
                g.count, g.reason, g.destination, g.first
            ),
        })
        .collect();
    if flows.other_groups > 0 {
        evidence.push(Evidence {
            source: source.to_string(),
            line: None,
            text: format!(
                "... and {} more reason/destination pairs",
                flows.other_groups
            ),
        });
    }
    let top: Vec<String> = flows.group_lines().into_iter().take(3).collect();
    Finding::problem(
        ID_HUBBLE_DROPS,
        Severity::Info,
        format!(
            "Hubble saw {} of {} flows dropped{nodes}: {}",
            flows.dropped,
            flows.flows,
            top.join("; ")
        ),
    )
    .with_evidence(evidence)
    .explain("These are the flows Hubble recorded while the sysdump was taken. A drop by policy (POLICY_DENIED, POLICY_DENY) is often the policy doing its job, and a few drops of odd packets (INVALID_SOURCE_IP for IPv6 router solicitations) are normal; they say what was dropped, not why the node misbehaves. Read them beside the other findings.")
    .fix("For a drop that should not happen, follow the flow: `hubble observe --verdict DROPPED --to-pod NAMESPACE/POD` on the cluster, and for a policy drop `plumb policy check` with the policies that select the destination.")
}

fn endpoints_finding(endpoints: &[plumb_cilium::agent::Endpoint], source: &str) -> Finding {
    let stuck: Vec<&plumb_cilium::agent::Endpoint> =
        endpoints.iter().filter(|e| e.stuck()).collect();
    if stuck.is_empty() {
        return Finding::ok(
            ID_ENDPOINTS,
            format!("{} endpoints, none stuck ({source})", endpoints.len()),
        );
    }
    Finding::problem(
        ID_ENDPOINTS,
        Severity::Medium,
        format!(
            "{} of {} endpoints are stuck: {}",
            stuck.len(),
            endpoints.len(),
            stuck
                .iter()
                .take(5)
                .map(|e| format!("{} {} ({})", e.id, e.what, e.state))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    )
    .with_evidence(stuck.iter().map(|e| Evidence {
        source: source.to_string(),
        line: None,
        text: format!("{} {} {}", e.id, e.what, e.state),
    }))
    .explain("An endpoint that is not-ready, waiting for its identity, invalid or disconnected gets no (or stale) policy and datapath state: its pod's traffic is dropped or not load-balanced as the cluster expects. Regenerating endpoints are passing through and not counted.")
    .fix("Look at the endpoint's log and status: `cilium-dbg endpoint get ID` and `cilium-dbg endpoint log ID` in the node's Cilium agent pod; an identity that never comes usually means the agent cannot reach the API server or the kvstore.")
}

fn dataplane(
    facts: &Facts,
    sign: &str,
    kpr: Option<&str>,
    frontends: Option<&[plumb_cilium::Frontend]>,
    lb_source: &str,
) -> Finding {
    let Some(frontends) = frontends else {
        return Finding::unknown(
            ID_DATAPLANE,
            Severity::Info,
            format!(
                "Cilium is on this node ({sign}), but its load balancer's Services were not read"
            ),
        )
        .explain(match &facts.cilium {
            plumb_facts::Fact::Unknown { reason } => reason.clone(),
            plumb_facts::Fact::Known { value, .. } if !value.problems.is_empty() => {
                format!("Reading it failed: {}", value.problems.join("; "))
            }
            plumb_facts::Fact::Known { .. } => {
                "no LB maps, agent service list or sysdump listing was readable".into()
            }
        });
    };
    let title = match kpr {
        Some(why) => format!(
            "Services are translated by Cilium's eBPF load balancer (kube-proxy replacement: {why}); {} frontends in {lb_source}",
            frontends.len()
        ),
        None => format!(
            "Cilium's eBPF load balancer holds {} frontends ({lb_source}); kube-proxy is not replaced here",
            frontends.len()
        ),
    };
    Finding::ok(ID_DATAPLANE, title).with_evidence(frontends.iter().take(8).map(|f| {
        let to: Vec<String> = f
            .backends
            .iter()
            .map(|b| format!("{}:{}", b.address, b.port))
            .collect();
        Evidence {
            source: lb_source.to_string(),
            line: None,
            text: format!(
                "{} {} -> {}",
                f.display_address(),
                f.kind.map_or("?", |k| k.name()),
                if to.is_empty() {
                    "no backend".to_string()
                } else {
                    to.join(", ")
                }
            ),
        }
    }))
}
