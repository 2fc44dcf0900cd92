//! Findings: host firewall rules that stop traffic a Kubernetes node needs, decided by
//! tracing that traffic through the ruleset (plumb-trace), not by pattern-matching
//! policies.
//!
//! - `forward-drop-blocks-pods`: traffic the node forwards for pods (pod to pod across
//!   nodes and between two pods of this node, pod to a Service's endpoint, pod to the API server through the
//!   `kubernetes` ClusterIP, DNS to kube-dns, NodePorts) ends in a DROP or REJECT of the
//!   host firewall (a rule or a chain policy) in FORWARD.
//! - `input-drop-blocks-node`: traffic other nodes send to this node (kubelet
//!   10250/tcp; the CNI's encapsulation or routing: VXLAN 8472/udp, Geneve 6081/udp,
//!   Calico VXLAN 4789/udp, IPIP, BGP 179/tcp, WireGuard 51820/51821/udp; NodePorts;
//!   RKE2's supervisor 9345/tcp, conditional, on nodes with k3s's/RKE2's networks)
//!   ends in a DROP or REJECT of the host firewall in INPUT.
//! - `docker-bypasses-ufw`: on a UFW host, Docker's FORWARD chains come before UFW's and
//!   accept published container ports, so UFW's rules never see that traffic.
//!
//! The host firewall may be iptables (the filter table) or nft (base chains of type
//! filter on input/forward: nftables.conf, firewalld's nft backend), beside kube-proxy
//! in iptables or nftables mode; the trace runs every base chain of a hook in priority
//! order, so an accept in one table does not hide a drop in another.
//!
//! How: `facts::node::infer` reads what the ruleset shows about the node (pod networks,
//! Services, the CNI and its encapsulation), in `CheckInput::new` while the service
//! maps are held. Each flow the node needs becomes a packet
//! whose unknown parts (source address, interfaces) stay unknown: the trace branches
//! on them. Then the outcomes are judged against what is known about the flow (a
//! packet from another node does not arrive on `lo` or on a local pod bridge):
//!
//! - *blocked* (a problem) when every outcome the flow can have is a DROP/REJECT of a
//!   host-firewall rule or policy, no outcome depends on a match plumb cannot see (a
//!   column a listing hides, an unknown match, an ipset), and no verdict depends on the
//!   placeholder address plumb used for an address it does not know (the node's, a pod's);
//! - *maybe* (`unknown`, with the conditions) when some outcome is blocked but others
//!   are not, or the block rests on such an unknown;
//! - open otherwise. DROP/REJECT rules of Kubernetes components and CNIs (network
//!   policy, kube-proxy's "no endpoints" REJECT) are intended and never count.
//!
//! A flow whose need depends on something the rules do not show (the API server on
//! this node, the CNI's backend) is at most `unknown`. Partial, truncated or damaged
//! inputs are not judged: a block seen there may have an ACCEPT before it that was
//! left out.

mod docker_ufw;

use crate::facts::CheckInput;
use crate::facts::node::{self, NodeModel};
use crate::facts::shapes::{filters, owned_table, policy_owned};
use plumb_findings::{Evidence, Finding, Severity, Status};
use plumb_ruleset::{Backend, Family, Table};
use plumb_trace::constraint::{AddrSet, Fact};
use plumb_trace::ir::{Action, AddrMatch, Cond, HookId, IfacePattern, Item};
use plumb_trace::{Index, Node, Origin, Outcome, Packet, Proto, StepKind, Verdict, trace};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Finding id: the host firewall drops or rejects traffic the node forwards for pods.
pub const ID_FORWARD: &str = "forward-drop-blocks-pods";
/// Finding id: the host firewall drops or rejects traffic other nodes send to this one
/// (kubelet, the CNI's encapsulation, NodePorts).
pub const ID_INPUT: &str = "input-drop-blocks-node";
/// Finding id: Docker's FORWARD chains accept published ports before UFW sees them.
pub const ID_DOCKER_UFW: &str = docker_ufw::ID;

const DO_NOT_FLUSH: &str =
    "Do not flush iptables to \"open\" the node: it also removes kube-proxy's and the CNI's rules.";

