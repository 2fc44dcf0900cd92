//! Shared harness for privileged watch tests: a private netns, renamed iptables
//! binaries (plumb_watch::impersonate), kube-proxy state from plumb-kubeproxy's
//! generator, and a watcher on a thread whose events can be awaited with deadlines.
//!
//! The lab's scenarios (real UFW, the kube-proxy emulator, the reverting agent) are
//! driven through `plumb watch` in plumb-cli's `watch_lab.rs`; these tests use
//! hand-made actors to reach states the scenarios do not.

#![allow(dead_code)]

use plumb_kubeproxy::{GeneratorConfig, KubeProxyRules, ProxierOptions, generate};
use plumb_os::netns::Netns;
use plumb_watch::impersonate::{Flavor, Impersonator, Ran};
use plumb_watch::metrics::Metrics;
use plumb_watch::{Event, WatchOptions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

pub const DEADLINE: Duration = Duration::from_secs(20);
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);

pub fn skip_reason() -> Option<String> {
    if !plumb_os::netns::can_create() {
        return Some("needs root and `ip` to create network namespaces".into());
    }
    for t in ["xtables-nft-multi", "iptables-nft-save"] {
        if plumb_os::runner::which(t).is_none() {
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

pub use plumb_watch::audit_control::AuditEnabled;
