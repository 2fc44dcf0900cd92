//! The texts a ruleset is read from, and the spans of them rules and chains hold.
//!
//! [`Source`] is a whole text: the input (or a section of a session log), or a text
//! plumb wrote from it (an nft listing's rules translated into iptables syntax, an nft
//! JSON rule). [`RuleText`] is a rule's text or a chain's name as a span of one.
//!
//! A rule does not keep its location: it is found from where its text starts in its
//! source ([`RuleText::location`]). For the input that is counted, from a table of
//! every 8th line's start made on the first location asked; a text plumb wrote
//! carries where each of its rules was read ([`Placed`]). A 10k-service dump holds
//! 170k rules, and their locations kept beside them were 1.3 MiB, 7 % of the model.

use super::Location;
use super::packed::{PackedLines, Stride};
use serde::Serialize;
use std::borrow::Cow;
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

/// A whole text, shared by the rules and chain names read from it. It holds a
/// `String`: the file's bytes become the shared text without a copy (a 12 MB dump
/// copied cost 3,000 page faults and ~15 ms per command).
pub type SourceText = Arc<Source>;

/// A rule text's `end` when its `start` is the offset of a packed line's record.
const PACKED: u32 = u32::MAX;

/// Lines between two entries of a source's line table: a location is counted from
/// the nearest entry, over at most this many lines (~850 bytes of a kube-proxy dump).
const LINE_STRIDE: usize = 8;

/// Texts shorter than this are counted from their start, without a line table.
const SHORT_TEXT: usize = 4096;

/// A text rules were read from or written into, and where its bytes were read.
pub struct Source {
    text: String,
    /// Rule lines packed word by word ([`Source::packed`]); `text` is empty then, and
    /// the packed words stand in for it (a chain's name is a span of them).
    packed: Option<Box<PackedStore>>,
    placed: Placed,
    /// Lines before the text in the file it is part of (a section of a session log
    /// read on its own): added to every line found here. Set once, when reading ends.
    lines_before: AtomicU32,
    /// The start of every [`LINE_STRIDE`]th line, made on the first location asked of
    /// a text of [`SHORT_TEXT`] or more.
    line_table: OnceLock<Box<[u32]>>,
}

/// Where the rules of a text were read.
pub enum Placed {
    /// The text is what was read: a span was read where it starts.
    Read,
    /// A text plumb wrote one rule a line (a translation into iptables syntax): its
    /// line `first + i` (1-based) was read at `at[i]`.
    Lines {
        /// The text's line holding the first placed rule.
        first: u32,
        /// Where each rule line was read, in order.
        at: Box<[Location]>,
    },
    /// A text plumb wrote rules into: the span starting at byte `at[i].0` was read at
    /// `at[i].1` (sorted by start).
    Spans(Box<[(u32, Location)]>),
    /// A text plumb made that was not read anywhere (a name, a test's rule):
    /// `Location::default()`, line 0.
    Nowhere,
}

impl Source {
    /// The input `text`, read as it is.
    pub fn read(text: String) -> SourceText {
        Source::written(text, Placed::Read)
    }

    /// A text plumb wrote, with where its rules were read.
    pub fn written(text: String, placed: Placed) -> SourceText {
        let placed = match placed {
            Placed::Spans(at) if !at.is_sorted_by_key(|&(start, _)| start) => {
                let mut at = at.into_vec();
                at.sort_by_key(|&(start, _)| start);
                Placed::Spans(at.into_boxed_slice())
            }
            other => other,
        };
        Arc::new(Source {
            text,
            packed: None,
            placed,
            lines_before: AtomicU32::new(0),
            line_table: OnceLock::new(),
        })
    }

    /// Rule lines packed word by word, each read where its record starts
    /// ([`RuleText::packed`]), located on the line it was packed with.
    pub fn packed(lines: PackedLines) -> SourceText {
        let strides = (0..lines.strides()).map(|_| OnceLock::new()).collect();
        Arc::new(Source {
            text: String::new(),
            packed: Some(Box::new(PackedStore { lines, strides })),
            placed: Placed::Nowhere,
            lines_before: AtomicU32::new(0),
            line_table: OnceLock::new(),
        })
    }

