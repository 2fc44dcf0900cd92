//! `plumb trace --flows FILE` and `plumb trace --all-services`: many traces through
//! one reading and one index of the ruleset.
//!
//! `--flows` reads a CSV of flows (format: `plumb_trace::batch`) as a stream and
//! prints one line per flow as it goes: text, or one JSON object per line
//! (`plumb_trace::batch::FlowReport`). A line it cannot read is reported on stderr
//! as `FILE:LINE: reason: "text"` and skipped, as ripgrep goes on past a file it
//! cannot read: the other flows still get their answer, and the exit status is 2
//! at the end so a script cannot take the output for the whole answer. A bad
//! header stops at once (every later line would be misread).
//!
//! `--all-services` traces every ClusterIP and NodePort of kube-proxy's service map
//! (`plumb_kubeproxy::recover`) from a pod and from the host and says, per service,
//! whether it is reachable and if not why: no endpoints, dropped or rejected by a
//! rule (named, with its owner), or accepted without DNAT (nothing answers).

use super::trace::{missing_tables_message, node, ruleset, template};
use crate::Verdict;
use crate::flags::TraceArgs;
use crate::output;
use anyhow::{Context, bail};
use plumb_kubeproxy::recover::{NoEndpoints, ProxyMode, RecoveredService, recover};
use plumb_ruleset::diagnostic::excerpt;
use plumb_trace::batch::{
    DecidingRule, FlowColumns, FlowFields, FlowReport, ReportCache, deciding_rule,
    flow_report_cached, is_skipped,
};
use plumb_trace::classes::{FlowKey, TraceMemo};
use plumb_trace::{
    Index, Origin, Packet, Proto, SourceTests, Trace, TraceOptions, trace_noting_sources,
    trace_with,
};
use serde::Serialize;
use std::io::{BufRead, Write};
use std::net::IpAddr;
use std::path::Path;

/// Longest flow line read; a longer one is reported and skipped.
const MAX_LINE: usize = 64 * 1024;

