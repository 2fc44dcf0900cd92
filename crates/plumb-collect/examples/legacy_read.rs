//! Times the phases of the legacy live read of a namespace: the getsockopt read, the
//! decoding into save text, and plumb's parse of that text.
//! `cargo run --release -p plumb-collect --example legacy_read -- NETNS`

use plumb_os::xtables::{XtFamily, read_tables};
use std::time::Instant;

fn main() {
    let netns = std::env::args().nth(1).expect("usage: legacy_read NETNS");
    let t0 = Instant::now();
    let raw = read_tables(Some(&netns), XtFamily::Ipv4, None).expect("read");
    let t1 = Instant::now();
    let mut text = String::new();
    for t in &raw {
        match plumb_collect::xt_legacy::decode_table(XtFamily::Ipv4, t, false) {
            Ok(s) => text.push_str(&s),
            Err(why) => eprintln!("{}: {why}", t.name),
        }
    }
    let t2 = Instant::now();
    let input = plumb_ruleset::iptables::save::IptablesInput::default();
    let rs = plumb_ruleset::iptables::save::parse(&text, &input);
    let t3 = Instant::now();
    let bytes: usize = raw.iter().map(|t| t.entries.len()).sum();
    println!(
        "{} tables, {bytes} bytes of entries, {} bytes of text, {} rules: read {:?}, decode {:?}, parse {:?}",
        raw.len(),
        text.len(),
        rs.tables
            .iter()
            .flat_map(|t| &t.chains)
            .map(|c| c.rules.len())
            .sum::<usize>(),
        t1 - t0,
        t2 - t1,
        t3 - t2
    );
}
