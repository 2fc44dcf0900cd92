//! The `iptables -nvL` listing reader against real captures (tests/data/listing,
//! made by capture.sh in a private network namespace with iptables 1.8.9): every
//! listing must agree with the `iptables-save -c` taken from the same kernel state.

use plumb_ruleset::iptables::listing::{self, Fragment, ListedMatch, ListedRule, ListedTarget};
use plumb_ruleset::iptables::save::{self, IptablesInput};
use plumb_ruleset::{Completeness, Family, RuleBody, Ruleset, Severity, Table};
use proptest::prelude::*;

fn data(name: &str) -> String {
    let path = format!("{}/tests/data/listing/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn saved(name: &str, family: Family) -> Ruleset {
    let rs = save::parse(
        &data(name),
        &IptablesInput {
            family,
            ..IptablesInput::default()
        },
    );
    assert!(rs.diagnostics.is_empty(), "{:?}", rs.diagnostics);
    rs
}

fn errors(rs: &Ruleset) -> Vec<String> {
    rs.diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(ToString::to_string)
        .collect()
}

fn listed(r: &plumb_ruleset::Rule) -> &ListedRule {
    match &r.body {
        RuleBody::Approximate(l) => l,
        other => panic!("expected an approximate rule, got {other:?}"),
    }
}

#[derive(Clone, Copy, PartialEq)]
enum CounterCheck {
    Exact,
    Rounded,
}

/// What `iptables -nvL` prints for `n` (xtables_print_num), as the value it stands for.
fn printed(n: u64) -> u64 {
    if n <= 99_999 {
        return n;
    }
    let mut v = n;
    let mut unit = 1u64;
    for _ in 0..4 {
        v = (v + 500) / 1000;
        unit *= 1000;
        if v <= 9999 {
            break;
        }
    }
    v * unit
}

/// Compares one listed table with the same table from iptables-save; returns rules compared.
fn compare(list: &Table, save: &Table, counters: CounterCheck) -> usize {
    let mut names_l: Vec<&str> = list.chains.iter().map(|c| &*c.name).collect();
    let mut names_s: Vec<&str> = save.chains.iter().map(|c| &*c.name).collect();
    names_l.sort_unstable();
    names_s.sort_unstable();
    assert_eq!(names_l, names_s, "chains of table {}", save.name);
    let mut compared = 0;
    for sc in &save.chains {
        let lc = list.chain(&sc.name).unwrap();
        let ctx = format!("{} {}", save.name, sc.name);
        assert_eq!(lc.rules.len(), sc.rules.len(), "rule count of {ctx}");
        assert_eq!(lc.policy(), sc.policy(), "policy of {ctx}");
        assert_eq!(lc.is_builtin(), sc.is_builtin(), "{ctx}");
        let pairs = [(
            lc.base.as_ref().and_then(|b| b.counters),
            sc.base.as_ref().and_then(|b| b.counters),
        )];
        for ((lp, lr), (sp, sr)) in lc.positioned().zip(sc.positioned()) {
            let l = listed(lr);
            let x = sr.xt().unwrap();
            let ctx = format!("{ctx} rule {sp}: {}", lr.text);
            assert_eq!(lp, sp);
            assert_eq!(
                l.target.as_deref(),
                x.target().map(|t| t.name()),
                "target of {ctx}"
            );
            assert_eq!(l.goto, x.target().is_some_and(|t| t.is_goto()), "{ctx}");
            assert_eq!(lr.chain_references(), sr.chain_references(), "{ctx}");
            assert_eq!(lr.comments(), sr.comments(), "comments of {ctx}");
            let comments: Vec<&str> = l.comments().collect();
            assert_eq!(comments.len(), x.comments().count(), "{ctx}");
            if let Some(t) = x.target() {
                for opt in ["--to-destination", "--to-source"] {
                    if let Some(o) = t.option(opt) {
                        let want: Vec<String> = o.args().map(|a| a.into_owned()).collect();
                        assert_eq!(l.nat_to(), want.as_slice(), "NAT of {ctx}");
                    }
                }
                if let Some(o) = t.option("--set-xmark") {
                    let a = o.arg(0).unwrap();
                    let (v, m) = a.split_once('/').unwrap();
                    let hex =
                        |s: &str| u32::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
                    let got = l
                        .target_details
                        .as_deref()
                        .and_then(ListedTarget::mark_xset);
                    assert_eq!(got, Some((hex(v), hex(m))), "MARK of {ctx}");
                }
                if let Some(o) = t.option("--reject-with") {
                    assert_eq!(
                        l.target_details.as_deref(),
                        Some(&ListedTarget::Reject {
                            with: o.arg(0).unwrap().into_owned()
                        }),
                        "{ctx}"
                    );
                }
            }
            let probability = x
                .match_named("statistic")
                .and_then(|m| m.option("--probability"))
                .and_then(|o| o.arg(0));
            assert_eq!(
                l.probability(),
                probability.as_deref(),
                "probability of {ctx}"
            );
            // Generic options the columns carry.
            let src = x.generic_option("-s");
            assert_eq!(l.source.negated, src.is_some_and(|o| o.negated()), "{ctx}");
            if let Some(s) = src {
                let a = s.arg(0).unwrap();
                let want = a
                    .strip_suffix("/32")
                    .or(a.strip_suffix("/128"))
                    .unwrap_or(&a);
                assert_eq!(&*l.source.value, want, "source of {ctx}");
            }
            let iface = x
                .generic_option("-i")
                .map(|o| (o.negated(), o.arg(0).unwrap()));
            assert_eq!(
                l.in_interface.as_ref().map(|n| (n.negated, &*n.value)),
                iface.as_ref().map(|(n, v)| (*n, v.as_ref())),
                "in interface of {ctx}"
            );
            let frag = x.generic_option("-f").map(|o| o.negated());
            let want = match frag {
                None => Fragment::Any,
                Some(false) => Fragment::Fragments,
                Some(true) => Fragment::NotFragments,
            };
            assert_eq!(l.fragment, want, "{ctx}");
            pairs_check(
                lr.counters(),
                sr.counters(),
                counters,
                l.counters_rounded,
                &ctx,
            );
            compared += 1;
        }
        for (l, s) in pairs {
            pairs_check(l, s, counters, false, &format!("policy of {}", sc.name));
        }
    }
    compared
}

fn pairs_check(
    l: Option<plumb_ruleset::Counters>,
    s: Option<plumb_ruleset::Counters>,
    check: CounterCheck,
    rounded: bool,
    ctx: &str,
) {
    if l.is_none() && s.is_none() && ctx.starts_with("policy") {
        return; // a user chain
    }
    let (Some(l), Some(s)) = (l, s) else {
        panic!("counters missing for {ctx}: {l:?} {s:?}");
    };
    match check {
        CounterCheck::Exact => {
            assert_eq!(l, s, "{ctx}");
            assert!(!rounded, "{ctx}");
        }
        CounterCheck::Rounded => {
            for (a, b) in [(l.packets, s.packets), (l.bytes, s.bytes)] {
                assert_eq!(a, printed(b), "{ctx}: listed {a} for {b}");
            }
            let any_rounded = printed(s.packets) != s.packets || printed(s.bytes) != s.bytes;
            assert!(
                !any_rounded || rounded || ctx.starts_with("policy"),
                "{ctx}"
            );
        }
    }
}

fn no_unrecognised(rs: &Ruleset) {
    for t in &rs.tables {
        for c in &t.chains {
            for r in &c.rules {
                assert!(
                    listed(r).unrecognised.is_empty(),
                    "{}: {:?}",
                    r.text,
                    listed(r).unrecognised
                );
            }
        }
    }
}

#[test]
fn nat_nvl_matches_iptables_save() {
    let save = saved("kube-node.save-c", Family::Ip);
    let rs = listing::parse(&data("kube-node.nat.nvL"), Family::Ip, Some("nat"));
    assert_eq!(errors(&rs), Vec::<String>::new());
    assert_eq!(rs.completeness, Completeness::Full);
    assert!(rs.approximate);
    assert_eq!(rs.tables.len(), 1);
    let n = compare(
        &rs.tables[0],
        save.table(Family::Ip, "nat").unwrap(),
        CounterCheck::Rounded,
    );
    assert_eq!(n, save.table(Family::Ip, "nat").unwrap().rule_count());
    assert!(n > 50, "the generated node has a realistic nat table");
    no_unrecognised(&rs);
    // Only the note about rounded counters.
    assert_eq!(rs.diagnostics.len(), 1, "{:?}", rs.diagnostics);
    let sep = rs.tables[0]
        .chain("KUBE-SEP-GKZYJD3CL4Z7DFJM")
        .map(|c| listed(&c.rules[1]).clone())
        .unwrap();
    assert_eq!(sep.nat_to(), ["192.168.122.10:6443"]);
    assert_eq!(&*sep.protocol.value, "6");
    assert_eq!(sep.comment.as_deref(), Some("default/kubernetes:https"));
}

#[test]
fn exact_counters_vnxl_match_iptables_save() {
    let save = saved("kube-node.save-c", Family::Ip);
    let rs = listing::parse(&data("kube-node.filter.vnxL"), Family::Ip, Some("filter"));
    assert!(rs.diagnostics.is_empty(), "{:?}", rs.diagnostics);
    let n = compare(
        &rs.tables[0],
        save.table(Family::Ip, "filter").unwrap(),
        CounterCheck::Exact,
    );
    assert_eq!(n, save.table(Family::Ip, "filter").unwrap().rule_count());
    assert!(n > 10);
    no_unrecognised(&rs);
}

#[test]
fn line_numbers_listing_matches_iptables_save() {
    let save = saved("kube-node.save-c", Family::Ip);
    let rs = listing::parse(
        &data("kube-node.filter.nvL-num"),
        Family::Ip,
        Some("filter"),
    );
    assert_eq!(errors(&rs), Vec::<String>::new());
    compare(
        &rs.tables[0],
        save.table(Family::Ip, "filter").unwrap(),
        CounterCheck::Rounded,
    );
    for c in &rs.tables[0].chains {
        for (position, r) in c.positioned() {
            assert_eq!(listed(r).line_number, Some(position));
        }
    }
    let fwd = rs.tables[0].chain("FORWARD").unwrap();
    assert!(!fwd.rules.is_empty(), "kube-proxy hooks FORWARD");
}

#[test]
fn mangle_without_rules() {
    let save = saved("kube-node.save-c", Family::Ip);
    let rs = listing::parse(&data("kube-node.mangle.nvL"), Family::Ip, None);
    assert_eq!(errors(&rs), Vec::<String>::new());
    // The caller did not name the table: guessed from the five built-in chains, with a note.
    assert_eq!(&*rs.tables[0].name, "mangle");
    assert!(
        rs.diagnostics
            .iter()
            .any(|d| d.message.contains("guessed from its built-in chains")),
        "{:?}",
        rs.diagnostics
    );
    compare(
        &rs.tables[0],
        save.table(Family::Ip, "mangle").unwrap(),
        CounterCheck::Rounded,
    );
}

#[test]
fn every_table_of_a_collected_file_with_separators() {
    let save = saved("extras.save-c", Family::Ip);
    let rs = listing::parse(&data("extras.all.nvL"), Family::Ip, None);
    assert_eq!(errors(&rs), Vec::<String>::new());
    let names: Vec<&str> = rs.tables.iter().map(|t| &*t.name).collect();
    assert_eq!(names, ["raw", "mangle", "nat", "filter"]);
    let mut n = 0;
    for t in &rs.tables {
        n += compare(
            t,
            save.table(Family::Ip, &t.name).unwrap(),
            CounterCheck::Rounded,
        );
    }
    assert_eq!(n, save.rule_count());
    // What the reader does not know stays verbatim.
    let mut unrecognised: Vec<String> = rs
        .tables
        .iter()
        .flat_map(|t| &t.chains)
        .flat_map(|c| &c.rules)
        .flat_map(|r| listed(r).unrecognised.clone())
        .collect();
    unrecognised.sort();
    assert_eq!(
        unrecognised,
        [
            "CONNMARK save",
            "CT notrack",
            "TCPMSS clamp to PMTU",
            "icmptype 8"
        ]
    );
    let note = rs
        .diagnostics
        .iter()
        .find(|d| d.message.contains("does not recognise"))
        .unwrap();
    assert!(note.message.starts_with("4 listed rule(s)"), "{note}");
}

fn rule<'a>(rs: &'a Ruleset, table: &str, chain: &str, i: usize) -> &'a ListedRule {
    let t = rs.tables.iter().find(|t| &*t.name == table).unwrap();
    listed(&t.chain(chain).unwrap().rules[i])
}

