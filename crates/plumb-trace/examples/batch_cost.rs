//! Where the time of a batch of traces goes: trace alone, then trace + flow report,
//! single-threaded, over a flow file (`plumb trace --flows` format).
//!
//! `cargo run --release -p plumb-trace --example batch_cost -- RULESET FLOWS`

use plumb_trace::batch::{FlowColumns, ReportCache, flow_report_cached, is_skipped};
use plumb_trace::{Index, Node, Origin, Packet, Proto, TraceOptions, trace_with};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(rules), Some(flows)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: batch_cost RULESET FLOWS");
        std::process::exit(2);
    };
    let t0 = Instant::now();
    let bytes = std::fs::read(rules).expect("ruleset");
    let parsed = plumb_ruleset::format::parse_owned(bytes, &Default::default()).expect("parse");
    let index = Index::build(&parsed.ruleset);
    eprintln!("parse + index: {:?}", t0.elapsed());
    let text = std::fs::read_to_string(flows).expect("flows");
    let template = Packet::new("0.0.0.0".parse().unwrap(), 0, Proto::Tcp, Origin::Host);
    let mut lines = text.lines().filter(|l| !is_skipped(l));
    let cols = FlowColumns::parse_header(lines.next().expect("header")).expect("header");
    let packets: Vec<Packet> = lines
        .map(|l| cols.parse_flow(l, &template).expect("flow"))
        .collect();
    let node = Node::default();
    let options = TraceOptions::default();
    for round in 0..2 {
        let t = Instant::now();
        let mut outcomes = 0;
        for p in &packets {
            outcomes += trace_with(&index, p, &node, &options).outcomes.len();
        }
        eprintln!(
            "round {round}: trace only: {:?} ({outcomes} outcomes)",
            t.elapsed()
        );
    }
    let t = Instant::now();
    let mut bytes = 0;
    let mut cache = ReportCache::default();
    for (i, p) in packets.iter().enumerate() {
        let tr = trace_with(&index, p, &node, &options);
        let r = flow_report_cached(&index, i as u64, p, &tr, false, &mut cache);
        bytes += serde_json::to_vec(&r).unwrap().len();
    }
    eprintln!("trace + report + JSON: {:?} ({bytes} bytes)", t.elapsed());
}
