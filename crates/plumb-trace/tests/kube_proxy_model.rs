//! Pure tests: traces over generated kube-proxy rulesets agree with the cluster model
//! that produced them (every ClusterIP reaches exactly its endpoints, each with
//! probability 1/n; services without endpoints are rejected), in both walk modes.

use plumb_kubeproxy::{
    GeneratorConfig, IptablesSaveOptions, KubeProxyRules, ProxierOptions, generate,
};
use plumb_trace::{
    Index, IndexOptions, Node, Origin, Packet, Proto, RecentAssumption, Verdict, trace,
};
use std::collections::BTreeMap;
use std::net::IpAddr;

fn ruleset(config: &GeneratorConfig) -> (plumb_kubeproxy::Cluster, plumb_ruleset::Ruleset) {
    let cluster = generate(config).unwrap();
    let text = KubeProxyRules::new(&cluster, &ProxierOptions::default())
        .to_iptables_save(&IptablesSaveOptions::default());
    let parsed = plumb_ruleset::parse_bytes(text.as_bytes(), &Default::default()).unwrap();
    (cluster, parsed.ruleset)
}

/// The same cluster in kube-proxy's nftables mode (its `nft -f` transaction).
fn nft_ruleset(config: &GeneratorConfig) -> (plumb_kubeproxy::Cluster, plumb_ruleset::Ruleset) {
    let cluster = generate(config).unwrap();
    let text = plumb_kubeproxy::nft_transaction(&cluster, &ProxierOptions::default());
    let parsed = plumb_ruleset::parse_bytes(text.as_bytes(), &Default::default()).unwrap();
    assert_eq!(parsed.ruleset.error_count(), 0);
    (cluster, parsed.ruleset)
}

fn node(cluster: &plumb_kubeproxy::Cluster, recent: RecentAssumption) -> Node {
    Node {
        local_addrs: vec![
            plumb_trace::addr::Cidr::parse(&format!("{}/24", cluster.node.ip)).unwrap(),
        ],
        recent,
        ..Node::default()
    }
}

#[test]
fn every_cluster_ip_reaches_its_endpoints() {
    let config = GeneratorConfig::all_features(60, 3);
    for (cluster, rs) in [ruleset(&config), nft_ruleset(&config)] {
        every_cluster_ip_reaches_its_endpoints_in(&cluster, &rs);
    }
}

/// A native nft table's chains are compiled when a trace enters them, like iptables
/// chains: building the index compiles none, one trace a handful, and the answer is
/// the one of an index compiled whole (`every_cluster_ip_reaches_its_endpoints` runs
/// both on nftables mode). Regression: nft chains were all compiled in `build`, 50 MiB
/// on a 10k-service nftables-mode node for `plumb check`, which walks a few chains.
#[test]
fn nft_chains_compile_on_first_use() {
    let (cluster, rs) = nft_ruleset(&GeneratorConfig::all_features(200, 3));
    let index = Index::build(&rs);
    assert!(index.chains.len() > 500, "{}", index.chains.len());
    assert_eq!(index.compiled_chains(), 0);
    let svc = &cluster.services[0];
    let p = Packet::new(
        IpAddr::V4(svc.cluster_ip),
        svc.port,
        Proto::Tcp,
        Origin::Host,
    );
    let t = trace(&index, &p, &node(&cluster, RecentAssumption::Fresh));
    assert_eq!(
        t.outcomes[0].verdict,
        Verdict::Accept,
        "{}",
        t.outcomes[0].why
    );
    let compiled = index.compiled_chains();
    assert!((1..30).contains(&compiled), "{compiled} chains compiled");
    let whole = Index::build_with(
        &rs,
        IndexOptions {
            dispatch: true,
            lazy: false,
        },
    );
    assert_eq!(whole.compiled_chains(), whole.chains.len());
}

