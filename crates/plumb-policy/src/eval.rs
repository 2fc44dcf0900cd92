//! One connection judged: the source pod's egress, the destination's ingress, and the
//! policies and rules that decide each.
//!
//! A direction is *isolated* when at least one policy selects the pod for it; an
//! isolated direction allows exactly what some rule of those policies allows, a
//! non-isolated one allows everything. The connection is allowed when both directions
//! allow it.

use crate::model::{Cluster, NetworkPolicy, Peer, Pod, PolicyPort, PortRef, Rule};
use serde::Serialize;

/// What the connection is: from a pod to a pod, on a port.
#[derive(Clone, Debug)]
pub struct Connection<'a> {
    /// The client pod.
    pub from: &'a Pod,
    /// The server pod.
    pub to: &'a Pod,
    /// The destination port (the pod's, after any Service DNAT).
    pub port: u16,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: &'a str,
}

/// A policy's part in one direction's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PolicyVerdict {
    /// `namespace/name`.
    pub policy: String,
    /// The rules (0-based index in its ingress or egress list) that allow the
    /// connection; empty: the policy selects the pod and allows none of it.
    pub allowing_rules: Vec<usize>,
}

/// One direction's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Direction {
    /// Whether this direction lets the connection through.
    pub allowed: bool,
    /// Whether any policy selects the pod for this direction (false: nothing restricts
    /// it, and it is allowed).
    pub isolated: bool,
    /// Every policy selecting the pod for this direction, with its allowing rules.
    pub policies: Vec<PolicyVerdict>,
}

/// The answer for a connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// Both directions allow it.
    pub allowed: bool,
    /// The source pod's egress.
    pub egress: Direction,
    /// The destination pod's ingress.
    pub ingress: Direction,
}

/// Judges `c` against every policy of `cluster`.
pub fn check(cluster: &Cluster, c: &Connection<'_>) -> Verdict {
    let egress = direction(
        cluster,
        c,
        c.from,
        |p| p.egress_isolation,
        |p| &p.egress,
        c.to,
    );
    let ingress = direction(
        cluster,
        c,
        c.to,
        |p| p.ingress_isolation,
        |p| &p.ingress,
        c.from,
    );
    Verdict {
        allowed: egress.allowed && ingress.allowed,
        egress,
        ingress,
    }
}

/// `subject` is the pod the policies select (source for egress, destination for
/// ingress); `peer` the other end.
fn direction(
    cluster: &Cluster,
    c: &Connection<'_>,
    subject: &Pod,
    isolates: impl Fn(&NetworkPolicy) -> bool,
    rules: impl Fn(&NetworkPolicy) -> &Vec<Rule>,
    peer: &Pod,
) -> Direction {
    let mut policies = Vec::new();
    for p in cluster
        .policies
        .iter()
        .filter(|p| p.namespace == subject.namespace && isolates(p))
        .filter(|p| p.pod_selector.matches(&subject.labels))
    {
        let allowing_rules = rules(p)
            .iter()
            .enumerate()
            .filter(|(_, r)| rule_allows(cluster, p, r, peer, c))
            .map(|(i, _)| i)
            .collect();
        policies.push(PolicyVerdict {
            policy: p.id(),
            allowing_rules,
        });
    }
    let isolated = !policies.is_empty();
    Direction {
        allowed: !isolated || policies.iter().any(|p| !p.allowing_rules.is_empty()),
        isolated,
        policies,
    }
}

fn rule_allows(
    cluster: &Cluster,
    policy: &NetworkPolicy,
    rule: &Rule,
    peer: &Pod,
    c: &Connection<'_>,
) -> bool {
    let peer_ok = rule.peers.is_empty()
        || rule
            .peers
            .iter()
            .any(|p| peer_matches(cluster, policy, p, peer));
    let port_ok = rule.ports.is_empty() || rule.ports.iter().any(|p| port_matches(p, c));
    peer_ok && port_ok
}

fn peer_matches(cluster: &Cluster, policy: &NetworkPolicy, peer: &Peer, pod: &Pod) -> bool {
    if let Some(block) = &peer.ip_block {
        // ipBlock is meant for addresses outside the cluster; for a pod, plumb follows
        // what the common CNIs do and matches its IP.
        return pod.ip.is_some_and(|ip| block.contains(ip));
    }
    let ns_ok = match &peer.namespace_selector {
        Some(s) => s.matches(&cluster.namespace_labels(&pod.namespace)),
        None => pod.namespace == policy.namespace,
    };
    let pod_ok = peer
        .pod_selector
        .as_ref()
        .is_none_or(|s| s.matches(&pod.labels));
    ns_ok && pod_ok
}

fn port_matches(p: &PolicyPort, c: &Connection<'_>) -> bool {
    if !p.protocol.eq_ignore_ascii_case(c.protocol) {
        return false;
    }
    match &p.port {
        None => true,
        Some(PortRef::Number(n)) => match p.end_port {
            Some(end) => (*n..=end).contains(&c.port),
            None => *n == c.port,
        },
        // A named port is the destination pod's, for ingress and egress alike.
        Some(PortRef::Name(name)) => c.to.ports.iter().any(|cp| {
            cp.name.as_deref() == Some(name.as_str())
                && cp.port == c.port
                && cp.protocol.eq_ignore_ascii_case(c.protocol)
        }),
    }
}
