use plumb_kubeproxy::{GeneratorConfig, KubeProxyRules, ProxierOptions, SaveOptions, generate};
#[path = "../benches/support/workload.rs"]
mod workload;
fn main() {
    let cluster = generate(&GeneratorConfig { services: 10_000, endpoints_per_service: 3, ..GeneratorConfig::default() }).unwrap();
    let text = KubeProxyRules::new(&cluster, &ProxierOptions::default()).to_iptables_save(&SaveOptions::default());
    let rs = plumb_ruleset::parse_bytes(text.as_bytes(), &Default::default()).unwrap().ruleset;
    let index = plumb_trace::Index::build(&rs);
    let node = workload::node();
    let mut conds = std::collections::BTreeMap::new();
    for p in workload::packets(&cluster) { let t = plumb_trace::trace(&index, &p, &node); for o in &t.outcomes { for c in &o.conditions { *conds.entry(c.clone()).or_insert(0) += 1; } for s in &o.steps { if let Some(n) = &s.note { *conds.entry(format!("NOTE {}", n.to_string().chars().take(50).collect::<String>())).or_insert(0) += 1; } } } }
    for (c, n) in conds.iter().filter(|(c, _)| !c.contains("local address")) { println!("{n} {c}"); }
}
