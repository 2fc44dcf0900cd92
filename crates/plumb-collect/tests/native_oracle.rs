//! The native-table decoder against its oracle, the local `nft list table` (Debian
//! 12's nft 1.0.6): kube-proxy's nftables-mode rulesets (the corpus's, the
//! generator's with every feature, its affinity sets with live entries), host
//! firewall tables written here, the corpus's other nft listings and one table per
//! rule of nftables' own rule tests are loaded into private network namespaces with
//! `nft -f`; every native table the netlink reader
//! decodes must be, byte for byte, what `nft list table FAMILY NAME` prints for it, and
//! the kube-proxy service maps recovered from both texts equal. One normalisation
//! only: an element's `expires DURATION` is the time it has left, which runs on
//! between the netlink read and nft's; each such value is parsed from both texts,
//! nft's must be at most the netlink one and at least it minus the time between the
//! two reads (and 20 ms of clock granularity), and the two texts must then be equal
//! with every `expires` value replaced by the same mark ([`expires_normalised`]).
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

/// A duration as nft prints it (`1d2h3m4s5ms`) in milliseconds.
fn parse_duration(text: &str) -> Option<u64> {
    let (mut total, mut rest) = (0u64, text);
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit())?;
        let n: u64 = rest[..digits].parse().ok()?;
        let after = &rest[digits..];
        let (unit, len) = [
            ("ms", 1),
            ("d", 86_400_000),
            ("h", 3_600_000),
            ("m", 60_000),
            ("s", 1000),
        ]
        .iter()
        .find(|(u, _)| after.starts_with(u))
        .map(|(u, ms)| (*ms, u.len()))?;
        total += n * unit;
        rest = &after[len..];
    }
    (!text.is_empty()).then_some(total)
}

/// `text` with every `expires DURATION` value replaced by `expires ~`, and the values.
fn expires_values(text: &str) -> Option<(String, Vec<u64>)> {
    let (mut out, mut values, mut rest) = (String::new(), Vec::new(), text);
    while let Some(at) = rest.find(" expires ") {
        let start = at + " expires ".len();
        out.push_str(&rest[..start]);
        let value = &rest[start..];
        let end = value.find([',', ' ', '\n', '}']).unwrap_or(value.len());
        values.push(parse_duration(&value[..end])?);
        out.push('~');
        rest = &value[end..];
    }
    out.push_str(rest);
    Some((out, values))
}

/// Whether the netlink text `ours` equals nft's `want` but for `expires` values within
/// the time between the reads (`elapsed_ms`); the number of such values.
fn expires_normalised(ours: &str, want: &str, elapsed_ms: u64) -> Option<usize> {
    let (a, ours) = expires_values(ours)?;
    let (b, want) = expires_values(want)?;
    // nft reads after the netlink reader: its values are the same or smaller.
    let within = ours.len() == want.len()
        && ours
            .iter()
            .zip(&want)
            .all(|(o, w)| *w <= o + 20 && o.saturating_sub(*w) <= elapsed_ms + 20);
    (a == b && within).then_some(ours.len())
}

/// (decoded and equal, fallback reasons, differences) for the ruleset in `ns`.
fn compare(ns: &str, label: &str) -> (usize, Vec<String>, Vec<String>) {
    compare_counting_expires(ns, label).0
}

