//! The xtables part of the model: the structure of one rule (generic options, matches,
//! target) as an index over its text, and the views the rest of plumb reads it with.
//!
//! Part of the model rather than of the iptables reader because a rule indexes itself
//! on demand ([`XtCell`]): the model needs [`words::split`] and the grouping below,
//! and the reader (`crate::iptables::save`) uses them too.
//!
//! An `XtRule` is a compact index over the rule's text (spans, not strings), so a
//! 100k-rule dump costs little more memory than its text. `XtView` is the API the
//! rest of plumb uses: iterate matches and options, read values unquoted.
//!
//! Grouping follows iptables' command-line parser: options after `-m NAME` belong
//! to that match until the next `-m`/`-j`/`-g`; generic options (`-s`, `-p`, ...)
//! may appear anywhere without closing the current match (kube-proxy writes
//! `-m tcp -p tcp -d X --dport 80`); options before any `-m` that are not generic
//! load the protocol's match implicitly (`-p tcp --dport 80` = `-p tcp -m tcp --dport 80`).

pub mod dialect;
mod grammar;

/// The one option of an extension whose options a view does not show (nft's listing of
/// an iptables-nft rule prints some extensions by name only): its real options are
/// unknown. No iptables extension has an option of this name, and the grammar does not
/// judge a rule that carries it.
pub const OPTIONS_NOT_SHOWN: &str = "--options-not-shown-by-nft";

/// The conntrack match's options in the order iptables-save prints them; the match
/// refuses to load without one of them.
pub const CONNTRACK_OPTIONS: &[&str] = &[
    "--ctstate",
    "--ctproto",
    "--ctorigsrc",
    "--ctorigdst",
    "--ctreplsrc",
    "--ctrepldst",
    "--ctorigsrcport",
    "--ctorigdstport",
    "--ctreplsrcport",
    "--ctrepldstport",
    "--ctstatus",
    "--ctexpire",
    "--ctdir",
];
pub mod words;

use super::{ChainRef, Counters, TransferKind};
use once_cell::race::OnceBox;
use std::borrow::Cow;
use words::{SplitError, Word, split};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct OptionIdx {
    negated: bool,
    name: u16,
    args_start: u16,
    args_end: u16,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct MatchIdx {
    /// Word index of the module name (for an implicit match: of the protocol).
    module: u16,
    implicit: bool,
    opts_start: u16,
    opts_end: u16,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TargetIdx {
    name: u16,
    goto: bool,
    opts_start: u16,
    opts_end: u16,
}

/// An xtables rule as an index over its text.
///
/// Vectors rather than boxed slices so that an [`XtBuf`] can index rule after rule
/// into the same storage; an index kept in an [`XtCell`] is built to exact size.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct XtRule {
    words: Vec<Word>,
    options: Vec<OptionIdx>,
    generic_len: u16,
    matches: Vec<MatchIdx>,
    target: Option<TargetIdx>,
}

/// A problem in a rule's options, at a word.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecProblem {
    /// Byte offset in the rule text.
    pub offset: usize,
    /// What is wrong, for a diagnostic (`-s needs a value`, `more than one target (-j/-g) in one
    /// rule`).
    pub message: String,
}

/// A generic (match-independent) option's short spelling and whether it takes a value:
/// `-s`/`--source`/`--src`, `-d`/`--destination`/`--dst`, `-i`/`--in-interface`,
/// `-o`/`--out-interface`, `-p`/`--protocol`, `-f`/`--fragment` (no value).
/// A `match` rather than a table walk: every option word of every rule is looked up here.
fn generic_option(word: &str) -> Option<(&'static str, bool)> {
    Some(match word {
        "-s" | "--source" | "--src" => ("-s", true),
        "-d" | "--destination" | "--dst" => ("-d", true),
        "-i" | "--in-interface" => ("-i", true),
        "-o" | "--out-interface" => ("-o", true),
        "-p" | "--protocol" => ("-p", true),
        "-f" | "--fragment" => ("-f", false),
        "-c" | "--set-counters" => ("-c", true),
        _ => return None,
    })
}

/// Protocols whose match iptables loads implicitly after `-p`.
const IMPLICIT_PROTOCOL_MATCHES: &[&str] = &[
    "tcp",
    "udp",
    "icmp",
    "icmpv6",
    "ipv6-icmp",
    "sctp",
    "udplite",
    "dccp",
    "esp",
    "ah",
];

enum Group {
    Generic,
    Match(usize),
    Target,
}

/// Reusable buffers for indexing many rules without allocating for each one.
#[derive(Debug, Default)]
pub struct IndexScratch {
    /// Options tagged with their group: 0 = generic, m + 1 = match m, MAX = target.
    tagged: Vec<(u16, OptionIdx)>,
    /// (word index of the module name, implicit) per match, in order.
    match_heads: Vec<(u16, bool)>,
    /// (word index of the target name, goto).
    target_head: Option<(u16, bool)>,
}

const TARGET_GROUP: u16 = u16::MAX;

