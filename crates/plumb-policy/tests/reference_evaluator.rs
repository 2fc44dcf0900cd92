//! A brute-force NetworkPolicy evaluator written here from the API's documented
//! semantics (networking.k8s.io/v1 `NetworkPolicySpec`, `NetworkPolicyPeer`,
//! `NetworkPolicyPort`), reading the generated manifests themselves, against plumb's
//! loader + [`check`] and its [`Index`] on random namespaces, pods, policies and ports.
//! Then two invariants: adding an allow rule or policy never removes a connection
//! except by isolating a pod that was not isolated; a CiliumNetworkPolicy holding only
//! deny rules never adds one.

use plumb_policy::eval::{Connection, Endpoint, Index, Verdict, check};
use plumb_policy::load::load_str;
use plumb_policy::model::{Cluster, ContainerPort, Labels, Namespace, Pod};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::net::IpAddr;

const NAMESPACES: &[&str] = &["a", "b", "c"];

// ---------------------------------------------------------------------------
// The reference: the API documentation, read literally, over raw manifests.

#[derive(Clone, Debug)]
struct World {
    namespaces: Vec<(String, Labels)>,
    pods: Vec<Pod>,
    policies: Vec<Value>,
}

fn ns_labels(w: &World, ns: &str) -> Labels {
    w.namespaces
        .iter()
        .find(|(n, _)| n == ns)
        .map(|(_, l)| l.clone())
        .unwrap_or_default()
}

/// "A label selector ... The requirements are ANDed. An empty label selector matches
/// all objects."
fn selector_matches(sel: &Value, labels: &Labels) -> bool {
    let ml_ok = sel
        .get("matchLabels")
        .and_then(Value::as_object)
        .is_none_or(|m| {
            m.iter()
                .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str())
        });
    let me_ok = sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .is_none_or(|es| {
            es.iter().all(|e| {
                let key = e["key"].as_str().unwrap();
                let vals: Vec<&str> = e["values"]
                    .as_array()
                    .map(|a| a.iter().map(|v| v.as_str().unwrap()).collect())
                    .unwrap_or_default();
                let have = labels.get(key).map(String::as_str);
                match e["operator"].as_str().unwrap() {
                    "In" => have.is_some_and(|h| vals.contains(&h)),
                    "NotIn" => have.is_none_or(|h| !vals.contains(&h)),
                    "Exists" => have.is_some(),
                    "DoesNotExist" => have.is_none(),
                    o => panic!("{o}"),
                }
            })
        });
    ml_ok && me_ok
}

/// "policyTypes ... If this field is not specified, it will default based on the
/// existence of ingress or egress rules; policies that contain an egress section are
/// assumed to affect egress, and all policies (whether or not they contain an ingress
/// section) are assumed to affect ingress."
fn affects(policy: &Value, dir: &str) -> bool {
    match policy["spec"].get("policyTypes") {
        Some(t) => t.as_array().unwrap().iter().any(|x| x == dir),
        None => dir == "Ingress" || policy["spec"].get("egress").is_some(),
    }
}

fn in_cidr(ip: IpAddr, cidr: &str) -> bool {
    let (net, len) = cidr.split_once('/').unwrap();
    let (IpAddr::V4(ip), IpAddr::V4(net)) = (ip, net.parse::<IpAddr>().unwrap()) else {
        return false;
    };
    let len: u32 = len.parse().unwrap();
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    u32::from(ip) & mask == u32::from(net) & mask
}

/// "from/to ... If this field is empty or missing, this rule matches all sources
/// (traffic not restricted by source). If this field is present and contains at least
/// one item, this rule allows traffic only if the traffic matches at least one item."
/// A peer: "podSelector ... If namespaceSelector is also set, then the NetworkPolicy
/// as a whole selects the Pods matching PodSelector in the Namespaces selected by
/// NamespaceSelector. Otherwise it selects the Pods matching PodSelector in the
/// policy's own Namespace." / "namespaceSelector ... If podSelector is also set ...
/// Otherwise it selects all Pods in the Namespaces selected by NamespaceSelector."
fn peer_matches(w: &World, policy_ns: &str, peer: &Value, other: &Target) -> bool {
    if let Some(b) = peer.get("ipBlock") {
        let Some(ip) = other.ip() else { return false };
        return in_cidr(ip, b["cidr"].as_str().unwrap())
            && !b
                .get("except")
                .and_then(Value::as_array)
                .is_some_and(|ex| ex.iter().any(|e| in_cidr(ip, e.as_str().unwrap())));
    }
    let Target::Pod(pod) = other else {
        return false;
    };
    let ns_ok = match peer.get("namespaceSelector") {
        Some(s) => selector_matches(s, &ns_labels(w, &pod.namespace)),
        None => pod.namespace == policy_ns,
    };
    let pod_ok = peer
        .get("podSelector")
        .is_none_or(|s| selector_matches(s, &pod.labels));
    ns_ok && pod_ok
}

