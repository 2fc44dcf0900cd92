//! Reader for `nft -j list ruleset` JSON (libnftables JSON schema).
//!
//! The top-level `nftables` array is split into items by a small scanner, so
//! each item gets a line and column and one bad item does not lose the others;
//! an array that never closes marks the result [`Completeness::Truncated`].
//! Rule expressions become the same [`Statement`] model as the text reader, with
//! an nft-like text rendering; unknown expressions are kept as compact JSON.
//! `xt` expressions (iptables-nft compat) are opaque and kept as `Other`.

use crate::diagnostic::Diagnostic;
use crate::model::nft::{
    NatKind, NftRule, NftSet, Op, SetElement, SetKind, Statement, StatementKind, Value, Verdict,
    VerdictMapRef,
};
use crate::model::{
    Backend, BaseChain, Chain, Completeness, Counters, Family, Hook, Location, Placed, Policy,
    Rule, RuleBody, RuleText, Ruleset, Source, Table,
};
use serde_json::{Map, Value as J};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::ops::Range;

/// Reads `nft -j list ruleset` output.
pub fn parse_json(text: &str) -> Ruleset {
    let mut r = JsonReader {
        text,
        ruleset: Ruleset::default(),
        tables: HashMap::new(),
        chains: HashMap::new(),
        xt_seen: None,
        block: RuleBlock::default(),
        unplaced: RuleText::from(""),
    };
    r.run();
    r.place_rules();
    if let Some(loc) = r.xt_seen {
        r.ruleset.diagnostics.push(Diagnostic::note(
            loc.line,
            loc.column,
            "rules contain iptables-nft compat (xt) expressions: their match/target options are opaque in nft JSON and kept as-is",
            "{\"xt\":...}",
        ));
    }
    r.ruleset.diagnostics.sort_by_key(|d| (d.line, d.column));
    r.ruleset
}

struct JsonReader<'a> {
    text: &'a str,
    ruleset: Ruleset,
    tables: HashMap<(Family, String), usize>,
    chains: HashMap<(usize, String), usize>,
    xt_seen: Option<Location>,
    /// Rules read and not yet in their chains.
    block: RuleBlock,
    /// What a statement's text is until its rule is placed (one text for all).
    unplaced: RuleText,
}

/// The texts of rules and chain names read from JSON, gathered into one text of about
/// [`BLOCK_BYTES`] (JSON has no text of a rule to point into: each is rendered): one
/// [`Source`] a block, where one a rule or name took 96 bytes and a box for its
/// location besides its text (17 MiB of a 10k-service ruleset's 112k rules and 40k
/// chains). Rules, their statements and names become spans of the block when it is
/// complete ([`JsonReader::place_rules`]).
#[derive(Default)]
struct RuleBlock {
    text: String,
    /// Where each rule's text starts in `text`, and where its JSON item was read.
    at: Vec<(u32, Location)>,
    rules: Vec<UnplacedRule>,
    /// Chains declared (table, chain index) and their names in `text`.
    names: Vec<(usize, usize, Range<usize>)>,
}

impl RuleBlock {
    /// Starts the next text (a rule's, a chain's name) on a line of its own, read at
    /// `loc`; returns where it starts.
    fn begin(&mut self, loc: Location) -> usize {
        if !self.text.is_empty() {
            self.text.push('\n');
        }
        let start = self.text.len();
        self.at.push((start as u32, loc));
        start
    }
}

/// A rule whose text is in the [`RuleBlock`] being gathered.
struct UnplacedRule {
    table: usize,
    chain: usize,
    text: Range<usize>,
    statements: Vec<Statement>,
    /// Each statement's text in the block.
    spans: Vec<Range<usize>>,
    handle: Option<u64>,
}

/// See [`RuleBlock`].
const BLOCK_BYTES: usize = 1 << 20;

fn location_of(text: &str, offset: usize) -> Location {
    let before = &text.as_bytes()[..offset.min(text.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() as u32 + 1;
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |p| p + 1);
    let col = text
        .get(line_start..offset)
        .map_or(1, |s| s.chars().count() as u32 + 1);
    Location { line, column: col }
}

/// Locations of byte offsets visited in increasing order, found in one pass over the
/// text: `nft -j` prints a whole ruleset on one line, so [`location_of`] for each item
/// would scan the text again from the start (quadratic: hours for a 10k-service dump).
/// Gives exactly what [`location_of`] gives, which it falls back to for an offset
/// behind the last one or inside a character.
struct Locator<'t> {
    text: &'t str,
    /// Offset located last (a character boundary), its line and its line's start.
    at: usize,
    line: u32,
    line_start: usize,
    /// Characters from `line_start` to `at`.
    column_chars: usize,
}