/// [`compare`], and how many `expires` values were compared within tolerance.
fn compare_counting_expires(ns: &str, label: &str) -> ((usize, Vec<String>, Vec<String>), usize) {
    let started = std::time::Instant::now();
    let (_, tables) = nft_netlink::read(Some(ns), None).expect("netlink read");
    let (mut equal, mut fallbacks, mut diffs, mut expires) = (0, Vec::new(), Vec::new(), 0);
    for t in &tables {
        let family = t.family.map_or("unknown", |f| f.as_str());
        match &t.read {
            TableRead::Listing(text) => {
                let out = std::process::Command::new("ip")
                    .args(["netns", "exec", ns, "nft", "list", "table", family, &t.name])
                    .output()
                    .expect("nft list table");
                assert!(
                    out.status.success(),
                    "{label}: nft list table {family} {} failed: {}",
                    t.name,
                    String::from_utf8_lossy(&out.stderr)
                );
                let want = String::from_utf8_lossy(&out.stdout);
                let elapsed = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                let within = if *text == want {
                    Some(0)
                } else {
                    expires_normalised(text, &want, elapsed)
                };
                if let Some(n) = within {
                    expires += n;
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
    ((equal, fallbacks, diffs), expires)
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

/// What host firewalls (firewalld, Calico's nft mode, netbird, hand-written node
/// firewalls) write beside kube-proxy, written here: the inet family and its
/// `meta nfproto` dependencies, anonymous port, address and `ct state` sets, ranges
/// and comparisons, `ip protocol`, `log`, `limit`, `notrack`, `ct mark set`,
/// `meta mark set`, `ct status`, `tcp flags`, rejects with their codes, NAT in an
/// inet table (`dnat ip to`), netbird's TCP MSS clamp, what container networks
/// (netavark, docker) write: `th dport` of no protocol, `meta pkttype`, interface
/// name sets, maps and wildcards, ICMP types; firewalld's reverse-path filter
/// (`fib saddr . mark . iif oif missing`), `ct state vmap`, mark save and restore,
/// `ip daddr . tcp dport` keys, `redirect`, masquerade flags, NFLOG groups.
const HOST_FIREWALL: &str = r#"table inet host {
	set allowed { type ipv4_addr; flags interval; elements = { 10.0.0.0/8, 192.168.1.10 } }
	chain input {
		type filter hook input priority filter; policy drop;
		ct state established,related accept
		ct state { established, related } accept
		ct state invalid drop
		iifname "lo" accept
		meta nfproto ipv4 accept
		meta nfproto ipv6 counter accept
		meta nfproto ipv4 tcp dport 22 accept
		ip protocol icmp accept
		ip6 nexthdr ipv6-icmp accept
		meta l4proto { tcp, udp } accept
		tcp dport 22 accept
		tcp dport { 80, 443 } accept
		udp dport { 53, 123, 5353 } counter accept
		ip6 daddr fe80::/64 udp dport 546 accept
		tcp dport 1000-2000 accept
		tcp dport != 3000-3999 drop
		udp sport > 1024 accept
		udp sport < 1024 drop
		udp sport >= 2000 accept
		udp sport <= 20 drop
		ip saddr 10.0.0.1-10.0.0.5 accept
		ip daddr != 10.0.1.1-10.0.1.9 drop
		tcp dport 22 tcp sport 1024-65535 accept
		tcp dport { 6000-6010, 7000 } accept
		ip saddr 10.0.0.0/8 accept
		ip saddr { 10.0.0.0/8, 192.168.0.0/16 } accept
		ip daddr { 10.0.0.1, 10.0.0.2 } accept
		ip saddr @allowed accept
		ip saddr != @allowed drop
		ip6 saddr fd00::/8 accept
		ip6 daddr { fd00::1, fd00::2 } accept
		ip saddr 10.0.0.1 ip daddr 10.0.0.2 accept
		ip saddr 10.0.0.1 tcp dport 22 accept
		ip saddr 192.0.2.0/24 log prefix "x " drop
		log prefix "input drop: " level info
		log
		log level debug
		limit rate 10/second accept
		limit rate over 3/minute burst 10 packets drop
		limit rate 1/hour
		limit rate 2/day burst 1 packets
	}
	chain rejects {
		reject with icmpx admin-prohibited
		reject
		reject with icmpx host-unreachable
		reject with icmpx no-route
		tcp dport 22 reject with tcp reset
		meta nfproto ipv4 reject with icmp host-unreachable
		meta nfproto ipv4 reject with icmp admin-prohibited
		meta nfproto ipv6 reject with icmpv6 admin-prohibited
		meta nfproto ipv6 reject with icmpv6 no-route
	}
	chain conntrack {
		ct status dnat accept
		ct status snat,dnat accept
		ct status assured,confirmed accept
		ct status expected accept
		ct status seen-reply accept
		ct status dying drop
		log level audit
		log level emerg
		log level alert
		log level crit
		log level err
		log level notice
		tcp flags syn accept
		tcp flags syn / syn,ack accept
		tcp flags & (fin|syn|rst|ack) == syn accept
		tcp flags fin,rst drop
		tcp dport 22 tcp flags syn accept
	}
	set ifaces { type ifname; elements = { "lo", "eth0", "cni0", "flannel.1" } }
	chain containers {
		meta l4proto { tcp, udp } th dport 53 accept
		th dport 53 accept
		meta l4proto tcp th dport 54 accept
		th sport { 67, 68 } accept
		meta pkttype host accept
		meta pkttype { broadcast, multicast, other } drop
		iifname vmap { "lo" : accept, "eth0" : jump conntrack, "cni0" : drop }
		iifname { "lo", "eth0", "cni0", "veth1234" } accept
		iifname @ifaces accept
		iifname "cali*" accept
		oifname != "veth*" drop
		icmp type echo-request accept
		icmpv6 type { nd-router-advert, nd-neighbor-solicit, echo-request, mld-listener-query } accept
		icmpv6 type { destination-unreachable, packet-too-big, time-exceeded, parameter-problem, echo-reply, mld-listener-report, nd-router-solicit, nd-neighbor-advert, nd-redirect, mld2-listener-report } accept
		meta l4proto { icmp, ipv6-icmp } accept
	}
	chain nat-pre {
		type nat hook prerouting priority dstnat; policy accept;
		meta nfproto ipv4 tcp dport 80 dnat ip to 10.0.0.1:8080
		meta nfproto ipv6 udp dport 53 dnat ip6 to [fd00::1]:53
		meta nfproto ipv4 tcp dport 81 dnat ip to 10.0.0.1
	}
	chain nat-post {
		type nat hook postrouting priority srcnat; policy accept;
		meta nfproto ipv4 oifname != "lo" masquerade
		ip saddr 10.0.0.0/8 oifname "eth0" snat ip to 192.0.2.1
	}
	chain raw {
		type filter hook prerouting priority raw; policy accept;
		meta nfproto ipv6 fib saddr . mark . iif oif missing drop
		meta mark set ct mark
		udp dport 51820 notrack
		iifname "wt0" ct state new ct mark set 0x0001bd10
		iifname "wt0" ip saddr @allowed fib daddr type local meta mark set 0x0001bd20
	}
}
table ip host4 {
	chain forward {
		type filter hook forward priority filter; policy accept;
		ip protocol tcp accept
		ip protocol { tcp, udp } accept
		ip protocol != udp drop
		tcp dport { 22, 80 } ip saddr 10.0.0.0/8 accept
		ip daddr 10.1.2.3 udp dport 53 counter packets 0 bytes 0 accept
	}
	chain postrouting {
		type nat hook postrouting priority srcnat - 1; policy accept;
		meta mark 0x0001bd21 oifname != "lo" counter packets 0 bytes 0 masquerade
		oifname "eth1" masquerade random
		oifname "eth2" masquerade persistent
		oifname "eth3" masquerade random,persistent
	}
	chain prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		tcp dport 80 redirect to :8080
		udp dport 53 redirect to :5353
		tcp dport 81 redirect to :8080-8090
		meta l4proto tcp redirect to :8081
		iifname "lo" redirect
	}
	chain logs {
		log group 2
		log prefix "a" group 5 snaplen 100 queue-threshold 3
		log prefix "nflog: " group 0
	}
	chain input {
		type filter hook input priority filter; policy accept;
		reject with icmp host-unreachable
		reject with icmp admin-prohibited
		reject with icmp host-prohibited
		reject with icmp net-unreachable
		reject with icmp prot-unreachable
		reject with icmp net-prohibited
		tcp dport 22 reject with tcp reset
		meta l4proto tcp reject with tcp reset
	}
	set svc { type ipv4_addr . inet_service; elements = { 10.0.0.1 . 80, 10.0.0.2 . 443 } }
	chain marks {
		ip daddr . tcp dport @svc accept
		ip daddr . udp dport { 10.0.0.1 . 53, 10.0.0.3 . 123 } accept
		meta mark set ct mark
		ct mark set meta mark
		ct mark 0x00000010 accept
		ct state vmap { established : accept, related : accept, invalid : drop }
		fib saddr . iif oif missing drop
		fib saddr . mark . iif oif missing drop
		fib daddr . iif type local accept
		fib daddr oif exists accept
	}
	chain icmps {
		icmp type echo-request accept
		icmp type { echo-reply, destination-unreachable, source-quench, redirect, echo-request, router-advertisement, router-solicitation, time-exceeded, parameter-problem, timestamp-request, timestamp-reply, info-request, info-reply, address-mask-request, address-mask-reply } accept
		ip protocol tcp th dport 22 accept
		ip protocol udp udp dport 53 accept
		meta l4proto udp th dport 53 accept
	}
	chain mss {
		type filter hook forward priority mangle; policy accept;
		oifname "wt0" tcp flags syn counter packets 0 bytes 0 tcp option maxseg size > 1240 tcp option maxseg size set 1240
	}
}
table ip6 host6 {
	chain input {
		type filter hook input priority filter; policy accept;
		reject with icmpv6 admin-prohibited
		reject with icmpv6 addr-unreachable
		reject
		icmpv6 type echo-request accept
		ip6 nexthdr tcp th dport 22 accept
	}
}
"#;

/// [`HOST_FIREWALL`] decodes to exactly nft's listing.
#[test]
fn host_firewall_statements_equal_nft_list_table() {
    if !plumb_testkit::privileged(&["nft"]) {
        return;
    }
    let (equal, fallbacks, diffs) =
        load_and_compare("host firewall", HOST_FIREWALL).unwrap_or_else(|e| panic!("{e}"));
    assert!(fallbacks.is_empty(), "{fallbacks:?}");
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
    assert_eq!(equal, 3);
}

/// Set declarations with every flag combination nft 1.0.6 prints (`constant` without
/// its size, `timeout` alone said by the default timeout, `interval,timeout`, ...),
/// `auto-merge`, elements with their own timeouts in plain and interval sets.
const SET_DECLARATIONS: &str = r#"table inet declarations {
	set c1 { type ipv4_addr; flags constant; elements = { 1.2.3.4 } }
	set c2 { type ipv4_addr; flags constant,interval; elements = { 1.2.3.0/24 } }
	set c3 { type ipv4_addr; flags interval,timeout; elements = { 1.2.3.0/24 timeout 1h, 10.1.0.0/16 } }
	set c4 { type inet_service; flags dynamic; size 100; }
	set c5 { type ipv4_addr; flags constant; size 100; elements = { 1.2.3.4 } }
	set c6 { type ipv4_addr; timeout 1m; }
	set c7 { type ipv4_addr; flags interval; timeout 10m; elements = { 1.2.3.0/24 timeout 1h expires 30m, 5.0.0.0/8 } }
	set c8 { type ipv4_addr; flags dynamic; elements = { 100.90.149.44, 100.90.226.194 } }
	set c9 { type inet_service; flags timeout; elements = { 22 timeout 61001ms, 80 timeout 2d3h4m5s6ms expires 1d, 443 } }
	set c10 { type ipv4_addr; flags interval; auto-merge; elements = { 10.0.0.0/16, 10.1.0.0/16, 192.168.0.1 } }
	set c11 { type ipv4_addr; flags interval,timeout; auto-merge; timeout 1h; comment "merged"; }
}
"#;

/// kube-proxy's session affinity with live entries: the generator's table (ClientIP
/// affinity services: `flags dynamic,timeout`, `timeout 10800s`) with entries added as
/// `nft add element` gives them (the set's timeout, or their own, with an
/// expiration), and a table whose `update @affinity-… { ip saddr }` rules the kernel
/// fills from a packet sent in the namespace, as traffic fills kube-proxy's. Compared
/// with `nft list table`, `expires` values within the time between the reads.
#[test]
fn affinity_sets_with_live_entries_equal_nft_list_table() {
    if !plumb_testkit::privileged(&["nft", "ip"]) {
        return;
    }
    let config = plumb_kubeproxy::GeneratorConfig::all_features(40, 3);
    let cluster = plumb_kubeproxy::generate(&config).expect("generator");
    let generated = plumb_kubeproxy::nft_transaction(&cluster, &Default::default());
    let affinity: Vec<&str> = generated
        .lines()
        .filter_map(|l| l.strip_prefix("add set ip kube-proxy affinity-"))
        .filter_map(|rest| rest.split_whitespace().next())
        .collect();
    assert!(affinity.len() >= 2, "no affinity sets generated");
    let ns = Netns::create("plumb-native-oracle").expect("netns");
    let load = |text: &str| {
        let (ok, _, err) = ns.exec("nft", &["-f", "-"], Some(text)).expect("nft");
        assert!(ok, "nft refused: {err}\n{text}");
    };
    load(&generated);
    for (i, name) in affinity.iter().take(4).enumerate() {
        load(&format!(
            "add element ip kube-proxy affinity-{name} {{ 10.42.{i}.1, 10.42.{i}.2 timeout 1h expires 30m, 10.42.{i}.3 timeout 3h, 10.42.{i}.4 timeout 1d2h3m4s5ms expires 1d1s, 10.42.{i}.5 expires 1h }}\n"
        ));
    }
    let traffic = "table ip traffic {\n\tset affinity-A { type ipv4_addr; flags dynamic,timeout; timeout 3h; }\n\tset affinity-B { type ipv4_addr; flags dynamic,timeout; timeout 3h; }\n\tchain out {\n\t\ttype filter hook output priority filter; policy accept;\n\t\tupdate @affinity-A { ip saddr }\n\t\tupdate @affinity-B { ip saddr timeout 1h }\n\t}\n}\n";
    load(traffic);
    load(SET_DECLARATIONS);
    let (ok, _, err) = ns
        .exec("ip", &["link", "set", "lo", "up"], None)
        .expect("ip");
    assert!(ok, "{err}");
    plumb_os::netns::on_thread(Some(ns.name()), || {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0")?;
        socket.send_to(b"affinity", "127.0.0.1:9").map(|_| ())
    })
    .expect("a packet in the namespace");
    let (_, listed, _) = ns
        .exec("nft", &["list", "table", "ip", "traffic"], None)
        .expect("nft");
    assert!(
        listed.contains("elements = { 127.0.0.1 expires ")
            && listed.contains("elements = { 127.0.0.1 timeout 1h expires "),
        "the packet filled no affinity set:\n{listed}"
    );
    let ((equal, fallbacks, diffs), expires) = compare_counting_expires(ns.name(), "affinity");
    eprintln!("affinity: {equal} tables equal, {expires} expires values; fallbacks: {fallbacks:?}");
    assert!(fallbacks.is_empty(), "{fallbacks:?}");
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
    assert_eq!(equal, 3);
    // 4 sets x 5 entries, 2 from traffic, 5 in the declarations (an element of a set
    // without a default timeout and none of its own never expires).
    assert_eq!(expires, 4 * 5 + 2 + 5);
}

#[test]
fn expires_values_are_compared_within_the_time_between_the_reads() {
    assert_eq!(parse_duration("1d2h3m4s5ms"), Some(93_784_005));
    assert_eq!(parse_duration("59m59s976ms"), Some(3_599_976));
    assert_eq!(parse_duration(""), None);
    let ours = "elements = { 10.0.0.1 expires 59m59s976ms, 10.0.0.2 timeout 1h expires 1s }";
    let nft = "elements = { 10.0.0.1 expires 59m58s968ms, 10.0.0.2 timeout 1h expires 8ms }";
    assert_eq!(expires_normalised(ours, nft, 1010), Some(2));
    // More time passed than the reads took, a later read with more time left, or
    // anything else different: not equal.
    assert_eq!(expires_normalised(ours, nft, 0), None);
    assert_eq!(expires_normalised(nft, ours, 100), None);
    assert_eq!(
        expires_normalised(ours, &nft.replace("timeout 1h", "timeout 2h"), 100),
        None
    );
}

/// The top-level `table FAMILY NAME { ... }` blocks of a listing (a block ends at the
/// first `}` line at the block's own indentation), each with a newline.
fn table_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<(String, usize)> = None;
    for line in text.lines() {
        let indent = line.len() - line.trim_start().len();
        match &mut current {
            None if line.trim_start().starts_with("table ") && line.trim_end().ends_with('{') => {
                current = Some((format!("{line}\n"), indent));
            }
            None => {}
            Some((block, at)) => {
                block.push_str(line);
                block.push('\n');
                if line.trim() == "}" && indent == *at {
                    blocks.push(std::mem::take(block));
                    current = None;
                }
            }
        }
    }
    blocks
}

/// The corpus's nft listings and scripts: kube-proxy's nftables-mode listings, real
/// nodes' `nft list ruleset` (firewalld, flannel, netbird, iptables-nft tables as nft
/// lists them, ...), flannel's nftables mode, and nftables' own example files. Each
/// file is loaded whole; a file nft does not take back whole (iptables-nft's xt
/// expressions, a listing cut short) is loaded table by table, the tables nft takes.
/// Each native table is decoded to nft's text or falls back with a reason, never a
/// different text. Prints how many tables decode and why the others fall back.
#[test]
fn corpus_nft_listings_decode_exactly_or_fall_back() {
    if !plumb_testkit::privileged(&["nft"]) {
        return;
    }
    let mut files = Vec::new();
    for dir in [
        "kube-proxy-nftables/real-nodes",
        "real-world/nft",
        "other-cni/flannel",
        "nftables-upstream/files/nftables",
        "nftables-upstream/files/examples",
    ] {
        if let Ok(rd) = std::fs::read_dir(corpus().join(dir)) {
            files.extend(rd.flatten().map(|e| e.path()).filter(|p| {
                p.is_file() && p.extension().is_some_and(|e| e == "nft" || e == "txt")
            }));
        }
    }
    files.sort();
    assert!(!files.is_empty(), "no corpus");
    let mut diffs = Vec::new();
    let (mut loaded, mut equal, mut fallbacks) = (0, 0, Vec::new());
    let mut tally = |label: &str, (e, f, d): (usize, Vec<String>, Vec<String>)| {
        eprintln!("{label}: {e} tables equal; fallbacks: {f:?}");
        equal += e;
        loaded += e + f.len() + d.len();
        fallbacks.extend(f);
        diffs.extend(d);
    };
    // Common basics beside the corpus (a host firewall's kind of rules).
    let basics = "table inet basics {\n\tchain input {\n\t\ttype filter hook input priority filter; policy drop;\n\t\tct state established,related accept\n\t\tct state invalid drop\n\t\tiifname \"lo\" accept\n\t\ttcp dport 22 counter accept\n\t\tudp dport 53 accept\n\t\ttcp dport { 80, 443 } accept\n\t\tip saddr 192.0.2.0/24 log prefix \"x \" drop\n\t\tlimit rate 10/second accept\n\t}\n}\ntable ip basics4 {\n\tchain forward {\n\t\ttype filter hook forward priority filter + 5; policy accept;\n\t\tct state established,related accept\n\t\toifname \"eth0\" ip daddr 10.0.0.0/8 drop\n\t\tip daddr 10.1.2.3 tcp dport 8080 counter packets 0 bytes 0 accept\n\t}\n}\n";
    let result = load_and_compare("basics", basics).unwrap_or_else(|e| panic!("{e}"));
    assert!(result.0 >= 1, "basics: {result:?}");
    tally("basics", result);
    let (mut files_loaded, mut refused) = (0, Vec::new());
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
            Ok(result) => {
                files_loaded += 1;
                tally(&label, result);
            }
            Err(whole) => {
                let mut any = false;
                for (i, block) in table_blocks(&text).iter().enumerate() {
                    match load_and_compare(&format!("{label} table {i}"), block) {
                        Ok(result) => {
                            any = true;
                            tally(&format!("{label} table {i}"), result);
                        }
                        Err(e) => refused.push(e.lines().next().unwrap_or("").to_string()),
                    }
                }
                if any {
                    files_loaded += 1;
                } else {
                    refused.push(whole.lines().next().unwrap_or("").to_string());
                }
            }
        }
    }
    let mut reasons: Vec<String> = fallbacks
        .iter()
        .map(|f| {
            f.split_once(": ")
                .map_or(f.as_str(), |(_, r)| r)
                .to_string()
        })
        .collect();
    reasons.sort();
    eprintln!(
        "corpus: {} files, {files_loaded} loaded; {loaded} native tables, {equal} decoded equal, {} fell back, {} differ",
        files.len(),
        fallbacks.len(),
        diffs.len()
    );
    eprintln!("fallback reasons: {reasons:#?}");
    eprintln!("not loaded by nft: {refused:#?}");
    assert!(files_loaded >= 2, "too few corpus listings loaded");
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

