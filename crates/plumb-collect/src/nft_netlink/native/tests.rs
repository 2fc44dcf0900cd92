//! The native decoder on dumps captured from the kernel (`fixtures/kube-proxy.bin`
//! and `fixtures/host-firewall.bin`, with nft 1.0.6's listings of them in the `.nft`
//! files beside, written by `tests/native_oracle.rs`'s `write_fixtures`), and on
//! built messages for set elements' times and for what falls back.

use crate::nft_netlink::{Decoder, TableRead};
use plumb_os::netlink::build::*;
use plumb_os::nftables::{SUBSYS_NFTABLES, msg};

const DUMP: &[u8] = include_bytes!("fixtures/kube-proxy.bin");
const LISTING: &str = include_str!("fixtures/kube-proxy.nft");
/// The oracle's host firewall tables (`HOST_FIREWALL`: inet, ip and ip6 tables with
/// dependencies, anonymous sets, rejects, log, limit, ...) and `nft list ruleset`.
const HOST_DUMP: &[u8] = include_bytes!("fixtures/host-firewall.bin");
const HOST_LISTING: &str = include_str!("fixtures/host-firewall.nft");

fn read(bytes: &[u8]) -> TableRead {
    let mut d = Decoder::new();
    d.push_bytes(bytes);
    let mut tables = d.finish();
    assert_eq!(tables.len(), 1);
    tables.remove(0).read
}

fn listing(bytes: &[u8]) -> String {
    match read(bytes) {
        TableRead::Listing(text) => text,
        other => panic!("not decoded: {other:?}"),
    }
}

#[test]
fn the_captured_dump_is_nfts_listing_byte_for_byte() {
    assert_eq!(listing(DUMP), LISTING);
}

#[test]
fn the_captured_host_firewall_dump_is_nfts_listing_byte_for_byte() {
    let mut d = Decoder::new();
    d.push_bytes(HOST_DUMP);
    let tables = d.finish();
    assert_eq!(tables.len(), 3);
    let mut text = String::new();
    for t in tables {
        match t.read {
            TableRead::Listing(l) => text.push_str(&l),
            other => panic!("table {} not decoded: {other:?}", t.name),
        }
    }
    assert_eq!(text, HOST_LISTING);
    for line in [
        // `meta nfproto ipv4` is `ip saddr`'s dependency in an inet table; after
        // `meta l4proto { tcp, udp }` a port is `th dport`.
        "\t\tip saddr 10.0.0.1 tcp dport 22 accept\n",
        "\t\tmeta l4proto { tcp, udp } th dport 53 accept\n",
        // Anonymous sets of ports, ct states; ranges; interface names in host order.
        "\t\ttcp dport { 6000-6010, 7000 } accept\n",
        "\t\tct state { established, related } accept\n",
        "\t\ttcp dport != 3000-3999 drop\n",
        "\t\tiifname { \"lo\", \"eth0\", \"cni0\", \"veth1234\" } accept\n",
        // Statements and their defaults.
        "\t\tlimit rate over 3/minute burst 10 packets drop\n",
        "\t\tlog prefix \"input drop: \" level info\n",
        "\t\tmeta nfproto ipv4 tcp dport 80 dnat ip to 10.0.0.1:8080\n",
        "\t\treject with icmpx admin-prohibited\n",
        "\t\ttcp flags syn / syn,ack accept\n",
    ] {
        assert!(text.contains(line), "{line}");
    }
}

#[test]
fn concatenations_dependencies_prefixes_and_byte_order_decode_as_nft_prints_them() {
    let text = listing(DUMP);
    for line in [
        // Three registers (1, 9, 10) packed into one 12-byte key.
        "ct state new ip daddr . meta l4proto . th dport vmap @service-ips",
        // `meta l4proto tcp` is `tcp dport`'s dependency: not printed; a 2-byte
        // load of the source address is a /16.
        "ip daddr 10.43.0.1 tcp dport 443 ip saddr != 10.42.0.0/16 jump mark-for-masquerade",
        // A prefix not on a byte boundary is a mask.
        "fib saddr type local ip saddr 10.0.0.0/9 jump mark-for-masquerade",
        // Mark values in host byte order; an interval set's boundaries paired.
        "meta mark & 0x00004000 == 0x00000000 ip saddr != { 192.168.122.0/24, 203.0.113.3 } drop comment \"fw\"",
        "meta l4proto tcp dnat to 10.42.0.5:8080",
        "numgen random mod 2 vmap { 0 : goto ep, 1 : goto ep }",
        // Concatenated keys sort in host byte order of the whole key.
        "elements = { 198.18.3.4 . udp . 53 : drop,",
    ] {
        assert!(text.contains(line), "{line}\n{text}");
    }
}

