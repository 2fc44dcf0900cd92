//! Measures what parsing a dump costs in heap: peak bytes while parsing and bytes the
//! finished model holds, next to the input's size (the model's memory budget is
//! 3x the input). Counts every allocation through a wrapping global allocator.
//!
//! `cargo run --release -p plumb-ruleset --example model_memory -- DUMP`

use plumb_testkit::heap;

#[global_allocator]
static GLOBAL: heap::Counting = heap::Counting;

fn mib(n: usize) -> f64 {
    n as f64 / (1024.0 * 1024.0)
}

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: model_memory DUMP");
        std::process::exit(2);
    };
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        eprintln!("{path}: {e}");
        std::process::exit(2);
    });
    let input = bytes.len();
    heap::reset_peak();
    let parsed = plumb_ruleset::format::parse_owned(bytes, &Default::default());
    let held = heap::live();
    let peak = heap::peak();
    let rules = parsed.as_ref().map(|p| p.ruleset.rule_count()).unwrap_or(0);
    println!(
        "input {:.1} MiB, {rules} rules; model holds {:.1} MiB ({:.2}x input, input text included); peak while parsing {:.1} MiB ({:.2}x, the input buffer included)",
        mib(input),
        mib(held),
        held as f64 / input as f64,
        mib(peak),
        peak as f64 / input as f64,
    );
    drop(parsed);
}
