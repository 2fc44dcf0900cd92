//! Prints how long parsing, service recovery and each check take on a dump:
//! `cargo run --release -p plumb-check --example timing -- FILE`.

use plumb_check::{Facts, Origin, checks};
use std::time::Instant;

fn main() {
    let path = std::env::args().nth(1).expect("usage: timing FILE");
    let bytes = std::fs::read(&path).expect("readable file");
    let t = Instant::now();
    let parsed = plumb_ruleset::parse_bytes(&bytes, &Default::default()).expect("ruleset");
    println!(
        "parse            {:>8.1} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    let t = Instant::now();
    let facts = Facts::new(&parsed.ruleset, Origin::File(path.clone()), false);
    println!(
        "recover services {:>8.1} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    let total = Instant::now();
    for c in checks::ALL {
        let t = Instant::now();
        let n = (c.check)(&facts).len();
        println!(
            "{:<16} {:>8.1} ms ({n} findings)",
            c.ids[0],
            t.elapsed().as_secs_f64() * 1e3
        );
    }
    println!(
        "all checks       {:>8.1} ms",
        total.elapsed().as_secs_f64() * 1e3
    );
}
