//! `lint` on real policies (the shared corpus's examples, meant to be correct: no
//! finding, except the ones listed here with why) and on small hand-written ones (each
//! kind of finding, with its exact text).

use plumb_policy::lint::{Kind, lint};
use plumb_policy::load::load_str;
use plumb_policy::model::Cluster;
use std::path::{Path, PathBuf};

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            yaml_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(p);
        }
    }
}

fn lint_text(text: &str) -> Vec<String> {
    let mut c = Cluster::default();
    let problems = load_str(&mut c, text, "t.yaml");
    assert!(problems.is_empty(), "{problems:?}");
    lint(&c).iter().map(|f| f.to_string()).collect()
}

/// Every policy file of the corpus, one file at a time (with the pods it holds: the
/// Star Wars app's pods are in their own file, loaded alongside).
#[test]
fn corpus_examples_give_no_false_findings() {
    let Some(corpus) = plumb_testkit::corpus_dir() else {
        return;
    };
    let root = corpus.join("policy");
    let mut files = Vec::new();
    for d in [
        "cilium-examples",
        "cilium-starwars",
        "cilium-connectivity-test",
        "cyclonus/networkpolicies",
    ] {
        yaml_files(&root.join(d), &mut files);
    }
    let starwars_app = plumb_testkit::read(&root.join("cilium-starwars/http-sw-app.yaml"));
    let (mut linted, mut found) = (0, Vec::new());
    for f in &files {
        // cilium-cli's templates: the values do not change what lint says.
        let text = plumb_testkit::read(f)
            .replace("{{.ClusterNameLocal}}", "default")
            .replace("{{.ClusterNameRemote}}", "default")
            .replace("{{trimSuffix .ExternalTarget \".\"}}", "one.one.one.one")
            .replace("{{.ExternalTarget}}", "one.one.one.one.")
            .replace("{{.ExternalOtherTarget}}", "k8s.io.")
            .replace("{{.ExternalCIDRv4}}", "1.0.0.0/8")
            .replace("{{.ExternalCIDRv6}}", "2606:4700:4700::/96")
            .replace("{{.ExternalIPv4 | ipToCIDR }}", "1.1.1.1/32")
            .replace("{{.ExternalIPv6 | ipToCIDR }}", "2606:4700:4700::1111/128")
            .replace("{{.ExternalOtherIPv4 | ipToCIDR }}", "1.0.0.1/32")
            .replace("{{.ExternalIPv4}}", "1.1.1.1")
            .replace("{{.ExternalOtherIPv4}}", "1.0.0.1");
        let mut c = Cluster::default();
        let name = f.strip_prefix(&root).unwrap().display().to_string();
        load_str(&mut c, &text, &name);
        if f.starts_with(root.join("cilium-starwars")) {
            load_str(&mut c, &starwars_app, "http-sw-app.yaml");
        }
        linted += c.policies.len() + c.cilium.len();
        found.extend(lint(&c).iter().map(|x| x.to_string()));
    }
    assert!(linted > 100, "{linted} policies linted");
    assert_eq!(found, EXPECTED_ON_CORPUS, "{found:#?}");
}

