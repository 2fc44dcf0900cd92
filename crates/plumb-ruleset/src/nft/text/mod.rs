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
use crate::model::nft::{Statement, StatementKind, Value, Verdict, VerdictMapRef, unquote};
use crate::model::{
    Completeness, Location, Placed, RuleBody, RuleText, Ruleset, Source, SourceText,
};
use crate::nft::iptables_nft::{StreamedRule, StreamedTable};
use lexer::{Lexer, Tok, Token, column};
use script::builds_ruleset;
use std::collections::HashSet;

/// Reads `nft list ruleset` (or `nft list table ...`) text.
///
/// The rules' and statements' texts are spans of one copy of `text` the ruleset holds
/// (see [`parse_source`]).
pub fn parse_text(text: &str) -> Ruleset {
    parse_source(&Source::read(text.to_owned()))
}

/// [`parse_text`] of shared text: the chains' names and the rules' and statements'
/// texts are spans of it (a copy only where the input spreads one over lines or
/// blanks), so the ruleset holds `source` and not a string a statement.
pub fn parse_source(source: &SourceText) -> Ruleset {
    let mut r = Reader::new(source, None);
    r.top();
    let (mut rs, _) = r.finish();
    undefined_set_references(&mut rs, None);
    rs.diagnostics.sort_by_key(|d| (d.line, d.column));
    rs
}

/// [`parse_text`] with every native rule holding its statements, as read in context:
/// for the tests that prove a rule's statements read again from its text
/// ([`crate::model::nft::NftRule::statements`]) are the same.
#[doc(hidden)]
pub fn parse_text_holding(text: &str) -> Ruleset {
    let source = Source::read(text.to_owned());
    let mut r = Reader::new(&source, None);
    r.hold_statements = true;
    r.top();
    let (mut rs, _) = r.finish();
    undefined_set_references(&mut rs, None);
    rs.diagnostics.sort_by_key(|d| (d.line, d.column));
    rs
}

/// A rule's statements read again from its text (one line, single blanks: the rule's
/// text as [`Reader::rule`] keeps it). Their texts are spans of a copy of `text`;
/// diagnostics were given when the rule was first read and are not given again (so the
/// rule's family, which changes only a diagnostic, is not needed).
fn statements_of_rule(text: &str) -> Vec<Statement> {
    let source = Source::read(text.to_owned());
    let mut r = Reader::new(&source, None);
    let mut toks = Vec::new();
    let mut i = 0;
    while let Some(t) = r.tok(i) {
        if !matches!(t.kind, Tok::Comment | Tok::Newline) {
            toks.push(t);
        }
        i += 1;
    }
    if toks.is_empty() {
        return Vec::new();
    }
    statement::StmtParser {
        r: &mut r,
        toks: &toks,
        i: 0,
        depth: 0,
        inet: false,
        network_known: false,
    }
    .statements()
}

/// Whether every chain, map and comment the statements name is spelt in `text` (the
/// model finds them there when it reads the statements again: see
/// [`crate::model::nft::NftRule::in_text`]).
fn names_within(statements: &[Statement], text: &str) -> bool {
    let within = |name: &str| text.contains(name);
    statements.iter().all(|s| match &s.kind {
        StatementKind::Verdict(v) => v.chain_ref().is_none_or(|r| within(r.chain)),
        StatementKind::VerdictMap { map, .. } => match map {
            VerdictMapRef::Named(n) => within(n),
            VerdictMapRef::Inline(entries) => entries
                .iter()
                .all(|(_, v)| v.chain_ref().is_none_or(|r| within(r.chain))),
        },
        StatementKind::Comment(c) => within(c),
        _ => true,
    })
}

