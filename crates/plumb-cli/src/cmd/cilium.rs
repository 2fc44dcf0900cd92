//! `plumb cilium services|verify`: Cilium's load balancer read from its pinned maps (or
//! a saved listing) and the post-migration check, over plumb-cilium.

use super::input::{load_source, require_net_admin};
use crate::Verdict;
use crate::flags::{CiliumCommand, CiliumNodeFlags, InputFlags, SourceFlags};
use crate::output;
use anyhow::Context;
use plumb_cilium::layout::BackendLayout;
use plumb_cilium::migration::KubeProxyService;
use plumb_cilium::verify::{MigratedNode, Verdict as Migration, verify};
use plumb_cilium::{Frontend, Problem, lb_list, service_list};
use serde::Serialize;
use std::io::Write;
use std::path::Path;

pub fn run(c: CiliumCommand, style: plumb_findings::Style) -> anyhow::Result<Verdict> {
    let c_bundle = match &c {
        CiliumCommand::Verify { node, .. } => node.bundle.clone(),
        _ => None,
    };
    match c {
        CiliumCommand::Preflight {
            root,
            lab,
            cilium_version,
            netns,
            output,
        } => {
            let (root, netns) = if lab {
                let (r, n) = lab_node()?;
                (r, Some(n))
            } else {
                (root, netns)
            };
            preflight(
                &root,
                netns,
                cilium_version.as_deref(),
                output.json(),
                style,
            )
        }
        CiliumCommand::Services { node, output } if node.bundle.is_some() => {
            let (facts, nodes) = bundle_facts(
                node.bundle.as_deref().expect("checked"),
                node.sysdump_node.as_deref(),
            )?;
            let lb = lb_of(&facts).with_context(|| {
                format!(
                    "no Cilium service listing in {}{}",
                    node.bundle.as_deref().expect("checked").display(),
                    nodes
                        .as_ref()
                        .map(|n| format!(" for {}", n.read.describe()))
                        .unwrap_or_default()
                )
            })?;
            show(
                &lb,
                &Extras {
                    sysdump: nodes.as_ref(),
                    ..Extras::default()
                },
                output.json(),
            )
        }
        CiliumCommand::Verify { ruleset, netns, .. }
            if (ruleset.is_some() || netns.is_some()) && c_bundle.is_some() =>
        {
            anyhow::bail!(
                "--bundle reads the rules, files and Cilium state from the bundle: it does not take --ruleset or --netns"
            )
        }
        CiliumCommand::Verify {
            node,
            before,
            output,
            ..
        } if node.bundle.is_some() => verify_bundle(
            node.bundle.as_deref().expect("checked"),
            node.sysdump_node.as_deref(),
            before.as_deref(),
            output.json(),
            style,
        ),
        CiliumCommand::Services { mut node, output } => {
            if node.lab {
                node.root = lab_node()?.0;
            }
            services(&node, output.json())
        }
        CiliumCommand::Verify {
            mut node,
            ruleset,
            mut netns,
            before,
            output,
        } => {
            if node.lab {
                let (root, ns) = lab_node()?;
                node.root = root;
                netns = Some(ns);
            }
            verify_node(
                &node,
                ruleset,
                netns,
                before.as_deref(),
                output.json(),
                style,
            )
        }
    }
}

/// Which node of a Cilium sysdump was read, and its other nodes.
#[derive(Serialize)]
pub(super) struct SysdumpNodes {
    /// The agent (node) read.
    read: plumb_collect::node::SysdumpAgent,
    /// The sysdump's other agents (nodes); `--node NAME` reads one of them.
    others: Vec<plumb_collect::node::SysdumpAgent>,
}

impl SysdumpNodes {
    /// `node a (agent pod cilium-1); the sysdump's other nodes: ... (--node NAME reads one)`.
    fn describe(&self) -> String {
        let mut s = format!("read {}", self.read.describe());
        if !self.others.is_empty() {
            let others: Vec<String> = self.others.iter().map(|a| a.describe()).collect();
            s.push_str(&format!(
                "; the sysdump's other nodes: {} (--node NAME reads one)",
                others.join(", ")
            ));
        }
        s
    }
}

