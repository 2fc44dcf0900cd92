//! Recognising which format a text is in, and reading it with the right parser.
//!
//! Detection looks at the first meaningful lines only, so it is cheap on huge
//! inputs; `--format` overrides it. Inputs that cannot be ruleset text (binary,
//! over the size limit, not UTF-8) are rejected before any parsing.

use crate::diagnostic::InputError;
use crate::iptables::save::IptablesInput;
use crate::model::{Backend, Completeness, Family, Ruleset, SourceText};
use serde::Serialize;
use std::str::FromStr;
use std::sync::Arc;

/// Every text format plumb reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// `iptables-save` / `ip6tables-save` output (with or without `-c`).
    IptablesSave,
    /// An `iptables-restore --noflush` payload (kube-proxy partial syncs): partial.
    IptablesRestore,
    /// `iptables -S` / `--list-rules` (no table header).
    IptablesListRules,
    /// `iptables -nvL` listing (lossy).
    IptablesListing,
    /// `nft list ruleset` text.
    NftText,
    /// `nft -j list ruleset` JSON.
    NftJson,
    /// `ipvsadm -ln` output: IPVS virtual services (kube-proxy's IPVS mode), no rules:
    /// partial as a ruleset.
    Ipvsadm,
    /// A pasted terminal session: command lines (`$ iptables -t nat -L X -n`,
    /// `host:/# iptables-save | grep Y`) each followed by its output; each ruleset output
    /// is read by its own reader, the rest skipped with a note (see [`crate::session`]).
    Session,
}

impl Format {
    pub const ALL: &'static [(&'static str, Format)] = &[
        ("iptables-save", Format::IptablesSave),
        ("iptables-restore", Format::IptablesRestore),
        ("iptables-list-rules", Format::IptablesListRules),
        ("iptables-listing", Format::IptablesListing),
        ("nft", Format::NftText),
        ("nft-json", Format::NftJson),
        ("ipvsadm", Format::Ipvsadm),
        ("session", Format::Session),
    ];

    pub fn name(self) -> &'static str {
        Format::ALL
            .iter()
            .find(|(_, f)| *f == self)
            .map(|(n, _)| *n)
            .unwrap_or("?")
    }
}

impl FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Format, String> {
        Format::ALL
            .iter()
            .find(|(n, _)| *n == s)
            .map(|(_, f)| *f)
            .ok_or_else(|| {
                let names: Vec<_> = Format::ALL.iter().map(|(n, _)| *n).collect();
                format!(
                    "unknown format {s:?}; expected one of: {}",
                    names.join(", ")
                )
            })
    }
}

/// What the caller knows about the input besides its text.
#[derive(Clone, Debug)]
pub struct ParseOptions {
    pub format: Option<Format>,
    pub family: Option<Family>,
    /// Table for formats without table headers (`-S`, listings).
    pub table: Option<String>,
    pub backend: Option<Backend>,
    /// Inputs larger than this are refused (bytes).
    pub max_size: usize,
}

/// Default size limit: 256 MiB, far above a 10k-service dump (~15 MB).
pub const DEFAULT_MAX_SIZE: usize = 256 << 20;

impl Default for ParseOptions {
    fn default() -> Self {
        ParseOptions {
            format: None,
            family: None,
            table: None,
            backend: None,
            max_size: DEFAULT_MAX_SIZE,
        }
    }
}

/// A parsed input and the format it was read as.
#[derive(Debug)]
pub struct Parsed {
    pub format: Format,
    pub ruleset: Ruleset,
}

/// Checks that `bytes` can be ruleset text: size, no NUL, UTF-8.
pub fn as_text(bytes: &[u8], max_size: usize) -> Result<&str, InputError> {
    check_size_and_binary(bytes, max_size)?;
    std::str::from_utf8(bytes).map_err(|e| InputError::NotUtf8 {
        offset: e.valid_up_to(),
    })
}

fn check_size_and_binary(bytes: &[u8], max_size: usize) -> Result<(), InputError> {
    if bytes.len() > max_size {
        return Err(InputError::TooLarge {
            size: bytes.len(),
            limit: max_size,
        });
    }
    match bytes.iter().position(|&b| b == 0) {
        Some(offset) => Err(InputError::Binary { offset }),
        None => Ok(()),
    }
}