impl XtRule {
    /// Indexes `words` of `text` (the words after `-A CHAIN`). Never fails: problems
    /// are returned alongside and the rule keeps every word.
    pub fn build(text: &str, mut words: Vec<Word>) -> (XtRule, Vec<SpecProblem>) {
        let mut scratch = IndexScratch::default();
        let mut problems = Vec::new();
        Self::analyse(text, &words, &mut scratch, &mut problems);
        // Kept indexes live as long as the ruleset: no slack from the splitter's growth.
        words.shrink_to_fit();
        let mut rule = XtRule {
            words,
            ..XtRule::default()
        };
        rule.assemble(&scratch);
        (rule, problems)
    }

    /// Checks a rule's words and reports problems without keeping an index: what the
    /// parsers do for every rule (the index is built again on first use, see [`XtCell`]).
    ///
    /// `dialect` is the iptables version whose reading decides (see [`dialect`]);
    /// where versions differ and it is unknown, `notes` says so.
    pub fn validate(
        text: &str,
        words: &[Word],
        chain: Option<&str>,
        dialect: dialect::Dialect,
        scratch: &mut IndexScratch,
        problems: &mut Vec<SpecProblem>,
        notes: &mut Vec<SpecProblem>,
    ) {
        let before = problems.len();
        Self::analyse(text, words, scratch, problems);
        // What the grouping accepts, iptables-restore may still refuse: arity, option
        // names, values (`grammar`). One problem per rule is enough to say where.
        if problems.len() == before && !text.contains(OPTIONS_NOT_SHOWN) {
            grammar::check(text, words, chain, dialect, problems, notes);
        }
    }

    fn analyse(
        text: &str,
        words: &[Word],
        scratch: &mut IndexScratch,
        problems: &mut Vec<SpecProblem>,
    ) {
        if words.len() > u16::MAX as usize {
            problems.push(SpecProblem {
                offset: 0,
                message: "rule has more than 65535 words".into(),
            });
        }
        let n = words.len().min(u16::MAX as usize);
        // Groups only grow while reading, except generic options that interleave, so a
        // stable sort by tag puts every option where it belongs without nested vectors.
        let IndexScratch {
            tagged,
            match_heads,
            target_head,
        } = scratch;
        tagged.clear();
        match_heads.clear();
        *target_head = None;
        let mut group = Group::Generic;
        let mut protocol_word: Option<u16> = None;
        let mut negate_next = false;
        let mut i = 0usize;
        while i < n {
            let w = words[i];
            let raw = w.raw(text);
            if w.is_bang(text) {
                negate_next = true;
                i += 1;
                continue;
            }
            if !w.is_option(text) {
                problems.push(SpecProblem {
                    offset: w.start as usize,
                    message: format!(
                        "unexpected value {raw:?}: expected an option such as -m, -j or --dport"
                    ),
                });
                i += 1;
                continue;
            }
            let negated = std::mem::take(&mut negate_next);
            if matches!(raw, "-m" | "--match" | "-j" | "--jump" | "-g" | "--goto") {
                if !words[..n]
                    .get(i + 1)
                    .is_some_and(|w| !w.is_option(text) && !w.is_bang(text))
                {
                    problems.push(SpecProblem {
                        offset: w.start as usize,
                        message: format!("{raw} needs a name after it"),
                    });
                    i += 1;
                    continue;
                }
                let name_idx = (i + 1) as u16;
                if raw == "-m" || raw == "--match" {
                    match_heads.push((name_idx, false));
                    group = Group::Match(match_heads.len() - 1);
                } else {
                    if target_head.is_some() {
                        problems.push(SpecProblem {
                            offset: w.start as usize,
                            message: "more than one target (-j/-g) in one rule".into(),
                        });
                    }
                    *target_head = Some((name_idx, raw == "-g" || raw == "--goto"));
                    group = Group::Target;
                }
                i += 2;
                continue;
            }
            // An ordinary option: collect its arguments.
            let (args_start, args_end, arg_negated) = collect_args(text, &words[..n], i + 1);
            let opt = OptionIdx {
                negated: negated || arg_negated,
                name: i as u16,
                args_start: args_start as u16,
                args_end: args_end as u16,
            };
            if let Some((short, takes_value)) = generic_option(raw) {
                if takes_value && args_end == args_start {
                    problems.push(SpecProblem {
                        offset: w.start as usize,
                        message: format!("{raw} needs a value"),
                    });
                }
                if short == "-p" {
                    protocol_word = (args_end > args_start).then_some(args_start as u16);
                }
                tagged.push((0, opt));
            } else {
                match group {
                    Group::Match(m) => tagged.push((m as u16 + 1, opt)),
                    Group::Target => tagged.push((TARGET_GROUP, opt)),
                    Group::Generic => {
                        let implicit = protocol_word.filter(|&p| {
                            IMPLICIT_PROTOCOL_MATCHES
                                .contains(&words[p as usize].value(text).as_ref())
                        });
                        if let Some(p) = implicit {
                            match_heads.push((p, true));
                            group = Group::Match(match_heads.len() - 1);
                            tagged.push((match_heads.len() as u16, opt));
                        } else {
                            problems.push(SpecProblem {
                                offset: w.start as usize,
                                message: format!(
                                    "option {raw} belongs to no match (add -m MODULE before it)"
                                ),
                            });
                            // Keep it as a generic option so no word is lost.
                            tagged.push((0, opt));
                        }
                    }
                }
            }
            i = args_end;
        }
        if negate_next {
            problems.push(SpecProblem {
                offset: text.len(),
                message: "\"!\" at the end of the rule negates nothing".into(),
            });
        }

        tagged.sort_by_key(|&(g, _)| g);
    }

