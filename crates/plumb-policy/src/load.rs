//! YAML (or JSON) manifests into the [`Cluster`] model: multi-document files and
//! `kind: List` objects (`kubectl get -o yaml`), holding NetworkPolicies, Pods and
//! Namespaces in any mix. Anything else — another kind, a field the evaluator does not
//! read, a value it cannot use — is reported as a [`Problem`] with where it is, and the
//! rest is still read. A policy with a field plumb cannot judge is kept out of the model
//! (and reported): evaluating it without that field would give a wrong answer.

use crate::model::{
    Cluster, ContainerPort, IpBlock, Labels, Namespace, NetworkPolicy, Node, Peer, Pod, PolicyPort,
    PortRef, Requirement, Rule, Selector,
};
use serde_json::Value;
use std::net::IpAddr;

/// Something in the input that was not read, or not read whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// File (or source name) and document number (1-based).
    pub at: String,
    /// The object, `Kind namespace/name`, when known.
    pub object: Option<String>,
    /// What and why.
    pub what: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.object {
            Some(o) => write!(f, "{}: {o}: {}", self.at, self.what),
            None => write!(f, "{}: {}", self.at, self.what),
        }
    }
}

/// What is said of an object read a second time under the same kind and name: the
/// cluster holds one object per name, and applying both files keeps the later.
const REPLACES: &str =
    "read again: this one replaces the earlier (one object per name, as applying both would leave)";

/// The YAML documents of `text` as JSON values. Booleans are YAML 1.2's only (`true`,
/// `false`): a label value `y` or `on` stays the string it is in a Kubernetes manifest.
///
/// The parser's budget keeps its guards against alias expansion and deep nesting, and
/// allows as many documents, nodes and bytes as a cluster's manifests hold (a 10,000-pod
/// `kubectl get -o yaml` List, thousands of policies in one multi-document file): the
/// size of what is read is bounded by whoever reads the file.
pub fn documents(text: &str) -> Result<Vec<Value>, String> {
    let mut options = serde_saphyr::Options::default();
    options.strict_booleans = true;
    let mut budget = serde_saphyr::budget::Budget::default();
    budget.max_documents = 1_000_000;
    budget.max_nodes = 50_000_000;
    budget.max_events = 100_000_000;
    budget.max_total_scalar_bytes = 1 << 30;
    options.budget = Some(budget);
    serde_saphyr::from_multiple_with_options(text, options).map_err(|e| e.to_string())
}

/// Reads every document of `text` (named `source` in problems) into `cluster`.
pub fn load_str(cluster: &mut Cluster, text: &str, source: &str) -> Vec<Problem> {
    let mut problems = Vec::new();
    let docs: Vec<Value> = match documents(text) {
        Ok(d) => d,
        Err(e) => {
            return vec![Problem {
                at: source.to_string(),
                object: None,
                what: format!("not YAML: {e}"),
            }];
        }
    };
    for (i, doc) in docs.into_iter().enumerate() {
        let at = format!("{source} (document {}", i + 1);
        object(cluster, &doc, &at, &mut problems);
    }
    problems
}

