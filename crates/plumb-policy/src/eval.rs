//! One connection judged: the source's egress, the destination's ingress, and the
//! policies and rules that decide each — Kubernetes NetworkPolicies and Cilium
//! policies together, as Cilium enforces both.
//!
//! A direction is *isolated* when a NetworkPolicy selects the pod for it, or a Cilium
//! policy selecting it puts it in default deny there; an isolated direction allows
//! exactly what some allow rule allows, a non-isolated one everything. A matching
//! Cilium deny rule (`ingressDeny`/`egressDeny`) beats every allow. The connection is
//! allowed when both directions allow it. L7 rules on the allowing rules do not block
//! the connection: they send it to the proxy, which judges each request.
//!
//! Two ways in, with the same answers: [`check`] looks at every policy of the cluster
//! (the reference), [`Index`] finds the policies selecting each pod once and answers
//! queries and matrices from that.

use crate::cilium::{self, CiliumPolicy, CiliumRule, L7Rules, Request, Subject};
use crate::model::{Cluster, Labels, NetworkPolicy, Node, Peer, Pod, PolicyPort, PortRef, Rule};
use serde::Serialize;
use std::borrow::Cow;
use std::collections::HashMap;
use std::net::IpAddr;

/// One end of a connection.
#[derive(Clone, Copy, Debug)]
pub enum Endpoint<'a> {
    /// A pod of the cluster.
    Pod(&'a Pod),
    /// An address outside the cluster (Cilium's `world`), with the DNS name the client
    /// resolved to reach it, when known (what `toFQDNs` rules read).
    World {
        /// The address.
        ip: IpAddr,
        /// The name it was looked up as.
        name: Option<&'a str>,
    },
    /// One of Cilium's reserved identities: `host`, `remote-node`, `kube-apiserver`,
    /// `health`, `init`, `unmanaged` or `ingress`; for `host`/`remote-node` the node,
    /// when known (what `nodeSelector`/`fromNodes` read).
    Reserved {
        /// The entity's name.
        entity: &'a str,
        /// The node.
        node: Option<&'a Node>,
    },
}

/// The reserved identities an [`Endpoint::Reserved`] may name.
pub const RESERVED: &[&str] = &[
    "host",
    "remote-node",
    "kube-apiserver",
    "health",
    "init",
    "unmanaged",
    "ingress",
];

impl Endpoint<'_> {
    /// How it is named on the command line: `ns/pod`, `world:IP[@name]`, `host[:node]`.
    pub fn id(&self) -> String {
        match self {
            Endpoint::Pod(p) => p.id(),
            Endpoint::World { ip, name: None } => format!("world:{ip}"),
            Endpoint::World { ip, name: Some(n) } => format!("world:{ip}@{n}"),
            Endpoint::Reserved { entity, node: None } => entity.to_string(),
            Endpoint::Reserved {
                entity,
                node: Some(n),
            } => format!("{entity}:{}", n.name),
        }
    }

    fn pod(&self) -> Option<&Pod> {
        match self {
            Endpoint::Pod(p) => Some(p),
            _ => None,
        }
    }

    fn ip(&self) -> Option<IpAddr> {
        match self {
            Endpoint::Pod(p) => p.ip,
            Endpoint::World { ip, .. } => Some(*ip),
            Endpoint::Reserved { .. } => None,
        }
    }
}

/// What the connection is.
#[derive(Clone, Debug)]
pub struct Connection<'a> {
    /// The client.
    pub from: Endpoint<'a>,
    /// The server.
    pub to: Endpoint<'a>,
    /// The destination port (the pod's, after any Service DNAT); the ICMP type for
    /// `ICMP`/`ICMPV6`.
    pub port: u16,
    /// `TCP`, `UDP`, `SCTP`, `ICMP` or `ICMPV6`.
    pub protocol: &'a str,
    /// The request, to judge L7 rules against (None: the L7 rules are only listed).
    pub request: Option<&'a Request>,
}

/// A policy's part in one direction's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PolicyVerdict {
    /// `NetworkPolicy`, `CiliumNetworkPolicy` or `CiliumClusterwideNetworkPolicy`.
    pub kind: &'static str,
    /// `namespace/name` (`name` for a cluster-wide policy).
    pub policy: String,
    /// The rules (0-based index in its ingress or egress list; for `denying`, in its
    /// ingressDeny or egressDeny list) that match the connection.
    pub allowing_rules: Vec<usize>,
}