    /// Fills options, matches and target from `scratch` (filled by `analyse` over
    /// `self.words`), reusing this rule's storage.
    fn assemble(&mut self, scratch: &IndexScratch) {
        let IndexScratch {
            tagged,
            match_heads,
            target_head,
        } = scratch;
        self.generic_len = tagged.iter().take_while(|&&(g, _)| g == 0).count() as u16;
        self.matches.clear();
        self.matches.reserve_exact(match_heads.len());
        let mut cursor = self.generic_len as usize;
        for (m, &(module, implicit)) in match_heads.iter().enumerate() {
            let start = cursor;
            while cursor < tagged.len() && tagged[cursor].0 == m as u16 + 1 {
                cursor += 1;
            }
            self.matches.push(MatchIdx {
                module,
                implicit,
                opts_start: start as u16,
                opts_end: cursor as u16,
            });
        }
        self.target = target_head.map(|(name, goto)| TargetIdx {
            name,
            goto,
            opts_start: cursor as u16,
            opts_end: tagged.len() as u16,
        });
        self.options.clear();
        self.options.extend(tagged.iter().map(|&(_, o)| o));
    }

    /// Reads the index together with the rule text it was built from (`text` must be that text: the
    /// index holds byte offsets into it).
    pub fn view<'a>(&'a self, text: &'a str) -> XtView<'a> {
        XtViewOf { rule: self, text }
    }

    /// A view whose strings borrow `text` for longer than the index lives.
    pub fn view_of<'r, 't>(&'r self, text: &'t str) -> XtViewOf<'r, 't> {
        XtViewOf { rule: self, text }
    }
}

/// Reusable storage for indexing many xtables rules one after another without
/// allocating for each: what whole-ruleset passes (service recovery, checks, owner
/// counts) use instead of [`crate::Rule::xt`], which builds and keeps an index per
/// rule (about five allocations each, and the memory stays).
///
/// ```
/// # use plumb_ruleset::iptables::XtBuf;
/// # let ruleset = plumb_ruleset::iptables::save::parse("*nat\n:X - [0:0]\n-A X -j DNAT --to-destination 1.2.3.4:80\nCOMMIT\n", &Default::default());
/// let mut buf = XtBuf::default();
/// for rule in &ruleset.tables[0].chains[0].rules {
///     let target = rule.xt_in(&mut buf).and_then(|v| v.target()).map(|t| t.name());
///     assert_eq!(target, Some("DNAT"));
/// }
/// ```
#[derive(Debug, Default)]
pub struct XtBuf {
    /// A packed rule text read back ([`crate::RuleText::read_in`]).
    pub(crate) text: String,
    pub(crate) index: XtIndexBuf,
}

/// The storage [`XtCell::build_in`] builds an index in.
#[derive(Debug, Default)]
pub struct XtIndexBuf {
    rule: XtRule,
    scratch: IndexScratch,
    problems: Vec<SpecProblem>,
}

/// The structure of an xtables rule, built from the rule's text on first use.
///
/// Parsers check every rule while reading (diagnostics need it) but keep only where
/// the rule's words are; the index is built again, once, when someone looks at the
/// rule. A 100k-rule dump then costs little more than its text (the model's
/// memory budget is 3x the input), and consumers that walk every rule pay
/// the indexing once per rule, as they would have at parse time.
///
/// The parser also records where the rule's target is ([`XtCell::target`]): the one
/// thing whole-ruleset passes (chain references, dangling and stale chains) need from
/// every rule, read without splitting the rule again.
#[derive(Clone, Default)]
pub struct XtCell {
    /// What is not needed for most rules, allocated only when it is: the kept index,
    /// counters not in the text, and the spec's span when it does not fit the bytes
    /// below. 8 bytes (a `OnceLock<Box<_>>` takes 16).
    more: OnceBox<XtMore>,
    /// End of the words after `-A CHAIN` in the rule text (a trailing `-c PACKETS
    /// BYTES` excluded), unless `SPEC_WIDE`.
    spec_end: u16,
    /// Where the target name starts in the rule text, when `TARGET_RECORDED`.
    target_start: u16,
    /// Where the words after `-A CHAIN` start, unless `SPEC_WIDE`.
    spec_start: u8,
    /// The target name's length, when `TARGET_RECORDED`.
    target_len: u8,
    /// `TARGET_*` bits and `SPEC_WIDE`; without `TARGET_RECORDED` the target is found
    /// by indexing.
    flags: u8,
    /// An enum rather than bits: its unused values let [`crate::RuleBody`] keep its
    /// variant without a separate tag (the body stays 16 bytes, the rule 40).
    counters: CountersAt,
}

impl std::fmt::Debug for XtCell {
    /// The contents, not `OnceBox`'s pointer: equal models print equal.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (spec_start, spec_end) = self.spec();
        f.debug_struct("XtCell")
            .field("spec_start", &spec_start)
            .field("spec_end", &spec_end)
            .field("target_start", &self.target_start)
            .field("target_len", &self.target_len)
            .field("flags", &self.flags)
            .field("counters", &self.counters)
            .field("more", &self.more.get())
            .finish()
    }
}