/// Findings on the corpus's examples that are right: the host-firewall examples open
/// with a rule allowing every port from (or to) remote-node and health, so the later
/// rules for single ports of the same entities add nothing (the files say that rule is
/// there for ICMP and that the others matter once it is commented out).
const EXPECTED_ON_CORPUS: &[&str] = &[
    "cilium-examples/host/lock-down-dev-vms-remote-node.yaml (document 1): CiliumClusterwideNetworkPolicy lock-down-dev-vms spec.ingress[2]: shadowed: everything it allows is allowed by spec.ingress[0] of the same policy",
    "cilium-examples/host/lock-down-dev-vms-remote-node.yaml (document 1): CiliumClusterwideNetworkPolicy lock-down-dev-vms spec.ingress[4]: shadowed: everything it allows is allowed by spec.ingress[0] of the same policy",
    "cilium-examples/host/lock-down-dev-vms-remote-node.yaml (document 1): CiliumClusterwideNetworkPolicy lock-down-dev-vms spec.egress[2]: shadowed: everything it allows is allowed by spec.egress[0] of the same policy",
    "cilium-examples/host/lock-down-dev-vms-remote-node.yaml (document 1): CiliumClusterwideNetworkPolicy lock-down-dev-vms spec.egress[3]: shadowed: everything it allows is allowed by spec.egress[0] of the same policy",
    "cilium-examples/host/lock-down-gke.yaml (document 1): CiliumClusterwideNetworkPolicy lock-down-gke spec.ingress[2]: shadowed: everything it allows is allowed by spec.ingress[0] of the same policy",
    "cilium-examples/host/lock-down-gke.yaml (document 1): CiliumClusterwideNetworkPolicy lock-down-gke spec.ingress[4]: shadowed: everything it allows is allowed by spec.ingress[0] of the same policy",
    "cilium-examples/host/lock-down-gke.yaml (document 1): CiliumClusterwideNetworkPolicy lock-down-gke spec.egress[8]: shadowed: everything it allows is allowed by spec.egress[0] of the same policy",
    "cilium-examples/host/lock-down-gke.yaml (document 1): CiliumClusterwideNetworkPolicy lock-down-gke spec.egress[9]: shadowed: everything it allows is allowed by spec.egress[0] of the same policy",
];

#[test]
fn netpol_recipes_with_their_pods_give_no_finding() {
    let Some(corpus) = plumb_testkit::corpus_dir() else {
        return;
    };
    // Recipe 02a's two policies together, with the pod they select: neither has a rule
    // the other holds (web-deny-all has none).
    let dir = corpus.join("policy/netpol-recipes");
    let mut text = String::new();
    for f in [
        "01-deny-all-traffic-to-an-application.md",
        "02a-allow-all-traffic-to-an-application.md",
    ] {
        let md = plumb_testkit::read(&dir.join(f));
        let start = md.find("```yaml\n").unwrap() + 8;
        let end = start + md[start..].find("```").unwrap();
        text.push_str(&md[start..end]);
        text.push_str("---\n");
    }
    text.push_str("kind: Pod\nmetadata: {name: web, labels: {app: web}}\n");
    assert_eq!(lint_text(&text), Vec::<String>::new());
}

#[test]
fn a_policy_selecting_no_pod_of_its_namespace() {
    let f = lint_text(
        "kind: Pod\nmetadata: {name: a, namespace: x, labels: {app: api}}\n---\n\
         kind: NetworkPolicy\nmetadata: {name: p, namespace: x}\n\
         spec: {podSelector: {matchLabels: {app: web}}, ingress: [{}]}\n---\n\
         kind: NetworkPolicy\nmetadata: {name: q, namespace: other}\n\
         spec: {podSelector: {matchLabels: {app: web}}, ingress: [{}]}\n",
    );
    // q's namespace has no pod in the inputs: not judged.
    assert_eq!(
        f,
        [
            "t.yaml (document 2): NetworkPolicy x/p spec.podSelector: selects-nothing: none of the 1 pods of namespace x in the inputs has labels {app=web}"
        ]
    );
}

#[test]
fn contradictory_selectors_select_nothing_whatever_the_inputs() {
    let f = lint_text(
        "kind: NetworkPolicy\nmetadata: {name: p, namespace: x}\nspec:\n  podSelector:\n    matchLabels: {app: web}\n    matchExpressions: [{key: app, operator: NotIn, values: [web]}]\n  ingress: [{}]\n",
    );
    assert_eq!(
        f,
        [
            "t.yaml (document 1): NetworkPolicy x/p spec.podSelector: selects-nothing: no value of app satisfies {app=web, app NotIn (web)}: selects nothing"
        ]
    );
}

