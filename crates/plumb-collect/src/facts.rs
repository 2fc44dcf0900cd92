//! Gathers [`Facts`] from a [`NodeSource`]: every probe concurrently, each bounded, each ending
//! in a fact or a reason (never a panic or an abort).
//!
//! What is read and why is listed in docs/bundles.md; how to interpret it is
//! doctor's business (plumb-doctor), not this module's.

use crate::node::{NodeCommand, NodeSource};
use crate::probe;
use crate::rulesets::read_rulesets;
use plumb_facts::agents::catalogue;
use plumb_facts::parse::{logs, lsmod, ps, rke2, ss, sysctl, systemd, ufw};
use plumb_facts::{
    AgentSighting, Fact, Facts, LogFile, RulesetRead, pod_ref_from_path, restart_from_path,
};
use plumb_ruleset::Ruleset;
use std::net::SocketAddr;
use std::time::Duration;

/// Bounds of one gathering: each network probe's deadline, the namespaces whose pod logs
/// are read, and how many signal lines are kept per log file.
#[derive(Clone, Debug)]
pub struct GatherOptions {
    /// Deadline of each network probe (HTTP GET or TCP connect); one second by default.
    pub probe_timeout: Duration,
    /// Pod-log namespaces read (kube-proxy and the CNI live in these).
    pub log_namespaces: Vec<String>,
    /// Most signal lines kept per log file (the latest ones).
    pub max_signals_per_file: usize,
}

impl Default for GatherOptions {
    fn default() -> Self {
        GatherOptions {
            probe_timeout: Duration::from_secs(1),
            log_namespaces: vec!["kube-system".into(), "calico-system".into()],
            max_signals_per_file: 100,
        }
    }
}

/// The kube-proxy static pod manifest (RKE2).
pub const KUBE_PROXY_MANIFEST: &str = "/var/lib/rancher/rke2/agent/pod-manifests/kube-proxy.yaml";
/// RKE2's node configuration (CNI, CIDRs, whether kube-proxy is disabled).
pub const RKE2_CONFIG: &str = "/etc/rancher/rke2/config.yaml";
/// Where kubelet looks for CNI network configurations (`10-canal.conflist`); empty until
/// the CNI's installer writes one.
pub const CNI_DIR: &str = "/etc/cni/net.d";
/// kubelet's CRI pod logs: `<namespace>_<pod>_<uid>/<container>/N.log`.
pub const POD_LOG_DIR: &str = "/var/log/pods";
/// Most log files read per container: kubelet names one per start (`0.log`, `1.log`, ...);
/// the newest are kept.
pub const MAX_RESTART_LOGS: usize = 10;
/// Static pod manifests of RKE2, k3s and kubeadm (kube-proxy, kube-apiserver with its
/// `--service-cluster-ip-range`, kube-controller-manager with its `--cluster-cidr`).
pub const MANIFEST_DIRS: &[&str] = &[
    "/var/lib/rancher/rke2/agent/pod-manifests",
    "/var/lib/rancher/k3s/agent/pod-manifests",
    "/etc/kubernetes/manifests",
];
/// Configuration files that name the node's network settings (besides RKE2's config).
pub const CONFIG_FILES: &[&str] = &[
    "/etc/rancher/k3s/config.yaml",
    // kubeadm's kube-proxy DaemonSet mounts its ConfigMap here (`--config=/var/lib/kube-proxy/config.conf`).
    "/var/lib/kube-proxy/config.conf",
    "/var/lib/kube-proxy/kubeconfig.conf",
    "/etc/kubernetes/kubeadm-config.yaml",
    // EKS's kube-proxy DaemonSet (add-on): `kube-proxy --v=2 --config=/var/lib/kube-proxy-config/config`,
    // the `kube-proxy-config` ConfigMap (clusterCIDR, mode); its kubeconfig in
    // /var/lib/kube-proxy/kubeconfig. Both are ConfigMap mounts inside the pod: on the
    // host they exist only where a bundle or a root tree copied them.
    "/var/lib/kube-proxy-config/config",
    // MicroShift: `network.serviceNetwork` / `network.clusterNetwork` (openshift/microshift
    // docs/user/howto_config.md: "The MicroShift configuration file must be located at
    // /etc/microshift/config.yaml"; without it the built-in defaults apply).
    "/etc/microshift/config.yaml",
];
/// Node log files of distributions' own networking components: (path, writer).
/// EKS's VPC CNI (aws-node) logs to /var/log/aws-routed-eni (its logger's default
/// `/host/var/log/aws-routed-eni/ipamd.log` inside the pod, aws/amazon-vpc-cni-k8s
/// pkg/utils/logger; `AWS_VPC_K8S_PLUGIN_LOG_FILE` /var/log/aws-routed-eni/plugin.log).
pub const DISTRIBUTION_LOGS: &[(&str, &str)] = &[
    ("/var/log/aws-routed-eni/ipamd.log", "aws-node"),
    ("/var/log/aws-routed-eni/plugin.log", "aws-node"),
];
/// Where RKE2 writes kubelet's log (and its containerd's).
pub const RKE2_AGENT_LOG_DIR: &str = "/var/lib/rancher/rke2/agent/logs";
/// The audit log (NETFILTER_CFG records: who changed which netfilter table, when).
pub const AUDIT_LOG: &str = "/var/log/audit/audit.log";

