//! Lines packed word by word: the first step of holding a dump's rule texts in less
//! memory than the dump itself (ARCHITECTURE.md, "The ruleset model").
//!
//! A kube-proxy dump says the same few words again and again (`-A`, `-m`, `comment`,
//! its chain names, its addresses): its 170k rule lines hold 173k distinct words in
//! 16.3 MB. [`PackedLines`] keeps every distinct word once and each line as the numbers
//! of its words, one to three bytes each, which is 6.0 MB for that dump (2.7x less).
//! A line is read back on its own, without its neighbours ([`PackedLines::read_into`]),
//! because the passes over a ruleset jump from chain to chain: a block compressor
//! would decompress a block for every jump.
//!
//! Packing is exact for any text: a line is split at each space (`"a  b"` is `a`, an
//! empty word, `b`) and read back joined with one space, so whatever the spacing, the
//! same bytes come back. Each line carries the line number it was read on.
//!
//! A packed line is found by its record's offset ([`PackedLines::read_into`],
//! [`PackedLines::line`]); an offset that is not a record's start reads as nothing,
//! never a panic.

use crate::fasthash::FxHasher;
use std::hash::Hasher;
use std::sync::Arc;

/// Words [`PackedBuilder`] remembers it looked up last (a power of two).
const RECENT: usize = 256;

/// A record's line is counted from the nearest mark: one every this many records.
const MARK_STRIDE: u32 = 16;

/// The words one [`PackedBuilder::finish_piece`] added, frozen: word `first + i` is
/// `words[at[i]..at[i + 1]]`. Lines packed later share them.
struct Segment {
    first: u32,
    words: Box<str>,
    at: Box<[u32]>,
}

impl Segment {
    #[inline]
    fn word(&self, id: u32) -> Option<&str> {
        let (from, to) = self.bounds(id)?;
        self.words.get(from as usize..to as usize)
    }

    /// The length of word `id`, from its bounds alone: `str::get` in
    /// [`Segment::word`] reads the word's first byte (a char boundary check), a cache
    /// miss that reading a line's length or finding its nth byte need not pay.
    #[inline]
    fn len_of(&self, id: u32) -> Option<usize> {
        let (from, to) = self.bounds(id)?;
        to.checked_sub(from).map(|n| n as usize)
    }

    #[inline]
    fn bounds(&self, id: u32) -> Option<(u32, u32)> {
        let i = usize::try_from(id.checked_sub(self.first)?).ok()?;
        Some((*self.at.get(i)?, *self.at.get(i + 1)?))
    }
}

/// The word numbered `id` among `segments` (sorted by their first number). Most words
/// read are the first piece's (the words every rule has) or the last one's (the piece's
/// own chain names and addresses): those are found without a search.
#[inline]
fn word_in(segments: &[Arc<Segment>], id: u32) -> Option<&str> {
    segments[segment_of(segments, id)?].word(id)
}

/// The index of the segment among `segments` holding word `id`.
#[inline]
fn segment_of(segments: &[Arc<Segment>], id: u32) -> Option<usize> {
    Some(match segments {
        [] => return None,
        [_] => 0,
        [_, second, ..] if id < second.first => 0,
        [.., last] if id >= last.first => segments.len() - 1,
        _ => segments.partition_point(|s| s.first <= id).checked_sub(1)?,
    })
}

/// Lines packed word by word (see the module documentation).
#[derive(Clone, Default)]
pub struct PackedLines {
    /// Every word numbered so far, in the segments of the pieces packed so far; this
    /// text's own words are the last segment's.
    segments: Box<[Arc<Segment>]>,
    /// One record per line: the length of the rest of the record, the line number as
    /// a difference from the previous record's (zig-zag), then the line's word numbers,
    /// each a LEB128 varint.
    records: Box<[u8]>,
    /// `(offset, line)` of every [`MARK_STRIDE`]th record, the first included.
    marks: Box<[(u32, u32)]>,
    /// Records packed.
    count: u32,
}

