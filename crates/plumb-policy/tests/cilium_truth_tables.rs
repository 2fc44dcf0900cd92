//! CiliumNetworkPolicy evaluation against the shared corpus's Cilium truth tables
//! (the Star Wars demo and `cilium connectivity test` expectations); see
//! shared/corpus/policy/README.md (the NetworkPolicy recipes are in
//! `recipes_truth_table.rs`).

use plumb_policy::cilium::Request;
use plumb_policy::eval::{Connection, Endpoint, Verdict, check};
use plumb_policy::load::load_str;
use plumb_policy::model::{Cluster, ContainerPort, Labels, Pod};
use std::path::Path;

fn labels(s: &str) -> Labels {
    s.split(',')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap();
            (k.to_string(), v.to_string())
        })
        .collect()
}

fn pod(ns: &str, name: &str, l: &str, ports: &[(u16, &str)]) -> Pod {
    Pod {
        namespace: ns.into(),
        name: name.into(),
        labels: labels(l),
        ip: None,
        ports: ports
            .iter()
            .map(|(p, n)| ContainerPort {
                name: (!n.is_empty()).then(|| n.to_string()),
                port: *p,
                protocol: "TCP".into(),
            })
            .collect(),
        service_account: "default".into(),
    }
}

fn load(cluster: &mut Cluster, path: &Path, subst: &[(&str, &str)]) {
    let mut text = plumb_testkit::read(path);
    for (k, v) in subst {
        text = text.replace(k, v);
    }
    let problems = load_str(cluster, &text, &path.display().to_string());
    assert!(problems.is_empty(), "{problems:?}");
}

/// The Star Wars demo: L3/L4 drops and L7 403s, and `ingress: [{}]` meaning
/// default deny in a CNP.
#[test]
fn cilium_starwars_every_case() {
    let Some(corpus) = plumb_testkit::corpus_dir() else {
        return;
    };
    let dir = corpus.join("policy/cilium-starwars");
    let table = plumb_testkit::read(&dir.join("starwars-truth-table.tsv"));
    let mut checked = 0;
    for line in table
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("case\t"))
    {
        let f: Vec<&str> = line.split('\t').collect();
        let mut cluster = Cluster {
            pods: vec![
                pod(
                    "default",
                    "deathstar",
                    "org=empire,class=deathstar",
                    &[(80, "")],
                ),
                pod("default", "tiefighter", "org=empire,class=tiefighter", &[]),
                pod("default", "xwing", "org=alliance,class=xwing", &[]),
            ],
            ..Cluster::default()
        };
        let file = f[1].split_whitespace().next().unwrap();
        if file != "(none)" {
            load(&mut cluster, &dir.join(file), &[]);
        }
        let (method, path) = f[3].split_once(' ').unwrap();
        let request = Request::Http {
            method: method.into(),
            path: path.into(),
        };
        let v = check(
            &cluster,
            &Connection {
                from: Endpoint::Pod(cluster.pod(&format!("default/{}", f[2])).unwrap()),
                to: Endpoint::Pod(cluster.pod("default/deathstar").unwrap()),
                port: 80,
                protocol: "TCP",
                request: Some(&request),
            },
        );
        let got = if !v.egress.allowed || !v.ingress.allowed {
            "deny-L3L4"
        } else if v.allowed {
            "allow-HTTP-200"
        } else {
            "deny-L7"
        };
        assert_eq!(got, f[5], "{line}\n{v:#?}");
        if got == "deny-L7" {
            assert_eq!(v.ingress.l7[0].rules, ["http POST /v1/request-landing"]);
        }
        checked += 1;
    }
    assert_eq!(checked, 9);
}

/// `cilium connectivity test`'s template values: the cluster name and external
/// targets as cilium-cli passes them by default (1.1.1.1 / 1.0.0.1 per the table's
/// header; the external CIDR is any prefix holding both).
const SUBST: &[(&str, &str)] = &[
    ("{{.ClusterNameLocal}}", "default"),
    ("{{.ClusterNameRemote}}", "default"),
    ("{{trimSuffix .ExternalTarget \".\"}}", "one.one.one.one"),
    ("{{.ExternalTarget}}", "one.one.one.one."),
    ("{{.ExternalOtherTarget}}", "k8s.io."),
    ("{{.ExternalCIDRv4}}", "1.0.0.0/8"),
    ("{{.ExternalCIDRv6}}", "2606:4700:4700::/96"),
    ("{{.ExternalIPv4 | ipToCIDR }}", "1.1.1.1/32"),
    ("{{.ExternalIPv6 | ipToCIDR }}", "2606:4700:4700::1111/128"),
    ("{{.ExternalOtherIPv4 | ipToCIDR }}", "1.0.0.1/32"),
    ("{{.ExternalIPv4}}", "1.1.1.1"),
    ("{{.ExternalOtherIPv4}}", "1.0.0.1"),
];

