//! How long one attribution window's counter read takes in a namespace (root): the
//! dump tools (`iptables-nft-save -c`, `ip6tables-nft-save -c`, `nft list ruleset`,
//! parsed; each with its 20 s deadline), the full read over netlink (plumb's reader plus
//! the dropping chains' counters: what starts a plan), and the netlink read of only the
//! chains that can drop (every later window).
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
    let mut problems_seen = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let (rs, problems) = read_counted(&runner, Some(&netns)).expect("a full read");
        let snapshot = CounterSnapshot::of(&rs);
        full.push(t.elapsed().as_secs_f64());
        problems_seen = problems;
        last = Some((rs, snapshot));
    }
    let (_, tools) = last.expect("at least one run");
    let mut live = Vec::new();
    let mut rs = plumb_ruleset::Ruleset::default();
    for _ in 0..runs {
        let t = Instant::now();
        rs = plumb_collect::rulesets::collect_live_rulesets(&runner, Some(&netns)).ruleset;
        let (chains, policies) = NetlinkPlan::chains_to_read(&rs).expect("nf_tables only");
        let c = plumb_os::nftables::read_counters(Some(&netns), &chains, &policies, None)
            .expect("netlink counters");
        NetlinkPlan::new(&rs, &c)
            .and_then(|p| p.snapshot(&c))
            .expect("a plan");
        live.push(t.elapsed().as_secs_f64());
    }
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
    let plan_len = plan.snapshot(&c).map(|s| s.len()).unwrap_or(0);
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
        "ruleset (netlink read): {} tables, {} rules",
        rs.tables.len(),
        rules
    );
    println!("dump tools + parse, {runs} runs: {}", stat(&full));
    if !problems_seen.is_empty() {
        println!("  dump tools' problems: {}", problems_seen.join("; "));
    }
    println!(
        "full read over netlink + dropping chains' counters, {runs} runs: {}",
        stat(&live)
    );
    println!(
        "netlink read of {} chains + {} policies, {runs} runs: {}",
        chains.len(),
        policies.len(),
        stat(&netlink)
    );
    println!(
        "netlink counters equal the dump tools' (when those read everything): {same} ({} counted by the tools, {} by netlink)",
        tools.len(),
        plan_len
    );
}