    /// The whole text (a packed source's words).
    pub fn as_str(&self) -> &str {
        match &self.packed {
            Some(p) => p.lines.words(),
            None => &self.text,
        }
    }

    /// Whether the text is what was read (not a text plumb wrote, not packed): a span
    /// of it is located by where it starts.
    pub fn is_read(&self) -> bool {
        matches!(self.placed, Placed::Read) && self.packed.is_none()
    }

    /// Strides of packed rule lines read back for a `&str` of one of them
    /// ([`RuleText::as_str`]): 0 for a source that is not packed. The passes over every
    /// rule read texts with [`RuleText::read`] and leave none.
    pub fn strides_read_back(&self) -> usize {
        self.packed.as_ref().map_or(0, |p| {
            p.strides.iter().filter(|s| s.get().is_some()).count()
        })
    }

    /// Says that the text starts after `lines` lines of the file it is part of: every
    /// line found in it from now on is `lines` further down. Setting it again replaces
    /// the count (the sources of one section's rules are set once each, however many
    /// rules share them).
    pub(crate) fn set_lines_before(&self, lines: u32) {
        self.lines_before.store(lines, Ordering::Relaxed);
    }

    /// Where the byte `offset` bytes into the span starting at `start` was read.
    fn location(&self, start: usize, offset: usize) -> Location {
        self.place(start, Some(offset))
    }

    /// The line of [`Source::location`], without counting its column.
    pub(crate) fn line(&self, start: usize) -> u32 {
        self.place(start, None).line
    }

    /// Where the span starting at `start` was read; the column of its byte `offset`
    /// when asked (0 when not).
    fn place(&self, start: usize, column_of: Option<usize>) -> Location {
        let found = match &self.placed {
            Placed::Read => match column_of {
                Some(offset) => self.position(start.saturating_add(offset)),
                None => Location {
                    line: line_number(self.lines_ending_before(start)),
                    column: 0,
                },
            },
            Placed::Lines { first, at } => line_number(self.lines_ending_before(start))
                .checked_sub(*first)
                .and_then(|i| at.get(i as usize))
                .copied()
                .unwrap_or_default(),
            Placed::Spans(at) => at
                .binary_search_by_key(&(start as u32), |&(s, _)| s)
                .map(|i| at[i].1)
                .unwrap_or_default(),
            Placed::Nowhere => Location::default(),
        };
        self.shifted(found)
    }

    /// `found` moved down by the lines before the text; no location stays none.
    fn shifted(&self, found: Location) -> Location {
        if found.line == 0 {
            return found;
        }
        Location {
            line: found
                .line
                .saturating_add(self.lines_before.load(Ordering::Relaxed)),
            ..found
        }
    }

    /// The 1-based line and column (in characters) of byte `at` of the text.
    fn position(&self, at: usize) -> Location {
        let at = self.text.floor_char_boundary(at);
        let line_start = self.text.as_bytes()[..at]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |p| p + 1);
        let before = &self.text[line_start..at];
        let column = if before.is_ascii() {
            before.len()
        } else {
            before.chars().count()
        };
        Location {
            line: line_number(self.lines_ending_before(at)),
            column: u32::try_from(column + 1).unwrap_or(u32::MAX),
        }
    }

    /// How many lines end before byte `at`: counted from the line table's nearest
    /// entry, over at most [`LINE_STRIDE`] lines.
    fn lines_ending_before(&self, at: usize) -> usize {
        let bytes = self.text.as_bytes();
        let at = at.min(bytes.len());
        let (lines, from) = if bytes.len() < SHORT_TEXT {
            (0, 0)
        } else {
            let table = self.line_table.get_or_init(|| line_table(&self.text));
            // The table starts with 0, so at least one entry is at or before `at`.
            let k = table.partition_point(|&s| s as usize <= at).max(1) - 1;
            (k * LINE_STRIDE, table[k] as usize)
        };
        lines + newlines(&bytes[from..at])
    }
}

