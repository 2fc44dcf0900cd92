//! Fuzz target: the legacy iptables decoder (a table's `ipt_entry`/`ip6t_entry` blob
//! and its hook offsets, framed as `plumb_collect::xt_legacy::frame` writes them)
//! must never panic; whatever it translates must read back through the
//! iptables-save reader without panicking either.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plumb_collect::xt_legacy::{LegacyTableRead, decode_frame};

fuzz_target!(|data: &[u8]| {
    if let Some(t) = decode_frame(data, true)
        && let LegacyTableRead::Save(text) = t.read
    {
        let input = plumb_ruleset::iptables::save::IptablesInput::default();
        let _ = plumb_ruleset::iptables::save::parse(&text, &input);
    }
});