/// L7 rules that apply to the connection: it is redirected to the proxy, which
/// allows only the requests these rules allow.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct L7Match {
    /// The policy.
    pub policy: String,
    /// `ingress` or `egress`.
    pub direction: &'static str,
    /// The rule's index.
    pub rule: usize,
    /// The rules, in words (`http GET /public`, `dns matchPattern *.io`).
    pub rules: Vec<String>,
}

/// One direction's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Direction {
    /// Whether this direction lets the connection through (at L3/L4).
    pub allowed: bool,
    /// Whether the pod is in default deny for this direction (false: only a deny
    /// rule can stop the connection).
    pub isolated: bool,
    /// Every policy selecting the pod for this direction, with its allowing rules.
    pub policies: Vec<PolicyVerdict>,
    /// Policies whose deny rules match (they win over any allow).
    pub denied_by: Vec<PolicyVerdict>,
    /// L7 rules that the connection is subject to (empty: none, or an allowing rule
    /// without L7 rules makes them moot).
    pub l7: Vec<L7Match>,
    /// The request's fate under `l7`, when a request was given and L7 rules apply.
    pub request_allowed: Option<bool>,
    /// `toFQDNs` selectors that would allow the connection if the address was
    /// resolved from one of these names: offline, that depends on DNS.
    pub depends_on_dns: Vec<String>,
}

/// The answer for a connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// Both directions allow it (L3/L4), and the request, when one was given and L7
    /// rules apply, passes them.
    pub allowed: bool,
    /// The source's egress.
    pub egress: Direction,
    /// The destination's ingress.
    pub ingress: Direction,
}

impl Verdict {
    /// Whether the answer depends on DNS (a `toFQDNs` rule could allow it).
    pub fn depends_on_dns(&self) -> bool {
        !self.allowed
            && (!self.egress.depends_on_dns.is_empty() || !self.ingress.depends_on_dns.is_empty())
    }
}

/// What one end looks like to policies: Cilium's labels for it (keys `source:key`),
/// computed once.
struct Side<'a> {
    ep: Endpoint<'a>,
    labels: Cow<'a, Labels>,
}

/// Cilium's labels of an endpoint: a pod's own labels, its namespace, its namespace's
/// labels, its service account and cluster (all `k8s:`); `reserved:` labels for the
/// others.
pub fn cilium_labels(cluster: &Cluster, ep: &Endpoint<'_>) -> Labels {
    let mut l = Labels::new();
    match ep {
        Endpoint::Pod(p) => {
            for (k, v) in &p.labels {
                l.insert(format!("k8s:{k}"), v.clone());
            }
            for (k, v) in cluster.namespace_labels(&p.namespace).iter() {
                l.insert(
                    format!("k8s:{}{k}", cilium::NAMESPACE_LABELS_PREFIX),
                    v.clone(),
                );
            }
            l.insert(
                format!("k8s:{}", cilium::NAMESPACE_LABEL),
                p.namespace.clone(),
            );
            l.insert(
                "k8s:io.cilium.k8s.policy.serviceaccount".into(),
                p.service_account.clone(),
            );
            l.insert(
                "k8s:io.cilium.k8s.policy.cluster".into(),
                cluster.cluster_name.clone(),
            );
        }
        Endpoint::World { ip, .. } => {
            l.insert("reserved:world".into(), String::new());
            let fam = if ip.is_ipv4() {
                "world-ipv4"
            } else {
                "world-ipv6"
            };
            l.insert(format!("reserved:{fam}"), String::new());
        }
        Endpoint::Reserved { entity, .. } => {
            l.insert(format!("reserved:{entity}"), String::new());
        }
    }
    l
}

/// Judges `c` against every policy of `cluster` (the reference evaluation).
pub fn check(cluster: &Cluster, c: &Connection<'_>) -> Verdict {
    let from = Side {
        ep: c.from,
        labels: Cow::Owned(cilium_labels(cluster, &c.from)),
    };
    let to = Side {
        ep: c.to,
        labels: Cow::Owned(cilium_labels(cluster, &c.to)),
    };
    let all = |side: &Side<'_>| {
        selecting(
            cluster,
            side,
            0..cluster.policies.len(),
            0..cluster.cilium.len(),
        )
    };
    let (sel_from, sel_to) = (all(&from), all(&to));
    judge(cluster, c, &from, &to, &sel_from, &sel_to)
}