#[test]
fn recognised_matches_and_targets() {
    let rs = listing::parse(&data("extras.all.nvL"), Family::Ip, None);
    let r = rule(&rs, "nat", "KUBE-SVC-SESSIONAFFINITY1", 0);
    assert_eq!(
        r.matches[1],
        ListedMatch::Recent {
            negated: false,
            command: "CHECK".into(),
            seconds: Some("10800".into()),
            hit_count: None,
            reap: true,
            ttl: false,
            name: Some("KUBE-SEP-AAAAAAAAAAAAAAAA".into()),
            side: Some("source".into()),
            mask: Some("255.255.255.255".into()),
        }
    );
    let r = rule(&rs, "nat", "OUTPUT", 0);
    assert!(r.goto);
    assert!(r.destination.negated);
    assert!(
        matches!(&r.matches[0], ListedMatch::AddrType { destination_type: Some(t), .. } if &*t.value == "LOCAL")
    );
    let r = rule(&rs, "nat", "POSTROUTING", 0);
    assert_eq!(
        r.target_details.as_deref(),
        Some(&ListedTarget::Masquerade {
            ports: Some("1024-65535".into()),
            random: false,
            random_fully: true
        })
    );
    let r = rule(&rs, "nat", "POSTROUTING", 1);
    assert_eq!(
        r.target_details.as_deref(),
        Some(&ListedTarget::Nat {
            to: vec!["192.0.2.10-192.0.2.20:1000-2000".into()],
            random: false,
            random_fully: false,
            persistent: true
        })
    );
    let r = rule(&rs, "nat", "PLUMB-NAT", 1);
    assert!(
        matches!(&r.matches[0], ListedMatch::Ports { protocol, source: Some(s), destination: Some(d), .. }
        if protocol == "udp" && s.first == "53" && d.first == "1000" && d.last.as_deref() == Some("2000"))
    );
    let r = rule(&rs, "nat", "PLUMB-NAT", 2);
    assert!(
        matches!(&r.matches[0], ListedMatch::Multiport { ports, .. } if ports == &["80", "443", "8000:8080"])
    );
    assert!(
        matches!(&r.matches[1], ListedMatch::Statistic { mode, every: Some(e), packet: Some(p), .. }
        if mode == "nth" && e == "3" && p == "1")
    );
    let r = rule(&rs, "mangle", "PLUMB-MARKS", 1);
    assert!(
        matches!(&r.matches[0], ListedMatch::Mark { negated: true, value, mask: Some(m) } if value == "0x8000" && m == "0x8000")
    );
    let r = rule(&rs, "mangle", "PLUMB-MARKS", 3);
    assert!(
        matches!(&r.matches[0], ListedMatch::Physdev { options } if options == &["--physdev-in veth0", "--physdev-is-bridged"])
    );
    let r = rule(&rs, "mangle", "PLUMB-MARKS", 4);
    assert_eq!(r.target, None);
    assert_eq!(r.comment.as_deref(), Some("comment only, no target"));
    let r = rule(&rs, "filter", "INPUT", 1);
    assert!(
        matches!(&r.matches[0], ListedMatch::ConnState { keyword, states, negated: false } if keyword == "state" && states == &["RELATED", "ESTABLISHED"])
    );
    let r = rule(&rs, "filter", "PLUMB-INPUT", 0);
    assert!(r.in_interface.as_ref().unwrap().negated);
    assert!(
        matches!(&r.matches[0], ListedMatch::Ports { destination: Some(d), .. } if d.negated && d.first == "22")
    );
    let r = rule(&rs, "filter", "PLUMB-INPUT", 1);
    assert_eq!(r.comment.as_deref(), Some("https; the */ is not the end"));
    let r = rule(&rs, "filter", "PLUMB-LOG", 0);
    assert_eq!(
        r.matches[0],
        ListedMatch::Limit {
            average: "10/min".into(),
            burst: "5".into()
        }
    );
    assert_eq!(
        r.target_details.as_deref(),
        Some(&ListedTarget::Log {
            flags: Some("0".into()),
            level: Some("6".into()),
            prefix: Some("plumb drop: ".into())
        })
    );
}