/// The newlines in `bytes`, counted in byte-wide lanes (a count into `usize` lanes
/// takes two bytes a step, and this runs for every rule quoted as evidence).
fn newlines(bytes: &[u8]) -> usize {
    bytes
        .chunks(255)
        .map(|chunk| {
            let in_chunk = chunk
                .iter()
                .fold(0u8, |n, &b| n.wrapping_add(u8::from(b == b'\n')));
            usize::from(in_chunk)
        })
        .sum()
}

/// The 1-based number of the line after `lines` lines.
fn line_number(lines: usize) -> u32 {
    u32::try_from(lines + 1).unwrap_or(u32::MAX)
}

/// The start of line 0, [`LINE_STRIDE`], 2 x [`LINE_STRIDE`], ... of `text`.
fn line_table(text: &str) -> Box<[u32]> {
    let mut table = vec![0u32];
    for (n, (at, _)) in text.match_indices('\n').enumerate() {
        if (n + 1) % LINE_STRIDE == 0 {
            table.push(u32::try_from(at + 1).unwrap_or(u32::MAX));
        }
    }
    table.into_boxed_slice()
}

impl std::ops::Deref for Source {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

/// A packed source's lines, and the strides of them read back as `&str`s.
struct PackedStore {
    lines: PackedLines,
    strides: Box<[OnceLock<Stride>]>,
}

impl PackedStore {
    /// The line packed at `at` as a `&str`: its stride read back and kept.
    fn line_text(&self, at: u32) -> Option<&str> {
        let k = self.lines.stride_of(at)?;
        let stride = self.strides.get(k)?;
        let stride = match stride.get() {
            Some(s) => s,
            None => {
                let read = self.lines.read_stride(k)?;
                stride.get_or_init(|| read)
            }
        };
        stride.line_text(at)
    }

    /// The line packed at `at` when its stride was read back already.
    fn kept(&self, at: u32) -> Option<&str> {
        let k = self.lines.stride_of(at)?;
        self.strides.get(k)?.get()?.line_text(at)
    }

    /// The line packed at `at`, borrowed when its stride was read back already.
    fn read(&self, at: u32) -> Cow<'_, str> {
        match self.kept(at) {
            Some(s) => Cow::Borrowed(s),
            None => Cow::Owned(self.lines.text(at).unwrap_or_default()),
        }
    }

    /// [`PackedStore::read`] and the line the text was read on, found with one walk.
    fn read_with_line(&self, at: u32) -> (Cow<'_, str>, u32) {
        if let Some(s) = self.kept(at) {
            return (Cow::Borrowed(s), self.lines.line(at).unwrap_or(0));
        }
        let mut text = String::with_capacity(192);
        let line = self.lines.read_line_into(at, &mut text).unwrap_or(0);
        (Cow::Owned(text), line)
    }

    /// The line packed at `at`, borrowed when its stride was read back already, else
    /// read into `buf` (cleared first).
    fn read_in<'a>(&'a self, at: u32, buf: &'a mut String) -> &'a str {
        if let Some(s) = self.kept(at) {
            return s;
        }
        buf.clear();
        self.lines.read_into(at, buf);
        buf
    }
}

impl fmt::Debug for Source {
    /// Its size, not its text: a source is often a whole 20 MB dump.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Source")
            .field("bytes", &self.as_str().len())
            .field("packed_lines", &self.packed.as_ref().map(|p| p.lines.len()))
            .finish_non_exhaustive()
    }
}

/// A rule's text or a chain's name: a span of the dump it was read from, shared with
/// every other rule and chain of that dump (one copy of the input instead of one
/// string each), a string of its own when the text was composed (nft JSON), or a line
/// packed word by word ([`RuleText::packed`]). Read it with [`RuleText::read`]; it also
/// derefs to a `&str`, which for a packed line reads back and keeps its whole stride.
#[derive(Clone)]
pub struct RuleText {
    source: SourceText,
    start: u32,
    end: u32,
}

impl RuleText {
    /// `source[range]`. Ranges past `u32::MAX` are refused by the parsers' size limit;
    /// an out-of-range span reads as empty rather than panicking.
    pub fn span(source: &SourceText, range: std::ops::Range<usize>) -> RuleText {
        let fits = range.end <= source.len()
            && range.start <= range.end
            && u32::try_from(range.end).is_ok_and(|end| end != PACKED)
            && source.is_char_boundary(range.start)
            && source.is_char_boundary(range.end);
        let (start, end) = if fits {
            (range.start as u32, range.end as u32)
        } else {
            (0, 0)
        };
        RuleText {
            source: Arc::clone(source),
            start,
            end,
        }
    }