impl<'t> Locator<'t> {
    fn new(text: &'t str) -> Locator<'t> {
        Locator {
            text,
            at: 0,
            line: 1,
            line_start: 0,
            column_chars: 0,
        }
    }

    fn locate(&mut self, offset: usize) -> Location {
        // `is_char_boundary` is false past the end too.
        if offset < self.at || !self.text.is_char_boundary(offset) {
            return location_of(self.text, offset);
        }
        let seg = &self.text[self.at..offset];
        match seg.rfind('\n') {
            Some(p) => {
                self.line += seg.bytes().filter(|&b| b == b'\n').count() as u32;
                self.line_start = self.at + p + 1;
                self.column_chars = self.text[self.line_start..offset].chars().count();
            }
            None => self.column_chars += seg.chars().count(),
        }
        self.at = offset;
        Location {
            line: self.line,
            column: self.column_chars as u32 + 1,
        }
    }
}

/// Byte ranges of the items of the JSON array whose `[` is at `open`, one at a time
/// (a 10k-service ruleset has 260k items: a list of them held 4 MiB through the read);
/// [`ArrayItems::closed`] says, once they are all read, whether the array was closed.
struct ArrayItems<'b> {
    b: &'b [u8],
    /// Where the scan goes on.
    i: usize,
    /// `Some(closed)` once the array's end (or the text's) was reached.
    end: Option<bool>,
}

impl<'b> ArrayItems<'b> {
    fn new(b: &'b [u8], open: usize) -> ArrayItems<'b> {
        ArrayItems {
            b,
            i: open + 1,
            end: None,
        }
    }

    /// Whether the array ended with its `]`; `false` also while items are left.
    fn closed(&self) -> bool {
        self.end == Some(true)
    }
}

impl Iterator for ArrayItems<'_> {
    type Item = (usize, usize);

    fn next(&mut self) -> Option<(usize, usize)> {
        if self.end.is_some() {
            return None;
        }
        let b = self.b;
        let mut depth = 0usize;
        let mut in_str = false;
        let mut escape = false;
        let mut start = None;
        while self.i < b.len() {
            let i = self.i;
            let c = b[i];
            self.i += 1;
            if in_str {
                if escape {
                    escape = false;
                } else if c == b'\\' {
                    escape = true;
                } else if c == b'"' {
                    in_str = false;
                }
                continue;
            }
            match c {
                b'"' => {
                    in_str = true;
                    start.get_or_insert(i);
                }
                b'{' | b'[' => {
                    depth += 1;
                    start.get_or_insert(i);
                }
                b'}' | b']' => {
                    if depth == 0 {
                        self.end = Some(c == b']');
                        return start.map(|s| (s, i));
                    }
                    depth -= 1;
                }
                b',' if depth == 0 => {
                    if let Some(s) = start {
                        return Some((s, i));
                    }
                }
                b' ' | b'\t' | b'\r' | b'\n' => {}
                _ => {
                    start.get_or_insert(i);
                }
            }
        }
        self.end = Some(false);
        start.map(|s| (s, b.len()))
    }
}

fn s<'v>(o: &'v Map<String, J>, k: &str) -> Option<&'v str> {
    o.get(k).and_then(J::as_str)
}