/// Builds [`PackedLines`] one line at a time, and, for a text read in pieces, one
/// [`PackedLines`] per piece whose words are numbered once for all of them
/// ([`PackedBuilder::finish_piece`]).
pub struct PackedBuilder {
    /// The words of the pieces finished.
    frozen: Vec<Arc<Segment>>,
    /// The number of the first word of `words`.
    first: u32,
    /// The words of the piece being packed, back to back.
    words: String,
    /// Word `first + i` is `words[word_at[i]..word_at[i + 1]]`.
    word_at: Vec<u32>,
    /// Open addressing over word numbers plus one (0 is an empty slot); a power of two
    /// long, at most half full. 4 bytes a word: the words' own text is the key.
    slots: Vec<u32>,
    /// The words looked up last, by their hash's low bits: `(hash, number)`. A dump
    /// says a rare word (a chain's name, an address) on several lines in a row; found
    /// here, it costs no miss in the 2 MiB of slots.
    recent: Box<[(u64, u32); RECENT]>,
    records: Vec<u8>,
    marks: Vec<(u32, u32)>,
    count: u32,
    last_line: u32,
    /// The current record's word numbers, before its length is known.
    scratch: Vec<u8>,
}

impl Default for PackedBuilder {
    fn default() -> Self {
        PackedBuilder::new()
    }
}

/// Why a line could not be packed: the packed text would pass 4 GiB (the parsers
/// refuse inputs that large first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLarge;

impl PackedBuilder {
    /// An empty builder.
    pub fn new() -> PackedBuilder {
        PackedBuilder {
            frozen: Vec::new(),
            first: 0,
            words: String::new(),
            word_at: vec![0],
            slots: vec![0; 1024],
            recent: Box::new([(0, u32::MAX); RECENT]),
            records: Vec::new(),
            marks: Vec::new(),
            count: 0,
            last_line: 0,
            scratch: Vec::new(),
        }
    }

    /// Packs `line`, read on line `line_no`; returns the offset its record starts at.
    pub fn push(&mut self, line: &str, line_no: u32) -> Result<u32, TooLarge> {
        let at = u32::try_from(self.records.len()).map_err(|_| TooLarge)?;
        self.scratch.clear();
        let delta = i64::from(line_no) - i64::from(self.last_line);
        put_varint(&mut self.scratch, zigzag(delta));
        for word in line.split(' ') {
            let id = self.id_of(word)?;
            put_varint(&mut self.scratch, u64::from(id));
        }
        if self.count.is_multiple_of(MARK_STRIDE) {
            self.marks.push((at, line_no));
        }
        put_varint(&mut self.records, self.scratch.len() as u64);
        self.records.extend_from_slice(&self.scratch);
        u32::try_from(self.records.len()).map_err(|_| TooLarge)?;
        self.count += 1;
        self.last_line = line_no;
        Ok(at)
    }

    /// Where `word` is (or now is, added if new) among the words: the piece whose
    /// words hold it (its number among the [`PackedBuilder::finish_piece`] calls; the
    /// one being packed is the next) and where in them ([`PackedLines::words`]). A
    /// chain's name is kept as a span of them.
    pub fn word_span(&mut self, word: &str) -> Result<(usize, std::ops::Range<usize>), TooLarge> {
        let id = self.id_of(word)?;
        if id >= self.first {
            let i = (id - self.first) as usize;
            let range = self.word_at[i] as usize..self.word_at[i + 1] as usize;
            return Ok((self.frozen.len(), range));
        }
        let k = self.frozen.partition_point(|s| s.first <= id) - 1;
        let seg = &self.frozen[k];
        let i = (id - seg.first) as usize;
        Ok((k, seg.at[i] as usize..seg.at[i + 1] as usize))
    }

    /// The number of `word`, given one if it is new.
    fn id_of(&mut self, word: &str) -> Result<u32, TooLarge> {
        let h = hash(word);
        let recent = &mut self.recent[h as usize % RECENT];
        if recent.0 == h && recent.1 != u32::MAX {
            let id = recent.1;
            if self.word(id) == word {
                return Ok(id);
            }
        }
        let mask = self.slots.len() - 1;
        let mut i = h as usize & mask;
        loop {
            match self.slots[i] {
                0 => break,
                n if self.word(n - 1) == word => {
                    self.recent[h as usize % RECENT] = (h, n - 1);
                    return Ok(n - 1);
                }
                _ => i = (i + 1) & mask,
            }
        }
        let id = u32::try_from(self.word_at.len() - 1)
            .ok()
            .and_then(|i| self.first.checked_add(i))
            .filter(|&id| id < u32::MAX - 1)
            .ok_or(TooLarge)?;
        self.words.push_str(word);
        self.word_at
            .push(u32::try_from(self.words.len()).map_err(|_| TooLarge)?);
        self.slots[i] = id + 1;
        self.recent[h as usize % RECENT] = (h, id);
        if (id as usize + 1) * 2 > self.slots.len() {
            self.grow();
        }
        Ok(id)
    }

