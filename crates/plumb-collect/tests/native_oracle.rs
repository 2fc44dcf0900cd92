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

/// Loads `text` with `nft -f -` into a fresh namespace and compares; `Err` with nft's
/// reason when nft refuses the input.
fn load_and_compare(label: &str, text: &str) -> Result<(usize, Vec<String>, Vec<String>), String> {
    let ns = Netns::create("plumb-native-oracle").expect("netns");
    let (ok, _, err) = ns.exec("nft", &["-f", "-"], Some(text)).expect("nft");
    if !ok {
        return Err(format!("{label}: nft refused it: {err}"));
    }
    Ok(compare(ns.name(), label))
}

/// A transaction with its declarations (`add table|chain|set|map`) first, in their
/// order, then the rest in its order: kube-proxy's proxier test prints rules before
/// the chains they jump to, which `nft -f` refuses.
fn declarations_first(text: &str) -> String {
    let declares = |l: &&str| {
        ["add table ", "add chain ", "add set ", "add map "]
            .iter()
            .any(|p| l.starts_with(p))
    };
    let (mut first, rest): (Vec<&str>, Vec<&str>) = text.lines().partition(declares);
    first.extend(rest);
    first.join("\n") + "\n"
}

/// flannel's nftables-mode tables (the rules flannel 0.25's `nftables.go` writes for
/// a 10.244.0.0/16 cluster and a node's 10.244.0.0/24, and IPv6 twins), written here.
const FLANNEL: &str = r#"table ip flannel-ipv4 {
	comment "rules for flannel-ipv4"
	chain postrtg {
		comment "chain to manage traffic masquerading by flannel"
		type nat hook postrouting priority srcnat; policy accept;
		meta mark 0x4000 return
		ip saddr 10.244.0.0/24 ip daddr 10.244.0.0/16 return
		ip saddr 10.244.0.0/16 ip daddr 10.244.0.0/24 return
		ip saddr != 10.244.0.0/24 ip daddr 10.244.0.0/16 return
		ip saddr 10.244.0.0/16 ip daddr != 224.0.0.0/4 masquerade fully-random
		ip saddr != 10.244.0.0/16 ip daddr 10.244.0.0/16 masquerade fully-random
	}
	chain forward {
		comment "chain to accept flannel traffic"
		type filter hook forward priority filter; policy accept;
		ip saddr 10.244.0.0/16 accept
		ip daddr 10.244.0.0/16 accept
	}
}
table ip6 flannel-ipv6 {
	comment "rules for flannel-ipv6"
	chain postrtg {
		type nat hook postrouting priority srcnat; policy accept;
		meta mark 0x4000 return
		ip6 saddr fd00:10:244::/64 ip6 daddr fd00:10:244::/56 return
		ip6 saddr fd00:10:244::/56 ip6 daddr != ff00::/8 masquerade fully-random
	}
	chain forward {
		type filter hook forward priority filter; policy accept;
		ip6 saddr fd00:10:244::/56 accept
	}
}
"#;