#[test]
fn rules_that_can_never_match() {
    let f = lint_text(
        "kind: Namespace\nmetadata: {name: x, labels: {team: a}}\n---\n\
kind: NetworkPolicy
metadata: {name: p, namespace: x}
spec:
  podSelector: {}
  policyTypes: [Ingress]
  ingress:
  - from:
    - ipBlock: {cidr: 10.1.0.0/16, except: [10.0.0.0/8]}
    - namespaceSelector: {matchLabels: {team: b}}
  - ports: [{port: 9000, endPort: 8000}]
  egress:
  - to: [{podSelector: {}}]
",
    );
    assert_eq!(
        f,
        [
            "t.yaml (document 2): NetworkPolicy x/p spec.ingress[0].from[0]: never-matches: except 10.0.0.0/8 covers all of 10.1.0.0/16: the block holds no address",
            "t.yaml (document 2): NetworkPolicy x/p spec.ingress[0].from[1]: never-matches: namespaceSelector {team=b} matches none of the 1 namespaces in the inputs",
            "t.yaml (document 2): NetworkPolicy x/p spec.ingress[1].ports[0]: never-matches: endPort 8000 is below port 9000: the range is empty (the API server refuses it)",
            "t.yaml (document 2): NetworkPolicy x/p spec.egress: never-matches: policyTypes leaves out Egress: these rules are ignored",
        ]
    );
}

#[test]
fn shadowed_rules_in_one_policy_and_by_a_broader_policy() {
    let f = lint_text(
        "kind: NetworkPolicy
metadata: {name: p, namespace: x}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress:
  - from: [{podSelector: {matchLabels: {role: api}}}]
    ports: [{port: 8000, endPort: 9000}]
  - from: [{podSelector: {matchLabels: {role: api, tier: b}}}]
    ports: [{port: 8080}]
  - from: [{ipBlock: {cidr: 10.0.0.0/8}}]
---
kind: NetworkPolicy
metadata: {name: wide, namespace: x}
spec:
  podSelector: {}
  ingress:
  - from: [{ipBlock: {cidr: 0.0.0.0/0, except: [192.168.0.0/16]}}]
",
    );
    assert_eq!(
        f,
        [
            "t.yaml (document 1): NetworkPolicy x/p spec.ingress[1]: shadowed: everything it allows is allowed by spec.ingress[0] of the same policy",
            "t.yaml (document 1): NetworkPolicy x/p spec.ingress[2]: shadowed: everything it allows is allowed by spec.ingress[0] of NetworkPolicy x/wide (t.yaml (document 2)), which selects at least the same pods",
        ]
    );
    // Not shadowed: a port outside the range, a peer in another namespace, an
    // exception that cuts into the block.
    let none = lint_text(
        "kind: NetworkPolicy
metadata: {name: p, namespace: x}
spec:
  podSelector: {}
  ingress:
  - from: [{podSelector: {matchLabels: {role: api}}}]
    ports: [{port: 8000, endPort: 9000}]
  - from: [{podSelector: {matchLabels: {role: api}}}]
    ports: [{port: 9001}]
  - from: [{podSelector: {matchLabels: {role: api}}, namespaceSelector: {}}]
    ports: [{port: 8080}]
  - from: [{ipBlock: {cidr: 10.0.0.0/8}}]
  - from: [{ipBlock: {cidr: 0.0.0.0/0, except: [10.1.0.0/16]}}]
",
    );
    assert_eq!(none, Vec::<String>::new());
}

