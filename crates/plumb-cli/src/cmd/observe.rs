//! `plumb observe`: what one network namespace's netfilter lets through (conntrack
//! events) and what the kernel drops there (the eBPF kfree_skb program), one line per
//! event, named in Kubernetes terms from kube-proxy's rules, with the netfilter rule
//! (and its owner) behind each NETFILTER_DROP. The JSON lines follow Hubble's flow
//! schema where the concepts match (docs/observe.md).
//!
//! Threads: one reads conntrack, one drains the drop ring buffer; both hand events to
//! the main thread in batches through one bounded queue (a full queue counts the
//! batch's events as lost, never grows or blocks the reader; while half of it waits,
//! in events or in batches, the drop reader gathers identical drops into one line with
//! a count, said once). The filters that need no names (`--ip --port --protocol
//! --reason`) run in the kernel program and again on the
//! reader thread, so drops not asked for cost nothing further. The main thread applies
//! `--service`, names, attributes and prints, drops through a hand-written JSON writer
//! over a reused buffer (`drop_line`), one write per batch. Attribution reads the
//! ruleset's counters (read-only dumps) at most once per window of drops.
//!
//! Here: the filters, the per-event handling and the threads. Beside it: `queue` (the
//! bounded hand-over and drop aggregation), `line` and `drop_line` (the JSON lines),
//! `metrics`, and `rules` (the counter reads and the windows drops wait in).

mod drop_line;
mod line;
mod metrics;
mod queue;
mod rules;

use line::{Endpoint, Ip, Line, Lost, Notice, Traffic, hostport, l4_of, rfc3339};
use metrics::{Metrics, label};
use queue::{Aggregator, BATCH, Counted, Observed, Queue, taken};
use rules::{RulesetRead, RulesetReader, Windows, cilium_root, not_attributed};

use crate::Verdict;
use crate::flags::{ObserveFlags, ObserveFormat, ObserveVerdict};
use plumb_observe::accounting::{Accounting, Restore};
use plumb_observe::attribution::{CounterSnapshot, RuleMatch, attribute};
use plumb_observe::conntrack::{Event, Flow};
use plumb_observe::drops::{DropFilter, DropMatch, DropProbe, DroppedPacket, WallClock};
use plumb_observe::listener::ConntrackListener;
use plumb_observe::names::{ServiceName, ServiceNames};
use plumb_observe::reasons::DropReasons;
use plumb_observe::trace::{Confirmation, TraceDrop, Tracer};
use prometheus_client::metrics::counter::Counter;
use std::collections::VecDeque;
use std::io::Write;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant, SystemTime};

/// NETFILTER_DROPs held for one attribution at most; beyond, they are printed without
/// a rule (said in the line).
const PENDING: usize = 4_096;
/// How long the first NETFILTER_DROP of a window waits for the counters to be read.
const WINDOW: Duration = Duration::from_millis(300);
/// How often Service names are re-read when no drop made it happen.
const NAMES_REFRESH: Duration = Duration::from_secs(30);

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
        let tracer = start_tracer(f.lab, netns)?;
        for t in &tracer.removed_leftovers {
            eprintln!("plumb observe: deleted trace table inet {t}, left by a run that was killed");
        }
        st.tracer = Some(tracer);
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
        // Aggregating while the main thread is behind ([`Queue::behind`]), and
        // for a second after.
        let mut aggregate_until: Option<Instant> = None;
        let mut drain = |probe: &mut DropProbe, last: bool| {
            if queue.behind() {
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
                    if queue.behind() {
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
}
