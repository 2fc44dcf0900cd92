//! Reader for `nft list ruleset` / `nft list table` text, with or without `-a`
//! (`# handle N` comments), tabs or spaces, one-line or multi-line blocks.
//!
//! One pass turns the text into tokens (words, braces, `;`, trailing commas,
//! newlines, `#` comments), then a recursive reader walks tables, chains, sets and
//! rules. A bad item becomes a [`Diagnostic`] with line and column and reading goes
//! on; input that ends inside a block, stray braces and elision lines (`....`)
//! mark the result [`Completeness::Truncated`]. No regex, no per-character
//! allocation.
//!
//! The same reader takes nft scripts (`nft -f` input): `add table|chain|set|map|rule|
//! element ...`, `insert rule`, `flush ...` and `delete ...` commands, as kube-proxy's
//! nftables mode writes its transactions. A script changes kernel state the text does
//! not show, so its ruleset is [`Completeness::Partial`] (like an iptables-restore
//! payload): it says what the script writes, not what the kernel holds.

use crate::diagnostic::Diagnostic;
use crate::model::nft::{
    NatKind, NftRule, NftSet, Op, SetElement, SetKind, Statement, StatementKind, Value, Verdict,
    VerdictMapRef, unquote,
};
use crate::model::{
    Backend, BaseChain, Chain, Completeness, Counters, Family, Hook, Location, Policy, Rule,
    RuleBody, Ruleset, Table,
};
use std::collections::{HashMap, HashSet};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tok {
    Word,
    LBrace,
    RBrace,
    Semi,
    Comma,
    Newline,
    Comment,
}

#[derive(Clone, Copy, Debug)]
struct Token {
    kind: Tok,
    start: usize,
    end: usize,
    line: u32,
    line_start: usize,
}

/// Splits the text into tokens. Quoted strings stay inside their word; a comma
/// is its own token only where it separates list items (followed by a space,
/// newline, `}` or the end), so `established,related` stays one word.
fn tokenize(text: &str, diags: &mut Vec<Diagnostic>) -> Vec<Token> {
    let b = text.as_bytes();
    let mut toks = Vec::with_capacity(b.len() / 6);
    let mut i = 0;
    let mut line = 1u32;
    let mut line_start = 0usize;
    while i < b.len() {
        let c = b[i];
        let single = |kind, i| Token {
            kind,
            start: i,
            end: i + 1,
            line,
            line_start,
        };
        match c {
            b' ' | b'\t' | b'\r' => i += 1,
            b'\n' => {
                toks.push(single(Tok::Newline, i));
                i += 1;
                line += 1;
                line_start = i;
            }
            b'{' => {
                toks.push(single(Tok::LBrace, i));
                i += 1;
            }
            b'}' => {
                toks.push(single(Tok::RBrace, i));
                i += 1;
            }
            b';' => {
                toks.push(single(Tok::Semi, i));
                i += 1;
            }
            b',' => {
                toks.push(single(Tok::Comma, i));
                i += 1;
            }
            b'#' => {
                let end = memchr_newline(b, i);
                toks.push(Token {
                    kind: Tok::Comment,
                    start: i,
                    end,
                    line,
                    line_start,
                });
                i = end;
            }
            _ => {
                let start = i;
                while i < b.len() {
                    match b[i] {
                        b' ' | b'\t' | b'\r' | b'\n' | b'{' | b'}' | b';' => break,
                        b',' if matches!(
                            b.get(i + 1),
                            None | Some(b' ' | b'\t' | b'\r' | b'\n' | b'}' | b',')
                        ) =>
                        {
                            break;
                        }
                        b'"' => {
                            let mut j = i + 1;
                            while j < b.len() && b[j] != b'"' && b[j] != b'\n' {
                                j += 1;
                            }
                            if j >= b.len() || b[j] == b'\n' {
                                diags.push(Diagnostic::error(
                                    line,
                                    column(text, line_start, i),
                                    "unterminated string: expected a closing '\"' on the same line",
                                    &text[i..j],
                                ));
                                i = j;
                                break;
                            }
                            i = j + 1;
                        }
                        _ => i += 1,
                    }
                }
                toks.push(Token {
                    kind: Tok::Word,
                    start,
                    end: i,
                    line,
                    line_start,
                });
            }
        }
    }
    toks
}

fn memchr_newline(b: &[u8], from: usize) -> usize {
    b[from..]
        .iter()
        .position(|&c| c == b'\n')
        .map_or(b.len(), |p| from + p)
}

/// 1-based column (in characters) of byte `at` on the line starting at `line_start`.
fn column(text: &str, line_start: usize, at: usize) -> u32 {
    let seg = text.get(line_start..at).unwrap_or("");
    if seg.is_ascii() {
        seg.len() as u32 + 1
    } else {
        seg.chars().count() as u32 + 1
    }
}

/// Reads `nft list ruleset` (or `nft list table ...`) text.
pub fn parse_text(text: &str) -> Ruleset {
    let mut diags = Vec::new();
    let toks = tokenize(text, &mut diags);
    let mut r = Reader {
        text,
        toks,
        pos: 0,
        ruleset: Ruleset::default(),
        rule_buf: Vec::new(),
        chain_index: HashMap::new(),
        script_noted: false,
        from_scratch: false,
        dead_tables: HashSet::new(),
        dead_chains: HashSet::new(),
        deleted_names: HashSet::new(),
    };
    r.ruleset.diagnostics = diags;
    r.top();
    r.remove_deleted();
    let mut rs = r.ruleset;
    rs.diagnostics.sort_by_key(|d| (d.line, d.column));
    rs
}

