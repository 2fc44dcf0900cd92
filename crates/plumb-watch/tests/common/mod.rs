//! Shared harness for privileged watch tests: a private netns, renamed iptables
//! binaries (plumb_watch::impersonate), kube-proxy state from plumb-kubeproxy's
//! generator, and a watcher on a thread whose events can be awaited with deadlines.
//!
//! TODO(lab, issue 4): when `plumb lab` lands, add scenario tests that drive its
//! `security-agent-revert`, `healthy` (kube-proxy emulator, one minute, zero
//! foreign-change), `ufw-active` (real UFW) and legacy scenarios through this same
//! `Watching` harness instead of the hand-made actors below.

#![allow(dead_code)]

use plumb_collect::netns::Netns;
use plumb_kubeproxy::{GeneratorConfig, KubeProxyRules, ProxierOptions, generate};
use plumb_watch::impersonate::{Flavor, Impersonator, Ran};
use plumb_watch::metrics::Metrics;
use plumb_watch::{Event, WatchOptions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

pub const DEADLINE: Duration = Duration::from_secs(20);
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);

pub fn skip_reason() -> Option<String> {
    if !plumb_collect::netns::can_create() {
        return Some("needs root and `ip` to create network namespaces".into());
    }
    for t in ["xtables-nft-multi", "iptables-nft-save"] {
        if plumb_collect::runner::which(t).is_none() {
            return Some(format!("{t} not found"));
        }
    }
    None
}

/// kube-proxy's bootstrap and full-sync payloads for a small generated cluster.
pub struct KubeProxyState {
    pub bootstrap: String,
    pub sync: String,
    pub saved: String,
}

pub fn kube_proxy_state(services: usize) -> KubeProxyState {
    let cluster = generate(&GeneratorConfig {
        services,
        ..GeneratorConfig::default()
    })
    .expect("generating a cluster");
    let rules = KubeProxyRules::new(&cluster, &ProxierOptions::default());
    KubeProxyState {
        bootstrap: rules.to_bootstrap_payload(),
        sync: rules.to_restore_payload(),
        saved: rules.to_iptables_save(&Default::default()),
    }
}

/// A namespace with renamed writers.
pub struct Lab {
    pub ns: Netns,
    pub actors: Impersonator,
}

impl Lab {
    pub fn new(names: &[&str]) -> Lab {
        let ns = Netns::create("plumb-t-watch").expect("creating a test netns");
        let actors = Impersonator::new().expect("actor dir");
        for n in names {
            actors.install(n, Flavor::Nft).expect("installing actor");
        }
        Lab { ns, actors }
    }

    /// Runs `name applet args` in the namespace; asserts success.
    pub fn run(&self, name: &str, applet: &str, args: &[&str], stdin: Option<&str>) -> Ran {
        let r = self
            .actors
            .run(self.ns.name(), name, applet, args, stdin, RUN_TIMEOUT)
            .unwrap_or_else(|e| panic!("{name} {applet} {args:?}: {e}"));
        assert!(r.success, "{name} {applet} {args:?} failed: {}", r.stderr);
        r
    }

    /// kube-proxy (renamed binary) restores its bootstrap and full sync (--noflush).
    pub fn kube_proxy_sync(&self, kp: &KubeProxyState) -> Ran {
        self.run(
            "kube-proxy",
            "iptables-nft-restore",
            &["--noflush"],
            Some(&kp.bootstrap),
        );
        self.run(
            "kube-proxy",
            "iptables-nft-restore",
            &["--noflush"],
            Some(&kp.sync),
        )
    }

    /// The security agent restores its pre-Kubernetes nat and filter tables.
    pub fn agent_revert(&self, agent: &str) -> Ran {
        self.run(
            agent,
            "iptables-nft-restore",
            &[],
            Some(&plumb_watch::impersonate::pre_kubernetes_payload(&["nat"])),
        )
    }
}

/// A watcher running on a thread; its events are collected.
pub struct Watching {
    pub stop: Arc<AtomicBool>,
    pub events: Arc<(Mutex<Vec<Event>>, Condvar)>,
    pub metrics: Metrics,
    handle: Option<std::thread::JoinHandle<plumb_watch::Summary>>,
}

impl Watching {
    pub fn start(netns: &str) -> Watching {
        Self::start_with(WatchOptions {
            netns: Some(netns.to_string()),
            ..WatchOptions::default()
        })
    }

    pub fn start_with(mut opts: WatchOptions) -> Watching {
        let stop = Arc::new(AtomicBool::new(false));
        let ready = Arc::new(AtomicBool::new(false));
        opts.ready = Some(ready.clone());
        let events: Arc<(Mutex<Vec<Event>>, Condvar)> = Arc::default();
        let metrics = Metrics::new();
        let (s, e, m) = (stop.clone(), events.clone(), metrics.clone());
        let handle = std::thread::spawn(move || {
            plumb_watch::watch(&opts, &m, s, &mut |ev| {
                let (lock, cv) = &*e;
                lock.lock().unwrap().push(ev.clone());
                cv.notify_all();
            })
            .expect("watch failed to start")
        });
        let deadline = Instant::now() + DEADLINE;
        while !ready.load(Ordering::SeqCst) {
            assert!(
                Instant::now() < deadline,
                "watch not ready within {DEADLINE:?}"
            );
            assert!(!handle.is_finished(), "watch ended before it was ready");
            std::thread::yield_now();
            std::thread::park_timeout(Duration::from_millis(10));
        }
        Watching {
            stop,
            events,
            metrics,
            handle: Some(handle),
        }
    }