/// Guesses the format from the first meaningful lines.
pub fn detect(text: &str) -> Result<Format, InputError> {
    if crate::session::is_session(text) {
        return Ok(Format::Session);
    }
    if crate::ipvs::is_ipvsadm(text) {
        return Ok(Format::Ipvsadm);
    }
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        return Ok(Format::NftJson);
    }
    for line in text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .take(200)
    {
        // A listing posted on a page: `**Chain INPUT (policy ACCEPT)`, `<b>Chain ...`.
        let unmarked = line
            .trim_start_matches(['*', '_'])
            .trim_start_matches("<b>")
            .trim_start_matches("<strong>");
        if unmarked.starts_with("Chain ")
            && (unmarked.contains("(policy") || unmarked.contains("references)"))
        {
            return Ok(Format::IptablesListing);
        }
        if line.starts_with("# Generated by ip") || line.starts_with('*') || line.starts_with(':') {
            return Ok(Format::IptablesSave);
        }
        if line.starts_with('#') {
            continue;
        }
        if line.starts_with("Chain ") && (line.contains("(policy") || line.contains("references)"))
        {
            return Ok(Format::IptablesListing);
        }
        if line.starts_with("-P ") || line.starts_with("-N ") || line.starts_with("-A ") {
            return Ok(Format::IptablesListRules);
        }
        if line.starts_with("table ") || crate::nft::text::is_script_command(line) {
            return Ok(Format::NftText);
        }
        if line.starts_with('[') && line.contains(":") && line.contains("-A ") {
            return Ok(Format::IptablesSave);
        }
        let first: String = line.chars().take(60).collect();
        return Err(InputError::UnknownFormat {
            reason: format!(
                "first line {first:?} is not iptables-save, iptables -S, iptables -nvL or nft output"
            ),
        });
    }
    Err(InputError::UnknownFormat {
        reason: "input is empty".into(),
    })
}

/// The table a file holds, from its name (`..._nat.S.txt`, `iptables_-t_nat_-nvL`,
/// `iptables-t-mangle-S`, Rancher's `iptablesnat`), for formats that do not say.
/// The name is cut into words at anything but letters and digits, and a table is a
/// whole word (`..._FILTERED.txt` names no table) or Rancher's `iptables` + table.
pub fn table_from_file_name(name: &str) -> Option<&'static str> {
    const NAMES: [&str; 5] = ["nat", "mangle", "raw", "security", "filter"];
    let lower = name.to_ascii_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    let table = |w: &str| NAMES.iter().find(|t| **t == w).copied();
    // `-t nat` first: a later word may be a table name in prose.
    if let Some(t) = words
        .windows(2)
        .find(|w| w[0] == "t")
        .and_then(|w| table(w[1]))
    {
        return Some(t);
    }
    if let Some(t) = words.iter().find_map(|w| table(w)) {
        return Some(t);
    }
    words.iter().find_map(|w| {
        w.strip_prefix("ip6tables")
            .or_else(|| w.strip_prefix("iptables"))
            .and_then(table)
    })
}

/// Reads `ipvsadm -ln` output as a ruleset holding only IPVS virtual services: partial,
/// since it shows none of the node's iptables or nftables rules.
fn parse_ipvsadm(text: &str) -> Ruleset {
    let (ipvs, diagnostics) = crate::ipvs::parse_ipvsadm(text);
    Ruleset {
        completeness: Completeness::Partial,
        diagnostics,
        ipvs,
        ..Ruleset::default()
    }
}

/// The table each shell alias lists, for sessions that list with an alias (`ipt
/// KUBE-SERVICES` for `iptables -t nat -nvL KUBE-SERVICES`): an alias expands to the
/// same command every time, so all its listings are of one table, inferred from all of
/// them together (one listing of `OUTPUT` alone could be filter or nat). An alias whose
/// listings point to no single table is left out: each is then inferred alone.
fn alias_tables<'a>(
    sections: &[crate::session::Section<'a>],
    family: Family,
) -> std::collections::HashMap<&'a str, &'static str> {
    use crate::session::Output;
    let mut texts: std::collections::HashMap<&str, String> = Default::default();
    for sec in sections {
        let Some(cmd) = sec.command else { continue };
        let mut words = cmd.split('|').next().unwrap_or("").split_whitespace();
        let Some(alias) = words.next() else { continue };
        if sec.output != Output::Unknown
            || words.any(|w| w == "-t" || w.starts_with("--table"))
            || !matches!(detect(sec.text), Ok(Format::IptablesListing))
        {
            continue;
        }
        let text = texts.entry(alias).or_default();
        text.push_str(sec.text);
        text.push('\n');
    }
    texts
        .into_iter()
        .filter_map(|(alias, text)| {
            crate::iptables::listing::inferred_table(&text, family).map(|t| (alias, t))
        })
        .collect()
}