    /// `s` as a span of `source` when `s` is a slice of it (no allocation), else a text
    /// of its own.
    pub fn within(source: &SourceText, s: &str) -> RuleText {
        RuleText::slice_of(source, s).unwrap_or_else(|| RuleText::from(s))
    }

    /// `s` as a span of `source` when `s` is a slice of it; `None` when it is not (a
    /// caller that must give the text a location of its own then makes one).
    pub fn slice_of(source: &SourceText, s: &str) -> Option<RuleText> {
        let from = (s.as_ptr() as usize).checked_sub(source.as_ptr() as usize)?;
        (from + s.len() <= source.len()).then(|| RuleText::span(source, from..from + s.len()))
    }

    /// A text of its own that was read at `location` (a rule plumb composed or joined
    /// from what it read: an nft JSON rule, a rule spread over several lines).
    pub fn written_at(text: String, location: Location) -> RuleText {
        let len = text.len();
        let at = Placed::Spans(Box::new([(0, location)]));
        RuleText::span(&Source::written(text, at), 0..len)
    }

    /// The line packed at record offset `at` of a packed `source`
    /// ([`Source::packed`]).
    pub fn packed(source: &SourceText, at: u32) -> RuleText {
        RuleText {
            source: Arc::clone(source),
            start: at,
            end: PACKED,
        }
    }

    fn packed_store(&self) -> Option<&PackedStore> {
        if self.end == PACKED {
            self.source.packed.as_deref()
        } else {
            None
        }
    }

    /// The text this span covers. A packed line's stride is read back and kept for
    /// as long as the source: passes over many rules use [`RuleText::read`].
    pub fn as_str(&self) -> &str {
        match self.packed_store() {
            Some(p) => p.line_text(self.start).unwrap_or_default(),
            None => self
                .source
                .as_str()
                .get(self.start as usize..self.end as usize)
                .unwrap_or_default(),
        }
    }

