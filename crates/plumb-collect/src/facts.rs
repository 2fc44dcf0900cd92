//! Gathers [`Facts`] from a [`Node`]: every probe concurrently, each bounded, each ending
//! in a fact or a reason (never a panic or an abort).
//!
//! What is read and why is listed in docs/bundles.md; how to interpret it is
//! doctor's business (plumb-doctor), not this module's.

use crate::node::{Node, NodeCommand};
use crate::probe;
use crate::rulesets::read_rulesets;
use plumb_facts::agents::catalogue;
use plumb_facts::parse::{logs, lsmod, ps, rke2, ss, sysctl, systemd, ufw};
use plumb_facts::{AgentSighting, Fact, Facts, LogFile, RulesetRead, pod_ref_from_path};
use plumb_ruleset::Ruleset;
use std::net::SocketAddr;
use std::time::Duration;

/// How long network probes may take (each).
#[derive(Clone, Debug)]
pub struct GatherOptions {
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
pub const RKE2_CONFIG: &str = "/etc/rancher/rke2/config.yaml";
pub const CNI_DIR: &str = "/etc/cni/net.d";
pub const POD_LOG_DIR: &str = "/var/log/pods";

fn text_fact<T>(
    node: &dyn Node,
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
pub fn gather(node: &dyn Node, options: &GatherOptions) -> Facts {
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
            })
            .collect();
        // After the dumps, not beside them: the probes need kube-proxy's rules (is this a
        // node, where is the API endpoint) and must not dump the ruleset a second time.
        let p = network_probes(node, options, Some(&collected.ruleset));
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
        f.kube_proxy_healthz = p.healthz;
        f.kube_proxy_livez = p.livez;
        f.api_readyz = p.readyz;
        f.clusterip_connect = p.clusterip;
        f.api_local_connect = p.api_local;
    });
    facts
}

fn names_file(node: &dyn Node, path: &str) -> Fact<Vec<String>> {
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

fn agent_sightings(node: &dyn Node, f: &Facts) -> Vec<AgentSighting> {
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
    node: &dyn Node,
    path: &str,
    agent: Option<&plumb_facts::agents::Agent>,
    max: usize,
) -> Option<LogFile> {
    let c = node.file(path).ok()?;
    let lines = logs::cri_lines(&c.text());
    let mut signals: Vec<_> = lines
        .iter()
        .filter_map(|l| {
            let s = match agent {
                Some(a) if a.is_tamper_line(&l.text) => Some(logs::Signal::AgentTamper),
                Some(_) => None,
                None => logs::signal(&l.text),
            }?;
            Some((s, l.clone()))
        })
        .collect();
    if signals.len() > max {
        signals.drain(..signals.len() - max);
    }
    Some(LogFile {
        path: c.source,
        pod: pod_ref_from_path(path),
        agent: agent.map(|a| a.name.clone()),
        lines_read: lines.len(),
        signals,
    })
}

/// The newest log of each container of the pods in the watched namespaces, under
/// /var/log/pods (`<ns>_<pod>_<uid>/<container>/<n>.log`) or, in Rancher bundles, flat
/// `<ns>-<pod>` files.
pub fn pod_log_paths(node: &dyn Node, options: &GatherOptions) -> Vec<String> {
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
                    let newest = node.dir(&cdir).ok().and_then(|files| {
                        files
                            .into_iter()
                            .filter_map(|f| Some((f.strip_suffix(".log")?.parse::<u32>().ok()?, f)))
                            .max()
                    });
                    if let Some((_, file)) = newest {
                        out.push(format!("{cdir}/{file}"));
                    }
                }
            }
            // A flat file (Rancher server bundles): every container's lines together.
            Err(_) => out.push(pod_dir),
        }
    }
    out
}

fn pod_logs(node: &dyn Node, options: &GatherOptions) -> Vec<LogFile> {
    pod_log_paths(node, options)
        .iter()
        .filter_map(|p| log_file(node, p, None, options.max_signals_per_file))
        .collect()
}

/// Every file in the catalogue's agent log directories, with its agent.
pub fn agent_log_paths(node: &dyn Node) -> Vec<(&'static plumb_facts::agents::Agent, String)> {
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

fn agent_logs(node: &dyn Node, options: &GatherOptions) -> Vec<LogFile> {
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
                .map(|l| (logs::Signal::AgentTamper, l.clone()))
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
            });
        }
    }
    out
}

/// A probe result a plumb bundle recorded when it was collected.
fn recorded<T: serde::de::DeserializeOwned>(node: &dyn Node, name: &str) -> Fact<T> {
    match node.recorded_probe(name) {
        None => Fact::unknown("a bundle holds no live network probes"),
        Some(c) => serde_json::from_slice(&c.bytes)
            .unwrap_or_else(|e| Fact::unknown(format!("{}: {e}", c.source))),
    }
}

/// Network probe results, by the names plumb bundles record them under.
pub struct Probes {
    pub healthz: Fact<plumb_facts::HttpReply>,
    pub livez: Fact<plumb_facts::HttpReply>,
    pub readyz: Fact<plumb_facts::HttpReply>,
    pub clusterip: Fact<plumb_facts::Connect>,
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
pub fn network_probes(node: &dyn Node, options: &GatherOptions, rules: Option<&Ruleset>) -> Probes {
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
    let clusterip = kubernetes_clusterip(node);
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
    let api = api_endpoint(node, rules);
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

/// The `kubernetes` Service ClusterIP: the first address of the service CIDR (RKE2's
/// config or its default 10.43.0.0/16), port 443.
fn kubernetes_clusterip(node: &dyn Node) -> SocketAddr {
    let cidr = node
        .file(RKE2_CONFIG)
        .ok()
        .and_then(|c| rke2::parse_config(&c.text()).ok())
        .map(|c| c.service_cidr().to_string())
        .unwrap_or_else(|| rke2::Rke2Config::DEFAULT_SERVICE_CIDR.to_string());
    let base: std::net::Ipv4Addr = cidr
        .split('/')
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(std::net::Ipv4Addr::new(10, 43, 0, 0));
    SocketAddr::from((
        std::net::Ipv4Addr::from(u32::from(base).wrapping_add(1)),
        443,
    ))
}

/// The API server endpoint: where kube-proxy sends `default/kubernetes:https` (its DNAT
/// rule), else the server of RKE2's kubeconfig, else 127.0.0.1:6443.
fn api_endpoint(node: &dyn Node, rules: Option<&Ruleset>) -> SocketAddr {
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
