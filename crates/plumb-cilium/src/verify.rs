//! After a migration to Cilium with kube-proxy replacement: is the node really
//! kube-proxy-free, is the old CNI gone, and does Cilium's load balancer hold every
//! Service? Each answer is a [`Finding`] with evidence and the command that fixes it;
//! the [`Verdict`] is `migrated` only when nothing of the old dataplane is left.
//!
//! What counts as kube-proxy's: the chains only kube-proxy writes (`KUBE-SERVICES`,
//! `KUBE-SVC-*`, `KUBE-SEP-*`, `KUBE-NODEPORTS`, ...) and the nftables table
//! `kube-proxy`. kubelet keeps `KUBE-FIREWALL`, `KUBE-KUBELET-CANARY` and, on older
//! releases, `KUBE-MARK-*` and `KUBE-POSTROUTING` after kube-proxy is gone: those are
//! not leftovers and never reported.

use crate::lbmap::{Frontend, Problem};
use plumb_findings::{Evidence, Finding, Severity};
use plumb_ruleset::{Backend, Ruleset};
use serde::Serialize;

/// Finding ids `plumb cilium verify` reports (stable, for scripts).
pub mod ids {
    /// kube-proxy's chains or nftables table are still in the node's rules.
    pub const KUBE_PROXY_RULES_REMAIN: &str = "kube-proxy-rules-remain";
    /// kube-proxy is still deployed on the node (a static pod manifest).
    pub const KUBE_PROXY_DEPLOYED: &str = "kube-proxy-still-deployed";
    /// The previous CNI's configuration is still in the CNI directory.
    pub const OLD_CNI_CONFIG: &str = "old-cni-config";
    /// Cilium's load-balancer maps could not be found or read.
    pub const LB_MAPS: &str = "cilium-lb-maps";
    /// Network interfaces the previous CNI created are still on the node.
    pub const OLD_CNI_INTERFACES: &str = "old-cni-interfaces";
    /// A Cilium frontend has no backend.
    pub const FRONTEND_WITHOUT_BACKENDS: &str = "cilium-frontend-without-backends";
    /// Cilium's LB maps contradict themselves (a slot names a missing backend, ...).
    pub const LB_MAPS_INCONSISTENT: &str = "cilium-lb-maps-inconsistent";
}

/// Every id [`verify`] may report, with what a problem with it means.
pub const CATALOGUE: &[(&str, &str)] = &[
    (
        ids::KUBE_PROXY_RULES_REMAIN,
        "kube-proxy's service rules are still in the node's iptables or nftables after the move to Cilium's kube-proxy replacement",
    ),
    (
        ids::KUBE_PROXY_DEPLOYED,
        "kube-proxy is still deployed on a node meant to be kube-proxy-free (its static pod manifest is there)",
    ),
    (
        ids::OLD_CNI_CONFIG,
        "the previous CNI's configuration (Canal, Calico, Flannel) is still in /etc/cni/net.d",
    ),
    (
        ids::OLD_CNI_INTERFACES,
        "network interfaces the previous CNI created (flannel.1, cni0, tunl0, vxlan.calico, cali*) are still on the node",
    ),
    (
        ids::LB_MAPS,
        "Cilium's service load-balancer maps are not pinned where the node keeps them, or cannot be read",
    ),
    (
        ids::FRONTEND_WITHOUT_BACKENDS,
        "a Service address in Cilium's load balancer has no backend: connections to it fail",
    ),
    (
        ids::LB_MAPS_INCONSISTENT,
        "Cilium's load-balancer maps contradict themselves (a slot names a backend that does not exist)",
    ),
    (
        crate::migration::ids::MISSING,
        "a Service address kube-proxy served before the migration is not in Cilium's load balancer",
    ),
    (
        crate::migration::ids::ENDPOINTS,
        "a Service's endpoints differ between kube-proxy's rules before and Cilium's maps now (informational)",
    ),
];