impl JsonReader<'_> {
    fn error(&mut self, loc: Location, msg: impl Into<String>, text: &str) {
        self.ruleset
            .diagnostics
            .push(Diagnostic::error(loc.line, loc.column, msg, text));
    }

    fn run(&mut self) {
        let text = self.text;
        let open = text
            .find("\"nftables\"")
            .and_then(|k| text[k..].find('[').map(|p| k + p));
        let Some(open) = open else {
            let t = text.trim_start();
            let loc = location_of(text, text.len() - t.len());
            self.error(
                loc,
                "expected nft JSON: {\"nftables\": [ ... ]} (output of `nft -j list ruleset`)",
                t,
            );
            return;
        };
        let mut items = ArrayItems::new(text.as_bytes(), open);
        let mut locator = Locator::new(text);
        for (a, b) in items.by_ref() {
            let slice = text[a..b].trim_end();
            let loc = locator.locate(a);
            match serde_json::from_str::<J>(slice) {
                Ok(v) => self.item(&v, loc, slice),
                Err(e) => {
                    let (line, column) = if e.line() <= 1 {
                        (loc.line, loc.column + e.column().saturating_sub(1) as u32)
                    } else {
                        (loc.line + e.line() as u32 - 1, e.column() as u32)
                    };
                    if e.is_eof() {
                        self.ruleset.completeness = Completeness::Truncated;
                    }
                    self.ruleset.diagnostics.push(Diagnostic::error(
                        line,
                        column,
                        format!("invalid JSON item: {e}"),
                        slice,
                    ));
                }
            }
        }
        if !items.closed() {
            self.ruleset.completeness = Completeness::Truncated;
            let loc = locator.locate(text.len());
            self.error(
                loc,
                "input ends inside the \"nftables\" array (missing ']'): truncated?",
                "",
            );
        }
    }

    fn item(&mut self, v: &J, loc: Location, raw: &str) {
        let Some((kind, body)) = v.as_object().and_then(|o| o.iter().next()) else {
            self.error(loc, "expected an object like {\"rule\": {...}}", raw);
            return;
        };
        let empty = Map::new();
        let o = body.as_object().unwrap_or(&empty);
        match kind.as_str() {
            "metainfo" => {}
            "table" => {
                self.table_index(o, loc, raw, true);
            }
            "chain" => self.chain(o, loc, raw),
            "rule" => self.rule(o, loc, raw),
            "set" | "map" => self.set(kind, o, loc, raw),
            _ => {
                // Stateful objects, flowtables...: kept verbatim on the table.
                if let Some(ti) = self.table_index(o, loc, raw, false) {
                    self.ruleset.tables[ti].attributes.push(compact(v).into());
                }
            }
        }
    }

    fn table_index(
        &mut self,
        o: &Map<String, J>,
        loc: Location,
        raw: &str,
        declare: bool,
    ) -> Option<usize> {
        let fam = s(o, "family").and_then(Family::parse);
        let name = if declare { s(o, "name") } else { s(o, "table") };
        let (Some(family), Some(name)) = (fam, name) else {
            self.error(
                loc,
                "expected \"family\" (ip, ip6, inet, arp, bridge, netdev) and a table name",
                raw,
            );
            return None;
        };
        let key = (family, name.to_string());
        if let Some(&i) = self.tables.get(&key) {
            return Some(i);
        }
        let mut t = Table::new(family, Backend::Nftables, name, loc);
        if declare {
            if let Some(c) = s(o, "comment") {
                t.attributes.push(format!("comment \"{c}\"").into());
            }
            if let Some(f) = o.get("flags") {
                t.attributes.push(format!("flags {}", render(f)).into());
            }
        }
        self.ruleset.tables.push(t);
        let i = self.ruleset.tables.len() - 1;
        self.tables.insert(key, i);
        Some(i)
    }

    fn chain_index(&mut self, ti: usize, name: &str, loc: Location) -> usize {
        if let Some(&i) = self.chains.get(&(ti, name.to_string())) {
            return i;
        }
        let t = &mut self.ruleset.tables[ti];
        let i = t.chains.len();
        t.chains
            .push(Chain::named(self.unplaced.clone(), None, loc));
        // The name becomes a span of the block too.
        let block = &mut self.block;
        let start = block.begin(loc);
        block.text.push_str(name);
        block.names.push((ti, i, start..block.text.len()));
        self.chains.insert((ti, name.to_string()), i);
        i
    }

    fn chain(&mut self, o: &Map<String, J>, loc: Location, raw: &str) {
        let Some(ti) = self.table_index(o, loc, raw, false) else {
            return;
        };
        let Some(name) = s(o, "name") else {
            self.error(loc, "chain without \"name\"", raw);
            return;
        };
        let ci = self.chain_index(ti, name, loc);
        if let Some(hook) = s(o, "hook") {
            let base = BaseChain {
                hook: Hook::parse_nft(hook),
                policy: s(o, "policy").map(Policy::parse),
                counters: None,
                chain_type: s(o, "type").map(Into::into),
                priority: o.get("prio").map(|p| render(p).into()),
            };
            self.ruleset.tables[ti].chains[ci].base = Some(Box::new(base));
        }
    }

    fn rule(&mut self, o: &Map<String, J>, loc: Location, raw: &str) {
        let Some(ti) = self.table_index(o, loc, raw, false) else {
            return;
        };
        let Some(chain) = s(o, "chain") else {
            self.error(loc, "rule without \"chain\"", raw);
            return;
        };
        let ci = match self.chains.get(&(ti, chain.to_string())) {
            Some(&i) => i,
            None => {
                self.error(
                    loc,
                    format!("rule for chain '{chain}' which was not declared before it"),
                    raw,
                );
                self.chain_index(ti, chain, loc)
            }
        };
        let mut statements = Vec::new();
        match o.get("expr").and_then(J::as_array) {
            Some(exprs) => {
                for e in exprs {
                    statements.push(self.statement(e, loc));
                }
            }
            None => self.error(loc, "rule without an \"expr\" array", raw),
        }
        if let Some(c) = s(o, "comment") {
            statements.push(Statement {
                text: format!("comment {}", quote(c)).into(),
                kind: StatementKind::Comment(c.to_string()),
            });
        }
        // The rule's text is its statements' texts, one after the other; each becomes a
        // span of the block (one text for many rules, not one a statement).
        let block = &mut self.block;
        let start = block.begin(loc);
        let mut spans = Vec::with_capacity(statements.len());
        for st in &mut statements {
            if block.text.len() > start {
                block.text.push(' ');
            }
            let from = block.text.len();
            block.text.push_str(&st.text);
            spans.push(from..block.text.len());
            st.text = self.unplaced.clone();
        }
        block.rules.push(UnplacedRule {
            table: ti,
            chain: ci,
            text: start..block.text.len(),
            statements,
            spans,
            handle: o.get("handle").and_then(J::as_u64),
        });
        if block.text.len() >= BLOCK_BYTES {
            self.place_rules();
        }
    }

    /// Puts the gathered rules into their chains and names the chains declared, their
    /// texts spans of one text.
    fn place_rules(&mut self) {
        let block = std::mem::take(&mut self.block);
        if block.at.is_empty() {
            return;
        }
        let source = Source::written(block.text, Placed::Spans(block.at.into_boxed_slice()));
        for (table, chain, name) in block.names {
            self.ruleset.tables[table].chains[chain].name = RuleText::span(&source, name);
        }
        for r in block.rules {
            let mut statements = r.statements;
            for (st, span) in statements.iter_mut().zip(r.spans) {
                // A jump's chain is the end of its text (`jump NAME`): a span of it
                // rather than a text of its own.
                if let StatementKind::Verdict(Verdict::Jump(to) | Verdict::Goto(to)) = &mut st.kind
                    && let Some(at) = span.end.checked_sub(to.len())
                    && at >= span.start
                    && source.get(at..span.end) == Some(&**to)
                {
                    *to = RuleText::span(&source, at..span.end);
                }
                st.text = RuleText::span(&source, span);
            }
            // JSON has no statement text to read again: the rule holds its statements.
            let rule = NftRule::holding(statements, r.handle);
            self.ruleset.tables[r.table].chains[r.chain]
                .rules
                .push(Rule {
                    text: RuleText::span(&source, r.text),
                    body: RuleBody::Nft(rule),
                });
        }
    }

    fn statement(&mut self, e: &J, loc: Location) -> Statement {
        let Some((k, v)) = e.as_object().and_then(|o| o.iter().next()) else {
            return Statement {
                text: compact(e).into(),
                kind: StatementKind::Other(compact(e)),
            };
        };
        let empty = Map::new();
        let o = v.as_object().unwrap_or(&empty);
        let kind = match k.as_str() {
            "match" => {
                let left = o.get("left").map(render).unwrap_or_default();
                let op = s(o, "op").and_then(Op::parse).unwrap_or(Op::Implicit);
                let right = o
                    .get("right")
                    .map(value)
                    .unwrap_or(Value::Single(String::new()));
                let text = match op {
                    Op::Implicit => {
                        format!("{left} {}", o.get("right").map(render).unwrap_or_default())
                    }
                    _ => format!(
                        "{left} {} {}",
                        s(o, "op").unwrap_or(""),
                        o.get("right").map(render).unwrap_or_default()
                    ),
                };
                return Statement {
                    text: text.into(),
                    kind: StatementKind::Match { left, op, right },
                };
            }
            "accept" | "drop" | "continue" | "return" | "jump" | "goto" => {
                let target = s(o, "target").unwrap_or("");
                let words: Vec<&str> = if target.is_empty() {
                    vec![k.as_str()]
                } else {
                    vec![k.as_str(), target]
                };
                match Verdict::parse(&words) {
                    Some(v) => StatementKind::Verdict(v),
                    None => StatementKind::Other(k.clone()),
                }
            }
            "reject" => {
                let with = match (s(o, "type"), o.get("expr")) {
                    (Some(t), Some(x)) => Some(format!("{t} {}", render(x))),
                    (Some(t), None) => Some(t.to_string()),
                    (None, Some(x)) => Some(render(x)),
                    _ => None,
                };
                StatementKind::Verdict(Verdict::Reject(with))
            }
            "queue" => StatementKind::Verdict(Verdict::Queue(kv_args(o))),
            "counter" if !(v.is_null() || v.get("packets").is_some()) => {
                // Named counter reference: `counter name "x"` / `counter name ... map`.
                StatementKind::Other(k.clone())
            }
            "secmark" | "ct helper" | "ct timeout" | "ct expectation" => StatementKind::Mangle {
                key: if k == "secmark" {
                    "meta secmark".into()
                } else {
                    k.clone()
                },
                value: render(v),
            },
            "counter" => StatementKind::Counter(
                match (
                    o.get("packets").and_then(J::as_u64),
                    o.get("bytes").and_then(J::as_u64),
                ) {
                    (Some(packets), Some(bytes)) => Some(Counters { packets, bytes }),
                    _ => None,
                },
            ),
            "vmap" => {
                let key = o.get("key").map(render).unwrap_or_default();
                let map = match o.get("data") {
                    Some(J::String(n)) => VerdictMapRef::Named(n.trim_start_matches('@').into()),
                    Some(J::Object(d)) => {
                        let mut entries = Vec::new();
                        for pair in d.get("set").and_then(J::as_array).into_iter().flatten() {
                            if let Some([k, v]) = pair.as_array().map(Vec::as_slice) {
                                match verdict_of(v) {
                                    Some(verdict) => entries.push((render(k), verdict)),
                                    None => self.error(
                                        loc,
                                        "verdict map value is not a verdict",
                                        &compact(pair),
                                    ),
                                }
                            }
                        }
                        VerdictMapRef::Inline(entries)
                    }
                    _ => VerdictMapRef::Inline(Vec::new()),
                };
                StatementKind::VerdictMap { key, map }
            }
            "mangle" => StatementKind::Mangle {
                key: o.get("key").map(render).unwrap_or_default(),
                value: o.get("value").map(render).unwrap_or_default(),
            },
            "dnat" | "snat" | "masquerade" | "redirect" => {
                let mut args = String::new();
                if let Some(f) = s(o, "family") {
                    args.push_str(f);
                }
                if o.contains_key("addr") || o.contains_key("port") {
                    push_word(&mut args, "to");
                    let mut to = o.get("addr").map(render).unwrap_or_default();
                    if let Some(p) = o.get("port") {
                        let _ = write!(to, ":{}", render(p));
                    }
                    push_word(&mut args, &to);
                }
                if let Some(f) = o.get("flags") {
                    push_word(&mut args, &render(f));
                }
                StatementKind::Nat {
                    kind: NatKind::parse(k).expect("nat key"),
                    args,
                }
            }
            "log" => StatementKind::Log { args: kv_args(o) },
            "xt" => {
                self.xt_seen.get_or_insert(loc);
                StatementKind::Other("xt".into())
            }
            _ => StatementKind::Other(k.clone()),
        };
        let text = match &kind {
            StatementKind::Verdict(v) => verdict_text(v),
            StatementKind::VerdictMap { key, map } => match map {
                VerdictMapRef::Named(n) => format!("{key} vmap @{n}"),
                VerdictMapRef::Inline(es) => {
                    let mut t = format!("{key} vmap {{ ");
                    for (i, (k, v)) in es.iter().enumerate() {
                        if i > 0 {
                            t.push_str(", ");
                        }
                        let _ = write!(t, "{k} : {}", verdict_text(v));
                    }
                    t.push_str(" }");
                    t
                }
            },
            StatementKind::Counter(Some(c)) => {
                format!("counter packets {} bytes {}", c.packets, c.bytes)
            }
            StatementKind::Counter(None) => "counter".into(),
            StatementKind::Mangle { key, value } => format!("{key} set {value}"),
            StatementKind::Nat { args, .. } | StatementKind::Log { args } if args.is_empty() => {
                k.clone()
            }
            StatementKind::Nat { args, .. } | StatementKind::Log { args } => format!("{k} {args}"),
            StatementKind::Other(x) if x == "xt" => format!(
                "xt {} {}",
                s(o, "type").unwrap_or("?"),
                s(o, "name").unwrap_or("?")
            ),
            _ => compact(e),
        };
        Statement {
            text: text.into(),
            kind,
        }
    }

    fn set(&mut self, kind: &str, o: &Map<String, J>, loc: Location, raw: &str) {
        let Some(ti) = self.table_index(o, loc, raw, false) else {
            return;
        };
        let Some(name) = s(o, "name") else {
            self.error(loc, "set without \"name\"", raw);
            return;
        };
        let mut set = NftSet {
            name: name.into(),
            kind: if kind == "map" {
                SetKind::Map
            } else {
                SetKind::Set
            },
            location: loc,
            handle: o.get("handle").and_then(J::as_u64),
            comment: s(o, "comment").map(Into::into),
            ..NftSet::default()
        };
        set.key_type = match (o.get("type"), o.get("typeof")) {
            (Some(t), _) => type_text(t).into(),
            (None, Some(t)) => format!("typeof {}", render(t)).into(),
            _ => "".into(),
        };
        set.value_type = o.get("map").map(|m| type_text(m).into());
        if let Some(f) = o.get("flags") {
            set.flags = match f {
                J::Array(a) => a.iter().map(|x| render(x).into()).collect(),
                other => vec![render(other).into()],
            };
        }
        for k in ["timeout", "gc-interval", "size", "policy"] {
            if let Some(v) = o.get(k) {
                set.attributes.push(format!("{k} {}", render(v)).into());
            }
        }
        for el in o.get("elem").and_then(J::as_array).into_iter().flatten() {
            let (key, val) = match el.as_array().map(Vec::as_slice) {
                Some([k, v]) if set.kind == SetKind::Map => (k, Some(v)),
                _ => (el, None),
            };
            let (key, comment) = match key.get("elem") {
                Some(e) => (
                    e.get("val").unwrap_or(key),
                    e.get("comment").and_then(J::as_str).map(Into::into),
                ),
                None => (key, None),
            };
            let verdict = val.and_then(verdict_of);
            if set.is_verdict_map()
                && let Some(v) = val
                && verdict.is_none()
            {
                self.error(
                    loc,
                    "verdict map element value is not a verdict",
                    &compact(v),
                );
            }
            set.elements.push(SetElement::new(
                render(key).into(),
                value(key),
                val.map(|v| match verdict_of(v) {
                    Some(vd) => verdict_text(&vd).into(),
                    None => render(v).into(),
                }),
                verdict,
                comment,
            ));
        }
        // One text for the elements' texts rather than one each.
        crate::model::nft::own_element_texts(std::slice::from_mut(&mut set));
        self.ruleset.tables[ti].sets.push(set);
    }
}