/// The policies selecting one endpoint, per direction.
#[derive(Clone, Debug, Default)]
struct Selecting {
    knp_ingress: Vec<usize>,
    knp_egress: Vec<usize>,
    cilium: Vec<usize>,
}

fn selecting(
    cluster: &Cluster,
    side: &Side<'_>,
    knp: impl Iterator<Item = usize>,
    cnp: impl Iterator<Item = usize>,
) -> Selecting {
    let mut s = Selecting::default();
    if let Endpoint::Pod(pod) = side.ep {
        for i in knp {
            let p = &cluster.policies[i];
            if p.namespace == pod.namespace && p.pod_selector.matches(&pod.labels) {
                if p.ingress_isolation {
                    s.knp_ingress.push(i);
                }
                if p.egress_isolation {
                    s.knp_egress.push(i);
                }
            }
        }
    }
    for i in cnp {
        if cilium_selects(&cluster.cilium[i], side) {
            s.cilium.push(i);
        }
    }
    s
}

fn cilium_selects(p: &CiliumPolicy, side: &Side<'_>) -> bool {
    match (&p.subject, side.ep) {
        // An endpointSelector selects pods (Cilium-managed endpoints); the host is
        // selected only by a nodeSelector (policy-language.rst, "Host Policies").
        (Subject::Endpoints(s), Endpoint::Pod(_)) => cilium::selects(s, &side.labels),
        (
            Subject::Nodes(s),
            Endpoint::Reserved {
                entity: "host",
                node,
            },
        ) => {
            let labels = node.map(|n| n.labels.clone()).unwrap_or_default();
            s.matches(&labels)
        }
        _ => false,
    }
}

fn judge(
    cluster: &Cluster,
    c: &Connection<'_>,
    from: &Side<'_>,
    to: &Side<'_>,
    sel_from: &Selecting,
    sel_to: &Selecting,
) -> Verdict {
    let egress = direction(cluster, c, false, from, to, sel_from);
    let ingress = direction(cluster, c, true, to, from, sel_to);
    let request_ok =
        egress.request_allowed.unwrap_or(true) && ingress.request_allowed.unwrap_or(true);
    Verdict {
        allowed: egress.allowed && ingress.allowed && request_ok,
        egress,
        ingress,
    }
}

/// Whether one direction lets the connection through at L3/L4: what
/// [`direction`] computes as `allowed`, without collecting the policies and rules
/// (the matrix path). A matching L7 rule allows here, as there.
fn direction_allows(
    cluster: &Cluster,
    c: &Connection<'_>,
    ingress: bool,
    subject: &Side<'_>,
    peer: &Side<'_>,
    sel: &Selecting,
) -> bool {
    let knp = if ingress {
        &sel.knp_ingress
    } else {
        &sel.knp_egress
    };
    let mut isolated = !knp.is_empty();
    let mut allow = knp.iter().any(|&i| {
        let p = &cluster.policies[i];
        let rules = if ingress { &p.ingress } else { &p.egress };
        rules
            .iter()
            .any(|r| knp_rule_allows(cluster, p, r, &peer.ep, c))
    });
    let mut no_dns = Vec::new();
    for &i in &sel.cilium {
        let p = &cluster.cilium[i];
        let (rules, deny, dd) = if ingress {
            (&p.ingress, &p.ingress_deny, p.default_deny_ingress)
        } else {
            (&p.egress, &p.egress_deny, p.default_deny_egress)
        };
        if rules.is_empty() && deny.is_empty() && !dd {
            continue;
        }
        isolated |= dd;
        if deny.iter().any(|r| {
            cilium_rule_matches(cluster, c, ingress, r, subject, peer, sel, &mut no_dns).is_some()
        }) {
            return false;
        }
        allow = allow
            || rules.iter().any(|r| {
                cilium_rule_matches(cluster, c, ingress, r, subject, peer, sel, &mut no_dns)
                    .is_some()
            });
        no_dns.clear();
    }
    !isolated || allow
}