/// (decoded and equal, fallback reasons, differences) for every table in `ns`, each
/// compared with its block of one `nft list ruleset` (tables printed one after
/// another, each as `nft list table` prints it): for namespaces of many tables.
fn compare_ruleset(ns: &str, label: &str) -> (usize, Vec<String>, Vec<String>) {
    let (_, tables) = nft_netlink::read(Some(ns), None).expect("netlink read");
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", ns, "nft", "list", "ruleset"])
        .output()
        .expect("nft list ruleset");
    assert!(out.status.success(), "{label}: nft list ruleset failed");
    let listing = String::from_utf8_lossy(&out.stdout);
    let mut blocks: std::collections::HashMap<String, String> = Default::default();
    let mut current: Option<String> = None;
    for line in listing.lines() {
        if let Some(head) = line.strip_prefix("table ") {
            let key = head.trim_end_matches(" {").to_string();
            current = Some(key.clone());
            blocks.insert(key, String::new());
        }
        if let Some(b) = current.as_ref().and_then(|k| blocks.get_mut(k)) {
            b.push_str(line);
            b.push('\n');
        }
    }
    let (mut equal, mut fallbacks, mut diffs) = (0, Vec::new(), Vec::new());
    for t in &tables {
        let family = t.family.map_or("unknown", |f| f.as_str());
        let want = blocks
            .get(&format!("{family} {}", t.name))
            .map_or("", String::as_str);
        match &t.read {
            TableRead::Listing(text) if text == want => equal += 1,
            TableRead::Listing(text) => diffs.push(format!(
                "{label}: table {family} {} differs:\n  nft:\n{want}  netlink:\n{text}",
                t.name
            )),
            TableRead::Native(why) => {
                assert!(!why.is_empty(), "{label}: a fallback without a reason");
                fallbacks.push(format!("{family} {}: {why}", t.name));
            }
            _ => {}
        }
    }
    (equal, fallbacks, diffs)
}

