//! Where `plumb services` / `plumb check` hold heap on one dump: the parse, the service
//! map, the check facts and each check, as the peak while the phase ran and what it
//! still holds after, next to the input's size. Counts every allocation through a
//! wrapping global allocator.
//! `cargo run --release -p plumb-check --example phase_memory -- DUMP`

use plumb_check::{CheckInput, Origin, checks, run};
use plumb_kubeproxy::recover::recover;
use plumb_ruleset::format::{ParseOptions, parse_owned};
use plumb_testkit::heap;

#[global_allocator]
static GLOBAL: heap::Counting = heap::Counting;

fn main() {
    let path = std::env::args().nth(1).expect("usage: phase_memory DUMP");
    let bytes = std::fs::read(&path).expect("read dump");
    let input = bytes.len() as f64;
    let mib = |n: usize| n as f64 / (1024.0 * 1024.0);
    let phase = |name: &str, base: usize| {
        let (live, peak) = (heap::live(), heap::peak());
        println!(
            "{name:<40} peak {:>7.1} MiB ({:.2}x)  holds {:>7.1} MiB ({:.2}x)  phase +{:.1} MiB",
            mib(peak),
            peak as f64 / input,
            mib(live),
            live as f64 / input,
            mib(peak.saturating_sub(base)),
        );
        heap::reset_peak()
    };
    heap::reset_peak();
    let base = phase("input", 0);
    let parsed = parse_owned(bytes, &ParseOptions::default()).expect("parse");
    let base = phase("parse (input freed or shared)", base);
    let maps = recover(&parsed.ruleset);
    let after_maps = phase("service map (recover)", base);
    drop(maps);
    let base = phase("service map dropped", after_maps);
    let facts = CheckInput::new(&parsed.ruleset, Origin::File(path.clone()), false);
    let mut base = phase("check facts (map + references)", base);
    for c in checks::ALL {
        let findings = (c.check)(&facts);
        base = phase(c.ids[0].0, base);
        drop(findings);
    }
    let findings = run(facts);
    phase("all checks (run)", base);
    drop(findings);
}
