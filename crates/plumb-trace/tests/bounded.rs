//! A trace stays bounded and reports only paths that can happen.
//!
//! Regressions of one input: 29 chains with two conditional jumps each (about 2.7 KB,
//! [`plumb_testkit::conditional_jump_chains`]) took a trace to 4.4 GB of memory and
//! 617 MB of output, each outcome listing the same condition about 4,096 times; and a
//! DROP outcome that needed the source to be in 10.1.0.0/16 and in 10.2.0.0/16 at once.
//! Property tests: random rulesets of conditional jumps give at most `max_paths`
//! outcomes or an INDETERMINATE "more than N paths", and every outcome's conditions
//! are satisfiable: a packet drawn from them, traced with every field given, has that
//! outcome with the probability the first trace claimed.

use plumb_testkit::conditional_jump_chains;
use plumb_trace::{
    CtState, Index, Node, Origin, Outcome, Packet, Proto, Trace, TraceOptions, Verdict, trace,
    trace_with,
};
use proptest::prelude::*;
use std::collections::HashSet;
use std::net::IpAddr;

fn node() -> Node {
    Node {
        local_addrs: vec![plumb_trace::addr::Cidr::parse("192.168.122.10/24").unwrap()],
        ..Node::default()
    }
}

fn index_of(text: &str) -> plumb_ruleset::Ruleset {
    plumb_ruleset::parse_bytes(text.as_bytes(), &Default::default())
        .unwrap()
        .ruleset
}

/// A packet from another machine whose source (address and port) is unknown.
fn from_outside() -> Packet {
    Packet::new(
        "10.1.1.1".parse().unwrap(),
        80,
        Proto::Tcp,
        Origin::External,
    )
}

fn run(text: &str, p: &Packet, options: &TraceOptions) -> Trace {
    let rs = index_of(text);
    let index = Index::build(&rs);
    trace_with(&index, p, &node(), options)
}

fn assert_no_duplicate_conditions(t: &Trace) {
    for o in &t.outcomes {
        let set: HashSet<&String> = o.conditions.iter().collect();
        assert_eq!(set.len(), o.conditions.len(), "{:?}", o.conditions);
    }
}

