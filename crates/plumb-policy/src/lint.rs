//! Policy lint: what in a set of policies cannot do what it seems written to do.
//!
//! Each [`Finding`] names the policy, the file and document it was read from, the part
//! (`spec.ingress[1].from[0]`) and why. The kinds ([`Kind`]):
//! - `selects-nothing`: no pod of the inputs is selected by the policy (checked only
//!   for namespaces the inputs hold pods of, so a policy file alone gives no finding);
//!   a selector whose requirements contradict each other selects nothing whatever the
//!   inputs; a CNP `endpointSelector` naming another namespace without the `k8s:`
//!   source (with it, Cilium replaces the match by the policy's namespace: reported as
//!   `never-matches`).
//! - `never-matches`: a rule or peer that matches no connection: an ipBlock/CIDR whose
//!   exceptions cover it, a port range ending below its start, a namespaceSelector
//!   matching none of the namespaces of the inputs (checked only when the inputs hold
//!   Namespace objects), rules for a direction the policy's `policyTypes` leaves out, a
//!   Cilium rule with neither peer nor port (`{}`, which Cilium reads as "nothing").
//! - `shadowed`: a rule whose peers × ports are inside another allow rule of the same
//!   policy, or of a policy of the same kind and namespace selecting at least the same
//!   pods; it changes no verdict. (The containment is judged from the rules' text — a
//!   selector with fewer requirements, a wider CIDR, a wider port range — so a rule
//!   reported is redundant, and some redundant rules are not reported.)
//! - `l7-protocol`: L7 rules on a port whose protocol cannot carry them: Cilium accepts
//!   HTTP and Kafka rules on TCP ports only (`protocol: TCP`; ANY, the default, is
//!   refused), DNS rules on egress only (`pkg/policy/api/l4.go`, `PortRule.sanitize`).
//!
//! Pure: takes the loaded [`Cluster`], returns findings.

use crate::cilium::{CiliumPolicy, CiliumRule, L7Rules, PortRule, Subject};
use crate::eval::{Endpoint, cilium_labels};
use crate::model::{Cluster, IpBlock, NetworkPolicy, Peer, PolicyPort, PortRef, Rule, Selector};
use serde::Serialize;
use std::net::IpAddr;

/// What kind of finding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// The policy applies to no pod.
    SelectsNothing,
    /// A rule or peer matches no connection.
    NeverMatches,
    /// A rule adds nothing to another allow rule.
    Shadowed,
    /// L7 rules on a port whose protocol cannot carry them.
    L7Protocol,
}

impl Kind {
    /// The kind's name as printed.
    pub fn name(self) -> &'static str {
        match self {
            Kind::SelectsNothing => "selects-nothing",
            Kind::NeverMatches => "never-matches",
            Kind::Shadowed => "shadowed",
            Kind::L7Protocol => "l7-protocol",
        }
    }
}

/// One lint finding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Where the policy was read (`file (document N)`).
    pub source: String,
    /// `Kind namespace/name`.
    pub policy: String,
    /// The part of the policy (`spec.ingress[1].from[0]`), or `spec` for the whole.
    pub part: String,
    /// What kind of finding.
    pub kind: Kind,
    /// Why, in words.
    pub why: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} {}: {}: {}",
            self.source,
            self.policy,
            self.part,
            self.kind.name(),
            self.why
        )
    }
}

/// Lints every policy of `cluster`.
pub fn lint(cluster: &Cluster) -> Vec<Finding> {
    let pods = Pods::of(cluster);
    let mut out = Vec::new();
    for (i, p) in cluster.policies.iter().enumerate() {
        knp(cluster, &pods, i, p, &mut out);
    }
    for (i, p) in cluster.cilium.iter().enumerate() {
        cnp(cluster, &pods, i, p, &mut out);
    }
    out
}

/// The pods of the inputs — Pod objects and the pods workloads' templates describe —
/// with their labels and Cilium's labels for them, by namespace; found once.
struct Pods {
    /// (labels, Cilium labels) of each pod.
    all: Vec<(crate::model::Labels, crate::model::Labels)>,
    by_namespace: std::collections::HashMap<String, Vec<usize>>,
    /// NetworkPolicies by namespace, and Cilium policies by namespace (None: the
    /// cluster-wide ones): where a rule's shadows are looked for.
    knp_by_namespace: std::collections::HashMap<String, Vec<usize>>,
    cilium_by_namespace: std::collections::HashMap<Option<String>, Vec<usize>>,
    /// The labels of every namespace the inputs name (Namespace objects and pods').
    namespaces: Vec<crate::model::Labels>,
}

