//! `plumb observe`: what one network namespace's netfilter lets through (conntrack
//! events) and what the kernel drops there (the eBPF kfree_skb program), one line per
//! event, named in Kubernetes terms from kube-proxy's rules, with the netfilter rule
//! (and its owner) behind each NETFILTER_DROP. The JSON lines follow Hubble's flow
//! schema where the concepts match (docs/observe.md).
//!
//! Threads: one reads conntrack, one drains the drop ring buffer; both hand events to
//! the main thread in batches through one bounded queue (a full queue counts the
//! batch's events as lost, never grows or blocks the reader; while it is half full,
//! the drop reader gathers identical drops into one line with a count, said once). The
//! filters that need no
//! names (`--ip --port --protocol --reason`) run in the kernel program and again on the
//! reader thread, so drops not asked for cost nothing further. The main thread applies
//! `--service`, names, attributes and prints, drops through a hand-written JSON writer
//! over a reused buffer (`drop_line`), one write per batch. Attribution reads the
//! ruleset's counters (read-only dumps) at most once per window of drops.

mod drop_line;

use crate::Verdict;
use crate::flags::{ObserveFlags, ObserveFormat, ObserveVerdict};
use plumb_observe::accounting::{Accounting, Restore};
use plumb_observe::attribution::{
    CounterSnapshot, NetlinkPlan, RuleMatch, attribute, read_counted,
};
use plumb_observe::conntrack::{Event, Flow};
use plumb_observe::drops::{DropFilter, DropMatch, DropProbe, DroppedPacket, WallClock};
use plumb_observe::listener::ConntrackListener;
use plumb_observe::names::{LbFrontend, ServiceName, ServiceNames};
use plumb_observe::reasons::DropReasons;
use plumb_observe::trace::{Confirmation, TraceDrop, Tracer};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, sync_channel};
use std::time::{Duration, Instant, SystemTime};

/// Events waiting for the main thread at most; beyond, they are counted as lost.
const QUEUE_EVENTS: usize = 65_536;
/// Batches waiting for the main thread at most (a bound on the channel besides the
/// events': a batch holds at most [`BATCH`] events, and at least one).
const QUEUE: usize = 4096;
/// Events handed to the main thread at once, at most.
const BATCH: usize = 1024;
/// NETFILTER_DROPs held for one attribution at most; beyond, they are printed without
/// a rule (said in the line).
const PENDING: usize = 4_096;
/// How long the first NETFILTER_DROP of a window waits for the counters to be read.
const WINDOW: Duration = Duration::from_millis(300);
/// How often Service names are re-read when no drop made it happen.
const NAMES_REFRESH: Duration = Duration::from_secs(30);

/// A drop and how many identical ones it stands for (1, or more when aggregated).
type Counted = (DroppedPacket, u64);

enum Observed {
    Flows(Vec<Flow>),
    Drops(Vec<Counted>),
}

impl Observed {
    fn len(&self) -> usize {
        match self {
            Observed::Flows(f) => f.len(),
            Observed::Drops(d) => d.len(),
        }
    }
}

/// How long identical drops are gathered into one line while the main thread is
/// behind.
const AGGREGATE_WINDOW: Duration = Duration::from_millis(100);

/// Gathers identical drops (same addresses, ports or ICMP type, protocol, reason and
/// interface) into one entry with a count, for [`AGGREGATE_WINDOW`] at a time: what
/// the reader thread does instead of losing drops while the main thread (the output)
/// is behind.
#[derive(Default)]
struct Aggregator {
    index: HashMap<AggregateKey, usize>,
    items: Vec<Counted>,
    /// When the first entry of this window was added.
    since: Option<Instant>,
}

type AggregateKey = (
    u32,
    Option<(IpAddr, IpAddr)>,
    u8,
    Option<(u16, u16)>,
    Option<(u8, u8)>,
    u32,
);

impl Aggregator {
    fn add(&mut self, d: DroppedPacket) {
        let key = (
            d.reason,
            d.addresses,
            d.protocol,
            d.ports,
            d.icmp,
            d.ifindex,
        );
        match self.index.get(&key) {
            Some(&i) => self.items[i].1 += 1,
            None => {
                self.index.insert(key, self.items.len());
                self.items.push((d, 1));
                self.since.get_or_insert_with(Instant::now);
            }
        }
    }

    /// The window is over (or holds a whole batch of distinct drops).
    fn due(&self) -> bool {
        self.items.len() >= BATCH || self.since.is_some_and(|t| t.elapsed() >= AGGREGATE_WINDOW)
    }

    /// The entries of this window (the first drop of each, with its count).
    fn take(&mut self) -> Vec<Counted> {
        self.index.clear();
        self.since = None;
        std::mem::take(&mut self.items)
    }
}

/// The reader threads' side of the bounded hand-over to the main thread: at most
/// [`QUEUE_EVENTS`] events wait, in at most [`QUEUE`] batches. A batch that does not
/// fit is counted as lost, whole; sending never blocks a reader.
#[derive(Clone)]
struct Queue {
    tx: SyncSender<Observed>,
    /// Events sent and not yet taken by the main thread.
    waiting: Arc<AtomicUsize>,
    /// Events that did not fit.
    lost: Arc<AtomicU64>,
}

impl Queue {
    fn new() -> (Queue, Receiver<Observed>) {
        let (tx, rx) = sync_channel(QUEUE);
        let q = Queue {
            tx,
            waiting: Arc::new(AtomicUsize::new(0)),
            lost: Arc::new(AtomicU64::new(0)),
        };
        (q, rx)
    }

    /// Hands `batch` over, or counts its events as lost.
    fn send(&self, batch: Observed) {
        let n = batch.len();
        let fits = self.waiting.fetch_add(n, Ordering::AcqRel) + n <= QUEUE_EVENTS;
        if !fits || self.tx.try_send(batch).is_err() {
            self.waiting.fetch_sub(n, Ordering::AcqRel);
            self.lost.fetch_add(n as u64, Ordering::Relaxed);
        }
    }
}

/// The main thread took `batch` out of the queue whose count is `waiting`.
fn taken(waiting: &AtomicUsize, batch: &Observed) {
    waiting.fetch_sub(batch.len(), Ordering::AcqRel);
}

/// One output line, with Hubble's field names where the concepts match.
#[derive(Serialize)]
struct Line<'a> {
    time: String,
    verdict: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    drop_reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    drop_reason_desc: Option<&'a str>,
    /// The reason's number in this kernel's `enum skb_drop_reason`.
    #[serde(skip_serializing_if = "Option::is_none")]
    drop_reason_code: Option<u32>,
    /// NEW, UPDATE or DESTROY for connections.
    #[serde(skip_serializing_if = "Option::is_none")]
    conntrack: Option<Event>,
    #[serde(rename = "IP", skip_serializing_if = "Option::is_none")]
    ip: Option<Ip>,
    #[serde(skip_serializing_if = "Option::is_none")]
    l4: Option<L4>,
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<Endpoint>,
    #[serde(skip_serializing_if = "Option::is_none")]
    destination: Option<Endpoint>,
    #[serde(skip_serializing_if = "Option::is_none")]
    destination_service: Option<ServiceName>,
    /// The Cilium load-balancer frontend the connection went to (its maps hold
    /// addresses, not Service names), on nodes where Cilium serves Services.
    #[serde(skip_serializing_if = "Option::is_none")]
    destination_frontend: Option<LbFrontend>,
    /// Where DNAT sent the connection (`ip:port`), when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    translated_destination: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    traffic: Option<Traffic>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rule: Option<&'a RuleMatch>,
    /// With `--confirm-with-trace`: what nftrace saw drop the packet.
    #[serde(skip_serializing_if = "Option::is_none")]
    trace: Option<Confirmation>,
    #[serde(skip_serializing_if = "Option::is_none")]
    interface: Option<Interface>,
    #[serde(skip_serializing_if = "Option::is_none")]
    netns: Option<&'a str>,
    /// Identical drops this line stands for, when more than one (aggregated while the
    /// output was behind): an extension of Hubble's schema.
    #[serde(skip_serializing_if = "Option::is_none")]
    count: Option<u64>,
}