#[test]
fn ip6tables_listing_matches_ip6tables_save() {
    let save = saved("extras6.save-c", Family::Ip6);
    let rs = listing::parse(&data("extras6.all.nvL"), Family::Ip6, None);
    assert_eq!(errors(&rs), Vec::<String>::new());
    assert!(rs.tables.iter().all(|t| t.family == Family::Ip6));
    for t in &rs.tables {
        compare(
            t,
            save.table(Family::Ip6, &t.name).unwrap(),
            CounterCheck::Rounded,
        );
    }
    let r = rule(&rs, "nat", "KUBE-SEP-V6DNSA0000000000A", 1);
    assert_eq!(r.nat_to(), ["[fd00:10:244:1::3]:53"]);
}

#[test]
fn rule_before_any_chain_is_an_error_with_location() {
    let text = "    0     0 ACCEPT     0    --  *      *       0.0.0.0/0            0.0.0.0/0\n";
    let rs = listing::parse(text, Family::Ip, Some("filter"));
    assert_eq!(rs.diagnostics.len(), 1);
    let d = &rs.diagnostics[0];
    assert_eq!((d.line, d.column, d.severity), (1, 5, Severity::Error));
    assert!(d.message.contains("before any rule"), "{d}");
    assert!(d.text.starts_with("0     0 ACCEPT"));
}

