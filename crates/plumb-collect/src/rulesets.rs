//! Reading every ruleset a node has: iptables-nft and iptables-legacy, IPv4 and
//! IPv6, and native nftables tables — each with the tool admins trust.
//!
//! A live node that reads nf_tables over netlink ([`crate::nft_netlink`]) gets its
//! iptables-nft tables translated from the kernel's messages, the save tool only for a
//! table the translation cannot give exactly, and each native table decoded into the
//! text `nft list table` prints for it, `nft list table` itself only for a native
//! table the decoder cannot give exactly; every such choice is in the tool outcomes,
//! with why.
//!
//! A live node that reads its legacy tables through getsockopt ([`crate::xt_legacy`])
//! gets them translated from the kernel's entries, the save tool only for a table the
//! translation cannot give exactly (said, with why).
//!
//! Read-only by construction: only dump commands run. Legacy dumps are only taken
//! when /proc/net/ip{,6}_tables_names lists tables, because querying a legacy
//! table that does not exist creates it (facts-kernel.md) and a missing x_tables
//! module would be loaded by the tool. A missing tool is reported, never fatal.

use crate::node::{LiveNode, NodeCommand, NodeSource};
use plumb_os::runner::Runner;
use plumb_ruleset::iptables::save::{IptablesInput, parse as parse_iptables};
use plumb_ruleset::{Backend, Family, Ruleset};
use serde::Serialize;

/// How one dump command went.
#[derive(Clone, Debug, Serialize)]
pub struct ToolOutcome {
    /// The dump's name (`iptables-nft-save`, `ip6tables-legacy-save`, `nft_list_ruleset`).
    pub tool: String,
    /// `ok`, `missing`, `skipped` or `failed`.
    pub status: String,
    /// For `ok`, where the text came from; otherwise the reason (the tool's error, the
    /// empty /proc table list that made a legacy dump unnecessary).
    pub detail: String,
    /// Tables the dump held (0 unless `ok`).
    pub tables: usize,
    /// The read left tables of the node out of the model: it did not work though what
    /// it reads is there, and no other read took its place (the ruleset is then
    /// `damaged`, and doctor reports it). A failed read is one; a `missing` tool only
    /// where the node was seen to have its tables (the netlink dump listed them, /proc
    /// lists the legacy ones); a getsockopt or netlink read that failed is not, since
    /// the tools then read the same tables and their outcomes are the ones judged.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub left_out: bool,
}

impl ToolOutcome {
    /// This outcome, for a read whose tables the node is known to have: a read that
    /// did not work left them out, whether it failed or its tool is missing.
    fn of_known_tables(mut self) -> ToolOutcome {
        self.left_out = self.status != "ok" && self.status != "skipped";
        self
    }

    /// This outcome, for a read another one replaces when it does not work (the save
    /// tools after a getsockopt or netlink read): it leaves nothing out itself.
    fn replaced_by_tools(mut self) -> ToolOutcome {
        self.left_out = false;
        self
    }
}

/// Everything read, merged, and how each tool went.
#[derive(Debug)]
pub struct Collected {
    /// Every table read, from all backends and both families, in one ruleset.
    pub ruleset: Ruleset,
    /// One outcome per dump tried, including skipped and failed ones.
    pub tools: Vec<ToolOutcome>,
}

struct Dump {
    family: Family,
    backend: Backend,
    /// Only run when this /proc file lists tables (legacy).
    gate: Option<&'static str>,
}

const DUMPS: &[Dump] = &[
    Dump {
        family: Family::Ip,
        backend: Backend::IptablesNft,
        gate: None,
    },
    Dump {
        family: Family::Ip6,
        backend: Backend::IptablesNft,
        gate: None,
    },
    Dump {
        family: Family::Ip,
        backend: Backend::IptablesLegacy,
        gate: Some("/proc/net/ip_tables_names"),
    },
    Dump {
        family: Family::Ip6,
        backend: Backend::IptablesLegacy,
        gate: Some("/proc/net/ip6_tables_names"),
    },
];

/// Tables bundles keep as `-nvL` listings when they have no iptables-save.
const LISTED_TABLES: &[&str] = &["filter", "nat", "mangle", "raw"];

fn outcome(tool: &str, status: &str, detail: impl Into<String>, tables: usize) -> ToolOutcome {
    ToolOutcome {
        tool: tool.into(),
        status: status.into(),
        detail: detail.into(),
        tables,
        left_out: status == "failed",
    }
}

/// "missing" when the tool is not installed or the bundle lacks it, else "failed".
fn unavailable(tool: &str, reason: String) -> ToolOutcome {
    let absent = ["not installed", "not in this", "does not"];
    let status = if absent.iter().any(|a| reason.contains(a)) {
        "missing"
    } else {
        "failed"
    };
    outcome(tool, status, reason, 0)
}