fn options(args: &TraceArgs) -> TraceOptions {
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
/// the flow's line number and fields.
struct Tail {
    bytes: Box<[u8]>,
    incomplete: bool,
}

/// Traces already rendered, found again for flows with the same trace
/// (`plumb_trace::classes`: the same fields but the source, and a source the
/// trace's tests of it cannot tell apart), so each is traced once. The output is
/// the same as tracing every flow (tests: `trace_batch_cli.rs`,
/// `batch_output_equals_one_flow_at_a_time_*`).
#[derive(Default)]
struct Memo {
    tails: TraceMemo<Tail>,
    bytes: usize,
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
                    memo.bytes += tail.bytes.len();
                    memo.tails.insert(keys[i].clone(), &flows[i].1, tests, tail);
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
        let tails = &memo.tails;
        let parts: Vec<anyhow::Result<usize>> = std::thread::scope(|scope| {
            let handles: Vec<_> = flows
                .chunks(per)
                .zip(keys.chunks(per))
                .zip(memo.buffers.iter_mut())
                .map(|((part, keys), buf)| scope.spawn(move || self.lines(part, keys, tails, buf)))
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
        if memo.bytes > MEMO_MAX_BYTES {
            memo.tails.clear();
            memo.bytes = 0;
        }
        Ok((flows.len(), cut))
    }

    /// The lines of `flows` (whose keys are `keys`), from the memo; and how many of
    /// their traces are incomplete.
    fn lines(
        &self,
        flows: &[(u64, Packet)],
        keys: &[FlowKey],
        tails: &TraceMemo<Tail>,
        bytes: &mut Vec<u8>,
    ) -> anyhow::Result<usize> {
        bytes.clear();
        let mut cut = 0;
        for ((line, packet), key) in flows.iter().zip(keys) {
            let tail = tails
                .get(key, packet, self.node)
                .expect("every flow's trace is in the memo");
            self.head(bytes, *line, packet)?;
            bytes.extend_from_slice(&tail.bytes);
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
                bytes: bytes.into_boxed_slice(),
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

fn socket(ip: IpAddr, port: u16) -> String {
    std::net::SocketAddr::new(ip, port).to_string()
}

fn rule_label(d: &DecidingRule) -> String {
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

/// What happened to the probes of one address of a service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Reach {
    /// Every outcome is accepted and DNATed to an endpoint.
    Ok,
    /// Outcomes fail only under conditions on facts plumb was not told (an
    /// interface, a source address): not counted as broken, since a real packet may
    /// never meet them; the reason names the conditions.
    Conditional,
    /// plumb cannot tell (a trace ended INDETERMINATE or was handed to userspace).
    Unknown,
    /// Some outcomes fail whatever the unknown facts (for some endpoints, say).
    Partly,
    /// Every outcome fails.
    Broken,
}

/// One traced address of a service.
#[derive(Debug, Serialize)]
struct Probe {
    /// `cluster-ip` or `node-port`.
    kind: &'static str,
    from: Origin,
    dst: String,
    status: Reach,
    /// The verdict of every outcome when they agree, else MIXED.
    verdict: &'static str,
    dnat: Vec<String>,
    /// Why it fails (absent when it does not).
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// The rule that took the first failing outcome's verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    decided_by: Option<DecidingRule>,
}

#[derive(Debug, Serialize)]
struct ServiceReach {
    service: String,
    protocol: Option<String>,
    cluster_ip: Option<IpAddr>,
    port: Option<u16>,
    node_ports: Vec<u16>,
    /// Endpoints kube-proxy programmed for it.
    endpoints: usize,
    status: Reach,
    /// The distinct reasons of its failing probes.
    reasons: Vec<String>,
    probes: Vec<Probe>,
}

#[derive(Debug, Default, Serialize)]
struct Summary {
    services: usize,
    ok: usize,
    broken: usize,
    partly: usize,
    unknown: usize,
    /// Services that fail only under conditions on facts plumb was not told.
    conditional: usize,
    /// Services plumb did not trace (no ClusterIP or port recovered, IPVS mode).
    not_traced: usize,
}

#[derive(Debug, Serialize)]
struct AllServices<'a> {
    source: &'a str,
    /// The address NodePorts were traced to (the first --local-addr, else the first of
    /// kube-proxy's nftables set `nodeport-ips`, else a documentation address standing
    /// for the node's).
    node_address: IpAddr,
    summary: Summary,
    services: Vec<ServiceReach>,
    /// Why some services were not traced.
    notes: Vec<String>,
}

/// Stands for the node's address when `--local-addr` gives none and the ruleset names
/// none (TEST-NET-1, not loopback: kube-proxy treats NodePorts on 127.0.0.0/8 specially).
const NODE_ADDRESS: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 10));

/// The first address of kube-proxy's nftables-mode set `nodeport-ips`: with
/// `--nodeport-addresses` (the default `primary` since 1.31) NodePorts are served on
/// those addresses only (`ip daddr @nodeport-ips … vmap @service-nodeports`), so a
/// NodePort traced to any other address would find no service and be called broken.
/// IPv4 first (the address is used for the `ip` table's NodePorts).
fn nodeport_address(ruleset: &plumb_ruleset::Ruleset) -> Option<IpAddr> {
    let addrs = || {
        ruleset
            .tables
            .iter()
            .filter(|t| plumb_kubeproxy::recover::nft::is_kube_proxy_table(t))
            .flat_map(|t| t.sets.iter())
            .filter(|s| &*s.name == "nodeport-ips")
            .flat_map(|s| s.elements.iter())
            .filter_map(|e| e.key_text.trim().parse::<IpAddr>().ok())
    };
    addrs().find(IpAddr::is_ipv4).or_else(|| addrs().next())
}

/// Classifies one probe's trace.
fn probe(
    index: &Index<'_>,
    kind: &'static str,
    packet: &Packet,
    t: &Trace,
    svc: &RecoveredService<'_>,
) -> Probe {
    let mut dnat: Vec<String> = Vec::new();
    let mut failing = Vec::new();
    let mut unknown = None;
    for o in &t.outcomes {
        if let Some(d) = &o.dnat
            && !dnat.contains(d)
        {
            dnat.push(d.clone());
        }
        match o.verdict {
            plumb_trace::Verdict::Accept if o.dnat.is_some() => {}
            plumb_trace::Verdict::Indeterminate | plumb_trace::Verdict::Queue => {
                unknown.get_or_insert(o);
            }
            _ => failing.push(o),
        }
    }
    let unconditional = failing.iter().any(|o| o.conditions.is_empty());
    let status = if failing.len() == t.outcomes.len() && !failing.is_empty() {
        Reach::Broken
    } else if unconditional {
        Reach::Partly
    } else if unknown.is_some() {
        Reach::Unknown
    } else if !failing.is_empty() {
        Reach::Conditional
    } else {
        Reach::Ok
    };
    let dst = match packet.dport {
        Some(p) => socket(packet.dst, p),
        None => packet.dst.to_string(),
    };
    // The failing outcome to explain: one that fails whatever the unknown facts, if any.
    let first_failing = failing
        .iter()
        .find(|o| o.conditions.is_empty())
        .or(failing.first());
    let (reason, decided_by) = match first_failing.or(unknown.as_ref()) {
        None => (None, None),
        Some(o) => {
            let d = deciding_rule(index, o);
            let by = d.as_ref().map(rule_label).unwrap_or_default();
            let text = d.as_ref().map(|d| d.text.as_str()).unwrap_or_default();
            let reason = match o.verdict {
                plumb_trace::Verdict::Accept => format!(
                    "accepted without DNAT: nothing answers at {dst} (the service's chains lead to no endpoint)"
                ),
                plumb_trace::Verdict::Drop | plumb_trace::Verdict::Reject
                    if svc.endpoints.is_empty()
                        && d.as_ref().is_some_and(|d| d.owner == "kube-proxy") =>
                {
                    let how = match svc.no_endpoints {
                        Some(NoEndpoints::DropNoLocal) => "no local endpoints",
                        _ => "no endpoints",
                    };
                    format!("{how}: kube-proxy {} it ({by}: {text})", verb(o.verdict))
                }
                plumb_trace::Verdict::Drop | plumb_trace::Verdict::Reject => {
                    format!("{} by {by}: {text}", participle(o.verdict))
                }
                _ => format!("undetermined: {}", o.why),
            };
            let reason = match (status, o.conditions.is_empty()) {
                (Reach::Partly | Reach::Conditional, false) => {
                    format!("{reason} (when {})", o.conditions.join("; "))
                }
                _ => reason,
            };
            (Some(reason), d)
        }
    };
    Probe {
        kind,
        from: packet.origin,
        dst,
        status,
        verdict: plumb_trace::batch::common_verdict(t),
        dnat,
        reason,
        decided_by,
    }
}

fn verb(v: plumb_trace::Verdict) -> &'static str {
    if v == plumb_trace::Verdict::Drop {
        "drops"
    } else {
        "rejects"
    }
}

fn participle(v: plumb_trace::Verdict) -> &'static str {
    if v == plumb_trace::Verdict::Drop {
        "dropped"
    } else {
        "rejected"
    }
}