/// The ruleset of the report: 29 chains, two conditional jumps each, on the source
/// address, on the source address and input interface, on distinct sources and
/// source ports. Each is a handful of outcomes, each condition at most once.
#[test]
fn conditional_jump_chains_stay_bounded() {
    // (what, the condition of chain i's rule k, outcomes)
    type Shape = (&'static str, Box<dyn Fn(usize, usize) -> String>, usize);
    let shapes: [Shape; 3] = [
        ("same source", Box::new(|_, _| "-s 10.0.0.0/8".into()), 2),
        (
            "source or interface",
            Box::new(|_, k| {
                if k == 0 {
                    "-s 10.0.0.0/8".into()
                } else {
                    "-i eth0".into()
                }
            }),
            3,
        ),
        (
            "distinct sources and ports",
            Box::new(|i, k| {
                if k == 0 {
                    format!("-s 10.{i}.0.0/16")
                } else {
                    format!("-p tcp -m tcp --sport {}", 1000 + i)
                }
            }),
            6,
        ),
    ];
    for (what, cond, outcomes) in shapes {
        let text = conditional_jump_chains(29, cond);
        assert!(text.len() < 2800, "{what}: {} bytes", text.len());
        let rs = index_of(&text);
        let index = Index::build(&rs);
        let t = trace(&index, &from_outside(), &node());
        assert!(t.incomplete.is_none(), "{what}: {:?}", t.incomplete);
        assert_eq!(t.outcomes.len(), outcomes, "{what}");
        assert_no_duplicate_conditions(&t);
        assert!(t.outcomes.iter().all(|o| o.conditions.len() <= 2), "{what}");
        let steps: usize = t.outcomes.iter().map(|o| o.steps.len()).sum();
        assert!(steps < 1000, "{what}: {steps} steps");
        let text_out = plumb_trace::explain::explain(&index, &t, true);
        let json = serde_json::to_string(&t.report(&index)).unwrap();
        assert!(
            text_out.len() < 16_000 && json.len() < 64_000,
            "{what}: {} bytes of text, {} of JSON",
            text_out.len(),
            json.len()
        );
        assert!((t.total_mass() - 1.0).abs() < 1e-9, "{what}");
    }
}

/// `-s 10.1.0.0/16 -j X`, then in X `-s 10.2.0.0/16 -j DROP`: no packet is in both,
/// so there is no DROP outcome (and the same for ports, interfaces, a negated
/// prefix and ranges).
#[test]
fn contradictory_conditions_are_no_path() {
    let cases = [
        ("-s 10.1.0.0/16", "-s 10.2.0.0/16"),
        (
            "-p tcp -m tcp --sport 1000",
            "-p tcp -m tcp --sport 2000:3000",
        ),
        ("-i eth0", "-i eth1"),
        ("-i veth+", "! -i veth+"),
        ("! -s 10.0.0.0/8", "-s 10.1.0.0/16"),
        (
            "-m iprange --src-range 10.0.0.1-10.0.0.9",
            "-s 10.0.0.16/28",
        ),
        ("-m addrtype --src-type LOCAL", "-s 10.0.0.0/8"),
    ];
    for (outer, inner) in cases {
        let text = format!(
            "*nat\n:PREROUTING ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\nCOMMIT\n*filter\n:FORWARD ACCEPT [0:0]\n:X - [0:0]\n-A FORWARD {outer} -j X\n-A X {inner} -j DROP\nCOMMIT\n"
        );
        let t = run(&text, &from_outside(), &TraceOptions::default());
        assert!(
            t.outcomes.iter().all(|o| o.verdict != Verdict::Drop),
            "{outer} then {inner}: {:?}",
            t.outcomes
                .iter()
                .map(|o| (o.verdict, &o.conditions))
                .collect::<Vec<_>>()
        );
        assert_eq!(t.outcomes.len(), 2, "{outer} then {inner}");
        assert!((t.total_mass() - 1.0).abs() < 1e-9);
    }
}

/// A condition implied by an earlier one is decided, not asked again.
#[test]
fn implied_conditions_do_not_fork() {
    let text = "*nat\n:PREROUTING ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\nCOMMIT\n*filter\n:FORWARD ACCEPT [0:0]\n:X - [0:0]\n-A FORWARD -s 10.1.0.0/16 -j X\n-A X -s 10.0.0.0/8 -j DROP\n-A X -j ACCEPT\nCOMMIT\n";
    let t = run(text, &from_outside(), &TraceOptions::default());
    assert_eq!(t.outcomes.len(), 2);
    let drop = t
        .outcomes
        .iter()
        .find(|o| o.verdict == Verdict::Drop)
        .unwrap();
    assert_eq!(drop.conditions, ["source address in 10.1.0.0/16"]);
    let accept = t
        .outcomes
        .iter()
        .find(|o| o.verdict == Verdict::Accept)
        .unwrap();
    assert_eq!(accept.conditions, ["source address not in 10.1.0.0/16"]);
}

/// An established connection's state is known; only its NAT status is not.
#[test]
fn established_state_is_known_and_nat_status_is_a_condition() {
    let text = "*nat\n:PREROUTING ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\nCOMMIT\n*filter\n:FORWARD DROP [0:0]\n-A FORWARD -m conntrack --ctstate INVALID -j DROP\n-A FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\nCOMMIT\n";
    let mut p = from_outside();
    p.src = Some("10.9.9.9".parse().unwrap());
    p.ct_state = CtState::Established;
    let t = run(text, &p, &TraceOptions::default());
    assert_eq!(t.outcomes.len(), 1, "{:?}", t.outcomes);
    assert_eq!(t.outcomes[0].verdict, Verdict::Accept);
    assert!(t.outcomes[0].conditions.is_empty());
    let text = "*nat\n:PREROUTING ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\nCOMMIT\n*filter\n:FORWARD ACCEPT [0:0]\n-A FORWARD -m conntrack --ctstate DNAT -j DROP\n-A FORWARD -m conntrack ! --ctstate DNAT -j ACCEPT\n-A FORWARD -j REJECT\nCOMMIT\n";
    let t = run(text, &p, &TraceOptions::default());
    let mut got: Vec<(Verdict, Vec<String>)> = t
        .outcomes
        .iter()
        .map(|o| (o.verdict, o.conditions.clone()))
        .collect();
    got.sort_by_key(|(v, _)| v.as_str());
    assert_eq!(
        got,
        vec![
            (
                Verdict::Accept,
                vec!["the connection is not destination-NATed".to_string()]
            ),
            (
                Verdict::Drop,
                vec!["the connection is destination-NATed (DNAT)".to_string()]
            ),
        ]
    );
}

/// 58 rate limits, each its own: the answers multiply, and exploration stops at the
/// bound with one INDETERMINATE outcome for the rest, marked incomplete.
#[test]
fn exploration_stops_at_max_paths_with_indeterminate() {
    let text = conditional_jump_chains(29, |_, _| "-m limit --limit 5/sec".into());
    let rs = index_of(&text);
    let index = Index::build(&rs);
    let options = TraceOptions {
        max_paths: 32,
        ..TraceOptions::default()
    };
    let t = trace_with(&index, &from_outside(), &node(), &options);
    assert_eq!(t.incomplete.as_deref(), Some("more than 32 paths"));
    assert!(t.truncated);
    assert!(t.outcomes.len() <= 33, "{}", t.outcomes.len());
    let cut: Vec<&Outcome> = t
        .outcomes
        .iter()
        .filter(|o| o.why.starts_with("more than 32 paths"))
        .collect();
    assert_eq!(cut.len(), 1);
    assert_eq!(cut[0].verdict, Verdict::Indeterminate);
    assert!(cut[0].conditions.is_empty());
    // The unexplored part carries the rest of the probability mass.
    assert!((t.total_mass() - 1.0).abs() < 1e-9, "{}", t.total_mass());
    assert_no_duplicate_conditions(&t);
    let text_out = plumb_trace::explain::explain(&index, &t, false);
    assert!(
        text_out.starts_with("INDETERMINATE: more than 32 paths"),
        "{text_out}"
    );
    let json = serde_json::to_value(t.report(&index)).unwrap();
    assert_eq!(json["incomplete"], "more than 32 paths");
    assert_eq!(json["truncated"], true);
}

/// A walk whose every step is decided but whose length doubles with each chain
/// (every rule matches and jumps on) stops at the work bound.
#[test]
fn work_bound_stops_an_exponential_walk() {
    let text = {
        let mut t = conditional_jump_chains(29, |_, _| "-s 10.0.0.0/8".into());
        t = t.replace("-j DROP", "-j LOG");
        t
    };
    let rs = index_of(&text);
    let index = Index::build(&rs);
    let options = TraceOptions {
        max_work: 50_000,
        max_steps: usize::MAX,
        max_transfers: usize::MAX,
        ..TraceOptions::default()
    };
    let t = trace_with(&index, &from_outside(), &node(), &options);
    assert_eq!(
        t.incomplete.as_deref(),
        Some("more than 50000 steps explored")
    );
    let steps: usize = t.outcomes.iter().map(|o| o.steps.len()).sum();
    assert!(steps <= 60_000, "{steps}");
    assert!((t.total_mass() - 1.0).abs() < 1e-9);
}

/// Chains of independent conditional jumps that join again (accounting rules) are
/// merged where the routes meet: one outcome, not one per combination.
#[test]
fn joining_branches_merge_into_one_outcome() {
    let mut text = String::from(
        "*nat\n:PREROUTING ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\nCOMMIT\n*filter\n:FORWARD ACCEPT [0:0]\n:ACCT - [0:0]\n",
    );
    for i in 0..40 {
        text.push_str(&format!(
            "-A FORWARD -i eth{i} -j ACCT\n-A FORWARD -s 10.{i}.0.0/16 -j ACCT\n"
        ));
    }
    text.push_str("-A ACCT -j RETURN\nCOMMIT\n");
    let t = run(&text, &from_outside(), &TraceOptions::default());
    assert!(t.incomplete.is_none());
    assert_eq!(t.outcomes.len(), 1);
    let o = &t.outcomes[0];
    assert_eq!((o.verdict, o.probability), (Verdict::Accept, 1.0));
    assert!(o.conditions.is_empty(), "{:?}", o.conditions);
    assert!(o.routes > 1e20, "{}", o.routes);
    assert!((t.total_mass() - 1.0).abs() < 1e-9);
    // Random choices that join again add up the same way.
    let text = conditional_jump_chains(8, |_, _| {
        "-m statistic --mode random --probability 0.5".into()
    })
    .replace("-j DROP", "-j LOG");
    let t = run(&text, &from_outside(), &TraceOptions::default());
    assert!(t.incomplete.is_none());
    assert_eq!(t.outcomes.len(), 1, "{:?}", t.outcomes);
    assert!((t.outcomes[0].probability - 1.0).abs() < 1e-9);
}

/// A Service with more endpoints than `merge_above` keeps one outcome per endpoint,
/// each with probability 1/n, and with session affinity one more per endpoint.
#[test]
fn many_endpoints_keep_one_outcome_each() {
    use plumb_kubeproxy::{GeneratorConfig, IptablesSaveOptions, KubeProxyRules, ProxierOptions};
    for affinity in [0.0, 1.0] {
        let cluster = plumb_kubeproxy::generate(&GeneratorConfig {
            services: 2,
            endpoints_per_service: 150,
            session_affinity_fraction: affinity,
            with_kube_dns: false,
            ..GeneratorConfig::default()
        })
        .unwrap();
        let text = KubeProxyRules::new(&cluster, &ProxierOptions::default())
            .to_iptables_save(&IptablesSaveOptions::default());
        let rs = index_of(&text);
        let index = Index::build(&rs);
        let svc = cluster
            .services
            .iter()
            .find(|s| s.endpoints.len() == 150)
            .expect("a service with 150 endpoints");
        let mut p = Packet::new(
            IpAddr::V4(svc.cluster_ip),
            svc.port,
            Proto::Tcp,
            Origin::Pod,
        );
        p.src = Some("10.42.0.200".parse().unwrap());
        let t = trace(&index, &p, &node());
        assert!(t.incomplete.is_none());
        let chosen: Vec<&Outcome> = t
            .outcomes
            .iter()
            .filter(|o| o.conditions.iter().all(|c| c.starts_with("not: ")))
            .collect();
        assert_eq!(chosen.len(), 150, "affinity {affinity}");
        for o in &chosen {
            assert_eq!(o.verdict, Verdict::Accept);
            assert!(
                (o.probability - 1.0 / 150.0).abs() < 1e-9,
                "{}",
                o.probability
            );
        }
        let dnats: HashSet<&Option<String>> = chosen.iter().map(|o| &o.dnat).collect();
        assert_eq!(dnats.len(), 150);
        let expected = if affinity > 0.0 { 300 } else { 150 };
        assert_eq!(t.outcomes.len(), expected, "affinity {affinity}");
        assert!((t.total_mass() - 1.0).abs() < 1e-9);
    }
}

// ---------- property tests ----------

/// A condition on something the packets below leave unknown, or on what they give.
fn cond() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        prop_oneof![
            Just("10.0.0.0/8"),
            Just("10.1.0.0/16"),
            Just("10.1.2.0/24"),
            Just("10.2.0.0/16"),
            Just("192.168.122.10"),
            Just("0.0.0.0/1"),
        ]
        .prop_flat_map(|c| (Just(c), any::<bool>()))
        .prop_map(|(c, neg)| format!("{}-s {c}", if neg { "! " } else { "" })),
        Just("-m iprange --src-range 10.1.0.0-10.1.255.255".to_string()),
        Just("-m iprange ! --src-range 10.0.0.0-10.1.2.255".to_string()),
        prop_oneof![Just("1000"), Just("1000:2000"), Just("1500"), Just("40000")]
            .prop_flat_map(|p| (Just(p), any::<bool>()))
            .prop_map(|(p, neg)| format!(
                "-p tcp -m tcp {}--sport {p}",
                if neg { "! " } else { "" }
            )),
        prop_oneof![Just("80"), Just("81"), Just("1:100")]
            .prop_map(|p| format!("-p tcp -m tcp --dport {p}")),
        Just("-m multiport --sports 1000,3000:4000".to_string()),
        prop_oneof![Just("eth0"), Just("eth+"), Just("veth1"), Just("veth+")]
            .prop_flat_map(|i| (Just(i), any::<bool>()))
            .prop_map(|(i, neg)| format!("{}-i {i}", if neg { "! " } else { "" })),
        prop_oneof![Just("eth1"), Just("eth+"), Just("lo")]
            .prop_flat_map(|i| (Just(i), any::<bool>()))
            .prop_map(|(i, neg)| format!("{}-o {i}", if neg { "! " } else { "" })),
        Just("-m addrtype --src-type LOCAL".to_string()),
        Just("-m addrtype ! --src-type UNICAST".to_string()),
        Just("-d 10.1.1.0/24".to_string()),
        Just("-m mark --mark 0x1/0x1".to_string()),
        Just("-m statistic --mode random --probability 0.5".to_string()),
    ]
}