    /// The text, read back into a string of its own when it is a packed line (nothing
    /// kept), else borrowed.
    pub fn read(&self) -> Cow<'_, str> {
        match self.packed_store() {
            Some(p) => p.read(self.start),
            None => Cow::Borrowed(self.as_str()),
        }
    }

    /// The text like [`RuleText::read`], read back into `buf` (cleared first) when it
    /// is a packed line: a pass over many rules reads every one with one buffer.
    pub fn read_in<'a>(&'a self, buf: &'a mut String) -> &'a str {
        match self.packed_store() {
            Some(p) => p.read_in(self.start, buf),
            None => self.as_str(),
        }
    }

    /// Whether the text contains `needle`: `str::contains` (which it shadows), without
    /// keeping a packed line read back.
    pub fn contains(&self, needle: &str) -> bool {
        self.read().contains(needle)
    }

    /// `part`, a slice of `read` (this text as [`RuleText::read`] gave it), as a string
    /// that lasts as long as the text's source: a span of a text that is not packed,
    /// a word of a packed line (its words are kept whole). `None` when `part` is not a
    /// slice of `read`, or not one whole word of a packed line. A pass that keeps
    /// parts of rules (a jump's target, an address) keeps them without keeping the
    /// texts read back.
    pub fn lasting<'s>(&'s self, read: &str, part: &str) -> Option<&'s str> {
        let from = (part.as_ptr() as usize).checked_sub(read.as_ptr() as usize)?;
        let range = from..from.checked_add(part.len()).filter(|&e| e <= read.len())?;
        self.word(range)
    }

    /// The bytes `range` of the text when they are a whole word of it (of any text
    /// that is not packed: any span), without reading a packed line back.
    pub fn word(&self, range: std::ops::Range<usize>) -> Option<&str> {
        match self.packed_store() {
            Some(p) => p.lines.whole_word(self.start, range),
            None => self.as_str().get(range),
        }
    }

    /// Where the text starts in its source, and whether that is a line's start: a
    /// packed text is located by the line it was packed with, and its columns counted
    /// from its start.
    pub(crate) fn starts_line(&self) -> Option<usize> {
        let start = self.start as usize;
        let before = self.source.as_str().as_bytes().get(..start)?;
        (self.packed_store().is_none() && before.last().is_none_or(|&b| b == b'\n'))
            .then_some(start)
    }

    /// Where the text is in its source: its start and end, or for a packed line, its
    /// record's offset and a mark no span has.
    pub(crate) fn span_bounds(&self) -> (u32, u32) {
        (self.start, self.end)
    }

    /// The text's length in bytes (a packed line's without reading it back).
    pub fn len(&self) -> usize {
        match self.packed_store() {
            Some(p) => p.lines.text_len(self.start),
            None => (self.end - self.start) as usize,
        }
    }

    /// Whether the text is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where the text was read: where it starts in the input, or for a text plumb
    /// wrote, where the rule it was written for was read.
    pub fn location(&self) -> Location {
        self.location_of(0)
    }

    /// Where byte `offset` of the text was read (a word after a rule's counters, say):
    /// for a text plumb wrote, where the rule it was written for was read, whatever
    /// `offset` is.
    pub fn location_of(&self, offset: usize) -> Location {
        let Some(p) = self.packed_store() else {
            return self.source.location(self.start as usize, offset);
        };
        // A packed line starts its line (`Ruleset::pack_texts` packs no other).
        let text = self.read();
        let before = &text[..text.floor_char_boundary(offset)];
        let column = if before.is_ascii() {
            before.len()
        } else {
            before.chars().count()
        };
        self.source.shifted(Location {
            line: p.lines.line(self.start).unwrap_or(0),
            column: u32::try_from(column + 1).unwrap_or(u32::MAX),
        })
    }

    /// The line of [`RuleText::location`], without counting its column.
    pub fn line(&self) -> u32 {
        match self.packed_store() {
            Some(p) => {
                let line = p.lines.line(self.start).unwrap_or(0);
                self.source.shifted(Location { line, column: 0 }).line
            }
            None => self.source.line(self.start as usize),
        }
    }

    /// [`RuleText::read`] and [`RuleText::line`] at once: a packed line is found once
    /// for both.
    pub fn read_with_line(&self) -> (Cow<'_, str>, u32) {
        match self.packed_store() {
            Some(p) => {
                let (text, line) = p.read_with_line(self.start);
                (text, self.source.shifted(Location { line, column: 0 }).line)
            }
            None => (Cow::Borrowed(self.as_str()), self.line()),
        }
    }

    /// Whether the text is a packed line (see [`RuleText::packed`]).
    pub fn is_packed(&self) -> bool {
        self.packed_store().is_some()
    }

    /// The text this span is part of.
    pub fn source(&self) -> &SourceText {
        &self.source
    }
}

impl From<&str> for RuleText {
    fn from(s: &str) -> RuleText {
        RuleText::from(s.to_string())
    }
}

impl From<String> for RuleText {
    fn from(s: String) -> RuleText {
        let len = s.len();
        RuleText::span(&Source::written(s, Placed::Nowhere), 0..len)
    }
}

impl std::ops::Deref for RuleText {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for RuleText {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl std::borrow::Borrow<str> for RuleText {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for RuleText {
    fn eq(&self, other: &RuleText) -> bool {
        self.read() == other.read()
    }
}

impl Eq for RuleText {}

impl PartialEq<str> for RuleText {
    fn eq(&self, other: &str) -> bool {
        self.read() == other
    }
}

impl PartialEq<&str> for RuleText {
    fn eq(&self, other: &&str) -> bool {
        self.read() == *other
    }
}

impl PartialOrd for RuleText {
    fn partial_cmp(&self, other: &RuleText) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for RuleText {
    fn cmp(&self, other: &RuleText) -> std::cmp::Ordering {
        self.read().cmp(&other.read())
    }
}

impl std::hash::Hash for RuleText {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.read().hash(state);
    }
}

impl fmt::Debug for RuleText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.read(), f)
    }
}

