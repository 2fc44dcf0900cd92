//! `plumb services`: kube-proxy's service map recovered from the rules, as a table or JSON;
//! on a live node whose Services Cilium serves (its BPF maps hold frontends), Cilium's
//! service map (`"mode": "cilium-bpf"`, as `plumb cilium services` prints it), with
//! kube-proxy's rules, when some are left, counted as stale leftovers; where a kube-proxy
//! process still runs there, its map, with Cilium's frontends counted beside it.

use super::input::{Source, load_source_with};
use crate::Verdict;
use crate::flags::{InputFlags, SourceFlags};
use crate::output;
use plumb_kubeproxy::recover::{NoEndpoints, RecoveredService, ServiceMap, recover};
use serde::Serialize;
use std::fmt::Write as _;
use std::io::Write;

pub fn run(
    source: &SourceFlags,
    lab: bool,
    input: &InputFlags,
    json: bool,
) -> anyhow::Result<Verdict> {
    let lab_source;
    let source = if lab {
        // The lab's node: its namespace's rules, and Cilium's maps below the lab root.
        super::cilium::lab_node()?;
        lab_source = SourceFlags {
            ruleset: None,
            netns: Some(plumb_lab::state::NODE_NETNS.to_string()),
            file: None,
        };
        &lab_source
    } else {
        source
    };
    // Recovery reads rule texts without keeping them: a dump is read in pieces, its
    // rule texts packed (half the memory of the text).
    let src = load_source_with(source, input, super::pieces::load_in_pieces)?;
    let maps = recover(&src.ruleset);
    // On a live node Cilium may serve the Services: it keeps them in pinned BPF maps
    // (global, not per namespace). Its socket load balancer translates a ClusterIP at
    // connect() and its tc programs before netfilter, so where its maps hold frontends
    // they are what serves the node, and kube-proxy's rules beside them are leftovers.
    // A kube-proxy that still runs keeps its rules current: they are no leftover, and
    // which of the two translates a connection depends on Cilium's settings, so
    // kube-proxy's map is printed, with Cilium's frontends counted beside it.
    let lb = src
        .live
        .is_some()
        .then(|| super::cilium::live_maps(source.netns.as_deref()))
        .flatten();
    let running = match &lb {
        Some(lb) if !maps.is_empty() && !lb.frontends().is_empty() => {
            kube_proxy_running(source.netns.as_deref())
        }
        _ => None,
    };
    let cilium_beside = running.and(lb.as_ref()).map(|lb| lb.frontends().len());
    if running.is_none()
        && let Some(lb) = lb
        && (maps.is_empty() || !lb.frontends().is_empty())
    {
        let leftovers = (!maps.is_empty()).then(|| KubeProxyLeftovers::of(&src.ruleset, &maps));
        super::leak_at_exit(maps);
        return super::cilium::show(
            &lb,
            &super::cilium::Extras {
                leftovers: leftovers.as_ref(),
                ..Default::default()
            },
            json,
        );
    }
    let mismatches: usize = maps.iter().map(|m| m.name_mismatches.len()).sum();
    let parse_errors = src.ruleset.error_count();
    // A table of a live node that could not be read (`Damaged`) is a problem of what
    // could be seen, like a line of a file that could not be read.
    let damaged = src.ruleset.completeness == plumb_ruleset::Completeness::Damaged;
    let verdict = if mismatches > 0 || parse_errors > 0 || damaged {
        Verdict::Problems
    } else {
        Verdict::Clean
    };
    if json {
        #[derive(Serialize)]
        struct Out<'a> {
            source: &'a str,
            format: &'a str,
            completeness: plumb_ruleset::Completeness,
            /// Parts of the input that could not be read (services may be missing).
            parse_errors: usize,
            /// Read from an `iptables -L` listing: columns were lost (ports printed as
            /// names, interfaces without -v), so every service is approximate.
            approximate: bool,
            maps: &'a [ServiceMap<'a>],
            /// Frontends Cilium's load balancer holds beside a running kube-proxy.
            #[serde(skip_serializing_if = "Option::is_none")]
            cilium_frontends: Option<usize>,
            /// How each read of a live node went (a table that could not be read, with
            /// why: `completeness` is then `damaged`); absent for a file.
            #[serde(skip_serializing_if = "<[_]>::is_empty")]
            tools: &'a [plumb_collect::ToolOutcome],
        }
        output::json(&Out {
            source: &src.name,
            format: src.format,
            completeness: src.ruleset.completeness,
            parse_errors,
            approximate: src.ruleset.approximate,
            maps: &maps,
            cilium_frontends: cilium_beside,
            tools: &src.tools,
        })?;
    } else {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        print_human(&mut out, &src, &maps)?;
        if let (Some(n), Some(pid)) = (cilium_beside, running) {
            writeln!(
                out,
                "kube-proxy runs (pid {pid}) beside Cilium's load balancer, which holds {n} frontends (`plumb cilium services`): which of them translates a connection depends on Cilium's kube-proxy replacement settings."
            )?;
        }
        out.flush()?;
    }
    super::leak_at_exit(maps);
    super::leak_at_exit(src);
    Ok(verdict)
}

