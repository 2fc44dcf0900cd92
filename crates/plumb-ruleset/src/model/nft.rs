//! The native nftables part of the model: a rule as a sequence of [`Statement`]s, and
//! the sets and maps of a table ([`NftSet`]).
//!
//! Each statement keeps its original text and a parsed [`StatementKind`] good enough to
//! follow control flow (verdicts, verdict maps, named maps' `goto`/`jump` elements) and to
//! evaluate packets (matches with their operator and value, NAT, marks). Anything plumb
//! does not model stays as [`StatementKind::Other`] with its text: nothing read is
//! dropped. Both nft readers (`crate::nft::text`, `crate::nft::json`) build these types;
//! this module depends on nothing but the rest of the model. A rule read from nft text
//! does not hold its statements: they are read again from its text when asked
//! ([`NftRule::statements`]), by the function the text reader registers.

use super::{ChainRef, Counters, Location, RuleBody, RuleText, Table, TransferKind};
use serde::Serialize;
use std::borrow::Cow;

/// A native nft rule: statements in order, plus the kernel handle when the dump
/// carried one (`nft -a` comments `# handle N`, or JSON `handle`).
///
/// A rule read from nft text does not hold its statements: they are read again from
/// the rule's text (`Rule::text`) each time they are asked for ([`NftRule::statements`]
/// hands out a list the caller drops). A 10k-service kube-proxy listing has 300k
/// statements, 23 MiB held, more than the listing itself. A rule read from JSON, or
/// whose text the reader composed (spread over lines in the input), holds them.
///
/// What the passes over every rule ask most (its chain references, its NAT) is
/// answered without reading the statements again for the common shapes: the rule keeps
/// a few bits found from its statements when it was read ([`TextFacts`]).
///
/// 8 bytes, and no allocation for a rule read from text without a handle (most rules:
/// `nft list ruleset` prints no handles): such rules share one [`NftRuleParts`] per
/// value of their bits. A box held 32 bytes for each of a 10k-service listing's 125k
/// rules.
#[derive(Clone, Debug)]
pub struct NftRule {
    /// `None`: the statements are in the rule's text, nothing is known of them
    /// without reading them, and there is no handle.
    parts: Option<std::sync::Arc<NftRuleParts>>,
}

/// What an [`NftRule`] holds when it holds anything.
#[derive(Clone, Debug)]
struct NftRuleParts {
    /// `None`: the statements are in the rule's text.
    statements: Option<Box<[Statement]>>,
    handle: Option<u64>,
    /// What is known of the statements in the text (nothing for a rule holding them).
    facts: TextFacts,
}

/// What is known of the statements of a rule read from text without reading them
/// again, found from the statements when the rule was read ([`TextFacts::of`]): bits,
/// each set only when it is exactly true of the statements.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TextFacts(u8);

impl TextFacts {
    /// The rule transfers to no chain (no `jump`/`goto` verdict, no inline verdict map
    /// entry that does).
    const NO_TRANSFER: u8 = 1;
    /// The rule's one chain reference is a `jump`/`goto` verdict whose chain is the
    /// text's last word (`... jump mark-for-masquerade`).
    const TAIL_TRANSFER: u8 = 1 << 1;
    /// With `TAIL_TRANSFER`: the verdict is a `goto`.
    const TAIL_GOTO: u8 = 1 << 2;
    /// The rule has no NAT statement.
    const NO_NAT: u8 = 1 << 3;
    /// The rule's one NAT statement is its last one, and its arguments are the text
    /// after the keyword's last occurrence (`... dnat to 10.0.0.1:80`); the kind in the
    /// two bits at `NAT_KIND_SHIFT`.
    const TAIL_NAT: u8 = 1 << 4;
    const NAT_KIND_SHIFT: u8 = 5;
    /// The rule's chain references are those of the inline verdict map its text ends
    /// with (`numgen random mod 2 vmap { 0 : goto a, 1 : goto b }`), in order: see
    /// [`vmap_transfers`].
    const INLINE_VMAP: u8 = 1 << 7;