/// The rarely needed part of an [`XtCell`].
#[derive(Clone, Default)]
struct XtMore {
    /// Counters read from somewhere other than the rule text (an nft listing's
    /// `counter packets N bytes M`), when not zero.
    counters: Option<Counters>,
    /// The spec's span when it does not fit the cell's bytes (a rule of 64 KiB or
    /// more, or a spec starting past byte 255).
    wide_spec: Option<(u32, u32)>,
    /// The rule's index, built and kept on first use of [`XtCell::get`].
    index: OnceBox<XtRule>,
}

impl std::fmt::Debug for XtMore {
    /// The contents, not `OnceBox`'s pointer: equal models print equal.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XtMore")
            .field("counters", &self.counters)
            .field("wide_spec", &self.wide_spec)
            .field("index", &self.index.get())
            .finish()
    }
}

/// Where an xtables rule's counters are: read again from the rule text when asked
/// ([`XtCell::counters`]) rather than kept beside every rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum CountersAt {
    /// The rule has none.
    #[default]
    None,
    /// `[packets:bytes]` before the rule (`iptables-save -c`).
    Prefix,
    /// `-c PACKETS BYTES` after the rule spec (`iptables -v -S`), from `spec_end` on.
    Suffix,
    /// Zero packets and bytes (an nft listing's `counter packets 0 bytes 0`).
    Zero,
    /// In [`XtMore::counters`].
    Kept,
}

const TARGET_RECORDED: u8 = 1;
const TARGET_PRESENT: u8 = 2;
const TARGET_GOTO: u8 = 4;
const TARGET_HAS_OPTIONS: u8 = 8;
/// The spec's span is in [`XtMore::wide_spec`].
const SPEC_WIDE: u8 = 16;

/// An xtables rule's target read without indexing the rule ([`crate::Rule::xt_target`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XtTargetRef<'t> {
    /// As written (`KUBE-SVC-…`, `DNAT`), like [`XtTargetViewOf::name`].
    pub name: &'t str,
    /// `-g` rather than `-j`.
    pub goto: bool,
    /// The target has options (`-j DNAT --to-destination …`): an extension, not a chain.
    pub has_options: bool,
}

impl<'t> XtTargetRef<'t> {
    /// The chain this target transfers to, as [`XtViewOf::chain_reference`] says.
    pub fn chain_reference(&self) -> Option<ChainRef<'t>> {
        if self.goto {
            return Some(ChainRef {
                kind: TransferKind::Goto,
                chain: self.name,
            });
        }
        (!TARGET_EXTENSIONS.contains(&self.name)).then_some(ChainRef {
            kind: TransferKind::Jump,
            chain: self.name,
        })
    }
}

impl XtCell {
    /// A cell for the words of `text[spec]` (split again when first used).
    pub fn new(spec: std::ops::Range<usize>) -> XtCell {
        match (u8::try_from(spec.start), u16::try_from(spec.end)) {
            (Ok(spec_start), Ok(spec_end)) => XtCell {
                spec_start,
                spec_end,
                ..XtCell::default()
            },
            // Rare (a rule of 64 KiB or more): the span is kept in the rare part.
            _ => XtCell {
                flags: SPEC_WIDE,
                more: OnceBox::with_value(Box::new(XtMore {
                    wide_spec: Some((
                        u32::try_from(spec.start).unwrap_or(u32::MAX),
                        u32::try_from(spec.end).unwrap_or(u32::MAX),
                    )),
                    ..XtMore::default()
                })),
                ..XtCell::default()
            },
        }
    }

    /// The spec's byte range in the rule text, as given to [`XtCell::new`].
    fn spec(&self) -> (usize, usize) {
        if self.flags & SPEC_WIDE != 0 {
            let (s, e) = self
                .more
                .get()
                .and_then(|m| m.wide_spec)
                .unwrap_or_default();
            (s as usize, e as usize)
        } else {
            (self.spec_start as usize, self.spec_end as usize)
        }
    }

    /// A cell for the words of `text[spec]` that remembers the target the parser found
    /// while validating them (`words` and `scratch` as [`XtRule::validate`] left them).
    pub(crate) fn parsed(
        spec: std::ops::Range<usize>,
        words: &[Word],
        scratch: &IndexScratch,
    ) -> XtCell {
        let mut cell = XtCell::new(spec);
        match scratch.target_head {
            None => cell.flags |= TARGET_RECORDED,
            Some((name, goto)) => {
                let w = words[name as usize];
                // A target the cell's bytes cannot place is found by indexing instead.
                if let (Ok(start), Ok(len)) = (u16::try_from(w.start), u8::try_from(w.len)) {
                    cell.flags |= TARGET_RECORDED | TARGET_PRESENT;
                    if goto {
                        cell.flags |= TARGET_GOTO;
                    }
                    if scratch.tagged.iter().any(|&(g, _)| g == TARGET_GROUP) {
                        cell.flags |= TARGET_HAS_OPTIONS;
                    }
                    cell.target_start = start;
                    cell.target_len = len;
                }
            }
        }
        cell
    }

    /// The target the parser recorded, when it did: where its name is in the text
    /// (`None`: the rule has no target), `-g`, and whether it has options.
    pub(crate) fn recorded_target(&self) -> Option<Option<(std::ops::Range<usize>, bool, bool)>> {
        let flags = self.flags;
        if flags & TARGET_RECORDED == 0 {
            return None;
        }
        if flags & TARGET_PRESENT == 0 {
            return Some(None);
        }
        let start = self.target_start as usize;
        Some(Some((
            start..start + self.target_len as usize,
            flags & TARGET_GOTO != 0,
            flags & TARGET_HAS_OPTIONS != 0,
        )))
    }

