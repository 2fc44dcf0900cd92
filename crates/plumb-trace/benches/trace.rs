//! Trace speed on a 10k-service kube-proxy ruleset (~110k rules): index build, then
//! traces with the dispatch index vs a plain linear walk, in the same run. Per-phase
//! user CPU and allocation counts: `cargo run --release -p plumb-trace --example trace_cost`.
//! `cargo bench -p plumb-trace --bench trace`

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use plumb_kubeproxy::{GeneratorConfig, KubeProxyRules, ProxierOptions, SaveOptions, generate};
use plumb_trace::{Index, IndexOptions, Node, Origin, Packet, Proto, trace};
use std::hint::black_box;
use std::net::IpAddr;

fn bench(c: &mut Criterion) {
    let cluster = generate(&GeneratorConfig {
        services: 10_000,
        endpoints_per_service: 3,
        ..GeneratorConfig::default()
    })
    .unwrap();
    let text = KubeProxyRules::new(&cluster, &ProxierOptions::default())
        .to_iptables_save(&SaveOptions::default());
    let parsed = plumb_ruleset::parse_bytes(text.as_bytes(), &Default::default()).unwrap();
    let rs = &parsed.ruleset;
    eprintln!("ruleset: {} rules", rs.rule_count());
    let node = Node {
        local_addrs: vec![plumb_trace::addr::Cidr::parse("192.168.122.10/24").unwrap()],
        ..Node::default()
    };
    // Packets to services spread over the whole KUBE-SERVICES chain.
    let packets: Vec<Packet> = cluster
        .services
        .iter()
        .step_by(97)
        .map(|s| {
            let proto = if s.protocol == plumb_kubeproxy::Protocol::Udp {
                Proto::Udp
            } else {
                Proto::Tcp
            };
            let mut p = Packet::new(IpAddr::V4(s.cluster_ip), s.port, proto, Origin::Pod);
            p.src = Some("10.42.0.9".parse().unwrap());
            p
        })
        .collect();
    let mut g = c.benchmark_group("trace-10k-services");
    g.bench_function("index build (dispatch)", |b| {
        b.iter(|| black_box(Index::build(rs)))
    });
    g.bench_function("index build (linear)", |b| {
        b.iter(|| black_box(Index::build_with(rs, IndexOptions { dispatch: false })))
    });
    // The builds above reuse the ruleset, whose rules keep the word index `rule.xt()`
    // built by the first build. A fresh parse pays it inside the build (as `plumb
    // trace` does once per run).
    g.bench_function("index build on a fresh parse (incl. rule.xt())", |b| {
        b.iter_batched(
            || plumb_ruleset::parse_bytes(text.as_bytes(), &Default::default()).unwrap(),
            |parsed| {
                drop(black_box(Index::build(&parsed.ruleset)));
                parsed
            },
            BatchSize::PerIteration,
        )
    });
    let fast = Index::build(rs);
    let slow = Index::build_with(rs, IndexOptions { dispatch: false });
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