/// `open_at` is the place without its closing parenthesis (`f.yaml (document 1`), so
/// that List items can add theirs.
fn object(cluster: &mut Cluster, v: &Value, open_at: &str, problems: &mut Vec<Problem>) {
    if v.is_null() {
        return;
    }
    let at = &format!("{open_at})");
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = v
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let namespace = v
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default")
        .to_string();
    let mut say = |object: Option<String>, what: String| {
        problems.push(Problem {
            at: at.to_string(),
            object,
            what,
        })
    };
    match kind {
        "List"
        | "NetworkPolicyList"
        | "PodList"
        | "NamespaceList"
        | "NodeList"
        | "CiliumNetworkPolicyList"
        | "CiliumClusterwideNetworkPolicyList" => {
            for (k, item) in v
                .get("items")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                // Items of a typed list carry no kind of their own.
                let mut item = item.clone();
                if item.get("kind").is_none()
                    && let Some(k) = kind.strip_suffix("List").filter(|k| !k.is_empty())
                    && let Some(o) = item.as_object_mut()
                {
                    o.insert("kind".into(), Value::String(k.into()));
                }
                object(
                    cluster,
                    &item,
                    &format!("{open_at}, item {}", k + 1),
                    problems,
                );
            }
        }
        "Namespace" => {
            let mut labels = labels(v.pointer("/metadata/labels"));
            labels
                .entry("kubernetes.io/metadata.name".into())
                .or_insert_with(|| name.clone());
            if let Some(i) = cluster.namespaces.iter().position(|n| n.name == name) {
                cluster.namespaces.remove(i);
                say(Some(format!("Namespace {name}")), REPLACES.into());
            }
            cluster.namespaces.push(Namespace { name, labels });
        }
        "Pod" => {
            if let Some(i) = cluster
                .pods
                .iter()
                .position(|p| p.namespace == namespace && p.name == name)
            {
                cluster.pods.remove(i);
                say(Some(format!("Pod {namespace}/{name}")), REPLACES.into());
            }
            cluster.pods.push(pod(v, name, namespace))
        }
        "Deployment"
        | "StatefulSet"
        | "DaemonSet"
        | "ReplicaSet"
        | "Job"
        | "CronJob"
        | "ReplicationController" => {
            let template = if kind == "CronJob" {
                "/spec/jobTemplate/spec/template/metadata/labels"
            } else {
                "/spec/template/metadata/labels"
            };
            say(
                Some(format!("{kind} {namespace}/{name}")),
                "its pods are not evaluated (check and matrix read Pod objects; lint counts \
                 its pod template's labels)"
                    .into(),
            );
            cluster.workloads.push(crate::model::Workload {
                kind: kind.to_string(),
                namespace,
                name,
                labels: labels(v.pointer(template)),
            });
        }
        "Node" => cluster.nodes.push(Node {
            name,
            labels: labels(v.pointer("/metadata/labels")),
        }),
        "CiliumNetworkPolicy" | "CiliumClusterwideNetworkPolicy" => {
            let (kind, ns): (&'static str, Option<&str>) = if kind == "CiliumNetworkPolicy" {
                ("CiliumNetworkPolicy", Some(&namespace))
            } else {
                ("CiliumClusterwideNetworkPolicy", None)
            };
            let id = match ns {
                Some(ns) => format!("{kind} {ns}/{name}"),
                None => format!("{kind} {name}"),
            };
            match crate::cilium::read(v, kind, &name, ns) {
                Ok(ps) => {
                    let before = cluster.cilium.len();
                    cluster.cilium.retain(|p| {
                        !(p.kind == kind && p.name == name && p.namespace.as_deref() == ns)
                    });
                    if cluster.cilium.len() != before {
                        say(Some(id), REPLACES.into());
                    }
                    cluster.cilium.extend(ps.into_iter().map(|mut p| {
                        p.source = at.clone();
                        p
                    }))
                }
                Err(why) => say(Some(id), format!("not evaluated: {why}")),
            }
        }
        "NetworkPolicy" => {
            let id = format!("NetworkPolicy {namespace}/{name}");
            match policy(v, name, namespace) {
                Ok(mut p) => {
                    p.source = at.clone();
                    if let Some(i) = cluster
                        .policies
                        .iter()
                        .position(|q| q.namespace == p.namespace && q.name == p.name)
                    {
                        cluster.policies.remove(i);
                        say(Some(id), REPLACES.into());
                    }
                    cluster.policies.push(p)
                }
                Err(why) => say(Some(id), format!("not evaluated: {why}")),
            }
        }
        "" => say(None, "no kind".into()),
        other => say(
            Some(format!("{other} {namespace}/{name}")),
            format!(
                "kind {other} is not read (plumb reads NetworkPolicy, CiliumNetworkPolicy, \
                 CiliumClusterwideNetworkPolicy, Pod, Namespace, Node, List)"
            ),
        ),
    }
}

fn labels(v: Option<&Value>) -> Labels {
    crate::model::labels_from_json(v)
}

