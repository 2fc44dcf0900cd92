//! What on a node a move to Cilium runs into, beyond the kernel: the host firewall
//! dropping Cilium's tunnel ports, pod or Service CIDRs that the node's own addresses
//! or routes already use, pods published with hostPort through the portmap plugin, and
//! NetworkPolicies in use. Each is a [`Finding`] (`plumb cilium preflight` lists them
//! as conflicts; they do not decide go/no-go, which is the kernel's).
//!
//! Pure: the caller traces the ports (plumb-check's INPUT trace) and reads addresses
//! and routes; this module judges.

use plumb_findings::{Evidence, Finding, Inbound, Severity};
use plumb_ruleset::Ruleset;

/// Finding ids (stable, for scripts).
pub mod ids {
    /// The host firewall drops what Cilium's tunnel needs from other nodes.
    pub const TUNNEL_PORT: &str = "cilium-tunnel-port-blocked";
    /// A node address or route overlaps the pod or Service CIDR.
    pub const CIDR_OVERLAP: &str = "cilium-cidr-overlap";
    /// Pods publish hostPorts through the portmap plugin's rules.
    pub const HOST_PORT: &str = "cilium-hostport-users";
    /// NetworkPolicies select pods on this node.
    pub const NETWORK_POLICIES: &str = "cilium-network-policies";
}

/// Every id this module reports, with what a problem with it means.
pub const CATALOGUE: &[(&str, &str)] = &[
    (
        ids::TUNNEL_PORT,
        "the host firewall drops VXLAN 8472/udp (or 8473/udp during a live migration, or Geneve 6081/udp) from other nodes: Cilium's tunnel cannot carry pod traffic",
    ),
    (
        ids::CIDR_OVERLAP,
        "an address or route of the node (outside the CNI's own devices) overlaps the pod or Service CIDR Cilium will use",
    ),
    (
        ids::HOST_PORT,
        "pods publish hostPorts through the portmap plugin's CNI-HOSTPORT-* rules, which Cilium neither writes nor removes",
    ),
    (
        ids::NETWORK_POLICIES,
        "NetworkPolicies select pods on this node (Calico enforces them now; Cilium enforces Kubernetes NetworkPolicies, not Calico's own policy kinds)",
    ),
];

/// Cilium's tunnel ports: the default VXLAN, the migration guide's VXLAN port beside
/// Flannel's 8472, and Geneve.
pub const TUNNEL_PORTS: [(u16, &str); 3] = [
    (8472, "VXLAN, Cilium's default tunnel"),
    (
        8473,
        "VXLAN during a live migration (the migration guide's tunnelPort beside Flannel's 8472)",
    ),
    (6081, "Geneve (tunnelProtocol: geneve)"),
];

