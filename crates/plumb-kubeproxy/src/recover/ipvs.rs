//! kube-proxy's IPVS mode: the service map is the kernel's IPVS table (`ipvsadm -ln`),
//! one virtual service per ClusterIP, NodePort address, external and load-balancer IP,
//! each with the service's endpoints as real servers. The iptables side only matches
//! ipsets (`KUBE-CLUSTER-IP`, `KUBE-NODE-PORT-TCP`, ...) and masquerades.
//!
//! IPVS keeps no service names, so every service is unnamed. Which virtual services are
//! ClusterIPs is known only from the `KUBE-CLUSTER-IP` ipset (`ipset list` in the same
//! input): without it every virtual service is shown at its address with a note. A
//! virtual service outside `KUBE-CLUSTER-IP` (a NodePort on each node address, an
//! external or load-balancer IP) joins the ClusterIP service with the same protocol and
//! real servers when exactly one has them; otherwise it is its own row, said so.
//!
//! Endpoint probabilities follow the scheduler: `rr` picks each real server of weight
//! above 0 equally, `wrr` by weight; other schedulers (least connections, hashing) have
//! no fixed probability. Weight 0 is kube-proxy's graceful termination: no new
//! connections.

use super::{Evidence, ProxyMode, Quotes, RecoveredEndpoint, RecoveredService, ServiceMap};
use plumb_ruleset::model::ipvs::{IpSetListing, RealServer, VirtualAddress, VirtualService};
use plumb_ruleset::{Backend, Family, Ruleset};
use std::borrow::Cow;
use std::net::IpAddr;

/// The IPVS service maps of `ruleset` (one per family with virtual services).
pub fn recover(ruleset: &Ruleset) -> Vec<ServiceMap<'_>> {
    let set = |name: &str| ruleset.ipsets.iter().find(|s| s.name == name);
    let cluster_ips = set("KUBE-CLUSTER-IP");
    let backend = ruleset
        .tables
        .iter()
        .map(|t| t.backend)
        .find(|b| *b != Backend::Nftables)
        .unwrap_or(Backend::IptablesUnknown);
    let mut maps = Vec::new();
    for family in [Family::Ip, Family::Ip6] {
        let of_family: Vec<(&VirtualService, &str, IpAddr, u16)> = ruleset
            .ipvs
            .iter()
            .filter_map(|vs| match &vs.address {
                VirtualAddress::Service {
                    protocol,
                    address,
                    port,
                } if address.is_ipv6() == (family == Family::Ip6) => {
                    Some((vs, protocol.as_str(), *address, *port))
                }
                _ => None,
            })
            .collect();
        if of_family.is_empty() {
            continue;
        }
        maps.push(ServiceMap {
            mode: ProxyMode::Ipvs,
            family,
            backend,
            services: services(&of_family, cluster_ips),
            name_mismatches: Vec::new(),
        });
    }
    maps
}

fn evidence(vs: &VirtualService) -> Evidence<'_> {
    Evidence::ipvs(vs.location, &vs.text)
}

/// Real servers as (address, port), sorted: two virtual services with equal keys send
/// to the same endpoints.
type Backends = Vec<(IpAddr, u16)>;

/// Virtual services outside KUBE-CLUSTER-IP with one (protocol, port, real servers).
struct Group<'a> {
    protocol: String,
    port: u16,
    backends: Backends,
    services: Vec<&'a VirtualService>,
}

/// The real servers of a virtual service as a comparable key.
fn backends(vs: &VirtualService) -> Backends {
    let mut b: Vec<(IpAddr, u16)> = vs
        .real_servers
        .iter()
        .map(|r| (r.address, r.port))
        .collect();
    b.sort_unstable();
    b
}

fn endpoints(vs: &VirtualService) -> (Vec<RecoveredEndpoint<'_>>, Vec<Cow<'static, str>>) {
    let mut notes = Vec::new();
    let weights_known = vs.real_servers.iter().all(|r| r.weight.is_some());
    let weight = |r: &RealServer| r.weight.unwrap_or(0);
    let live: u64 = vs.real_servers.iter().filter(|r| weight(r) > 0).count() as u64;
    let total_weight: u64 = vs.real_servers.iter().map(|r| u64::from(weight(r))).sum();
    let probability = |r: &RealServer| -> Option<f64> {
        let w = r.weight?;
        match vs.scheduler.as_deref().unwrap_or("") {
            _ if !weights_known => None,
            _ if w == 0 => Some(0.0),
            "rr" if live > 0 => Some(1.0 / live as f64),
            "wrr" if total_weight > 0 => Some(f64::from(w) / total_weight as f64),
            _ => None,
        }
    };
    match vs.scheduler.as_deref() {
        Some("rr" | "wrr") => {}
        Some(other) => notes.push(
            format!(
                "scheduler {other}: which endpoint a connection gets depends on load or hashing, not a fixed share"
            )
            .into(),
        ),
        None => notes.push("the input does not show the scheduler: endpoint shares are unknown".into()),
    }
    let eps = vs
        .real_servers
        .iter()
        .map(|r| {
            if r.weight == Some(0) {
                notes.push(
                    format!(
                        "endpoint {} has weight 0: it takes no new connections (terminating)",
                        socket(r.address, r.port)
                    )
                    .into(),
                );
            }
            RecoveredEndpoint::new(
                Some(socket(r.address, r.port).into()),
                probability(r),
                None,
                None,
                Quotes::one(Evidence::ipvs(r.location, &r.text)),
            )
        })
        .collect();
    (eps, notes)
}

