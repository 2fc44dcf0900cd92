//! Heap of reading native nft text: a kube-proxy nftables-mode listing (a service
//! chain and five endpoint chains a service), counted by a wrapping global allocator.
//! Rules' texts and chains' names are spans of the input the ruleset holds, not strings
//! of their own (a string a statement held 8x the input on a 10k-service listing), and
//! rules do not hold their statements (read again from the rule's text when asked).
//! Its own binary: the counting allocator is process-wide.

use plumb_ruleset::RuleBody;
use plumb_ruleset::format::{ParseOptions, parse_owned};
use plumb_testkit::heap;
use std::fmt::Write;

#[global_allocator]
static GLOBAL: heap::Counting = heap::Counting;

/// A kube-proxy nftables-mode `nft list ruleset` of `services` services of 5 endpoints
/// each, shaped as kube-proxy writes it (no sets: only chains and rules are measured).
fn nftables_mode_listing(services: usize) -> String {
    let mut t = String::from(
        "table ip kube-proxy {\n\tchain mark-for-masquerade {\n\t\tmeta mark set meta mark | 0x00004000\n\t}\n\n\tchain services {\n",
    );
    for i in 0..services {
        let _ = writeln!(
            t,
            "\t\tip daddr 10.43.{}.{} tcp dport 80 goto service-{i:08X}-ns/svc-{i}/tcp/http",
            i / 250,
            i % 250
        );
    }
    t.push_str("\t}\n");
    for i in 0..services {
        let endpoint = |j: usize| {
            let n = i * 5 + j;
            format!("10.42.{}.{}", n / 250 % 250, n % 250)
        };
        let _ = write!(
            t,
            "\n\tchain service-{i:08X}-ns/svc-{i}/tcp/http {{\n\t\tip daddr 10.43.{}.{} tcp dport 80 ip saddr != 10.42.0.0/16 jump mark-for-masquerade\n\t\tnumgen random mod 5 vmap {{ ",
            i / 250,
            i % 250
        );
        for j in 0..5 {
            let sep = if j == 4 { " }" } else { ", " };
            let _ = write!(
                t,
                "{j} : goto endpoint-{i:08X}-ns/svc-{i}/tcp/http__{}/8080{sep}",
                endpoint(j)
            );
        }
        t.push_str("\n\t}\n");
        for j in 0..5 {
            let ip = endpoint(j);
            let _ = write!(
                t,
                "\n\tchain endpoint-{i:08X}-ns/svc-{i}/tcp/http__{ip}/8080 {{\n\t\tip saddr {ip} jump mark-for-masquerade\n\t\tmeta l4proto tcp dnat to {ip}:8080\n\t}}\n"
            );
        }
    }
    t.push_str("}\n");
    t
}

/// Besides the input, the read peaks under 55 bytes a statement and the model, which
/// keeps the input, holds under 40: a rule read from text keeps no statements (they
/// are read again from its text when asked) and its body is no box. When every rule
/// held its statements (parsed meaning: selectors and values strings of their own),
/// the read peaked at 206 and held 194 bytes a statement (320 and 234 before that,
/// each text a string of its own); statements not held but the body still a box of
/// 32 bytes, 62 and 50. Now 50 and 35: rules (40 bytes), chains, their names' index.
#[test]
fn a_native_nft_listing_keeps_its_texts_as_spans_of_the_input() {
    let _one_at_a_time = heap::measuring();
    let text = nftables_mode_listing(2000);
    let input = text.len();
    // The input is counted in `before`: what follows is besides it.
    let before = heap::reset_peak();
    let parsed = parse_owned(text.into_bytes(), &ParseOptions::default()).unwrap();
    let peak = heap::peak() - before;
    let held = heap::live().saturating_sub(before);
    let rs = &parsed.ruleset;
    assert_eq!(rs.error_count(), 0, "{:?}", rs.diagnostics);
    assert_eq!(rs.chain_count(), 2 + 2000 * 6);
    let statements: usize = rs
        .tables
        .iter()
        .flat_map(|t| &t.chains)
        .flat_map(|c| &c.rules)
        .map(|r| match &r.body {
            RuleBody::Nft(n) => n.statements(&r.text).len(),
            _ => 0,
        })
        .sum();
    assert!(statements > 40_000, "{statements} statements");
    let per = |bytes: usize| bytes as f64 / statements as f64;
    eprintln!(
        "input {input} bytes, {} rules, {statements} statements: holds {:.1} and peaks at {:.1} bytes a statement besides the input",
        rs.rule_count(),
        per(held),
        per(peak)
    );
    assert!(
        per(held) < 40.0,
        "the model holds {:.1} bytes a statement besides the input",
        per(held)
    );
    assert!(
        per(peak) < 55.0,
        "the read peaks at {:.1} bytes a statement besides the input",
        per(peak)
    );
}

