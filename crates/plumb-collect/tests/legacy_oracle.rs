//! The legacy getsockopt reader against its oracle: corpus rulesets loaded into a
//! private network namespace with `iptables-legacy-restore`; every table the decoder
//! translates must be, line for line, the section `iptables-legacy-save -c` prints
//! for it (counters included), so the model plumb builds from it is the model from
//! the save tool. Tables it cannot translate exactly must say why (they are then read
//! with the save tool). Privileged: root, iptables-legacy; namespaces are private and
//! deleted on drop.

mod common;

use plumb_collect::xt_legacy::{self, LegacyTableRead};
use plumb_os::netns::Netns;
use plumb_ruleset::Family;
use std::collections::BTreeMap;
use std::path::Path;

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

/// (tables translated and equal, fallback reasons) for the rulesets loaded in `ns`.
fn compare(ns: &Netns, label: &str, diffs: &mut Vec<String>) -> (usize, Vec<String>) {
    let mut equal = 0;
    let mut fallbacks = Vec::new();
    for (family, tool) in [
        (Family::Ip, "iptables-legacy-save"),
        (Family::Ip6, "ip6tables-legacy-save"),
    ] {
        let tables = xt_legacy::read(Some(ns.name()), family, None, true).expect("legacy read");
        let (ok, out, err) = ns.exec(tool, &["-c"], None).expect(tool);
        assert!(ok, "{label}: {tool} failed: {err}");
        let expected = sections(&out);
        let names: Vec<&String> = expected.keys().collect();
        let mut read: Vec<&String> = tables.iter().map(|t| &t.name).collect();
        read.sort();
        assert_eq!(
            names, read,
            "{label}: {tool} and the reader list other tables"
        );
        for t in &tables {
            match &t.read {
                LegacyTableRead::Save(text) => {
                    let want = &expected[&t.name];
                    if text != want {
                        let diff: Vec<String> = want
                            .lines()
                            .zip(text.lines())
                            .filter(|(a, b)| a != b)
                            .take(5)
                            .map(|(a, b)| format!("  save:   {a}\n  reader: {b}"))
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
                LegacyTableRead::Fallback(reason) => {
                    fallbacks.push(format!("{label}: {tool} {}: {reason}", t.name))
                }
            }
        }
    }
    (equal, fallbacks)
}

#[test]
fn legacy_tables_equal_iptables_legacy_save_on_the_corpus() {
    if !plumb_testkit::privileged(&["iptables-legacy-restore", "ip6tables-legacy-restore"]) {
        return;
    }
    let Some(corpus) = plumb_testkit::corpus_dir() else {
        return;
    };
    let restore = common::Restore {
        tools: ["iptables-legacy-restore", "ip6tables-legacy-restore"],
        netns: "plumb-legacy-oracle",
        noise: |_| false,
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
fn generated_kube_proxy_rulesets_equal_iptables_legacy_save() {
    if !plumb_testkit::privileged(&["iptables-legacy-restore"]) {
        return;
    }
    let mut diffs = Vec::new();
    for (label, text) in common::generated_kube_proxy_rulesets() {
        let ns = Netns::create("plumb-legacy-oracle").expect("netns");
        let (ok, _, err) = ns
            .exec("iptables-legacy-restore", &[], Some(&text))
            .expect("restore");
        assert!(ok, "{label}: {err}");
        let (equal, fallbacks) = compare(&ns, label, &mut diffs);
        eprintln!("{label}: {equal} tables equal; fallbacks: {fallbacks:?}");
        assert!(equal > 0);
        assert!(fallbacks.is_empty(), "{fallbacks:?}");
    }
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

/// Every extension the readers decode, IPv4: the rules `netlink_oracle.rs` loads, less
/// `-m limit --limit 1/day`, which the kernel refuses in a legacy table.
fn extensions_v4() -> String {
    const SHARED: &str = include_str!("data/extensions-v4.rules");
    let legacy: Vec<&str> = SHARED
        .lines()
        .filter(|l| *l != "-A INPUT -m limit --limit 1/day -j X")
        .collect();
    assert_eq!(
        legacy.len() + 1,
        SHARED.lines().count(),
        "the 1/day rule is in the file"
    );
    legacy.join("\n") + "\n"
}

/// The IPv6 forms (shared with `netlink_oracle.rs`).
const EXTENSIONS_V6: &str = include_str!("data/extensions-v6.rules");

/// Legacy-only forms (`--nflog-range`, `-f`, counters on rules).
const LEGACY_V4: &str = r#"*raw
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A PREROUTING -j NFLOG --nflog-range 64
-A PREROUTING -p tcp -f -j ACCEPT
[7:700] -A OUTPUT -o lo -j ACCEPT
COMMIT
"#;

#[test]
fn every_decoded_extension_equals_iptables_legacy_save() {
    if !plumb_testkit::privileged(&["iptables-legacy-restore", "ip6tables-legacy-restore"]) {
        return;
    }
    let ns = Netns::create("plumb-legacy-oracle").expect("netns");
    let v4 = extensions_v4();
    for (tool, text) in [
        ("iptables-legacy-restore", v4.as_str()),
        ("ip6tables-legacy-restore", EXTENSIONS_V6),
    ] {
        let (ok, _, err) = ns.exec(tool, &[], Some(text)).expect(tool);
        assert!(ok, "{tool}: {err}");
    }
    let mut diffs = Vec::new();
    let (equal, fallbacks) = compare(&ns, "extensions", &mut diffs);
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
    assert!(fallbacks.is_empty(), "{fallbacks:?}");
    assert_eq!(equal, 7);
    let ns = Netns::create("plumb-legacy-oracle").expect("netns");
    let (ok, _, err) = ns
        .exec("iptables-legacy-restore", &["-c"], Some(LEGACY_V4))
        .expect("restore");
    assert!(ok, "{err}");
    let (equal, fallbacks) = compare(&ns, "legacy forms", &mut diffs);
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
    assert!(fallbacks.is_empty(), "{fallbacks:?}");
    assert_eq!(equal, 1);
}

/// Manual (ignored): writes the unit tests' fixtures (`src/xt_legacy/fixtures/`): the
/// extension rulesets' tables as the kernel gives them, framed, beside the text
/// `iptables-legacy-save -c` prints for each.
/// `PLUMB_WRITE_LEGACY_FIXTURES=1 cargo test -p plumb-collect --test legacy_oracle -- --ignored`.
#[test]
#[ignore]
fn write_fixtures() {
    if std::env::var("PLUMB_WRITE_LEGACY_FIXTURES").is_err() {
        plumb_testkit::skip("PLUMB_WRITE_LEGACY_FIXTURES is not set");
        return;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/xt_legacy/fixtures");
    std::fs::create_dir_all(&dir).unwrap();
    let ns = Netns::create("plumb-legacy-oracle").expect("netns");
    let v4 = extensions_v4();
    for (tool, text) in [
        ("iptables-legacy-restore", v4.as_str()),
        ("ip6tables-legacy-restore", EXTENSIONS_V6),
    ] {
        let (ok, _, err) = ns.exec(tool, &[], Some(text)).expect(tool);
        assert!(ok, "{tool}: {err}");
    }
    for (family, xf, tool, tag) in [
        (
            Family::Ip,
            plumb_os::xtables::XtFamily::Ipv4,
            "iptables-legacy-save",
            "v4",
        ),
        (
            Family::Ip6,
            plumb_os::xtables::XtFamily::Ipv6,
            "ip6tables-legacy-save",
            "v6",
        ),
    ] {
        let _ = family;
        let (_, out, _) = ns.exec(tool, &["-c"], None).expect(tool);
        let expected = sections(&out);
        for t in plumb_os::xtables::read_tables(Some(ns.name()), xf, None).expect("read") {
            if !["filter", "nat"].contains(&t.name.as_str()) {
                continue;
            }
            let stem = format!("{tag}-{}", t.name);
            std::fs::write(dir.join(format!("{stem}.bin")), xt_legacy::frame(xf, &t)).unwrap();
            std::fs::write(dir.join(format!("{stem}.save")), &expected[&t.name]).unwrap();
        }
    }
}

/// The one live reader on a legacy node: the ruleset `collect_live_rulesets` builds
/// (getsockopt, the save tool for a table it cannot translate) is the ruleset the save
/// tools give, as JSON (tables, chains, rules, their text and lines, diagnostics), and
/// the table read with the tool is reported with why.
#[test]
fn the_live_reader_gives_the_model_of_the_save_tools() {
    if !plumb_testkit::privileged(&["iptables-legacy-restore", "ip6tables-legacy-restore"]) {
        return;
    }
    let Some(corpus) = plumb_testkit::corpus_dir() else {
        return;
    };
    for file in [
        "kube-proxy-iptables/real-nodes/k3s-node_iptables-save-c_with-counters_dns-no-endpoints.iptables-save",
        "kube-proxy-iptables/k8s-proxier-test/TestGetChainLinesMultipleTables.userspace-era.iptables-save",
    ] {
        let text = std::fs::read_to_string(corpus.join(file)).expect("corpus file");
        let ns = Netns::create("plumb-legacy-oracle").expect("netns");
        let (ok, _, err) = ns
            .exec("iptables-legacy-restore", &[], Some(&text))
            .expect("restore");
        assert!(ok, "{file}: {err}");
        let (ok, _, err) = ns
            .exec("ip6tables-legacy-restore", &[], Some(EXTENSIONS_V6))
            .expect("restore");
        assert!(ok, "{file}: {err}");
        // A rule the decoder does not know (`-m length`): its table is read with the
        // save tool, and the read says so.
        let (ok, _, err) = ns
            .exec(
                "iptables-legacy",
                &[
                    "-t", "mangle", "-A", "FORWARD", "-m", "length", "--length", "100", "-j",
                    "ACCEPT",
                ],
                None,
            )
            .expect("iptables-legacy");
        assert!(ok, "{err}");
        let runner = plumb_os::runner::SystemRunner;
        let live = plumb_collect::collect_live_rulesets(&runner, Some(ns.name()));
        let tools = plumb_collect::collect_rulesets(&runner, Some(ns.name()));
        for t in ["iptables-legacy getsockopt", "ip6tables-legacy getsockopt"] {
            assert!(
                live.tools.iter().any(|o| o.tool == t && o.status == "ok"),
                "{file}: {t}: {:?}",
                live.tools
            );
        }
        let (a, b) = (
            serde_json::to_value(&live.ruleset).expect("json"),
            serde_json::to_value(&tools.ruleset).expect("json"),
        );
        assert!(
            a["tables"].as_array().is_some_and(|t| t.len() >= 4),
            "{file}: {a}"
        );
        if a != b {
            let (a, b) = (a.to_string(), b.to_string());
            let at = a
                .bytes()
                .zip(b.bytes())
                .position(|(x, y)| x != y)
                .unwrap_or(0);
            panic!(
                "{file}: models differ at byte {at}:\n getsockopt: {}\n tools:      {}",
                &a[at.saturating_sub(200)..(at + 200).min(a.len())],
                &b[at.saturating_sub(200)..(at + 200).min(b.len())]
            );
        }
        let fallback = live
            .tools
            .iter()
            .find(|t| {
                t.detail
                    .contains("table ip mangle read with iptables-legacy-save")
            })
            .unwrap_or_else(|| panic!("{file}: the fallback is not reported: {:?}", live.tools));
        assert!(
            fallback
                .detail
                .contains("match length revision 0 not decoded"),
            "{}",
            fallback.detail
        );
    }
}

/// A namespace with no legacy table: the live reader reads none, runs no save tool
/// and creates none (the list stays empty).
#[test]
fn a_namespace_without_legacy_tables_stays_without() {
    if !plumb_testkit::privileged(&["iptables-legacy-save"]) {
        return;
    }
    let ns = Netns::create("plumb-legacy-oracle").expect("netns");
    let runner = plumb_os::runner::SystemRunner;
    let live = plumb_collect::collect_live_rulesets(&runner, Some(ns.name()));
    let legacy: Vec<_> = live
        .tools
        .iter()
        .filter(|t| t.tool.contains("legacy"))
        .collect();
    assert_eq!(legacy.len(), 2, "{legacy:?}");
    assert!(
        legacy
            .iter()
            .all(|t| t.status == "skipped" && t.detail.contains("lists no tables")),
        "{legacy:?}"
    );
    let (_, names, _) = ns
        .exec("cat", &["/proc/net/ip_tables_names"], None)
        .expect("cat");
    assert_eq!(names, "");
}

/// Manual (ignored): the oracle on a namespace that already holds legacy tables, e.g.
/// the 10k-service x 5-endpoint benchmark namespace:
/// `PLUMB_LEGACY_NETNS=NAME cargo test -p plumb-collect --test legacy_oracle -- --ignored existing`.
#[test]
#[ignore]
fn an_existing_namespace_equals_iptables_legacy_save() {
    let Ok(name) = std::env::var("PLUMB_LEGACY_NETNS") else {
        plumb_testkit::skip("PLUMB_LEGACY_NETNS is not set");
        return;
    };
    let mut equal = 0;
    for (family, tool) in [
        (Family::Ip, "iptables-legacy-save"),
        (Family::Ip6, "ip6tables-legacy-save"),
    ] {
        let start = std::time::Instant::now();
        let tables = xt_legacy::read(Some(&name), family, None, true).expect("legacy read");
        let took = start.elapsed();
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", &name, tool, "-c"])
            .output()
            .expect(tool);
        assert!(out.status.success(), "{tool} failed");
        let expected = sections(&String::from_utf8_lossy(&out.stdout));
        for t in &tables {
            match &t.read {
                LegacyTableRead::Save(text) => {
                    assert!(*text == expected[&t.name], "{tool} {} differs", t.name);
                    equal += 1;
                }
                LegacyTableRead::Fallback(why) => eprintln!("{tool} {}: fallback: {why}", t.name),
            }
        }
        eprintln!(
            "{tool}: {} tables read and decoded in {took:?}",
            tables.len()
        );
    }
    eprintln!("{equal} tables equal");
}
