//! The live netlink reader against its oracle: corpus rulesets loaded into a private
//! network namespace with `iptables-nft-restore`; every iptables table the decoder
//! translates must be, line for line, the section `iptables-nft-save` prints for it
//! (so the model plumb builds from it is the model from the save tool). Tables it
//! cannot translate exactly must say why (and are then read with the save tool).
//! Privileged: root, iptables-nft; namespaces are private and deleted on drop.

mod common;

use plumb_collect::nft_netlink::{self, TableRead};
use plumb_os::netns::Netns;
use std::collections::BTreeMap;

/// `*table` ... `COMMIT` sections of an iptables-save text by table name, without
/// comment lines.
fn sections(save: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    for line in save.lines() {
        if line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('*') {
            current = Some((name.to_string(), format!("{line}\n")));
        } else if let Some((_, text)) = current.as_mut() {
            text.push_str(line);
            text.push('\n');
            if line == "COMMIT" {
                let (name, text) = current.take().unwrap();
                out.insert(name, text);
            }
        }
    }
    out
}

/// (translated and equal, fallback reasons) for one ruleset loaded in `ns`.
fn compare(ns: &Netns, label: &str, diffs: &mut Vec<String>) -> (usize, Vec<String>) {
    compare_in(ns.name(), label, diffs, |tool| {
        let (ok, out, err) = ns.exec(tool, &[], None).expect(tool);
        assert!(ok, "{label}: {tool} failed: {err}");
        out
    })
}

/// [`compare`] in namespace `name`, `save(tool)` running a save tool there.
fn compare_in(
    name: &str,
    label: &str,
    diffs: &mut Vec<String>,
    save: impl Fn(&str) -> String,
) -> (usize, Vec<String>) {
    let (_, tables) = nft_netlink::read(Some(name), None).expect("netlink read");
    let mut equal = 0;
    let mut fallbacks = Vec::new();
    for (family, tool) in [(2u8, "iptables-nft-save"), (10, "ip6tables-nft-save")] {
        let out = save(tool);
        let expected = sections(&out);
        let fam = nft_netlink::family_of(family);
        for t in tables.iter().filter(|t| t.family == fam) {
            match &t.read {
                TableRead::Save(text) => {
                    let want = expected
                        .get(&t.name)
                        .unwrap_or_else(|| panic!("{label}: {tool} has no table {}", t.name));
                    if text != want.as_str() {
                        let diff: Vec<String> = want
                            .lines()
                            .zip(text.lines())
                            .filter(|(a, b)| a != b)
                            .take(5)
                            .map(|(a, b)| format!("  save:    {a}\n  netlink: {b}"))
                            .collect();
                        diffs.push(format!(
                            "{label}: table {} ({tool}) differs ({} vs {} lines):\n{}",
                            t.name,
                            want.lines().count(),
                            text.lines().count(),
                            diff.join("\n")
                        ));
                        continue;
                    }
                    equal += 1;
                }
                TableRead::Fallback(reason) => {
                    fallbacks.push(format!("{label}: {} {}: {reason}", tool, t.name))
                }
                // iptables-nft restored these tables: it never writes what makes a
                // table foreign.
                TableRead::Foreign(reason) => {
                    diffs.push(format!("{label}: {} called foreign: {reason}", t.name))
                }
                TableRead::Native(_) | TableRead::Listing(_) => {}
            }
        }
    }
    (equal, fallbacks)
}

#[test]
fn netlink_tables_equal_iptables_nft_save_on_the_corpus() {
    if !plumb_testkit::privileged(&["iptables-nft-restore", "ip6tables-nft-restore"]) {
        return;
    }
    let Some(corpus) = plumb_testkit::corpus_dir() else {
        return;
    };
    let restore = common::Restore {
        tools: ["iptables-nft-restore", "ip6tables-nft-restore"],
        netns: "plumb-netlink-oracle",
        noise: |l| l.ends_with("(nf_tables): "),
    };
    let (mut tables, mut fallbacks, mut diffs) = (0, Vec::new(), Vec::new());
    let (loaded, refused) = common::load_each(&corpus, &restore, |ns, label| {
        let (equal, fb) = compare(ns, label, &mut diffs);
        tables += equal;
        fallbacks.extend(fb);
    });
    common::report(&loaded, tables, &fallbacks, &refused, &diffs);
}

