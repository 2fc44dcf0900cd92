//! What kube-proxy's nftables mode writes for a [`Cluster`], as the `nft -f` transaction
//! it hands to `nft` on a full sync into an empty `table ip kube-proxy`.
//!
//! Follows kubernetes `pkg/proxy/nftables/proxier.go` (`setupNFTables`, `syncProxyRules`,
//! `writeServiceToEndpointRules`) in the layout of the 1.31+ releases, checked against
//! `nft list table ip kube-proxy` of a real node in the shared corpus
//! (`kube-proxy-nftables/real-nodes/k3s-like_…`) and kube-proxy's own expected transaction
//! (`k8s-proxier-test/TestOverallNFTablesRules…`):
//! - base chains `filter-prerouting` / `filter-input` / `filter-forward` / `filter-output`
//!   at priority dstnat-10 (-110), `filter-output-post-dnat` at -90, `nat-prerouting`,
//!   `nat-output` (dstnat, -100) and `nat-postrouting` (srcnat, 100), jumping (`ct state
//!   new`) to `firewall-check`, `nodeport-endpoints-check`, `service-endpoints-check`,
//!   `cluster-ips-check`, and to `services` / `masquerading`;
//! - set `cluster-ips` (every ClusterIP) and `nodeport-ips` (the node IP: the default
//!   `--nodeport-addresses primary`); maps `service-ips`, `service-nodeports`,
//!   `no-endpoint-services`, `no-endpoint-nodeports` (elements commented `ns/name:port`)
//!   and `firewall-ips`;
//! - per service port: chains `service-HASH-ns/name/proto/port` (cluster policy), `local-…`
//!   (local policy), `external-…` (NodePort, external and load-balancer IPs), `firewall-…`
//!   (`loadBalancerSourceRanges`), `endpoint-HASH-…__IP/PORT` per endpoint and, with
//!   `ClientIP` affinity, a set `affinity-HASH-…__IP/PORT` per endpoint. Load balancing is
//!   `numgen random mod N vmap { 0 : goto endpoint-…, … }`.
//!
//! Order is kube-proxy's within a service (chains declared before the rules and map
//! elements that name them), services in model order. kube-proxy also sends `flush chain`
//! after each `add chain` and `flush map` for its maps, to empty what a previous sync left;
//! into an empty table they change nothing and are left out. IPv4 only, as the model is.

use std::fmt::Write as _;

use crate::chain_name::{NftChainPrefix, nft_endpoint_chain_name, nft_service_chain_name};
use crate::model::{Cluster, Endpoint, Routing, ServicePort};
use crate::sync::ProxierOptions;

const T: &str = "ip kube-proxy";

/// The per-service decisions of `syncProxyRules` (nftables proxier).
struct Plan<'s> {
    svc: &'s ServicePort,
    name: String,
    proto: &'static str,
    service_chain: String,
    local_chain: String,
    external_chain: String,
    firewall_chain: String,
    /// Endpoints and chains, as both proxiers decide them.
    route: Routing<'s>,
    uses_firewall_chain: bool,
}

impl<'s> Plan<'s> {
    fn new(svc: &'s ServicePort) -> Self {
        let (ns, name, port) = (
            svc.name.namespace.as_str(),
            svc.name.name.as_str(),
            svc.name.port.as_str(),
        );
        let proto = svc.protocol.as_str();
        let chain = |p| nft_service_chain_name(p, ns, name, proto, port);
        Plan {
            name: svc.name_string(),
            proto,
            service_chain: chain(NftChainPrefix::Service),
            local_chain: chain(NftChainPrefix::Local),
            external_chain: chain(NftChainPrefix::External),
            firewall_chain: chain(NftChainPrefix::Firewall),
            // Unlike the iptables proxier's, also without endpoints.
            uses_firewall_chain: !svc.load_balancer_ips.is_empty()
                && !svc.load_balancer_source_ranges.is_empty(),
            route: svc.routing(),
            svc,
        }
    }

    fn endpoint_name(&self, prefix: NftChainPrefix, ep: &Endpoint) -> String {
        let n = &self.svc.name;
        nft_endpoint_chain_name(
            prefix,
            &n.namespace,
            &n.name,
            self.proto,
            &n.port,
            &ep.endpoint_string(),
        )
    }

    fn internal_chain(&self) -> &str {
        if self.svc.internal_policy_local {
            &self.local_chain
        } else {
            &self.service_chain
        }
    }

    fn external_policy_chain(&self) -> &str {
        if self.svc.external_policy_local() {
            &self.local_chain
        } else {
            &self.service_chain
        }
    }
}