/// A released chain's compiled rules are freed, and the next trace that enters it
/// compiles it again and reaches the same answer (`plumb trace --all-services` releases
/// each service's own chains once it is traced). Both dataplanes.
#[test]
fn released_chains_compile_again_with_the_same_answer() {
    let config = GeneratorConfig::all_features(40, 3);
    for (cluster, rs) in [ruleset(&config), nft_ruleset(&config)] {
        let mut index = Index::build(&rs);
        let node = node(&cluster, RecentAssumption::Fresh);
        let svc = cluster
            .services
            .iter()
            .find(|s| s.endpoints.len() > 1 && s.protocol == plumb_kubeproxy::Protocol::Tcp)
            .expect("a TCP service with endpoints");
        let p = Packet::new(
            IpAddr::V4(svc.cluster_ip),
            svc.port,
            Proto::Tcp,
            Origin::Host,
        );
        let before = format!("{:?}", trace(&index, &p, &node).outcomes);
        let compiled = index.compiled_chains();
        // The service's own chains: kube-proxy's SVC chain in iptables mode, the
        // `service-` chain in nftables mode.
        let own: Vec<u32> = [
            svc.chain(plumb_kubeproxy::ChainPrefix::Svc),
            format!(
                "service-{}",
                plumb_kubeproxy::chain_name::nft_service_port_base(
                    &svc.name.namespace,
                    &svc.name.name,
                    svc.protocol.as_str(),
                    &svc.name.port,
                )
            ),
        ]
        .iter()
        .flat_map(|name| index.chains_named(name).collect::<Vec<_>>())
        .collect();
        assert_eq!(own.len(), 1, "one own chain found by name");
        index.release(own[0]);
        assert_eq!(index.compiled_chains(), compiled - 1);
        let after = format!("{:?}", trace(&index, &p, &node).outcomes);
        assert_eq!(after, before);
        assert_eq!(index.compiled_chains(), compiled, "compiled again");
        // Releasing a chain that is not compiled, or an id past the last, changes nothing.
        index.release(own[0]);
        index.release(u32::MAX);
        assert_eq!(index.compiled_chains(), compiled - 1);
    }
}

fn every_cluster_ip_reaches_its_endpoints_in(
    cluster: &plumb_kubeproxy::Cluster,
    rs: &plumb_ruleset::Ruleset,
) {
    let (cluster, rs) = (cluster, rs);
    for dispatch in [true, false] {
        // Dispatch with chains compiled on first use, and a linear walk over chains
        // all compiled in `build`.
        let index = Index::build_with(
            rs,
            IndexOptions {
                dispatch,
                lazy: dispatch,
            },
        );
        assert!(index.missing_tables(false).is_empty());
        let node = node(cluster, RecentAssumption::Fresh);
        for svc in &cluster.services {
            for origin in [Origin::Host, Origin::Pod] {
                let proto = match svc.protocol {
                    plumb_kubeproxy::Protocol::Udp => Proto::Udp,
                    _ => Proto::Tcp,
                };
                let mut p = Packet::new(IpAddr::V4(svc.cluster_ip), svc.port, proto, origin);
                if origin == Origin::Pod {
                    p.src = Some("10.42.0.200".parse().unwrap());
                    p.in_iface = Some("cni0".into());
                }
                let t = trace(&index, &p, &node);
                assert!(
                    (t.total_mass() - 1.0).abs() < 1e-9,
                    "{}: mass {}",
                    svc.name,
                    t.total_mass()
                );
                let endpoints: Vec<_> = if svc.internal_policy_local {
                    svc.endpoints.iter().filter(|e| e.is_local).collect()
                } else {
                    svc.endpoints.iter().collect()
                };
                if endpoints.is_empty() {
                    for o in &t.outcomes {
                        assert!(
                            matches!(o.verdict, Verdict::Reject | Verdict::Drop),
                            "{} {origin:?}: {o:?}",
                            svc.name
                        );
                    }
                    continue;
                }
                let mut got: BTreeMap<String, f64> = BTreeMap::new();
                for o in &t.outcomes {
                    assert_eq!(
                        o.verdict,
                        Verdict::Accept,
                        "{} {origin:?}: {}",
                        svc.name,
                        o.why
                    );
                    *got.entry(o.dnat.clone().unwrap_or_default()).or_default() += o.probability;
                }
                let want: BTreeMap<String, f64> = endpoints
                    .iter()
                    .map(|e| (e.addr.to_string(), 1.0 / endpoints.len() as f64))
                    .collect();
                assert_eq!(
                    got.keys().collect::<Vec<_>>(),
                    want.keys().collect::<Vec<_>>(),
                    "{}",
                    svc.name
                );
                for (k, p) in &want {
                    assert!(
                        (got[k] - p).abs() < 1e-6,
                        "{} {k}: {} vs {p}",
                        svc.name,
                        got[k]
                    );
                }
                // Traffic from outside the pod CIDR is masqueraded.
                if origin == Origin::Host {
                    assert!(t.outcomes.iter().all(|o| o.snat.is_some()), "{}", svc.name);
                }
            }
        }
    }
}

