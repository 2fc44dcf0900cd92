//! Privileged: proves the generator prints exactly what the kernel and `iptables-save` print.
//!
//! Runs only as root with the nft variant of `iptables-restore`/`iptables-save` and `ip`
//! available; otherwise prints why it skipped. Every command runs inside a private network
//! namespace `plumb-t-kp-<pid>-<n>` (`ip netns exec`), never against the host's firewall; the
//! namespace is deleted by a Drop guard, also on panic. Run with `--test-threads=1` if other
//! privileged tests share the machine.

use plumb_kubeproxy::{
    GeneratorConfig, IptablesSaveOptions, KubeProxyRules, ProxierOptions, generate,
};
use plumb_os::netns::Netns;

/// A fresh private namespace (deleted on drop, also on panic).
fn netns() -> Netns {
    Netns::create("plumb-t-kp").expect("creating a test network namespace")
}

/// Runs `args` in `ns`, asserting success; returns stdout.
fn run(ns: &Netns, args: &[&str], stdin: Option<&str>) -> String {
    let (ok, out, err) = ns
        .exec(args[0], &args[1..], stdin)
        .unwrap_or_else(|e| panic!("{args:?} in {}: {e}", ns.name()));
    assert!(ok, "{args:?} in {} failed: {err}", ns.name());
    out
}

fn skip_reason() -> Option<String> {
    if !plumb_os::netns::can_create() {
        return Some("needs root and `ip` to create network namespaces".into());
    }
    ["iptables-nft-restore", "iptables-nft-save"]
        .into_iter()
        .find(|t| plumb_os::runner::which(t).is_none())
        .map(|t| format!("{t} not found"))
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
    let expected = rules.to_iptables_save(&IptablesSaveOptions::default());

    // a. The saved form restores and saves back byte for byte.
    let ns = netns();
    run(&ns, &["iptables-nft-restore"], Some(&expected));
    assert_same(
        &expected,
        &normalise(&run(&ns, &["iptables-nft-save"], None)),
        "save -> restore -> save",
    );
    let with_counters = rules.to_iptables_save(&IptablesSaveOptions {
        rule_counters: true,
        ..IptablesSaveOptions::default()
    });
    assert_same(
        &with_counters,
        &normalise(&run(&ns, &["iptables-nft-save", "-c"], None)),
        "save -c",
    );
    drop(ns);

    // b. kubelet/kube-proxy bootstrap, then kube-proxy's own full-sync payload with --noflush.
    let ns = netns();
    run(
        &ns,
        &["iptables-nft-restore", "--noflush"],
        Some(&rules.to_bootstrap_payload()),
    );
    run(
        &ns,
        &["iptables-nft-restore", "--noflush"],
        Some(&rules.to_restore_payload()),
    );
    assert_same(
        &expected,
        &normalise(&run(&ns, &["iptables-nft-save"], None)),
        "bootstrap + restore payload -> save",
    );
    // A second full sync on top changes nothing (kube-proxy's steady state).
    run(
        &ns,
        &["iptables-nft-restore", "--noflush"],
        Some(&rules.to_restore_payload()),
    );
    assert_same(
        &expected,
        &normalise(&run(&ns, &["iptables-nft-save"], None)),
        "second sync -> save",
    );
}

#[test]
fn generator_output_is_canonical_iptables_nft_save() {
    if let Some(reason) = skip_reason() {
        plumb_testkit::skip(&reason);
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
        plumb_testkit::skip(&reason);
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

/// What a recovered service says, without where it was read (line numbers differ
/// between a script and the kernel's listing of it).
fn service_facts(rs: &plumb_ruleset::Ruleset) -> Vec<String> {
    let maps = plumb_kubeproxy::recover::recover(rs);
    let mut out: Vec<String> = maps
        .iter()
        .flat_map(|m| &m.services)
        .map(|s| {
            let eps: Vec<String> = s
                .endpoints
                .iter()
                .map(|e| format!("{:?} {:?} {:?}", e.address(), e.probability(), e.local))
                .collect();
            // Set elements come back from the kernel in its own order.
            let sorted = |v: &[std::net::IpAddr]| {
                let mut v = v.to_vec();
                v.sort();
                v
            };
            format!(
                "{:?} {:?} {:?}:{:?} np={:?} ext={:?} lb={:?} ranges={:?} aff={:?} local={}/{} none={:?} eps={eps:?}",
                s.name,
                s.protocol,
                s.cluster_ip,
                s.port,
                s.node_ports,
                sorted(&s.external_ips),
                sorted(&s.load_balancer_ips),
                s.load_balancer_source_ranges,
                s.session_affinity_seconds,
                s.internal_traffic_local,
                s.external_traffic_local,
                s.no_endpoints,
            )
        })
        .collect();
    out.sort();
    out
}

/// kube-proxy's nftables transaction (the upstream proxier test's expected `nft -f`
/// input) read as a script gives the same service map as the kernel's listing after the
/// real `nft -f` applied it.
#[test]
fn nft_transaction_reads_like_the_kernel_listing_of_it() {
    if !plumb_testkit::privileged(&["ip", "nft"]) {
        return;
    }
    let Some((script, ordered)) = plumb_testkit::kube_proxy_nft_transaction() else {
        return;
    };
    let ns = netns();
    run(&ns, &["nft", "-f", "-"], Some(&ordered));
    let listing = run(&ns, &["nft", "list", "table", "ip", "kube-proxy"], None);
    let parse = |text: &str| {
        plumb_ruleset::parse_bytes(text.as_bytes(), &Default::default())
            .expect("parses")
            .ruleset
    };
    let from_script = service_facts(&parse(&script));
    let from_kernel = service_facts(&parse(&listing));
    assert_eq!(from_script.len(), 6, "{from_script:#?}");
    assert_eq!(from_script, from_kernel);
}