    /// The facts of `statements`, read from `text` (the rule's text): each bit set only
    /// when the answer it gives from the text equals the one the statements give.
    pub fn of(statements: &[Statement], text: &str) -> TextFacts {
        let mut bits = 0;
        // The chain references (counted, the first kept) and whether the first is a
        // verdict's; the NAT statements (counted, the first kept) and whether the
        // last statement is NAT. No allocation: this runs for every rule read.
        let (mut transfers, mut first_transfer, mut verdict) = (0usize, None, false);
        let mut verdict_transfers = 0usize;
        let (mut nats, mut first_nat) = (0usize, None);
        for s in statements {
            match &s.kind {
                StatementKind::Verdict(v) => {
                    if let Some(r) = v.chain_ref() {
                        verdict_transfers += 1;
                        if transfers == 0 {
                            first_transfer = Some(r);
                            verdict = true;
                        }
                        transfers += 1;
                    }
                }
                StatementKind::VerdictMap {
                    map: VerdictMapRef::Inline(entries),
                    ..
                } => {
                    for r in entries.iter().filter_map(|(_, v)| v.chain_ref()) {
                        if transfers == 0 {
                            first_transfer = Some(r);
                        }
                        transfers += 1;
                    }
                }
                StatementKind::Nat { kind, args } => {
                    if nats == 0 {
                        first_nat = Some((*kind, args.as_str()));
                    }
                    nats += 1;
                }
                _ => {}
            }
        }
        match (transfers, first_transfer) {
            (0, _) => bits |= Self::NO_TRANSFER,
            (1, Some(only)) if verdict => {
                let goto = only.kind == TransferKind::Goto;
                if tail_transfer(text, goto) == Some(only.chain) {
                    bits |= Self::TAIL_TRANSFER | if goto { Self::TAIL_GOTO } else { 0 };
                }
            }
            _ => {}
        }
        // An inline verdict map's entries, when the text says them all (compared with
        // the statements' one by one, nothing allocated).
        if transfers > 1 || (transfers == 1 && !verdict) {
            let mut read = statements
                .iter()
                .flat_map(|s| match &s.kind {
                    StatementKind::VerdictMap {
                        map: VerdictMapRef::Inline(entries),
                        ..
                    } => entries.as_slice(),
                    _ => &[],
                })
                .filter_map(|(_, v)| v.chain_ref());
            let all_in_vmap = verdict_transfers == 0
                && scan_vmap_transfers(text, |scanned| read.next() == Some(scanned))
                && read.next().is_none();
            if all_in_vmap {
                bits |= Self::INLINE_VMAP;
            }
        }
        match (nats, first_nat) {
            (0, _) => bits |= Self::NO_NAT,
            (1, Some((kind, args)))
                if statements.last().and_then(nat_of) == Some((kind, args))
                    && tail_nat(text, kind) == Some(args) =>
            {
                bits |= Self::TAIL_NAT | (nat_kind_bits(kind) << Self::NAT_KIND_SHIFT);
            }
            _ => {}
        }
        TextFacts(bits)
    }

    /// Whether the rule's chain references are known.
    pub fn knows_transfers(self) -> bool {
        self.has(Self::NO_TRANSFER | Self::TAIL_TRANSFER | Self::INLINE_VMAP)
    }

    /// Whether the rule's NAT statements are known.
    pub fn knows_nats(self) -> bool {
        self.has(Self::NO_NAT | Self::TAIL_NAT)
    }

    fn has(self, bit: u8) -> bool {
        self.0 & bit != 0
    }

    /// The rule's chain references from its text, when the bits say them.
    fn transfers(self, text: &str) -> Option<Vec<ChainRef<'_>>> {
        if self.has(Self::NO_TRANSFER) {
            return Some(Vec::new());
        }
        if self.has(Self::INLINE_VMAP) {
            return vmap_transfers(text);
        }
        if !self.has(Self::TAIL_TRANSFER) {
            return None;
        }
        let goto = self.has(Self::TAIL_GOTO);
        let chain = tail_transfer(text, goto)?;
        let kind = if goto {
            TransferKind::Goto
        } else {
            TransferKind::Jump
        };
        Some(vec![ChainRef { kind, chain }])
    }

    /// The rule's NAT statements (kind and arguments) from its text, when the bits say
    /// them.
    fn nats(self, text: &str) -> Option<Vec<(NatKind, &str)>> {
        if self.has(Self::NO_NAT) {
            return Some(Vec::new());
        }
        if !self.has(Self::TAIL_NAT) {
            return None;
        }
        let kind = nat_kind_of_bits(self.0 >> Self::NAT_KIND_SHIFT);
        Some(vec![(kind, tail_nat(text, kind)?)])
    }
}

/// The chain a rule's text ends in after `jump ` (or `goto ` when `goto`): its last
/// word when the word before is the verdict's.
fn tail_transfer(text: &str, goto: bool) -> Option<&str> {
    let (before, last) = text.rsplit_once(' ')?;
    let verdict = if goto { "goto" } else { "jump" };
    let word_before = before.rsplit(' ').next()?;
    (word_before == verdict && !last.is_empty()).then_some(last)
}

/// The chain references of the inline verdict map a rule's text ends with
/// (`KEY vmap { K : goto C, K : jump D, K : accept }`), in order, read from the text:
/// `None` when the text does not end with one, or an entry's verdict is not one word
/// or a `jump`/`goto` and one word.
fn vmap_transfers(text: &str) -> Option<Vec<ChainRef<'_>>> {
    let mut out = Vec::new();
    scan_vmap_transfers(text, |r| {
        out.push(r);
        true
    })
    .then_some(out)
}

/// [`vmap_transfers`], each reference handed to `each` as it is read: false when the
/// text has no such map, or as soon as `each` says false.
fn scan_vmap_transfers<'t>(text: &'t str, mut each: impl FnMut(ChainRef<'t>) -> bool) -> bool {
    const OPEN: &str = "vmap { ";
    let Some(body) = text.strip_suffix(" }") else {
        return false;
    };
    let Some(body) = body.rfind(OPEN).and_then(|at| body.get(at + OPEN.len()..)) else {
        return false;
    };
    for entry in body.split(", ") {
        let Some((_, verdict)) = entry.rsplit_once(" : ") else {
            return false;
        };
        if let Some((word, chain)) = verdict.split_once(' ') {
            let kind = match word {
                "jump" => TransferKind::Jump,
                "goto" => TransferKind::Goto,
                _ => return false,
            };
            if chain.is_empty() || chain.contains(' ') || !each(ChainRef { kind, chain }) {
                return false;
            }
        }
    }
    true
}