/// `subject` is the end the policies select (source for egress, destination for
/// ingress); `peer` the other end.
fn direction(
    cluster: &Cluster,
    c: &Connection<'_>,
    ingress: bool,
    subject: &Side<'_>,
    peer: &Side<'_>,
    sel: &Selecting,
) -> Direction {
    let dir = if ingress { "ingress" } else { "egress" };
    let mut policies = Vec::new();
    let mut plain_allow = false;
    let knp = if ingress {
        &sel.knp_ingress
    } else {
        &sel.knp_egress
    };
    for &i in knp {
        let p = &cluster.policies[i];
        let rules = if ingress { &p.ingress } else { &p.egress };
        let allowing_rules: Vec<usize> = rules
            .iter()
            .enumerate()
            .filter(|(_, r)| knp_rule_allows(cluster, p, r, &peer.ep, c))
            .map(|(i, _)| i)
            .collect();
        plain_allow |= !allowing_rules.is_empty();
        policies.push(PolicyVerdict {
            kind: "NetworkPolicy",
            policy: p.id(),
            allowing_rules,
        });
    }
    let mut isolated = !policies.is_empty();
    let mut denied_by = Vec::new();
    let mut l7 = Vec::new();
    let mut depends_on_dns = Vec::new();
    for &i in &sel.cilium {
        let p = &cluster.cilium[i];
        let (allow, deny, dd) = if ingress {
            (&p.ingress, &p.ingress_deny, p.default_deny_ingress)
        } else {
            (&p.egress, &p.egress_deny, p.default_deny_egress)
        };
        if allow.is_empty() && deny.is_empty() && !dd {
            continue;
        }
        isolated |= dd;
        let mut allowing_rules = Vec::new();
        for (k, r) in allow.iter().enumerate() {
            let m = cilium_rule_matches(
                cluster,
                c,
                ingress,
                r,
                subject,
                peer,
                sel,
                &mut depends_on_dns,
            );
            if let Some(l7rules) = m {
                allowing_rules.push(k);
                match l7rules {
                    None => plain_allow = true,
                    Some(rules) => l7.push((
                        L7Match {
                            policy: p.id(),
                            direction: dir,
                            rule: k,
                            rules: rules.describe(),
                        },
                        rules,
                    )),
                }
            }
        }
        let denying: Vec<usize> = deny
            .iter()
            .enumerate()
            .filter(|(_, r)| {
                cilium_rule_matches(cluster, c, ingress, r, subject, peer, sel, &mut Vec::new())
                    .is_some()
            })
            .map(|(k, _)| k)
            .collect();
        if !denying.is_empty() {
            denied_by.push(PolicyVerdict {
                kind: p.kind,
                policy: p.id(),
                allowing_rules: denying,
            });
        }
        policies.push(PolicyVerdict {
            kind: p.kind,
            policy: p.id(),
            allowing_rules,
        });
    }
    let any_allow = plain_allow || !l7.is_empty();
    let allowed = denied_by.is_empty() && (!isolated || any_allow);
    // An allowing rule without L7 rules makes other rules' L7 rules for the same peer
    // and port moot (language.rst, "Layer 7 Examples"); so does a non-isolated
    // direction's default allow only where no L7 rule matches at all.
    let (l7, request_allowed) = if plain_allow || !allowed || l7.is_empty() {
        (Vec::new(), None)
    } else {
        let answer = c.request.map(|req| {
            l7.iter()
                .any(|(_, rules)| rules.allows(req).unwrap_or(false))
        });
        (l7.into_iter().map(|(m, _)| m).collect(), answer)
    };
    if allowed {
        depends_on_dns.clear();
    }
    depends_on_dns.sort();
    depends_on_dns.dedup();
    Direction {
        allowed,
        isolated,
        policies,
        denied_by,
        l7,
        request_allowed,
        depends_on_dns,
    }
}

