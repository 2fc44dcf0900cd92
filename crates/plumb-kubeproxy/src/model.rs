//! The service model kube-proxy programs: service ports, their virtual IPs and endpoints.
//!
//! This is the slice of kubernetes `pkg/proxy` (`ServicePortName`, `BaseServicePortInfo`,
//! `BaseEndpointInfo`) that decides which rules exist. Everything here is plain data so that
//! tests can compare a parsed dump against the model that produced it.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddrV4};

use crate::chain_name::{self, ChainPrefix};

/// An IPv4 prefix such as `10.42.0.0/16`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Cidr {
    /// Network address (host bits are expected to be zero).
    pub addr: Ipv4Addr,
    /// Prefix length, 0..=32.
    pub len: u8,
}

impl Ipv4Cidr {
    /// A prefix; host bits of `addr` are cleared, as the kernel does.
    pub const fn new(addr: Ipv4Addr, len: u8) -> Self {
        let len = if len > 32 { 32 } else { len };
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        Self {
            addr: Ipv4Addr::from_bits(addr.to_bits() & mask),
            len,
        }
    }

    /// Number of addresses in the prefix.
    pub fn size(&self) -> u64 {
        1u64 << (32 - u32::from(self.len))
    }

    /// The address at `offset` from the network address, if inside the prefix.
    pub fn nth(&self, offset: u64) -> Option<Ipv4Addr> {
        (offset < self.size()).then(|| Ipv4Addr::from_bits(self.addr.to_bits() + offset as u32))
    }

    /// Whether `ip` lies inside the prefix.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let mask = if self.len == 0 {
            0
        } else {
            u32::MAX << (32 - self.len)
        };
        ip.to_bits() & mask == self.addr.to_bits()
    }
}

impl fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// Layer-4 protocol of a service port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// TCP
    Tcp,
    /// UDP
    Udp,
    /// SCTP
    Sctp,
}

impl Protocol {
    /// Lower-case name, as kube-proxy hashes and writes it (`strings.ToLower`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tcp => "tcp",
            Self::Udp => "udp",
            Self::Sctp => "sctp",
        }
    }
}

/// `namespace/name:port` (kubernetes `pkg/proxy/types.go` `ServicePortName.String`; an
/// unnamed port prints as `namespace/name`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServicePortName {
    /// Namespace of the Service.
    pub namespace: String,
    /// Name of the Service.
    pub name: String,
    /// Name of the port within the Service (may be empty).
    pub port: String,
}

impl fmt::Display for ServicePortName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.port.is_empty() {
            write!(f, "{}/{}", self.namespace, self.name)
        } else {
            write!(f, "{}/{}:{}", self.namespace, self.name, self.port)
        }
    }
}

/// `ClientIP` session affinity (kubernetes `v1.ServiceAffinityClientIP`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientIpAffinity {
    /// `sessionAffinityConfig.clientIP.timeoutSeconds` (default 10800).
    pub timeout_seconds: u32,
}

/// One ready endpoint of a service port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Address kube-proxy DNATs to.
    pub addr: SocketAddrV4,
    /// Whether the endpoint runs on the node being modelled (`IsLocal`).
    pub is_local: bool,
}

impl Endpoint {
    /// `ip:port`, the string kube-proxy hashes and prints (`BaseEndpointInfo.String`).
    pub fn endpoint_string(&self) -> String {
        self.addr.to_string()
    }
}

/// One port of one Service, with everything kube-proxy needs to program it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePort {
    /// `ns/name:port`.
    pub name: ServicePortName,
    /// Protocol of the port.
    pub protocol: Protocol,
    /// ClusterIP.
    pub cluster_ip: Ipv4Addr,
    /// Service port.
    pub port: u16,
    /// NodePort, if any.
    pub node_port: Option<u16>,
    /// `spec.externalIPs`.
    pub external_ips: Vec<Ipv4Addr>,
    /// `status.loadBalancer.ingress[].ip`.
    pub load_balancer_ips: Vec<Ipv4Addr>,
    /// `spec.loadBalancerSourceRanges`.
    pub load_balancer_source_ranges: Vec<Ipv4Cidr>,
    /// `spec.healthCheckNodePort` (only with `externalTrafficPolicy: Local`).
    pub health_check_node_port: Option<u16>,
    /// `ClientIP` session affinity.
    pub session_affinity: Option<ClientIpAffinity>,
    /// `internalTrafficPolicy: Local`.
    pub internal_policy_local: bool,
    /// `externalTrafficPolicy: Local`.
    pub external_policy_local: bool,
    /// Ready endpoints, sorted by `ip:port` string as kube-proxy's endpoint cache sorts them
    /// (kubernetes `pkg/proxy/endpointslicecache.go`, `byEndpoint`).
    pub endpoints: Vec<Endpoint>,
}

impl ServicePort {
    /// `ns/name:port`.
    pub fn name_string(&self) -> String {
        self.name.to_string()
    }

    /// The per-service chain kube-proxy would name with `prefix` (not [`ChainPrefix::Sep`]).
    pub fn chain(&self, prefix: ChainPrefix) -> String {
        chain_name::service_port_chain_name(prefix, &self.name_string(), self.protocol.as_str())
    }

