//! What packing a dump's rule texts word by word saves ([`PackedLines`]): the rules'
//! text as read against the packed lines, the heap peak while packing (the builder's
//! word slots included), and the time to pack and to read every rule back. Checks that
//! every rule reads back as it was.
//!
//! `cargo run --release -p plumb-ruleset --example packed_size -- DUMP`

use plumb_ruleset::model::packed::{PackedBuilder, PackedLines};
use plumb_testkit::heap;
use std::time::Instant;

#[global_allocator]
static GLOBAL: heap::Counting = heap::Counting;

fn mib(n: usize) -> f64 {
    n as f64 / (1024.0 * 1024.0)
}

fn main() {
    let (path, bytes) = plumb_testkit::example_input("packed_size DUMP");
    let parsed =
        plumb_ruleset::format::parse_owned(bytes, &Default::default()).unwrap_or_else(|e| {
            eprintln!("{path}: {e}");
            std::process::exit(2);
        });
    let rules: Vec<_> = parsed
        .ruleset
        .tables
        .iter()
        .flat_map(|t| &t.chains)
        .flat_map(|c| &c.rules)
        .collect();
    let text: usize = rules.iter().map(|r| r.text.len() + 1).sum();

    let base = heap::live();
    heap::reset_peak();
    let started = Instant::now();
    let mut b = PackedBuilder::new();
    let at: Vec<u32> = rules
        .iter()
        .map(|r| b.push(&r.text, r.line()).expect("under 4 GiB"))
        .collect();
    let packed: PackedLines = b.finish();
    let pack_time = started.elapsed();
    let peak = heap::peak() - base;

    let started = Instant::now();
    let mut buf = String::new();
    let mut same = 0usize;
    for (r, &at) in rules.iter().zip(&at) {
        buf.clear();
        packed.read_into(at, &mut buf);
        same += usize::from(buf == *r.text && packed.line(at) == Some(r.line()));
    }
    let read_time = started.elapsed();
    println!(
        "{} rules, text {:.1} MiB, packed {:.1} MiB ({:.2}x less), peak while packing {:.1} MiB",
        rules.len(),
        mib(text),
        mib(packed.heap_bytes()),
        text as f64 / packed.heap_bytes() as f64,
        mib(peak),
    );
    println!(
        "pack {:.0} ms, read every rule back {:.0} ms; {same} of {} read back exactly",
        pack_time.as_secs_f64() * 1e3,
        read_time.as_secs_f64() * 1e3,
        rules.len()
    );
    if same != rules.len() {
        std::process::exit(1);
    }
}