struct Reader<'a> {
    text: &'a str,
    toks: Vec<Token>,
    pos: usize,
    ruleset: Ruleset,
    rule_buf: Vec<Token>,
    /// (table index, chain name) -> chain index: chains are looked up once each,
    /// and kube-proxy tables have tens of thousands of them.
    chain_index: HashMap<(usize, &'a str), usize>,
    /// The note that the input is an nft script was given.
    script_noted: bool,
    /// A script began with `flush ruleset`: what follows is the whole ruleset.
    from_scratch: bool,
    /// Tables and (table, chain) indexes a script deleted: kept in place while reading
    /// (indexes stay valid, deleting stays linear), removed at the end.
    dead_tables: HashSet<usize>,
    dead_chains: HashSet<(usize, usize)>,
    /// (table, name) of chains in `deleted_chains`, to notice one added again.
    deleted_names: HashSet<(usize, &'a str)>,
}

const FAMILIES: &[&str] = &["ip", "ip6", "inet", "arp", "bridge", "netdev"];
const HOOKS: &[&str] = &[
    "prerouting",
    "input",
    "forward",
    "output",
    "postrouting",
    "ingress",
    "egress",
];
const CHAIN_TYPES: &[&str] = &["filter", "nat", "route"];
const PRIORITY_NAMES: &[&str] = &[
    "raw", "mangle", "dstnat", "filter", "security", "srcnat", "out",
];
const COMMANDS: &[&str] = &[
    "add", "create", "insert", "delete", "destroy", "flush", "define", "redefine", "undefine",
    "include", "replace", "reset", "list", "rename", "monitor", "describe", "export", "import",
];
const OBJECTS: &[&str] = &[
    "flowtable",
    "counter",
    "quota",
    "limit",
    "secmark",
    "synproxy",
    "tunnel",
    "ct",
];

/// Whether `VERB OBJECT` is an nft script command that builds or changes a ruleset.
fn builds_ruleset(verb: &str, object: &str) -> bool {
    matches!(
        (verb, object),
        (
            "add" | "create",
            "table" | "chain" | "set" | "map" | "rule" | "element"
        ) | ("insert", "rule")
            | ("flush", "ruleset" | "table" | "chain" | "set" | "map")
            | (
                "delete" | "destroy",
                "table" | "chain" | "set" | "map" | "rule" | "element"
            )
    )
}

/// Whether a line starts an nft script command (`add table ...`, `flush ruleset`):
/// format detection.
pub(crate) fn is_script_command(line: &str) -> bool {
    let mut w = line.split_ascii_whitespace();
    matches!((w.next(), w.next()), (Some(v), Some(o)) if builds_ruleset(v, o))
}

/// Rules' 1-based positions after an insert or a removal.
fn renumber(rules: &mut [Rule]) {
    for (i, r) in rules.iter_mut().enumerate() {
        r.position = i as u32 + 1;
    }
}

fn is_elision(w: &str) -> bool {
    !w.is_empty() && w.chars().all(|c| c == '.' || c == '…') && (w.len() >= 3 || w == "…")
}

impl<'a> Reader<'a> {
    fn s(&self, t: &Token) -> &'a str {
        &self.text[t.start..t.end]
    }

    fn peek(&self) -> Option<Token> {
        self.toks.get(self.pos).copied()
    }

    fn peek_word(&self) -> Option<&'a str> {
        match self.peek() {
            Some(t) if t.kind == Tok::Word => Some(self.s(&t)),
            _ => None,
        }
    }

    fn loc(&self, t: &Token) -> Location {
        Location {
            line: t.line,
            column: column(self.text, t.line_start, t.start),
        }
    }

    fn error(&mut self, t: &Token, msg: impl Into<String>, text: &str) {
        let l = self.loc(t);
        self.ruleset
            .diagnostics
            .push(Diagnostic::error(l.line, l.column, msg, text));
    }

    fn note(&mut self, t: &Token, msg: impl Into<String>, text: &str) {
        let l = self.loc(t);
        self.ruleset
            .diagnostics
            .push(Diagnostic::note(l.line, l.column, msg, text));
    }

    fn truncated(&mut self, t: Option<Token>, msg: &str) {
        self.ruleset.completeness = Completeness::Truncated;
        let (line, col, text) = match t {
            Some(t) => (t.line, column(self.text, t.line_start, t.start), self.s(&t)),
            None => (
                self.text.split('\n').count() as u32,
                1,
                self.text.lines().last().unwrap_or(""),
            ),
        };
        self.ruleset
            .diagnostics
            .push(Diagnostic::error(line, col, msg, text));
    }

    /// Skips newlines, `;` and comments.
    fn skip_blank(&mut self) {
        while let Some(t) = self.peek() {
            match t.kind {
                Tok::Newline | Tok::Semi | Tok::Comment => self.pos += 1,
                _ => break,
            }
        }
    }

    /// Skips to the end of the current statement (newline or `;` outside braces),
    /// stopping before a `}` that closes the enclosing block. Returns the text.
    fn skip_statement(&mut self) -> &'a str {
        let first = self.peek();
        let mut last_end = first.map_or(0, |t| t.end);
        let mut depth = 0usize;
        while let Some(t) = self.peek() {
            match t.kind {
                Tok::Newline | Tok::Semi if depth == 0 => break,
                Tok::LBrace => depth += 1,
                Tok::RBrace => {
                    if depth == 0 {
                        break;
                    }
                    depth -= 1;
                }
                _ => {}
            }
            if t.kind != Tok::Comment && t.kind != Tok::Newline {
                last_end = t.end;
            }
            self.pos += 1;
        }
        match first {
            Some(f) => self.text.get(f.start..last_end.max(f.start)).unwrap_or(""),
            None => "",
        }
    }

    fn top(&mut self) {
        loop {
            self.skip_blank();
            let Some(t) = self.peek() else { return };
            match t.kind {
                Tok::Word => {
                    let w = self.s(&t);
                    if w == "table" {
                        self.table();
                    } else if is_elision(w) {
                        self.truncated(
                            Some(t),
                            "input is truncated here (an elision line, not nft syntax)",
                        );
                        self.skip_statement();
                    } else if self.script_command() {
                        // Read as a script command.
                    } else if COMMANDS.contains(&w) {
                        let stmt = self.skip_statement();
                        self.note(
                            &t,
                            "nft command, not part of a ruleset listing: skipped (its effect on the kernel is unknown)",
                            stmt,
                        );
                    } else {
                        let stmt = self.skip_statement();
                        self.error(
                            &t,
                            format!("unexpected '{w}': expected 'table <family> <name> {{'"),
                            stmt,
                        );
                    }
                }
                Tok::RBrace => {
                    self.pos += 1;
                    self.ruleset.completeness = Completeness::Truncated;
                    self.error(&t, "unbalanced '}': no block is open here", "}");
                }
                _ => {
                    self.pos += 1;
                    self.error(&t, "expected 'table <family> <name> {'", self.s(&t));
                }
            }
        }
    }

    /// One command of an nft script (`nft -f` input) at the top level. Returns false,
    /// consuming nothing, when the statement is not a command that builds or changes a
    /// ruleset (`list`, `monitor`, `add counter` ... are noted and skipped by the caller).
    fn script_command(&mut self) -> bool {
        let verb_tok = self.toks[self.pos];
        let verb = self.s(&verb_tok);
        let Some(obj_tok) = self
            .toks
            .get(self.pos + 1)
            .copied()
            .filter(|t| t.kind == Tok::Word)
        else {
            return false;
        };
        let object = self.s(&obj_tok);
        if !builds_ruleset(verb, object) {
            return false;
        }
        if object == "ruleset" {
            // `flush ruleset` (nftables.conf's first line): everything after it is the
            // whole ruleset, whatever came before.
            self.pos += 2;
            self.ruleset.tables.clear();
            self.chain_index.clear();
            self.dead_tables.clear();
            self.dead_chains.clear();
            self.deleted_names.clear();
            self.from_scratch = true;
            if self.ruleset.completeness == Completeness::Partial {
                self.ruleset.completeness = Completeness::Full;
            }
            self.end_of_command(verb_tok);
            return true;
        }
        if self.from_scratch {
            // Commands after `flush ruleset` build the whole ruleset: not partial.
        } else if self.ruleset.completeness == Completeness::Full {
            self.ruleset.completeness = Completeness::Partial;
        }
        if !self.script_noted && !self.from_scratch {
            self.script_noted = true;
            let line = self.text[verb_tok.line_start..]
                .lines()
                .next()
                .unwrap_or("");
            self.note(
                &verb_tok,
                "an nft script (commands for `nft -f`, like kube-proxy's nftables transactions): it changes kernel state this text does not show, so the ruleset read is partial",
                line,
            );
        }
        self.pos += 1;
        if object == "table" && matches!(verb, "add" | "create") {
            self.table_header(true);
            self.end_of_command(verb_tok);
            return true;
        }
        self.pos += 1;
        let words = if object == "table" { 1 } else { 2 };
        let Some((family, path)) = self.object_path(words) else {
            let stmt = self.skip_statement();
            self.error(
                &verb_tok,
                format!(
                    "expected '{verb} {object} [FAMILY] {}'",
                    if words == 1 { "NAME" } else { "TABLE NAME" }
                ),
                stmt,
            );
            return true;
        };
        let loc = self.loc(&obj_tok);
        let creates = matches!(verb, "add" | "create" | "insert");
        let ti = match self.find_table(family, path[0]) {
            Some(ti) => ti,
            None if creates => self.table_index(family, path[0], loc),
            None => {
                // Flushing or deleting in a table the script never declared: it lives
                // in the kernel, and the script's text says nothing about it.
                self.skip_statement();
                return true;
            }
        };
        match (verb, object) {
            ("add" | "create", "chain") => {
                let ci = self.chain_of(ti, path[1], loc);
                if self.peek().is_some_and(|t| t.kind == Tok::LBrace) {
                    self.pos += 1;
                    self.chain_body(ti, ci, obj_tok, path[1]);
                }
            }
            ("add" | "create", "set" | "map") => {
                let kind = if object == "map" {
                    SetKind::Map
                } else {
                    SetKind::Set
                };
                let mut set = NftSet {
                    name: path[1].into(),
                    kind,
                    location: loc,
                    ..NftSet::default()
                };
                if self.peek().is_some_and(|t| t.kind == Tok::LBrace) {
                    self.pos += 1;
                    self.set_body(&mut set, obj_tok);
                }
                let sets = &mut self.ruleset.tables[ti].sets;
                match sets.iter_mut().find(|s| s.name == set.name) {
                    // `add` of an existing set keeps it (and its elements).
                    Some(existing) => existing.elements.append(&mut set.elements),
                    None => sets.push(set),
                }
            }
            ("add" | "insert", "rule") => {
                let ci = self.chain_of(ti, path[1], loc);
                if let Some(w) = self.peek_word()
                    && matches!(w, "position" | "index" | "handle")
                {
                    let at = self.toks[self.pos];
                    self.pos += 1;
                    if self.peek().is_some_and(|t| t.kind == Tok::Word) {
                        self.pos += 1;
                    }
                    self.note(
                        &at,
                        format!(
                            "'{w} N' is not followed: the rule is placed at the chain's {}",
                            if verb == "insert" { "start" } else { "end" }
                        ),
                        w,
                    );
                }
                if !self
                    .peek()
                    .is_some_and(|t| !matches!(t.kind, Tok::Newline | Tok::Semi | Tok::RBrace))
                {
                    self.error(
                        &obj_tok,
                        format!("expected a rule after '{verb} rule [FAMILY] TABLE CHAIN'"),
                        path[1],
                    );
                    self.end_of_command(verb_tok);
                    return true;
                }
                let before = self.ruleset.tables[ti].chains[ci].rules.len();
                self.rule(ti, ci);
                let rules = &mut self.ruleset.tables[ti].chains[ci].rules;
                if verb == "insert" && rules.len() > before {
                    rules.rotate_right(1);
                    renumber(rules);
                }
                return true;
            }
            ("add" | "create" | "delete" | "destroy", "element") => {
                let existing = self.ruleset.tables[ti]
                    .sets
                    .iter()
                    .position(|s| &*s.name == path[1]);
                let adding = matches!(verb, "add" | "create");
                let mut list = match existing {
                    // `delete element` lists keys only: read them as a plain set.
                    Some(si) if adding => NftSet {
                        name: path[1].into(),
                        kind: self.ruleset.tables[ti].sets[si].kind,
                        value_type: self.ruleset.tables[ti].sets[si].value_type.clone(),
                        ..NftSet::default()
                    },
                    _ => NftSet {
                        name: path[1].into(),
                        location: loc,
                        ..NftSet::default()
                    },
                };
                if self.peek().is_some_and(|t| t.kind == Tok::LBrace) {
                    self.pos += 1;
                    self.element_list(&mut list, obj_tok);
                } else {
                    let stmt = self.skip_statement();
                    self.error(&obj_tok, "expected '{ ELEMENT, ... }'", stmt);
                    return true;
                }
                let sets = &mut self.ruleset.tables[ti].sets;
                match (existing, verb) {
                    (Some(si), "add" | "create") => sets[si].elements.append(&mut list.elements),
                    (Some(si), _) => sets[si]
                        .elements
                        .retain(|e| !list.elements.iter().any(|d| d.key_text == e.key_text)),
                    // Elements of a set the script does not declare: it exists in the
                    // kernel; keep what is added under its name.
                    (None, "add" | "create") => sets.push(list),
                    (None, _) => {}
                }
            }
            ("flush", "chain") => {
                if let Some(&ci) = self.chain_index.get(&(ti, path[1])) {
                    self.ruleset.tables[ti].chains[ci].rules.clear();
                }
            }
            ("flush", "set" | "map") => {
                if let Some(set) = self.ruleset.tables[ti]
                    .sets
                    .iter_mut()
                    .find(|s| &*s.name == path[1])
                {
                    set.elements.clear();
                }
            }
            ("flush", "table") => {
                let table = &mut self.ruleset.tables[ti];
                table.chains.iter_mut().for_each(|c| c.rules.clear());
                table.sets.iter_mut().for_each(|s| s.elements.clear());
            }
            (_, "chain") => self.delete_chain(ti, path[1]),
            (_, "set" | "map") => self.ruleset.tables[ti].sets.retain(|s| &*s.name != path[1]),
            (_, "rule") => {
                let handle = match (self.peek_word(), self.toks.get(self.pos + 1)) {
                    (Some("handle"), Some(h)) => self.s(h).parse::<u64>().ok(),
                    _ => None,
                };
                if handle.is_some() {
                    self.pos += 2;
                }
                match (handle, self.chain_index.get(&(ti, path[1])).copied()) {
                    (Some(h), Some(ci)) => {
                        let rules = &mut self.ruleset.tables[ti].chains[ci].rules;
                        rules.retain(|r| match &r.body {
                            RuleBody::Nft(n) => n.handle != Some(h),
                            _ => true,
                        });
                        renumber(rules);
                    }
                    (None, _) => self.error(
                        &obj_tok,
                        "expected 'delete rule [FAMILY] TABLE CHAIN handle N'",
                        object,
                    ),
                    _ => {}
                }
            }
            _ => self.delete_table(ti),
        }
        self.end_of_command(verb_tok);
        true
    }

    /// `[FAMILY] NAME...`: `words` names after an optional family, up to a brace or the
    /// end of the statement.
    fn object_path(&mut self, words: usize) -> Option<(Family, [&'a str; 2])> {
        let mut found: Vec<&'a str> = Vec::with_capacity(3);
        while found.len() < words + 1 {
            match self.toks.get(self.pos + found.len()) {
                Some(t) if t.kind == Tok::Word => found.push(self.s(t)),
                _ => break,
            }
        }
        let has_family = found.len() > words && FAMILIES.contains(&found[0]);
        if found.len() < words {
            return None;
        }
        let family = match has_family {
            true => Family::parse(found[0]).unwrap_or(Family::Ip),
            false => Family::Ip,
        };
        let names = &found[usize::from(has_family)..usize::from(has_family) + words];
        self.pos += usize::from(has_family) + words;
        let first = unquote(names[0]);
        let second = names.get(1).map_or("", |n| unquote(n));
        Some((family, [first, second]))
    }

    /// After a command: nothing but the end of the statement may follow.
    fn end_of_command(&mut self, verb: Token) {
        let rest = self.skip_statement();
        if !rest.trim().is_empty() {
            let text = rest.to_string();
            self.error(
                &verb,
                format!("unexpected '{text}' after the command"),
                &text,
            );
        }
    }

    fn delete_chain(&mut self, ti: usize, name: &'a str) {
        if let Some(ci) = self.chain_index.remove(&(ti, name)) {
            self.dead_chains.insert((ti, ci));
            if self.deleted_names.insert((ti, name)) {
                self.ruleset.tables[ti].deleted_chains.push(name.into());
            }
        }
    }

    fn delete_table(&mut self, ti: usize) {
        self.dead_tables.insert(ti);
        self.chain_index.retain(|(t, _), _| *t != ti);
    }

    /// Drops what the script deleted (after reading: indexes no longer matter).
    fn remove_deleted(&mut self) {
        for (ti, table) in self.ruleset.tables.iter_mut().enumerate() {
            let mut ci = 0;
            table.chains.retain(|_| {
                ci += 1;
                !self.dead_chains.contains(&(ti, ci - 1))
            });
        }
        let mut ti = 0;
        self.ruleset.tables.retain(|_| {
            ti += 1;
            !self.dead_tables.contains(&(ti - 1))
        });
    }

    fn table(&mut self) {
        self.table_header(false);
    }

    /// `table [FAMILY] NAME {` ... `}`. From a script (`add table [FAMILY] NAME [{ .. }]`)
    /// the block is optional.
    fn table_header(&mut self, script: bool) {
        let kw = self.toks[self.pos];
        self.pos += 1;
        let mut family = Family::Ip;
        let first = self.peek_word();
        let second = self.toks.get(self.pos + 1).filter(|t| t.kind == Tok::Word);
        let name = match (first, second) {
            (Some(f), Some(n)) if FAMILIES.contains(&f) => {
                family = Family::parse(f).unwrap_or(Family::Ip);
                self.pos += 2;
                unquote(self.s(n))
            }
            (Some(n), _) => {
                self.pos += 1;
                unquote(n)
            }
            (None, _) => {
                let stmt = self.skip_statement();
                self.error(&kw, "expected 'table <family> <name> {'", stmt);
                return;
            }
        };
        let loc = self.loc(&kw);
        match self.peek() {
            Some(t) if t.kind == Tok::LBrace => self.pos += 1,
            // A script's `add table` needs no block.
            None if script => {
                self.table_index(family, name, loc);
                return;
            }
            Some(t) if script && matches!(t.kind, Tok::Newline | Tok::Semi | Tok::Comment) => {
                self.table_index(family, name, loc);
                return;
            }
            Some(t) => {
                let stmt = self.skip_statement();
                self.error(
                    &t,
                    format!("expected '{{' after 'table {family} {name}'"),
                    stmt,
                );
                return;
            }
            None => {
                self.truncated(Some(kw), "input ends after a table header");
                return;
            }
        }
        let ti = self.table_index(family, name, loc);
        self.table_body(ti, kw);
    }

    /// The live (not deleted) table `family name`.
    fn find_table(&self, family: Family, name: &str) -> Option<usize> {
        self.ruleset.tables.iter().enumerate().position(|(i, t)| {
            t.family == family && &*t.name == name && !self.dead_tables.contains(&i)
        })
    }

    /// The table `family name`, created when new.
    fn table_index(&mut self, family: Family, name: &str, loc: Location) -> usize {
        match self.find_table(family, name) {
            Some(i) => i,
            None => {
                self.ruleset
                    .tables
                    .push(Table::new(family, Backend::Nftables, name, loc));
                self.ruleset.tables.len() - 1
            }
        }
    }

    fn table_body(&mut self, ti: usize, kw: Token) {
        loop {
            self.skip_blank();
            let Some(t) = self.peek() else {
                let name = self.ruleset.tables[ti].name.clone();
                self.truncated(
                    Some(kw),
                    &format!("input ends inside table '{name}' (missing '}}'): truncated?"),
                );
                return;
            };
            match t.kind {
                Tok::RBrace => {
                    self.pos += 1;
                    return;
                }
                Tok::Word => {
                    let w = self.s(&t);
                    match w {
                        "chain" => self.chain(ti),
                        "set" | "map" => self.set(ti),
                        "comment" | "flags" => {
                            let stmt = self.skip_statement();
                            self.ruleset.tables[ti].attributes.push(stmt.into());
                        }
                        _ if OBJECTS.contains(&w) => {
                            let stmt = self.skip_statement();
                            self.ruleset.tables[ti]
                                .attributes
                                .push(collapse(stmt).into());
                        }
                        _ if is_elision(w) => {
                            self.truncated(
                                Some(t),
                                "input is truncated here (an elision line, not nft syntax)",
                            );
                            self.skip_statement();
                        }
                        "nft" | "iptables" | "ip6tables" | "sudo" => {
                            let stmt = self.skip_statement();
                            self.error(
                                &t,
                                "a shell command inside a table block: expected 'chain', 'set', 'map', 'flowtable', an object or '}'",
                                stmt,
                            );
                        }
                        _ => {
                            let stmt = self.skip_statement();
                            self.error(
                                &t,
                                format!("unexpected '{w}' in table: expected 'chain', 'set', 'map', 'flowtable', 'comment', an object or '}}'"),
                                stmt,
                            );
                        }
                    }
                }
                _ => {
                    self.pos += 1;
                    let s = self.s(&t);
                    self.error(
                        &t,
                        "unexpected token in table: expected 'chain', 'set', 'map' or '}'",
                        s,
                    );
                }
            }
        }
    }

    /// `chain|set|map NAME {` -> name, or `None` after a diagnostic.
    fn block_header(&mut self, what: &str) -> Option<(Token, &'a str)> {
        let kw = self.toks[self.pos];
        self.pos += 1;
        let Some(name) = self.peek_word() else {
            let stmt = self.skip_statement();
            self.error(&kw, format!("expected '{what} <name> {{'"), stmt);
            return None;
        };
        self.pos += 1;
        match self.peek() {
            Some(t) if t.kind == Tok::LBrace => {
                self.pos += 1;
                Some((kw, unquote(name)))
            }
            Some(t) => {
                let stmt = self.skip_statement();
                self.error(&t, format!("expected '{{' after '{what} {name}'"), stmt);
                None
            }
            None => {
                self.truncated(Some(kw), &format!("input ends after '{what} {name}'"));
                None
            }
        }
    }

    fn chain(&mut self, ti: usize) {
        let Some((kw, name)) = self.block_header("chain") else {
            return;
        };
        let ci = self.chain_of(ti, name, self.loc(&kw));
        self.chain_body(ti, ci, kw, name);
    }

    /// The chain `name` of table `ti`, created when new.
    fn chain_of(&mut self, ti: usize, name: &'a str, loc: Location) -> usize {
        if let Some(&ci) = self.chain_index.get(&(ti, name)) {
            return ci;
        }
        let table = &mut self.ruleset.tables[ti];
        if self.deleted_names.remove(&(ti, name)) {
            // Deleted earlier and added again: it exists.
            table.deleted_chains.retain(|d| &**d != name);
        }
        table.chains.push(Chain::new(name, None, loc));
        let ci = table.chains.len() - 1;
        self.chain_index.insert((ti, name), ci);
        ci
    }

    /// A chain block's declarations and rules, after its `{`, through its `}`.
    fn chain_body(&mut self, ti: usize, ci: usize, kw: Token, name: &str) {
        loop {
            self.skip_blank();
            let Some(t) = self.peek() else {
                self.truncated(
                    Some(kw),
                    &format!("input ends inside chain '{name}' (missing '}}'): truncated?"),
                );
                return;
            };
            if t.kind == Tok::RBrace {
                self.pos += 1;
                return;
            }
            let w = if t.kind == Tok::Word { self.s(&t) } else { "" };
            let no_rules = self.ruleset.tables[ti].chains[ci].rules.is_empty();
            match w {
                "type" => self.base_chain(ti, ci),
                "policy" => self.policy(ti, ci),
                "devices" | "device" if no_rules => {
                    self.skip_statement();
                }
                "comment" | "flags" if no_rules => {
                    // Chain comment/flags: the model has no field for them.
                    self.skip_statement();
                }
                _ if is_elision(w) => {
                    self.truncated(
                        Some(t),
                        "input is truncated here (an elision line, not nft syntax)",
                    );
                    self.skip_statement();
                }
                _ => self.rule(ti, ci),
            }
        }
    }

    /// `type nat hook prerouting [device X | devices = {..}] priority dstnat; policy accept;`
    fn base_chain(&mut self, ti: usize, ci: usize) {
        let start = self.pos;
        let stmt = self.skip_statement();
        let toks: Vec<Token> = self.toks[start..self.pos]
            .iter()
            .filter(|t| !matches!(t.kind, Tok::Comment | Tok::Newline))
            .copied()
            .collect();
        let words: Vec<&str> = toks.iter().map(|t| self.s(t)).collect();
        let mut chain_type = None;
        let mut hook = None;
        let mut priority = None;
        let mut i = 0;
        while i < words.len() {
            match words[i] {
                "type" if i + 1 < words.len() => {
                    let ty = words[i + 1];
                    if !CHAIN_TYPES.contains(&ty) {
                        self.error(
                            &toks[i + 1],
                            format!("unknown chain type '{ty}': expected filter, nat or route"),
                            stmt,
                        );
                    }
                    chain_type = Some(ty);
                    i += 2;
                }
                "hook" if i + 1 < words.len() => {
                    let h = words[i + 1];
                    if !HOOKS.contains(&h) {
                        self.error(
                            &toks[i + 1],
                            format!("unknown hook '{h}': expected prerouting, input, forward, output, postrouting, ingress or egress"),
                            stmt,
                        );
                    }
                    hook = Some(Hook::parse_nft(h));
                    i += 2;
                }
                "device" if i + 1 < words.len() => i += 2,
                "devices" => {
                    // devices = { "a", "b" }
                    i += 1;
                    let mut depth = 0;
                    while i < words.len() {
                        match words[i] {
                            "{" => depth += 1,
                            "}" => {
                                depth -= 1;
                                if depth <= 0 {
                                    i += 1;
                                    break;
                                }
                            }
                            _ => {}
                        }
                        i += 1;
                    }
                }
                "priority" if i + 1 < words.len() => {
                    let p = &words[i + 1..];
                    let first = p[0];
                    if !(PRIORITY_NAMES.contains(&first) || first.parse::<i64>().is_ok()) {
                        self.error(
                            &toks[i + 1],
                            format!("unknown priority '{first}': expected a number or raw, mangle, dstnat, filter, security, srcnat, out"),
                            stmt,
                        );
                    }
                    let from = toks[i + 1].start;
                    let to = toks[toks.len() - 1].end;
                    priority = Some(collapse(&self.text[from..to]));
                    i = words.len();
                }
                other => {
                    self.error(
                        &toks[i],
                        format!("unexpected '{other}' in base chain declaration: expected 'type T hook H priority P'"),
                        stmt,
                    );
                    i = words.len();
                }
            }
        }
        let Some(hook) = hook else {
            self.error(
                &toks[0],
                "base chain declaration without a hook: expected 'type T hook H priority P'",
                stmt,
            );
            return;
        };
        let chain = &mut self.ruleset.tables[ti].chains[ci];
        let policy = chain.base.as_ref().and_then(|b| b.policy.clone());
        chain.base = Some(Box::new(BaseChain {
            hook,
            policy,
            counters: None,
            chain_type: chain_type.map(Into::into),
            priority: priority.map(Into::into),
        }));
    }

    fn policy(&mut self, ti: usize, ci: usize) {
        let kw = self.toks[self.pos];
        let start = self.pos;
        let stmt = self.skip_statement();
        let p = self.toks[start + 1..self.pos]
            .iter()
            .find(|t| t.kind == Tok::Word)
            .map(|t| self.s(t));
        let policy = match p {
            Some(p @ ("accept" | "drop")) => Policy::parse(p),
            Some(p) => {
                self.error(
                    &kw,
                    format!("unknown policy '{p}': expected accept or drop"),
                    stmt,
                );
                Policy::Other(p.to_string())
            }
            None => {
                self.error(&kw, "expected 'policy accept|drop'", stmt);
                return;
            }
        };
        let chain = &mut self.ruleset.tables[ti].chains[ci];
        match &mut chain.base {
            Some(b) => b.policy = Some(policy),
            None => self.error(
                &kw,
                "policy on a chain without 'type ... hook ...': only base chains have a policy",
                stmt,
            ),
        }
    }

    fn rule(&mut self, ti: usize, ci: usize) {
        let Some(first) = self.peek() else { return };
        let mut buf = std::mem::take(&mut self.rule_buf);
        buf.clear();
        let mut handle = None;
        let mut depth = 0usize;
        let mut ended = true;
        while let Some(t) = self.peek() {
            match t.kind {
                Tok::Newline | Tok::Semi if depth == 0 => break,
                Tok::RBrace if depth == 0 => break,
                Tok::LBrace => depth += 1,
                Tok::RBrace => depth -= 1,
                Tok::Comment => {
                    if let Some(h) = self.s(&t).strip_prefix('#').map(str::trim)
                        && let Some(n) = h.strip_prefix("handle ")
                    {
                        handle = n.trim().parse().ok();
                    }
                }
                _ => {}
            }
            if !matches!(t.kind, Tok::Comment | Tok::Newline) {
                buf.push(t);
            }
            self.pos += 1;
            if self.pos >= self.toks.len() && depth > 0 {
                ended = false;
            }
        }
        if buf.is_empty() {
            // A lone comma or similar: skip it.
            self.pos += 1;
            self.rule_buf = buf;
            return;
        }
        if !ended {
            self.truncated(
                Some(first),
                "input ends inside a rule's braces (missing '}'): truncated?",
            );
        }
        let last = buf[buf.len() - 1];
        let text = collapse(&self.text[first.start..last.end]);
        let mut sp = StmtParser {
            r: self,
            toks: &buf,
            i: 0,
        };
        let statements = sp.statements();
        let rule = NftRule { statements, handle };
        let counters = rule.counters();
        let chain = &mut self.ruleset.tables[ti].chains[ci];
        chain.rules.push(Rule {
            position: chain.rules.len() as u32 + 1,
            location: Location {
                line: first.line,
                column: column(self.text, first.line_start, first.start),
            },
            counters,
            text: text.into(),
            body: RuleBody::Nft(Box::new(rule)),
        });
        self.rule_buf = buf;
    }

    fn set(&mut self, ti: usize) {
        let kind = if self.peek_word() == Some("map") {
            SetKind::Map
        } else {
            SetKind::Set
        };
        let handle = self.toks.get(self.pos + 3).and_then(|t| self.handle_of(t));
        let Some((kw, name)) = self.block_header(if kind == SetKind::Map { "map" } else { "set" })
        else {
            return;
        };
        let mut set = NftSet {
            name: name.into(),
            kind,
            handle,
            location: self.loc(&kw),
            ..NftSet::default()
        };
        self.set_body(&mut set, kw);
        self.ruleset.tables[ti].sets.push(set);
    }

    /// A set or map block's declarations and elements, after its `{`, through its `}`.
    fn set_body(&mut self, set: &mut NftSet, kw: Token) {
        let name = set.name.clone();
        let kind = set.kind;
        loop {
            self.skip_blank();
            let Some(t) = self.peek() else {
                self.truncated(
                    Some(kw),
                    &format!("input ends inside set '{name}' (missing '}}'): truncated?"),
                );
                break;
            };
            if t.kind == Tok::RBrace {
                self.pos += 1;
                break;
            }
            let w = if t.kind == Tok::Word { self.s(&t) } else { "" };
            match w {
                "type" | "typeof" => {
                    self.pos += 1;
                    let stmt = self.skip_statement();
                    let (k, v) = match stmt.rsplit_once(" : ") {
                        Some((k, v)) => (k.trim(), Some(v.trim())),
                        None => (stmt.trim(), None),
                    };
                    set.key_type = if w == "typeof" {
                        format!("typeof {k}").into()
                    } else {
                        k.into()
                    };
                    set.value_type = v.map(Into::into);
                    if kind == SetKind::Map && v.is_none() {
                        self.error(
                            &t,
                            "map without a value type: expected 'type KEY : VALUE'",
                            stmt,
                        );
                    }
                }
                "flags" => {
                    self.pos += 1;
                    let stmt = self.skip_statement();
                    set.flags = stmt
                        .split(',')
                        .map(str::trim)
                        .filter(|f| !f.is_empty())
                        .map(Into::into)
                        .collect();
                }
                "comment" => {
                    self.pos += 1;
                    let stmt = self.skip_statement();
                    set.comment = Some(unquote(stmt.trim()).into());
                }
                "elements" => self.elements(set),
                _ if is_elision(w) => {
                    self.truncated(
                        Some(t),
                        "input is truncated here (an elision line, not nft syntax)",
                    );
                    self.skip_statement();
                }
                "timeout" | "gc-interval" | "size" | "policy" | "auto-merge" | "counter"
                | "quota" | "limit" | "last" | "ct" => {
                    let stmt = self.skip_statement();
                    set.attributes.push(collapse(stmt).into());
                }
                _ => {
                    let stmt = self.skip_statement();
                    self.error(
                        &t,
                        format!("unexpected '{w}' in set: expected type, flags, elements, comment or '}}'"),
                        stmt,
                    );
                }
            }
        }
    }

    fn handle_of(&self, t: &Token) -> Option<u64> {
        if t.kind != Tok::Comment {
            return None;
        }
        self.s(t)
            .strip_prefix('#')?
            .trim()
            .strip_prefix("handle ")?
            .trim()
            .parse()
            .ok()
    }

    /// `elements = { e1, e2 : v, ... }` spanning any number of lines.
    fn elements(&mut self, set: &mut NftSet) {
        let kw = self.toks[self.pos];
        self.pos += 1;
        if self.peek_word() == Some("=") {
            self.pos += 1;
        }
        match self.peek() {
            Some(t) if t.kind == Tok::LBrace => self.pos += 1,
            _ => {
                let stmt = self.skip_statement();
                self.error(&kw, "expected 'elements = {'", stmt);
                return;
            }
        }
        self.element_list(set, kw);
    }

    /// `e1, e2 : v, ... }` after the list's `{`, through its `}`.
    fn element_list(&mut self, set: &mut NftSet, kw: Token) {
        let mut elem: Vec<Token> = Vec::new();
        let mut depth = 0usize;
        let mut last_was_comma = false;
        let mut comma_tok = None;
        loop {
            let Some(t) = self.peek() else {
                self.truncated(
                    Some(kw),
                    "input ends inside 'elements = {' (missing '}'): truncated?",
                );
                break;
            };
            self.pos += 1;
            match t.kind {
                Tok::Newline | Tok::Comment => continue,
                Tok::Comma if depth == 0 => {
                    if !elem.is_empty() {
                        self.element(set, &elem);
                        elem.clear();
                    }
                    last_was_comma = true;
                    comma_tok = Some(t);
                    continue;
                }
                Tok::RBrace if depth == 0 => {
                    if !elem.is_empty() {
                        self.element(set, &elem);
                    } else if last_was_comma && let Some(c) = comma_tok {
                        self.error(
                            &c,
                            "trailing comma before '}': `nft -f` accepts it but `nft list` never prints one, so this text was edited by hand",
                            ",",
                        );
                    }
                    break;
                }
                Tok::LBrace => depth += 1,
                Tok::RBrace => depth -= 1,
                _ => {}
            }
            last_was_comma = false;
            elem.push(t);
        }
    }

    fn element(&mut self, set: &mut NftSet, toks: &[Token]) {
        let words: Vec<&str> = toks.iter().map(|t| self.s(t)).collect();
        let colon = words.iter().position(|w| *w == ":");
        let key_end = colon.unwrap_or(words.len());
        // Element options after the key: comment, timeout, expires, counter ...
        let opt = words[..key_end]
            .iter()
            .position(|w| {
                matches!(
                    *w,
                    "comment" | "timeout" | "expires" | "counter" | "quota" | "limit" | "last"
                )
            })
            .unwrap_or(key_end);
        let mut comment = None;
        if let Some(c) = words[opt..key_end].iter().position(|w| *w == "comment")
            && let Some(text) = words.get(opt + c + 1)
        {
            comment = Some(unquote(text).into());
        }
        let key_text = if opt > 0 {
            collapse(&self.text[toks[0].start..toks[opt - 1].end])
        } else {
            String::new()
        };
        let key = value_of_words(&words[..opt]);
        let (value, verdict) = match colon {
            Some(c) if c + 1 < words.len() => {
                let vt = collapse(&self.text[toks[c + 1].start..toks[toks.len() - 1].end]);
                let verdict = Verdict::parse(&words[c + 1..]);
                if set.is_verdict_map() && verdict.is_none() {
                    self.error(
                        &toks[c + 1],
                        "verdict map element value is not a verdict: expected accept, drop, return, continue, jump CHAIN or goto CHAIN",
                        &vt,
                    );
                }
                (Some(vt.into()), verdict)
            }
            Some(_) => {
                self.error(&toks[0], "expected a value after ':'", &key_text);
                (None, None)
            }
            None => {
                if set.kind == SetKind::Map {
                    self.error(
                        &toks[0],
                        "map element without a value: expected 'KEY : VALUE'",
                        &key_text,
                    );
                }
                (None, None)
            }
        };
        set.elements.push(SetElement {
            key_text: key_text.into(),
            key,
            value,
            verdict,
            comment,
        });
    }
}

