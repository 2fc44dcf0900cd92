//! Prints an all-features generated kube-proxy ruleset for a seed (debugging aid):
//! `cargo run -p plumb-trace --example gen_seed -- SERVICES ENDPOINTS SEED`.
fn main() {
    let a: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let config = plumb_kubeproxy::GeneratorConfig {
        seed: a.get(2).copied().unwrap_or(1),
        ..plumb_kubeproxy::GeneratorConfig::all_features(
            a.first().copied().unwrap_or(10) as usize,
            a.get(1).copied().unwrap_or(3) as usize,
        )
    };
    let cluster = plumb_kubeproxy::generate(&config).expect("config");
    let rules =
        plumb_kubeproxy::KubeProxyRules::new(&cluster, &plumb_kubeproxy::ProxierOptions::default());
    print!(
        "{}",
        rules.to_iptables_save(&plumb_kubeproxy::IptablesSaveOptions::default())
    );
}