fn push_word(s: &mut String, w: &str) {
    if w.is_empty() {
        return;
    }
    if !s.is_empty() {
        s.push(' ');
    }
    s.push_str(w);
}

fn quote(s: &str) -> String {
    format!("\"{s}\"")
}

fn compact(v: &J) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// `"ipv4_addr"` or `["ipv4_addr", "inet_proto"]` -> `ipv4_addr . inet_proto`.
fn type_text(t: &J) -> String {
    match t {
        J::Array(a) => a.iter().map(render).collect::<Vec<_>>().join(" . "),
        other => render(other),
    }
}

/// `key value` pairs of a statement object (`prefix "x" level info`).
fn kv_args(o: &Map<String, J>) -> String {
    let mut out = String::new();
    for (k, v) in o {
        let v = match v {
            J::String(x) if k == "prefix" => quote(x),
            _ => render(v),
        };
        push_word(&mut out, k);
        push_word(&mut out, &v);
    }
    out
}

fn verdict_of(v: &J) -> Option<Verdict> {
    let (k, body) = v.as_object()?.iter().next()?;
    let target = body.get("target").and_then(J::as_str);
    match target {
        Some(t) => Verdict::parse(&[k.as_str(), t]),
        None => Verdict::parse(&[k.as_str()]),
    }
}

