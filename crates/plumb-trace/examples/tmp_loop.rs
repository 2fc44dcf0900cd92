use plumb_kubeproxy::{GeneratorConfig, KubeProxyRules, ProxierOptions, SaveOptions, generate};
#[path = "../benches/support/workload.rs"]
mod workload;
fn main() {
    let n: usize = std::env::args().nth(1).unwrap().parse().unwrap();
    let cluster = generate(&GeneratorConfig { services: 10_000, endpoints_per_service: 3, ..GeneratorConfig::default() }).unwrap();
    let text = KubeProxyRules::new(&cluster, &ProxierOptions::default()).to_iptables_save(&SaveOptions::default());
    let rs = plumb_ruleset::parse_bytes(text.as_bytes(), &Default::default()).unwrap().ruleset;
    let index = plumb_trace::Index::build(&rs);
    let node = workload::node();
    let packets = workload::packets(&cluster);
    for p in &packets { std::hint::black_box(plumb_trace::trace(&index, p, &node)); }
    for i in 0..n { std::hint::black_box(plumb_trace::trace(&index, &packets[i % packets.len()], &node)); }
}
