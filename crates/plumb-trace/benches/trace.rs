//! Trace speed on a 10k-service kube-proxy ruleset (~110k rules): index build, then
//! traces with the dispatch index vs a plain linear walk, in the same run. Per-phase
//! user CPU and allocation counts: `cargo run --release -p plumb-trace --example trace_cost`.
//! `cargo bench -p plumb-trace --bench trace`

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use plumb_kubeproxy::{
    GeneratorConfig, IptablesSaveOptions, KubeProxyRules, ProxierOptions, generate,
};
use plumb_trace::{Index, IndexOptions, trace};
use std::hint::black_box;

#[path = "support/workload.rs"]
mod workload;

fn bench(c: &mut Criterion) {
    let cluster = generate(&GeneratorConfig {
        services: 10_000,
        endpoints_per_service: 3,
        ..GeneratorConfig::default()
    })
    .unwrap();
    let text = KubeProxyRules::new(&cluster, &ProxierOptions::default())
        .to_iptables_save(&IptablesSaveOptions::default());
    let parsed = plumb_ruleset::parse_bytes(text.as_bytes(), &Default::default()).unwrap();
    let rs = &parsed.ruleset;
    eprintln!("ruleset: {} rules", rs.rule_count());
    let node = workload::node();
    // Packets to services spread over the whole KUBE-SERVICES chain.
    let packets = workload::packets(&cluster);
    let mut g = c.benchmark_group("trace-10k-services");
    let eager = |dispatch| IndexOptions {
        dispatch,
        lazy: false,
    };
    // Default: chains are compiled when a trace first enters them.
    g.bench_function(
        "index build (dispatch, chains compiled on first use)",
        |b| b.iter(|| black_box(Index::build(rs))),
    );
    g.bench_function("index build (dispatch, every chain compiled)", |b| {
        b.iter(|| black_box(Index::build_with(rs, eager(true))))
    });
    g.bench_function("index build (linear, every chain compiled)", |b| {
        b.iter(|| black_box(Index::build_with(rs, eager(false))))
    });
    // The builds above reuse the ruleset, whose rules keep the word index `rule.xt()`
    // built by the first build. `plumb trace` parses, builds and traces once: a
    // fresh parse pays `rule.xt()` for the rules it compiles.
    g.bench_function(
        "fresh parse: index build + first trace (parse not timed)",
        |b| {
            b.iter_batched(
                || plumb_ruleset::parse_bytes(text.as_bytes(), &Default::default()).unwrap(),
                |parsed| {
                    let index = Index::build(&parsed.ruleset);
                    black_box(trace(&index, &packets[0], &node));
                    drop(index);
                    parsed
                },
                BatchSize::PerIteration,
            )
        },
    );
    g.bench_function(
        "fresh parse: index build, every chain compiled (parse not timed)",
        |b| {
            b.iter_batched(
                || plumb_ruleset::parse_bytes(text.as_bytes(), &Default::default()).unwrap(),
                |parsed| {
                    drop(black_box(Index::build_with(&parsed.ruleset, eager(true))));
                    parsed
                },
                BatchSize::PerIteration,
            )
        },
    );
    let fast = Index::build(rs);
    let slow = Index::build_with(rs, eager(false));
    let mut i = 0;
    g.bench_function("trace (dispatch index)", |b| {
        b.iter(|| {
            i = (i + 1) % packets.len();
            black_box(trace(&fast, &packets[i], &node))
        })
    });
    let mut j = 0;
    g.bench_function("trace (linear walk)", |b| {
        b.iter(|| {
            j = (j + 1) % packets.len();
            black_box(trace(&slow, &packets[j], &node))
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(std::time::Duration::from_secs(4));
    targets = bench
}
criterion_main!(benches);