/// Interfaces on the pod side of a node (bridges and host ends of pod veths): traffic
/// from another node never arrives on them, and traffic to another node never leaves
/// on them.
const POD_SIDE: &[&str] = &[
    "lo",
    "docker0",
    "cni0",
    "cbr0",
    "cali+",
    "veth+",
    "lxc+",
    "br-+",
    "virbr+",
    "cni-podman+",
    "podman+",
    "kube-bridge",
    "azv+",
    "gke+",
    "eni+",
    "antrea-gw0",
    "cilium_host",
    "cilium_net",
    "ovn-k8s-mp0",
    "kube-ipvs0",
    "nodelocaldns",
];

/// Tunnel devices between nodes: a pod's own packet never arrives on them, and
/// traffic to a local pod never leaves on them.
const TUNNELS: &[&str] = &[
    "lo",
    "flannel.1",
    "flannel0",
    "flannel-wg",
    "flannel-v6.1",
    "tunl0",
    "vxlan.calico",
    "vxlan-v6.calico",
    "wireguard.cali",
    "cilium_vxlan",
    "cilium_geneve",
    "cilium_wg0",
    "genev_sys_6081",
    "antrea-tun0",
];

/// Where a flow's packet comes from or goes to, as far as interfaces go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    /// A pod on this node.
    Pod,
    /// Another machine (another node, a client).
    Network,
    /// A process on this node (INPUT: no output interface).
    Local,
    /// Not known (a Service endpoint may be on this node or another).
    Either,
}

/// One flow a node needs, as a packet to trace and what is known about it.
struct Flow {
    /// What it is, for titles: `pod -> kubernetes API (10.96.0.1:443)`.
    name: String,
    packet: Packet,
    /// The set of sources the flow stands for (`None`: any).
    src: Option<AddrSet>,
    /// The addresses a placeholder destination stands for (`None`: the destination is
    /// the real one, e.g. a ClusterIP).
    dst_class: Option<AddrSet>,
    arrives: Side,
    leaves: Side,
    /// `Some(reason)` when the node needs the flow only under a condition the rules do
    /// not show.
    only_if: Option<String>,
    /// Why the node needs it / what breaks.
    breaks: String,
    severity: Severity,
    node: Node,
}

/// How a flow fared.
enum Fate {
    Open,
    /// Every outcome the flow can have is stopped by the host firewall.
    Blocked(Block),
    /// Some outcome is stopped, or the stop rests on something plumb cannot see.
    Maybe(Block, String),
    /// The trace stopped at its bound before every path was explored.
    Undecided(String),
}

/// The rule or policy that stops a flow, and the path to it.
struct Block {
    hook: HookId,
    evidence: Vec<Evidence>,
    /// `FORWARD rule 8: -A FORWARD -j REJECT ...` / `policy DROP of filter INPUT`.
    rule: String,
    /// Packets the stopping rule counted, when the input shows counters.
    packets: Option<u64>,
    /// The stopping rule or policy is in a native nft table (`table, chain` for fixes).
    nft: Option<(String, String)>,
}

/// Traces each flow the node needs through the ruleset and judges its outcomes
/// (blocked, maybe, open), plus the Docker/UFW ordering; partial, truncated or damaged
/// inputs are not judged. Reads the node models [`CheckInput::new`] took, not the
/// service maps.
pub fn check(facts: &CheckInput) -> Vec<Finding> {
    let mut out = docker_ufw::check(facts);
    if !facts.is_full() {
        return out;
    }
    let mut judged = false;
    let mut blocked: Vec<(Flow, Block)> = Vec::new();
    let mut maybe: Vec<(Flow, Block, String)> = Vec::new();
    let mut undecided: Vec<(Flow, String)> = Vec::new();
    let mut index: Option<Index> = None;
    for family in [Family::Ip, Family::Ip6] {
        let Some(model) = facts.nodes.get(family) else {
            continue;
        };
        judged = true;
        let index = index.get_or_insert_with(|| Index::build(facts.ruleset));
        for flow in flows(model, index) {
            match judge(facts, index, &flow) {
                Fate::Open => {}
                Fate::Blocked(b) => blocked.push((flow, b)),
                Fate::Maybe(b, why) => maybe.push((flow, b, why)),
                Fate::Undecided(why) => undecided.push((flow, why)),
            }
        }
    }
    if !judged {
        return out;
    }
    for id in [ID_FORWARD, ID_INPUT] {
        out.push(finding(facts, id, &blocked, &maybe, &undecided));
    }
    out
}