/// The arguments of a rule's text's last NAT statement of `kind`: the text after the
/// keyword's last occurrence (empty when the text ends with it).
fn tail_nat(text: &str, kind: NatKind) -> Option<&str> {
    let keyword = nat_keyword(kind);
    let at = text.rfind(keyword)?;
    let rest = text.get(at + keyword.len()..)?;
    if rest.is_empty() {
        return Some(rest);
    }
    rest.strip_prefix(' ')
}

/// A NAT statement's kind and arguments.
fn nat_of(s: &Statement) -> Option<(NatKind, &str)> {
    match &s.kind {
        StatementKind::Nat { kind, args } => Some((*kind, args.as_str())),
        _ => None,
    }
}

fn nat_keyword(kind: NatKind) -> &'static str {
    match kind {
        NatKind::Dnat => "dnat",
        NatKind::Snat => "snat",
        NatKind::Masquerade => "masquerade",
        NatKind::Redirect => "redirect",
    }
}

fn nat_kind_bits(kind: NatKind) -> u8 {
    match kind {
        NatKind::Dnat => 0,
        NatKind::Snat => 1,
        NatKind::Masquerade => 2,
        NatKind::Redirect => 3,
    }
}

fn nat_kind_of_bits(bits: u8) -> NatKind {
    match bits & 3 {
        0 => NatKind::Dnat,
        1 => NatKind::Snat,
        2 => NatKind::Masquerade,
        _ => NatKind::Redirect,
    }
}

/// The parts shared by the rules read from text without a handle, one per value of
/// their [`TextFacts`].
fn shared_parts(facts: TextFacts) -> Option<std::sync::Arc<NftRuleParts>> {
    static SHARED: std::sync::OnceLock<Vec<std::sync::Arc<NftRuleParts>>> =
        std::sync::OnceLock::new();
    SHARED
        .get_or_init(|| {
            (0..=u8::MAX)
                .map(|bits| {
                    std::sync::Arc::new(NftRuleParts {
                        statements: None,
                        handle: None,
                        facts: TextFacts(bits),
                    })
                })
                .collect()
        })
        .get(usize::from(facts.0))
        .cloned()
}

/// Reads the statements of a rule from its text (a rule of any family: the family
/// changes only what the reader reports, not the statements).
pub(crate) type ReadStatements = fn(&str) -> Vec<Statement>;

/// The reader of the rules that do not hold their statements, set by the nft text
/// reader when it makes the first ([`NftRule::in_text`]): the model depends on no
/// reader, and a rule has no room for a function pointer of its own.
static READ_STATEMENTS: std::sync::OnceLock<ReadStatements> = std::sync::OnceLock::new();

impl Default for NftRule {
    /// A rule without statements.
    fn default() -> NftRule {
        NftRule::holding(Vec::new(), None)
    }
}

impl NftRule {
    /// A rule holding its statements (read from JSON, or from text the reader
    /// composed).
    pub fn holding(statements: Vec<Statement>, handle: Option<u64>) -> NftRule {
        NftRule {
            parts: Some(std::sync::Arc::new(NftRuleParts {
                statements: Some(statements.into_boxed_slice()),
                handle,
                facts: TextFacts::default(),
            })),
        }
    }

    /// A rule whose statements `read` reads from the rule's text when asked. The reader
    /// that makes it promises that `read(text)` gives the statements it read, and that
    /// every chain, map and comment they name is a slice of the text (see
    /// [`NftRule::chain_references`]). `read` is the same function for every rule.
    /// `facts`: [`TextFacts::of`] the statements read.
    pub(crate) fn in_text(read: ReadStatements, handle: Option<u64>, facts: TextFacts) -> NftRule {
        READ_STATEMENTS.get_or_init(|| read);
        NftRule {
            parts: match handle {
                None => shared_parts(facts),
                Some(handle) => Some(std::sync::Arc::new(NftRuleParts {
                    statements: None,
                    handle: Some(handle),
                    facts,
                })),
            },
        }
    }