/// Loads the scripts nft takes (each on its own, found by halving the batches nft
/// refuses: `nft -f` is all or nothing); how many.
fn load_what_nft_takes(ns: &Netns, scripts: &[String]) -> usize {
    // nft applies a file all or nothing, and names the line of every command it refused
    // (`/dev/stdin:LINE:COL: Error: ...`): those scripts are dropped and the rest tried
    // again, a few calls per file. When nft names no line of a script (or only lines
    // already dropped), the scripts are halved instead.
    let mut left: Vec<&String> = scripts.iter().collect();
    while !left.is_empty() {
        let text: String = left.iter().map(|s| s.as_str()).collect();
        let (ok, _, err) = ns.exec("nft", &["-f", "-"], Some(&text)).expect("nft");
        if ok {
            return left.len();
        }
        let refused = refused_scripts(&left, &err);
        if refused.is_empty() {
            return bisect_what_nft_takes(ns, &left);
        }
        let mut i = 0;
        left.retain(|_| {
            i += 1;
            !refused.contains(&(i - 1))
        });
    }
    0
}

/// The indexes of the scripts in `scripts` (concatenated in order) that nft's errors
/// name by line.
fn refused_scripts(scripts: &[&String], err: &str) -> std::collections::BTreeSet<usize> {
    let mut first_lines = Vec::with_capacity(scripts.len());
    let mut line = 1;
    for s in scripts {
        first_lines.push(line);
        line += s.matches('\n').count();
    }
    err.lines()
        .filter_map(|l| l.strip_prefix("/dev/stdin:"))
        .filter_map(|l| l.split(':').next()?.parse::<usize>().ok())
        .filter_map(|l| {
            first_lines
                .partition_point(|&first| first <= l)
                .checked_sub(1)
        })
        .collect()
}