fn run_dump(node: &dyn NodeSource, d: &Dump) -> (Option<Ruleset>, ToolOutcome) {
    let command = NodeCommand::IptablesSave {
        family: d.family,
        backend: d.backend,
    };
    let tool = command.bundle_name();
    if let Some(gate) = d.gate {
        match node.file(gate) {
            Ok(c) if !c.bytes.iter().all(u8::is_ascii_whitespace) => {}
            Ok(_) => {
                return (
                    None,
                    outcome(&tool, "skipped", format!("{gate} lists no tables"), 0),
                );
            }
            Err(e) => return (None, outcome(&tool, "skipped", format!("{gate}: {e}"), 0)),
        }
    }
    match node.command(&command) {
        // Past the gate, /proc listed the tables this tool would have printed.
        Err(e) if d.gate.is_some() => (None, unavailable(&tool, e).of_known_tables()),
        Err(e) => (None, unavailable(&tool, e)),
        Ok(c) => {
            let input = IptablesInput {
                family: d.family,
                backend: Some(d.backend),
                ..Default::default()
            };
            let rs = parse_iptables(&c.text(), &input);
            let n = rs.tables.len();
            (Some(rs), outcome(&tool, "ok", c.source, n))
        }
    }
}

/// A legacy dump: through getsockopt when the node reads its legacy tables so
/// ([`NodeSource::xt_legacy`]), the save tool for the tables that read cannot
/// translate, and for everything when it fails (each said, with why); otherwise the
/// save tool alone ([`run_dump`]).
fn legacy_dump(node: &dyn NodeSource, d: &Dump) -> Vec<ToolRead> {
    use crate::xt_legacy::LegacyTableRead;
    let command = NodeCommand::IptablesSave {
        family: d.family,
        backend: d.backend,
    };
    let tool = command.bundle_name();
    // `iptables-legacy getsockopt`, `ip6tables-legacy getsockopt`.
    let reader = format!("{} getsockopt", tool.trim_end_matches("-save"));
    let read = match node.xt_legacy(d.family) {
        None => return vec![run_dump(node, d)],
        Some(Err(why)) => {
            let failed = outcome(&reader, "failed", why, 0).replaced_by_tools();
            return vec![(None, failed), run_dump(node, d)];
        }
        Some(Ok(read)) => read,
    };
    if read.tables.is_empty() {
        let gate = d.gate.unwrap_or("the namespace's table list");
        let detail = format!("{gate} lists no tables ({})", read.source);
        return vec![(None, outcome(&tool, "skipped", detail, 0))];
    }
    let mut outcomes = Vec::new();
    let fallbacks: Vec<(&str, &str)> = read
        .tables
        .iter()
        .filter_map(|t| match &t.read {
            LegacyTableRead::Fallback(why) => Some((t.name.as_str(), why.as_str())),
            LegacyTableRead::Save(_) => None,
        })
        .collect();
    let saved = if fallbacks.is_empty() {
        Vec::new()
    } else {
        match node.command(&command) {
            Ok(c) => {
                for (name, why) in &fallbacks {
                    let detail = format!(
                        "{}: table {} {name} read with {tool}: {why}",
                        c.source,
                        d.family.as_str()
                    );
                    outcomes.push(outcome(&tool, "ok", detail, 1));
                }
                save_sections(&c.text())
            }
            Err(e) => {
                for (name, why) in &fallbacks {
                    let detail = format!(
                        "table {} {name} not read: {why}, and {e}",
                        d.family.as_str()
                    );
                    outcomes.push(unavailable(&tool, detail).of_known_tables());
                }
                Vec::new()
            }
        }
    };
    // The namespace's table order, as the save tool prints them.
    let mut text = String::new();
    for t in &read.tables {
        let section = match &t.read {
            LegacyTableRead::Save(s) => Some(s.as_str()),
            LegacyTableRead::Fallback(_) => saved
                .iter()
                .find(|(n, _)| *n == t.name)
                .map(|(_, s)| s.as_str()),
        };
        if let Some(section) = section {
            text.push_str("# Read by plumb through the iptables-legacy getsockopt interface\n");
            text.push_str(section);
            text.push_str("# Completed\n");
        }
    }
    let input = IptablesInput {
        family: d.family,
        backend: Some(d.backend),
        ..Default::default()
    };
    let rs = parse_iptables(&text, &input);
    let n = rs.tables.len();
    let mut out = vec![(Some(rs), outcome(&reader, "ok", read.source, n))];
    out.extend(outcomes.into_iter().map(|o| (None, o)));
    out
}

