//! A deterministic generator of kube-proxy service models.
//!
//! [`GeneratorConfig`] describes a cluster by counts and fractions; [`generate`] turns it into
//! a [`Cluster`] (same config, same cluster, byte for byte). Defaults follow RKE2: pods
//! `10.42.0.0/16` (this node `10.42.0.0/24`), services `10.43.0.0/16`, and
//! `default/kubernetes:https` at `10.43.0.1:443 -> <node IP>:6443` always first.

use std::net::{Ipv4Addr, SocketAddrV4};

use crate::model::{
    ClientIpAffinity, Cluster, Endpoint, Ipv4Cidr, LocalNode, Protocol, ServicePort,
    ServicePortName,
};

/// What to generate. Fractions are probabilities applied per generated service port, drawn
/// from a seeded PRNG, so counts are approximate but fully reproducible.
#[derive(Debug, Clone, PartialEq)]
pub struct GeneratorConfig {
    /// PRNG seed.
    pub seed: u64,
    /// Number of service ports in total, `default/kubernetes:https` (and kube-dns) included.
    pub services: usize,
    /// Endpoints per generated service port (kube-dns gets `min(2, n)`).
    pub endpoints_per_service: usize,
    /// Node name.
    pub node_name: String,
    /// Node IP; also the API server endpoint (`:6443`).
    pub node_ip: Ipv4Addr,
    /// Cluster pod CIDR.
    pub cluster_cidr: Ipv4Cidr,
    /// This node's pod CIDR, a `/24` inside `cluster_cidr`; other nodes use the following `/24`s.
    pub node_pod_cidr: Ipv4Cidr,
    /// Service CIDR.
    pub service_cidr: Ipv4Cidr,
    /// Add `kube-system/kube-dns` (`dns` udp/53, `dns-tcp` tcp/53, `metrics` tcp/9153) at
    /// the 10th address of the service CIDR, as RKE2 does (`cluster-dns 10.43.0.10`).
    pub with_kube_dns: bool,
    /// Fraction of generated services of type NodePort.
    pub nodeport_fraction: f64,
    /// Fraction of generated services of type LoadBalancer (they also get a NodePort).
    pub load_balancer_fraction: f64,
    /// Fraction of LoadBalancer services with `loadBalancerSourceRanges` (KUBE-FW chains).
    pub source_ranges_fraction: f64,
    /// Fraction of generated services with one external IP.
    pub external_ip_fraction: f64,
    /// Fraction of generated services with `ClientIP` session affinity.
    pub session_affinity_fraction: f64,
    /// Fraction of externally accessible services with `externalTrafficPolicy: Local`.
    pub local_policy_fraction: f64,
    /// Fraction of generated services with `internalTrafficPolicy: Local`.
    pub internal_local_fraction: f64,
    /// Fraction of generated services with no endpoints at all.
    pub no_endpoints_fraction: f64,
    /// Fraction of endpoints that run on this node.
    pub local_endpoint_fraction: f64,
    /// Fraction of generated services using UDP.
    pub udp_fraction: f64,
}

impl Default for GeneratorConfig {
    fn default() -> Self {
        Self {
            seed: 1,
            services: 100,
            endpoints_per_service: 3,
            node_name: "node-0".into(),
            node_ip: Ipv4Addr::new(192, 168, 122, 10),
            cluster_cidr: Ipv4Cidr::new(Ipv4Addr::new(10, 42, 0, 0), 16),
            node_pod_cidr: Ipv4Cidr::new(Ipv4Addr::new(10, 42, 0, 0), 24),
            service_cidr: Ipv4Cidr::new(Ipv4Addr::new(10, 43, 0, 0), 16),
            with_kube_dns: true,
            nodeport_fraction: 0.1,
            load_balancer_fraction: 0.02,
            source_ranges_fraction: 0.5,
            external_ip_fraction: 0.01,
            session_affinity_fraction: 0.05,
            local_policy_fraction: 0.2,
            internal_local_fraction: 0.0,
            no_endpoints_fraction: 0.05,
            local_endpoint_fraction: 0.1,
            udp_fraction: 0.05,
        }
    }
}

