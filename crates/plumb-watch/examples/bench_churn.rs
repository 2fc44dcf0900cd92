//! Benchmark driver for `scripts/bench-watch` (root only; runs in a private netns).
//!
//! Churn: a kube-proxy-named writer restores a generated N-service ruleset (bootstrap +
//! full sync, `iptables-nft-restore --noflush`) every 2 s, and a venAgent-named writer
//! reverts the nat table every 3 s, for DURATION seconds; then IDLE seconds of quiet.
//! Side by side: `plumb watch --json` and the naive alternative (iptables-nft-save
//! polled once a second and diffed). An independent nftables listener timestamps every
//! NEWGEN (the kernel commit as seen from user space) so detection latency is measured
//! outside watch, joined on the generation id.
//!
//! usage: bench_churn PLUMB_BINARY OUT_DIR [DURATION_S=120] [SERVICES=10000] [IDLE_S=30]

use plumb_os::netns::Netns;
use plumb_watch::impersonate::{Flavor, Impersonator};
use plumb_watch::nft_events::{NftListener, Received};
use std::collections::HashMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// nftables generation -> (commit time, writer comm, writer pid, NEWGEN time).
type Generations = HashMap<u32, (f64, String, u32, f64)>;

fn unix_s(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// utime+stime+cutime+cstime (seconds) and VmHWM (KiB) of a process.
fn cpu_and_hwm(pid: u32) -> Option<(f64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    // After "(comm) ": state=0 ... utime=11 stime=12 cutime=13 cstime=14.
    let ticks: f64 = [11, 12, 13, 14]
        .iter()
        .filter_map(|&i| f.get(i)?.parse::<f64>().ok())
        .sum();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    Some((ticks / hz, hwm))
}

/// CPU seconds per thread name (utime+stime) of a process.
fn thread_cpu(pid: u32) -> HashMap<String, f64> {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in dir.filter_map(Result::ok) {
        let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = stat[open + 1..close].to_string();
        let f: Vec<&str> = stat[close + 2..].split_whitespace().collect();
        let ticks: f64 = [11, 12]
            .iter()
            .filter_map(|&i| f.get(i)?.parse::<f64>().ok())
            .sum();
        *out.entry(name).or_default() += ticks / hz;
    }
    out
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let i = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
    v[i.min(v.len() - 1)]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let plumb = args
        .get(1)
        .expect("usage: bench_churn PLUMB OUT_DIR [DURATION] [SERVICES] [IDLE]");
    let out = std::path::PathBuf::from(args.get(2).expect("OUT_DIR"));
    let duration: f64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(120.0);
    let services: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let idle: f64 = args.get(5).and_then(|s| s.parse().ok()).unwrap_or(30.0);
    std::fs::create_dir_all(&out).unwrap();

    eprintln!("generating {services} services ...");
    let saved = plumb_kubeproxy::generated_save_text(services, 3).unwrap();
    let revert = plumb_watch::impersonate::pre_kubernetes_payload(&["nat"]);
    let ns = Netns::create("plumb-bench").unwrap();
    let actors = Impersonator::new().unwrap();
    actors.install("kube-proxy", Flavor::Nft).unwrap();
    actors.install("venAgent", Flavor::Nft).unwrap();
    let t = Duration::from_secs(120);
    // A full sync: kube-proxy's tables replaced as iptables-save prints them (without
    // --noflush: iptables-nft-restore --noflush of 40k chains takes minutes here).
    let kp_sync = || {
        let b = actors
            .run(
                ns.name(),
                "kube-proxy",
                "iptables-nft-restore",
                &[],
                Some(&saved),
                t,
            )
            .unwrap();
        assert!(b.success, "{}", b.stderr);
        b.pid
    };
    let t0 = Instant::now();
    kp_sync();
    eprintln!("initial sync {:.2} s", t0.elapsed().as_secs_f64());

    // Independent NEWGEN timestamps.
    let stop = Arc::new(AtomicBool::new(false));
    let gens: Arc<Mutex<Generations>> = Arc::default();
    // Notifications per writer (comm), counted by the independent listener.
    let notified: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
    let mut probe = NftListener::open(Some(ns.name()), 256 << 20).unwrap();
    let (ps, pg, pn) = (stop.clone(), gens.clone(), notified.clone());
    let probe_t = std::thread::spawn(move || {
        // Light: borrowed events, only the first message and the NEWGEN are kept.
        let mut gaps = 0;
        let mut first: Option<f64> = None;
        let mut in_transaction = 0u64;
        while !ps.load(Ordering::SeqCst) {
            let mut closed = Vec::new();
            let r = probe.receive_each(&mut |e| match e {
                plumb_watch::nft_events::NftEvent::Gen { id, pid, comm } => {
                    let gen_at = unix_s(SystemTime::now());
                    let at = first.take().unwrap_or(gen_at);
                    *pn.lock()
                        .unwrap()
                        .entry(comm.unwrap_or("").to_string())
                        .or_default() += std::mem::take(&mut in_transaction);
                    closed.push((
                        id,
                        at,
                        comm.unwrap_or("").to_string(),
                        pid.unwrap_or(0),
                        gen_at,
                    ));
                }
                _ => {
                    in_transaction += 1;
                    if first.is_none() {
                        first = Some(unix_s(SystemTime::now()));
                    }
                }
            });
            if let Ok(Received::Gap) = r {
                gaps += 1;
                first = None;
            }
            if !closed.is_empty() {
                let mut g = pg.lock().unwrap();
                for (id, at, comm, pid, gen_at) in closed {
                    g.insert(id, (at, comm, pid, gen_at));
                }
            }
        }
        gaps
    });

    // plumb watch.
    let watch_out = std::fs::File::create(out.join("watch.jsonl")).unwrap();
    let watch_err = std::fs::File::create(out.join("watch.stderr")).unwrap();
    let mut watch = Command::new(plumb)
        .args([
            "watch",
            "--netns",
            ns.name(),
            "--json",
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .stdout(watch_out)
        .stderr(watch_err)
        .spawn()
        .unwrap();
    let wpid = watch.id();
    // Wait until it is subscribed and has read its baseline (/readyz).
    let ready_t = Instant::now();
    loop {
        let err = std::fs::read_to_string(out.join("watch.stderr")).unwrap_or_default();
        let addr = err
            .split("http://")
            .nth(1)
            .and_then(|s| s.split('/').next())
            .map(str::to_string);
        if let Some(addr) = addr
            && let Ok(mut s) = std::net::TcpStream::connect(&addr)
        {
            use std::io::Read;
            let _ = s.write_all(b"GET /readyz HTTP/1.1\r\nHost: plumb\r\n\r\n");
            let mut r = String::new();
            let _ = s.read_to_string(&mut r);
            if r.starts_with("HTTP/1.1 200") {
                break;
            }
        }
        assert!(
            ready_t.elapsed() < Duration::from_secs(300),
            "watch not ready"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "watch ready after {:.1} s (baseline read)",
        ready_t.elapsed().as_secs_f64()
    );
    let (_, baseline_hwm) = cpu_and_hwm(wpid).expect("watch running");
    let (w_cpu0, _) = cpu_and_hwm(wpid).expect("watch running");
    let threads0 = thread_cpu(wpid);

    // Naive: iptables-nft-save once a second, diffed; runs until the churn ends.
    let end_unix = unix_s(SystemTime::now()) + duration;
    let naive_script = format!(
        r#"cd {dir}; prev=prev.txt; : > $prev; : > naive.log
end={end}
while :; do
  t0=$EPOCHREALTIME
  awk -v t="$t0" -v e="$end" 'BEGIN{{exit !(t<e)}}' || break
  iptables-nft-save > cur.txt
  if diff -q $prev cur.txt >/dev/null; then ch=0; else diff $prev cur.txt > /dev/null; ch=1; fi
  mv cur.txt $prev
  t1=$EPOCHREALTIME
  echo "$t0 $t1 $ch" >> naive.log
  rem=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{{r=1-(b-a); if(r<0)r=0; printf "%.3f", r}}')
  sleep $rem
done"#,
        dir = out.display(),
        end = end_unix
    );
    let naive = Command::new("/usr/bin/time")
        .args(["-f", "%U %S %e %M", "-o"])
        .arg(out.join("naive.time"))
        .args([
            "ip",
            "netns",
            "exec",
            ns.name(),
            "bash",
            "-c",
            &naive_script,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    // Churn.
    let mut actions: Vec<(String, u32, f64, f64)> = Vec::new();
    let start = Instant::now();
    let (mut next_sync, mut next_revert) = (2.0f64, 3.0f64);
    let mut hwm_peak = 0;
    let mut last_sample = Instant::now();
    while start.elapsed().as_secs_f64() < duration {
        let now = start.elapsed().as_secs_f64();
        let (kind, at) = if next_revert <= next_sync {
            ("revert", next_revert)
        } else {
            ("sync", next_sync)
        };
        if at > now {
            std::thread::sleep(Duration::from_secs_f64((at - now).min(0.5)));
            if last_sample.elapsed() >= Duration::from_secs(1) {
                last_sample = Instant::now();
                if let Some((_, h)) = cpu_and_hwm(wpid) {
                    hwm_peak = hwm_peak.max(h);
                }
            }
            continue;
        }
        let s = unix_s(SystemTime::now());
        let pid = if kind == "sync" {
            next_sync += 2.0;
            kp_sync()
        } else {
            next_revert += 3.0;
            let r = actors
                .run(
                    ns.name(),
                    "venAgent",
                    "iptables-nft-restore",
                    &[],
                    Some(&revert),
                    t,
                )
                .unwrap();
            assert!(r.success, "{}", r.stderr);
            r.pid
        };
        actions.push((kind.into(), pid, s, unix_s(SystemTime::now())));
        if let Some((_, h)) = cpu_and_hwm(wpid) {
            hwm_peak = hwm_peak.max(h);
        }
    }
    let churn_wall = start.elapsed().as_secs_f64();
    let (w_cpu1, h1) = cpu_and_hwm(wpid).unwrap();
    let threads1 = thread_cpu(wpid);
    hwm_peak = hwm_peak.max(h1);
    // Idle: nothing changes.
    std::thread::sleep(Duration::from_secs_f64(idle));
    let (w_cpu2, h2) = cpu_and_hwm(wpid).unwrap();
    hwm_peak = hwm_peak.max(h2);
    // SAFETY: SIGTERM to our own child; plumb watch ends cleanly with a summary.
    unsafe {
        libc::kill(wpid as libc::pid_t, libc::SIGTERM);
    }
    let _ = watch.wait();
    let mut naive = naive;
    let _ = naive.wait();
    stop.store(true, Ordering::SeqCst);
    let probe_gaps = probe_t.join().unwrap_or(0);

    // Analysis.
    let gens = gens.lock().unwrap();
    let events: Vec<serde_json::Value> = std::fs::read_to_string(out.join("watch.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let parse_time = |s: &str| -> Option<f64> {
        // 2026-11-30T08:25:23.510Z -> seconds since midnight are enough for deltas
        // within a day; combine with the date via the probe's day.
        let hms = s.get(11..23)?;
        let h: f64 = hms.get(0..2)?.parse().ok()?;
        let m: f64 = hms.get(3..5)?.parse().ok()?;
        let sec: f64 = hms.get(6..12)?.parse().ok()?;
        Some(h * 3600.0 + m * 60.0 + sec)
    };
    let day = |unix: f64| unix - unix.rem_euclid(86_400.0);
    let mut internal = Vec::new();
    let mut external = Vec::new();
    // Per generation: first detection event (foreign-change, fight, policy-change,
    // preliminary or complete) and first complete event of any kind.
    let mut first_detection: HashMap<u32, f64> = HashMap::new();
    let mut first_complete: HashMap<u32, f64> = HashMap::new();
    let mut preliminary = 0usize;
    let mut detected_reverts = std::collections::HashSet::new();
    let mut kinds: HashMap<String, usize> = HashMap::new();
    for e in &events {
        *kinds
            .entry(e["kind"].as_str().unwrap_or("").to_string())
            .or_default() += 1;
        if let Some(ms) = e["latency_ms"].as_f64() {
            internal.push(ms);
        }
        let (Some(g), Some(t)) = (
            e["generation"].as_u64(),
            e["time"].as_str().and_then(parse_time),
        ) else {
            continue;
        };
        let is_preliminary = e["preliminary"] == true;
        preliminary += usize::from(is_preliminary);
        if let Some((commit, _, _, _)) = gens.get(&(g as u32)) {
            let ev = day(*commit) + t;
            let ms = (ev - commit) * 1000.0;
            external.push(ms);
            if matches!(
                e["kind"].as_str(),
                Some("foreign-change" | "fight" | "policy-change")
            ) {
                let d = first_detection.entry(g as u32).or_insert(ms);
                *d = d.min(ms);
            }
            if !is_preliminary {
                let d = first_complete.entry(g as u32).or_insert(ms);
                *d = d.min(ms);
            }
        }
        if e["kind"] == "foreign-change" && !is_preliminary {
            detected_reverts.insert(e["actor"]["pid"].as_u64().unwrap_or(0) as u32);
        }
    }
    let reverts: Vec<&(String, u32, f64, f64)> =
        actions.iter().filter(|a| a.0 == "revert").collect();
    let syncs = actions.iter().filter(|a| a.0 == "sync").count();
    let detected = reverts
        .iter()
        .filter(|r| detected_reverts.contains(&r.1))
        .count();
    // Naive latency: for each revert's commit, the first poll that started after it.
    let polls: Vec<(f64, f64, bool)> = std::fs::read_to_string(out.join("naive.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((
                w.next()?.parse().ok()?,
                w.next()?.parse().ok()?,
                w.next()? == "1",
            ))
        })
        .collect();
    let mut naive_lat = Vec::new();
    for r in &reverts {
        let commit = gens
            .values()
            .find(|(_, comm, pid, _)| *pid == r.1 && comm == "venAgent")
            .map(|(t, _, _, _)| *t)
            .unwrap_or(r.3);
        if let Some(p) = polls.iter().find(|p| p.0 > commit) {
            naive_lat.push((p.1 - commit) * 1000.0);
        }
    }
    let naive_time = std::fs::read_to_string(out.join("naive.time")).unwrap_or_default();
    let nt: Vec<f64> = naive_time
        .lines()
        .last()
        .unwrap_or("")
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let (naive_cpu, naive_rss) = if nt.len() == 4 {
        ((nt[0] + nt[1]) / nt[2] * 100.0, nt[3] / 1024.0)
    } else {
        (f64::NAN, f64::NAN)
    };
    let poll_ms: Vec<f64> = polls.iter().map(|p| (p.1 - p.0) * 1000.0).collect();
    let mut pm = poll_ms.clone();
    let mut detection: Vec<f64> = first_detection.values().copied().collect();
    // The agent's reverts only (the others are kube-proxy's own policy changes).
    let mut revert_detection: Vec<f64> = first_detection
        .iter()
        .filter(|(g, _)| {
            gens.get(g)
                .is_some_and(|(_, comm, _, _)| comm == "venAgent")
        })
        .map(|(_, ms)| *ms)
        .collect();
    let revert_detected = revert_detection.len();
    // How long the kernel takes to deliver a revert's notifications up to its NEWGEN
    // (first notification -> NEWGEN at the probe): no NEWGEN-based attribution beats it.
    let mut revert_spans: Vec<f64> = gens
        .values()
        .filter(|(_, comm, _, _)| comm == "venAgent")
        .map(|(first, _, _, newgen)| (newgen - first) * 1000.0)
        .collect();
    let mut complete: Vec<f64> = first_complete.values().copied().collect();
    // CPU per notification, and what it comes to at the issue's nominal churn (a full
    // sync every 2 s and a revert every 3 s), which this machine cannot drive: one
    // iptables-nft-restore of 10k services takes it 4-10 s.
    let notified = notified.lock().unwrap().clone();
    let n_of = |comm: &str| notified.get(comm).copied().unwrap_or(0) as f64;
    let total_notified: f64 = notified.values().map(|n| *n as f64).sum();
    let churn_cpu_s = w_cpu1 - w_cpu0;
    let cpu_per_notification_s = churn_cpu_s / total_notified.max(1.0);
    let nominal_rate = n_of("kube-proxy") / (syncs.max(1) as f64) / 2.0
        + n_of("venAgent") / (reverts.len().max(1) as f64) / 3.0;
    // The same, with what watch costs when nothing changes (timers, polls) kept apart:
    // that part does not grow with the churn.
    let idle_pct = (w_cpu2 - w_cpu1) / idle * 100.0;
    let churn_pct = churn_cpu_s / churn_wall * 100.0;
    let measured_rate = total_notified / churn_wall;
    let slope_estimate = idle_pct + (churn_pct - idle_pct) * nominal_rate / measured_rate.max(1.0);
    let report = serde_json::json!({
        "services": services,
        "duration_s": churn_wall,
        "idle_s": idle,
        "syncs": syncs,
        "reverts": reverts.len(),
        "reverts_detected": detected,
        "events": kinds,
        "probe_gaps": probe_gaps,
        "notifications_by_writer": notified,
        "watch": {
            "latency_internal_ms": {"p50": percentile(&mut internal.clone(), 50.0), "p99": percentile(&mut internal.clone(), 99.0), "n": internal.len()},
            "latency_commit_to_event_ms": {"p50": percentile(&mut external.clone(), 50.0), "p99": percentile(&mut external.clone(), 99.0), "n": external.len()},
            "detection_latency_ms": {"p50": percentile(&mut detection.clone(), 50.0), "p99": percentile(&mut detection.clone(), 99.0), "max": percentile(&mut detection, 100.0), "n": first_detection.len(), "about": "commit -> first foreign-change/fight/policy-change event of the generation (preliminary or complete)"},
            "revert_detection_latency_ms": {"p50": percentile(&mut revert_detection.clone(), 50.0), "p99": percentile(&mut revert_detection.clone(), 99.0), "max": percentile(&mut revert_detection, 100.0), "n": revert_detected, "about": "commit -> first foreign-change/fight event of each venAgent revert (preliminary or complete)"},
            "complete_event_latency_ms": {"p50": percentile(&mut complete.clone(), 50.0), "p99": percentile(&mut complete.clone(), 99.0), "max": percentile(&mut complete, 100.0), "n": first_complete.len(), "about": "commit -> first complete event of the generation, any kind"},
            "preliminary_events": preliminary,
            "probe_revert_first_to_newgen_ms": {"p50": percentile(&mut revert_spans.clone(), 50.0), "max": percentile(&mut revert_spans, 100.0)},
            "cpu_churn_pct": churn_cpu_s / churn_wall * 100.0,
            "cpu_us_per_notification": cpu_per_notification_s * 1e6,
            "cpu_pct_at_nominal_churn_estimate": {"pct": cpu_per_notification_s * nominal_rate * 100.0, "notifications_per_s": nominal_rate, "about": "cpu_us_per_notification x the notification rate of a full sync every 2 s and a revert every 3 s (measured notifications per sync and per revert)"},
            "cpu_pct_at_nominal_churn_idle_plus_slope": {"pct": slope_estimate, "measured_notifications_per_s": measured_rate, "about": "idle CPU + (churn CPU - idle CPU) x nominal rate / measured rate: the idle part does not grow with the churn"},
            "cpu_churn_pct_by_thread": threads1.iter().map(|(k, v)| (k.clone(), (v - threads0.get(k).copied().unwrap_or(0.0)) / churn_wall * 100.0)).collect::<HashMap<String, f64>>(),
            "cpu_idle_pct": (w_cpu2 - w_cpu1) / idle * 100.0,
            "peak_rss_mib": hwm_peak as f64 / 1024.0,
            "peak_rss_after_baseline_mib": baseline_hwm as f64 / 1024.0,
        },
        "naive": {
            "latency_commit_to_detection_ms": {"p50": percentile(&mut naive_lat.clone(), 50.0), "p99": percentile(&mut naive_lat.clone(), 99.0), "n": naive_lat.len()},
            "cpu_churn_pct": naive_cpu,
            "peak_rss_mib": naive_rss,
            "polls": polls.len(),
            "poll_ms_p50": percentile(&mut pm, 50.0),
        },
    });
    let text = serde_json::to_string_pretty(&report).unwrap();
    std::fs::File::create(out.join("report.json"))
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    println!("{text}");
}
