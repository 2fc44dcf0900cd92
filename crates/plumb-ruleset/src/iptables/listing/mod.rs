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
//!
//! Where things are: `tables` (which table a listing shows: bundle file names, separator
//! lines, built-in chains), `columns` (chain header, column header and rule lines split
//! into columns), `options` (what plumb recognises in a rule's trailing option text),
//! `save` (a listed rule back in `iptables-save` syntax when the listing shows all of it).
//! This module reads line by line and builds the ruleset. The types of a listed rule
//! belong to the model ([`crate::model::listed`]) and are re-exported here.

mod columns;
mod options;
mod save;
mod tables;

use crate::diagnostic::Diagnostic;
pub use crate::model::listed::{
    Fragment, ListedMatch, ListedRule, ListedTarget, Negatable, PortDirection, PortRange,
};
use crate::model::{
    Backend, BaseChain, Chain, Completeness, Counters, Family, Hook, Location, Policy, Rule,
    RuleBody, RuleText, Ruleset, SourceText, Table,
};
use columns::{
    GUESSES, Layout, column_of, header_layout, parse_chain_header, parse_columns, parse_count,
    words,
};
use options::read_extra;
pub use save::{Refusal, save_spec};
use std::collections::HashMap;
pub use tables::source_of_file_name;
use tables::{guess_table, infer_table, table_separator};

/// The table a listing that does not name it shows, from its built-in chains or, failing
/// that, its chains' names and targets; `None` when they point to no single table.
pub fn inferred_table(text: &str, family: Family) -> Option<&'static str> {
    // Read under any name: only the chains and rules are looked at.
    let rs = parse(text, family, Some("filter"));
    let mut found = None;
    for t in &rs.tables {
        let name = guess_table(t).or_else(|| infer_table(t))?;
        if found.is_some_and(|f| f != name) {
            return None;
        }
        found = Some(name);
    }
    found
}

/// Reads an iptables listing. `default_table` names the table when the text does not
/// (sosreport keeps one table per file); without it, `# Table: nat` style separators
/// and the built-in chains decide, and a note says what was guessed.
pub fn parse(text: &str, family: Family, default_table: Option<&str>) -> Ruleset {
    read(text, None, family, default_table)
}

/// [`parse`] of a shared input: a rule's text is a span of it (its line) rather than a
/// copy of its own, as every other reader's is: a 10k-service listing's 168k rows
/// copied took 37 MiB beside the input they came from.
pub fn parse_shared(source: &SourceText, family: Family, default_table: Option<&str>) -> Ruleset {
    read(source, Some(source), family, default_table)
}