impl fmt::Display for RuleText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.read())
    }
}

impl Serialize for RuleText {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.read())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_text_reads_its_span_and_refuses_bad_ones() {
        let src = Source::read("ab\ncd é".to_string());
        assert_eq!(RuleText::span(&src, 3..5).as_str(), "cd");
        assert_eq!(RuleText::span(&src, 0..2), "ab");
        // Inside the two-byte 'é', past the end, reversed: empty, never a panic.
        assert_eq!(RuleText::span(&src, 0..src.len() - 1).as_str(), "");
        assert_eq!(RuleText::span(&src, 3..99).as_str(), "");
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = RuleText::span(&src, 5..4);
        assert_eq!(reversed.as_str(), "");
        assert_eq!(RuleText::from("x y").to_string(), "x y");
        // A slice of the source becomes a span of it; anything else a text of its own.
        let within = RuleText::within(&src, &src[3..5]);
        assert!(Arc::ptr_eq(&within.source, &src) && within == "cd");
        let other = RuleText::within(&src, "cd");
        assert!(!Arc::ptr_eq(&other.source, &src) && other == "cd");
    }

    /// A long text with a line table: line `i` (0-based) is `i` spaces then `r<i>`.
    fn indented_lines(n: usize) -> (SourceText, Vec<usize>) {
        let mut text = String::new();
        let mut starts = Vec::new();
        for i in 0..n {
            text.push_str(&" ".repeat(i % 7));
            starts.push(text.len());
            text.push_str(&format!("r{i}\n"));
        }
        assert!(text.len() >= SHORT_TEXT, "the table is used");
        (Source::read(text), starts)
    }

    #[test]
    fn a_read_span_is_located_where_it_starts() {
        let (src, starts) = indented_lines(3000);
        for i in [0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 1234, 2999] {
            let word = RuleText::span(&src, starts[i]..starts[i] + format!("r{i}").len());
            assert_eq!(word.as_str(), format!("r{i}"));
            let want = Location {
                line: i as u32 + 1,
                column: (i % 7) as u32 + 1,
            };
            assert_eq!(word.location(), want, "line {i}");
            assert_eq!(word.line(), want.line, "line {i}");
            // An offset into the span moves along the line.
            assert_eq!(word.location_of(1).column, want.column + 1);
        }
        // Columns count characters, not bytes.
        let src = Source::read("ab\n\u{e9}\u{e9}x\n".to_string());
        let x = RuleText::span(&src, 7..8);
        assert_eq!(
            (x.as_str(), x.location()),
            ("x", Location { line: 2, column: 3 })
        );
    }

    #[test]
    fn a_written_text_is_located_where_its_rules_were_read() {
        let at = |line, column| Location { line, column };
        let by_line = Source::written(
            "*nat\n:A - [0:0]\n-A A -j X\n-A A -j Y\nCOMMIT\n".to_string(),
            Placed::Lines {
                first: 3,
                at: Box::new([at(40, 3), at(41, 3)]),
            },
        );
        assert_eq!(RuleText::span(&by_line, 16..25).location(), at(40, 3));
        // Any offset into a written rule is the rule's location.
        assert_eq!(RuleText::span(&by_line, 26..35).location_of(5), at(41, 3));
        // Lines before the first placed one, or past the last, have none.
        assert_eq!(
            RuleText::span(&by_line, 0..4).location(),
            Location::default()
        );
        assert_eq!(
            RuleText::span(&by_line, 36..42).location(),
            Location::default()
        );
        let by_span = Source::written(
            "tcp dport 22 acceptdrop".to_string(),
            Placed::Spans(Box::new([(19, at(9, 5)), (0, at(7, 5))])),
        );
        assert_eq!(RuleText::span(&by_span, 0..19).location(), at(7, 5));
        assert_eq!(RuleText::span(&by_span, 19..23).location(), at(9, 5));
        assert_eq!(
            RuleText::span(&by_span, 4..9).location(),
            Location::default()
        );
        assert_eq!(
            RuleText::written_at("x".to_string(), at(3, 4)).location(),
            at(3, 4)
        );
        assert_eq!(RuleText::from("x").location(), Location::default());
    }

    #[test]
    fn newlines_are_counted_across_chunks() {
        for len in [0, 1, 254, 255, 256, 600, 2000] {
            let bytes: Vec<u8> = (0..len)
                .map(|i| if i % 3 == 0 { b'\n' } else { b'x' })
                .collect();
            let want = bytes.iter().filter(|&&b| b == b'\n').count();
            assert_eq!(newlines(&bytes), want, "{len} bytes");
        }
        assert_eq!(newlines(&[b'\n'; 600]), 600);
    }

    #[test]
    fn a_packed_line_reads_and_is_located_as_the_line_it_was() {
        use crate::model::packed::PackedBuilder;
        let lines: Vec<String> = (0..40)
            .map(|i| format!("-A KUBE-SVC-{i} -m comment --comment \"ns/svc-{i} \u{e9}\" -j X"))
            .collect();
        let mut b = PackedBuilder::new();
        let at: Vec<u32> = (0..40)
            .map(|i| b.push(&lines[i], 3 * i as u32 + 2).unwrap())
            .collect();
        let src = Source::packed(b.finish());
        let texts: Vec<RuleText> = at.iter().map(|&a| RuleText::packed(&src, a)).collect();
        for (i, t) in texts.iter().enumerate() {
            assert!(t.is_packed());
            assert_eq!(t.read(), lines[i].as_str());
            assert_eq!((t.len(), t.is_empty()), (lines[i].len(), false));
            assert_eq!(t.line(), 3 * i as u32 + 2);
            assert_eq!(
                t.location(),
                Location {
                    line: 3 * i as u32 + 2,
                    column: 1
                }
            );
            // Columns count characters: 'é' is two bytes.
            let after = lines[i].find(" -j").unwrap();
            assert_eq!(t.location_of(after).column as usize, after);
            assert_eq!(*t, RuleText::from(lines[i].as_str()));
            assert_eq!(t.to_string(), lines[i]);
        }
        // Reading keeps nothing; a `&str` keeps its stride (16 lines) read back.
        assert_eq!(src.strides_read_back(), 0);
        assert_eq!(texts[17].as_str(), lines[17]);
        assert_eq!(src.strides_read_back(), 1);
        assert_eq!(texts[31].as_str(), lines[31]);
        assert_eq!(texts[20].read(), lines[20].as_str());
        // Read into a buffer (replacing what it held), searched: nothing kept either.
        let mut buf = String::from("left over");
        assert_eq!(texts[36].read_in(&mut buf), lines[36]);
        assert_eq!(texts[37].read_in(&mut buf), lines[37]);
        assert!(texts[38].contains(" -j ") && !texts[38].contains("absent"));
        assert_eq!(src.strides_read_back(), 1);
        // A stride read back already is borrowed from, not read into the buffer.
        buf.clear();
        assert_eq!(texts[18].read_in(&mut buf), lines[18]);
        assert!(buf.is_empty());
        // Lines before the source move packed lines down too.
        src.set_lines_before(100);
        assert_eq!(texts[0].location().line, 102);
        assert_eq!(texts[0].line(), 102);
        // A span of the words (a chain's name) is a span as any other; an offset that
        // is no record's start reads as empty.
        let words = RuleText::span(&src, 0..2);
        assert_eq!((words.as_str(), words.is_packed()), ("-A", false));
        let inside = RuleText::packed(&src, at[3] + 1);
        assert_eq!(
            (inside.read(), inside.as_str(), inside.len()),
            ("".into(), "", 0)
        );
    }

    #[test]
    fn lines_before_move_every_location_down() {
        let (src, starts) = indented_lines(1000);
        let r = RuleText::span(&src, starts[50]..starts[50] + 3);
        assert_eq!(r.location().line, 51);
        src.set_lines_before(1000);
        assert_eq!(r.location().line, 1051);
        // Set, not added: a source shared by many rules is set once per rule.
        src.set_lines_before(1000);
        assert_eq!(r.location().line, 1051);
        // A text with no location has none after the lines before it either.
        let nowhere = RuleText::from("x");
        nowhere.source().set_lines_before(1000);
        assert_eq!(nowhere.location(), Location::default());
    }
}