#[derive(Serialize)]
struct Ip {
    source: IpAddr,
    destination: IpAddr,
    #[serde(rename = "ipVersion")]
    ip_version: &'static str,
}

/// Hubble's `l4`: one key naming the protocol.
#[derive(Serialize)]
enum L4 {
    #[serde(rename = "TCP")]
    Tcp(Ports),
    #[serde(rename = "UDP")]
    Udp(Ports),
    #[serde(rename = "SCTP")]
    Sctp(Ports),
    #[serde(rename = "ICMPv4")]
    Icmp4(Icmp),
    #[serde(rename = "ICMPv6")]
    Icmp6(Icmp),
    #[serde(rename = "other")]
    Other { protocol: u8 },
}

#[derive(Serialize)]
struct Ports {
    #[serde(skip_serializing_if = "Option::is_none")]
    source_port: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    destination_port: Option<u16>,
}

#[derive(Serialize)]
struct Icmp {
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<u8>,
}

#[derive(Serialize)]
struct Endpoint {
    namespace: String,
}

#[derive(Serialize)]
struct Interface {
    index: u32,
}

#[derive(Serialize)]
struct Traffic {
    #[serde(skip_serializing_if = "Option::is_none")]
    packets_original: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes_original: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    packets_reply: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes_reply: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration_ns: Option<u64>,
}

/// A line that is not a flow: what is not observed, and events lost (Hubble's
/// `lost_events` shape).
#[derive(Serialize)]
struct Notice<'a> {
    time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    notice: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lost_events: Option<Lost>,
}

#[derive(Serialize)]
struct Lost {
    source: &'static str,
    num_events_lost: u64,
}

/// What a user asked to see.
struct Filter {
    verdict: Option<ObserveVerdict>,
    ips: Vec<IpAddr>,
    ports: Vec<u16>,
    protocol: Option<Vec<u8>>,
    service: Option<ServiceName>,
    reasons: Vec<u32>,
}

fn protocols(p: &str) -> anyhow::Result<Vec<u8>> {
    Ok(match p.to_ascii_lowercase().as_str() {
        "tcp" => vec![6],
        "udp" => vec![17],
        "sctp" => vec![132],
        "icmp" => vec![1, 58],
        "icmpv6" => vec![58],
        n => vec![n.parse().map_err(|_| {
            anyhow::anyhow!("--protocol {p}: expected tcp, udp, sctp, icmp or a number")
        })?],
    })
}

fn protocol_name(p: u8) -> String {
    match p {
        6 => "tcp".into(),
        17 => "udp".into(),
        132 => "sctp".into(),
        1 => "icmp".into(),
        58 => "icmpv6".into(),
        n => n.to_string(),
    }
}

/// The metrics of `--metrics-addr`; labels are bounded: verdict (2), protocol (6),
/// the kernel's reasons (one enum), owners (the catalogue plus builtin, unknown,
/// ambiguous, none), lost-event sources (3).
#[derive(Clone)]
struct Metrics {
    registry: Arc<Registry>,
    flows: Family<Vec<(String, String)>, Counter>,
    drops: Family<Vec<(String, String)>, Counter>,
    lost: Family<Vec<(String, String)>, Counter>,
    reads: Family<Vec<(String, String)>, Counter>,
    aggregated: Counter,
}

impl Metrics {
    fn new() -> Metrics {
        let mut r = Registry::default();
        let flows = Family::default();
        let drops = Family::default();
        let lost = Family::default();
        let reads = Family::default();
        let aggregated = Counter::default();
        r.register(
            "plumb_observe_flows",
            "Connection events conntrack reported, by verdict and protocol",
            flows.clone(),
        );
        r.register(
            "plumb_observe_drops",
            "Packets the kernel dropped, by reason and by the owner of the netfilter rule",
            drops.clone(),
        );
        r.register(
            "plumb_observe_lost_events",
            "Events lost before plumb could read them, by where",
            lost.clone(),
        );
        r.register(
            "plumb_observe_ruleset_reads",
            "Reads of the rule counters for attribution, by how: netlink (the chains that can drop), full (the whole ruleset over netlink) or tools (the dump tools)",
            reads.clone(),
        );
        r.register(
            "plumb_observe_aggregated_drops",
            "Drops printed as part of an identical drop's line (its count) because the output was behind",
            aggregated.clone(),
        );
        Metrics {
            registry: Arc::new(r),
            flows,
            drops,
            lost,
            reads,
            aggregated,
        }
    }
}

impl plumb_watch::http::Exposition for Metrics {
    fn render_openmetrics(&self) -> String {
        let mut s = String::new();
        let _ = encode(&mut s, &self.registry);
        s
    }
    fn render(&self) -> String {
        plumb_watch::metrics::to_prometheus_text(&self.render_openmetrics())
    }
    fn is_ready(&self) -> bool {
        true
    }
}

fn label(k: &str, v: &str) -> (String, String) {
    (k.to_string(), v.to_string())
}

fn rfc3339(t: SystemTime) -> String {
    plumb_watch::event::rfc3339(t)
}

fn hostport(ip: IpAddr, port: Option<u16>) -> String {
    match port {
        Some(p) if ip.is_ipv6() => format!("[{ip}]:{p}"),
        Some(p) => format!("{ip}:{p}"),
        None => ip.to_string(),
    }
}

fn l4_of(protocol: u8, ports: Option<(u16, u16)>, icmp: Option<(u8, u8)>) -> L4 {
    let p = Ports {
        source_port: ports.map(|p| p.0),
        destination_port: ports.map(|p| p.1),
    };
    let i = Icmp {
        kind: icmp.map(|i| i.0),
        code: icmp.map(|i| i.1),
    };
    match protocol {
        6 => L4::Tcp(p),
        17 => L4::Udp(p),
        132 => L4::Sctp(p),
        1 => L4::Icmp4(i),
        58 => L4::Icmp6(i),
        n => L4::Other { protocol: n },
    }
}

struct State<'a> {
    netns: Option<&'a str>,
    reasons: DropReasons,
    names: ServiceNames,
    names_read: Instant,
    baseline: Option<CounterSnapshot>,
    attribution_problem: Option<String>,
    filter: Filter,
    json: bool,
    last: Option<VecDeque<String>>,
    last_n: usize,
    metrics: Option<Metrics>,
    printed: u64,
    /// What a drop by a BPF program says instead of a rule.
    bpf_verdict: RuleMatch,
    /// `--confirm-with-trace`: the tracer, and the traced drops not yet matched (the
    /// last 1,024).
    tracer: Option<Tracer>,
    traced: VecDeque<TraceDrop>,
    /// The line being made (reused).
    buf: Vec<u8>,
    times: drop_line::TimeText,
    rule_json: drop_line::RuleJson,
    /// The drops counter of the last (reason, owner) counted.
    drop_counter: Option<(u32, String, Counter)>,
    /// Aggregated drops were said (once).
    said_aggregated: bool,
}

/// The facts of one event the filters and printers look at.
struct Facts {
    verdict: ObserveVerdict,
    protocol: u8,
    src: Option<IpAddr>,
    dst: Option<IpAddr>,
    sport: Option<u16>,
    dport: Option<u16>,
    reason: Option<u32>,
}

