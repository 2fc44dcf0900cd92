//! Reader for the `iptables -nvL` listing format (`-nL`, `-vnxL`, `--line-numbers`,
//! `ip6tables`), which support bundles save instead of `iptables-save`: sosreport's
//! `sos_commands/firewall_tables/iptables_-t_nat_-nvL`, Rancher's collector's
//! `networking/iptablesnat`.
//!
//! The listing is lossy: match options are printed as translated prose
//! (`tcp dpt:443`, `ctstate NEW`), counters may be rounded (`2657K`), host names may
//! replace addresses. Every rule therefore becomes [`RuleBody::Approximate`] holding a
//! [`ListedRule`]: the columns, what plumb recognised in the trailing option text, and
//! the rest verbatim. The ruleset is marked [`Ruleset::approximate`] (and `Truncated` when cut short).
//!
//! Layout, as printed by iptables 1.4 to 1.8 (`print_header`/`print_firewall`):
//! ```text
//! Chain INPUT (policy ACCEPT 16310 packets, 2657K bytes)
//! num   pkts bytes target     prot opt in     out     source               destination
//! 1      123  4567 KUBE-SVC-X  6    --  *      *       0.0.0.0/0            10.96.0.1            /* default/kubernetes:https */ tcp dpt:443
//! ```
//! `num` comes with `--line-numbers`, `pkts bytes in out` with `-v`; the target column
//! is blank for a rule without target; `opt` is blank in old `ip6tables`. Columns are
//! padded, not fixed: a long target or an exact counter pushes the rest right, so the
//! reader works on words and checks each candidate layout against what the columns
//! can hold. Like every plumb reader it never fails on a whole file: a bad line
//! becomes a [`Diagnostic`] with line and column, and reading goes on.

use crate::diagnostic::Diagnostic;
pub use crate::model::listed::{
    Fragment, ListedMatch, ListedRule, ListedTarget, Negatable, PortDirection, PortRange,
};
use crate::model::{
    Backend, BaseChain, Chain, Completeness, Counters, Family, Hook, Location, Policy, Rule,
    RuleBody, Ruleset, Table,
};
use std::collections::HashMap;

/// What a bundle's file name says about the listing inside: sosreport
/// (`iptables_-t_nat_-nvL`, `ip6tables_-vnxL`) and Rancher's collector
/// (`iptables`, `iptablesnat`, `iptablesmangle`, `ip6tables`).
/// `None` for names that are not listings (`iptables-save`, Rancher's `iptablessave`).
pub fn source_of_file_name(file_name: &str) -> Option<(Family, &str)> {
    let (family, rest) = if let Some(r) = file_name.strip_prefix("ip6tables") {
        (Family::Ip6, r)
    } else if let Some(r) = file_name.strip_prefix("iptables") {
        (Family::Ip, r)
    } else {
        return None;
    };
    if rest.contains("save") || rest.starts_with("-restore") {
        return None;
    }
    // Rancher: "iptables" + table name.
    if let Some(t) = TABLES.iter().find(|t| rest == **t) {
        return Some((family, t));
    }
    if rest.is_empty() {
        return Some((family, "filter"));
    }
    // sosreport: the command with spaces turned into underscores.
    let words: Vec<&str> = rest.split('_').filter(|w| !w.is_empty()).collect();
    if !words.iter().any(|w| is_list_flag(w)) {
        return None;
    }
    let table = words
        .windows(2)
        .find(|w| w[0] == "-t" || w[0] == "--table")
        .map(|w| w[1])
        .and_then(|t| TABLES.iter().find(|k| **k == t).copied())
        .unwrap_or("filter");
    Some((family, table))
}

const TABLES: &[&str] = &["filter", "nat", "mangle", "raw", "security"];

fn is_list_flag(w: &str) -> bool {
    w == "--list" || (w.starts_with('-') && !w.starts_with("--") && w.contains('L'))
}

/// Reads an iptables listing. `default_table` names the table when the text does not
/// (sosreport keeps one table per file); without it, `# Table: nat` style separators
/// and the built-in chains decide, and a note says what was guessed.
pub fn parse(text: &str, family: Family, default_table: Option<&str>) -> Ruleset {
    let mut r = Reader {
        family,
        default_table,
        backend: Backend::IptablesUnknown,
        ruleset: Ruleset {
            approximate: true,
            ..Ruleset::default()
        },
        current: None,
        chain: None,
        layout: None,
        rounded_noted: false,
        unrecognised: 0,
        first_unrecognised: None,
        truncated_at: None,
    };
    let ends_with_newline = text.ends_with('\n');
    let mut lines = text.split('\n').peekable();
    let mut n = 0u32;
    while let Some(raw) = lines.next() {
        n = n.saturating_add(1);
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        let last = lines.peek().is_none() || (ends_with_newline && lines.peek() == Some(&""));
        let before = r.ruleset.diagnostics.len();
        let ok = r.line(line, n);
        if !ok && last && !ends_with_newline {
            // Say why once: the line is cut, not malformed.
            let d = r.ruleset.diagnostics.drain(before..).next();
            let (column, why) = d.map_or((1, String::new()), |d| (d.column, d.message));
            r.truncated(
                n,
                column,
                &format!("input ends in the middle of this line (truncated?): {why}"),
                line.trim(),
            );
        }
    }
    r.finish()
}

/// Which optional columns a chain's rows have (from its header line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    num: bool,
    counters: bool,
    via: bool,
    /// Byte offset of the `target` column in the header, to tell a blank target.
    target_col: Option<usize>,
}

const GUESSES: [Layout; 4] = [
    Layout {
        num: false,
        counters: true,
        via: true,
        target_col: None,
    },
    Layout {
        num: true,
        counters: true,
        via: true,
        target_col: None,
    },
    Layout {
        num: false,
        counters: false,
        via: false,
        target_col: None,
    },
    Layout {
        num: true,
        counters: false,
        via: false,
        target_col: None,
    },
];

struct TableBuild {
    table: Table,
    /// Named by the caller or a separator, not guessed.
    named: bool,
    index: HashMap<Box<str>, usize>,
    /// (chain index, references printed in its header).
    references: Vec<(usize, u32)>,
}

struct Reader<'a> {
    family: Family,
    default_table: Option<&'a str>,
    backend: Backend,
    ruleset: Ruleset,
    current: Option<TableBuild>,
    chain: Option<usize>,
    layout: Option<Layout>,
    rounded_noted: bool,
    unrecognised: usize,
    first_unrecognised: Option<(u32, u32)>,
    truncated_at: Option<u32>,
}

