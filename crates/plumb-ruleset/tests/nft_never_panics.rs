//! Property tests: the nft readers never panic, whatever the input (arbitrary
//! strings, and random byte-level mutations of a real kube-proxy table).

use plumb_ruleset::nft::{parse_json, parse_text};
use proptest::prelude::*;

const REAL: &str = include_str!("data/nft/plumb-fixture-a.nft");
const REAL_JSON: &str = include_str!("data/nft/plumb-fixture.json");

fn mutate(base: &str, edits: &[(usize, u8, char)]) -> String {
    let mut s: Vec<char> = base.chars().collect();
    for &(pos, op, c) in edits {
        if s.is_empty() {
            s.push(c);
            continue;
        }
        let p = pos % s.len();
        match op % 4 {
            0 => {
                s.remove(p);
            }
            1 => s.insert(p, c),
            2 => s[p] = c,
            _ => {
                s.truncate(p);
            }
        }
    }
    s.into_iter().collect()
}

fn nftish_char() -> impl Strategy<Value = char> {
    prop_oneof![
        Just('{'),
        Just('}'),
        Just(';'),
        Just(','),
        Just('"'),
        Just('#'),
        Just('\n'),
        Just(' '),
        Just(':'),
        Just('.'),
        Just('@'),
        Just('['),
        Just(']'),
        any::<char>(),
    ]
}

/// Chain names for generated rules: defined, a base chain, undefined, and names that
/// spell statement keywords (`mark-for-masquerade`, `dnat`).
fn chain_name() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "a",
        "mark-for-masquerade",
        "dnat",
        "base",
        "undefined",
        "\"a\"",
        "a-snat",
    ])
}

/// One statement (or a few words) of a generated rule, in the shapes whose chain
/// references and NAT statements a rule read from text answers without reading them
/// again, and shapes close to them.
fn rule_piece() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("ip saddr 10.0.0.1".to_string()),
        Just("meta l4proto tcp".to_string()),
        Just("ip daddr @s".to_string()),
        Just("counter".to_string()),
        Just("accept".to_string()),
        Just("drop".to_string()),
        Just("dnat to 10.0.0.1:80".to_string()),
        Just("dnat ip to 10.0.0.1".to_string()),
        Just("snat ip to 1.2.3.4".to_string()),
        Just("masquerade".to_string()),
        Just("masquerade random".to_string()),
        Just("redirect to :8080".to_string()),
        Just("dnat to ip saddr map { 1.2.3.4 : 5.6.7.8 }".to_string()),
        Just("dnat".to_string()),
        Just("jump".to_string()),
        chain_name().prop_map(|c| format!("jump {c}")),
        chain_name().prop_map(|c| format!("goto {c}")),
        (chain_name(), chain_name()).prop_map(|(a, b)| format!(
            "numgen random mod 2 vmap {{ 0 : goto {a}, 1 : jump {b} }}"
        )),
        chain_name().prop_map(|c| format!("comment \"{c} jump dnat to 1.2.3.4\"")),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// What a rule read from text answers from the facts found when it was read (its
    /// chain references, its NAT statements, the reader's checks of its jumps) is what
    /// its statements say, on generated rules of those shapes and near them.
    #[test]
    fn facts_of_generated_rules_are_what_their_statements_say(
        rules in proptest::collection::vec(proptest::collection::vec(rule_piece(), 1..5), 1..6)
    ) {
        let mut text = String::from(
            "table ip t {\n\tset s {\n\t\ttype ipv4_addr\n\t}\n\tchain a {\n\t}\n\tchain mark-for-masquerade {\n\t}\n\tchain dnat {\n\t}\n\tchain a-snat {\n\t}\n\tchain base {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t}\n\tchain r {\n",
        );
        for r in &rules {
            text.push_str("\t\t");
            text.push_str(&r.join(" "));
            text.push('\n');
        }
        text.push_str("\t}\n}\n");
        let shown = |rs: &plumb_ruleset::Ruleset| -> Vec<String> {
            rs.tables
                .iter()
                .flat_map(|t| &t.chains)
                .flat_map(|c| &c.rules)
                .map(|r| {
                    let plumb_ruleset::RuleBody::Nft(n) = &r.body else {
                        return String::new();
                    };
                    format!(
                        "{} {:?} {:?} {:?}",
                        r.text,
                        r.chain_references(),
                        n.nat_statements(&r.text),
                        r.nft_statements(),
                    )
                })
                .collect()
        };
        let (lazy, held) = (parse_text(&text), plumb_ruleset::nft::parse_text_holding(&text));
        prop_assert_eq!(shown(&lazy), shown(&held));
        prop_assert_eq!(format!("{:?}", lazy.diagnostics), format!("{:?}", held.diagnostics));
    }

    #[test]
    fn text_reader_never_panics_on_arbitrary_input(s in "\\PC*") {
        let _ = parse_text(&s);
        let _ = parse_json(&s);
    }

    #[test]
    fn text_reader_never_panics_on_mutated_dump(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), nftish_char()), 1..12)
    ) {
        let m = mutate(REAL, &edits);
        let rs = parse_text(&m);
        // Locations stay inside the input.
        let lines = m.split('\n').count() as u32;
        for d in &rs.diagnostics {
            prop_assert!(d.line >= 1 && d.line <= lines + 1, "{d} (input has {lines} lines)");
        }
    }

    /// A rule's statements read again from its text (a rule read from text does not
    /// hold them) are those read in context, on damaged dumps too.
    #[test]
    fn statements_read_again_are_those_read_in_context_on_mutated_dumps(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), nftish_char()), 1..12)
    ) {
        let m = mutate(REAL, &edits);
        let shown = |rs: &plumb_ruleset::Ruleset| -> Vec<String> {
            rs.tables
                .iter()
                .flat_map(|t| &t.chains)
                .flat_map(|c| &c.rules)
                .map(|r| {
                    let nat = match &r.body {
                        plumb_ruleset::RuleBody::Nft(n) => format!("{:?}", n.nat_statements(&r.text)),
                        _ => String::new(),
                    };
                    format!(
                        "{} {:?} {:?} {nat} {:?} {:?}",
                        r.text,
                        r.nft_statements(),
                        r.chain_references(),
                        r.comments(),
                        r.counters()
                    )
                })
                .collect()
        };
        let (lazy, held) = (parse_text(&m), plumb_ruleset::nft::parse_text_holding(&m));
        prop_assert_eq!(shown(&lazy), shown(&held));
        prop_assert_eq!(format!("{:?}", lazy.diagnostics), format!("{:?}", held.diagnostics));
    }

    #[test]
    fn json_reader_never_panics_on_mutated_dump(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), nftish_char()), 1..12)
    ) {
        let _ = parse_json(&mutate(REAL_JSON, &edits));
    }
}