fn setup(out: &mut String, cluster: &Cluster, mark: &str) {
    let node = &cluster.node;
    let _ = writeln!(
        out,
        "add table {T} {{ comment \"rules for kube-proxy\" ; }}"
    );
    for (name, kind, hook, prio) in [
        ("filter-prerouting", "filter", "prerouting", "-110"),
        ("filter-input", "filter", "input", "-110"),
        ("filter-forward", "filter", "forward", "-110"),
        ("filter-output", "filter", "output", "-110"),
        ("filter-output-post-dnat", "filter", "output", "-90"),
        ("nat-prerouting", "nat", "prerouting", "-100"),
        ("nat-output", "nat", "output", "-100"),
        ("nat-postrouting", "nat", "postrouting", "100"),
    ] {
        let _ = writeln!(
            out,
            "add chain {T} {name} {{ type {kind} hook {hook} priority {prio} ; }}"
        );
    }
    for chain in [
        "nodeport-endpoints-check",
        "service-endpoints-check",
        "firewall-check",
        "cluster-ips-check",
        "services",
        "masquerading",
        "mark-for-masquerade",
    ] {
        let _ = writeln!(out, "add chain {T} {chain}");
    }
    for (from, extra, to) in [
        ("filter-input", "ct state new ", "nodeport-endpoints-check"),
        ("filter-input", "ct state new ", "service-endpoints-check"),
        ("filter-forward", "ct state new ", "service-endpoints-check"),
        ("filter-forward", "ct state new ", "cluster-ips-check"),
        ("filter-output", "ct state new ", "service-endpoints-check"),
        ("filter-output", "ct state new ", "firewall-check"),
        (
            "filter-output-post-dnat",
            "ct state new ",
            "cluster-ips-check",
        ),
        ("filter-prerouting", "ct state new ", "firewall-check"),
        ("nat-output", "", "services"),
        ("nat-prerouting", "", "services"),
        ("nat-postrouting", "", "masquerading"),
    ] {
        let _ = writeln!(out, "add rule {T} {from} {extra}jump {to}");
    }
    let _ = writeln!(
        out,
        "add rule {T} mark-for-masquerade mark set mark or {mark}"
    );
    let _ = writeln!(out, "add rule {T} masquerading mark and {mark} == 0 return");
    let _ = writeln!(out, "add rule {T} masquerading mark set mark xor {mark}");
    let _ = writeln!(out, "add rule {T} masquerading masquerade fully-random");
    let _ = writeln!(
        out,
        "add set {T} cluster-ips {{ type ipv4_addr ; comment \"Active ClusterIPs\" ; }}"
    );
    let _ = writeln!(
        out,
        "add set {T} nodeport-ips {{ type ipv4_addr ; comment \"IPs that accept NodePort traffic\" ; }}"
    );
    let _ = writeln!(out, "add element {T} nodeport-ips {{ {} }}", node.ip);
    let ipx_map = "ipv4_addr . inet_proto . inet_service : verdict";
    let port_map = "inet_proto . inet_service : verdict";
    for (name, ty, comment) in [
        (
            "no-endpoint-services",
            ipx_map,
            "vmap to drop or reject packets to services with no endpoints",
        ),
        (
            "no-endpoint-nodeports",
            port_map,
            "vmap to drop or reject packets to service nodeports with no endpoints",
        ),
        (
            "firewall-ips",
            ipx_map,
            "destinations that are subject to LoadBalancerSourceRanges",
        ),
        (
            "service-ips",
            ipx_map,
            "ClusterIP, ExternalIP and LoadBalancer IP traffic",
        ),
        ("service-nodeports", port_map, "NodePort traffic"),
    ] {
        let _ = writeln!(
            out,
            "add map {T} {name} {{ type {ty} ; comment \"{comment}\" ; }}"
        );
    }
    let _ = writeln!(
        out,
        "add chain {T} reject-chain {{ comment \"helper for @no-endpoint-services / @no-endpoint-nodeports\" ; }}"
    );
    let _ = writeln!(out, "add rule {T} reject-chain reject");
    let _ = writeln!(
        out,
        "add rule {T} nodeport-endpoints-check ip daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports"
    );
    let _ = writeln!(
        out,
        "add rule {T} service-endpoints-check ip daddr . meta l4proto . th dport vmap @no-endpoint-services"
    );
    let _ = writeln!(
        out,
        "add rule {T} firewall-check ip daddr . meta l4proto . th dport vmap @firewall-ips"
    );
    let _ = writeln!(
        out,
        "add rule {T} services ip daddr . meta l4proto . th dport vmap @service-ips"
    );
    let _ = writeln!(
        out,
        "add rule {T} services ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports"
    );
    let _ = writeln!(
        out,
        "add rule {T} cluster-ips-check ip daddr @cluster-ips reject comment \"Reject traffic to invalid ports of ClusterIPs\""
    );
    let _ = writeln!(
        out,
        "add rule {T} cluster-ips-check ip daddr {{ {} }} drop comment \"Drop traffic to unallocated ClusterIPs\"",
        node.service_cidr
    );
}