fn verdict_text(v: &Verdict) -> String {
    match v {
        Verdict::Accept => "accept".into(),
        Verdict::Drop => "drop".into(),
        Verdict::Return => "return".into(),
        Verdict::Continue => "continue".into(),
        Verdict::Reject(None) => "reject".into(),
        Verdict::Reject(Some(w)) => format!("reject with {w}"),
        Verdict::Queue(a) if a.is_empty() => "queue".into(),
        Verdict::Queue(a) => format!("queue {a}"),
        Verdict::Jump(c) => format!("jump {c}"),
        Verdict::Goto(c) => format!("goto {c}"),
    }
}

/// A JSON right-hand side as a [`Value`].
fn value(v: &J) -> Value {
    match v {
        J::String(x) if x.starts_with('@') => Value::Named(x[1..].to_string()),
        J::Array(a) => Value::Single(a.iter().map(render).collect::<Vec<_>>().join(",")),
        J::Object(o) => match o.iter().next() {
            Some((k, b)) => match (k.as_str(), b) {
                ("set", J::Array(items)) => Value::Set(items.iter().map(value).collect()),
                ("set", other) => Value::Set(vec![value(other)]),
                ("concat", J::Array(items)) => Value::Concat(items.iter().map(value).collect()),
                ("range", J::Array(r)) if r.len() == 2 => {
                    Value::Range(render(&r[0]), render(&r[1]))
                }
                ("prefix", J::Object(p)) => match (p.get("addr"), p.get("len").and_then(J::as_u64))
                {
                    (Some(a), Some(l)) if l <= 255 => Value::Prefix(render(a), l as u8),
                    _ => Value::Expr(render(v)),
                },
                ("elem", J::Object(e)) => e.get("val").map(value).unwrap_or(Value::Expr(render(v))),
                _ => Value::Expr(render(v)),
            },
            None => Value::Expr(render(v)),
        },
        other => Value::Single(render(other)),
    }
}