impl Pods {
    fn of(cluster: &Cluster) -> Pods {
        let from_workloads = cluster.workloads.iter().map(|w| crate::model::Pod {
            namespace: w.namespace.clone(),
            name: w.name.clone(),
            labels: w.labels.clone(),
            ip: None,
            ports: Vec::new(),
            service_account: "default".into(),
        });
        let mut pods = Pods {
            all: Vec::new(),
            by_namespace: Default::default(),
            knp_by_namespace: Default::default(),
            cilium_by_namespace: Default::default(),
            namespaces: Vec::new(),
        };
        let mut names: Vec<&str> = cluster
            .namespaces
            .iter()
            .map(|n| n.name.as_str())
            .chain(cluster.pods.iter().map(|p| p.namespace.as_str()))
            .collect();
        names.sort_unstable();
        names.dedup();
        pods.namespaces = names
            .into_iter()
            .map(|n| cluster.namespace_labels(n).into_owned())
            .collect();
        for (i, p) in cluster.policies.iter().enumerate() {
            pods.knp_by_namespace
                .entry(p.namespace.clone())
                .or_default()
                .push(i);
        }
        for (i, p) in cluster.cilium.iter().enumerate() {
            pods.cilium_by_namespace
                .entry(p.namespace.clone())
                .or_default()
                .push(i);
        }
        for q in cluster.pods.iter().cloned().chain(from_workloads) {
            let cl = cilium_labels(cluster, &Endpoint::Pod(&q));
            pods.by_namespace
                .entry(q.namespace.clone())
                .or_default()
                .push(pods.all.len());
            pods.all.push((q.labels, cl));
        }
        pods
    }

    /// The pods of namespace `ns` (every pod: None), as positions in `all`.
    fn in_namespace(&self, ns: Option<&str>) -> Vec<usize> {
        match ns {
            Some(ns) => self.by_namespace.get(ns).cloned().unwrap_or_default(),
            None => (0..self.all.len()).collect(),
        }
    }
}

fn finding(source: &str, policy: String, part: String, kind: Kind, why: String) -> Finding {
    Finding {
        source: source.to_string(),
        policy,
        part,
        kind,
        why,
    }
}

// ---------------------------------------------------------------------------
// NetworkPolicy.

fn knp(cluster: &Cluster, inputs: &Pods, index: usize, p: &NetworkPolicy, out: &mut Vec<Finding>) {
    let id = format!("NetworkPolicy {}", p.id());
    let mut say = |part: String, kind: Kind, why: String| {
        out.push(finding(&p.source, id.clone(), part, kind, why))
    };
    if let Some(why) = contradiction(&p.pod_selector) {
        say("spec.podSelector".into(), Kind::SelectsNothing, why);
    } else {
        let pods = inputs.in_namespace(Some(&p.namespace));
        if !pods.is_empty()
            && !pods
                .iter()
                .any(|&q| p.pod_selector.matches(&inputs.all[q].0))
        {
            say(
                "spec.podSelector".into(),
                Kind::SelectsNothing,
                format!(
                    "none of the {} pods of namespace {} in the inputs has labels {}",
                    pods.len(),
                    p.namespace,
                    describe(&p.pod_selector)
                ),
            );
        }
    }
    for (dir, rules, isolates, key) in [
        ("ingress", &p.ingress, p.ingress_isolation, "from"),
        ("egress", &p.egress, p.egress_isolation, "to"),
    ] {
        if !isolates && !rules.is_empty() {
            say(
                format!("spec.{dir}"),
                Kind::NeverMatches,
                format!(
                    "policyTypes leaves out {}: these rules are ignored",
                    capitalized(dir)
                ),
            );
            continue;
        }
        for (r, rule) in rules.iter().enumerate() {
            let at = format!("spec.{dir}[{r}]");
            let mut dead_peers = 0;
            for (k, peer) in rule.peers.iter().enumerate() {
                if let Some(why) = dead_peer(cluster, inputs, peer) {
                    dead_peers += 1;
                    say(format!("{at}.{key}[{k}]"), Kind::NeverMatches, why);
                }
            }
            let mut dead_ports = 0;
            for (k, port) in rule.ports.iter().enumerate() {
                if let (Some(PortRef::Number(n)), Some(end)) = (&port.port, port.end_port)
                    && end < *n
                {
                    dead_ports += 1;
                    say(
                        format!("{at}.ports[{k}]"),
                        Kind::NeverMatches,
                        format!(
                            "endPort {end} is below port {n}: the range is empty (the API server refuses it)"
                        ),
                    );
                }
            }
            if (!rule.peers.is_empty() && dead_peers == rule.peers.len())
                || (!rule.ports.is_empty() && dead_ports == rule.ports.len())
            {
                continue;
            }
            if let Some(by) = knp_shadowing(cluster, inputs, index, p, dir, r, rule) {
                say(at, Kind::Shadowed, by);
            }
        }
    }
}

fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
        .unwrap_or_default()
}

fn dead_peer(cluster: &Cluster, inputs: &Pods, peer: &Peer) -> Option<String> {
    if let Some(b) = &peer.ip_block {
        return empty_block(b);
    }
    for (what, s) in [
        ("podSelector", &peer.pod_selector),
        ("namespaceSelector", &peer.namespace_selector),
    ] {
        if let Some(why) = s.as_ref().and_then(contradiction) {
            return Some(format!("{what}: {why}"));
        }
    }
    let s = peer.namespace_selector.as_ref()?;
    // Judged only when the inputs describe namespaces.
    if cluster.namespaces.is_empty() {
        return None;
    }
    let known = &inputs.namespaces;
    (!known.iter().any(|l| s.matches(l))).then(|| {
        format!(
            "namespaceSelector {} matches none of the {} namespaces in the inputs",
            describe(s),
            known.len()
        )
    })
}

/// Why `b` holds no address, if it holds none.
fn empty_block(b: &IpBlock) -> Option<String> {
    let (net, len) = b.cidr;
    b.except
        .iter()
        .find(|e| net.is_ipv4() == e.0.is_ipv4() && e.1 <= len && crate::model::in_cidr(net, **e))
        .map(|e| {
            format!(
                "except {}/{} covers all of {net}/{len}: the block holds no address",
                e.0, e.1
            )
        })
}

/// Another allow rule that holds everything rule `r` of `p` (direction `dir`) allows.
fn knp_shadowing(
    cluster: &Cluster,
    inputs: &Pods,
    index: usize,
    p: &NetworkPolicy,
    dir: &str,
    r: usize,
    rule: &Rule,
) -> Option<String> {
    fn rules_of<'q>(q: &'q NetworkPolicy, dir: &str) -> &'q [Rule] {
        match dir {
            "ingress" if q.ingress_isolation => &q.ingress,
            "egress" if q.egress_isolation => &q.egress,
            _ => &[],
        }
    }
    for (k, other) in rules_of(p, dir).iter().enumerate() {
        if k != r && knp_rule_within(rule, other) && (k < r || !knp_rule_within(other, rule)) {
            return Some(format!(
                "everything it allows is allowed by spec.{dir}[{k}] of the same policy"
            ));
        }
    }
    let same_namespace = inputs.knp_by_namespace.get(&p.namespace);
    for &j in same_namespace.into_iter().flatten() {
        let q = &cluster.policies[j];
        if j == index
            || q.namespace != p.namespace
            || !selector_within(&p.pod_selector, &q.pod_selector)
        {
            continue;
        }
        // Two policies selecting the same pods with the same rule shadow each other
        // there: only the later one is reported.
        let same_pods = selector_within(&q.pod_selector, &p.pod_selector);
        for (k, other) in rules_of(q, dir).iter().enumerate() {
            if knp_rule_within(rule, other)
                && !(same_pods && j > index && knp_rule_within(other, rule))
            {
                return Some(format!(
                    "everything it allows is allowed by spec.{dir}[{k}] of NetworkPolicy {} ({}), which selects at least the same pods",
                    q.id(),
                    q.source
                ));
            }
        }
    }
    None
}

