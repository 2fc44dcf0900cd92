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
//!
//! Where things are: [`lexer`] (tokens), `blocks` (the `table { chain { } set { } }`
//! blocks `nft list` prints, rules and set elements), `script` (`nft -f` commands),
//! `statement` (a rule's statements and expressions). This module holds the entry
//! points and the [`Reader`] state they share.

mod blocks;
mod lexer;
mod script;
mod statement;

use crate::diagnostic::Diagnostic;
use crate::model::nft::{StatementKind, Value, Verdict, unquote};
use crate::model::{Completeness, Location, RuleBody, Ruleset};
use lexer::{Lexer, Tok, Token, column};
use script::builds_ruleset;
use std::collections::{HashMap, HashSet};

/// Reads `nft list ruleset` (or `nft list table ...`) text.
pub fn parse_text(text: &str) -> Ruleset {
    let mut lex_diags = Vec::new();
    let lexer = Lexer::new(text, &mut lex_diags);
    let mut r = Reader {
        text,
        lexer,
        lex_diags,
        toks: Vec::new(),
        base: 0,
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
    r.top();
    r.remove_deleted();
    let mut rs = r.ruleset;
    // The tokenizer's diagnostics come first, as when the whole text was tokenized
    // before reading (the sort below is stable).
    let mut diags = r.lex_diags;
    diags.append(&mut rs.diagnostics);
    rs.diagnostics = diags;
    undefined_set_references(&mut rs);
    rs.diagnostics.sort_by_key(|d| (d.line, d.column));
    rs
}

/// The state of one read: the tokens, where the reader is, and the ruleset built so far.
/// Its methods are spread over the submodules by what they read.
struct Reader<'a> {
    text: &'a str,
    /// Makes tokens as the reader needs them (see [`Reader::tok`]).
    lexer: Lexer,
    /// The tokenizer's diagnostics (unterminated strings).
    lex_diags: Vec<Diagnostic>,
    /// The tokens made and not yet dropped: `toks[0]` is token number `base`. Tokens
    /// before the rule being read are dropped ([`Reader::forget_read_tokens`]): a 16 MB
    /// listing has 2.7 million of them.
    toks: Vec<Token>,
    base: usize,
    /// The next token to read (a token number, counted from the start of the text).
    pos: usize,
    ruleset: Ruleset,
    /// A rule's tokens, reused from rule to rule.
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

/// Address families a table or command may name.
const FAMILIES: &[&str] = &["ip", "ip6", "inet", "arp", "bridge", "netdev"];
/// Every nft command verb: a top-level statement starting with one is a command.
const COMMANDS: &[&str] = &[
    "add", "create", "insert", "delete", "destroy", "flush", "define", "redefine", "undefine",
    "include", "replace", "reset", "list", "rename", "monitor", "describe", "export", "import",
];

/// Whether a line starts an nft script command (`add table ...`, `flush ruleset`):
/// format detection.
pub(crate) fn is_script_command(line: &str) -> bool {
    let mut w = line.split_ascii_whitespace();
    matches!((w.next(), w.next()), (Some(v), Some(o)) if builds_ruleset(v, o))
}

/// `...`, `....`, `…`: a line someone cut from a listing.
fn is_elision(w: &str) -> bool {
    !w.is_empty() && w.chars().all(|c| c == '.' || c == '…') && (w.len() >= 3 || w == "…")
}

impl<'a> Reader<'a> {
    /// The text of a token.
    fn s(&self, t: &Token) -> &'a str {
        &self.text[t.start()..t.end()]
    }

    /// Token number `i` (counted from the start of the text), made when needed;
    /// `None` past the end of the text.
    fn tok(&mut self, i: usize) -> Option<Token> {
        debug_assert!(i >= self.base, "token {i} was dropped (base {})", self.base);
        while self.base + self.toks.len() <= i {
            if !self
                .lexer
                .step(self.text, &mut self.toks, &mut self.lex_diags)
            {
                return None;
            }
        }
        self.toks.get(i - self.base).copied()
    }

    /// Tokens `from..to`, all read already (`to <= pos`).
    fn read_tokens(&self, from: usize, to: usize) -> &[Token] {
        &self.toks[from - self.base..to - self.base]
    }

    /// Drops the tokens before the next one to read. Called where no token number
    /// before `pos` is kept (the start of a rule of a listing).
    fn forget_read_tokens(&mut self) {
        let read = self.pos - self.base;
        if read >= 1 << 14 {
            self.toks.drain(..read);
            self.base = self.pos;
        }
    }

    fn peek(&mut self) -> Option<Token> {
        self.tok(self.pos)
    }

    fn peek_word(&mut self) -> Option<&'a str> {
        match self.peek() {
            Some(t) if t.kind == Tok::Word => Some(self.s(&t)),
            _ => None,
        }
    }

    fn loc(&self, t: &Token) -> Location {
        Location {
            line: t.line,
            column: column(self.text, t.line_start(self.text), t.start()),
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
            Some(t) => (
                t.line,
                column(self.text, t.line_start(self.text), t.start()),
                self.s(&t),
            ),
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
        let mut last_end = first.map_or(0, |t| t.end());
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
                last_end = t.end();
            }
            self.pos += 1;
        }
        match first {
            Some(f) => self
                .text
                .get(f.start()..last_end.max(f.start()))
                .unwrap_or(""),
            None => "",
        }
    }

    /// The top level: `table` blocks, script commands, and diagnostics for anything else.
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

