//! Service-map recovery on a parsed 10k-service x 3-endpoint kube-proxy dump (the pure
//! part of `plumb services`; parsing is benchmarked in plumb-ruleset).

use criterion::{Criterion, criterion_group, criterion_main};
use plumb_kubeproxy::generated_save_text;
use plumb_kubeproxy::recover::recover;
use plumb_ruleset::iptables::save::{IptablesInput, parse};

fn bench(c: &mut Criterion) {
    let text = generated_save_text(10_000, 3).expect("generator config");
    let ruleset = parse(&text, &IptablesInput::default());
    let mut g = c.benchmark_group("recover");
    g.sample_size(10);
    g.bench_function("services_10k", |b| b.iter(|| recover(&ruleset)));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