fn placeholder_node(v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10))
    } else {
        IpAddr::V4(Ipv4Addr::new(192, 0, 2, 10))
    }
}

/// The addresses a node address may be: anything but pod networks, ClusterIPs,
/// loopback and multicast.
fn node_class(m: &NodeModel) -> AddrSet {
    let mut not: Vec<AddrMatch> = m
        .pod_cidrs
        .iter()
        .map(|(c, _)| AddrMatch::Net(*c))
        .collect();
    not.extend(
        m.cluster_ips
            .iter()
            .map(|ip| AddrMatch::Net(plumb_trace::addr::Cidr::host(*ip))),
    );
    let special = if m.v6 {
        ["::1/128", "ff00::/8"]
    } else {
        ["127.0.0.0/8", "224.0.0.0/4"]
    };
    not.extend(
        special
            .iter()
            .filter_map(|s| plumb_trace::addr::Cidr::parse(s))
            .map(AddrMatch::Net),
    );
    let excluded = AddrSet::of_match(&AddrMatch::Any(not), m.v6);
    AddrSet {
        v6: m.v6,
        set: excluded
            .set
            .complement(if m.v6 { u128::MAX } else { u32::MAX as u128 }),
    }
}

/// Pod addresses: the pod networks when known, else what a node address may be
/// (`nodes`, the [`node_class`] of `m`).
fn pod_class(m: &NodeModel, nodes: &AddrSet) -> AddrSet {
    if m.pod_cidrs.is_empty() {
        return nodes.clone();
    }
    AddrSet::of_match(
        &AddrMatch::Any(
            m.pod_cidrs
                .iter()
                .map(|(c, _)| AddrMatch::Net(*c))
                .collect(),
        ),
        m.v6,
    )
}

/// An address of `class` at `fraction` of its first range, away from its edges.
fn pick_in(class: &AddrSet, fraction: u128) -> Option<IpAddr> {
    let (a, b) = *class.set.ranges().first()?;
    let span = b - a;
    let v = a + span / 8 * fraction + span.min(7).min(span / 2);
    Some(if class.v6 {
        IpAddr::V6(Ipv6Addr::from_bits(v))
    } else {
        IpAddr::V4(Ipv4Addr::from_bits(v as u32))
    })
}

