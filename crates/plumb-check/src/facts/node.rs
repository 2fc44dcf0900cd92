//! What the ruleset says about the node it came from: pod networks, the Kubernetes API
//! service and its endpoints, kube-dns, NodePorts, the CNI and its encapsulation. Each
//! fact keeps the rule it was read from; nothing is guessed beyond what the rules show.

use crate::facts::{CheckInput, shapes};
use plumb_ruleset::iptables::XtBuf;
use plumb_ruleset::{Backend, Family, Hook, Rule, RuleBody, Table};
use plumb_trace::Proto;
use plumb_trace::addr::Cidr;
use std::net::IpAddr;

/// A Service port the flows use: its ClusterIP and port, and its endpoints.
#[derive(Clone, Debug)]
pub struct ServicePort {
    pub name: String,
    pub cluster_ip: IpAddr,
    pub port: u16,
    pub proto: Proto,
    pub endpoints: Vec<(IpAddr, u16)>,
}

/// A port (or IP protocol) a node receives traffic of other nodes on.
#[derive(Clone, Debug)]
pub struct NodePort {
    pub proto: Proto,
    /// `None` for protocols without ports (IPIP).
    pub port: Option<u16>,
    pub what: String,
    /// Why plumb thinks the node needs it.
    pub because: String,
    /// `Some(reason)` when the need depends on something the ruleset does not show.
    pub only_if: Option<String>,
}

/// What plumb read about the node from its ruleset (one address family).
#[derive(Clone, Debug, Default)]
pub struct NodeModel {
    pub v6: bool,
    /// Pod networks with the rule text each was read from.
    pub pod_cidrs: Vec<(Cidr, String)>,
    pub cluster_ips: Vec<IpAddr>,
    pub api: Option<ServicePort>,
    pub dns: Option<ServicePort>,
    /// NodePorts with a Service that has endpoints: (port, protocol, service).
    pub node_ports: Vec<(u16, Proto, String)>,
    /// CNIs with evidence (`flannel`, `calico`, ...).
    pub cnis: Vec<&'static str>,
    /// Ports other nodes reach this node on (encapsulation, routing, kubelet).
    pub node_inbound: Vec<NodePort>,
    /// The nat table of this family is in the input (ClusterIP flows need it).
    pub has_nat: bool,
    /// Addresses of this node the rules name: kube-proxy's nftables `nodeport-ips`
    /// set (its `--nodeport-addresses`, by default the node's addresses).
    pub node_addrs: Vec<IpAddr>,
}

/// Chain-name prefixes of the CNIs, for evidence.
const CNI_PREFIXES: &[(&str, &str)] = &[
    ("FLANNEL", "flannel"),
    ("cali-", "calico"),
    ("felix-", "calico"),
    ("CILIUM", "cilium"),
    ("cilium", "cilium"),
    ("WEAVE", "weave"),
    ("ANTREA", "antrea"),
    ("OVN-KUBE", "ovn-kubernetes"),
    ("AWS-SNAT-CHAIN", "aws-vpc-cni"),
    ("AWS-CONNMARK-CHAIN", "aws-vpc-cni"),
    ("KUBE-ROUTER", "kube-router"),
];

