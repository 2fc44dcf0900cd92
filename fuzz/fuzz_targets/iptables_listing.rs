//! Fuzz target: the IptablesListing reader must never panic, and whatever it reads must print
//! (canonical iptables-save form) and diff against itself with no changes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plumb_ruleset::{Format, ParseOptions, parse_bytes};

fuzz_target!(|data: &[u8]| {
    let opts = ParseOptions { format: Some(Format::IptablesListing), table: Some("filter".into()), ..Default::default() };
    if let Ok(parsed) = parse_bytes(data, &opts) {
        let rs = &parsed.ruleset;
        let _ = plumb_ruleset::iptables::canonical::save_text(rs, Default::default());
        let _ = plumb_ruleset::summary::summarize(rs);
        assert!(plumb_ruleset::diff::diff(rs, rs).is_empty(), "a ruleset differs from itself");
    }
});