/// `plumb trace --all-services`.
pub fn run_all_services(args: &TraceArgs) -> anyhow::Result<Verdict> {
    let template = template(args)?;
    let mut node = node(args)?;
    let (source, ruleset) = ruleset(args)?;
    let maps = recover(&ruleset);
    let index = Index::build(&ruleset);
    let options = options(args);
    let node_address = match node.local_addrs.first() {
        Some(c) => c.addr,
        None => {
            let addr = nodeport_address(&ruleset).unwrap_or(NODE_ADDRESS);
            node.local_addrs.push(plumb_trace::addr::Cidr {
                addr,
                len: if addr.is_ipv4() { 32 } else { 128 },
            });
            addr
        }
    };
    let mut summary = Summary::default();
    let mut services = Vec::new();
    let mut notes = Vec::new();
    for map in &maps {
        if map.mode == ProxyMode::Ipvs {
            summary.services += map.services.len();
            summary.not_traced += map.services.len();
            notes.push(format!(
                "{} IPVS virtual services not traced: IPVS forwards outside netfilter's rules",
                map.services.len()
            ));
            continue;
        }
        for svc in &map.services {
            summary.services += 1;
            let proto = svc
                .protocol
                .as_deref()
                .and_then(|p| Proto::parse(&p.to_ascii_lowercase()));
            let (Some(proto), Some(port)) = (proto, svc.port) else {
                summary.not_traced += 1;
                notes.push(format!(
                    "{}: not traced (no protocol or port recovered)",
                    svc.display_name()
                ));
                continue;
            };
            let mut targets: Vec<(&'static str, IpAddr, u16)> = Vec::new();
            if let Some(ip) = svc.cluster_ip {
                targets.push(("cluster-ip", ip, port));
            }
            if node_address.is_ipv4() == (map.family == plumb_ruleset::Family::Ip) {
                for &np in &svc.node_ports {
                    targets.push(("node-port", node_address, np));
                }
            }
            if targets.is_empty() {
                summary.not_traced += 1;
                notes.push(format!(
                    "{}: not traced (no ClusterIP or NodePort recovered)",
                    svc.display_name()
                ));
                continue;
            }
            let mut probes = Vec::new();
            for (kind, dst, dport) in targets {
                let lacking = index.missing_tables(dst.is_ipv6());
                if !lacking.is_empty() {
                    bail!("{}", missing_tables_message(&source, &lacking));
                }
                for origin in [Origin::Pod, Origin::Host] {
                    let mut p = template.clone();
                    p.dst = dst;
                    p.dport = Some(dport);
                    p.proto = proto;
                    p.origin = origin;
                    if p.src.is_some_and(|s| s.is_ipv4() != dst.is_ipv4()) {
                        p.src = None;
                        p.sport = None;
                    }
                    let t = trace_with(&index, &p, &node, &options);
                    probes.push(probe(&index, kind, &p, &t, svc));
                }
            }
            let status = probes.iter().map(|p| p.status).max().unwrap_or(Reach::Ok);
            match status {
                Reach::Ok => summary.ok += 1,
                Reach::Broken => summary.broken += 1,
                Reach::Partly => summary.partly += 1,
                Reach::Unknown => summary.unknown += 1,
                Reach::Conditional => summary.conditional += 1,
            }
            let mut reasons: Vec<String> = Vec::new();
            for p in &probes {
                if let Some(r) = &p.reason {
                    let r = format!("{} {} from {}: {r}", p.kind, p.dst, origin_name(p.from));
                    if !reasons.contains(&r) {
                        reasons.push(r);
                    }
                }
            }
            services.push(ServiceReach {
                service: svc.display_name(),
                protocol: svc.protocol.clone(),
                cluster_ip: svc.cluster_ip,
                port: svc.port,
                node_ports: svc.node_ports.to_vec(),
                endpoints: svc.endpoints.len(),
                status,
                reasons,
                probes,
            });
        }
    }
    let report = AllServices {
        source: &source,
        node_address,
        summary,
        services,
        notes,
    };
    let s = &report.summary;
    let verdict = if s.broken + s.partly > 0 {
        Verdict::Problems
    } else {
        Verdict::Clean
    };
    if args.output.json() {
        output::json(&report)?;
    } else {
        let mut out = std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout().lock());
        write_services_text(&mut out, &report, args.verbose)?;
        out.flush()?;
    }
    super::leak_at_exit(report);
    super::leak_at_exit(index);
    super::leak_at_exit(maps);
    super::leak_at_exit(ruleset);
    Ok(verdict)
}