/// True for chains kube-proxy writes per Service or endpoint (not worth scanning for
/// node facts: there are tens of thousands on big clusters).
fn per_service_chain(name: &str) -> bool {
    [
        "KUBE-SVC-",
        "KUBE-SEP-",
        "KUBE-FW-",
        "KUBE-XLB-",
        "KUBE-EXT-",
        "KUBE-SVL-",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

/// (negated, value) of a rule's source or destination, for iptables and listed rules.
fn addr_of(rule: &Rule, buf: &mut XtBuf, dst: bool) -> Option<(bool, String)> {
    match &rule.body {
        RuleBody::Xt(_) => {
            let v = rule.xt_in(buf)?;
            let o = v.generic_option(if dst { "-d" } else { "-s" })?;
            Some((o.negated(), o.arg(0)?.into_owned()))
        }
        RuleBody::Approximate(l) => {
            let c = if dst { &l.destination } else { &l.source };
            let any = matches!(&*c.value, "0.0.0.0/0" | "::/0" | "anywhere" | "");
            (!any).then(|| (c.negated, c.value.to_string()))
        }
        RuleBody::Nft(_) => None,
    }
}

fn target_of(rule: &Rule) -> Option<String> {
    match &rule.body {
        RuleBody::Xt(_) => rule.xt_target().map(|t| t.name.to_string()),
        RuleBody::Approximate(l) => l.target.clone(),
        RuleBody::Nft(_) => None,
    }
}

fn network(s: &str, v6: bool) -> Option<Cidr> {
    let c = Cidr::parse(s)?;
    // A pod network is a prefix, not a host.
    let host = if v6 { 128 } else { 32 };
    (c.addr.is_ipv6() == v6 && c.len < host && c.len > 0).then_some(c)
}

/// Reads the node model of one family from the iptables tables of the ruleset.
pub fn infer(facts: &CheckInput<'_>, family: Family) -> NodeModel {
    let v6 = family == Family::Ip6;
    let mut m = NodeModel {
        v6,
        ..Default::default()
    };
    let tables: Vec<&Table> = facts
        .ruleset
        .tables
        .iter()
        .filter(|t| {
            t.family == family || (t.backend == Backend::Nftables && t.family == Family::Inet)
        })
        .collect();
    // The nat table, or an nft chain of type nat on prerouting (kube-proxy's
    // nftables mode): ClusterIP flows need the DNAT.
    m.has_nat = tables.iter().any(|t| {
        if t.backend != Backend::Nftables {
            return &*t.name == "nat";
        }
        t.chains.iter().any(|c| {
            c.base.as_ref().is_some_and(|b| {
                b.hook == Hook::Prerouting && b.chain_type.as_deref() == Some("nat")
            })
        })
    });
    let mut buf = XtBuf::default();
    let add_pod = |m: &mut NodeModel, c: Cidr, text: &str| {
        if !m.pod_cidrs.iter().any(|(x, _)| *x == c) {
            m.pod_cidrs.push((c, text.to_string()));
        }
    };
    // The rules whose texts may name the CNI's devices.
    let mut scanned: Vec<&Rule> = Vec::new();
    for t in &tables {
        let mut svc_chains = 0usize;
        for c in &t.chains {
            for (prefix, cni) in CNI_PREFIXES {
                if c.name.starts_with(prefix) && !m.cnis.contains(cni) {
                    m.cnis.push(cni);
                }
            }
            let svc = c.name.starts_with("KUBE-SVC-");
            if svc {
                svc_chains += 1;
            }
            // kube-proxy --cluster-cidr: `! -s POD_CIDR ... -j KUBE-MARK-MASQ` in
            // KUBE-SERVICES (older) or the first rules of each KUBE-SVC chain (newer).
            if &*t.name == "nat" && (&*c.name == "KUBE-SERVICES" || (svc && svc_chains <= 32)) {
                for r in c.rules.iter().take(if svc { 2 } else { usize::MAX }) {
                    if target_of(r).as_deref() != Some("KUBE-MARK-MASQ") {
                        continue;
                    }
                    if let Some((true, s)) = addr_of(r, &mut buf, false)
                        && let Some(cidr) = network(&s, v6)
                    {
                        add_pod(&mut m, cidr, r.text.read().trim());
                    }
                }
            }
            // kube-proxy's nftables mode: `ip daddr X tcp dport N ip saddr != POD_CIDR
            // jump mark-for-masquerade` opens each service chain (its --cluster-cidr).
            let nft_kube_proxy = plumb_kubeproxy::recover::nft::is_kube_proxy_table(t);
            if nft_kube_proxy && m.node_addrs.is_empty() {
                m.node_addrs = t
                    .sets
                    .iter()
                    .filter(|set| &*set.name == "nodeport-ips")
                    .flat_map(|set| &set.elements)
                    .filter_map(|e| e.key_text.trim().parse::<IpAddr>().ok())
                    .filter(|a| a.is_ipv6() == v6)
                    .collect();
            }
            if nft_kube_proxy && c.name.starts_with("service-") {
                svc_chains += 1;
                if svc_chains <= 32 {
                    for r in c.rules.iter().take(2) {
                        if let Some(cidr) = nft_masq_exempt(&r.text, v6) {
                            add_pod(&mut m, cidr, r.text.read().trim());
                        }
                    }
                }
                continue;
            }
            if per_service_chain(&c.name)
                || (nft_kube_proxy
                    && ["endpoint-", "external-", "firewall-"]
                        .iter()
                        .any(|p| c.name.starts_with(p)))
            {
                continue;
            }
            let flannel = c.name.starts_with("FLANNEL");
            // Interface names of the CNI's devices are in the CNI's and the host's
            // chains, not in kube-proxy's (tens of thousands of rules on big clusters).
            let scan = !c.name.starts_with("KUBE-") || c.name.starts_with("KUBE-ROUTER");
            let postrouting = &*c.name == "POSTROUTING";
            if !scan && !flannel && !postrouting {
                continue;
            }
            for r in &c.rules {
                if scan {
                    scanned.push(r);
                }
                if !flannel && !postrouting {
                    continue;
                }
                // Flannel's rules name its network (`-s 10.244.0.0/16 -j ACCEPT` in
                // FLANNEL-FWD, `-s 10.244.0.0/16 -d 10.244.0.0/16 -j RETURN`); old flannel
                // and kubenet masquerade it in POSTROUTING (`-s X ! -d X -j MASQUERADE`).
                let src = addr_of(r, &mut buf, false);
                if flannel
                    && let Some((false, s)) = &src
                    && let Some(cidr) = network(s, v6)
                    && cidr.len <= if v6 { 64 } else { 16 }
                {
                    add_pod(&mut m, cidr, r.text.read().trim());
                }
                if postrouting
                    && target_of(r).as_deref() == Some("MASQUERADE")
                    && let Some((false, s)) = &src
                    && let Some((true, d)) = addr_of(r, &mut buf, true)
                    && *s == d
                    && let Some(cidr) = network(s, v6)
                {
                    add_pod(&mut m, cidr, r.text.read().trim());
                }
            }
        }
    }
    // The recovered service map (CheckInput holds it): every ClusterIP, and the few
    // services whose flows are traced (the API, kube-dns, two NodePorts). Only those
    // few have their endpoints read; the rest cost a push each.
    for map in facts.services.iter().filter(|s| s.family == family) {
        for s in &map.services {
            let Some(ip) = s.cluster_ip else { continue };
            m.cluster_ips.push(ip);
            let Some(port) = s.port.filter(|p| *p != 0) else {
                continue;
            };
            let proto = match s.protocol.as_deref() {
                Some("udp") => Proto::Udp,
                Some("sctp") => Proto::Other(132),
                _ => Proto::Tcp,
            };
            let name = s.name.as_deref().unwrap_or_default();
            let api = m.api.is_none()
                && matches!(name, "default/kubernetes:https" | "default/kubernetes");
            let dns = !api
                && m.dns.is_none()
                && name.starts_with("kube-system/kube-dns:")
                && proto == Proto::Udp
                && port == 53;
            let node_ports = m.node_ports.len() < 2 && !s.node_ports.is_empty();
            if !(api || dns || node_ports) {
                continue;
            }
            let endpoints: Vec<(IpAddr, u16)> = s
                .endpoints
                .iter()
                .filter_map(|e| parse_endpoint(e.address()?))
                .collect();
            let service = ServicePort {
                name: name.to_string(),
                cluster_ip: ip,
                port,
                proto,
                endpoints,
            };
            if service.endpoints.is_empty() {
                if api {
                    m.api = Some(service);
                }
                continue;
            }
            for &np in &s.node_ports {
                if m.node_ports.len() < 2 {
                    m.node_ports.push((np, proto, name.to_string()));
                }
            }
            if api {
                m.api = Some(service);
            } else if dns {
                m.dns = Some(service);
            }
        }
    }
    // Sorted and deduplicated once: a Service has a ClusterIP per port.
    m.cluster_ips.sort_unstable();
    m.cluster_ips.dedup();
    m.node_inbound = node_inbound(&m, &scanned);
    m
}

/// The network after `saddr !=` in kube-proxy's nft masquerade-marking rule.
fn nft_masq_exempt(text: &str, v6: bool) -> Option<Cidr> {
    if !text.contains("jump mark-for-masquerade") {
        return None;
    }
    let (_, rest) = text.split_once("saddr != ")?;
    network(rest.split_whitespace().next()?, v6)
}

/// `10.0.0.1:6443`, `[fd00::1]:6443`.
fn parse_endpoint(s: &str) -> Option<(IpAddr, u16)> {
    let (a, p) = match s.strip_prefix('[') {
        Some(rest) => {
            let (a, p) = rest.split_once("]:")?;
            (a, p)
        }
        None => s.rsplit_once(':')?,
    };
    Some((a.parse().ok()?, p.parse().ok()?))
}

/// The devices whose names in the rules tell which ports other nodes reach this one on
/// (see [`node_inbound`]).
const DEVICES: [&str; 10] = [
    "flannel-wg",
    "flannel.1",
    "cilium_vxlan",
    "wireguard.cali",
    "cilium_geneve",
    "genev_sys_6081",
    "antrea-tun0",
    "vxlan.calico",
    "tunl0",
    "kube-bridge",
];

/// The ports other nodes reach this one on, from the CNI and interface evidence (the
/// first of `rules` whose text names a device).
fn node_inbound(m: &NodeModel, rules: &[&Rule]) -> Vec<NodePort> {
    // The first text naming each device, every text read once.
    let mut named: [Option<String>; DEVICES.len()] = std::array::from_fn(|_| None);
    for r in rules {
        if named.iter().all(Option::is_some) {
            break;
        }
        let text = r.text.read();
        for (device, first) in DEVICES.iter().zip(&mut named) {
            if first.is_none() && text.contains(device) {
                *first = Some(text.trim().to_string());
            }
        }
    }
    let seen = |device: &str| {
        let i = DEVICES.iter().position(|d| *d == device);
        debug_assert!(i.is_some(), "{device} is not in DEVICES");
        named[i?].clone()
    };
    let has = |cni: &str| m.cnis.contains(&cni);
    let mut out = vec![NodePort {
        proto: Proto::Tcp,
        port: Some(10250),
        what: "kubelet API (logs, exec, metrics)".into(),
        because: "every Kubernetes node runs kubelet".into(),
        only_if: None,
    }];
    let mut push = |proto, port, what: &str, because: String, only_if: Option<&str>| {
        out.push(NodePort {
            proto,
            port,
            what: what.into(),
            because,
            only_if: only_if.map(str::to_string),
        })
    };
    // VXLAN 8472/udp: Flannel's default backend and Cilium's default tunnel.
    let flannel_other_backend = seen("flannel-wg").is_some();
    if let Some(t) = seen("flannel.1").or_else(|| seen("cilium_vxlan")) {
        push(
            Proto::Udp,
            Some(8472),
            "VXLAN between nodes (pod traffic)",
            format!("the rules name the VXLAN device: {t}"),
            None,
        );
    } else if has("flannel") && !flannel_other_backend {
        // VXLAN is Flannel's default backend (and Canal's, k3s's, RKE2's).
        push(
            Proto::Udp,
            Some(8472),
            "Flannel VXLAN between nodes (pod traffic)",
            "Flannel chains are present and VXLAN is its default backend".into(),
            None,
        );
    } else if has("cilium") {
        push(
            Proto::Udp,
            Some(8472),
            "VXLAN between nodes (pod traffic)",
            "Cilium chains are present".into(),
            Some("if Cilium uses its default VXLAN tunnel"),
        );
    }
    if let Some(t) = seen("flannel-wg").or_else(|| seen("wireguard.cali")) {
        let port = if m.v6 { 51821 } else { 51820 };
        push(
            Proto::Udp,
            Some(port),
            "WireGuard between nodes (pod traffic)",
            format!("the rules name the WireGuard device: {t}"),
            None,
        );
    }
    if let Some(t) = seen("cilium_geneve")
        .or_else(|| seen("genev_sys_6081"))
        .or_else(|| seen("antrea-tun0"))
    {
        push(
            Proto::Udp,
            Some(6081),
            "Geneve between nodes (pod traffic)",
            format!("the rules name the Geneve device: {t}"),
            None,
        );
    } else if has("ovn-kubernetes") {
        push(
            Proto::Udp,
            Some(6081),
            "Geneve between nodes (pod traffic)",
            "OVN-Kubernetes chains are present (OVN tunnels are Geneve)".into(),
            None,
        );
    } else if has("antrea") {
        push(
            Proto::Udp,
            Some(6081),
            "Geneve between nodes (pod traffic)",
            "Antrea chains are present".into(),
            Some("if Antrea uses its default Geneve encapsulation"),
        );
    }
    if has("calico") {
        if let Some(t) = seen("vxlan.calico") {
            push(
                Proto::Udp,
                Some(4789),
                "Calico VXLAN between nodes (pod traffic)",
                format!("the rules name the VXLAN device: {t}"),
                None,
            );
        } else {
            push(
                Proto::Tcp,
                Some(179),
                "BGP between nodes (pod routes)",
                "Calico chains are present".into(),
                Some("if Calico distributes routes with BGP (its default)"),
            );
        }
        if let Some(t) = seen("tunl0") {
            push(
                Proto::Other(4),
                None,
                "IP-in-IP between nodes (pod traffic)",
                format!("the rules name the IPIP device: {t}"),
                None,
            );
        }
    }
    if let Some(t) = seen("kube-bridge") {
        push(
            Proto::Tcp,
            Some(179),
            "BGP between nodes (kube-router pod routes)",
            format!("the rules name kube-router's bridge: {t}"),
            Some("if kube-router routes pod traffic with BGP"),
        );
    }
    // RKE2 servers take agents' registrations on 9345/tcp (k3s uses 6443 for it). The
    // rules cannot tell RKE2 from k3s or a server from an agent, only that the
    // networks are theirs: always conditional.
    if let Some(evidence) = k3s_family_evidence(m) {
        push(
            Proto::Tcp,
            Some(9345),
            "RKE2 supervisor (agents register with servers)",
            evidence,
            Some("if this node is an RKE2 server"),
        );
    }
    if has("weave") {
        push(
            Proto::Tcp,
            Some(6783),
            "Weave Net control connections",
            "Weave Net chains are present".into(),
            None,
        );
    }
    out
}

/// Why the node looks like k3s or RKE2: their default service network (the API's
/// ClusterIP 10.43.0.1) or pod network (10.42.0.0/16), which kubeadm and the clouds do
/// not use.
fn k3s_family_evidence(m: &NodeModel) -> Option<String> {
    if m.v6 {
        return None;
    }
    let k3s_api: IpAddr = std::net::Ipv4Addr::new(10, 43, 0, 1).into();
    if let Some(api) = m.api.as_ref().filter(|a| a.cluster_ip == k3s_api) {
        return Some(format!(
            "the kubernetes Service is at {} (the service network of k3s and RKE2)",
            api.cluster_ip
        ));
    }
    let k3s_pods = Cidr::parse("10.42.0.0/16")?;
    m.pod_cidrs
        .iter()
        .find(|(c, _)| *c == k3s_pods)
        .map(|(_, text)| format!("the pod network is 10.42.0.0/16 (k3s's and RKE2's): {text}"))
}

/// The node models of the address families the check judges (IPv4, then IPv6), read
/// while [`CheckInput`] holds the service maps: [`CheckInput::new`] takes them, so
/// the check itself never reads the maps and [`crate::run`] can release them before it
/// builds its trace index (see there for why).
#[derive(Debug, Default)]
pub(crate) struct Nodes(Vec<NodeModel>);

impl Nodes {
    /// What [`infer`] reads for each family the check judges: a full input whose
    /// family has a filter and rules of Kubernetes or a CNI. Nothing for other inputs.
    pub(crate) fn infer(facts: &CheckInput) -> Nodes {
        if !facts.is_full() {
            return Nodes::default();
        }
        Nodes(
            [Family::Ip, Family::Ip6]
                .into_iter()
                .filter(|&f| shapes::filters(facts, f) && shapes::kubernetes_present(facts, f))
                .map(|f| infer(facts, f))
                .collect(),
        )
    }

    pub(crate) fn get(&self, family: Family) -> Option<&NodeModel> {
        let v6 = family == Family::Ip6;
        self.0.iter().find(|m| m.v6 == v6)
    }
}