/// The node as `verify` sees it. `None` fields were not read, and what depends on
/// them is reported unknown, never guessed.
#[derive(Debug, Default)]
pub struct MigratedNode<'a> {
    /// The node's rules (both iptables backends and nftables, as read).
    pub ruleset: Option<&'a Ruleset>,
    /// File names in the CNI configuration directory (`/etc/cni/net.d`).
    pub cni_files: Option<Vec<String>>,
    /// kube-proxy static pod manifests found (full paths).
    pub kube_proxy_manifests: Vec<String>,
    /// Names of the node's network interfaces (`ip -o link`), or why they could not be
    /// read; None when the node is not live (saved rules judged offline): no finding.
    pub interfaces: Option<Result<Vec<String>, String>>,
    /// Cilium's frontends as read from its maps, with where they were read from.
    pub lb: Option<(&'a [Frontend], String)>,
    /// kube-proxy's Services before the migration (a saved dump), with its name: when
    /// given, every Service address must be in Cilium's maps.
    pub before: Option<(&'a [crate::migration::KubeProxyService], String)>,
}

/// The answer: `migrated` or `incomplete`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Nothing of kube-proxy or the old CNI is left, and Cilium's maps were read.
    Migrated,
    /// Something is left, or could not be checked.
    Incomplete,
}

/// The verdict and the findings behind it (problems, unknowns and what was checked).
#[derive(Debug, Serialize)]
pub struct Verification {
    /// `migrated` or `incomplete`.
    pub verdict: Verdict,
    /// Every check's finding.
    pub findings: Vec<Finding>,
}

/// Chains only kube-proxy writes (exact names, then prefixes).
const KUBE_PROXY_CHAINS: &[&str] = &[
    "KUBE-SERVICES",
    "KUBE-NODEPORTS",
    "KUBE-EXTERNAL-SERVICES",
    "KUBE-PROXY-CANARY",
    "KUBE-PROXY-FIREWALL",
    "KUBE-FORWARD",
];
const KUBE_PROXY_PREFIXES: &[&str] = &[
    "KUBE-SVC-",
    "KUBE-SEP-",
    "KUBE-EXT-",
    "KUBE-SVL-",
    "KUBE-FW-",
    "KUBE-XLB-",
];

/// CNI configuration files the usual previous CNIs leave.
const OLD_CNI_FILES: &[&str] = &[
    "10-canal.conflist",
    "10-calico.conflist",
    "10-flannel.conflist",
    "10-flannel.conf",
    "calico-kubeconfig",
];

fn is_kube_proxy_chain(name: &str) -> bool {
    KUBE_PROXY_CHAINS.contains(&name) || KUBE_PROXY_PREFIXES.iter().any(|p| name.starts_with(p))
}

fn dump_command(backend: Backend) -> &'static str {
    match backend {
        Backend::IptablesLegacy => "iptables-legacy-save",
        Backend::IptablesNft => "iptables-nft-save",
        Backend::Nftables => "nft list ruleset",
        _ => "the ruleset",
    }
}

/// Runs every check.
pub fn verify(node: &MigratedNode<'_>) -> Verification {
    let findings = vec![
        kube_proxy_rules(node.ruleset),
        kube_proxy_deployed(&node.kube_proxy_manifests),
        old_cni(node.cni_files.as_deref()),
    ]
    .into_iter()
    .chain(
        node.interfaces
            .as_ref()
            .map(|l| old_interfaces(l.as_deref())),
    )
    .chain(lb_findings(node.lb.as_ref()))
    .chain(match (&node.before, &node.lb) {
        (Some((before, source)), Some((now, now_source))) => {
            crate::migration::diff(before, source, now, now_source)
        }
        _ => Vec::new(),
    })
    .collect::<Vec<_>>();
    // A Service without endpoints is not a migration problem; anything else left, or
    // anything that could not be checked, is.
    let migrated = findings
        .iter()
        .all(|f| f.status == plumb_findings::Status::Ok || f.id == ids::FRONTEND_WITHOUT_BACKENDS);
    let mut findings = findings;
    plumb_findings::sort(&mut findings);
    Verification {
        verdict: if migrated {
            Verdict::Migrated
        } else {
            Verdict::Incomplete
        },
        findings,
    }
}