    /// The rule's target: recorded by the parser, else read from the index (built
    /// without keeping it). `text` must be the text the cell was made for.
    pub fn target<'t>(&self, text: &'t str) -> Option<XtTargetRef<'t>> {
        let flags = self.flags;
        if flags & TARGET_RECORDED != 0 {
            if flags & TARGET_PRESENT == 0 {
                return None;
            }
            let start = self.target_start as usize;
            return Some(XtTargetRef {
                // A span the parser took from this text; `get` keeps a mismatch from panicking.
                name: text.get(start..start + self.target_len as usize)?,
                goto: flags & TARGET_GOTO != 0,
                has_options: flags & TARGET_HAS_OPTIONS != 0,
            });
        }
        let from_index = |rule: &XtRule| {
            rule.view_of(text).target().map(|t| XtTargetRef {
                name: t.name(),
                goto: t.is_goto(),
                has_options: t.options().next().is_some(),
            })
        };
        match self.built() {
            Some(rule) => from_index(rule),
            None => from_index(&self.build(text)),
        }
    }

    /// A cell holding an index built already.
    pub fn from_rule(rule: XtRule) -> XtCell {
        XtCell {
            more: OnceBox::with_value(Box::new(XtMore {
                index: OnceBox::with_value(Box::new(rule)),
                ..XtMore::default()
            })),
            ..XtCell::default()
        }
    }

    /// The rule's index, built and kept on first use; `text` must be the text the
    /// cell was made for.
    pub fn get(&self, text: &str) -> &XtRule {
        self.more
            .get_or_init(|| Box::new(XtMore::default()))
            .index
            .get_or_init(|| Box::new(self.build(text)))
    }

    /// The index if something built it already.
    pub fn built(&self) -> Option<&XtRule> {
        self.more.get().and_then(|m| m.index.get())
    }

    /// The rule's counters: read from `text` (the text the cell was made for) when the
    /// reader found them there, else as recorded by [`XtCell::set_counters`].
    pub fn counters(&self, text: &str) -> Option<Counters> {
        match self.counters {
            CountersAt::None => None,
            CountersAt::Zero => Some(Counters::default()),
            CountersAt::Kept => self.more.get().and_then(|m| m.counters),
            CountersAt::Prefix => {
                let t = text.trim_start();
                Counters::parse_bracketed(&t[..=t.find(']')?])
            }
            CountersAt::Suffix => {
                let mut w = text.get(self.spec().1..)?.split_whitespace();
                if w.next() != Some("-c") {
                    return None;
                }
                let packets = w.next()?.parse().ok()?;
                let bytes = w.next()?.parse().ok()?;
                Some(Counters { packets, bytes })
            }
        }
    }

    /// Records that the rule text starts with `[packets:bytes]` (the reader checked
    /// that they read as counters).
    pub(crate) fn counters_before(&mut self) {
        self.counters = CountersAt::Prefix;
    }

    /// Records that the rule text ends with `-c PACKETS BYTES` after `spec_end` (the
    /// reader checked that they read as counters).
    pub(crate) fn counters_after(&mut self) {
        self.counters = CountersAt::Suffix;
    }

    /// Whether the counters are read from the text after the spec (`-c P B`).
    pub(crate) fn has_counters_after(&self) -> bool {
        self.counters == CountersAt::Suffix
    }

    /// Sets counters the rule text does not show (nft's `counter` statement of a
    /// translated rule): zero costs nothing, others are kept in the cell's rare part.
    pub fn set_counters(&mut self, counters: Option<Counters>) {
        let kept = counters.filter(|c| *c != Counters::default());
        // OnceBox has no `get_mut`: the rare part is replaced (a rebuilt cell keeps its
        // index).
        if kept.is_some() || self.more.get().is_some_and(|m| m.counters.is_some()) {
            let mut more = self.more.get().cloned().unwrap_or_default();
            more.counters = kept;
            self.more = OnceBox::with_value(Box::new(more));
        }
        self.counters = match counters {
            None => CountersAt::None,
            Some(_) if kept.is_none() => CountersAt::Zero,
            Some(_) => CountersAt::Kept,
        };
    }

    /// Builds the index without keeping it: for one-off questions over a whole
    /// ruleset (owner classification) that should not make every rule's index stay.
    pub fn build(&self, text: &str) -> XtRule {
        let mut words = Vec::new();
        self.split_into(text, &mut words);
        XtRule::build(text, words).0
    }

    /// The index in `buf`: the kept one if something built it already, else built into
    /// `buf`'s storage (replacing what it held). Allocates only while `buf` grows.
    pub fn build_in<'b>(&'b self, text: &str, buf: &'b mut XtIndexBuf) -> &'b XtRule {
        if let Some(kept) = self.built() {
            return kept;
        }
        let XtIndexBuf {
            rule,
            scratch,
            problems,
        } = buf;
        self.split_into(text, &mut rule.words);
        XtRule::analyse(text, &rule.words, scratch, problems);
        // The parser reported these when it read the rule.
        problems.clear();
        rule.assemble(scratch);
        rule
    }

    /// The words of the rule's spec (empty when they cannot be split).
    fn split_into(&self, text: &str, words: &mut Vec<Word>) {
        words.clear();
        let (start, end) = self.spec();
        let end = end.min(text.len());
        let start = start.min(end);
        if text.is_char_boundary(start)
            && text.is_char_boundary(end)
            && let Err(SplitError::WordTooLong { .. }) = split(&text[..end], start, words)
        {
            // The parser reported the word; the rule keeps no structure. (An open
            // quote runs to the end of the line, as in iptables-restore: the words
            // stand.)
            words.clear();
        }
    }
}

