//! Times the phases of the nf_tables live read of a namespace: the GET dumps (one
//! thread), the decoding of their messages into save text (replayed from memory, best
//! of 5), and plumb's parse of that text.
//! `cargo run --release -p plumb-collect --example netlink_read -- NETNS [--save FILE]`
//! `... --example netlink_read -- --decode FILE`: decodes a saved dump once (for an
//! instruction count: `valgrind --tool=callgrind`, steady under load where times are not).

use plumb_collect::nft_netlink::{Decoder, TableRead};
use plumb_os::netlink;
use plumb_os::nftables::{DumpOptions, dump_ruleset};
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, file] = &args[..]
        && flag == "--decode"
    {
        let dump = std::fs::read(file).expect("read the saved dump");
        let mut d = Decoder::new();
        d.push_bytes(&dump);
        println!("{} tables", d.finish().len());
        return;
    }
    let netns = args
        .first()
        .expect("usage: netlink_read NETNS [--save FILE]");
    let t0 = Instant::now();
    let mut dump = Vec::new();
    let opts = DumpOptions {
        sets: true,
        elements: true,
        deadline: None,
    };
    dump_ruleset(Some(netns), &opts, &mut |m| match m {
        Some(m) => dump.extend(netlink::build::message(m.kind, m.flags, m.payload)),
        None => dump.clear(),
    })
    .expect("dump");
    let read = t0.elapsed();
    if let (Some(flag), Some(file)) = (args.get(1), args.get(2))
        && flag == "--save"
    {
        std::fs::write(file, &dump).expect("save the dump");
    }
    let mut best = Duration::MAX;
    let mut tables = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let mut d = Decoder::new();
        d.push_bytes(&dump);
        tables = d.finish();
        best = best.min(t.elapsed());
    }
    let text: String = tables
        .iter()
        .filter_map(|t| match &t.read {
            TableRead::Save(s) => Some(s.as_str()),
            _ => None,
        })
        .collect();
    let t = Instant::now();
    let input = plumb_ruleset::iptables::save::IptablesInput::default();
    let rs = plumb_ruleset::iptables::save::parse(&text, &input);
    let parse = t.elapsed();
    let rules: usize = rs
        .tables
        .iter()
        .flat_map(|t| &t.chains)
        .map(|c| c.rules.len())
        .sum();
    println!(
        "{} bytes of messages, {} bytes of save text, {rules} rules: dump {read:?}, decode {best:?} (best of 5), parse {parse:?}",
        dump.len(),
        text.len(),
    );
}