/// A bundle's own `iptables-save` (whatever backend the node used; its header says
/// which), or failing that its per-table `-nvL` listings (approximate).
fn read_bundle_dumps(node: &dyn NodeSource, family: Family) -> Vec<(Option<Ruleset>, ToolOutcome)> {
    let save = NodeCommand::IptablesSave {
        family,
        backend: Backend::IptablesUnknown,
    };
    let tool = save.bundle_name();
    match node.command(&save) {
        Ok(c) => {
            let input = IptablesInput {
                family,
                ..Default::default()
            };
            let rs = parse_iptables(&c.text(), &input);
            let n = rs.tables.len();
            vec![(Some(rs), outcome(&tool, "ok", c.source, n))]
        }
        Err(save_reason) => {
            let mut out = vec![(None, unavailable(&tool, save_reason))];
            for table in LISTED_TABLES {
                let listing = NodeCommand::IptablesListing {
                    family,
                    table: table.to_string(),
                };
                let name = listing.bundle_name();
                out.push(match node.command(&listing) {
                    Err(e) => (None, unavailable(&name, e)),
                    Ok(c) => {
                        // Rows are spans of one shared copy of the listing.
                        let text = plumb_ruleset::Source::read(c.text().into_owned());
                        let mut rs = plumb_ruleset::iptables::listing::parse_shared(
                            &text,
                            family,
                            Some(table),
                        );
                        rs.approximate = true;
                        let n = rs.tables.len();
                        (Some(rs), outcome(&name, "ok", c.source, n))
                    }
                });
            }
            out
        }
    }
}

/// One read: its ruleset (if it gave one) and how it went.
type ToolRead = (Option<Ruleset>, ToolOutcome);

/// `*table` ... `COMMIT` sections of an iptables-save text by table name.
fn save_sections(save: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in save.lines() {
        if line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('*') {
            current = Some((name.to_string(), String::new()));
        }
        if let Some((_, text)) = current.as_mut() {
            text.push_str(line);
            text.push('\n');
            if line == "COMMIT" {
                out.extend(current.take());
            }
        }
    }
    out
}

/// The iptables-nft tables of one family from the netlink read: those it translated,
/// and those it could not (`Fallback`) from the family's save tool, in the save tool's
/// table order, parsed as one dump. Each table read with the tool is reported with why.
///
/// Also gives the tables the save tool did not print (it calls them incompatible, "use
/// 'nft' tool"): those are read with `nft list table`, as native ones.
fn netlink_family(
    node: &dyn NodeSource,
    read: &mut crate::nft_netlink::Read,
    family: Family,
) -> (Vec<ToolRead>, Vec<(Family, String)>) {
    use crate::nft_netlink::TableRead;
    let source = format!("{} (generation {})", read.source, read.generation);
    let tables: Vec<_> = read
        .tables
        .iter_mut()
        .filter(|t| {
            t.family == Some(family)
                && matches!(t.read, TableRead::Save(_) | TableRead::Fallback(_))
        })
        .collect();
    let command = NodeCommand::IptablesSave {
        family,
        backend: Backend::IptablesNft,
    };
    let tool = command.bundle_name();
    let mut outcomes = Vec::new();
    let fallbacks: Vec<(&str, &str)> = tables
        .iter()
        .filter_map(|t| match &t.read {
            TableRead::Fallback(why) => Some((t.name.as_str(), why.as_str())),
            _ => None,
        })
        .collect();
    let saved: Vec<(String, String)> = if fallbacks.is_empty() {
        Vec::new()
    } else {
        match node.command(&command) {
            Ok(c) => {
                for (name, why) in &fallbacks {
                    outcomes.push(outcome(
                        &tool,
                        "ok",
                        format!(
                            "{}: table {} {name} read with {tool}: {why}",
                            c.source,
                            family.as_str()
                        ),
                        1,
                    ));
                }
                save_sections(&c.text())
            }
            Err(e) => {
                for (name, why) in &fallbacks {
                    outcomes.push(
                        unavailable(
                            &tool,
                            format!("table {} {name} not read: {why}, and {e}", family.as_str()),
                        )
                        .of_known_tables(),
                    );
                }
                Vec::new()
            }
        }
    };
    // Each table between two comment lines, as the save tool prints it: the rules'
    // line numbers are the save tool's.
    let size: usize = tables
        .iter()
        .map(|t| match &t.read {
            TableRead::Save(s) => s.len() + 64,
            _ => 0,
        })
        .sum::<usize>()
        + saved.iter().map(|(_, s)| s.len() + 64).sum::<usize>();
    let mut text = String::with_capacity(size);
    let mut not_saved = Vec::new();
    for t in tables {
        // The translated text is moved out: it is not needed twice.
        let translated = match &mut t.read {
            TableRead::Save(section) => std::mem::take(section),
            _ => String::new(),
        };
        let section = match &t.read {
            TableRead::Save(_) => Some(translated.as_str()),
            _ => {
                let s = saved
                    .iter()
                    .find(|(n, _)| *n == t.name)
                    .map(|(_, s)| s.as_str());
                if s.is_none() && !outcomes.iter().any(|o| o.status != "ok") {
                    not_saved.push((family, t.name.clone()));
                }
                s
            }
        };
        if let Some(section) = section {
            text.push_str("# Read by plumb over nf_tables netlink\n");
            text.push_str(section);
            text.push_str("# Completed\n");
        }
    }
    let input = IptablesInput {
        family,
        backend: Some(Backend::IptablesNft),
        ..Default::default()
    };
    let rs = parse_iptables(&text, &input);
    let n = rs.tables.len();
    let mut out = vec![(
        Some(rs),
        outcome(&format!("{} netlink", family.as_str()), "ok", source, n),
    )];
    out.extend(outcomes.into_iter().map(|o| (None, o)));
    (out, not_saved)
}