/// Judges the traced tunnel ports (`(port, state)`, one per [`TUNNEL_PORTS`] entry
/// traced).
pub fn tunnel_ports(traced: &[(u16, Inbound)]) -> Finding {
    let id = ids::TUNNEL_PORT;
    if traced.is_empty() {
        return Finding::unknown(id, Severity::Medium, "the host firewall was not traced");
    }
    let what = |p: u16| {
        TUNNEL_PORTS
            .iter()
            .find(|(q, _)| *q == p)
            .map_or("", |(_, w)| *w)
    };
    let blocked: Vec<(u16, &str, &[Evidence])> = traced
        .iter()
        .filter_map(|(p, s)| match s {
            Inbound::Blocked { rule, evidence } => Some((*p, rule.as_str(), evidence.as_slice())),
            _ => None,
        })
        .collect();
    if !blocked.is_empty() {
        let default_blocked = blocked.iter().any(|(p, ..)| *p == 8472);
        let ports: Vec<String> = blocked
            .iter()
            .map(|(p, rule, _)| format!("{p}/udp ({}) stopped by {rule}", what(*p)))
            .collect();
        let evidence: Vec<Evidence> = blocked
            .iter()
            .flat_map(|(.., e)| e.iter().cloned())
            .collect();
        let list: Vec<String> = blocked.iter().map(|(p, ..)| p.to_string()).collect();
        return Finding::problem(
            id,
            if default_blocked {
                Severity::High
            } else {
                Severity::Low
            },
            format!(
                "the host firewall drops Cilium's tunnel traffic from other nodes: {}",
                ports.join("; ")
            ),
        )
        .with_evidence(evidence)
        .explain("In tunnel routing mode (Cilium's default) pod traffic between nodes is encapsulated in UDP to these ports; when INPUT drops them, pods on different nodes cannot reach each other and the agents' health checks fail. Native routing needs no tunnel port.")
        .fix(format!(
            "Accept the port(s) {} /udp from the other nodes' addresses in the host firewall before the migration (`ufw allow proto udp from NODE_CIDR to any port PORT`, or a rule in the firewall's INPUT chain), or install Cilium with native routing.",
            list.join(",")
        ))
        .do_not("open the port to every source: only the cluster's nodes send tunnel traffic");
    }
    if let Some((p, rule, why, evidence)) = traced.iter().find_map(|(p, s)| match s {
        Inbound::Maybe {
            rule,
            why,
            evidence,
        } => Some((*p, rule, why, evidence)),
        _ => None,
    }) {
        return Finding::unknown(
            id,
            Severity::Medium,
            format!(
                "the host firewall may drop {p}/udp ({}) from other nodes: {rule}, {why}",
                what(p)
            ),
        )
        .with_evidence(evidence.iter().cloned());
    }
    if let Some((p, why)) = traced.iter().find_map(|(p, s)| match s {
        Inbound::Unknown(why) => Some((*p, why)),
        _ => None,
    }) {
        return Finding::unknown(
            id,
            Severity::Medium,
            format!("{p}/udp from other nodes was not judged: {why}"),
        );
    }
    let list: Vec<String> = traced.iter().map(|(p, _)| format!("{p}/udp")).collect();
    Finding::ok(
        id,
        format!(
            "INPUT accepts {} from other nodes (traced)",
            list.join(", ")
        ),
    )
}

/// An address on one of the node's interfaces (`ip -o addr`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeAddress {
    /// `192.168.1.10/24`.
    pub cidr: String,
    /// The interface.
    pub dev: String,
}

/// A route of the node (`ip -o route`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRoute {
    /// The destination (`10.42.0.0/16`; `default` routes are not given).
    pub dst: String,
    /// The output interface.
    pub dev: Option<String>,
    /// The line as `ip` printed it.
    pub text: String,
}

/// Devices of CNIs and kube-proxy whose addresses and routes are the pod or Service
/// network itself (the current CNI's, or Cilium's), not a conflict with it.
const CNI_DEVICES: &[&str] = &[
    "cni0",
    "cbr0",
    "flannel",
    "cali",
    "tunl0",
    "vxlan.calico",
    "vxlan-v6.calico",
    "wireguard.cali",
    "cilium_",
    "lxc",
    "kube-ipvs0",
    "nodelocaldns",
    "kube-bridge",
    "veth",
];

fn cni_device(dev: &str) -> bool {
    CNI_DEVICES.iter().any(|p| dev.starts_with(p))
}

/// An IPv4 CIDR as (network, prefix length); None for anything else.
fn v4(cidr: &str) -> Option<(u32, u8)> {
    let (addr, len) = cidr.split_once('/').unwrap_or((cidr, "32"));
    let addr: std::net::Ipv4Addr = addr.parse().ok()?;
    let len: u8 = len.parse().ok().filter(|l| *l <= 32)?;
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    Some((u32::from(addr) & mask, len))
}

fn overlap(a: (u32, u8), b: (u32, u8)) -> bool {
    let len = a.1.min(b.1);
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    a.0 & mask == b.0 & mask
}

