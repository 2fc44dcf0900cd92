//! Prints how long parsing, service recovery and each check take on a dump:
//! `cargo run --release -p plumb-check --example timing -- FILE [RUNS]` (FILE may be
//! `generated:10000`: kube-proxy's dump of that many services).
//!
//! Each phase shows the CPU time this thread spent in it (from
//! `/proc/thread-self/schedstat`, nanoseconds on the CPU) and the wall time: on a shared,
//! loaded machine the wall time includes waiting for a core, the CPU time does not.
//! With RUNS > 1 the whole sequence repeats and the best CPU time per phase is printed.

use plumb_check::{CheckInput, Origin, checks};
use std::time::Instant;

/// Nanoseconds this thread has run on a CPU (0 where /proc does not say).
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

struct Phase {
    name: String,
    cpu_ms: f64,
    wall_ms: f64,
    note: String,
}

fn timed<T>(phases: &mut Vec<Phase>, name: &str, f: impl FnOnce() -> T) -> T {
    let (c, w) = (cpu_ns(), Instant::now());
    let out = f();
    let cpu_ms = (cpu_ns() - c) as f64 / 1e6;
    let wall_ms = w.elapsed().as_secs_f64() * 1e3;
    phases.push(Phase {
        name: name.to_string(),
        cpu_ms,
        wall_ms,
        note: String::new(),
    });
    out
}

fn run_once(path: &str, bytes: &[u8]) -> Vec<Phase> {
    let mut phases = Vec::new();
    let parsed = timed(&mut phases, "parse", || {
        plumb_ruleset::parse_bytes(bytes, &Default::default()).expect("ruleset")
    });
    let maps = timed(&mut phases, "recover services alone", || {
        plumb_kubeproxy::recover::recover(&parsed.ruleset).len()
    });
    phases.last_mut().expect("just pushed").note = format!("({maps} maps, dropped)");
    let facts = timed(&mut phases, "facts: recover + refs", || {
        CheckInput::new(&parsed.ruleset, Origin::File(path.to_string()), false)
    });
    let n = timed(&mut phases, "inventory (again)", || {
        plumb_check::inventory::infer(&facts).cnis.len()
    });
    phases.last_mut().expect("just pushed").note = format!("({n} CNIs; also inside facts)");
    let (c, w) = (cpu_ns(), Instant::now());
    for c in checks::ALL {
        let n = timed(&mut phases, c.ids[0].0, || (c.check)(&facts).len());
        phases.last_mut().expect("just pushed").note = format!("({n} findings)");
    }
    phases.push(Phase {
        name: "all checks".into(),
        cpu_ms: (cpu_ns() - c) as f64 / 1e6,
        wall_ms: w.elapsed().as_secs_f64() * 1e3,
        note: String::new(),
    });
    phases
}

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: timing FILE [RUNS]");
    let runs: usize = args.next().and_then(|r| r.parse().ok()).unwrap_or(1);
    // `generated:N` is kube-proxy's dump of N services x 3 endpoints (the bench input).
    let bytes = match path.strip_prefix("generated:") {
        Some(n) => plumb_kubeproxy::generated_save_text(n.parse().expect("a number"), 3)
            .expect("generator config")
            .into_bytes(),
        None => std::fs::read(&path).expect("readable file"),
    };
    let mut best = run_once(&path, &bytes);
    for _ in 1..runs {
        for (b, p) in best.iter_mut().zip(run_once(&path, &bytes)) {
            if p.cpu_ms < b.cpu_ms {
                *b = p;
            }
        }
    }
    println!("{:<26} {:>9} {:>9}", "phase", "cpu ms", "wall ms");
    for p in &best {
        println!(
            "{:<26} {:>9.1} {:>9.1} {}",
            p.name, p.cpu_ms, p.wall_ms, p.note
        );
    }
}
