//! Service-map recovery: generated clusters round-trip field by field (model -> kube-proxy's
//! iptables-save text -> parse -> recover -> model), the corpus's expected answers hold,
//! and no input makes recovery panic.

mod common;

use plumb_kubeproxy::recover::{
    NameSource, NoEndpoints, ProxyMode, RecoveredService, ServiceMap, recover,
};
use plumb_kubeproxy::{
    Cluster, GeneratorConfig, IptablesSaveOptions, KubeProxyRules, ProxierOptions, ServicePort,
    generate,
};
use plumb_ruleset::format::{ParseOptions, parse_bytes};
use plumb_ruleset::{Completeness, Ruleset};
use proptest::prelude::*;
use std::net::IpAddr;

fn parse(text: &str) -> Ruleset {
    parse_bytes(text.as_bytes(), &ParseOptions::default())
        .expect("ruleset text")
        .ruleset
}

fn saved(cluster: &Cluster, options: &ProxierOptions) -> String {
    KubeProxyRules::new(cluster, options).to_iptables_save(&IptablesSaveOptions::default())
}

fn only_map<'a>(maps: &'a [ServiceMap<'a>]) -> &'a ServiceMap<'a> {
    assert_eq!(maps.len(), 1, "one kube-proxy dataplane expected");
    &maps[0]
}

fn find<'a>(map: &'a ServiceMap<'a>, name: &str) -> &'a RecoveredService<'a> {
    map.services
        .iter()
        .find(|s| s.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("service {name} not recovered"))
}