/// A process named `kube-proxy` (its command name, as `ps` shows it) in the network
/// namespace `netns` (this machine's when None), when one runs: its pid. k3s's
/// in-process kube-proxy is not seen here (its command is `k3s`).
fn kube_proxy_running(netns: Option<&str>) -> Option<u32> {
    let want = match netns {
        Some(n) => plumb_os::netns::inode_of(n).ok()?,
        None => plumb_os::netns::inode(std::path::Path::new("/proc/self/ns/net")).ok()?,
    };
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        (comm.trim_end() == "kube-proxy"
            && plumb_os::netns::inode(&e.path().join("ns/net")).ok()? == want)
            .then_some(pid)
    })
}

/// kube-proxy's rules on a node whose Services Cilium serves: what is left of them.
#[derive(Debug, Serialize)]
pub(super) struct KubeProxyLeftovers {
    /// Always true here: Cilium's maps serve the node's Services, these rules do not.
    stale: bool,
    /// kube-proxy's chains (and nftables `kube-proxy` table chains) still present.
    chains: usize,
    /// Service ports kube-proxy's map recovered from them (the endpoints of the day
    /// kube-proxy last wrote them).
    service_ports: usize,
    /// Whether a built-in chain still jumps to them (`KUBE-SERVICES` from nat
    /// PREROUTING/OUTPUT, or a base chain in the `kube-proxy` table): traffic that reaches
    /// netfilter untranslated still meets them.
    hooked: bool,
    /// What the rules are and what removes them.
    note: String,
}

impl KubeProxyLeftovers {
    fn of(ruleset: &plumb_ruleset::Ruleset, maps: &[ServiceMap]) -> Self {
        let (chains, _) = plumb_cilium::verify::kube_proxy_chains(ruleset);
        let service_ports = maps.iter().map(|m| m.services.len()).sum();
        let hooked = ruleset.tables.iter().any(|t| {
            if t.backend == plumb_ruleset::Backend::Nftables {
                &*t.name == "kube-proxy" && t.chains.iter().any(|c| c.base.is_some())
            } else {
                ["PREROUTING", "OUTPUT"].iter().any(|b| {
                    t.chain(b).is_some_and(|c| {
                        c.rules.iter().any(|r| {
                            r.chain_references()
                                .iter()
                                .any(|x| x.chain == "KUBE-SERVICES")
                        })
                    })
                })
            }
        });
        let note = format!(
            "kube-proxy's rules are stale leftovers: {chains} chains ({service_ports} service ports) that Cilium's load balancer has replaced; {}. `plumb cilium verify` names them; `kube-proxy --cleanup` removes them.",
            if hooked {
                "they are still hooked, so traffic that reaches netfilter untranslated meets endpoints of the day kube-proxy stopped"
            } else {
                "nothing jumps to them"
            }
        );
        KubeProxyLeftovers {
            stale: true,
            chains,
            service_ports,
            hooked,
            note,
        }
    }

    /// The sentence the text output prints.
    pub(super) fn note(&self) -> &str {
        &self.note
    }
}

fn percent(p: f64) -> String {
    let v = p * 100.0;
    if (v - v.round()).abs() < 0.05 {
        format!("{v:.0}%")
    } else {
        format!("{v:.1}%")
    }
}

