//! Partial (`--noflush`, changed-services-only) restore payloads and the kubelet /
//! kube-proxy split of the bootstrap, as the lab's kube-proxy emulator uses them.

use std::net::{Ipv4Addr, SocketAddrV4};

use plumb_kubeproxy::{
    Endpoint, GeneratorConfig, KubeProxyRules, ProxierOptions, generate, is_top_level_chain,
};

fn declared(payload: &str) -> Vec<&str> {
    payload
        .lines()
        .filter_map(|l| l.strip_prefix(':'))
        .map(|l| l.split(' ').next().unwrap())
        .collect()
}

#[test]
fn unchanged_sync_declares_only_top_level_chains_but_still_jumps_to_services() {
    let cluster = generate(&GeneratorConfig {
        services: 20,
        ..GeneratorConfig::default()
    })
    .unwrap();
    let rules = KubeProxyRules::new(&cluster, &ProxierOptions::default());
    let partial = rules.to_partial_restore_payload(&rules);
    assert!(declared(&partial).iter().all(|c| is_top_level_chain(c)));
    assert!(partial.contains("-j KUBE-SVC-NPX46M4PTMTKRN6Y"));
    assert!(!partial.contains(":KUBE-SVC-NPX46M4PTMTKRN6Y"));
    assert!(!partial.contains("-X "));
    // Filter holds only top-level chains: the partial filter part equals the full one.
    let full = rules.to_restore_payload();
    let filter = |s: &str| s.split("*nat").next().unwrap().to_string();
    assert_eq!(filter(&partial), filter(&full));
}

#[test]
fn changed_endpoints_rewrite_that_service_and_delete_the_old_endpoint_chain() {
    let mut cluster = generate(&GeneratorConfig {
        services: 20,
        ..GeneratorConfig::default()
    })
    .unwrap();
    let before = KubeProxyRules::new(&cluster, &ProxierOptions::default());
    let svc = cluster
        .services
        .iter_mut()
        .find(|s| s.endpoints.len() >= 2 && s.name.namespace != "default")
        .unwrap();
    let old_chain = svc.endpoint_chain(&svc.endpoints[0]);
    let svc_chain = svc.chain(plumb_kubeproxy::ChainPrefix::Svc);
    let new_endpoint = Endpoint {
        addr: SocketAddrV4::new(Ipv4Addr::new(10, 42, 9, 9), 8080),
        is_local: false,
    };
    let new_chain = svc.endpoint_chain(&new_endpoint);
    svc.endpoints[0] = new_endpoint;
    svc.endpoints.sort_by_key(|e| e.endpoint_string());
    let after = KubeProxyRules::new(&cluster, &ProxierOptions::default());
    let partial = after.to_partial_restore_payload(&before);
    let decl = declared(&partial);
    assert!(decl.contains(&svc_chain.as_str()), "{partial}");
    assert!(decl.contains(&old_chain.as_str()));
    assert!(partial.contains(&format!("-X {old_chain}\n")));
    assert!(partial.contains(&format!("-A {new_chain} ")));
    // Other services' chains are not declared.
    let svc_decls = decl.iter().filter(|c| c.starts_with("KUBE-SVC-")).count();
    assert_eq!(svc_decls, 1, "{partial}");
}

#[test]
fn kubelet_and_proxy_bootstrap_partition_the_bootstrap() {
    let cluster = generate(&GeneratorConfig {
        services: 3,
        ..GeneratorConfig::default()
    })
    .unwrap();
    let rules = KubeProxyRules::new(&cluster, &ProxierOptions::default());
    let kubelet = rules.kubelet_bootstrap();
    let proxy = rules.proxy_bootstrap();
    for ((k, p), b) in kubelet.iter().zip(&proxy).zip(&rules.bootstrap) {
        assert_eq!(k.chains.len() + p.chains.len(), b.chains.len());
        assert_eq!(k.rules.len() + p.rules.len(), b.rules.len());
    }
    let text = rules.payload_text(&kubelet);
    assert!(text.contains(":KUBE-IPTABLES-HINT - [0:0]"));
    assert!(text.contains("-A INPUT -j KUBE-FIREWALL"));
    assert!(!text.contains("KUBE-PROXY-CANARY"));
    let text = rules.payload_text(&proxy);
    assert!(text.contains(":KUBE-PROXY-CANARY - [0:0]"));
    assert!(!text.contains("KUBE-FIREWALL"));
}
