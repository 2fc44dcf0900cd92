//! The native-table decoder against its oracle, the local `nft list table` (Debian
//! 12's nft 1.0.6): kube-proxy's nftables-mode rulesets (the corpus's, the
//! generator's with every feature) and the corpus's other nft listings are loaded into
//! a private network namespace with `nft -f`; every native table the netlink reader
//! decodes must be, byte for byte, what `nft list table FAMILY NAME` prints for it (no
//! normalisation), and the kube-proxy service maps recovered from both texts equal.
//! A table it does not decode must say why (and is then read with nft), never print
//! a different text. Privileged: root and nft; namespaces are private and deleted on
//! drop.

use plumb_collect::nft_netlink::{self, TableRead};
use plumb_os::netns::Netns;
use std::path::PathBuf;

/// The corpus root (`plumb_testkit::corpus_dir`).
fn corpus() -> PathBuf {
    plumb_testkit::corpus_dir().expect("the corpus (PLUMB_CORPUS or /work/shared/corpus)")
}

/// (decoded and equal, fallback reasons, differences) for the ruleset in `ns`.
fn compare(ns: &str, label: &str) -> (usize, Vec<String>, Vec<String>) {
    let (_, tables) = nft_netlink::read(Some(ns), None).expect("netlink read");
    let (mut equal, mut fallbacks, mut diffs) = (0, Vec::new(), Vec::new());
    for t in &tables {
        let family = t.family.map_or("unknown", |f| f.as_str());
        match &t.read {
            TableRead::Listing(text) => {
                let out = std::process::Command::new("ip")
                    .args(["netns", "exec", ns, "nft", "list", "table", family, &t.name])
                    .output()
                    .expect("nft list table");
                assert!(out.status.success(), "{label}: nft list table failed");
                let want = String::from_utf8_lossy(&out.stdout);
                if *text == want {
                    equal += 1;
                    let (a, b) = (
                        plumb_ruleset::nft::parse_text(text),
                        plumb_ruleset::nft::parse_text(&want),
                    );
                    assert_eq!(
                        plumb_kubeproxy::recover::recover(&a),
                        plumb_kubeproxy::recover::recover(&b),
                        "{label}: service maps differ"
                    );
                } else {
                    let first = want
                        .lines()
                        .zip(text.lines())
                        .enumerate()
                        .filter(|(_, (a, b))| a != b)
                        .take(3)
                        .map(|(i, (a, b))| {
                            format!("  line {}\n  nft:     {a}\n  netlink: {b}", i + 1)
                        })
                        .collect::<Vec<_>>();
                    diffs.push(format!(
                        "{label}: table {family} {} differs ({} vs {} lines):\n{}",
                        t.name,
                        want.lines().count(),
                        text.lines().count(),
                        first.join("\n")
                    ));
                }
            }
            TableRead::Native(why) => {
                assert!(!why.is_empty(), "{label}: a fallback without a reason");
                fallbacks.push(format!("{family} {}: {why}", t.name));
            }
            _ => {}
        }
    }
    (equal, fallbacks, diffs)
}

/// Loads `text` with `nft -f -` into a fresh namespace and compares.
fn load_and_compare(label: &str, text: &str) -> (usize, Vec<String>, Vec<String>) {
    let ns = Netns::create("plumb-native-oracle").expect("netns");
    let (ok, _, err) = ns.exec("nft", &["-f", "-"], Some(text)).expect("nft");
    if !ok {
        return (
            0,
            vec![format!("{label}: nft refused it: {err}")],
            Vec::new(),
        );
    }
    compare(ns.name(), label)
}

/// kube-proxy's nftables mode: the upstream proxier test's transaction and the
/// generator's with every feature (affinity, NodePorts, firewalls, no-endpoint
/// services, ...) decode to exactly nft's listing.
#[test]
fn kube_proxy_nftables_tables_equal_nft_list_table() {
    if !plumb_testkit::privileged(&["nft"]) {
        return;
    }
    let config = plumb_kubeproxy::GeneratorConfig::all_features(2000, 3);
    let cluster = plumb_kubeproxy::generate(&config).expect("generator");
    let generated = plumb_kubeproxy::nft_transaction(&cluster, &Default::default());
    let proxier = corpus().join(
        "kube-proxy-nftables/k8s-proxier-test/TestOverallNFTablesRules.expected.nft-transaction",
    );
    let proxier = std::fs::read_to_string(proxier).expect("corpus");
    let mut diffs = Vec::new();
    for (label, text) in [
        ("generated 2000x3 all features", generated.as_str()),
        ("proxier test", proxier.as_str()),
    ] {
        let (equal, fallbacks, d) = load_and_compare(label, text);
        eprintln!("{label}: {equal} tables equal; fallbacks: {fallbacks:?}");
        assert!(fallbacks.is_empty(), "{label}: {fallbacks:?}");
        assert_eq!(equal, 1, "{label}");
        diffs.extend(d);
    }
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

/// The corpus's kube-proxy listings and other nft listings (firewalld, flannel,
/// iptables-nft tables as nft lists them, ...): each native table is decoded to nft's
/// text or falls back with a reason, never a different text.
#[test]
fn corpus_nft_listings_decode_exactly_or_fall_back() {
    if !plumb_testkit::privileged(&["nft"]) {
        return;
    }
    let mut files = Vec::new();
    for dir in ["kube-proxy-nftables/real-nodes", "real-world/nft"] {
        if let Ok(rd) = std::fs::read_dir(corpus().join(dir)) {
            files.extend(rd.flatten().map(|e| e.path()).filter(|p| p.is_file()));
        }
    }
    files.sort();
    assert!(!files.is_empty(), "no corpus");
    let mut diffs = Vec::new();
    for f in &files {
        let label = f
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        let text = std::fs::read_to_string(f).expect("corpus file");
        let (equal, fallbacks, d) = load_and_compare(&label, &text);
        eprintln!("{label}: {equal} tables equal; fallbacks: {fallbacks:?}");
        diffs.extend(d);
    }
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

/// Manual (ignored): the oracle on a namespace that already holds a ruleset, e.g. the
/// 10k-service nftables-mode benchmark namespace:
/// `PLUMB_NETLINK_NETNS=NAME cargo test -p plumb-collect --test native_oracle -- --ignored`.
#[test]
#[ignore]
fn an_existing_namespace_equals_nft_list_table() {
    let Ok(ns) = std::env::var("PLUMB_NETLINK_NETNS") else {
        eprintln!("PLUMB_NETLINK_NETNS not set");
        return;
    };
    let (equal, fallbacks, diffs) = compare(&ns, &ns);
    eprintln!("{ns}: {equal} tables equal; fallbacks: {fallbacks:?}");
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}
