//! How long one attribution window's counter read takes in a namespace (root): the
//! full read (`iptables-nft-save -c`, `ip6tables-nft-save -c`, `nft list ruleset`, parsed)
//! against the netlink read of only the chains that can drop (the plan made from one
//! full read).
//!
//!   cargo run --release -p plumb-kubeproxy --example generate -- 10000 3 > /tmp/perf-10k.save
//!   ip netns add bench && ip netns exec bench iptables-nft-restore < /tmp/perf-10k.save
//!   cargo run --release -p plumb-observe --example attribution_read -- bench 5
//!   ip netns del bench
//!
//! Prints each read's wall time, the chains the netlink read asks for, and whether
//! both reads give the same counters.

use plumb_observe::attribution::{CounterSnapshot, NetlinkPlan, read_counted};
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let netns = args.next().expect("usage: attribution_read NETNS [RUNS]");
    let runs: usize = args.next().and_then(|r| r.parse().ok()).unwrap_or(5);
    let runner = plumb_os::runner::SystemRunner;
    let mut full = Vec::new();
    let mut last = None;
    for _ in 0..runs {
        let t = Instant::now();
        let (rs, problems) = read_counted(&runner, Some(&netns)).expect("a full read");
        let snapshot = CounterSnapshot::of(&rs);
        full.push(t.elapsed().as_secs_f64());
        assert!(problems.is_empty(), "{problems:?}");
        last = Some((rs, snapshot));
    }
    let (rs, tools) = last.expect("at least one run");
    let (chains, policies) = NetlinkPlan::chains_to_read(&rs).expect("nf_tables tables only");
    let rules: usize = rs
        .tables
        .iter()
        .flat_map(|t| &t.chains)
        .map(|c| c.rules.len())
        .sum();
    let c = plumb_os::nftables::read_counters(Some(&netns), &chains, &policies, None)
        .expect("netlink counters");
    let plan = NetlinkPlan::new(&rs, &c).expect("the reads line up");
    let mut netlink = Vec::new();
    let mut same = true;
    for _ in 0..runs {
        let t = Instant::now();
        let c = plumb_os::nftables::read_counters(Some(&netns), &chains, &policies, None)
            .expect("netlink counters");
        let s = plan.snapshot(&c).expect("same generation");
        netlink.push(t.elapsed().as_secs_f64());
        let show = |s: &CounterSnapshot| {
            s.rules()
                .iter()
                .map(|r| (r.chain.clone(), r.text.clone(), r.packets))
                .collect::<Vec<_>>()
        };
        same &= show(&s) == show(&tools);
    }
    let stat = |v: &[f64]| {
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = v.iter().copied().fold(0.0, f64::max);
        format!(
            "mean {:.1} ms, min {:.1}, max {:.1}",
            mean * 1e3,
            min * 1e3,
            max * 1e3
        )
    };
    println!(
        "ruleset: {} tables, {} rules; dropping rules/policies counted: {}",
        rs.tables.len(),
        rules,
        tools.len()
    );
    println!(
        "full read (dump tools + parse), {runs} runs: {}",
        stat(&full)
    );
    println!(
        "netlink read of {} chains + {} policies, {runs} runs: {}",
        chains.len(),
        policies.len(),
        stat(&netlink)
    );
    println!("same counters: {same}");
}