    /// Words numbered so far.
    fn numbered(&self) -> u32 {
        self.first + (self.word_at.len() as u32 - 1)
    }

    fn word(&self, id: u32) -> &str {
        if id >= self.first {
            let i = (id - self.first) as usize;
            &self.words[self.word_at[i] as usize..self.word_at[i + 1] as usize]
        } else {
            word_in(&self.frozen, id).unwrap_or_default()
        }
    }

    /// Doubles the slots and places every word again.
    fn grow(&mut self) {
        let mut slots = vec![0u32; self.slots.len() * 2];
        let mask = slots.len() - 1;
        for id in 0..self.numbered() {
            let mut i = hash(self.word(id)) as usize & mask;
            while slots[i] != 0 {
                i = (i + 1) & mask;
            }
            slots[i] = id + 1;
        }
        self.slots = slots;
    }

    /// The packed lines, in blocks of their exact size (the slots are dropped).
    pub fn finish(mut self) -> PackedLines {
        self.finish_piece()
    }

    /// The lines packed since the last call, in blocks of their exact size, with the
    /// words numbered so far; the words they added are frozen, and the lines packed
    /// next number words on from them (a word is kept once for all the pieces).
    pub fn finish_piece(&mut self) -> PackedLines {
        // Copies: a block shrunk in place keeps its size under mimalloc (alloc.rs).
        self.frozen.push(Arc::new(Segment {
            first: self.first,
            words: Box::from(self.words.as_str()),
            at: Box::from(&self.word_at[..]),
        }));
        self.first = self.numbered();
        self.words = String::new();
        self.word_at = vec![0];
        let lines = PackedLines {
            segments: self.frozen.as_slice().into(),
            records: Box::from(&self.records[..]),
            marks: Box::from(&self.marks[..]),
            count: self.count,
        };
        self.records = Vec::new();
        self.marks = Vec::new();
        self.count = 0;
        lines
    }
}

fn hash(word: &str) -> u64 {
    let mut h = FxHasher::default();
    h.write(word.as_bytes());
    // The low bits pick the slot: fold the well-mixed high bits into them.
    let x = h.finish();
    x ^ (x >> 29)
}

fn zigzag(n: i64) -> u64 {
    ((n << 1) ^ (n >> 63)) as u64
}

fn unzigzag(n: u64) -> i64 {
    ((n >> 1) as i64) ^ -((n & 1) as i64)
}

fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// The varint at `bytes[*at..]`, moving `at` past it; `None` past the end or for a
/// varint longer than a `u64`.
fn get_varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut n = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*at)?;
        *at += 1;
        n |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Some(n);
        }
    }
    None
}

/// The lines of one stride read back: kept by a source whose rule texts are asked for
/// as `&str` (`RuleText::as_str`) rather than read ([`RuleText::read`]).
///
/// [`RuleText::read`]: crate::model::RuleText::read
pub struct Stride {
    text: Box<str>,
    /// `(record offset, start, end)` of each line in `text`, by record offset.
    records: Box<[(u32, u32, u32)]>,
}

impl Stride {
    /// The line of the record at `at`; `None` when it is not in this stride.
    pub fn line_text(&self, at: u32) -> Option<&str> {
        let i = self.records.binary_search_by_key(&at, |r| r.0).ok()?;
        let (_, from, to) = self.records[i];
        self.text.get(from as usize..to as usize)
    }
}

/// One record's parts: where its words start and end, and its line difference.
struct Record {
    delta: i64,
    words: std::ops::Range<usize>,
}

impl PackedLines {
    /// Appends the line packed at `at` to `out`; false (and `out` unchanged) when `at`
    /// is not where a record starts.
    pub fn read_into(&self, at: u32, out: &mut String) -> bool {
        let Some(words) = self.words_of(at) else {
            return false;
        };
        for (i, word) in words.enumerate() {
            if i > 0 {
                out.push(' ');
            }
            out.push_str(word);
        }
        true
    }

    /// The words of the line packed at `at`, in order; `None` when `at` is not where a
    /// record starts. What reads a line (whole, its length, one word) walks these.
    fn words_of(&self, at: u32) -> Option<impl Iterator<Item = &str>> {
        Some(self.ids_of(at)?.map_while(|id| self.word(id)))
    }

    /// The numbers of the words of the line packed at `at`, in order; `None` when `at`
    /// is not where a record starts.
    fn ids_of(&self, at: u32) -> Option<impl Iterator<Item = u64>> {
        if !self.is_record(at) {
            return None;
        }
        Some(self.ids_in(self.record(at as usize)?))
    }