/// Whether Cilium rule `r` matches the connection: None, or Some(its L7 rules for
/// the matching port, None when the port carries none).
#[allow(clippy::too_many_arguments)]
fn cilium_rule_matches<'r>(
    cluster: &Cluster,
    c: &Connection<'_>,
    ingress: bool,
    r: &'r CiliumRule,
    subject: &Side<'_>,
    peer: &Side<'_>,
    sel: &Selecting,
    depends_on_dns: &mut Vec<String>,
) -> Option<Option<&'r L7Rules>> {
    // AllowsWildcarding: ports without peers allow every peer; `{}` allows nothing.
    let l3 = if !r.has_l3() {
        r.has_l4()
    } else {
        r.endpoints.iter().any(|s| cilium::selects(s, &peer.labels))
            || r
                .entities
                .iter()
                .any(|e| cilium::entity_matches(e, &peer.labels, &cluster.cluster_name))
            // CIDR rules select only peers outside the cluster (language.rst, "IP/CIDR
            // based": not pods, not nodes).
            || matches!(peer.ep, Endpoint::World { ip, .. } if r.cidrs.iter().any(|b| b.contains(ip)))
            || r.nodes.iter().any(|s| match peer.ep {
                Endpoint::Reserved {
                    entity: "host" | "remote-node",
                    node: Some(n),
                } => s.matches(&n.labels),
                _ => false,
            })
            || fqdn_matches(cluster, c, ingress, r, subject, peer, sel, depends_on_dns)
    };
    if !l3 {
        return None;
    }
    let to_pod = if ingress {
        subject.ep.pod()
    } else {
        peer.ep.pod()
    };
    let icmp = match c.protocol {
        "ICMP" => Some("IPv4"),
        "ICMPV6" => Some("IPv6"),
        _ => None,
    };
    if r.ports.is_empty() && r.icmps.is_empty() {
        return Some(None);
    }
    if let Some(family) = icmp {
        return r
            .icmps
            .iter()
            .any(|f| f.family == family && u16::from(f.icmp_type) == c.port)
            .then_some(None);
    }
    let mut matched: Option<Option<&L7Rules>> = None;
    for pr in &r.ports {
        let port_ok = pr.ports.is_empty()
            || pr.ports.iter().any(|p| {
                let proto_ok = p.protocol == "ANY" || p.protocol.eq_ignore_ascii_case(c.protocol);
                proto_ok
                    && match &p.port {
                        None => true,
                        Some(PortRef::Number(n)) => match p.end_port {
                            Some(end) if end >= *n => (*n..=end).contains(&c.port),
                            _ => *n == c.port,
                        },
                        // Named ports are the destination's (endPort ignored).
                        Some(PortRef::Name(name)) => {
                            to_pod.is_some_and(|pod| named_port(pod, name, c))
                        }
                    }
            });
        if port_ok {
            match (&matched, &pr.l7) {
                (Some(None), _) => {}
                (_, None) => matched = Some(None),
                (None, Some(l7)) => matched = Some(Some(l7)),
                (Some(Some(_)), Some(_)) => {}
            }
        }
    }
    matched
}

/// `toFQDNs`: the peer is outside the cluster and was looked up by a selected name,
/// through Cilium's DNS proxy (an egress DNS L7 rule of the source allowing the name:
/// language.rst, "DNS based"). Without a name the answer depends on DNS.
#[allow(clippy::too_many_arguments)]
fn fqdn_matches(
    cluster: &Cluster,
    c: &Connection<'_>,
    ingress: bool,
    r: &CiliumRule,
    subject: &Side<'_>,
    peer: &Side<'_>,
    sel: &Selecting,
    depends_on_dns: &mut Vec<String>,
) -> bool {
    if ingress || r.fqdns.is_empty() {
        return false;
    }
    let Endpoint::World { name, .. } = peer.ep else {
        return false;
    };
    let Some(name) = name else {
        depends_on_dns.extend(r.fqdns.iter().map(|f| format!("toFQDNs {}", f.describe())));
        return false;
    };
    if !r.fqdns.iter().any(|f| f.matches(name)) {
        return false;
    }
    let query = Request::Dns {
        name: name.to_string(),
    };
    let _ = (c, subject);
    sel.cilium.iter().any(|&i| {
        cluster.cilium[i].egress.iter().any(|er| {
            er.ports.iter().any(|pr| {
                pr.l7.as_ref().is_some_and(|l7| {
                    matches!(l7, L7Rules::Dns(_)) && l7.allows(&query) == Some(true)
                })
            })
        })
    })
}

fn named_port(pod: &Pod, name: &str, c: &Connection<'_>) -> bool {
    pod.ports.iter().any(|cp| {
        cp.name.as_deref() == Some(name)
            && cp.port == c.port
            && cp.protocol.eq_ignore_ascii_case(c.protocol)
    })
}

