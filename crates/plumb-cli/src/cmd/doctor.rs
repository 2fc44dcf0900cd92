//! `plumb doctor`: gather facts (live, namespace, lab or bundle), diagnose, report.

use crate::Verdict;
use crate::flags::NodeFlags;
use crate::output;
use anyhow::Context;
use plumb_collect::SystemRunner;
use plumb_collect::facts::{GatherOptions, gather};
use plumb_collect::node::{LiveNode, Node, open_bundle};
use plumb_facts::timeline::Timeline;
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
    bundle: Option<&Path>,
    timeline: bool,
    json: bool,
    style: plumb_findings::Style,
) -> anyhow::Result<Verdict> {
    let options = GatherOptions::default();
    let facts = if let Some(path) = bundle {
        let b = open_bundle(path).map_err(anyhow::Error::msg)?;
        gather(&b, &options)
    } else if lab {
        super::input::require_net_admin("or diagnose a bundle with --bundle")?;
        let state = plumb_lab::state::LabState::load()
            .context("reading the lab state")?
            .context("no lab is running (start one with `plumb lab up SCENARIO`)")?;
        let live = LiveNode::new(
            SystemRunner,
            Some(plumb_lab::state::NODE_NETNS.to_string()),
            &state.root,
        );
        gather(&live as &dyn Node, &options)
    } else {
        super::input::require_net_admin("or diagnose a bundle with --bundle")?;
        let live = LiveNode::new(SystemRunner, node.netns.clone(), &node.root).with_netlink();
        gather(&live as &dyn Node, &options)
    };
    let report = plumb_doctor::diagnose(&facts);
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
            writeln!(out)?;
        }
        if timeline {
            out.write_all(render_timeline(&report.timeline).as_bytes())?;
            writeln!(out)?;
        }
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
    Ok(if report.root_cause.is_some() {
        Verdict::Problems
    } else {
        Verdict::Clean
    })
}