/// kube-proxy's chains left in `rs` (its iptables chains, and every chain of an
/// nftables `kube-proxy` table; kubelet's own KUBE-* chains are not counted), with one
/// line of evidence per table that holds some.
pub fn kube_proxy_chains(rs: &Ruleset) -> (usize, Vec<Evidence>) {
    let mut evidence = Vec::new();
    let mut chains = 0usize;
    for t in &rs.tables {
        if t.backend == Backend::Nftables && &*t.name == "kube-proxy" {
            chains += t.chains.len();
            evidence.push(Evidence {
                source: dump_command(t.backend).into(),
                line: None,
                text: format!("table {} kube-proxy ({} chains)", t.family, t.chains.len()),
            });
            continue;
        }
        let found: Vec<&str> = t
            .chains
            .iter()
            .map(|c| &*c.name)
            .filter(|n| is_kube_proxy_chain(n))
            .collect();
        if found.is_empty() {
            continue;
        }
        chains += found.len();
        let sample: Vec<&str> = found.iter().take(3).copied().collect();
        evidence.push(Evidence {
            source: dump_command(t.backend).into(),
            line: None,
            text: format!(
                "*{} ({}): {} kube-proxy chains, e.g. {}",
                t.name,
                t.family,
                found.len(),
                sample.join(", ")
            ),
        });
    }
    (chains, evidence)
}

fn kube_proxy_rules(ruleset: Option<&Ruleset>) -> Finding {
    let id = ids::KUBE_PROXY_RULES_REMAIN;
    let Some(rs) = ruleset else {
        return Finding::unknown(id, Severity::High, "the node's rules were not read")
            .explain("Without the rules plumb cannot tell whether kube-proxy's chains are gone.");
    };
    let (chains, evidence) = kube_proxy_chains(rs);
    if chains == 0 {
        return Finding::ok(
            id,
            "no kube-proxy chain or table is left in the node's rules",
        );
    }
    Finding::problem(
        id,
        Severity::High,
        format!("{chains} kube-proxy chains are still in the node's rules"),
    )
    .with_evidence(evidence)
    .explain("With kube-proxy replacement Cilium translates Services in eBPF and writes no KUBE-* rules. kube-proxy's rules left behind still match ClusterIP and NodePort traffic that reaches netfilter — with the endpoints of the day kube-proxy stopped — so some connections go to pods that no longer exist, depending on the path a packet takes.")
    .fix("Make sure kube-proxy no longer runs (RKE2: `disable-kube-proxy: true` in /etc/rancher/rke2/config.yaml and the static pod manifest removed; kubeadm: delete the kube-proxy DaemonSet).")
    .fix("Remove its rules on each node with `kube-proxy --cleanup`, run with the kube-proxy version that wrote them: it deletes exactly kube-proxy's chains (iptables, IPVS and nftables mode) and nothing of kubelet's or Cilium's.")
    .do_not("flush all iptables rules: Cilium's own CILIUM_* chains and kubelet's KUBE-FIREWALL are in the same tables")
}

fn kube_proxy_deployed(manifests: &[String]) -> Finding {
    let id = ids::KUBE_PROXY_DEPLOYED;
    if manifests.is_empty() {
        return Finding::ok(id, "no kube-proxy static pod manifest on the node");
    }
    Finding::problem(
        id,
        Severity::High,
        "kube-proxy's static pod manifest is still on the node",
    )
    .with_evidence(manifests.iter().map(|m| Evidence {
        source: m.clone(),
        line: None,
        text: "kube-proxy static pod manifest".into(),
    }))
    .explain("kubelet starts every manifest in its static pod directory: kube-proxy comes back and rewrites its KUBE-* rules beside Cilium's load balancer.")
    .fix("RKE2: set `disable-kube-proxy: true` in /etc/rancher/rke2/config.yaml, delete the manifest and restart rke2-server (servers) or rke2-agent (agents).")
}

