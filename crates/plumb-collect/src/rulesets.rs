//! Reading every ruleset a node has: iptables-nft and iptables-legacy, IPv4 and
//! IPv6, and native nftables tables — each with the tool admins trust.
//!
//! Read-only by construction: only dump commands run. Legacy dumps are only taken
//! when /proc/net/ip{,6}_tables_names lists tables, because querying a legacy
//! table that does not exist creates it (facts-kernel.md) and a missing x_tables
//! module would be loaded by the tool. A missing tool is reported, never fatal.

use crate::runner::{RunError, Runner};
use plumb_ruleset::iptables::save::{IptablesInput, parse as parse_iptables};
use plumb_ruleset::{Backend, Family, Ruleset};
use serde::Serialize;
use std::time::Duration;

/// How one dump command went.
#[derive(Clone, Debug, Serialize)]
pub struct ToolOutcome {
    pub tool: String,
    /// `ok`, `missing`, `skipped` or `failed`.
    pub status: String,
    pub detail: String,
    pub tables: usize,
}

/// Everything read, merged, and how each tool went.
#[derive(Debug)]
pub struct Collected {
    pub ruleset: Ruleset,
    pub tools: Vec<ToolOutcome>,
}

const TIMEOUT: Duration = Duration::from_secs(20);

struct Dump {
    tool: &'static str,
    args: &'static [&'static str],
    family: Family,
    backend: Backend,
    /// Only run when this /proc file lists tables (legacy).
    gate: Option<&'static str>,
}

const DUMPS: &[Dump] = &[
    Dump {
        tool: "iptables-nft-save",
        args: &[],
        family: Family::Ip,
        backend: Backend::IptablesNft,
        gate: None,
    },
    Dump {
        tool: "ip6tables-nft-save",
        args: &[],
        family: Family::Ip6,
        backend: Backend::IptablesNft,
        gate: None,
    },
    Dump {
        tool: "iptables-legacy-save",
        args: &[],
        family: Family::Ip,
        backend: Backend::IptablesLegacy,
        gate: Some("/proc/net/ip_tables_names"),
    },
    Dump {
        tool: "ip6tables-legacy-save",
        args: &[],
        family: Family::Ip6,
        backend: Backend::IptablesLegacy,
        gate: Some("/proc/net/ip6_tables_names"),
    },
];

fn outcome(tool: &str, status: &str, detail: impl Into<String>, tables: usize) -> ToolOutcome {
    ToolOutcome {
        tool: tool.into(),
        status: status.into(),
        detail: detail.into(),
        tables,
    }
}

fn run_dump(runner: &dyn Runner, d: &Dump, netns: Option<&str>) -> (Option<Ruleset>, ToolOutcome) {
    if let Some(gate) = d.gate {
        match runner.run("cat", &[gate], netns, TIMEOUT) {
            Ok(o) if o.success() && !o.stdout.iter().all(u8::is_ascii_whitespace) => {}
            Ok(_) => {
                return (
                    None,
                    outcome(d.tool, "skipped", format!("{gate} lists no tables"), 0),
                );
            }
            Err(e) => return (None, outcome(d.tool, "skipped", format!("{gate}: {e}"), 0)),
        }
    }
    match runner.run(d.tool, d.args, netns, TIMEOUT) {
        Err(RunError::NotFound { .. }) => (None, outcome(d.tool, "missing", "not installed", 0)),
        Err(e) => (None, outcome(d.tool, "failed", e.to_string(), 0)),
        Ok(o) if !o.success() => (
            None,
            outcome(d.tool, "failed", o.stderr.trim().to_string(), 0),
        ),
        Ok(o) => {
            let text = String::from_utf8_lossy(&o.stdout);
            let input = IptablesInput {
                family: d.family,
                backend: Some(d.backend),
                ..Default::default()
            };
            let rs = parse_iptables(&text, &input);
            let n = rs.tables.len();
            (Some(rs), outcome(d.tool, "ok", String::new(), n))
        }
    }
}

/// Reads all rulesets of this machine, or of network namespace `netns`.
pub fn collect_rulesets(runner: &dyn Runner, netns: Option<&str>) -> Collected {
    let mut results: Vec<(Option<Ruleset>, ToolOutcome)> = std::thread::scope(|s| {
        let handles: Vec<_> = DUMPS
            .iter()
            .map(|d| s.spawn(move || run_dump(runner, d, netns)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("dump thread"))
            .collect()
    });
    let nft = match runner.run("nft", &["list", "ruleset"], netns, TIMEOUT) {
        Err(RunError::NotFound { .. }) => (None, outcome("nft", "missing", "not installed", 0)),
        Err(e) => (None, outcome("nft", "failed", e.to_string(), 0)),
        Ok(o) if !o.success() => (
            None,
            outcome("nft", "failed", o.stderr.trim().to_string(), 0),
        ),
        Ok(o) => {
            let rs = plumb_ruleset::nft::parse_text(&String::from_utf8_lossy(&o.stdout));
            (Some(rs), outcome("nft", "ok", String::new(), 0))
        }
    };
    let mut ruleset = Ruleset::default();
    let mut tools = Vec::new();
    for (rs, o) in results.drain(..) {
        if let Some(rs) = rs {
            ruleset.merge(rs);
        }
        tools.push(o);
    }
    let (nft_rs, mut nft_outcome) = nft;
    if let Some(mut rs) = nft_rs {
        // iptables-nft tables also show up in `nft list ruleset` (as xt expressions);
        // they were read above with iptables-nft-save, which decodes them correctly.
        rs.tables.retain(|t| {
            !ruleset.tables.iter().any(|x| {
                x.backend == Backend::IptablesNft && x.family == t.family && x.name == t.name
            })
        });
        nft_outcome.tables = rs.tables.len();
        ruleset.merge(rs);
    }
    tools.push(nft_outcome);
    Collected { ruleset, tools }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::CommandOutput;
    use std::collections::HashMap;

    /// Canned outputs per program; anything else is "not installed".
    struct Canned(HashMap<&'static str, &'static str>);

    impl Runner for Canned {
        fn run(
            &self,
            program: &str,
            args: &[&str],
            _netns: Option<&str>,
            _t: Duration,
        ) -> Result<CommandOutput, RunError> {
            let key = if program == "cat" { args[0] } else { program };
            match self.0.get(key) {
                Some(out) => Ok(CommandOutput {
                    status: Some(0),
                    stdout: out.as_bytes().to_vec(),
                    stderr: String::new(),
                }),
                None => Err(RunError::NotFound {
                    program: program.into(),
                }),
            }
        }
    }

    #[test]
    fn missing_tools_are_reported_not_fatal_and_legacy_is_gated() {
        let canned = Canned(HashMap::from([
            (
                "iptables-nft-save",
                "*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n",
            ),
            ("/proc/net/ip_tables_names", ""),
            (
                "iptables-legacy-save",
                "*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n",
            ),
        ]));
        let c = collect_rulesets(&canned, None);
        assert_eq!(c.ruleset.tables.len(), 1);
        assert_eq!(c.ruleset.tables[0].backend, Backend::IptablesNft);
        let status = |t: &str| c.tools.iter().find(|o| o.tool == t).unwrap().status.clone();
        assert_eq!(status("iptables-nft-save"), "ok");
        assert_eq!(status("ip6tables-nft-save"), "missing");
        // ip_tables_names is empty: the legacy dump must not run at all.
        assert_eq!(status("iptables-legacy-save"), "skipped");
        assert_eq!(status("nft"), "missing");
    }
}