/// The node's addresses and routes against the pod and Service CIDRs (`(cidr,
/// where it was read)`). Devices of CNIs and kube-proxy are left out (their addresses
/// and routes are those networks); so are IPv6 and default routes. `Err`: why the
/// addresses or routes could not be read.
pub fn cidr_overlaps(
    pod: Option<(&str, &str)>,
    service: Option<(&str, &str)>,
    addresses: Result<&[NodeAddress], &str>,
    routes: Result<&[NodeRoute], &str>,
) -> Finding {
    let id = ids::CIDR_OVERLAP;
    let nets: Vec<(&str, &str, &str, (u32, u8))> = [("pod", pod), ("Service", service)]
        .into_iter()
        .filter_map(|(kind, c)| {
            let (cidr, source) = c?;
            Some((kind, cidr, source, v4(cidr)?))
        })
        .collect();
    if nets.is_empty() {
        return Finding::unknown(
            id,
            Severity::Medium,
            "neither the pod nor the Service CIDR is known",
        );
    }
    let (addresses, routes) = match (addresses, routes) {
        (Ok(a), Ok(r)) => (a, r),
        (Err(why), _) | (_, Err(why)) => {
            return Finding::unknown(
                id,
                Severity::Medium,
                format!("the node's addresses and routes were not read: {why}"),
            );
        }
    };
    let mut evidence = Vec::new();
    let mut seen = Vec::new();
    for (kind, cidr, _, net) in &nets {
        for a in addresses.iter().filter(|a| !cni_device(&a.dev)) {
            if v4(&a.cidr).is_some_and(|n| overlap(n, *net)) {
                seen.push(format!(
                    "{} on {} is in the {kind} CIDR {cidr}",
                    a.cidr, a.dev
                ));
                evidence.push(Evidence {
                    source: "ip -o addr".into(),
                    line: None,
                    text: format!("{}: inet {}", a.dev, a.cidr),
                });
            }
        }
        for r in routes
            .iter()
            .filter(|r| !r.dev.as_deref().is_some_and(cni_device))
        {
            if v4(&r.dst).is_some_and(|n| overlap(n, *net)) {
                seen.push(format!(
                    "route {} via {} overlaps the {kind} CIDR {cidr}",
                    r.dst,
                    r.dev.as_deref().unwrap_or("?")
                ));
                evidence.push(Evidence {
                    source: "ip -o route".into(),
                    line: None,
                    text: r.text.clone(),
                });
            }
        }
    }
    let known: Vec<String> = nets
        .iter()
        .map(|(kind, cidr, source, _)| format!("{kind} {cidr} ({source})"))
        .collect();
    if seen.is_empty() {
        return Finding::ok(
            id,
            format!(
                "no address or route of the node outside the CNI's devices overlaps {}",
                known.join(" or ")
            ),
        );
    }
    Finding::problem(id, Severity::Medium, seen.join("; "))
        .with_evidence(evidence)
        .explain(format!(
            "Cilium routes the pod CIDR to its own devices and answers Service addresses itself; where the node already uses part of {} for a LAN, VPN or other route, traffic to those pods or Services goes the other way (or the other network becomes unreachable from pods).",
            known.join(" and ")
        ))
        .fix("Give Cilium a pod CIDR (ipam.operator.clusterPoolIPv4PodCIDRList, or the cluster's cluster-cidr) and a Service CIDR that the node's networks do not use, or move the conflicting route.")
}

/// Pods published with hostPort through the portmap plugin: its `CNI-HOSTPORT-DNAT`
/// chain and the `CNI-DN-*` chains' DNAT rules.
pub fn hostport_users(ruleset: Option<&Ruleset>) -> Finding {
    let id = ids::HOST_PORT;
    let Some(rs) = ruleset else {
        return Finding::unknown(id, Severity::Low, "the node's rules were not read");
    };
    let mut evidence = Vec::new();
    for t in &rs.tables {
        for c in t.chains.iter().filter(|c| c.name.starts_with("CNI-DN-")) {
            for r in &c.rules {
                let text = r.text.as_str();
                if text.contains("DNAT") {
                    evidence.push(Evidence {
                        source: format!("{} {}", t.backend, t.name),
                        line: Some(r.line()).filter(|l| *l > 0),
                        text: text.to_string(),
                    });
                }
            }
        }
    }
    if evidence.is_empty() {
        return Finding::ok(
            id,
            "no hostPort mapping in the node's rules (no portmap DNAT)",
        );
    }
    Finding::problem(
        id,
        Severity::Medium,
        format!(
            "{} hostPort mapping(s) by the portmap CNI plugin (CNI-HOSTPORT-DNAT)",
            evidence.len()
        ),
    )
    .with_evidence(evidence)
    .explain("The portmap plugin wrote these DNAT rules when each pod started. Cilium with kube-proxy replacement serves hostPorts in eBPF for pods it networks, and neither writes nor removes the portmap chains: the rules of pods created before the move stay, and new pods get hostPorts only if Cilium's hostPort support (or portmap chaining) is on.")
    .fix("Keep hostPort working across the move: enable Cilium's hostPort support (on with kubeProxyReplacement) or chain portmap (cni.chainingMode=portmap), and recreate these pods after the node moves so their hostPorts are programmed by Cilium.")
}