/// A rule that names a set or map (`@name`) or jumps to a chain its table does not
/// define: `nft -f` refuses it ("Could not process rule: No such file or directory").
/// Only a whole ruleset can say so (and not a table of one chain without sets, the
/// shape `nft list chain` prints): a script that adds to tables in the kernel (partial) or a cut
/// dump may name sets it does not show.
fn undefined_set_references(rs: &mut Ruleset) {
    if rs.completeness != Completeness::Full {
        return;
    }
    let mut found = Vec::new();
    for t in &rs.tables {
        // `nft list chain` prints its table holding that one chain and no sets: the
        // chains and sets it names are not shown, not absent.
        let chain_listing = t.chains.len() == 1 && t.sets.is_empty();
        // A table that defines ct objects is no `nft list chain` output.
        let ct_objects = t.attributes.iter().any(|a| a.starts_with("ct "));
        if chain_listing && !ct_objects {
            continue;
        }
        // Chain name -> is a base chain, once per table (`Table::chain` is a linear
        // search; an iptables-nft listing of a 10k-service node has 60k chains and
        // jumps).
        let chains: std::collections::HashMap<&str, bool> = t
            .chains
            .iter()
            .map(|c| (&*c.name, c.base.is_some()))
            .collect();
        for c in &t.chains {
            for r in &c.rules {
                // A jump or goto to a chain the table does not define is refused the same way.
                if let RuleBody::Nft(rule) = &r.body
                    && !chain_listing
                {
                    for s in &rule.statements {
                        if let StatementKind::Verdict(Verdict::Jump(to) | Verdict::Goto(to)) =
                            &s.kind
                            && !chains.contains_key(&**to)
                        {
                            found.push(Diagnostic::error(
                                r.location.line,
                                r.location.column,
                                format!(
                                    "rule jumps to chain '{to}' that table {} {} does not define (nft: No such file or directory)",
                                    t.family.as_str(),
                                    t.name
                                ),
                                to,
                            ));
                        }
                    }
                    // The kernel refuses a jump or goto to a base chain (one with a hook):
                    // "Could not process rule: Operation not supported".
                    for c in rule.chain_references() {
                        if chains.get(c.chain) == Some(&true) {
                            found.push(Diagnostic::error(
                                r.location.line,
                                r.location.column,
                                format!(
                                    "rule jumps to base chain '{}' of table {} {}: only regular chains can be jumped to (nft: Operation not supported)",
                                    c.chain,
                                    t.family.as_str(),
                                    t.name
                                ),
                                c.chain,
                            ));
                        }
                    }
                }
                // `ct helper set "ftp"` and the values of `ct helper set ... map { ... }`
                // name ct objects of the table (helper, expectation, timeout).
                for (kind, name) in ct_object_references(r.text.as_str()) {
                    let defined = t.attributes.iter().any(|a| {
                        a.strip_prefix("ct ")
                            .and_then(|a| a.strip_prefix(kind))
                            .and_then(|a| a.strip_prefix(' '))
                            .and_then(|a| a.split([' ', '{']).next())
                            .is_some_and(|n| unquote(n) == name)
                    });
                    if !defined {
                        found.push(Diagnostic::error(
                            r.location.line,
                            r.location.column,
                            format!(
                                "rule sets ct {kind} '{name}' that table {} {} does not define (nft: No such file or directory)",
                                t.family.as_str(),
                                t.name
                            ),
                            name,
                        ));
                    }
                }
                for name in set_references(r.text.as_str()) {
                    if t.set(name).is_none() && !chain_listing {
                        found.push(Diagnostic::error(
                            r.location.line,
                            r.location.column,
                            format!(
                                "rule refers to set or map '@{name}' that table {} {} does not define (nft: No such file or directory)",
                                t.family.as_str(),
                                t.name
                            ),
                            name,
                        ));
                    }
                }
            }
        }
    }
    rs.diagnostics.extend(found);
}