/// "ports ... If this field is empty or missing, this rule matches all ports ...
/// protocol ... defaults to TCP ... port ... can either be a numerical or named port on
/// a pod ... endPort indicates that the range of ports from port to endPort if set,
/// inclusive". Named ports are the destination pod's.
fn port_matches(p: &Value, dst: &Target, port: u16, proto: &str) -> bool {
    if p.get("protocol").and_then(Value::as_str).unwrap_or("TCP") != proto {
        return false;
    }
    match p.get("port") {
        None => true,
        Some(Value::String(name)) => match dst {
            Target::Pod(d) => d.ports.iter().any(|cp| {
                cp.name.as_deref() == Some(name.as_str()) && cp.port == port && cp.protocol == proto
            }),
            Target::World(_) => false,
        },
        Some(n) => {
            let start = n.as_u64().unwrap() as u16;
            match p.get("endPort").and_then(Value::as_u64) {
                Some(end) => (start..=end as u16).contains(&port),
                None => start == port,
            }
        }
    }
}

#[derive(Clone, Copy)]
enum Target<'p> {
    Pod(&'p Pod),
    World(IpAddr),
}

impl Target<'_> {
    fn ip(&self) -> Option<IpAddr> {
        match self {
            Target::Pod(p) => p.ip,
            Target::World(ip) => Some(*ip),
        }
    }
}

/// One direction: (allowed, isolated). `subject` is the pod the policies select.
fn reference_direction(
    w: &World,
    dir: &str,
    subject: &Target,
    other: &Target,
    dst: &Target,
    port: u16,
    proto: &str,
) -> (bool, bool) {
    let Target::Pod(pod) = subject else {
        return (true, false); // nothing selects an outside address
    };
    let (rules_key, peers_key) = if dir == "Ingress" {
        ("ingress", "from")
    } else {
        ("egress", "to")
    };
    let selecting: Vec<&Value> = w
        .policies
        .iter()
        .filter(|p| {
            p["metadata"]["namespace"].as_str().unwrap() == pod.namespace
                && selector_matches(&p["spec"]["podSelector"], &pod.labels)
                && affects(p, dir)
        })
        .collect();
    if selecting.is_empty() {
        return (true, false);
    }
    let allowed = selecting.iter().any(|p| {
        let ns = p["metadata"]["namespace"].as_str().unwrap();
        p["spec"]
            .get(rules_key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|rule| {
                let peers_ok = rule
                    .get(peers_key)
                    .and_then(Value::as_array)
                    .is_none_or(|ps| {
                        ps.is_empty() || ps.iter().any(|peer| peer_matches(w, ns, peer, other))
                    });
                let ports_ok = rule
                    .get("ports")
                    .and_then(Value::as_array)
                    .is_none_or(|ps| {
                        ps.is_empty() || ps.iter().any(|p| port_matches(p, dst, port, proto))
                    });
                peers_ok && ports_ok
            })
    });
    (allowed, true)
}

// ---------------------------------------------------------------------------
// Random worlds.

fn label_map() -> impl Strategy<Value = Labels> {
    prop::collection::btree_map(
        prop::sample::select(vec!["app", "role"]),
        prop::sample::select(vec!["x", "y"]),
        0..=2,
    )
    .prop_map(|m| {
        m.into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    })
}

fn selector(keys: &'static [&'static str]) -> impl Strategy<Value = Value> {
    let expr = (
        prop::sample::select(keys.to_vec()),
        prop::sample::select(vec!["In", "NotIn", "Exists", "DoesNotExist"]),
        prop::collection::vec(prop::sample::select(vec!["x", "y", "a", "b"]), 1..=2),
    )
        .prop_map(|(k, op, vals)| match op {
            "In" | "NotIn" => json!({"key": k, "operator": op, "values": vals}),
            _ => json!({"key": k, "operator": op}),
        });
    (
        prop::collection::btree_map(
            prop::sample::select(keys.to_vec()),
            prop::sample::select(vec!["x", "y", "a", "b"]),
            0..=1,
        ),
        prop::collection::vec(expr, 0..=1),
    )
        .prop_map(|(ml, me)| {
            let mut s = serde_json::Map::new();
            if !ml.is_empty() {
                s.insert("matchLabels".into(), json!(ml));
            }
            if !me.is_empty() {
                s.insert("matchExpressions".into(), json!(me));
            }
            Value::Object(s)
        })
}