/// NetworkPolicies in use. `api`: how many NetworkPolicies the cluster's API objects
/// hold and where that was read, when known; else the node's Calico policy chains
/// (`cali-pi-*` ingress, `cali-po-*` egress: one per policy selecting a local pod) say
/// whether policies select pods on this node.
pub fn network_policies(ruleset: Option<&Ruleset>, api: Option<(usize, &str)>) -> Finding {
    let id = ids::NETWORK_POLICIES;
    if let Some((n, source)) = api {
        if n == 0 {
            return Finding::ok(id, format!("no NetworkPolicy in the cluster ({source})"));
        }
        return policies_in_use(
            format!("{n} NetworkPolicies in the cluster ({source})"),
            Vec::new(),
        );
    }
    let Some(rs) = ruleset else {
        return Finding::unknown(
            id,
            Severity::Low,
            "whether NetworkPolicies are in use is not known: the node's rules were not read and plumb reads no API objects here (`kubectl get networkpolicies -A`)",
        );
    };
    let mut calico = false;
    let mut chains: Vec<(String, String)> = Vec::new();
    for t in &rs.tables {
        for c in &t.chains {
            if c.name.starts_with("cali-") {
                calico = true;
            }
            if c.name.starts_with("cali-pi-") || c.name.starts_with("cali-po-") {
                chains.push((format!("{} {}", t.backend, t.name), c.name.to_string()));
            }
        }
    }
    if !chains.is_empty() {
        let evidence = chains
            .iter()
            .take(8)
            .map(|(source, name)| Evidence {
                source: source.clone(),
                line: None,
                text: format!(":{name}"),
            })
            .collect();
        return policies_in_use(
            format!(
                "Calico enforces policies on this node: {} policy chain(s) (cali-pi-*/cali-po-*)",
                chains.len()
            ),
            evidence,
        );
    }
    if calico {
        return Finding::ok(
            id,
            "Calico programs no policy chain on this node: no NetworkPolicy selects its pods",
        );
    }
    Finding::unknown(
        id,
        Severity::Low,
        "whether NetworkPolicies are in use is not known: no Calico policy chains to read and plumb reads no API objects here (`kubectl get networkpolicies -A`)",
    )
}

fn policies_in_use(title: String, evidence: Vec<Evidence>) -> Finding {
    Finding::problem(ids::NETWORK_POLICIES, Severity::Medium, title)
        .with_evidence(evidence)
        .explain("Cilium enforces Kubernetes NetworkPolicies once it networks a pod, with its own semantics for a few corners (host traffic, named ports across namespaces); Calico's own kinds (projectcalico.org NetworkPolicy, GlobalNetworkPolicy) are not read by Cilium. The migration guide runs Cilium with policyEnforcementMode=never until every node has moved, so policies are not enforced in between.")
        .fix("List them (`kubectl get networkpolicies -A`, `kubectl get globalnetworkpolicies.crd.projectcalico.org`), translate Calico's own kinds to CiliumNetworkPolicy, and check each with `plumb policy check` before turning enforcement on.")
}

#[cfg(test)]
mod tests {
    use super::*;
    use plumb_findings::Status;

    fn rules(text: &str) -> Ruleset {
        plumb_ruleset::iptables::save::parse(text, &Default::default())
    }

    #[test]
    fn a_blocked_default_tunnel_port_is_high_and_names_the_rule() {
        let f = tunnel_ports(&[
            (
                8472,
                Inbound::Blocked {
                    rule: "policy DROP of filter INPUT".into(),
                    evidence: Vec::new(),
                },
            ),
            (8473, Inbound::Open),
            (6081, Inbound::Open),
        ]);
        assert_eq!(f.status, Status::Problem);
        assert_eq!(f.severity, Severity::High);
        assert!(
            f.title.contains("8472/udp") && f.title.contains("policy DROP"),
            "{}",
            f.title
        );
        let ok = tunnel_ports(&[(8472, Inbound::Open), (6081, Inbound::Open)]);
        assert_eq!(ok.status, Status::Ok);
        let geneve = tunnel_ports(&[
            (8472, Inbound::Open),
            (
                6081,
                Inbound::Blocked {
                    rule: "r".into(),
                    evidence: Vec::new(),
                },
            ),
        ]);
        assert_eq!(geneve.severity, Severity::Low);
    }

