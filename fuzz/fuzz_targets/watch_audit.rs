//! Fuzz target: plumb watch's audit decoders (netlink datagrams and log lines) must
//! never panic, and the serial assembler must accept whatever they produce.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plumb_watch::audit::{Assembler, decode, parse_log_line};

fuzz_target!(|data: &[u8]| {
    let mut asm = Assembler::default();
    for r in decode(data) {
        let _ = asm.push(r, 0);
    }
    if let Ok(text) = std::str::from_utf8(data) {
        for line in text.lines() {
            if let Some(r) = parse_log_line(line) {
                let _ = asm.push(r, 1);
            }
        }
    }
    let _ = asm.flush_older(u64::MAX, 0);
});
