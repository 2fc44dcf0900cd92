//! Packing a ruleset's rule texts and chain names word by word ([`super::packed`]), in
//! three steps so that a dump read in pieces packs one piece on another thread while
//! the next is read: [`gather`] lists what a piece read (on the reader's thread, a
//! walk of the chains), [`Packer::pack`] packs it (anywhere: it needs only the piece's
//! text), [`put_back`] puts the packed texts in the rules' place (the reader's thread
//! again). Reading a 10k-service dump, packing took as long as reading the lines; run
//! beside the reading, it costs its share of the second core instead.
//!
//! A text is put back where it was gathered: its chain and rule index, when the rule
//! there is still the one gathered (same source, same start); else it is looked for
//! in every chain (the reader moved it: a rule inserted before it, a chain deleted
//! before its own). One not found (its chain deleted) is left as it was read.

use super::packed::PackedBuilder;
use super::{Chain, RuleBody, RuleText, Source, SourceText};
use std::sync::Arc;

/// What one step packs: the xtables rule texts and chain names read from an input
/// (only from one source, when [`gather`] was given one), in the chains' order.
pub(crate) struct PackJob {
    /// The sources the texts were read from.
    sources: Vec<SourceText>,
    items: Vec<Item>,
}

impl PackJob {
    /// Whether there is nothing to pack.
    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// One text to pack: where it is in the chains and where it was read.
#[derive(Clone, Copy)]
struct Item {
    /// Index of its chain in the chains gathered from.
    chain: u32,
    /// Index of its rule, or [`NAME`] for the chain's name.
    rule: u32,
    /// Index of its source in [`PackJob::sources`].
    source: u32,
    start: u32,
    end: u32,
}

impl Item {
    fn of(text: &RuleText, chain: u32, rule: u32, source: u32) -> Item {
        let (start, end) = text.span_bounds();
        Item {
            chain,
            rule,
            source,
            start,
            end,
        }
    }
}

/// [`Item::rule`] of a chain's name.
const NAME: u32 = u32::MAX;

/// The texts of a [`PackJob`] packed: each item's packed text (`None` when it could not
/// be packed), in the job's order.
pub(crate) struct Packed {
    job: PackJob,
    texts: Vec<Option<RuleText>>,
}

impl Packed {
    /// Rules packed.
    pub(crate) fn rules(&self) -> usize {
        self.job
            .items
            .iter()
            .zip(&self.texts)
            .filter(|(i, t)| i.rule != NAME && t.is_some())
            .count()
    }
}

/// Where [`Packer::pack`] put a text: a chain's name among the words of the piece that
/// added them (its index among the pieces packed), a rule's line at its record.
enum Place {
    Words(usize, std::ops::Range<usize>),
    Line(u32),
}

/// Packs the texts of a ruleset, at once or one piece of it at a time: the words are
/// numbered once for all the pieces, and each piece's packed text is a source of its
/// own holding the words it added.
#[derive(Default)]
pub(crate) struct Packer {
    builder: PackedBuilder,
    /// The packed text of each piece so far, in order (a chain's name is a span of the
    /// words of the one that added it).
    sources: Vec<SourceText>,
}

/// Lists the xtables rule texts of `chains` read from an input (only from `only`, when
/// given) that start their line (a packed text is located by its line; its column is
/// counted from its start), and the names of the chains read from it.
pub(crate) fn gather(chains: &[&mut Chain], only: Option<&SourceText>) -> PackJob {
    let mut job = PackJob {
        sources: Vec::new(),
        items: Vec::new(),
    };
    // Compared with `only` first: a walk of every rule read so far for each piece read
    // reads nothing of the rules of earlier pieces but their source's address.
    let source_of = |job: &mut PackJob, t: &RuleText| -> Option<u32> {
        let s = t.source();
        if only.is_some_and(|o| !Arc::ptr_eq(s, o)) || !s.is_read() {
            return None;
        }
        let found = job.sources.iter().rposition(|k| Arc::ptr_eq(k, s));
        let i = found.unwrap_or_else(|| {
            job.sources.push(Arc::clone(s));
            job.sources.len() - 1
        });
        u32::try_from(i).ok()
    };
    for (c, chain) in chains.iter().enumerate() {
        let Ok(c) = u32::try_from(c) else { break };
        if let Some(source) = source_of(&mut job, &chain.name) {
            job.items.push(Item::of(&chain.name, c, NAME, source));
        }
        for (r, rule) in chain.rules.iter().enumerate() {
            let Some(source) = source_of(&mut job, &rule.text) else {
                continue;
            };
            let (RuleBody::Xt(_), Some(_), Ok(r)) =
                (&rule.body, rule.text.starts_line(), u32::try_from(r))
            else {
                continue;
            };
            job.items.push(Item::of(&rule.text, c, r, source));
        }
    }
    job
}

impl Packer {
    /// Packs the texts of `job` into one packed source.
    pub(crate) fn pack(&mut self, job: PackJob) -> Packed {
        let b = &mut self.builder;
        let mut placed: Vec<Option<Place>> = Vec::with_capacity(job.items.len());
        // The line of the last rule packed, where it starts and in which source: the
        // next rule's line is counted on from there (rules come in line order, mostly),
        // not from the source's line table.
        let mut last: Option<(u32, u32, u32)> = None;
        for item in &job.items {
            let source = &job.sources[item.source as usize];
            let text = source
                .as_str()
                .get(item.start as usize..item.end as usize)
                .unwrap_or_default();
            if item.rule == NAME {
                placed.push(
                    b.word_span(text)
                        .ok()
                        .map(|(k, words)| Place::Words(k, words)),
                );
                continue;
            }
            let line = match last {
                Some((s, at, line)) if s == item.source && at <= item.start => {
                    let between = &source.as_bytes()[at as usize..item.start as usize];
                    let lines = between.iter().filter(|&&b| b == b'\n').count();
                    line.saturating_add(u32::try_from(lines).unwrap_or(u32::MAX))
                }
                _ => source.line(item.start as usize),
            };
            last = Some((item.source, item.start, line));
            let at = (line > 0).then(|| b.push(text, line).ok()).flatten();
            placed.push(at.map(Place::Line));
        }
        let piece = Source::packed(b.finish_piece());
        self.sources.push(Arc::clone(&piece));
        let texts = placed
            .into_iter()
            .map(|placed| {
                Some(match placed? {
                    Place::Words(k, words) => RuleText::span(&self.sources[k], words),
                    Place::Line(at) => RuleText::packed(&piece, at),
                })
            })
            .collect();
        Packed { job, texts }
    }
}

/// Puts the texts of `packed` in the place of the texts they were packed from, in
/// `chains` (those [`gather`] was given, or the same with more chains after them);
/// returns how many rules were packed.
pub(crate) fn put_back(chains: &mut [&mut Chain], packed: Packed) -> usize {
    let rules = packed.rules();
    let Packed { job, texts } = packed;
    let is_it = |t: &RuleText, item: &Item| {
        Arc::ptr_eq(t.source(), &job.sources[item.source as usize])
            && t.span_bounds() == (item.start, item.end)
    };
    let mut moved = Vec::new();
    for (item, text) in job.items.iter().zip(texts) {
        let Some(text) = text else { continue };
        let slot = chains.get_mut(item.chain as usize).and_then(|c| {
            if item.rule == NAME {
                Some(&mut c.name)
            } else {
                c.rules.get_mut(item.rule as usize).map(|r| &mut r.text)
            }
        });
        match slot {
            Some(slot) if is_it(slot, item) => *slot = text,
            _ => moved.push((*item, text)),
        }
    }
    if moved.is_empty() {
        return rules;
    }
    // Rare: the reader moved what was gathered. Found by where each was read.
    moved.sort_by_key(|(i, _)| (i.source, i.start, i.end));
    let find = |t: &RuleText| {
        let key = (
            job.sources
                .iter()
                .position(|s| Arc::ptr_eq(s, t.source()))?,
            t.span_bounds(),
        );
        moved
            .binary_search_by_key(&key, |(i, _)| (i.source as usize, (i.start, i.end)))
            .ok()
    };
    for chain in chains.iter_mut() {
        if let Some(k) = find(&chain.name) {
            chain.name = moved[k].1.clone();
        }
        for rule in &mut chain.rules {
            if matches!(rule.body, RuleBody::Xt(_))
                && let Some(k) = find(&rule.text)
            {
                rule.text = moved[k].1.clone();
            }
        }
    }
    rules
}

/// Packs the texts of `chains` gathered with `only` at once ([`gather`],
/// [`Packer::pack`], [`put_back`]); returns how many rules were packed.
pub(crate) fn pack_chains(
    chains: &mut [&mut Chain],
    only: Option<&SourceText>,
    packer: &mut Packer,
) -> usize {
    let job = gather(chains, only);
    if job.is_empty() {
        return 0;
    }
    put_back(chains, packer.pack(job))
}