fn knp_rule_allows(
    cluster: &Cluster,
    policy: &NetworkPolicy,
    rule: &Rule,
    peer: &Endpoint<'_>,
    c: &Connection<'_>,
) -> bool {
    let peer_ok = rule.peers.is_empty()
        || rule
            .peers
            .iter()
            .any(|p| knp_peer_matches(cluster, policy, p, peer));
    let port_ok = rule.ports.is_empty() || rule.ports.iter().any(|p| knp_port_matches(p, c));
    peer_ok && port_ok
}

fn knp_peer_matches(
    cluster: &Cluster,
    policy: &NetworkPolicy,
    peer: &Peer,
    ep: &Endpoint<'_>,
) -> bool {
    if let Some(block) = &peer.ip_block {
        // ipBlock is meant for addresses outside the cluster; for a pod, plumb follows
        // what the common CNIs do and matches its IP.
        return ep.ip().is_some_and(|ip| block.contains(ip));
    }
    // Pod and namespace selectors select pods only (recipe 05 vs 08: not external
    // clients).
    let Some(pod) = ep.pod() else {
        return false;
    };
    let ns_ok = match &peer.namespace_selector {
        Some(s) => s.matches(&cluster.namespace_labels(&pod.namespace)),
        None => pod.namespace == policy.namespace,
    };
    // Under Cilium a pod also carries the labels Cilium adds (its namespace, cluster,
    // service account and namespace labels), and NetworkPolicy selectors see them: the
    // connectivity test's KNPs select `io.cilium.k8s.policy.cluster Exists`. Without
    // Cilium these keys are on no pod, so a selector naming them selects nothing either
    // way only if it requires them; plumb evaluates as Cilium does.
    let pod_ok = peer.pod_selector.as_ref().is_none_or(|s| {
        s.matches(&pod.labels)
            || (needs_cilium_labels(s) && s.matches(&with_cilium_labels(cluster, pod)))
    });
    ns_ok && pod_ok
}

fn needs_cilium_labels(s: &crate::model::Selector) -> bool {
    let cilium_key = |k: &str| k == cilium::NAMESPACE_LABEL || k.starts_with("io.cilium.k8s.");
    s.match_labels.keys().any(|k| cilium_key(k))
        || s.match_expressions.iter().any(|r| cilium_key(&r.key))
}

fn with_cilium_labels(cluster: &Cluster, pod: &Pod) -> Labels {
    cilium_labels(cluster, &Endpoint::Pod(pod))
        .into_iter()
        .map(|(k, v)| (k.strip_prefix("k8s:").map(String::from).unwrap_or(k), v))
        .collect()
}

fn knp_port_matches(p: &PolicyPort, c: &Connection<'_>) -> bool {
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
        Some(PortRef::Name(name)) => c.to.pod().is_some_and(|pod| named_port(pod, name, c)),
    }
}

/// The policies selecting each pod, found once: queries and matrices then look only
/// at those (a pod's namespace's NetworkPolicies and CNPs, and the CCNPs).
pub struct Index<'c> {
    cluster: &'c Cluster,
    labels: Vec<Labels>,
    selecting: Vec<Selecting>,
    by_id: HashMap<String, usize>,
}