/// A kube-proxy `service-ips` verdict map (and `cluster-ips` set) of `services`
/// elements, with an element comment on each map element as `no-endpoint-services`
/// has.
fn service_maps_listing(services: usize) -> String {
    let mut t = String::from(
        "table ip kube-proxy {\n\tset cluster-ips {\n\t\ttype ipv4_addr\n\t\telements = { ",
    );
    for i in 0..services {
        let sep = if i + 1 == services {
            " }\n\t}\n"
        } else {
            ",\n\t\t\t     "
        };
        let _ = write!(t, "10.43.{}.{}{sep}", i / 250, i % 250);
    }
    t.push_str("\n\tmap service-ips {\n\t\ttype ipv4_addr . inet_proto . inet_service : verdict\n\t\telements = { ");
    for i in 0..services {
        let sep = if i + 1 == services {
            " }\n\t}\n"
        } else {
            ",\n\t\t\t     "
        };
        let _ = write!(
            t,
            "10.43.{}.{} . tcp . 80 comment \"ns-{i}/svc-{i}:http\" : goto service-{i:08X}-ns-{i}/svc-{i}/tcp/http{sep}",
            i / 250,
            i % 250
        );
    }
    for i in 0..services {
        let _ = write!(
            t,
            "\n\tchain service-{i:08X}-ns-{i}/svc-{i}/tcp/http {{\n\t\tdrop\n\t}}\n"
        );
    }
    t.push_str("}\n");
    t
}

/// Set and map elements keep their texts (key, value, comment, a verdict's chain) as
/// spans of the input and read their parsed key again from its text when asked: 67
/// bytes an element here besides the input (an element is 88 bytes, a set's half
/// without a value), where the texts as strings of their own and the key kept parsed
/// (a concatenation of three strings) held 135.
#[test]
fn set_elements_keep_their_texts_as_spans_of_the_input() {
    let _one_at_a_time = heap::measuring();
    let services = 2000;
    let text = service_maps_listing(services);
    let before = heap::reset_peak();
    let parsed = parse_owned(text.into_bytes(), &ParseOptions::default()).unwrap();
    let rs = &parsed.ruleset;
    assert_eq!(rs.error_count(), 0, "{:?}", rs.diagnostics);
    let t = &rs.tables[0];
    let map = t.set("service-ips").unwrap();
    assert_eq!(map.elements.len(), services);
    assert_eq!(t.set("cluster-ips").unwrap().elements.len(), services);
    // What is read again is what was read.
    let e = &map.elements[7];
    assert_eq!(
        *e.key(),
        plumb_ruleset::nft::Value::Concat(vec![
            plumb_ruleset::nft::Value::Single("10.43.0.7".into()),
            plumb_ruleset::nft::Value::Single("tcp".into()),
            plumb_ruleset::nft::Value::Single("80".into()),
        ])
    );
    assert_eq!(e.comment.as_deref(), Some("ns-7/svc-7:http"));
    assert_eq!(
        e.value.as_deref(),
        Some("goto service-00000007-ns-7/svc-7/tcp/http")
    );
    // The chains and rules: what the test above measures, at most 40 bytes a rule
    // (2 a service) and 56 + 8 a chain.
    let chains_and_rules = services * (56 + 8 + 2 * 40);
    let held = heap::live()
        .saturating_sub(before)
        .saturating_sub(chains_and_rules);
    let per = held as f64 / (2 * services) as f64;
    eprintln!("{per:.1} bytes an element besides the input, chains and rules");
    assert!(per < 90.0, "{per:.1} bytes an element besides the input");
}
