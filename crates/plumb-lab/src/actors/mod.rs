//! The lab's actors: real processes with the names of the programs they stand for.
//!
//! `lab up` hard-links (or copies) the plumb executable into the lab root under each
//! actor's name — `usr/local/bin/kube-proxy`, `opt/illumio_ven/bin/venAgent`, ... — so
//! `/proc/PID/comm` and `/proc/PID/exe` look like the real thing to `plumb watch` and
//! `plumb doctor`. At start the executable looks at its own name ([`dispatch_by_name`]) and
//! runs the matching actor with the rest of its command line (`--flag=value` style, like
//! the originals). `plumb lab actor NAME ...` runs one by hand.
//!
//! | actor | stands for | writes |
//! |---|---|---|
//! | [`kube_proxy`] | kube-proxy, iptables mode | rules via iptables-restore, /healthz /livez, klog on stderr |
//! | [`kubelet`] | kubelet + container runtime | its bootstrap chains, runs kube-proxy and install-cni, CRI pod logs, liveness probes |
//! | [`ven_agent`] | Illumio VEN | snapshot + revert of the firewall, tamper log lines |
//! | [`install_cni`] | Canal's install-cni | token request through 10.43.0.1:443, FATAL on timeout, CNI config on success |
//! | [`api_server`] | kube-apiserver endpoint | TLS :6443, /readyz /livez /version, TokenRequest |
//! | [`firewalld`] | firewalld, iptables backend | flush of every table and its zone chains at start and each reload |
//! | [`calico_node`] | calico-node (Felix, eBPF mode) | deletes kube-proxy's chains and hook rules every refresh |
//! | [`coredns`] | CoreDNS's kubernetes plugin | lists through 10.43.0.1:443 from a pod, logs failures, not ready |

pub mod api_server;
pub mod calico_node;
pub mod coredns;
pub mod firewalld;
pub mod install_cni;
pub mod kube_proxy;
pub mod kubelet;
pub mod ven_agent;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// An actor's executable name (its `comm`) and where it lives under the lab root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActorKind {
    /// File name, hence `comm`.
    pub name: &'static str,
    /// Path under the lab root.
    pub path: &'static str,
}

/// kube-proxy (a container's `/usr/local/bin/kube-proxy`).
pub const KUBE_PROXY: ActorKind = ActorKind {
    name: "kube-proxy",
    path: "usr/local/bin/kube-proxy",
};
/// kubelet (RKE2 extracts it to `/var/lib/rancher/rke2/bin`).
pub const KUBELET: ActorKind = ActorKind {
    name: "kubelet",
    path: "var/lib/rancher/rke2/bin/kubelet",
};
/// The Illumio-like agent.
pub const VEN_AGENT: ActorKind = ActorKind {
    name: "venAgent",
    path: "opt/illumio_ven/bin/venAgent",
};
/// Canal's install-cni.
pub const INSTALL_CNI: ActorKind = ActorKind {
    name: "install-cni",
    path: "opt/cni/bin/install-cni",
};
/// The API server endpoint.
pub const API_SERVER: ActorKind = ActorKind {
    name: "kube-apiserver",
    path: "usr/local/bin/kube-apiserver",
};

/// firewalld (RHEL's `/usr/sbin/firewalld`).
pub const FIREWALLD: ActorKind = ActorKind {
    name: "firewalld",
    path: "usr/sbin/firewalld",
};
/// calico-node (the calico/node image's `/usr/bin/calico-node`).
pub const CALICO_NODE: ActorKind = ActorKind {
    name: "calico-node",
    path: "usr/bin/calico-node",
};
/// CoreDNS (the coredns image's `/coredns`).
pub const COREDNS: ActorKind = ActorKind {
    name: "coredns",
    path: "coredns",
};

/// Every actor.
pub const ALL: [ActorKind; 8] = [
    KUBE_PROXY,
    KUBELET,
    VEN_AGENT,
    INSTALL_CNI,
    API_SERVER,
    FIREWALLD,
    CALICO_NODE,
    COREDNS,
];

/// Actors installed only where a scenario runs them (on other nodes nothing of them
/// exists for doctor to find).
pub const OPTIONAL: [ActorKind; 3] = [VEN_AGENT, FIREWALLD, CALICO_NODE];

/// If this executable is named like an actor, runs it and returns its exit code.
pub fn dispatch_by_name() -> Option<i32> {
    let mut args = std::env::args_os();
    let argv0 = args.next()?;
    let name = Path::new(&argv0).file_name()?.to_str()?.to_string();
    ALL.iter()
        .any(|a| a.name == name)
        .then(|| run(&name, args.collect()))
}

