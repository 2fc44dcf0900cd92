//! Heap of reading a kube-proxy `iptables-save` dump (2,000 services of 5 endpoints:
//! most chains hold one to three rules), counted by a wrapping global allocator: what the model holds besides the input text, and what
//! the read peaks at, per rule. Rules are spans of the input; what a rule can read
//! again from its text (counters, its words' index) is not kept beside it.
//! Its own binary: the counting allocator is process-wide.

use plumb_ruleset::format::{ParseOptions, parse_owned};
use plumb_testkit::heap;

#[global_allocator]
static GLOBAL: heap::Counting = heap::Counting;

/// The model holds at most 64 bytes a rule besides the input (40-byte rules, 56-byte
/// chains whose names are spans of the input: with 56-byte rules and names of their
/// own it held 84), and the read peaks at 74 bytes a rule besides it (it peaked at 94).
#[test]
fn a_kube_proxy_dump_costs_under_64_bytes_a_rule_besides_its_text() {
    let _one_at_a_time = heap::measuring();
    let text = plumb_kubeproxy::generated_save_text(2000, 5).expect("valid generator config");
    let input = text.len();
    // The input is counted in `before`: what follows is besides it.
    let before = heap::reset_peak();
    let parsed = parse_owned(text.into_bytes(), &ParseOptions::default()).unwrap();
    let peak = heap::peak() - before;
    let held = heap::live() - before;
    let rs = &parsed.ruleset;
    assert_eq!(rs.error_count(), 0, "{:?}", rs.diagnostics);
    let rules = rs.rule_count();
    assert!(rules > 30_000, "{rules} rules");
    let per_rule = |bytes: usize| bytes as f64 / rules as f64;
    eprintln!(
        "input {input} bytes, {rules} rules, {} chains: holds {:.1} and peaks at {:.1} bytes a rule besides the input",
        rs.chain_count(),
        per_rule(held),
        per_rule(peak)
    );
    assert!(
        per_rule(held) <= 64.0,
        "the model holds {:.1} bytes a rule",
        per_rule(held)
    );
    assert!(
        per_rule(peak) <= 74.0,
        "the read peaks at {:.1} bytes a rule",
        per_rule(peak)
    );
}

/// At a 10k-service dump's size (58k chains, 170k rules), the read peaks at under
/// 10.5 bytes a chain above what the model it returns holds (it peaked at 11.7): the
/// chain-by-name index, alive while the last rules are read, is a table of 4-byte
/// slots sized to the chains (0.25 MiB; hashbrown's took 0.63 MiB). Counted here is
/// the room reserved for it, 512 KiB (see `ChainIndex::rebuild`), of which only the
/// slots are ever touched.
#[test]
fn a_10k_service_dump_peaks_under_10_5_bytes_a_chain_above_the_model() {
    let _one_at_a_time = heap::measuring();
    let text = plumb_kubeproxy::generated_save_text(10_000, 5).expect("valid generator config");
    let before = heap::reset_peak();
    let parsed = parse_owned(text.into_bytes(), &ParseOptions::default()).unwrap();
    let above = heap::peak() - heap::live();
    let rs = &parsed.ruleset;
    assert_eq!(rs.error_count(), 0, "{:?}", rs.diagnostics);
    let chains = rs.chain_count();
    assert!(chains > 50_000, "{chains} chains");
    let per_chain = above as f64 / chains as f64;
    eprintln!(
        "{} rules, {chains} chains: the read peaks {above} bytes ({per_chain:.1} a chain) above the {} bytes the model holds",
        rs.rule_count(),
        heap::live() - before
    );
    assert!(
        per_chain < 10.5,
        "the read peaks {per_chain:.1} bytes a chain above the model"
    );
}

/// A restore payload whose lines alternate between two chains (hand-written inputs do
/// this; dumps group each chain's rules). The reader gives a chain back its growth room
/// the first time it leaves it, not at every switch: that would copy the longer chain's
/// rules at each of its lines, quadratic in the input (4,000 lines allocated 480 MB).
#[test]
fn rules_alternating_between_two_chains_are_not_copied_at_every_switch() {
    let _one_at_a_time = heap::measuring();
    let mut text = String::from("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n");
    for i in 0..2000 {
        text.push_str(&format!(
            "-A INPUT -s 10.0.{}.{}/32 -j ACCEPT\n",
            i / 250,
            i % 250
        ));
        text.push_str(&format!(
            "-A FORWARD -d 10.1.{}.{}/32 -j DROP\n",
            i / 250,
            i % 250
        ));
    }
    text.push_str("COMMIT\n");
    let input = text.len();
    let before = heap::allocated();
    let parsed = parse_owned(text.into_bytes(), &ParseOptions::default()).unwrap();
    let allocated = heap::allocated() - before;
    assert_eq!(parsed.ruleset.error_count(), 0);
    assert_eq!(parsed.ruleset.rule_count(), 4000);
    assert!(
        allocated < 32 * input,
        "reading {input} bytes allocated {allocated} bytes: the rules were copied at every switch"
    );
}