impl State<'_> {
    /// Takes in a read of the ruleset: the names, and the counter snapshot returned.
    fn apply_read(&mut self, read: RulesetRead) -> Option<CounterSnapshot> {
        self.names_read = Instant::now();
        match read {
            Ok((names, snapshot)) => {
                self.names = names;
                Some(snapshot)
            }
            Err(why) => {
                if self.attribution_problem.is_none() {
                    eprintln!(
                        "plumb observe: cannot read the ruleset, so drops are not attributed to rules: {why}"
                    );
                }
                self.attribution_problem = Some(why);
                None
            }
        }
    }

    /// Attributes `pending` against the counters `after` and prints them.
    fn attribute_and_print(
        &mut self,
        out: &mut impl Write,
        pending: &mut Vec<Counted>,
        after: Option<CounterSnapshot>,
    ) -> anyhow::Result<()> {
        let answer = match (&self.baseline, &after) {
            (Some(before), Some(after)) => Some(attribute(before, after)),
            _ => self
                .attribution_problem
                .clone()
                .map(|why| RuleMatch::NotFound {
                    why: format!("the ruleset could not be read: {why}"),
                }),
        };
        if after.is_some() {
            self.baseline = after;
        }
        for (d, count) in pending.drain(..) {
            self.drop(out, &d, count, answer.as_ref())?;
        }
        Ok(())
    }

    fn keep(&self, f: &Facts, service: Option<&ServiceName>, src_ns: Option<&str>) -> bool {
        let flt = &self.filter;
        if flt.verdict.is_some_and(|v| v != f.verdict) {
            return false;
        }
        if !flt.ips.is_empty()
            && !flt
                .ips
                .iter()
                .any(|ip| Some(*ip) == f.src || Some(*ip) == f.dst)
        {
            return false;
        }
        if !flt.ports.is_empty()
            && !flt
                .ports
                .iter()
                .any(|p| Some(*p) == f.sport || Some(*p) == f.dport)
        {
            return false;
        }
        if flt
            .protocol
            .as_ref()
            .is_some_and(|ps| !ps.contains(&f.protocol))
        {
            return false;
        }
        if let Some(want) = &flt.service
            && service != Some(want)
            && !(src_ns.is_some()
                && f.src
                    .and_then(|ip| self.names.endpoint(ip, f.sport?))
                    .is_some_and(|s| s == want))
        {
            return false;
        }
        if !flt.reasons.is_empty() && !f.reason.is_some_and(|r| flt.reasons.contains(&r)) {
            return false;
        }
        true
    }

    /// Prints the line in `buf` (or keeps it for `--last`).
    fn emit_buf(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        self.printed += 1;
        match &mut self.last {
            Some(q) => {
                if q.len() == self.last_n {
                    q.pop_front();
                }
                if self.last_n > 0 {
                    q.push_back(String::from_utf8_lossy(&self.buf).into_owned());
                }
                Ok(())
            }
            None => {
                self.buf.push(b'\n');
                out.write_all(&self.buf)
            }
        }
    }

    fn emit(&mut self, out: &mut impl Write, text: String) -> std::io::Result<()> {
        self.printed += 1;
        match &mut self.last {
            Some(q) => {
                if q.len() == self.last_n {
                    q.pop_front();
                }
                if self.last_n > 0 {
                    q.push_back(text);
                }
                Ok(())
            }
            None => writeln!(out, "{text}"),
        }
    }

    fn flow(&mut self, out: &mut impl Write, f: &Flow) -> anyhow::Result<()> {
        let o = &f.original;
        if let Some(m) = &self.metrics {
            m.flows
                .get_or_create(&vec![
                    label("verdict", "FORWARDED"),
                    label("protocol", &protocol_name(f.protocol)),
                ])
                .inc();
        }
        let dnat = f.dnat();
        let service = o
            .destination_port
            .and_then(|p| self.names.destination(o.destination, p, f.protocol))
            .or_else(|| dnat.and_then(|(ip, p)| self.names.destination(ip, p?, f.protocol)))
            .cloned();
        let frontend = o
            .destination_port
            .and_then(|p| self.names.lb_destination(o.destination, p, f.protocol))
            .or_else(|| dnat.and_then(|(ip, p)| self.names.lb_destination(ip, p?, f.protocol)))
            .cloned();
        // On Cilium nodes, the frontend's Service when the agent named it.
        let service = service.or_else(|| frontend.as_ref().and_then(|f| f.service.clone()));
        let src_ns = self.names.pod_namespace(o.source).map(str::to_string);
        let facts = Facts {
            verdict: ObserveVerdict::Forwarded,
            protocol: f.protocol,
            src: Some(o.source),
            dst: Some(o.destination),
            sport: o.source_port,
            dport: o.destination_port,
            reason: None,
        };
        if !self.keep(&facts, service.as_ref(), src_ns.as_deref()) {
            return Ok(());
        }
        let translated = dnat.map(|(ip, p)| hostport(ip, p));
        let traffic = (f.counters_original.is_some() || f.start_ns.is_some()).then(|| Traffic {
            packets_original: f.counters_original.map(|c| c.packets),
            bytes_original: f.counters_original.map(|c| c.bytes),
            packets_reply: f.counters_reply.map(|c| c.packets),
            bytes_reply: f.counters_reply.map(|c| c.bytes),
            duration_ns: f.duration_ns(),
        });
        let now = rfc3339(SystemTime::now());
        let text = if self.json {
            let line = Line {
                time: now,
                verdict: "FORWARDED",
                drop_reason: None,
                drop_reason_desc: None,
                drop_reason_code: None,
                conntrack: Some(f.event),
                ip: Some(Ip {
                    source: o.source,
                    destination: o.destination,
                    ip_version: if o.source.is_ipv6() { "IPv6" } else { "IPv4" },
                }),
                l4: Some(l4_of(
                    f.protocol,
                    o.source_port.zip(o.destination_port),
                    None,
                )),
                source: src_ns.map(|namespace| Endpoint { namespace }),
                destination: service.as_ref().map(|s| Endpoint {
                    namespace: s.namespace.clone(),
                }),
                destination_service: service,
                destination_frontend: frontend,
                translated_destination: translated,
                traffic,
                rule: None,
                trace: None,
                interface: None,
                netns: self.netns,
                count: None,
            };
            serde_json::to_string(&line)?
        } else {
            let event = match f.event {
                Event::New => "NEW",
                Event::Update => "UPDATE",
                Event::Destroy => "DESTROY",
            };
            let mut s = format!(
                "{now} {} -> {} {} FORWARDED {event}",
                hostport(o.source, o.source_port),
                hostport(o.destination, o.destination_port),
                protocol_name(f.protocol),
            );
            if let Some(svc) = &service {
                s.push_str(&format!(" service {svc}"));
            }
            if let Some(fe) = &frontend {
                s.push_str(&format!(" frontend {fe} (Cilium)"));
            }
            if let Some(t) = &translated {
                s.push_str(&format!(" (DNAT to {t})"));
            }
            if let Some(t) = &traffic {
                if let (Some(p), Some(b)) = (t.packets_original, t.bytes_original) {
                    s.push_str(&format!(" {p} pkts/{b} B out"));
                }
                if let (Some(p), Some(b)) = (t.packets_reply, t.bytes_reply) {
                    s.push_str(&format!(" {p} pkts/{b} B back"));
                }
                if let Some(d) = t.duration_ns {
                    s.push_str(&format!(" {:.3}s", d as f64 / 1e9));
                }
            }
            s
        };
        self.emit(out, text)?;
        Ok(())
    }

    fn drop(
        &mut self,
        out: &mut impl Write,
        d: &DroppedPacket,
        count: u64,
        rule: Option<&RuleMatch>,
    ) -> anyhow::Result<()> {
        let (src, dst) = d.addresses.unzip();
        let dport = d.ports.map(|p| p.1);
        // The filters first, so a drop not shown costs no naming or formatting (those
        // that need no names ran in the kernel and on the reader thread already).
        {
            let service = dst
                .zip(dport)
                .and_then(|(ip, port)| self.names.service_of(ip, port, d.protocol));
            let src_ns = src.and_then(|ip| self.names.pod_namespace(ip));
            let facts = Facts {
                verdict: ObserveVerdict::Dropped,
                protocol: d.protocol,
                src,
                dst,
                sport: d.ports.map(|p| p.0),
                dport,
                reason: Some(d.reason),
            };
            if !self.keep(&facts, service, src_ns) {
                return Ok(());
            }
        }
        if count > 1 {
            self.aggregated(out, count - 1)?;
        }
        // A tc filter's or BPF program's verdict (Cilium's datapath), not netfilter's:
        // no rule can be named, and the line says where to look instead.
        let bpf = rule.is_none()
            && matches!(
                self.reasons.name(d.reason),
                Some("TC_INGRESS" | "TC_EGRESS" | "BPF_CGROUP_EGRESS")
            );
        let trace = match (rule, &self.tracer) {
            (Some(answer), Some(_)) if !bpf => Some(self.confirm(answer, dst, d)),
            _ => None,
        };
        let rule = if bpf { Some(&self.bpf_verdict) } else { rule };
        let code_text;
        let reason_text: &str = match self.reasons.name(d.reason) {
            Some(n) => n,
            None => {
                code_text = d.reason.to_string();
                &code_text
            }
        };
        if let Some(m) = &self.metrics {
            let owner = match rule {
                Some(RuleMatch::Found { rule }) => rule.owner.as_str(),
                Some(RuleMatch::Ambiguous { .. }) => "ambiguous",
                _ => "none",
            };
            // One atomic add per drop: the counter of the last (reason, owner) is kept.
            match &self.drop_counter {
                Some((r, o, c)) if *r == d.reason && o == owner => {
                    c.inc_by(count);
                }
                _ => {
                    let c = m
                        .drops
                        .get_or_create(&vec![label("reason", reason_text), label("owner", owner)])
                        .clone();
                    c.inc_by(count);
                    self.drop_counter = Some((d.reason, owner.to_string(), c));
                }
            }
        }
        let service = dst
            .zip(dport)
            .and_then(|(ip, port)| self.names.service_of(ip, port, d.protocol));
        let frontend = dst
            .zip(dport)
            .and_then(|(ip, port)| self.names.lb_destination(ip, port, d.protocol));
        let src_ns = src.and_then(|ip| self.names.pod_namespace(ip));
        let time = self.times.of(d.monotonic_ns);
        if self.json {
            let rule_json = rule.map(|r| self.rule_json.of(r));
            self.buf.clear();
            drop_line::write(
                &mut self.buf,
                time,
                d,
                &drop_line::DropView {
                    reason: reason_text,
                    src_ns,
                    service,
                    frontend,
                    rule: rule_json,
                    trace: trace.as_ref(),
                    netns: self.netns,
                    count,
                },
            );
        } else {
            let time = String::from_utf8_lossy(time);
            let mut s = match d.addresses {
                Some((sa, da)) => format!(
                    "{time} {} -> {} {}",
                    hostport(sa, d.ports.map(|p| p.0)),
                    hostport(da, dport),
                    protocol_name(d.protocol)
                ),
                None => format!("{time} (not IP)"),
            };
            s.push_str(&format!(" DROPPED ({reason_text})"));
            if let Some(svc) = &service {
                s.push_str(&format!(" service {svc}"));
            }
            if let Some(fe) = &frontend {
                s.push_str(&format!(" frontend {fe} (Cilium)"));
            }
            match &rule {
                Some(RuleMatch::Found { rule: r }) => s.push_str(&format!(
                    " by {} {} {}: {} [owner {}]",
                    r.family, r.table, r.chain, r.text, r.owner
                )),
                Some(RuleMatch::Ambiguous { candidates }) => s.push_str(&format!(
                    " by one of {} rules: {}",
                    candidates.len(),
                    candidates
                        .iter()
                        .map(|r| format!("{} {}: {} [owner {}]", r.table, r.chain, r.text, r.owner))
                        .collect::<Vec<_>>()
                        .join(" | ")
                )),
                Some(RuleMatch::NotFound { why }) => {
                    s.push_str(&format!(" (rule not found: {why})"))
                }
                None => {}
            }
            match &trace {
                Some(Confirmation {
                    agrees,
                    trace: Some(t),
                }) => s.push_str(&format!(
                    "; nftrace: {} {} {}: {} ({})",
                    t.family,
                    t.table,
                    t.chain,
                    t.text,
                    if *agrees { "agrees" } else { "DIFFERS" }
                )),
                Some(_) => s.push_str("; nftrace: no traced drop of this packet"),
                None => {}
            }
            if count > 1 {
                s.push_str(&format!(" (x{count}: identical drops within 100 ms)"));
            }
            self.buf.clear();
            self.buf.extend_from_slice(s.as_bytes());
        }
        self.emit_buf(out)?;
        Ok(())
    }

    /// The trace's word on `answer` for drop `d`: the latest traced drop of the same
    /// packet (destination, protocol, port), taken out of the list.
    fn confirm(
        &mut self,
        answer: &RuleMatch,
        dst: Option<IpAddr>,
        d: &DroppedPacket,
    ) -> Confirmation {
        if let Some(t) = &self.tracer {
            while let Ok(td) = t.drops.try_recv() {
                if self.traced.len() == 1024 {
                    self.traced.pop_front();
                }
                self.traced.push_back(td);
            }
        }
        let port = d.ports.map(|p| p.1);
        match self
            .traced
            .iter()
            .rposition(|t| t.is_of(dst, d.protocol, port))
        {
            Some(i) => {
                let t = self.traced.remove(i).expect("found");
                plumb_observe::trace::confirm(answer, &t)
            }
            None => Confirmation {
                agrees: false,
                trace: None,
            },
        }
    }

    /// `n` drops were folded into another drop's line: counted in the metrics, and said
    /// once (stderr, and a JSON notice).
    fn aggregated(&mut self, out: &mut impl Write, n: u64) -> std::io::Result<()> {
        if let Some(m) = &self.metrics {
            m.aggregated.inc_by(n);
        }
        if !self.said_aggregated {
            self.said_aggregated = true;
            self.notice(
                out,
                "the output is behind the drops: identical drops (same addresses, ports, \
                 protocol, reason and interface) within 100 ms are printed once, with \
                 their number in `count`",
            )?;
        }
        Ok(())
    }

    fn notice(&mut self, out: &mut impl Write, text: &str) -> std::io::Result<()> {
        eprintln!("plumb observe: {text}");
        if self.json {
            let n = Notice {
                time: rfc3339(SystemTime::now()),
                notice: Some(text),
                lost_events: None,
            };
            writeln!(out, "{}", serde_json::to_string(&n).unwrap_or_default())?;
        }
        Ok(())
    }

    fn lost(&mut self, out: &mut impl Write, source: &'static str, n: u64) -> std::io::Result<()> {
        if n == 0 {
            return Ok(());
        }
        if let Some(m) = &self.metrics {
            m.lost
                .get_or_create(&vec![label("source", source)])
                .inc_by(n);
        }
        eprintln!("plumb observe: {n} events lost ({source})");
        if self.json {
            let l = Notice {
                time: rfc3339(SystemTime::now()),
                notice: None,
                lost_events: Some(Lost {
                    source,
                    num_events_lost: n,
                }),
            };
            writeln!(out, "{}", serde_json::to_string(&l).unwrap_or_default())?;
        }
        Ok(())
    }
}