fn old_cni(files: Option<&[String]>) -> Finding {
    let id = ids::OLD_CNI_CONFIG;
    let Some(files) = files else {
        return Finding::unknown(
            id,
            Severity::Medium,
            "the CNI configuration directory was not read",
        );
    };
    // The container runtime uses the configuration that sorts first.
    let first = files
        .iter()
        .filter(|f| f.ends_with(".conflist") || f.ends_with(".conf"))
        .min();
    let cilium_first = first.is_some_and(|f| f.contains("cilium"));
    let mut left: Vec<&String> = files
        .iter()
        .filter(|f| OLD_CNI_FILES.contains(&f.as_str()))
        .collect();
    // Another plugin's configuration that sorts before Cilium's is in use.
    if let Some(first) = first.filter(|f| !cilium_first && !left.contains(f)) {
        left.push(first);
    }
    if left.is_empty() {
        return Finding::ok(id, "no configuration of a previous CNI in /etc/cni/net.d");
    }
    let severity = if cilium_first {
        Severity::Low
    } else {
        Severity::High
    };
    Finding::problem(
        id,
        severity,
        format!(
            "the previous CNI's configuration is still in /etc/cni/net.d: {}",
            left.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        ),
    )
    .with_evidence(left.iter().map(|f| Evidence {
        source: format!("/etc/cni/net.d/{f}"),
        line: None,
        text: "present".into(),
    }))
    .explain(if cilium_first {
        "Cilium's configuration sorts first, so new pods get Cilium; the old files are dead weight that a later reinstall or a change of file names can bring back into use."
    } else {
        "The container runtime uses the configuration that sorts first in /etc/cni/net.d: new pods on this node do not get Cilium networking."
    })
    .fix(format!(
        "Remove them: `rm {}` (Cilium's agent also renames other configurations to *.cilium_bak when cni.exclusive is on).",
        left.iter().map(|f| format!("/etc/cni/net.d/{f}")).collect::<Vec<_>>().join(" ")
    ))
}

/// Interfaces Canal, Calico and Flannel create: exact names, then prefixes.
const OLD_CNI_LINKS: &[&str] = &[
    "flannel.1",
    "flannel-wg",
    "cni0",
    "tunl0",
    "vxlan.calico",
    "wireguard.cali",
];
const OLD_CNI_LINK_PREFIXES: &[&str] = &["cali"];

fn old_interfaces(links: Result<&[String], &String>) -> Finding {
    let id = ids::OLD_CNI_INTERFACES;
    let links = match links {
        Ok(l) => l,
        Err(why) => {
            return Finding::unknown(
                id,
                Severity::Low,
                format!("the node's network interfaces could not be read: {why}"),
            );
        }
    };
    let left: Vec<&String> = links
        .iter()
        .filter(|l| {
            OLD_CNI_LINKS.contains(&l.as_str())
                || OLD_CNI_LINK_PREFIXES.iter().any(|p| l.starts_with(p))
        })
        .collect();
    if left.is_empty() {
        return Finding::ok(id, "no interface of a previous CNI on the node");
    }
    let names: Vec<&str> = left.iter().map(|s| s.as_str()).collect();
    Finding::problem(
        id,
        Severity::Low,
        format!("{} interface(s) of the previous CNI are still on the node: {}", left.len(), names.join(", ")),
    )
    .with_evidence(left.iter().map(|l| Evidence {
        source: "ip -o link".into(),
        line: None,
        text: l.to_string(),
    }))
    .explain("Canal's and Flannel's tunnel device, bridge and pod veths outlive the CNI until the node reboots (Cilium's migration guide says so). A leftover VXLAN device can still hold the tunnel port, and routes through it send pod traffic the old way.")
    .fix("Reboot the node (the guide's way), or delete them: `ip link delete flannel.1`, `ip link delete cni0`, `ip link delete tunl0`, and the `cali*` veths of pods that no longer exist.")
}