impl<'c> Index<'c> {
    /// Builds the index of `cluster`.
    pub fn new(cluster: &'c Cluster) -> Self {
        let mut knp_by_ns: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, p) in cluster.policies.iter().enumerate() {
            knp_by_ns.entry(&p.namespace).or_default().push(i);
        }
        let mut cnp_by_ns: HashMap<&str, Vec<usize>> = HashMap::new();
        let mut ccnp = Vec::new();
        for (i, p) in cluster.cilium.iter().enumerate() {
            match &p.namespace {
                Some(ns) => cnp_by_ns.entry(ns).or_default().push(i),
                None => ccnp.push(i),
            }
        }
        let mut ns_labels: HashMap<&str, Labels> = HashMap::new();
        for n in &cluster.namespaces {
            ns_labels.entry(&n.name).or_insert_with(|| n.labels.clone());
        }
        let mut labels = Vec::with_capacity(cluster.pods.len());
        let mut selected = Vec::with_capacity(cluster.pods.len());
        let mut by_id = HashMap::with_capacity(cluster.pods.len());
        for (i, pod) in cluster.pods.iter().enumerate() {
            let ep = Endpoint::Pod(pod);
            let l = cilium_labels(cluster, &ep);
            let side = Side {
                ep,
                labels: Cow::Borrowed(&l),
            };
            let empty = Vec::new();
            let knp = knp_by_ns.get(pod.namespace.as_str()).unwrap_or(&empty);
            let cnp = cnp_by_ns.get(pod.namespace.as_str()).unwrap_or(&empty);
            let mut cands: Vec<usize> = cnp.iter().chain(ccnp.iter()).copied().collect();
            cands.sort_unstable();
            let s = selecting(cluster, &side, knp.iter().copied(), cands.into_iter());
            selected.push(s);
            labels.push(l);
            by_id.entry(pod.id()).or_insert(i);
        }
        Index {
            cluster,
            labels,
            selecting: selected,
            by_id,
        }
    }

    /// The position of pod `namespace/name` in the cluster's pods.
    pub fn pod(&self, id: &str) -> Option<usize> {
        self.by_id.get(id).copied()
    }

    /// Judges `c`; pods are looked up by position, other endpoints evaluated as
    /// [`check`] does.
    pub fn check(&self, c: &Connection<'_>) -> Verdict {
        let (from, sel_from) = self.side(c.from);
        let (to, sel_to) = self.side(c.to);
        judge(self.cluster, c, &from, &to, &sel_from, &sel_to)
    }

    /// The connection from pod `from` to pod `to` (positions) and its two sides, their
    /// labels borrowed from the index.
    fn pod_pair<'s>(
        &'s self,
        from: usize,
        to: usize,
        port: u16,
        protocol: &'s str,
    ) -> (Connection<'s>, Side<'s>, Side<'s>) {
        let pods = &self.cluster.pods;
        let c = Connection {
            from: Endpoint::Pod(&pods[from]),
            to: Endpoint::Pod(&pods[to]),
            port,
            protocol,
            request: None,
        };
        let f = Side {
            ep: c.from,
            labels: Cow::Borrowed(&self.labels[from]),
        };
        let t = Side {
            ep: c.to,
            labels: Cow::Borrowed(&self.labels[to]),
        };
        (c, f, t)
    }

    /// Judges pod `from` to pod `to` (positions) on `port`/`protocol`.
    pub fn check_pods(&self, from: usize, to: usize, port: u16, protocol: &str) -> Verdict {
        let (c, f, t) = self.pod_pair(from, to, port, protocol);
        judge(
            self.cluster,
            &c,
            &f,
            &t,
            &self.selecting[from],
            &self.selecting[to],
        )
    }

    /// Whether pod `from` may reach pod `to` (positions) on `port`/`protocol`, as
    /// (egress allowed, ingress allowed): the same answers as [`Index::check_pods`]'s
    /// `egress.allowed` and `ingress.allowed` (the connection is allowed when both
    /// are), without collecting the policies and rules behind them — what matrices
    /// need.
    pub fn allows_pods(&self, from: usize, to: usize, port: u16, protocol: &str) -> (bool, bool) {
        let (c, f, t) = self.pod_pair(from, to, port, protocol);
        (
            direction_allows(self.cluster, &c, false, &f, &t, &self.selecting[from]),
            direction_allows(self.cluster, &c, true, &t, &f, &self.selecting[to]),
        )
    }

    fn side<'a>(&'a self, ep: Endpoint<'a>) -> (Side<'a>, Cow<'a, Selecting>) {
        if let Endpoint::Pod(p) = ep
            && let Some(&i) = self.by_id.get(&p.id())
            && std::ptr::eq(&self.cluster.pods[i], p)
        {
            return (
                Side {
                    ep,
                    labels: Cow::Borrowed(&self.labels[i]),
                },
                Cow::Borrowed(&self.selecting[i]),
            );
        }
        let side = Side {
            ep,
            labels: Cow::Owned(cilium_labels(self.cluster, &ep)),
        };
        let s = selecting(
            self.cluster,
            &side,
            0..self.cluster.policies.len(),
            0..self.cluster.cilium.len(),
        );
        (side, Cow::Owned(s))
    }
}