/// Whether every connection rule `a` allows is allowed by rule `b` (same policy
/// namespace).
fn knp_rule_within(a: &Rule, b: &Rule) -> bool {
    let peers = b.peers.is_empty()
        || (!a.peers.is_empty()
            && a.peers
                .iter()
                .all(|pa| b.peers.iter().any(|pb| peer_within(pa, pb))));
    let ports = b.ports.is_empty()
        || (!a.ports.is_empty()
            && a.ports
                .iter()
                .all(|pa| b.ports.iter().any(|pb| knp_port_within(pa, pb))));
    peers && ports
}

fn peer_within(a: &Peer, b: &Peer) -> bool {
    match (&a.ip_block, &b.ip_block) {
        (Some(x), Some(y)) => return block_within(x, y),
        (None, None) => {}
        _ => return false,
    }
    // The namespaces: no namespaceSelector is the policy's own namespace.
    let ns = match (&a.namespace_selector, &b.namespace_selector) {
        (None, None) => true,
        (_, Some(sb)) if is_empty(sb) => true,
        (Some(sa), Some(sb)) => selector_within(sa, sb),
        _ => false,
    };
    let pods = match (&a.pod_selector, &b.pod_selector) {
        (_, None) => true,
        (_, Some(sb)) if is_empty(sb) => true,
        (Some(sa), Some(sb)) => selector_within(sa, sb),
        (None, Some(_)) => false,
    };
    ns && pods
}

fn knp_port_within(a: &PolicyPort, b: &PolicyPort) -> bool {
    if !a.protocol.eq_ignore_ascii_case(&b.protocol) {
        return false;
    }
    port_range_within(&a.port, a.end_port, &b.port, b.end_port)
}

fn port_range_within(
    a: &Option<PortRef>,
    a_end: Option<u16>,
    b: &Option<PortRef>,
    b_end: Option<u16>,
) -> bool {
    let range = |p: u16, end: Option<u16>| (p, end.filter(|e| *e >= p).unwrap_or(p));
    match (a, b) {
        (_, None) => true,
        (None, Some(_)) => false,
        (Some(PortRef::Name(x)), Some(PortRef::Name(y))) => x == y,
        (Some(PortRef::Number(x)), Some(PortRef::Number(y))) => {
            let (a0, a1) = range(*x, a_end);
            let (b0, b1) = range(*y, b_end);
            b0 <= a0 && a1 <= b1
        }
        _ => false,
    }
}

fn block_within(a: &IpBlock, b: &IpBlock) -> bool {
    let in_net = |inner: (IpAddr, u8), outer: (IpAddr, u8)| {
        inner.0.is_ipv4() == outer.0.is_ipv4()
            && outer.1 <= inner.1
            && crate::model::in_cidr(inner.0, outer)
    };
    let overlaps = |x: (IpAddr, u8), y: (IpAddr, u8)| in_net(x, y) || in_net(y, x);
    in_net(a.cidr, b.cidr)
        && b.except
            .iter()
            .all(|e| !overlaps(*e, a.cidr) || a.except.iter().any(|ae| in_net(*e, *ae)))
}

// ---------------------------------------------------------------------------
// Selectors.

fn is_empty(s: &Selector) -> bool {
    s.match_labels.is_empty() && s.match_expressions.is_empty()
}

/// `{app=web, tier In (a, b)}`.
fn describe(s: &Selector) -> String {
    let mut parts: Vec<String> = s
        .match_labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for r in &s.match_expressions {
        parts.push(if r.values.is_empty() {
            format!("{} {}", r.key, r.operator)
        } else {
            format!("{} {} ({})", r.key, r.operator, r.values.join(", "))
        });
    }
    format!("{{{}}}", parts.join(", "))
}

/// Why no label set satisfies `s`, if none does.
fn contradiction(s: &Selector) -> Option<String> {
    use std::collections::BTreeSet;
    let mut keys: BTreeSet<&str> = s.match_labels.keys().map(String::as_str).collect();
    keys.extend(s.match_expressions.iter().map(|r| r.key.as_str()));
    for key in keys {
        // The values the key may take (None: any), and whether it must be present or
        // absent.
        let mut allowed: Option<BTreeSet<&str>> = None;
        let mut present = false;
        let mut absent = false;
        let mut excluded: BTreeSet<&str> = BTreeSet::new();
        if let Some(v) = s.match_labels.get(key) {
            allowed = Some([v.as_str()].into());
            present = true;
        }
        for r in s.match_expressions.iter().filter(|r| r.key == key) {
            match r.operator.as_str() {
                "In" => {
                    let vals: BTreeSet<&str> = r.values.iter().map(String::as_str).collect();
                    allowed = Some(match allowed.take() {
                        None => vals,
                        Some(a) => a.intersection(&vals).copied().collect(),
                    });
                    present = true;
                }
                "NotIn" => excluded.extend(r.values.iter().map(String::as_str)),
                "Exists" => present = true,
                "DoesNotExist" => absent = true,
                _ => {}
            }
        }
        if present && absent {
            return Some(format!("{key} must exist and must not: selects nothing"));
        }
        if let Some(a) = allowed
            && a.iter().all(|v| excluded.contains(v))
        {
            return Some(format!(
                "no value of {key} satisfies {}: selects nothing",
                describe(s)
            ));
        }
    }
    None
}

