//! Where `plumb services` / `plumb check` spend their time on one dump: read, parse,
//! service-map recovery, table references, every check. Prints the minimum and median
//! of N runs per phase (milliseconds).
//! `cargo run --release -p plumb-check --example phase_cost -- DUMP [RUNS]`

use plumb_check::{CheckInput, Origin, checks, run};
use plumb_kubeproxy::recover::recover;
use plumb_ruleset::format::{ParseOptions, parse_owned};
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: phase_cost DUMP [RUNS]");
    let runs: usize = args.next().map_or(7, |r| r.parse().expect("RUNS"));
    let mut phases: Vec<(&str, Vec<f64>)> = Vec::new();
    let mut record = |name: &'static str, ms: f64| match phases.iter_mut().find(|p| p.0 == name) {
        Some(p) => p.1.push(ms),
        None => phases.push((name, vec![ms])),
    };
    for round in 0..runs {
        let f0 = minflt();
        let t = Instant::now();
        let bytes = std::fs::read(&path).expect("read dump");
        record("read", ms(t));
        let t = Instant::now();
        let parsed = parse_owned(bytes, &ParseOptions::default()).expect("parse");
        record("parse", ms(t));
        let f1 = minflt();
        let t = Instant::now();
        let maps = recover(&parsed.ruleset);
        record("recover", ms(t));
        if round == 0 {
            // The first run is what a command pays: no freed memory to reuse yet.
            eprintln!(
                "page faults: read+parse {}, recover {}",
                f1 - f0,
                minflt() - f1
            );
        }
        drop(maps);
        let t = Instant::now();
        let facts = CheckInput::new(&parsed.ruleset, Origin::File(path.clone()), false);
        record("facts (recover + refs)", ms(t));
        for c in checks::ALL {
            let t = Instant::now();
            let _ = (c.check)(&facts);
            record(c.ids[0].0, ms(t));
        }
        let t = Instant::now();
        let _ = run(facts);
        record("all checks", ms(t));
    }
    for (name, mut v) in phases {
        v.sort_by(f64::total_cmp);
        println!(
            "{name:<40} min {:>7.1}  median {:>7.1}",
            v[0],
            v[v.len() / 2]
        );
    }
}

/// Minor page faults of this process so far (`/proc/self/stat` field 10).
fn minflt() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after_comm = stat.rsplit_once(')').map_or("", |(_, r)| r);
    after_comm
        .split_whitespace()
        .nth(7)
        .and_then(|f| f.parse().ok())
        .unwrap_or(0)
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}
