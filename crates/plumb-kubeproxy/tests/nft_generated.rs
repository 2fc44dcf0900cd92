//! The nftables-mode generator against the service-map recovery: a generated cluster,
//! written as kube-proxy's nftables transaction ([`nft_transaction`]), parsed and
//! recovered, gives back exactly the generated service ports and endpoints, field by
//! field; the same through a real kernel (`nft -f` into a private namespace, `nft list
//! ruleset` back). The generator's own model is the truth.

use plumb_kubeproxy::recover::{NameSource, NoEndpoints, ProxyMode, recover};
use plumb_kubeproxy::{
    Cluster, GeneratorConfig, ProxierOptions, ServicePort, generate, nft_transaction,
};
use plumb_ruleset::Ruleset;
use plumb_ruleset::format::{ParseOptions, parse_bytes};
use std::net::IpAddr;

fn parse(text: &str) -> Ruleset {
    parse_bytes(text.as_bytes(), &ParseOptions::default())
        .expect("ruleset text")
        .ruleset
}

/// One line per service port with everything nftables mode can express, from the model:
/// what `recover` must say about it.
fn expected(svc: &ServicePort) -> String {
    let has = !svc.endpoints.is_empty();
    let local: Vec<_> = svc.endpoints.iter().filter(|e| e.is_local).collect();
    let uses_cluster = svc.uses_cluster_endpoints() && has;
    let uses_local = svc.uses_local_endpoints() && !local.is_empty();
    let uses_fw = !svc.load_balancer_ips.is_empty() && !svc.load_balancer_source_ranges.is_empty();
    // One `service-ips` map sends external and load-balancer IPs to the `external-`
    // chain: only `firewall-ips` (source ranges) tells a load-balancer IP apart. Without
    // endpoints, only `no-endpoint-services` elements are left, and they say neither.
    let mut ext: Vec<String> = svc.external_ips.iter().map(|a| a.to_string()).collect();
    let mut lb = Vec::new();
    for ip in &svc.load_balancer_ips {
        if uses_fw {
            lb.push(ip.to_string());
        } else {
            ext.push(ip.to_string());
        }
    }
    ext.sort();
    let ranges: Vec<String> = if uses_fw {
        let mut r: Vec<String> = svc
            .load_balancer_source_ranges
            .iter()
            .map(|r| r.to_string())
            .collect();
        // With a range holding the node IP, kube-proxy also allows the load-balancer
        // IPs themselves ("allow from node"): no range of the Service, not recovered as one.
        r.sort();
        r
    } else {
        Vec::new()
    };
    let eps: Vec<&plumb_kubeproxy::Endpoint> = if uses_cluster {
        svc.endpoints.iter().collect()
    } else if uses_local {
        local.clone()
    } else {
        Vec::new()
    };
    let n = eps.len() as f64;
    let mut eps: Vec<String> = eps
        .iter()
        .map(|e| {
            let flag = if uses_local {
                format!(" local={}", e.is_local)
            } else {
                String::new()
            };
            format!("{}@{:.4}{flag}", e.addr, 1.0 / n)
        })
        .collect();
    eps.sort();
    let internal_local = svc.internal_policy_local && has;
    let external_local = svc.external_policy_local() && has;
    let none = if !has {
        Some(NoEndpoints::Reject)
    } else if (svc.internal_policy_local || svc.external_policy_local()) && local.is_empty() {
        Some(NoEndpoints::DropNoLocal)
    } else {
        None
    };
    let affinity = svc
        .session_affinity
        .filter(|_| uses_cluster || uses_local)
        .map(|a| a.timeout_seconds);
    format!(
        "{} {} {}:{} np={:?} ext={ext:?} lb={lb:?} ranges={ranges:?} aff={affinity:?} itl={internal_local} etl={external_local} none={none:?} eps={eps:?}",
        svc.name_string(),
        svc.protocol.as_str(),
        svc.cluster_ip,
        svc.port,
        svc.node_port.into_iter().collect::<Vec<_>>(),
    )
}