/// Reads nft text like [`parse_text`] and turns iptables-nft's tables into the
/// iptables tables they are, like [`crate::nft::iptables_nft::translate`] after it,
/// with the same result, in a fraction of the memory: the rules of a table that can
/// be iptables-nft's are translated as they are read, and their nft statements
/// dropped (an nft rule holds ~900 bytes of statements; a 10k-service listing has
/// 170k rules). When the table turns out not to be iptables-nft's, or the text holds
/// something this does not follow (script commands, a chain or table block opened
/// twice), the text is read again the whole way.
pub fn parse_text_translated(text: &str) -> Ruleset {
    parse_text_translated_owned(Source::read(text.to_owned()))
}

/// [`parse_text_translated`], taking the text: unless the native nft rules' texts are
/// spans of it (they are when they make up half of it or more, see [`read_streamed`]),
/// it is freed as soon as the reading ends (when the caller holds no other handle on
/// it), before the translated tables' iptables models are built, so that the nft text
/// and the whole model are never in memory at once. Everything that could send the read back to the whole-way read is
/// decided while the text is still here (see [`read_streamed`]). Gives the model
/// [`parse_text_translated`] gives (tests/nft_streamed.rs).
pub fn parse_text_translated_owned(text: SourceText) -> Ruleset {
    let Some(read) = read_streamed(&text) else {
        return parse_whole_way(&text);
    };
    drop(text);
    match read.translate() {
        Ok(rs) => rs,
        Err(mut rs) => {
            // Not reached: every chunk of each table was read back as the whole table
            // is (see `StreamedTable::check_chunk`). Said, not hidden.
            rs.completeness = Completeness::Truncated;
            rs.diagnostics.push(Diagnostic::error(
                1,
                1,
                "the iptables-nft tables of this listing did not read back as iptables rules: their translated rules are missing (read the listing with nft -j instead)",
                "",
            ));
            rs
        }
    }
}

/// The whole-way read: every rule as nft statements, then translated.
fn parse_whole_way(text: &SourceText) -> Ruleset {
    let mut rs = parse_source(text);
    crate::nft::iptables_nft::translate(&mut rs);
    rs
}

/// The streaming read of [`parse_text_translated`]; `None` when the text needs the
/// whole-way read. Public for the tests that prove both reads give the same model.
#[doc(hidden)]
pub fn parse_text_streamed(text: &str) -> Option<Ruleset> {
    read_streamed(&Source::read(text.to_owned()))?
        .translate()
        .ok()
}

/// Names the chains of `table` by spans of one text of all their names (they may be
/// spans of the input: see [`read_streamed`]).
fn own_chain_names(table: &mut crate::model::Table) {
    let mut names = String::with_capacity(table.chains.iter().map(|c| c.name.len()).sum());
    for c in &table.chains {
        names.push_str(&c.name);
    }
    let names = Source::written(names, Placed::Nowhere);
    let mut at = 0;
    for c in &mut table.chains {
        let len = c.name.len();
        c.name = RuleText::span(&names, at..at + len);
        at += len;
    }
}

/// For each native rule of `table`: its text, then those of its statements that are
/// not slices of it, and for the others their offset in it.
fn native_texts(table: &crate::model::Table, mut f: impl FnMut(&str, Option<usize>)) {
    for r in table.chains.iter().flat_map(|c| &c.rules) {
        native_texts_of(r, &mut f);
    }
}

/// [`native_texts`] of one rule (nothing for a rule that is not native).
fn native_texts_of(r: &crate::model::Rule, mut f: impl FnMut(&str, Option<usize>)) {
    let RuleBody::Nft(n) = &r.body else { return };
    f(&r.text, None);
    if n.holds_statements() {
        for s in n.statements(&r.text).iter() {
            f(&s.text, offset_in(&r.text, &s.text));
        }
    }
}

/// Where `part` starts in `whole` when it is a slice of it.
fn offset_in(whole: &str, part: &str) -> Option<usize> {
    let at = (part.as_ptr() as usize).checked_sub(whole.as_ptr() as usize)?;
    (at + part.len() <= whole.len()).then_some(at)
}

/// The bytes [`own_native_texts`] copies.
fn native_text_len(table: &crate::model::Table) -> usize {
    let mut len = 0;
    native_texts(table, |s, within| {
        if within.is_none() {
            len += s.len();
        }
    });
    len
}