#[derive(Clone, Copy)]
struct Word<'l> {
    start: usize,
    text: &'l str,
}

fn words(line: &str) -> Vec<Word<'_>> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in line.char_indices() {
        if c.is_whitespace() {
            if let Some(s) = start.take() {
                out.push(Word {
                    start: s,
                    text: &line[s..i],
                });
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        out.push(Word {
            start: s,
            text: &line[s..],
        });
    }
    out
}

/// 1-based column of a byte offset, in characters.
fn column_of(line: &str, offset: usize) -> u32 {
    let mut o = offset.min(line.len());
    while !line.is_char_boundary(o) {
        o -= 1;
    }
    u32::try_from(line[..o].chars().count())
        .unwrap_or(u32::MAX - 1)
        .saturating_add(1)
}

impl Reader<'_> {
    fn diag(&mut self, d: Diagnostic) {
        self.ruleset.diagnostics.push(d);
    }

    fn truncated(&mut self, line: u32, column: u32, message: &str, text: &str) {
        self.ruleset.completeness = Completeness::Truncated;
        if self.truncated_at == Some(line) {
            return;
        }
        self.truncated_at = Some(line);
        self.diag(Diagnostic::error(line, column, message, text));
    }

    /// Reads one line; false when it could not be understood.
    fn line(&mut self, line: &str, n: u32) -> bool {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            return true;
        }
        let indent = line.len() - line.trim_start().len();
        let col = column_of(line, indent);
        if trimmed.chars().all(|c| c == '.' || c == '…') {
            self.truncated(
                n,
                col,
                "input is truncated here (an elision line, not listing output)",
                trimmed,
            );
            return true;
        }
        if let Some(rest) = trimmed.strip_prefix("Chain ") {
            return self.chain_header(line, rest, n, col);
        }
        if trimmed.starts_with("# Warning: iptables-legacy tables present") {
            self.backend = Backend::IptablesNft;
            self.diag(Diagnostic::note(
                n,
                col,
                "this listing comes from iptables-nft and the node also has iptables-legacy tables it does not show",
                trimmed,
            ));
            return true;
        }
        if let Some(table) = table_separator(trimmed) {
            self.close();
            self.open(table, true, n, col);
            return true;
        }
        if trimmed.starts_with('#') {
            return true;
        }
        if let Some(layout) = header_layout(line) {
            if self.chain.is_none() {
                self.diag(Diagnostic::error(
                    n,
                    col,
                    "column header before any 'Chain NAME (...)' line",
                    trimmed,
                ));
                return false;
            }
            self.layout = Some(layout);
            return true;
        }
        self.rule(line, n, col)
    }

    fn open(&mut self, name: &str, named: bool, n: u32, col: u32) {
        let loc = Location {
            line: n,
            column: col,
        };
        self.current = Some(TableBuild {
            table: Table::new(self.family, self.backend, name, loc),
            named,
            index: HashMap::new(),
            references: Vec::new(),
        });
        self.chain = None;
        self.layout = None;
    }

    fn chain_header(&mut self, line: &str, rest: &str, n: u32, col: u32) -> bool {
        let Some(header) = parse_chain_header(rest) else {
            self.diag(Diagnostic::error(
                n,
                col,
                "expected 'Chain NAME (policy POLICY [N packets, N bytes])' or 'Chain NAME (N references)'",
                line.trim(),
            ));
            self.chain = None;
            self.layout = None;
            return false;
        };
        // iptables lists a table's built-in chains first: a chain listed twice, or a
        // built-in chain after user chains, starts the next table.
        let repeated = self.current.as_ref().is_some_and(|t| {
            t.index.contains_key(header.name)
                || (header.policy.is_some() && t.table.chains.iter().any(|c| !c.is_builtin()))
        });
        if repeated {
            self.diag(Diagnostic::note(
                n,
                col,
                format!(
                    "chain '{}' starts another table (the listing has no separator here)",
                    header.name
                ),
                line.trim(),
            ));
            self.close();
        }
        if self.current.is_none() {
            match self.default_table.filter(|_| !repeated) {
                Some(t) => self.open(t, true, n, col),
                None => self.open("filter", false, n, col),
            }
        }
        let loc = Location {
            line: n,
            column: col,
        };
        let mut counters = None;
        if let Some((p, b)) = header.counters {
            match (parse_count(p), parse_count(b)) {
                (Some(p), Some(b)) => {
                    if p.1 || b.1 {
                        self.note_rounded(n, col, line.trim());
                    }
                    counters = Some(Counters {
                        packets: p.0,
                        bytes: b.0,
                    });
                }
                _ => self.diag(Diagnostic::error(
                    n,
                    col,
                    "expected chain counters as 'N packets, N bytes' (N may end in K, M, G or T)",
                    line.trim(),
                )),
            }
        }
        let base = header.policy.map(|p| BaseChain {
            hook: Hook::from_builtin_chain(header.name)
                .unwrap_or_else(|| Hook::Other(header.name.to_lowercase())),
            policy: Some(Policy::parse(p)),
            counters,
            chain_type: None,
            priority: None,
        });
        let st = self.current.as_mut().expect("opened above");
        let i = st.table.chains.len();
        st.index.insert(header.name.into(), i);
        st.table.chains.push(Chain::new(header.name, base, loc));
        if let Some(r) = header.references {
            st.references.push((i, r));
        }
        self.chain = Some(i);
        self.layout = None;
        true
    }

    fn note_rounded(&mut self, n: u32, col: u32, text: &str) {
        if !self.rounded_noted {
            self.rounded_noted = true;
            self.diag(Diagnostic::note(
                n,
                col,
                "counters with a K/M/G/T suffix are rounded to that unit (the listing was made without -x)",
                text,
            ));
        }
    }

    fn rule(&mut self, line: &str, n: u32, col: u32) -> bool {
        let Some(chain) = self.chain else {
            let msg = if self.current.is_some() {
                "rule line outside a chain (the 'Chain' line above it could not be read)"
            } else {
                "expected a 'Chain NAME (...)' line before any rule"
            };
            self.diag(Diagnostic::error(n, col, msg, line.trim()));
            return false;
        };
        let ws = words(line);
        let guesses: &[Layout] = match &self.layout {
            Some(l) => std::slice::from_ref(l),
            None => &GUESSES,
        };
        let mut parsed = Err((0usize, String::new()));
        for layout in guesses {
            parsed = parse_columns(line, &ws, layout);
            if parsed.is_ok() {
                break;
            }
        }
        let columns = match parsed {
            Ok(c) => c,
            Err((offset, msg)) => {
                let c = column_of(line, offset);
                let at = line.get(offset..).unwrap_or("").trim();
                let at = if at.is_empty() { line.trim() } else { at };
                self.diag(Diagnostic::error(n, c, msg, at));
                return false;
            }
        };
        let mut listed = columns.rule;
        let extra_offset = columns.extra_offset;
        let unterminated = read_extra(&mut listed);
        if unterminated {
            self.truncated(
                n,
                column_of(line, extra_offset),
                "comment or quoted text is not closed: the line was cut?",
                &listed.extra,
            );
        }
        if !listed.unrecognised.is_empty() {
            self.unrecognised += 1;
            if self.first_unrecognised.is_none() {
                self.first_unrecognised = Some((n, column_of(line, extra_offset)));
            }
        }
        if listed.counters_rounded {
            self.note_rounded(n, col, line.trim());
        }
        let st = self.current.as_mut().expect("a chain implies a table");
        let rules = &mut st.table.chains[chain].rules;
        if let Some(num) = listed.line_number
            && num as usize != rules.len() + 1
        {
            let expected = rules.len() + 1;
            self.diag(Diagnostic::note(
                n,
                col,
                format!("rule number {num} where {expected} was expected: rules are missing?"),
                line.trim(),
            ));
        }
        let st = self.current.as_mut().expect("a chain implies a table");
        let rules = &mut st.table.chains[chain].rules;
        rules.push(Rule {
            position: u32::try_from(rules.len() + 1).unwrap_or(u32::MAX),
            location: Location {
                line: n,
                column: col,
            },
            counters: columns.counters,
            text: line.into(),
            body: RuleBody::Approximate(Box::new(listed)),
        });
        true
    }

    fn close(&mut self) {
        self.chain = None;
        self.layout = None;
        let Some(mut st) = self.current.take() else {
            return;
        };
        let loc = st.table.location;
        if !st.named {
            let name = guess_table(&st.table);
            let builtins: Vec<&str> = st
                .table
                .chains
                .iter()
                .filter(|c| c.is_builtin())
                .map(|c| &*c.name)
                .collect();
            let why = match name {
                Some(_) => format!("guessed from its built-in chains ({})", builtins.join(", ")),
                None => "assumed 'filter'; pass the table (e.g. from the file name)".to_string(),
            };
            self.diag(Diagnostic::note(
                loc.line,
                loc.column,
                format!(
                    "the listing does not say which table this is: '{}' {why}",
                    name.unwrap_or("filter")
                ),
                "",
            ));
            st.table.name = name.unwrap_or("filter").into();
        }
        // Header reference counts against the jumps actually listed.
        let mut counted: HashMap<&str, u32> = HashMap::new();
        for c in &st.table.chains {
            for r in &c.rules {
                if let RuleBody::Approximate(l) = &r.body
                    && let Some(cr) = l.chain_reference()
                {
                    *counted.entry(cr.chain).or_default() += 1;
                }
            }
        }
        let mut mismatches = Vec::new();
        for &(i, printed) in &st.references {
            let c = &st.table.chains[i];
            let seen = counted.get(&*c.name).copied().unwrap_or(0);
            if seen != printed {
                mismatches.push(Diagnostic::note(
                    c.location.line,
                    c.location.column,
                    format!(
                        "chain '{}' has {printed} references but this listing shows {seen} rules jumping to it: part of the table is missing?",
                        c.name
                    ),
                    &c.name,
                ));
            }
        }
        let mut undeclared = Vec::new();
        for name in counted.keys() {
            if !st.index.contains_key(*name) {
                undeclared.push(*name);
            }
        }
        undeclared.sort_unstable();
        for name in undeclared {
            mismatches.push(Diagnostic::note(
                loc.line,
                loc.column,
                format!("rules jump to chain '{name}' which this listing does not show"),
                name,
            ));
        }
        self.ruleset.diagnostics.extend(mismatches);
        if self
            .ruleset
            .tables
            .iter()
            .any(|t| t.family == st.table.family && t.name == st.table.name)
        {
            self.diag(Diagnostic::error(
                loc.line,
                loc.column,
                format!(
                    "table '{}' is listed twice; both copies are kept",
                    st.table.name
                ),
                &st.table.name,
            ));
        }
        self.ruleset.tables.push(st.table);
    }

    fn finish(mut self) -> Ruleset {
        self.close();
        if let Some((line, column)) = self.first_unrecognised {
            let n = self.unrecognised;
            self.diag(Diagnostic::note(
                line,
                column,
                format!(
                    "{n} listed rule(s) carry option text plumb does not recognise; it is kept verbatim"
                ),
                "",
            ));
        }
        if self.backend != Backend::IptablesUnknown {
            for t in &mut self.ruleset.tables {
                t.backend = self.backend;
            }
        }
        self.ruleset
    }
}