    /// The numbers of the words of `rec`, in order.
    fn ids_in(&self, rec: Record) -> impl Iterator<Item = u64> {
        let mut i = rec.words.start;
        std::iter::from_fn(move || {
            (i < rec.words.end)
                .then(|| get_varint(&self.records, &mut i))
                .flatten()
        })
    }

    /// The length of word `id`, without reading its text.
    fn word_len(&self, id: u64) -> Option<usize> {
        let id = u32::try_from(id).ok()?;
        self.segments[segment_of(&self.segments, id)?].len_of(id)
    }

    /// Appends the line packed at `at` to `out` and gives the line number it was read
    /// on ([`PackedLines::line`]): one walk from the nearest mark finds both. `None`
    /// (and `out` unchanged) when `at` is not where a record starts.
    pub fn read_line_into(&self, at: u32, out: &mut String) -> Option<u32> {
        let line = self.line(at)?;
        let rec = self.record(at as usize)?;
        for (i, word) in self.ids_in(rec).map_while(|id| self.word(id)).enumerate() {
            if i > 0 {
                out.push(' ');
            }
            out.push_str(word);
        }
        Some(line)
    }

    /// The line packed at `at`, as a string of its own.
    pub fn text(&self, at: u32) -> Option<String> {
        // Room for most rule lines at once, rather than growing word by word.
        let mut s = String::with_capacity(192);
        self.read_into(at, &mut s).then_some(s)
    }

    /// The line number the line packed at `at` was read on.
    pub fn line(&self, at: u32) -> Option<u32> {
        let k = self
            .marks
            .partition_point(|&(o, _)| o <= at)
            .checked_sub(1)?;
        let (mut offset, mut line) = self.marks[k];
        loop {
            if offset == at {
                return Some(line);
            }
            if offset > at {
                return None;
            }
            let rec = self.record(offset as usize)?;
            offset = u32::try_from(rec.words.end).ok()?;
            let next = self.record(offset as usize)?;
            line = u32::try_from(i64::from(line) + next.delta).ok()?;
        }
    }

    /// The lines packed.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether no line was packed.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes held on the heap.
    pub fn heap_bytes(&self) -> usize {
        let own = self
            .segments
            .last()
            .map_or(0, |s| s.words.len() + s.at.len() * 4);
        own + self.records.len() + self.marks.len() * 8
    }

    /// The words this text added, back to back (a chain's name can be a span of them).
    pub fn words(&self) -> &str {
        self.segments.last().map_or("", |s| &s.words)
    }

    fn word(&self, id: u64) -> Option<&str> {
        word_in(&self.segments, u32::try_from(id).ok()?)
    }

    fn record(&self, at: usize) -> Option<Record> {
        let mut i = at;
        let len = usize::try_from(get_varint(&self.records, &mut i)?).ok()?;
        let end = i.checked_add(len).filter(|&e| e <= self.records.len())?;
        let delta = unzigzag(get_varint(&self.records, &mut i)?);
        (i <= end).then_some(Record {
            delta,
            words: i..end,
        })
    }

    /// Whether a record starts at `at`: walked from the nearest mark.
    fn is_record(&self, at: u32) -> bool {
        let Some(k) = self.stride_of(at) else {
            return false;
        };
        let mut offset = self.marks[k].0 as usize;
        while offset < at as usize {
            let mut i = offset;
            match get_varint(&self.records, &mut i).and_then(|len| i.checked_add(len as usize)) {
                Some(end) => offset = end,
                None => return false,
            }
        }
        offset == at as usize && offset < self.records.len()
    }

    /// The length in bytes of the line packed at `at` (0 when `at` is no record's
    /// start), without reading it back.
    pub fn text_len(&self, at: u32) -> usize {
        let Some(ids) = self.ids_of(at) else {
            return 0;
        };
        let (len, count) = ids
            .map_while(|id| self.word_len(id))
            .fold((0usize, 0usize), |(len, n), w| (len + w, n + 1));
        len + count.saturating_sub(1)
    }

    /// The bytes `range` of the line packed at `at` as the word they are (kept as long
    /// as these lines), when they are one whole word of it.
    pub fn whole_word(&self, at: u32, range: std::ops::Range<usize>) -> Option<&str> {
        let mut offset = 0usize;
        for id in self.ids_of(at)? {
            if offset == range.start {
                return self.word(id).filter(|w| w.len() == range.len());
            }
            offset += self.word_len(id)? + 1;
            if offset > range.start {
                return None;
            }
        }
        None
    }

