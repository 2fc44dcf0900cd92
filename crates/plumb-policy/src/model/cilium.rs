//! Cilium's policies as plumb reads them (`CiliumNetworkPolicy`,
//! `CiliumClusterwideNetworkPolicy`): the types only; reading them and their semantics
//! are in the crate's `cilium` module. Here so that [`super::Cluster`] can hold them without the
//! model depending on the reader.

use super::{IpBlock, Labels, PortRef, Selector};
use serde::Serialize;

/// What a Cilium policy applies to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Subject {
    /// `endpointSelector` (pods); for a CNP the namespace match is already added.
    Endpoints(Selector),
    /// `nodeSelector`: the node's host endpoint (a host policy).
    Nodes(Selector),
}

/// One `spec` (or `specs[]` element) of a CNP or CCNP.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CiliumPolicy {
    /// `CiliumNetworkPolicy` or `CiliumClusterwideNetworkPolicy`.
    pub kind: &'static str,
    /// The namespace of a CNP; None for a CCNP.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// Index into `specs` when the policy has several.
    pub part: Option<usize>,
    /// What it selects.
    pub subject: Subject,
    /// `ingress`.
    pub ingress: Vec<CiliumRule>,
    /// `ingressDeny`.
    pub ingress_deny: Vec<CiliumRule>,
    /// `egress`.
    pub egress: Vec<CiliumRule>,
    /// `egressDeny`.
    pub egress_deny: Vec<CiliumRule>,
    /// Whether the subject is put in default deny for ingress.
    pub default_deny_ingress: bool,
    /// Whether the subject is put in default deny for egress.
    pub default_deny_egress: bool,
    /// Where it was read (file, document, List item), as for a NetworkPolicy.
    pub source: String,
    /// Its place in the object: `spec` or `specs[N]`.
    pub spec_at: String,
    /// A `k8s:io.kubernetes.pod.namespace` match of the endpointSelector naming
    /// another namespace, which Cilium replaced by the policy's own (what lint says).
    pub replaced_namespace_match: Option<String>,
}

impl CiliumPolicy {
    /// `namespace/name` for a CNP, `name` for a CCNP, with `[part]` for `specs`.
    pub fn id(&self) -> String {
        let base = match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => self.name.clone(),
        };
        match self.part {
            Some(i) => format!("{base}[{i}]"),
            None => base,
        }
    }
}

/// One port of a `toPorts[].ports[]` list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CiliumPort {
    /// None: every port (`port` missing or `"0"`).
    pub port: Option<PortRef>,
    /// `endPort` (numbers only).
    pub end_port: Option<u16>,
    /// `TCP`, `UDP`, `SCTP` or `ANY` (the default).
    pub protocol: String,
}

/// One HTTP rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HttpRule {
    /// `method` regex.
    pub method: Option<String>,
    /// `path` regex.
    pub path: Option<String>,
    /// `host` regex.
    pub host: Option<String>,
    /// `headers`: `Name: value` or `Name` (must be present).
    pub headers: Vec<String>,
}

/// One DNS rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DnsRule {
    /// `matchName`.
    pub match_name: Option<String>,
    /// `matchPattern`.
    pub match_pattern: Option<String>,
}

/// The L7 part of a port rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "protocol", content = "rules")]
pub enum L7Rules {
    /// `rules.http`.
    Http(Vec<HttpRule>),
    /// `rules.dns`.
    Dns(Vec<DnsRule>),
    /// `rules.kafka`, each rule as written (`role`, `apiKey`, `topic`, ...).
    Kafka(Vec<Labels>),
}

/// One `toPorts[]` element.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PortRule {
    /// Its ports; empty: every port.
    pub ports: Vec<CiliumPort>,
    /// L7 rules, which turn the allow into a redirection to the proxy.
    pub l7: Option<L7Rules>,
}

/// One `icmps[].fields[]` element.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct IcmpField {
    /// `IPv4` (the default) or `IPv6`.
    pub family: String,
    /// The ICMP type number.
    pub icmp_type: u8,
}

/// One `toFQDNs[]` element.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FqdnSelector {
    /// `matchName`.
    pub match_name: Option<String>,
    /// `matchPattern`.
    pub match_pattern: Option<String>,
}

/// One ingress/egress (allow or deny) rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CiliumRule {
    /// `fromEndpoints` / `toEndpoints`, namespace matches added.
    pub endpoints: Vec<Selector>,
    /// `fromEntities` / `toEntities`.
    pub entities: Vec<String>,
    /// `fromCIDR` / `fromCIDRSet` / `toCIDR` / `toCIDRSet`.
    pub cidrs: Vec<IpBlock>,
    /// `fromNodes` / `toNodes`.
    pub nodes: Vec<Selector>,
    /// `toFQDNs`.
    pub fqdns: Vec<FqdnSelector>,
    /// `toPorts`; empty: every port.
    pub ports: Vec<PortRule>,
    /// `icmps` fields; a rule with only ICMP fields allows only those.
    pub icmps: Vec<IcmpField>,
}

impl CiliumRule {
    /// Whether the rule names any L3 peer.
    pub fn has_l3(&self) -> bool {
        !(self.endpoints.is_empty()
            && self.entities.is_empty()
            && self.cidrs.is_empty()
            && self.nodes.is_empty()
            && self.fqdns.is_empty())
    }

    /// Whether the rule names any L4 restriction.
    pub fn has_l4(&self) -> bool {
        !self.ports.is_empty() || !self.icmps.is_empty()
    }
}
