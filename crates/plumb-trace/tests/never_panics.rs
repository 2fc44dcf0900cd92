//! Property tests: random rulesets (iptables-save and nft text) and random packets
//! never make the index or the simulator panic, and every trace's probability mass
//! adds up (sum of probability × share == 1, the unexplored part of a trace cut at a
//! bound included).

use plumb_trace::{
    CtState, Index, Node, Origin, Packet, Proto, RecentAssumption, TraceOptions, trace, trace_with,
};
use proptest::prelude::*;

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("-s 10.0.0.0/8".to_string()),
        Just("! -d 10.43.0.1/32".to_string()),
        Just("-p tcp -m tcp --dport 80".to_string()),
        Just("-p udp --sport 1:1024".to_string()),
        Just("-m statistic --mode random --probability 0.3".to_string()),
        Just("-m statistic --mode nth --every 3 --packet 0".to_string()),
        Just("-m recent --rcheck --name X --rsource".to_string()),
        Just("-m recent --set --name X --rsource".to_string()),
        Just("-m limit --limit 5/sec".to_string()),
        Just("-m set --match-set S src".to_string()),
        Just("-m mark --mark 0x1/0x1".to_string()),
        Just("-m conntrack --ctstate NEW,DNAT".to_string()),
        Just("-m addrtype --dst-type LOCAL".to_string()),
        Just("-m physdev --physdev-is-bridged".to_string()),
        Just("-i eth+".to_string()),
        Just("-o lo".to_string()),
        Just("-m u32 --u32 0x0".to_string()),
        Just("-m bogus --what ever".to_string()),
        "[ -~]{0,12}",
    ]
}

fn target() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("-j ACCEPT".to_string()),
        Just("-j DROP".to_string()),
        Just("-j RETURN".to_string()),
        Just("-j A".to_string()),
        Just("-j B".to_string()),
        Just("-g A".to_string()),
        Just("-j MISSING".to_string()),
        Just("-j DNAT --to-destination 10.1.1.1:80".to_string()),
        Just("-j DNAT --to-destination 10.1.1.1-10.1.1.9:80-90".to_string()),
        Just("-j MASQUERADE".to_string()),
        Just("-j MARK --set-xmark 0x1/0x1".to_string()),
        Just("-j CONNMARK --save-mark".to_string()),
        Just("-j NFQUEUE --queue-num 1".to_string()),
        Just("-j TPROXY --on-port 1".to_string()),
        Just(String::new()),
    ]
}

fn rule() -> impl Strategy<Value = (&'static str, String, String, String)> {
    (
        prop_oneof![
            Just("PREROUTING"),
            Just("OUTPUT"),
            Just("FORWARD"),
            Just("INPUT"),
            Just("POSTROUTING"),
            Just("A"),
            Just("B")
        ],
        word(),
        word(),
        target(),
    )
}

fn ruleset() -> impl Strategy<Value = String> {
    (proptest::collection::vec(rule(), 0..30), proptest::collection::vec(rule(), 0..30)).prop_map(|(nat, filter)| {
        let mut s = String::new();
        for (t, rules) in [("nat", nat), ("filter", filter)] {
            s.push_str(&format!("*{t}\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n:A - [0:0]\n:B - [0:0]\n"));
            for (c, a, b, j) in rules {
                s.push_str(&format!("-A {c} {a} {b} {j}\n"));
            }
            s.push_str("COMMIT\n");
        }
        s
    })
}

fn packet() -> impl Strategy<Value = Packet> {
    (
        prop_oneof![
            Just("10.43.0.1"),
            Just("10.1.1.1"),
            Just("127.0.0.1"),
            Just("192.168.1.1"),
            Just("fd00::1")
        ],
        any::<u16>(),
        prop_oneof![
            Just(Proto::Tcp),
            Just(Proto::Udp),
            Just(Proto::Icmp),
            Just(Proto::Other(47))
        ],
        prop_oneof![
            Just(Origin::Host),
            Just(Origin::Pod),
            Just(Origin::External)
        ],
        proptest::option::of(prop_oneof![Just("10.0.0.5"), Just("10.42.0.1")]),
        prop_oneof![
            Just(CtState::New),
            Just(CtState::Established),
            Just(CtState::Untracked)
        ],
        any::<u32>(),
    )
        .prop_map(|(dst, port, proto, origin, src, ct, mark)| {
            let mut p = Packet::new(dst.parse().unwrap(), port, proto, origin);
            p.src = src
                .map(|s| s.parse().unwrap())
                .filter(|s: &std::net::IpAddr| s.is_ipv4() == p.dst.is_ipv4());
            p.ct_state = ct;
            p.mark = mark;
            p
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, max_shrink_iters: 200, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_iptables_rulesets_never_panic(text in ruleset(), packets in proptest::collection::vec(packet(), 1..4)) {
        let parsed = plumb_ruleset::parse_bytes(text.as_bytes(), &Default::default()).unwrap();
        let index = Index::build(&parsed.ruleset);
        for recent in [RecentAssumption::Branch, RecentAssumption::Fresh] {
            let node = Node { local_addrs: vec![plumb_trace::addr::Cidr::parse("10.1.1.1/24").unwrap()], recent, ..Node::default() };
            for p in &packets {
                let opts = TraceOptions { max_paths: 256, max_transfers: 200, ..TraceOptions::default() };
                let t = trace_with(&index, p, &node, &opts);
                prop_assert!(!t.outcomes.is_empty());
                prop_assert!((t.total_mass() - 1.0).abs() < 1e-6, "mass {}", t.total_mass());
                prop_assert!(t.outcomes.len() <= 257, "{} outcomes", t.outcomes.len());
                let _ = t.report(&index);
                let _ = plumb_trace::explain::explain(&index, &t, true);
            }
        }
    }

    #[test]
    fn random_nft_text_never_panics(body in proptest::collection::vec("[ -~]{0,40}", 0..12), p in packet()) {
        let mut text = String::from("table ip t {\n chain c { type nat hook output priority -100; policy accept;\n");
        for line in body {
            text.push_str(&line);
            text.push('\n');
        }
        text.push_str(" }\n}\n");
        if let Ok(parsed) = plumb_ruleset::parse_bytes(text.as_bytes(), &Default::default()) {
            let index = Index::build(&parsed.ruleset);
            let t = trace(&index, &p, &Node::default());
            let _ = t.report(&index);
        }
    }
}

#[test]
fn ipset_text_never_panics() {
    proptest!(|(text in "[ -~\n]{0,200}")| {
        let _ = plumb_trace::ipset::IpSets::parse(&text);
    });
}