/// kube-proxy rulesets from the generator (every feature: NodePorts, affinity with
/// `recent`, Local policy, ...) translate too.
#[test]
fn generated_kube_proxy_rulesets_equal_iptables_nft_save() {
    if !plumb_testkit::privileged(&["iptables-nft-restore"]) {
        return;
    }
    let mut diffs = Vec::new();
    for (label, text) in common::generated_kube_proxy_rulesets() {
        let ns = Netns::create("plumb-netlink-oracle").expect("netns");
        let (ok, _, err) = ns
            .exec("iptables-nft-restore", &[], Some(&text))
            .expect("restore");
        assert!(ok, "{label}: {err}");
        let (equal, fallbacks) = compare(&ns, label, &mut diffs);
        eprintln!("{label}: {equal} tables equal; fallbacks: {fallbacks:?}");
        assert!(equal > 0);
    }
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

fn drop_locations(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            m.remove("location");
            m.values_mut().for_each(drop_locations);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(drop_locations),
        _ => {}
    }
}

fn drop_counters(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            m.remove("counters");
            m.values_mut().for_each(drop_counters);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(drop_counters),
        _ => {}
    }
}

/// The one live reader: the ruleset `collect_live_rulesets` builds (netlink, the save
/// tool for tables it cannot translate) is the ruleset the save tools give, as JSON
/// (tables, chains, rules, their text and lines, diagnostics).
#[test]
fn the_live_reader_gives_the_model_of_the_save_tools() {
    if !plumb_testkit::privileged(&["iptables-nft-restore", "nft"]) {
        return;
    }
    let Some(corpus) = plumb_testkit::corpus_dir() else {
        return;
    };
    let files = [
        "kube-proxy-iptables/real-nodes/k3s-node_iptables-save-c_with-counters_dns-no-endpoints.iptables-save",
        "real-world/iptables-save/k3s-1.30-pi_kube-router-netpol_flannel_iptables-nft-1.8.10.iptables-save",
        "kube-proxy-iptables/k8s-proxier-test/TestGetChainLinesMultipleTables.userspace-era.iptables-save",
    ];
    for file in files {
        let text = std::fs::read_to_string(corpus.join(file)).expect("corpus file");
        let ns = Netns::create("plumb-netlink-oracle").expect("netns");
        let (ok, _, err) = ns
            .exec("iptables-nft-restore", &[], Some(&text))
            .expect("restore");
        assert!(ok, "{file}: {err}");
        // A rule the decoder does not know (`-m length`): its table is read with the
        // save tool, and the read says so.
        let (ok, _, err) = ns
            .exec(
                "iptables-nft",
                &[
                    "-t", "mangle", "-A", "FORWARD", "-m", "length", "--length", "100", "-j",
                    "ACCEPT",
                ],
                None,
            )
            .expect("iptables-nft");
        assert!(ok, "{err}");
        // A native table beside them, read with `nft list table`.
        let (ok, _, err) = ns
            .exec("nft", &["-f", "-"], Some("table inet plumbtest {\n chain c {\n  type filter hook input priority 10; policy accept;\n  tcp dport 22 accept\n }\n}\n"))
            .expect("nft");
        assert!(ok, "{err}");
        let runner = plumb_os::runner::SystemRunner;
        let live = plumb_collect::collect_live_rulesets(&runner, Some(ns.name()));
        let tools = plumb_collect::collect_rulesets(&runner, Some(ns.name()));
        assert!(
            live.tools
                .iter()
                .any(|t| t.tool == "ip netlink" && t.status == "ok"),
            "{file}: {:?}",
            live.tools
        );
        // Native tables come from `nft list table` instead of `nft list ruleset`: the
        // same model, but their lines count from their own listing.
        let json = |rs: &plumb_ruleset::Ruleset| {
            let mut v = serde_json::to_value(rs).expect("json");
            // The tools' path also parses `nft list ruleset`, whose view of the
            // iptables-nft tables (dropped) leaves notes on their xt expressions; the
            // netlink path never reads that view.
            if let Some(d) = v["diagnostics"].as_array_mut() {
                d.retain(|d| {
                    !d["message"]
                        .as_str()
                        .unwrap_or("")
                        .starts_with("iptables-nft compat expression")
                });
            }
            for t in v["tables"].as_array_mut().into_iter().flatten() {
                if t["backend"] == "nftables" {
                    drop_locations(t);
                }
            }
            v
        };
        let (a, b) = (json(&live.ruleset), json(&tools.ruleset));
        if a != b {
            let (a, b) = (a.to_string(), b.to_string());
            let at = a
                .bytes()
                .zip(b.bytes())
                .position(|(x, y)| x != y)
                .unwrap_or(0);
            panic!(
                "{file}: models differ at byte {at}:\n netlink: {}\n tools:   {}",
                &a[at.saturating_sub(200)..(at + 200).min(a.len())],
                &b[at.saturating_sub(200)..(at + 200).min(b.len())]
            );
        }
        let fallback = live
            .tools
            .iter()
            .find(|t| {
                t.detail
                    .contains("table ip mangle read with iptables-nft-save")
            })
            .unwrap_or_else(|| panic!("{file}: the fallback is not reported: {:?}", live.tools));
        assert!(
            fallback
                .detail
                .contains("match length revision 0 not decoded"),
            "{}",
            fallback.detail
        );
        eprintln!(
            "{file}: equal models; {:?}",
            live.tools
                .iter()
                .map(|t| format!("{} {} {}", t.tool, t.status, t.detail))
                .collect::<Vec<_>>()
        );
    }
}