    /// Strides: runs of [`MARK_STRIDE`] records, each located from its first.
    pub fn strides(&self) -> usize {
        self.marks.len()
    }

    /// The stride (the records from one mark to the next) the record at `at` is in.
    pub fn stride_of(&self, at: u32) -> Option<usize> {
        self.marks.partition_point(|&(o, _)| o <= at).checked_sub(1)
    }

    /// The lines of stride `k`, read back one after another, and where each is.
    pub fn read_stride(&self, k: usize) -> Option<Stride> {
        let &(mut offset, _) = self.marks.get(k)?;
        let end = self
            .marks
            .get(k + 1)
            .map_or(self.records.len() as u32, |m| m.0);
        let mut text = String::new();
        let mut records = Vec::with_capacity(MARK_STRIDE as usize);
        while offset < end {
            let start = u32::try_from(text.len()).ok()?;
            self.read_into(offset, &mut text);
            records.push((offset, start, u32::try_from(text.len()).ok()?));
            offset = u32::try_from(self.record(offset as usize)?.words.end).ok()?;
        }
        Some(Stride {
            text: text.into_boxed_str(),
            records: records.into_boxed_slice(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packed(lines: &[(&str, u32)]) -> (PackedLines, Vec<u32>) {
        let mut b = PackedBuilder::new();
        let at = lines
            .iter()
            .map(|&(l, n)| b.push(l, n).expect("small"))
            .collect();
        (b.finish(), at)
    }

    #[test]
    fn every_line_reads_back_exactly_with_its_line_number() {
        let lines = [
            ("-A KUBE-SERVICES -d 10.43.0.1/32 -j KUBE-SVC-X", 7),
            ("", 8),
            ("  two  spaces  ", 9),
            ("tab\there é \"quoted words\"", 12),
            (" ", 12),
            ("-A KUBE-SERVICES -d 10.43.0.1/32 -j KUBE-SVC-X", 3),
        ];
        let (p, at) = packed(&lines);
        assert_eq!(p.len(), lines.len());
        for (&(text, line), &at) in lines.iter().zip(&at) {
            assert_eq!(p.text(at).as_deref(), Some(text));
            assert_eq!(p.line(at), Some(line), "{text:?}");
            let mut read = String::from(">");
            assert_eq!(p.read_line_into(at, &mut read), Some(line), "{text:?}");
            assert_eq!(read, format!(">{text}"));
        }
        // A repeated line is packed again, not shared: its own line number.
        assert_ne!(at[0], at[5]);
    }

    #[test]
    fn an_offset_inside_a_record_or_past_the_end_reads_nothing() {
        let lines: Vec<(String, u32)> = (0..100)
            .map(|i| (format!("-A CHAIN-{i} -j RETURN"), i + 1))
            .collect();
        let mut b = PackedBuilder::new();
        let at: Vec<u32> = lines.iter().map(|(l, n)| b.push(l, *n).unwrap()).collect();
        let p = b.finish();
        let starts: std::collections::HashSet<u32> = at.iter().copied().collect();
        let mut out = String::from("kept");
        for offset in 0..p.records.len() as u32 + 10 {
            if !starts.contains(&offset) {
                assert_eq!(p.line(offset), None, "offset {offset}");
                assert!(!p.read_into(offset, &mut out));
                assert_eq!(p.read_line_into(offset, &mut out), None);
                assert_eq!(p.text_len(offset), 0);
            }
        }
        assert_eq!(out, "kept");
        assert_eq!(p.text(at[99]).as_deref(), Some("-A CHAIN-99 -j RETURN"));
        assert_eq!(p.line(at[99]), Some(100));
    }

    #[test]
    fn a_kube_proxy_table_packs_to_well_under_half_its_text() {
        // 2000 services x 5 endpoints in kube-proxy's words: the words repeat, the
        // hashes and addresses do not.
        let mut b = PackedBuilder::new();
        let mut text = 0usize;
        let mut n = 0;
        let mut push = |b: &mut PackedBuilder, l: String| {
            n += 1;
            text += l.len() + 1;
            b.push(&l, n).unwrap();
        };
        for s in 0..2000u32 {
            let svc = format!(
                "KUBE-SVC-{:016X}",
                u64::from(s).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            );
            push(
                &mut b,
                format!(
                    "-A KUBE-SERVICES -d 10.43.{}.{}/32 -p tcp -m comment --comment \"ns-{}/svc-{s}:http cluster IP\" -m tcp --dport 80 -j {svc}",
                    s / 256,
                    s % 256,
                    s / 50
                ),
            );
            for e in 0..5u32 {
                let sep = format!(
                    "KUBE-SEP-{:016X}",
                    u64::from(s * 5 + e).wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
                );
                push(
                    &mut b,
                    format!(
                        "-A {svc} -m comment --comment \"ns-{}/svc-{s}:http -> 10.42.{}.{}:8080\" -m statistic --mode random --probability 0.{} -j {sep}",
                        s / 50,
                        e,
                        s % 256,
                        2 + e
                    ),
                );
                push(
                    &mut b,
                    format!(
                        "-A {sep} -s 10.42.{e}.{}/32 -m comment --comment \"ns-{}/svc-{s}:http\" -j KUBE-MARK-MASQ",
                        s % 256,
                        s / 50
                    ),
                );
                push(
                    &mut b,
                    format!(
                        "-A {sep} -p tcp -m comment --comment \"ns-{}/svc-{s}:http\" -m tcp -j DNAT --to-destination 10.42.{e}.{}:8080",
                        s / 50,
                        s % 256
                    ),
                );
            }
        }
        let p = b.finish();
        // Measured 2.6x; one text per line would be 1.0x and fail.
        let ratio = text as f64 / p.heap_bytes() as f64;
        assert!(
            ratio > 2.2,
            "packed {} of {text} bytes ({ratio:.2}x)",
            p.heap_bytes()
        );
    }

    #[test]
    fn pieces_number_words_once_and_each_reads_its_own_lines() {
        let mut b = PackedBuilder::new();
        let first: Vec<u32> = (0..40)
            .map(|i| b.push(&format!("-A KUBE-SEP-{i} -j DNAT"), i + 1).unwrap())
            .collect();
        let (piece, name) = b.word_span("KUBE-SEP-7").unwrap();
        assert_eq!(
            piece, 0,
            "a word of the piece being packed is in the next piece"
        );
        let one = b.finish_piece();
        // The second piece says the same words again, and one new.
        let second: Vec<u32> = (0..40)
            .map(|i| b.push(&format!("-A KUBE-SEP-{i} -j NEW"), 100 + i).unwrap())
            .collect();
        assert_eq!(b.word_span("KUBE-SEP-7").unwrap(), (0, name.clone()));
        assert_eq!(b.word_span("NEW").unwrap().0, 1);
        let two = b.finish_piece();
        assert_eq!(&one.words()[name], "KUBE-SEP-7");
        assert_eq!(
            two.words(),
            "NEW",
            "only its new word is the second piece's"
        );
        for i in 0..40u32 {
            let (a, z) = (first[i as usize], second[i as usize]);
            assert_eq!(one.text(a).unwrap(), format!("-A KUBE-SEP-{i} -j DNAT"));
            assert_eq!(two.text(z).unwrap(), format!("-A KUBE-SEP-{i} -j NEW"));
            assert_eq!((one.line(a), two.line(z)), (Some(i + 1), Some(100 + i)));
        }
        assert!(two.heap_bytes() < one.heap_bytes());
    }

    #[test]
    fn varints_and_zigzag_round_trip_and_refuse_overlong_input() {
        for n in [
            0u64,
            1,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut v = Vec::new();
            put_varint(&mut v, n);
            let mut at = 0;
            assert_eq!(get_varint(&v, &mut at), Some(n));
            assert_eq!(at, v.len());
        }
        for d in [0i64, 1, -1, 1 << 40, -(1 << 40), i64::MIN, i64::MAX] {
            assert_eq!(unzigzag(zigzag(d)), d);
        }
        let mut at = 0;
        assert_eq!(get_varint(&[0xff; 11], &mut at), None);
        assert_eq!(get_varint(&[0x80], &mut 0), None);
    }

    #[test]
    fn many_distinct_words_grow_the_slots_and_stay_found() {
        let mut b = PackedBuilder::new();
        let at: Vec<u32> = (0..20_000)
            .map(|i| b.push(&format!("w{i} w{} common", i / 2), i + 1).unwrap())
            .collect();
        let p = b.finish();
        for (i, &at) in at.iter().enumerate() {
            assert_eq!(p.text(at).unwrap(), format!("w{i} w{} common", i / 2));
        }
        // Every word once: w0..w19999 and "common".
        assert_eq!(p.segments.last().unwrap().at.len() - 1, 20_001);
    }
}