/// A `Chain` line, split.
struct ChainHeader<'l> {
    name: &'l str,
    policy: Option<&'l str>,
    counters: Option<(&'l str, &'l str)>,
    references: Option<u32>,
}

/// `NAME (policy ACCEPT 1 packets, 2 bytes)`, `NAME (policy DROP)`, `NAME (3 references)`, `NAME`.
fn parse_chain_header(rest: &str) -> Option<ChainHeader<'_>> {
    let rest = rest.trim();
    let (name, paren) = match rest.find(char::is_whitespace) {
        Some(i) => (&rest[..i], rest[i..].trim()),
        None => (rest, ""),
    };
    if name.is_empty() || name.starts_with('(') {
        return None;
    }
    let mut h = ChainHeader {
        name,
        policy: None,
        counters: None,
        references: None,
    };
    if paren.is_empty() {
        return Some(h);
    }
    let inner = paren.strip_prefix('(')?.strip_suffix(')')?;
    let w: Vec<&str> = inner.split_whitespace().collect();
    match w.as_slice() {
        ["policy", p] => h.policy = Some(p),
        ["policy", p, pk, "packets,", b, "bytes"] => {
            h.policy = Some(p);
            h.counters = Some((pk, b));
        }
        [r, "references" | "reference"] => h.references = Some(r.parse().ok()?),
        // iptables-nft may add ", N rules" style details in future; keep the reference.
        [r, "references" | "reference", ..] => h.references = Some(r.parse().ok()?),
        _ => return None,
    }
    Some(h)
}

