//! Kubernetes names for addresses, from kube-proxy's rules (`plumb_kubeproxy`'s
//! recovered service map): a ClusterIP, external or load-balancer IP and port names
//! its Service; an endpoint's `ip:port` names the Service it serves (the destination
//! of a connection after DNAT).
//!
//! On a kube-proxy-free node the Services are in Cilium's load-balancer maps instead
//! ([`ServiceNames::add_cilium`]). Those maps hold addresses, not names: a Service is
//! known there by its frontend (`10.43.0.1:443/TCP`, a ClusterIP). Cilium's socket load
//! balancer rewrites the destination at connect time, so conntrack sees the backend's
//! address: a backend `ip:port` leads back to the frontend that chose it
//! ([`ServiceNames::lb_destination`]). Pure: a ruleset and frontends in, lookups out.

use plumb_cilium::{Frontend, FrontendKind};
use plumb_kubeproxy::recover::recover;
use plumb_ruleset::Ruleset;
use serde::Serialize;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

/// A Service, as Hubble names one (`destination_service`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct ServiceName {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl std::fmt::Display for ServiceName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl ServiceName {
    /// `namespace/name` (a `:port` suffix is ignored); None without a `/`.
    pub fn parse(s: &str) -> Option<ServiceName> {
        let (ns, rest) = s.split_once('/')?;
        let name = rest.split_once(':').map_or(rest, |(n, _)| n);
        (!ns.is_empty() && !name.is_empty()).then(|| ServiceName {
            namespace: ns.to_string(),
            name: name.to_string(),
        })
    }
}

/// What kube-proxy's rules say about addresses.
#[derive(Clone, Debug, Default)]
pub struct ServiceNames {
    /// (frontend ip, port, protocol number) -> Service.
    frontends: HashMap<(IpAddr, u16, u8), ServiceName>,
    /// endpoint ip:port -> Services it serves.
    endpoints: HashMap<SocketAddr, Vec<ServiceName>>,
    /// endpoint ip -> the namespace of the Services it serves, None when they differ.
    namespaces: HashMap<IpAddr, Option<String>>,
    /// Cilium's frontends: (ip, port, protocol number; 0 = any) -> the frontend.
    lb_frontends: HashMap<(IpAddr, u16, u8), LbFrontend>,
    /// Cilium's backends: (ip, port, protocol number; 0 = any) -> the frontends that
    /// send connections there.
    lb_backends: HashMap<(IpAddr, u16, u8), Vec<LbFrontend>>,
}

/// A Service as Cilium's load-balancer maps know it: by its frontend.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LbFrontend {
    /// The frontend as `cilium-dbg` prints it: `10.43.0.1:443/TCP`.
    pub address: String,
    /// `ClusterIP`, `NodePort`, ... (None: the maps do not say).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    /// The Kubernetes Service, when the agent named it (the maps do not); printed as
    /// `destination_service`, not in this object.
    #[serde(skip)]
    pub service: Option<ServiceName>,
}

impl std::fmt::Display for LbFrontend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            Some(k) => write!(f, "{} ({k})", self.address),
            None => f.write_str(&self.address),
        }
    }
}

fn protocol_number(p: Option<&str>) -> u8 {
    match p.map(str::to_ascii_lowercase).as_deref() {
        Some("udp") => 17,
        Some("sctp") => 132,
        _ => 6,
    }
}

impl ServiceNames {
    /// The names in `rs` (empty when it holds no kube-proxy rules).
    pub fn from_ruleset(rs: &Ruleset) -> ServiceNames {
        let mut n = ServiceNames::default();
        for map in recover(rs) {
            for s in &map.services {
                let Some(name) = s.name.as_deref().and_then(ServiceName::parse) else {
                    continue;
                };
                let proto = protocol_number(s.protocol.as_deref());
                if let Some(port) = s.port {
                    for ip in s
                        .cluster_ip
                        .iter()
                        .chain(&s.external_ips)
                        .chain(&s.load_balancer_ips)
                    {
                        n.frontends.insert((*ip, port, proto), name.clone());
                    }
                }
                for e in &s.endpoints {
                    if let Some(a) = e.address().and_then(|a| a.parse::<SocketAddr>().ok()) {
                        n.namespaces
                            .entry(a.ip())
                            .and_modify(|ns| {
                                if ns.as_deref() != Some(name.namespace.as_str()) {
                                    *ns = None;
                                }
                            })
                            .or_insert_with(|| Some(name.namespace.clone()));
                        let v = n.endpoints.entry(a).or_default();
                        if !v.contains(&name) {
                            v.push(name.clone());
                        }
                    }
                }
            }
        }
        n
    }