    /// The rule's chain references when they are known without reading its statements
    /// again (a rule read from text, of a common shape), and whether all of them are
    /// verdicts' (`jump`/`goto`; otherwise all are an inline verdict map's entries').
    pub(crate) fn known_transfers<'a>(&self, text: &'a str) -> Option<(Vec<ChainRef<'a>>, bool)> {
        let facts = self.facts();
        let verdicts = !facts.has(TextFacts::INLINE_VMAP);
        Some((facts.transfers(text)?, verdicts))
    }

    /// What is known of the statements without reading them again (for the tests
    /// that prove it is what the statements say, and that it is there).
    #[doc(hidden)]
    pub fn text_facts(&self) -> TextFacts {
        self.facts()
    }

    /// What is known of the statements without reading them (nothing when the rule
    /// holds them).
    fn facts(&self) -> TextFacts {
        self.parts
            .as_ref()
            .map_or(TextFacts::default(), |p| p.facts)
    }

    /// The kernel's rule handle; `None` when the dump was listed without `-a` (text) or
    /// carried no `handle` (JSON).
    pub fn handle(&self) -> Option<u64> {
        self.parts.as_ref().and_then(|p| p.handle)
    }

    /// Whether the rule holds its statements (false: they are read from its text).
    pub fn holds_statements(&self) -> bool {
        self.held().is_some()
    }

    /// The statements the rule holds.
    fn held(&self) -> Option<&[Statement]> {
        self.parts.as_ref()?.statements.as_deref()
    }

    /// The statements the rule holds, to give their texts another home (`None` when
    /// they are read from the rule's text).
    pub(crate) fn held_statements_mut(&mut self) -> Option<&mut [Statement]> {
        let parts = self.parts.as_mut()?;
        // Shared parts hold no statements: only a rule holding some is made unique.
        parts.statements.as_ref()?;
        std::sync::Arc::make_mut(parts).statements.as_deref_mut()
    }

    /// The rule's statements in evaluation order (evaluation stops at the first match
    /// that fails or at a terminal verdict). `text` is the rule's text (`Rule::text`):
    /// a rule read from nft text reads its statements from it, and the list is the
    /// caller's (dropped after use, not kept in the rule).
    pub fn statements(&self, text: &str) -> std::borrow::Cow<'_, [Statement]> {
        match self.held() {
            Some(s) => std::borrow::Cow::Borrowed(s),
            // Set before any rule without statements was made.
            None => std::borrow::Cow::Owned(
                READ_STATEMENTS
                    .get()
                    .map_or_else(Vec::new, |read| read(text)),
            ),
        }
    }

    /// Every chain this rule can transfer control to: `jump`/`goto` verdicts and the
    /// `jump`/`goto` entries of inline verdict maps. Named maps are resolved through
    /// [`NftSet::verdict_targets`] (see [`table_chain_references`]). `text` is the
    /// rule's text (`Rule::text`).
    pub fn chain_references<'a>(&'a self, text: &'a str) -> Vec<ChainRef<'a>> {
        if let Some(known) = self.facts().transfers(text) {
            return known;
        }
        self.named(text, &["jump", "goto"], |s, out| match &s.kind {
            StatementKind::Verdict(v) => out.extend(v.chain_ref().map(|r| (r.kind, r.chain))),
            StatementKind::VerdictMap {
                map: VerdictMapRef::Inline(entries),
                ..
            } => out.extend(
                entries
                    .iter()
                    .filter_map(|(_, v)| v.chain_ref().map(|r| (r.kind, r.chain))),
            ),
            _ => {}
        })
        .into_iter()
        .map(|(kind, chain)| ChainRef { kind, chain })
        .collect()
    }

    /// The rule's NAT statements (`dnat`, `snat`, `masquerade`, `redirect`), each
    /// with the text after its keyword (`to 10.0.0.1:80`; empty for a bare
    /// `masquerade`), in order. `text` is the rule's text (`Rule::text`); for most
    /// rules read from text the answer is read from it without reading the statements
    /// again.
    pub fn nat_statements<'a>(&'a self, text: &'a str) -> Vec<(NatKind, Cow<'a, str>)> {
        if let Some(known) = self.facts().nats(text) {
            return known
                .into_iter()
                .map(|(kind, args)| (kind, Cow::Borrowed(args)))
                .collect();
        }
        if !self.may_hold(text, &["dnat", "snat", "masquerade", "redirect"]) {
            return Vec::new();
        }
        match self.statements(text) {
            Cow::Borrowed(held) => held
                .iter()
                .filter_map(nat_of)
                .map(|(kind, args)| (kind, Cow::Borrowed(args)))
                .collect(),
            Cow::Owned(read) => read
                .iter()
                .filter_map(nat_of)
                .map(|(kind, args)| (kind, Cow::Owned(args.to_string())))
                .collect(),
        }
    }

    /// Named maps this rule looks verdicts up in (`vmap @service-ips`). `text` is the
    /// rule's text (`Rule::text`).
    pub fn verdict_map_names<'a>(&'a self, text: &'a str) -> Vec<&'a str> {
        self.named(text, &["vmap"], |s, out| {
            if let StatementKind::VerdictMap {
                map: VerdictMapRef::Named(n),
                ..
            } = &s.kind
            {
                out.push(((), n.as_str()));
            }
        })
        .into_iter()
        .map(|(_, n)| n)
        .collect()
    }

    /// The rule's `comment "..."` texts, unquoted. `text` is the rule's text
    /// (`Rule::text`).
    pub fn comments<'a>(&'a self, text: &'a str) -> Vec<&'a str> {
        self.named(text, &["comment"], |s, out| {
            if let StatementKind::Comment(c) = &s.kind {
                out.push(((), c.as_str()));
            }
        })
        .into_iter()
        .map(|(_, c)| c)
        .collect()
    }

    /// The `counter packets N bytes M` of the rule, if any. `text` is the rule's text
    /// (`Rule::text`).
    pub fn counters(&self, text: &str) -> Option<Counters> {
        if !self.may_hold(text, &["counter"]) {
            return None;
        }
        self.statements(text).iter().find_map(|s| match &s.kind {
            StatementKind::Counter(c) => *c,
            _ => None,
        })
    }

    /// Whether the rule may hold a statement spelt with one of `keywords` (`dnat`,
    /// `jump`, `drop`): always for a rule that holds its statements; for one read from
    /// text, whether the text spells one of them where a word can start. A pass that
    /// looks for such statements skips the rules for which this is false without
    /// reading their statements again (most rules, for most passes). Every keyword of a
    /// statement is a word of the text (the reader reads statements from the text's
    /// words), and a word never starts right after a `-` (the tokenizer splits words at
    /// blanks, braces, `;`, list commas, quotes, `@`, parentheses, operators and after
    /// numbers): `jump mark-for-masquerade` spells no `masquerade` statement.
    pub fn may_hold(&self, text: &str, keywords: &[&str]) -> bool {
        self.holds_statements() || keywords.iter().any(|k| spells_word(text, k))
    }

    /// The names `pick` finds in the statements, as strings that live as long as the
    /// rule: the statements' own when the rule holds them, else the same characters in
    /// `text` (the reader reads statements from the text only when every name they
    /// hold is there: see [`NftRule::in_text`]). `keywords`: a statement `pick` finds
    /// a name in spells one of them, so a rule read from text that spells none is not
    /// read again (most rules, for some of the questions).
    fn named<'a, T>(
        &'a self,
        text: &'a str,
        keywords: &[&str],
        pick: for<'s> fn(&'s Statement, &mut Vec<(T, &'s str)>),
    ) -> Vec<(T, &'a str)> {
        let mut out = Vec::new();
        match self.held() {
            Some(held) => {
                for s in held {
                    pick(s, &mut out);
                }
            }
            None if !self.may_hold(text, keywords) => {}
            None => {
                let statements = self.statements(text);
                let mut found = Vec::new();
                for s in statements.iter() {
                    pick(s, &mut found);
                }
                out.extend(found.into_iter().filter_map(|(t, part)| {
                    let at = text.find(part)?;
                    text.get(at..at + part.len()).map(|p| (t, p))
                }));
            }
        }
        out
    }
}