/// Reads a terminal session: each command's output with the reader its command (or,
/// for an unknown command, its text) calls for, merged into one ruleset; other output
/// is skipped with a note. Line numbers are the session's.
fn parse_session(text: &str, options: &ParseOptions) -> Ruleset {
    use crate::session::{Output, split};
    let mut rs = Ruleset::default();
    let mut read_any = false;
    let sections = split(text);
    let aliases = alias_tables(&sections, options.family.unwrap_or(Family::Ip));
    for mut sec in sections {
        if sec.output == Output::Unknown {
            let alias = sec
                .command
                .and_then(|c| c.split_whitespace().next())
                .and_then(|a| aliases.get(a).copied());
            // An alias or text before any command: what the output looks like.
            sec.output = match detect(sec.text) {
                Ok(Format::IptablesListing) => Output::Listing {
                    table: alias,
                    chain: None,
                },
                Ok(Format::Ipvsadm) => Output::Ipvsadm,
                _ if crate::ipvs::is_ipset_list(sec.text) => Output::IpsetList,
                Ok(Format::IptablesListRules) => Output::ListRules { table: None },
                Ok(Format::IptablesSave) => Output::Save { filtered: false },
                _ => Output::Other,
            };
        }
        let (format, table) = match &sec.output {
            Output::Listing { table, .. } => (Format::IptablesListing, table.map(str::to_string)),
            Output::ListRules { table } => (Format::IptablesListRules, table.map(str::to_string)),
            Output::Save { .. } => (Format::IptablesSave, None),
            Output::Ipvsadm | Output::IpsetList => {
                let mut part = if sec.output == Output::Ipvsadm {
                    parse_ipvsadm(sec.text)
                } else {
                    Ruleset {
                        completeness: Completeness::Partial,
                        ipsets: crate::ipvs::parse_ipset_list(sec.text),
                        ..Ruleset::default()
                    }
                };
                // Not rules: the session's completeness is its rules' (a full dump next
                // to `ipvsadm -ln` stays full).
                shift_lines(&mut part, sec.first_line - 1);
                read_any |= !part.ipvs.is_empty();
                rs.diagnostics.extend(part.diagnostics);
                rs.ipvs.extend(part.ipvs);
                rs.ipsets.extend(part.ipsets);
                continue;
            }
            Output::Other | Output::Unknown => {
                if !sec.text.trim().is_empty() {
                    rs.diagnostics.push(crate::Diagnostic::note(
                        sec.command_line,
                        1,
                        "output of this command skipped: not a ruleset",
                        sec.command.unwrap_or(""),
                    ));
                }
                continue;
            }
        };
        if sec.text.trim().is_empty() {
            continue;
        }
        let opts = ParseOptions {
            format: Some(format),
            // The command's table; the caller's only where the command does not say.
            table: table.or_else(|| options.table.clone()),
            ..options.clone()
        };
        let Ok(part) = parse_source(Arc::new(sec.text.to_string()), &opts) else {
            continue;
        };
        let mut part = part.ruleset;
        if let Output::Save { filtered: true } = sec.output
            && part.completeness == Completeness::Full
        {
            part.completeness = Completeness::Partial;
        }
        shift_lines(&mut part, sec.first_line - 1);
        read_any = true;
        merge_section(&mut rs, part);
    }
    if !read_any {
        rs.diagnostics.push(crate::Diagnostic::error(
            1,
            1,
            "this session shows no ruleset output (iptables -L/-S, iptables-save, ipvsadm -ln)",
            "",
        ));
    }
    if rs.tables.is_empty() && !rs.ipvs.is_empty() {
        rs.completeness = Completeness::Partial; // IPVS services, no rules at all
    }
    rs
}

