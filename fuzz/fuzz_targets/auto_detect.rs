//! Fuzz target: format detection plus whichever reader it picks must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plumb_ruleset::{ParseOptions, parse_bytes};

fuzz_target!(|data: &[u8]| {
    if let Ok(parsed) = parse_bytes(data, &ParseOptions::default()) {
        let _ = plumb_ruleset::iptables::canonical::save_text(&parsed.ruleset, Default::default());
    }
});
