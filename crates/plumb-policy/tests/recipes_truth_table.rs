//! The NetworkPolicy recipes (ahmetb/kubernetes-network-policy-recipes) against the
//! corpus's truth table `policy/netpol-recipes/recipes-truth-table.tsv`: the policies
//! are read from the recipes' own markdown (their YAML blocks), the pods and namespaces
//! from the table's columns, and every row's verdict is the table's `spec_says`.
//!
//! A row that cannot be replayed exactly as the table writes it (a client or server
//! "any", an external client without an address, a destination that names two pods) is
//! replayed as [`NOT_EXACT`] says, and the test asserts exactly that list.

use plumb_policy::eval::{Connection, Endpoint, Index, check};
use plumb_policy::load::{documents, load_str};
use plumb_policy::model::{Cluster, ContainerPort, Labels, Namespace, Pod};
use serde_json::Value;
use std::path::Path;

/// Rows replayed otherwise than written, with how and why.
const NOT_EXACT: &[(&str, &str)] = &[
    (
        "r03",
        "server \"<any pod>\", client and port \"any\": replayed over every pod of the cluster built for the row (default/web, default/db) from clients in default and in another namespace, on 80/TCP, 5000/TCP and 53/UDP",
    ),
    (
        "r08",
        "the external client has no address in the recipe: replayed from world 203.0.113.10 (any outside address answers the same for `ingress: [{}]`)",
    ),
    (
        "r11a",
        "the server column names app=web while the port column names kube-dns: replayed to both (default/app=web on 80/TCP and kube-system/k8s-app=kube-dns on 53/UDP)",
    ),
    (
        "r12",
        "server and port \"any\", client \"<any pod>\": replayed from default/web and default/db to default/other on 80/TCP, to kube-system/kube-dns on 53/UDP and to world 93.184.216.34 on 443/TCP",
    ),
];

/// Rows whose recipe text (`expected`) differs from the API's answer (`spec_says`),
/// with why; the test asserts `spec_says` and exactly this list.
const TEXT_DIFFERS: &[(&str, &str)] = &[
    (
        "r07e",
        "the remarks' OR variant was not probed in the recipe",
    ),
    (
        "r14a",
        "the recipe's prose was written for an older YAML (history/...at-6b8d542.md)",
    ),
];

/// The fenced blocks of a markdown file: (info string, text).
fn blocks(md: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in md.lines() {
        let fence = line.trim_start().strip_prefix("```");
        match (fence, open.take()) {
            (Some(_), Some(b)) => out.push(b),
            (Some(info), None) => open = Some((info.trim().to_string(), String::new())),
            (None, Some((info, mut text))) => {
                text.push_str(line);
                text.push('\n');
                open = Some((info, text));
            }
            (None, None) => {}
        }
    }
    out
}

/// Every NetworkPolicy written in full in a recipe, in order, as YAML text.
fn recipe_policies(md: &str) -> Vec<(String, Value)> {
    blocks(md)
        .into_iter()
        .filter_map(|(_, text)| {
            let doc = documents(&text).ok()?.into_iter().next()?;
            (doc.get("kind")?.as_str()? == "NetworkPolicy").then_some((text, doc))
        })
        .collect()
}

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
            .map(|(p, proto)| ContainerPort {
                name: None,
                port: *p,
                protocol: proto.to_string(),
            })
            .collect(),
        service_account: "default".into(),
    }
}

/// `ns/labels` of a table column (text after the first space is a comment).
fn ns_labels(col: &str) -> (&str, &str) {
    let first = col.split_whitespace().next().unwrap();
    first.split_once('/').unwrap()
}

/// The policies a row names, read from the recipes: `ns/name` joined by ` + `, an
/// annotation in parentheses choosing between two versions of one name in a recipe.
fn row_policies(dir: &Path, row: &Row) -> Vec<String> {
    let own = plumb_testkit::read(&dir.join(row.recipe));
    let col = row.policies;
    if col == "(none)" {
        return Vec::new();
    }
    if col.starts_with("variant in \"remarks\"") {
        return vec![remarks_or_variant(&own)];
    }
    let mut out = Vec::new();
    for part in col.split(" + ") {
        let (id, note) = match part.split_once(" (") {
            Some((id, note)) => (id.trim(), note.trim_end_matches(')')),
            None => (part.trim(), ""),
        };
        let (ns, name) = id.split_once('/').unwrap();
        // The policy is in the row's recipe, or (02a names 01's) in another one.
        let mut found: Vec<(String, Value)> = recipe_policies(&own)
            .into_iter()
            .filter(|(_, d)| d["metadata"]["name"] == name)
            .collect();
        if found.is_empty() {
            for f in recipe_files(dir) {
                found.extend(
                    recipe_policies(&plumb_testkit::read(&f))
                        .into_iter()
                        .filter(|(_, d)| d["metadata"]["name"] == name),
                );
            }
        }
        assert!(!found.is_empty(), "{}: no policy {name}", row.case);
        let (text, doc) = if found.len() == 1 {
            found.remove(0)
        } else {
            // Recipe 11 writes foo-deny-egress twice: `egress: []`, then a DNS variant.
            let dns = note.contains("DNS");
            found
                .into_iter()
                .find(|(_, d)| d["spec"]["egress"].as_array().unwrap().is_empty() != dns)
                .unwrap_or_else(|| panic!("{}: no version of {name} for {note:?}", row.case))
        };
        let doc_ns = doc["metadata"]["namespace"].as_str().unwrap_or("default");
        assert_eq!(doc_ns, ns, "{}: {name}", row.case);
        out.push(text);
    }
    out
}

