//! `Facts`: everything plumb read about one node, live or from a bundle. The contract
//! between the collectors (plumb-collect, which fills it) and doctor (which reasons
//! over it without doing IO). Every field is a [`Fact`]: a value with its source, or
//! the reason it is unknown.

use crate::fact::Fact;
use crate::parse::health::ProxyHealth;
use crate::parse::logs::{LogLine, Signal};
pub use crate::parse::ps::Process;
use crate::parse::rke2::{ProbePaths, Rke2Config};
use crate::parse::ss::Listener;
use crate::parse::systemd::Unit;
use crate::parse::ufw::UfwStatus;
use plumb_ruleset::Ruleset;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What was looked at.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SourceKind {
    /// This machine, as it runs now.
    Live,
    /// A network namespace (`--netns`) and/or a file tree (`--root`) standing for a node;
    /// the lab is one.
    Namespace,
    /// A RHEL sosreport.
    Sosreport,
    /// Rancher's rancher2_logs_collector output.
    RancherCollector,
    /// `plumb collect` output.
    PlumbBundle,
    /// A Cilium sysdump (`cilium sysdump`): the cluster's Cilium objects and, per agent,
    /// a bugtool archive with the node's command outputs.
    CiliumSysdump,
}

/// What the facts were read from: the kind of source and a description for reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SourceInfo {
    /// Live node, namespace, or which kind of support bundle.
    pub kind: SourceKind,
    /// "live node", "sosreport at /tmp/x", "netns plumb-node, root /run/plumb-lab".
    pub description: String,
    /// What the reader left out of the source and the user should know (bundle members
    /// not extracted: device nodes, FIFOs, links pointing outside, ...).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// How reading one ruleset dump went (one per tool or bundle file).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RulesetRead {
    /// `iptables-nft-save`, `sos_commands/firewall_tables/nft_list_ruleset`, ...
    pub source: String,
    /// `ok`, `missing`, `failed: ...`, `not in bundle`.
    pub outcome: String,
    /// The read left tables the node has out of the ruleset: it did not work, and no
    /// other read took its place (plumb-collect's `ToolOutcome::left_out`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub left_out: bool,
}

/// An HTTP GET made by a probe (kube-proxy health, API server readyz).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpReply {
    /// The URL requested (`http://127.0.0.1:10256/healthz`).
    pub url: String,
    /// HTTP status code of the reply (kube-proxy health: 200 healthy, 503 not).
    pub status: u16,
    /// Body, cut to a few KiB.
    pub body: String,
}

impl HttpReply {
    /// kube-proxy's health JSON, when the body is one.
    pub fn proxy_health(&self) -> Option<ProxyHealth> {
        crate::parse::health::parse(&self.body)
    }
}

/// A TCP connect attempt and how it ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Connect {
    /// `10.43.0.1:443`.
    pub target: String,
    /// How the connect ended.
    pub outcome: ConnectOutcome,
    /// Time until that outcome, in milliseconds (about the probe timeout when it timed out).
    pub millis: u64,
}

/// How a TCP connect attempt ended; each end points at a different kind of cause.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConnectOutcome {
    /// The handshake completed: the address is translated and something answers.
    Connected,
    /// No answer within the timeout: packets silently dropped or not translated.
    TimedOut,
    /// RST: nothing listens, or a REJECT rule answered.
    Refused,
    /// No route / network unreachable (ICMP or local routing).
    Unreachable,
}

/// Signal lines of one log file (pod log, node log or agent log), not the whole file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LogFile {
    /// Node path (`/var/log/pods/kube-system_kube-proxy-x_uid/kube-proxy/0.log`) or bundle path.
    pub path: String,
    /// For pod logs: namespace, pod and container from the path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodRef>,
    /// Agent name from the catalogue when this is an agent's log.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// For node logs: who writes it (`kubelet`, `rke2-agent`, `audit`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub component: Option<String>,
    /// For pod logs: the restart number kubelet gave the file (the N of `N.log`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart: Option<u32>,
    /// For pod logs: the first message, which dates the container's start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first: Option<LogLine>,
    /// Lines the file held when read (all of them, not only the signal lines).
    pub lines_read: usize,
    /// Lines that mean something to doctor, in file order (bounded per file).
    pub signals: Vec<(Signal, LogLine)>,
}