/// Moves every location of `rs` down by `by` lines (a section read on its own).
fn shift_lines(rs: &mut Ruleset, by: u32) {
    for d in &mut rs.diagnostics {
        d.line = d.line.saturating_add(by);
    }
    for vs in &mut rs.ipvs {
        vs.location.line = vs.location.line.saturating_add(by);
        for r in &mut vs.real_servers {
            r.location.line = r.location.line.saturating_add(by);
        }
    }
    for s in &mut rs.ipsets {
        s.location.line = s.location.line.saturating_add(by);
    }
    for t in &mut rs.tables {
        t.location.line = t.location.line.saturating_add(by);
        for c in &mut t.chains {
            c.location.line = c.location.line.saturating_add(by);
            for r in &mut c.rules {
                r.location.line = r.location.line.saturating_add(by);
            }
        }
    }
}

/// Adds a session section's tables to `base`: chains of a table already read join it
/// (a chain listed again replaces the earlier listing: the session's later state).
fn merge_section(base: &mut Ruleset, part: Ruleset) {
    let rank = |c: Completeness| match c {
        Completeness::Full => 0,
        Completeness::Partial => 1,
        Completeness::Truncated => 2,
        Completeness::Damaged => 3,
    };
    if rank(part.completeness) > rank(base.completeness) {
        base.completeness = part.completeness;
    }
    base.approximate |= part.approximate;
    // A note every section repeats (each single-chain listing is partial) is said once.
    for d in part.diagnostics {
        let repeated = d.severity == crate::Severity::Note
            && base
                .diagnostics
                .iter()
                .any(|b| b.message == d.message && b.text == d.text);
        if !repeated {
            base.diagnostics.push(d);
        }
    }
    for t in part.tables {
        match base
            .tables
            .iter_mut()
            .find(|b| b.family == t.family && b.name == t.name)
        {
            Some(b) => {
                // Two sections of one table: only a part of it was shown each time.
                if base.completeness == Completeness::Full {
                    base.completeness = Completeness::Partial;
                }
                for c in t.chains {
                    match b.chains.iter_mut().find(|x| x.name == c.name) {
                        Some(x) => *x = c,
                        None => b.chains.push(c),
                    }
                }
            }
            None => base.tables.push(t),
        }
    }
}

/// True when an `iptables-save`-syntax text has a `*table` line.
fn has_table_header(text: &str) -> bool {
    text.lines().any(|l| l.trim_start().starts_with('*'))
}

/// Reads `-S` output or a save-syntax capture without `*table` lines: in the table the
/// caller names, else in the tables inferred per run of lines (see
/// [`crate::iptables::tables`]), with a note saying which and why.
fn parse_headerless(
    source: &SourceText,
    options: &ParseOptions,
    mut input: IptablesInput,
) -> Ruleset {
    let mut notes = Vec::new();
    match &options.table {
        Some(t) => input.table = Some(t.clone()),
        None => {
            let sections = crate::iptables::tables::sections(source);
            for s in &sections {
                let why = if s.why.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", s.why)
                };
                notes.push(crate::Diagnostic::note(
                    s.first_line,
                    1,
                    format!(
                        "no table named: these lines read as table '{}'{why}; pass --table to choose",
                        s.table
                    ),
                    "",
                ));
            }
            input.sections = sections
                .into_iter()
                .map(|s| (s.first_line, s.table.to_string()))
                .collect();
        }
    }
    let mut rs = crate::iptables::save::parse_shared(Arc::clone(source), &input);
    rs.diagnostics.extend(notes);
    rs
}

/// Reads `bytes` in the given or detected format.
pub fn parse_bytes(bytes: &[u8], options: &ParseOptions) -> Result<Parsed, InputError> {
    let source = Arc::new(as_text(bytes, options.max_size)?.to_string());
    parse_source(source, options)
}

/// Like [`parse_bytes`], taking the input by value so that it is freed as soon as the
/// rules' shared copy of it exists (peak memory: one input less).
pub fn parse_owned(bytes: Vec<u8>, options: &ParseOptions) -> Result<Parsed, InputError> {
    check_size_and_binary(&bytes, options.max_size)?;
    let text = String::from_utf8(bytes).map_err(|e| InputError::NotUtf8 {
        offset: e.utf8_error().valid_up_to(),
    })?;
    parse_source(Arc::new(text), options)
}