fn lb_findings(lb: Option<&(&[Frontend], String)>) -> Vec<Finding> {
    let Some((frontends, source)) = lb else {
        return vec![
            Finding::unknown(
                ids::LB_MAPS,
                Severity::High,
                "Cilium's load-balancer maps were not found (cilium_lb4_services_v2 under /sys/fs/bpf/tc/globals or /run/cilium/bpffs/tc/globals)",
            )
            .explain("On a kube-proxy-free node Cilium keeps every Service in these pinned BPF maps. Without them plumb cannot tell whether Services are handled at all: Cilium may not run, may pin its maps elsewhere, or kube-proxy replacement may be off.")
            .fix("Check the agent: `kubectl -n kube-system exec ds/cilium -- cilium-dbg status | grep KubeProxyReplacement`."),
        ];
    };
    let mut out = vec![Finding::ok(
        ids::LB_MAPS,
        format!("{} frontends read from {source}", frontends.len()),
    )];
    let empty: Vec<&Frontend> = frontends
        .iter()
        .filter(|f| f.problems.contains(&Problem::NoBackends))
        .collect();
    out.push(if empty.is_empty() {
        Finding::ok(ids::FRONTEND_WITHOUT_BACKENDS, "every frontend has a backend")
    } else {
        Finding::problem(
            ids::FRONTEND_WITHOUT_BACKENDS,
            Severity::Medium,
            format!("{} frontend(s) have no backend", empty.len()),
        )
        .with_evidence(empty.iter().map(|f| frontend_evidence(f, source)))
        .explain("Cilium has no backend for these Service addresses, so connections to them fail. For a Service without ready endpoints this is expected; for one whose EndpointSlice lists ready endpoints the agent's view and its maps disagree.")
        .fix("Compare with the Service's endpoints: `kubectl get endpointslices -A -o wide`, and with the agent: `cilium-dbg service list`.")
    });
    let broken: Vec<(&Frontend, &Problem)> = frontends
        .iter()
        .flat_map(|f| f.problems.iter().map(move |p| (f, p)))
        .filter(|(_, p)| **p != Problem::NoBackends)
        .collect();
    out.push(if broken.is_empty() {
        Finding::ok(ids::LB_MAPS_INCONSISTENT, "the load-balancer maps agree with each other")
    } else {
        Finding::problem(
            ids::LB_MAPS_INCONSISTENT,
            Severity::High,
            format!("{} inconsistencies in Cilium's load-balancer maps", broken.len()),
        )
        .with_evidence(broken.iter().map(|(f, p)| Evidence {
            source: source.clone(),
            line: None,
            text: format!("{}: {}", f.display_address(), p.describe()),
        }))
        .explain("A healthy agent never leaves these: a slot that names a missing backend drops the connections that pick it; a missing reverse-NAT entry leaves replies with the backend's address.")
        .fix("Restart the Cilium agent on this node (it rewrites the maps from its state): `kubectl -n kube-system delete pod -l k8s-app=cilium --field-selector spec.nodeName=$(hostname)`.")
    });
    out
}