/// Arguments of the option whose name is just before `from`: following words that are
/// not options. A `!` right after the option name (pre-1.4.3 syntax `--dport ! 80`)
/// negates the option.
fn collect_args(text: &str, words: &[Word], from: usize) -> (usize, usize, bool) {
    let mut start = from;
    let mut negated = false;
    if words.get(start).is_some_and(|w| w.is_bang(text))
        && words
            .get(start + 1)
            .is_some_and(|w| !w.is_option(text) && !w.is_bang(text))
    {
        negated = true;
        start += 1;
    }
    let mut end = start;
    while let Some(w) = words.get(end) {
        if w.is_option(text) || w.is_bang(text) {
            break;
        }
        end += 1;
    }
    (start, end, negated)
}

/// The address types of the addrtype match (`--src-type`, `--dst-type`), in the order of
/// their bits in `xt_addrtype_info` (`XT_ADDRTYPE_UNSPEC` = bit 0, ... `XRESOLVE` = bit
/// 11, linux/netfilter/xt_addrtype.h).
pub const ADDR_TYPES: &[&str] = &[
    "UNSPEC",
    "UNICAST",
    "LOCAL",
    "BROADCAST",
    "ANYCAST",
    "MULTICAST",
    "BLACKHOLE",
    "UNREACHABLE",
    "PROHIBIT",
    "THROW",
    "NAT",
    "XRESOLVE",
];

/// Names `-j` can take that are verdicts or target extensions, not chains.
pub const TARGET_EXTENSIONS: &[&str] = &[
    "ACCEPT",
    "DROP",
    "RETURN",
    "QUEUE",
    "AUDIT",
    "CHECKSUM",
    "CLASSIFY",
    "CLUSTERIP",
    "CONNMARK",
    "CONNSECMARK",
    "CT",
    "DNAT",
    "DNPT",
    "DSCP",
    "ECN",
    "HL",
    "HMARK",
    "IDLETIMER",
    "LED",
    "LOG",
    "MARK",
    "MASQUERADE",
    "MIRROR",
    "NETMAP",
    "NFLOG",
    "NFQUEUE",
    "NOTRACK",
    "RATEEST",
    "REDIRECT",
    "REJECT",
    "SAME",
    "SECMARK",
    "SET",
    "SNAT",
    "SNPT",
    "SYNPROXY",
    "TCPMSS",
    "TCPOPTSTRIP",
    "TEE",
    "TOS",
    "TPROXY",
    "TRACE",
    "TTL",
    "ULOG",
];

/// Read access to an `XtRule` together with its text. `'r` is the lifetime of the
/// index, `'t` the lifetime of the text: strings read through the view borrow the
/// text only, so they outlive a temporary index built in an [`XtBuf`].
#[derive(Clone, Copy)]
pub struct XtViewOf<'r, 't> {
    rule: &'r XtRule,
    text: &'t str,
}

/// A view whose index and text live equally long (an index kept in the rule).
pub type XtView<'a> = XtViewOf<'a, 'a>;

/// One option (`! --dport 80`) of a match, of the target or generic (`-s 10.0.0.0/8`).
#[derive(Clone, Copy)]
pub struct XtOptionViewOf<'r, 't> {
    idx: OptionIdx,
    rule: &'r XtRule,
    text: &'t str,
}

/// An [`XtOptionViewOf`] whose index and text live equally long.
pub type XtOptionView<'a> = XtOptionViewOf<'a, 'a>;

/// One match module (`-m tcp --dport 80`), possibly implicit (`-p tcp --dport 80`).
#[derive(Clone, Copy)]
pub struct XtMatchViewOf<'r, 't> {
    idx: MatchIdx,
    rule: &'r XtRule,
    text: &'t str,
}

/// An [`XtMatchViewOf`] whose index and text live equally long.
pub type XtMatchView<'a> = XtMatchViewOf<'a, 'a>;

/// The rule's target (`-j DNAT --to-destination ...`) or goto (`-g CHAIN`).
#[derive(Clone, Copy)]
pub struct XtTargetViewOf<'r, 't> {
    idx: TargetIdx,
    rule: &'r XtRule,
    text: &'t str,
}

/// An [`XtTargetViewOf`] whose index and text live equally long.
pub type XtTargetView<'a> = XtTargetViewOf<'a, 'a>;

