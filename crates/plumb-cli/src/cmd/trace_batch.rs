//! `plumb trace --flows FILE`: many traces through one reading and one index of the
//! ruleset (`--all-services` is in `trace_services`).
//!
//! `--flows` reads a CSV of flows (format: `plumb_trace::batch`) as a stream and
//! prints one line per flow as it goes: text, or one JSON object per line
//! (`plumb_trace::batch::FlowReport`). A line it cannot read is reported on stderr
//! as `FILE:LINE: reason: "text"` and skipped, as ripgrep goes on past a file it
//! cannot read: the other flows still get their answer, and the exit status is 2
//! at the end so a script cannot take the output for the whole answer. A bad
//! header stops at once (every later line would be misread).

use super::trace::{missing_tables_message, node, ruleset, template};
use crate::Verdict;
use crate::flags::TraceArgs;
use anyhow::{Context, bail};
use plumb_ruleset::diagnostic::excerpt;
use plumb_trace::batch::{
    DecidingRule, FlowColumns, FlowFields, FlowReport, ReportCache, flow_report_cached, is_skipped,
};
use plumb_trace::classes::{FlowKey, TraceMemo};
use plumb_trace::{Index, Origin, Packet, SourceTests, TraceOptions, trace_noting_sources};
use serde::Serialize;
use std::io::{BufRead, Write};
use std::net::IpAddr;
use std::path::Path;

/// Longest flow line read; a longer one is reported and skipped.
const MAX_LINE: usize = 64 * 1024;

pub(super) fn options(args: &TraceArgs) -> TraceOptions {
    TraceOptions {
        max_paths: usize::try_from(args.max_paths).unwrap_or(usize::MAX),
        ..TraceOptions::default()
    }
}

/// Reads one line (at most `MAX_LINE` bytes kept) into `buf`; returns the bytes
/// consumed and whether the line was longer than that.
fn read_line(reader: &mut dyn BufRead, buf: &mut Vec<u8>) -> std::io::Result<(usize, bool)> {
    buf.clear();
    let mut consumed = 0;
    let mut too_long = false;
    loop {
        let available = reader.fill_buf()?;
        if available.is_empty() {
            return Ok((consumed, too_long));
        }
        let (chunk, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..=i], true),
            None => (available, false),
        };
        let n = chunk.len();
        let room = MAX_LINE.saturating_sub(buf.len());
        if n > room {
            too_long = true;
        }
        buf.extend_from_slice(&chunk[..n.min(room)]);
        reader.consume(n);
        consumed += n;
        if done {
            return Ok((consumed, too_long));
        }
    }
}