/// Reads a live node through its netlink read: iptables-nft tables translated (the
/// save tool for what could not be), native tables decoded (`nft list table` for what
/// could not be), legacy tables through getsockopt or their save tools.
fn read_with_netlink(node: &dyn NodeSource, read: &mut crate::nft_netlink::Read) -> Collected {
    let (mut results, not_saved): (Vec<ToolRead>, Vec<(Family, String)>) =
        std::thread::scope(|s| {
            let legacy: Vec<_> = DUMPS
                .iter()
                .filter(|d| d.backend == Backend::IptablesLegacy)
                .map(|d| s.spawn(move || legacy_dump(node, d)))
                .collect();
            let (mut out, mut not_saved) = netlink_family(node, read, Family::Ip);
            let (out6, not_saved6) = netlink_family(node, read, Family::Ip6);
            out.extend(out6);
            out.extend(
                legacy
                    .into_iter()
                    .flat_map(|h| h.join().expect("dump thread")),
            );
            not_saved.extend(not_saved6);
            (out, not_saved)
        });
    use crate::nft_netlink::TableRead;
    // Native tables, and iptables-named ones the save tool would misprint (Foreign) or
    // did not print (it calls them incompatible).
    let with_nft = read.tables.iter().filter_map(|t| {
        let not_printed = not_saved
            .iter()
            .any(|(f, n)| t.family == Some(*f) && *n == t.name);
        match &t.read {
            TableRead::Native(why) => Some((t, Some(why.clone()))),
            TableRead::Foreign(why) => Some((t, Some(why.clone()))),
            _ if not_printed => Some((t, Some("iptables-nft-save did not print it".into()))),
            _ => None,
        }
    });
    // Native tables decoded over netlink: nft's listing text, read as nft's is.
    for t in &read.tables {
        if let TableRead::Listing(text) = &t.read {
            let family = t.family.map_or("unknown", |f| f.as_str());
            let rs = plumb_ruleset::nft::parse_text(text);
            let n = rs.tables.len();
            let detail = format!(
                "{} (generation {}): table {family} {} decoded as `nft list table` prints it",
                read.source, read.generation, t.name
            );
            results.push((
                Some(rs),
                outcome(&format!("{family} {} netlink", t.name), "ok", detail, n),
            ));
        }
    }
    for (t, why) in with_nft {
        let family = t.family.map_or("unknown", |f| f.as_str());
        let tool = format!("nft list table {family} {}", t.name);
        results.push(match node.nft_list_table(family, &t.name) {
            // The netlink dump listed the table.
            Err(e) => (None, unavailable(&tool, e).of_known_tables()),
            Ok(c) => {
                let rs = plumb_ruleset::nft::parse_text(&c.text());
                let n = rs.tables.len();
                let detail = match why {
                    Some(why) => format!(
                        "{}: table {family} {} read with nft: {why}",
                        c.source, t.name
                    ),
                    None => c.source,
                };
                (Some(rs), outcome(&tool, "ok", detail, n))
            }
        });
    }
    let mut ruleset = Ruleset::default();
    let mut tools = Vec::new();
    for (rs, o) in results {
        if let Some(rs) = rs {
            ruleset.merge(rs);
        }
        tools.push(o);
    }
    collected(ruleset, tools)
}

/// What every read of a node gives: the merged ruleset, its completeness settled, and
/// `damaged` when a read left tables of the node out of it ([`ToolOutcome::left_out`]):
/// then what is absent from the model proves nothing (checks judge no absence).
fn collected(mut ruleset: Ruleset, tools: Vec<ToolOutcome>) -> Collected {
    ruleset.settle_completeness();
    if tools.iter().any(|t| t.left_out) {
        ruleset.completeness = plumb_ruleset::Completeness::Damaged;
    }
    Collected { ruleset, tools }
}

