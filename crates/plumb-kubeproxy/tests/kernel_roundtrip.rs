//! Privileged: proves the generator prints exactly what the kernel and `iptables-save` print.
//!
//! Runs only as root with the nft variant of `iptables-restore`/`iptables-save` and `ip`
//! available; otherwise prints why it skipped. Every command runs inside a private network
//! namespace `plumb-t-kp-<pid>-<n>` (`ip netns exec`), never against the host's firewall; the
//! namespace is deleted by a Drop guard, also on panic. Run with `--test-threads=1` if other
//! privileged tests share the machine.

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use plumb_kubeproxy::{GeneratorConfig, KubeProxyRules, ProxierOptions, SaveOptions, generate};

static NEXT: AtomicUsize = AtomicUsize::new(0);

struct Netns(String);

impl Netns {
    fn new() -> Self {
        let name = format!(
            "plumb-t-kp-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        );
        let status = Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .expect("running ip netns add");
        assert!(status.success(), "ip netns add {name} failed");
        Netns(name)
    }

    fn exec(&self, args: &[&str], stdin: Option<&str>) -> String {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.0])
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {args:?} in {}: {e}", self.0));
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .expect("writing stdin");
        }
        let out = child.wait_with_output().expect("waiting for child");
        assert!(
            out.status.success(),
            "{args:?} in {} failed: {}\n{}",
            self.0,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8 output")
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn skip_reason() -> Option<String> {
    // SAFETY-free check of the effective uid through /proc, no libc needed.
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1));
    if euid != Some("0") {
        return Some("not running as root".into());
    }
    for tool in ["ip", "iptables-nft-restore", "iptables-nft-save"] {
        if Command::new(tool).arg("--version").output().is_err()
            && Command::new(tool).arg("-V").output().is_err()
        {
            return Some(format!("{tool} not found"));
        }
    }
    None
}

/// Drops `#` lines and rewrites counters to `[0:0]`.
fn normalise(dump: &str) -> String {
    let mut out = String::with_capacity(dump.len());
    for line in dump.lines().filter(|l| !l.starts_with('#')) {
        if let Some(rest) = line.strip_prefix(':') {
            // :CHAIN POLICY [p:b]
            if let Some(i) = rest.rfind(" [") {
                out.push(':');
                out.push_str(&rest[..i]);
                out.push_str(" [0:0]\n");
                continue;
            }
        }
        if line.starts_with('[')
            && let Some(i) = line.find("] ")
        {
            out.push_str("[0:0] ");
            out.push_str(&line[i + 2..]);
            out.push('\n');
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn assert_same(expected: &str, actual: &str, what: &str) {
    if expected == actual {
        return;
    }
    let (e, a): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    let first = e
        .iter()
        .zip(&a)
        .position(|(x, y)| x != y)
        .unwrap_or(e.len().min(a.len()));
    panic!(
        "{what}: generator and kernel differ at line {} ({} vs {} lines)\n generator: {:?}\n    kernel: {:?}",
        first + 1,
        e.len(),
        a.len(),
        e.get(first),
        a.get(first)
    );
}

fn check(config: &GeneratorConfig, options: &ProxierOptions) {
    let cluster = generate(config).expect("generating cluster");
    let rules = KubeProxyRules::new(&cluster, options);
    let expected = rules.to_iptables_save(&SaveOptions::default());

    // a. The saved form restores and saves back byte for byte.
    let ns = Netns::new();
    ns.exec(&["iptables-nft-restore"], Some(&expected));
    assert_same(
        &expected,
        &normalise(&ns.exec(&["iptables-nft-save"], None)),
        "save -> restore -> save",
    );
    let with_counters = rules.to_iptables_save(&SaveOptions {
        rule_counters: true,
        ..SaveOptions::default()
    });
    assert_same(
        &with_counters,
        &normalise(&ns.exec(&["iptables-nft-save", "-c"], None)),
        "save -c",
    );
    drop(ns);

    // b. kubelet/kube-proxy bootstrap, then kube-proxy's own full-sync payload with --noflush.
    let ns = Netns::new();
    ns.exec(
        &["iptables-nft-restore", "--noflush"],
        Some(&rules.to_bootstrap_payload()),
    );
    ns.exec(
        &["iptables-nft-restore", "--noflush"],
        Some(&rules.to_restore_payload()),
    );
    assert_same(
        &expected,
        &normalise(&ns.exec(&["iptables-nft-save"], None)),
        "bootstrap + restore payload -> save",
    );
    // A second full sync on top changes nothing (kube-proxy's steady state).
    ns.exec(
        &["iptables-nft-restore", "--noflush"],
        Some(&rules.to_restore_payload()),
    );
    assert_same(
        &expected,
        &normalise(&ns.exec(&["iptables-nft-save"], None)),
        "second sync -> save",
    );
}

#[test]
fn generator_output_is_canonical_iptables_nft_save() {
    if let Some(reason) = skip_reason() {
        eprintln!("skip kernel_roundtrip: {reason}");
        return;
    }
    // All features: NodePorts, LoadBalancers with and without source ranges, external IPs,
    // ClientIP affinity, Local policies, services without endpoints, UDP.
    let config = GeneratorConfig::all_features(20, 3);
    let cluster = generate(&config).unwrap();
    let has = |f: &dyn Fn(&plumb_kubeproxy::ServicePort) -> bool| cluster.services.iter().any(f);
    assert!(has(&|s| s.node_port.is_some()));
    assert!(has(
        &|s| !s.load_balancer_source_ranges.is_empty() && !s.endpoints.is_empty()
    ));
    assert!(has(&|s| !s.external_ips.is_empty()));
    assert!(has(
        &|s| s.session_affinity.is_some() && !s.endpoints.is_empty()
    ));
    assert!(has(
        &|s| s.external_policy_local && s.endpoints.iter().any(|e| e.is_local)
    ));
    assert!(has(&|s| s.external_policy_local
        && !s.endpoints.is_empty()
        && s.endpoints.iter().all(|e| !e.is_local)));
    assert!(has(&|s| s.endpoints.is_empty()));
    check(&config, &ProxierOptions::default());
}

#[test]
fn other_proxier_options_are_canonical_too() {
    if let Some(reason) = skip_reason() {
        eprintln!("skip kernel_roundtrip: {reason}");
        return;
    }
    let config = GeneratorConfig {
        seed: 7,
        ..GeneratorConfig::all_features(30, 5)
    };
    // Large cluster mode (no endpoint comments), --masquerade-all, no localhost NodePorts,
    // liberal conntrack, another mark bit, no --random-fully.
    let options = ProxierOptions {
        masquerade_bit: 15,
        masquerade_all: true,
        localhost_nodeports: false,
        random_fully: false,
        conntrack_tcp_liberal: true,
        large_cluster_threshold: 10,
    };
    check(&config, &options);
}