fn endpoints_cell(s: &RecoveredService, ruleset: &plumb_ruleset::Ruleset, ipvs: bool) -> String {
    // A partial capture that does not show the service's own chain says nothing about
    // its endpoints (an IPVS virtual service shows its real servers itself).
    if s.endpoints.is_empty()
        && !ipvs
        && s.no_endpoints.is_none()
        && ruleset.completeness != plumb_ruleset::Completeness::Full
        && !s.chains.iter().any(|c| {
            c.starts_with("KUBE-SVC-") && ruleset.tables.iter().any(|t| t.chain(c).is_some())
        })
    {
        return "? (its chain is not in this capture)".into();
    }
    match s.no_endpoints {
        Some(NoEndpoints::Reject) if s.endpoints.is_empty() => {
            return "<none: REJECT>".into();
        }
        Some(NoEndpoints::DropNoLocal) if s.endpoints.is_empty() => {
            return "<no local endpoints: DROP>".into();
        }
        _ => {}
    }
    if s.endpoints.is_empty() {
        return "<none>".into();
    }
    // One string per cell, written in place (10k rows: no per-endpoint strings).
    let mut cell = String::with_capacity(64);
    for (i, e) in s.endpoints.iter().take(3).enumerate() {
        if i > 0 {
            cell.push_str(", ");
        }
        let addr = e.address().or(e.chain()).unwrap_or("?");
        let local = if e.local == Some(true) { " local" } else { "" };
        let _ = match e.probability() {
            Some(p) => write!(cell, "{addr} ({}{local})", percent(p)),
            None => write!(cell, "{addr} (?{local})"),
        };
    }
    if s.endpoints.len() > 3 {
        let _ = write!(cell, " +{} more", s.endpoints.len() - 3);
    }
    cell
}

/// Who a note is about: the name, or for an unnamed service without chains (IPVS) its
/// address, so that notes of several unnamed services can be told apart.
fn note_label(s: &RecoveredService) -> String {
    if s.name.is_some() || !s.chains.is_empty() {
        return s.display_name();
    }
    let proto = s.protocol.as_deref().unwrap_or("?");
    match (s.cluster_ip, s.port, s.node_ports.first()) {
        (Some(ip), Some(port), _) => format!("<unnamed {proto} {ip}:{port}>"),
        (_, _, Some(np)) => format!("<unnamed {proto} node port {np}>"),
        _ => s.display_name(),
    }
}

fn extras(s: &RecoveredService) -> String {
    let mut out = Vec::new();
    for ip in &s.external_ips {
        out.push(format!("ext {ip}"));
    }
    for ip in &s.load_balancer_ips {
        out.push(format!("lb {ip}"));
    }
    if !s.load_balancer_source_ranges.is_empty() {
        out.push(format!("from {}", s.load_balancer_source_ranges.join(",")));
    }
    if let Some(a) = s.session_affinity_seconds {
        out.push(format!("affinity {a}s"));
    }
    if s.internal_traffic_local {
        out.push("internal:Local".into());
    }
    if s.external_traffic_local {
        out.push("external:Local".into());
    }
    if let Some(h) = s.health_check_node_port {
        out.push(format!("healthcheck {h}"));
    }
    out.join(" ")
}