/// The facts of a bundle (a Cilium sysdump, or any bundle doctor reads), of the
/// sysdump's node `node` when given; and for a sysdump, which node was read.
fn bundle_facts(
    path: &Path,
    node: Option<&str>,
) -> anyhow::Result<(plumb_facts::Facts, Option<SysdumpNodes>)> {
    let b = plumb_collect::node::open_bundle_node(path, node).map_err(anyhow::Error::msg)?;
    let nodes = b.sysdump_agent().map(|read| SysdumpNodes {
        read,
        others: b.other_agents().to_vec(),
    });
    Ok((
        plumb_collect::facts::gather(
            &b as &dyn plumb_collect::node::NodeSource,
            &Default::default(),
        ),
        nodes,
    ))
}

/// Cilium's frontends as the facts hold them.
fn lb_of(facts: &plumb_facts::Facts) -> Option<LbRead> {
    let c = facts.cilium.value()?;
    Some(LbRead {
        mode: match c.lb_mode.as_deref() {
            Some("cilium-bpf") => "cilium-bpf",
            Some("cilium-bpf-lb-list") => "cilium-bpf-lb-list",
            Some("cilium-dbg-service-list") => "cilium-dbg-service-list",
            _ => "cilium-service-list",
        },
        source: c.lb_source.clone()?,
        backend_layout: None,
        frontends: c.frontends.clone()?,
        problems: c.problems.clone(),
    })
}

/// `plumb cilium verify --bundle`: the same checks over what the bundle holds (its
/// rules, its CNI directory, its Cilium listing); no interfaces (a bundle is not live).
fn verify_bundle(
    path: &Path,
    node: Option<&str>,
    before: Option<&Path>,
    json: bool,
    style: plumb_findings::Style,
) -> anyhow::Result<Verdict> {
    // The dump from before is read first: a wrong file is an error before the bundle.
    let before = before.map(load_before).transpose()?;
    let (facts, nodes) = bundle_facts(path, node)?;
    let hubble = facts.cilium.value().and_then(|c| c.hubble.as_ref());
    let lb = lb_of(&facts);
    let manifests: Vec<String> = facts
        .kube_proxy_probes
        .source()
        .map(str::to_string)
        .into_iter()
        .collect();
    let result = verify(&MigratedNode {
        ruleset: facts.ruleset.value(),
        cni_files: facts.cni_conf_files.value().cloned(),
        kube_proxy_manifests: manifests,
        interfaces: None,
        lb: lb
            .as_ref()
            .map(|l| (l.frontends.as_slice(), l.source.clone())),
        before: before
            .as_ref()
            .map(|(s, name)| (s.as_slice(), name.clone())),
    });
    let rules = facts
        .ruleset
        .source()
        .unwrap_or("(no rules read)")
        .to_string();
    let kpr = facts
        .cilium
        .value()
        .and_then(|c| c.kube_proxy_replacement.clone());
    if json {
        #[derive(Serialize)]
        struct Out<'a> {
            verdict: Migration,
            rules: &'a str,
            /// The agent's KubeProxyReplacement setting, when its status was read.
            kube_proxy_replacement: Option<&'a str>,
            /// A sysdump's node read and its other nodes.
            #[serde(skip_serializing_if = "Option::is_none")]
            sysdump: Option<&'a SysdumpNodes>,
            lb: Option<&'a LbRead>,
            /// Hubble's flows of the node (information: no part of the verdict).
            #[serde(skip_serializing_if = "Option::is_none")]
            hubble: Option<HubbleOut<'a>>,
            findings: &'a [plumb_findings::Finding],
        }
        #[derive(Serialize)]
        struct HubbleOut<'a> {
            source: &'a str,
            #[serde(flatten)]
            summary: &'a plumb_cilium::hubble::FlowSummary,
        }
        output::json(&Out {
            verdict: result.verdict,
            rules: &rules,
            kube_proxy_replacement: kpr.as_deref(),
            sysdump: nodes.as_ref(),
            lb: lb.as_ref(),
            hubble: hubble.map(|(summary, source)| HubbleOut { source, summary }),
            findings: &result.findings,
        })?;
    } else {
        let mut out = std::io::stdout().lock();
        if let Some(n) = &nodes {
            writeln!(out, "sysdump: {}", n.describe())?;
        }
        drop(out);
        report(
            &format!(
                "plumb cilium verify: {} (rules: {rules}; KubeProxyReplacement: {})",
                path.display(),
                kpr.as_deref().unwrap_or("not in the bundle")
            ),
            &result.findings,
            style,
            match result.verdict {
                Migration::Migrated => "migrated",
                Migration::Incomplete => "incomplete",
            },
        )?;
        if let Some((summary, source)) = hubble {
            let mut out = std::io::stdout().lock();
            writeln!(out, "\n{}", hubble_text(summary, source))?;
        }
    }
    Ok(match result.verdict {
        Migration::Migrated => Verdict::Clean,
        Migration::Incomplete => Verdict::Problems,
    })
}

