//! `plumb check`'s pure part on a parsed 10k-service x 3-endpoint kube-proxy dump:
//! service-map recovery (inside `CheckInput::new`) plus every check.

use criterion::{Criterion, criterion_group, criterion_main};
use plumb_check::{CheckInput, Origin, run};
use plumb_kubeproxy::generated_save_text;
use plumb_ruleset::iptables::save::{IptablesInput, parse};

fn bench(c: &mut Criterion) {
    let text = generated_save_text(10_000, 3).expect("generator config");
    let ruleset = parse(&text, &IptablesInput::default());
    let mut g = c.benchmark_group("check");
    g.sample_size(10);
    g.bench_function("facts_and_all_checks_10k", |b| {
        b.iter(|| {
            let facts = CheckInput::new(&ruleset, Origin::File("dump".into()), false);
            run(facts)
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
