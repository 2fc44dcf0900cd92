//! The evaluator against the shared corpus's truth tables (written from each source's
//! own expected results; see shared/corpus/policy/README.md).

use plumb_policy::eval::{Connection, Endpoint, check};
use plumb_policy::load::load_str;
use plumb_policy::model::{Cluster, ContainerPort, Namespace, Pod};
use serde_json::Value;
use std::path::Path;

/// cyclonus's probe model: namespaces labelled `ns=<name>`, pods with labels, IPs and
/// named container ports.
fn cyclonus_cluster(probe: &Path) -> Cluster {
    let v: Value = serde_json::from_str(&plumb_testkit::read(probe)).unwrap();
    let mut c = Cluster::default();
    for (name, labels) in v["Resources"]["Namespaces"].as_object().unwrap() {
        let mut labels: plumb_policy::model::Labels = labels
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
            .collect();
        labels.insert("kubernetes.io/metadata.name".into(), name.clone());
        c.namespaces.push(Namespace {
            name: name.clone(),
            labels,
        });
    }
    for p in v["Resources"]["Pods"].as_array().unwrap() {
        c.pods.push(Pod {
            namespace: p["Namespace"].as_str().unwrap().into(),
            name: p["Name"].as_str().unwrap().into(),
            labels: p["Labels"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect(),
            ip: p["IP"].as_str().and_then(|s| s.parse().ok()),
            ports: p["Containers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| ContainerPort {
                    name: c["PortName"].as_str().map(String::from),
                    port: c["Port"].as_u64().unwrap() as u16,
                    protocol: c["Protocol"].as_str().unwrap().to_ascii_uppercase(),
                })
                .collect(),
            service_account: "default".into(),
        });
    }
    c
}

#[test]
fn cyclonus_simple_example_every_probe() {
    let Some(corpus) = plumb_testkit::corpus_dir() else {
        return;
    };
    let dir = corpus.join("policy/cyclonus");
    let mut cluster = cyclonus_cluster(&dir.join("examples/probe.json"));
    let mut files: Vec<_> = std::fs::read_dir(dir.join("networkpolicies/simple-example"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for f in &files {
        let problems = load_str(
            &mut cluster,
            &plumb_testkit::read(f),
            &f.display().to_string(),
        );
        assert!(problems.is_empty(), "{problems:?}");
    }
    assert_eq!(cluster.policies.len(), 7);
    let table = plumb_testkit::read(&dir.join("simple-example-truth-table.tsv"));
    let (mut checked, mut wrong) = (0, Vec::new());
    for line in table
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("from\t"))
    {
        let f: Vec<&str> = line.split('\t').collect();
        let (port, proto) = f[2].split_once('/').unwrap();
        // Port 82 has no server: cyclonus does not judge the policies there.
        if f[3].starts_with("no-such-port") {
            continue;
        }
        let c = Connection {
            from: Endpoint::Pod(cluster.pod(f[0]).unwrap()),
            to: Endpoint::Pod(cluster.pod(f[1]).unwrap()),
            port: port.parse().unwrap(),
            protocol: proto,
            request: None,
        };
        let v = check(&cluster, &c);
        let word = |b: bool| if b { "allow" } else { "deny" };
        let got = [
            word(v.ingress.allowed),
            word(v.egress.allowed),
            word(v.allowed),
        ];
        checked += 1;
        if got != [f[3], f[4], f[5]] {
            wrong.push(format!("{line}  => got {got:?}"));
        }
    }
    assert_eq!(checked, 162);
    assert!(
        wrong.is_empty(),
        "{} of {checked} wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// Kubernetes' own NetworkPolicy e2e cases: every pair not listed as denied is allowed
/// (loopback excluded, as upstream does).
#[test]
fn kubernetes_e2e_cases_every_pair() {
    let Some(corpus) = plumb_testkit::corpus_dir() else {
        return;
    };
    let text =
        plumb_testkit::read(&corpus.join("policy/k8s-netpol-e2e/upstream-e2e-truth-tables.yaml"));
    let doc: Value = plumb_policy::load::documents(&text).unwrap().remove(0);
    let mut failures = Vec::new();
    let mut pairs = 0;
    for case in doc["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let mut cluster = Cluster::default();
        for (ns, labels) in doc["namespaces"].as_object().unwrap() {
            cluster.namespaces.push(Namespace {
                name: ns.clone(),
                labels: labels
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                    .collect(),
            });
        }
        for id in case["pods"].as_array().unwrap() {
            let (ns, pod) = id.as_str().unwrap().split_once('/').unwrap();
            cluster.pods.push(Pod {
                namespace: ns.into(),
                name: pod.into(),
                labels: [("pod".to_string(), pod.to_string())].into(),
                ip: None,
                ports: [80u16, 81]
                    .iter()
                    .map(|p| ContainerPort {
                        name: Some(format!("serve-{p}-tcp")),
                        port: *p,
                        protocol: "TCP".into(),
                    })
                    .collect(),
                service_account: "default".into(),
            });
        }
        // A case is one step, or steps that replace (`policies`) or add to
        // (`add_policies`) the policies before their probes.
        let steps: Vec<Value> = match case.get("steps") {
            Some(s) => s.as_array().unwrap().clone(),
            None => vec![case.clone()],
        };
        for step in &steps {
            if let Some(ps) = step.get("policies") {
                cluster.policies.clear();
                load_policies(&mut cluster, ps, name);
            }
            if let Some(ps) = step.get("add_policies") {
                load_policies(&mut cluster, ps, name);
            }
            for probe in step["probes"].as_array().unwrap() {
                let port = probe["port"].as_u64().unwrap() as u16;
                let proto = probe["protocol"].as_str().unwrap();
                let denied: Vec<&str> = probe["denied"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|d| d.as_str().unwrap())
                    .collect();
                for from in &cluster.pods {
                    for to in cluster.pods.iter().filter(|t| t.id() != from.id()) {
                        let pair = format!("{} -> {}", from.id(), to.id());
                        let expect = !denied.contains(&pair.as_str());
                        let got = check(
                            &cluster,
                            &Connection {
                                from: Endpoint::Pod(from),
                                to: Endpoint::Pod(to),
                                port,
                                protocol: proto,
                                request: None,
                            },
                        )
                        .allowed;
                        pairs += 1;
                        if got != expect {
                            failures.push(format!(
                                "{name}: {pair} :{port}/{proto}: expected {expect}, got {got}"
                            ));
                        }
                    }
                }
            }
        }
    }
    assert_eq!(pairs, 288, "every pair of every probe of the 19 cases");
    assert!(
        failures.is_empty(),
        "{} wrong of {pairs}:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn load_policies(cluster: &mut Cluster, policies: &Value, case: &str) {
    for p in policies.as_array().unwrap() {
        let mut p = p.clone();
        p["kind"] = Value::String("NetworkPolicy".into());
        let problems = load_str(cluster, &p.to_string(), case);
        assert!(problems.is_empty(), "{case}: {problems:?}");
    }
}