#[test]
fn dispatch_and_linear_walk_agree_step_for_step() {
    let (cluster, rs) = ruleset(&GeneratorConfig::all_features(80, 2));
    let fast = Index::build(&rs);
    let slow = Index::build_with(
        &rs,
        IndexOptions {
            dispatch: false,
            lazy: false,
        },
    );
    let node = node(&cluster, RecentAssumption::Branch);
    for svc in cluster.services.iter().take(80) {
        for port in [svc.port, svc.port.wrapping_add(1)] {
            let p = Packet::new(IpAddr::V4(svc.cluster_ip), port, Proto::Tcp, Origin::Host);
            let a = trace(&fast, &p, &node);
            let b = trace(&slow, &p, &node);
            assert_eq!(a.outcomes.len(), b.outcomes.len());
            for (x, y) in a.outcomes.iter().zip(&b.outcomes) {
                assert_eq!(
                    (x.verdict, &x.dnat, &x.snat, &x.conditions),
                    (y.verdict, &y.dnat, &y.snat, &y.conditions)
                );
                let matched = |o: &plumb_trace::Outcome| {
                    o.steps
                        .iter()
                        .filter(|s| s.kind == plumb_trace::StepKind::Matched)
                        .map(|s| (s.chain, s.rule))
                        .collect::<Vec<_>>()
                };
                assert_eq!(matched(x), matched(y));
            }
        }
    }
}

/// The port- and destination-keyed dispatch (KUBE-NODEPORTS, KUBE-EXTERNAL-SERVICES,
/// KUBE-PROXY-FIREWALL) keeps first-match order: NodePorts, external and
/// load-balancer IPs from every origin, ICMP, and packets whose port is unknown give
/// the same outcomes and matched rules as the linear walk.
#[test]
fn port_and_destination_dispatch_agree_with_linear_walk() {
    let (cluster, rs) = ruleset(&GeneratorConfig::all_features(120, 2));
    let fast = Index::build(&rs);
    let slow = Index::build_with(
        &rs,
        IndexOptions {
            dispatch: false,
            lazy: false,
        },
    );
    let node = node(&cluster, RecentAssumption::Branch);
    let node_ip = IpAddr::V4(cluster.node.ip);
    let mut packets = Vec::new();
    for svc in &cluster.services {
        let proto = match svc.protocol {
            plumb_kubeproxy::Protocol::Udp => Proto::Udp,
            _ => Proto::Tcp,
        };
        let mut dsts: Vec<(IpAddr, u16)> = vec![(IpAddr::V4(svc.cluster_ip), svc.port)];
        if let Some(np) = svc.node_port {
            dsts.push((node_ip, np));
        }
        if let Some(hc) = svc.health_check_node_port {
            dsts.push((node_ip, hc));
        }
        for ip in svc.external_ips.iter().chain(&svc.load_balancer_ips) {
            dsts.push((IpAddr::V4(*ip), svc.port));
        }
        for (dst, port) in dsts {
            for origin in [Origin::Host, Origin::Pod, Origin::External] {
                let mut p = Packet::new(dst, port, proto, origin);
                if origin != Origin::Host {
                    p.src = Some("10.42.0.200".parse().unwrap());
                }
                packets.push(p.clone());
                let mut icmp = p.clone();
                icmp.proto = Proto::Icmp;
                icmp.dport = None;
                packets.push(icmp);
                let mut unknown_port = p;
                unknown_port.dport = None;
                packets.push(unknown_port);
            }
        }
    }
    assert!(packets.len() > 1000, "{}", packets.len());
    let mut skipped = 0;
    for p in &packets {
        let a = trace(&fast, p, &node);
        let b = trace(&slow, p, &node);
        assert_eq!(a.outcomes.len(), b.outcomes.len(), "{p:?}");
        for (x, y) in a.outcomes.iter().zip(&b.outcomes) {
            assert_eq!(
                (x.verdict, &x.dnat, &x.snat, &x.conditions, &x.why),
                (y.verdict, &y.dnat, &y.snat, &y.conditions, &y.why),
                "{p:?}"
            );
            let matched = |o: &plumb_trace::Outcome| {
                o.steps
                    .iter()
                    .filter(|s| {
                        !matches!(
                            s.kind,
                            plumb_trace::StepKind::NotMatched(_)
                                | plumb_trace::StepKind::Skipped(_)
                        )
                    })
                    .map(|s| (s.chain, s.rule, s.kind))
                    .collect::<Vec<_>>()
            };
            assert_eq!(matched(x), matched(y), "{p:?}");
            // Every rule the linear walk looked at is either looked at or counted as
            // skipped by the dispatch walk.
            let looked = |o: &plumb_trace::Outcome| {
                o.steps
                    .iter()
                    .map(|s| match s.kind {
                        plumb_trace::StepKind::Skipped(n) => n as usize,
                        plumb_trace::StepKind::NotMatched(_) | plumb_trace::StepKind::Matched => 1,
                        _ => 0,
                    })
                    .sum::<usize>()
            };
            assert_eq!(looked(x), looked(y), "{p:?}");
            skipped += x
                .steps
                .iter()
                .filter(|s| matches!(s.kind, plumb_trace::StepKind::Skipped(_)))
                .count();
        }
    }
    assert!(skipped > 0);
}