/// The ct objects a rule sets by name: `(kind, name)` for `ct helper set "ftp"` and for
/// each quoted value of `ct helper set EXPR map { KEY : "name", ... }` (kinds helper,
/// expectation, timeout). Unquoted names and named maps (`map @m`) are not followed.
fn ct_object_references(text: &str) -> Vec<(&'static str, &str)> {
    let mut out = Vec::new();
    for kind in ["helper", "expectation", "timeout"] {
        let needle = format!("ct {kind} set ");
        let mut rest = text;
        while let Some(at) = rest.find(&needle) {
            let after = rest[at + needle.len()..].trim_start();
            rest = after;
            if let Some(q) = after.strip_prefix('"') {
                if let Some(end) = q.find('"') {
                    out.push((kind, &q[..end]));
                }
                continue;
            }
            // A named map (`map @m`) or another expression: not followed.
            let Some(open) = after.find("map {") else {
                continue;
            };
            // Only this statement's own map: no named map, quote or other statement's
            // map before it.
            if after[..open].contains(['@', '"', ';']) {
                continue;
            }
            let body = &after[open + "map {".len()..];
            let Some(close) = body.find('}') else {
                continue;
            };
            for item in body[..close].split(',') {
                // The value is the item's last quoted string.
                let mut quotes = item.match_indices('"').map(|(i, _)| i);
                let mut last = None;
                while let (Some(a), Some(b)) = (quotes.next(), quotes.next()) {
                    last = Some(&item[a + 1..b]);
                }
                if let Some(name) = last {
                    out.push((kind, name));
                }
            }
        }
    }
    out
}

/// The `@name` words of a rule's text, outside quotes and before a `#` comment.
fn set_references(text: &str) -> Vec<&str> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut quoted = false;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => quoted = !quoted,
            b'#' if !quoted => break,
            b'@' if !quoted
                && (i == 0 || matches!(b[i - 1], b' ' | b'\t' | b'{' | b',' | b'(')) =>
            {
                let start = i + 1;
                let mut end = start;
                while end < b.len()
                    && (b[end].is_ascii_alphanumeric()
                        || matches!(b[end], b'_' | b'-' | b'.' | b'/'))
                {
                    end += 1;
                }
                // `@nh,16,32` is a raw payload expression, `flow add @f` names a
                // flowtable: neither is a set.
                let before = text[..i].trim_end();
                let flowtable = before.ends_with("flow add") || before.ends_with("flow offload");
                if end > start && b.get(end) != Some(&b',') && !flowtable {
                    out.push(&text[start..end]);
                }
                i = end;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnostic::Severity;

    /// The error diagnostics of a ruleset, as `line:column: message` (shared by the
    /// submodules' tests).
    pub(super) fn errors(rs: &Ruleset) -> Vec<String> {
        rs.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .map(|d| d.to_string())
            .collect()
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
