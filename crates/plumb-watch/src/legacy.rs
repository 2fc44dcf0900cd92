//! iptables-legacy tables: no netlink events exist for them.
//!
//! With audit, each `op=xt_replace` NETFILTER_CFG record is the trigger: plumb
//! re-reads the legacy tables (debounced, with `iptables-legacy-save`, only when
//! /proc/net/ip*_tables_names lists tables — querying a missing legacy table creates
//! it) and diffs against the previous read; the audit record names the writer.
//! Without audit plumb re-reads them every poll interval, diffs only when the
//! fingerprint of the output (the table-name lists and the dumps' lines) changed, and
//! reports that attribution and latency are degraded.

use plumb_collect::runner::{RunError, Runner};
use plumb_ruleset::iptables::save::{IptablesInput, parse};
use plumb_ruleset::{Backend, Family, Ruleset};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(30);

/// A legacy read: the ruleset and a fingerprint of the raw text.
#[derive(Debug, Default)]
pub struct LegacyRead {
    /// The legacy tables of both families as iptables-legacy-save and
    /// ip6tables-legacy-save print them; no tables when /proc lists none.
    pub ruleset: Ruleset,
    /// A hash of the /proc table lists and each dump's lines but its comments (which
    /// carry dates): equal fingerprints mean the same output.
    pub fingerprint: u64,
    /// Tools that failed, with why.
    pub errors: Vec<String>,
}

/// Reads the legacy tables of this machine or of `netns`, gated on /proc lists.
pub fn read(runner: &dyn Runner, netns: Option<&str>) -> LegacyRead {
    let mut out = LegacyRead::default();
    let mut hasher = std::hash::DefaultHasher::new();
    use std::hash::{Hash, Hasher};
    for (gate, tool, family) in [
        (
            "/proc/net/ip_tables_names",
            "iptables-legacy-save",
            Family::Ip,
        ),
        (
            "/proc/net/ip6_tables_names",
            "ip6tables-legacy-save",
            Family::Ip6,
        ),
    ] {
        let listed = match runner.run("cat", &[gate], netns, TIMEOUT) {
            Ok(o) if o.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
            _ => String::new(),
        };
        listed.hash(&mut hasher);
        if listed.trim().is_empty() {
            continue;
        }
        match runner.run(tool, &[], netns, TIMEOUT) {
            Ok(o) if o.success() => {
                let text = String::from_utf8_lossy(&o.stdout);
                // Comment lines carry dates: leave them out of the fingerprint.
                for l in text.lines().filter(|l| !l.starts_with('#')) {
                    l.hash(&mut hasher);
                }
                out.ruleset.merge(parse(
                    &text,
                    &IptablesInput {
                        family,
                        backend: Some(Backend::IptablesLegacy),
                        ..Default::default()
                    },
                ));
            }
            Ok(o) => out.errors.push(format!("{tool}: {}", o.stderr.trim())),
            Err(RunError::NotFound { .. }) => out.errors.push(format!("{tool}: not installed")),
            Err(e) => out.errors.push(e.to_string()),
        }
    }
    out.fingerprint = hasher.finish();
    out
}

/// Whether any legacy table exists (in this process's namespace view of `netns`).
pub fn has_tables(runner: &dyn Runner, netns: Option<&str>) -> bool {
    ["/proc/net/ip_tables_names", "/proc/net/ip6_tables_names"]
        .iter()
        .any(|gate| match runner.run("cat", &[gate], netns, TIMEOUT) {
            Ok(o) => o.success() && !o.stdout.iter().all(u8::is_ascii_whitespace),
            Err(_) => false,
        })
}