fn origin_name(o: Origin) -> &'static str {
    match o {
        Origin::Host => "the host",
        Origin::Pod => "a pod",
        Origin::External => "outside",
    }
}

/// The services that are not reachable (all of them with `verbose`), then the summary.
fn write_services_text(
    out: &mut impl Write,
    r: &AllServices<'_>,
    verbose: bool,
) -> std::io::Result<()> {
    for s in &r.services {
        if matches!(s.status, Reach::Ok | Reach::Conditional) && !verbose {
            continue;
        }
        let status = match s.status {
            Reach::Ok => "ok",
            Reach::Conditional => "CONDITIONAL",
            Reach::Unknown => "UNKNOWN",
            Reach::Partly => "PARTLY BROKEN",
            Reach::Broken => "BROKEN",
        };
        let addr = match (s.cluster_ip, s.port) {
            (Some(ip), Some(p)) => socket(ip, p),
            _ => "-".into(),
        };
        write!(
            out,
            "{status:<13} {} {} {addr}",
            s.service,
            s.protocol.as_deref().unwrap_or("?")
        )?;
        if !s.node_ports.is_empty() {
            let ports: Vec<String> = s.node_ports.iter().map(u16::to_string).collect();
            write!(out, " nodePort {}", ports.join(","))?;
        }
        writeln!(out, ", {} endpoints", s.endpoints)?;
        for reason in &s.reasons {
            writeln!(out, "    {reason}")?;
        }
    }
    for n in &r.notes {
        writeln!(out, "note: {n}")?;
    }
    let s = &r.summary;
    let traced = s.services - s.not_traced;
    write!(
        out,
        "{} of {} services broken ({} broken, {} partly broken",
        s.broken + s.partly,
        traced,
        s.broken,
        s.partly
    )?;
    if s.unknown > 0 {
        write!(out, ", {} undetermined", s.unknown)?;
    }
    if s.not_traced > 0 {
        write!(out, ", {} not traced", s.not_traced)?;
    }
    if s.conditional > 0 && !verbose {
        write!(
            out,
            ", {} failing only under conditions plumb was not told: --verbose lists them",
            s.conditional
        )?;
    } else if s.conditional > 0 {
        write!(
            out,
            ", {} failing only under conditions plumb was not told",
            s.conditional
        )?;
    }
    writeln!(
        out,
        "); traced from a pod and from the host, NodePorts at {}",
        r.node_address
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