    /// The Service whose frontend (ClusterIP, external or load-balancer IP) is
    /// `ip:port` over `protocol`.
    pub fn frontend(&self, ip: IpAddr, port: u16, protocol: u8) -> Option<&ServiceName> {
        self.frontends.get(&(ip, port, protocol))
    }

    /// The Service an endpoint `ip:port` serves, when exactly one Service lists it.
    pub fn endpoint(&self, ip: IpAddr, port: u16) -> Option<&ServiceName> {
        match self.endpoints.get(&SocketAddr::new(ip, port))?.as_slice() {
            [one] => Some(one),
            _ => None,
        }
    }

    /// The Service a packet to `ip:port` goes to: a frontend, or an endpoint (after DNAT).
    pub fn destination(&self, ip: IpAddr, port: u16, protocol: u8) -> Option<&ServiceName> {
        self.frontend(ip, port, protocol)
            .or_else(|| self.endpoint(ip, port))
    }

    /// The namespace of the pod at `ip`: the namespace of the Services whose endpoint it
    /// is, when they agree (a pod lives in its Services' namespace).
    pub fn pod_namespace(&self, ip: IpAddr) -> Option<&str> {
        self.namespaces.get(&ip)?.as_deref()
    }

    /// Adds the frontends of Cilium's load balancer (its maps, or the agent's list).
    pub fn add_cilium(&mut self, frontends: &[Frontend]) {
        for f in frontends {
            // Both scopes' copies of a frontend are one Service: the name leaves the
            // scope (`/i`) out.
            let address = f.display_address();
            let address = address.strip_suffix("/i").unwrap_or(&address).to_string();
            let lb = LbFrontend {
                address,
                kind: f.kind.map(FrontendKind::name),
                service: f.service.as_ref().map(|s| ServiceName {
                    namespace: s.namespace.clone(),
                    name: s.name.clone(),
                }),
            };
            self.lb_frontends
                .insert((f.address, f.port, f.proto.0), lb.clone());
            for b in &f.backends {
                let v = self
                    .lb_backends
                    .entry((b.address, b.port, b.proto.0))
                    .or_default();
                if !v.contains(&lb) {
                    v.push(lb.clone());
                }
            }
        }
    }

    /// Names the Cilium frontends already added (from the maps, which hold no names)
    /// with the Kubernetes Services of the agent's list `named` (`cilium-dbg service
    /// list -o json`), matched by frontend address, port and protocol.
    pub fn name_cilium(&mut self, named: &[Frontend]) {
        let by_address: HashMap<String, ServiceName> = named
            .iter()
            .filter_map(|f| {
                let s = f.service.as_ref()?;
                let address = f.display_address();
                let address = address.strip_suffix("/i").unwrap_or(&address).to_string();
                Some((
                    address,
                    ServiceName {
                        namespace: s.namespace.clone(),
                        name: s.name.clone(),
                    },
                ))
            })
            .collect();
        if by_address.is_empty() {
            return;
        }
        let all = self
            .lb_frontends
            .values_mut()
            .chain(self.lb_backends.values_mut().flatten());
        for lb in all {
            if let Some(s) = by_address.get(&lb.address) {
                lb.service = Some(s.clone());
            }
        }
    }