/// Names and counters from one read of the ruleset, or why it failed.
type RulesetRead = Result<(ServiceNames, CounterSnapshot), String>;

/// Reads the namespace's rule counters for attribution, and the Service names.
///
/// The first read is a full one over netlink (plumb's nf_tables reader, as `ruleset
/// show --netns` uses: the rules' text, owners and names), with the counters of the
/// chains that can drop (chains with DROP/REJECT rules, base chains with a DROP
/// policy) read at the same generation; the two make a [`NetlinkPlan`]. Later reads
/// fetch only those chains' counters (GET requests: milliseconds, where a save tool
/// takes tens of seconds on a node with 10k Services) while the ruleset's generation
/// stays the same. A changed ruleset means a new full read; a table netlink cannot
/// read (iptables-legacy) or a netlink error, the dump tools with their counters.
struct RulesetReader {
    netns: Option<String>,
    plan: Option<NetlinkPlan>,
    /// kube-proxy's names from the last full read (Cilium's are re-read each time).
    names: ServiceNames,
    metrics: Option<Metrics>,
    /// The agent's frontends with their Kubernetes names (`cilium-dbg service list -o
    /// json`) and when they were asked for: at most once per [`NAMES_REFRESH`].
    agent: Option<(Instant, Vec<plumb_cilium::lbmap::Frontend>)>,
}