/// Compares one recovered service with the model that produced it, field by field, knowing
/// what kube-proxy's rules can and cannot express (see the comments).
fn assert_matches_model(svc: &ServicePort, got: &RecoveredService, large: bool) {
    let name = svc.name_string();
    let ctx = format!("{name}: {got:#?}");
    let ip = |a: std::net::Ipv4Addr| IpAddr::V4(a);
    assert_eq!(got.name_source, NameSource::Comment, "{ctx}");
    assert_eq!(
        got.protocol.as_deref(),
        Some(svc.protocol.as_str()),
        "{ctx}"
    );
    assert_eq!(got.cluster_ip, Some(ip(svc.cluster_ip)), "{ctx}");
    assert_eq!(got.port, Some(svc.port), "{ctx}");
    assert_eq!(
        got.node_ports,
        svc.node_port.into_iter().collect::<Vec<_>>(),
        "{ctx}"
    );
    let has_endpoints = !svc.endpoints.is_empty();
    let local_eps: Vec<_> = svc.endpoints.iter().filter(|e| e.is_local).collect();
    if has_endpoints {
        let ext: Vec<IpAddr> = svc.external_ips.iter().map(|a| ip(*a)).collect();
        let lb: Vec<IpAddr> = svc.load_balancer_ips.iter().map(|a| ip(*a)).collect();
        assert_eq!(got.external_ips, ext, "{ctx}");
        assert_eq!(got.load_balancer_ips, lb, "{ctx}");
    } else {
        // Without endpoints both kinds are one "has no endpoints" REJECT each.
        let all: Vec<IpAddr> = svc
            .external_ips
            .iter()
            .chain(&svc.load_balancer_ips)
            .map(|a| ip(*a))
            .collect();
        assert_eq!(got.external_ips, all, "{ctx}");
        assert!(got.load_balancer_ips.is_empty(), "{ctx}");
    }
    let uses_fw = has_endpoints
        && !svc.load_balancer_ips.is_empty()
        && !svc.load_balancer_source_ranges.is_empty();
    let ranges: Vec<String> = if uses_fw {
        svc.load_balancer_source_ranges
            .iter()
            .map(|r| r.to_string())
            .collect()
    } else {
        Vec::new()
    };
    assert_eq!(got.load_balancer_source_ranges, ranges, "{ctx}");
    assert_eq!(
        got.health_check_node_port, svc.health_check_node_port,
        "{ctx}"
    );

    let uses_cluster = svc.uses_cluster_endpoints() && has_endpoints;
    let uses_local = svc.uses_local_endpoints() && !local_eps.is_empty();
    let affinity = svc
        .session_affinity
        .filter(|_| uses_cluster || uses_local)
        .map(|a| a.timeout_seconds);
    assert_eq!(got.session_affinity_seconds, affinity, "{ctx}");
    // Without endpoints kube-proxy writes one REJECT whatever the policies were.
    assert_eq!(
        got.internal_traffic_local,
        svc.internal_policy_local && has_endpoints,
        "{ctx}"
    );
    assert_eq!(
        got.external_traffic_local,
        svc.external_policy_local() && has_endpoints,
        "{ctx}"
    );
    // Endpoints: every endpoint when the cluster chain exists, else only the local ones.
    let expected: Vec<&plumb_kubeproxy::Endpoint> = if uses_cluster {
        svc.endpoints.iter().collect()
    } else if uses_local {
        local_eps.clone()
    } else {
        Vec::new()
    };
    let addrs: Vec<String> = got
        .endpoints
        .iter()
        .map(|e| e.address().unwrap_or_default().to_string())
        .collect();
    let want: Vec<String> = expected.iter().map(|e| e.addr.to_string()).collect();
    assert_eq!(addrs, want, "{ctx}");
    let n = expected.len() as f64;
    let total: f64 = got.endpoints.iter().filter_map(|e| e.probability()).sum();
    for e in &got.endpoints {
        let p = e.probability().expect("probability");
        assert!((p - 1.0 / n).abs() < 1e-6, "{ctx}: p={p} n={n}");
        // Local flags are only known when a local-policy chain exists.
        let model = svc
            .endpoints
            .iter()
            .find(|m| Some(m.addr.to_string().as_str()) == e.address())
            .expect("endpoint in model");
        if uses_local {
            assert_eq!(e.local, Some(model.is_local), "{ctx}");
        } else {
            assert_eq!(e.local, None, "{ctx}");
        }
        assert!(!e.evidence().is_empty());
    }
    if !got.endpoints.is_empty() {
        assert!((total - 1.0).abs() < 1e-6, "{ctx}: total {total}");
    }
    let no_local = (svc.internal_policy_local
        || (svc.external_policy_local() && svc.externally_accessible()))
        && local_eps.is_empty();
    let want_no = if !has_endpoints {
        Some(NoEndpoints::Reject)
    } else if no_local {
        Some(NoEndpoints::DropNoLocal)
    } else {
        None
    };
    assert_eq!(got.no_endpoints, want_no, "{ctx}");
    assert!(!got.evidence.is_empty(), "{ctx}");
    let _ = large;
}

fn round_trip(config: &GeneratorConfig, options: &ProxierOptions) {
    let cluster = generate(config).expect("config");
    let rules = KubeProxyRules::new(&cluster, options);
    let text = rules.to_iptables_save(&IptablesSaveOptions::default());
    let ruleset = parse(&text);
    let maps = recover(&ruleset);
    let map = only_map(&maps);
    assert_eq!(map.mode, ProxyMode::Iptables);
    assert!(map.name_mismatches.is_empty(), "{:?}", map.name_mismatches);
    assert_eq!(map.services.len(), cluster.services.len());
    for svc in &cluster.services {
        assert_matches_model(svc, find(map, &svc.name_string()), rules.large_cluster_mode);
    }
}

#[test]
fn generated_cluster_round_trips_field_by_field() {
    round_trip(
        &GeneratorConfig::all_features(300, 4),
        &ProxierOptions::default(),
    );
}

#[test]
fn a_cluster_split_over_worker_threads_round_trips() {
    // Recovery splits service ports over the cores from 1,024 per thread up: 3,000
    // services cross the chunk boundaries on any machine with more than one core.
    round_trip(
        &GeneratorConfig::all_features(3000, 2),
        &ProxierOptions::default(),
    );
}

#[test]
fn large_cluster_mode_without_endpoint_comments_round_trips() {
    // Above 1000 endpoints kube-proxy drops comments from endpoint rules.
    let options = ProxierOptions {
        large_cluster_threshold: 10,
        ..ProxierOptions::default()
    };
    round_trip(&GeneratorConfig::all_features(80, 3), &options);
}

