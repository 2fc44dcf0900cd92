//! Privileged: proves the canonical printer against the real kernel and the real
//! iptables. Each corpus dump is loaded with `iptables-restore` into a private
//! network namespace (no links, no routes), dumped with `iptables-save`, and
//! compared with plumb's print of the original: identical modulo counters.
//! Also proves `plumb ruleset show --netns` reads what was loaded.
//!
//! Skips with a printed reason when not root or the tools are missing. Run serially
//! (kernel state): the CI command passes `--test-threads=1`.

use plumb_os::netns::{Netns, can_create};
use plumb_os::runner::which;
use plumb_ruleset::iptables::canonical::{PrintOptions, save_text};
use plumb_ruleset::{Family, ParseOptions, Ruleset, parse_bytes};
use std::path::PathBuf;

fn corpus() -> Option<PathBuf> {
    let dir = std::env::var_os("PLUMB_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus")
        });
    dir.is_dir().then_some(dir)
}

fn ready(tools: &[&str]) -> bool {
    if !can_create() {
        plumb_testkit::skip("needs root and iproute2 to create network namespaces");
        return false;
    }
    if let Some(t) = tools.iter().find(|t| which(t).is_none()) {
        plumb_testkit::skip(&format!("{t} not installed"));
        return false;
    }
    true
}

fn parse(text: &str, family: Family) -> Ruleset {
    let opts = ParseOptions {
        family: Some(family),
        ..Default::default()
    };
    parse_bytes(text.as_bytes(), &opts).expect("parse").ruleset
}

/// iptables-save text normalised for comparison: no comments or counters, and per
/// table the chain declarations sorted (legacy sorts user chains, nft keeps creation
/// order) with each chain's rules in order.
fn normalise(text: &str, family: Family) -> String {
    let rs = parse(text, family);
    let mut out = String::new();
    let mut tables: Vec<_> = rs.tables.iter().collect();
    tables.sort_by(|a, b| a.name.cmp(&b.name));
    for t in tables {
        let one = Ruleset {
            tables: vec![t.clone()],
            ..Default::default()
        };
        let printed = save_text(&one, PrintOptions { counters: false });
        // The kernel creates every built-in chain even when a dump does not declare it;
        // an empty ACCEPT built-in carries no information, so it is left out.
        let mut decls: Vec<&str> = printed
            .lines()
            .filter(|l| l.starts_with(':'))
            .filter(|l| {
                let name = l[1..].split(' ').next().unwrap_or("");
                let empty = t.chain(name).is_none_or(|c| c.rules.is_empty());
                !(l.contains(" ACCEPT [") && empty)
            })
            .collect();
        decls.sort();
        let mut chains: Vec<_> = t.chains.iter().map(|c| c.name.to_string()).collect();
        chains.sort();
        out.push_str(&format!("*{}\n{}\n", t.name, decls.join("\n")));
        for c in chains {
            let prefix = format!("-A {c} ");
            for l in printed.lines().filter(|l| l.starts_with(&prefix)) {
                out.push_str(l);
                out.push('\n');
            }
        }
    }
    out
}

struct Outcome {
    agreed: usize,
    total: usize,
    skipped: Vec<String>,
    disagreements: Vec<String>,
}

fn round_trip(files: &[(PathBuf, Family)], restore: &str, save: &str) -> Outcome {
    let mut o = Outcome {
        agreed: 0,
        total: 0,
        skipped: Vec::new(),
        disagreements: Vec::new(),
    };
    for (path, family) in files {
        let original = std::fs::read_to_string(path).unwrap();
        let ours = parse(&original, *family);
        let ours_text = save_text(&ours, PrintOptions { counters: false });
        let ns = Netns::create("plumb-t-rt").expect("create netns");
        let (ok, _, err) = ns.exec(restore, &[], Some(&ours_text)).unwrap();
        if !ok {
            // Extensions this kernel lacks (e.g. -m time, ipt_ULOG) or hostnames.
            o.skipped.push(format!(
                "{}: {}",
                path.display(),
                err.lines().next().unwrap_or("")
            ));
            continue;
        }
        o.total += 1;
        let (_, kernel, _) = ns.exec(save, &[], None).unwrap();
        let a = normalise(&ours_text, *family);
        let b = normalise(&kernel, *family);
        if a == b {
            o.agreed += 1;
        } else {
            let diff = a
                .lines()
                .zip(b.lines())
                .find(|(x, y)| x != y)
                .map(|(x, y)| format!("plumb:  {x}\n      kernel: {y}"))
                .unwrap_or_else(|| "line counts differ".into());
            o.disagreements
                .push(format!("{}:\n      {diff}", path.display()));
        }
    }
    o
}

fn corpus_dumps(c: &std::path::Path) -> Vec<(PathBuf, Family)> {
    let mut files = Vec::new();
    for sub in [
        "kube-proxy-iptables/real-nodes",
        "general-iptables-save/diekmann-Iptables_Semantics",
    ] {
        let mut v: Vec<_> = std::fs::read_dir(c.join(sub))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        v.sort();
        for p in v {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if name.contains(".S.") || name.contains("README") {
                continue;
            }
            let family = if name.contains("ip6") {
                Family::Ip6
            } else {
                Family::Ip
            };
            files.push((p, family));
        }
    }
    files
}

