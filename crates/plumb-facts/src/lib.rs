//! What plumb knows about a node, and how to read it from text. Pure: no IO.
//!
//! - [`model`]: the [`Facts`] contract: every probe's result as a [`Fact`] (value and
//!   source, or why it is unknown), filled by plumb-collect from a live node, a
//!   namespace (the lab) or a support bundle, and read by doctor.
//! - [`parse`]: parsers for `sysctl -a`, `lsmod`, `ss -tlnp`, `ufw status verbose`,
//!   `systemctl list-units`, CRI/klog logs, kube-proxy's health JSON, RKE2's config.
//! - [`agents`]: the catalogue of host security agents (data/agents.json).
//! - [`cluster`]: the node's network settings (Service and pod CIDRs, the `kubernetes`
//!   ClusterIP, the API endpoint) from its own state, defaults only as a last resort.
//! - [`timeline`]: the node's history from every log read, in time order.

#![deny(missing_docs)]

pub mod agents;
pub mod cluster;
pub mod fact;
pub mod model;
pub mod parse;
pub mod redact;
pub mod timeline;

pub use fact::Fact;
pub use model::*;

/// Runs every parser of [`parse`] on `text` and drops the results: the one list the
/// never-panics proptest and the `facts_text` fuzz target share, so a new parser is
/// exercised by both once it is added here.
#[doc(hidden)]
pub fn run_every_parser(text: &str) {
    use parse::{health, logs, lsmod, ps, rke2, ss, sysctl, systemd, ufw};
    let _ = sysctl::parse(text);
    let _ = lsmod::parse(text);
    let _ = ss::parse(text);
    let _ = ufw::parse(text);
    let _ = systemd::list_units(text);
    let _ = systemd::list_unit_files(text);
    let _ = ps::parse(text);
    let lines = logs::cri_lines(text);
    for l in &lines {
        let _ = logs::signal(&l.text);
        let _ = logs::klog(&l.text);
        let _ = logs::dial_target(&l.text);
        let _ = logs::probe_status(&l.text);
        let _ = logs::probe_kind(&l.text);
        let _ = logs::subject_container(&l.text);
    }
    let _ = parse::settings::settings_in(text, "text");
    // The timeline reads every line's time (CRI, ISO, syslog, klog, audit stamps).
    let facts = Facts {
        node_logs: vec![LogFile {
            signals: lines
                .into_iter()
                .map(|l| (logs::Signal::ProbeFailed, l))
                .collect(),
            ..LogFile::default()
        }],
        ..Facts::default()
    };
    let _ = timeline::build(&facts);
    let _ = health::parse(text);
    let _ = rke2::parse_config(text);
    let _ = rke2::parse_probe_paths(text);
}