fn pod(v: &Value, name: String, namespace: String) -> Pod {
    let mut ports = Vec::new();
    for c in v
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for p in c
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(port) = p
                .get("containerPort")
                .and_then(Value::as_u64)
                .and_then(|n| u16::try_from(n).ok())
            {
                ports.push(ContainerPort {
                    name: p.get("name").and_then(Value::as_str).map(String::from),
                    port,
                    protocol: p
                        .get("protocol")
                        .and_then(Value::as_str)
                        .unwrap_or("TCP")
                        .to_ascii_uppercase(),
                });
            }
        }
    }
    Pod {
        namespace,
        name,
        labels: labels(v.pointer("/metadata/labels")),
        ip: v
            .pointer("/status/podIP")
            .and_then(Value::as_str)
            .and_then(|s| s.parse().ok()),
        ports,
        service_account: v
            .pointer("/spec/serviceAccountName")
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_string(),
    }
}

/// Fails on anything that would change the answer if ignored.
fn policy(v: &Value, name: String, namespace: String) -> Result<NetworkPolicy, String> {
    let spec = v.get("spec").ok_or("no spec")?;
    known_fields(
        spec,
        &["podSelector", "policyTypes", "ingress", "egress"],
        "spec",
    )?;
    let pod_selector = selector(spec.get("podSelector"), "spec.podSelector")?.unwrap_or_default();
    let types: Option<Vec<String>> = spec.get("policyTypes").map(|t| {
        t.as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(String::from)
            .collect()
    });
    if let Some(t) = &types
        && let Some(bad) = t.iter().find(|t| *t != "Ingress" && *t != "Egress")
    {
        return Err(format!("policyTypes holds {bad:?}"));
    }
    let has = |t: &str| types.as_ref().is_some_and(|ts| ts.iter().any(|x| x == t));
    let (ingress_isolation, egress_isolation) = match &types {
        Some(_) => (has("Ingress"), has("Egress")),
        // The API's default: Ingress always, Egress when the policy has egress rules.
        None => (true, spec.get("egress").is_some()),
    };
    Ok(NetworkPolicy {
        namespace,
        name,
        pod_selector,
        ingress_isolation,
        egress_isolation,
        ingress: rules(spec.get("ingress"), "from", "spec.ingress")?,
        egress: rules(spec.get("egress"), "to", "spec.egress")?,
        source: String::new(),
    })
}

fn known_fields(v: &Value, known: &[&str], at: &str) -> Result<(), String> {
    match v.as_object() {
        Some(m) => match m.keys().find(|k| !known.contains(&k.as_str())) {
            Some(k) => Err(format!("{at}.{k} is not a field plumb evaluates")),
            None => Ok(()),
        },
        None if v.is_null() => Ok(()),
        None => Err(format!("{at} is not a mapping")),
    }
}

fn selector(v: Option<&Value>, at: &str) -> Result<Option<Selector>, String> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    known_fields(v, &["matchLabels", "matchExpressions"], at)?;
    let mut match_expressions = Vec::new();
    for e in v
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = e
            .get("key")
            .and_then(Value::as_str)
            .ok_or(format!("{at}: an expression without key"))?;
        let operator = e.get("operator").and_then(Value::as_str).unwrap_or("");
        if !matches!(operator, "In" | "NotIn" | "Exists" | "DoesNotExist") {
            return Err(format!("{at}: operator {operator:?}"));
        }
        match_expressions.push(Requirement {
            key: key.into(),
            operator: operator.into(),
            values: e
                .get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|x| {
                    x.as_str()
                        .map(String::from)
                        .unwrap_or_else(|| x.to_string())
                })
                .collect(),
        });
    }
    Ok(Some(Selector {
        match_labels: labels(v.get("matchLabels")),
        match_expressions,
    }))
}

fn cidr(s: &str, at: &str) -> Result<(IpAddr, u8), String> {
    let (a, l) = s
        .split_once('/')
        .ok_or(format!("{at}: {s:?} is not a CIDR"))?;
    let addr: IpAddr = a
        .parse()
        .map_err(|_| format!("{at}: {s:?} is not a CIDR"))?;
    let len: u8 = l
        .parse()
        .map_err(|_| format!("{at}: {s:?} is not a CIDR"))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    if len > max {
        return Err(format!("{at}: {s:?} has a prefix longer than {max}"));
    }
    Ok((addr, len))
}