impl<'r, 't> XtViewOf<'r, 't> {
    fn word(&self, i: u16) -> &'t str {
        self.rule.words[i as usize].raw(self.text)
    }

    fn options_in(self, start: u16, end: u16) -> impl Iterator<Item = XtOptionViewOf<'r, 't>> {
        let (rule, text) = (self.rule, self.text);
        rule.options[start as usize..end as usize]
            .iter()
            .map(move |&idx| XtOptionViewOf { idx, rule, text })
    }

    /// Generic options in the order written (`-s`, `-d`, `-i`, `-o`, `-p`, `-f`).
    pub fn generic(&self) -> impl Iterator<Item = XtOptionViewOf<'r, 't>> {
        self.options_in(0, self.rule.generic_len)
    }

    /// A generic option by its short name (`"-s"`, `"-p"`, ...), whatever spelling was used.
    pub fn generic_option(&self, short: &str) -> Option<XtOptionViewOf<'r, 't>> {
        self.generic()
            .find(|o| generic_option(o.name()).is_some_and(|(s, _)| s == short))
    }

    /// The match modules in the order written, implicit protocol matches included.
    pub fn matches(&self) -> impl Iterator<Item = XtMatchViewOf<'r, 't>> {
        let (rule, text) = (self.rule, self.text);
        rule.matches
            .iter()
            .map(move |&idx| XtMatchViewOf { idx, rule, text })
    }

    /// The first match whose module is `module` as written (`"tcp"`, `"comment"`, `"set"`); `None`
    /// when the rule has none.
    pub fn match_named(&self, module: &str) -> Option<XtMatchViewOf<'r, 't>> {
        self.matches().find(|m| m.module() == module)
    }

    /// The target (`-j`) or goto (`-g`); `None` for a rule without one (it only counts packets).
    pub fn target(&self) -> Option<XtTargetViewOf<'r, 't>> {
        self.rule.target.map(|idx| XtTargetViewOf {
            idx,
            rule: self.rule,
            text: self.text,
        })
    }

    /// Every `--comment` value, in order.
    pub fn comments(&self) -> impl Iterator<Item = Cow<'t, str>> {
        self.matches()
            .filter(|m| m.module() == "comment")
            .filter_map(|m| m.option("--comment").and_then(|o| o.arg(0)))
    }

    /// The chain this rule jumps or goes to, if its target is a chain.
    pub fn chain_reference(&self) -> Option<ChainRef<'t>> {
        let t = self.target()?;
        let name = t.name();
        if t.is_goto() {
            return Some(ChainRef {
                kind: TransferKind::Goto,
                chain: name,
            });
        }
        (!TARGET_EXTENSIONS.contains(&name)).then_some(ChainRef {
            kind: TransferKind::Jump,
            chain: name,
        })
    }

    /// All words after the chain name, raw, in order (for verbatim printing).
    pub fn raw_words(&self) -> impl Iterator<Item = &'t str> {
        let text = self.text;
        self.rule.words.iter().map(move |w| w.raw(text))
    }
}

impl<'r, 't> XtOptionViewOf<'r, 't> {
    /// The option as written (`--dport`, `-s`, `--source`).
    pub fn name(&self) -> &'t str {
        self.rule.words[self.idx.name as usize].raw(self.text)
    }

    /// Whether `!` was written before the option: it matches when the test fails.
    pub fn negated(&self) -> bool {
        self.idx.negated
    }

    /// How many argument words follow the option (0 for flags such as `--syn`).
    pub fn arg_count(&self) -> usize {
        (self.idx.args_end - self.idx.args_start) as usize
    }

    /// The i-th argument, unquoted.
    pub fn arg(&self, i: usize) -> Option<Cow<'t, str>> {
        let w = self.idx.args_start as usize + i;
        (w < self.idx.args_end as usize).then(|| self.rule.words[w].value(self.text))
    }

    /// The i-th argument exactly as written (quotes kept).
    pub fn raw_arg(&self, i: usize) -> Option<&'t str> {
        let w = self.idx.args_start as usize + i;
        (w < self.idx.args_end as usize).then(|| self.rule.words[w].raw(self.text))
    }

    /// The arguments in order, unquoted.
    pub fn args(&self) -> impl Iterator<Item = Cow<'t, str>> + use<'r, 't> {
        let (rule, text) = (self.rule, self.text);
        rule.words[self.idx.args_start as usize..self.idx.args_end as usize]
            .iter()
            .map(move |w| w.value(text))
    }

    /// The arguments in order, exactly as written (quotes kept).
    pub fn raw_args(&self) -> impl Iterator<Item = &'t str> + use<'r, 't> {
        let (rule, text) = (self.rule, self.text);
        rule.words[self.idx.args_start as usize..self.idx.args_end as usize]
            .iter()
            .map(move |w| w.raw(text))
    }
}

impl<'r, 't> XtMatchViewOf<'r, 't> {
    /// The module name (`tcp`, `comment`, `conntrack`): the word after `-m`, or the `-p` protocol
    /// for an implicit match.
    pub fn module(&self) -> &'t str {
        self.rule.words[self.idx.module as usize].raw(self.text)
    }

    /// True when loaded by `-p PROTO` without `-m PROTO`.
    pub fn implicit(&self) -> bool {
        self.idx.implicit
    }

    /// The match's options in the order written.
    pub fn options(&self) -> impl Iterator<Item = XtOptionViewOf<'r, 't>> + use<'r, 't> {
        XtViewOf {
            rule: self.rule,
            text: self.text,
        }
        .options_in(self.idx.opts_start, self.idx.opts_end)
    }

    /// The first option spelled exactly `name` (`"--dport"` does not find `--destination-port`);
    /// `None` when absent.
    pub fn option(&self, name: &str) -> Option<XtOptionViewOf<'r, 't>> {
        self.options().find(|o| o.name() == name)
    }
}

