//! `plumb observe`: connections as conntrack reports them (plumb-observe), one line
//! each, until interrupted or `--duration` ends.

use crate::Verdict;
use plumb_observe::conntrack::{Event, Flow};
use plumb_observe::listener::ConntrackListener;
use serde::Serialize;
use std::io::Write;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// One JSON line, with Hubble's field names where the concepts match.
#[derive(Serialize)]
struct Line<'a> {
    /// Seconds since the epoch, with milliseconds.
    time: f64,
    /// `NEW` or `DESTROY`.
    event: Event,
    /// A connection conntrack saw was let through.
    verdict: &'static str,
    #[serde(rename = "IP")]
    ip: Ip,
    l4: L4,
    /// Where DNAT sent the connection (`ip:port`), when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    translated_destination: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    netns: Option<&'a str>,
}

#[derive(Serialize)]
struct Ip {
    source: String,
    destination: String,
}

#[derive(Serialize)]
struct L4 {
    protocol: u8,
    #[serde(skip_serializing_if = "Option::is_none")]
    source_port: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    destination_port: Option<u16>,
}

fn line<'a>(f: &Flow, netns: Option<&'a str>) -> Line<'a> {
    let time = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| (d.as_millis() as f64) / 1000.0);
    Line {
        time,
        event: f.event,
        verdict: "FORWARDED",
        ip: Ip {
            source: f.original.source.to_string(),
            destination: f.original.destination.to_string(),
        },
        l4: L4 {
            protocol: f.protocol,
            source_port: f.original.source_port,
            destination_port: f.original.destination_port,
        },
        translated_destination: f.dnat().map(|(ip, port)| match port {
            Some(p) if ip.is_ipv6() => format!("[{ip}]:{p}"),
            Some(p) => format!("{ip}:{p}"),
            None => ip.to_string(),
        }),
        netns,
    }
}

pub fn run(netns: Option<&str>, duration: Option<u64>, json: bool) -> anyhow::Result<Verdict> {
    super::input::require_net_admin("(conntrack events need CAP_NET_ADMIN)")?;
    let mut listener = ConntrackListener::open(netns)
        .map_err(|e| anyhow::anyhow!("subscribing to conntrack events: {e}"))?;
    eprintln!(
        "plumb observe: listening to conntrack events in {} (new and ended connections; drops are not reported yet)",
        netns.map_or("this machine's network namespace".to_string(), |n| format!(
            "network namespace {n}"
        ))
    );
    let end = duration.map(|s| Instant::now() + Duration::from_secs(s));
    let mut out = std::io::stdout().lock();
    while end.is_none_or(|e| Instant::now() < e) {
        let r = listener.receive()?;
        if r.lost {
            eprintln!(
                "plumb observe: the kernel dropped conntrack events (queue full): some connections are missing"
            );
        }
        for f in &r.flows {
            let l = line(f, netns);
            if json {
                serde_json::to_writer(&mut out, &l)?;
                writeln!(out)?;
            } else {
                let ports = |p: Option<u16>| p.map(|p| format!(":{p}")).unwrap_or_default();
                writeln!(
                    out,
                    "{:<8} {} {}{} -> {}{}{}",
                    format!("{:?}", f.event).to_uppercase(),
                    f.protocol,
                    l.ip.source,
                    ports(l.l4.source_port),
                    l.ip.destination,
                    ports(l.l4.destination_port),
                    l.translated_destination
                        .as_deref()
                        .map(|t| format!(" (DNAT to {t})"))
                        .unwrap_or_default()
                )?;
            }
        }
        out.flush()?;
    }
    Ok(Verdict::Clean)
}