/// A separator line naming the table of what follows: `# Table: nat`, `Table: nat`,
/// `*nat`, `=== mangle ===`, a bare `nat` (from `echo nat`), or the command itself
/// (`# iptables -t nat -nvL`, `$ sudo ip6tables -vnxL`).
fn table_separator(trimmed: &str) -> Option<&str> {
    let s = trimmed
        .trim_start_matches(|c: char| "#=-*>$ \t".contains(c))
        .trim_end_matches(|c: char| "#=-*: \t".contains(c));
    if let Some(t) = TABLES.iter().find(|t| s == **t) {
        return Some(t);
    }
    let mut w = s.split_whitespace().peekable();
    let first = w.next()?;
    if first.eq_ignore_ascii_case("table") || first.eq_ignore_ascii_case("table:") {
        let name = w
            .next()?
            .trim_matches(|c| c == '\'' || c == '"' || c == ':');
        let name = name.strip_prefix(':').unwrap_or(name);
        return TABLES.iter().find(|t| name == **t).copied();
    }
    if let Some(name) = first
        .strip_prefix("Table:")
        .or_else(|| first.strip_prefix("table:"))
        .filter(|n| !n.is_empty())
    {
        return TABLES.iter().find(|t| name == **t).copied();
    }
    // A command line.
    let mut cmd = first;
    if cmd == "sudo" {
        cmd = w.next()?;
    }
    let cmd = cmd.rsplit('/').next().unwrap_or(cmd);
    if !matches!(
        cmd,
        "iptables"
            | "ip6tables"
            | "iptables-legacy"
            | "ip6tables-legacy"
            | "iptables-nft"
            | "ip6tables-nft"
    ) {
        return None;
    }
    let args: Vec<&str> = w.collect();
    if !args.iter().any(|a| is_list_flag(a)) {
        return None;
    }
    let mut table = "filter";
    for (i, a) in args.iter().enumerate() {
        let v = if *a == "-t" || *a == "--table" {
            args.get(i + 1).copied()
        } else {
            a.strip_prefix("--table=")
        };
        if let Some(v) = v {
            table = TABLES.iter().find(|t| v == **t).copied()?;
        }
    }
    Some(table)
}

/// The layout a column header line announces, or `None` if it is not one.
fn header_layout(line: &str) -> Option<Layout> {
    let ws = words(line);
    if ws.is_empty() {
        return None;
    }
    let known = [
        "num",
        "pkts",
        "bytes",
        "pcnt",
        "bcnt",
        "target",
        "prot",
        "opt",
        "in",
        "out",
        "source",
        "destination",
    ];
    if !ws.iter().all(|w| known.contains(&w.text)) {
        return None;
    }
    let has = |s: &str| ws.iter().any(|w| w.text == s);
    if !(has("prot") && has("source")) {
        return None;
    }
    Some(Layout {
        num: has("num"),
        counters: has("pkts") || has("pcnt"),
        via: has("in") && has("out"),
        target_col: ws.iter().find(|w| w.text == "target").map(|w| w.start),
    })
}

/// `123`, `2657K`, `99G` -> (value, rounded).
fn parse_count(s: &str) -> Option<(u64, bool)> {
    let (digits, mult) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 1_000u64),
        b'M' => (&s[..s.len() - 1], 1_000_000),
        b'G' => (&s[..s.len() - 1], 1_000_000_000),
        b'T' => (&s[..s.len() - 1], 1_000_000_000_000),
        b'P' => (&s[..s.len() - 1], 1_000_000_000_000_000),
        _ => (s, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let v: u64 = digits.parse().ok()?;
    Some((v.checked_mul(mult)?, mult > 1))
}

struct Columns {
    rule: ListedRule,
    counters: Option<Counters>,
    extra_offset: usize,
}

fn is_opt(w: &str) -> bool {
    matches!(w, "--" | "-f" | "!f" | "!-")
}

