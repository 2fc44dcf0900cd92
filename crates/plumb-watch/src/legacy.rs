//! iptables-legacy tables: no netlink events exist for them.
//!
//! With audit, each `op=xt_replace` NETFILTER_CFG record is the trigger: plumb
//! re-reads the legacy tables (debounced, with `iptables-legacy-save`, only when
//! /proc/net/ip*_tables_names lists tables — querying a missing legacy table creates
//! it) and diffs against the previous read; the audit record names the writer.
//! Without audit plumb re-reads them every poll interval, diffs only when the
//! fingerprint of the output (the table-name lists and the dumps' lines) changed, and
//! reports that attribution and latency are degraded.

use plumb_os::runner::{RunError, Runner};
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
                for l in text.lines().filter_map(fingerprinted) {
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

/// The part of a dump line the fingerprint covers: none of a comment (it carries a
/// date), and a chain line without its packet and byte counters, which
/// iptables-legacy-save always prints and traffic changes on every poll.
fn fingerprinted(line: &str) -> Option<&str> {
    if line.starts_with('#') {
        return None;
    }
    if line.starts_with(':')
        && let Some((chain, counters)) = line.rsplit_once(' ')
        && counters.starts_with('[')
        && counters.ends_with(']')
    {
        return Some(chain);
    }
    Some(line)
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

#[cfg(test)]
mod tests {
    use super::*;
    use plumb_os::runner::CommandOutput;
    use std::sync::Mutex;

    /// Answers `cat` of the /proc table lists with "filter" and `iptables-legacy-save`
    /// with the next canned dump (or a failure); `ip6tables-legacy-save` is never asked.
    struct Dumps(Mutex<Vec<Option<&'static str>>>);

    impl Runner for Dumps {
        fn run(
            &self,
            program: &str,
            args: &[&str],
            _netns: Option<&str>,
            _timeout: Duration,
        ) -> Result<CommandOutput, RunError> {
            let ok = |s: &str| CommandOutput {
                status: Some(0),
                stdout: s.as_bytes().to_vec(),
                stderr: String::new(),
            };
            Ok(match (program, args) {
                ("cat", ["/proc/net/ip_tables_names"]) => ok("filter\n"),
                ("cat", _) => ok(""),
                _ => match self.0.lock().unwrap().remove(0) {
                    Some(dump) => ok(dump),
                    None => CommandOutput {
                        status: Some(4),
                        stdout: Vec::new(),
                        stderr: "Another app is currently holding the xtables lock".into(),
                    },
                },
            })
        }
    }

    const QUIET: &str = "# Generated by iptables-save v1.8.9 on Tue Dec  1 10:00:00 2026\n*filter\n:INPUT ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n-A INPUT -j KUBE-SERVICES\nCOMMIT\n";
    const BUSY: &str = "# Generated by iptables-save v1.8.9 on Tue Dec  1 10:00:02 2026\n*filter\n:INPUT ACCEPT [6:504]\n:KUBE-SERVICES - [0:0]\n-A INPUT -j KUBE-SERVICES\nCOMMIT\n";
    const CHANGED: &str = "*filter\n:INPUT ACCEPT [6:504]\n:KUBE-SERVICES - [0:0]\nCOMMIT\n";

    #[test]
    fn traffic_on_the_chain_counters_does_not_change_the_fingerprint() {
        let r = Dumps(Mutex::new(vec![Some(QUIET), Some(BUSY), Some(CHANGED)]));
        let (a, b, c) = (read(&r, None), read(&r, None), read(&r, None));
        assert!(a.errors.is_empty() && !a.ruleset.tables.is_empty());
        assert_eq!(a.fingerprint, b.fingerprint, "counters and dates only");
        assert_ne!(b.fingerprint, c.fingerprint, "a rule was deleted");
    }

    #[test]
    fn a_failed_dump_is_an_error_not_an_empty_table() {
        let r = Dumps(Mutex::new(vec![None]));
        let failed = read(&r, None);
        assert_eq!(failed.errors.len(), 1, "{:?}", failed.errors);
        assert!(failed.errors[0].contains("xtables lock"));
        assert!(failed.ruleset.tables.is_empty());
    }

    #[test]
    fn fingerprinted_lines() {
        assert_eq!(
            fingerprinted(":INPUT ACCEPT [6:504]"),
            Some(":INPUT ACCEPT")
        );
        assert_eq!(fingerprinted(":KUBE-X - [0:0]"), Some(":KUBE-X -"));
        assert_eq!(fingerprinted("# Completed on ..."), None);
        assert_eq!(fingerprinted("-A INPUT -j X"), Some("-A INPUT -j X"));
    }
}