/// How long one netlink counter read may take before the full read is used instead.
const NETLINK_DEADLINE: Duration = Duration::from_secs(5);

impl RulesetReader {
    fn new(netns: Option<&str>, metrics: Option<Metrics>) -> RulesetReader {
        RulesetReader {
            netns: netns.map(str::to_string),
            plan: None,
            names: ServiceNames::default(),
            metrics,
            agent: None,
        }
    }

    fn count(&self, how: &str) {
        if let Some(m) = &self.metrics {
            m.reads.get_or_create(&vec![label("how", how)]).inc();
        }
    }

    fn read(&mut self) -> RulesetRead {
        let netns = self.netns.as_deref();
        let deadline = || Some(Instant::now() + NETLINK_DEADLINE);
        if let Some(plan) = &self.plan {
            let (chains, policies) = plan.chains();
            let fast = plumb_os::nftables::read_counters(netns, chains, policies, deadline())
                .map_err(|e| e.to_string())
                .and_then(|c| plan.snapshot(&c));
            match fast {
                Ok(snapshot) => {
                    self.count("netlink");
                    return Ok((self.with_cilium(), snapshot));
                }
                Err(_) => self.plan = None,
            }
        }
        // The full read: over netlink (plumb's nf_tables reader: the rules' text and
        // owners, no rule counters) with the counters of the chains that can drop read
        // at the same generation. On a node with 10k Services this takes about a
        // second where iptables-nft-save takes tens.
        if let Some((names, snapshot, plan)) = self.read_over_netlink() {
            self.count("full");
            self.names = names;
            self.plan = Some(plan);
            return Ok((self.with_cilium(), snapshot));
        }
        // The dump tools with their counters: iptables-legacy tables, or netlink failed.
        let (rs, _problems) = read_counted(&plumb_os::runner::SystemRunner, netns)?;
        self.count("tools");
        self.names = ServiceNames::from_ruleset(&rs);
        Ok((self.with_cilium(), CounterSnapshot::of(&rs)))
    }

    /// The full read over netlink and its plan; None when it cannot serve (a legacy
    /// table, a table not decoded exactly, the ruleset changing meanwhile, an error).
    fn read_over_netlink(&self) -> Option<(ServiceNames, CounterSnapshot, NetlinkPlan)> {
        let netns = self.netns.as_deref();
        let deadline = Some(Instant::now() + NETLINK_DEADLINE);
        let before = plumb_os::nftables::generation(netns, deadline).ok()?;
        let collected =
            plumb_collect::rulesets::collect_live_rulesets(&plumb_os::runner::SystemRunner, netns);
        let rs = collected.ruleset;
        let (chains, policies) = NetlinkPlan::chains_to_read(&rs)?;
        let c = plumb_os::nftables::read_counters(netns, &chains, &policies, deadline).ok()?;
        // The same generation before the full read and at the counters' read: both saw
        // the same ruleset.
        if c.generation != before {
            return None;
        }
        let plan = NetlinkPlan::new(&rs, &c).ok()?;
        let snapshot = plan.snapshot(&c).ok()?;
        Some((ServiceNames::from_ruleset(&rs), snapshot, plan))
    }

    /// The names, with the frontends of Cilium's load balancer when its maps are pinned
    /// (a kube-proxy-free node has its Services there, not in rules). The maps hold no
    /// Kubernetes names: on the host's maps, the agent's service list (when `cilium-dbg`
    /// is on PATH and answers) names the frontends.
    fn with_cilium(&mut self) -> ServiceNames {
        let mut names = self.names.clone();
        let root = cilium_root(self.netns.as_deref());
        if let Some(lb) = plumb_collect::cilium::read_lb_maps(&root)
            && !lb.frontends.is_empty()
        {
            names.add_cilium(&lb.frontends);
            if root == std::path::Path::new("/") {
                if self
                    .agent
                    .as_ref()
                    .is_none_or(|(at, _)| at.elapsed() >= NAMES_REFRESH)
                {
                    self.agent = Some((Instant::now(), agent_service_list()));
                }
                if let Some((_, listed)) = &self.agent {
                    names.name_cilium(listed);
                }
            }
        }
        names
    }
}

/// The agent's frontends, named (`cilium-dbg service list -o json`); none when the CLI
/// is missing or fails (the maps still give the frontends, by address).
fn agent_service_list() -> Vec<plumb_cilium::lbmap::Frontend> {
    use plumb_os::runner::Runner;
    let out = plumb_os::runner::SystemRunner.run(
        "cilium-dbg",
        &["service", "list", "-o", "json"],
        None,
        plumb_collect::cilium::AGENT_TIMEOUT,
    );
    match out {
        Ok(o) if o.success() => {
            plumb_cilium::agent::service_list(&String::from_utf8_lossy(&o.stdout)).0
        }
        _ => Vec::new(),
    }
}

/// Where Cilium's maps are pinned for `netns`: below the lab's root for the lab's node
/// (the lab pins them there, never in the host's bpffs), else below `/`. BPF maps are
/// not per network namespace: any other namespace sees the host's.
fn cilium_root(netns: Option<&str>) -> std::path::PathBuf {
    netns
        .filter(|n| *n == plumb_lab::state::NODE_NETNS)
        .and_then(|_| plumb_lab::state::LabState::load().ok().flatten())
        .map_or_else(|| std::path::PathBuf::from("/"), |s| s.root)
}

/// Reads the ruleset on a thread of its own, so events keep flowing meanwhile; the
/// reader comes back with the answer.
fn read_in_background(mut reader: RulesetReader) -> Receiver<(RulesetReader, RulesetRead)> {
    let (tx, rx) = sync_channel(1);
    std::thread::spawn(move || {
        let read = reader.read();
        let _ = tx.send((reader, read));
    });
    rx
}

/// NETFILTER_DROPs waiting for the counters to be read. A drop the kernel made before
/// a read began was counted in it, whenever it reaches this thread: it waits in
/// `pending` for that read. Drops made after the read began wait in `next` for the
/// following one. Both are bounded; beyond, drops are printed unattributed.
#[derive(Default)]
struct Windows {
    pending: Vec<Counted>,
    next: Vec<Counted>,
    /// When the first of `pending` arrived (a read starts [`WINDOW`] later).
    since: Option<Instant>,
    /// The read in flight: when it began (CLOCK_MONOTONIC ns) and its answer.
    in_flight: Option<(u64, Receiver<(RulesetReader, RulesetRead)>)>,
    /// The reader, while no read is in flight.
    reader: Option<RulesetReader>,
}

impl Windows {
    /// Holds `d` for its window; gives it back when both windows are full.
    fn hold(&mut self, d: Counted) -> Option<Counted> {
        let after_read = self
            .in_flight
            .as_ref()
            .is_some_and(|(start, _)| d.0.monotonic_ns > *start);
        let w = if after_read {
            &mut self.next
        } else {
            &mut self.pending
        };
        if w.len() >= PENDING {
            return Some(d);
        }
        w.push(d);
        if !after_read {
            self.since.get_or_insert_with(Instant::now);
        }
        None
    }

    /// Starts a read when the pending window is due (or, with nothing pending, when
    /// the names are due for a refresh).
    fn maybe_start(&mut self, st: &State<'_>) {
        if self.in_flight.is_some() {
            return;
        }
        let due = self.since.is_some_and(|t| t.elapsed() >= WINDOW)
            || (self.pending.is_empty() && st.names_read.elapsed() >= NAMES_REFRESH);
        if due && let Some(reader) = self.reader.take() {
            self.in_flight = Some((WallClock::monotonic_now_ns(), read_in_background(reader)));
        }
    }