fn connectivity_cluster() -> Cluster {
    let ns = "cilium-test";
    Cluster {
        pods: vec![
            pod(ns, "client", "name=client,kind=client", &[]),
            pod(ns, "client2", "name=client2,kind=client,other=client", &[]),
            pod(
                ns,
                "client3",
                "name=client3,kind=client,other=client-other-node",
                &[],
            ),
            pod(
                ns,
                "echo-same-node",
                "name=echo-same-node,kind=echo,other=echo",
                &[(8080, "http-8080")],
            ),
            pod(
                ns,
                "echo-other-node",
                "name=echo-other-node,kind=echo,first=echo",
                &[(8080, "http-8080")],
            ),
            pod("kube-system", "coredns", "k8s-app=kube-dns", &[(53, "dns")]),
        ],
        ..Cluster::default()
    }
}

/// The pods a table's source/destination column names.
fn endpoints<'c>(c: &'c Cluster, col: &str) -> Vec<Endpoint<'c>> {
    let by = |names: &[&str]| -> Vec<Endpoint<'c>> {
        names
            .iter()
            .map(|n| Endpoint::Pod(c.pod(&format!("cilium-test/{n}")).unwrap()))
            .collect()
    };
    let first = col.split_whitespace().next().unwrap();
    match first {
        "client*" | "client/client2/client3" | "kind=client" => {
            by(&["client", "client2", "client3"])
        }
        "client" => by(&["client"]),
        "client2" => by(&["client2"]),
        "echo-*" | "kind=echo" => by(&["echo-same-node", "echo-other-node"]),
        "echo-same-node" => by(&["echo-same-node"]),
        "echo-other-node" => by(&["echo-other-node"]),
        "external" => vec![
            Endpoint::World {
                ip: "1.1.1.1".parse().unwrap(),
                name: None,
            },
            Endpoint::World {
                ip: "1.0.0.1".parse().unwrap(),
                name: None,
            },
        ],
        "ExternalOtherIP" => vec![Endpoint::World {
            ip: "1.0.0.1".parse().unwrap(),
            name: None,
        }],
        "ExternalIP" => vec![Endpoint::World {
            ip: "1.1.1.1".parse().unwrap(),
            name: None,
        }],
        "one.one.one.one" | "ExternalTarget" => vec![Endpoint::World {
            ip: "1.1.1.1".parse().unwrap(),
            name: Some("one.one.one.one."),
        }],
        "ExternalOtherTarget" => vec![Endpoint::World {
            ip: "1.0.0.1".parse().unwrap(),
            name: Some("k8s.io."),
        }],
        other => panic!("unknown endpoint column {other:?}"),
    }
}

/// Rows the table gives in a form plumb cannot replay as written, with why. The test
/// asserts exactly this list.
const NOT_REPLAYED: &[(&str, &str)] = &[
    (
        "all-entities-deny",
        "destination \"echo-* and external\" on \"any\" port: replayed as echo-* and 1.1.1.1 on 8080/TCP and 443/TCP",
    ),
    (
        "client-egress-l7",
        "\"echo-* or one.one.one.one\": replayed as both, each on its own port",
    ),
    (
        "client-egress-l7-method",
        "the table names the method (POST) but not the path: replayed with /public, the path the policy's description names",
    ),
    (
        "dns-only",
        "\"echo-* / world\" on \"8080 / 80/443\": replayed as echo-* :8080 and 1.1.1.1 :80 and :443",
    ),
];