fn check(restore_v4: &str, save_v4: &str, restore_v6: &str, save_v6: &str, label: &str) {
    let Some(c) = corpus() else {
        plumb_testkit::skip("corpus not found");
        return;
    };
    let files = corpus_dumps(&c);
    let (v4, v6): (Vec<_>, Vec<_>) = files.into_iter().partition(|(_, f)| *f == Family::Ip);
    let mut a = round_trip(&v4, restore_v4, save_v4);
    let b = round_trip(&v6, restore_v6, save_v6);
    a.agreed += b.agreed;
    a.total += b.total;
    a.skipped.extend(b.skipped);
    a.disagreements.extend(b.disagreements);
    println!(
        "{label}: {}/{} dumps print exactly as the kernel's iptables-save",
        a.agreed, a.total
    );
    for s in &a.skipped {
        println!("  not loadable here: {s}");
    }
    for d in &a.disagreements {
        println!("  DIFFERS {d}");
    }
    assert!(a.total >= 10, "too few dumps could be loaded: {}", a.total);
    assert!(
        a.disagreements.is_empty(),
        "{} dumps differ",
        a.disagreements.len()
    );
}

#[test]
fn corpus_dumps_round_trip_through_iptables_nft() {
    if !ready(&[
        "iptables-nft-restore",
        "iptables-nft-save",
        "ip6tables-nft-restore",
    ]) {
        return;
    }
    check(
        "iptables-nft-restore",
        "iptables-nft-save",
        "ip6tables-nft-restore",
        "ip6tables-nft-save",
        "iptables-nft",
    );
}

#[test]
fn corpus_dumps_round_trip_through_iptables_legacy() {
    if !ready(&[
        "iptables-legacy-restore",
        "iptables-legacy-save",
        "ip6tables-legacy-restore",
    ]) {
        return;
    }
    check(
        "iptables-legacy-restore",
        "iptables-legacy-save",
        "ip6tables-legacy-restore",
        "ip6tables-legacy-save",
        "iptables-legacy",
    );
}

#[test]
fn ruleset_show_reads_a_namespace() {
    if !ready(&["iptables-nft-restore"]) {
        return;
    }
    let ns = Netns::create("plumb-t-show").unwrap();
    let payload = "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\nCOMMIT\n";
    let (ok, _, err) = ns.exec("iptables-nft-restore", &[], Some(payload)).unwrap();
    assert!(ok, "{err}");
    let c = plumb_collect::collect_rulesets(&plumb_os::runner::SystemRunner, Some(ns.name()));
    let nat = c
        .ruleset
        .table(Family::Ip, "nat")
        .expect("nat table read from the namespace");
    assert_eq!(nat.backend, plumb_ruleset::Backend::IptablesNft);
    assert!(nat.chain("KUBE-SERVICES").is_some());
    // The namespace has no legacy tables: the legacy dump must not have run.
    let legacy = c
        .tools
        .iter()
        .find(|t| t.tool == "iptables-legacy-save")
        .unwrap();
    assert_eq!(legacy.status, "skipped", "{:?}", legacy);
}

/// Facts of a network namespace standing for a node: its kube-proxy rules, its sysctls,
/// and the network probes run from inside it (setns on a probe thread).
#[test]
fn facts_of_a_namespace_include_rules_sysctls_and_probes_from_inside() {
    if !ready(&["iptables-nft-restore", "sysctl", "ss"]) {
        return;
    }
    use plumb_collect::facts::{GatherOptions, gather};
    use plumb_collect::node::LiveNode;
    use plumb_facts::ConnectOutcome;
    let ns = Netns::create("plumb-t-facts").unwrap();
    let cluster = plumb_kubeproxy::generate(&plumb_kubeproxy::GeneratorConfig {
        services: 3,
        ..Default::default()
    })
    .unwrap();
    let save = plumb_kubeproxy::KubeProxyRules::new(&cluster, &Default::default())
        .to_iptables_save(&Default::default());
    let (ok, _, err) = ns.exec("iptables-nft-restore", &[], Some(&save)).unwrap();
    assert!(ok, "{err}");
    let node = LiveNode::new(
        plumb_os::runner::SystemRunner,
        Some(ns.name().to_string()),
        "/",
    );
    let options = GatherOptions {
        probe_timeout: std::time::Duration::from_millis(500),
        ..Default::default()
    };
    let f = gather(&node, &options);
    let rs = f.ruleset.value().expect("rules read inside the namespace");
    let nat = rs.table(Family::Ip, "nat").unwrap();
    assert!(nat.chain("KUBE-SERVICES").is_some());
    // The namespace's own settings, not the host's: a fresh netns forwards nothing.
    assert_eq!(f.sysctl("net.ipv4.ip_forward"), Some("0"));
    // Probes ran inside: nothing listens on 10256 there, and 10.43.0.1 has no route.
    assert!(
        f.kube_proxy_healthz.value().is_none(),
        "{:?}",
        f.kube_proxy_healthz
    );
    let c = f.clusterip_connect.value().expect("connect attempted");
    assert_eq!(c.target, "10.43.0.1:443");
    assert_eq!(c.outcome, ConnectOutcome::Unreachable, "{c:?}");
    // The API endpoint came from kube-proxy's DNAT for default/kubernetes:https.
    let endpoint = plumb_collect::facts::kubernetes_endpoint(rs).expect("kubernetes endpoint");
    assert!(
        f.api_local_connect
            .source()
            .unwrap()
            .contains(&endpoint.to_string())
    );
}