/// Recipe 07's remark: the policy with its `ingress` replaced by the fragment whose one
/// rule has two separate peers (the OR form).
fn remarks_or_variant(md: &str) -> String {
    let (_, mut policy) = recipe_policies(md).remove(0);
    let fragment = blocks(md)
        .into_iter()
        .filter_map(|(_, t)| documents(&t).ok()?.into_iter().next())
        .find(|d| {
            d.get("ingress")
                .and_then(|i| i[0]["from"].as_array())
                .is_some_and(|f| f.len() == 2)
        })
        .expect("recipe 07's remarks hold the OR form");
    policy["spec"]["ingress"] = fragment["ingress"].clone();
    policy.to_string()
}

fn recipe_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    files.sort();
    files
}

struct Row<'t> {
    case: &'t str,
    recipe: &'t str,
    policies: &'t str,
    namespaces: &'t str,
    server: &'t str,
    client: &'t str,
    dst: &'t str,
    expected: &'t str,
    spec_says: &'t str,
}

/// One connection to judge: (client, server, port, protocol).
type Probe = (usize, Target, u16, &'static str);

#[derive(Clone, Copy)]
enum Target {
    Pod(usize),
    World(&'static str),
}

fn proto(s: &str) -> &'static str {
    match s {
        "TCP" => "TCP",
        "UDP" => "UDP",
        other => panic!("protocol {other}"),
    }
}

#[test]
fn netpol_recipes_every_row() {
    let Some(corpus) = plumb_testkit::corpus_dir() else {
        return;
    };
    let dir = corpus.join("policy/netpol-recipes");
    let table = plumb_testkit::read(&dir.join("recipes-truth-table.tsv"));
    let mut rows = Vec::new();
    for line in table
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("case\t"))
    {
        let f: Vec<&str> = line.split('\t').collect();
        rows.push(Row {
            case: f[0],
            recipe: f[1],
            policies: f[2],
            namespaces: f[3],
            server: f[4],
            client: f[5],
            dst: f[6],
            expected: f[7],
            spec_says: f[8],
        });
    }
    assert_eq!(rows.len(), 32, "the table's 32 probes");

    let (mut inexact, mut differs, mut wrong) = (Vec::new(), Vec::new(), Vec::new());
    let mut judged = 0;
    for row in &rows {
        let mut c = Cluster::default();
        for ns in row.namespaces.split(',').filter(|s| s.contains('{')) {
            let (name, l) = ns.split_once('{').unwrap();
            let mut l = labels(l.trim_end_matches('}'));
            l.entry("kubernetes.io/metadata.name".into())
                .or_insert_with(|| name.to_string());
            c.namespaces.push(Namespace {
                name: name.into(),
                labels: l,
            });
        }
        for text in row_policies(&dir, row) {
            let problems = load_str(&mut c, &text, row.case);
            assert!(problems.is_empty(), "{}: {problems:?}", row.case);
        }
        let expect_allow = match row.spec_says {
            "allow" => true,
            "deny" => false,
            other => panic!("{}: spec_says {other:?}", row.case),
        };
        if row.expected.split_whitespace().next() != Some(row.spec_says) {
            differs.push(row.case);
        }
        // The pods and the connections to judge.
        let mut probes: Vec<Probe> = Vec::new();
        let exact = |c: &mut Cluster, probes: &mut Vec<Probe>| {
            let (cns, cl) = ns_labels(row.client);
            c.pods.push(pod(cns, "client", cl, &[]));
            let (port, pr) = row
                .dst
                .split_whitespace()
                .next()
                .unwrap()
                .split_once('/')
                .unwrap();
            let (port, pr) = (port.parse().unwrap(), proto(pr));
            let target = if let Some(ip) = row.server.strip_prefix("external ") {
                Target::World(ip.split_whitespace().next().unwrap().to_string().leak())
            } else {
                let (sns, sl) = ns_labels(row.server);
                c.pods.push(pod(sns, "server", sl, &[(port, pr)]));
                Target::Pod(1)
            };
            probes.push((0, target, port, pr));
        };
        match row.case {
            "r03" => {
                inexact.push(row.case);
                c.pods
                    .push(pod("default", "web", "app=web", &[(80, "TCP")]));
                c.pods
                    .push(pod("default", "db", "app=db", &[(5000, "TCP")]));
                c.pods.push(pod("default", "client", "run=test-N", &[]));
                c.pods.push(pod("foo", "client", "run=test-N", &[]));
                for from in [2, 3] {
                    for to in [0, 1] {
                        for (p, pr) in [(80, "TCP"), (5000, "TCP"), (53, "UDP")] {
                            probes.push((from, Target::Pod(to), p, pr));
                        }
                    }
                }
            }
            "r08" => {
                inexact.push(row.case);
                c.pods
                    .push(pod("default", "web", "app=web", &[(80, "TCP")]));
                judged += 1;
                let web = &c.pods[0];
                let conn = Connection {
                    from: Endpoint::World {
                        ip: "203.0.113.10".parse().unwrap(),
                        name: None,
                    },
                    to: Endpoint::Pod(web),
                    port: 80,
                    protocol: "TCP",
                    request: None,
                };
                let (v, iv) = (check(&c, &conn), Index::new(&c).check(&conn));
                assert_eq!(v, iv, "{}: the index agrees with check", row.case);
                if v.allowed != expect_allow {
                    wrong.push(format!("{}: world -> web: got {}", row.case, v.allowed));
                }
            }
            "r11a" => {
                inexact.push(row.case);
                c.pods.push(pod("default", "foo", "app=foo", &[]));
                c.pods
                    .push(pod("default", "web", "app=web", &[(80, "TCP")]));
                c.pods.push(pod(
                    "kube-system",
                    "dns",
                    "k8s-app=kube-dns",
                    &[(53, "UDP")],
                ));
                probes.push((0, Target::Pod(1), 80, "TCP"));
                probes.push((0, Target::Pod(2), 53, "UDP"));
            }
            "r12" => {
                inexact.push(row.case);
                c.pods.push(pod("default", "web", "app=web", &[]));
                c.pods.push(pod("default", "db", "app=db", &[]));
                c.pods
                    .push(pod("default", "other", "app=other", &[(80, "TCP")]));
                c.pods.push(pod(
                    "kube-system",
                    "dns",
                    "k8s-app=kube-dns",
                    &[(53, "UDP")],
                ));
                for from in [0, 1] {
                    probes.push((from, Target::Pod(2), 80, "TCP"));
                    probes.push((from, Target::Pod(3), 53, "UDP"));
                    probes.push((from, Target::World("93.184.216.34"), 443, "TCP"));
                }
            }
            _ => exact(&mut c, &mut probes),
        }
        let index = Index::new(&c);
        for (from, to, port, pr) in probes {
            let conn = Connection {
                from: Endpoint::Pod(&c.pods[from]),
                to: match to {
                    Target::Pod(t) => Endpoint::Pod(&c.pods[t]),
                    Target::World(ip) => Endpoint::World {
                        ip: ip.parse().unwrap(),
                        name: None,
                    },
                },
                port,
                protocol: pr,
                request: None,
            };
            let v = check(&c, &conn);
            assert_eq!(
                v,
                index.check(&conn),
                "{}: the index agrees with check",
                row.case
            );
            judged += 1;
            if v.allowed != expect_allow {
                wrong.push(format!(
                    "{}: {} -> {} {port}/{pr}: expected {}, got {}\n{v:?}",
                    row.case,
                    conn.from.id(),
                    conn.to.id(),
                    row.spec_says,
                    v.allowed
                ));
            }
        }
    }
    let listed: Vec<&str> = NOT_EXACT.iter().map(|(c, _)| *c).collect();
    assert_eq!(inexact, listed, "rows replayed otherwise than written");
    let listed: Vec<&str> = TEXT_DIFFERS.iter().map(|(c, _)| *c).collect();
    assert_eq!(
        differs, listed,
        "rows whose recipe text differs from the API"
    );
    assert!(
        wrong.is_empty(),
        "{} wrong of {judged}:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    // 28 rows replayed as written, r03 12 probes, r08 1, r11a 2, r12 6.
    assert_eq!(judged, 28 + 12 + 1 + 2 + 6);
}