/// nft-like text for a JSON expression; unknown shapes become compact JSON.
fn render(v: &J) -> String {
    match v {
        J::String(x) => x.clone(),
        J::Number(n) => n.to_string(),
        J::Bool(b) => b.to_string(),
        J::Null => String::new(),
        J::Array(a) => a.iter().map(render).collect::<Vec<_>>().join(","),
        J::Object(o) => {
            let Some((k, b)) = o.iter().next() else {
                return "{}".into();
            };
            let bo = b.as_object();
            let f = |key: &str| bo.and_then(|m| m.get(key)).map(render).unwrap_or_default();
            match (k.as_str(), b) {
                ("payload", _) => {
                    if bo.is_some_and(|m| m.contains_key("protocol")) {
                        format!("{} {}", f("protocol"), f("field"))
                    } else {
                        format!("@{},{},{}", f("base"), f("offset"), f("len"))
                    }
                }
                ("meta", _) => format!("meta {}", f("key")),
                ("ct", _) => {
                    let mut t = String::from("ct");
                    for key in ["dir", "family", "key"] {
                        push_word(&mut t, &f(key));
                    }
                    t
                }
                ("concat", J::Array(a)) => a.iter().map(render).collect::<Vec<_>>().join(" . "),
                ("set", J::Array(a)) => {
                    let items: Vec<String> = a
                        .iter()
                        .map(|x| match x.as_array().map(Vec::as_slice) {
                            Some([k, v]) => format!("{} : {}", render(k), render_data(v)),
                            _ => render(x),
                        })
                        .collect();
                    format!("{{ {} }}", items.join(", "))
                }
                ("set", other) => format!("{{ {} }}", render(other)),
                ("prefix", _) => format!("{}/{}", f("addr"), f("len")),
                ("range", J::Array(r)) if r.len() == 2 => {
                    format!("{}-{}", render(&r[0]), render(&r[1]))
                }
                ("numgen", _) => {
                    let mut t = format!("numgen {} mod {}", f("mode"), f("mod"));
                    let off = f("offset");
                    if !off.is_empty() && off != "0" {
                        let _ = write!(t, " offset {off}");
                    }
                    t
                }
                ("&" | "|" | "^" | "<<" | ">>", J::Array(a)) => a
                    .iter()
                    .map(render)
                    .collect::<Vec<_>>()
                    .join(&format!(" {k} ")),
                ("map", _) => format!(
                    "{} map {}",
                    f("key"),
                    render_data(bo.and_then(|m| m.get("data")).unwrap_or(&J::Null))
                ),
                ("fib", _) => format!(
                    "fib {} {}",
                    match bo.and_then(|m| m.get("flags")) {
                        Some(J::Array(a)) => a.iter().map(render).collect::<Vec<_>>().join(" . "),
                        Some(x) => render(x),
                        None => String::new(),
                    },
                    f("result")
                ),
                ("elem", _) => f("val"),
                ("tcp option", _) => format!("tcp option {} {}", f("name"), f("field"))
                    .trim_end()
                    .into(),
                ("accept" | "drop" | "continue" | "return" | "jump" | "goto", _) => {
                    verdict_of(v).map_or_else(|| compact(v), |vd| verdict_text(&vd))
                }
                (key, J::Object(m)) => {
                    let mut t = key.to_string();
                    for (mk, mv) in m {
                        push_word(&mut t, mk);
                        push_word(&mut t, &render(mv));
                    }
                    t
                }
                _ => compact(v),
            }
        }
    }
}