#[test]
fn malformed_lines_are_reported_and_reading_goes_on() {
    let text = "Chain INPUT (policy ACCEPT 0 packets, 0 bytes)
 pkts bytes target     prot opt in     out     source               destination
   x0     0 ACCEPT     0    --  *      *       0.0.0.0/0            0.0.0.0/0
    0     0 ACCEPT     0    --  *      *       0.0.0.0/0
Chain FOO (policy
    0     0 DROP       0    --  *      *       0.0.0.0/0            0.0.0.0/0
Chain BAR (0 references)
 pkts bytes target     prot opt in     out     source               destination
    0     0 DROP       0    --  *      *       0.0.0.0/0            0.0.0.0/0
";
    let rs = listing::parse(text, Family::Ip, Some("filter"));
    let errs: Vec<(u32, u32)> = rs
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| (d.line, d.column))
        .collect();
    assert_eq!(
        errs,
        [(3, 4), (4, 13), (5, 1), (6, 5)],
        "{:?}",
        rs.diagnostics
    );
    assert_eq!(
        rs.diagnostics[0].text,
        "x0     0 ACCEPT     0    --  *      *       0.0.0.0/0            0.0.0.0/0"
    );
    assert!(rs.diagnostics[0].message.contains("packet count"));
    assert_eq!(rs.tables[0].chain("BAR").unwrap().rules.len(), 1);
}