impl GeneratorConfig {
    /// A small cluster that exercises every feature (used by the kernel round-trip test).
    pub fn all_features(services: usize, endpoints_per_service: usize) -> Self {
        Self {
            services,
            endpoints_per_service,
            nodeport_fraction: 0.3,
            load_balancer_fraction: 0.2,
            source_ranges_fraction: 0.5,
            external_ip_fraction: 0.15,
            session_affinity_fraction: 0.25,
            local_policy_fraction: 0.5,
            internal_local_fraction: 0.1,
            no_endpoints_fraction: 0.15,
            local_endpoint_fraction: 0.3,
            udp_fraction: 0.2,
            ..Self::default()
        }
    }
}

/// Why a configuration cannot be generated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GenerateError {
    /// The service CIDR has no room for that many ClusterIPs.
    #[error(
        "service CIDR {cidr} cannot hold {wanted} ClusterIPs; use a larger service_cidr or fewer services"
    )]
    ServiceCidrExhausted {
        /// The configured service CIDR.
        cidr: Ipv4Cidr,
        /// Service ports asked for.
        wanted: usize,
    },
    /// The NodePort range 30000-32767 is exhausted.
    #[error(
        "the NodePort range 30000-32767 is exhausted after {allocated} ports; lower nodeport/load-balancer fractions"
    )]
    NodePortsExhausted {
        /// Ports allocated before running out.
        allocated: usize,
    },
    /// More endpoints per service than distinct pod addresses available.
    #[error(
        "{wanted} endpoints per service exceed the 250 pod addresses per node used by the generator"
    )]
    TooManyEndpoints {
        /// Endpoints per service asked for.
        wanted: usize,
    },
}

/// splitmix64: tiny, fast and good enough to pick features.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn chance(&mut self, fraction: f64) -> bool {
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < fraction
    }
}

const NODE_PORT_MIN: u16 = 30000;
const NODE_PORT_MAX: u16 = 32767;
const PODS_PER_NODE: u32 = 250;
const DEFAULT_AFFINITY: ClientIpAffinity = ClientIpAffinity {
    timeout_seconds: 10800,
};

struct PodAllocator {
    cluster: Ipv4Cidr,
    node: Ipv4Cidr,
    local_next: u32,
    remote_next: u32,
}

impl PodAllocator {
    fn local(&mut self) -> Ipv4Addr {
        let host = 2 + self.local_next % PODS_PER_NODE;
        self.local_next += 1;
        Ipv4Addr::from_bits(self.node.addr.to_bits() + host)
    }

    /// A pod on another node: the /24s after this node's, wrapping inside the cluster CIDR.
    fn remote(&mut self) -> Ipv4Addr {
        let subnets = (self.cluster.size() / 256).max(2) as u32;
        let own = (self.node.addr.to_bits() - self.cluster.addr.to_bits()) / 256;
        let n = self.remote_next;
        self.remote_next += 1;
        let subnet = (own + 1 + (n / PODS_PER_NODE) % (subnets - 1)) % subnets;
        let host = 2 + n % PODS_PER_NODE;
        Ipv4Addr::from_bits(self.cluster.addr.to_bits() + subnet * 256 + host)
    }
}

/// The address of the `i`th generated service in a documentation /24 (`net`), or past its
/// 254 hosts in `198.<second>.0.0/16` (RFC 2544's benchmarking 198.18.0.0/15): two
/// services never share an external or load-balancer IP, as two services cannot own the
/// same IP and port (nftables mode keys its maps on them and refuses duplicates).
fn unique_test_ip(net: Ipv4Addr, second: u8, i: u64) -> Ipv4Addr {
    if i < 254 {
        Ipv4Addr::from_bits(net.to_bits() + 1 + i as u32)
    } else {
        Ipv4Addr::from_bits(Ipv4Addr::new(198, second, 0, 0).to_bits() + (i as u32 & 0xffff))
    }
}

fn sort_endpoints(endpoints: &mut [Endpoint]) {
    // kubernetes pkg/proxy/endpointslicecache.go sorts by Endpoint.String() ("ip:port").
    endpoints.sort_by_cached_key(Endpoint::endpoint_string);
}