    /// When the read in flight has answered (or, with `wait`, once it does): prints
    /// the pending window attributed, and makes the next one pending.
    fn finish(
        &mut self,
        st: &mut State<'_>,
        out: &mut impl Write,
        wait: bool,
    ) -> anyhow::Result<()> {
        let Some((_, rx)) = &self.in_flight else {
            return Ok(());
        };
        let answer = if wait {
            rx.recv().map_err(|_| ())
        } else {
            rx.try_recv().map_err(|_| ())
        };
        let read = match answer {
            Ok((reader, r)) => {
                self.reader = Some(reader);
                r
            }
            Err(()) if wait => Err("the ruleset reader ended without an answer".into()),
            Err(()) => return Ok(()),
        };
        self.in_flight = None;
        let after = st.apply_read(read);
        st.attribute_and_print(out, &mut self.pending, after)?;
        std::mem::swap(&mut self.pending, &mut self.next);
        self.since = (!self.pending.is_empty()).then(Instant::now);
        Ok(())
    }
}

fn not_attributed() -> RuleMatch {
    RuleMatch::NotFound {
        why: format!("more than {PENDING} netfilter drops at once: not attributed"),
    }
}

pub fn run(f: &ObserveFlags) -> anyhow::Result<Verdict> {
    let netns_owned = if f.lab {
        Some(plumb_lab::state::NODE_NETNS.to_string())
    } else {
        f.netns.clone()
    };
    let netns = netns_owned.as_deref();
    super::input::require_net_admin("(conntrack events need CAP_NET_ADMIN)")?;
    let protocol = f.protocol.as_deref().map(protocols).transpose()?;
    let service = match &f.service {
        Some(s) => Some(ServiceName::parse(s).ok_or_else(|| {
            anyhow::anyhow!("--service {s}: expected NAMESPACE/NAME, e.g. kube-system/kube-dns")
        })?),
        None => None,
    };
    let reasons = plumb_observe::drops::kernel_reasons();
    let mut reason_values = Vec::new();
    for r in &f.reason {
        let known = reasons.as_ref().ok().and_then(|k| k.value(r));
        match (known, &reasons) {
            (Some(v), _) => reason_values.push(v),
            (None, Ok(k)) => anyhow::bail!(
                "--reason {r}: this kernel has no such drop reason; it has: {}",
                k.iter().map(|(_, n)| n).collect::<Vec<_>>().join(", ")
            ),
            (None, Err(e)) => anyhow::bail!("--reason {r}: {e}"),
        }
    }
    let duration = match (f.duration, f.last) {
        (Some(d), _) if !(d.is_finite() && d > 0.0) => {
            anyhow::bail!("--duration {d}: expected a positive number of seconds")
        }
        (Some(d), _) => Some(Duration::from_secs_f64(d)),
        (None, Some(_)) => Some(Duration::from_secs(10)),
        (None, None) => None,
    };
    let metrics = f.metrics_addr.map(|_| Metrics::new());
    let _server = match (f.metrics_addr, &metrics) {
        (Some(addr), Some(m)) => {
            let server = plumb_watch::http::MetricsServer::bind(addr)
                .and_then(|s| s.serve(m.clone()))
                .map_err(|e| anyhow::anyhow!("--metrics-addr {addr}: {e}"))?;
            eprintln!(
                "plumb observe: metrics on http://{}/metrics",
                server.local_addr()
            );
            Some(server)
        }
        _ => None,
    };

    let where_ = netns.map_or("this machine's network namespace".to_string(), |n| {
        format!("network namespace {n}")
    });
    // Settings a killed `--enable-accounting` run left on go back first.
    let markers = std::path::Path::new(plumb_observe::accounting::MARKER_DIR);
    for l in plumb_observe::accounting::restore_leftovers(markers) {
        let ns = l
            .netns
            .as_deref()
            .map_or("this machine's network namespace".to_string(), |n| {
                format!("network namespace {n}")
            });
        let values = format!(
            "nf_conntrack_acct={}, nf_conntrack_timestamp={}",
            u8::from(l.restored.bytes_and_packets),
            u8::from(l.restored.timestamps)
        );
        match &l.problem {
            None => eprintln!(
                "plumb observe: put back {values} in {ns}, which plumb observe (pid {}) had changed and could not restore (it was killed)",
                l.pid
            ),
            Some(why) => eprintln!(
                "plumb observe: could not put back {values} in {ns} (changed by pid {}, killed): {why}",
                l.pid
            ),
        }
    }
    let mut restore: Option<Restore> = None;
    let accounting = if f.enable_accounting {
        let r = Accounting::enable(netns, markers)
            .map_err(|e| anyhow::anyhow!("--enable-accounting in {where_}: {e}"))?;
        restore = Some(r);
        Accounting::read(netns).ok()
    } else {
        Accounting::read(netns).ok()
    };

    let stdout = std::io::stdout();
    // Large enough for a batch of lines per write.
    let mut out = std::io::BufWriter::with_capacity(256 * 1024, stdout.lock());
    let clock = WallClock::new();
    let mut st = State {
        netns,
        reasons: reasons.as_ref().cloned().unwrap_or_default(),
        names: ServiceNames::default(),
        names_read: Instant::now(),
        baseline: None,
        attribution_problem: None,
        filter: Filter {
            verdict: f.verdict,
            ips: f.ip.clone(),
            ports: f.port.clone(),
            protocol,
            service,
            reasons: reason_values,
        },
        json: f.output == ObserveFormat::Json,
        last: f.last.map(VecDeque::with_capacity),
        last_n: f.last.unwrap_or(0),
        metrics,
        printed: 0,
        tracer: None,
        traced: VecDeque::new(),
        buf: Vec::with_capacity(1024),
        times: drop_line::TimeText::new(clock),
        rule_json: drop_line::RuleJson::default(),
        drop_counter: None,
        said_aggregated: false,
        bpf_verdict: RuleMatch::NotFound {
            why: "dropped by a tc filter or a BPF program (tc, cgroup), not by netfilter: on \
                  Cilium its datapath's policy and service maps decide (cilium-dbg monitor \
                  --type drop names the reason)"
                .into(),
        },
    };
    if f.confirm_with_trace {
        st.tracer = Some(start_tracer(f.lab, netns)?);
    }
    let mut reader = RulesetReader::new(netns, st.metrics.clone());
    st.baseline = st.apply_read(reader.read());
    if let Some(lb) = plumb_collect::cilium::read_lb_maps(&cilium_root(netns))
        && !lb.frontends.is_empty()
    {
        st.notice(
            &mut out,
            &format!(
                "Cilium's load balancer serves Services here (its maps under {}): its socket \
                 load balancer translates at connect time, so connections show the backend, \
                 named by the frontend that chose it; packets Cilium's BPF programs drop are \
                 not netfilter's, so no rule is named for them",
                lb.globals.display()
            ),
        )?;
    }

    let (queue, rx) = Queue::new();
    let stop = plumb_watch::signals::stop_on_signals();
    let queue_lost = queue.lost.clone();
    let conntrack_lost = Arc::new(AtomicU64::new(0));

    let want_flows = f.verdict != Some(ObserveVerdict::Dropped) && f.reason.is_empty();
    let want_drops = f.verdict != Some(ObserveVerdict::Forwarded);
    let mut threads = Vec::new();
    if want_flows {
        let updates = accounting.is_some_and(|a| a.bytes_and_packets || a.timestamps);
        let listener = ConntrackListener::open_with(netns, updates)
            .map_err(|e| anyhow::anyhow!("subscribing to conntrack events in {where_}: {e}"))?;
        threads.push(spawn_conntrack(
            listener,
            queue.clone(),
            stop.clone(),
            conntrack_lost.clone(),
        ));
        match accounting {
            Some(a) if a.bytes_and_packets && a.timestamps => {}
            Some(a) => eprintln!(
                "plumb observe: {} are off in {where_} (net.netfilter.{}); --enable-accounting turns them on for this run",
                match (a.bytes_and_packets, a.timestamps) {
                    (false, false) => "byte/packet counts and durations",
                    (false, true) => "byte/packet counts",
                    _ => "durations",
                },
                match (a.bytes_and_packets, a.timestamps) {
                    (false, false) => "nf_conntrack_acct, nf_conntrack_timestamp",
                    (false, true) => "nf_conntrack_acct",
                    _ => "nf_conntrack_timestamp",
                }
            ),
            None => eprintln!(
                "plumb observe: conntrack is not loaded in {where_} yet: connections appear once a NAT or state rule loads it"
            ),
        }
    }
    let mut probe_lost = None;
    if want_drops {
        let inode = match netns {
            Some(n) => plumb_os::netns::inode_of(n),
            None => plumb_os::netns::current_inode(),
        }
        .map_err(|e| anyhow::anyhow!("reading the inode of {where_}: {e}"))?;
        // The filters that need no names, for the kernel program and the reader thread.
        let only = DropMatch {
            reasons: st.filter.reasons.clone(),
            protocols: st.filter.protocol.clone().unwrap_or_default(),
            ports: st.filter.ports.clone(),
            ips: st.filter.ips.clone(),
        };
        match DropProbe::attach(&DropFilter {
            netns_inode: inode,
            all_reasons: f.all_reasons,
            only: only.clone(),
        }) {
            Ok(p) => {
                let lost = Arc::new(AtomicU64::new(0));
                probe_lost = Some(lost.clone());
                threads.push(spawn_drops(p, only, queue.clone(), stop.clone(), lost));
            }
            Err(e) if e.unavailable() && !want_flows => {
                anyhow::bail!("only drops were asked for, and they cannot be observed here: {e}")
            }
            Err(e) if e.unavailable() => {
                st.notice(
                    &mut out,
                    &format!("drops are not observed, flows only: {e}"),
                )?;
            }
            Err(e) => return Err(anyhow::anyhow!("attaching the drop program: {e}")),
        }
    }
    let waiting = queue.waiting.clone();
    drop(queue);
    eprintln!(
        "plumb observe: listening in {where_} ({}{})",
        if want_flows { "connections" } else { "" },
        match (want_flows, probe_lost.is_some()) {
            (true, true) => ", drops",
            (false, true) => "drops",
            _ => "",
        }
    );
    out.flush()?;

    let end = duration.map(|d| Instant::now() + d);
    let mut windows = Windows {
        reader: Some(reader),
        ..Windows::default()
    };
    let netfilter_drop = st.reasons.value("NETFILTER_DROP");
    let too_many = not_attributed();
    let sources = [
        (Some(queue_lost.clone()), "OBSERVER_EVENTS_QUEUE"),
        (Some(conntrack_lost.clone()), "CONNTRACK_SOCKET_QUEUE"),
        (probe_lost.clone(), "PERF_EVENT_RING_BUFFER"),
    ];
    let mut seen_lost = [0u64; 3];
    let mut last_lost_report = Instant::now();
    loop {
        let timeout_end = end.is_some_and(|e| Instant::now() >= e);
        if timeout_end || stop.load(Ordering::SeqCst) {
            stop.store(true, Ordering::SeqCst);
            break;
        }
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(batch) => {
                taken(&waiting, &batch);
                handle(
                    &mut st,
                    &mut out,
                    &mut windows,
                    batch,
                    netfilter_drop,
                    &too_many,
                )?
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        windows.finish(&mut st, &mut out, false)?;
        windows.maybe_start(&st);
        // Losses are reported at most once a second (and at the end), summed.
        if last_lost_report.elapsed() >= Duration::from_secs(1) {
            last_lost_report = Instant::now();
            report_losses(&mut st, &mut out, &mut seen_lost, &sources)?;
        }
        out.flush()?;
    }
    for t in threads {
        let _ = t.join();
    }
    // What the threads handed over before they stopped.
    while let Ok(batch) = rx.try_recv() {
        taken(&waiting, &batch);
        handle(
            &mut st,
            &mut out,
            &mut windows,
            batch,
            netfilter_drop,
            &too_many,
        )?;
    }
    // The read in flight, then one more for the drops that came after it began.
    windows.finish(&mut st, &mut out, true)?;
    if !windows.pending.is_empty()
        && let Some(reader) = windows.reader.as_mut()
    {
        let after = st.apply_read(reader.read());
        st.attribute_and_print(&mut out, &mut windows.pending, after)?;
    }
    report_losses(&mut st, &mut out, &mut seen_lost, &sources)?;
    if let Some(q) = st.last.take() {
        for l in q {
            writeln!(out, "{l}")?;
        }
    }
    out.flush()?;
    drop(restore);
    Ok(Verdict::Clean)
}

/// Prints (or holds for attribution) one batch of events.
fn handle(
    st: &mut State<'_>,
    out: &mut impl Write,
    windows: &mut Windows,
    batch: Observed,
    netfilter_drop: Option<u32>,
    too_many: &RuleMatch,
) -> anyhow::Result<()> {
    match batch {
        Observed::Flows(flows) => {
            for fl in &flows {
                st.flow(out, fl)?;
            }
        }
        Observed::Drops(drops) => {
            for (d, count) in drops {
                if Some(d.reason) == netfilter_drop {
                    if let Some((d, count)) = windows.hold((d, count)) {
                        st.drop(out, &d, count, Some(too_many))?;
                    }
                } else {
                    st.drop(out, &d, count, None)?;
                }
            }
        }
    }
    Ok(())
}

/// Starts the nftrace confirmation where writing a table is the user's choice: the lab's
/// node, or a named namespace that is not the host's.
fn start_tracer(lab: bool, netns: Option<&str>) -> anyhow::Result<Tracer> {
    let refuse = |why: &str| {
        anyhow::anyhow!(
            "--confirm-with-trace adds a table to the namespace's ruleset, so it runs only with --lab or --netns NAME of a namespace that is not the host's: {why}"
        )
    };
    let Some(name) = netns else {
        return Err(refuse("no namespace was named"));
    };
    if !lab {
        // The host's: the namespace plumb runs in, and init's when it can be read.
        let own = plumb_os::netns::current_inode()
            .map_err(|e| refuse(&format!("cannot read this process's namespace: {e}")))?;
        let init = plumb_os::netns::inode(std::path::Path::new("/proc/1/ns/net")).ok();
        let theirs = plumb_os::netns::inode_of(name)
            .map_err(|e| refuse(&format!("cannot read namespace {name}: {e}")))?;
        if theirs == own || Some(theirs) == init {
            return Err(refuse(&format!("{name} is the host's namespace")));
        }
    }
    Tracer::start(name).map_err(|e| anyhow::anyhow!("--confirm-with-trace in {name}: {e}"))
}

/// Reports the events lost since the last report, per source.
fn report_losses(
    st: &mut State<'_>,
    out: &mut impl Write,
    seen: &mut [u64; 3],
    sources: &[(Option<Arc<AtomicU64>>, &'static str); 3],
) -> std::io::Result<()> {
    for (seen, (counter, source)) in seen.iter_mut().zip(sources) {
        let Some(c) = counter else { continue };
        let now = c.load(Ordering::Relaxed);
        if now > *seen {
            st.lost(out, source, now - *seen)?;
            *seen = now;
        }
    }
    Ok(())
}

fn spawn_conntrack(
    mut listener: ConntrackListener,
    queue: Queue,
    stop: Arc<AtomicBool>,
    socket_lost: Arc<AtomicU64>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            let r = match listener.receive_batch(1024) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("plumb observe: reading conntrack events: {e}");
                    return;
                }
            };
            if r.lost {
                // ENOBUFS does not say how many: count the overflow once.
                socket_lost.fetch_add(1, Ordering::Relaxed);
            }
            let busy = r.flows.len() >= 64;
            if !r.flows.is_empty() {
                queue.send(Observed::Flows(r.flows));
            }
            if busy {
                // Under load, one wakeup per batch: the kernel queue (4 MiB) holds
                // thousands of events for these 2 ms.
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    })
}