    /// The Service a packet to `ip:port` over `protocol` goes to: kube-proxy's name,
    /// else the Kubernetes name of the Cilium frontend it goes to (when known).
    pub fn service_of(&self, ip: IpAddr, port: u16, protocol: u8) -> Option<&ServiceName> {
        self.destination(ip, port, protocol).or_else(|| {
            self.lb_destination(ip, port, protocol)
                .and_then(|f| f.service.as_ref())
        })
    }

    /// The Cilium frontend a packet to `ip:port` over `protocol` goes to: the frontend
    /// itself, or — for a backend's address, as conntrack shows a connection the socket
    /// load balancer translated — the frontend that sends there. A backend of several
    /// frontends names its one ClusterIP (a Service's NodePort and LoadBalancer
    /// frontends share its backends); with several ClusterIPs, none is named.
    pub fn lb_destination(&self, ip: IpAddr, port: u16, protocol: u8) -> Option<&LbFrontend> {
        // Frontends and backends before Cilium 1.17 carry no protocol (ANY, 0).
        let keys = [(ip, port, protocol), (ip, port, 0)];
        if let Some(f) = keys.iter().find_map(|k| self.lb_frontends.get(k)) {
            return Some(f);
        }
        let all = keys.iter().find_map(|k| self.lb_backends.get(k))?;
        match all.as_slice() {
            [one] => Some(one),
            many => {
                let mut cluster = many.iter().filter(|f| f.kind == Some("ClusterIP"));
                match (cluster.next(), cluster.next()) {
                    (Some(one), None) => Some(one),
                    _ => None,
                }
            }
        }
    }

    /// Frontends known (kube-proxy's and Cilium's).
    pub fn len(&self) -> usize {
        self.frontends.len() + self.lb_frontends.len()
    }

    /// Cilium's load balancer serves Services here (its frontends were added).
    pub fn has_cilium(&self) -> bool {
        !self.lb_frontends.is_empty()
    }

    /// No Service is known.
    pub fn is_empty(&self) -> bool {
        self.frontends.is_empty() && self.endpoints.is_empty() && self.lb_frontends.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBE: &str = "*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]\n:KUBE-SEP-XN2HDGFZPFJ4BYAP - [0:0]\n:KUBE-MARK-MASQ - [0:0]\n-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n-A KUBE-SERVICES -d 10.43.0.1/32 -p tcp -m comment --comment \"default/kubernetes:https cluster IP\" -m tcp --dport 443 -j KUBE-SVC-NPX46M4PTMTKRN6Y\n-A KUBE-SVC-NPX46M4PTMTKRN6Y -m comment --comment \"default/kubernetes:https -> 192.168.1.10:6443\" -j KUBE-SEP-XN2HDGFZPFJ4BYAP\n-A KUBE-SEP-XN2HDGFZPFJ4BYAP -s 192.168.1.10/32 -m comment --comment \"default/kubernetes:https\" -j KUBE-MARK-MASQ\n-A KUBE-SEP-XN2HDGFZPFJ4BYAP -p tcp -m comment --comment \"default/kubernetes:https\" -m tcp -j DNAT --to-destination 192.168.1.10:6443\nCOMMIT\n";

    #[test]
    fn a_cluster_ip_and_its_endpoint_name_the_kubernetes_service() {
        let rs = plumb_ruleset::iptables::save::parse(
            KUBE,
            &plumb_ruleset::iptables::save::IptablesInput::default(),
        );
        let n = ServiceNames::from_ruleset(&rs);
        let want = ServiceName {
            namespace: "default".into(),
            name: "kubernetes".into(),
        };
        assert_eq!(
            n.frontend("10.43.0.1".parse().unwrap(), 443, 6),
            Some(&want)
        );
        assert_eq!(n.frontend("10.43.0.1".parse().unwrap(), 443, 17), None);
        assert_eq!(
            n.destination("192.168.1.10".parse().unwrap(), 6443, 6),
            Some(&want)
        );
        assert_eq!(
            n.destination("192.168.1.11".parse().unwrap(), 6443, 6),
            None
        );
    }

    fn frontend(addr: &str, port: u16, kind: FrontendKind, backends: &[(&str, u16)]) -> Frontend {
        use plumb_cilium::layout::{BackendState, L4Proto, Scope};
        Frontend {
            address: addr.parse().unwrap(),
            port,
            proto: L4Proto::TCP,
            scope: Scope::External,
            kind: Some(kind),
            options: Vec::new(),
            rev_nat: Some(1),
            backends: backends
                .iter()
                .enumerate()
                .map(|(i, (a, p))| plumb_cilium::lbmap::BackendRef {
                    slot: i as u16 + 1,
                    id: Some(i as u32 + 1),
                    address: a.parse().unwrap(),
                    port: *p,
                    proto: L4Proto::TCP,
                    state: BackendState::Active,
                })
                .collect(),
            problems: Vec::new(),
            service: None,
        }
    }

    /// The socket load balancer translates at connect time: conntrack shows the
    /// backend, which leads back to the ClusterIP even when a NodePort shares it.
    #[test]
    fn a_cilium_backend_names_its_cluster_ip_frontend() {
        let api = [("192.168.100.11", 6443)];
        let mut n = ServiceNames::default();
        n.add_cilium(&[
            frontend("10.43.0.1", 443, FrontendKind::ClusterIP, &api),
            frontend("0.0.0.0", 30443, FrontendKind::NodePort, &api),
        ]);
        let want = "10.43.0.1:443/TCP (ClusterIP)";
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            n.lb_destination(ip("192.168.100.11"), 6443, 6)
                .map(|f| f.to_string()),
            Some(want.to_string())
        );
        assert_eq!(
            n.lb_destination(ip("10.43.0.1"), 443, 6)
                .map(|f| f.to_string()),
            Some(want.to_string())
        );
        assert_eq!(n.lb_destination(ip("192.168.100.11"), 6443, 17), None);
        assert_eq!(n.lb_destination(ip("192.168.100.12"), 6443, 6), None);
        assert!(n.has_cilium());
        // Two ClusterIPs sharing a backend: no guess.
        n.add_cilium(&[frontend("10.43.0.2", 443, FrontendKind::ClusterIP, &api)]);
        assert_eq!(n.lb_destination(ip("192.168.100.11"), 6443, 6), None);
    }