    /// Waits (condition variable, deadline) until `pred` holds for some event after
    /// index `from`; returns its index.
    pub fn wait_for(&self, from: usize, what: &str, pred: impl Fn(&Event) -> bool) -> usize {
        let (lock, cv) = &*self.events;
        let deadline = Instant::now() + DEADLINE;
        let mut guard = lock.lock().unwrap();
        loop {
            if let Some(i) = guard.iter().skip(from).position(&pred) {
                return from + i;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "no {what} event within {DEADLINE:?}; events: {:#?}",
                guard.iter().map(|e| e.human()).collect::<Vec<_>>()
            );
            guard = cv.wait_timeout(guard, left).unwrap().0;
        }
    }

    pub fn snapshot(&self) -> Vec<Event> {
        self.events.0.lock().unwrap().clone()
    }

    pub fn len(&self) -> usize {
        self.events.0.lock().unwrap().len()
    }

    pub fn finish(mut self) -> (Vec<Event>, plumb_watch::Summary) {
        self.stop.store(true, Ordering::SeqCst);
        let summary = self.handle.take().unwrap().join().expect("watch thread");
        (self.snapshot(), summary)
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Enables kernel audit for a test if it is disabled, and restores the previous
/// state on drop (also on panic). Audit state is machine-global: other sessions see
/// it, so it is changed only as long as the test needs and only from off to on.
/// Sends AUDIT_GET/AUDIT_SET with only the `enabled` bit in the mask; never registers
/// an audit daemon (no AUDIT_STATUS_PID). Test-only: plumb itself never does this.
pub struct AuditEnabled {
    was_enabled: u32,
}

const AUDIT_GET: u16 = 1000;
const AUDIT_SET: u16 = 1001;

fn audit_request(kind: u16, payload: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut s = netlink_sys::Socket::new(netlink_sys::protocols::NETLINK_AUDIT)?;
    s.bind_auto()?;
    s.connect(&netlink_sys::SocketAddr::new(0, 0))?;
    let len = 16 + payload.len() as u32;
    let mut msg = Vec::new();
    msg.extend_from_slice(&len.to_ne_bytes());
    msg.extend_from_slice(&kind.to_ne_bytes());
    msg.extend_from_slice(&(1u16 | 4).to_ne_bytes()); // NLM_F_REQUEST | NLM_F_ACK
    msg.extend_from_slice(&1u32.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    msg.extend_from_slice(payload);
    s.send(&msg, 0)?;
    let mut replies = Vec::new();
    for _ in 0..2 {
        let mut buf = vec![0u8; 8192];
        let n = s.recv(&mut &mut buf[..], 0)?;
        buf.truncate(n);
        for m in plumb_watch::netlink::messages(&buf) {
            if m.kind == 2 {
                let err = i32::from_ne_bytes(m.payload[..4].try_into().unwrap());
                if err != 0 {
                    return Err(std::io::Error::from_raw_os_error(-err));
                }
                if kind == AUDIT_SET {
                    return Ok(Vec::new());
                }
            } else if m.kind == AUDIT_GET {
                replies = m.payload.to_vec();
            }
        }
        if !replies.is_empty() {
            break;
        }
    }
    Ok(replies)
}

/// `enabled` from AUDIT_GET (0 off, 1 on, 2 locked).
pub fn audit_enabled() -> std::io::Result<u32> {
    let status = audit_request(AUDIT_GET, &[])?;
    status
        .get(4..8)
        .map(|b| u32::from_ne_bytes(b.try_into().unwrap()))
        .ok_or_else(|| std::io::Error::other("short audit status"))
}

fn audit_set_enabled(v: u32) -> std::io::Result<()> {
    let mut status = vec![0u8; 40];
    status[0..4].copy_from_slice(&1u32.to_ne_bytes()); // AUDIT_STATUS_ENABLED
    status[4..8].copy_from_slice(&v.to_ne_bytes());
    audit_request(AUDIT_SET, &status).map(|_| ())
}

impl AuditEnabled {
    /// Err with a reason when audit cannot be enabled here.
    pub fn new() -> Result<AuditEnabled, String> {
        let was = audit_enabled().map_err(|e| format!("AUDIT_GET: {e}"))?;
        if was == 0 {
            audit_set_enabled(1).map_err(|e| format!("AUDIT_SET enabled=1: {e}"))?;
        }
        Ok(AuditEnabled { was_enabled: was })
    }
}

impl Drop for AuditEnabled {
    fn drop(&mut self) {
        if self.was_enabled == 0 {
            let _ = audit_set_enabled(0);
        }
    }
}