/// Hubble's flows as information: counts, then the drops by reason and destination.
fn hubble_text(s: &plumb_cilium::hubble::FlowSummary, source: &str) -> String {
    let mut t = format!(
        "Hubble flows (information, not part of the verdict): {} flows in {source}, {} dropped",
        s.flows, s.dropped
    );
    for line in s.group_lines() {
        t.push_str(&format!("\n  {line}"));
    }
    if s.other_groups > 0 {
        t.push_str(&format!(
            "\n  ... and {} more reason/destination pairs (see --json)",
            s.other_groups
        ));
    }
    if let Some(u) = &s.first_unreadable {
        t.push_str(&format!("\n  {} lines were no flow ({u})", s.unreadable));
    }
    t
}

/// The running lab's root and node namespace (`--lab`).
pub(super) fn lab_node() -> anyhow::Result<(std::path::PathBuf, String)> {
    let state = plumb_lab::state::LabState::load()
        .context("reading the lab state")?
        .context("no lab is running (start one with `plumb lab up SCENARIO`)")?;
    Ok((state.root, plumb_lab::state::NODE_NETNS.to_string()))
}

/// What the generated configuration reads about the node: its distribution, the API
/// endpoint behind the `kubernetes` Service and the pod CIDR, from the node's files and
/// rules (as doctor gathers them).
fn node_network(
    root: &Path,
    netns: Option<String>,
) -> (plumb_cilium::config::NodeNetwork, plumb_facts::Facts) {
    use plumb_cilium::config::{NodeNetwork, Sourced};
    use plumb_collect::node::{LiveNode, NodeSource};
    let live = LiveNode::new(plumb_os::runner::SystemRunner, netns, root).with_netlink();
    let facts = plumb_collect::facts::gather(&live as &dyn NodeSource, &Default::default());
    let net = plumb_facts::cluster::network(&facts);
    let sourced = |d: &plumb_facts::cluster::Decided| Sourced {
        value: d.value.clone(),
        source: d.source.clone(),
    };
    let network = NodeNetwork {
        distribution: facts.distribution.clone(),
        api_endpoint: net.api_endpoint.as_ref().map(sourced),
        // A distribution's default is not the node's: the generator then says so.
        pod_cidr: Some(&net.cluster_cidr).filter(|d| !d.default).map(sourced),
    };
    (network, facts)
}

/// Doctor's findings that a move to Cilium runs into: host firewalls (they can drop the
/// tunnel, health and pod traffic), security agents that rewrite netfilter, a second
/// iptables backend. Reported beside the kernel checklist; they do not decide go/no-go,
/// which is the kernel's (plumb cannot tell from here which datapath mode will be used).
const CONFLICT_IDS: &[&str] = &[
    "host-firewall-ufw",
    "host-firewall-firewalld",
    "host-firewall-reject",
    "input-drop-blocks-node",
    "forward-drop-blocks-pods",
    "docker-bypasses-ufw",
    "security-agent-present",
    "security-agent-tamper",
    "iptables-backend-mix",
];

