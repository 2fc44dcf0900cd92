//! `plumb doctor`: gather facts (live, namespace, lab or bundle), diagnose, report.

use crate::Verdict;
use crate::flags::NodeFlags;
use crate::output;
use anyhow::Context;
use plumb_collect::SystemRunner;
use plumb_collect::facts::{GatherOptions, gather};
use plumb_collect::node::{LiveNode, Node, open_bundle};
use std::io::Write;
use std::path::Path;

pub fn run(
    node: &NodeFlags,
    lab: bool,
    bundle: Option<&Path>,
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
        let live = LiveNode::new(SystemRunner, node.netns.clone(), &node.root);
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
        let conclusion = report.conclusion();
        let text = plumb_findings::render::diagnosis(conclusion.as_ref(), &report.findings, style);
        out.write_all(text.as_bytes())?;
    }
    Ok(if report.root_cause.is_some() {
        Verdict::Problems
    } else {
        Verdict::Clean
    })
}