/// `plumb trace --flows FILE|-`.
pub fn run_flows(args: &TraceArgs, flows: &Path) -> anyhow::Result<Verdict> {
    let stdin = flows.as_os_str() == "-";
    if stdin
        && args
            .ruleset
            .as_deref()
            .is_some_and(|r| r.as_os_str() == "-")
    {
        bail!("--flows - and --ruleset - cannot both read standard input");
    }
    let template = template(args)?;
    let node = node(args)?;
    let name = if stdin {
        "<stdin>".to_string()
    } else {
        flows.display().to_string()
    };
    // Open the flows before the (longer) ruleset read, so a wrong path fails at once.
    let mut reader: Box<dyn BufRead> = if stdin {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::io::BufReader::with_capacity(
            64 * 1024,
            std::fs::File::open(flows).with_context(|| format!("reading --flows {name}"))?,
        ))
    };
    let (source, ruleset) = ruleset(args)?;
    let index = Index::build(&ruleset);
    // The read is done; the rounds of traces that follow reuse what they free.
    crate::alloc::keep_freed_memory();
    let missing = [index.missing_tables(false), index.missing_tables(true)];
    let options = options(args);
    let json = args.output.json();

    let mut out = std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout().lock());
    let mut err = std::io::stderr().lock();
    let mut columns: Option<FlowColumns> = None;
    let (mut bad, mut traced, mut incomplete) = (0usize, 0usize, 0usize);
    let mut line_no = 0u64;
    let mut buf = Vec::new();
    let mut chunk: Vec<(u64, Packet)> = Vec::with_capacity(CHUNK);
    let mut memo = Memo::default();
    let batch = Batch {
        index: &index,
        node: &node,
        options: &options,
        json,
        steps: args.verbose && json,
    };
    loop {
        let (n, too_long) =
            read_line(&mut *reader, &mut buf).with_context(|| format!("reading {name}"))?;
        if n == 0 || chunk.len() == CHUNK {
            let (done, cut) = batch.run(&chunk, &mut memo, &mut out)?;
            traced += done;
            incomplete += cut;
            chunk.clear();
        }
        if n == 0 {
            break;
        }
        line_no += 1;
        let mut report = |reason: &str, text: &str| -> anyhow::Result<()> {
            bad += 1;
            writeln!(
                err,
                "plumb: {name}:{line_no}: {reason}: {:?}",
                excerpt(text)
            )?;
            Ok(())
        };
        let line = match std::str::from_utf8(&buf) {
            Ok(l) => l.trim_end_matches(['\n', '\r']),
            Err(_) => {
                report("not UTF-8 text", &String::from_utf8_lossy(&buf))?;
                continue;
            }
        };
        if too_long {
            report(&format!("line longer than {MAX_LINE} bytes"), line)?;
            continue;
        }
        if is_skipped(line) {
            continue;
        }
        let Some(cols) = &columns else {
            let cols = FlowColumns::parse_header(line)
                .map_err(|e| anyhow::anyhow!("{name}:{line_no}: {e}: {:?}", excerpt(line)))?;
            columns = Some(cols);
            continue;
        };
        let packet = match cols.parse_flow(line, &template) {
            Ok(p) => p,
            Err(e) => {
                report(&e.to_string(), line)?;
                continue;
            }
        };
        let lacking = &missing[usize::from(packet.is_ipv6())];
        if !lacking.is_empty() {
            report(&missing_tables_message(&source, lacking), line)?;
            continue;
        }
        chunk.push((line_no, packet));
    }
    out.flush()?;
    drop(out);
    super::leak_at_exit(index);
    super::leak_at_exit(ruleset);
    if bad > 0 {
        bail!(
            "{bad} line{} of {name} could not be read (reported above); {traced} flow{} traced",
            if bad == 1 { "" } else { "s" },
            if traced == 1 { " was" } else { "s were" },
        );
    }
    Ok(if incomplete > 0 {
        Verdict::Problems
    } else {
        Verdict::Clean
    })
}

/// Flows traced together: the threads split a chunk's distinct traces, and its
/// lines go out in file order before the next chunk is read.
const CHUNK: usize = 2048;

/// Rendered traces kept for reuse, in bytes; beyond it the memo starts afresh
/// (a flow file of many distinct flows then costs what it did without one).
const MEMO_MAX_BYTES: usize = 96 << 20;

/// What every flow of a batch shares.
struct Batch<'a, 'r> {
    index: &'a Index<'r>,
    node: &'a plumb_trace::Node,
    options: &'a TraceOptions,
    json: bool,
    steps: bool,
}

/// The part of a flow's line that depends only on its trace: everything after
/// the flow's line number and fields, as a worker thread renders it.
struct Tail {
    bytes: Vec<u8>,
    incomplete: bool,
}

/// A [`Tail`] kept in the memo: its bytes' place in [`TailText`].
struct KeptTail {
    block: u32,
    start: u32,
    len: u32,
    incomplete: bool,
}

/// The kept tails' bytes, appended into blocks of [`TAIL_BLOCK`] bytes (or one tail's
/// size, when larger). Kept one allocation each, the tails (made on the worker
/// threads, among the trace's short-lived allocations) kept resident pages those
/// allocations had used: 10k flows of a 10k-service node (43 MiB of tails) peaked at
/// 186 MiB, 174 MiB with the tails in blocks.
#[derive(Default)]
struct TailText {
    blocks: Vec<Vec<u8>>,
}

/// See [`TailText`].
const TAIL_BLOCK: usize = 1 << 20;

impl TailText {
    fn keep(&mut self, tail: &Tail) -> KeptTail {
        let len = tail.bytes.len();
        let fits = self
            .blocks
            .last()
            .is_some_and(|b| b.capacity() - b.len() >= len);
        if !fits {
            self.blocks.push(Vec::with_capacity(len.max(TAIL_BLOCK)));
        }
        let block = self.blocks.len() - 1;
        let b = &mut self.blocks[block];
        let start = b.len();
        b.extend_from_slice(&tail.bytes);
        KeptTail {
            block: block as u32,
            start: start as u32,
            len: len as u32,
            incomplete: tail.incomplete,
        }
    }