fn read(
    text: &str,
    source: Option<&SourceText>,
    family: Family,
    default_table: Option<&str>,
) -> Ruleset {
    let mut r = Reader {
        source,
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
        markup_removed: None,
        squeezed: false,
        squeezed_noted: false,
        fragments: Vec::new(),
    };
    let ends_with_newline = text.ends_with('\n');
    let mut lines = text.split('\n').peekable();
    let mut n = 0u32;
    while let Some(raw) = lines.next() {
        n = n.saturating_add(1);
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        let last = lines.peek().is_none() || (ends_with_newline && lines.peek() == Some(&""));
        let before = r.ruleset.diagnostics.len();
        let cleaned = strip_markup(line);
        if let std::borrow::Cow::Owned(_) = cleaned {
            r.markup_removed.get_or_insert((n, 0)).1 += 1;
        }
        let ok = r.line(&cleaned, n);
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

/// A table being read, with what is needed to check it when it closes.
struct TableBuild {
    table: Table,
    /// Named by the caller or a separator, not guessed.
    named: bool,
    index: HashMap<Box<str>, usize>,
    /// (chain index, references printed in its header).
    references: Vec<(usize, u32)>,
}

/// The state of one read: the table and chain being filled and what to report at the end.
struct Reader<'a> {
    /// The shared input, when the caller has one: rules' texts are spans of it.
    source: Option<&'a SourceText>,
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
    /// First line and number of lines that had markdown or HTML emphasis removed.
    markup_removed: Option<(u32, u32)>,
    /// The current chain was printed through `column -t` (runs of spaces everywhere,
    /// comments included): comment text has its spaces collapsed.
    squeezed: bool,
    squeezed_noted: bool,
    /// Tables that do not list every built-in chain of their table (a listing of some
    /// chains): partial.
    fragments: Vec<String>,
}

/// A line without the debris of how it was posted: a leading markdown `**`/`__`
/// (`**Chain X ...`) and HTML emphasis tags (`<b>`, `</b>`, `<strong>`, `<em>`, `<i>`)
/// that a page kept inside `<pre>`. Borrowed when there is none.
fn strip_markup(line: &str) -> std::borrow::Cow<'_, str> {
    const TAGS: [&str; 8] = [
        "<b>",
        "</b>",
        "<strong>",
        "</strong>",
        "<em>",
        "</em>",
        "<i>",
        "</i>",
    ];
    let trimmed = line.trim_start();
    let lead = ["**", "__"]
        .iter()
        .find(|m| {
            trimmed
                .strip_prefix(**m)
                .is_some_and(|r| r.trim_start().starts_with("Chain "))
        })
        .map(|m| m.len());
    let has_tag = TAGS.iter().any(|t| line.contains(t));
    if lead.is_none() && !has_tag {
        return std::borrow::Cow::Borrowed(line);
    }
    let indent = line.len() - trimmed.len();
    let mut out = format!("{}{}", &line[..indent], &trimmed[lead.unwrap_or(0)..]);
    for t in TAGS {
        out = out.replace(t, "");
    }
    if lead.is_some() {
        // A closing `**` after the header.
        let t = out.trim_end();
        if let Some(r) = t.strip_suffix("**").or_else(|| t.strip_suffix("__")) {
            out = r.to_string();
        }
    }
    std::borrow::Cow::Owned(out)
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
            // `column -t` pads every column: "Chain          PREROUTING  (policy  ACCEPT)".
            self.squeezed =
                rest.starts_with(' ') || rest.contains("  (") || rest.contains("(policy  ");
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
        // Most rows have one or two matches, in a block grown for four (19 MiB of a
        // 10k-service listing).
        crate::iptables::save::shrink(&mut listed.matches);
        if self.squeezed && self.collapse_comments(&mut listed) && !self.squeezed_noted {
            self.squeezed_noted = true;
            self.diag(Diagnostic::note(
                n,
                col,
                "this listing went through `column -t`: runs of spaces inside comments are read as one space",
                line.trim(),
            ));
        }
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
        let location = Location {
            line: n,
            column: col,
        };
        let text = match self.source.and_then(|s| RuleText::slice_of(s, line)) {
            Some(text) => text,
            // Markup removed from the line, or no shared input: a text of its own.
            None => RuleText::written_at(line.to_owned(), location),
        };
        rules.push(Rule {
            text,
            body: RuleBody::Approximate(Box::new(ListedRule {
                counters: columns.counters,
                ..listed
            })),
        });
        true
    }

    /// Collapses runs of spaces in the comments of a rule printed through `column -t`;
    /// true if any changed.
    fn collapse_comments(&mut self, listed: &mut ListedRule) -> bool {
        let collapse = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        let mut changed = false;
        for m in &mut listed.matches {
            if let ListedMatch::Comment(c) = m {
                let new = collapse(c);
                if new != *c {
                    *c = new;
                    changed = true;
                }
            }
        }
        if let Some(c) = &mut listed.comment {
            *c = collapse(c);
        }
        changed
    }

    fn close(&mut self) {
        self.chain = None;
        self.layout = None;
        let Some(mut st) = self.current.take() else {
            return;
        };
        let loc = st.table.location;
        if !st.named {
            let name = guess_table(&st.table).or_else(|| infer_table(&st.table));
            let builtins: Vec<&str> = st
                .table
                .chains
                .iter()
                .filter(|c| c.is_builtin())
                .map(|c| &*c.name)
                .collect();
            let why = match name {
                Some(_) if !builtins.is_empty() && guess_table(&st.table).is_some() => {
                    format!("guessed from its built-in chains ({})", builtins.join(", "))
                }
                Some(_) => "guessed from its chains' names and targets".to_string(),
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
        // A listing of some chains (`iptables -t nat -L CHAIN`) does not show every
        // built-in chain of its table: a fragment of it, whose jumps to chains it does
        // not show and reference counts it cannot match are expected (one note says so).
        let fragment = !crate::iptables::save::builtin_chains(&st.table.name)
            .iter()
            .all(|b| st.index.contains_key(*b));
        if !fragment {
            self.ruleset.diagnostics.extend(mismatches);
        }
        if fragment {
            if !self.fragments.contains(&st.table.name.to_string()) {
                self.fragments.push(st.table.name.to_string());
            }
            // Another listing of chains of the same table: one table.
            if let Some(t) = self
                .ruleset
                .tables
                .iter_mut()
                .find(|t| t.family == st.table.family && t.name == st.table.name)
            {
                for c in st.table.chains {
                    match t.chains.iter_mut().find(|x| x.name == c.name) {
                        // Listed again later in the same capture: the later listing.
                        Some(x) => *x = c,
                        None => t.chains.push(c),
                    }
                }
                return;
            }
        }
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
        if let Some((line, count)) = self.markup_removed {
            self.diag(Diagnostic::note(
                line,
                1,
                format!("markdown or HTML emphasis (`**`, `<b>`, `</b>`) removed from {count} line(s): the listing was posted on a page"),
                "",
            ));
        }
        if !self.fragments.is_empty() {
            self.diag(Diagnostic::note(
                1,
                1,
                format!(
                    "the listing does not show every built-in chain of table(s) {}: a listing of some chains, read as partial (chains it does not show may exist)",
                    self.fragments.join(", ")
                ),
                "",
            ));
            if self.ruleset.completeness == Completeness::Full {
                self.ruleset.completeness = Completeness::Partial;
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The listed rule `i` of `chain` in the first table (shared by the submodules' tests).
    pub(super) fn listed(rs: &Ruleset, chain: &str, i: usize) -> ListedRule {
        let c = rs.tables[0].chain(chain).unwrap();
        match &c.rules[i].body {
            RuleBody::Approximate(l) => (**l).clone(),
            _ => unreachable!(),
        }
    }
}