/// Runs actor `name` with `args`; returns its exit code.
pub fn run(name: &str, args: Vec<OsString>) -> i32 {
    let flags = match Flags::parse(args) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{name}: {e}");
            return 2;
        }
    };
    install_term_handler();
    let result = match name {
        "kube-proxy" => kube_proxy::main(&flags),
        "kubelet" => kubelet::main(&flags),
        "venAgent" => ven_agent::main(&flags),
        "install-cni" => install_cni::main(&flags),
        "kube-apiserver" => api_server::main(&flags),
        "firewalld" => firewalld::main(&flags),
        "calico-node" => calico_node::main(&flags),
        "coredns" => coredns::main(&flags),
        other => Err(format!("unknown actor {other:?}")),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{name}: {e}");
            1
        }
    }
}

/// `--key=value` / `--key value` / `--flag` arguments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Flags {
    values: BTreeMap<String, String>,
}

impl Flags {
    /// Parses arguments; positional arguments are refused.
    pub fn parse(args: Vec<OsString>) -> Result<Self, String> {
        let mut values = BTreeMap::new();
        let mut it = args
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .peekable();
        while let Some(a) = it.next() {
            let Some(key) = a.strip_prefix("--") else {
                return Err(format!("unexpected argument {a:?}"));
            };
            if let Some((k, v)) = key.split_once('=') {
                values.insert(k.to_string(), v.to_string());
            } else if it.peek().is_some_and(|n| !n.starts_with("--")) {
                values.insert(key.to_string(), it.next().unwrap_or_default());
            } else {
                values.insert(key.to_string(), "true".to_string());
            }
        }
        Ok(Self { values })
    }

    /// A string flag.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    /// A required string flag.
    pub fn req(&self, key: &str) -> Result<&str, String> {
        self.get(key).ok_or_else(|| format!("missing --{key}"))
    }

    /// A parsed flag with a default.
    pub fn parse_or<T: std::str::FromStr>(&self, key: &str, default: T) -> Result<T, String> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| format!("bad value for --{key}: {v:?}")),
        }
    }

    /// A duration flag in Go syntax (`30s`, `500ms`, `1m`, `1h`).
    pub fn duration_or(&self, key: &str, default: Duration) -> Result<Duration, String> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => parse_duration(v).ok_or_else(|| format!("bad duration for --{key}: {v:?}")),
        }
    }

    /// A boolean flag (`--x`, `--x=true`, `--x=false`).
    pub fn bool_or(&self, key: &str, default: bool) -> Result<bool, String> {
        self.parse_or(key, default)
    }
}

/// Parses `500ms`, `5s`, `1m`, `1h`, `1.5s`.
pub fn parse_duration(v: &str) -> Option<Duration> {
    let (num, mult) = if let Some(n) = v.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = v.strip_suffix('h') {
        (n, 3600.0)
    } else {
        return None;
    };
    let x: f64 = num.parse().ok()?;
    (x >= 0.0).then(|| Duration::from_secs_f64(x * mult))
}

/// Go's `time.Duration.String()` for the durations the actors log (`5s`, `1.5s`, `12.3ms`).
pub fn go_duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 1.0 {
        let t = format!("{s:.9}");
        format!("{}s", t.trim_end_matches('0').trim_end_matches('.'))
    } else if s >= 0.001 {
        let t = format!("{:.6}", s * 1000.0);
        format!("{}ms", t.trim_end_matches('0').trim_end_matches('.'))
    } else {
        format!("{}µs", d.as_micros())
    }
}

static TERM: AtomicBool = AtomicBool::new(false);

extern "C" fn on_term(_: libc::c_int) {
    TERM.store(true, Ordering::SeqCst);
}

fn install_term_handler() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGTERM, on_term as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_term as *const () as libc::sighandler_t);
    }
}

/// Whether SIGTERM/SIGINT arrived.
pub fn terminating() -> bool {
    TERM.load(Ordering::SeqCst)
}

/// Sleeps up to `d`, waking early on SIGTERM; returns false when terminating.
pub fn nap(d: Duration) -> bool {
    let end = std::time::Instant::now() + d;
    loop {
        if terminating() {
            return false;
        }
        let now = std::time::Instant::now();
        if now >= end {
            return true;
        }
        std::thread::sleep((end - now).min(Duration::from_millis(50)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_and_durations() {
        let f = Flags::parse(
            ["--a=1", "--b", "x", "--c", "--d=500ms"]
                .iter()
                .map(OsString::from)
                .collect(),
        )
        .unwrap();
        assert_eq!(f.get("a"), Some("1"));
        assert_eq!(f.get("b"), Some("x"));
        assert_eq!(f.bool_or("c", false), Ok(true));
        assert_eq!(
            f.duration_or("d", Duration::ZERO),
            Ok(Duration::from_millis(500))
        );
        assert_eq!(go_duration(Duration::from_secs(30)), "30s");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(go_duration(Duration::from_micros(12_300)), "12.3ms");
    }
}