/// Gives the native rules of `table` (and their statements) spans of one text of their
/// own instead of spans of the input; a statement's text stays a span of its rule's.
fn own_native_texts(table: &mut crate::model::Table) {
    let mut texts = String::with_capacity(native_text_len(table));
    // Where each rule was read goes with its text.
    let mut placed = Vec::new();
    for r in table.chains.iter().flat_map(|c| &c.rules) {
        if matches!(r.body, RuleBody::Nft(_)) {
            placed.push((texts.len() as u32, r.location()));
        }
        native_texts_of(r, |s, within| {
            if within.is_none() {
                texts.push_str(s);
            }
        });
    }
    if texts.is_empty() {
        return;
    }
    let texts = Source::written(texts, Placed::Spans(placed.into_boxed_slice()));
    let mut at = 0;
    for r in table.chains.iter_mut().flat_map(|c| &mut c.rules) {
        let RuleBody::Nft(n) = &mut r.body else {
            continue;
        };
        let rule_at = at;
        at += r.text.len();
        for s in n.held_statements_mut().into_iter().flatten() {
            let range = match offset_in(&r.text, &s.text) {
                Some(off) => rule_at + off..rule_at + off + s.text.len(),
                None => {
                    at += s.text.len();
                    at - s.text.len()..at
                }
            };
            s.text = RuleText::span(&texts, range);
        }
        r.text = RuleText::span(&texts, rule_at..rule_at + r.text.len());
    }
}

/// A streaming read whose text was read: the ruleset with the tables that can be
/// iptables-nft's still as nft chains, and their translations.
struct StreamedRead {
    ruleset: Ruleset,
    /// By table index, as [`Stream::tables`].
    tables: Vec<Option<StreamedTable>>,
}

/// Reads `text` streaming; `None` when it needs the whole-way read. Once this returns
/// `Some`, the text is not needed any more: what is left ([`StreamedRead::translate`])
/// builds the iptables tables from the `-A` lines made while reading.
///
/// Chains' names and native rules' texts are spans of `text` while reading (no
/// allocation a chain or a statement: a 10k-service table has 58k chains and 300k
/// statements). When those of the native rules and of the sets' elements are under
/// half the text (the listing is mostly iptables-nft's, translated once the text is
/// gone), they and the chains' names are copied into texts of their own here, so that nothing holds `text` when
/// this returns; otherwise the ruleset keeps `text`, as the iptables model keeps an
/// iptables-save dump, which is less than the copy.
fn read_streamed(text: &SourceText) -> Option<StreamedRead> {
    let mut r = Reader::new(
        text,
        Some(Stream {
            abort: false,
            tables: Vec::new(),
        }),
    );
    r.top();
    let (mut rs, stream) = r.finish();
    let stream = stream?;
    if stream.abort {
        return None;
    }
    let mut tables = stream.tables;
    for (ti, st) in tables.iter_mut().enumerate() {
        let Some(st) = st else { continue };
        // The last chunk of `-A` lines is read back too.
        st.check_chunk();
        // A table read as iptables-nft's that is not, or whose lines do not read back:
        // its nft statements are gone.
        let table = &rs.tables[ti];
        if st.failed
            || (st.translated > 0
                && !(table.backend == crate::model::Backend::Nftables
                    && crate::nft::iptables_nft::is_iptables_nft_table(table)
                    && crate::nft::iptables_nft::header_reads_back(table)))
        {
            return None;
        }
    }
    let native: usize = rs
        .tables
        .iter()
        .map(|t| native_text_len(t) + crate::model::nft::element_text_len(&t.sets))
        .sum();
    if native <= text.len() / 2 {
        // Every table: one that stopped being streamed (a set came) kept the spans its
        // chains got before.
        for table in &mut rs.tables {
            own_chain_names(table);
            own_native_texts(table);
            crate::model::nft::own_element_texts(&mut table.sets);
        }
    }
    let stream = Stream {
        abort: false,
        tables,
    };
    undefined_set_references(&mut rs, Some((&stream, text)));
    rs.diagnostics.sort_by_key(|d| (d.line, d.column));
    Some(StreamedRead {
        ruleset: rs,
        tables: stream.tables,
    })
}

