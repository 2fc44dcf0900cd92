//! `plumb doctor`: gather facts (live, namespace, lab or bundle), diagnose, report.

use crate::Verdict;
use crate::flags::NodeFlags;
use crate::output;
use anyhow::Context;
use plumb_collect::facts::{GatherOptions, gather};
use plumb_collect::node::{LiveNode, NodeSource, open_bundle_node};
use plumb_facts::timeline::Timeline;
use plumb_os::runner::SystemRunner;
use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;

/// The timeline as text: one entry per line (number, time, writer, what, where) with the
/// message below it, then what it says per container.
pub fn render_timeline(t: &Timeline) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "timeline: {} entries from the logs read, oldest first{}",
        t.entries.len(),
        if t.dropped > 0 {
            format!(" ({} older ones left out)", t.dropped)
        } else {
            String::new()
        }
    );
    for e in &t.entries {
        let mut what = serde_json::to_value(e.signal)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        if let Some(r) = e.restart {
            let _ = write!(what, " #{r}");
        }
        if let Some(p) = e.probe {
            let _ = write!(what, " ({p})");
        }
        if let Some(c) = e.code {
            let _ = write!(what, " HTTP {c}");
        }
        let about = match &e.container {
            Some(c) if *c != e.component => format!("{} -> {c}", e.component),
            _ => e.component.clone(),
        };
        let _ = writeln!(
            s,
            "  #{:<4} {:<32} {:<24} {:<28} {}:{}",
            e.n,
            e.time.as_deref().unwrap_or("-"),
            about,
            what,
            e.source,
            e.line
        );
        let _ = writeln!(
            s,
            "        {}",
            e.text.chars().take(160).collect::<String>()
        );
    }
    for c in &t.containers {
        let codes: Vec<String> = c
            .probe_codes
            .iter()
            .map(|(code, n)| format!("HTTP {code} x{n}"))
            .collect();
        let _ = writeln!(
            s,
            "{}: {} restarts ({} logs read), {} liveness kills, {} probe failures{}, {} back-offs, {} restore failures",
            c.container,
            c.restarts,
            c.logs,
            c.liveness_restarts,
            c.probe_failures,
            if codes.is_empty() {
                String::new()
            } else {
                format!(" ({})", codes.join(", "))
            },
            c.back_offs,
            c.restore_failures
        );
    }
    s
}

pub fn run(
    node: &NodeFlags,
    lab: bool,
    // The bundle, and which node of a Cilium sysdump (`--node`).
    bundle: Option<(&Path, Option<&str>)>,
    timeline: bool,
    verify: Option<&Path>,
    json: bool,
    style: plumb_findings::Style,
) -> anyhow::Result<Verdict> {
    // The earlier report is read first: a wrong file is an error before any gathering.
    let before = verify.map(read_earlier).transpose()?;
    let options = GatherOptions::default();
    let facts = if let Some((path, sysdump_node)) = bundle {
        let b = open_bundle_node(path, sysdump_node).map_err(anyhow::Error::msg)?;
        gather(&b, &options)
    } else if lab {
        super::input::require_net_admin("or diagnose a bundle with --bundle")?;
        let state = plumb_lab::state::LabState::load()
            .context("reading the lab state")?
            .context("no lab is running (start one with `plumb lab up SCENARIO`)")?;
        // On a kube-proxy-free lab the socket load balancer serves the lab's cgroup
        // only (never the host's processes): doctor's probes join it, as a process of
        // that node would be served.
        if let Some(c) = &state.cgroup {
            plumb_lab::cilium_node::join_self(c)
                .with_context(|| format!("joining the lab's cgroup {}", c.display()))?;
        }
        let live = LiveNode::new(
            SystemRunner,
            Some(plumb_lab::state::NODE_NETNS.to_string()),
            &state.root,
        );
        gather(&live as &dyn NodeSource, &options)
    } else {
        super::input::require_net_admin("or diagnose a bundle with --bundle")?;
        let live = LiveNode::new(SystemRunner, node.netns.clone(), &node.root).with_netlink();
        gather(&live as &dyn NodeSource, &options)
    };
    let report = plumb_doctor::diagnose(&facts);
    if let Some(before) = before {
        return verify_against(&before, report, json, style);
    }
    if json {
        output::json(&report)?;
    } else {
        let mut out = std::io::stdout().lock();
        if let Some(s) = &report.source {
            writeln!(out, "plumb doctor: {}", s.description)?;
            // What the source could not give (e.g. bundle members not extracted).
            for note in &s.notes {
                writeln!(out, "note: {note}")?;
            }
            if let Some(d) = &report.distribution {
                writeln!(out, "distribution: {d}")?;
            }
            writeln!(out)?;
        }
        if timeline {
            out.write_all(render_timeline(&report.timeline).as_bytes())?;
            writeln!(out)?;
        }
        write_diagnosis(&mut out, &report, style)?;
    }
    Ok(if report.root_cause.is_some() {
        Verdict::Problems
    } else {
        Verdict::Clean
    })
}