fn peer() -> impl Strategy<Value = Value> {
    prop_oneof![
        (
            prop::option::of(selector(&["app", "role"])),
            prop::option::of(selector(&["team", "kubernetes.io/metadata.name"]))
        )
            .prop_filter("a peer names something", |(p, n)| p.is_some()
                || n.is_some())
            .prop_map(|(p, n)| {
                let mut m = serde_json::Map::new();
                if let Some(p) = p {
                    m.insert("podSelector".into(), p);
                }
                if let Some(n) = n {
                    m.insert("namespaceSelector".into(), n);
                }
                Value::Object(m)
            }),
        (0u8..4, prop::option::of(0u8..4)).prop_map(|(net, except)| {
            let mut b = json!({"cidr": format!("10.0.{net}.0/24")});
            if let Some(e) = except {
                b["except"] = json!([format!("10.0.{net}.{}/30", e * 4)]);
            }
            json!({"ipBlock": b})
        }),
    ]
}

fn port() -> impl Strategy<Value = Value> {
    (
        prop::option::of(prop::sample::select(vec!["TCP", "UDP"])),
        prop_oneof![
            Just(None),
            (79u16..83).prop_map(|n| Some(json!(n))),
            prop::sample::select(vec!["http", "dns", "nope"]).prop_map(|n| Some(json!(n))),
        ],
        prop::option::of(80u16..84),
    )
        .prop_map(|(proto, port, end)| {
            let mut m = serde_json::Map::new();
            if let Some(p) = proto {
                m.insert("protocol".into(), json!(p));
            }
            if let Some(p) = &port {
                m.insert("port".into(), p.clone());
                if let (Some(e), Some(n)) = (end, p.as_u64())
                    && u64::from(e) >= n
                {
                    m.insert("endPort".into(), json!(e));
                }
            }
            Value::Object(m)
        })
}

fn rule(peers_key: &'static str) -> impl Strategy<Value = Value> {
    (
        prop::option::of(prop::collection::vec(peer(), 0..=2)),
        prop::option::of(prop::collection::vec(port(), 0..=2)),
    )
        .prop_map(move |(peers, ports)| {
            let mut m = serde_json::Map::new();
            if let Some(p) = peers {
                m.insert(peers_key.into(), json!(p));
            }
            if let Some(p) = ports {
                m.insert("ports".into(), json!(p));
            }
            Value::Object(m)
        })
}

fn policy(n: usize) -> impl Strategy<Value = Value> {
    (
        prop::sample::select(NAMESPACES.to_vec()),
        selector(&["app", "role"]),
        prop::sample::select(vec![
            None,
            Some(vec!["Ingress"]),
            Some(vec!["Egress"]),
            Some(vec!["Ingress", "Egress"]),
        ]),
        prop::option::of(prop::collection::vec(rule("from"), 0..=2)),
        prop::option::of(prop::collection::vec(rule("to"), 0..=2)),
    )
        .prop_map(move |(ns, sel, types, ingress, egress)| {
            let mut spec = serde_json::Map::new();
            spec.insert("podSelector".into(), sel);
            if let Some(t) = types {
                spec.insert("policyTypes".into(), json!(t));
            }
            if let Some(i) = ingress {
                spec.insert("ingress".into(), json!(i));
            }
            if let Some(e) = egress {
                spec.insert("egress".into(), json!(e));
            }
            json!({
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": {"name": format!("p{n}"), "namespace": ns},
                "spec": Value::Object(spec),
            })
        })
}

fn pods() -> impl Strategy<Value = Vec<Pod>> {
    prop::collection::vec(
        (
            prop::sample::select(NAMESPACES.to_vec()),
            label_map(),
            prop::bool::ANY,
        ),
        1..=5,
    )
    .prop_map(|specs| {
        specs
            .into_iter()
            .enumerate()
            .map(|(i, (ns, labels, named))| Pod {
                namespace: ns.into(),
                name: format!("pod{i}"),
                labels,
                ip: Some(format!("10.0.{}.{}", i % 4, 1 + i).parse().unwrap()),
                ports: if named {
                    vec![
                        ContainerPort {
                            name: Some("http".into()),
                            port: 80,
                            protocol: "TCP".into(),
                        },
                        ContainerPort {
                            name: Some("dns".into()),
                            port: 81,
                            protocol: "UDP".into(),
                        },
                    ]
                } else {
                    Vec::new()
                },
                service_account: "default".into(),
            })
            .collect()
    })
}