/// The pod a CRI log file belongs to, from its path
/// (`/var/log/pods/<namespace>_<pod>_<uid>/<container>/N.log`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PodRef {
    /// Kubernetes namespace (`kube-system`).
    pub namespace: String,
    /// Pod name (`rke2-canal-abcde`).
    pub pod: String,
    /// Container name within the pod (`install-cni`, `kube-proxy`).
    pub container: String,
}

/// A security agent seen on the node, and how.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AgentSighting {
    /// Catalogue name (`illumio-ven`).
    pub agent: String,
    /// `unit illumio-ven.service active`, `process venAgent[4211]`, `path /opt/illumio_ven`.
    pub how: String,
    /// The command or file that showed it (`systemctl list-units`, `ps`, a bundle path).
    pub source: String,
}

/// Everything read about a node.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Facts {
    /// What was read: the live node, a namespace, or a bundle; `None` only in facts built
    /// by hand (tests).
    pub source: Option<SourceInfo>,
    /// All rulesets read (both backends, both families, native nft), merged.
    #[serde(skip)]
    pub ruleset: Fact<Ruleset>,
    /// How reading each ruleset dump went, including the ones that failed or were absent.
    pub ruleset_reads: Vec<RulesetRead>,
    /// `/proc/net/ip_tables_names` and `ip6_tables_names`: legacy tables that exist.
    pub ip_tables_names: Fact<Vec<String>>,
    /// `/proc/net/ip6_tables_names`: the IPv6 legacy tables that exist.
    pub ip6_tables_names: Fact<Vec<String>>,
    /// `iptables --version`: `iptables v1.8.9 (nf_tables)`.
    pub iptables_version: Fact<String>,
    /// `uname -a`: kernel release and build, as printed.
    pub kernel: Fact<String>,
    /// systemd units from `systemctl list-units --all` (firewalld, ufw, iptables.service,
    /// security agents).
    pub units: Fact<Vec<Unit>>,
    /// Boot-time state (`systemctl list-unit-files`) of the firewall managers' and known
    /// agents' units: whether a firewall comes back at the next boot.
    pub unit_files: Fact<Vec<crate::parse::systemd::UnitFile>>,
    /// Running processes (`ps` or /proc): who runs kube-proxy, the CNI agents, the
    /// security agents, and with which arguments.
    pub processes: Fact<Vec<Process>>,
    /// `ufw status verbose`: whether UFW is active and its default policies.
    pub ufw: Fact<UfwStatus>,
    /// `firewall-cmd --state`: `running` / `not running`.
    pub firewalld: Fact<String>,
    /// Security agents of the catalogue seen on the node (units, processes, paths); empty
    /// when none was seen.
    pub agents: Vec<AgentSighting>,
    /// `sysctl -a`, by dotted name (`net.ipv4.ip_forward` -> `1`).
    pub sysctls: Fact<BTreeMap<String, String>>,
    /// Loaded modules (name -> line in lsmod).
    pub modules: Fact<BTreeMap<String, u32>>,
    /// Listening sockets (`ss -tulnp`): kube-proxy's health port, the API server.
    pub listeners: Fact<Vec<Listener>>,
    /// `/etc/rancher/rke2/config.yaml`; unknown on nodes that are not RKE2.
    pub rke2_config: Fact<Rke2Config>,
    /// The probe paths of RKE2's kube-proxy static pod manifest (what kubelet asks on 10256).
    pub kube_proxy_probes: Fact<ProbePaths>,
    /// Files in /etc/cni/net.d.
    pub cni_conf_files: Fact<Vec<String>>,
    /// GET `/healthz` on kube-proxy's health server (127.0.0.1:10256); 503 when an update
    /// has been pending longer than twice the sync period or the node is being deleted.
    pub kube_proxy_healthz: Fact<HttpReply>,
    /// GET `/livez` on kube-proxy's health server: like `/healthz` without the node's
    /// eligibility.
    pub kube_proxy_livez: Fact<HttpReply>,
    /// GET `/readyz?verbose` on the local API server endpoint (HTTPS, certificate not
    /// verified).
    pub api_readyz: Fact<HttpReply>,
    /// TCP connect to the `kubernetes` Service ClusterIP (first IP of the service CIDR).
    pub clusterip_connect: Fact<Connect>,
    /// TCP connect to the local API server endpoint (127.0.0.1:6443 or the node IP).
    pub api_local_connect: Fact<Connect>,
    /// CRI logs of the pods in the namespaces read (kube-proxy, the CNI's pods, coredns):
    /// one entry per file, several per container when it restarted.
    pub pod_logs: Vec<LogFile>,
    /// kubelet's and the distribution's service logs (RKE2's agent log, journal
    /// excerpts) and the audit log's NETFILTER_CFG records.
    pub node_logs: Vec<LogFile>,
    /// Logs of the security agents, from their catalogue log directories.
    pub agent_logs: Vec<LogFile>,
    /// Network settings found in the node's own files and command lines (static pod
    /// manifests, kube-proxy and distribution configs, process arguments).
    pub cluster_settings: Vec<crate::parse::settings::Setting>,
    /// The distribution the node's files show (`rke2`, `k3s`, `kubeadm`), when known.
    pub distribution: Option<String>,
    /// Cilium's service dataplane: its LB maps, or its agent's own view (`cilium-dbg`,
    /// a sysdump); unknown on a node where none of it was found.
    pub cilium: Fact<CiliumFacts>,
}

