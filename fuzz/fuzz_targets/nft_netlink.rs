//! Fuzz target: the live reader's nf_tables netlink decoder (messages as the kernel's
//! dumps give them) must never panic; whatever it translates must read back through
//! the iptables-save reader (iptables-nft tables) or the nft reader (native tables,
//! decoded into `nft list table`'s text) without panicking either.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plumb_collect::nft_netlink::{Decoder, TableRead};

fuzz_target!(|data: &[u8]| {
    let mut d = Decoder::new();
    d.push_bytes(data);
    for t in d.finish() {
        match t.read {
            TableRead::Save(text) => {
                let input = plumb_ruleset::iptables::save::IptablesInput::default();
                let _ = plumb_ruleset::iptables::save::parse(&text, &input);
            }
            TableRead::Listing(text) => {
                let _ = plumb_ruleset::nft::parse_text(&text);
            }
            _ => {}
        }
    }
});