/// Doctor's conflicts (problems only), then the move's own: Cilium's tunnel ports
/// traced through the host firewall's INPUT, CIDR overlaps with the node's addresses and
/// routes, hostPort users, NetworkPolicies in use (problems and unknowns: what could not
/// be judged is said).
fn conflicts(facts: &plumb_facts::Facts, netns: Option<&str>) -> Vec<plumb_findings::Finding> {
    use plumb_cilium::conflicts as c;
    let mut out: Vec<plumb_findings::Finding> = plumb_doctor::diagnose(facts)
        .findings
        .into_iter()
        .filter(|f| f.is_problem() && CONFLICT_IDS.contains(&f.id.as_str()))
        .collect();
    let ruleset = facts.ruleset.value();
    let tunnel: Vec<(u16, plumb_findings::Inbound)> = match ruleset {
        Some(rs) => {
            let input = plumb_check::CheckInput::new(
                rs,
                plumb_check::Origin::Live {
                    netns: netns.map(str::to_string),
                },
                false,
            );
            c::TUNNEL_PORTS
                .iter()
                .map(|(port, _)| {
                    use plumb_check::checks::shadow::inbound;
                    (*port, inbound(&input, plumb_trace::Proto::Udp, *port))
                })
                .collect()
        }
        None => Vec::new(),
    };
    let net = plumb_facts::cluster::network(facts);
    let cidr = |d: &plumb_facts::cluster::Decided| (d.value.clone(), d.source.clone());
    let (pod, service) = (cidr(&net.cluster_cidr), cidr(&net.service_cidr));
    let addresses = node_addresses(netns);
    let routes = node_routes(netns);
    let found = [
        c::tunnel_ports(&tunnel),
        c::cidr_overlaps(
            Some((&pod.0, &pod.1)),
            Some((&service.0, &service.1)),
            addresses.as_deref().map_err(String::as_str),
            routes.as_deref().map_err(String::as_str),
        ),
        c::hostport_users(ruleset),
        c::network_policies(ruleset, None),
    ];
    out.extend(
        found
            .into_iter()
            .filter(|f| f.status != plumb_findings::Status::Ok),
    );
    out
}

/// `ip -o ARGS` in `netns`, its lines.
fn ip_lines(netns: Option<&str>, args: &[&str]) -> Result<Vec<String>, String> {
    use plumb_os::runner::Runner;
    let out = plumb_os::runner::SystemRunner
        .run("ip", args, netns, std::time::Duration::from_secs(5))
        .map_err(|e| e.to_string())?;
    if !out.success() {
        return Err(format!("ip {}: {}", args.join(" "), out.stderr.trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect())
}

/// IPv4 addresses (`ip -o -4 addr show`: `2: eth0    inet 192.168.1.10/24 brd ...`).
fn node_addresses(
    netns: Option<&str>,
) -> Result<Vec<plumb_cilium::conflicts::NodeAddress>, String> {
    Ok(ip_lines(netns, &["-o", "-4", "addr", "show"])?
        .iter()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let i = w.iter().position(|x| *x == "inet")?;
            Some(plumb_cilium::conflicts::NodeAddress {
                cidr: w.get(i + 1)?.to_string(),
                dev: w.get(1)?.trim_end_matches(':').to_string(),
            })
        })
        .collect())
}

/// IPv4 routes of the main table but the default (`ip -o -4 route show`).
fn node_routes(netns: Option<&str>) -> Result<Vec<plumb_cilium::conflicts::NodeRoute>, String> {
    Ok(ip_lines(netns, &["-o", "-4", "route", "show"])?
        .iter()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let dst = *w.first()?;
            if dst == "default" || matches!(dst, "blackhole" | "unreachable" | "prohibit") {
                return None;
            }
            let dev = w
                .iter()
                .position(|x| *x == "dev")
                .and_then(|i| w.get(i + 1))
                .map(|d| d.to_string());
            Some(plumb_cilium::conflicts::NodeRoute {
                dst: dst.to_string(),
                dev,
                text: l.trim().to_string(),
            })
        })
        .collect())
}