    #[test]
    fn overlaps_outside_cni_devices_only() {
        let addrs = [
            NodeAddress {
                cidr: "10.42.0.1/24".into(),
                dev: "cni0".into(),
            },
            NodeAddress {
                cidr: "10.43.5.7/24".into(),
                dev: "wg-office".into(),
            },
            NodeAddress {
                cidr: "192.168.1.10/24".into(),
                dev: "eth0".into(),
            },
        ];
        let routes = [
            NodeRoute {
                dst: "10.42.1.0/24".into(),
                dev: Some("flannel.1".into()),
                text: "10.42.1.0/24 via 10.42.1.0 dev flannel.1 onlink".into(),
            },
            NodeRoute {
                dst: "10.0.0.0/8".into(),
                dev: Some("tun0".into()),
                text: "10.0.0.0/8 dev tun0 scope link".into(),
            },
        ];
        let f = cidr_overlaps(
            Some(("10.42.0.0/16", "config.yaml")),
            Some(("10.43.0.0/16", "config.yaml")),
            Ok(&addrs),
            Ok(&routes),
        );
        assert_eq!(f.status, Status::Problem, "{}", f.title);
        assert!(f.title.contains("10.43.5.7/24 on wg-office"), "{}", f.title);
        assert!(f.title.contains("route 10.0.0.0/8 via tun0"), "{}", f.title);
        assert!(
            !f.title.contains("cni0") && !f.title.contains("flannel"),
            "{}",
            f.title
        );
        let clean = cidr_overlaps(
            Some(("10.42.0.0/16", "x")),
            None,
            Ok(&addrs[..1]),
            Ok(&routes[..1]),
        );
        assert_eq!(clean.status, Status::Ok);
        let unknown = cidr_overlaps(Some(("10.42.0.0/16", "x")), None, Err("no ip"), Ok(&[]));
        assert_eq!(unknown.status, Status::Unknown);
    }

    #[test]
    fn portmap_dnat_rules_are_hostport_users() {
        let rs = rules(
            "*nat\n:PREROUTING ACCEPT [0:0]\n:CNI-HOSTPORT-DNAT - [0:0]\n:CNI-DN-3e1a2e5c0f4b4b9e7d1a2 - [0:0]\n-A CNI-HOSTPORT-DNAT -p tcp -m multiport --dports 8080 -j CNI-DN-3e1a2e5c0f4b4b9e7d1a2\n-A CNI-DN-3e1a2e5c0f4b4b9e7d1a2 -p tcp -m tcp --dport 8080 -j DNAT --to-destination 10.42.0.10:80\nCOMMIT\n",
        );
        let f = hostport_users(Some(&rs));
        assert_eq!(f.status, Status::Problem);
        assert!(f.evidence[0].text.contains("10.42.0.10:80"));
        assert_eq!(
            hostport_users(Some(&rules("*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n"))).status,
            Status::Ok
        );
        assert_eq!(hostport_users(None).status, Status::Unknown);
    }

    #[test]
    fn calico_policy_chains_show_policies_in_use() {
        let with = rules(
            "*filter\n:INPUT ACCEPT [0:0]\n:cali-FORWARD - [0:0]\n:cali-pi-_Xk2 - [0:0]\nCOMMIT\n",
        );
        assert_eq!(network_policies(Some(&with), None).status, Status::Problem);
        let without = rules("*filter\n:INPUT ACCEPT [0:0]\n:cali-FORWARD - [0:0]\nCOMMIT\n");
        assert_eq!(network_policies(Some(&without), None).status, Status::Ok);
        let none = rules("*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n");
        assert_eq!(network_policies(Some(&none), None).status, Status::Unknown);
        assert_eq!(
            network_policies(None, Some((3, "k8s-networkpolicies.yaml"))).status,
            Status::Problem
        );
    }
}
