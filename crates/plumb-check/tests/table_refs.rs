//! `CheckInput`'s chain references: every referenced chain is in `referenced`, and the
//! (target, rule) list keeps only the jumps the checks report (to chains not declared,
//! deleted or empty): on a 10k-service node the jumps to declared chains with rules
//! are 70k entries that no check reads.

use plumb_check::{CheckInput, Origin};
use plumb_ruleset::format::{ParseOptions, parse_bytes};

const DUMP: &str = "*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:FULL - [0:0]
:EMPTY - [0:0]
-A INPUT -p tcp --dport 22 -j FULL
-A INPUT -p tcp --dport 23 -j FULL
-A INPUT -p tcp --dport 24 -j EMPTY
-A INPUT -p tcp --dport 25 -j MISSING
-A FULL -j ACCEPT
COMMIT
";

#[test]
fn only_jumps_to_undeclared_or_empty_chains_are_listed() {
    let rs = parse_bytes(DUMP.as_bytes(), &ParseOptions::default())
        .expect("the dump reads")
        .ruleset;
    let input = CheckInput::new(&rs, Origin::File("dump".into()), false);
    let refs = input.refs_of(&rs.tables[0]);
    for name in ["FULL", "EMPTY", "MISSING"] {
        assert!(refs.is_referenced(name), "{name} is referenced");
    }
    let listed: Vec<&str> = refs.rules.iter().map(|(t, _)| *t).collect();
    assert_eq!(listed, ["EMPTY", "MISSING"]);
    assert!(refs.rules[1].1.text.contains("--dport 25"));
}