fn preflight(
    root: &Path,
    netns: Option<String>,
    version: Option<&str>,
    json: bool,
    style: plumb_findings::Style,
) -> anyhow::Result<Verdict> {
    use plumb_cilium::preflight::{Release, Verdict as Go};
    let release = match version {
        Some(v) => Release::parse(v)
            .with_context(|| format!("--cilium-version {v}: expected MAJOR.MINOR such as 1.16"))?,
        None => Release::LATEST,
    };
    let kernel = plumb_collect::cilium::read_kernel(root);
    let result = plumb_cilium::preflight::preflight(&kernel, release);
    let (network, facts) = node_network(root, netns.clone());
    let config = plumb_cilium::config::generate(release, &network);
    let conflicts = conflicts(&facts, netns.as_deref());
    if json {
        #[derive(Serialize)]
        struct Out<'a> {
            #[serde(flatten)]
            result: &'a plumb_cilium::preflight::Preflight,
            /// What on the node a move to Cilium runs into (doctor's findings).
            conflicts: &'a [plumb_findings::Finding],
            /// The RKE2 configuration and Helm values for this node.
            config: &'a plumb_cilium::config::Generated,
        }
        output::json(&Out {
            result: &result,
            conflicts: &conflicts,
            config: &config,
        })?;
    } else {
        report(
            &format!(
                "plumb cilium preflight: kernel {} for Cilium {release} with kube-proxy replacement",
                kernel.release.as_deref().unwrap_or("(unknown)")
            ),
            &result.findings,
            style,
            match result.verdict {
                Go::Go => "go",
                Go::NoGo => "no-go",
            },
        )?;
        let mut out = std::io::stdout().lock();
        if !conflicts.is_empty() {
            writeln!(out, "\nconflicts to resolve before the migration:\n")?;
            out.write_all(plumb_findings::render::finding_list(&conflicts, style).as_bytes())?;
        }
        if let Some(rke2) = &config.rke2_config {
            writeln!(out, "\n# /etc/rancher/rke2/config.yaml (servers)\n{rke2}")?;
        }
        writeln!(out, "# Cilium Helm values\n{}", config.helm_values)?;
        for n in &config.notes {
            writeln!(out, "# {n}")?;
        }
    }
    Ok(match result.verdict {
        Go::Go => Verdict::Clean,
        Go::NoGo => Verdict::Problems,
    })
}

/// Cilium's frontends and where they came from.
#[derive(Serialize)]
pub(super) struct LbRead {
    /// `cilium-bpf` (the maps) or the listing's kind.
    mode: &'static str,
    /// The maps' directory or the listing file.
    source: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    backend_layout: Option<BackendLayout>,
    frontends: Vec<Frontend>,
    /// Maps, entries or rows that could not be read.
    problems: Vec<String>,
}

impl LbRead {
    /// The frontends read.
    pub(super) fn frontends(&self) -> &[Frontend] {
        &self.frontends
    }
}

/// Reads the frontends from `--lb-list` or from the maps below `--root`; None when the
/// root has no Cilium maps.
fn read_lb(node: &CiliumNodeFlags) -> anyhow::Result<Option<LbRead>> {
    if let Some(path) = &node.lb_list {
        let bytes = super::input::read_limited(path, plumb_ruleset::format::DEFAULT_MAX_SIZE)
            .with_context(|| format!("reading {}", path.display()))?;
        let text = String::from_utf8_lossy(&bytes);
        // The two listings differ in their header and in how a backend is written.
        let (mode, (frontends, errors)) =
            if text.contains("SERVICE ADDRESS") || text.contains(") (0)") {
                ("cilium-bpf-lb-list", lb_list::parse(&text))
            } else {
                ("cilium-service-list", service_list::parse(&text))
            };
        let name = path.display().to_string();
        return Ok(Some(LbRead {
            mode,
            problems: errors.iter().map(|e| format!("{name}: {e}")).collect(),
            source: name,
            backend_layout: None,
            frontends,
        }));
    }
    Ok(
        plumb_collect::cilium::read_lb_maps(&node.root).map(|r| LbRead {
            mode: "cilium-bpf",
            source: r.globals.display().to_string(),
            backend_layout: r.backend_layout,
            frontends: r.frontends,
            problems: r.problems,
        }),
    )
}

fn services(node: &CiliumNodeFlags, json: bool) -> anyhow::Result<Verdict> {
    let Some(lb) = read_lb(node)? else {
        anyhow::bail!(
            "no Cilium load-balancer maps under {} (looked for cilium_lb4_services_v2 in {}); pass --lb-list FILE for a saved `cilium-dbg bpf lb list`",
            node.root.display(),
            plumb_collect::cilium::GLOBALS_DIRS.join(", ")
        );
    };
    show(&lb, &Extras::default(), json)
}

/// The Cilium frontends of this machine's pinned maps, when it has any: what `plumb
/// services` shows on a kube-proxy-free node.
/// BPF maps are global, not per namespace; the lab pins its own on a bpffs below its
/// root, and its node namespace (`--netns plumb-node`) reads those.
pub(super) fn live_maps(netns: Option<&str>) -> Option<LbRead> {
    let root = netns
        .filter(|n| *n == plumb_lab::state::NODE_NETNS)
        .and_then(|_| plumb_lab::state::LabState::load().ok().flatten())
        .map_or_else(|| std::path::PathBuf::from("/"), |s| s.root);
    read_lb(&CiliumNodeFlags {
        root,
        lab: false,
        bundle: None,
        sysdump_node: None,
        lb_list: None,
    })
    .ok()
    .flatten()
}

