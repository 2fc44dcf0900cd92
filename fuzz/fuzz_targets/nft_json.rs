//! Fuzz target: the NftJson reader must never panic, and whatever it reads must print
//! (canonical iptables-save form) and diff against itself with no changes. A native
//! rule's text is its statements' texts one after the other (they are spans of one
//! text a block of rules), and it is located on a line of the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plumb_ruleset::{Format, ParseOptions, RuleBody, parse_bytes};

fuzz_target!(|data: &[u8]| {
    let opts = ParseOptions { format: Some(Format::NftJson), table: Some("filter".into()), ..Default::default() };
    if let Ok(parsed) = parse_bytes(data, &opts) {
        let rs = &parsed.ruleset;
        let _ = plumb_ruleset::iptables::canonical::save_text(rs, Default::default());
        let _ = plumb_ruleset::summary::summarize(rs);
        assert!(plumb_ruleset::diff::diff(rs, rs).is_empty(), "a ruleset differs from itself");
        let lines = data.split(|&b| b == b'\n').count() as u32;
        for r in rs.tables.iter().flat_map(|t| &t.chains).flat_map(|c| &c.rules) {
            let at = r.location();
            assert!(at.line <= lines && (at.line == 0 || at.column >= 1), "{at:?} of {lines} lines");
            if let RuleBody::Nft(n) = &r.body {
                let statements = n.statements(&r.text);
                let joined: Vec<&str> = statements.iter().map(|s| &*s.text).collect();
                assert_eq!(joined.join(" "), &*r.text, "a rule's text is its statements'");
                assert!(at.line >= 1, "a native JSON rule is located: {at:?}");
            }
        }
    }
});
