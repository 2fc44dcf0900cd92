//! Privileged: the `plumb watch` binary end to end, in a private network namespace.
//!
//! - its JSON lines follow the contract (time, kind, table, chains, owner,
//!   actor{pid,comm,exe,unit}, latency_ms) and name the real writer;
//! - `--duration` ends it cleanly with a summary and exit code 1 (foreign changes);
//! - its /metrics pass `promtool check metrics` (Debian package `prometheus`;
//!   skipped with a reason when promtool is absent);
//! - it never writes to netfilter: the audit listener sees no NETFILTER_CFG record
//!   from its pid or from a child of it (audit is enabled for the test if it was off,
//!   and restored afterwards).
//!
//! Skipped with a reason when not root. Deadlines everywhere; cleanup on drop.

mod common;

use common::{T, Watch, http_get};
use plumb_kubeproxy::{GeneratorConfig, KubeProxyRules, ProxierOptions, generate};
use plumb_os::netns::Netns;
use plumb_watch::audit::{AUDIT_NETFILTER_CFG, AUDIT_SYSCALL, AuditListener, Record};
use plumb_watch::audit_control::AuditEnabled;
use plumb_watch::impersonate::{Flavor, Impersonator};
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn skip_reason() -> Option<String> {
    if !plumb_os::netns::can_create() {
        return Some("needs root and `ip` to create network namespaces".into());
    }
    ["xtables-nft-multi", "iptables-nft-save"]
        .into_iter()
        .find(|t| plumb_os::runner::which(t).is_none())
        .map(|t| format!("{t} not found"))
}

