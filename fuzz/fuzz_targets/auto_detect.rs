//! Fuzz target: format detection plus whichever reader it picks must never panic, and
//! every rule it reads is located on a line of the input (or nowhere: line 0).
#![no_main]

use libfuzzer_sys::fuzz_target;
use plumb_ruleset::{ParseOptions, parse_bytes};

fuzz_target!(|data: &[u8]| {
    if let Ok(parsed) = parse_bytes(data, &ParseOptions::default()) {
        let _ = plumb_ruleset::iptables::canonical::save_text(&parsed.ruleset, Default::default());
        let lines = data.split(|&b| b == b'\n').count() as u32;
        let rules = parsed.ruleset.tables.iter().flat_map(|t| &t.chains).flat_map(|c| &c.rules);
        for r in rules {
            let at = r.location();
            assert!(at.line <= lines && (at.line == 0 || at.column >= 1), "{at:?} of {lines} lines");
            assert_eq!(r.line(), at.line);
        }
    }
});