fn frontend_evidence(f: &Frontend, source: &str) -> Evidence {
    Evidence {
        source: source.to_string(),
        line: None,
        text: format!(
            "{} {}: no backend",
            f.display_address(),
            f.kind.map_or("(no frontend entry)", |k| k.name())
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plumb_findings::Status;
    use plumb_ruleset::format::{ParseOptions, parse_bytes};

    fn rules(text: &str) -> Ruleset {
        parse_bytes(text.as_bytes(), &ParseOptions::default())
            .unwrap()
            .ruleset
    }

    fn find<'a>(v: &'a Verification, id: &str) -> &'a Finding {
        v.findings.iter().find(|f| f.id == id).unwrap()
    }

    #[test]
    fn kubelet_chains_are_not_leftovers_and_kube_proxy_chains_are() {
        let kubelet = rules(
            "*filter\n:INPUT ACCEPT [0:0]\n:KUBE-FIREWALL - [0:0]\n:KUBE-KUBELET-CANARY - [0:0]\nCOMMIT\n*nat\n:POSTROUTING ACCEPT [0:0]\n:KUBE-MARK-MASQ - [0:0]\n:KUBE-POSTROUTING - [0:0]\nCOMMIT\n",
        );
        let v = verify(&MigratedNode {
            ruleset: Some(&kubelet),
            cni_files: Some(vec!["05-cilium.conflist".into()]),
            lb: Some((&[], "maps".into())),
            ..MigratedNode::default()
        });
        assert_eq!(find(&v, ids::KUBE_PROXY_RULES_REMAIN).status, Status::Ok);
        assert_eq!(v.verdict, Verdict::Migrated);

        let left = rules(
            "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-ABC - [0:0]\n-A PREROUTING -j KUBE-SERVICES\nCOMMIT\n",
        );
        let v = verify(&MigratedNode {
            ruleset: Some(&left),
            cni_files: Some(vec!["05-cilium.conflist".into()]),
            lb: Some((&[], "maps".into())),
            ..MigratedNode::default()
        });
        let f = find(&v, ids::KUBE_PROXY_RULES_REMAIN);
        assert!(f.is_problem());
        assert!(
            f.evidence[0].text.contains("2 kube-proxy chains"),
            "{:?}",
            f.evidence
        );
        assert_eq!(v.verdict, Verdict::Incomplete);
    }

    #[test]
    fn an_old_cni_config_sorting_first_is_high_and_after_cilium_low() {
        let v = verify(&MigratedNode {
            cni_files: Some(vec![
                "05-cilium.conflist".into(),
                "10-canal.conflist".into(),
                "calico-kubeconfig".into(),
            ]),
            ..MigratedNode::default()
        });
        let f = find(&v, ids::OLD_CNI_CONFIG);
        assert_eq!(f.severity, Severity::Low);
        assert!(f.title.contains("10-canal.conflist, calico-kubeconfig"));
        let v = verify(&MigratedNode {
            cni_files: Some(vec!["00-multus.conf".into(), "05-cilium.conflist".into()]),
            ..MigratedNode::default()
        });
        let f = find(&v, ids::OLD_CNI_CONFIG);
        assert_eq!(
            f.severity,
            Severity::High,
            "another configuration is used first"
        );
    }

    #[test]
    fn without_maps_or_rules_the_answer_is_incomplete_not_migrated() {
        let v = verify(&MigratedNode::default());
        assert_eq!(v.verdict, Verdict::Incomplete);
        assert_eq!(find(&v, ids::LB_MAPS).status, Status::Unknown);
        assert_eq!(
            find(&v, ids::KUBE_PROXY_RULES_REMAIN).status,
            Status::Unknown
        );
    }

    #[test]
    fn old_cni_interfaces_are_named_and_cilium_s_are_not() {
        let v = verify(&MigratedNode {
            interfaces: Some(Ok(vec![
                "lo".into(),
                "eth0".into(),
                "cilium_host".into(),
                "lxc12ab".into(),
            ])),
            ..MigratedNode::default()
        });
        assert_eq!(find(&v, ids::OLD_CNI_INTERFACES).status, Status::Ok);
        let v = verify(&MigratedNode {
            interfaces: Some(Ok(vec![
                "eth0".into(),
                "flannel.1".into(),
                "cali3f2a1b".into(),
            ])),
            ..MigratedNode::default()
        });
        let f = find(&v, ids::OLD_CNI_INTERFACES);
        assert!(f.is_problem());
        assert!(f.title.ends_with("flannel.1, cali3f2a1b"), "{}", f.title);
    }

    #[test]
    fn every_reported_id_is_in_the_catalogue() {
        let v = verify(&MigratedNode::default());
        for f in &v.findings {
            assert!(CATALOGUE.iter().any(|(id, _)| *id == f.id), "{}", f.id);
        }
    }
}