#[test]
fn restore_payload_alone_recovers_services() {
    // kube-proxy's own full-sync payload (not canonical order) is also understood.
    let cluster = generate(&GeneratorConfig::all_features(60, 3)).unwrap();
    let payload = KubeProxyRules::new(&cluster, &ProxierOptions::default()).to_restore_payload();
    let ruleset = parse(&payload);
    assert_eq!(ruleset.completeness, Completeness::Partial);
    let maps = recover(&ruleset);
    let map = only_map(&maps);
    assert!(map.name_mismatches.is_empty());
    for svc in &cluster.services {
        assert_matches_model(svc, find(map, &svc.name_string()), false);
    }
}

#[test]
fn without_comments_services_are_found_by_structure_and_say_so() {
    let cluster = generate(&GeneratorConfig::all_features(40, 2)).unwrap();
    let text = saved(&cluster, &ProxierOptions::default());
    // Strip every `-m comment --comment "..."` (what a tool that drops comments leaves).
    let stripped: String = text
        .lines()
        .map(|l| match l.find(" -m comment --comment \"") {
            Some(s) => {
                let rest = &l[s + 23..];
                let end = rest.find('"').map(|e| s + 23 + e + 1).unwrap_or(l.len());
                format!("{}{}\n", &l[..s], &l[end..])
            }
            None => format!("{l}\n"),
        })
        .collect();
    assert!(!stripped.contains("--comment"));
    let ruleset = parse(&stripped);
    let maps = recover(&ruleset);
    let map = only_map(&maps);
    let k = map
        .services
        .iter()
        .find(|s| s.chains.contains(&"KUBE-SVC-NPX46M4PTMTKRN6Y"))
        .expect("kubernetes service by chain");
    assert_eq!(k.name, None);
    assert_eq!(k.name_source, NameSource::Unnamed);
    assert_eq!(k.cluster_ip, "10.43.0.1".parse().ok());
    assert_eq!(k.port, Some(443));
    assert_eq!(k.endpoints[0].address(), Some("192.168.122.10:6443"));
    assert!(k.notes.iter().any(|n| n.contains("no kube-proxy comments")));
    assert!(k.display_name().contains("KUBE-SVC-NPX46M4PTMTKRN6Y"));
}