fn target(chain: usize, chains: usize) -> impl Strategy<Value = String> {
    // User chain Ci jumps only to Cj with j > i: no loops.
    let later: Vec<String> = (chain + 1..chains).map(|j| format!("C{j}")).collect();
    let jump = if later.is_empty() {
        Just("-j RETURN".to_string()).boxed()
    } else {
        (proptest::sample::select(later), any::<bool>())
            .prop_map(|(c, goto)| format!("-{} {c}", if goto { "g" } else { "j" }))
            .boxed()
    };
    prop_oneof![
        4 => jump,
        1 => Just("-j ACCEPT".to_string()),
        1 => Just("-j DROP".to_string()),
        1 => Just("-j REJECT".to_string()),
        1 => Just("-j RETURN".to_string()),
        1 => Just("-j MARK --set-xmark 0x1/0x1".to_string()),
        1 => Just(String::new()),
    ]
}

/// A filter table of conditional jumps between user chains, reached from FORWARD,
/// INPUT and OUTPUT, and a nat table that may DNAT (always with a port).
fn jump_ruleset() -> impl Strategy<Value = String> {
    const CHAINS: usize = 5;
    let rule = |from: usize| {
        (cond(), cond(), target(from, CHAINS)).prop_map(move |(a, b, t)| (from, a, b, t))
    };
    let rules = proptest::collection::vec((0..CHAINS).prop_flat_map(rule), 1..24);
    let nat = proptest::collection::vec(
        (
            prop_oneof![Just("PREROUTING"), Just("OUTPUT")],
            cond(),
            prop_oneof![
                Just("-j DNAT --to-destination 10.42.9.9:8080"),
                Just("-j DNAT --to-destination 192.168.122.10:22"),
                Just("-j ACCEPT"),
            ],
        ),
        0..3,
    );
    (rules, nat, any::<bool>()).prop_map(|(rules, nat, drop)| {
        let mut s = String::from(
            "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n",
        );
        for (chain, c, t) in nat {
            // -i does not exist in OUTPUT.
            let c = if chain == "OUTPUT" && c.contains("-i ") { String::new() } else { c };
            s.push_str(&format!("-A {chain} {c} {t}\n"));
        }
        s.push_str(&format!(
            "COMMIT\n*filter\n:INPUT ACCEPT [0:0]\n:FORWARD {} [0:0]\n:OUTPUT ACCEPT [0:0]\n",
            if drop { "DROP" } else { "ACCEPT" }
        ));
        for i in 0..CHAINS {
            s.push_str(&format!(":C{i} - [0:0]\n"));
        }
        s.push_str("-A FORWARD -j C0\n-A INPUT -j C0\n-A OUTPUT -j C1\n");
        for (chain, a, b, t) in rules {
            // Two protocol matches in one rule would contradict iptables' syntax.
            let b = if a.starts_with("-p") && b.starts_with("-p") { String::new() } else { b };
            s.push_str(&format!("-A C{chain} {a} {b} {t}\n"));
        }
        s.push_str("COMMIT\n");
        s
    })
}