/// An IPv6 kube-proxy table of the shape the nftables proxier writes for ip6 (the
/// generator writes ip only), written here.
const KUBE_PROXY_IP6: &str = r#"table ip6 kube-proxy {
	comment "rules for kube-proxy"
	set cluster-ips {
		type ipv6_addr
		comment "Active ClusterIPs"
		elements = { fd00:10:96::1, fd00:10:96::a, fd00:10:96::1:5 }
	}
	map service-ips {
		type ipv6_addr . inet_proto . inet_service : verdict
		comment "ClusterIP, ExternalIP and LoadBalancer IP traffic"
	}
	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		jump services
	}
	chain services {
		ip6 daddr . meta l4proto . th dport vmap @service-ips
	}
	chain cluster-ips-check {
		ip6 daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"
		ip6 daddr fd00:10:96::/112 drop comment "Drop traffic to unallocated ClusterIPs"
	}
	chain mark-for-masquerade {
		meta mark set meta mark | 0x00004000
	}
	chain reject-chain {
		reject
	}
	chain endpoint-A {
		ip6 saddr fd00::10 jump mark-for-masquerade
		meta l4proto tcp dnat to [fd00::10]:6443
	}
	chain endpoint-B {
		ip6 saddr fd00::11 jump mark-for-masquerade
		meta l4proto tcp dnat to [fd00::11]:6443
	}
	chain service-2QRHZV4L-default/kubernetes/tcp/https {
		ip6 daddr fd00:10:96::1 tcp dport 443 ip6 saddr != fd00:10:244::/56 jump mark-for-masquerade
		numgen random mod 2 vmap { 0 : goto endpoint-A, 1 : goto endpoint-B }
	}
}
add element ip6 kube-proxy service-ips { fd00:10:96::1 . tcp . 443 : goto service-2QRHZV4L-default/kubernetes/tcp/https, fd00:10:96::a . udp . 53 comment "kube-system/kube-dns:dns" : goto reject-chain }
"#;

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
    let proxier = declarations_first(&proxier);
    let mut diffs = Vec::new();
    for (label, text, tables) in [
        ("generated 2000x3 all features", generated.as_str(), 1),
        ("proxier test", proxier.as_str(), 1),
        ("ip6 kube-proxy", KUBE_PROXY_IP6, 1),
        ("flannel", FLANNEL, 2),
    ] {
        let (equal, fallbacks, d) = load_and_compare(label, text).unwrap_or_else(|e| panic!("{e}"));
        eprintln!("{label}: {equal} tables equal; fallbacks: {fallbacks:?}");
        assert!(fallbacks.is_empty(), "{label}: {fallbacks:?}");
        diffs.extend(d);
        assert_eq!(equal, tables, "{label}: {diffs:?}");
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
    let (mut diffs, mut loaded) = (Vec::new(), 0);
    // Common basics beside the corpus (a host firewall's kind of rules): decoded
    // exactly or fallen back, never another text.
    let basics = "table inet basics {\n\tchain input {\n\t\ttype filter hook input priority filter; policy drop;\n\t\tct state established,related accept\n\t\tct state invalid drop\n\t\tiifname \"lo\" accept\n\t\ttcp dport 22 counter accept\n\t\tudp dport 53 accept\n\t\ttcp dport { 80, 443 } accept\n\t\tip saddr 192.0.2.0/24 log prefix \"x \" drop\n\t\tlimit rate 10/second accept\n\t}\n}\ntable ip basics4 {\n\tchain forward {\n\t\ttype filter hook forward priority filter + 5; policy accept;\n\t\tct state established,related accept\n\t\toifname \"eth0\" ip daddr 10.0.0.0/8 drop\n\t\tip daddr 10.1.2.3 tcp dport 8080 counter packets 0 bytes 0 accept\n\t}\n}\n";
    match load_and_compare("basics", basics) {
        Ok((equal, fallbacks, d)) => {
            eprintln!("basics: {equal} tables equal; fallbacks: {fallbacks:?}");
            assert!(equal >= 1, "basics: {fallbacks:?} {d:?}");
            diffs.extend(d);
        }
        Err(e) => panic!("{e}"),
    }
    for f in &files {
        let label = f
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        let text = std::fs::read_to_string(f).expect("corpus file");
        // A listing cut short by its author (`....` lines) loads without the cut.
        let text: String = text
            .lines()
            .filter(|l| l.trim() != "....")
            .map(|l| format!("{l}\n"))
            .collect();
        match load_and_compare(&label, &text) {
            Ok((equal, fallbacks, d)) => {
                loaded += 1;
                eprintln!("{label}: {equal} tables equal; fallbacks: {fallbacks:?}");
                diffs.extend(d);
            }
            // Listings nft does not take back (iptables-nft's xt expressions as nft
            // prints them, a chain listed alone): nothing to compare.
            Err(e) => eprintln!("not loaded: {}", e.lines().next().unwrap_or("")),
        }
    }
    assert!(loaded >= 2, "too few corpus listings loaded");
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

/// The small kube-proxy-shaped table the decoder's unit tests read from captured
/// bytes (`src/nft_netlink/native/fixtures/`): a concatenated verdict map, a
/// `meta l4proto tcp` dependency, prefixes, an anonymous interval set, a `numgen`
/// map, affinity, `dnat`, mark arithmetic.
const FIXTURE_TABLE: &str = r#"table ip kube-proxy {
	comment "rules for kube-proxy"
	set aff {
		type ipv4_addr
		size 65535
		flags dynamic,timeout
		timeout 3h
	}
	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		elements = { 10.43.8.0 . tcp . 5432 comment "a/b:p" : goto svc, 198.18.3.4 . udp . 53 : drop }
	}
	chain svc {
		ip daddr 10.43.0.1 tcp dport 443 ip saddr != 10.42.0.0/16 jump mark-for-masquerade
		ip saddr @aff goto ep
		numgen random mod 2 vmap { 0 : goto ep, 1 : goto ep }
	}
	chain ep {
		update @aff { ip saddr }
		meta l4proto tcp dnat to 10.42.0.5:8080
	}
	chain mark-for-masquerade {
		meta mark set meta mark | 0x00004000
	}
	chain pre {
		type nat hook prerouting priority dstnat - 10; policy accept;
		ct state new ip daddr . meta l4proto . th dport vmap @service-ips
		meta mark & 0x00004000 == 0x00000000 ip saddr != { 192.168.122.0/24, 203.0.113.3 } drop comment "fw"
		fib saddr type local ip saddr 10.0.0.0/9 jump mark-for-masquerade
	}
}
"#;