/// The same line from what `recover` read; also checks that every name came from a
/// chain name or element comment and no hash mismatched.
fn recovered(rs: &Ruleset) -> Vec<String> {
    let maps = recover(rs);
    assert_eq!(maps.len(), 1, "one kube-proxy table");
    let map = &maps[0];
    assert_eq!(map.mode, ProxyMode::Nftables);
    assert!(map.name_mismatches.is_empty(), "{:?}", map.name_mismatches);
    let mut out: Vec<String> = map
        .services
        .iter()
        .map(|s| {
            assert_ne!(s.name_source, NameSource::Unnamed, "{s:?}");
            let mut ext: Vec<String> = s.external_ips.iter().map(IpAddr::to_string).collect();
            ext.sort();
            let lb: Vec<String> = s.load_balancer_ips.iter().map(IpAddr::to_string).collect();
            let mut ranges = s.load_balancer_source_ranges.clone();
            ranges.sort();
            let mut eps: Vec<String> = s
                .endpoints
                .iter()
                .map(|e| {
                    let flag = e.local.map(|l| format!(" local={l}")).unwrap_or_default();
                    format!(
                        "{}@{:.4}{flag}",
                        e.address().unwrap_or("?"),
                        e.probability().unwrap_or(-1.0)
                    )
                })
                .collect();
            eps.sort();
            format!(
                "{} {} {}:{} np={:?} ext={ext:?} lb={lb:?} ranges={ranges:?} aff={:?} itl={} etl={} none={:?} eps={eps:?}",
                s.display_name(),
                s.protocol.as_deref().unwrap_or("?"),
                s.cluster_ip.map_or("?".into(), |i| i.to_string()),
                s.port.map_or("?".into(), |p| p.to_string()),
                s.node_ports,
                s.session_affinity_seconds,
                s.internal_traffic_local,
                s.external_traffic_local,
                s.no_endpoints,
            )
        })
        .collect();
    out.sort();
    out
}

fn truth(cluster: &Cluster) -> Vec<String> {
    let mut out: Vec<String> = cluster.services.iter().map(expected).collect();
    out.sort();
    out
}

fn assert_same(got: &[String], want: &[String]) {
    assert_eq!(got.len(), want.len(), "service port count");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g, w);
    }
}

fn clusters() -> Vec<(&'static str, Cluster)> {
    vec![
        (
            "default fractions",
            generate(&GeneratorConfig {
                services: 200,
                endpoints_per_service: 5,
                ..GeneratorConfig::default()
            })
            .unwrap(),
        ),
        (
            "every feature",
            generate(&GeneratorConfig::all_features(200, 5)).unwrap(),
        ),
    ]
}

#[test]
fn generated_transaction_recovers_exactly_the_generated_services() {
    for (what, cluster) in clusters() {
        let text = nft_transaction(&cluster, &ProxierOptions::default());
        let rs = parse(&text);
        assert_eq!(rs.error_count(), 0, "{what}: {:?}", rs.diagnostics);
        let want = truth(&cluster);
        // The set has what it should: some services without endpoints, some with
        // Local policies, affinity, firewalls (else the comparison proves little).
        assert!(
            want.iter().any(|l| l.contains("none=Some(Reject)")),
            "{what}"
        );
        if what == "every feature" {
            for needle in [
                "none=Some(DropNoLocal)",
                "aff=Some(10800)",
                "etl=true",
                "itl=true",
            ] {
                assert!(want.iter().any(|l| l.contains(needle)), "{what}: {needle}");
            }
            assert!(want.iter().any(|l| !l.contains("ranges=[]")), "{what}");
        }
        assert_same(&recovered(&rs), &want);
    }
}

/// Above 254 load-balancer services the generator's addresses used to wrap around, so two
/// services claimed the same IP and port: nftables refuses such a map (`File exists`).
#[test]
fn generated_external_addresses_are_unique() {
    let cluster = generate(&GeneratorConfig {
        services: 3000,
        load_balancer_fraction: 0.5,
        external_ip_fraction: 0.5,
        ..GeneratorConfig::default()
    })
    .unwrap();
    let mut keys = std::collections::HashSet::new();
    for s in &cluster.services {
        for ip in s.external_ips.iter().chain(&s.load_balancer_ips) {
            assert!(
                keys.insert((*ip, s.port, s.protocol)),
                "{ip}:{} twice",
                s.port
            );
        }
    }
    assert!(keys.len() > 2000);
}

/// Privileged: the transaction loads with `nft -f` into a private namespace
/// (`plumb-t-nftgen-<pid>-<n>`, deleted on drop), and `nft list ruleset` of it recovers
/// the same services.
#[test]
fn kernel_listing_of_the_generated_transaction_recovers_the_same_services() {
    if !plumb_testkit::privileged(&["ip", "nft"]) {
        return;
    }
    for (what, cluster) in clusters() {
        let text = nft_transaction(&cluster, &ProxierOptions::default());
        let ns = plumb_os::netns::Netns::create("plumb-t-nftgen")
            .expect("creating a test network namespace");
        let (ok, _, err) = ns.exec("nft", &["-f", "-"], Some(&text)).expect("nft -f");
        assert!(ok, "{what}: nft -f refused the transaction: {err}");
        let (ok, listed, err) = ns
            .exec("nft", &["list", "ruleset"], None)
            .expect("nft list");
        assert!(ok, "{err}");
        let rs = parse(&listed);
        assert_eq!(rs.error_count(), 0, "{what}: {:?}", rs.diagnostics);
        assert_same(&recovered(&rs), &truth(&cluster));
    }
}