fn packet() -> impl Strategy<Value = Packet> {
    (
        prop_oneof![Just("10.1.1.1"), Just("10.43.0.1"), Just("192.168.122.10")],
        prop_oneof![
            Just(Origin::External),
            Just(Origin::Pod),
            Just(Origin::Host)
        ],
        prop_oneof![Just(Proto::Tcp), Just(Proto::Udp), Just(Proto::Icmp)],
        prop_oneof![Just(Some(80u16)), Just(None)],
        proptest::option::of(Just("10.1.2.3")),
    )
        .prop_map(|(dst, origin, proto, dport, src)| {
            let mut p = Packet::new(dst.parse().unwrap(), 0, proto, origin);
            p.dport = if proto == Proto::Icmp { None } else { dport };
            p.src = src.map(|s| s.parse().unwrap());
            p
        })
}

/// What an outcome ends in, as a witness trace can compare it.
type End = (Verdict, String, Option<String>, Option<String>, IpAddr, u32);

fn end(o: &Outcome) -> End {
    (
        o.verdict,
        o.why.clone(),
        o.dnat.clone(),
        o.snat.clone(),
        o.final_dst,
        o.mark,
    )
}

/// The probability a trace gives to ending in `e` for packet `x`: the outcomes
/// ending so whose conditions admit `x`.
fn probability_for(t: &Trace, e: &End, x: &Packet) -> f64 {
    t.outcomes
        .iter()
        .filter(|o| end(o) == *e && o.constraints.admits(x) == Some(true))
        .map(|o| o.probability)
        .sum()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, max_shrink_iters: 400, failure_persistence: None, ..ProptestConfig::default() })]

    /// Bounded, never a panic, no condition twice, and every outcome's conditions
    /// satisfiable: a packet drawn from them, with every field given, reaches that
    /// outcome with the probability the trace gave it (summed over outcomes whose
    /// conditions also admit the packet).
    #[test]
    fn conditional_jumps_give_bounded_satisfiable_outcomes(
        text in jump_ruleset(),
        p in packet(),
        max_paths in 4usize..48,
        merge_above in prop_oneof![Just(0usize), Just(64)],
    ) {
        let rs = index_of(&text);
        let index = Index::build(&rs);
        let node = node();
        // merge_above 0: every trace merges equivalent branches.
        let options = TraceOptions { max_paths, merge_above, ..TraceOptions::default() };
        let t = trace_with(&index, &p, &node, &options);
        prop_assert!(!t.outcomes.is_empty());
        prop_assert!((t.total_mass() - 1.0).abs() < 1e-6, "mass {}", t.total_mass());
        match &t.incomplete {
            Some(why) => {
                prop_assert_eq!(why, &format!("more than {max_paths} paths"));
                prop_assert!(t.outcomes.len() <= max_paths + 1);
            }
            None => prop_assert!(t.outcomes.len() <= max_paths),
        }
        assert_no_duplicate_conditions(&t);
        let _ = plumb_trace::explain::explain(&index, &t, true);
        for o in &t.outcomes {
            if o.why.starts_with("more than ") {
                continue;
            }
            let x = o.constraints.witness(&p, &node);
            prop_assert!(x.is_some(), "no packet satisfies {:?}", o.conditions);
            let x = x.unwrap();
            prop_assert_eq!(o.constraints.admits(&x), Some(true));
            let concrete = trace_with(&index, &x, &node, &TraceOptions::default());
            prop_assert!(concrete.incomplete.is_none());
            prop_assert!(concrete.outcomes.iter().all(|c| c.conditions.is_empty()),
                "a fully given packet has no conditions: {:?}", concrete.outcomes.iter().map(|c| &c.conditions).collect::<Vec<_>>());
            let e = end(o);
            let want: f64 = concrete.outcomes.iter().filter(|c| end(c) == e).map(|c| c.probability).sum();
            let got = probability_for(&t, &e, &x);
            if t.incomplete.is_none() {
                prop_assert!((want - got).abs() < 1e-9,
                    "{:?} for {:?}: trace says {}, the packet alone {}\n{:?}", e, x, got, want, o.conditions);
            } else {
                prop_assert!(want + 1e-9 >= got, "{:?}: {} > {}", e, got, want);
            }
        }
    }
}