#[test]
fn tampered_chain_names_are_reported() {
    let cluster = generate(&GeneratorConfig {
        services: 5,
        ..Default::default()
    })
    .unwrap();
    let text = saved(&cluster, &ProxierOptions::default());
    // Rename the kubernetes service chain everywhere: consistent rules, wrong hash.
    let text = text.replace("KUBE-SVC-NPX46M4PTMTKRN6Y", "KUBE-SVC-AAAAAAAAAAAAAAAA");
    let ruleset = parse(&text);
    let maps = recover(&ruleset);
    let map = only_map(&maps);
    let m = map
        .name_mismatches
        .iter()
        .find(|m| m.chain == "KUBE-SVC-AAAAAAAAAAAAAAAA")
        .expect("mismatch reported");
    assert_eq!(m.expected, "KUBE-SVC-NPX46M4PTMTKRN6Y");
    assert!(m.service.starts_with("default/kubernetes:https"));
    // The service itself is still recovered.
    let k = find(map, "default/kubernetes:https");
    assert_eq!(k.endpoints.len(), 1);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Any generator configuration round-trips.
    #[test]
    fn any_generated_cluster_round_trips(
        seed in any::<u64>(),
        services in 1usize..60,
        endpoints in 0usize..6,
        nodeport in 0.0f64..1.0,
        lb in 0.0f64..0.5,
        ranges in 0.0f64..1.0,
        ext in 0.0f64..0.5,
        affinity in 0.0f64..1.0,
        local in 0.0f64..1.0,
        internal_local in 0.0f64..0.5,
        no_eps in 0.0f64..0.5,
        local_eps in 0.0f64..1.0,
        udp in 0.0f64..1.0,
        masquerade_all in any::<bool>(),
        localhost_nodeports in any::<bool>(),
    ) {
        let config = GeneratorConfig {
            seed,
            services,
            endpoints_per_service: endpoints,
            nodeport_fraction: nodeport,
            load_balancer_fraction: lb,
            source_ranges_fraction: ranges,
            external_ip_fraction: ext,
            session_affinity_fraction: affinity,
            local_policy_fraction: local,
            internal_local_fraction: internal_local,
            no_endpoints_fraction: no_eps,
            local_endpoint_fraction: local_eps,
            udp_fraction: udp,
            ..GeneratorConfig::default()
        };
        let options = ProxierOptions {
            masquerade_all,
            localhost_nodeports,
            ..ProxierOptions::default()
        };
        round_trip(&config, &options);
    }

    /// Mutated kube-proxy dumps and random text never make recovery panic.
    #[test]
    fn recovery_never_panics(
        seed in any::<u64>(),
        cuts in proptest::collection::vec((any::<usize>(), any::<usize>()), 0..8),
        noise in "[ -~\n]{0,200}",
    ) {
        let cluster = generate(&GeneratorConfig { seed, ..GeneratorConfig::all_features(12, 3) }).unwrap();
        let text = saved(&cluster, &ProxierOptions::default());
        let mut lines: Vec<&str> = text.lines().collect();
        for (a, b) in cuts {
            if lines.is_empty() { break; }
            let i = a % lines.len();
            match b % 3 {
                0 => { lines.remove(i); }
                1 => { let j = b % lines.len(); lines.swap(i, j); }
                _ => { lines.insert(i, noise.as_str()); }
            }
        }
        let mutated = lines.join("\n");
        if let Ok(p) = parse_bytes(mutated.as_bytes(), &ParseOptions::default()) {
            let _ = recover(&p.ruleset);
        }
        if let Ok(p) = parse_bytes(noise.as_bytes(), &ParseOptions::default()) {
            let _ = recover(&p.ruleset);
        }
    }
}

// ---- corpus (expected answers from ../shared/corpus/README.md) ----

fn corpus_ruleset(rel: &str) -> Option<Ruleset> {
    let dir = common::corpus_dir()?;
    let text = common::read(&dir.join(rel));
    Some(parse(&text))
}

#[test]
fn corpus_master_flannel_docker() {
    let Some(rs) = corpus_ruleset(
        "kube-proxy-iptables/real-nodes/master_flannel_docker_kubeproxy-iptables_3tables.iptables-save",
    ) else {
        return;
    };
    let maps = recover(&rs);
    let map = only_map(&maps);
    assert!(map.name_mismatches.is_empty(), "{:?}", map.name_mismatches);
    let names: Vec<&str> = map
        .services
        .iter()
        .filter_map(|s| s.name.as_deref())
        .collect();
    assert_eq!(
        names,
        [
            "default/kubernetes:https",
            "default/service1:downloader",
            "default/service1:fileserver",
            "kube-system/kube-dns:dns",
            "kube-system/kube-dns:dns-tcp",
            "kube-system/kube-dns:metrics",
        ]
    );
    let k = find(map, "default/kubernetes:https");
    assert_eq!(k.cluster_ip, "10.96.0.1".parse().ok());
    assert_eq!(k.endpoints[0].address(), Some("192.168.157.133:6443"));
    assert_eq!(k.endpoints[0].probability(), Some(1.0));
    for dns in ["dns", "dns-tcp", "metrics"] {
        let s = find(map, &format!("kube-system/kube-dns:{dns}"));
        assert_eq!(s.endpoints.len(), 2);
        for e in &s.endpoints {
            assert!((e.probability().unwrap() - 0.5).abs() < 1e-9);
        }
    }
    let f = find(map, "default/service1:fileserver");
    assert_eq!(f.endpoints.len(), 3);
    // 0.33333333349, then 0.5 of the rest, then the rest: about a third each.
    for e in &f.endpoints {
        assert!((e.probability().unwrap() - 1.0 / 3.0).abs() < 1e-6, "{e:?}");
    }
    assert_eq!(f.protocol.as_deref(), Some("tcp"));
    assert_eq!(f.port, Some(8080));
    let sep_chains: usize = map.services.iter().map(|s| s.endpoints.len()).sum();
    assert_eq!(sep_chains, 13);
}