fn spawn_drops(
    mut probe: DropProbe,
    only: DropMatch,
    queue: Queue,
    stop: Arc<AtomicBool>,
    ring_lost: Arc<AtomicU64>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let everything = only.is_everything();
        let mut batch = Vec::with_capacity(BATCH);
        let mut agg = Aggregator::default();
        // Aggregating while the main thread is behind (half the queue waiting), and
        // for a second after.
        let mut aggregate_until: Option<Instant> = None;
        let behind = |queue: &Queue| queue.waiting.load(Ordering::Acquire) > QUEUE_EVENTS / 2;
        let mut drain = |probe: &mut DropProbe, last: bool| {
            if behind(&queue) {
                aggregate_until = Some(Instant::now() + Duration::from_secs(1));
            }
            let mut aggregating = aggregate_until.is_some_and(|t| Instant::now() < t);
            probe.drain(&mut |d| {
                if !(everything || only.matches(&d)) {
                    return;
                }
                if aggregating {
                    agg.add(d);
                    return;
                }
                batch.push((d, 1));
                if batch.len() == BATCH {
                    let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                    queue.send(Observed::Drops(full));
                    // One drain can hold most of the ring buffer: the queue is looked
                    // at after every batch, not only between drains.
                    if behind(&queue) {
                        aggregating = true;
                        aggregate_until = Some(Instant::now() + Duration::from_secs(1));
                    }
                }
            });
            if !batch.is_empty() {
                let rest = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                queue.send(Observed::Drops(rest));
            }
            if !agg.items.is_empty() && (agg.due() || last || !aggregating) {
                queue.send(Observed::Drops(agg.take()));
            }
        };
        while !stop.load(Ordering::SeqCst) {
            probe.wait(Duration::from_millis(50));
            drain(&mut probe, false);
            ring_lost.store(probe.counters().lost, Ordering::Relaxed);
        }
        // The last drops: those of the final moments before the stop.
        drain(&mut probe, true);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Identical drops become one entry whose count is their number; different ones
    /// stay apart; a taken window starts empty.
    #[test]
    fn the_aggregator_counts_identical_drops() {
        let base = plumb_observe::drops::decode(&[0u8; plumb_observe::drops::RECORD_SIZE]).unwrap();
        let mut agg = Aggregator::default();
        for i in 0..1000u64 {
            agg.add(DroppedPacket {
                monotonic_ns: i,
                ..base.clone()
            });
        }
        for port in 0..10u16 {
            agg.add(DroppedPacket {
                ports: Some((1, port)),
                ..base.clone()
            });
        }
        agg.add(DroppedPacket {
            reason: 9,
            ..base.clone()
        });
        let items = agg.take();
        assert_eq!(items.len(), 12);
        assert_eq!(items[0].1, 1000);
        assert_eq!(items[0].0.monotonic_ns, 0, "the first drop stands for them");
        assert_eq!(items.iter().map(|(_, n)| n).sum::<u64>(), 1011);
        assert!(agg.take().is_empty() && !agg.due());
    }

    /// A JSON state printing to a buffer, with `names` and a `--service` filter.
    fn state(names: ServiceNames, service: &str) -> State<'static> {
        State {
            netns: None,
            reasons: DropReasons::default(),
            names,
            names_read: Instant::now(),
            baseline: None,
            attribution_problem: None,
            filter: Filter {
                verdict: None,
                ips: Vec::new(),
                ports: Vec::new(),
                protocol: None,
                service: ServiceName::parse(service),
                reasons: Vec::new(),
            },
            json: true,
            last: None,
            last_n: 0,
            metrics: None,
            printed: 0,
            bpf_verdict: not_attributed(),
            tracer: None,
            traced: VecDeque::new(),
            buf: Vec::new(),
            times: drop_line::TimeText::new(WallClock::new()),
            rule_json: drop_line::RuleJson::default(),
            drop_counter: None,
            said_aggregated: false,
        }
    }

    /// On a Cilium node the maps give frontends by address and the agent's list names
    /// them: `--service NS/NAME` keeps the drops to that Service's frontend and names
    /// it as `destination_service`; drops to other frontends are left out.
    #[test]
    fn service_filter_matches_a_cilium_frontend_named_by_the_agent() {
        use plumb_cilium::layout::{L4Proto, Scope};
        use plumb_cilium::lbmap::{Frontend, FrontendKind, ServiceRef};
        let fe = |ip: &str, port: u16, svc: Option<(&str, &str)>| Frontend {
            address: ip.parse().unwrap(),
            port,
            proto: L4Proto::TCP,
            scope: Scope::External,
            kind: Some(FrontendKind::ClusterIP),
            options: Vec::new(),
            rev_nat: None,
            backends: Vec::new(),
            problems: Vec::new(),
            service: svc.map(|(ns, n)| ServiceRef {
                namespace: ns.into(),
                name: n.into(),
            }),
        };
        let mut names = ServiceNames::default();
        names.add_cilium(&[fe("10.43.0.1", 443, None), fe("10.43.0.10", 53, None)]);
        names.name_cilium(&[
            fe("10.43.0.1", 443, Some(("default", "kubernetes"))),
            fe("10.43.0.10", 53, Some(("kube-system", "kube-dns"))),
        ]);
        let mut st = state(names, "default/kubernetes");
        let drop_to = |dst: &str, port: u16| DroppedPacket {
            monotonic_ns: 1,
            location: 0,
            netns_inode: 1,
            reason: 2,
            ifindex: 0,
            addresses: Some(("10.42.0.5".parse().unwrap(), dst.parse().unwrap())),
            protocol: 6,
            ports: Some((40000, port)),
            icmp: None,
        };
        let mut out = Vec::new();
        st.drop(&mut out, &drop_to("10.43.0.1", 443), 1, None)
            .unwrap();
        st.drop(&mut out, &drop_to("10.43.0.10", 53), 1, None)
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 1, "{text}");
        assert_eq!(
            lines[0]["destination_service"],
            serde_json::json!({"namespace": "default", "name": "kubernetes"})
        );
        assert_eq!(
            lines[0]["destination_frontend"]["address"],
            "10.43.0.1:443/TCP"
        );
    }

    fn drops(n: usize) -> Observed {
        let d = plumb_observe::drops::decode(&[0u8; plumb_observe::drops::RECORD_SIZE]).unwrap();
        Observed::Drops(vec![(d, 1); n])
    }

    /// With the main thread stalled, the readers' hand-over neither blocks nor grows:
    /// it holds at most QUEUE_EVENTS events and counts every event beyond as lost; once
    /// the main thread takes batches out, room comes back.
    #[test]
    fn a_stalled_consumer_makes_lost_events_never_a_blocked_reader() {
        let (q, rx) = Queue::new();
        let sender = q.clone();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        // 100 full batches and 5,000 single events, from a reader thread.
        std::thread::spawn(move || {
            for _ in 0..100 {
                sender.send(drops(BATCH));
            }
            for _ in 0..5_000 {
                sender.send(drops(1));
            }
            let _ = done_tx.send(());
        });
        done_rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the reader went on while nobody read the queue");
        let sent = (100 * BATCH + 5_000) as u64;
        assert_eq!(q.waiting.load(Ordering::SeqCst), QUEUE_EVENTS);
        assert_eq!(q.lost.load(Ordering::SeqCst), sent - QUEUE_EVENTS as u64);
        let mut queued = 0;
        while let Ok(b) = rx.try_recv() {
            queued += b.len();
            taken(&q.waiting, &b);
        }
        assert_eq!(queued, QUEUE_EVENTS);
        assert_eq!(q.waiting.load(Ordering::SeqCst), 0);
        // Room again: a batch now goes through.
        q.send(drops(10));
        assert_eq!(rx.try_recv().map(|b| b.len()).ok(), Some(10));
        assert_eq!(q.lost.load(Ordering::SeqCst), sent - QUEUE_EVENTS as u64);
    }
}
