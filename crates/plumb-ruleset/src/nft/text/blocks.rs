//! The blocks `nft list ruleset` prints: `table`, `chain` (with a base chain's `type ...
//! hook ... priority ...` and `policy`), `set` and `map` (declarations and `elements`),
//! and a rule line inside a chain. Script commands (`script`) reuse these readers for
//! the blocks and rules they carry.

use super::lexer::{Tok, Token, column};
use super::statement::StmtParser;
use super::{
    FAMILIES, Reader, collapse, collapsed, is_elision, names_within, statements_of_rule,
    value_of_words,
};
use crate::model::RuleText;
use crate::model::nft::{
    NftRule, NftSet, SetElement, SetKind, Statement, StatementKind, TextFacts, Verdict, unquote,
};
use crate::model::{
    Backend, BaseChain, Chain, Family, Hook, Location, Policy, Rule, RuleBody, Table,
};
use crate::nft::iptables_nft::StreamedRule;

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

impl<'a> Reader<'a> {
    pub(super) fn table(&mut self) {
        self.table_header(false);
    }

    /// `table [FAMILY] NAME {` ... `}`. From a script (`add table [FAMILY] NAME [{ .. }]`)
    /// the block is optional.
    pub(super) fn table_header(&mut self, script: bool) {
        let Some(kw) = self.peek() else { return };
        self.pos += 1;
        let mut family = Family::Ip;
        let first = self.peek_word();
        let second = self.tok(self.pos + 1).filter(|t| t.kind == Tok::Word);
        let name = match (first, second) {
            (Some(f), Some(n)) if FAMILIES.contains(&f) => {
                family = Family::parse(f).unwrap_or(Family::Ip);
                self.pos += 2;
                unquote(self.s(&n))
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
        if self.stream.is_some() && self.find_table(family, name).is_some() {
            // A table block opened again: its rules would not be in reading order.
            self.stream_abort();
            return;
        }
        let ti = self.table_index(family, name, loc);
        if let Some(st) = &mut self.stream {
            if st.tables.len() <= ti {
                st.tables.resize_with(ti + 1, || None);
            }
            st.tables[ti] = crate::nft::iptables_nft::could_be_iptables_nft(family, name)
                .then(|| crate::nft::iptables_nft::StreamedTable::new(family, name));
        }
        self.table_body(ti, kw);
    }

    /// The live (not deleted) table `family name`.
    pub(super) fn find_table(&self, family: Family, name: &str) -> Option<usize> {
        self.ruleset.tables.iter().enumerate().position(|(i, t)| {
            t.family == family && &*t.name == name && !self.dead_tables.contains(&i)
        })
    }

    /// The table `family name`, created when new.
    pub(super) fn table_index(&mut self, family: Family, name: &str, loc: Location) -> usize {
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
            if self.aborted() {
                return;
            }
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
        let kw = self.peek()?;
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
        if self.stream.is_some()
            && self
                .chain_index
                .get(&self.ruleset.tables, ti, name)
                .is_some()
        {
            // A chain block opened again: its rules would not be in reading order.
            self.stream_abort();
            return;
        }
        let ci = self.chain_of(ti, name, self.loc(&kw));
        self.chain_body(ti, ci, kw, name);
    }

    /// The chain `name` of table `ti`, created when new.
    pub(super) fn chain_of(&mut self, ti: usize, name: &'a str, loc: Location) -> usize {
        if let Some(ci) = self.chain_index.get(&self.ruleset.tables, ti, name) {
            return ci;
        }
        let table = &mut self.ruleset.tables[ti];
        if self.deleted_names.remove(&(ti, name)) {
            // Deleted earlier and added again: it exists.
            table.deleted_chains.retain(|d| &**d != name);
        }
        // A span of the text: no allocation a chain (see `read_streamed`).
        let chain_name = RuleText::within(self.source, name);
        let table = &mut self.ruleset.tables[ti];
        table.chains.push(Chain::named(chain_name, None, loc));
        let ci = table.chains.len() - 1;
        self.chain_index.insert(&self.ruleset.tables, ti, name, ci);
        ci
    }

    /// A chain block's declarations and rules, after its `{`, through its `}`.
    pub(super) fn chain_body(&mut self, ti: usize, ci: usize, kw: Token, name: &str) {
        loop {
            if self.aborted() {
                return;
            }
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
            let no_rules = self.chain_has_no_rules(ti, ci);
            match w {
                "type" => self.base_chain(ti, ci),
                "policy" => self.policy(ti, ci),
                "devices" | "device" if no_rules => {
                    self.skip_statement();
                }
                "comment" | "flags" if no_rules => {
                    // Chain comment/flags: the model has no field for them. nft takes
                    // one string after `comment` and only `offload` after `flags`.
                    let start = self.pos;
                    let text = self.skip_statement();
                    let words: Vec<&str> = self
                        .read_tokens(start, self.pos)
                        .iter()
                        .filter(|t| t.kind == Tok::Word)
                        .map(|t| self.s(t))
                        .collect();
                    let ok = match w {
                        "comment" => {
                            words.len() == 2 && !super::statement::NOT_VALUES.contains(&words[1])
                        }
                        _ => words == ["flags", "offload"],
                    };
                    if !ok {
                        self.error(
                            &t,
                            format!(
                                "expected '{w} {}' (nft: syntax error)",
                                if w == "comment" {
                                    "\"TEXT\""
                                } else {
                                    "offload"
                                }
                            ),
                            text,
                        );
                    }
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
        let toks: Vec<Token> = self
            .read_tokens(start, self.pos)
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
                    let from = toks[i + 1].start();
                    let to = toks[toks.len() - 1].end();
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
        let Some(kw) = self.peek() else { return };
        let start = self.pos;
        let stmt = self.skip_statement();
        let p = self
            .read_tokens(start + 1, self.pos)
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

    pub(super) fn rule(&mut self, ti: usize, ci: usize) {
        self.forget_read_tokens();
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
                    let c = self.s(&t);
                    if let Some(h) = c.strip_prefix('#').map(str::trim)
                        && let Some(n) = h.strip_prefix("handle ")
                    {
                        handle = n.trim().parse().ok();
                    }
                    // nft without xtables support: `... counter packets 0 bytes 0 #
                    // Warning: XT target DNAT not found` and, on the next line, the
                    // rule's last statement `xt target "DNAT"`.
                    if depth == 0
                        && c.starts_with("# Warning: XT ")
                        && self.tok(self.pos + 1).map(|n| n.kind) == Some(Tok::Newline)
                        && self
                            .tok(self.pos + 2)
                            .is_some_and(|n| n.kind == Tok::Word && self.s(&n) == "xt")
                    {
                        self.pos += 2;
                        continue;
                    }
                }
                _ => {}
            }
            if !matches!(t.kind, Tok::Comment | Tok::Newline) {
                buf.push(t);
            }
            self.pos += 1;
            if depth > 0 && self.peek().is_none() {
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
        let span = &self.text[first.start()..last.end()];
        // A rule on one line with single blanks: its text is a span of the input, and
        // its statements are read again from it when asked (see `NftRule`).
        let location = Location {
            line: first.line,
            column: column(self.text, first.line_start(self.text), first.start()),
        };
        // A rule's location is where its text starts, or kept with a text of its own.
        let (text, one_line) = match collapsed(span) {
            std::borrow::Cow::Borrowed(s) => (RuleText::within(self.source, s), true),
            std::borrow::Cow::Owned(s) => (RuleText::written_at(s, location), false),
        };
        let inet = self.ruleset.tables[ti].family == Family::Inet;
        let mut sp = StmtParser {
            r: self,
            toks: &buf,
            i: 0,
            depth: 0,
            inet,
            network_known: false,
        };
        let statements = sp.statements();
        let counters = statements.iter().find_map(|s| match &s.kind {
            StatementKind::Counter(c) => *c,
            _ => None,
        });
        if self.translate_as_read(ti, ci, &statements, &text, &buf, location, counters) {
            self.rule_buf = buf;
            return;
        }
        // A rule holds its statements when its text alone would not read the same:
        // when it ends in a comma (the tokenizer reads a comma by what follows it:
        // `dead::/64,;` is one word, `dead::/64,` at the end of a text a word and a
        // list comma), or when its words end in a blank only Unicode calls one (a
        // vertical tab: the text is trimmed of it, the word holds it).
        let rule = if one_line
            && !self.hold_statements
            && !text.ends_with(',')
            && text.len() == span.len()
            && names_within(&statements, &text)
        {
            let facts = TextFacts::of(&statements, &text);
            NftRule::in_text(statements_of_rule, handle, facts)
        } else {
            NftRule::holding(statements, handle)
        };
        let chain = &mut self.ruleset.tables[ti].chains[ci];
        if chain.rules.len() == chain.rules.capacity() {
            // Small chains grow one rule at a time: no slack for mimalloc to keep (see
            // the iptables reader's `SMALL_CHAIN`).
            let n = chain.rules.len();
            chain.rules.reserve_exact(if n < 16 { 1 } else { n });
        }
        chain.rules.push(Rule {
            text,
            body: RuleBody::Nft(rule),
        });
        self.rule_buf = buf;
    }

    /// In a streaming read, a rule of a table that can be iptables-nft's becomes its
    /// `-A CHAIN ...` line, and its nft statements are dropped (true: the rule is not
    /// to be kept). A rule iptables-nft did not write is kept as an nft rule.
    #[allow(clippy::too_many_arguments)]
    fn translate_as_read(
        &mut self,
        ti: usize,
        ci: usize,
        statements: &[Statement],
        text: &str,
        toks: &[Token],
        location: Location,
        counters: Option<crate::model::Counters>,
    ) -> bool {
        let family = self.ruleset.tables[ti].family;
        if self.stream_table(ti).is_none() {
            return false;
        }
        let spec = crate::nft::iptables_nft::rule_spec(statements, family);
        let slot = match spec {
            None => StreamedRule::Nft,
            Some(_)
                if !super::set_references(text).is_empty()
                    || !super::ct_object_references(text).is_empty() =>
            {
                // Checked against the whole table at the end: not kept here.
                self.stream_abort();
                return false;
            }
            Some(_) => {
                let mut transfers = statements.iter().filter_map(|s| match &s.kind {
                    StatementKind::Verdict(Verdict::Jump(c)) => Some((c.as_str(), false)),
                    StatementKind::Verdict(Verdict::Goto(c)) => Some((c.as_str(), true)),
                    _ => None,
                });
                let transfer = transfers.next();
                if transfers.next().is_some() {
                    self.stream_abort();
                    return false;
                }
                match transfer {
                    None => StreamedRule::Xt {
                        location,
                        counters,
                        transfer: None,
                    },
                    Some((target, goto)) => {
                        // The target as a span of the text (a token, unquoted).
                        let base = self.text.as_ptr() as usize;
                        let span = toks.iter().rev().find_map(|t| {
                            let w = unquote(self.s(t));
                            (w == target).then(|| {
                                let from = w.as_ptr() as usize - base;
                                (from as u32, (from + w.len()) as u32, goto)
                            })
                        });
                        let Some(span) = span else {
                            self.stream_abort();
                            return false;
                        };
                        StreamedRule::Xt {
                            location,
                            counters,
                            transfer: Some(span),
                        }
                    }
                }
            }
        };
        let Some(st) = self
            .stream
            .as_mut()
            .and_then(|s| s.tables.get_mut(ti)?.as_mut())
        else {
            return false;
        };
        let chain = &self.ruleset.tables[ti].chains[ci].name;
        match (spec, slot) {
            (Some(spec), StreamedRule::Xt { .. }) => {
                st.push(ci, slot, Some((chain, &spec)));
                true
            }
            _ => {
                st.push(ci, slot, None);
                false
            }
        }
    }

    fn set(&mut self, ti: usize) {
        if let Some(st) = self.stream_table(ti) {
            if st.translated > 0 {
                // A set after translated rules: the table is not iptables-nft's.
                self.stream_abort();
                return;
            }
            if let Some(s) = &mut self.stream {
                s.tables[ti] = None;
            }
        }
        let kind = if self.peek_word() == Some("map") {
            SetKind::Map
        } else {
            SetKind::Set
        };
        let handle = self.tok(self.pos + 3).and_then(|t| self.handle_of(&t));
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
    pub(super) fn set_body(&mut self, set: &mut NftSet, kw: Token) {
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
        let Some(kw) = self.peek() else { return };
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
    pub(super) fn element_list(&mut self, set: &mut NftSet, kw: Token) {
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
            comment = Some(RuleText::within(self.source, unquote(text)));
        }
        let key_text = if opt > 0 {
            self.text_of(&self.text[toks[0].start()..toks[opt - 1].end()])
        } else {
            RuleText::from("")
        };
        let (value, verdict) = match colon {
            Some(c) if c + 1 < words.len() => {
                let vt = self.text_of(&self.text[toks[c + 1].start()..toks[toks.len() - 1].end()]);
                let verdict = Verdict::parse_in(&words[c + 1..], Some(self.source));
                if set.is_verdict_map() && verdict.is_none() {
                    self.error(
                        &toks[c + 1],
                        "verdict map element value is not a verdict: expected accept, drop, return, continue, jump CHAIN or goto CHAIN",
                        &vt,
                    );
                }
                (Some(vt), verdict)
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
        // The key is read again from its text when asked, when the text's words are
        // the key's tokens (no quoted blank, nothing written without a blank between).
        let key_words = &words[..opt];
        let said = if key_text.is_empty() {
            key_words.is_empty()
        } else {
            key_text.split(' ').eq(key_words.iter().copied())
        };
        set.elements.push(if said {
            SetElement::with_key_of_text(key_text, value, verdict, comment)
        } else {
            SetElement::new(key_text, value_of_words(key_words), value, verdict, comment)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse_text;
    use super::super::tests::errors;
    use crate::model::{Completeness, Family, Policy};

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
}