/// The flows this node needs, given what its rules show.
fn flows(m: &NodeModel, index: &Index) -> Vec<Flow> {
    let mut out = Vec::new();
    // The node's own address when the rules name it (kube-proxy's nftables mode tests
    // `ip daddr @nodeport-ips`), else a placeholder, whose tests are flagged below.
    let node_ip = m
        .node_addrs
        .first()
        .copied()
        .unwrap_or_else(|| placeholder_node(m.v6));
    let mut local_addrs = vec![plumb_trace::addr::Cidr::host(node_ip)];
    local_addrs.extend(
        m.node_addrs
            .iter()
            .skip(1)
            .map(|a| plumb_trace::addr::Cidr::host(*a)),
    );
    let node = Node {
        local_addrs,
        ..Default::default()
    };
    // Built once: with 10k Services it excludes 10k ClusterIPs.
    let nodes = node_class(m);
    let pods = pod_class(m, &nodes);
    let src_pods = (!m.pod_cidrs.is_empty()).then(|| pods.clone());
    let pod_cidr_text = if m.pod_cidrs.is_empty() {
        "pod network not shown by the rules".to_string()
    } else {
        m.pod_cidrs
            .iter()
            .map(|(c, _)| format!("{}/{}", c.addr, c.len))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let flow = |name: String, packet: Packet, arrives, leaves| Flow {
        name,
        packet,
        src: None,
        dst_class: None,
        arrives,
        leaves,
        only_if: None,
        breaks: String::new(),
        severity: Severity::High,
        node: node.clone(),
    };
    // INPUT: what other nodes send to this one.
    for np in &m.node_inbound {
        let mut p = Packet::new(node_ip, np.port.unwrap_or(0), np.proto, Origin::External);
        if np.port.is_none() {
            p.dport = None;
        }
        let port = match np.port {
            Some(n) => format!("{n}/{}", np.proto.name()),
            None => format!("IP protocol {}", np.proto.number()),
        };
        let mut f = flow(
            format!("{port} from other nodes ({})", np.what),
            p,
            Side::Network,
            Side::Local,
        );
        f.dst_class = Some(nodes.clone());
        f.only_if = np.only_if.clone();
        f.breaks = np.because.clone();
        f.severity = if np.port == Some(10250) {
            Severity::Medium
        } else {
            Severity::High
        };
        out.push(f);
    }
    if let Some(api) = &m.api {
        for &(ep, ep_port) in api.endpoints.iter().take(1) {
            // Through the ClusterIP (needs the nat table to see the DNAT).
            if m.has_nat && index.missing_tables(m.v6).is_empty() {
                let p = Packet::new(api.cluster_ip, api.port, Proto::Tcp, Origin::Pod);
                let mut f = flow(
                    format!(
                        "pod -> kubernetes API via ClusterIP {}:{} -> {ep}:{ep_port}",
                        api.cluster_ip, api.port
                    ),
                    p,
                    Side::Pod,
                    Side::Network,
                );
                f.src = src_pods.clone();
                f.breaks = "pods (CoreDNS, the CNI, controllers) talk to the API server through the kubernetes Service".into();
                f.severity = Severity::Critical;
                out.push(f);
            }
            // Pods on this node reaching an API server that runs here.
            let p = Packet::new(node_ip, ep_port, Proto::Tcp, Origin::Pod);
            let mut f = flow(
                format!("pod -> API server on this node ({ep_port}/tcp)"),
                p,
                Side::Pod,
                Side::Local,
            );
            f.src = src_pods.clone();
            f.dst_class = Some(nodes.clone());
            f.only_if = Some(format!("if this node serves the Kubernetes API ({ep})"));
            f.breaks = "pods reach the API server at its endpoint".into();
            f.severity = Severity::Critical;
            out.push(f);
            let p = Packet::new(node_ip, ep_port, Proto::Tcp, Origin::External);
            let mut f = flow(
                format!("{ep_port}/tcp from other nodes (Kubernetes API)"),
                p,
                Side::Network,
                Side::Local,
            );
            f.dst_class = Some(nodes.clone());
            f.only_if = Some(format!("if this node serves the Kubernetes API ({ep})"));
            f.breaks = "kubelets and pods of other nodes reach the API server".into();
            out.push(f);
        }
    }
    if let Some(dns) = &m.dns
        && m.has_nat
        && index.missing_tables(m.v6).is_empty()
    {
        let p = Packet::new(dns.cluster_ip, dns.port, dns.proto, Origin::Pod);
        let mut f = flow(
            format!("pod -> {} {}:{}/udp", dns.name, dns.cluster_ip, dns.port),
            p,
            Side::Pod,
            Side::Either,
        );
        f.src = src_pods.clone();
        f.breaks = "pods resolve names through kube-dns".into();
        out.push(f);
    }
    if m.has_nat && index.missing_tables(m.v6).is_empty() {
        for (np, proto, svc) in &m.node_ports {
            let p = Packet::new(node_ip, *np, *proto, Origin::External);
            let mut f = flow(
                format!("NodePort {np}/{} ({svc}) from outside", proto.name()),
                p,
                Side::Network,
                Side::Either,
            );
            f.dst_class = Some(nodes.clone());
            f.breaks = "clients reach the Service on every node's NodePort".into();
            f.severity = Severity::Medium;
            out.push(f);
        }
    }
    // FORWARD: pod traffic between nodes, both ways, and between pods of this node.
    let remote_pod = pick_in(&pods, 6);
    let local_pod = pick_in(&pods, 2);
    if let (Some(remote), Some(local)) = (remote_pod, local_pod) {
        for (name, dst, origin, arrives, leaves) in [
            (
                "pod -> pod on another node",
                remote,
                Origin::Pod,
                Side::Pod,
                Side::Network,
            ),
            (
                "pod on another node -> pod on this node",
                local,
                Origin::External,
                Side::Network,
                Side::Pod,
            ),
            // Between two pods of this node: routed from veth to veth (Calico, Cilium
            // legacy routing) or bridged on cni0/docker0, which FORWARD sees because
            // Kubernetes requires bridge-nf-call-iptables.
            (
                "pod -> pod on this node",
                local,
                Origin::Pod,
                Side::Pod,
                Side::Pod,
            ),
        ] {
            let p = Packet::new(dst, 80, Proto::Tcp, origin);
            let mut f = flow(
                format!("{name} (new TCP connection; {pod_cidr_text})"),
                p,
                arrives,
                leaves,
            );
            f.src = src_pods.clone();
            f.dst_class = Some(pods.clone());
            f.breaks = "pods on different nodes talk to each other and to Service endpoints on other nodes".into();
            out.push(f);
        }
    }
    out
}

/// Patterns as trace interface patterns.
fn patterns(list: &[&str]) -> Vec<IfacePattern> {
    list.iter().map(|s| IfacePattern::parse(s)).collect()
}

/// What is known about every packet of the flow, as constraints facts: (fact, holds).
fn flow_facts(flow: &Flow) -> Vec<(Fact, bool)> {
    let mut out = Vec::new();
    if let Some(s) = &flow.src {
        out.push((Fact::Src(s.clone()), true));
    }
    match flow.arrives {
        Side::Pod => out.push((Fact::InIface(patterns(TUNNELS)), false)),
        Side::Network => out.push((Fact::InIface(patterns(POD_SIDE)), false)),
        Side::Local | Side::Either => {}
    }
    match flow.leaves {
        Side::Pod => out.push((Fact::OutIface(patterns(TUNNELS)), false)),
        Side::Network => out.push((Fact::OutIface(patterns(POD_SIDE)), false)),
        Side::Local | Side::Either => {}
    }
    out
}

/// Whether an outcome is possible for the flow (its assumptions and the flow's facts
/// have packets in common).
fn relevant(o: &Outcome, known: &[(Fact, bool)]) -> bool {
    let mut c = o.constraints.clone();
    known.iter().all(|(f, holds)| c.assume(f, *holds))
}

/// The step that decided a DROP/REJECT outcome: the matched rule, or the policy.
fn deciding_step(o: &Outcome) -> Option<&plumb_trace::Step> {
    o.steps
        .iter()
        .rev()
        .find(|s| matches!(s.kind, StepKind::Matched | StepKind::Policy))
}

fn judge(facts: &CheckInput, index: &Index, flow: &Flow) -> Fate {
    let t = trace(index, &flow.packet, &flow.node);
    if let Some(why) = &t.incomplete {
        return Fate::Undecided(why.clone());
    }
    let known = flow_facts(flow);
    let relevant: Vec<&Outcome> = t.outcomes.iter().filter(|o| relevant(o, &known)).collect();
    let mut first_block: Option<(Block, &Outcome)> = None;
    let mut all_blocked = !relevant.is_empty();
    for o in &relevant {
        let stopped = matches!(o.verdict, Verdict::Drop | Verdict::Reject)
            && deciding_step(o).is_some_and(|s| {
                let chain = &index.chain(s.chain).chain.name;
                s.kind == StepKind::Policy
                    || !(policy_owned(chain) || owned_table(index.table_of(s.chain)))
            });
        if !stopped {
            all_blocked = false;
            continue;
        }
        if first_block.is_none()
            && let Some(b) = block_of(facts, index, o)
        {
            first_block = Some((b, o));
        }
    }
    let Some((block, _)) = first_block else {
        return Fate::Open;
    };
    // Certain only when no blocking outcome rests on something plumb cannot see, and
    // none depends on a placeholder address. The trace forks on every condition it cannot
    // decide (a rate limit, a conntrack state) and follows both branches: when every
    // outcome it found is stopped, the fork's conditions decide nothing (UFW's
    // rate-limited LOG rule before its DROP policy is such a fork). Only a fork whose
    // outcomes differ leaves the verdict open. A placeholder address is different: the
    // trace followed one address for it, not every one it stands for.
    let doubt: Option<String> = if all_blocked {
        relevant
            .iter()
            .find_map(|o| placeholder_dependency(index, o, flow))
    } else {
        // Name what the stop rests on, when the trace knows (a condition it could not
        // decide, on the path of a stopped outcome).
        let on = relevant
            .iter()
            .filter(|o| matches!(o.verdict, Verdict::Drop | Verdict::Reject))
            .find_map(|o| o.constraints.atoms().first())
            .map(|a| format!(" (the stop rests on: {})", a.text))
            .unwrap_or_default();
        Some(format!(
            "other outcomes of the same flow are accepted: it depends on facts the rules leave open{on}"
        ))
    };
    match (doubt, &flow.only_if) {
        (None, None) => Fate::Blocked(block),
        (Some(d), _) => Fate::Maybe(block, d),
        (None, Some(cond)) => Fate::Maybe(block, format!("the node needs it only {cond}")),
    }
}

/// A rule on the path of `o` tests the destination address where the flow uses a
/// placeholder for it, and the test does not answer the same for every address the
/// placeholder stands for: the verdict depends on the real address.
fn placeholder_dependency(index: &Index, o: &Outcome, flow: &Flow) -> Option<String> {
    let class = flow.dst_class.as_ref()?;
    let v6 = flow.packet.dst.is_ipv6();
    for s in &o.steps {
        let (conds_of, only): (bool, Option<u16>) = match s.kind {
            StepKind::Matched => (true, None),
            StepKind::NotMatched(Some(i)) => (true, Some(i)),
            _ => (false, None),
        };
        if !conds_of {
            continue;
        }
        let Some(rule) = index.rules(s.chain).iter().find(|r| r.rule == s.rule) else {
            continue;
        };
        let items = index.items(s.chain, rule);
        if only.is_some() && fails_on_known_fields(items, &flow.packet) {
            // The rule misses this flow whatever the destination address.
            continue;
        }
        for (i, item) in items.iter().enumerate() {
            match item {
                Item::Act(Action::Dnat(_)) if s.kind == StepKind::Matched => {
                    // After a DNAT the destination is the real endpoint.
                    return None;
                }
                Item::Cond(Cond::Dst(m, _)) if only.is_none_or(|k| k as usize == i) => {
                    let set = AddrSet::of_match(m, v6);
                    if !set.covers(class) && !set.disjoint(class) {
                        let text = index
                            .chain(s.chain)
                            .chain
                            .rules
                            .get(s.rule as usize)
                            .map(|r| r.text.trim().to_string())
                            .unwrap_or_default();
                        return Some(format!(
                            "`{text}` tests the destination address, which the rules do not show for this node"
                        ));
                    }
                }
                Item::Act(_) => break,
                _ => {}
            }
        }
    }
    None
}

/// A condition before the rule's first action fails on the packet's protocol or
/// destination port, which the flow knows.
fn fails_on_known_fields(items: &[Item], p: &Packet) -> bool {
    let proto = p.proto.number();
    items
        .iter()
        .take_while(|i| matches!(i, Item::Cond(_)))
        .any(|i| match i {
            Item::Cond(Cond::Proto(x, neg)) => (*x == proto) == *neg,
            Item::Cond(Cond::ModuleProto(x)) => *x != proto,
            Item::Cond(Cond::Dport(r, neg)) => match p.dport {
                Some(d) => r.iter().any(|r| r.contains(d)) == *neg,
                None => false,
            },
            _ => false,
        })
}

/// The evidence of a blocking outcome: the jumps that led to the stopping rule, and it.
fn block_of(facts: &CheckInput, index: &Index, o: &Outcome) -> Option<Block> {
    let last = deciding_step(o)?;
    let chain = index.chain(last.chain);
    let table: &Table = index.table_of(last.chain);
    // The jumps that led into the stopping chain, innermost last.
    let mut evidence = Vec::new();
    let mut want = chain.chain.name.as_ref();
    for s in
        o.steps.iter().rev().filter(|s| {
            s.kind == StepKind::Matched && s.hook == last.hook && !std::ptr::eq(*s, last)
        })
    {
        let c = index.chain(s.chain);
        let Some(r) = c.chain.rules.get(s.rule as usize) else {
            continue;
        };
        if r.chain_references().iter().any(|x| x.chain == want) {
            evidence.insert(0, facts.rule(index.table_of(s.chain), r));
            want = c.chain.name.as_ref();
        }
    }
    let (rule, packets) = if last.kind == StepKind::Policy {
        evidence.push(facts.chain(table, chain.chain));
        let policy = chain
            .chain
            .policy()
            .map(|p| p.as_iptables().to_string())
            .unwrap_or_default();
        (
            // nft tables are named with their family (`inet filter`), as nft does.
            if table.backend == Backend::Nftables {
                format!(
                    "policy {} of {} {} {}",
                    policy.to_ascii_lowercase(),
                    table.family.as_str(),
                    table.name,
                    chain.chain.name
                )
            } else {
                format!("policy {policy} of {} {}", table.name, chain.chain.name)
            },
            chain
                .chain
                .base
                .as_ref()
                .and_then(|b| b.counters.as_ref())
                .map(|c| c.packets),
        )
    } else {
        let r = chain.chain.rules.get(last.rule as usize)?;
        evidence.push(facts.rule(table, r));
        (
            format!(
                "{} rule {} (`{}`)",
                chain.chain.name,
                plumb_ruleset::position_at(last.rule as usize),
                shown_rule(r)
            ),
            r.counters().as_ref().map(|c| c.packets),
        )
    };
    Some(Block {
        hook: last.hook,
        evidence,
        rule,
        packets,
        nft: (table.backend == Backend::Nftables).then(|| {
            (
                format!("{} {}", table.family.as_str(), table.name),
                chain.chain.name.to_string(),
            )
        }),
    })
}

/// A rule as a title shows it: a listing row without its `pkts bytes` columns (the
/// title gives the packet count in words) and with its column padding collapsed.
fn shown_rule(r: &plumb_ruleset::Rule) -> String {
    let read = r.text.read();
    let text = super::rule_body_text(&read);
    if !matches!(r.body, plumb_ruleset::RuleBody::Approximate(_)) {
        return text.to_string();
    }
    let skip = if r.counters().is_some() { 2 } else { 0 };
    text.split_whitespace()
        .skip(skip)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The finding of `id` from the flows judged (INPUT blocks go to `input-drop-blocks-node`,
/// the rest to `forward-drop-blocks-pods`).
fn finding(
    facts: &CheckInput,
    id: &str,
    blocked: &[(Flow, Block)],
    maybe: &[(Flow, Block, String)],
    undecided: &[(Flow, String)],
) -> Finding {
    let mine = |b: &Block| (b.hook == HookId::Input) == (id == ID_INPUT);
    let hard: Vec<&(Flow, Block)> = blocked.iter().filter(|(_, b)| mine(b)).collect();
    let soft: Vec<&(Flow, Block, String)> = maybe.iter().filter(|(_, b, _)| mine(b)).collect();
    let approx = if facts.ruleset.approximate {
        " (read from a listing)"
    } else {
        ""
    };
    let hook = if id == ID_INPUT { "INPUT" } else { "FORWARD" };
    let maybe_lines: Vec<String> = soft
        .iter()
        .map(|(f, b, why)| format!("{} may be stopped by {}: {why}", f.name, b.rule))
        .collect();
    if !hard.is_empty() {
        let severity = hard
            .iter()
            .map(|(f, _)| f.severity)
            .max()
            .unwrap_or(Severity::High);
        let (f0, b0) = hard[0];
        let counted = b0
            .packets
            .filter(|n| *n > 0)
            .map(|n| format!("; it has stopped {n} packets"))
            .unwrap_or_default();
        let others: Vec<&str> = hard[1..].iter().map(|(f, _)| f.name.as_str()).collect();
        let more = if others.is_empty() {
            String::new()
        } else {
            format!(" (also: {})", others.join("; "))
        };
        let title = format!(
            "{hook}: the host firewall stops {}: {}{counted}{more}{approx}",
            f0.name, b0.rule
        );
        let mut evidence: Vec<Evidence> = Vec::new();
        for (_, b) in &hard {
            for e in &b.evidence {
                if !evidence.contains(e) {
                    evidence.push(e.clone());
                }
            }
        }
        let mut explanation = format!(
            "plumb traced the traffic a Kubernetes node needs through this ruleset. Every way a packet of \"{}\" can take ends at {} ({}). ",
            f0.name, b0.rule, f0.breaks
        );
        explanation.push_str(if id == ID_INPUT {
            "A REJECT here shows up as \"no route to host\" (icmp-host-prohibited) or \"connection refused\"; a DROP as a timeout."
        } else {
            "Forwarded pod traffic that meets it fails with \"no route to host\" (REJECT) or times out (DROP), often on only some nodes."
        });
        for l in &maybe_lines {
            explanation.push_str(&format!(" Also: {l}."));
        }
        return Finding::problem(id, severity, title)
            .with_evidence(evidence)
            .explain(explanation)
            .fix(match &b0.nft {
                Some((table, chain)) if id == ID_INPUT => format!("Accept the node's ports before the drop (for example `nft insert rule {table} {chain} tcp dport 10250 accept`, and the CNI's port), or open them in the firewall's own configuration (nftables.conf, the firewalld zone)."),
                Some((table, chain)) => format!("Accept forwarding for the pod network before the drop (for example `nft insert rule {table} {chain} ip saddr <pod CIDR> accept` and `ip daddr <pod CIDR>`), or in the firewall's own configuration (nftables.conf, the firewalld zone)."),
                None => if id == ID_INPUT {
                "Accept the node's ports before the catch-all REJECT/DROP (for example `iptables -I INPUT -p tcp --dport 10250 -j ACCEPT`, and the CNI's port), or remove the host firewall's catch-all on Kubernetes nodes (RHEL/CentOS: `systemctl disable --now iptables` of iptables-services; firewalld: open the ports in the zone)."
            } else {
                "Accept forwarding for the pod network before the catch-all (for example `iptables -I FORWARD -s <pod CIDR> -j ACCEPT` and `-d <pod CIDR>`), or remove the host firewall's FORWARD catch-all on Kubernetes nodes."
            }.to_string(),
            })
            .do_not(DO_NOT_FLUSH);
    }
    if !soft.is_empty() {
        let (f0, b0, why) = soft[0];
        let title = format!(
            "{hook}: {} may be stopped by {}; not decidable from this input ({why}){approx}",
            f0.name, b0.rule
        );
        let mut f = Finding::unknown(id, Severity::Low, title)
            .with_evidence(b0.evidence.clone())
            .explain(format!(
                "The trace of the flows a node needs reaches a host-firewall DROP/REJECT only under conditions the input does not settle. {}",
                maybe_lines.join(". ")
            ));
        f.status = Status::Unknown;
        return f;
    }
    if let Some((f0, why)) = undecided
        .iter()
        .find(|(f, _)| (f.leaves == Side::Local) == (id == ID_INPUT))
    {
        return Finding::unknown(
            id,
            Severity::Low,
            format!(
                "{hook}: could not decide whether the host firewall stops {}: the trace has {why}{approx}",
                f0.name
            ),
        )
        .explain("Every rule whose matches plumb cannot see (a listing without `-v` hides the interfaces of every rule) doubles the ways a packet can go; past plumb's bound it stops rather than guess. `iptables-save` or `iptables -nvL` output lets it decide.");
    }
    Finding::ok(
        id,
        if id == ID_INPUT {
            "INPUT accepts what other nodes send to this node (traced)"
        } else {
            "FORWARD lets pod traffic through (traced)"
        },
    )
}

pub use plumb_findings::Inbound;

/// Traces a packet of `proto` to `port` that another node sends to this one through the
/// host firewall's INPUT (IPv4), judged as `input-drop-blocks-node` judges the ports
/// the node's current CNI uses. For ports the node does not use yet (`plumb cilium
/// preflight`: Cilium's tunnel ports on a Canal node).
pub fn inbound(facts: &CheckInput, proto: Proto, port: u16) -> Inbound {
    if !facts.is_full() {
        return Inbound::Unknown(
            "the ruleset is partial, truncated or damaged: a block seen there may have an ACCEPT before it that was left out".into(),
        );
    }
    if !filters(facts, Family::Ip) {
        return Inbound::Open;
    }
    // The model the check's own pass took, when it judges IPv4; else read it now.
    let mut model = match facts.nodes.get(Family::Ip) {
        Some(m) => m.clone(),
        None => node::infer(facts, Family::Ip),
    };
    model.node_inbound = vec![node::NodePort {
        proto,
        port: Some(port),
        what: format!("{port}/{}", proto.name()),
        because: String::new(),
        only_if: None,
    }];
    let index = Index::build(facts.ruleset);
    let Some(flow) = flows(&model, &index)
        .into_iter()
        .find(|f| f.leaves == Side::Local && f.packet.dport == Some(port))
    else {
        return Inbound::Unknown("no flow to trace".into());
    };
    match judge(facts, &index, &flow) {
        Fate::Open => Inbound::Open,
        Fate::Blocked(b) => Inbound::Blocked {
            rule: b.rule,
            evidence: b.evidence,
        },
        Fate::Maybe(b, why) => Inbound::Maybe {
            rule: b.rule,
            why,
            evidence: b.evidence,
        },
        Fate::Undecided(why) => Inbound::Unknown(format!("the trace has {why}")),
    }
}

#[cfg(test)]
mod tests;