    fn get(&self, t: &KeptTail) -> &[u8] {
        let start = t.start as usize;
        &self.blocks[t.block as usize][start..start + t.len as usize]
    }

    /// The bytes kept.
    fn bytes(&self) -> usize {
        self.blocks.iter().map(Vec::len).sum()
    }

    fn clear(&mut self) {
        self.blocks.clear();
    }
}

/// Traces already rendered, found again for flows with the same trace
/// (`plumb_trace::classes`: the same fields but the source, and a source the
/// trace's tests of it cannot tell apart), so each is traced once. The output is
/// the same as tracing every flow (tests: `trace_batch_cli.rs`,
/// `batch_output_equals_one_flow_at_a_time_*`).
#[derive(Default)]
struct Memo {
    tails: TraceMemo<KeptTail>,
    text: TailText,
    /// One per thread, for the whole run.
    caches: Vec<ReportCache>,
    /// Where each thread puts its part of a chunk's lines.
    buffers: Vec<Vec<u8>>,
}

/// The fields of [`FlowReport`] after `flow`, in its order: the JSON of a tail.
#[derive(Serialize)]
struct ReportTail<'a> {
    verdict: &'a str,
    dnat: &'a [String],
    service: &'a Option<String>,
    decided_by: &'a Option<DecidingRule>,
    path: &'a [String],
    outcomes: &'a [plumb_trace::outcome::OutcomeReport],
    truncated: bool,
    incomplete: &'a Option<String>,
}

impl Batch<'_, '_> {
    fn threads() -> usize {
        std::thread::available_parallelism()
            .map_or(1, usize::from)
            .clamp(1, 8)
    }