/// A value from words already split on commas: a concatenation when they are
/// joined by `.`, otherwise one atom (or an expression if several words).
fn value_of_words(words: &[&str]) -> Value {
    match words {
        [] => Value::Single(String::new()),
        [w] => Value::atom(w),
        _ => {
            if words.len() % 2 == 1 && words.iter().skip(1).step_by(2).all(|w| *w == ".") {
                Value::Concat(words.iter().step_by(2).map(|w| Value::atom(w)).collect())
            } else {
                Value::Expr(words.join(" "))
            }
        }
    }
}

/// Text with every whitespace run (including newlines) turned into one space.
/// Borrow-free fast path when there is nothing to collapse.
fn collapse(s: &str) -> String {
    let s = s.trim();
    if !s.contains(['\n', '\t', '\r']) && !s.contains("  ") {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut in_quote = false;
    let mut prev_space = false;
    for c in s.chars() {
        if c == '"' {
            in_quote = !in_quote;
        }
        if !in_quote && c.is_whitespace() {
            if !prev_space {
                out.push(' ');
            }
            prev_space = true;
        } else {
            out.push(c);
            prev_space = false;
        }
    }
    out
}

const PROTOS: &[&str] = &[
    "ip", "ip6", "tcp", "udp", "udplite", "sctp", "dccp", "th", "icmp", "icmpv6", "igmp", "ah",
    "esp", "comp", "ipcomp", "ether", "vlan", "arp", "gre", "gretap", "vxlan", "geneve", "hbh",
    "frag", "dst", "mh", "srh", "rt0", "rt2", "rt4", "ll", "nh", "dhcp",
];
const META_BARE: &[&str] = &[
    "iifname",
    "oifname",
    "iif",
    "oif",
    "iiftype",
    "oiftype",
    "iifgroup",
    "oifgroup",
    "iifkind",
    "oifkind",
    "skuid",
    "skgid",
    "rtclassid",
    "cpu",
    "cgroup",
    "mark",
    "pkttype",
    "ibrname",
    "obrname",
    "ibriport",
    "obriport",
    "ibrpvid",
    "ibrvproto",
    "sdif",
    "sdifname",
    "hour",
    "day",
    "time",
    "nftrace",
    "priority",
    "length",
    "protocol",
    "nfproto",
    "l4proto",
    "secpath",
    "random",
    "broute",
];
const OTHER_STMTS: &[&str] = &[
    "limit",
    "quota",
    "notrack",
    "flow",
    "synproxy",
    "tproxy",
    "dup",
    "fwd",
    "meter",
    "add",
    "update",
    "delete",
    "last",
    "set",
    "secmark",
    "flowtable",
];
const SELECTOR_HEADS: &[&str] = &[
    "meta", "ct", "numgen", "jhash", "symhash", "fib", "socket", "osf", "ipsec", "rt", "exthdr",
    "inner",
];
const TCP_OPT_FIELDS: &[&str] = &[
    "kind", "length", "size", "count", "left", "right", "tsval", "tsecr", "value", "subtype",
];

fn is_selector_start(w: &str) -> bool {
    PROTOS.contains(&w)
        || META_BARE.contains(&w)
        || SELECTOR_HEADS.contains(&w)
        || (w.starts_with('@') && w.contains(','))
}

fn is_stmt_start(w: &str) -> bool {
    is_selector_start(w)
        || OTHER_STMTS.contains(&w)
        || matches!(
            w,
            "accept"
                | "drop"
                | "continue"
                | "return"
                | "jump"
                | "goto"
                | "queue"
                | "reject"
                | "counter"
                | "comment"
                | "log"
                | "dnat"
                | "snat"
                | "masquerade"
                | "redirect"
                | "xt"
                | "reset"
        )
}

/// Parses the statements of one rule from its tokens (no newlines/comments).
struct StmtParser<'r, 'a> {
    r: &'r mut Reader<'a>,
    toks: &'r [Token],
    i: usize,
}

impl<'a> StmtParser<'_, 'a> {
    fn w(&self, i: usize) -> Option<&'a str> {
        self.toks.get(i).map(|t| self.r.s(t))
    }

    fn cur(&self) -> Option<&'a str> {
        self.w(self.i)
    }

    fn cur_is_word(&self) -> bool {
        self.toks.get(self.i).is_some_and(|t| t.kind == Tok::Word)
    }

    fn bump_word(&mut self, after: usize) -> bool {
        if self.cur_is_word() {
            self.i += 1;
            true
        } else {
            let t = self.toks[after.min(self.toks.len() - 1)];
            let text = self.span_text(after, self.i.max(after + 1));
            self.r.error(
                &t,
                format!("expected a word after '{}'", self.r.s(&t)),
                &text,
            );
            false
        }
    }

    fn span_text(&self, from: usize, to: usize) -> String {
        if from >= to || from >= self.toks.len() {
            return String::new();
        }
        let to = to.min(self.toks.len());
        collapse(&self.r.text[self.toks[from].start..self.toks[to - 1].end])
    }

    fn statements(&mut self) -> Vec<Statement> {
        let mut out = Vec::new();
        while self.i < self.toks.len() {
            let start = self.i;
            let kind = self.statement();
            if self.i == start {
                self.i += 1; // always make progress
            }
            out.push(Statement {
                text: self.span_text(start, self.i),
                kind,
            });
        }
        out
    }

    /// Skips a balanced `{ ... }` starting at the current `{`.
    fn skip_braces(&mut self) {
        let mut depth = 0usize;
        while let Some(t) = self.toks.get(self.i) {
            self.i += 1;
            match t.kind {
                Tok::LBrace => depth += 1,
                Tok::RBrace => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        return;
                    }
                }
                _ => {}
            }
        }
    }

    /// Consumes words until the next statement start (braces balanced).
    fn skip_args(&mut self) {
        while let Some(t) = self.toks.get(self.i) {
            match t.kind {
                Tok::LBrace => self.skip_braces(),
                Tok::Word if is_stmt_start(self.r.s(t)) => return,
                _ => self.i += 1,
            }
        }
    }

    fn statement(&mut self) -> StatementKind {
        let t = self.toks[self.i];
        let w = self.r.s(&t);
        if t.kind != Tok::Word {
            self.i += 1;
            self.r.error(
                &t,
                format!("unexpected '{w}': expected a match, a statement or a verdict"),
                w,
            );
            return StatementKind::Other(w.to_string());
        }
        match w {
            "accept" | "drop" | "continue" | "return" => {
                self.i += 1;
                StatementKind::Verdict(Verdict::parse(&[w]).expect("verdict word"))
            }
            "jump" | "goto" => {
                self.i += 1;
                match self.toks.get(self.i) {
                    Some(n) if n.kind == Tok::LBrace => {
                        self.skip_braces();
                        StatementKind::Other(format!("{w} {{ anonymous chain }}"))
                    }
                    Some(n) if n.kind == Tok::Word => {
                        self.i += 1;
                        let target = unquote(self.r.s(n)).to_string();
                        StatementKind::Verdict(if w == "jump" {
                            Verdict::Jump(target)
                        } else {
                            Verdict::Goto(target)
                        })
                    }
                    _ => {
                        self.r
                            .error(&t, format!("expected a chain name after '{w}'"), w);
                        StatementKind::Other(w.to_string())
                    }
                }
            }
            "queue" => {
                self.i += 1;
                let from = self.i;
                while let Some(o) = self.cur() {
                    match o {
                        "num" | "to" => {
                            self.i += 1;
                            self.value_expr();
                        }
                        "flags" => self.i = (self.i + 2).min(self.toks.len()),
                        "bypass" | "fanout" | "bypass,fanout" | "fanout,bypass" => self.i += 1,
                        _ => break,
                    }
                }
                StatementKind::Verdict(Verdict::Queue(self.span_text(from, self.i)))
            }
            "reject" => {
                self.i += 1;
                let from = self.i;
                if self.cur() == Some("with") {
                    self.i += 1;
                    let proto = self.cur();
                    self.i += 1;
                    match (proto, self.cur()) {
                        (Some("tcp"), Some("reset")) => self.i += 1,
                        (_, Some("type")) => self.i += 2,
                        (_, Some(_)) if self.cur_is_word() => self.i += 1,
                        _ => {}
                    }
                    self.i = self.i.min(self.toks.len());
                }
                let with = (self.i > from).then(|| self.span_text(from + 1, self.i));
                StatementKind::Verdict(Verdict::Reject(with))
            }
            "counter" => {
                self.i += 1;
                if self.cur() == Some("packets") && self.w(self.i + 2) == Some("bytes") {
                    let p = self.w(self.i + 1).and_then(|s| s.parse().ok());
                    let b = self.w(self.i + 3).and_then(|s| s.parse().ok());
                    self.i = (self.i + 4).min(self.toks.len());
                    match (p, b) {
                        (Some(packets), Some(bytes)) => {
                            StatementKind::Counter(Some(Counters { packets, bytes }))
                        }
                        _ => {
                            self.r.error(
                                &t,
                                "expected 'counter packets N bytes N' with numbers",
                                &self.span_text(self.i - 4, self.i),
                            );
                            StatementKind::Counter(None)
                        }
                    }
                } else if self.cur() == Some("name") {
                    // `counter name "c"` or `counter name ip saddr map { ... }`
                    self.i += 1;
                    self.value_expr();
                    StatementKind::Other("counter".into())
                } else {
                    StatementKind::Counter(None)
                }
            }
            "comment" => {
                self.i += 1;
                match self.cur() {
                    Some(c) if self.cur_is_word() => {
                        self.i += 1;
                        StatementKind::Comment(unquote(c).to_string())
                    }
                    _ => {
                        self.r.error(&t, "expected a string after 'comment'", w);
                        StatementKind::Other(w.into())
                    }
                }
            }
            "log" => {
                self.i += 1;
                let from = self.i;
                while let Some(o) = self.cur() {
                    match o {
                        "prefix" | "level" | "group" | "snaplen" | "queue-threshold" => {
                            self.i = (self.i + 2).min(self.toks.len())
                        }
                        "flags" => {
                            let n = if matches!(self.w(self.i + 1), Some("tcp" | "ip")) {
                                3
                            } else {
                                2
                            };
                            self.i = (self.i + n).min(self.toks.len());
                        }
                        _ => break,
                    }
                }
                StatementKind::Log {
                    args: self.span_text(from, self.i),
                }
            }
            "dnat" | "snat" | "masquerade" | "redirect" => self.nat(w),
            "reset" => {
                // `reset tcp option fastopen`
                self.i += 1;
                self.selector();
                StatementKind::Other(w.to_string())
            }
            "xt" => {
                self.i = (self.i + 3).min(self.toks.len());
                self.r.note(
                    &t,
                    "iptables-nft compat expression (xt): its match/target options are opaque to nft and to plumb",
                    &self.span_text(self.i - 3, self.i),
                );
                StatementKind::Other("xt".into())
            }
            "flow" => {
                // `flow add @ft` / `flow offload @ft`
                self.i += 1;
                if matches!(self.cur(), Some("add" | "offload")) {
                    self.i += 1;
                }
                self.skip_args();
                StatementKind::Other(w.to_string())
            }
            _ if OTHER_STMTS.contains(&w) => {
                self.i += 1;
                if self.cur() == Some("name") {
                    // Object reference: `limit name "x"`, `quota name ip saddr map @m`.
                    self.i += 1;
                    self.value_expr();
                }
                if matches!(self.cur(), Some("ip" | "ip6"))
                    && matches!(self.w(self.i + 1), Some("to"))
                {
                    self.i += 1;
                }
                if self.cur() == Some("to") && self.w(self.i + 1).is_some_and(is_selector_start) {
                    self.i += 1;
                    self.value_expr();
                }
                self.skip_args();
                StatementKind::Other(w.to_string())
            }
            _ if is_selector_start(w) => self.matchlike(),
            _ => {
                self.i += 1;
                let from = self.i - 1;
                self.skip_args();
                let text = self.span_text(from, self.i);
                self.r.error(
                    &t,
                    format!("unknown statement '{w}': expected a match (ip, tcp, meta, ct ...), a statement (counter, log, dnat ...) or a verdict"),
                    &text,
                );
                StatementKind::Other(w.to_string())
            }
        }
    }

    fn nat(&mut self, w: &str) -> StatementKind {
        let kind = NatKind::parse(w).expect("nat word");
        self.i += 1;
        let from = self.i;
        if matches!(self.cur(), Some("ip" | "ip6"))
            && matches!(self.w(self.i + 1), Some("to" | "prefix" | "addr"))
        {
            self.i += 1;
        }
        if self.cur() == Some("prefix") {
            self.i += 1;
        }
        if self.cur() == Some("addr") && self.w(self.i + 1) == Some(".") {
            self.i = (self.i + 3).min(self.toks.len());
        }
        if self.cur() == Some("to") {
            self.i += 1;
            self.value_expr();
        }
        while let Some(f) = self.cur() {
            if !f.is_empty()
                && f.split(',')
                    .all(|x| matches!(x, "random" | "fully-random" | "persistent" | "netmap"))
            {
                self.i += 1;
            } else {
                break;
            }
        }
        StatementKind::Nat {
            kind,
            args: self.span_text(from, self.i),
        }
    }

    /// A selector, possibly concatenated (`a . b . c`) and with bit operations.
    fn selector_expr(&mut self) -> bool {
        if !self.selector() {
            return false;
        }
        // `ip saddr . "lo" @s`: constants may be concatenated too.
        while self.cur() == Some(".") && self.i + 1 < self.toks.len() {
            self.i += 1;
            if !self.selector() {
                self.value_atom();
            }
        }
        self.bitops();
        true
    }

    /// `& 0xff | meta mark >> 2 ...`: operands are selectors or values.
    fn bitops(&mut self) {
        // nft accepts the operator words too (`mark and 0x4000`, kube-proxy's scripts).
        while matches!(
            self.cur(),
            Some("&" | "|" | "^" | "<<" | ">>" | "and" | "or" | "xor" | "lshift" | "rshift")
        ) && self.i + 1 < self.toks.len()
        {
            self.i += 1;
            if !self.selector() {
                self.value_atom();
            }
        }
    }

    fn selector(&mut self) -> bool {
        let Some(w) = self.cur() else { return false };
        if !self.cur_is_word() {
            return false;
        }
        let at = self.i;
        match w {
            "meta" => {
                self.i += 1;
                self.bump_word(at);
            }
            "ct" => {
                self.i += 1;
                if matches!(self.cur(), Some("original" | "reply")) {
                    self.i += 1;
                }
                let key = self.cur();
                if self.bump_word(at) && matches!(key, Some("ip" | "ip6")) {
                    self.bump_word(at);
                }
            }
            "numgen" | "symhash" | "jhash" => {
                self.i += 1;
                if w == "numgen" {
                    self.bump_word(at);
                } else if w == "jhash" {
                    self.selector_expr();
                }
                while matches!(self.cur(), Some("mod" | "seed" | "offset")) {
                    self.i += 1;
                    self.bump_word(at);
                }
            }
            "fib" => {
                self.i += 1;
                self.bump_word(at);
                while self.cur() == Some(".") {
                    self.i += 1;
                    self.bump_word(at);
                }
                self.bump_word(at);
            }
            "socket" => {
                self.i += 1;
                let key = self.cur();
                self.bump_word(at);
                if key == Some("cgroupv2") && self.cur() == Some("level") {
                    self.i += 1;
                    self.bump_word(at);
                }
            }
            "osf" => {
                self.i += 1;
                if self.cur() == Some("ttl") {
                    self.i += 2;
                }
                self.bump_word(at);
            }
            "ipsec" => {
                self.i += 1;
                self.bump_word(at);
                if self.cur() == Some("spnum") {
                    self.i += 2;
                }
                let key = self.cur();
                if self.bump_word(at) && matches!(key, Some("ip" | "ip6")) {
                    self.bump_word(at);
                }
            }
            "rt" => {
                self.i += 1;
                let key = self.cur();
                if self.bump_word(at) && matches!(key, Some("ip" | "ip6")) {
                    self.bump_word(at);
                }
            }
            "exthdr" | "inner" => {
                self.i += 1;
                self.bump_word(at);
                self.bump_word(at);
            }
            _ if META_BARE.contains(&w) => self.i += 1,
            _ if w.starts_with('@') && w.contains(',') => self.i += 1,
            _ if PROTOS.contains(&w) => {
                self.i += 1;
                match self.cur() {
                    Some("option") if matches!(w, "tcp" | "ip") => {
                        self.i += 1;
                        self.bump_word(at);
                        if self.cur().is_some_and(|f| TCP_OPT_FIELDS.contains(&f)) {
                            self.i += 1;
                        }
                    }
                    Some("chunk") if w == "sctp" => {
                        self.i += 1;
                        self.bump_word(at);
                        if self
                            .cur()
                            .is_some_and(|f| !is_stmt_start(f) && f.contains('-'))
                        {
                            self.i += 1;
                        }
                    }
                    Some(f)
                        if PROTOS.contains(&f)
                            && matches!(w, "vxlan" | "geneve" | "gre" | "gretap") =>
                    {
                        self.selector();
                    }
                    _ => {
                        self.bump_word(at);
                    }
                }
            }
            _ => return false,
        }
        self.i = self.i.min(self.toks.len());
        true
    }

    /// One value: a word, `{ set }`, `@name`, `( expr )`; then `. value` and `/ mask`.
    fn value(&mut self) -> Value {
        let v = self.value_atom();
        let mut parts = vec![v];
        while self.cur() == Some(".") {
            self.i += 1;
            parts.push(self.value_atom());
        }
        let mut v = if parts.len() == 1 {
            parts.pop().expect("one")
        } else {
            Value::Concat(parts)
        };
        // `established | related`, `ack | urg`: flag combinations.
        if matches!(self.cur(), Some("|" | "&" | "^")) && self.i + 1 < self.toks.len() {
            let from = self.i - 1;
            while matches!(self.cur(), Some("|" | "&" | "^")) && self.i + 1 < self.toks.len() {
                self.i += 1;
                self.value_atom();
            }
            v = Value::Expr(self.span_text(from, self.i));
        }
        if self.cur() == Some("/") {
            let from = self.i - 1;
            self.i = (self.i + 2).min(self.toks.len());
            v = Value::Expr(self.span_text(from, self.i));
        }
        v
    }

    fn value_atom(&mut self) -> Value {
        let Some(t) = self.toks.get(self.i).copied() else {
            let last = self.toks[self.toks.len() - 1];
            self.r.error(
                &last,
                "expected a value at the end of the rule",
                self.r.s(&last),
            );
            return Value::Single(String::new());
        };
        match t.kind {
            Tok::LBrace => self.set_literal(),
            Tok::Word => {
                let w = self.r.s(&t);
                self.i += 1;
                if w.starts_with('(') {
                    let from = self.i - 1;
                    let mut depth = w.matches('(').count() as i64 - w.matches(')').count() as i64;
                    while depth > 0 && self.i < self.toks.len() {
                        let x = self.r.s(&self.toks[self.i]);
                        depth += x.matches('(').count() as i64 - x.matches(')').count() as i64;
                        self.i += 1;
                    }
                    return Value::Expr(self.span_text(from, self.i));
                }
                if w == "over" || w == "until" {
                    if self.cur_is_word() {
                        self.i += 1;
                    }
                    return Value::Single(self.span_text(self.i - 2, self.i));
                }
                Value::atom(w)
            }
            _ => {
                self.i += 1;
                let w = self.r.s(&t);
                self.r
                    .error(&t, format!("unexpected '{w}': expected a value"), w);
                Value::Single(String::new())
            }
        }
    }

    /// `{ a, b . c, 1-2 }` (anonymous set or map; map entries kept as expressions).
    fn set_literal(&mut self) -> Value {
        let open = self.i;
        self.i += 1;
        let mut items = Vec::new();
        let mut el_start = self.i;
        let mut depth = 0usize;
        while let Some(t) = self.toks.get(self.i).copied() {
            match t.kind {
                Tok::LBrace => depth += 1,
                Tok::RBrace if depth > 0 => depth -= 1,
                Tok::RBrace | Tok::Comma if depth == 0 => {
                    if self.i > el_start {
                        let words: Vec<&str> = self.toks[el_start..self.i]
                            .iter()
                            .map(|t| self.r.s(t))
                            .collect();
                        items.push(value_of_words(&words));
                    }
                    self.i += 1;
                    if t.kind == Tok::RBrace {
                        return Value::Set(items);
                    }
                    el_start = self.i;
                    continue;
                }
                _ => {}
            }
            self.i += 1;
        }
        let t = self.toks[open];
        self.r.error(
            &t,
            "expected '}' to close the set",
            &self.span_text(open, self.i),
        );
        Value::Set(items)
    }

    /// After `set`, `to` or `map`: a selector expression (optionally `map`ped) or a value.
    fn value_expr(&mut self) -> String {
        let from = self.i;
        if self.cur().is_some_and(is_selector_start) && self.cur_is_word() {
            self.selector_expr();
        } else if let Some(rest) = self.cur().and_then(|w| w.strip_prefix(':'))
            && is_selector_start(rest)
        {
            // `redirect to :tcp dport map { ... }`
            self.i += 1;
            if PROTOS.contains(&rest) || rest == "meta" {
                self.bump_word(from);
            }
            self.bitops();
        } else {
            self.value();
            self.bitops();
        }
        if self.cur() == Some("map") {
            self.i += 1;
            self.value();
        }
        self.span_text(from, self.i)
    }

    fn matchlike(&mut self) -> StatementKind {
        let start = self.i;
        self.selector_expr();
        let left = self.span_text(start, self.i);
        let Some(next) = self.cur() else {
            let t = self.toks[start];
            self.r.error(
                &t,
                format!("expected a value, 'set' or 'vmap' after '{left}'"),
                &left,
            );
            return StatementKind::Other(left);
        };
        match next {
            "vmap" => {
                let vt = self.toks[self.i];
                self.i += 1;
                match self.toks.get(self.i).copied() {
                    Some(t) if t.kind == Tok::LBrace => {
                        let entries = self.vmap_entries();
                        StatementKind::VerdictMap {
                            key: left,
                            map: VerdictMapRef::Inline(entries),
                        }
                    }
                    Some(t) if t.kind == Tok::Word && self.r.s(&t).starts_with('@') => {
                        self.i += 1;
                        StatementKind::VerdictMap {
                            key: left,
                            map: VerdictMapRef::Named(self.r.s(&t)[1..].to_string()),
                        }
                    }
                    _ => {
                        self.r.error(
                            &vt,
                            "expected '@map' or '{ key : verdict, ... }' after 'vmap'",
                            &left,
                        );
                        StatementKind::Other(left)
                    }
                }
            }
            "set" => {
                self.i += 1;
                let value = self.value_expr();
                StatementKind::Mangle { key: left, value }
            }
            "map" => {
                self.i += 1;
                self.value();
                StatementKind::Other("map".into())
            }
            _ => {
                let op = Op::parse(next).filter(|o| *o != Op::Implicit);
                if op.is_some() {
                    self.i += 1;
                }
                if self.i >= self.toks.len() {
                    let t = self.toks[self.toks.len() - 1];
                    self.r.error(
                        &t,
                        format!("expected a value after '{}'", self.span_text(start, self.i)),
                        &left,
                    );
                    return StatementKind::Other(left);
                }
                let right = self.value();
                StatementKind::Match {
                    left,
                    op: op.unwrap_or(Op::Implicit),
                    right,
                }
            }
        }
    }

    /// `{ k : verdict, ... }` of an inline verdict map.
    fn vmap_entries(&mut self) -> Vec<(String, Verdict)> {
        let open = self.i;
        self.i += 1;
        let mut entries = Vec::new();
        let mut el_start = self.i;
        while let Some(t) = self.toks.get(self.i).copied() {
            if matches!(t.kind, Tok::Comma | Tok::RBrace) {
                if self.i > el_start {
                    let words: Vec<&str> = self.toks[el_start..self.i]
                        .iter()
                        .map(|t| self.r.s(t))
                        .collect();
                    let text = self.span_text(el_start, self.i);
                    match words.iter().position(|w| *w == ":") {
                        Some(c) => match Verdict::parse(&words[c + 1..]) {
                            Some(v) => entries.push((self.span_text(el_start, el_start + c), v)),
                            None => {
                                let vt = self.toks[el_start + (c + 1).min(words.len() - 1)];
                                self.r.error(
                                    &vt,
                                    "verdict map value is not a verdict: expected accept, drop, return, continue, jump CHAIN or goto CHAIN",
                                    &text,
                                );
                            }
                        },
                        None => {
                            let et = self.toks[el_start];
                            self.r
                                .error(&et, "expected 'key : verdict' in verdict map", &text);
                        }
                    }
                } else if t.kind == Tok::RBrace && !entries.is_empty() {
                    self.r.error(
                        &t,
                        "trailing comma before '}': `nft -f` accepts it but `nft list` never prints one, so this text was edited by hand",
                        "}",
                    );
                }
                self.i += 1;
                if t.kind == Tok::RBrace {
                    return entries;
                }
                el_start = self.i;
                continue;
            }
            if t.kind == Tok::LBrace {
                self.skip_braces();
                continue;
            }
            self.i += 1;
        }
        let t = self.toks[open];
        self.r.error(
            &t,
            "expected '}' to close the verdict map",
            &self.span_text(open, self.i),
        );
        entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnostic::Severity;

    fn errors(rs: &Ruleset) -> Vec<String> {
        rs.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .map(|d| d.to_string())
            .collect()
    }

    fn nft(rule: &str) -> NftRule {
        let rs = parse_text(&format!(
            "table ip t {{\n\tchain c {{\n\t\t{rule}\n\t}}\n}}\n"
        ));
        assert!(errors(&rs).is_empty(), "{:?}", errors(&rs));
        match &rs.tables[0].chains[0].rules[0].body {
            RuleBody::Nft(n) => (**n).clone(),
            _ => unreachable!(),
        }
    }

    #[test]
    fn match_with_verdict_and_handle() {
        let rs = parse_text(
            "table ip t { # handle 3\n\tchain c { # handle 1\n\t\tip daddr 10.0.0.0/8 tcp dport != { 80, 443 } counter packets 3 bytes 180 jump x # handle 7\n\t}\n\tchain x {\n\t}\n}\n",
        );
        assert!(errors(&rs).is_empty(), "{:?}", errors(&rs));
        let r = &rs.tables[0].chains[0].rules[0];
        assert_eq!(r.location.line, 3);
        assert_eq!(r.location.column, 3);
        assert_eq!(
            r.counters,
            Some(Counters {
                packets: 3,
                bytes: 180
            })
        );
        let RuleBody::Nft(n) = &r.body else {
            unreachable!()
        };
        assert_eq!(n.handle, Some(7));
        assert_eq!(n.statements.len(), 4);
        assert_eq!(
            n.statements[0].kind,
            StatementKind::Match {
                left: "ip daddr".into(),
                op: Op::Implicit,
                right: Value::Prefix("10.0.0.0".into(), 8)
            }
        );
        assert_eq!(
            n.statements[1].kind,
            StatementKind::Match {
                left: "tcp dport".into(),
                op: Op::Ne,
                right: Value::Set(vec![Value::atom("80"), Value::atom("443")])
            }
        );
        assert_eq!(n.statements[1].text, "tcp dport != { 80, 443 }");
        assert_eq!(n.chain_references()[0].chain, "x");
    }

    #[test]
    fn concat_vmap_and_set_lookup() {
        let n = nft("ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports");
        assert_eq!(
            n.statements[0].kind,
            StatementKind::Match {
                left: "ip daddr".into(),
                op: Op::Implicit,
                right: Value::Named("nodeport-ips".into())
            }
        );
        assert_eq!(
            n.statements[1].kind,
            StatementKind::VerdictMap {
                key: "meta l4proto . th dport".into(),
                map: VerdictMapRef::Named("service-nodeports".into())
            }
        );
    }

    #[test]
    fn nat_mangle_log_reject() {
        let n = nft(
            "meta mark set meta mark | 0x4000 ct state established,related log prefix \"x y\" level info dnat to 10.0.0.1:80 reject with icmp type host-unreachable",
        );
        let kinds: Vec<_> = n.statements.iter().map(|s| s.kind.clone()).collect();
        assert_eq!(
            kinds[0],
            StatementKind::Mangle {
                key: "meta mark".into(),
                value: "meta mark | 0x4000".into()
            }
        );
        assert_eq!(
            kinds[1],
            StatementKind::Match {
                left: "ct state".into(),
                op: Op::Implicit,
                right: Value::Single("established,related".into())
            }
        );
        assert_eq!(
            kinds[2],
            StatementKind::Log {
                args: "prefix \"x y\" level info".into()
            }
        );
        assert_eq!(
            kinds[3],
            StatementKind::Nat {
                kind: NatKind::Dnat,
                args: "to 10.0.0.1:80".into()
            }
        );
        assert_eq!(
            kinds[4],
            StatementKind::Verdict(Verdict::Reject(Some("icmp type host-unreachable".into())))
        );
    }

    #[test]
    fn numgen_inline_vmap() {
        let n = nft("numgen random mod 2 vmap { 0 : goto a, 1 : jump b }");
        assert_eq!(
            n.statements[0].kind,
            StatementKind::VerdictMap {
                key: "numgen random mod 2".into(),
                map: VerdictMapRef::Inline(vec![
                    ("0".into(), Verdict::Goto("a".into())),
                    ("1".into(), Verdict::Jump("b".into()))
                ])
            }
        );
        assert_eq!(n.chain_references().len(), 2);
    }

    #[test]
    fn bad_hook_is_an_error_with_location() {
        let rs = parse_text(
            "table ip t {\n  chain c {\n    type nat hook preroute priority -100; policy accept;\n  }\n}\n",
        );
        let e = errors(&rs);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].starts_with("3:19: unknown hook 'preroute'"), "{e:?}");
    }

    #[test]
    fn unbalanced_is_truncated() {
        let rs = parse_text("table ip t {\n  chain c {\n    accept\n");
        assert_eq!(rs.completeness, Completeness::Truncated);
        assert_eq!(rs.tables[0].chains[0].rules.len(), 1);
        let rs = parse_text("table ip t {\n}\n}\n");
        assert_eq!(rs.completeness, Completeness::Truncated);
    }

    #[test]
    fn one_line_blocks_and_default_family() {
        let rs = parse_text(
            "table t { chain c { type filter hook input priority 0; policy drop; counter; jump { counter; } } }",
        );
        assert!(errors(&rs).is_empty(), "{:?}", errors(&rs));
        let c = &rs.tables[0].chains[0];
        assert_eq!(rs.tables[0].family, Family::Ip);
        assert_eq!(c.policy(), Some(&Policy::Drop));
        assert_eq!(c.rules.len(), 2);
    }

    /// kube-proxy's nftables transaction shape: declarations, elements, rules.
    const SCRIPT: &str = "add table ip kube-proxy { comment \"rules for kube-proxy\" ; }
