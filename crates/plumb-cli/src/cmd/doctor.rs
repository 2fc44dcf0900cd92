//! `plumb doctor`: gather facts (live, namespace, lab or bundle), diagnose, report.

use crate::Verdict;
use crate::flags::NodeFlags;
use crate::output;
use anyhow::Context;
use plumb_collect::SystemRunner;
use plumb_collect::facts::{GatherOptions, gather};
use plumb_collect::node::{LiveNode, Node, open_bundle};
use std::io::{IsTerminal, Write};
use std::path::Path;

pub fn run(
    node: &NodeFlags,
    lab: bool,
    bundle: Option<&Path>,
    json: bool,
) -> anyhow::Result<Verdict> {
    let options = GatherOptions::default();
    let facts = if let Some(path) = bundle {
        let b = open_bundle(path).map_err(anyhow::Error::msg)?;
        gather(&b, &options)
    } else if lab {
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
        let live = LiveNode::new(SystemRunner, node.netns.clone(), &node.root);
        gather(&live as &dyn Node, &options)
    };
    let report = plumb_doctor::diagnose(&facts);
    if json {
        output::json(&report)?;
    } else {
        let color = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        std::io::stdout()
            .lock()
            .write_all(report.render(color).as_bytes())?;
    }
    Ok(if report.root_cause.is_some() {
        Verdict::Problems
    } else {
        Verdict::Clean
    })
}