#[test]
fn elision_line_marks_truncation() {
    let full = data("kube-node.nat.nvL");
    let mut lines: Vec<&str> = full.lines().collect();
    lines.insert(20, "....");
    let text = lines.join("\n") + "\n";
    let rs = listing::parse(&text, Family::Ip, Some("nat"));
    assert_eq!(rs.completeness, Completeness::Truncated);
    assert!(rs.approximate, "a truncated listing is still approximate");
    let e: Vec<_> = rs
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .collect();
    assert_eq!(e.len(), 1);
    assert_eq!((e[0].line, e[0].column), (21, 1));
}

#[test]
fn input_cut_mid_rule_is_truncated() {
    let full = data("kube-node.nat.nvL");
    // Cut inside a rule's columns, and inside a comment.
    let cut_columns = full.find(" 10.42.").unwrap() - 3;
    let comment = full.find("/* ").unwrap();
    for cut in [cut_columns, comment + 10] {
        let text = &full[..cut];
        let rs = listing::parse(text, Family::Ip, Some("nat"));
        assert_eq!(rs.completeness, Completeness::Truncated, "cut at {cut}");
        let last_line = text.lines().count() as u32;
        let d = rs
            .diagnostics
            .iter()
            .find(|d| d.severity == Severity::Error)
            .unwrap();
        assert_eq!(d.line, last_line, "{d}");
        assert!(
            d.message.contains("truncated") || d.message.contains("cut"),
            "{d}"
        );
    }
}