    /// Traces `flows` and renders their lines into `out` in order: each distinct
    /// trace once (on as many threads as there are cores; the index is shared, so
    /// chains compiled on first use are compiled once), every line from the memo.
    /// Returns the flows traced and the incomplete traces.
    fn run(
        &self,
        flows: &[(u64, Packet)],
        memo: &mut Memo,
        out: &mut impl Write,
    ) -> anyhow::Result<(usize, usize)> {
        if flows.is_empty() {
            return Ok((0, 0));
        }
        let threads = Self::threads();
        let keys: Vec<FlowKey> = flows.iter().map(|(_, p)| FlowKey::of(p)).collect();
        let lacking =
            |memo: &Memo, i: usize| memo.tails.get(&keys[i], &flows[i].1, self.node).is_none();
        let mut pending: Vec<usize> = (0..flows.len()).filter(|&i| lacking(memo, i)).collect();
        // Rounds: the first pending flow of each key is traced (in parallel); the
        // flows its trace stands for are then found in the memo.
        while !pending.is_empty() {
            let mut seen: std::collections::HashSet<&FlowKey> = Default::default();
            let round: Vec<usize> = pending
                .iter()
                .copied()
                .filter(|&i| seen.insert(&keys[i]))
                .collect();
            let per = round.len().div_ceil(threads).max(16);
            memo.caches.resize_with(threads, ReportCache::default);
            let parts: Vec<anyhow::Result<Vec<(Tail, SourceTests)>>> =
                std::thread::scope(|scope| {
                    let handles: Vec<_> = round
                        .chunks(per)
                        .zip(memo.caches.iter_mut())
                        .map(|(part, cache)| {
                            scope.spawn(move || {
                                part.iter()
                                    .map(|&i| self.tail(&flows[i].1, cache))
                                    .collect()
                            })
                        })
                        .collect();
                    handles
                        .into_iter()
                        .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                        .collect()
                });
            let mut at = round.iter();
            for part in parts {
                for (tail, tests) in part? {
                    let i = *at.next().expect("one tail per flow of the round");
                    let kept = memo.text.keep(&tail);
                    memo.tails.insert(keys[i].clone(), &flows[i].1, tests, kept);
                }
            }
            pending.retain(|&i| lacking(memo, i));
        }
        // The lines, put together on every core (each part in file order), then
        // written in order.
        // Each part's buffer is kept from chunk to chunk: allocating ~10 MB a chunk
        // anew costs more in page faults than putting the lines together.
        let per = flows.len().div_ceil(threads).max(256);
        memo.buffers.resize_with(threads, Vec::new);
        let (tails, text) = (&memo.tails, &memo.text);
        let parts: Vec<anyhow::Result<usize>> = std::thread::scope(|scope| {
            let handles: Vec<_> = flows
                .chunks(per)
                .zip(keys.chunks(per))
                .zip(memo.buffers.iter_mut())
                .map(|((part, keys), buf)| {
                    scope.spawn(move || self.lines(part, keys, tails, text, buf))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        let mut cut = 0;
        for (part, buf) in parts.into_iter().zip(&memo.buffers) {
            cut += part?;
            out.write_all(buf)?;
        }
        if memo.text.bytes() > MEMO_MAX_BYTES {
            memo.tails.clear();
            memo.text.clear();
        }
        Ok((flows.len(), cut))
    }

    /// The lines of `flows` (whose keys are `keys`), from the memo; and how many of
    /// their traces are incomplete.
    fn lines(
        &self,
        flows: &[(u64, Packet)],
        keys: &[FlowKey],
        tails: &TraceMemo<KeptTail>,
        text: &TailText,
        bytes: &mut Vec<u8>,
    ) -> anyhow::Result<usize> {
        bytes.clear();
        let mut cut = 0;
        for ((line, packet), key) in flows.iter().zip(keys) {
            let tail = tails
                .get(key, packet, self.node)
                .expect("every flow's trace is in the memo");
            self.head(bytes, *line, packet)?;
            bytes.extend_from_slice(text.get(tail));
            cut += usize::from(tail.incomplete);
        }
        Ok(cut)
    }

    /// Traces one flow and renders the part of its line after its fields.
    fn tail(
        &self,
        packet: &Packet,
        cache: &mut ReportCache,
    ) -> anyhow::Result<(Tail, SourceTests)> {
        let (t, tests) = trace_noting_sources(self.index, packet, self.node, self.options);
        let r = flow_report_cached(self.index, 0, packet, &t, self.steps, cache);
        let mut bytes = Vec::with_capacity(1024);
        if self.json {
            let tail = ReportTail {
                verdict: r.verdict,
                dnat: &r.dnat,
                service: &r.service,
                decided_by: &r.decided_by,
                path: &r.path,
                outcomes: &r.outcomes,
                truncated: r.truncated,
                incomplete: &r.incomplete,
            };
            serde_json::to_writer(&mut bytes, &tail)?;
            // `{"verdict":..}` continues the line's object: `,"verdict":..}`.
            bytes[0] = b',';
            bytes.push(b'\n');
        } else {
            write_flow_text_tail(&mut bytes, &r)?;
        }
        Ok((
            Tail {
                bytes,
                incomplete: t.incomplete.is_some(),
            },
            tests,
        ))
    }

    /// The start of a flow's line: `{"line":N,"flow":{..}` or `N: LABEL`.
    fn head(&self, out: &mut Vec<u8>, line: u64, packet: &Packet) -> anyhow::Result<()> {
        let flow = FlowFields::of(packet);
        if self.json {
            write!(out, "{{\"line\":{line},\"flow\":")?;
            serde_json::to_writer(&mut *out, &flow)?;
        } else {
            write!(out, "{line}: {}", flow_label(&flow))?;
        }
        Ok(())
    }
}

fn flow_label(f: &FlowFields) -> String {
    let src = match (f.src, f.sport) {
        (Some(ip), Some(p)) => socket(ip, p),
        (Some(ip), None) => ip.to_string(),
        _ => "?".into(),
    };
    let dst = match f.dport {
        Some(p) => socket(f.dst, p),
        None => f.dst.to_string(),
    };
    let from = match f.from {
        Origin::Host => "host",
        Origin::Pod => "pod",
        Origin::External => "external",
    };
    format!("{} {src} -> {dst} from {from}", f.proto)
}

pub(super) fn socket(ip: IpAddr, port: u16) -> String {
    std::net::SocketAddr::new(ip, port).to_string()
}

pub(super) fn rule_label(d: &DecidingRule) -> String {
    match d.rule {
        Some(n) => format!(
            "{} {} {} #{n} ({})",
            d.hook.name(),
            d.table,
            d.chain,
            d.owner
        ),
        None => format!(
            "{} {} {} {} ({})",
            d.hook.name(),
            d.table,
            d.chain,
            d.text,
            d.owner
        ),
    }
}

/// A flow's text line is `LINE: tcp SRC -> DST from ORIGIN` and then this tail:
/// `: VERDICT [DNAT ...] [service S] [by RULE (owner)]`.
fn write_flow_text_tail(out: &mut impl Write, r: &FlowReport) -> std::io::Result<()> {
    write!(out, ": {}", r.verdict)?;
    if !r.dnat.is_empty() {
        write!(out, "  DNAT {}", r.dnat.join(", "))?;
    }
    if let Some(s) = &r.service {
        write!(out, "  service {s}")?;
    }
    if let Some(d) = &r.decided_by {
        write!(out, "  by {}", rule_label(d))?;
    }
    if let Some(why) = &r.incomplete {
        write!(out, "  (incomplete: {why})")?;
    }
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use plumb_trace::{Proto, trace_with};

    /// Kept tails read back as they were, whether they share a block, start a new one
    /// or are larger than a block; cleared, the text holds nothing.
    #[test]
    fn kept_tails_read_back_whole() {
        let mut text = TailText::default();
        let tails: Vec<Tail> = [10, TAIL_BLOCK - 20, 30, 3 * TAIL_BLOCK, 5]
            .iter()
            .enumerate()
            .map(|(i, &len)| Tail {
                bytes: (0..len).map(|j| (i * 31 + j) as u8).collect(),
                incomplete: i % 2 == 1,
            })
            .collect();
        let kept: Vec<KeptTail> = tails.iter().map(|t| text.keep(t)).collect();
        for (t, k) in tails.iter().zip(&kept) {
            assert_eq!(text.get(k), &t.bytes[..]);
            assert_eq!(k.incomplete, t.incomplete);
        }
        // The third did not fit beside the first two; the fourth has a block of its own,
        // full, so the fifth starts another (tails go to the last block only).
        assert_eq!(
            kept.iter().map(|k| k.block).collect::<Vec<_>>(),
            [0, 0, 1, 2, 3]
        );
        assert_eq!(
            text.bytes(),
            tails.iter().map(|t| t.bytes.len()).sum::<usize>()
        );
        text.clear();
        assert_eq!((text.bytes(), text.blocks.len()), (0, 0));
    }

    /// A line put together from its head and its memoised tail is, byte for byte,
    /// the `FlowReport` serialised whole (JSON) and the text line of the whole
    /// report.
    #[test]
    fn head_and_tail_make_the_whole_report() {
        let save = plumb_kubeproxy::generated_save_text(5, 3).unwrap();
        let rs = plumb_ruleset::parse_bytes(save.as_bytes(), &Default::default())
            .unwrap()
            .ruleset;
        let index = Index::build(&rs);
        let node = plumb_trace::Node::default();
        let options = TraceOptions::default();
        let mut packet = Packet::new("10.43.0.1".parse().unwrap(), 443, Proto::Tcp, Origin::Pod);
        packet.src = Some("10.42.0.9".parse().unwrap());
        packet.sport = Some(40000);
        for json in [true, false] {
            for steps in [false, true] {
                let batch = Batch {
                    index: &index,
                    node: &node,
                    options: &options,
                    json,
                    steps: steps && json,
                };
                let mut line = Vec::new();
                batch.head(&mut line, 7, &packet).unwrap();
                let (tail, _) = batch.tail(&packet, &mut ReportCache::default()).unwrap();
                line.extend_from_slice(&tail.bytes);
                let t = trace_with(&index, &packet, &node, &options);
                let r = plumb_trace::batch::flow_report(&index, 7, &packet, &t, steps && json);
                let mut whole = Vec::new();
                if json {
                    serde_json::to_writer(&mut whole, &r).unwrap();
                    whole.push(b'\n');
                } else {
                    write!(whole, "{}: {}", r.line, flow_label(&r.flow)).unwrap();
                    write_flow_text_tail(&mut whole, &r).unwrap();
                }
                assert_eq!(
                    String::from_utf8(line).unwrap(),
                    String::from_utf8(whole).unwrap()
                );
            }
        }
    }
}
