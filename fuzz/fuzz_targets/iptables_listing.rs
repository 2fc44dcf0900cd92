//! Fuzz target: the IptablesListing reader must never panic, and whatever it reads must print
//! (canonical iptables-save form) and diff against itself with no changes. Its rows are
//! spans of the input: each reads and is located exactly as a row copied out of it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plumb_ruleset::{Family, Format, ParseOptions, Ruleset, parse_bytes};

fuzz_target!(|data: &[u8]| {
    let opts = ParseOptions { format: Some(Format::IptablesListing), table: Some("filter".into()), ..Default::default() };
    if let Ok(parsed) = parse_bytes(data, &opts) {
        let rs = &parsed.ruleset;
        let _ = plumb_ruleset::iptables::canonical::save_text(rs, Default::default());
        let _ = plumb_ruleset::summary::summarize(rs);
        assert!(plumb_ruleset::diff::diff(rs, rs).is_empty(), "a ruleset differs from itself");
        let text = std::str::from_utf8(data).expect("parse_bytes read it as text");
        let copied = plumb_ruleset::iptables::listing::parse(text, Family::Ip, Some("filter"));
        let rules = |rs: &Ruleset| {
            rs.tables.iter().flat_map(|t| &t.chains).flat_map(|c| &c.rules).map(|r| (r.text.to_string(), r.location())).collect::<Vec<_>>()
        };
        assert_eq!(rules(rs), rules(&copied), "rows read from the shared input differ from copied rows");
    }
});
