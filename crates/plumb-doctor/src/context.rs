//! What the checks share: the node's facts, the ruleset findings of `plumb check`, and the
//! node's own values (CIDRs, the `kubernetes` ClusterIP, the CNI pod) that remediation
//! texts quote instead of generic placeholders.

use plumb_facts::parse::logs::{LogLine, Signal};
use plumb_facts::parse::rke2::Rke2Config;
use plumb_facts::{Facts, LogFile};
use plumb_findings::{Evidence, Finding};

pub struct Ctx<'a> {
    pub facts: &'a Facts,
    /// Findings of the ruleset integrity checks (plumb-check), already run.
    pub ruleset_findings: Vec<Finding>,
    pub values: NodeValues,
}

/// The node's own values, from its RKE2 config or RKE2's defaults.
#[derive(Clone, Debug)]
pub struct NodeValues {
    pub cluster_cidr: String,
    pub service_cidr: String,
    /// The `kubernetes` Service ClusterIP (first address of the service CIDR).
    pub kubernetes_clusterip: String,
    /// flannel's VXLAN port (Canal and Flannel; RKE2 default).
    pub vxlan_port: u16,
    pub cni: Vec<String>,
    /// Where those values came from ("/etc/rancher/rke2/config.yaml" or "RKE2 defaults").
    pub source: String,
}

impl NodeValues {
    pub fn from_facts(facts: &Facts) -> NodeValues {
        let (cfg, source) = match &facts.rke2_config {
            plumb_facts::Fact::Known { value, source } => (value.clone(), source.clone()),
            _ => (Rke2Config::default(), "RKE2 defaults".to_string()),
        };
        let service_cidr = cfg.service_cidr().to_string();
        NodeValues {
            cluster_cidr: cfg.cluster_cidr().to_string(),
            kubernetes_clusterip: first_address(&service_cidr)
                .unwrap_or_else(|| "10.43.0.1".into()),
            service_cidr,
            vxlan_port: 8472,
            cni: cfg.cni().into_iter().map(str::to_string).collect(),
            source,
        }
    }
}

fn first_address(cidr: &str) -> Option<String> {
    let base: std::net::Ipv4Addr = cidr.split('/').next()?.parse().ok()?;
    Some(std::net::Ipv4Addr::from(u32::from(base).wrapping_add(1)).to_string())
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