fn print_human(out: &mut impl Write, src: &Source, maps: &[ServiceMap]) -> std::io::Result<()> {
    super::input::write_read_problems(out, &src.name, &src.ruleset, src.hint.as_deref())?;
    super::input::write_failed_reads(out, &src.tools)?;
    if maps.is_empty() && src.ruleset.completeness == plumb_ruleset::Completeness::Damaged {
        writeln!(
            out,
            "{}: no kube-proxy rules in what could be read; part of the ruleset could not be read (above), so kube-proxy's may be there",
            src.name
        )?;
        return Ok(());
    }
    if maps.is_empty() {
        writeln!(
            out,
            "{}: no kube-proxy rules (no KUBE-SERVICES/KUBE-SVC chains, no nftables kube-proxy table)",
            src.name
        )?;
        writeln!(
            out,
            "kube-proxy may be replaced (Cilium kube-proxy replacement) or not running."
        )?;
        return Ok(());
    }
    for m in maps {
        writeln!(
            out,
            "{}: kube-proxy {} mode, {} {}: {} service port(s){}",
            src.name,
            match m.mode {
                plumb_kubeproxy::recover::ProxyMode::Iptables => "iptables",
                plumb_kubeproxy::recover::ProxyMode::Nftables => "nftables",
                plumb_kubeproxy::recover::ProxyMode::Ipvs => "IPVS",
            },
            m.backend,
            m.family,
            m.services.len(),
            if src.ruleset.completeness == plumb_ruleset::Completeness::Partial {
                " (partial input: services not in it are not shown)"
            } else {
                ""
            }
        )?;
        if m.mode == plumb_kubeproxy::recover::ProxyMode::Ipvs {
            writeln!(
                out,
                "names unknown: IPVS keeps no service names (match the ClusterIPs with `kubectl get svc -A`)"
            )?;
        } else if src.ruleset.approximate {
            writeln!(
                out,
                "approximate: read from an iptables listing, which loses columns (a port it does not print is shown as -)"
            )?;
        }
        // The first five cells of a row, made twice (for the column widths, then for
        // the row) rather than kept for every service: the rows of a 10k-service map
        // held 5 MiB at the command's peak.
        let cells = |s: &RecoveredService| -> [String; 5] {
            [
                s.display_name(),
                s.protocol.clone().unwrap_or_else(|| "?".into()),
                s.cluster_ip.map_or_else(|| "-".into(), |i| i.to_string()),
                s.port.map_or_else(|| "-".into(), |p| p.to_string()),
                if s.node_ports.is_empty() {
                    "-".into()
                } else {
                    s.node_ports
                        .iter()
                        .map(u16::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                },
            ]
        };
        let header = [
            "SERVICE",
            "PROTO",
            "CLUSTER-IP",
            "PORT",
            "NODEPORT",
            "ENDPOINTS",
        ];
        let mut w = header.map(str::len);
        for s in &m.services {
            for (i, c) in cells(s).iter().enumerate() {
                w[i] = w[i].max(c.len());
            }
        }
        writeln!(
            out,
            "\n{:<w0$}  {:<w1$}  {:<w2$}  {:<w3$}  {:<w4$}  {}",
            header[0],
            header[1],
            header[2],
            header[3],
            header[4],
            header[5],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3],
            w4 = w[4]
        )?;
        for s in &m.services {
            let r = cells(s);
            let endpoints = endpoints_cell(
                s,
                &src.ruleset,
                m.mode == plumb_kubeproxy::recover::ProxyMode::Ipvs,
            );
            let x = extras(s);
            writeln!(
                out,
                "{:<w0$}  {:<w1$}  {:<w2$}  {:<w3$}  {:<w4$}  {}{}",
                r[0],
                r[1],
                r[2],
                r[3],
                r[4],
                endpoints,
                if x.is_empty() {
                    String::new()
                } else {
                    format!("  [{x}]")
                },
                w0 = w[0],
                w1 = w[1],
                w2 = w[2],
                w3 = w[3],
                w4 = w[4]
            )?;
        }
        let noted: Vec<&RecoveredService> =
            m.services.iter().filter(|s| !s.notes.is_empty()).collect();
        if !noted.is_empty() {
            writeln!(out, "\nnotes:")?;
            for s in noted.iter().take(10) {
                for n in &s.notes {
                    writeln!(out, "  {}: {n}", note_label(s))?;
                }
            }
            if noted.len() > 10 {
                writeln!(
                    out,
                    "  ... and {} more services with notes (see --json)",
                    noted.len() - 10
                )?;
            }
        }
        if !m.name_mismatches.is_empty() {
            writeln!(
                out,
                "\n{} chain name(s) do not match kube-proxy's hash of their service:",
                m.name_mismatches.len()
            )?;
            for x in &m.name_mismatches {
                writeln!(
                    out,
                    "  {} for {}{}: expected {}\n      {}:{}: {}",
                    x.chain,
                    x.service,
                    x.endpoint
                        .as_deref()
                        .map(|e| format!(" -> {e}"))
                        .unwrap_or_default(),
                    x.expected,
                    src.name,
                    x.evidence.line(),
                    x.evidence.text()
                )?;
            }
        }
        writeln!(out)?;
    }
    Ok(())
}