fn is_protocol(w: &str) -> bool {
    let w = w.strip_prefix('!').unwrap_or(w);
    !w.is_empty()
        && w.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

fn is_interface(w: &str) -> bool {
    let w = w.strip_prefix('!').unwrap_or(w);
    !w.is_empty() && w.len() <= 16 && !w.contains('/')
}

/// Address as printed: with `-n` always an IP literal with optional `/mask`; without,
/// `anywhere` or a host name. `strict` rejects single-label host names.
fn is_address(w: &str, strict: bool) -> bool {
    let w = w.strip_prefix('!').unwrap_or(w);
    if w.is_empty() {
        return false;
    }
    let host = w.split_once('/').map_or(w, |(h, _)| h);
    if host.parse::<std::net::IpAddr>().is_ok() || w == "anywhere" {
        return true;
    }
    if strict {
        // Host names from reverse DNS: dotted, or with a mask.
        (w.contains('/') || host.contains('.'))
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._:".contains(&b))
    } else {
        !is_opt(w) && w != "*"
    }
}

fn parse_columns(line: &str, ws: &[Word<'_>], layout: &Layout) -> Result<Columns, (usize, String)> {
    let mut i = 0;
    let missing = |i: usize, what: &str| -> (usize, String) {
        let at = ws.get(i).map_or(line.len(), |w| w.start);
        (at, format!("expected {what}"))
    };
    let mut rule = ListedRule::default();
    if layout.num {
        let w = ws.get(i).ok_or_else(|| missing(i, "a rule number"))?;
        rule.line_number = Some(
            w.text
                .parse()
                .map_err(|_| (w.start, "expected a rule number (num column)".to_string()))?,
        );
        i += 1;
    }
    let mut counters = None;
    if layout.counters {
        let (Some(p), Some(b)) = (ws.get(i), ws.get(i + 1)) else {
            return Err(missing(i, "packet and byte counters"));
        };
        let pc = parse_count(p.text).ok_or_else(|| {
            (
                p.start,
                "expected a packet count (pkts column; digits with an optional K/M/G/T)"
                    .to_string(),
            )
        })?;
        let bc = parse_count(b.text).ok_or_else(|| {
            (
                b.start,
                "expected a byte count (bytes column; digits with an optional K/M/G/T)".to_string(),
            )
        })?;
        counters = Some(Counters {
            packets: pc.0,
            bytes: bc.0,
        });
        rule.counters_rounded = pc.1 || bc.1;
        i += 2;
    }
    let rest = &ws[i..];
    let via = if layout.via { 2 } else { 0 };
    // (target present, opt present); the order settles ambiguity.
    let mut fits: Vec<(bool, bool)> = Vec::new();
    for strict in [true, false] {
        for (has_target, has_opt) in [(false, true), (true, true), (true, false), (false, false)] {
            let t = usize::from(has_target);
            let o = usize::from(has_opt);
            let need = t + 1 + o + via + 2;
            if rest.len() < need {
                continue;
            }
            let proto = rest[t].text;
            let ok = is_protocol(proto)
                && (!has_opt || is_opt(rest[t + 1].text))
                && (has_opt || !is_opt(rest[t + 1].text))
                && (!has_target || !is_opt(rest[0].text))
                && (via == 0
                    || (is_interface(rest[t + 1 + o].text) && is_interface(rest[t + 2 + o].text)))
                && is_address(rest[t + 1 + o + via].text, strict)
                && is_address(rest[t + 2 + o + via].text, strict);
            if ok {
                fits.push((has_target, has_opt));
            }
        }
        if !fits.is_empty() {
            break;
        }
    }
    let Some(&first) = fits.first() else {
        let at = rest.first().map_or(line.len(), |w| w.start);
        let what = if layout.via {
            "columns 'target prot opt in out source destination'"
        } else {
            "columns 'target prot opt source destination'"
        };
        return Err((at, format!("expected {what}")));
    };
    let (has_target, has_opt) = if first.1 {
        first
    } else {
        // No opt column: a blank target and a target named like a protocol both fit.
        // The header's target column decides: a blank target leaves it empty.
        match (layout.target_col, fits.contains(&(false, false))) {
            (Some(col), true) if rest[0].start >= col + 9 => (false, false),
            _ => first,
        }
    };
    let mut k = 0;
    if has_target {
        rule.target = Some(rest[0].text.to_string());
        k = 1;
    }
    rule.protocol = Negatable::parse(rest[k].text);
    k += 1;
    rule.fragment = if has_opt {
        k += 1;
        match rest[k - 1].text {
            "-f" => Fragment::Fragments,
            "!f" => Fragment::NotFragments,
            _ => Fragment::Any,
        }
    } else {
        Fragment::NotShown
    };
    if via > 0 {
        rule.interfaces_listed = true;
        let iface = |w: &str| {
            let n = Negatable::parse(w);
            (!matches!(&*n.value, "*" | "any") || n.negated).then_some(n)
        };
        rule.in_interface = iface(rest[k].text);
        rule.out_interface = iface(rest[k + 1].text);
        k += 2;
    }
    rule.source = Negatable::parse(rest[k].text);
    rule.destination = Negatable::parse(rest[k + 1].text);
    let dst = rest[k + 1];
    let after = dst.start + dst.text.len();
    let tail = &line[after..];
    let extra_offset = after + (tail.len() - tail.trim_start().len());
    rule.extra = tail.trim().into();
    Ok(Columns {
        rule,
        counters,
        extra_offset,
    })
}

/// Words that begin something the reader recognises (used to find where a comment ends).
const HEADS: &[&str] = &[
    "!",
    "[goto]",
    "tcp",
    "udp",
    "sctp",
    "dccp",
    "udplite",
    "multiport",
    "ctstate",
    "state",
    "mark",
    "ADDRTYPE",
    "statistic",
    "recent:",
    "match-set",
    "PHYSDEV",
    "limit:",
    "masq",
    "redir",
    "MARK",
    "reject-with",
    "LOG",
    "random",
    "random-fully",
    "persistent",
    "icmptype",
    "ipv6-icmptype",
    "CT",
    "CONNMARK",
    "TCPMSS",
];

fn is_head(w: &str) -> bool {
    HEADS.contains(&w) || w.starts_with("to:") || w.starts_with("/*")
}

#[derive(Clone, Copy)]
struct Tok<'e> {
    start: usize,
    end: usize,
    text: &'e str,
}

/// Splits the option text into words, keeping `/* ... */` and `"..."` whole.
/// Returns the words and whether a comment or quote is left open.
fn extra_tokens(extra: &str) -> (Vec<Tok<'_>>, bool) {
    let mut out = Vec::new();
    let mut open = false;
    let b = extra.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        let end = if extra[i..].starts_with("/*") {
            match comment_end(extra, i + 2) {
                Some(e) => e,
                None => {
                    open = true;
                    extra.len()
                }
            }
        } else if b[i] == b'"' {
            match quote_end(extra, i + 1) {
                Some(e) => e,
                None => {
                    open = true;
                    extra.len()
                }
            }
        } else {
            let mut e = i;
            while e < b.len() && !b[e].is_ascii_whitespace() {
                e += 1;
            }
            e
        };
        out.push(Tok {
            start,
            end,
            text: &extra[start..end],
        });
        i = end.max(i + 1);
    }
    (out, open)
}

/// End (exclusive) of a comment whose text starts at `from`: the first `*/` that ends
/// the text or is followed by something the reader knows; else the first `*/`
/// followed by a space. A comment may itself contain `*/`: iptables does not escape.
fn comment_end(extra: &str, from: usize) -> Option<usize> {
    let mut candidates = Vec::new();
    let mut at = from;
    while let Some(p) = extra[at..].find("*/") {
        let end = at + p + 2;
        let after = &extra[end..];
        if after.is_empty() || after.starts_with(char::is_whitespace) {
            candidates.push(end);
        }
        at = at + p + 1;
    }
    let strong = candidates.iter().copied().find(|&e| {
        let next = extra[e..].split_whitespace().next();
        next.is_none_or(is_head)
    });
    strong.or_else(|| candidates.first().copied())
}

/// End (exclusive) of a quoted string starting after `"` at `from`: the first `"`
/// followed by a space or the end.
fn quote_end(extra: &str, from: usize) -> Option<usize> {
    let mut at = from;
    while let Some(p) = extra[at..].find('"') {
        let end = at + p + 1;
        if extra[end..].is_empty() || extra[end..].starts_with(char::is_whitespace) {
            return Some(end);
        }
        at = end;
    }
    None
}

fn port_range(s: &str) -> PortRange {
    let (negated, s) = match s.strip_prefix('!') {
        Some(r) => (true, r),
        None => (false, s),
    };
    match s.split_once(':') {
        Some((a, b)) => PortRange {
            negated,
            first: a.to_string(),
            last: Some(b.to_string()),
        },
        None => PortRange {
            negated,
            first: s.to_string(),
            last: None,
        },
    }
}

fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .filter(|x| !x.is_empty())
        .map(str::to_string)
        .collect()
}

/// Recognises what it can in `rule.extra`; returns whether a comment/quote is unclosed.
fn read_extra(rule: &mut ListedRule) -> bool {
    let extra = std::mem::take(&mut rule.extra);
    let (toks, open) = extra_tokens(&extra);
    let target = rule.target.clone().unwrap_or_default();
    let mut i = 0;
    let mut run: Option<(usize, usize)> = None;
    let flush = |run: &mut Option<(usize, usize)>, rule: &mut ListedRule| {
        if let Some((s, e)) = run.take() {
            rule.unrecognised.push(extra[s..e].to_string());
        }
    };
    while i < toks.len() {
        let consumed = recognise(rule, &target, &toks, i);
        if consumed == 0 {
            let t = toks[i];
            run = Some(match run {
                Some((s, _)) => (s, t.end),
                None => (t.start, t.end),
            });
            i += 1;
        } else {
            flush(&mut run, rule);
            i += consumed;
        }
    }
    flush(&mut run, rule);
    let first_comment = rule.comments().next().map(str::to_string);
    rule.comment = first_comment;
    rule.extra = extra;
    open
}

/// Tries every recogniser at `toks[i]`; returns how many words it used (0: none).
fn recognise(rule: &mut ListedRule, target: &str, toks: &[Tok<'_>], i: usize) -> usize {
    let t = |k: usize| toks.get(i + k).map(|t| t.text);
    let (negated, h) = if t(0) == Some("!") {
        (true, 1)
    } else {
        (false, 0)
    };
    let Some(head) = t(h) else { return 0 };
    let push = |rule: &mut ListedRule, m: ListedMatch| rule.matches.push(m);
    match head {
        "[goto]" if !negated => {
            rule.goto = true;
            return 1;
        }
        c if c.starts_with("/*") && !negated => {
            let inner = c.trim_start_matches("/*");
            let inner = inner.strip_suffix("*/").unwrap_or(inner);
            let inner = inner.strip_prefix(' ').unwrap_or(inner);
            let inner = inner.strip_suffix(' ').unwrap_or(inner);
            push(rule, ListedMatch::Comment(inner.to_string()));
            return 1;
        }
        "tcp" | "udp" | "sctp" | "dccp" | "udplite" if !negated => {
            let mut source = None;
            let mut destination = None;
            let mut tcp_flags = None;
            let mut k = 1;
            while let Some(w) = t(k) {
                if let Some(v) = w.strip_prefix("spt:").or_else(|| w.strip_prefix("spts:")) {
                    source = Some(port_range(v));
                } else if let Some(v) = w.strip_prefix("dpt:").or_else(|| w.strip_prefix("dpts:")) {
                    destination = Some(port_range(v));
                } else if w.starts_with("flags:") && head == "tcp" {
                    tcp_flags = Some(w["flags:".len()..].to_string());
                } else {
                    break;
                }
                k += 1;
            }
            push(
                rule,
                ListedMatch::Ports {
                    protocol: head.to_string(),
                    source,
                    destination,
                    tcp_flags,
                },
            );
            return k;
        }
        "multiport" if !negated => {
            let direction = match t(1) {
                Some("sports") => PortDirection::Source,
                Some("dports") => PortDirection::Destination,
                Some("ports") => PortDirection::Either,
                _ => return 0,
            };
            let mut k = 2;
            let mut neg = false;
            if t(k) == Some("!") {
                neg = true;
                k += 1;
            }
            let Some(list) = t(k) else { return 0 };
            let list = match list.strip_prefix('!') {
                Some(l) => {
                    neg = true;
                    l
                }
                None => list,
            };
            push(
                rule,
                ListedMatch::Multiport {
                    direction,
                    negated: neg,
                    ports: split_list(list),
                },
            );
            return k + 1;
        }
        "ctstate" | "state" => {
            let mut k = h + 1;
            let mut neg = negated;
            if t(k) == Some("!") {
                neg = true;
                k += 1;
            }
            let Some(list) = t(k) else { return 0 };
            if !list.bytes().all(|b| b.is_ascii_uppercase() || b == b',') {
                return 0;
            }
            push(
                rule,
                ListedMatch::ConnState {
                    keyword: head.to_string(),
                    negated: neg,
                    states: split_list(list),
                },
            );
            return k + 1;
        }
        "mark" if t(h + 1) == Some("match") => {
            let mut k = h + 2;
            let mut neg = negated;
            if t(k) == Some("!") {
                neg = true;
                k += 1;
            }
            let Some(v) = t(k) else { return 0 };
            let (value, mask) = match v.split_once('/') {
                Some((a, b)) => (a.to_string(), Some(b.to_string())),
                None => (v.to_string(), None),
            };
            push(
                rule,
                ListedMatch::Mark {
                    negated: neg,
                    value,
                    mask,
                },
            );
            return k + 1;
        }
        "ADDRTYPE" if !negated && t(1) == Some("match") => {
            let mut k = 2;
            let (mut source_type, mut destination_type) = (None, None);
            let (mut limit_in, mut limit_out) = (false, false);
            loop {
                match t(k) {
                    Some("src-type") if t(k + 1).is_some() => {
                        source_type = t(k + 1).map(Negatable::parse);
                        k += 2;
                    }
                    Some("dst-type") if t(k + 1).is_some() => {
                        destination_type = t(k + 1).map(Negatable::parse);
                        k += 2;
                    }
                    Some("limit-in") => {
                        limit_in = true;
                        k += 1;
                    }
                    Some("limit-out") => {
                        limit_out = true;
                        k += 1;
                    }
                    _ => break,
                }
            }
            push(
                rule,
                ListedMatch::AddrType {
                    source_type,
                    destination_type,
                    limit_in,
                    limit_out,
                },
            );
            return k;
        }
        "statistic" if !negated && t(1) == Some("mode") => {
            let Some(mode) = t(2) else { return 0 };
            let mut k = 3;
            let mut neg = false;
            if t(k) == Some("!") {
                neg = true;
                k += 1;
            }
            let (mut probability, mut every, mut packet) = (None, None, None);
            loop {
                match (t(k), t(k + 1)) {
                    (Some("probability"), Some(v)) => probability = Some(v.to_string()),
                    (Some("every"), Some(v)) => every = Some(v.to_string()),
                    (Some("packet"), Some(v)) => packet = Some(v.to_string()),
                    _ => break,
                }
                k += 2;
            }
            push(
                rule,
                ListedMatch::Statistic {
                    mode: mode.to_string(),
                    negated: neg,
                    probability,
                    every,
                    packet,
                },
            );
            return k;
        }
        "recent:" => {
            let mut k = h + 1;
            let Some(command) =
                t(k).filter(|c| matches!(*c, "SET" | "CHECK" | "UPDATE" | "REMOVE"))
            else {
                return 0;
            };
            k += 1;
            let mut m = ListedMatch::Recent {
                negated,
                command: command.to_string(),
                seconds: None,
                hit_count: None,
                reap: false,
                ttl: false,
                name: None,
                side: None,
                mask: None,
            };
            if let ListedMatch::Recent {
                seconds,
                hit_count,
                reap,
                ttl,
                name,
                side,
                mask,
                ..
            } = &mut m
            {
                loop {
                    let slot = match t(k) {
                        Some("reap") => {
                            *reap = true;
                            k += 1;
                            continue;
                        }
                        Some("TTL-Match") => {
                            *ttl = true;
                            k += 1;
                            continue;
                        }
                        Some("seconds:") => &mut *seconds,
                        Some("hit_count:") => &mut *hit_count,
                        Some("name:") => &mut *name,
                        Some("side:") => &mut *side,
                        Some("mask:") => &mut *mask,
                        _ => break,
                    };
                    let Some(v) = t(k + 1) else { break };
                    *slot = Some(v.to_string());
                    k += 2;
                }
            }
            push(rule, m);
            return k;
        }
        "match-set" => {
            let (Some(name), Some(flags)) = (t(h + 1), t(h + 2)) else {
                return 0;
            };
            push(
                rule,
                ListedMatch::Set {
                    negated,
                    name: name.to_string(),
                    flags: flags.to_string(),
                },
            );
            return h + 3;
        }
        "PHYSDEV" if !negated && t(1) == Some("match") => {
            let mut k = 2;
            let mut options = Vec::new();
            loop {
                let o = if t(k) == Some("!") { k + 1 } else { k };
                let Some(opt) = t(o).filter(|w| w.starts_with("--physdev")) else {
                    break;
                };
                let takes = matches!(opt, "--physdev-in" | "--physdev-out");
                let end = if takes && t(o + 1).is_some() {
                    o + 2
                } else {
                    o + 1
                };
                let words: Vec<&str> = toks[i + k..i + end].iter().map(|t| t.text).collect();
                options.push(words.join(" "));
                k = end;
            }
            push(rule, ListedMatch::Physdev { options });
            return k;
        }
        "limit:" if !negated && t(1) == Some("avg") => {
            let (Some(avg), Some("burst"), Some(burst)) = (t(2), t(3), t(4)) else {
                return 0;
            };
            push(
                rule,
                ListedMatch::Limit {
                    average: avg.to_string(),
                    burst: burst.to_string(),
                },
            );
            return 5;
        }
        _ => {}
    }
    if negated {
        return 0;
    }
    recognise_target(rule, target, toks, i)
}

fn recognise_target(rule: &mut ListedRule, target: &str, toks: &[Tok<'_>], i: usize) -> usize {
    let t = |k: usize| toks.get(i + k).map(|t| t.text);
    let head = t(0).unwrap_or("");
    match target {
        "DNAT" | "SNAT" => {
            let details = rule.target_details.get_or_insert_with(|| {
                Box::new(ListedTarget::Nat {
                    to: Vec::new(),
                    random: false,
                    random_fully: false,
                    persistent: false,
                })
            });
            let ListedTarget::Nat {
                to,
                random,
                random_fully,
                persistent,
            } = &mut **details
            else {
                return 0;
            };
            if let Some(v) = head.strip_prefix("to:") {
                to.push(v.to_string());
            } else {
                match head {
                    "random" => *random = true,
                    "random-fully" => *random_fully = true,
                    "persistent" => *persistent = true,
                    _ => return 0,
                }
            }
            1
        }
        "MASQUERADE" | "REDIRECT" => {
            let masq = target == "MASQUERADE";
            let details = rule.target_details.get_or_insert(Box::new(if masq {
                ListedTarget::Masquerade {
                    ports: None,
                    random: false,
                    random_fully: false,
                }
            } else {
                ListedTarget::Redirect {
                    ports: None,
                    random: false,
                }
            }));
            match (&mut **details, head) {
                (ListedTarget::Masquerade { ports, .. }, "masq")
                    if t(1) == Some("ports:") && t(2).is_some() =>
                {
                    *ports = t(2).map(str::to_string);
                    3
                }
                (ListedTarget::Redirect { ports, .. }, "redir")
                    if t(1) == Some("ports") && t(2).is_some() =>
                {
                    *ports = t(2).map(str::to_string);
                    3
                }
                (
                    ListedTarget::Masquerade { random, .. } | ListedTarget::Redirect { random, .. },
                    "random",
                ) => {
                    *random = true;
                    1
                }
                (ListedTarget::Masquerade { random_fully, .. }, "random-fully") => {
                    *random_fully = true;
                    1
                }
                _ => 0,
            }
        }
        "MARK" if head == "MARK" && rule.target_details.is_none() => {
            let (Some(op), Some(v)) = (t(1), t(2)) else {
                return 0;
            };
            rule.target_details = Some(Box::new(ListedTarget::Mark {
                operation: op.to_string(),
                value: v.to_string(),
            }));
            3
        }
        "REJECT" if head == "reject-with" && rule.target_details.is_none() => {
            let Some(v) = t(1) else { return 0 };
            rule.target_details = Some(Box::new(ListedTarget::Reject {
                with: v.to_string(),
            }));
            2
        }
        "LOG" if head == "LOG" && rule.target_details.is_none() => {
            let (mut flags, mut level, mut prefix) = (None, None, None);
            let mut k = 1;
            loop {
                let slot = match t(k) {
                    Some("flags") => &mut flags,
                    Some("level") => &mut level,
                    Some("prefix") => &mut prefix,
                    _ => break,
                };
                let Some(v) = t(k + 1) else { break };
                let v = v
                    .strip_prefix('"')
                    .and_then(|v| v.strip_suffix('"'))
                    .unwrap_or(v);
                *slot = Some(v.to_string());
                k += 2;
            }
            rule.target_details = Some(Box::new(ListedTarget::Log {
                flags,
                level,
                prefix,
            }));
            k
        }
        _ => 0,
    }
}

/// The table a listing shows, from the built-in chains it lists.
fn guess_table(table: &Table) -> Option<&'static str> {
    let mut builtins: Vec<&str> = table
        .chains
        .iter()
        .filter(|c| c.is_builtin())
        .map(|c| &*c.name)
        .collect();
    builtins.sort_unstable();
    Some(match builtins.as_slice() {
        ["FORWARD", "INPUT", "OUTPUT"] => "filter",
        ["INPUT", "OUTPUT", "POSTROUTING", "PREROUTING"] => "nat",
        ["FORWARD", "INPUT", "OUTPUT", "POSTROUTING", "PREROUTING"] => "mangle",
        ["OUTPUT", "PREROUTING"] => "raw",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(rs: &Ruleset, chain: &str, i: usize) -> ListedRule {
        let c = rs.tables[0].chain(chain).unwrap();
        match &c.rules[i].body {
            RuleBody::Approximate(l) => (**l).clone(),
            _ => unreachable!(),
        }
    }

    #[test]
    fn counts_with_suffixes() {
        assert_eq!(parse_count("2657K"), Some((2_657_000, true)));
        assert_eq!(parse_count("123"), Some((123, false)));
        assert_eq!(parse_count("12T"), Some((12_000_000_000_000, true)));
        assert_eq!(parse_count("K"), None);
        assert_eq!(parse_count("99999999999999999999G"), None);
    }

    #[test]
    fn blank_target_and_old_ip6_blank_opt() {
        let text = "Chain INPUT (policy ACCEPT 0 packets, 0 bytes)
 pkts bytes target     prot opt in     out     source               destination
    0     0 ACCEPT     all      lo     *       ::/0                 ::/0
    0     0            tcp      *      *       ::/0                 ::/0                 tcp dpt:22
    0     0 tcp        all      *      *       ::/0                 ::/0

Chain tcp (1 references)
 pkts bytes target     prot opt in     out     source               destination
";
        let rs = parse(text, Family::Ip6, Some("filter"));
        assert!(rs.diagnostics.is_empty(), "{:?}", rs.diagnostics);
        let a = listed(&rs, "INPUT", 0);
        assert_eq!(a.target.as_deref(), Some("ACCEPT"));
        assert_eq!(a.fragment, Fragment::NotShown);
        assert_eq!(&*a.in_interface.unwrap().value, "lo");
        let b = listed(&rs, "INPUT", 1);
        assert_eq!(b.target, None);
        assert_eq!(&*b.protocol.value, "tcp");
        let c = listed(&rs, "INPUT", 2);
        assert_eq!(
            c.target.as_deref(),
            Some("tcp"),
            "a chain named like a protocol"
        );
    }

    #[test]
    fn non_numeric_listing() {
        let text = "Chain INPUT (policy ACCEPT)
target     prot opt source               destination
ACCEPT     tcp  --  anywhere             anywhere             tcp dpt:https /* a b */
           all  --  10.0.0.0/8           anywhere
REJECT     udp  !f  anywhere             anywhere             multiport dports 80,https reject-with icmp-port-unreachable
LOG        all  --  anywhere             anywhere             LOG level warn prefix \"hi there \"
";
        let rs = parse(text, Family::Ip, None);
        let a = listed(&rs, "INPUT", 0);
        assert_eq!(a.comment.as_deref(), Some("a b"));
        assert!(
            matches!(&a.matches[0], ListedMatch::Ports { destination: Some(p), .. } if p.first == "https")
        );
        let r = listed(&rs, "INPUT", 2);
        assert_eq!(r.fragment, Fragment::NotFragments);
        assert_eq!(
            r.target_details.as_deref(),
            Some(&ListedTarget::Reject {
                with: "icmp-port-unreachable".into()
            })
        );
        let l = listed(&rs, "INPUT", 3);
        assert_eq!(
            l.target_details.as_deref(),
            Some(&ListedTarget::Log {
                flags: None,
                level: Some("warn".into()),
                prefix: Some("hi there ".into())
            })
        );
        assert!(l.unrecognised.is_empty(), "{:?}", l.unrecognised);
        // Only the "assumed filter" note.
        assert_eq!(rs.diagnostics.len(), 1, "{:?}", rs.diagnostics);
        assert_eq!(&*rs.tables[0].name, "filter");
    }

    #[test]
    fn separators() {
        assert_eq!(table_separator("# Table: nat"), Some("nat"));
        assert_eq!(table_separator("Table: mangle"), Some("mangle"));
        assert_eq!(table_separator("*raw"), Some("raw"));
        assert_eq!(table_separator("=== nat ==="), Some("nat"));
        assert_eq!(table_separator("# iptables -t nat -nvL"), Some("nat"));
        assert_eq!(table_separator("$ sudo ip6tables -vnxL"), Some("filter"));
        assert_eq!(table_separator("iptables --table=raw -L -n"), Some("raw"));
        assert_eq!(table_separator("iptables -t nat -A FOO"), None);
        assert_eq!(table_separator("ACCEPT all"), None);
    }

    #[test]
    fn file_names() {
        assert_eq!(
            source_of_file_name("iptables_-t_nat_-nvL"),
            Some((Family::Ip, "nat"))
        );
        assert_eq!(
            source_of_file_name("ip6tables_-vnxL"),
            Some((Family::Ip6, "filter"))
        );
        assert_eq!(
            source_of_file_name("iptablesmangle"),
            Some((Family::Ip, "mangle"))
        );
        assert_eq!(
            source_of_file_name("iptables"),
            Some((Family::Ip, "filter"))
        );
        assert_eq!(source_of_file_name("iptablessave"), None);
        assert_eq!(source_of_file_name("iptables-save"), None);
        assert_eq!(source_of_file_name("nft_list_ruleset"), None);
    }

    #[test]
    fn comment_containing_end_marker() {
        let (toks, open) = extra_tokens("tcp dpt:443 /* a */ b */ ctstate NEW");
        assert!(!open);
        assert_eq!(toks[2].text, "/* a */ b */");
        let (toks, _) = extra_tokens("/* a */ /* b */");
        assert_eq!(toks.len(), 2);
        let (_, open) = extra_tokens("/* cut mid-comm");
        assert!(open);
    }
}