impl StreamedRead {
    /// The ruleset with its iptables-nft tables translated; `Err` (the ruleset as far
    /// as it got) when a table's `-A` lines did not read back.
    fn translate(self) -> Result<Ruleset, Ruleset> {
        let StreamedRead {
            ruleset: mut rs,
            mut tables,
        } = self;
        let mut failed = false;
        crate::nft::iptables_nft::translate_with(&mut rs, |ti, table| {
            match tables.get_mut(ti).and_then(Option::take) {
                Some(st) if st.translated > 0 => {
                    match crate::nft::iptables_nft::translate_streamed_table(table, st) {
                        Ok(kept) => Some(kept),
                        Err(()) => {
                            failed = true;
                            None
                        }
                    }
                }
                _ => crate::nft::iptables_nft::translate_table(table),
            }
        });
        // A table read as iptables-nft's that is not: its nft statements are gone.
        if failed
            || tables
                .iter()
                .any(|t| t.as_ref().is_some_and(|t| t.translated > 0))
        {
            return Err(rs);
        }
        Ok(rs)
    }
}

/// What a streaming read ([`parse_text_streamed`]) keeps beside the ruleset.
struct Stream {
    /// The text holds something the streaming read does not follow.
    abort: bool,
    /// By table index: the translation of a table that can be iptables-nft's (`None`
    /// for the others).
    tables: Vec<Option<StreamedTable>>,
}

/// The state of one read: the tokens, where the reader is, and the ruleset built so far.
/// Its methods are spread over the submodules by what they read.
struct Reader<'a> {
    text: &'a str,
    /// `text`, shared: chains' names and rules' and statements' texts are spans of it.
    source: &'a SourceText,
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
    chain_index: ChainIndex,
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
    /// Set for a streaming read ([`parse_text_streamed`]).
    stream: Option<Stream>,
    /// Every rule holds its statements, none is read again from its text (for the
    /// tests that prove both give the same statements: [`parse_text_holding`]).
    hold_statements: bool,
}

/// (table index, chain name) -> chain index, in 8 bytes a chain: the names are the
/// chains' own (`Ruleset::tables[ti].chains[ci].name`), not copies or spans. A map of
/// `(usize, &str)` keys held 32 bytes a chain, 4 MiB at the streaming read's peak on
/// a 10k-service listing's 58k chains.
#[derive(Default)]
struct ChainIndex {
    indexes: hashbrown::HashTable<(u32, u32)>,
}

impl ChainIndex {
    fn hash(ti: u32, name: &str) -> u64 {
        use std::hash::{BuildHasher, BuildHasherDefault};
        BuildHasherDefault::<crate::fasthash::FxHasher>::default().hash_one((ti, name))
    }

    /// The name of chain `ci` of table `ti`.
    fn name(tables: &[crate::model::Table], (ti, ci): (u32, u32)) -> &str {
        tables
            .get(ti as usize)
            .and_then(|t| t.chains.get(ci as usize))
            .map_or("", |c| &c.name)
    }

    fn get(&self, tables: &[crate::model::Table], ti: usize, name: &str) -> Option<usize> {
        let ti = ti as u32;
        self.indexes
            .find(Self::hash(ti, name), |&k| {
                k.0 == ti && Self::name(tables, k) == name
            })
            .map(|&(_, ci)| ci as usize)
    }

    /// Records that chain `ci` of table `ti`, there already, is named `name`.
    fn insert(&mut self, tables: &[crate::model::Table], ti: usize, name: &str, ci: usize) {
        // Inputs are under 4 GiB: indexes fit.
        let key = (ti as u32, ci as u32);
        self.indexes
            .insert_unique(Self::hash(key.0, name), key, |&k| {
                Self::hash(k.0, Self::name(tables, k))
            });
    }

