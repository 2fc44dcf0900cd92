//! What policy evaluation reads: namespaces and pods with their labels, and
//! NetworkPolicies (networking.k8s.io/v1) as the API defines their fields.

use serde::Serialize;
use std::collections::BTreeMap;
use std::net::IpAddr;

pub mod cilium;

/// Labels of an object.
pub type Labels = BTreeMap<String, String>;

/// A namespace and its labels (`kubernetes.io/metadata.name` is added as the API server
/// does when it is missing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Namespace {
    /// The namespace's name.
    pub name: String,
    /// Its labels.
    pub labels: Labels,
}

/// A container port a pod declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerPort {
    /// The port's name (what named ports in policies refer to), when it has one.
    pub name: Option<String>,
    /// The port number.
    pub port: u16,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
}

/// A pod: where it is, its labels, address and ports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pod {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its labels.
    pub labels: Labels,
    /// Its IP (`status.podIP`), when known.
    pub ip: Option<IpAddr>,
    /// The ports its containers declare.
    pub ports: Vec<ContainerPort>,
    /// `spec.serviceAccountName` (`default` when the manifest names none), which
    /// Cilium exposes as the label `io.cilium.k8s.policy.serviceaccount`.
    pub service_account: String,
}

impl Pod {
    /// `namespace/name`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// One requirement of a label selector's `matchExpressions`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Requirement {
    /// The label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// The values `In`/`NotIn` compare with.
    pub values: Vec<String>,
}

/// A label selector: every `matchLabels` pair and every expression must hold; an empty
/// selector selects everything.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Selector {
    /// `matchLabels`.
    pub match_labels: Labels,
    /// `matchExpressions`.
    pub match_expressions: Vec<Requirement>,
}

impl Selector {
    /// Whether `labels` satisfy the selector.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let v = labels.get(&r.key);
                match r.operator.as_str() {
                    "In" => v.is_some_and(|v| r.values.contains(v)),
                    "NotIn" => v.is_none_or(|v| !r.values.contains(v)),
                    "Exists" => v.is_some(),
                    "DoesNotExist" => v.is_none(),
                    // The loader refuses other operators; a selector that cannot be
                    // read selects nothing.
                    _ => false,
                }
            })
    }
}

/// `ipBlock`: a CIDR minus exceptions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct IpBlock {
    /// The CIDR, as (network address, prefix length).
    pub cidr: (IpAddr, u8),
    /// CIDRs inside it that do not match.
    pub except: Vec<(IpAddr, u8)>,
}

/// Whether `ip` is inside `net/len` (false across families).
pub fn in_cidr(ip: IpAddr, (net, len): (IpAddr, u8)) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = if len == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(len.min(32)))
            };
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = if len == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(len.min(128)))
            };
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

impl IpBlock {
    /// Whether `ip` is in the block and in none of its exceptions.
    pub fn contains(&self, ip: IpAddr) -> bool {
        in_cidr(ip, self.cidr) && !self.except.iter().any(|e| in_cidr(ip, *e))
    }
}

/// One peer of a rule (`from[]` / `to[]` element).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Peer {
    /// `podSelector`: pods of the selected namespaces (the policy's own when no
    /// `namespaceSelector` is given).
    pub pod_selector: Option<Selector>,
    /// `namespaceSelector`.
    pub namespace_selector: Option<Selector>,
    /// `ipBlock`.
    pub ip_block: Option<IpBlock>,
}

/// A port of a rule: a number, a name, or all ports of the protocol.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum PortRef {
    /// A port number.
    Number(u16),
    /// A named container port of the destination pod.
    Name(String),
}

/// One `ports[]` element.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PolicyPort {
    /// `TCP` (the default), `UDP` or `SCTP`.
    pub protocol: String,
    /// The port; None: every port of the protocol.
    pub port: Option<PortRef>,
    /// `endPort`: the port is the start of a range ending here (numbers only).
    pub end_port: Option<u16>,
}

/// One ingress or egress rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Rule {
    /// Peers (`from` or `to`); empty: every peer.
    pub peers: Vec<Peer>,
    /// Ports; empty: every port.
    pub ports: Vec<PolicyPort>,
}