/// Manual (ignored): captures the dump of [`FIXTURE_TABLE`] as framed netlink
/// messages, and nft's listing of it, into `PLUMB_NATIVE_FIXTURES` (a directory).
#[test]
#[ignore]
fn write_fixtures() {
    let Ok(dir) = std::env::var("PLUMB_NATIVE_FIXTURES") else {
        eprintln!("PLUMB_NATIVE_FIXTURES not set");
        return;
    };
    let ns = Netns::create("plumb-native-oracle").expect("netns");
    let (ok, _, err) = ns
        .exec("nft", &["-f", "-"], Some(FIXTURE_TABLE))
        .expect("nft");
    assert!(ok, "{err}");
    let opts = plumb_os::nftables::DumpOptions {
        sets: true,
        elements: true,
        deadline: None,
    };
    let mut bytes = Vec::new();
    plumb_os::nftables::dump_ruleset(Some(ns.name()), &opts, &mut |m| match m {
        Some(m) => bytes.extend(plumb_os::netlink::build::message(
            m.kind, m.flags, m.payload,
        )),
        None => bytes.clear(),
    })
    .expect("dump");
    let (_, listing, _) = ns
        .exec("nft", &["list", "table", "ip", "kube-proxy"], None)
        .expect("nft");
    std::fs::write(format!("{dir}/kube-proxy.bin"), bytes).expect("write");
    std::fs::write(format!("{dir}/kube-proxy.nft"), listing).expect("write");
}

/// Through the live reader: kube-proxy's nftables-mode table is read from the netlink
/// dump, not with nft (the tool outcome says so), and a native table with what the
/// decoder does not print (a named counter object) is read with `nft list table`,
/// the outcome saying why.
#[test]
fn the_live_reader_decodes_kube_proxy_and_falls_back_with_a_reason() {
    if !plumb_testkit::privileged(&["nft"]) {
        return;
    }
    let ns = Netns::create("plumb-native-oracle").expect("netns");
    let other = "table inet other {\n\tcounter hits {\n\t}\n\tchain input {\n\t\ttype filter hook input priority filter; policy accept;\n\t\ttcp dport 22 counter name \"hits\" accept\n\t}\n}\n";
    for text in [FIXTURE_TABLE, other] {
        let (ok, _, err) = ns.exec("nft", &["-f", "-"], Some(text)).expect("nft");
        assert!(ok, "{err}");
    }
    let runner = plumb_os::runner::SystemRunner;
    let live = plumb_collect::collect_live_rulesets(&runner, Some(ns.name()));
    let kube = live
        .tools
        .iter()
        .find(|t| t.tool == "ip kube-proxy netlink")
        .unwrap_or_else(|| panic!("{:?}", live.tools));
    assert_eq!(kube.status, "ok");
    assert!(kube.detail.contains("decoded"), "{}", kube.detail);
    assert!(
        !live
            .tools
            .iter()
            .any(|t| t.tool == "nft list table ip kube-proxy"),
        "{:?}",
        live.tools
    );
    let fallback = live
        .tools
        .iter()
        .find(|t| t.tool == "nft list table inet other")
        .unwrap_or_else(|| panic!("{:?}", live.tools));
    assert_eq!(fallback.status, "ok");
    assert!(
        fallback
            .detail
            .contains("read with nft: stateful objects not decoded"),
        "{}",
        fallback.detail
    );
    // Both tables are in the model, the decoded one as nft's listing reads.
    let names: Vec<&str> = live.ruleset.tables.iter().map(|t| &*t.name).collect();
    assert!(
        names.contains(&"kube-proxy") && names.contains(&"other"),
        "{names:?}"
    );
    let (_, want, _) = ns
        .exec("nft", &["list", "table", "ip", "kube-proxy"], None)
        .expect("nft");
    let expected = plumb_ruleset::nft::parse_text(&want);
    let kp = live
        .ruleset
        .tables
        .iter()
        .find(|t| &*t.name == "kube-proxy")
        .expect("kube-proxy");
    let rules = |t: &plumb_ruleset::Table| -> Vec<String> {
        t.chains
            .iter()
            .flat_map(|c| c.rules.iter().map(|r| r.text.to_string()))
            .collect()
    };
    assert_eq!(rules(kp), rules(&expected.tables[0]));
    assert_eq!(
        plumb_kubeproxy::recover::recover(&live.ruleset).len(),
        plumb_kubeproxy::recover::recover(&expected).len()
    );
}
