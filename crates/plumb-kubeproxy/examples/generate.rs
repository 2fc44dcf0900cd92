//! Prints a generated kube-proxy ruleset in iptables-save form:
//! `cargo run --release -p plumb-kubeproxy --example generate -- SERVICES ENDPOINTS > dump`.

use plumb_kubeproxy::{
    GeneratorConfig, IptablesSaveOptions, KubeProxyRules, ProxierOptions, generate,
};

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let services = args.first().copied().unwrap_or(1000);
    let endpoints = args.get(1).copied().unwrap_or(10);
    // A third argument "all" turns on every feature (NodePorts, affinity, Local policy...).
    let config = if std::env::args().nth(3).as_deref() == Some("all") {
        GeneratorConfig::all_features(services, endpoints)
    } else {
        GeneratorConfig {
            services,
            endpoints_per_service: endpoints,
            ..Default::default()
        }
    };
    let cluster = generate(&config).expect("valid generator config");
    let rules = KubeProxyRules::new(&cluster, &ProxierOptions::default());
    print!(
        "{}",
        rules.to_iptables_save(&IptablesSaveOptions::default())
    );
}