fn bisect_what_nft_takes(ns: &Netns, scripts: &[&String]) -> usize {
    let text: String = scripts.iter().map(|s| s.as_str()).collect();
    if ns.exec("nft", &["-f", "-"], Some(&text)).expect("nft").0 {
        return scripts.len();
    }
    if scripts.len() == 1 {
        return 0;
    }
    let (a, b) = scripts.split_at(scripts.len() / 2);
    bisect_what_nft_takes(ns, a) + bisect_what_nft_takes(ns, b)
}

/// One table per rule of nftables' own rule tests (`tests/py/*/*.t` in the corpus:
/// every rule marked `ok` that names no set or variable), in each family of ip, ip6
/// and inet its file lists, on the file's first chain of that family: each native
/// table decodes to exactly nft's text or falls back with a reason. nft's test rules
/// reach well beyond what nodes run (every expression and option nft has): the
/// point is that nothing decodes to a different text. Prints how many decode and the
/// most common reasons for the others.
#[test]
fn nftables_rule_tests_decode_exactly_or_fall_back() {
    if !plumb_testkit::privileged(&["nft", "ip"]) {
        return;
    }
    let root = corpus().join("nftables-upstream/tests/py");
    let mut files = Vec::new();
    for dir in std::fs::read_dir(&root).expect("nft rule tests").flatten() {
        if let Ok(rd) = std::fs::read_dir(dir.path()) {
            files.extend(
                rd.flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|e| e == "t")),
            );
        }
    }
    files.sort();
    let (mut offered, mut loaded, mut n) = (0, 0, 0);
    let (mut equal, mut fallbacks, mut diffs) = (0, Vec::new(), Vec::new());
    // One namespace, emptied before each file: nft reads the whole ruleset before each
    // change, so it is kept to one file's tables.
    let ns = Netns::create("plumb-native-oracle").expect("netns");
    for f in &files {
        assert!(
            ns.exec("nft", &["flush", "ruleset"], None).expect("nft").0,
            "nft flush ruleset"
        );
        let text = std::fs::read_to_string(f).expect("rule test");
        let mut chains = std::collections::HashMap::new();
        let mut tables = Vec::new();
        let mut rules = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix(':') {
                if let Some((name, spec)) = rest.split_once(';') {
                    chains.insert(name.to_string(), spec.to_string());
                }
            } else if let Some(rest) = line.strip_prefix('*') {
                let parts: Vec<&str> = rest.split(';').collect();
                if let [family, _, chain_list] = parts[..] {
                    let first = chain_list.split(',').next().unwrap_or("").to_string();
                    tables.push((family.to_string(), first));
                }
            } else if let Some((rule, verdict)) = line.split_once(';')
                && verdict.starts_with("ok")
                && !line.starts_with(['-', '!', '#', ' '])
                && !rule.contains(['@', '$'])
            {
                rules.push(rule.to_string());
            }
        }
        for (family, chain) in &tables {
            let Some(spec) = chains.get(chain) else {
                continue;
            };
            if !["ip", "ip6", "inet"].contains(&family.as_str()) || spec.contains("device") {
                continue;
            }
            let scripts: Vec<String> = rules
                .iter()
                .map(|rule| {
                    n += 1;
                    format!(
                        "table {family} r{n} {{\n\tchain {chain} {{\n\t\t{spec};\n\t}}\n}}\nadd rule {family} r{n} {chain} {rule}\n"
                    )
                })
                .collect();
            offered += scripts.len();
            loaded += load_what_nft_takes(&ns, &scripts);
        }
        let label = f.file_name().unwrap_or_default().to_string_lossy();
        let (e, fb, d) = compare_ruleset(ns.name(), &label);
        equal += e;
        fallbacks.extend(fb);
        diffs.extend(d);
    }
    let mut reasons: std::collections::BTreeMap<String, usize> = Default::default();
    for f in &fallbacks {
        let why = f.split_once(": ").map_or(f.as_str(), |(_, r)| r);
        let why = why.split_once(": ").map_or(why, |(_, r)| r);
        *reasons.entry(why.to_string()).or_default() += 1;
    }
    let mut reasons: Vec<(usize, String)> = reasons.into_iter().map(|(r, c)| (c, r)).collect();
    reasons.sort_by(|a, b| b.cmp(a));
    eprintln!(
        "nft rule tests: {} files, {offered} rule tables offered, {loaded} loaded by nft; {equal} decoded equal, {} fell back, {} differ",
        files.len(),
        fallbacks.len(),
        diffs.len()
    );
    eprintln!(
        "most common reasons: {:#?}",
        &reasons[..reasons.len().min(25)]
    );
    assert!(loaded > 100, "too few rules loaded");
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