/// Whether every label set `a` selects is selected by `b`: each requirement of `b`
/// follows from `a`'s.
fn selector_within(a: &Selector, b: &Selector) -> bool {
    let a_value = |k: &str| -> Option<Vec<&str>> {
        if let Some(v) = a.match_labels.get(k) {
            return Some(vec![v.as_str()]);
        }
        a.match_expressions
            .iter()
            .find(|r| r.key == k && r.operator == "In")
            .map(|r| r.values.iter().map(String::as_str).collect())
    };
    let has = |k: &str| {
        a_value(k).is_some()
            || a.match_expressions
                .iter()
                .any(|r| r.key == k && r.operator == "Exists")
    };
    b.match_labels
        .iter()
        .all(|(k, v)| a_value(k).is_some_and(|vs| vs.iter().all(|x| x == v)))
        && b.match_expressions
            .iter()
            .all(|r| match r.operator.as_str() {
                "In" => a_value(&r.key)
                    .is_some_and(|vs| vs.iter().all(|x| r.values.iter().any(|y| y == x))),
                "NotIn" => {
                    a_value(&r.key)
                        .is_some_and(|vs| vs.iter().all(|x| !r.values.iter().any(|y| y == x)))
                        || a.match_expressions.iter().any(|q| {
                            q.key == r.key
                                && ((q.operator == "DoesNotExist")
                                    || (q.operator == "NotIn"
                                        && r.values.iter().all(|y| q.values.contains(y))))
                        })
                }
                "Exists" => has(&r.key),
                "DoesNotExist" => a
                    .match_expressions
                    .iter()
                    .any(|q| q.key == r.key && q.operator == "DoesNotExist"),
                _ => false,
            })
}

// ---------------------------------------------------------------------------
// CiliumNetworkPolicy / CiliumClusterwideNetworkPolicy.