    /// The maps hold no names; the agent's service list does: its names reach the
    /// frontends read from the maps (and the backends' way back to them), so a
    /// connection to a Cilium frontend or its backend is named as the Service.
    #[test]
    fn the_agents_names_reach_the_frontends_of_the_maps() {
        let api = [("192.168.100.11", 6443)];
        let mut n = ServiceNames::default();
        n.add_cilium(&[frontend("10.43.0.1", 443, FrontendKind::ClusterIP, &api)]);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(n.service_of(ip("10.43.0.1"), 443, 6), None);
        let mut listed = frontend("10.43.0.1", 443, FrontendKind::ClusterIP, &api);
        listed.service = Some(plumb_cilium::lbmap::ServiceRef {
            namespace: "default".into(),
            name: "kubernetes".into(),
        });
        let other = frontend("10.43.0.9", 53, FrontendKind::ClusterIP, &[]);
        n.name_cilium(&[listed.clone(), other]);
        let want = ServiceName::parse("default/kubernetes");
        assert_eq!(n.service_of(ip("10.43.0.1"), 443, 6).cloned(), want);
        assert_eq!(n.service_of(ip("192.168.100.11"), 6443, 6).cloned(), want);
        assert_eq!(n.service_of(ip("10.43.0.9"), 53, 6), None);
        // The agent's list alone (maps unreadable) names its frontends too.
        let mut alone = ServiceNames::default();
        alone.add_cilium(&[listed]);
        assert_eq!(alone.service_of(ip("10.43.0.1"), 443, 6).cloned(), want);
    }

    #[test]
    fn service_names_parse_with_or_without_a_port() {
        assert_eq!(
            ServiceName::parse("kube-system/kube-dns:dns").map(|s| s.to_string()),
            Some("kube-system/kube-dns".into())
        );
        assert_eq!(ServiceName::parse("nope"), None);
        assert_eq!(ServiceName::parse("/x"), None);
    }
}