#[test]
fn corpus_k3s_dns_without_endpoints() {
    let Some(rs) = corpus_ruleset(
        "kube-proxy-iptables/real-nodes/k3s-node_iptables-save-c_with-counters_dns-no-endpoints.iptables-save",
    ) else {
        return;
    };
    let maps = recover(&rs);
    let map = only_map(&maps);
    let no_eps: Vec<&str> = map
        .services
        .iter()
        .filter(|s| s.no_endpoints == Some(NoEndpoints::Reject))
        .filter_map(|s| s.name.as_deref())
        .collect();
    for n in [
        "kube-system/kube-dns:dns",
        "kube-system/kube-dns:dns-tcp",
        "kube-system/kube-dns:metrics",
        "kube-system/metrics-server:https",
    ] {
        assert!(
            no_eps.contains(&n),
            "{n} not reported without endpoints: {no_eps:?}"
        );
    }
    let k = find(map, "default/kubernetes:https");
    assert_eq!(k.cluster_ip, "10.43.0.1".parse().ok());
    assert_eq!(k.endpoints[0].address(), Some("10.0.20.5:6443"));
    assert_eq!(k.no_endpoints, None);
}

#[test]
fn corpus_kube_proxy_unit_test_payload() {
    let Some(rs) = corpus_ruleset(
        "kube-proxy-iptables/k8s-proxier-test/TestOverallIPTablesRules.expected.iptables-restore",
    ) else {
        return;
    };
    let maps = recover(&rs);
    let map = only_map(&maps);
    assert!(map.name_mismatches.is_empty(), "{:?}", map.name_mismatches);
    let svc2 = find(map, "ns2/svc2:p80");
    assert_eq!(svc2.cluster_ip, "172.30.0.42".parse().ok());
    assert_eq!(
        svc2.external_ips,
        ["192.168.99.22".parse::<IpAddr>().unwrap()]
    );
    assert_eq!(
        svc2.load_balancer_ips,
        ["1.2.3.4".parse::<IpAddr>().unwrap()]
    );
    assert_eq!(svc2.node_ports, [3001]);
    assert_eq!(svc2.health_check_node_port, Some(30000));
    assert!(svc2.external_traffic_local);
    let svc5 = find(map, "ns5/svc5:p80");
    assert_eq!(svc5.session_affinity_seconds, Some(10800));
    assert_eq!(svc5.load_balancer_source_ranges, ["203.0.113.0/25"]);
    assert_eq!(
        svc5.load_balancer_ips,
        ["5.6.7.8".parse::<IpAddr>().unwrap()]
    );
    let svc6 = find(map, "ns6/svc6:p80");
    assert_eq!(svc6.no_endpoints, Some(NoEndpoints::Reject));
    assert_eq!(svc6.cluster_ip, "172.30.0.46".parse().ok());
    // 5 KUBE-SVC chains + svc6 (no endpoints, filter only).
    assert_eq!(map.services.len(), 6);
    let svc4 = find(map, "ns4/svc4:p80");
    assert_eq!(svc4.endpoints.len(), 2);
}

#[test]
fn corpus_partial_payload_references_undeclared_chains() {
    let Some(rs) = corpus_ruleset(
        "kube-proxy-iptables/k8s-proxier-test/TestSyncProxyRulesRepeated.step2-partial-add-svc3.iptables-restore",
    ) else {
        return;
    };
    // KUBE-SVC-XPGD46QRK7WJZT7O is referenced but lives in the kernel: still a service.
    let maps = recover(&rs);
    let map = only_map(&maps);
    let svc1 = map
        .services
        .iter()
        .find(|s| s.chains.contains(&"KUBE-SVC-XPGD46QRK7WJZT7O"))
        .expect("svc1 by its capture rule");
    assert_eq!(svc1.name.as_deref(), Some("ns1/svc1:p80"));
    assert!(svc1.endpoints.is_empty());
}