    fn remove(&mut self, tables: &[crate::model::Table], ti: usize, name: &str) -> Option<usize> {
        let ti = ti as u32;
        let entry = self
            .indexes
            .find_entry(Self::hash(ti, name), |&k| {
                k.0 == ti && Self::name(tables, k) == name
            })
            .ok()?;
        let ((_, ci), _) = entry.remove();
        Some(ci as usize)
    }

    /// Forgets the chains of table `ti`.
    fn forget_table(&mut self, ti: usize) {
        self.indexes.retain(|k| k.0 != ti as u32);
    }

    fn clear(&mut self) {
        self.indexes.clear();
    }
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
    fn new(source: &'a SourceText, stream: Option<Stream>) -> Reader<'a> {
        let text = source.as_str();
        let mut lex_diags = Vec::new();
        let lexer = Lexer::new(text, &mut lex_diags);
        Reader {
            text,
            source,
            lexer,
            lex_diags,
            toks: Vec::new(),
            base: 0,
            pos: 0,
            ruleset: Ruleset::default(),
            rule_buf: Vec::new(),
            chain_index: ChainIndex::default(),
            script_noted: false,
            from_scratch: false,
            dead_tables: HashSet::new(),
            dead_chains: HashSet::new(),
            deleted_names: HashSet::new(),
            stream,
            hold_statements: false,
        }
    }

    /// The ruleset read (deleted tables and chains removed, the tokenizer's
    /// diagnostics first, as when the whole text was tokenized before reading) and the
    /// streaming state.
    fn finish(mut self) -> (Ruleset, Option<Stream>) {
        self.remove_deleted();
        let mut rs = self.ruleset;
        let mut diags = self.lex_diags;
        diags.append(&mut rs.diagnostics);
        rs.diagnostics = diags;
        (rs, self.stream)
    }

    /// A streaming read met something it does not follow: reading stops, and the text
    /// is read again the whole way.
    fn stream_abort(&mut self) {
        if let Some(st) = &mut self.stream {
            st.abort = true;
        }
    }

    /// Whether a streaming read gave up.
    fn aborted(&self) -> bool {
        self.stream.as_ref().is_some_and(|s| s.abort)
    }

    /// The streaming translation of table `ti`, if it has one.
    fn stream_table(&mut self, ti: usize) -> Option<&mut StreamedTable> {
        self.stream.as_mut()?.tables.get_mut(ti)?.as_mut()
    }

    /// Whether chain `ci` of table `ti` has no rules yet (translated ones included).
    fn chain_has_no_rules(&mut self, ti: usize, ci: usize) -> bool {
        self.ruleset.tables[ti].chains[ci].rules.is_empty()
            && self.stream_table(ti).is_none_or(|st| st.chain_is_empty(ci))
    }

    /// `s`, a slice of the text, whitespace collapsed ([`collapse`]): a span of the
    /// text when it has nothing to collapse.
    fn text_of(&self, s: &str) -> RuleText {
        match collapsed(s) {
            std::borrow::Cow::Borrowed(s) => RuleText::within(self.source, s),
            std::borrow::Cow::Owned(s) => RuleText::from(s),
        }
    }

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
            // The tokens of a table's element lists (all read before its first rule:
            // 4 MiB on a 10k-service listing) are not kept in the vector's capacity
            // until the end of the read.
            if self.toks.capacity() > 1 << 16 {
                self.toks.shrink_to(1 << 15);
            }
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
            if self.aborted() {
                return;
            }
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
    Value::of_words(words)
}

/// Text with every whitespace run (including newlines) turned into one space.
/// Borrow-free fast path when there is nothing to collapse.
fn collapse(s: &str) -> String {
    collapsed(s).into_owned()
}

/// [`collapse`], borrowing `s` (trimmed) when it has nothing to collapse.
fn collapsed(s: &str) -> std::borrow::Cow<'_, str> {
    let s = s.trim();
    // One pass over the bytes (two `contains` cost a substring searcher's set-up each:
    // this runs for every statement read).
    let b = s.as_bytes();
    let blank_to_collapse = b.iter().enumerate().any(|(i, &c)| {
        matches!(c, b'\n' | b'\t' | b'\r') || (c == b' ' && b.get(i + 1) == Some(&b' '))
    });
    if !blank_to_collapse {
        return std::borrow::Cow::Borrowed(s);
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
    std::borrow::Cow::Owned(out)
}

/// A rule that names a set or map (`@name`) or jumps to a chain its table does not
/// define: `nft -f` refuses it ("Could not process rule: No such file or directory").
/// Only a whole ruleset can say so (and not a table of one chain without sets, the
/// shape `nft list chain` prints): a script that adds to tables in the kernel (partial) or a cut
/// dump may name sets it does not show.
fn undefined_set_references(rs: &mut Ruleset, stream: Option<(&Stream, &str)>) {
    if rs.completeness != Completeness::Full {
        return;
    }
    let mut found = Vec::new();
    for (ti, t) in rs.tables.iter().enumerate() {
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
        let chains = ChainNames::new(&t.chains);
        let streamed = stream.and_then(|(s, text)| Some((s.tables.get(ti)?.as_ref()?, text)));
        for (ci, c) in t.chains.iter().enumerate() {
            let Some((st, text)) = streamed else {
                for r in &c.rules {
                    rule_references(t, &chains, chain_listing, r, &mut found);
                }
                continue;
            };
            // A streamed table: translated rules hold their jump target only (they
            // name no set or ct object: such rules are not translated as read).
            let mut kept = c.rules.iter();
            for slot in st.chain_rules(ci) {
                match slot {
                    StreamedRule::Nft => {
                        if let Some(r) = kept.next() {
                            rule_references(t, &chains, chain_listing, r, &mut found);
                        }
                    }
                    StreamedRule::Xt {
                        location,
                        transfer: Some((from, to, _)),
                        ..
                    } if !chain_listing => {
                        let to = &text[from as usize..to as usize];
                        if chains.base(to).is_none() {
                            found.push(jump_to_undefined(location, t, to));
                        }
                        if chains.base(to) == Some(true) {
                            found.push(jump_to_base(location, t, to));
                        }
                    }
                    StreamedRule::Xt { .. } => {}
                }
            }
        }
    }
    rs.diagnostics.extend(found);
}

/// A table's chains by name, in 4 bytes a chain (a map of `&str` keys took 24: 3 MiB
/// on a 10k-service table, at the streaming read's peak).
struct ChainNames<'t> {
    chains: &'t [crate::model::Chain],
    index: hashbrown::HashTable<u32>,
}