#[test]
fn cilium_findings() {
    let f = lint_text(
        "apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: c, namespace: x}
spec:
  endpointSelector: {matchLabels: {io.kubernetes.pod.namespace: y, app: web}}
  ingress:
  - {}
  - fromEndpoints: [{matchLabels: {role: api}}]
    toPorts:
    - ports: [{port: \"80\", protocol: UDP}]
      rules: {http: [{method: GET}]}
  - fromEndpoints: [{matchLabels: {role: api}}]
    toPorts:
    - ports: [{port: \"8080\"}]
      rules: {kafka: [{topic: t}]}
  - fromEndpoints: [{matchLabels: {role: api}}]
    toPorts:
    - ports: [{port: \"53\", protocol: UDP}]
      rules: {dns: [{matchPattern: \"*\"}]}
  - fromEntities: [all]
  - fromCIDRSet: [{cidr: 10.0.0.0/24, except: [10.0.0.0/23]}]
    toPorts: [{ports: [{port: \"443\", protocol: TCP}]}]
",
    );
    let kinds: Vec<&str> = f.iter().map(|s| s.split(": ").nth(2).unwrap()).collect();
    assert_eq!(
        f[0],
        "t.yaml (document 1): CiliumNetworkPolicy x/c spec.endpointSelector: selects-nothing: io.kubernetes.pod.namespace=y: a CiliumNetworkPolicy selects pods of its own namespace (x) only; this match leaves it selecting none"
    );
    assert_eq!(
        f[1],
        "t.yaml (document 1): CiliumNetworkPolicy x/c spec.ingress[1].toPorts[0]: l7-protocol: HTTP rules on protocol UDP: HTTP runs over TCP only, and Cilium refuses the policy (\"L7 rules can only apply to TCP\"); write protocol: TCP"
    );
    assert!(f[2].contains("ingress[1]: shadowed: its L7 rules have no effect: everything it matches is allowed without L7 rules by spec.ingress[4]"), "{}", f[3]);
    assert!(f[3].contains("ingress[2].toPorts[0]: l7-protocol: Kafka rules on protocol ANY (the default when no protocol is given)"), "{}", f[4]);
    assert_eq!(
        kinds,
        [
            "selects-nothing",
            "l7-protocol",
            "shadowed",
            "l7-protocol",
            "shadowed",
            "l7-protocol",
            "shadowed",
            "never-matches",
        ],
        "{f:#?}"
    );
    assert!(
        f[5].contains("ingress[3].toPorts[0]: l7-protocol: DNS rules apply to egress only"),
        "{}",
        f[6]
    );
    assert!(
        f[7].contains(
            "ingress[5].fromCIDRSet[0]: never-matches: except 10.0.0.0/23 covers all of 10.0.0.0/24"
        ),
        "{}",
        f[8]
    );
    // A plain rule makes another rule's L7 rules for the same peers and port moot
    // (that rule is reported, not the plain one); two L7 rules add up.
    let l7 = |second: &str| {
        lint_text(&format!(
            "apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {{name: c, namespace: x}}
spec:
  endpointSelector: {{}}
  ingress:
  - fromEndpoints: [{{matchLabels: {{role: api}}}}]
    toPorts:
    - ports: [{{port: \"80\", protocol: TCP}}]
      rules: {{http: [{{method: GET}}]}}
  - fromEndpoints: [{{matchLabels: {{role: api}}}}]
    toPorts:
    - ports: [{{port: \"80\", protocol: TCP}}]
{second}"
        ))
    };
    assert_eq!(
        l7(""),
        [
            "t.yaml (document 1): CiliumNetworkPolicy x/c spec.ingress[0]: shadowed: its L7 rules have no effect: everything it matches is allowed without L7 rules by spec.ingress[1] of the same policy"
        ]
    );
    assert_eq!(
        l7("      rules: {http: [{method: POST}]}\n"),
        Vec::<String>::new()
    );
}

/// Cilium overwrites a `k8s:` namespace match of a CNP's endpointSelector with the
/// policy's namespace (and logs it): the match never applies.
#[test]
fn a_replaced_namespace_match_is_reported() {
    let f = lint_text(
        "apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: c, namespace: x}
spec:
  endpointSelector: {matchLabels: {k8s:io.kubernetes.pod.namespace: y}}
  ingress:
  - fromEntities: [world]
",
    );
    assert_eq!(
        f,
        [
            "t.yaml (document 1): CiliumNetworkPolicy x/c spec.endpointSelector: never-matches: k8s:io.kubernetes.pod.namespace=y never applies: Cilium replaces a CiliumNetworkPolicy's namespace match with its own namespace, so it selects pods of x"
        ]
    );
}

/// The Star Wars demo's two versions of its policy under two names: the L3/L4 one
/// makes the L7 one's HTTP rules moot (whichever comes first), and nothing else is
/// reported.
#[test]
fn an_l7_policy_made_moot_by_a_plain_one_selecting_the_same_pods() {
    let Some(corpus) = plumb_testkit::corpus_dir() else {
        return;
    };
    let dir = corpus.join("policy/cilium-starwars");
    let l3 = plumb_testkit::read(&dir.join("sw_l3_l4_policy.yaml"))
        .replace("name: \"rule1\"", "name: \"l3\"");
    assert!(l3.contains("name: \"l3\""));
    let l7 = plumb_testkit::read(&dir.join("sw_l3_l4_l7_policy.yaml"));
    for order in [
        [("l3.yaml", &l3), ("l7.yaml", &l7)],
        [("l7.yaml", &l7), ("l3.yaml", &l3)],
    ] {
        let mut c = Cluster::default();
        load_str(
            &mut c,
            &plumb_testkit::read(&dir.join("http-sw-app.yaml")),
            "app.yaml",
        );
        for (name, text) in order {
            let problems = load_str(&mut c, text, name);
            assert!(problems.is_empty(), "{problems:?}");
        }
        let f: Vec<String> = lint(&c).iter().map(|f| f.to_string()).collect();
        assert_eq!(
            f,
            [
                "l7.yaml (document 1): CiliumNetworkPolicy default/rule1 spec.ingress[0]: shadowed: its L7 rules have no effect: everything it matches is allowed without L7 rules by spec.ingress[0] of CiliumNetworkPolicy default/l3 (l3.yaml (document 1)), which selects at least the same pods"
            ]
        );
    }
}

#[test]
fn kinds_print_as_documented() {
    assert_eq!(Kind::SelectsNothing.name(), "selects-nothing");
    assert_eq!(
        serde_json::to_string(&Kind::L7Protocol).unwrap(),
        "\"l7-protocol\""
    );
}

mod cilium_soundness {
    //! Removing what a lint finding on Cilium policies points at changes no verdict
    //! (with and without an HTTP request), on random CNPs and CCNPs.

    use plumb_policy::cilium::Request;
    use plumb_policy::eval::{Connection, Endpoint, check};
    use plumb_policy::lint::{Kind, lint};
    use plumb_policy::load::load_str;
    use plumb_policy::model::{Cluster, ContainerPort, Pod};
    use proptest::prelude::*;
    use serde_json::{Value, json};

    fn selector() -> impl Strategy<Value = Value> {
        prop::collection::btree_map(
            prop::sample::select(vec!["app", "role"]),
            prop::sample::select(vec!["x", "y"]),
            0..=2,
        )
        .prop_map(|m| json!({ "matchLabels": m }))
    }

    fn rule() -> impl Strategy<Value = Value> {
        (
            prop::option::of(prop::collection::vec(selector(), 1..=2)),
            prop::option::of(prop::sample::select(vec!["world", "cluster", "all"])),
            prop::option::of(prop::sample::select(vec!["10.0.0.0/8", "10.1.0.0/16"])),
            prop::option::of((
                prop::sample::select(vec!["80", "81"]),
                prop::sample::select(vec!["TCP", "ANY"]),
                prop::bool::ANY,
            )),
        )
            .prop_map(|(eps, ent, cidr, port)| {
                let mut r = serde_json::Map::new();
                if let Some(e) = eps {
                    r.insert("fromEndpoints".into(), json!(e));
                }
                if let Some(e) = ent {
                    r.insert("fromEntities".into(), json!([e]));
                }
                if let Some(c) = cidr {
                    r.insert("fromCIDRSet".into(), json!([{ "cidr": c }]));
                }
                if let Some((p, proto, l7)) = port {
                    let mut pr = json!({"ports": [{"port": p, "protocol": proto}]});
                    if l7 && proto == "TCP" {
                        pr["rules"] = json!({"http": [{"method": "GET"}]});
                    }
                    r.insert("toPorts".into(), json!([pr]));
                }
                Value::Object(r)
            })
    }

    fn policy(n: usize) -> impl Strategy<Value = Value> {
        (
            prop::sample::select(vec![Some("a"), Some("b"), None]),
            selector(),
            prop::collection::vec(rule(), 1..=3),
            prop::bool::weighted(0.2),
        )
            .prop_map(move |(ns, sel, rules, no_default_deny)| {
                let mut spec = json!({"endpointSelector": sel, "ingress": rules});
                if no_default_deny {
                    spec["enableDefaultDeny"] = json!({"ingress": false});
                }
                match ns {
                    Some(ns) => json!({"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
                        "metadata": {"name": format!("c{n}"), "namespace": ns}, "spec": spec}),
                    None => json!({"apiVersion": "cilium.io/v2", "kind": "CiliumClusterwideNetworkPolicy",
                        "metadata": {"name": format!("c{n}")}, "spec": spec}),
                }
            })
    }

    fn policies() -> impl Strategy<Value = Vec<Value>> {
        (1usize..=4).prop_flat_map(|k| (0..k).map(policy).collect::<Vec<_>>())
    }

    fn cluster(policies: &[Value]) -> Cluster {
        let mut c = Cluster::default();
        for (i, (ns, l)) in [("a", "x"), ("a", "y"), ("b", "x")].iter().enumerate() {
            c.pods.push(Pod {
                namespace: ns.to_string(),
                name: format!("p{i}"),
                labels: [
                    ("app".to_string(), l.to_string()),
                    ("role".to_string(), "x".to_string()),
                ]
                .into(),
                ip: Some(format!("10.0.0.{}", i + 1).parse().unwrap()),
                ports: vec![ContainerPort {
                    name: None,
                    port: 80,
                    protocol: "TCP".into(),
                }],
                service_account: "default".into(),
            });
        }
        for p in policies {
            let problems = load_str(&mut c, &p.to_string(), "generated");
            assert!(problems.is_empty(), "{problems:?}");
        }
        c
    }

    fn verdicts(c: &Cluster) -> Vec<bool> {
        let post = Request::Http {
            method: "POST".into(),
            path: "/".into(),
        };
        let mut out = Vec::new();
        let world = Endpoint::World {
            ip: "10.1.2.3".parse().unwrap(),
            name: None,
        };
        let froms: Vec<Endpoint<'_>> = c
            .pods
            .iter()
            .map(Endpoint::Pod)
            .chain([
                world,
                Endpoint::Reserved {
                    entity: "host",
                    node: None,
                },
            ])
            .collect();
        for from in &froms {
            for to in &c.pods {
                for port in [80, 81] {
                    for request in [None, Some(&post)] {
                        let v = check(
                            c,
                            &Connection {
                                from: *from,
                                to: Endpoint::Pod(to),
                                port,
                                protocol: "TCP",
                                request,
                            },
                        );
                        out.push(v.allowed);
                        out.push(v.ingress.isolated);
                    }
                }
            }
        }
        out
    }

    /// `policies` without what `f` points at.
    fn without(policies: &[Value], f: &plumb_policy::lint::Finding) -> Vec<Value> {
        let mut ps = policies.to_vec();
        let name = f.policy.rsplit(['/', ' ']).next().unwrap();
        let i = ps
            .iter()
            .position(|p| p["metadata"]["name"] == name)
            .unwrap();
        let parts: Vec<&str> = f.part.split('.').collect();
        match parts.as_slice() {
            ["spec", "endpointSelector"] => {
                ps.remove(i);
            }
            ["spec", rule] => {
                let r: usize = rule
                    .trim_start_matches("ingress[")
                    .trim_end_matches(']')
                    .parse()
                    .unwrap();
                ps[i]["spec"]["ingress"].as_array_mut().unwrap().remove(r);
            }
            other => panic!("{other:?}"),
        }
        ps
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        #[test]
        fn removing_what_lint_reports_changes_no_verdict(ps in policies()) {
            let c = cluster(&ps);
            let before = verdicts(&c);
            for f in lint(&c) {
                if f.kind == Kind::L7Protocol || f.part.contains("fromCIDRSet") {
                    continue; // a refused policy / a never-matching CIDR: not a removal
                }
                let after = verdicts(&cluster(&without(&ps, &f)));
                prop_assert!(before == after, "after removing what {} points at\n{:#}", f, json!(ps));
            }
        }
    }
}
