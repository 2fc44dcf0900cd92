//! What the checks share: the node's facts, the ruleset findings of `plumb check`, and the
//! node's own values (CIDRs, the `kubernetes` ClusterIP, the CNI pod) that remediation
//! texts quote instead of generic placeholders.

use plumb_facts::cluster::ClusterNetwork;
use plumb_facts::parse::logs::{LogLine, Signal};
use plumb_facts::parse::rke2::Rke2Config;
use plumb_facts::timeline::{Entry, Timeline};
use plumb_facts::{Facts, LogFile};
use plumb_findings::{Evidence, Finding};

/// What every node check reads: the facts, the ruleset findings, the node's own values
/// and its history.
pub struct Ctx<'a> {
    /// Everything read about the node.
    pub facts: &'a Facts,
    /// Findings of the ruleset integrity checks (plumb-check), already run.
    pub ruleset_findings: Vec<Finding>,
    /// The node's CIDRs, ClusterIP and CNI, quoted by remediation texts.
    pub values: NodeValues,
    /// The node's history from every log read.
    pub timeline: Timeline,
    /// Whether the ruleset translates the `kubernetes` Service right now.
    pub kubernetes_dnat: KubernetesDnat,
}

/// The port of the `kubernetes` Service (`default/kubernetes:https`): the API server's
/// Service always listens on 443 (kube-apiserver's `--kubernetes-service-node-port` aside,
/// which adds a NodePort, not another port).
pub const KUBERNETES_SERVICE_PORT: u16 = 443;

/// Does the ruleset, read once, DNAT the `kubernetes` ClusterIP:443 (kube-proxy's
/// recovered service map, any mode)?
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KubernetesDnat {
    /// A kube-proxy service for the ClusterIP:port with endpoints: where it sends it.
    Present {
        /// The endpoints (`10.0.0.5:6443`).
        endpoints: Vec<String>,
        /// Where it was read (`iptables-nft-save`).
        source: String,
    },
    /// No kube-proxy service with endpoints for the ClusterIP:port in a full ruleset.
    Absent {
        /// Services recovered from the ruleset at all.
        services: usize,
        /// Where the ruleset was read.
        source: String,
    },
    /// Not judged: no ruleset, or a partial or truncated one.
    NotJudged(String),
}

/// The node's own values, from its state (see [`plumb_facts::cluster`]); defaults only
/// when nothing on the node gave them, and then `defaults` says which.
#[derive(Clone, Debug)]
pub struct NodeValues {
    /// The pod CIDR (`10.42.0.0/16`).
    pub cluster_cidr: String,
    /// The Service CIDR (`10.43.0.0/16`).
    pub service_cidr: String,
    /// The `kubernetes` Service ClusterIP.
    pub kubernetes_clusterip: String,
    /// flannel's VXLAN port (Canal and Flannel; RKE2 default).
    pub vxlan_port: u16,
    /// The CNI plugins RKE2's config names (`canal` when it names none).
    pub cni: Vec<String>,
    /// Where the values came from, one line each.
    pub source: String,
    /// Values that are a distribution's defaults, not read from the node.
    pub defaults: Vec<&'static str>,
    /// The decision with every source.
    pub network: ClusterNetwork,
}

impl NodeValues {
    /// Decides the node's values from its facts ([`plumb_facts::cluster::network`]) and
    /// records which ones are defaults.
    pub fn from_facts(facts: &Facts) -> NodeValues {
        let cfg = facts
            .rke2_config
            .value()
            .cloned()
            .unwrap_or_else(Rke2Config::default);
        let n = plumb_facts::cluster::network(facts);
        let mut defaults = Vec::new();
        for (name, d) in [
            ("service CIDR", &n.service_cidr),
            ("pod CIDR", &n.cluster_cidr),
            ("kubernetes ClusterIP", &n.kubernetes_clusterip),
        ] {
            if d.default {
                defaults.push(name);
            }
        }
        NodeValues {
            cluster_cidr: n.cluster_cidr.value.clone(),
            service_cidr: n.service_cidr.value.clone(),
            kubernetes_clusterip: n.kubernetes_clusterip.value.clone(),
            vxlan_port: 8472,
            cni: cfg.cni().into_iter().map(str::to_string).collect(),
            source: format!(
                "service CIDR {} from {}; pod CIDR {} from {}; kubernetes ClusterIP {} from {}",
                n.service_cidr.value,
                n.service_cidr.source,
                n.cluster_cidr.value,
                n.cluster_cidr.source,
                n.kubernetes_clusterip.value,
                n.kubernetes_clusterip.source
            ),
            defaults,
            network: n,
        }
    }
}

impl<'a> Ctx<'a> {
    /// Log lines with this signal, from pod logs of containers named `container` (any
    /// container when `None`), with their files.
    pub fn pod_signals(
        &self,
        container: Option<&str>,
        signal: Signal,
    ) -> Vec<(&'a LogFile, &'a LogLine)> {
        self.facts
            .pod_logs
            .iter()
            .filter(|f| {
                container.is_none_or(|c| {
                    f.pod.as_ref().is_some_and(|p| p.container == c) || f.pod.is_none()
                })
            })
            .flat_map(|f| {
                f.signals
                    .iter()
                    .filter(move |(s, _)| *s == signal)
                    .map(move |(_, l)| (f, l))
            })
            .collect()
    }
}

/// Evidence for a timeline entry: its file and line, the time and the entry's number.
pub fn entry_evidence(e: &Entry) -> Evidence {
    Evidence {
        source: e.source.clone(),
        line: Some(e.line),
        text: format!(
            "[timeline #{}{}] {}",
            e.n,
            e.time
                .as_deref()
                .map(|t| format!(", {t}"))
                .unwrap_or_default(),
            e.text
        ),
    }
}

/// Evidence for a log line.
pub fn log_evidence(file: &LogFile, line: &LogLine) -> Evidence {
    Evidence {
        source: file.path.clone(),
        line: Some(line.line),
        text: line.text.chars().take(300).collect(),
    }
}

/// Evidence that quotes a fact's value (no line).
pub fn fact_evidence(source: &str, text: impl Into<String>) -> Evidence {
    Evidence {
        source: source.to_string(),
        line: None,
        text: text.into(),
    }
}