fn parse_source(source: SourceText, options: &ParseOptions) -> Result<Parsed, InputError> {
    let text = &*source;
    let format = match options.format {
        Some(f) => f,
        None => detect(text)?,
    };
    let family = options.family.unwrap_or(Family::Ip);
    let ip_input = |restore: bool, table: Option<String>| IptablesInput {
        family,
        backend: options.backend,
        table,
        restore_payload: restore,
        sections: Vec::new(),
        ..IptablesInput::default()
    };
    // Save syntax without any '*table' line is a filtered capture (`iptables-save |
    // grep`): read like -S output, its tables inferred.
    let headerless = match format {
        Format::IptablesListRules => true,
        Format::IptablesSave => !has_table_header(text),
        _ => false,
    };
    let mut ruleset = match format {
        _ if headerless => parse_headerless(&source, options, ip_input(false, None)),
        Format::IptablesSave | Format::IptablesListRules => {
            crate::iptables::save::parse_shared(Arc::clone(&source), &ip_input(false, None))
        }
        Format::IptablesRestore => {
            crate::iptables::save::parse_shared(Arc::clone(&source), &ip_input(true, None))
        }
        Format::IptablesListing => {
            let mut rs = crate::iptables::listing::parse(text, family, options.table.as_deref());
            rs.approximate = true;
            rs
        }
        Format::NftText => crate::nft::parse_text(text),
        Format::NftJson => crate::nft::parse_json(text),
        Format::Ipvsadm => parse_ipvsadm(text),
        Format::Session => parse_session(text, options),
    };
    if matches!(format, Format::NftText | Format::NftJson) {
        // iptables-nft's tables in an nft listing are iptables tables.
        crate::nft::iptables_nft::translate(&mut ruleset);
    }
    ruleset.settle_completeness();
    // A text in save syntax that turned out to be a restore payload says so.
    let format = if format == Format::IptablesSave
        && !headerless
        && ruleset.completeness == Completeness::Partial
    {
        Format::IptablesRestore
    } else {
        format
    };
    Ok(Parsed { format, ruleset })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_each_format() {
        assert_eq!(
            detect("# Generated by iptables-save v1.8.9\n*filter\n").unwrap(),
            Format::IptablesSave
        );
        assert_eq!(
            detect("*nat\n:KUBE-SERVICES - [0:0]\n").unwrap(),
            Format::IptablesSave
        );
        assert_eq!(
            detect("-P INPUT ACCEPT\n-N X\n").unwrap(),
            Format::IptablesListRules
        );
        assert_eq!(
            detect("Chain INPUT (policy ACCEPT 0 packets, 0 bytes)\n").unwrap(),
            Format::IptablesListing
        );
        assert_eq!(detect("table ip kube-proxy {\n").unwrap(), Format::NftText);
        assert_eq!(detect("{\"nftables\": []}").unwrap(), Format::NftJson);
        assert!(matches!(
            detect("hello world"),
            Err(InputError::UnknownFormat { .. })
        ));
        assert!(matches!(
            detect("\n \n"),
            Err(InputError::UnknownFormat { .. })
        ));
    }

    #[test]
    fn rejects_binary_and_oversized_input() {
        assert_eq!(
            as_text(b"ab\0c", 100),
            Err(InputError::Binary { offset: 2 })
        );
        assert_eq!(
            as_text(b"abcd", 3),
            Err(InputError::TooLarge { size: 4, limit: 3 })
        );
        assert_eq!(
            as_text(b"a\xffb", 10),
            Err(InputError::NotUtf8 { offset: 1 })
        );
    }

    #[test]
    fn table_names_from_bundle_file_names() {
        assert_eq!(
            table_from_file_name("opkhs2026_kubeadm-1.32_flannel_control-plane_nat.S.txt"),
            Some("nat")
        );
        assert_eq!(
            table_from_file_name("iptables_-t_mangle_-nvL"),
            Some("mangle")
        );
        assert_eq!(table_from_file_name("iptablesnat"), Some("nat"));
        assert_eq!(
            table_from_file_name("aks-kubenet+calico_node_filter_iptables-list-rules.S.txt"),
            Some("filter")
        );
        assert_eq!(table_from_file_name("iptablessave"), None);
        // A word that merely starts with a table name names no table.
        assert_eq!(
            table_from_file_name("ack-cilium_iptables-save-grep-cilium_FILTERED.txt"),
            None
        );
        assert_eq!(
            table_from_file_name("calico_iptables-t-filter-S-grep-cali_FILTERED.txt"),
            Some("filter")
        );
        assert_eq!(
            table_from_file_name("kubeadm_iptables-L_filter_names-resolved.txt"),
            Some("filter")
        );
        assert_eq!(table_from_file_name("natural-order.txt"), None);
    }
}
