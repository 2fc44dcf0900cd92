//! `plumb collect -o FILE`: plumb's own support bundle of this node (or a namespace).

use crate::Verdict;
use crate::flags::NodeFlags;
use plumb_collect::bundle_writer::write_bundle;
use plumb_collect::facts::GatherOptions;
use plumb_collect::node::LiveNode;
use plumb_os::runner::SystemRunner;
use std::path::Path;

pub fn run(output: &Path, node: &NodeFlags) -> anyhow::Result<Verdict> {
    // Without it the bundle would hold no ruleset, and its reader would take that
    // for a node without one.
    super::input::require_net_admin("on the node to collect")?;
    let live = LiveNode::new(SystemRunner, node.netns.clone(), &node.root).with_netlink();
    let manifest =
        write_bundle(&live, output, &GatherOptions::default()).map_err(anyhow::Error::msg)?;
    let redactions = manifest.redactions();
    eprintln!(
        "wrote {}: {} entries ({} secrets redacted), {} not collected",
        output.display(),
        manifest.entries.len(),
        redactions,
        manifest.missing.len()
    );
    for m in &manifest.missing {
        eprintln!("  not collected: {}: {}", m.what, m.reason);
    }
    Ok(Verdict::Clean)
}