#[test]
fn the_dump_split_between_decoders_merges_into_the_same_listing() {
    // Every message to decoder 0, rules of chain `pre` to decoder 1 instead (as the
    // split dump gives each worker its chains).
    let (mut a, mut b) = (Decoder::new(), Decoder::new());
    for m in plumb_os::netlink::messages(DUMP) {
        let is_rule = m.kind & 0xff == msg::NEWRULE;
        let of_pre = m.payload.windows(4).any(|w| w == b"pre\0");
        if is_rule && of_pre {
            b.push(&m);
        } else {
            a.push(&m);
            if !is_rule && m.kind & 0xff <= msg::NEWCHAIN {
                b.push(&m);
            }
        }
    }
    a.merge(b);
    let tables = a.finish();
    assert_eq!(tables[0].read, TableRead::Listing(LISTING.into()));
}

fn nfmsg(kind: u16, attrs: &[Vec<u8>]) -> Vec<u8> {
    let mut payload = vec![2, 0, 0, 0];
    payload.extend(attrs.concat());
    message((SUBSYS_NFTABLES << 8) | kind, 0, &payload)
}

fn expr(name: &str, attrs: &[Vec<u8>]) -> Vec<u8> {
    nested(1, &[str_attr(1, name), nested(2, attrs)])
}

fn be(v: u32) -> Vec<u8> {
    v.to_be_bytes().to_vec()
}

/// A native table `t` with chain `c` holding one rule of `exprs`.
fn one_rule(exprs: &[Vec<u8>]) -> Vec<u8> {
    let mut out = nfmsg(msg::NEWTABLE, &[str_attr(1, "t")]);
    out.extend(nfmsg(msg::NEWCHAIN, &[str_attr(1, "t"), str_attr(3, "c")]));
    out.extend(nfmsg(
        msg::NEWRULE,
        &[str_attr(1, "t"), str_attr(2, "c"), nested(4, exprs)],
    ));
    out
}

fn accept() -> Vec<u8> {
    expr(
        "immediate",
        &[attr(1, &be(0)), nested(2, &[nested(2, &[attr(1, &be(1))])])],
    )
}

#[test]
fn a_rule_decodes_and_what_is_not_decoded_falls_back_with_the_reason() {
    let dport = expr(
        "payload",
        &[
            attr(1, &be(1)),
            attr(2, &be(2)),
            attr(3, &be(2)),
            attr(4, &be(2)),
        ],
    );
    let cmp_443 = expr(
        "cmp",
        &[
            attr(1, &be(1)),
            attr(2, &be(0)),
            nested(3, &[attr(1, &443u16.to_be_bytes())]),
        ],
    );
    let l4proto = expr("meta", &[attr(1, &be(1)), attr(2, &be(16))]);
    let is_tcp = expr(
        "cmp",
        &[
            attr(1, &be(1)),
            attr(2, &be(0)),
            nested(3, &[attr(1, &[6])]),
        ],
    );
    let ok = one_rule(&[
        l4proto.clone(),
        is_tcp.clone(),
        dport.clone(),
        cmp_443.clone(),
        accept(),
    ]);
    assert_eq!(
        listing(&ok),
        "table ip t {\n\tchain c {\n\t\ttcp dport 443 accept\n\t}\n}\n"
    );
    // A transport field no protocol match fixed: `th dport`.
    assert_eq!(
        listing(&one_rule(&[dport.clone(), cmp_443.clone(), accept()])),
        "table ip t {\n\tchain c {\n\t\tth dport 443 accept\n\t}\n}\n"
    );
    // After a protocol match that is not its dependency (a statement between): nft
    // may name it by that protocol; not guessed.
    let counter = expr("counter", &[]);
    let rule = one_rule(&[l4proto, is_tcp, counter, dport, cmp_443, accept()]);
    let TableRead::Native(why) = read(&rule) else {
        panic!("decoded without its dependency");
    };
    assert!(why.contains("th dport without its protocol"), "{why}");
    // An expression not decoded.
    let TableRead::Native(why) = read(&one_rule(&[expr("quota", &[]), accept()])) else {
        panic!("quota decoded");
    };
    assert!(why.contains("chain c: expression quota"), "{why}");
}

#[test]
fn objects_and_flowtables_make_the_table_fall_back() {
    let mut bytes = one_rule(&[accept()]);
    bytes.extend(nfmsg(
        msg::NEWFLOWTABLE,
        &[str_attr(1, "t"), str_attr(2, "f")],
    ));
    assert_eq!(
        read(&bytes),
        TableRead::Native("flowtables not decoded".into())
    );
}