/// Whether `word` occurs in `text` other than right after a `-` (where the nft
/// tokenizer never starts a word: see [`NftRule::may_hold`]).
fn spells_word(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(at, _)| {
        at.checked_sub(1)
            .and_then(|before| text.as_bytes().get(before))
            != Some(&b'-')
    })
}

/// One statement of a rule: its text as read (or rendered from JSON) and its meaning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Statement {
    /// The statement's text as read (or as rendered from a JSON object): read from nft
    /// text, a span of the input whenever the input spells it on one line with single
    /// blanks (no copy a statement: a 10k-service ruleset has 300k of them).
    pub text: RuleText,
    /// What plumb understood the statement to do.
    pub kind: StatementKind,
}

/// What a statement does.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StatementKind {
    /// `ip daddr 10.0.0.1`, `tcp dport != { 80, 443 }`, `ip daddr @nodeport-ips`,
    /// `ip daddr . meta l4proto . th dport { ... }`. `left` is the selector text
    /// (with bit operations such as `meta mark & 0x4000`).
    Match {
        /// The selector as written (`ip daddr`, `meta mark & 0x4000`, `ip daddr . th dport`).
        left: String,
        /// How `left` is compared with `right`.
        op: Op,
        /// The value, range, prefix, set or expression compared with.
        right: Value,
    },
    /// A verdict (terminal or a chain transfer).
    Verdict(Verdict),
    /// `KEY vmap @name` or `KEY vmap { k : verdict, ... }`; the key may be
    /// `numgen random mod 9`.
    VerdictMap {
        /// The lookup key expression as written (`ip daddr . meta l4proto . th dport`).
        key: String,
        /// The map the key is looked up in: named (`@service-ips`) or inline.
        map: VerdictMapRef,
    },
    /// `dnat to 10.0.0.1:80`, `masquerade`, `snat ip to ...`; `args` is the text
    /// after the keyword.
    Nat {
        /// Which translation: dnat, snat, masquerade or redirect.
        kind: NatKind,
        /// The text after the keyword (`to 10.0.0.1:80`, `ip to ip saddr map @m`,
        /// `random,persistent`); empty for a bare `masquerade`.
        args: String,
    },
    /// `counter` (counters absent when the input did not print them).
    Counter(Option<Counters>),
    /// `comment "..."` (unquoted).
    Comment(String),
    /// `meta mark set 0x4000`, `ct mark set meta mark`, `tcp dport set 80`.
    Mangle {
        /// What is written, as written (`meta mark`, `ct mark`, `tcp dport`).
        key: String,
        /// The expression after `set` (`0x4000`, `meta mark`, `meta mark | 0x4000`).
        value: String,
    },
    /// `log prefix "..." level info`; `args` is the text after `log`.
    Log {
        /// The log options after `log` (`prefix "..." level info`); empty for a bare `log`.
        args: String,
    },
    /// Anything else (`limit`, `quota`, `notrack`, iptables-nft `xt` compat
    /// expressions, unknown JSON objects): the statement text says it all. The
    /// string is the statement keyword (text) or the JSON object key.
    Other(String),
}