/// What `show` prints beside the frontends.
#[derive(Default)]
pub(super) struct Extras<'a> {
    /// kube-proxy's rules left beside Cilium's maps (`plumb services`).
    pub(super) leftovers: Option<&'a super::services::KubeProxyLeftovers>,
    /// The sysdump node read, and the others (`--bundle`).
    pub(super) sysdump: Option<&'a SysdumpNodes>,
}

/// Prints `lb` as `plumb cilium services` does, with `extras`; exit 1 when the maps
/// contradict themselves.
pub(super) fn show(lb: &LbRead, extras: &Extras<'_>, json: bool) -> anyhow::Result<Verdict> {
    let leftovers = extras.leftovers;
    let inconsistent = lb
        .frontends
        .iter()
        .any(|f| f.problems.iter().any(|p| *p != Problem::NoBackends));
    if json {
        #[derive(Serialize)]
        struct Out<'a> {
            #[serde(flatten)]
            lb: &'a LbRead,
            /// kube-proxy's rules left beside Cilium's maps (`plumb services` only).
            #[serde(skip_serializing_if = "Option::is_none")]
            kube_proxy_leftovers: Option<&'a super::services::KubeProxyLeftovers>,
            /// A sysdump's node read and its other nodes (`--bundle`).
            #[serde(skip_serializing_if = "Option::is_none")]
            sysdump: Option<&'a SysdumpNodes>,
        }
        output::json(&Out {
            lb,
            kube_proxy_leftovers: leftovers,
            sysdump: extras.sysdump,
        })?;
    } else {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        let layout = lb
            .backend_layout
            .map(|l| format!(", backends {}", l.map_name(false)))
            .unwrap_or_default();
        if let Some(n) = extras.sysdump {
            writeln!(out, "sysdump: {}", n.describe())?;
        }
        writeln!(
            out,
            "Cilium load balancer: {} ({}{layout})\n",
            lb.source, lb.mode
        )?;
        let width = lb
            .frontends
            .iter()
            .map(|f| f.display_address().len())
            .max()
            .unwrap_or(0);
        for f in &lb.frontends {
            let kind = f.kind.map_or("?", |k| k.name());
            let backends: Vec<String> = f
                .backends
                .iter()
                .map(|b| format!("{}:{}", b.address, b.port))
                .collect();
            let to = if backends.is_empty() {
                "no backend".to_string()
            } else {
                backends.join(", ")
            };
            writeln!(out, "{:<width$}  {kind:<12} -> {to}", f.display_address())?;
            for p in f.problems.iter().filter(|p| **p != Problem::NoBackends) {
                writeln!(out, "{:<width$}  problem: {}", "", p.describe())?;
            }
        }
        for p in &lb.problems {
            writeln!(out, "warning: {p}")?;
        }
        writeln!(out, "\n{} frontends", lb.frontends.len())?;
        if let Some(l) = leftovers {
            writeln!(out, "\n{}", l.note())?;
        }
        out.flush()?;
    }
    Ok(if inconsistent {
        Verdict::Problems
    } else {
        Verdict::Clean
    })
}