fn cnp(cluster: &Cluster, inputs: &Pods, index: usize, p: &CiliumPolicy, out: &mut Vec<Finding>) {
    let id = format!("{} {}", p.kind, p.id());
    let mut say = |part: String, kind: Kind, why: String| {
        out.push(finding(&p.source, id.clone(), part, kind, why))
    };
    let at = &p.spec_at;
    match &p.subject {
        Subject::Endpoints(s) => {
            let ns_match = s.match_labels.iter().find(|(k, v)| {
                crate::cilium::label_key(k) == crate::cilium::NAMESPACE_LABEL
                    && Some(v.as_str()) != p.namespace.as_deref()
            });
            if let (Some((k, v)), Some(ns)) = (ns_match, &p.namespace) {
                say(
                    format!("{at}.endpointSelector"),
                    Kind::SelectsNothing,
                    format!(
                        "{k}={v}: a CiliumNetworkPolicy selects pods of its own namespace ({ns}) only; this match leaves it selecting none"
                    ),
                );
            } else if let (Some(other), Some(ns)) = (&p.replaced_namespace_match, &p.namespace) {
                say(
                    format!("{at}.endpointSelector"),
                    Kind::NeverMatches,
                    format!(
                        "k8s:io.kubernetes.pod.namespace={other} never applies: Cilium replaces a CiliumNetworkPolicy's namespace match with its own namespace, so it selects pods of {ns}"
                    ),
                );
            } else if let Some(why) = contradiction(s) {
                say(format!("{at}.endpointSelector"), Kind::SelectsNothing, why);
            } else {
                let scope = inputs.in_namespace(p.namespace.as_deref());
                if !scope.is_empty()
                    && !scope
                        .iter()
                        .any(|&q| crate::cilium::selects(s, &inputs.all[q].1))
                {
                    say(
                        format!("{at}.endpointSelector"),
                        Kind::SelectsNothing,
                        format!(
                            "none of the {} pods{} in the inputs has labels {}",
                            scope.len(),
                            p.namespace
                                .as_ref()
                                .map(|n| format!(" of namespace {n}"))
                                .unwrap_or_default(),
                            describe(s)
                        ),
                    );
                }
            }
        }
        Subject::Nodes(s) => {
            if !cluster.nodes.is_empty() && !cluster.nodes.iter().any(|n| s.matches(&n.labels)) {
                say(
                    format!("{at}.nodeSelector"),
                    Kind::SelectsNothing,
                    format!(
                        "none of the {} nodes in the inputs has labels {}",
                        cluster.nodes.len(),
                        describe(s)
                    ),
                );
            }
        }
    }
    for (key, rules, ingress, deny) in [
        ("ingress", &p.ingress, true, false),
        ("ingressDeny", &p.ingress_deny, true, true),
        ("egress", &p.egress, false, false),
        ("egressDeny", &p.egress_deny, false, true),
    ] {
        for (r, rule) in rules.iter().enumerate() {
            let rat = format!("{at}.{key}[{r}]");
            // A rule with neither peer nor port (`{}`) is Cilium's way of putting the
            // endpoints in default deny: not a finding.
            let (eps, cidr_k) = if ingress {
                ("fromEndpoints", "fromCIDRSet")
            } else {
                ("toEndpoints", "toCIDRSet")
            };
            let mut dead = 0;
            for (k, b) in rule.cidrs.iter().enumerate() {
                if let Some(why) = empty_block(b) {
                    dead += 1;
                    say(format!("{rat}.{cidr_k}[{k}]"), Kind::NeverMatches, why);
                }
            }
            for (k, s) in rule.endpoints.iter().enumerate() {
                if let Some(why) = contradiction(s) {
                    dead += 1;
                    say(format!("{rat}.{eps}[{k}]"), Kind::NeverMatches, why);
                }
            }
            let all_dead = rule.has_l3()
                && dead == rule.cidrs.len() + rule.endpoints.len()
                && rule.entities.is_empty()
                && rule.nodes.is_empty()
                && rule.fqdns.is_empty();
            for (k, pr) in rule.ports.iter().enumerate() {
                let pat = format!("{rat}.toPorts[{k}]");
                for (j, port) in pr.ports.iter().enumerate() {
                    if let (Some(PortRef::Number(n)), Some(end)) = (&port.port, port.end_port)
                        && end < *n
                    {
                        say(
                            format!("{pat}.ports[{j}]"),
                            Kind::NeverMatches,
                            format!(
                                "endPort {end} is below port {n}: not a range (plumb reads it as port {n} alone)"
                            ),
                        );
                    }
                }
                if let Some(why) = l7_problem(pr, ingress) {
                    say(pat, Kind::L7Protocol, why);
                }
            }
            if !deny
                && !all_dead
                && (rule.has_l3() || rule.has_l4())
                && let Some(by) = cnp_shadowing(cluster, inputs, index, p, key, r, rule)
            {
                say(rat, Kind::Shadowed, by);
            }
        }
    }
}

fn l7_problem(pr: &PortRule, ingress: bool) -> Option<String> {
    let l7 = pr.l7.as_ref()?;
    let name = match l7 {
        L7Rules::Http(_) => "HTTP",
        L7Rules::Kafka(_) => "Kafka",
        L7Rules::Dns(_) => {
            return ingress.then(|| {
                "DNS rules apply to egress only: Cilium refuses the policy (\"DNS rules are not allowed on ingress\")".into()
            });
        }
    };
    if pr.ports.is_empty() {
        return None;
    }
    pr.ports.iter().find(|p| p.protocol != "TCP").map(|p| {
        let proto = if p.protocol == "ANY" {
            "ANY (the default when no protocol is given)".to_string()
        } else {
            p.protocol.clone()
        };
        format!(
            "{name} rules on protocol {proto}: {name} runs over TCP only, and Cilium refuses the policy (\"L7 rules can only apply to TCP\"); write protocol: TCP"
        )
    })
}