fn text_fact<T>(
    node: &dyn NodeSource,
    cmd: &NodeCommand,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Fact<T> {
    match node.command(cmd) {
        Err(e) => Fact::unknown(e),
        Ok(c) => match parse(&c.text()) {
            Some(v) => Fact::known(v, c.source),
            None => Fact::unknown(format!("{}: output not understood", c.source)),
        },
    }
}

/// Everything about the node, gathered concurrently.
pub fn gather(node: &dyn NodeSource, options: &GatherOptions) -> Facts {
    let mut facts = Facts {
        source: Some(node.info()),
        ..Facts::default()
    };
    std::thread::scope(|s| {
        let rulesets = s.spawn(|| read_rulesets(node));
        let logs = s.spawn(|| (pod_logs(node, options), agent_logs(node, options)));
        let f = &mut facts;
        f.ip_tables_names = names_file(node, "/proc/net/ip_tables_names");
        f.ip6_tables_names = names_file(node, "/proc/net/ip6_tables_names");
        f.iptables_version = text_fact(node, &NodeCommand::IptablesVersion, |t| {
            Some(t.trim().to_string()).filter(|s| !s.is_empty())
        });
        f.kernel = text_fact(node, &NodeCommand::Uname, |t| {
            Some(t.trim().to_string()).filter(|s| !s.is_empty())
        });
        f.units = text_fact(node, &NodeCommand::ListUnits, |t| {
            Some(systemd::list_units(t))
        });
        f.unit_files = text_fact(node, &NodeCommand::UnitFiles, |t| {
            Some(systemd::list_unit_files(t))
        });
        f.processes = text_fact(node, &NodeCommand::Ps, |t| {
            Some(ps::parse(t)).filter(|p| !p.is_empty())
        });
        if node.is_live()
            && let Fact::Known { value, .. } = &mut f.processes
        {
            for p in value.iter_mut() {
                p.exe = std::fs::read_link(format!("/proc/{}/exe", p.pid))
                    .ok()
                    .map(|e| e.display().to_string());
            }
        }
        f.ufw = text_fact(node, &NodeCommand::UfwStatus, ufw::parse);
        f.firewalld = text_fact(node, &NodeCommand::FirewalldState, firewalld_state);
        f.sysctls = text_fact(node, &NodeCommand::SysctlAll, |t| {
            let s = sysctl::parse(t);
            Some(s.values.into_iter().map(|(k, v)| (k, v.value)).collect())
                .filter(|m: &std::collections::BTreeMap<_, _>| !m.is_empty())
        });
        f.modules = text_fact(node, &NodeCommand::Lsmod, |t| {
            Some(lsmod::parse(t)).filter(|m| !m.is_empty())
        });
        f.listeners = text_fact(node, &NodeCommand::SsListening, |t| Some(ss::parse(t)));
        f.rke2_config = match node.file(RKE2_CONFIG) {
            Err(e) => Fact::unknown(e),
            Ok(c) => match rke2::parse_config(&c.text()) {
                Ok(v) => Fact::known(v, c.source),
                Err(e) => Fact::unknown(format!("{}: not valid YAML: {e}", c.source)),
            },
        };
        f.kube_proxy_probes = match node.file(KUBE_PROXY_MANIFEST) {
            Err(e) => Fact::unknown(e),
            Ok(c) => match rke2::parse_probe_paths(&c.text()) {
                Ok(v) => Fact::known(v, c.source),
                Err(e) => Fact::unknown(format!("{}: {e}", c.source)),
            },
        };
        f.cni_conf_files = match node.dir(CNI_DIR) {
            Ok(v) => Fact::known(v, CNI_DIR),
            Err(e) => Fact::unknown(e),
        };
        f.agents = agent_sightings(node, f);
        f.distribution = distribution(node);
        f.cluster_settings = cluster_settings(node, f);
        f.cilium = node.cilium();
        let collected = rulesets.join().expect("ruleset thread");
        f.ruleset_reads = collected
            .tools
            .iter()
            .map(|t| RulesetRead {
                source: if t.status == "ok" {
                    t.detail.clone()
                } else {
                    t.tool.clone()
                },
                outcome: if t.status == "ok" {
                    "ok".into()
                } else {
                    format!("{}: {}", t.status, t.detail)
                },
                left_out: t.left_out,
            })
            .collect();
        // After the dumps, not beside them: the probes need kube-proxy's rules (is this a
        // node, where is the API endpoint) and must not dump the ruleset a second time.
        let p = network_probes(
            node,
            options,
            Some(&collected.ruleset),
            f.distribution.as_deref(),
            f.cilium.value(),
        );
        let any_ok = collected.tools.iter().any(|t| t.status == "ok");
        f.ruleset = if any_ok {
            let sources: Vec<&str> = f
                .ruleset_reads
                .iter()
                .filter(|r| r.outcome == "ok")
                .map(|r| r.source.as_str())
                .collect();
            Fact::known(collected.ruleset, sources.join(", "))
        } else {
            Fact::unknown("no ruleset could be read (see ruleset_reads)")
        };
        let (pods, agents) = logs.join().expect("log thread");
        f.pod_logs = pods;
        f.agent_logs = agents;
        f.node_logs = node_logs(node, options);
        f.kube_proxy_healthz = p.healthz;
        f.kube_proxy_livez = p.livez;
        f.api_readyz = p.readyz;
        f.clusterip_connect = p.clusterip;
        f.api_local_connect = p.api_local;
    });
    facts
}

fn names_file(node: &dyn NodeSource, path: &str) -> Fact<Vec<String>> {
    match node.file(path) {
        Ok(c) => Fact::known(
            c.text().split_whitespace().map(str::to_string).collect(),
            c.source,
        ),
        Err(e) => Fact::unknown(e),
    }
}

/// `running` / `not running` from `firewall-cmd --state` or `systemctl status firewalld`.
fn firewalld_state(text: &str) -> Option<String> {
    let t = text.trim();
    if t == "running" || t == "not running" {
        return Some(t.to_string());
    }
    let active = t.lines().find_map(|l| l.trim().strip_prefix("Active:"))?;
    Some(
        if active.trim_start().starts_with("active (running)") {
            "running"
        } else {
            "not running"
        }
        .to_string(),
    )
}

fn agent_sightings(node: &dyn NodeSource, f: &Facts) -> Vec<AgentSighting> {
    let mut out = Vec::new();
    for agent in catalogue() {
        if let Fact::Known { value, source } = &f.units {
            for u in value
                .iter()
                .filter(|u| agent.matches_unit(&u.name) && u.load != "not-found")
            {
                out.push(AgentSighting {
                    agent: agent.name.clone(),
                    how: format!("unit {} {} ({})", u.name, u.active, u.sub),
                    source: format!("{source}:{}", u.line),
                });
            }
        }
        if let Fact::Known { value, source } = &f.processes {
            for p in value.iter().filter(|p| agent.matches_process(&p.comm)) {
                let exe = p
                    .exe
                    .as_deref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default();
                out.push(AgentSighting {
                    agent: agent.name.clone(),
                    how: format!("process {}[{}]{exe}", p.comm, p.pid),
                    source: source.clone(),
                });
            }
        }
        for path in agent.paths.iter().filter(|p| node.exists(p)) {
            out.push(AgentSighting {
                agent: agent.name.clone(),
                how: format!("install path {path}"),
                source: path.clone(),
            });
        }
    }
    out
}

/// Reads one log file and keeps its signal lines.
fn log_file(
    node: &dyn NodeSource,
    path: &str,
    agent: Option<&plumb_facts::agents::Agent>,
    max: usize,
) -> Option<LogFile> {
    let c = node.file(path).ok()?;
    Some(log_text(&c.text(), c.source.clone(), path, agent, max))
}

/// The signal lines of a log's text. An agent's lines count only when they are its
/// tamper or revert phrases; a revert is a revert line, a detection is not one.
fn log_text(
    text: &str,
    source: String,
    path: &str,
    agent: Option<&plumb_facts::agents::Agent>,
    max: usize,
) -> LogFile {
    let lines = logs::cri_lines(text);
    let mut signals: Vec<_> = lines
        .iter()
        .filter_map(|l| {
            let s = match agent {
                Some(a) if a.is_tamper_line(&l.text) => Some(match logs::signal(&l.text) {
                    Some(logs::Signal::AgentRevert) => logs::Signal::AgentRevert,
                    _ => logs::Signal::AgentTamper,
                }),
                Some(_) => None,
                None => logs::signal(&l.text),
            }?;
            Some((s, l.clone()))
        })
        .collect();
    if signals.len() > max {
        signals.drain(..signals.len() - max);
    }
    let pod = pod_ref_from_path(path).filter(|_| path.starts_with(POD_LOG_DIR));
    LogFile {
        restart: pod.as_ref().and(restart_from_path(path)),
        first: pod
            .as_ref()
            .and_then(|_| lines.iter().find(|l| !l.text.trim().is_empty()).cloned()),
        path: source,
        pod,
        agent: agent.map(|a| a.name.clone()),
        component: None,
        lines_read: lines.len(),
        signals,
    }
}

/// The logs of each container of the pods in the watched namespaces (every restart kubelet
/// kept, at most [`MAX_RESTART_LOGS`]), under
/// /var/log/pods (`<ns>_<pod>_<uid>/<container>/<n>.log`) or, in Rancher bundles, flat
/// `<ns>-<pod>` files.
pub fn pod_log_paths(node: &dyn NodeSource, options: &GatherOptions) -> Vec<String> {
    let Ok(entries) = node.dir(POD_LOG_DIR) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries {
        let in_scope = options
            .log_namespaces
            .iter()
            .any(|ns| entry.starts_with(&format!("{ns}_")) || entry.starts_with(&format!("{ns}-")));
        if !in_scope {
            continue;
        }
        let pod_dir = format!("{POD_LOG_DIR}/{entry}");
        match node.dir(&pod_dir) {
            Ok(containers) => {
                for c in containers {
                    let cdir = format!("{pod_dir}/{c}");
                    // Every start kubelet kept (`--previous` and older), newest last.
                    let mut starts: Vec<(u32, String)> = node
                        .dir(&cdir)
                        .map(|files| {
                            files
                                .into_iter()
                                .filter_map(|f| {
                                    Some((f.strip_suffix(".log")?.parse::<u32>().ok()?, f))
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    starts.sort();
                    let skip = starts.len().saturating_sub(MAX_RESTART_LOGS);
                    out.extend(
                        starts
                            .into_iter()
                            .skip(skip)
                            .map(|(_, f)| format!("{cdir}/{f}")),
                    );
                }
            }
            // A flat file (Rancher server bundles): every container's lines together.
            Err(_) => out.push(pod_dir),
        }
    }
    out
}

fn pod_logs(node: &dyn NodeSource, options: &GatherOptions) -> Vec<LogFile> {
    pod_log_paths(node, options)
        .iter()
        .filter_map(|p| log_file(node, p, None, options.max_signals_per_file))
        .collect()
}

/// Every file in the catalogue's agent log directories, with its agent.
pub fn agent_log_paths(
    node: &dyn NodeSource,
) -> Vec<(&'static plumb_facts::agents::Agent, String)> {
    let mut out = Vec::new();
    for agent in catalogue() {
        for dir in &agent.log_dirs {
            let Ok(files) = node.dir(dir) else { continue };
            out.extend(files.into_iter().map(|f| (agent, format!("{dir}/{f}"))));
        }
    }
    out
}

/// System logs where agents' lines also land (the only trace of them that sosreport and
/// Rancher's collector keep).
pub const SYSLOG_FILES: &[&str] = &["/var/log/messages", "/var/log/syslog"];

fn agent_logs(node: &dyn NodeSource, options: &GatherOptions) -> Vec<LogFile> {
    let mut out: Vec<LogFile> = agent_log_paths(node)
        .into_iter()
        .filter_map(|(agent, p)| log_file(node, &p, Some(agent), options.max_signals_per_file))
        .collect();
    for path in SYSLOG_FILES {
        let Ok(c) = node.file(path) else { continue };
        let lines = logs::cri_lines(&c.text());
        for agent in catalogue() {
            let mut signals: Vec<_> = lines
                .iter()
                .filter(|l| agent.is_mentioned_in(&l.text) && agent.is_tamper_line(&l.text))
                .map(|l| {
                    let s = match logs::signal(&l.text) {
                        Some(logs::Signal::AgentRevert) => logs::Signal::AgentRevert,
                        _ => logs::Signal::AgentTamper,
                    };
                    (s, l.clone())
                })
                .collect();
            if signals.is_empty() {
                continue;
            }
            if signals.len() > options.max_signals_per_file {
                signals.drain(..signals.len() - options.max_signals_per_file);
            }
            out.push(LogFile {
                path: c.source.clone(),
                pod: None,
                agent: Some(agent.name.clone()),
                lines_read: lines.len(),
                signals,
                ..LogFile::default()
            });
        }
    }
    out
}

/// kubelet's log files: RKE2's agent log directory (`kubelet.log`).
pub fn kubelet_log_paths(node: &dyn NodeSource) -> Vec<String> {
    node.dir(RKE2_AGENT_LOG_DIR)
        .map(|names| {
            names
                .into_iter()
                .filter(|n| n.starts_with("kubelet") && n.ends_with(".log"))
                .map(|n| format!("{RKE2_AGENT_LOG_DIR}/{n}"))
                .collect()
        })
        .unwrap_or_default()
}

/// kubelet's and the distribution's logs (files, the journal) and the audit log's
/// NETFILTER_CFG records.
fn node_logs(node: &dyn NodeSource, options: &GatherOptions) -> Vec<LogFile> {
    let mut out = Vec::new();
    for p in kubelet_log_paths(node) {
        if let Ok(c) = node.file(&p) {
            let mut f = log_text(
                &c.text(),
                c.source.clone(),
                &p,
                None,
                options.max_signals_per_file,
            );
            f.component = Some("kubelet".into());
            out.push(f);
        }
    }
    for (p, writer) in DISTRIBUTION_LOGS {
        if let Ok(c) = node.file(p) {
            let mut f = log_text(
                &c.text(),
                c.source.clone(),
                p,
                None,
                options.max_signals_per_file,
            );
            f.component = Some((*writer).into());
            out.push(f);
        }
    }
    if let Ok(c) = node.command(&NodeCommand::KubeletJournal) {
        let mut f = log_text(
            &c.text(),
            c.source.clone(),
            "journal",
            None,
            options.max_signals_per_file,
        );
        f.component = Some("kubelet".into());
        out.push(f);
    }
    if let Ok(c) = node.file(AUDIT_LOG) {
        out.push(audit_log(
            &c.text(),
            c.source.clone(),
            options.max_signals_per_file,
        ));
    }
    out
}

/// The NETFILTER_CFG records of an audit log (`type=NETFILTER_CFG`, or `type=1325` as the
/// kernel prints it to syslog), the newest `max`.
pub fn audit_log(text: &str, source: String, max: usize) -> LogFile {
    let lines = logs::cri_lines(text);
    let mut signals: Vec<_> = lines
        .iter()
        .filter(|l| l.text.contains("type=NETFILTER_CFG") || l.text.contains("type=1325 "))
        .map(|l| (logs::Signal::NetfilterChange, l.clone()))
        .collect();
    if signals.len() > max {
        signals.drain(..signals.len() - max);
    }
    LogFile {
        path: source,
        component: Some("audit".into()),
        lines_read: lines.len(),
        signals,
        ..LogFile::default()
    }
}

/// The distribution the node's files show, by marker paths (first match wins, most
/// specific first: an EKS or RKE2 node may also hold kubeadm-like paths).
///
/// - RKE2: /etc/rancher/rke2/config.yaml, /var/lib/rancher/rke2 (docs.rke2.io); kube-proxy
///   is a static pod (agent/pod-manifests/kube-proxy.yaml), kubelet logs to
///   agent/logs/kubelet.log.
/// - k3s: /etc/rancher/k3s/config.yaml, /var/lib/rancher/k3s (docs.k3s.io); kube-proxy
///   runs inside the k3s process (no pod, no manifest), logs in the `k3s` unit's journal.
/// - MicroShift: /etc/microshift/config.yaml (optional), /var/lib/microshift (its data
///   directory); OVN-Kubernetes translates Services, there is no kube-proxy; logs in the
///   `microshift` unit's journal.
/// - EKS: /etc/eks (the EKS AMIs install bootstrap.sh, eni-max-pods.txt, nodeadm's files
///   there; awslabs/amazon-eks-ami); kube-proxy is a DaemonSet (pod logs only), the VPC CNI
///   logs to /var/log/aws-routed-eni.
/// - kubeadm: /etc/kubernetes/manifests/kube-apiserver.yaml (control plane),
///   /etc/kubernetes/kubelet.conf; kube-proxy is a DaemonSet configured from
///   /var/lib/kube-proxy/config.conf.
fn distribution(node: &dyn NodeSource) -> Option<String> {
    [
        (RKE2_CONFIG, "rke2"),
        ("/var/lib/rancher/rke2", "rke2"),
        ("/etc/rancher/k3s/config.yaml", "k3s"),
        ("/var/lib/rancher/k3s", "k3s"),
        ("/etc/microshift/config.yaml", "microshift"),
        ("/var/lib/microshift", "microshift"),
        ("/etc/eks", "eks"),
        ("/etc/kubernetes/manifests/kube-apiserver.yaml", "kubeadm"),
        ("/etc/kubernetes/kubelet.conf", "kubeadm"),
    ]
    .into_iter()
    .find(|(p, _)| node.exists(p))
    .map(|(_, d)| d.to_string())
}

/// Static pod manifest files of the node.
pub fn manifest_paths(node: &dyn NodeSource) -> Vec<String> {
    MANIFEST_DIRS
        .iter()
        .flat_map(|d| {
            node.dir(d)
                .unwrap_or_default()
                .into_iter()
                .filter(|n| n.ends_with(".yaml") || n.ends_with(".yml") || n.ends_with(".json"))
                .map(move |n| format!("{d}/{n}"))
        })
        .collect()
}

/// Network settings in the running processes' arguments, the static pod manifests and
/// the configuration files (processes first: they are what runs).
fn cluster_settings(node: &dyn NodeSource, f: &Facts) -> Vec<plumb_facts::cluster::Setting> {
    use plumb_facts::cluster::settings_in;
    let mut out = Vec::new();
    if let Fact::Known { value, source } = &f.processes {
        for p in value.iter().filter(|p| {
            [
                "kube-apiserver",
                "kube-proxy",
                "kube-controller",
                "k3s",
                "rke2",
            ]
            .iter()
            .any(|n| p.comm.starts_with(n))
        }) {
            out.extend(settings_in(
                &p.args,
                &format!("{source}: {}[{}]", p.comm, p.pid),
            ));
        }
    }
    for path in manifest_paths(node)
        .iter()
        .map(String::as_str)
        .chain(CONFIG_FILES.iter().copied())
    {
        if let Ok(c) = node.file(path) {
            out.extend(settings_in(&c.text(), &c.source));
        }
    }
    out
}

/// A probe result a plumb bundle recorded when it was collected.
fn recorded<T: serde::de::DeserializeOwned>(node: &dyn NodeSource, name: &str) -> Fact<T> {
    match node.recorded_probe(name) {
        None => Fact::unknown("a bundle holds no live network probes"),
        Some(c) => serde_json::from_slice(&c.bytes)
            .unwrap_or_else(|e| Fact::unknown(format!("{}: {e}", c.source))),
    }
}

/// Network probe results, by the names plumb bundles record them under.
pub struct Probes {
    /// GET `/healthz` on kube-proxy's health server (127.0.0.1:10256).
    pub healthz: Fact<plumb_facts::HttpReply>,
    /// GET `/livez` on kube-proxy's health server.
    pub livez: Fact<plumb_facts::HttpReply>,
    /// GET `/readyz?verbose` on the API server endpoint (HTTPS, certificate not verified).
    pub readyz: Fact<plumb_facts::HttpReply>,
    /// TCP connect to the `kubernetes` Service ClusterIP on port 443; unknown (not sent)
    /// when the machine shows no sign of being a Kubernetes node.
    pub clusterip: Fact<plumb_facts::Connect>,
    /// TCP connect to the API server endpoint directly (no Service translation).
    pub api_local: Fact<plumb_facts::Connect>,
}

impl Probes {
    /// (name, JSON) of each probe, as a plumb bundle stores them.
    pub fn to_json(&self) -> Vec<(&'static str, String)> {
        fn json(v: &impl serde::Serialize) -> String {
            serde_json::to_string_pretty(v).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
        }
        vec![
            ("kube-proxy-healthz", json(&self.healthz)),
            ("kube-proxy-livez", json(&self.livez)),
            ("api-readyz", json(&self.readyz)),
            ("clusterip-connect", json(&self.clusterip)),
            ("api-local-connect", json(&self.api_local)),
        ]
    }
}

/// kube-proxy's health server (127.0.0.1:10256), the local API server (6443) and the
/// `kubernetes` Service ClusterIP — only on a running node. `rules`: the node's rulesets
/// when already read (else its iptables-nft dump is read here).
///
/// `cilium`: Cilium's state when read; where its load balancer holds the `kubernetes`
/// Service, the API endpoint probed is its backend (the datapath's own answer; on a
/// kube-proxy-free node kube-proxy's rules, if any are left, are stale).
pub fn network_probes(
    node: &dyn NodeSource,
    options: &GatherOptions,
    rules: Option<&Ruleset>,
    distribution: Option<&str>,
    cilium: Option<&plumb_facts::CiliumFacts>,
) -> Probes {
    if !node.is_live() {
        return Probes {
            healthz: recorded(node, "kube-proxy-healthz"),
            livez: recorded(node, "kube-proxy-livez"),
            readyz: recorded(node, "api-readyz"),
            clusterip: recorded(node, "clusterip-connect"),
            api_local: recorded(node, "api-local-connect"),
        };
    }
    let t = options.probe_timeout;
    let ns = node.netns();
    let dumped;
    let rules = match rules {
        Some(r) => Some(r),
        None => {
            dumped = node
                .command(&NodeCommand::IptablesSave {
                    family: plumb_ruleset::Family::Ip,
                    backend: plumb_ruleset::Backend::IptablesNft,
                })
                .ok()
                .map(|c| plumb_ruleset::iptables::save::parse(&c.text(), &Default::default()));
            dumped.as_ref()
        }
    };
    let clusterip = kubernetes_clusterip(node, rules, distribution);
    let api = cilium_backend(cilium, clusterip).unwrap_or_else(|| api_endpoint(node, rules));
    // Only a Kubernetes node translates the ClusterIP locally; elsewhere the SYN would
    // leave the machine, so it is not sent.
    let kube_node = node.file(RKE2_CONFIG).is_ok()
        || rules.is_some_and(|rs| rs.tables.iter().any(|t| t.chain("KUBE-SERVICES").is_some()));
    let result = plumb_os::netns::on_thread(ns, move || {
        std::thread::scope(|s| {
            let health = SocketAddr::from(([127, 0, 0, 1], 10256));
            let h = s.spawn(move || probe::http_get(health, "/healthz", false, t));
            let l = s.spawn(move || probe::http_get(health, "/livez", false, t));
            let r = s.spawn(move || probe::http_get(api, "/readyz?verbose", true, t));
            let c = s.spawn(move || kube_node.then(|| probe::tcp_connect(clusterip, t)));
            let a = s.spawn(move || probe::tcp_connect(api, t));
            let http = |j: std::thread::ScopedJoinHandle<
                '_,
                Result<plumb_facts::HttpReply, String>,
            >| match j.join() {
                Ok(Ok(r)) => Fact::known(r.clone(), r.url),
                Ok(Err(e)) => Fact::unknown(e),
                Err(_) => Fact::unknown("probe panicked"),
            };
            let tcp =
                |j: std::thread::ScopedJoinHandle<'_, plumb_facts::Connect>, what: &str| match j
                    .join()
                {
                    Ok(c) => Fact::known(c, what.to_string()),
                    Err(_) => Fact::unknown("probe panicked"),
                };
            let clusterip = match c.join() {
                Ok(Some(c)) => Fact::known(c, format!("TCP connect to {clusterip}")),
                Ok(None) => Fact::unknown(format!(
                    "not probed: no kube-proxy rules and no RKE2 config here, so {clusterip} is not a local Service address"
                )),
                Err(_) => Fact::unknown("probe panicked"),
            };
            Ok(Probes {
                healthz: http(h),
                livez: http(l),
                readyz: http(r),
                clusterip,
                api_local: tcp(a, &format!("TCP connect to {api}")),
            })
        })
    });
    result
        .map_err(|e| e.to_string())
        .unwrap_or_else(|e| Probes {
            healthz: Fact::unknown(e.clone()),
            livez: Fact::unknown(e.clone()),
            readyz: Fact::unknown(e.clone()),
            clusterip: Fact::unknown(e.clone()),
            api_local: Fact::unknown(e),
        })
}

/// The `kubernetes` Service ClusterIP, port 443: the address kube-proxy's rules translate,
/// else the first address of the node's Service CIDR, else the distribution's default
/// (the same decision doctor makes: [`plumb_facts::cluster::network`]).
fn kubernetes_clusterip(
    node: &dyn NodeSource,
    rules: Option<&Ruleset>,
    distribution: Option<&str>,
) -> SocketAddr {
    let mut facts = Facts {
        distribution: distribution.map(str::to_string),
        ..Facts::default()
    };
    if let Ok(c) = node.file(RKE2_CONFIG)
        && let Ok(cfg) = rke2::parse_config(&c.text())
    {
        facts.rke2_config = Fact::known(cfg, c.source);
    }
    facts.cluster_settings = cluster_settings(node, &facts);
    let from_rules = rules.and_then(|rs| plumb_facts::cluster::kubernetes_service(rs).clusterip);
    let ip = from_rules.unwrap_or_else(|| {
        plumb_facts::cluster::network(&facts)
            .kubernetes_clusterip
            .value
    });
    let ip: std::net::Ipv4Addr = ip.parse().unwrap_or(std::net::Ipv4Addr::new(10, 43, 0, 1));
    SocketAddr::from((ip, 443))
}

/// The first active backend Cilium's load balancer gives `service`.
fn cilium_backend(
    cilium: Option<&plumb_facts::CiliumFacts>,
    service: SocketAddr,
) -> Option<SocketAddr> {
    cilium?
        .frontends
        .as_ref()?
        .iter()
        .filter(|f| f.address == service.ip() && f.port == service.port())
        .flat_map(|f| f.active_backends())
        .map(|b| SocketAddr::new(b.address, b.port))
        .next()
}

/// The API server endpoint: where kube-proxy sends `default/kubernetes:https` (its DNAT
/// rule), else the server of RKE2's kubeconfig, else 127.0.0.1:6443.
fn api_endpoint(node: &dyn NodeSource, rules: Option<&Ruleset>) -> SocketAddr {
    rules
        .and_then(kubernetes_endpoint)
        .or_else(|| {
            let kubeconfig = node.file(RKE2_KUBECONFIG).ok()?;
            kubeconfig_server(&kubeconfig.text())
        })
        .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 6443)))
}

/// RKE2's kubeconfig (its `server:` is the API endpoint this node uses).
pub const RKE2_KUBECONFIG: &str = "/etc/rancher/rke2/rke2.yaml";

/// `server: https://192.168.100.11:6443` -> the address (IP literals only).
fn kubeconfig_server(text: &str) -> Option<SocketAddr> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("server:"))
        .and_then(|u| {
            u.trim()
                .trim_start_matches("https://")
                .trim_end_matches('/')
                .parse()
                .ok()
        })
}

/// The first DNAT destination of a rule commented `default/kubernetes:https`.
pub fn kubernetes_endpoint(rs: &Ruleset) -> Option<SocketAddr> {
    rs.tables
        .iter()
        .filter(|t| &*t.name == "nat")
        .flat_map(|t| t.chains.iter())
        .flat_map(|c| c.rules.iter())
        .filter(|r| r.text.contains("default/kubernetes:https"))
        .find_map(|r| {
            let x = r.xt()?;
            let t = x.target()?;
            (t.name() == "DNAT").then_some(())?;
            t.option("--to-destination")?.arg(0)?.parse().ok()
        })
}