#[test]
fn concatenated_tables_without_separators() {
    let text = data("kube-node.filter.vnxL") + &data("kube-node.nat.nvL");
    let rs = listing::parse(&text, Family::Ip, None);
    let names: Vec<&str> = rs.tables.iter().map(|t| &*t.name).collect();
    assert_eq!(names, ["filter", "nat"]);
    let save = plumb_ruleset::iptables::save::parse(&data("kube-node.save-c"), &Default::default());
    let expected = ["filter", "nat"]
        .iter()
        .map(|t| save.table(Family::Ip, t).unwrap().rule_count())
        .sum::<usize>();
    assert_eq!(rs.rule_count(), expected);
    assert_eq!(errors(&rs), Vec::<String>::new());
}

#[test]
fn nft_warning_line_sets_backend() {
    let text = "# Warning: iptables-legacy tables present, use iptables-legacy to see them\n"
        .to_string()
        + &data("kube-node.mangle.nvL");
    let rs = listing::parse(&text, Family::Ip, Some("mangle"));
    assert_eq!(rs.tables[0].backend, plumb_ruleset::Backend::IptablesNft);
    assert!(rs.diagnostics[0].message.contains("iptables-legacy tables"));
}

#[test]
fn match_set_and_negations() {
    let text = "Chain INPUT (policy ACCEPT 0 packets, 0 bytes)
 pkts bytes target     prot opt in     out     source               destination
    0     0 DROP       0    --  *      *       0.0.0.0/0            0.0.0.0/0            ! match-set KUBE-BLOCK src,dst ! ctstate RELATED,ESTABLISHED statistic mode random ! probability 0.25000000000
";
    let rs = listing::parse(text, Family::Ip, Some("filter"));
    let r = rule(&rs, "filter", "INPUT", 0);
    assert_eq!(
        r.matches,
        [
            ListedMatch::Set {
                negated: true,
                name: "KUBE-BLOCK".into(),
                flags: "src,dst".into()
            },
            ListedMatch::ConnState {
                keyword: "ctstate".into(),
                negated: true,
                states: vec!["RELATED".into(), "ESTABLISHED".into()]
            },
            ListedMatch::Statistic {
                mode: "random".into(),
                negated: true,
                probability: Some("0.25000000000".into()),
                every: None,
                packet: None
            }
        ]
    );
    assert!(r.unrecognised.is_empty());
}

fn check_invariants(text: &str, rs: &Ruleset) {
    let lines = text.split('\n').count() as u32;
    for d in &rs.diagnostics {
        assert!(d.line >= 1 && d.line <= lines, "{d} (of {lines} lines)");
        assert!(d.column >= 1, "{d}");
    }
    for t in &rs.tables {
        for c in &t.chains {
            for (i, (position, r)) in c.positioned().enumerate() {
                assert_eq!(position as usize, i + 1);
                assert!(text.contains(&*r.text));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn never_panics_on_arbitrary_text(text in "\\PC*") {
        let rs = listing::parse(&text, Family::Ip, None);
        check_invariants(&text, &rs);
    }

    #[test]
    fn never_panics_on_listing_like_text(text in "(Chain [A-Z]{1,3} \\((policy ACCEPT( [0-9KMG]{1,4} packets, [0-9KMG]{1,4} bytes)?|[0-9] references)\\)\n| *[0-9KMG!*f/.:-]{0,6} {1,3}){0,40}") {
        let rs = listing::parse(&text, Family::Ip6, Some("nat"));
        check_invariants(&text, &rs);
    }

    #[test]
    fn never_panics_on_mutated_listing(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), 0usize..40, "\\PC{0,8}"), 1..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut text = data("extras.all.nvL");
        for (at, len, insert) in edits {
            let mut s = at.index(text.len() + 1);
            while !text.is_char_boundary(s) { s -= 1; }
            let mut e = (s + len).min(text.len());
            while !text.is_char_boundary(e) { e -= 1; }
            text.replace_range(s..e, &insert);
        }
        let mut c = cut.index(text.len() + 1);
        while !text.is_char_boundary(c) { c -= 1; }
        let text = &text[..c];
        let rs = listing::parse(text, Family::Ip, None);
        check_invariants(text, &rs);
    }
}

/// `-A` lines of an `iptables-save` text, by chain, in order.
fn rule_lines_by_chain(text: &str) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut out: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("-A ") {
            let chain = rest.split_whitespace().next().unwrap().to_string();
            out.entry(chain).or_default().push(l.to_string());
        }
    }
    out
}