/// Every extension and native expression the decoder knows, with their options and
/// negations, in both families: each table translated must equal the save tool's.
/// Every iptables extension the readers decode, IPv4 (shared with `legacy_oracle.rs`).
const EXTENSIONS_V4: &str = include_str!("data/extensions-v4.rules");

/// The IPv6 forms (shared with `legacy_oracle.rs`).
const EXTENSIONS_V6: &str = include_str!("data/extensions-v6.rules");

#[test]
fn every_decoded_extension_equals_iptables_nft_save() {
    if !plumb_testkit::privileged(&["iptables-nft-restore", "ip6tables-nft-restore"]) {
        return;
    }
    let ns = Netns::create("plumb-netlink-oracle").expect("netns");
    for (tool, text) in [
        ("iptables-nft-restore", EXTENSIONS_V4),
        ("ip6tables-nft-restore", EXTENSIONS_V6),
    ] {
        let (ok, _, err) = ns.exec(tool, &[], Some(text)).expect(tool);
        assert!(ok, "{tool}: {err}");
    }
    let mut diffs = Vec::new();
    let (equal, fallbacks) = compare(&ns, "extensions", &mut diffs);
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
    assert!(fallbacks.is_empty(), "{fallbacks:?}");
    assert_eq!(equal, 7);
}

/// `plumb collect` on a node read over netlink: the bundle's `nft list ruleset` entry
/// holds the native tables (each as `nft list table` prints it, decoded over netlink),
/// and the ruleset read back from the bundle is the ruleset read live.
#[test]
fn a_bundle_collected_over_netlink_reads_back_as_the_live_ruleset() {
    use plumb_collect::bundle_writer::write_bundle;
    use plumb_collect::facts::GatherOptions;
    use plumb_collect::node::{LiveNode, open_bundle};
    if !plumb_testkit::privileged(&["iptables-nft-restore", "nft"]) {
        return;
    }
    let Some(corpus) = plumb_testkit::corpus_dir() else {
        return;
    };
    let text = std::fs::read_to_string(corpus.join(
        "kube-proxy-iptables/real-nodes/k3s-node_iptables-save-c_with-counters_dns-no-endpoints.iptables-save",
    ))
    .expect("corpus file");
    let ns = Netns::create("plumb-netlink-oracle").expect("netns");
    let (ok, _, err) = ns
        .exec("iptables-nft-restore", &[], Some(&text))
        .expect("restore");
    assert!(ok, "{err}");
    let (ok, _, err) = ns
        .exec(
            "nft",
            &["-f", "-"],
            Some("table ip plumbtest {\n chain c {\n  type filter hook input priority 10; policy accept;\n  tcp dport 22 accept\n }\n}\n"),
        )
        .expect("nft");
    assert!(ok, "{err}");
    let scratch = plumb_testkit::Scratch::new("plumb-netlink-collect");
    let root = scratch.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let live = LiveNode::new(
        plumb_os::runner::SystemRunner,
        Some(ns.name().to_string()),
        &root,
    )
    .with_netlink();
    let options = GatherOptions {
        probe_timeout: std::time::Duration::from_millis(300),
        ..Default::default()
    };
    let out = scratch.path().join("bundle.tar.gz");
    let manifest = write_bundle(&live, &out, &options).expect("bundle");
    let nft = manifest
        .entries
        .iter()
        .find(|e| e.path == "commands/nft_list_ruleset")
        .expect("nft entry");
    assert!(
        nft.source
            .contains("table ip plumbtest decoded over netlink"),
        "{}",
        nft.source
    );
    let bundle = open_bundle(&out).expect("bundle reads back");
    let from_bundle = plumb_collect::rulesets::read_rulesets(&bundle);
    let from_live = plumb_collect::rulesets::read_rulesets(&live);
    // Chain counters move between the two reads (the collection's probes send
    // packets), so they are left out.
    let tables = |rs: &plumb_ruleset::Ruleset| {
        let mut v = serde_json::to_value(&rs.tables).expect("json");
        drop_locations(&mut v);
        drop_counters(&mut v);
        v.to_string()
    };
    assert!(
        tables(&from_bundle.ruleset) == tables(&from_live.ruleset),
        "the bundle's ruleset is not the live one"
    );
    assert!(
        from_live
            .ruleset
            .tables
            .iter()
            .any(|t| &*t.name == "plumbtest")
    );
}