fn rules(v: Option<&Value>, peers_key: &str, at: &str) -> Result<Vec<Rule>, String> {
    let mut out = Vec::new();
    for (i, r) in v
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = format!("{at}[{i}]");
        known_fields(r, &[peers_key, "ports"], &at)?;
        let mut peers = Vec::new();
        for (j, p) in r
            .get(peers_key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let at = format!("{at}.{peers_key}[{j}]");
            known_fields(p, &["podSelector", "namespaceSelector", "ipBlock"], &at)?;
            let ip_block = match p.get("ipBlock") {
                None => None,
                Some(b) => {
                    known_fields(b, &["cidr", "except"], &format!("{at}.ipBlock"))?;
                    let c = b
                        .get("cidr")
                        .and_then(Value::as_str)
                        .ok_or(format!("{at}.ipBlock: no cidr"))?;
                    let mut except = Vec::new();
                    for e in b
                        .get("except")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        except.push(cidr(
                            e.as_str().unwrap_or(""),
                            &format!("{at}.ipBlock.except"),
                        )?);
                    }
                    Some(IpBlock {
                        cidr: cidr(c, &format!("{at}.ipBlock"))?,
                        except,
                    })
                }
            };
            peers.push(Peer {
                pod_selector: selector(p.get("podSelector"), &format!("{at}.podSelector"))?,
                namespace_selector: selector(
                    p.get("namespaceSelector"),
                    &format!("{at}.namespaceSelector"),
                )?,
                ip_block,
            });
        }
        let mut ports = Vec::new();
        for (j, p) in r
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let at = format!("{at}.ports[{j}]");
            known_fields(p, &["protocol", "port", "endPort"], &at)?;
            let port = match p.get("port") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(match s.parse::<u16>() {
                    Ok(n) => PortRef::Number(n),
                    Err(_) => PortRef::Name(s.clone()),
                }),
                Some(n) => Some(PortRef::Number(
                    n.as_u64()
                        .and_then(|n| u16::try_from(n).ok())
                        .ok_or(format!("{at}.port {n} is not a port"))?,
                )),
            };
            let end_port = p
                .get("endPort")
                .map(|e| {
                    e.as_u64()
                        .and_then(|n| u16::try_from(n).ok())
                        .ok_or(format!("{at}.endPort {e} is not a port"))
                })
                .transpose()?;
            ports.push(PolicyPort {
                protocol: p
                    .get("protocol")
                    .and_then(Value::as_str)
                    .unwrap_or("TCP")
                    .to_ascii_uppercase(),
                port,
                end_port,
            });
        }
        out.push(Rule { peers, ports });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_multi_documents_and_unknown_kinds() {
        let text = "apiVersion: v1\nkind: List\nitems:\n- kind: Namespace\n  metadata: {name: x, labels: {team: a}}\n- kind: Pod\n  metadata: {name: a, namespace: x, labels: {pod: a}}\n  spec: {containers: [{name: c, ports: [{containerPort: 80, name: http}]}]}\n  status: {podIP: 10.0.0.1}\n---\nkind: Service\nmetadata: {name: s, namespace: x}\n---\nkind: NetworkPolicy\nmetadata: {name: p, namespace: x}\nspec:\n  podSelector: {}\n  ingress:\n  - from: [{podSelector: {matchLabels: {pod: a}}}]\n    ports: [{port: http}]\n";
        let mut c = Cluster::default();
        let problems = load_str(&mut c, text, "f.yaml");
        assert_eq!(c.namespaces.len(), 1);
        assert_eq!(c.namespaces[0].labels["kubernetes.io/metadata.name"], "x");
        assert_eq!(c.pods[0].ports[0].name.as_deref(), Some("http"));
        assert_eq!(c.policies.len(), 1);
        assert!(c.policies[0].ingress_isolation && !c.policies[0].egress_isolation);
        assert_eq!(
            c.policies[0].ingress[0].ports[0].port,
            Some(PortRef::Name("http".into()))
        );
        assert_eq!(problems.len(), 1);
        assert_eq!(
            problems[0].to_string(),
            "f.yaml (document 2): Service x/s: kind Service is not read (plumb reads NetworkPolicy, CiliumNetworkPolicy, CiliumClusterwideNetworkPolicy, Pod, Namespace, Node, List)"
        );
    }

    #[test]
    fn a_field_plumb_cannot_judge_keeps_the_policy_out_and_says_where() {
        let text = "kind: NetworkPolicy\nmetadata: {name: p, namespace: x}\nspec:\n  podSelector: {}\n  ingress:\n  - from: [{podSelector: {}, serviceAccount: {name: x}}]\n";
        let mut c = Cluster::default();
        let problems = load_str(&mut c, text, "f.yaml");
        assert!(c.policies.is_empty());
        assert_eq!(
            problems[0].what,
            "not evaluated: spec.ingress[0].from[0].serviceAccount is not a field plumb evaluates"
        );
    }

    /// serde-saphyr's default budget stops at 1,024 documents and 250,000 nodes:
    /// a cluster's manifests hold more.
    #[test]
    fn thousands_of_documents_and_a_big_list_are_read() {
        let mut text = String::new();
        for i in 0..1100 {
            text.push_str(&format!(
                "kind: Pod\nmetadata: {{name: p{i}, namespace: x, labels: {{app: a}}}}\n---\n"
            ));
        }
        text.push_str("kind: List\nitems:\n");
        for i in 0..13_000 {
            text.push_str(&format!(
                "- kind: Pod\n  metadata: {{name: q{i}, namespace: y, labels: {{app: a, tier: b}}}}\n  status: {{podIP: 10.0.0.1}}\n"
            ));
        }
        let mut c = Cluster::default();
        let problems = load_str(&mut c, &text, "big.yaml");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(c.pods.len(), 14_100);
    }

    #[test]
    fn an_alias_bomb_is_still_refused() {
        let mut text = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let prev = if i == 1 {
                "a".to_string()
            } else {
                format!("a{}", i - 1)
            };
            text.push_str(&format!(
                "a{i}: &a{i} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"
            ));
        }
        let mut c = Cluster::default();
        let p = load_str(&mut c, &text, "bomb.yaml");
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].what.starts_with("not YAML"), "{}", p[0]);
    }

    /// Two files defining the same policy (the Star Wars demo's L3/L4 and L7 versions
    /// of `rule1`): the later replaces the earlier, as applying both would.
    #[test]
    fn an_object_read_twice_is_replaced_not_doubled() {
        let cnp = |port: &str| {
            format!(
                "apiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata: {{name: rule1}}\nspec:\n  endpointSelector: {{}}\n  ingress: [{{toPorts: [{{ports: [{{port: \"{port}\"}}]}}]}}]\n"
            )
        };
        let knp = "kind: NetworkPolicy\nmetadata: {name: p}\nspec: {podSelector: {}}\n";
        let pod = "kind: Pod\nmetadata: {name: a, labels: {v: \"1\"}}\n";
        let mut c = Cluster::default();
        for (text, src) in [
            (cnp("80"), "a.yaml"),
            (knp.into(), "a.yaml"),
            (pod.into(), "a.yaml"),
        ] {
            assert!(load_str(&mut c, &text, src).is_empty());
        }
        let mut problems = Vec::new();
        for (text, src) in [
            (cnp("8080"), "b.yaml"),
            (knp.into(), "b.yaml"),
            (pod.replace('1', "2"), "b.yaml"),
        ] {
            problems.extend(load_str(&mut c, &text, src));
        }
        assert_eq!(c.cilium.len(), 1);
        assert_eq!(c.cilium[0].source, "b.yaml (document 1)");
        assert_eq!(
            c.cilium[0].ingress[0].ports[0].ports[0].port,
            Some(PortRef::Number(8080))
        );
        assert_eq!(c.policies.len(), 1);
        assert_eq!(c.pods.len(), 1);
        assert_eq!(c.pods[0].labels["v"], "2");
        let said: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        assert_eq!(
            said,
            [
                format!("b.yaml (document 1): CiliumNetworkPolicy default/rule1: {REPLACES}"),
                format!("b.yaml (document 1): NetworkPolicy default/p: {REPLACES}"),
                format!("b.yaml (document 1): Pod default/a: {REPLACES}"),
            ]
        );
    }

    #[test]
    fn broken_yaml_is_one_problem_not_a_panic() {
        let mut c = Cluster::default();
        let p = load_str(&mut c, "kind: [unclosed", "bad.yaml");
        assert_eq!(p.len(), 1);
        assert!(p[0].what.starts_with("not YAML"), "{}", p[0]);
    }
}