/// Prints every table of a listing in `iptables-save` form and compares it with the
/// `iptables-save` of the same kernel state: every rule printed is the saved rule, in
/// order; every other row is a `# not translated` comment; nothing else sits between
/// `*table` and `COMMIT`. Returns (translated, refused).
fn print_matches_save(listing_name: &str, table: Option<&str>, save_name: &str) -> (usize, usize) {
    use plumb_ruleset::iptables::canonical::{PrintOptions, save_text, save_text_report};
    let save = saved(save_name, Family::Ip);
    let rs = listing::parse(&data(listing_name), Family::Ip, table);
    let report = save_text_report(&rs, PrintOptions::default());
    for l in report.text.lines() {
        assert!(
            l.starts_with('*')
                || l.starts_with(':')
                || l.starts_with("-A ")
                || l.starts_with("# not translated (line ")
                || l == "COMMIT",
            "not iptables-save syntax: {l:?}"
        );
    }
    let reread = save::parse(&report.text, &IptablesInput::default());
    assert_eq!(errors(&reread), Vec::<String>::new(), "{}", report.text);
    let mut translated = 0;
    for t in &rs.tables {
        let mut one = save.clone();
        one.tables.retain(|s| s.name == t.name);
        // iptables-save names protocol 47 from the capture host's /etc/protocols; the
        // listing printed its number, which iptables-restore reads as the same protocol.
        let expected = rule_lines_by_chain(
            &save_text(&one, PrintOptions::default()).replace(" -p gre ", " -p 47 "),
        );
        let mine = Ruleset {
            tables: vec![t.clone()],
            ..Ruleset::default()
        };
        let got = rule_lines_by_chain(&save_text(&mine, PrintOptions::default()));
        for (chain, lines) in &got {
            let want = &expected[chain];
            let refused = report
                .refused
                .iter()
                .filter(|r| r.table == *t.name && r.chain == *chain)
                .count();
            assert_eq!(lines.len() + refused, want.len(), "{chain}");
            let mut it = want.iter();
            for l in lines {
                assert!(
                    it.any(|w| w == l),
                    "{l} is not a saved rule of {chain} (in order): {want:#?}"
                );
            }
            translated += lines.len();
        }
    }
    (translated, report.refused.len())
}

#[test]
fn printed_nat_listing_is_the_saved_nat_table() {
    let (translated, refused) =
        print_matches_save("kube-node.nat.nvL", Some("nat"), "kube-node.save-c");
    assert_eq!(refused, 0);
    assert!(translated > 50, "{translated}");
}

#[test]
fn printed_listings_of_every_table_are_the_saved_rules_or_refused() {
    let (t, r) = print_matches_save("kube-node.filter.vnxL", Some("filter"), "kube-node.save-c");
    assert_eq!(r, 0);
    assert!(t > 10);
    let (t, r) = print_matches_save("kube-node.mangle.nvL", Some("mangle"), "kube-node.save-c");
    assert_eq!((t, r), (0, 0));
    // CT, CONNMARK, TCPMSS and an icmp type are not translated: 4 refused.
    let (t, r) = print_matches_save("extras.all.nvL", None, "extras.save-c");
    assert_eq!(r, 4);
    assert_eq!(t, 31, "every other rule translates");
}