/// Comparison operator of a match.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Op {
    /// No operator written: equality, set membership or flag test.
    Implicit,
    /// `==` / `eq`: equal.
    Eq,
    /// `!=` / `ne`: not equal (or not in the set).
    Ne,
    /// `<` / `lt`.
    Lt,
    /// `>` / `gt`.
    Gt,
    /// `<=` / `le`.
    Le,
    /// `>=` / `ge`.
    Ge,
}

impl Op {
    /// Reads an operator as nft text or JSON spells it (`==`, `eq`, `in`, `implicit`,
    /// ...); `None` for anything else.
    pub fn parse(s: &str) -> Option<Op> {
        Some(match s {
            "==" | "eq" => Op::Eq,
            "!=" | "ne" => Op::Ne,
            "<" | "lt" => Op::Lt,
            ">" | "gt" => Op::Gt,
            "<=" | "le" => Op::Le,
            ">=" | "ge" => Op::Ge,
            "in" | "implicit" => Op::Implicit,
            _ => return None,
        })
    }
}

/// Right-hand side of a match, or a set element key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Value {
    /// One value as written, strings unquoted (`80`, `eth0`, `established,related`).
    Single(String),
    /// `1024-65535`, `10.0.0.1-10.0.0.9`.
    Range(String, String),
    /// `10.0.0.0/8`.
    Prefix(String, u8),
    /// `10.0.0.1 . tcp . 80`.
    Concat(Vec<Value>),
    /// Anonymous set `{ a, b }`.
    Set(Vec<Value>),
    /// Named set `@name` (without the `@`).
    Named(String),
    /// An expression that is not a plain value (`ct mark`, `syn / syn,ack`, `(a | b)`).
    Expr(String),
}

impl Value {
    /// Reads one value word: a range, a prefix or a single value (unquoted).
    pub fn atom(word: &str) -> Value {
        if let Some(inner) = word.strip_prefix('"').and_then(|w| w.strip_suffix('"'))
            && !inner.contains('"')
        {
            return Value::Single(inner.to_string());
        }
        if let Some(name) = word.strip_prefix('@') {
            return Value::Named(name.to_string());
        }
        let addr_like = |s: &str| {
            s.as_bytes().first().is_some_and(|b| b.is_ascii_digit())
                || (s.contains(':') && !s.starts_with('"'))
        };
        if let Some((a, len)) = word.split_once('/')
            && addr_like(a)
            && let Ok(len) = len.parse::<u8>()
        {
            return Value::Prefix(a.to_string(), len);
        }
        if let Some((a, b)) = split_range(word)
            && addr_like(a)
            && addr_like(b)
        {
            return Value::Range(a.to_string(), b.to_string());
        }
        Value::Single(word.to_string())
    }
}

impl Value {
    /// The value of a key's or a match's words: one word is an [`Value::atom`], words
    /// joined by `.` a [`Value::Concat`], anything else an [`Value::Expr`] of the words.
    pub fn of_words(words: &[&str]) -> Value {
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

    /// [`Value::of_words`] of `text` split at single spaces (a set element's key text).
    pub fn of_text(text: &str) -> Value {
        if text.is_empty() {
            return Value::of_words(&[]);
        }
        let words: Vec<&str> = text.split(' ').collect();
        Value::of_words(&words)
    }
}

/// `a-b` split at the dash that separates the two ends (IPv6 ends have no dashes).
fn split_range(word: &str) -> Option<(&str, &str)> {
    let (a, b) = word.split_once('-')?;
    (!a.is_empty() && !b.is_empty() && !b.contains('-')).then_some((a, b))
}

/// A verdict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// `accept`: the packet leaves this hook's chain evaluation accepted.
    Accept,
    /// `drop`: the packet is discarded, silently.
    Drop,
    /// `reject` with its `with ...` arguments, if any.
    Reject(Option<String>),
    /// `return`: back to the calling chain (at a base chain: the policy).
    Return,
    /// `continue`: go on with the next rule (the default after a statement).
    Continue,
    /// `queue` with its arguments (possibly empty).
    Queue(String),
    /// `jump CHAIN`: evaluate the chain, then come back to the next rule unless it ends
    /// in a verdict. The name is a span of the text read when the reader has one (a
    /// 10k-service listing's verdict maps name 20k chains).
    Jump(RuleText),
    /// `goto CHAIN`: evaluate the chain and do not come back; its `return` goes to the
    /// caller's caller.
    Goto(RuleText),
}

impl Verdict {
    /// Parses a verdict word (and target) from text; `None` when it is not one.
    pub fn parse(words: &[&str]) -> Option<Verdict> {
        Verdict::parse_in(words, None)
    }