/// Another allow rule of the same direction holding everything rule `r` allows,
/// without L7 rules that would narrow it.
fn cnp_shadowing(
    cluster: &Cluster,
    inputs: &Pods,
    index: usize,
    p: &CiliumPolicy,
    key: &str,
    r: usize,
    rule: &CiliumRule,
) -> Option<String> {
    fn rules_of<'q>(q: &'q CiliumPolicy, key: &str) -> &'q [CiliumRule] {
        if key == "ingress" {
            &q.ingress
        } else {
            &q.egress
        }
    }
    // A rule with L7 rules inside a plain one: the proxy never sees its traffic.
    let what = if rule.ports.iter().any(|pr| pr.l7.is_some()) {
        "its L7 rules have no effect: everything it matches is allowed without L7 rules"
    } else {
        "everything it allows is allowed"
    };
    for (k, other) in rules_of(p, key).iter().enumerate() {
        if k != r && cnp_rule_within(rule, other) && (k < r || !cnp_rule_within(other, rule)) {
            return Some(format!(
                "{what} by {}.{key}[{k}] of the same policy",
                p.spec_at
            ));
        }
    }
    let Subject::Endpoints(mine) = &p.subject else {
        return None;
    };
    let same_namespace = inputs.cilium_by_namespace.get(&p.namespace);
    for &j in same_namespace.into_iter().flatten() {
        let q = &cluster.cilium[j];
        let Subject::Endpoints(theirs) = &q.subject else {
            continue;
        };
        // Without this rule, `p` may hold no rule for the direction and stop putting its
        // endpoints in default deny: `q` must do that itself.
        let q_isolates = if key == "ingress" {
            q.default_deny_ingress
        } else {
            q.default_deny_egress
        };
        if !q_isolates
            || j == index
            || q.namespace != p.namespace
            || q.kind != p.kind
            || !selector_within(mine, theirs)
        {
            continue;
        }
        let same_pods = selector_within(theirs, mine);
        for (k, other) in rules_of(q, key).iter().enumerate() {
            if cnp_rule_within(rule, other)
                && !(same_pods && j > index && cnp_rule_within(other, rule))
            {
                return Some(format!(
                    "{what} by {}.{key}[{k}] of {} {} ({}), which selects at least the same pods",
                    q.spec_at,
                    q.kind,
                    q.id(),
                    q.source
                ));
            }
        }
    }
    None
}

/// Whether everything Cilium rule `a` allows is allowed by `b`, `b` carrying no L7
/// rules where `a` matches (its L7 rules would make `a` the wider one).
fn cnp_rule_within(a: &CiliumRule, b: &CiliumRule) -> bool {
    if !b.has_l3() && !b.has_l4() {
        return false;
    }
    // toFQDNs and nodes are judged with DNS and node labels: not compared.
    if !a.fqdns.is_empty() || !b.fqdns.is_empty() || !a.nodes.is_empty() || !b.nodes.is_empty() {
        return false;
    }
    let peers = !b.has_l3()
        || (a.has_l3()
            && a.endpoints.iter().all(|s| {
                b.endpoints.iter().any(|t| selector_within(s, t))
                    || b.entities.iter().any(|e| e == "all")
            })
            && a.entities.iter().all(|e| {
                b.entities
                    .iter()
                    .any(|f| f == e || f == "all" || (f == "world" && e.starts_with("world")))
            })
            && a.cidrs.iter().all(|c| {
                b.cidrs.iter().any(|d| block_within(c, d))
                    || b.entities.iter().any(|e| e == "all" || e == "world")
            }));
    if !peers {
        return false;
    }
    // L4: a rule with no port and no ICMP field allows every port and protocol.
    if !b.has_l4() {
        return true;
    }
    if !a.has_l4() || !a.icmps.iter().all(|f| b.icmps.contains(f)) {
        return false;
    }
    if a.ports.is_empty() {
        return true;
    }
    a.ports.iter().all(|pa| {
        b.ports.iter().any(|pb| {
            pb.l7.is_none()
                && (pb.ports.is_empty()
                    || (!pa.ports.is_empty()
                        && pa.ports.iter().all(|x| {
                            pb.ports.iter().any(|y| {
                                (y.protocol == "ANY" || y.protocol == x.protocol)
                                    && port_range_within(&x.port, x.end_port, &y.port, y.end_port)
                            })
                        })))
        })
    })
}