proptest::proptest! {
    /// Any byte of a captured dump changed, any cut: an answer, never a panic.
    #[test]
    fn mutated_native_dumps_never_panic(
        host in proptest::bool::ANY,
        edits in proptest::collection::vec((0usize..40000, proptest::num::u8::ANY), 0..8),
        cut in 0usize..40000,
    ) {
        let mut bytes = if host { HOST_DUMP.to_vec() } else { DUMP.to_vec() };
        for (at, b) in edits {
            let n = bytes.len();
            bytes[at % n] = b;
        }
        bytes.truncate(cut.max(1));
        let mut d = Decoder::new();
        d.push_bytes(&bytes);
        for t in d.finish() {
            if let TableRead::Listing(text) = t.read {
                let _ = plumb_ruleset::nft::parse_text(&text);
            }
        }
    }
}

#[test]
fn times_print_as_nft_1_0_6_time_print_writes_them() {
    use super::set::duration_text;
    // Zero prints nothing in nft 1.0.6 (later versions `0s`): never printed, `None`.
    assert_eq!(duration_text(0), None);
    assert_eq!(duration_text(1).as_deref(), Some("1ms"));
    assert_eq!(duration_text(999).as_deref(), Some("999ms"));
    assert_eq!(duration_text(1000).as_deref(), Some("1s"));
    assert_eq!(duration_text(1500).as_deref(), Some("1s500ms"));
    assert_eq!(duration_text(10_800_000).as_deref(), Some("3h"));
    assert_eq!(duration_text(10_798_500).as_deref(), Some("2h59m58s500ms"));
    // Days, and units that are zero between others left out.
    assert_eq!(duration_text(86_400_001).as_deref(), Some("1d1ms"));
    assert_eq!(duration_text(183_845_006).as_deref(), Some("2d3h4m5s6ms"));
    assert_eq!(
        duration_text(u64::MAX).as_deref(),
        Some("213503982334d14h25m51s615ms")
    );
}

/// A named set `s` of `ipv4_addr` with `flags`, an optional default timeout, and
/// elements of (address, timeout, expiration) in dump order.
fn set_with_elements(
    flags: u32,
    timeout_ms: Option<u64>,
    elements: &[([u8; 4], Option<u64>, Option<u64>)],
) -> Vec<u8> {
    let mut out = nfmsg(msg::NEWTABLE, &[str_attr(1, "t")]);
    let mut set = vec![
        str_attr(1, "t"),
        str_attr(2, "s"),
        attr(3, &be(flags)),
        attr(4, &be(7)),
        attr(5, &be(4)),
    ];
    if let Some(t) = timeout_ms {
        set.push(attr(11, &t.to_be_bytes()));
    }
    out.extend(nfmsg(msg::NEWSET, &set));
    let list: Vec<Vec<u8>> = elements
        .iter()
        .map(|(key, timeout, expires)| {
            let mut e = vec![nested(1, &[attr(1, key)])];
            if let Some(t) = timeout {
                e.push(attr(4, &t.to_be_bytes()));
            }
            if let Some(x) = expires {
                e.push(attr(5, &x.to_be_bytes()));
            }
            nested(1, &e)
        })
        .collect();
    out.extend(nfmsg(
        msg::NEWSETELEM,
        &[str_attr(1, "t"), str_attr(2, "s"), nested(3, &list)],
    ));
    out
}

#[test]
fn elements_print_their_own_timeouts_and_expirations_as_nft_1_0_6_does() {
    // kube-proxy's affinity set (dynamic, timeout; 3h) as traffic fills it: the kernel
    // dumps an element's timeout only when it is not the set's; a zero expiration or
    // timeout prints nothing.
    let bytes = set_with_elements(
        0x20 | 0x10,
        Some(10_800_000),
        &[
            ([10, 0, 0, 3], None, Some(10_798_500)),
            ([10, 0, 0, 1], Some(3_600_000), Some(3_599_976)),
            ([10, 0, 0, 2], Some(93_784_005), Some(0)),
            ([127, 0, 0, 1], Some(0), Some(1)),
        ],
    );
    assert_eq!(
        listing(&bytes),
        "table ip t {\n\tset s {\n\t\ttype ipv4_addr\n\t\tflags dynamic,timeout\n\t\ttimeout 3h\n\t\telements = { 10.0.0.1 timeout 1h expires 59m59s976ms, 10.0.0.2 timeout 1d2h3m4s5ms,\n\t\t\t     10.0.0.3 expires 2h59m58s500ms, 127.0.0.1 expires 1ms }\n\t}\n}\n"
    );
    // `flags timeout` alone with a default timeout: said by the timeout line only.
    let bytes = set_with_elements(0x10, Some(60_000), &[]);
    assert_eq!(
        listing(&bytes),
        "table ip t {\n\tset s {\n\t\ttype ipv4_addr\n\t\ttimeout 1m\n\t}\n}\n"
    );
    // A default timeout of 0 (never dumped by the kernel): not guessed.
    let TableRead::Native(why) = read(&set_with_elements(0x10, Some(0), &[])) else {
        panic!("a zero timeout decoded");
    };
    assert!(why.contains("a timeout of 0 not decoded"), "{why}");
}