impl<'r, 't> XtTargetViewOf<'r, 't> {
    /// The target or chain name as written (`DNAT`, `KUBE-SERVICES`).
    pub fn name(&self) -> &'t str {
        self.rule.words[self.idx.name as usize].raw(self.text)
    }

    /// Whether it was written `-g` (goto: the chain's end returns to the caller's caller) rather
    /// than `-j`.
    pub fn is_goto(&self) -> bool {
        self.idx.goto
    }

    /// The target's options in the order written (`--to-destination 10.0.0.1:80`).
    pub fn options(&self) -> impl Iterator<Item = XtOptionViewOf<'r, 't>> + use<'r, 't> {
        XtViewOf {
            rule: self.rule,
            text: self.text,
        }
        .options_in(self.idx.opts_start, self.idx.opts_end)
    }

    /// The first target option spelled exactly `name`; `None` when absent.
    pub fn option(&self, name: &str) -> Option<XtOptionViewOf<'r, 't>> {
        self.options().find(|o| o.name() == name)
    }
}

impl std::fmt::Debug for XtViewOf<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XtView")
            .field("text", &self.text)
            .field("target", &self.target().map(|t| self.word(t.idx.name)))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(text: &str) -> (XtRule, Vec<SpecProblem>) {
        let mut w = Vec::new();
        split(text, 0, &mut w).unwrap();
        XtRule::build(text, w)
    }

    #[test]
    fn kube_proxy_order_groups_dport_with_tcp_match() {
        let t = r#"-m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O"#;
        let (r, p) = build(t);
        assert!(p.is_empty(), "{p:?}");
        let v = r.view(t);
        let tcp = v.match_named("tcp").unwrap();
        assert_eq!(tcp.option("--dport").unwrap().arg(0).unwrap(), "80");
        assert_eq!(
            v.generic_option("-d").unwrap().arg(0).unwrap(),
            "172.30.0.41"
        );
        assert_eq!(v.comments().next().unwrap(), "ns1/svc1:p80 cluster IP");
        assert_eq!(
            v.chain_reference(),
            Some(ChainRef {
                kind: TransferKind::Jump,
                chain: "KUBE-SVC-XPGD46QRK7WJZT7O"
            })
        );
    }

    #[test]
    fn implicit_protocol_match() {
        let t = "-p tcp --dport 80 -j ACCEPT";
        let (r, p) = build(t);
        assert!(p.is_empty());
        let m = r.view(t).matches().next().unwrap();
        assert!(m.implicit());
        assert_eq!(m.module(), "tcp");
        assert_eq!(r.view(t).chain_reference(), None);
    }

    #[test]
    fn negations_before_and_after_option_name() {
        let t = "! -s 10.0.0.0/8 -m tcp -p tcp --dport ! 22 -m mark ! --mark 0x4000/0x4000";
        let (r, p) = build(t);
        assert!(p.is_empty(), "{p:?}");
        let v = r.view(t);
        assert!(v.generic_option("-s").unwrap().negated());
        assert!(
            v.match_named("tcp")
                .unwrap()
                .option("--dport")
                .unwrap()
                .negated()
        );
        assert!(
            v.match_named("mark")
                .unwrap()
                .option("--mark")
                .unwrap()
                .negated()
        );
    }

    #[test]
    fn target_options_and_goto() {
        let t = "-p tcp -j DNAT --to-destination 10.244.1.5:8080";
        let (r, _) = build(t);
        let tg = r.view(t).target().unwrap();
        assert_eq!(tg.name(), "DNAT");
        assert_eq!(
            tg.option("--to-destination").unwrap().arg(0).unwrap(),
            "10.244.1.5:8080"
        );
        let t = "-g cali-fw-abc";
        let (r, _) = build(t);
        assert_eq!(
            r.view(t).chain_reference().unwrap().kind,
            TransferKind::Goto
        );
    }

    #[test]
    fn rule_without_target_is_legal() {
        let t = r#"-m comment --comment "Profile ksa.kube-system.default ingress""#;
        let (r, p) = build(t);
        assert!(p.is_empty());
        assert!(r.view(t).target().is_none());
    }

    #[test]
    fn target_of_a_cell_without_a_recorded_one_comes_from_the_index() {
        let t = "-A X -p tcp -j DNAT --to-destination 10.0.0.1:80";
        let cell = XtCell::new(5..t.len());
        assert_eq!(
            cell.target(t),
            Some(XtTargetRef {
                name: "DNAT",
                goto: false,
                has_options: true
            })
        );
        let t = "-A X -g Y";
        let cell = XtCell::new(5..t.len());
        let r = cell.target(t).unwrap();
        assert_eq!((r.name, r.goto, r.has_options), ("Y", true, false));
        assert_eq!(XtCell::new(5..9).target("-A X -p tcp"), None);
    }

    #[test]
    fn problems_are_reported_and_words_kept() {
        let t = "--dport 80 stray -j";
        let (r, p) = build(t);
        // "--dport" belongs to no match (and swallows "80 stray"); "-j" has no name.
        assert_eq!(p.len(), 2, "{p:?}");
        assert_eq!(r.view(t).raw_words().count(), 4);
    }
}