add map ip kube-proxy service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; comment \"ClusterIP\" ; }
add chain ip kube-proxy services
add chain ip kube-proxy nat-prerouting { type nat hook prerouting priority -100 ; }
add chain ip kube-proxy service-A
add rule ip kube-proxy nat-prerouting jump services
add rule ip kube-proxy services ip daddr . meta l4proto . th dport vmap @service-ips
add element ip kube-proxy service-ips { 10.43.0.1 . tcp . 443 : goto service-A }
add rule ip kube-proxy service-A numgen random mod 2 vmap { 0 : goto ep-1 , 1 : goto ep-2 }
insert rule ip kube-proxy service-A ip saddr != 10.42.0.0/16 jump mark-for-masquerade
";

    #[test]
    fn a_script_builds_the_tables_it_declares_and_is_partial() {
        let rs = parse_text(SCRIPT);
        assert!(errors(&rs).is_empty(), "{:?}", errors(&rs));
        assert_eq!(rs.completeness, Completeness::Partial);
        assert!(
            rs.diagnostics
                .iter()
                .any(|d| d.message.contains("nft script"))
        );
        let t = &rs.tables[0];
        assert_eq!((&*t.name, t.family), ("kube-proxy", Family::Ip));
        let pre = t.chain("nat-prerouting").unwrap();
        assert_eq!(pre.base.as_ref().unwrap().hook, Hook::Prerouting);
        let svc = t.chain("service-A").unwrap();
        // `insert` puts the rule first; positions follow.
        assert!(svc.rules[0].text.starts_with("ip saddr != 10.42.0.0/16"));
        assert_eq!(
            svc.rules.iter().map(|r| r.position).collect::<Vec<_>>(),
            [1, 2]
        );
        assert_eq!(svc.rules[0].location.line, 10);
        let map = t.sets.iter().find(|s| &*s.name == "service-ips").unwrap();
        assert!(map.is_verdict_map());
        assert_eq!(map.elements.len(), 1);
        assert_eq!(&*map.elements[0].key_text, "10.43.0.1 . tcp . 443");
    }

    #[test]
    fn flush_and_delete_commands_change_what_the_script_built() {
        let script = format!(
            "{SCRIPT}flush chain ip kube-proxy service-A
delete element ip kube-proxy service-ips {{ 10.43.0.1 . tcp . 443 }}
delete chain ip kube-proxy services
add element ip kube-proxy service-ips {{ 10.43.0.10 . udp . 53 : goto service-A }}
"
        );
        let rs = parse_text(&script);
        assert!(errors(&rs).is_empty(), "{:?}", errors(&rs));
        let t = &rs.tables[0];
        assert!(t.chain("service-A").unwrap().rules.is_empty());
        assert!(t.chain("services").is_none());
        assert_eq!(&*t.deleted_chains[0], "services");
        // The index still finds the chains after the deleted one.
        assert!(t.chain("nat-prerouting").is_some());
        let map = t.sets.iter().find(|s| &*s.name == "service-ips").unwrap();
        let keys: Vec<&str> = map.elements.iter().map(|e| &*e.key_text).collect();
        assert_eq!(keys, ["10.43.0.10 . udp . 53"]);
        let rs = parse_text(&format!("{SCRIPT}flush ruleset\n"));
        assert!(rs.tables.is_empty());
    }

    #[test]
    fn deleted_chains_and_tables_keep_the_rest_addressable() {
        let rs = parse_text(
            "add table ip a\nadd table ip b\nadd chain ip a x\nadd chain ip a y\nadd chain ip a z\n\
             add chain ip b w\ndelete chain ip a y\ndelete table ip a\nadd table ip a\n\
             add rule ip b w accept\nadd chain ip b v\ndelete chain ip b v\nadd chain ip b v\n\
             add rule ip b v drop\nadd rule ip b v counter\ndelete rule ip b v\n",
        );
        // `delete rule` without a handle is an error that does not eat the next line.
        let e = errors(&rs);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].contains("16:") && e[0].contains("handle N"), "{e:?}");
        let names: Vec<&str> = rs.tables.iter().map(|t| &*t.name).collect();
        assert_eq!(
            names,
            ["b", "a"],
            "deleted table a is gone, the re-added one is new"
        );
        assert!(rs.tables[1].chains.is_empty());
        let b = &rs.tables[0];
        // Rules added after the deletions land in the right chains.
        assert_eq!(b.chain("w").unwrap().rules[0].text.as_str(), "accept");
        let v = b.chain("v").unwrap();
        assert_eq!(v.rules.len(), 2);
        assert_eq!(v.rules[0].text.as_str(), "drop");
        // Deleted, then added again: it exists, so no reference to it is dangling.
        assert!(b.deleted_chains.is_empty(), "{:?}", b.deleted_chains);
    }

    #[test]
    fn flush_or_delete_in_an_undeclared_table_invents_no_table() {
        let rs =
            parse_text("flush chain ip nat X\ndelete element ip t s { 1.2.3.4 }\nadd table ip k\n");
        assert!(errors(&rs).is_empty(), "{:?}", errors(&rs));
        let names: Vec<&str> = rs.tables.iter().map(|t| &*t.name).collect();
        assert_eq!(names, ["k"]);
    }

    #[test]
    fn rule_commands_cut_short_are_errors_not_panics() {
        for text in [
            "add rule ip t c",
            "insert rule t c",
            "add rule ip t c position",
            "add rule ip t c position 3",
            "add rule ip t c\n",
            "delete rule ip t c handle",
        ] {
            let rs = parse_text(text);
            assert!(
                !errors(&rs).is_empty() || text.starts_with("delete"),
                "{text:?}"
            );
        }
    }

    #[test]
    fn a_script_that_starts_with_flush_ruleset_is_the_whole_ruleset() {
        let rs = parse_text(
            "flush ruleset\ntable inet filter {\n chain input { type filter hook input priority 0; policy drop; }\n}\nadd rule inet filter input accept\n",
        );
        assert!(errors(&rs).is_empty(), "{:?}", errors(&rs));
        assert_eq!(rs.completeness, Completeness::Full);
        assert_eq!(rs.tables[0].chains[0].rules.len(), 1);
    }

    #[test]
    fn bad_script_commands_say_where() {
        let rs = parse_text("add chain ip\nadd table ip t\nadd element ip t s 1.2.3.4\n");
        let e = errors(&rs);
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e[0].contains("1:") && e[0].contains("TABLE NAME"), "{e:?}");
        assert!(e[1].contains("3:") && e[1].contains("ELEMENT"), "{e:?}");
        // Commands that do not build a ruleset are noted and skipped, as before.
        let rs = parse_text("list ruleset\n");
        assert!(errors(&rs).is_empty());
        assert!(rs.diagnostics.iter().any(|d| d.message.contains("skipped")));
    }

    #[test]
    fn operator_words_are_bit_operations() {
        // kube-proxy's scripts write `mark and 0x4000`, the kernel lists `meta mark & 0x4000`.
        let rs = parse_text(
            "add rule ip t c mark and 0x4000 == 0 return\nadd rule ip t c mark set mark or 0x4000\n",
        );
        let c = &rs.tables[0].chains[0];
        let kinds = |i: usize| match &c.rules[i].body {
            RuleBody::Nft(n) => n
                .statements
                .iter()
                .map(|s| s.kind.clone())
                .collect::<Vec<_>>(),
            _ => unreachable!(),
        };
        assert!(
            matches!(
                &kinds(0)[..],
                [StatementKind::Match { left, op: Op::Eq, .. }, StatementKind::Verdict(Verdict::Return)]
                    if left == "mark and 0x4000"
            ),
            "{:?}",
            kinds(0)
        );
        assert!(
            matches!(
                &kinds(1)[..],
                [StatementKind::Mangle { key, value }] if key == "mark" && value == "mark or 0x4000"
            ),
            "{:?}",
            kinds(1)
        );
    }

    #[test]
    fn scripts_are_detected_as_nft_text() {
        assert!(is_script_command(
            "add table ip kube-proxy { comment \"x\" ; }"
        ));
        assert!(is_script_command("flush ruleset"));
        assert!(!is_script_command("add counter ip t c"));
        assert!(!is_script_command("-A INPUT -j ACCEPT"));
    }
}