/// A table with an iptables name holding what iptables-nft never writes (written by
/// nft, with a set) is read with `nft list table`: iptables-nft-save 1.8.9 prints its
/// `tcp dport { 22, 80 } accept` as `-A INPUT -p tcp -j ACCEPT`, a rule that accepts
/// every port. The read says why.
#[test]
fn an_iptables_named_table_iptables_nft_does_not_write_is_read_with_nft() {
    if !plumb_testkit::privileged(&["iptables-nft-save", "nft"]) {
        return;
    }
    let ns = Netns::create("plumb-netlink-oracle").expect("netns");
    let script = "table ip filter {\n chain INPUT {\n  type filter hook input priority 0; policy accept;\n  tcp dport { 22, 80 } accept\n }\n}\n";
    let (ok, _, err) = ns.exec("nft", &["-f", "-"], Some(script)).expect("nft");
    assert!(ok, "{err}");
    let runner = plumb_os::runner::SystemRunner;
    let live = plumb_collect::collect_live_rulesets(&runner, Some(ns.name()));
    assert_eq!(live.ruleset.tables.len(), 1, "{:?}", live.tools);
    let t = &live.ruleset.tables[0];
    assert_eq!(t.backend, plumb_ruleset::Backend::Nftables);
    let rule = t.chains[0].rules[0].text.as_str();
    assert!(rule.contains("tcp dport { 22, 80 } accept"), "{rule}");
    let read = live
        .tools
        .iter()
        .find(|t| t.tool == "nft list table ip filter")
        .unwrap_or_else(|| panic!("{:?}", live.tools));
    assert!(
        read.detail.contains("which iptables-nft does not write"),
        "{}",
        read.detail
    );
}

/// Manual (ignored): the oracle on a namespace that already holds a ruleset, e.g. the
/// 10k-service x 5-endpoint benchmark namespace:
/// `PLUMB_NETLINK_NETNS=NAME cargo test -p plumb-collect --test netlink_oracle -- --ignored`.
#[test]
#[ignore]
fn an_existing_namespace_equals_iptables_nft_save() {
    let Ok(name) = std::env::var("PLUMB_NETLINK_NETNS") else {
        plumb_testkit::skip("PLUMB_NETLINK_NETNS is not set");
        return;
    };
    let ns = ExistingNetns(name);
    let mut diffs = Vec::new();
    let (equal, fallbacks) = compare_in(&ns.0, "existing", &mut diffs, |tool| {
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", &ns.0, tool])
            .output()
            .expect(tool);
        assert!(out.status.success(), "{tool} failed");
        String::from_utf8_lossy(&out.stdout).into_owned()
    });
    eprintln!("{equal} tables equal, fallbacks: {fallbacks:?}");
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

struct ExistingNetns(String);