/// What plumb read of Cilium on a node: the frontends its load balancer holds and what
/// its agent says about kube-proxy replacement.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CiliumFacts {
    /// Where the frontends were read: the pinned maps' directory, a `cilium-dbg`
    /// command, or a sysdump member.
    pub lb_source: Option<String>,
    /// How: `cilium-bpf` (the pinned maps), `cilium-dbg-service-list` (the agent's
    /// JSON), `cilium-bpf-lb-list` / `cilium-service-list` (saved texts).
    pub lb_mode: Option<String>,
    /// Cilium's frontends with their backends and problems; None when no load-balancer
    /// state was read.
    pub frontends: Option<Vec<plumb_cilium::Frontend>>,
    /// The agent's `KubeProxyReplacement` setting as it prints it (`True`, `Strict`,
    /// `False`, `Disabled`), when its status was read.
    pub kube_proxy_replacement: Option<String>,
    /// Where the agent's status was read.
    pub status_source: Option<String>,
    /// The agent's endpoints and where they were read, when its endpoint list was.
    pub endpoints: Option<(Vec<plumb_cilium::agent::Endpoint>, String)>,
    /// Hubble's flows of the node and where they were read (a sysdump's
    /// `hubble-flows-<pod>-<time>.json`): information, never a diagnosis by itself.
    pub hubble: Option<(plumb_cilium::hubble::FlowSummary, String)>,
    /// What could not be read or decoded, with why.
    pub problems: Vec<String>,
}

impl CiliumFacts {
    /// Whether the agent says it replaces kube-proxy (`True`, `Strict`, `Partial`,
    /// `Probe`); None when its status was not read.
    pub fn replaces_kube_proxy(&self) -> Option<bool> {
        let v = self.kube_proxy_replacement.as_deref()?;
        let first = v
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        Some(matches!(
            first.as_str(),
            "true" | "strict" | "partial" | "probe"
        ))
    }
}

impl Facts {
    /// A sysctl value by dotted name.
    pub fn sysctl(&self, key: &str) -> Option<&str> {
        self.sysctls.value()?.get(key).map(String::as_str)
    }

    /// The pod logs of containers with this name (`kube-proxy`, `install-cni`).
    pub fn container_logs<'a>(&'a self, container: &'a str) -> impl Iterator<Item = &'a LogFile> {
        self.pod_logs
            .iter()
            .filter(move |l| l.pod.as_ref().is_some_and(|p| p.container == container))
    }
}

/// `.../<container>/N.log` -> N, the restart number kubelet names the file after.
pub fn restart_from_path(path: &str) -> Option<u32> {
    path.rsplit('/').next()?.strip_suffix(".log")?.parse().ok()
}

/// `/var/log/pods/<ns>_<pod>_<uid>/<container>/N.log` -> namespace, pod, container.
pub fn pod_ref_from_path(path: &str) -> Option<PodRef> {
    let mut parts = path.rsplit('/');
    let _file = parts.next()?;
    let container = parts.next()?;
    let dir = parts.next()?;
    let mut it = dir.splitn(3, '_');
    let (ns, pod, _uid) = (it.next()?, it.next()?, it.next()?);
    Some(PodRef {
        namespace: ns.to_string(),
        pod: pod.to_string(),
        container: container.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_ref_from_cri_log_path() {
        let p = pod_ref_from_path(
            "/var/log/pods/kube-system_rke2-canal-abcde_0f1e2d3c-1111/install-cni/3.log",
        )
        .unwrap();
        assert_eq!(p.namespace, "kube-system");
        assert_eq!(p.pod, "rke2-canal-abcde");
        assert_eq!(p.container, "install-cni");
        assert!(pod_ref_from_path("0.log").is_none());
    }
}