/// The diagnosis in text: conclusion and findings, what would make it sure, and the
/// network values that were assumed rather than read.
fn write_diagnosis(
    out: &mut impl Write,
    report: &plumb_doctor::Report,
    style: plumb_findings::Style,
) -> anyhow::Result<()> {
    {
        let conclusion = report.conclusion();
        let text = plumb_findings::render::diagnosis(conclusion.as_ref(), &report.findings, style);
        out.write_all(text.as_bytes())?;
        for c in &report.to_confirm {
            writeln!(out, "\nto be sure: {c}")?;
        }
        if let Some(n) = &report.network {
            let assumed: Vec<String> = [
                ("service CIDR", &n.service_cidr),
                ("pod CIDR", &n.cluster_cidr),
                ("kubernetes ClusterIP", &n.kubernetes_clusterip),
            ]
            .iter()
            .filter(|(_, d)| d.default)
            .map(|(what, d)| format!("{what} {} ({})", d.value, d.source))
            .collect();
            if !assumed.is_empty() {
                writeln!(
                    out,
                    "\nassumed, not read from the node: {}",
                    assumed.join("; ")
                )?;
            }
        }
    }
    Ok(())
}

/// An earlier report is at most this big (a 10k-service node's report is a few MB).
const MAX_EARLIER: u64 = 64 << 20;

/// Reads and parses an earlier `plumb doctor --json` report (a regular file, bounded).
fn read_earlier(path: &Path) -> anyhow::Result<plumb_doctor::verify::EarlierReport> {
    use std::io::Read as _;
    let what = || format!("reading the earlier report {}", path.display());
    let file = std::fs::File::open(path).with_context(what)?;
    let meta = file.metadata().with_context(what)?;
    anyhow::ensure!(
        meta.is_file(),
        "{}: not a regular file (give the file `plumb doctor --json` wrote)",
        path.display()
    );
    let mut text = String::new();
    file.take(MAX_EARLIER + 1)
        .read_to_string(&mut text)
        .with_context(what)?;
    anyhow::ensure!(
        text.len() as u64 <= MAX_EARLIER,
        "{}: larger than {} MiB, not a doctor report",
        path.display(),
        MAX_EARLIER >> 20
    );
    serde_json::from_str(&text).with_context(|| {
        format!(
            "{}: not a `plumb doctor --json` report (it needs version, root_cause, supporting and findings with id, status and title)",
            path.display()
        )
    })
}

/// `--verify`: compares, prints the comparison (text: then the diagnosis of this run),
/// and says whether the earlier root cause is fixed.
fn verify_against(
    before: &plumb_doctor::verify::EarlierReport,
    report: plumb_doctor::Report,
    json: bool,
    style: plumb_findings::Style,
) -> anyhow::Result<Verdict> {
    let v = plumb_doctor::verify::compare(before, report)
        .map_err(|e| anyhow::anyhow!("the earlier report: {e}"))?;
    let verdict = if v.fixed {
        Verdict::Clean
    } else {
        Verdict::Problems
    };
    if json {
        output::json(&v)?;
        return Ok(verdict);
    }
    let mut out = std::io::stdout().lock();
    out.write_all(render_verification(&v).as_bytes())?;
    writeln!(out, "\nnow:")?;
    write_diagnosis(&mut out, &v.report, style)?;
    Ok(verdict)
}

/// The comparison in text: the verdict, the root cause before and now, then the
/// resolved, still present and new problems (one line each).
pub fn render_verification(v: &plumb_doctor::verify::Verification) -> String {
    use plumb_doctor::verify::RootCauseChange;
    let mut s = String::new();
    if let Some(src) = &v.report.source {
        let _ = writeln!(s, "plumb doctor --verify: {}", src.description);
    }
    if let Some(b) = &v.before_source {
        let _ = writeln!(s, "compared with the earlier report of: {b}");
    }
    let _ = writeln!(s, "{}", v.verdict);
    let none = "none";
    let rc = &v.root_cause;
    let _ = match rc.change {
        RootCauseChange::Gone => writeln!(
            s,
            "root cause: gone (was {})",
            rc.before.as_deref().unwrap_or(none)
        ),
        RootCauseChange::Same => writeln!(
            s,
            "root cause: same ({})",
            rc.now.as_deref().unwrap_or(none)
        ),
        RootCauseChange::Changed => writeln!(
            s,
            "root cause: changed ({} -> {})",
            rc.before.as_deref().unwrap_or(none),
            rc.now.as_deref().unwrap_or(none)
        ),
        RootCauseChange::None => writeln!(s, "root cause: none before, none now"),
    };
    let section = |s: &mut String, name: &str, list: &[plumb_doctor::verify::FindingChange]| {
        let _ = writeln!(s, "{name} ({}):", list.len());
        for c in list {
            let mark = if !c.was_root_cause {
                ""
            } else if rc.before.as_deref() == Some(c.id.as_str()) {
                " [root cause]"
            } else {
                " [explained by the root cause]"
            };
            let _ = match (&c.before, &c.now) {
                (Some(b), Some(n)) if c.status_now != "problem" => {
                    writeln!(s, "  {}{mark}: {b} -> now {}: {n}", c.id, c.status_now)
                }
                (Some(b), None) => writeln!(s, "  {}{mark}: {b} -> not reported now", c.id),
                (_, Some(n)) => writeln!(s, "  {}{mark}: {n}", c.id),
                (None, None) => writeln!(s, "  {}{mark}", c.id),
            };
        }
    };
    section(&mut s, "resolved", &v.resolved);
    section(&mut s, "still present", &v.still_present);
    section(&mut s, "new", &v.new);
    s
}