fn namespaces() -> impl Strategy<Value = Vec<(String, Labels)>> {
    prop::collection::vec(prop::option::of(prop::sample::select(vec!["x", "y"])), 3).prop_map(
        |teams| {
            NAMESPACES
                .iter()
                .zip(teams)
                .map(|(n, t)| {
                    let mut l: Labels =
                        [("kubernetes.io/metadata.name".to_string(), n.to_string())].into();
                    if let Some(t) = t {
                        l.insert("team".into(), t.into());
                    }
                    (n.to_string(), l)
                })
                .collect()
        },
    )
}

fn world() -> impl Strategy<Value = World> {
    (
        namespaces(),
        pods(),
        prop::collection::vec(0usize..1000, 0..=4).prop_flat_map(|ids| {
            ids.into_iter()
                .enumerate()
                .map(|(n, _)| policy(n))
                .collect::<Vec<_>>()
        }),
    )
        .prop_map(|(namespaces, pods, policies)| World {
            namespaces,
            pods,
            policies,
        })
}

fn cluster(w: &World) -> Cluster {
    let mut c = Cluster {
        namespaces: w
            .namespaces
            .iter()
            .map(|(n, l)| Namespace {
                name: n.clone(),
                labels: l.clone(),
            })
            .collect(),
        pods: w.pods.clone(),
        ..Cluster::default()
    };
    for p in &w.policies {
        let problems = load_str(&mut c, &p.to_string(), "generated");
        assert!(problems.is_empty(), "{problems:?}\n{p}");
    }
    c
}

const PROBES: &[(u16, &str)] = &[(80, "TCP"), (81, "UDP"), (82, "TCP"), (83, "SCTP")];