    /// The `KUBE-SEP-…` chain of `endpoint`.
    pub fn endpoint_chain(&self, endpoint: &Endpoint) -> String {
        chain_name::endpoint_chain_name(
            &self.name_string(),
            self.protocol.as_str(),
            &endpoint.endpoint_string(),
        )
    }

    /// NodePort, LoadBalancer or external IPs (kubernetes `ExternallyAccessible`).
    pub fn externally_accessible(&self) -> bool {
        self.node_port.is_some()
            || !self.load_balancer_ips.is_empty()
            || !self.external_ips.is_empty()
    }

    /// `ExternalPolicyLocal`: only meaningful for externally accessible services.
    pub fn external_policy_local(&self) -> bool {
        self.externally_accessible() && self.external_policy_local
    }

    /// `UsesClusterEndpoints`.
    pub fn uses_cluster_endpoints(&self) -> bool {
        !self.internal_policy_local || (self.externally_accessible() && !self.external_policy_local)
    }

    /// `UsesLocalEndpoints`.
    pub fn uses_local_endpoints(&self) -> bool {
        self.internal_policy_local || self.external_policy_local()
    }

    /// What both of kube-proxy's proxiers (iptables and nftables) decide for this
    /// service port before writing its rules; see [`Routing`].
    pub fn routing(&self) -> Routing<'_> {
        let uses_cluster = self.uses_cluster_endpoints();
        let uses_local = self.uses_local_endpoints();
        // proxy.CategorizeEndpoints, every endpoint ready and no topology hints.
        let cluster_eps: Vec<&Endpoint> = if uses_cluster {
            self.endpoints.iter().collect()
        } else {
            Vec::new()
        };
        let local_eps: Vec<&Endpoint> = if uses_local {
            self.endpoints.iter().filter(|e| e.is_local).collect()
        } else {
            Vec::new()
        };
        let has_endpoints = !self.endpoints.is_empty();
        let has_local = !local_eps.is_empty();
        Routing {
            uses_cluster,
            uses_cluster_chain: uses_cluster && !cluster_eps.is_empty(),
            uses_local_chain: uses_local && has_local,
            has_internal: has_endpoints && (!self.internal_policy_local || has_local),
            has_external: has_endpoints && (!self.external_policy_local() || has_local),
            uses_external_chain: has_endpoints && self.externally_accessible(),
            has_endpoints,
            cluster_eps,
            local_eps,
        }
    }
}

/// A service port's routing as kube-proxy's `syncProxyRules` works it out, the same in
/// its iptables and nftables proxiers ([`ServicePort::routing`]).
#[derive(Debug, Clone)]
pub struct Routing<'s> {
    /// Some policy sends traffic to all endpoints (`UsesClusterEndpoints`).
    pub uses_cluster: bool,
    /// The endpoints of cluster-policy traffic: all of them, or none when no policy uses them.
    pub cluster_eps: Vec<&'s Endpoint>,
    /// The endpoints of local-policy traffic: those on this node, or none when no policy
    /// uses them.
    pub local_eps: Vec<&'s Endpoint>,
    /// The service port has endpoints at all.
    pub has_endpoints: bool,
    /// The cluster-policy chain (`KUBE-SVC-`, `service-`) is written.
    pub uses_cluster_chain: bool,
    /// The local-policy chain (`KUBE-SVL-`, `local-`) is written.
    pub uses_local_chain: bool,
    /// Internal traffic has endpoints to go to, under its policy.
    pub has_internal: bool,
    /// External traffic has endpoints to go to, under its policy.
    pub has_external: bool,
    /// The external chain (`KUBE-EXT-`, `external-`) is written.
    pub uses_external_chain: bool,
}

impl<'s> Routing<'s> {
    /// The endpoints that get a chain: the cluster endpoints when used (all endpoints
    /// are ready here, so they include the local ones), else the local ones
    /// (`allLocallyReachableEndpoints`).
    pub fn reachable(&self) -> &[&'s Endpoint] {
        if self.uses_cluster {
            &self.cluster_eps
        } else {
            &self.local_eps
        }
    }
}

/// The node being modelled and the cluster-wide settings kube-proxy reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalNode {
    /// Node name.
    pub name: String,
    /// Primary node IP (`--bind-address` / node status).
    pub ip: Ipv4Addr,
    /// Cluster pod CIDR (`--cluster-cidr`, used by the `ClusterCIDR` local traffic detector).
    pub cluster_cidr: Ipv4Cidr,
    /// This node's pod CIDR (endpoints inside it are local).
    pub pod_cidr: Ipv4Cidr,
    /// Service CIDR.
    pub service_cidr: Ipv4Cidr,
}

/// Everything one node's kube-proxy knows: the node and its service ports, in a fixed order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    /// The node.
    pub node: LocalNode,
    /// Service ports. Real kube-proxy walks a Go map (random order); this order is the
    /// generator's and is what the renderers use.
    pub services: Vec<ServicePort>,
}

impl Cluster {
    /// Number of endpoints over all service ports (kube-proxy's `totalEndpoints`).
    pub fn total_endpoints(&self) -> usize {
        self.services.iter().map(|s| s.endpoints.len()).sum()
    }
}