fn verify_node(
    node: &CiliumNodeFlags,
    ruleset: Option<std::path::PathBuf>,
    netns: Option<String>,
    before: Option<&Path>,
    json: bool,
    style: plumb_findings::Style,
) -> anyhow::Result<Verdict> {
    let lb = read_lb(node)?;
    let before = before.map(load_before).transpose()?;
    if ruleset.is_none() {
        require_net_admin("or pass --ruleset FILE")?;
    }
    // The interfaces are the live node's: judged only when its rules are read live.
    let interfaces = ruleset.is_none().then(|| links(netns.as_deref()));
    let source = load_source(
        &SourceFlags {
            ruleset,
            netns,
            file: None,
        },
        &InputFlags::default(),
    )?;
    // The same places collect and doctor read: the CNI directory, and kube-proxy's static
    // pod manifest in each distribution's manifest directory.
    let below_root = |p: &str| node.root.join(p.trim_start_matches('/'));
    let cni_files = list_dir(&below_root(plumb_collect::facts::CNI_DIR));
    let manifests: Vec<String> = plumb_collect::facts::MANIFEST_DIRS
        .iter()
        .map(|d| below_root(d).join("kube-proxy.yaml"))
        .filter(|p| p.is_file())
        .map(|p| p.display().to_string())
        .collect();
    let result = verify(&MigratedNode {
        ruleset: Some(&source.ruleset),
        cni_files,
        kube_proxy_manifests: manifests,
        interfaces,
        lb: lb
            .as_ref()
            .map(|l| (l.frontends.as_slice(), l.source.clone())),
        before: before
            .as_ref()
            .map(|(s, name)| (s.as_slice(), name.clone())),
    });
    if json {
        #[derive(Serialize)]
        struct Out<'a> {
            verdict: Migration,
            rules: &'a str,
            lb: Option<&'a LbRead>,
            findings: &'a [plumb_findings::Finding],
        }
        output::json(&Out {
            verdict: result.verdict,
            rules: &source.name,
            lb: lb.as_ref(),
            findings: &result.findings,
        })?;
    } else {
        report(
            &format!(
                "plumb cilium verify: rules of {}, files under {}",
                source.name,
                node.root.display()
            ),
            &result.findings,
            style,
            match result.verdict {
                Migration::Migrated => "migrated",
                Migration::Incomplete => "incomplete",
            },
        )?;
    }
    Ok(match result.verdict {
        Migration::Migrated => Verdict::Clean,
        Migration::Incomplete => Verdict::Problems,
    })
}

/// The text report of preflight and verify: a header, the findings, the verdict.
fn report(
    header: &str,
    findings: &[plumb_findings::Finding],
    style: plumb_findings::Style,
    verdict: &str,
) -> anyhow::Result<()> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    writeln!(out, "{header}\n")?;
    out.write_all(plumb_findings::render::finding_list(findings, style).as_bytes())?;
    writeln!(out, "verdict: {verdict}")?;
    out.flush()?;
    Ok(())
}

/// The names of the network interfaces of `netns` (this machine's when None), from
/// `ip -o link`.
fn links(netns: Option<&str>) -> Result<Vec<String>, String> {
    use plumb_os::runner::Runner;
    let out = plumb_os::runner::SystemRunner
        .run(
            "ip",
            &["-o", "link", "show"],
            netns,
            std::time::Duration::from_secs(5),
        )
        .map_err(|e| e.to_string())?;
    if !out.success() {
        return Err(format!("ip -o link: {}", out.stderr.trim()));
    }
    // `3: flannel.1: <BROADCAST,...`, `7: cali12ab@if3: <...`: the name, without `@peer`.
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_string())
        .collect())
}

/// `--before DUMP`: kube-proxy's Services in a dump from before the migration, and the
/// dump's name; an error when it holds none.
fn load_before(path: &Path) -> anyhow::Result<(Vec<KubeProxyService>, String)> {
    let loaded = super::input::load(path, &InputFlags::default())?;
    let services = kube_proxy_services(&loaded.parsed.ruleset);
    if services.is_empty() {
        anyhow::bail!(
            "{}: no kube-proxy service rules in it; --before takes a dump from before the migration",
            loaded.name
        );
    }
    Ok((services, loaded.name))
}

/// kube-proxy's service ports in `ruleset`, as the migration diff compares them.
fn kube_proxy_services(ruleset: &plumb_ruleset::Ruleset) -> Vec<KubeProxyService> {
    plumb_kubeproxy::recover::recover(ruleset)
        .iter()
        .flat_map(|m| &m.services)
        .map(|s| KubeProxyService {
            name: s.name.clone(),
            cluster_ip: s.cluster_ip,
            port: s.port,
            protocol: s.protocol.clone(),
            node_ports: s.node_ports.to_vec(),
            endpoints: s
                .endpoints
                .iter()
                .filter_map(|e| e.address().map(str::to_string))
                .collect(),
        })
        .collect()
}

/// File names in `dir`, sorted; None when it cannot be read (absent counts as empty:
/// a node without a CNI directory has no old CNI configuration in it).
fn list_dir(dir: &Path) -> Option<Vec<String>> {
    match std::fs::read_dir(dir) {
        Ok(entries) => {
            let mut names: Vec<String> = entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            Some(names)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(Vec::new()),
        Err(_) => None,
    }
}