impl<'t> ChainNames<'t> {
    fn hash(name: &str) -> u64 {
        use std::hash::{BuildHasher, BuildHasherDefault};
        BuildHasherDefault::<crate::fasthash::FxHasher>::default().hash_one(name)
    }

    fn new(chains: &'t [crate::model::Chain]) -> ChainNames<'t> {
        let mut index = hashbrown::HashTable::with_capacity(chains.len());
        let name = |i: u32| chains.get(i as usize).map_or("", |c| &*c.name);
        for (i, c) in chains.iter().enumerate() {
            let h = Self::hash(&c.name);
            // Inputs are under 4 GiB: indexes fit.
            let i = i as u32;
            match index.find_mut(h, |&j| name(j) == &*c.name) {
                // A name twice (a script's dead chain): the last one counts.
                Some(j) => *j = i,
                None => {
                    index.insert_unique(h, i, |&j| Self::hash(name(j)));
                }
            }
        }
        ChainNames { chains, index }
    }

    /// Whether chain `name` is a base chain; `None` when the table has no such chain.
    fn base(&self, name: &str) -> Option<bool> {
        let i = self.index.find(Self::hash(name), |&j| {
            self.chains
                .get(j as usize)
                .is_some_and(|c| &*c.name == name)
        })?;
        Some(self.chains[*i as usize].base.is_some())
    }
}

/// A rule jumps or goes to a chain its table does not define.
fn jump_to_undefined(at: Location, t: &crate::model::Table, to: &str) -> Diagnostic {
    Diagnostic::error(
        at.line,
        at.column,
        format!(
            "rule jumps to chain '{to}' that table {} {} does not define (nft: No such file or directory)",
            t.family.as_str(),
            t.name
        ),
        to,
    )
}

/// A rule jumps or goes to a base chain.
fn jump_to_base(at: Location, t: &crate::model::Table, to: &str) -> Diagnostic {
    // The kernel refuses a jump or goto to a base chain (one with a hook):
    // "Could not process rule: Operation not supported".
    Diagnostic::error(
        at.line,
        at.column,
        format!(
            "rule jumps to base chain '{to}' of table {} {}: only regular chains can be jumped to (nft: Operation not supported)",
            t.family.as_str(),
            t.name
        ),
        to,
    )
}

/// The diagnostics of [`undefined_set_references`] for one rule of table `t`.
fn rule_references(
    t: &crate::model::Table,
    chains: &ChainNames,
    chain_listing: bool,
    r: &crate::model::Rule,
    found: &mut Vec<Diagnostic>,
) {
    // A jump or goto to a chain the table does not define is refused the same way.
    // The chains of a rule of a common shape are known without reading its
    // statements again (all verdicts'); and only a rule that spells `jump` or `goto`
    // transfers to a chain (a verdict or an inline verdict map's entry): the others
    // are not read again either.
    if let RuleBody::Nft(rule) = &r.body
        && !chain_listing
        && let Some((known, verdicts)) = rule.known_transfers(&r.text)
    {
        // As below: the verdicts' chains first, then every reference's.
        if verdicts {
            for c in &known {
                if chains.base(c.chain).is_none() {
                    found.push(jump_to_undefined(r.location(), t, c.chain));
                }
            }
        }
        for c in &known {
            if chains.base(c.chain) == Some(true) {
                found.push(jump_to_base(r.location(), t, c.chain));
            }
        }
    } else if let RuleBody::Nft(rule) = &r.body
        && !chain_listing
        && rule.may_hold(&r.text, &["jump", "goto"])
    {
        // One read of the statements (a rule read from text reads them again).
        let statements = rule.statements(&r.text);
        for s in statements.iter() {
            if let StatementKind::Verdict(Verdict::Jump(to) | Verdict::Goto(to)) = &s.kind
                && chains.base(to).is_none()
            {
                found.push(jump_to_undefined(r.location(), t, to));
            }
        }
        // What `NftRule::chain_references` gives, from the statements read.
        let references = statements.iter().flat_map(|s| match &s.kind {
            StatementKind::Verdict(v) => v.chain_ref().into_iter().collect(),
            StatementKind::VerdictMap {
                map: VerdictMapRef::Inline(entries),
                ..
            } => entries.iter().filter_map(|(_, v)| v.chain_ref()).collect(),
            _ => Vec::new(),
        });
        for c in references {
            if chains.base(c.chain) == Some(true) {
                found.push(jump_to_base(r.location(), t, c.chain));
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
            let at = r.location();
            found.push(Diagnostic::error(
                at.line,
                at.column,
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
            let at = r.location();
            found.push(Diagnostic::error(
                at.line,
                at.column,
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

/// The ct objects a rule sets by name: `(kind, name)` for `ct helper set "ftp"` and for
/// each quoted value of `ct helper set EXPR map { KEY : "name", ... }` (kinds helper,
/// expectation, timeout). Unquoted names and named maps (`map @m`) are not followed.
fn ct_object_references(text: &str) -> Vec<(&'static str, &str)> {
    let mut out = Vec::new();
    // Every needle spells `ct `: most rules are looked at once.
    if !text.contains("ct ") {
        return out;
    }
    for (kind, needle) in [
        ("helper", "ct helper set "),
        ("expectation", "ct expectation set "),
        ("timeout", "ct timeout set "),
    ] {
        let mut rest = text;
        while let Some(at) = rest.find(needle) {
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