    /// [`Verdict::parse`], the chain's name a span of `source` when the words are
    /// slices of it (no allocation).
    pub(crate) fn parse_in(words: &[&str], source: Option<&super::SourceText>) -> Option<Verdict> {
        let name = |target: &str| match source {
            Some(source) => RuleText::within(source, unquote(target)),
            None => RuleText::from(unquote(target)),
        };
        Some(match words {
            ["accept"] => Verdict::Accept,
            ["drop"] => Verdict::Drop,
            ["return"] => Verdict::Return,
            ["continue"] => Verdict::Continue,
            ["reject"] => Verdict::Reject(None),
            ["jump", target] => Verdict::Jump(name(target)),
            ["goto", target] => Verdict::Goto(name(target)),
            _ => return None,
        })
    }

    /// The chain this verdict transfers to, if it is a `jump` or `goto`.
    pub fn chain_ref(&self) -> Option<ChainRef<'_>> {
        match self {
            Verdict::Jump(c) => Some(ChainRef {
                kind: TransferKind::Jump,
                chain: c,
            }),
            Verdict::Goto(c) => Some(ChainRef {
                kind: TransferKind::Goto,
                chain: c,
            }),
            _ => None,
        }
    }
}

/// Where a verdict map's entries live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VerdictMapRef {
    /// `vmap @name` (without the `@`).
    Named(String),
    /// `vmap { key : verdict, ... }`: key text and verdict, in order.
    Inline(Vec<(String, Verdict)>),
}

/// Kind of NAT statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NatKind {
    /// `dnat`: rewrites the destination address (and port).
    Dnat,
    /// `snat`: rewrites the source address (and port).
    Snat,
    /// `masquerade`: source NAT to the address of the outgoing interface.
    Masquerade,
    /// `redirect`: destination NAT to the host itself (the incoming interface's address).
    Redirect,
}

impl NatKind {
    /// Reads a NAT keyword (`dnat`, `snat`, `masquerade`, `redirect`); `None` for anything else.
    pub fn parse(s: &str) -> Option<NatKind> {
        Some(match s {
            "dnat" => NatKind::Dnat,
            "snat" => NatKind::Snat,
            "masquerade" => NatKind::Masquerade,
            "redirect" => NatKind::Redirect,
            _ => return None,
        })
    }
}

/// Set or map.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SetKind {
    /// `set`: a collection of keys, tested with `@name`.
    #[default]
    Set,
    /// `map`: keys with values (`: verdict`, `: ipv4_addr`), looked up with `map @name`
    /// or `vmap @name`.
    Map,
}

/// An nft set or map with its elements.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NftSet {
    /// Set name, without the `@` (`service-ips`, `cluster-ips`).
    pub name: Box<str>,
    /// Whether it is a set or a map.
    pub kind: SetKind,
    /// Key type as written: `ipv4_addr . inet_proto . inet_service`, or
    /// `typeof ip saddr` when declared with `typeof`.
    pub key_type: Box<str>,
    /// Value type of a map (`verdict`, `ipv4_addr`), `None` for sets.
    pub value_type: Option<Box<str>>,
    /// `flags interval,timeout` -> `["interval", "timeout"]`.
    pub flags: Vec<Box<str>>,
    /// The elements in input order; empty when the set has none or the dump did not
    /// list them.
    pub elements: Vec<SetElement>,
    /// `comment "..."`, unquoted; `None` when the set has none.
    pub comment: Option<Box<str>>,
    /// Other declarations kept verbatim (`size 65535`, `timeout 1h`, `policy memory`).
    pub attributes: Vec<Box<str>>,
    /// The kernel's handle (`nft -a`, JSON); `None` when not shown.
    pub handle: Option<u64>,
    /// Where the set declaration (`set NAME {`, `map NAME {`) was read.
    pub location: Location,
}

impl NftSet {
    /// Whether the map's values are verdicts.
    pub fn is_verdict_map(&self) -> bool {
        self.value_type.as_deref() == Some("verdict")
    }

    /// Chains the elements of a verdict map transfer control to.
    pub fn verdict_targets(&self) -> impl Iterator<Item = ChainRef<'_>> {
        self.elements
            .iter()
            .filter_map(|e| e.verdict.as_ref().and_then(Verdict::chain_ref))
    }
}

/// One element of a set or map.
///
/// Its texts are spans of the input when the reader has one (no allocation of their
/// own: a 10k-service listing has 22k elements), and its key is read again from its
/// text when asked ([`SetElement::key`]) unless the reader found a key its text does
/// not say word for word: an element held 365 bytes, its key 190 of them.
#[derive(Clone, Debug, Eq)]
pub struct SetElement {
    /// Key text as written (`10.43.0.10 . tcp . 53`), without element options.
    pub key_text: RuleText,
    /// Map value text (`goto service-...`, `10.0.0.1`), `None` for sets.
    pub value: Option<RuleText>,
    /// The value parsed as a verdict, for verdict maps.
    pub verdict: Option<Verdict>,
    /// Element comment (`comment "ns/svc:port"`), unquoted.
    pub comment: Option<RuleText>,
    /// The key parsed, when it is not [`Value::of_words`] of the key text's words.
    held_key: Option<Box<Value>>,
}