#[test]
fn watch_binary_reports_writers_serves_valid_metrics_and_never_writes() {
    if let Some(r) = skip_reason() {
        plumb_testkit::skip(&r);
        return;
    }
    let audit = match AuditEnabled::new() {
        Ok(g) => Some(g),
        Err(why) => {
            eprintln!("note: audit unavailable ({why}); the never-writes check is skipped");
            None
        }
    };
    // Collect every audit record while the test runs.
    let records: Arc<Mutex<Vec<Record>>> = Arc::default();
    let stop_audit = Arc::new(AtomicBool::new(false));
    let audit_thread = audit.as_ref().and_then(|_| {
        let mut l = AuditListener::open().ok()?;
        let (r, s) = (records.clone(), stop_audit.clone());
        Some(std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                if let Ok(recs) = l.receive() {
                    r.lock().unwrap().extend(recs);
                }
            }
        }))
    });

    let cluster = generate(&GeneratorConfig {
        services: 8,
        ..GeneratorConfig::default()
    })
    .unwrap();
    let rules = KubeProxyRules::new(&cluster, &ProxierOptions::default());
    let ns = Netns::create("plumb-t-watchcli").expect("netns");
    let actors = Impersonator::new().unwrap();
    actors.install("kube-proxy", Flavor::Nft).unwrap();
    actors.install("venAgent", Flavor::Nft).unwrap();
    let run = |name: &str, args: &[&str], stdin: &str| {
        let r = actors
            .run(
                ns.name(),
                name,
                "iptables-nft-restore",
                args,
                Some(stdin),
                T,
            )
            .unwrap();
        assert!(r.success, "{name}: {}", r.stderr);
        r
    };
    let kp_sync = || {
        run("kube-proxy", &["--noflush"], &rules.to_bootstrap_payload());
        run("kube-proxy", &["--noflush"], &rules.to_restore_payload())
    };
    kp_sync();

    let mut w = Watch::start(&["--netns", ns.name(), "--json", "--duration", "6"]);
    let watch_pid = w.pid();
    let ven = run(
        "venAgent",
        &[],
        "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\nCOMMIT\n",
    );
    let e = w.wait_event(
        &|v| v["kind"] == "foreign-change" && v["actor"]["pid"] == ven.pid,
        "foreign-change from venAgent",
    );
    for key in [
        "time",
        "kind",
        "table",
        "chains",
        "owner",
        "actor",
        "latency_ms",
    ] {
        assert!(e.get(key).is_some(), "{key} missing in {e}");
    }
    for key in ["pid", "comm", "exe", "unit"] {
        assert!(e["actor"].get(key).is_some(), "actor.{key} missing in {e}");
    }
    assert_eq!(e["actor"]["comm"], "venAgent");
    assert_eq!(e["owner"], "kube-proxy");
    assert_eq!(e["table"], "nat");
    assert!(e["latency_ms"].as_f64().is_some());
    let kp = kp_sync();
    w.wait_event(
        &|v| v["kind"] == "owner-change" && v["actor"]["pid"] == kp.pid,
        "owner-change from kube-proxy",
    );

    // Metrics: the foreign change is counted, and promtool accepts the document.
    let metrics = http_get(&w.addr, "/metrics")
        .unwrap_or_else(|e| panic!("GET /metrics from {}: {e}", w.addr));
    assert!(
        metrics.contains(
            "plumb_watch_foreign_changes_total{owner=\"kube-proxy\",actor=\"illumio-ven\"} 1"
        ),
        "{metrics}"
    );
    match plumb_os::runner::which("promtool") {
        None => plumb_testkit::skip("promtool not installed (Debian package prometheus)"),
        Some(promtool) => {
            let mut p = Command::new(promtool)
                .args(["check", "metrics"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            p.stdin
                .take()
                .unwrap()
                .write_all(metrics.as_bytes())
                .unwrap();
            let out = p.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "promtool check metrics failed:\n{}{}\n--- metrics ---\n{metrics}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    // --duration ends it with a summary and exit code 1 (foreign changes seen).
    let (status, rest) = w.wait_exit("plumb watch did not end after --duration");
    assert_eq!(status.code(), Some(1), "stderr: {rest}");
    let summary: serde_json::Value = serde_json::from_str(rest.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("summary is not JSON ({e}): {rest}"));
    assert!(
        summary["events"]["foreign-change"].as_u64() >= Some(1),
        "{summary}"
    );
    // The eBPF writer probe was loaded by the helper process (this executable again)
    // and attached, unless this build or kernel has no BPF at all.
    let probe = summary["probe"].as_str().unwrap_or_default();
    if probe.contains("built without") || probe.contains("no kernel BTF") {
        eprintln!("eBPF writer probe not checked: {probe}");
    } else {
        assert_eq!(probe, "attached", "{summary}");
    }

    // Never writes: no NETFILTER_CFG from plumb or its children (the dump tools).
    if let Some(t) = audit_thread {
        // Records are delivered asynchronously: wait for the last writer's (kube-proxy's
        // restore, after which watch ran to its end) before judging.
        let deadline = Instant::now() + T;
        let kp_pid = kp.pid.to_string();
        while !records
            .lock()
            .unwrap()
            .iter()
            .any(|r| r.kind == AUDIT_NETFILTER_CFG && r.get("pid") == Some(&kp_pid[..]))
        {
            assert!(
                Instant::now() < deadline,
                "kube-proxy's restore was not audited"
            );
            std::thread::park_timeout(Duration::from_millis(20));
        }
        stop_audit.store(true, Ordering::SeqCst);
        t.join().unwrap();
        let recs = records.lock().unwrap();
        let by_serial = |serial: u64, kind: u16| {
            recs.iter()
                .find(|r| r.serial == serial && r.kind == kind)
                .cloned()
        };
        let cfgs: Vec<&Record> = recs
            .iter()
            .filter(|r| r.kind == AUDIT_NETFILTER_CFG)
            .collect();
        assert!(
            cfgs.iter()
                .any(|r| r.get("pid") == Some(&ven.pid.to_string()[..])),
            "positive control: venAgent's writes were audited ({} records)",
            cfgs.len()
        );
        for r in &cfgs {
            let pid: Option<u32> = r.get("pid").and_then(|p| p.parse().ok());
            assert_ne!(
                pid,
                Some(watch_pid),
                "plumb watch wrote to netfilter: {r:?}"
            );
            if let Some(sys) = by_serial(r.serial, AUDIT_SYSCALL) {
                let ppid: Option<u32> = sys.get("ppid").and_then(|p| p.parse().ok());
                assert_ne!(
                    ppid,
                    Some(watch_pid),
                    "a child of plumb watch wrote: {r:?} {sys:?}"
                );
            }
        }
    }
    drop(audit);
}

/// SIGTERM (as systemd and kubelet send it) ends a watch cleanly: summary, exit 0
/// when nothing foreign happened.
#[test]
fn sigterm_ends_watch_with_a_summary() {
    if let Some(r) = skip_reason() {
        plumb_testkit::skip(&r);
        return;
    }
    let ns = Netns::create("plumb-t-watchterm").expect("netns");
    let mut w = Watch::start(&["--netns", ns.name()]);
    let ok = Command::new("kill")
        .args(["-TERM", &w.pid().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    let (status, rest) = w.wait_exit("plumb watch ignored SIGTERM");
    assert_eq!(status.code(), Some(0), "stderr: {rest}");
    assert!(
        rest.contains("plumb watch: ") && rest.contains("events"),
        "{rest}"
    );
}

/// A free loopback port (bound and released: the kernel does not hand it out again
/// at once).
fn free_port() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

/// What a client trying `addr` as fast as it can saw while `plumb watch` started:
/// attempts refused, and the answer to `GET /readyz` on each connection accepted.
#[derive(Default, Debug)]
struct Knocks {
    refused: usize,
    answers: Vec<String>,
}

/// Knocks on `addr` until a connection is accepted, `done` is set or [`T`] passes.
fn knock(addr: std::net::SocketAddr, done: Arc<AtomicBool>) -> std::thread::JoinHandle<Knocks> {
    use std::io::Read;
    std::thread::spawn(move || {
        let mut k = Knocks::default();
        let deadline = Instant::now() + T;
        while !done.load(Ordering::SeqCst) && Instant::now() < deadline {
            match std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
                Err(_) => k.refused += 1,
                Ok(mut s) => {
                    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                    let _ = s.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n");
                    let mut answer = String::new();
                    let _ = s.read_to_string(&mut answer);
                    k.answers.push(answer);
                    break;
                }
            }
        }
        k
    })
}

/// A watch that cannot start (its namespace does not exist) exits 2 and never
/// accepts a connection on its metrics address: a scrape target must not look healthy
/// for a watch that is not watching.
#[test]
fn a_watch_that_cannot_start_never_serves_metrics() {
    let addr = free_port();
    let missing = format!("plumb-t-missing-{}", std::process::id());
    assert!(!std::path::Path::new("/run/netns").join(&missing).exists());
    let done = Arc::new(AtomicBool::new(false));
    let knocker = knock(addr, done.clone());
    let out = Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(["watch", "--netns", &missing, "--metrics-addr"])
        .arg(addr.to_string())
        .stdin(Stdio::null())
        .output()
        .expect("running plumb watch");
    done.store(true, Ordering::SeqCst);
    let k = knocker.join().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.contains("cannot subscribe"), "{stderr}");
    assert!(!stderr.contains("metrics on"), "{stderr}");
    assert!(!stderr.contains("ready"), "{stderr}");
    assert!(k.answers.is_empty(), "connections accepted: {k:?}");
    assert!(k.refused > 0, "the knocker never ran");
}

/// `plumb watch` serves metrics only once it can watch: every connection its metrics
/// address accepts finds it ready (subscribed, baseline read), and the ready line on
/// stderr names the address. The baseline is a 1000-service ruleset, so that the
/// start takes a while.
#[test]
fn metrics_are_served_only_once_watch_is_ready() {
    if let Some(r) = skip_reason() {
        plumb_testkit::skip(&r);
        return;
    }
    let cluster = generate(&GeneratorConfig {
        services: 1000,
        ..GeneratorConfig::default()
    })
    .unwrap();
    let rules = KubeProxyRules::new(&cluster, &ProxierOptions::default());
    let ns = Netns::create("plumb-t-watchready").expect("netns");
    let actors = Impersonator::new().unwrap();
    actors.install("kube-proxy", Flavor::Nft).unwrap();
    let r = actors
        .run(
            ns.name(),
            "kube-proxy",
            "iptables-nft-restore",
            &[],
            Some(&rules.to_iptables_save(&Default::default())),
            T,
        )
        .unwrap();
    assert!(r.success, "{}", r.stderr);

    let addr = free_port();
    let done = Arc::new(AtomicBool::new(false));
    let knocker = knock(addr, done.clone());
    let mut child = common::Child(
        Command::new(env!("CARGO_BIN_EXE_plumb"))
            .args(["watch", "--netns", ns.name(), "--metrics-addr"])
            .arg(addr.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn plumb"),
    );
    let mut stderr = std::io::BufReader::new(child.0.stderr.take().unwrap());
    // The line that names the address.
    let mut first = String::new();
    std::io::BufRead::read_line(&mut stderr, &mut first).unwrap();
    assert!(first.contains(&format!("http://{addr}/")), "{first:?}");
    // The knocker stops at its first accepted connection (or after T).
    let k = knocker.join().unwrap();
    done.store(true, Ordering::SeqCst);
    assert!(k.refused > 0, "nothing knocked while watch started: {k:?}");
    assert!(!k.answers.is_empty(), "no connection accepted: {k:?}");
    for a in &k.answers {
        assert!(
            a.starts_with("HTTP/1.1 200") && a.ends_with("ready\n"),
            "a connection was accepted before watch was ready: {a:?}"
        );
    }
    assert!(
        first.starts_with("plumb watch: ready")
            && first.contains(&format!("http://{addr}/metrics")),
        "first line: {first:?}"
    );
    let ok = Command::new("kill")
        .args(["-TERM", &child.0.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    let deadline = Instant::now() + T;
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "plumb watch ignored SIGTERM");
        std::thread::park_timeout(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
}
