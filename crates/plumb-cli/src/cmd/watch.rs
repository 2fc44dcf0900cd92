//! `plumb watch`: stream events until --duration, SIGINT or SIGTERM, then summarise.
//! Exit code 1 when foreign changes, fights or policy changes were seen.

use crate::Verdict;
use crate::flags::WatchFlags;
use anyhow::Context;
use plumb_watch::http::MetricsServer;
use plumb_watch::metrics::Metrics;
use plumb_watch::{Event, Kind, WatchOptions};
use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::Duration;

pub fn run(f: WatchFlags) -> anyhow::Result<Verdict> {
    let duration = match f.duration {
        Some(s) if !(s.is_finite() && s > 0.0) => {
            anyhow::bail!("--duration must be a positive number of seconds, got {s}")
        }
        Some(s) => Some(Duration::from_secs_f64(s)),
        None => None,
    };
    super::input::require_net_admin("on the node to watch")?;
    let metrics = Metrics::new();
    // Bound now, so that a bad or taken address fails before the baseline is read;
    // served only once watch can watch (a scrape target must not look healthy for a
    // watch that then fails to start).
    let server = f
        .metrics_addr
        .map(|addr| MetricsServer::bind(addr).with_context(|| format!("serving metrics on {addr}")))
        .transpose()?;
    let stop = plumb_watch::signals::stop_on_signals();
    let netns = if f.lab {
        plumb_lab::state::LabState::load()
            .context("reading the lab state")?
            .context("no lab is running (start one with `plumb lab up SCENARIO`)")?;
        Some(plumb_lab::state::NODE_NETNS.to_string())
    } else {
        f.netns.clone()
    };
    let opts = WatchOptions {
        netns,
        duration,
        audit: !f.no_audit,
        writer_probe: !f.no_bpf,
        probe_loader: std::env::current_exe().ok(),
        ready: Some(metrics.ready_flag()),
        ..WatchOptions::default()
    };
    let mut out = std::io::stdout().lock();
    let mut write_error: Option<std::io::Error> = None;
    let stop_on_error = stop.clone();
    let mut sink = |e: &Event| {
        if write_error.is_some() {
            return;
        }
        let r = if f.output.json() {
            serde_json::to_writer(&mut out, e)
                .map_err(std::io::Error::from)
                .and_then(|_| writeln!(out))
        } else {
            writeln!(out, "{}", e.human())
        };
        if let Err(e) = r.and_then(|_| out.flush()) {
            write_error = Some(e);
            stop_on_error.store(true, Ordering::SeqCst);
        }
    };
    let watcher = plumb_watch::Watcher::start(&opts, &metrics, stop)?;
    let where_ = opts
        .netns
        .as_deref()
        .map(|n| format!("network namespace {n}"))
        .unwrap_or_else(|| "this network namespace".into());
    // Kept to the end: dropping it stops the server.
    let _serving = match server {
        Some(server) => {
            let addr = server.local_addr();
            let handle = server
                .serve(metrics.clone())
                .with_context(|| format!("serving metrics on {addr}"))?;
            eprintln!("plumb watch: ready, watching {where_}; metrics on http://{addr}/metrics");
            Some(handle)
        }
        None => {
            eprintln!("plumb watch: ready, watching {where_}");
            None
        }
    };
    let summary = watcher.run(&mut sink);
    if let Some(e) = write_error {
        return Err(e).context("writing events");
    }
    let seen = |k: Kind| summary.events.get(k.as_str()).copied().unwrap_or(0);
    let problems = seen(Kind::ForeignChange) + seen(Kind::Fight) + seen(Kind::PolicyChange);
    if f.output.json() {
        eprintln!("{}", serde_json::to_string(&summary)?);
    } else {
        let counts: Vec<String> = summary
            .events
            .iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect();
        eprintln!(
            "plumb watch: {:.1} s, {} transactions, {} events ({}), {} gaps; audit {}; legacy {}; eBPF writer probe {}",
            summary.duration_s,
            summary.batches,
            summary.events.values().sum::<u64>(),
            if counts.is_empty() {
                "none".to_string()
            } else {
                counts.join(", ")
            },
            summary.gaps,
            summary.audit,
            summary.legacy,
            summary.probe
        );
        for n in &summary.notes {
            eprintln!("plumb watch: note: {n}");
        }
    }
    Ok(if problems > 0 {
        Verdict::Problems
    } else {
        Verdict::Clean
    })
}