/// Map data: verdicts render as nft verdict text.
fn render_data(v: &J) -> String {
    match verdict_of(v) {
        Some(vd) => verdict_text(&vd),
        None => render(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locator_agrees_with_a_scan_from_the_start() {
        let text = "{\"nftables\": [\n  {\"é\": 1},\t{\"a\": \"ü\nx\"},\r\n\n {}]";
        let mut locator = Locator::new(text);
        for offset in (0..=text.len() + 2).filter(|&o| o > text.len() || text.is_char_boundary(o)) {
            assert_eq!(
                locator.locate(offset),
                location_of(text, offset),
                "{offset}"
            );
        }
        // Behind the last offset, or inside a character: the same answer.
        assert_eq!(locator.locate(3), location_of(text, 3));
        let inside = text.find('é').unwrap() + 1;
        assert_eq!(locator.locate(inside), location_of(text, inside));
    }

    /// `nft -j` prints the whole ruleset on one line: locating each item from the start
    /// of the text was quadratic (a 2,000-service dump of 8 MB took over two minutes,
    /// 10,000 services did not finish). 100k items on one line must read in seconds,
    /// with the right column for the last one.
    #[test]
    fn items_on_one_long_line_are_located_in_one_pass() {
        let items = 100_000;
        let mut text = String::from("{\"nftables\":[");
        for _ in 0..items {
            text.push_str("{\"metainfo\":{}},");
        }
        let bad_at = text.len();
        text.push_str("{\"rule\": }]}");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(parse_json(&text));
        });
        let rs = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("read within 60 s");
        assert_eq!(rs.diagnostics.len(), 1, "{:?}", rs.diagnostics);
        let d = &rs.diagnostics[0];
        assert_eq!(d.line, 1);
        // The item starts at byte `bad_at`; serde reports the error at its 10th column.
        assert_eq!(d.column as usize, bad_at + 10, "{d:?}");
    }

    #[test]
    fn rule_with_vmap_and_counter() {
        let j = r#"{"nftables":[{"metainfo":{"json_schema_version":1}},
{"table":{"family":"ip","name":"kube-proxy","handle":1}},
{"chain":{"family":"ip","table":"kube-proxy","name":"services","handle":2}},
{"chain":{"family":"ip","table":"kube-proxy","name":"nat-prerouting","handle":3,"type":"nat","hook":"prerouting","prio":-100,"policy":"accept"}},
{"rule":{"family":"ip","table":"kube-proxy","chain":"nat-prerouting","handle":4,"expr":[{"match":{"op":"==","left":{"payload":{"protocol":"ip","field":"daddr"}},"right":{"prefix":{"addr":"10.0.0.0","len":8}}}},{"counter":{"packets":2,"bytes":120}},{"vmap":{"key":{"numgen":{"mode":"random","mod":2,"offset":0}},"data":{"set":[[0,{"goto":{"target":"a"}}],[1,{"jump":{"target":"b"}}]]}}}]}},
{"map":{"family":"ip","name":"service-ips","table":"kube-proxy","type":["ipv4_addr","inet_proto","inet_service"],"handle":5,"map":"verdict","elem":[[{"concat":["10.43.0.1","tcp",443]},{"goto":{"target":"services"}}]]}}
]}"#;
        let rs = parse_json(j);
        assert!(rs.diagnostics.is_empty(), "{:?}", rs.diagnostics);
        let t = &rs.tables[0];
        let c = t.chain("nat-prerouting").unwrap();
        assert_eq!(c.base.as_ref().unwrap().priority.as_deref(), Some("-100"));
        let r = &c.rules[0];
        assert_eq!(r.location().line, 5);
        assert_eq!(
            &*r.text,
            "ip daddr == 10.0.0.0/8 counter packets 2 bytes 120 numgen random mod 2 vmap { 0 : goto a, 1 : jump b }"
        );
        assert_eq!(
            r.counters(),
            Some(Counters {
                packets: 2,
                bytes: 120
            })
        );
        assert_eq!(r.chain_references().len(), 2);
        let m = t.set("service-ips").unwrap();
        assert_eq!(&*m.key_type, "ipv4_addr . inet_proto . inet_service");
        assert_eq!(m.elements[0].key_text.as_ref(), "10.43.0.1 . tcp . 443");
        assert_eq!(m.verdict_targets().next().unwrap().chain, "services");
    }

    /// Rules, their statements, jump targets and chain names are spans of texts shared
    /// by many rules; rules placed block by block keep their order, text and location.
    #[test]
    fn rules_in_several_blocks_keep_their_order_texts_and_places() {
        let rules = 24_000;
        let mut j = String::from(
            "{\"nftables\":[\n{\"table\":{\"family\":\"ip\",\"name\":\"t\"}},\n{\"chain\":{\"family\":\"ip\",\"table\":\"t\",\"name\":\"a\"}},\n{\"chain\":{\"family\":\"ip\",\"table\":\"t\",\"name\":\"b\"}}",
        );
        for i in 0..rules {
            let chain = ["a", "b"][i % 2];
            j.push_str(&format!(
                ",\n{{\"rule\":{{\"family\":\"ip\",\"table\":\"t\",\"chain\":\"{chain}\",\"expr\":[{{\"match\":{{\"op\":\"==\",\"left\":{{\"meta\":{{\"key\":\"l4proto\"}}}},\"right\":\"tcp\"}}}},{{\"counter\":{{\"packets\":{i},\"bytes\":0}}}},{{\"jump\":{{\"target\":\"to-{i}\"}}}}]}}}}"
            ));
        }
        j.push_str("\n]}");
        let rs = parse_json(&j);
        assert!(rs.diagnostics.is_empty(), "{:?}", &rs.diagnostics[..1]);
        let t = &rs.tables[0];
        let names: Vec<&str> = t.chains.iter().map(|c| &*c.name).collect();
        assert_eq!(names, ["a", "b"]);
        for (k, c) in t.chains.iter().enumerate() {
            assert_eq!(c.rules.len(), rules / 2);
            for (n, r) in c.rules.iter().enumerate() {
                let i = n * 2 + k;
                assert_eq!(
                    &*r.text,
                    format!("meta l4proto == tcp counter packets {i} bytes 0 jump to-{i}")
                );
                // The table, two chains and the rules before it come first.
                assert_eq!(r.location().line, 4 + i as u32 + 1);
                let RuleBody::Nft(nft) = &r.body else {
                    panic!("an nft rule")
                };
                let st = nft.statements(&r.text);
                assert_eq!(&*st[2].text, format!("jump to-{i}"));
                let StatementKind::Verdict(Verdict::Jump(to)) = &st[2].kind else {
                    panic!("a jump: {:?}", st[2].kind)
                };
                assert_eq!(&**to, format!("to-{i}"));
            }
        }
        // More than one block: the first rule's text is not the last one's.
        let (first, last) = (&t.chains[0].rules[0], &t.chains[1].rules[rules / 2 - 1]);
        assert!(!std::sync::Arc::ptr_eq(
            first.text.source(),
            last.text.source()
        ));
    }

    #[test]
    fn truncated_json() {
        let rs = parse_json(
            "{\"nftables\":[{\"table\":{\"family\":\"ip\",\"name\":\"t\"}},{\"chain\":{\"fam",
        );
        assert_eq!(rs.completeness, Completeness::Truncated);
        assert_eq!(rs.tables.len(), 1);
        assert!(!rs.diagnostics.is_empty());
    }
}