#[test]
fn a_listing_without_v_prints_no_rule() {
    use plumb_ruleset::iptables::canonical::{PrintOptions, save_text_report};
    let text = "Chain INPUT (policy ACCEPT)\ntarget     prot opt source               destination\n\
                ACCEPT     all  --  0.0.0.0/0            0.0.0.0/0\n\n\
                Chain FORWARD (policy DROP)\ntarget     prot opt source               destination\n\n\
                Chain OUTPUT (policy ACCEPT)\ntarget     prot opt source               destination\n";
    let rs = listing::parse(text, Family::Ip, Some("filter"));
    let report = save_text_report(&rs, PrintOptions::default());
    assert_eq!(report.refused.len(), 1);
    assert!(!report.text.contains("\n-A "), "{}", report.text);
    assert!(
        report.text.contains(
            "# not translated (line 3): listing made without -v: the in/out interface columns are not shown: ACCEPT     all  --  0.0.0.0/0            0.0.0.0/0\n"
        ),
        "{}",
        report.text
    );
    assert!(
        report.text.contains(":FORWARD DROP [0:0]\n"),
        "{}",
        report.text
    );
}

/// `print --counters` of a listing: exact counters (`-x`) print as `[packets:bytes]`;
/// rounded ones (`2164K`) are not printed as if exact, and are counted.
#[test]
fn printed_listing_counters_only_when_exact() {
    use plumb_ruleset::iptables::canonical::{PrintOptions, save_text_report};
    let exact = listing::parse(&data("kube-node.filter.vnxL"), Family::Ip, Some("filter"));
    let r = save_text_report(&exact, PrintOptions { counters: true });
    assert_eq!(r.rounded_counters, 0);
    assert!(
        r.text
            .lines()
            .any(|l| l.starts_with('[') && l.contains("] -A ")),
        "{}",
        r.text
    );
    let rounded = listing::parse(&data("kube-node.nat.nvL"), Family::Ip, Some("nat"));
    let r = save_text_report(&rounded, PrintOptions { counters: true });
    assert!(r.rounded_counters > 0);
    let with_prefix = r.text.lines().filter(|l| l.starts_with("[")).count();
    let rules = r.text.lines().filter(|l| l.contains("-A ")).count();
    assert_eq!(with_prefix + r.rounded_counters, rules);
}

/// Read from a shared input (what `parse_bytes` and the CLI do), a row is a span of its
/// line rather than a copy; it reads and is located as the copy was: its text the whole
/// line, its location the line and the column of its first word (most rows are
/// indented).
#[test]
fn rows_of_a_shared_listing_are_spans_located_as_copies_were() {
    let (mut rows, mut indented) = (0, 0);
    for name in [
        "extras.all.nvL",
        "extras6.all.nvL",
        "kube-node.filter.nvL-num",
        "kube-node.filter.vnxL",
        "kube-node.mangle.nvL",
        "kube-node.nat.nvL",
    ] {
        let text = data(name);
        let family = if name.contains('6') {
            Family::Ip6
        } else {
            Family::Ip
        };
        let copied = listing::parse(&text, family, None);
        let source = plumb_ruleset::Source::read(text.clone());
        let shared = listing::parse_shared(&source, family, None);
        assert_eq!(copied.diagnostics, shared.diagnostics, "{name}");
        let all = |rs: &Ruleset| -> Vec<plumb_ruleset::Rule> {
            rs.tables
                .iter()
                .flat_map(|t| &t.chains)
                .flat_map(|c| c.rules.clone())
                .collect()
        };
        let (copied, shared) = (all(&copied), all(&shared));
        assert_eq!(copied.len(), shared.len(), "{name}");
        for (c, s) in copied.iter().zip(&shared) {
            assert_eq!(&*c.text, &*s.text, "{name}");
            assert_eq!(c.location(), s.location(), "{name}: {}", &*s.text);
            indented += usize::from(c.location().column > 1);
            assert!(
                std::sync::Arc::ptr_eq(s.text.source(), &source),
                "{name}: a span of the input"
            );
            rows += 1;
        }
    }
    assert!(
        rows > 100 && indented > 100,
        "{rows} rows, {indented} indented"
    );
}