/// Manual (ignored): captures the dumps of [`FIXTURE_TABLE`] and [`HOST_FIREWALL`] as
/// framed netlink messages, and nft's listings of them (`nft list table ip
/// kube-proxy`, `nft list ruleset`), into `PLUMB_NATIVE_FIXTURES` (a directory):
/// `kube-proxy.{bin,nft}`, `host-firewall.{bin,nft}`.
#[test]
#[ignore]
fn write_fixtures() {
    let Ok(dir) = std::env::var("PLUMB_NATIVE_FIXTURES") else {
        eprintln!("PLUMB_NATIVE_FIXTURES not set");
        return;
    };
    for (name, text, list) in [
        (
            "kube-proxy",
            FIXTURE_TABLE,
            &["list", "table", "ip", "kube-proxy"][..],
        ),
        ("host-firewall", HOST_FIREWALL, &["list", "ruleset"][..]),
    ] {
        let ns = Netns::create("plumb-native-oracle").expect("netns");
        let (ok, _, err) = ns.exec("nft", &["-f", "-"], Some(text)).expect("nft");
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
        let (_, listing, _) = ns.exec("nft", list, None).expect("nft");
        std::fs::write(format!("{dir}/{name}.bin"), bytes).expect("write");
        std::fs::write(format!("{dir}/{name}.nft"), listing).expect("write");
    }
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