fn every_verdict(c: &Cluster) -> Vec<(String, Verdict)> {
    let mut out = Vec::new();
    for from in &c.pods {
        for to in &c.pods {
            for &(port, proto) in PROBES {
                let conn = Connection {
                    from: Endpoint::Pod(from),
                    to: Endpoint::Pod(to),
                    port,
                    protocol: proto,
                    request: None,
                };
                out.push((
                    format!("{} -> {} {port}/{proto}", from.id(), to.id()),
                    check(c, &conn),
                ));
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// check(), the Index (by position and by endpoint) and the reference agree on
    /// every pod pair, outside address and probe port.
    #[test]
    fn check_and_index_agree_with_the_reference(w in world()) {
        let c = cluster(&w);
        let index = Index::new(&c);
        let outside = IpAddr::from([10, 0, 1, 9]);
        for (i, from) in c.pods.iter().enumerate() {
            let mut targets: Vec<(Option<usize>, Endpoint<'_>, Target<'_>)> = c
                .pods
                .iter()
                .enumerate()
                .map(|(j, p)| (Some(j), Endpoint::Pod(p), Target::Pod(p)))
                .collect();
            targets.push((None, Endpoint::World { ip: outside, name: None }, Target::World(outside)));
            for (j, to, target) in targets {
                for &(port, proto) in PROBES {
                    let conn = Connection { from: Endpoint::Pod(from), to, port, protocol: proto, request: None };
                    let v = check(&c, &conn);
                    let src = Target::Pod(from);
                    let (eg, eg_iso) = reference_direction(&w, "Egress", &src, &target, &target, port, proto);
                    let (ing, ing_iso) = reference_direction(&w, "Ingress", &target, &src, &target, port, proto);
                    let what = format!("{} -> {} {port}/{proto}\n{v:#?}\npolicies: {:#}", from.id(), to.id(), json!(w.policies));
                    prop_assert_eq!((v.egress.allowed, v.egress.isolated), (eg, eg_iso), "egress {}", what);
                    prop_assert_eq!((v.ingress.allowed, v.ingress.isolated), (ing, ing_iso), "ingress {}", what);
                    prop_assert_eq!(v.allowed, eg && ing);
                    prop_assert_eq!(&index.check(&conn), &v);
                    if let Some(j) = j {
                        prop_assert_eq!(&index.check_pods(i, j, port, proto), &v);
                        prop_assert_eq!(index.allows_pods(i, j, port, proto), (eg, ing));
                    }
                }
            }
        }
    }

    /// Adding a rule to a policy, or a policy, never removes a connection, except by
    /// isolating a direction that was not isolated (the API's default deny).
    #[test]
    fn adding_an_allow_never_removes_a_connection_but_by_isolating(
        w in world(),
        extra in policy(99),
        extra_rule in rule("from"),
    ) {
        let before = every_verdict(&cluster(&w));
        let mut more = World { namespaces: w.namespaces.clone(), pods: w.pods.clone(), policies: w.policies.clone() };
        more.policies.push(extra);
        if let Some(p) = more.policies.first_mut()
            && let Some(rules) = p["spec"].get_mut("ingress").and_then(Value::as_array_mut)
        {
            rules.push(extra_rule);
        }
        let after = every_verdict(&cluster(&more));
        for ((what, b), (_, a)) in before.iter().zip(&after) {
            if b.allowed && !a.allowed {
                let newly_isolated = (a.ingress.isolated && !b.ingress.isolated)
                    || (a.egress.isolated && !b.egress.isolated);
                prop_assert!(newly_isolated, "{what}: removed without isolating\n{b:#?}\n{a:#?}");
            }
        }
    }

    /// A CiliumNetworkPolicy with only deny rules never adds a connection (to
    /// NetworkPolicies and a CNP allowing, maybe through L7 rules); the Index and its
    /// matrix path agree with check() on them.
    #[test]
    fn a_deny_policy_never_adds_a_connection(
        w in world(),
        allow in prop::option::of((
            prop::sample::select(NAMESPACES.to_vec()),
            selector(&["app", "role"]),
            selector(&["app", "role"]),
            prop::bool::ANY,
            prop::option::of(79u16..83),
            prop::bool::ANY,
        )),
        ns in prop::sample::select(NAMESPACES.to_vec()),
        subject in selector(&["app", "role"]),
        peer in selector(&["app", "role"]),
        ingress in prop::bool::ANY,
        port in prop::option::of(79u16..83),
    ) {
        let mut c0 = cluster(&w);
        if let Some((ns, subject, peer, ingress, port, l7)) = allow {
            let (key, peers) = if ingress { ("ingress", "fromEndpoints") } else { ("egress", "toEndpoints") };
            let mut r = serde_json::Map::new();
            r.insert(peers.into(), json!([peer]));
            if let Some(p) = port {
                let mut pr = json!({"ports": [{"port": p.to_string(), "protocol": "TCP"}]});
                if l7 {
                    pr["rules"] = json!({"http": [{"method": "GET"}]});
                }
                r.insert("toPorts".into(), json!([pr]));
            }
            let mut spec = serde_json::Map::new();
            spec.insert("endpointSelector".into(), subject);
            spec.insert(key.into(), json!([Value::Object(r)]));
            let cnp = json!({
                "apiVersion": "cilium.io/v2",
                "kind": "CiliumNetworkPolicy",
                "metadata": {"name": "allow", "namespace": ns},
                "spec": Value::Object(spec),
            });
            let problems = load_str(&mut c0, &cnp.to_string(), "generated");
            prop_assert!(problems.is_empty(), "{:?}", problems);
        }
        let before = every_verdict(&c0);
        let (key, peers) = if ingress { ("ingressDeny", "fromEndpoints") } else { ("egressDeny", "toEndpoints") };
        let mut r = serde_json::Map::new();
        r.insert(peers.into(), json!([peer]));
        let mut r = Value::Object(r);
        if let Some(p) = port {
            r["toPorts"] = json!([{"ports": [{"port": p.to_string(), "protocol": "TCP"}]}]);
        }
        let mut spec = serde_json::Map::new();
        spec.insert("endpointSelector".into(), subject);
        spec.insert(key.into(), json!([r]));
        let cnp = json!({
            "apiVersion": "cilium.io/v2",
            "kind": "CiliumNetworkPolicy",
            "metadata": {"name": "deny", "namespace": ns},
            "spec": Value::Object(spec),
        });
        let mut c = c0.clone();
        let problems = load_str(&mut c, &cnp.to_string(), "generated");
        prop_assert!(problems.is_empty(), "{:?}", problems);
        let after = every_verdict(&c);
        for ((what, b), (_, a)) in before.iter().zip(&after) {
            prop_assert!(!a.allowed || b.allowed, "{}: added by a deny policy", what);
        }
        let index = Index::new(&c);
        for (i, _) in c.pods.iter().enumerate() {
            for (j, _) in c.pods.iter().enumerate() {
                for &(port, proto) in PROBES {
                    let conn = Connection { from: Endpoint::Pod(&c.pods[i]), to: Endpoint::Pod(&c.pods[j]), port, protocol: proto, request: None };
                    let v = check(&c, &conn);
                    prop_assert_eq!(index.allows_pods(i, j, port, proto), (v.egress.allowed, v.ingress.allowed));
                    prop_assert_eq!(index.check_pods(i, j, port, proto), v);
                }
            }
        }
    }
}

/// What a verdict says, without the rule positions a removal shifts.
fn decision(v: &Verdict) -> (bool, bool, bool, bool, bool) {
    (
        v.allowed,
        v.egress.allowed,
        v.egress.isolated,
        v.ingress.allowed,
        v.ingress.isolated,
    )
}

/// `w` without what lint's finding `f` points at: the policy (selects nothing), a
/// direction's rules (ignored by policyTypes), a rule (shadowed, or never matching),
/// or a peer or port (never matching; the whole rule when it is the rule's only one).
fn without(w: &World, f: &plumb_policy::lint::Finding) -> World {
    let mut w = w.clone();
    let name = f.policy.rsplit('/').next().unwrap();
    let i = w
        .policies
        .iter()
        .position(|p| {
            p["metadata"]["name"] == name
                && f.policy.contains(&format!(
                    " {}/",
                    p["metadata"]["namespace"].as_str().unwrap()
                ))
        })
        .unwrap();
    let parts: Vec<&str> = f.part.split('.').collect();
    match parts.as_slice() {
        ["spec", "podSelector"] => {
            w.policies.remove(i);
        }
        ["spec", dir] if !dir.contains('[') => {
            w.policies[i]["spec"].as_object_mut().unwrap().remove(*dir);
        }
        ["spec", rule, rest @ ..] => {
            let (dir, r) = rule.trim_end_matches(']').split_once('[').unwrap();
            let r: usize = r.parse().unwrap();
            let rules = w.policies[i]["spec"][dir].as_array_mut().unwrap();
            match rest {
                [] => {
                    rules.remove(r);
                }
                [item] => {
                    let (key, k) = item.trim_end_matches(']').split_once('[').unwrap();
                    let k: usize = k.parse().unwrap();
                    let list = rules[r][key].as_array_mut().unwrap();
                    if list.len() == 1 {
                        rules.remove(r);
                    } else {
                        list.remove(k);
                    }
                }
                other => panic!("{other:?}"),
            }
        }
        other => panic!("{other:?}"),
    }
    w
}

/// Lint has no false findings: removing what a finding points at (a policy that
/// selects nothing, a rule or peer that never matches, a shadowed rule, rules
/// policyTypes ignores) changes no verdict, one finding at a time. The run must have
/// met every kind of finding the generator can produce.
#[test]
fn removing_what_lint_reports_changes_no_verdict() {
    use std::cell::RefCell;
    use std::collections::BTreeMap;
    let seen: RefCell<BTreeMap<String, usize>> = RefCell::new(BTreeMap::new());
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(600));
    runner
        .run(&world(), |w| {
            let c = cluster(&w);
            let before: Vec<_> = every_verdict(&c)
                .into_iter()
                .map(|(k, v)| (k, decision(&v)))
                .collect();
            for f in plumb_policy::lint::lint(&c) {
                let kind = format!(
                    "{} {}",
                    f.kind.name(),
                    f.part
                        .rsplit('.')
                        .next()
                        .unwrap()
                        .split('[')
                        .next()
                        .unwrap()
                );
                *seen.borrow_mut().entry(kind).or_default() += 1;
                let after: Vec<_> = every_verdict(&cluster(&without(&w, &f)))
                    .into_iter()
                    .map(|(k, v)| (k, decision(&v)))
                    .collect();
                for (b, a) in before.iter().zip(&after) {
                    prop_assert_eq!(
                        b,
                        a,
                        "after removing what {} points at\npolicies: {:#}",
                        f,
                        json!(w.policies)
                    );
                }
            }
            Ok(())
        })
        .unwrap();
    let seen = seen.into_inner();
    for kind in [
        "selects-nothing podSelector",
        "never-matches from",
        "never-matches egress",
        "shadowed ingress",
        "shadowed egress",
    ] {
        assert!(
            seen.get(kind).is_some_and(|n| *n > 0),
            "no {kind} finding in the run: {seen:?}"
        );
    }
}