/// One service port's part of the transaction, in `syncProxyRules` order.
fn service(out: &mut String, p: &Plan<'_>, cluster: &Cluster, options: &ProxierOptions) {
    let svc = p.svc;
    let node = &cluster.node;
    let (proto, port) = (p.proto, svc.port);
    let _ = writeln!(out, "# {}", p.name);
    for ep in p.route.reachable() {
        let _ = writeln!(
            out,
            "add chain {T} {}",
            p.endpoint_name(NftChainPrefix::Endpoint, ep)
        );
    }
    if p.route.uses_cluster_chain {
        let _ = writeln!(out, "add chain {T} {}", p.service_chain);
    }
    if p.route.uses_local_chain {
        let _ = writeln!(out, "add chain {T} {}", p.local_chain);
    }
    if p.route.uses_external_chain {
        let _ = writeln!(out, "add chain {T} {}", p.external_chain);
    }
    // Verdicts of the no-endpoint maps: reject without endpoints at all, drop when the
    // policy has no local ones.
    let verdict = if p.route.has_endpoints {
        "drop"
    } else {
        "goto reject-chain"
    };
    let no_endpoints = |out: &mut String, ip: std::net::Ipv4Addr| {
        let _ = writeln!(
            out,
            "add element {T} no-endpoint-services {{ {ip} . {proto} . {port} comment \"{}\" : {verdict} }}",
            p.name
        );
    };
    let _ = writeln!(out, "add element {T} cluster-ips {{ {} }}", svc.cluster_ip);
    if p.route.has_internal {
        let _ = writeln!(
            out,
            "add element {T} service-ips {{ {} . {proto} . {port} : goto {} }}",
            svc.cluster_ip,
            p.internal_chain()
        );
    } else {
        no_endpoints(out, svc.cluster_ip);
    }
    for &ip in &svc.external_ips {
        if p.route.has_endpoints {
            let _ = writeln!(
                out,
                "add element {T} service-ips {{ {ip} . {proto} . {port} : goto {} }}",
                p.external_chain
            );
        }
        if !p.route.has_external {
            no_endpoints(out, ip);
        }
    }
    if p.uses_firewall_chain {
        let _ = writeln!(out, "add chain {T} {}", p.firewall_chain);
        let mut sources: Vec<String> = svc
            .load_balancer_source_ranges
            .iter()
            .map(|r| r.to_string())
            .collect();
        if svc
            .load_balancer_source_ranges
            .iter()
            .any(|r| r.contains(node.ip))
        {
            sources.extend(svc.load_balancer_ips.iter().map(|ip| ip.to_string()));
        }
        let _ = writeln!(
            out,
            "add rule {T} {} ip saddr != {{ {} }} drop",
            p.firewall_chain,
            sources.join(", ")
        );
    }
    for &ip in &svc.load_balancer_ips {
        if p.route.has_endpoints {
            let _ = writeln!(
                out,
                "add element {T} service-ips {{ {ip} . {proto} . {port} : goto {} }}",
                p.external_chain
            );
        }
        if p.uses_firewall_chain {
            let _ = writeln!(
                out,
                "add element {T} firewall-ips {{ {ip} . {proto} . {port} comment \"{}\" : goto {} }}",
                p.name, p.firewall_chain
            );
        }
    }
    if !p.route.has_external {
        for &ip in &svc.load_balancer_ips {
            no_endpoints(out, ip);
        }
    }
    if let Some(node_port) = svc.node_port {
        if p.route.has_endpoints {
            let _ = writeln!(
                out,
                "add element {T} service-nodeports {{ {proto} . {node_port} : goto {} }}",
                p.external_chain
            );
        }
        if !p.route.has_external {
            let _ = writeln!(
                out,
                "add element {T} no-endpoint-nodeports {{ {proto} . {node_port} comment \"{}\" : {verdict} }}",
                p.name
            );
        }
    }
    if p.route.has_internal {
        // The ClusterCIDR local-traffic detector: `ip saddr != CIDR` is "not from a pod".
        let detector = if options.masquerade_all {
            String::new()
        } else {
            format!(" ip saddr != {}", node.cluster_cidr)
        };
        let _ = writeln!(
            out,
            "add rule {T} {} ip daddr {} {proto} dport {port}{detector} jump mark-for-masquerade",
            p.internal_chain(),
            svc.cluster_ip
        );
    }
    if p.route.uses_external_chain {
        let ext = &p.external_chain;
        if !svc.external_policy_local() {
            let _ = writeln!(out, "add rule {T} {ext} jump mark-for-masquerade");
        } else {
            let _ = writeln!(
                out,
                "add rule {T} {ext} ip saddr {} goto {} comment \"short-circuit pod traffic\"",
                node.cluster_cidr, p.service_chain
            );
            let _ = writeln!(
                out,
                "add rule {T} {ext} fib saddr type local jump mark-for-masquerade comment \"masquerade local traffic\""
            );
            let _ = writeln!(
                out,
                "add rule {T} {ext} fib saddr type local goto {} comment \"short-circuit local traffic\"",
                p.service_chain
            );
        }
        if p.route.has_external {
            let _ = writeln!(out, "add rule {T} {ext} goto {}", p.external_policy_chain());
        }
    }
    if let Some(affinity) = svc.session_affinity {
        for ep in p.route.reachable() {
            let _ = writeln!(
                out,
                "add set {T} {} {{ type ipv4_addr ; flags dynamic,timeout ; timeout {}s ; }}",
                p.endpoint_name(NftChainPrefix::Affinity, ep),
                affinity.timeout_seconds
            );
        }
    }
    if p.route.uses_cluster_chain {
        endpoint_dispatch(out, p, &p.service_chain, &p.route.cluster_eps);
    }
    if p.route.uses_local_chain {
        endpoint_dispatch(out, p, &p.local_chain, &p.route.local_eps);
    }
    for ep in p.route.reachable() {
        let chain = p.endpoint_name(NftChainPrefix::Endpoint, ep);
        let _ = writeln!(
            out,
            "add rule {T} {chain} ip saddr {} jump mark-for-masquerade",
            ep.addr.ip()
        );
        if svc.session_affinity.is_some() {
            let _ = writeln!(
                out,
                "add rule {T} {chain} update @{} {{ ip saddr }}",
                p.endpoint_name(NftChainPrefix::Affinity, ep)
            );
        }
        let _ = writeln!(
            out,
            "add rule {T} {chain} meta l4proto {proto} dnat to {}",
            ep.addr
        );
    }
}

