//! Prints a generated kube-proxy ruleset:
//! `cargo run --release -p plumb-kubeproxy --example generate -- [--mode MODE] SERVICES ENDPOINTS [all] > out`.
//!
//! MODE `iptables` (the default) prints the iptables-save text of kube-proxy's iptables
//! mode; `nftables` prints the `nft -f` transaction of its nftables mode (load it with
//! `nft -f FILE`, in a namespace of its own). A third argument `all` turns on every
//! feature (NodePorts, affinity, Local policy...).

use plumb_kubeproxy::{
    GeneratorConfig, IptablesSaveOptions, KubeProxyRules, ProxierOptions, generate, nft_transaction,
};

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut nftables = false;
    if let Some(i) = args.iter().position(|a| a == "--mode") {
        nftables = match args.get(i + 1).map(String::as_str) {
            Some("nftables") => true,
            Some("iptables") => false,
            other => {
                eprintln!("generate: --mode takes iptables or nftables, not {other:?}");
                std::process::exit(2);
            }
        };
        args.drain(i..i + 2);
    }
    let numbers: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let services = numbers.first().copied().unwrap_or(1000);
    let endpoints = numbers.get(1).copied().unwrap_or(10);
    let config = if args.get(2).map(String::as_str) == Some("all") {
        GeneratorConfig::all_features(services, endpoints)
    } else {
        GeneratorConfig {
            services,
            endpoints_per_service: endpoints,
            ..Default::default()
        }
    };
    let cluster = generate(&config).expect("valid generator config");
    if nftables {
        print!("{}", nft_transaction(&cluster, &ProxierOptions::default()));
    } else {
        let rules = KubeProxyRules::new(&cluster, &ProxierOptions::default());
        print!(
            "{}",
            rules.to_iptables_save(&IptablesSaveOptions::default())
        );
    }
}