fn socket(address: IpAddr, port: u16) -> String {
    match address {
        IpAddr::V6(a) => format!("[{a}]:{port}"),
        IpAddr::V4(a) => format!("{a}:{port}"),
    }
}

fn service<'a>(vs: &'a VirtualService, protocol: &str) -> RecoveredService<'a> {
    let (endpoints, mut notes) = endpoints(vs);
    if vs.real_servers.is_empty() {
        notes.push("no real servers: IPVS has no endpoint to send connections to".into());
    }
    RecoveredService {
        protocol: Some(protocol.to_string()),
        session_affinity_seconds: vs.persistent_seconds,
        endpoints: endpoints.into(),
        evidence: vec![evidence(vs)].into(),
        notes: notes.into(),
        ..RecoveredService::empty()
    }
}

fn services<'a>(
    all: &[(&'a VirtualService, &str, IpAddr, u16)],
    cluster_ips: Option<&IpSetListing>,
) -> Vec<RecoveredService<'a>> {
    let Some(set) = cluster_ips else {
        // No KUBE-CLUSTER-IP listing: each virtual service at its address, unconfirmed.
        return all
            .iter()
            .map(|&(vs, protocol, address, port)| {
                let mut s = service(vs, protocol);
                s.cluster_ip = Some(address);
                s.port = Some(port);
                s.notes.push(
                    "IPVS virtual service; not confirmed as a ClusterIP (the input has no KUBE-CLUSTER-IP ipset listing): it may be a NodePort, external or load-balancer address".into(),
                );
                s
            })
            .collect();
    };
    let mut out: Vec<RecoveredService<'a>> = Vec::new();
    let mut keys: Vec<(String, Backends)> = Vec::new();
    let mut others = Vec::new();
    for &(vs, protocol, address, port) in all {
        if set.has_ip_port(address, protocol, port) {
            let mut s = service(vs, protocol);
            s.cluster_ip = Some(address);
            s.port = Some(port);
            out.push(s);
            keys.push((protocol.to_string(), backends(vs)));
        } else {
            others.push((vs, protocol, address, port));
        }
    }
    // Other virtual services (NodePorts on every node address, external and
    // load-balancer IPs): one row per (protocol, port, real servers).
    let mut extra: Vec<Group<'a>> = Vec::new();
    for (vs, protocol, _, port) in others {
        let key = backends(vs);
        match extra
            .iter_mut()
            .find(|g| g.protocol == protocol && g.port == port && g.backends == key)
        {
            Some(g) => g.services.push(vs),
            None => extra.push(Group {
                protocol: protocol.to_string(),
                port,
                backends: key,
                services: vec![vs],
            }),
        }
    }
    for Group {
        protocol,
        port,
        backends: key,
        services: vss,
    } in extra
    {
        let addresses: Vec<String> = vss
            .iter()
            .filter_map(|vs| match &vs.address {
                VirtualAddress::Service { address, .. } => Some(address.to_string()),
                VirtualAddress::FirewallMark { .. } => None,
            })
            .collect();
        let owners: Vec<usize> = keys
            .iter()
            .enumerate()
            .filter(|(_, (p, b))| *p == protocol && *b == key && !key.is_empty())
            .map(|(i, _)| i)
            .collect();
        let what = format!(
            "port {port} on {} (not in KUBE-CLUSTER-IP: a NodePort, external or load-balancer address)",
            addresses.join(", ")
        );
        if let [i] = owners[..] {
            let s = &mut out[i];
            if !s.node_ports.contains(&port) {
                s.node_ports.push(port);
            }
            s.notes.push(
                format!(
                    "IPVS also serves {what}; joined to this service: the only ClusterIP with the same endpoints"
                )
                .into(),
            );
            s.evidence.extend(vss.iter().map(|vs| evidence(vs)));
            continue;
        }
        let mut s = service(vss[0], &protocol);
        s.node_ports.push(port);
        s.evidence.extend(vss[1..].iter().map(|vs| evidence(vs)));
        s.notes.push(
            if owners.is_empty() {
                format!("IPVS serves {what}; no ClusterIP has the same endpoints")
            } else {
                format!(
                    "IPVS serves {what}; {} ClusterIPs have the same endpoints, so which service it belongs to is not known",
                    owners.len()
                )
            }
            .into(),
        );
        out.push(s);
    }
    out
}