/// A NetworkPolicy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NetworkPolicy {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The pods it applies to (in its namespace).
    pub pod_selector: Selector,
    /// Whether it isolates its pods for ingress (`policyTypes` contains Ingress, or no
    /// `policyTypes` was given: the API's default).
    pub ingress_isolation: bool,
    /// Whether it isolates its pods for egress (`policyTypes` contains Egress, or no
    /// `policyTypes` was given and the policy has an `egress` section).
    pub egress_isolation: bool,
    /// Ingress rules: any one that matches allows.
    pub ingress: Vec<Rule>,
    /// Egress rules: any one that matches allows.
    pub egress: Vec<Rule>,
    /// Where it was read: the file (or source name) and document, and the item of a
    /// List (`f.yaml (document 2)`, `f.yaml (document 1, item 3)`).
    pub source: String,
}

impl NetworkPolicy {
    /// `namespace/name`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// A node and its labels (what a CiliumClusterwideNetworkPolicy's `nodeSelector`
/// reads).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// The node's name.
    pub name: String,
    /// Its labels.
    pub labels: Labels,
}

/// A workload (Deployment, StatefulSet, ...) whose pods are not in the inputs: the
/// labels its pod template gives them. Evaluation reads Pod objects only; lint counts
/// these when it asks whether a policy selects anything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    /// `Deployment`, `StatefulSet`, `DaemonSet`, `ReplicaSet`, `Job`, `CronJob` or
    /// `ReplicationController`.
    pub kind: String,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The labels of its pod template.
    pub labels: Labels,
}

/// Everything evaluation reads.
#[derive(Clone, Debug)]
pub struct Cluster {
    /// Namespaces (a namespace that only pods mention gets its default labels).
    pub namespaces: Vec<Namespace>,
    /// Pods.
    pub pods: Vec<Pod>,
    /// Nodes.
    pub nodes: Vec<Node>,
    /// Workloads' pod templates (for lint).
    pub workloads: Vec<Workload>,
    /// NetworkPolicies.
    pub policies: Vec<NetworkPolicy>,
    /// CiliumNetworkPolicies and CiliumClusterwideNetworkPolicies (one entry per
    /// `spec`/`specs[]` element).
    pub cilium: Vec<cilium::CiliumPolicy>,
    /// The Cilium cluster name: the value of every pod's
    /// `io.cilium.k8s.policy.cluster` label (Cilium's default is `default`).
    pub cluster_name: String,
}

impl Default for Cluster {
    fn default() -> Self {
        Cluster {
            namespaces: Vec::new(),
            pods: Vec::new(),
            nodes: Vec::new(),
            workloads: Vec::new(),
            policies: Vec::new(),
            cilium: Vec::new(),
            cluster_name: "default".into(),
        }
    }
}

impl Cluster {
    /// The labels of namespace `name`: its own, or the default
    /// `kubernetes.io/metadata.name` label of a namespace nothing else describes.
    pub fn namespace_labels(&self, name: &str) -> std::borrow::Cow<'_, Labels> {
        match self.namespaces.iter().find(|n| n.name == name) {
            Some(n) => std::borrow::Cow::Borrowed(&n.labels),
            None => std::borrow::Cow::Owned(
                [("kubernetes.io/metadata.name".to_string(), name.to_string())].into(),
            ),
        }
    }

    /// The pod `namespace/name`.
    pub fn pod(&self, id: &str) -> Option<&Pod> {
        self.pods.iter().find(|p| p.id() == id)
    }
}

/// The string values of a JSON/YAML mapping (a label map), numbers and booleans as
/// written; anything else is no labels.
pub(crate) fn labels_from_json(v: Option<&serde_json::Value>) -> Labels {
    use serde_json::Value;
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let v = match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (k.clone(), v)
                })
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selectors_and_expressions() {
        let s = Selector {
            match_labels: labels(&[("app", "web")]),
            match_expressions: vec![Requirement {
                key: "tier".into(),
                operator: "NotIn".into(),
                values: vec!["db".into()],
            }],
        };
        assert!(s.matches(&labels(&[("app", "web")])));
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "front")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "db")])));
        assert!(!s.matches(&labels(&[("app", "api")])));
        assert!(Selector::default().matches(&Labels::new()));
    }

    #[test]
    fn ip_blocks_with_exceptions() {
        let b = IpBlock {
            cidr: ("10.0.0.0".parse().unwrap(), 8),
            except: vec![("10.1.0.0".parse().unwrap(), 16)],
        };
        assert!(b.contains("10.2.3.4".parse().unwrap()));
        assert!(!b.contains("10.1.3.4".parse().unwrap()));
        assert!(!b.contains("11.0.0.1".parse().unwrap()));
        assert!(in_cidr(
            "1.2.3.4".parse().unwrap(),
            ("0.0.0.0".parse().unwrap(), 0)
        ));
    }
}