/// `writeServiceToEndpointRules`: affinity rules, then the numgen vmap.
fn endpoint_dispatch(out: &mut String, p: &Plan<'_>, chain: &str, endpoints: &[&Endpoint]) {
    if p.svc.session_affinity.is_some() {
        for ep in endpoints {
            let _ = writeln!(
                out,
                "add rule {T} {chain} ip saddr @{} goto {}",
                p.endpoint_name(NftChainPrefix::Affinity, ep),
                p.endpoint_name(NftChainPrefix::Endpoint, ep)
            );
        }
    }
    let _ = write!(
        out,
        "add rule {T} {chain} numgen random mod {} vmap {{ ",
        endpoints.len()
    );
    for (i, ep) in endpoints.iter().enumerate() {
        if i > 0 {
            out.push_str(" , ");
        }
        let _ = write!(
            out,
            "{i} : goto {}",
            p.endpoint_name(NftChainPrefix::Endpoint, ep)
        );
    }
    out.push_str(" }\n");
}

/// The `nft -f` transaction kube-proxy's nftables mode writes for `cluster` into an empty
/// `table ip kube-proxy` (see the module documentation for what is and is not in it).
///
/// ```
/// use plumb_kubeproxy::{generate, nft_transaction, GeneratorConfig, ProxierOptions};
///
/// let cluster = generate(&GeneratorConfig { services: 5, ..GeneratorConfig::default() }).unwrap();
/// let text = nft_transaction(&cluster, &ProxierOptions::default());
/// assert!(text.starts_with("add table ip kube-proxy { comment \"rules for kube-proxy\" ; }\n"));
/// assert!(text.contains("add element ip kube-proxy service-ips { 10.43.0.1 . tcp . 443 : goto service-2QRHZV4L-default/kubernetes/tcp/https }\n"));
/// ```
pub fn nft_transaction(cluster: &Cluster, options: &ProxierOptions) -> String {
    // About 1.2 KB per service port with 5 endpoints: reserve to avoid regrowing 60 MB.
    let per_service = 300 + 230 * cluster.total_endpoints() / cluster.services.len().max(1);
    let mut out = String::with_capacity(4096 + per_service * cluster.services.len());
    // Go's `fmt.Sprintf("%#08x", 1<<bit)`.
    let mark = format!("{:#08x}", 1u32 << options.masquerade_bit);
    setup(&mut out, cluster, &mark);
    for svc in &cluster.services {
        service(&mut out, &Plan::new(svc), cluster, options);
    }
    out
}