impl SetElement {
    /// An element whose key is `key`: kept only when reading `key_text` again would
    /// not give it ([`SetElement::key`]).
    pub fn new(
        key_text: RuleText,
        key: Value,
        value: Option<RuleText>,
        verdict: Option<Verdict>,
        comment: Option<RuleText>,
    ) -> SetElement {
        let held_key = (Value::of_text(&key_text) != key).then(|| Box::new(key));
        SetElement {
            key_text,
            value,
            verdict,
            comment,
            held_key,
        }
    }

    /// An element whose key is [`Value::of_words`] of the words of `key_text` split at
    /// single spaces (the caller knows): nothing parsed, nothing kept.
    pub(crate) fn with_key_of_text(
        key_text: RuleText,
        value: Option<RuleText>,
        verdict: Option<Verdict>,
        comment: Option<RuleText>,
    ) -> SetElement {
        SetElement {
            key_text,
            value,
            verdict,
            comment,
            held_key: None,
        }
    }

    /// The key parsed: a single value, a range, a prefix or a concatenation. Read from
    /// the key text unless the element holds it.
    pub fn key(&self) -> Cow<'_, Value> {
        match &self.held_key {
            Some(k) => Cow::Borrowed(k),
            None => Cow::Owned(Value::of_text(&self.key_text)),
        }
    }

    /// Its texts (key, value, comment), for the reader to move them into a text of
    /// their own.
    pub(crate) fn texts_mut(&mut self) -> impl Iterator<Item = &mut RuleText> {
        std::iter::once(&mut self.key_text)
            .chain(self.value.as_mut())
            .chain(self.comment.as_mut())
    }
}

impl PartialEq for SetElement {
    fn eq(&self, other: &SetElement) -> bool {
        self.key_text == other.key_text
            && self.value == other.value
            && self.verdict == other.verdict
            && self.comment == other.comment
            && (self.held_key == other.held_key || self.key() == other.key())
    }
}

impl Serialize for SetElement {
    /// As the fields were written when the element held its key: `key_text`, `key`,
    /// `value`, `verdict`, `comment`.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("SetElement", 5)?;
        st.serialize_field("key_text", &self.key_text)?;
        st.serialize_field("key", &*self.key())?;
        st.serialize_field("value", &self.value)?;
        st.serialize_field("verdict", &self.verdict)?;
        st.serialize_field("comment", &self.comment)?;
        st.end()
    }
}

/// The bytes of the elements' texts in `sets` (what [`own_element_texts`] copies).
pub(crate) fn element_text_len(sets: &[NftSet]) -> usize {
    sets.iter()
        .flat_map(|s| &s.elements)
        .map(|e| {
            e.key_text.len()
                + e.value.as_ref().map_or(0, |v| v.len())
                + e.comment.as_ref().map_or(0, |c| c.len())
        })
        .sum()
}

/// Gives the elements of `sets` spans of one text of their own instead of spans of
/// the input (or texts of one element each), so that the input can go.
pub(crate) fn own_element_texts(sets: &mut [NftSet]) {
    let len = element_text_len(sets);
    if len == 0 {
        return;
    }
    let mut all = String::with_capacity(len);
    for e in sets.iter_mut().flat_map(|s| &mut s.elements) {
        for t in e.texts_mut() {
            all.push_str(t);
        }
    }
    let all = super::Source::written(all, super::Placed::Nowhere);
    let mut at = 0;
    for e in sets.iter_mut().flat_map(|s| &mut s.elements) {
        for t in e.texts_mut() {
            let n = t.len();
            *t = RuleText::span(&all, at..at + n);
            at += n;
        }
    }
}

/// Every chain reference in an nft table: rules' jumps/gotos and inline vmap
/// entries, plus the jump/goto elements of named verdict maps.
pub fn table_chain_references(table: &Table) -> Vec<ChainRef<'_>> {
    let mut out = Vec::new();
    for c in &table.chains {
        for r in &c.rules {
            if let RuleBody::Nft(n) = &r.body {
                out.extend(n.chain_references(r.text.as_str()));
            }
        }
    }
    for s in &table.sets {
        out.extend(s.verdict_targets());
    }
    out
}

/// Strips one pair of surrounding double quotes.
pub(crate) fn unquote(s: &str) -> &str {
    s.strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atoms() {
        assert_eq!(
            Value::atom("10.0.0.0/8"),
            Value::Prefix("10.0.0.0".into(), 8)
        );
        assert_eq!(
            Value::atom("1024-65535"),
            Value::Range("1024".into(), "65535".into())
        );
        assert_eq!(
            Value::atom("echo-request"),
            Value::Single("echo-request".into())
        );
        assert_eq!(Value::atom("\"eth0\""), Value::Single("eth0".into()));
        assert_eq!(Value::atom("@ips"), Value::Named("ips".into()));
        assert_eq!(
            Value::atom("dead::1/64"),
            Value::Prefix("dead::1".into(), 64)
        );
    }
}