#[test]
fn cilium_connectivity_test_expectations() {
    let Some(corpus) = plumb_testkit::corpus_dir() else {
        return;
    };
    let dir = corpus.join("policy/cilium-connectivity-test");
    let table = plumb_testkit::read(&dir.join("expectations.tsv"));
    let mut checked = 0;
    let mut special = Vec::new();
    let mut wrong = Vec::new();
    for line in table
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("test\t"))
    {
        let f: Vec<&str> = line.split('\t').collect();
        let (test, pols, src, dst, port, verdict) = (f[0], f[1], f[2], f[3], f[4], f[7]);
        let mut c = connectivity_cluster();
        // The policies: file names in the column; "same" repeats the previous row's.
        let files = policy_files(test, pols);
        // cilium-cli applies the test's policies in its namespace.
        let mut subst = SUBST.to_vec();
        subst.push(("metadata:\n", "metadata:\n  namespace: cilium-test\n"));
        for file in &files {
            load(&mut c, &dir.join(file), &subst);
        }
        let froms = endpoints(&c, src);
        let mut cases: Vec<(Vec<Endpoint<'_>>, u16, &str, Option<Request>)> = Vec::new();
        match (test, dst) {
            ("all-entities-deny", _) | ("dns-only", _) => {
                special.push(test);
                cases.push((endpoints(&c, "echo-*"), 8080, "TCP", None));
                let world = vec![Endpoint::World {
                    ip: "1.1.1.1".parse().unwrap(),
                    name: None,
                }];
                cases.push((world.clone(), 443, "TCP", None));
                cases.push((world, 80, "TCP", None));
            }
            ("client-egress-l7", d) if d.contains(" or ") => {
                special.push(test);
                let get = || {
                    Some(Request::Http {
                        method: "GET".into(),
                        path: "/".into(),
                    })
                };
                cases.push((endpoints(&c, "echo-*"), 8080, "TCP", get()));
                cases.push((endpoints(&c, "one.one.one.one"), 80, "TCP", get()));
            }
            ("client-egress-l7-method", _) if port.ends_with("POST") => {
                special.push(test);
                let post = Some(Request::Http {
                    method: "POST".into(),
                    path: "/public".into(),
                });
                cases.push((endpoints(&c, dst), 8080, "TCP", post));
            }
            _ => {
                let (p, proto, req) = parse_port(port);
                cases.push((endpoints(&c, dst), p, proto, req));
            }
        }
        let expect_allow = verdict == "allow";
        for (tos, p, proto, req) in &cases {
            for from in &froms {
                for to in tos {
                    if from.id() == to.id() {
                        continue; // loopback is not asserted upstream
                    }
                    let v: Verdict = check(
                        &c,
                        &Connection {
                            from: *from,
                            to: *to,
                            port: *p,
                            protocol: proto,
                            request: req.as_ref(),
                        },
                    );
                    checked += 1;
                    if v.allowed != expect_allow {
                        wrong.push(format!(
                            "{test}: {} -> {} {p}/{proto}: expected {verdict}, got {}\n{v:?}",
                            from.id(),
                            to.id(),
                            v.allowed
                        ));
                    }
                }
            }
        }
    }
    special.sort();
    special.dedup();
    let listed: Vec<&str> = NOT_REPLAYED.iter().map(|(t, _)| *t).collect();
    assert_eq!(special, listed);
    assert!(
        wrong.is_empty(),
        "{} wrong of {checked}:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    assert!(checked > 60, "{checked}");
}

fn policy_files(test: &str, col: &str) -> Vec<String> {
    let col = if col == "same" {
        previous(test)
    } else {
        col.to_string()
    };
    if col == "(none)" {
        return Vec::new();
    }
    col.split(" + ")
        .map(|p| {
            let name = p.split_whitespace().next().unwrap();
            if name.ends_with(".yaml") {
                name.to_string()
            } else {
                format!("{name}.yaml")
            }
        })
        .collect()
}

/// The policies of a test's first row (its later rows say "same").
fn previous(test: &str) -> String {
    match test {
        "client-egress-to-echo-deny" => {
            "allow-all-egress.yaml + allow-all-ingress.yaml + client-egress-to-echo-deny.yaml"
                .into()
        }
        "echo-ingress-from-other-client-deny" => {
            "allow-all-egress + allow-all-ingress + echo-ingress-from-other-client-deny.yaml".into()
        }
        "client-egress-to-cidr-deny" => {
            "allow-all-egress + client-egress-to-cidr-external-deny.yaml".into()
        }
        "client-egress-l7" => "client-egress-only-dns + client-egress-l7-http.yaml".into(),
        "client-egress-l7-method" => {
            "client-egress-only-dns + client-egress-l7-http-method.yaml".into()
        }
        "to-fqdns" => "client-egress-to-fqdns.yaml + client-egress-only-dns".into(),
        other => panic!("no first row for {other}"),
    }
}

/// `8080/TCP`, `ICMP`, `8080/TCP, path != /`, `8080/TCP POST`, `80/TCP GET /`.
fn parse_port(col: &str) -> (u16, &'static str, Option<Request>) {
    if col.starts_with("ICMP") {
        return (8, "ICMP", None);
    }
    let (pp, rest) = col.split_once([' ', ',']).unwrap_or((col, ""));
    let (p, proto) = pp.split_once('/').unwrap();
    assert_eq!(proto, "TCP");
    let rest = rest.trim_start_matches([',', ' ']);
    let req = if rest.starts_with("path != /") {
        Some(Request::Http {
            method: "GET".into(),
            path: "/other".into(),
        })
    } else if let Some(m) = rest.split_whitespace().next() {
        let path = rest.split_whitespace().nth(1).unwrap_or("/");
        Some(Request::Http {
            method: m.into(),
            path: path.into(),
        })
    } else {
        None
    };
    (p.parse().unwrap(), "TCP", req)
}
