//! Fuzz target: the flow-file reader of `plumb trace --flows` must never panic; the
//! first line is the header, every other line a flow (comments and blank lines
//! skipped as the command skips them), and a header it accepts names `dst`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plumb_trace::batch::{Column, FlowColumns, is_skipped};
use plumb_trace::{Origin, Packet, Proto};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let template = Packet::new("192.0.2.1".parse().unwrap(), 80, Proto::Tcp, Origin::Host);
    let mut lines = text.lines().filter(|l| !is_skipped(l));
    let Some(header) = lines.next() else {
        return;
    };
    let Ok(cols) = FlowColumns::parse_header(header) else {
        return;
    };
    assert!(cols.columns().contains(&Column::Dst));
    for line in lines {
        if let Ok(p) = cols.parse_flow(line, &template) {
            assert!(p.src.is_none_or(|s| s.is_ipv4() == p.dst.is_ipv4()));
            assert!(!p.proto.has_ports() || p.dport.is_some());
        }
    }
});