/// Reads every ruleset of a node: live (nf_tables over netlink when the node reads it
/// so, else the nft and legacy iptables dumps and native nft) or from a bundle (its
/// iptables-save or listings, and its nft ruleset). A netlink read that fails is
/// reported, and the tools are used instead.
pub fn read_rulesets(node: &dyn NodeSource) -> Collected {
    let netlink_failure = match node.nft_netlink() {
        Some(Ok(mut read)) => return read_with_netlink(node, &mut read),
        Some(Err(why)) => Some(outcome("nf_tables netlink", "failed", why, 0).replaced_by_tools()),
        None => None,
    };
    let mut results: Vec<(Option<Ruleset>, ToolOutcome)> = if node.dumps_by_backend() {
        std::thread::scope(|s| {
            let handles: Vec<_> = DUMPS
                .iter()
                .map(|d| {
                    s.spawn(move || match d.backend {
                        Backend::IptablesLegacy => legacy_dump(node, d),
                        _ => vec![run_dump(node, d)],
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().expect("dump thread"))
                .collect()
        })
    } else {
        [Family::Ip, Family::Ip6]
            .into_iter()
            .flat_map(|f| read_bundle_dumps(node, f))
            .collect()
    };
    let nft = match node.command(&NodeCommand::NftListRuleset) {
        Err(e) => (None, unavailable("nft", e)),
        Ok(c) => (
            Some(read_nft_listing(c.bytes)),
            outcome("nft", "ok", c.source, 0),
        ),
    };
    let mut ruleset = Ruleset::default();
    let mut tools: Vec<ToolOutcome> = netlink_failure.into_iter().collect();
    for (rs, o) in results.drain(..) {
        if let Some(rs) = rs {
            ruleset.merge(rs);
        }
        tools.push(o);
    }
    let (nft_rs, mut nft_outcome) = nft;
    if let Some(mut rs) = nft_rs {
        // iptables-nft tables also show up in `nft list ruleset` (as xt expressions);
        // those read above with iptables-save, which prints them exactly, are left out.
        let read_above = |t: &plumb_ruleset::Table| {
            ruleset
                .tables
                .iter()
                .any(|x| x.backend != Backend::Nftables && x.family == t.family && x.name == t.name)
        };
        drop_notes_of(&mut rs, read_above);
        rs.tables.retain(|t| !read_above(t));
        nft_outcome.tables = rs.tables.len();
        ruleset.merge(rs);
    }
    tools.push(nft_outcome);
    collected(ruleset, tools)
}

/// Reads an `nft list ruleset` capture as `plumb check` reads a listing: iptables-nft's
/// tables become the iptables tables they are, translated rule by rule as the text is
/// read, so that the listing's nft statements are never all in memory (a 10k-service
/// node's listing read as nft rules took ~130 MiB), and the text is freed before the
/// iptables models are built. Bytes that are not UTF-8 are read as U+FFFD.
fn read_nft_listing(bytes: Vec<u8>) -> Ruleset {
    let text = String::from_utf8(bytes)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    plumb_ruleset::nft::parse_text_translated_owned(plumb_ruleset::Source::read(text))
}

/// Removes the notes about the tables of `rs` that `left_out` picks (the lines from
/// each such table's header to the next table's): read from another source, what the
/// listing's reading says about them (such as "read as iptables rules") is not about
/// what the user is shown. Errors stay, as they always did.
fn drop_notes_of(rs: &mut Ruleset, left_out: impl Fn(&plumb_ruleset::Table) -> bool) {
    let mut starts: Vec<(u32, bool)> = rs
        .tables
        .iter()
        .map(|t| (t.location.line, left_out(t)))
        .collect();
    starts.sort_unstable();
    let in_left_out = |line: u32| {
        // The last table whose header is at or before `line`.
        let i = starts.partition_point(|&(start, _)| start <= line);
        i > 0 && starts[i - 1].1
    };
    rs.diagnostics
        .retain(|d| d.severity != plumb_ruleset::Severity::Note || !in_left_out(d.line));
}

/// Reads all rulesets of this machine, or of network namespace `netns`, with the dump
/// tools only.
pub fn collect_rulesets(runner: &dyn Runner, netns: Option<&str>) -> Collected {
    read_rulesets(&LiveNode::new(runner, netns.map(str::to_string), "/"))
}

/// Reads all rulesets of this machine, or of network namespace `netns`: nf_tables over
/// netlink ([`crate::nft_netlink`]), the legacy tables through getsockopt
/// ([`crate::xt_legacy`]), the tools for what those cannot translate exactly.
pub fn collect_live_rulesets(runner: &dyn Runner, netns: Option<&str>) -> Collected {
    read_rulesets(&LiveNode::new(runner, netns.map(str::to_string), "/").with_netlink())
}

#[cfg(test)]
mod tests {
    use super::*;
    use plumb_os::runner::{CommandOutput, RunError};
    use std::collections::HashMap;
    use std::time::Duration;

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
                // A canned failure: the tool runs and exits 1 with this message.
                Some(out) if out.starts_with("exit 1: ") => Ok(CommandOutput {
                    status: Some(1),
                    stdout: Vec::new(),
                    stderr: out["exit 1: ".len()..].to_string(),
                }),
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
        // Missing tools whose tables nothing showed leave nothing out that is known.
        assert!(c.tools.iter().all(|t| !t.left_out), "{:?}", c.tools);
        assert_ne!(c.ruleset.completeness, plumb_ruleset::Completeness::Damaged);
    }

    /// A read that did not work though the node has its tables leaves them out: a save
    /// tool that failed, a legacy save tool missing while /proc lists legacy tables. The
    /// ruleset is then damaged (nothing judged absent), whichever path read it.
    #[test]
    fn a_read_that_left_tables_out_makes_the_ruleset_damaged() {
        let canned = Canned(HashMap::from([
            (
                "iptables-nft-save",
                "*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n",
            ),
            (
                "ip6tables-nft-save",
                "exit 1: ip6tables-nft-save: Could not fetch rule set generation id",
            ),
            ("/proc/net/ip_tables_names", "nat\n"),
            ("nft", "table ip t {\n}\n"),
        ]));
        // In a namespace, /proc/net is read with the runner (canned here).
        let c = collect_rulesets(&canned, Some("n"));
        let read = |t: &str| c.tools.iter().find(|o| o.tool == t).unwrap();
        assert_eq!(read("ip6tables-nft-save").status, "failed");
        assert!(read("ip6tables-nft-save").left_out);
        // /proc lists a legacy table, and no tool could print it.
        assert_eq!(read("iptables-legacy-save").status, "missing");
        assert!(read("iptables-legacy-save").left_out);
        assert!(!read("iptables-nft-save").left_out);
        assert_eq!(c.ruleset.completeness, plumb_ruleset::Completeness::Damaged);
        // The ok reads are still in the model.
        assert_eq!(c.ruleset.tables.len(), 2, "{:?}", c.ruleset.tables);
    }

    /// A live node (canned commands) whose kernel reads (nf_tables over netlink, legacy
    /// tables through getsockopt) are given; `nft list table` is not installed on it.
    struct KernelReads {
        live: LiveNode<Canned>,
        netlink: Option<Result<crate::nft_netlink::Read, String>>,
        legacy: Option<Result<crate::xt_legacy::Read, String>>,
    }

    impl NodeSource for KernelReads {
        fn info(&self) -> plumb_facts::SourceInfo {
            self.live.info()
        }
        fn command(&self, c: &NodeCommand) -> Result<crate::node::Captured, String> {
            self.live.command(c)
        }
        fn file(&self, p: &str) -> Result<crate::node::Captured, String> {
            self.live.file(p)
        }
        fn dir(&self, p: &str) -> Result<Vec<String>, String> {
            self.live.dir(p)
        }
        fn exists(&self, p: &str) -> bool {
            self.live.exists(p)
        }
        fn is_live(&self) -> bool {
            true
        }
        fn nft_netlink(&self) -> Option<Result<crate::nft_netlink::Read, String>> {
            self.netlink.clone()
        }
        fn xt_legacy(&self, f: Family) -> Option<Result<crate::xt_legacy::Read, String>> {
            self.legacy.clone().filter(|_| f == Family::Ip)
        }
        fn nft_list_table(&self, f: &str, n: &str) -> Result<crate::node::Captured, String> {
            Err(format!("nft list table {f} {n}: not installed"))
        }
    }

    fn canned_save() -> Canned {
        Canned(HashMap::from([
            (
                "iptables-nft-save",
                "# Generated by iptables-nft-save\n*mangle\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -m length --length 9 -j DROP\nCOMMIT\n",
            ),
            ("/proc/net/ip_tables_names", ""),
            ("nft", "table ip t {\n}\n"),
        ]))
    }

    #[test]
    fn a_failed_netlink_read_is_reported_and_the_tools_read_instead() {
        let node = KernelReads {
            live: LiveNode::new(canned_save(), None, "/"),
            legacy: None,
            netlink: Some(Err(
                "nf_tables netlink: could not read the nf_tables ruleset within 20 s".into(),
            )),
        };
        let c = read_rulesets(&node);
        let failed = c
            .tools
            .iter()
            .find(|t| t.tool == "nf_tables netlink")
            .unwrap();
        assert_eq!(failed.status, "failed");
        assert!(failed.detail.contains("within 20 s"), "{}", failed.detail);
        assert_eq!(c.ruleset.tables.len(), 3, "{:?}", c.tools);
        // The tools read the same tables: the failed netlink read leaves nothing out.
        assert!(!failed.left_out);
        assert_ne!(c.ruleset.completeness, plumb_ruleset::Completeness::Damaged);
    }

    #[test]
    fn a_table_netlink_cannot_translate_is_read_with_the_save_tool_and_said_so() {
        use crate::nft_netlink::{DecodedTable, Read, TableRead};
        let node = KernelReads {
            live: LiveNode::new(canned_save(), None, "/"),
            legacy: None,
            netlink: Some(Ok(Read {
                source: "nf_tables netlink".into(),
                generation: 9,
                tables: vec![
                    DecodedTable {
                        family: Some(Family::Ip),
                        name: "mangle".into(),
                        read: TableRead::Save("*mangle\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n".into()),
                    },
                    DecodedTable {
                        family: Some(Family::Ip),
                        name: "filter".into(),
                        read: TableRead::Fallback(
                            "chain INPUT: match length revision 0 not decoded".into(),
                        ),
                    },
                    DecodedTable {
                        family: Some(Family::Inet),
                        name: "fw".into(),
                        read: TableRead::Native("a flowtable".into()),
                    },
                ],
            })),
        };
        let c = read_rulesets(&node);
        let names: Vec<&str> = c.ruleset.tables.iter().map(|t| &*t.name).collect();
        assert_eq!(names, ["mangle", "filter"]);
        assert_eq!(c.ruleset.tables[1].chains[0].rules.len(), 1);
        let fallback = c
            .tools
            .iter()
            .find(|t| t.tool == "iptables-nft-save")
            .unwrap();
        assert_eq!(fallback.status, "ok");
        assert!(
            fallback
                .detail
                .contains("table ip filter read with iptables-nft-save: chain INPUT: match length"),
            "{}",
            fallback.detail
        );
        // The native table's listing failed: reported, not silent.
        let native = c
            .tools
            .iter()
            .find(|t| t.tool == "nft list table inet fw")
            .unwrap();
        assert_eq!(native.status, "missing");
        // A table the dump listed is not in the model: absence in it proves nothing.
        assert_eq!(c.ruleset.completeness, plumb_ruleset::Completeness::Damaged);
        // `nft list ruleset` is not run when netlink answered.
        assert!(!c.tools.iter().any(|t| t.tool == "nft"));
    }

    #[test]
    fn a_failed_getsockopt_read_that_the_save_tool_made_good_leaves_the_ruleset_full() {
        use crate::nft_netlink::{DecodedTable, Read, TableRead};
        let mut canned = canned_legacy();
        canned.0.insert("iptables-nft-save", "");
        let node = KernelReads {
            live: LiveNode::new(canned, Some("plumb-test".into()), "/"),
            legacy: Some(Err("iptables-legacy getsockopt: interrupted".into())),
            netlink: Some(Ok(Read {
                source: "nf_tables netlink".into(),
                generation: 9,
                tables: vec![DecodedTable {
                    family: Some(Family::Ip),
                    name: "mangle".into(),
                    read: TableRead::Save("*mangle\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n".into()),
                }],
            })),
        };
        let c = read_rulesets(&node);
        let names: Vec<&str> = c.ruleset.tables.iter().map(|t| &*t.name).collect();
        assert_eq!(names, ["mangle", "nat", "filter"], "{:?}", c.tools);
        // (Partial, not Full: the canned nat table lacks built-in chains, a fragment.)
        assert_ne!(
            c.ruleset.completeness,
            plumb_ruleset::Completeness::Damaged,
            "{:?}",
            c.tools
        );
    }

    fn canned_legacy() -> Canned {
        Canned(HashMap::from([
            ("/proc/net/ip_tables_names", "nat\nfilter\n"),
            (
                "iptables-legacy-save",
                "# Generated by iptables-legacy-save\n*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -m length --length 9 -j DROP\nCOMMIT\n",
            ),
        ]))
    }

    #[test]
    fn a_failed_legacy_read_is_reported_and_the_save_tool_reads_instead() {
        // In a namespace: the /proc table list comes from the (canned) `cat`.
        let node = KernelReads {
            live: LiveNode::new(canned_legacy(), Some("plumb-test".into()), "/"),
            netlink: None,
            legacy: Some(Err(
                "iptables-legacy getsockopt: could not read the legacy tables within 20 s".into(),
            )),
        };
        let c = read_rulesets(&node);
        let failed = c
            .tools
            .iter()
            .find(|t| t.tool == "iptables-legacy getsockopt")
            .unwrap();
        assert_eq!(failed.status, "failed");
        assert!(failed.detail.contains("within 20 s"), "{}", failed.detail);
        let names: Vec<&str> = c.ruleset.tables.iter().map(|t| &*t.name).collect();
        assert_eq!(names, ["nat", "filter"], "{:?}", c.tools);
    }

    #[test]
    fn a_legacy_table_the_reader_cannot_translate_is_read_with_the_save_tool_and_said_so() {
        use crate::xt_legacy::{LegacyTable, LegacyTableRead, Read};
        // In a namespace: the /proc table list comes from the (canned) `cat`.
        let node = KernelReads {
            live: LiveNode::new(canned_legacy(), Some("plumb-test".into()), "/"),
            netlink: None,
            legacy: Some(Ok(Read {
                source: "iptables-legacy getsockopt".into(),
                tables: vec![
                    LegacyTable {
                        name: "nat".into(),
                        read: LegacyTableRead::Save(
                            "*nat\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -j ACCEPT\nCOMMIT\n"
                                .into(),
                        ),
                    },
                    LegacyTable {
                        name: "filter".into(),
                        read: LegacyTableRead::Fallback(
                            "chain INPUT: match length revision 0 not decoded".into(),
                        ),
                    },
                ],
            })),
        };
        let c = read_rulesets(&node);
        let legacy: Vec<_> = c
            .ruleset
            .tables
            .iter()
            .filter(|t| t.backend == Backend::IptablesLegacy)
            .collect();
        assert_eq!(legacy.len(), 2, "{:?}", c.tools);
        // nat from the reader (its rule is not in the tool's text), filter from the tool.
        assert_eq!(legacy[0].chains[0].rules.len(), 1);
        assert_eq!(legacy[1].chains[0].rules.len(), 1);
        let fallback = c
            .tools
            .iter()
            .find(|t| t.tool == "iptables-legacy-save")
            .unwrap();
        assert!(
            fallback.detail.contains(
                "table ip filter read with iptables-legacy-save: chain INPUT: match length"
            ),
            "{}",
            fallback.detail
        );
    }
    /// iptables-nft's `filter` table as `nft list ruleset` prints it, beside a native table.
    const LISTING: &str = "table ip filter {\n\tchain INPUT {\n\t\ttype filter hook input priority filter; policy accept;\n\t\tip saddr 10.0.0.0/8 counter packets 0 bytes 0 accept\n\t}\n}\ntable inet fw {\n\tchain input {\n\t\ttype filter hook input priority filter; policy accept;\n\t\ttcp dport 22 accept\n\t}\n}\n";

    #[test]
    fn a_listing_without_a_save_dump_reads_iptables_nft_tables_as_plumb_check_does() {
        let canned = Canned(HashMap::from([
            ("/proc/net/ip_tables_names", ""),
            ("nft", LISTING),
        ]));
        let c = collect_rulesets(&canned, None);
        let expected = plumb_ruleset::format::parse_bytes(LISTING.as_bytes(), &Default::default())
            .unwrap()
            .ruleset;
        let shape = |rs: &Ruleset| {
            rs.tables
                .iter()
                .map(|t| {
                    let rules: Vec<String> = t
                        .chains
                        .iter()
                        .flat_map(|ch| ch.rules.iter().map(|r| r.text.to_string()))
                        .collect();
                    (t.family, t.backend, t.name.to_string(), rules)
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(shape(&c.ruleset), shape(&expected));
        let filter = c
            .ruleset
            .tables
            .iter()
            .find(|t| &*t.name == "filter")
            .unwrap();
        assert_eq!(filter.backend, Backend::IptablesNft);
        let input = filter.chain("INPUT").unwrap();
        assert_eq!(&*input.rules[0].text, "-A INPUT -s 10.0.0.0/8 -j ACCEPT");
        let fw = c.ruleset.tables.iter().find(|t| &*t.name == "fw").unwrap();
        assert_eq!(fw.backend, Backend::Nftables);
    }

    #[test]
    fn a_table_the_save_dump_printed_is_left_out_of_the_listing_with_its_notes() {
        let canned = Canned(HashMap::from([
            (
                "iptables-nft-save",
                "# Generated by iptables-nft-save\n*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -s 10.0.0.0/8 -j ACCEPT\nCOMMIT\n",
            ),
            ("/proc/net/ip_tables_names", ""),
            ("nft", LISTING),
        ]));
        let c = collect_rulesets(&canned, None);
        let names: Vec<(Backend, &str)> = c
            .ruleset
            .tables
            .iter()
            .map(|t| (t.backend, &*t.name))
            .collect();
        assert_eq!(
            names,
            [(Backend::IptablesNft, "filter"), (Backend::Nftables, "fw")]
        );
        let nft = c.tools.iter().find(|t| t.tool == "nft").unwrap();
        assert_eq!(nft.tables, 1);
        // The listing's reading notes that it read `ip filter` as iptables rules; that
        // table is the save dump's here, so the note is not shown.
        assert!(
            c.ruleset
                .diagnostics
                .iter()
                .all(|d| !d.message.contains("filter")),
            "{:?}",
            c.ruleset.diagnostics
        );
    }
}
