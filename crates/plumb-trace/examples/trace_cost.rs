//! What a trace costs on the 10k-service kube-proxy ruleset (the bench's input), phase
//! by phase, with wall time, user CPU (from /proc/self/stat) and allocation counts
//! (a counting global allocator): parse, the ruleset's lazy per-rule index (`rule.xt()`,
//! paid once per ruleset by the first index build), plumb-trace's own compile (index
//! build with the xt indexes already built), and traces with dispatch vs a linear walk.
//!
//! `cargo run --release -p plumb-trace --example trace_cost [-- SERVICES [TRACES]]`

use plumb_kubeproxy::{
    GeneratorConfig, IptablesSaveOptions, KubeProxyRules, ProxierOptions, generate,
};
use plumb_trace::{Index, IndexOptions, trace};
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

#[path = "../benches/support/workload.rs"]
mod workload;

struct Counting;
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        // SAFETY: forwarding the caller's layout to the system allocator unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: ptr was allocated by System.alloc with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        // SAFETY: as for alloc/dealloc.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// User CPU time of this process in seconds (utime, field 14 of /proc/self/stat).
fn user_cpu() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = s.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let ticks: f64 = after
        .split_whitespace()
        .nth(11)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    ticks / 100.0
}

struct Measure {
    wall: f64,
    user: f64,
    allocs: usize,
}

fn measure<T>(f: impl FnOnce() -> T) -> (T, Measure) {
    let (a, u, t) = (ALLOCS.load(Relaxed), user_cpu(), Instant::now());
    let out = f();
    let wall = t.elapsed().as_secs_f64();
    let m = Measure {
        wall,
        user: user_cpu() - u,
        allocs: ALLOCS.load(Relaxed) - a,
    };
    (out, m)
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let services = args.first().copied().unwrap_or(10_000);
    let traces = args.get(1).copied().unwrap_or(20_000);
    let cluster = generate(&GeneratorConfig {
        services,
        endpoints_per_service: 3,
        ..GeneratorConfig::default()
    })
    .unwrap();
    let text = KubeProxyRules::new(&cluster, &ProxierOptions::default())
        .to_iptables_save(&IptablesSaveOptions::default());
    let (parsed, m) =
        measure(|| plumb_ruleset::parse_bytes(text.as_bytes(), &Default::default()).unwrap());
    let rs = &parsed.ruleset;
    println!(
        "{} rules; parse: {:.1} ms wall, {:.2} s user, {} allocs",
        rs.rule_count(),
        m.wall * 1e3,
        m.user,
        m.allocs
    );
    let node = workload::node();
    let packets = workload::packets(&cluster);
    let eager = |dispatch| IndexOptions {
        dispatch,
        lazy: false,
    };
    for (name, options) in [
        ("chains compiled on first use", IndexOptions::default()),
        ("every chain compiled", eager(true)),
    ] {
        // What `plumb trace` does once per run: parse, build, trace.
        let fresh = plumb_ruleset::parse_bytes(text.as_bytes(), &Default::default()).unwrap();
        let (i, m) = measure(|| Index::build_with(&fresh.ruleset, options));
        let (_, t) = measure(|| black_box(trace(&i, &packets[0], &node)));
        println!(
            "fresh parse, {name}: build {:.1} ms wall, {} allocs; first trace {:.2} ms wall, {} allocs",
            m.wall * 1e3,
            m.allocs,
            t.wall * 1e3,
            t.allocs,
        );
        drop(i);
    }
    let (_, m) = measure(|| {
        let mut n = 0usize;
        for t in &rs.tables {
            for c in &t.chains {
                for r in &c.rules {
                    n += r.xt().is_some() as usize;
                }
            }
        }
        n
    });
    println!(
        "first rule.xt() pass (plumb-ruleset's lazy word index): {:.1} ms wall, {:.2} s user, {} allocs ({:.1}/rule)",
        m.wall * 1e3,
        m.user,
        m.allocs,
        m.allocs as f64 / rs.rule_count() as f64
    );
    // PHASE=build or PHASE=trace limits the run to one phase (for `perf record`).
    let phase = std::env::var("PHASE").unwrap_or_default();
    let builds = match phase.as_str() {
        "build" => 40,
        "trace" => 1,
        _ => 20,
    };
    for (name, options) in [
        ("dispatch, on first use", IndexOptions::default()),
        ("dispatch, every chain", eager(true)),
        ("linear, every chain", eager(false)),
    ] {
        let mut best = f64::MAX;
        let mut allocs = 0;
        let (_, total) = measure(|| {
            for _ in 0..builds {
                // Build and drop, as the bench does.
                let (_, m) = measure(|| drop(black_box(Index::build_with(rs, options))));
                best = best.min(m.wall);
                allocs = m.allocs;
            }
        });
        println!(
            "index build ({name}, xt cached) x{builds}: best {:.1} ms wall, mean {:.1} ms wall, mean {:.1} ms user; {} allocs ({:.2}/rule)",
            best * 1e3,
            total.wall * 1e3 / builds as f64,
            total.user * 1e3 / builds as f64,
            allocs,
            allocs as f64 / rs.rule_count() as f64
        );
    }
    let fast = Index::build(rs);
    let slow = Index::build_with(rs, eager(false));
    let mut big: Vec<(usize, &str, &str, usize)> = fast
        .chains
        .iter()
        .filter_map(|c| {
            let id = fast.chains.iter().position(|x| std::ptr::eq(x, c))? as u32;
            let d = fast.dispatch(id)?;
            Some((
                fast.rules(id).len(),
                &*fast.tables[c.table as usize].name,
                &*c.chain.name,
                d.rest.len(),
            ))
        })
        .collect();
    big.sort_by_key(|b| std::cmp::Reverse(b.0));
    for (n, t, c, rest) in big.iter().take(8) {
        println!("  dispatch chain {t} {c}: {n} rules, {rest} on the fallback list");
    }

    if phase == "build" {
        return;
    }
    for (name, index, n) in [("dispatch", &fast, traces), ("linear", &slow, traces / 10)] {
        if phase == "trace" && name == "linear" {
            continue;
        }
        let (stats, m) = measure(|| {
            let (mut outcomes, mut steps) = (0usize, 0usize);
            for i in 0..n {
                let t = black_box(trace(index, &packets[i % packets.len()], &node));
                outcomes += t.outcomes.len();
                steps += t.outcomes.iter().map(|o| o.steps.len()).sum::<usize>();
            }
            (outcomes, steps)
        });
        println!(
            "trace ({name}): {n} traces, {:.1} us/trace wall ({:.0}/s), {:.1} us/trace user, {:.1} allocs/trace; {:.2} outcomes and {:.1} steps per trace",
            m.wall * 1e6 / n as f64,
            n as f64 / m.wall,
            m.user * 1e6 / n as f64,
            m.allocs as f64 / n as f64,
            stats.0 as f64 / n as f64,
            stats.1 as f64 / n as f64,
        );
    }
}