/// Generates the cluster described by `config`.
pub fn generate(config: &GeneratorConfig) -> Result<Cluster, GenerateError> {
    if config.endpoints_per_service > PODS_PER_NODE as usize {
        return Err(GenerateError::TooManyEndpoints {
            wanted: config.endpoints_per_service,
        });
    }
    let first_generated_ip: u64 = 100;
    if (config.service_cidr.size()).saturating_sub(first_generated_ip + 1) < config.services as u64
    {
        return Err(GenerateError::ServiceCidrExhausted {
            cidr: config.service_cidr,
            wanted: config.services,
        });
    }
    let node = LocalNode {
        name: config.node_name.clone(),
        ip: config.node_ip,
        cluster_cidr: config.cluster_cidr,
        pod_cidr: config.node_pod_cidr,
        service_cidr: config.service_cidr,
    };
    let mut rng = Rng(config.seed);
    let mut pods = PodAllocator {
        cluster: config.cluster_cidr,
        node: config.node_pod_cidr,
        local_next: 0,
        remote_next: 0,
    };
    let mut next_node_port = NODE_PORT_MIN;
    let mut allocated_node_ports = 0usize;
    let mut alloc_node_port = || -> Result<u16, GenerateError> {
        if next_node_port > NODE_PORT_MAX {
            return Err(GenerateError::NodePortsExhausted {
                allocated: allocated_node_ports,
            });
        }
        let port = next_node_port;
        next_node_port += 1;
        allocated_node_ports += 1;
        Ok(port)
    };

    let mut services = Vec::with_capacity(config.services);
    let base = |name: ServicePortName, protocol, cluster_ip, port| ServicePort {
        name,
        protocol,
        cluster_ip,
        port,
        node_port: None,
        external_ips: Vec::new(),
        load_balancer_ips: Vec::new(),
        load_balancer_source_ranges: Vec::new(),
        health_check_node_port: None,
        session_affinity: None,
        internal_policy_local: false,
        external_policy_local: false,
        endpoints: Vec::new(),
    };
    let spn = |ns: &str, name: &str, port: &str| ServicePortName {
        namespace: ns.into(),
        name: name.into(),
        port: port.into(),
    };

    if config.services > 0 {
        // The API server endpoint is the node itself, not a pod on it: kube-proxy sees no
        // NodeName on it, so it is not "local".
        let mut kubernetes = base(
            spn("default", "kubernetes", "https"),
            Protocol::Tcp,
            config
                .service_cidr
                .nth(1)
                .unwrap_or(config.service_cidr.addr),
            443,
        );
        kubernetes.endpoints.push(Endpoint {
            addr: SocketAddrV4::new(config.node_ip, 6443),
            is_local: false,
        });
        services.push(kubernetes);
    }
    if config.with_kube_dns {
        let dns_ip = config
            .service_cidr
            .nth(10)
            .unwrap_or(config.service_cidr.addr);
        let dns_pods: Vec<(Ipv4Addr, bool)> = (0..config.endpoints_per_service.min(2))
            .map(|i| {
                if i == 0 {
                    (pods.local(), true)
                } else {
                    (pods.remote(), false)
                }
            })
            .collect();
        for (port_name, protocol, port, target) in [
            ("dns", Protocol::Udp, 53, 53),
            ("dns-tcp", Protocol::Tcp, 53, 53),
            ("metrics", Protocol::Tcp, 9153, 9153),
        ] {
            if services.len() >= config.services {
                break;
            }
            let mut svc = base(
                spn("kube-system", "kube-dns", port_name),
                protocol,
                dns_ip,
                port,
            );
            svc.endpoints = dns_pods
                .iter()
                .map(|&(ip, is_local)| Endpoint {
                    addr: SocketAddrV4::new(ip, target),
                    is_local,
                })
                .collect();
            sort_endpoints(&mut svc.endpoints);
            services.push(svc);
        }
    }

    let mut generated = 0u64;
    while services.len() < config.services {
        let i = generated;
        generated += 1;
        let namespace = format!("ns-{}", i / 50);
        let name = format!("svc-{i}");
        let protocol = if rng.chance(config.udp_fraction) {
            Protocol::Udp
        } else {
            Protocol::Tcp
        };
        let port = [80u16, 443, 8080, 9090, 5432, 6379][(i % 6) as usize];
        let target_port = 8000 + (i % 1000) as u16;
        let cluster_ip = config.service_cidr.nth(first_generated_ip + i).ok_or(
            GenerateError::ServiceCidrExhausted {
                cidr: config.service_cidr,
                wanted: config.services,
            },
        )?;
        let mut svc = base(
            spn(&namespace, &name, &format!("p{port}")),
            protocol,
            cluster_ip,
            port,
        );

        let load_balancer = rng.chance(config.load_balancer_fraction);
        let node_port = load_balancer || rng.chance(config.nodeport_fraction);
        if node_port {
            svc.node_port = Some(alloc_node_port()?);
        }
        if load_balancer {
            // TEST-NET-3 for load balancer ingress IPs, TEST-NET-2 for source ranges.
            svc.load_balancer_ips
                .push(unique_test_ip(Ipv4Addr::new(203, 0, 113, 0), 18, i));
            if rng.chance(config.source_ranges_fraction) {
                svc.load_balancer_source_ranges
                    .push(Ipv4Cidr::new(Ipv4Addr::new(198, 51, 100, 0), 24));
                if i.is_multiple_of(2) {
                    // A range holding the node IP adds the "allow from node" rules.
                    svc.load_balancer_source_ranges
                        .push(Ipv4Cidr::new(config.node_ip, 24));
                }
            }
        }
        if rng.chance(config.external_ip_fraction) {
            svc.external_ips
                .push(unique_test_ip(Ipv4Addr::new(192, 0, 2, 0), 19, i));
        }
        if svc.externally_accessible() && rng.chance(config.local_policy_fraction) {
            svc.external_policy_local = true;
            if svc.node_port.is_some() {
                svc.health_check_node_port = Some(alloc_node_port()?);
            }
        }
        // Both policies Local would leave kube-proxy's EXT chain jumping to a KUBE-SVC chain
        // it does not create (pod traffic short-circuit); keep generated services away from it.
        svc.internal_policy_local =
            rng.chance(config.internal_local_fraction) && !svc.external_policy_local;
        if rng.chance(config.session_affinity_fraction) {
            svc.session_affinity = Some(DEFAULT_AFFINITY);
        }
        if !rng.chance(config.no_endpoints_fraction) {
            for _ in 0..config.endpoints_per_service {
                let is_local = rng.chance(config.local_endpoint_fraction);
                let ip = if is_local {
                    pods.local()
                } else {
                    pods.remote()
                };
                svc.endpoints.push(Endpoint {
                    addr: SocketAddrV4::new(ip, target_port),
                    is_local,
                });
            }
            sort_endpoints(&mut svc.endpoints);
            svc.endpoints.dedup();
        }
        services.push(svc);
    }
    Ok(Cluster { node, services })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_service_is_first() {
        let cluster = generate(&GeneratorConfig::default()).unwrap();
        let first = &cluster.services[0];
        assert_eq!(first.name_string(), "default/kubernetes:https");
        assert_eq!(first.cluster_ip, Ipv4Addr::new(10, 43, 0, 1));
        assert_eq!(
            first.endpoints[0].addr,
            SocketAddrV4::new(Ipv4Addr::new(192, 168, 122, 10), 6443)
        );
        assert_eq!(cluster.services.len(), 100);
        assert_eq!(
            cluster.services[1].name_string(),
            "kube-system/kube-dns:dns"
        );
    }

    #[test]
    fn deterministic() {
        let config = GeneratorConfig::all_features(50, 4);
        assert_eq!(generate(&config).unwrap(), generate(&config).unwrap());
    }

    #[test]
    fn endpoints_sorted_and_local_flag_matches_pod_cidr() {
        let cluster = generate(&GeneratorConfig::all_features(200, 12)).unwrap();
        for svc in &cluster.services[1..] {
            let strings: Vec<String> = svc
                .endpoints
                .iter()
                .map(Endpoint::endpoint_string)
                .collect();
            let mut sorted = strings.clone();
            sorted.sort();
            assert_eq!(strings, sorted);
            for ep in &svc.endpoints {
                assert_eq!(
                    ep.is_local,
                    cluster.node.pod_cidr.contains(*ep.addr.ip()),
                    "{ep:?}"
                );
            }
        }
    }

    #[test]
    fn errors_are_reported() {
        let config = GeneratorConfig {
            services: 5000,
            nodeport_fraction: 1.0,
            ..GeneratorConfig::default()
        };
        assert!(matches!(
            generate(&config),
            Err(GenerateError::NodePortsExhausted { .. })
        ));
        let config = GeneratorConfig {
            services: 300,
            service_cidr: Ipv4Cidr::new(Ipv4Addr::new(10, 43, 0, 0), 24),
            ..GeneratorConfig::default()
        };
        assert!(matches!(
            generate(&config),
            Err(GenerateError::ServiceCidrExhausted { .. })
        ));
    }
}