/// kube-proxy's own nftables transaction (the upstream proxier unit test's expected
/// `nft -f` input for six services) read as a script.
#[test]
fn corpus_nftables_transaction() {
    let Some(rs) = corpus_ruleset(plumb_testkit::KUBE_PROXY_NFT_TRANSACTION) else {
        return;
    };
    assert_eq!(rs.completeness, plumb_ruleset::Completeness::Partial);
    let maps = recover(&rs);
    let map = only_map(&maps);
    assert_eq!(map.mode, ProxyMode::Nftables);
    assert!(map.name_mismatches.is_empty(), "{:?}", map.name_mismatches);
    assert_eq!(map.services.len(), 6, "{:#?}", map.services);
    let svc1 = find(map, "ns1/svc1:p80");
    assert_eq!(svc1.cluster_ip, "172.30.0.41".parse().ok());
    assert_eq!(svc1.endpoints[0].address(), Some("10.180.0.1:80"));
    let svc2 = find(map, "ns2/svc2:p80");
    assert_eq!(svc2.node_ports, [3001]);
    let svc4 = find(map, "ns4/svc4:p80");
    let probabilities: Vec<f64> = svc4
        .endpoints
        .iter()
        .filter_map(|e| e.probability())
        .collect();
    assert_eq!(probabilities, [0.5, 0.5]);
    let svc5 = find(map, "ns5/svc5:p80");
    assert_eq!(svc5.session_affinity_seconds, Some(10800));
    assert_eq!(svc5.load_balancer_source_ranges, ["203.0.113.0/25"]);
    assert_eq!(
        find(map, "ns6/svc6:p80").no_endpoints,
        Some(NoEndpoints::Reject)
    );
}

#[test]
fn corpus_nftables_mode() {
    let Some(rs) = corpus_ruleset(
        "kube-proxy-nftables/real-nodes/k3s-like_10.42-10.43_nft-list-table-ip-kube-proxy.nft",
    ) else {
        return;
    };
    let maps = recover(&rs);
    let map = only_map(&maps);
    assert_eq!(map.mode, ProxyMode::Nftables);
    assert!(map.name_mismatches.is_empty(), "{:?}", map.name_mismatches);
    // 9 service-ips entries (all ClusterIPs) + 2 no-endpoint services.
    let with_ip = map
        .services
        .iter()
        .filter(|s| s.cluster_ip.is_some())
        .count();
    assert_eq!(with_ip, 11, "{:#?}", map.services);
    let np = find(map, "riset/hellopod-np-svc");
    assert_eq!(np.node_ports, [30000]);
    assert_eq!(np.cluster_ip, "10.43.195.72".parse().ok());
    assert_eq!(np.endpoints.len(), 9);
    for e in &np.endpoints {
        assert!((e.probability().unwrap() - 1.0 / 9.0).abs() < 1e-9);
        assert!(e.address().is_some(), "{e:?}");
    }
    let k = find(map, "default/kubernetes:https");
    assert_eq!(k.endpoints[0].address(), Some("10.34.4.142:6443"));
    assert_eq!(k.name_source, NameSource::ChainName);
    for n in [
        "riset/otelcol-opentelemetry-collector:otlp",
        "riset/otelcol-opentelemetry-collector:otlp-http",
    ] {
        let s = find(map, n);
        assert_eq!(s.no_endpoints, Some(NoEndpoints::Reject));
        assert_eq!(s.cluster_ip, "10.43.21.102".parse().ok());
    }
    // The otel collector's endpoint chains are referenced but absent in this dump.
    let otel = find(map, "riset/opentelemetry-collector:otlp");
    assert_eq!(otel.endpoints.len(), 1);
}

#[test]
fn corpus_truncated_nft_does_not_panic() {
    let Some(rs) = corpus_ruleset(
        "kube-proxy-nftables/real-nodes/kubeadm-flannel_10.244-10.255_nft-a-list-table-kube-proxy_TRUNCATED-by-author.nft",
    ) else {
        return;
    };
    let _ = recover(&rs);
}
