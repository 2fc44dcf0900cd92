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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

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
                    format!(
                        "{} {:?} {:?} {:?} {:?}",
                        r.text,
                        r.nft_statements(),
                        r.chain_references(),
                        r.comments(),
                        r.counters()
                    )
                })
                .collect()
        };
        prop_assert_eq!(
            shown(&parse_text(&m)),
            shown(&plumb_ruleset::nft::parse_text_holding(&m))
        );
    }

    #[test]
    fn json_reader_never_panics_on_mutated_dump(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), nftish_char()), 1..12)
    ) {
        let _ = parse_json(&mutate(REAL_JSON, &edits));
    }
}
