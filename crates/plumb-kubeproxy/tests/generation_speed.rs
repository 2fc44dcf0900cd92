//! Prints how long generating and rendering a large cluster takes. No timing asserts: run
//! `cargo test -p plumb-kubeproxy --release --test generation_speed -- --ignored --nocapture`.

use std::time::Instant;

use plumb_kubeproxy::{
    GeneratorConfig, IptablesSaveOptions, KubeProxyRules, ProxierOptions, generate,
};

#[test]
#[ignore = "prints timings; run on demand"]
fn ten_thousand_services_ten_endpoints() {
    let config = GeneratorConfig {
        services: 10_000,
        endpoints_per_service: 10,
        ..GeneratorConfig::default()
    };
    let t = Instant::now();
    let cluster = generate(&config).unwrap();
    let t_model = t.elapsed();
    let rules = KubeProxyRules::new(&cluster, &ProxierOptions::default());
    let t_rules = t.elapsed();
    let payload = rules.to_restore_payload();
    let t_payload = t.elapsed();
    let saved = rules.to_iptables_save(&IptablesSaveOptions::default());
    let t_saved = t.elapsed();
    println!(
        "10k x 10: model {:?}, rules {:?}, restore payload {:?} ({} lines), iptables-save text {:?} ({} lines); endpoints {}, large cluster mode {}",
        t_model,
        t_rules - t_model,
        t_payload - t_rules,
        payload.lines().count(),
        t_saved - t_payload,
        saved.lines().count(),
        cluster.total_endpoints(),
        rules.large_cluster_mode
    );
}
