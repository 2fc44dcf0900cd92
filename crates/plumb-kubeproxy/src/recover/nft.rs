//! Service-map recovery for kube-proxy's nftables mode (`table ip|ip6 kube-proxy`).
//!
//! What kubernetes `pkg/proxy/nftables/proxier.go` writes, and how it is read back:
//! - map `service-ips` (`IP . proto . port : goto CHAIN`): the chain's prefix says what the IP
//!   is: `service-`/`local-` a ClusterIP (also listed in set `cluster-ips`), `external-` an
//!   external or load-balancer IP (the map does not distinguish them), `firewall-` a
//!   load-balancer IP with source ranges (also in map `firewall-ips`);
//! - map `service-nodeports` (`proto . port : goto external-…`): NodePorts;
//! - maps `no-endpoint-services` / `no-endpoint-nodeports`: elements commented with
//!   `ns/name:port`, verdict `goto reject-chain` (no endpoints) or `drop` (no local ones);
//! - chains `service-…`/`local-…`: `numgen random mod N vmap { i : goto endpoint-… }` picks an
//!   endpoint with probability (entries for it) / N; `ip saddr @affinity-… goto endpoint-…`
//!   rules are ClientIP affinity (the set's `timeout` is the affinity timeout);
//! - chains `endpoint-…`: `dnat to IP:PORT`; `external-…`: `goto local-…` means
//!   `externalTrafficPolicy: Local`; `firewall-…`: `ip saddr != { RANGES } drop`.
//!
//! Chain names spell the service (`service-HASH-ns/name/proto/port`), so names survive
//! without comments; the hash is re-computed and mismatches reported.

use super::{
    Evidence, NameMismatch, NameSource, NoEndpoints, ProxyMode, Quotes, RecoveredEndpoint,
    RecoveredService, ServiceMap, Slim, exact, sort_in_place_by, split_host_port,
    split_service_port_name,
};
use crate::chain_name::{NftChainPrefix, nft_endpoint_chain_name, nft_service_port_base};
use plumb_ruleset::nft::{NatKind, NftSet, StatementKind, Value, Verdict, VerdictMapRef};
use plumb_ruleset::{Backend, Chain, Family, RuleBody, Ruleset, Table};
use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<crate::sync::Fnv>>;
/// The addresses of set `cluster-ips`.
type ClusterIps = std::collections::HashSet<IpAddr, BuildHasherDefault<crate::sync::Fnv>>;
use std::net::IpAddr;

/// The table kube-proxy's nftables mode writes (one per family).
pub const TABLE: &str = "kube-proxy";

/// Whether `table` is kube-proxy's nftables-mode table (native nftables, named
/// [`TABLE`]), in whichever family.
pub fn is_kube_proxy_table(table: &Table) -> bool {
    table.backend == Backend::Nftables && &*table.name == TABLE
}

const PREFIXES: [NftChainPrefix; 5] = [
    NftChainPrefix::Service,
    NftChainPrefix::Local,
    NftChainPrefix::External,
    NftChainPrefix::Firewall,
    NftChainPrefix::Endpoint,
];

/// `service-HASH-ns/name/proto/port` -> (prefix, base `HASH-ns/name/proto/port`).
fn split_chain(name: &str) -> Option<(NftChainPrefix, &str)> {
    PREFIXES.into_iter().find_map(|p| {
        let base = name.strip_prefix(p.as_str())?;
        let (hash, rest) = base.split_once('-')?;
        (hash.len() == 8 && rest.contains('/')).then_some((p, base))
    })
}

/// The parts of a service base name: namespace, name, protocol, port name.
fn base_parts(base: &str) -> Option<(&str, &str, &str, &str)> {
    let (_, rest) = base.split_once('-')?;
    let rest = rest.split_once("__").map_or(rest, |(s, _)| s);
    let mut it = rest.splitn(4, '/');
    let (ns, name, proto, port) = (it.next()?, it.next()?, it.next()?, it.next()?);
    Some((ns, name, proto, port))
}

/// The service base of an endpoint base (`HASH-ns/name/proto/port__ip/port`): everything
/// needed to find its service is the name, not the hash, so match on the name part.
fn service_name(ns: &str, name: &str, port: &str) -> String {
    if port.is_empty() {
        format!("{ns}/{name}")
    } else {
        format!("{ns}/{name}:{port}")
    }
}

#[derive(Default)]
struct Builder<'a> {
    name: Option<String>,
    name_source: Option<NameSource>,
    protocol: Option<String>,
    cluster_ip: Option<IpAddr>,
    port: Option<u16>,
    node_ports: Slim<u16>,
    external_ips: Slim<IpAddr>,
    load_balancer_ips: Slim<IpAddr>,
    source_ranges: Slim<String>,
    affinity: Option<u32>,
    internal_local: bool,
    external_local: bool,
    no_endpoints: Option<NoEndpoints>,
    external_ambiguous: bool,
    chains: Slim<&'a str>,
    endpoints: Slim<RecoveredEndpoint<'a>>,
    evidence: Slim<Evidence<'a>>,
    /// Filled by [`finish`]. Also makes a builder at least as large as the service it
    /// becomes, so that the services are collected into the builders' own block: a
    /// second block of 10k services was 2.7 MiB on the peak of recovery.
    notes: Slim<Cow<'static, str>>,
}

/// Recovers the service map of every nftables `kube-proxy` table.
pub fn recover(ruleset: &Ruleset) -> Vec<ServiceMap<'_>> {
    ruleset
        .tables
        .iter()
        .filter(|t| is_kube_proxy_table(t) && matches!(t.family, Family::Ip | Family::Ip6))
        .map(recover_table)
        .collect()
}

struct Recovery<'a> {
    table: &'a Table,
    builders: Vec<Builder<'a>>,
    by_name: FastMap<String, usize>,
    chains: ChainIndex<'a>,
    mismatches: Vec<NameMismatch<'a>>,
}

/// The table's chains by name, held as each chain's index (4 bytes; the key is read
/// again from the chain): a map of names to chains took 24 bytes a bucket, 3.1 MiB
/// on a 10k-service listing's 58k chains at the peak of `plumb services`.
struct ChainIndex<'a> {
    chains: &'a [Chain],
    indexes: hashbrown::HashTable<u32>,
}

impl<'a> ChainIndex<'a> {
    fn hash(name: &str) -> u64 {
        use std::hash::BuildHasher;
        BuildHasherDefault::<crate::sync::Fnv>::default().hash_one(name)
    }

    /// Every chain of `chains`; of two with one name, the later.
    fn new(chains: &'a [Chain]) -> ChainIndex<'a> {
        let mut indexes = hashbrown::HashTable::with_capacity(chains.len());
        for (i, c) in chains.iter().enumerate() {
            // Chains are fewer than 2^32 (the parser refuses inputs of 4 GiB).
            let i = i as u32;
            let h = Self::hash(&c.name);
            match indexes.find_mut(h, |&j: &u32| *chains[j as usize].name == *c.name) {
                Some(j) => *j = i,
                None => {
                    indexes.insert_unique(h, i, |&j: &u32| Self::hash(&chains[j as usize].name));
                }
            }
        }
        ChainIndex { chains, indexes }
    }

    fn get(&self, name: &str) -> Option<&'a Chain> {
        let chains = self.chains;
        self.indexes
            .find(Self::hash(name), |&j| &*chains[j as usize].name == name)
            .map(|&j| &chains[j as usize])
    }
}

impl<'a> Recovery<'a> {
    fn builder(&mut self, key: String) -> usize {
        if let Some(&i) = self.by_name.get(&key) {
            return i;
        }
        self.builders.push(Builder::default());
        self.by_name.insert(key, self.builders.len() - 1);
        self.builders.len() - 1
    }

    /// The builder for a service chain; names it from the chain and checks the hash.
    fn builder_for_chain(&mut self, chain: &'a str, evidence: Evidence<'a>) -> Option<usize> {
        let (prefix, base) = split_chain(chain)?;
        let (ns, name, proto, port) = base_parts(base)?;
        let spn = service_name(ns, name, port);
        let i = self.builder(format!("{spn}|{proto}"));
        let b = &mut self.builders[i];
        if b.name.is_none() && split_service_port_name(&spn).is_some() {
            b.name = Some(spn.clone());
            b.name_source = Some(NameSource::ChainName);
        }
        if b.protocol.is_none() {
            b.protocol = Some(proto.to_string());
        }
        if prefix != NftChainPrefix::Endpoint && !b.chains.contains(&chain) {
            b.chains.push(chain);
            if !base.ends_with("...") {
                let expected = nft_service_port_base(ns, name, proto, port);
                if expected != base {
                    self.mismatches.push(NameMismatch {
                        chain,
                        service: format!("{spn} ({proto})"),
                        endpoint: None,
                        expected: format!("{}{expected}", prefix.as_str()),
                        evidence,
                    });
                }
            }
        }
        Some(i)
    }
}

fn recover_table(table: &Table) -> ServiceMap<'_> {
    // One builder a service port: one with its `service-` chain, or a service without
    // endpoints (it has no `service-` chain) named by the elements of the no-endpoint
    // maps. Reserved at once, as pushing grew the block by doubling, and the block
    // becomes the map's: reserving only for the `service-` chains, the 5% of 10k
    // services without endpoints doubled it to 5.1 MiB, 2.5 MiB of it unused for as
    // long as the map.
    let ports = table
        .chains
        .iter()
        .filter(|c| split_chain(&c.name).is_some_and(|(p, _)| p == NftChainPrefix::Service))
        .count()
        + ["no-endpoint-services", "no-endpoint-nodeports"]
            .iter()
            .filter_map(|m| table.set(m))
            .map(|m| m.elements.iter().filter(|e| e.comment.is_some()).count())
            .sum::<usize>();
    let mut by_name = FastMap::default();
    by_name.reserve(ports);
    let mut rec = Recovery {
        table,
        builders: Vec::with_capacity(ports),
        by_name,
        chains: ChainIndex::new(&table.chains),
        mismatches: Vec::new(),
    };
    // Looked up for every element of service-ips: a set, not a list (a list scan per
    // element was 10k x 10k address parses on a 10k-service node).
    let cluster_ips: Option<ClusterIps> = table.set("cluster-ips").map(|s| {
        s.elements
            .iter()
            .filter_map(|e| e.key_text.parse().ok())
            .collect()
    });
    if let Some(m) = table.set("service-ips") {
        service_ips(&mut rec, m, cluster_ips.as_ref());
    }
    if let Some(m) = table.set("firewall-ips") {
        for e in &m.elements {
            let Some(c) = e.verdict.as_ref().and_then(verdict_chain) else {
                continue;
            };
            let ev = Evidence::element(table, m, e);
            let Some(i) = rec.builder_for_chain(c, ev) else {
                continue;
            };
            if let Some((ip, _, port)) = ip_proto_port(&e.key_text) {
                let b = &mut rec.builders[i];
                b.external_ips.retain(|x| *x != ip);
                b.load_balancer_ips.push_unique(ip);
                b.port = b.port.or(Some(port));
            }
        }
    }
    if let Some(m) = table.set("service-nodeports") {
        for e in &m.elements {
            let Some(c) = e.verdict.as_ref().and_then(verdict_chain) else {
                continue;
            };
            let ev = Evidence::element(table, m, e);
            let Some(i) = rec.builder_for_chain(c, ev) else {
                continue;
            };
            if let Some(p) = proto_port(&e.key_text) {
                let b = &mut rec.builders[i];
                b.node_ports.push_unique(p);
                b.evidence.push(ev);
            }
        }
    }
    for (map, nodeport) in [
        ("no-endpoint-services", false),
        ("no-endpoint-nodeports", true),
    ] {
        if let Some(m) = table.set(map) {
            no_endpoint_elements(&mut rec, m, nodeport, cluster_ips.as_ref());
        }
    }
    // Every service chain, also those no map element reaches, with its builder.
    let mut service_chains: Vec<(&Chain, NftChainPrefix, u32)> = Vec::new();
    for c in &table.chains {
        if let Some((p, _)) = split_chain(&c.name)
            && p != NftChainPrefix::Endpoint
        {
            let ev = chain_evidence(table, c);
            if let Some(i) = rec.builder_for_chain(&c.name, ev) {
                // Fewer than 2^32 builders: at most one a chain or element.
                service_chains.push((c, p, i as u32));
            }
        }
    }
    // An endpoint chain whose service has no chain nor element still has a builder.
    for c in &table.chains {
        if let Some((NftChainPrefix::Endpoint, _)) = split_chain(&c.name) {
            let ev = chain_evidence(table, c);
            rec.builder_for_chain(&c.name, ev);
        }
    }
    // Every builder is made: the names' index and the ClusterIPs go before the
    // endpoints are read (0.8 MiB on a 10k-service listing).
    rec.by_name = FastMap::default();
    drop(cluster_ips);
    for (c, prefix, i) in service_chains {
        let i = i as usize;
        match prefix {
            NftChainPrefix::Service | NftChainPrefix::Local => {
                service_chain(&mut rec, c, i, prefix == NftChainPrefix::Local)
            }
            NftChainPrefix::External => {
                // `goto local-…`; or, when no endpoint is local (no such rule), the
                // `fib saddr type local` short-circuits proxier.go writes only under
                // `externalTrafficPolicy: Local`.
                let local = c.rules.iter().any(|r| {
                    r.chain_references().iter().any(|r| {
                        split_chain(r.chain).is_some_and(|(p, _)| p == NftChainPrefix::Local)
                    }) || matches!(&r.body, RuleBody::Nft(n)
                        if n.statements(&r.text).iter().any(|s| s.text == "fib saddr type local"))
                });
                if local {
                    rec.builders[i].external_local = true;
                }
            }
            NftChainPrefix::Firewall => firewall_chain(&mut rec, c, i),
            _ => {}
        }
    }
    // Collected in place: the services take the builders' block (see `Builder::notes`).
    let mut services: Vec<RecoveredService> = std::mem::take(&mut rec.builders)
        .into_iter()
        .map(|b| finish(&mut rec, b))
        .collect();
    // The chain indexes are freed before the sort.
    let name_mismatches = std::mem::take(&mut rec.mismatches);
    drop(rec);
    // Services without endpoints that have NodePorts were counted twice above: a block
    // with much room to spare is copied into one of its size, now that the indexes are
    // freed.
    if services.capacity() - services.len() > services.len() / 8 {
        services = exact(services);
    }
    sort_in_place_by(&mut services, |a, b| {
        (&a.name, &a.protocol).cmp(&(&b.name, &b.protocol))
    });
    ServiceMap {
        mode: ProxyMode::Nftables,
        family: table.family,
        backend: table.backend,
        services,
        name_mismatches,
    }
}

fn verdict_chain(v: &Verdict) -> Option<&str> {
    match v {
        Verdict::Goto(c) | Verdict::Jump(c) => Some(c),
        _ => None,
    }
}

fn chain_evidence<'a>(table: &'a Table, c: &'a Chain) -> Evidence<'a> {
    match c.rules.first() {
        Some(r) => Evidence::rule(table, c, r),
        None => Evidence::declaration(table, c),
    }
}

/// `10.43.0.10 . tcp . 53` -> (ip, proto, port).
fn ip_proto_port(key: &str) -> Option<(IpAddr, &str, u16)> {
    let mut it = key.split(" . ").map(str::trim);
    let ip = it.next()?.parse().ok()?;
    let proto = it.next()?;
    let port = it.next()?.parse().ok()?;
    Some((ip, proto, port))
}

/// `tcp . 30000` -> port.
fn proto_port(key: &str) -> Option<u16> {
    let mut it = key.split(" . ").map(str::trim);
    let _proto = it.next()?;
    it.next()?.parse().ok()
}

fn service_ips<'a>(rec: &mut Recovery<'a>, m: &'a NftSet, cluster_ips: Option<&ClusterIps>) {
    for e in &m.elements {
        let Some(c) = e.verdict.as_ref().and_then(verdict_chain) else {
            continue;
        };
        let ev = Evidence::element(rec.table, m, e);
        let Some((prefix, _)) = split_chain(c) else {
            continue;
        };
        let Some(i) = rec.builder_for_chain(c, ev) else {
            continue;
        };
        let Some((ip, _, port)) = ip_proto_port(&e.key_text) else {
            continue;
        };
        let b = &mut rec.builders[i];
        b.evidence.push(ev);
        let is_cluster_ip = cluster_ips.is_none_or(|s| s.contains(&ip));
        match prefix {
            NftChainPrefix::Service | NftChainPrefix::Local if is_cluster_ip => {
                b.cluster_ip = Some(ip);
                b.port = Some(port);
                b.internal_local |= prefix == NftChainPrefix::Local;
            }
            NftChainPrefix::Firewall => {
                b.load_balancer_ips.push_unique(ip);
                b.port = b.port.or(Some(port));
            }
            _ => {
                if !b.load_balancer_ips.contains(&ip) {
                    b.external_ips.push_unique(ip);
                    b.external_ambiguous = true;
                }
                b.port = b.port.or(Some(port));
            }
        }
    }
}

fn no_endpoint_elements<'a>(
    rec: &mut Recovery<'a>,
    m: &'a NftSet,
    nodeport: bool,
    cluster_ips: Option<&ClusterIps>,
) {
    for e in &m.elements {
        let Some(comment) = e.comment.as_deref() else {
            continue;
        };
        let Some((ns, name, port_name)) = split_service_port_name(comment) else {
            continue;
        };
        let (ip, proto, port) = if nodeport {
            let mut it = e.key_text.split(" . ").map(str::trim);
            let proto = it.next().unwrap_or("");
            (None, proto, it.next().and_then(|p| p.parse::<u16>().ok()))
        } else {
            match ip_proto_port(&e.key_text) {
                Some((ip, proto, port)) => (Some(ip), proto, Some(port)),
                None => continue,
            }
        };
        let spn = service_name(ns, name, port_name);
        let key = format!("{spn}|{proto}");
        let i = rec.builder(key);
        let ev = Evidence::element(rec.table, m, e);
        let b = &mut rec.builders[i];
        if b.name.is_none() {
            b.name = Some(spn);
            b.name_source = Some(NameSource::Comment);
        }
        if b.protocol.is_none() {
            b.protocol = Some(proto.to_string());
        }
        b.evidence.push(ev);
        let reject = match &e.verdict {
            Some(Verdict::Drop) => false,
            Some(v) => verdict_chain(v).is_none_or(|c| c.contains("reject")),
            None => true,
        };
        b.no_endpoints = Some(if reject {
            NoEndpoints::Reject
        } else {
            NoEndpoints::DropNoLocal
        });
        match (nodeport, ip, port) {
            (true, _, Some(p)) => b.node_ports.push_unique(p),
            (false, Some(ip), Some(p)) => {
                let is_cluster_ip = cluster_ips.is_none_or(|s| s.contains(&ip));
                if is_cluster_ip {
                    b.cluster_ip = Some(ip);
                    b.port = Some(p);
                    // proxier.go drops ClusterIP traffic (rather than rejecting it) only
                    // when the service has endpoints but internalTrafficPolicy Local
                    // leaves none on this node.
                    b.internal_local |= !reject;
                } else if !b.load_balancer_ips.contains(&ip) {
                    b.external_ips.push_unique(ip);
                    b.external_ambiguous = true;
                }
            }
            _ => {}
        }
    }
}

fn service_chain<'a>(rec: &mut Recovery<'a>, c: &'a Chain, i: usize, local: bool) {
    let table = rec.table;
    let mut picks: Vec<(&'a str, f64, Evidence<'a>)> = Vec::new();
    for r in &c.rules {
        let RuleBody::Nft(n) = &r.body else { continue };
        let ev = Evidence::rule(table, c, r);
        // Read from the rule's text and dropped after it: what is kept is a slice of
        // the rule's text.
        let statements = n.statements(&r.text);
        for s in statements.iter() {
            match &s.kind {
                StatementKind::Match { left, right, .. }
                    if left == "ip saddr" || left == "ip6 saddr" =>
                {
                    if let Value::Named(set) = right
                        && set.starts_with("affinity-")
                    {
                        let timeout = table.set(set).and_then(set_timeout_seconds);
                        let b = &mut rec.builders[i];
                        b.affinity = b.affinity.or(timeout).or(Some(0));
                    }
                }
                StatementKind::Match {
                    left,
                    right: Value::Single(v),
                    ..
                } if (left == "ip daddr" || left == "ip6 daddr") => {
                    let b = &mut rec.builders[i];
                    if b.cluster_ip.is_none() {
                        b.cluster_ip = v.parse().ok();
                    }
                }
                StatementKind::Match {
                    left,
                    right: Value::Single(v),
                    ..
                } if left.ends_with(" dport") => {
                    let b = &mut rec.builders[i];
                    if b.port.is_none() {
                        b.port = v.parse().ok();
                    }
                }
                StatementKind::VerdictMap {
                    key,
                    map: VerdictMapRef::Inline(entries),
                } if key.starts_with("numgen ") => {
                    let n = key
                        .rsplit(' ')
                        .next()
                        .and_then(|m| m.parse::<u32>().ok())
                        .filter(|&m| m > 0)
                        .unwrap_or(entries.len().max(1) as u32);
                    for (_, v) in entries {
                        let Some(target) = verdict_chain(v).and_then(|t| spelt_in(&r.text, t))
                        else {
                            continue;
                        };
                        match picks.iter_mut().find(|p| p.0 == target) {
                            Some(p) => p.1 += 1.0 / f64::from(n),
                            None => picks.push((target, 1.0 / f64::from(n), ev)),
                        }
                    }
                }
                // Newer kube-proxy DNATs in the service chain itself: `dnat ip addr .
                // port to numgen random mod N map { 0 : IP . PORT, ... }` (nft lists it
                // as `dnat ip to numgen ...`), or `dnat to IP:PORT` for one endpoint.
                StatementKind::Nat {
                    kind: NatKind::Dnat,
                    ..
                } => {
                    for (address, p) in dnat_picks(&s.text) {
                        let b = &mut rec.builders[i];
                        match b
                            .endpoints
                            .iter_mut()
                            .find(|e| e.chain().is_none() && e.address() == Some(&*address))
                        {
                            Some(e) => {
                                if local {
                                    e.local = Some(true);
                                } else {
                                    e.set_probability(Some(p));
                                }
                            }
                            None => b.endpoints.push(RecoveredEndpoint::new(
                                Some(Cow::Owned(address)),
                                Some(p),
                                local.then_some(true),
                                None,
                                Quotes::one(ev),
                            )),
                        }
                    }
                }
                StatementKind::Verdict(v) => {
                    // A single endpoint may be a plain `goto endpoint-…` (no numgen).
                    if let Some(target) = verdict_chain(v).and_then(|t| spelt_in(&r.text, t))
                        && split_chain(target).is_some_and(|(p, _)| p == NftChainPrefix::Endpoint)
                        && picks.is_empty()
                        && !statements.iter().any(|s| {
                            matches!(&s.kind, StatementKind::Match { right: Value::Named(set), .. } if set.starts_with("affinity-"))
                        })
                    {
                        picks.push((target, 1.0, ev));
                    }
                }
                _ => {}
            }
        }
    }
    // The endpoints' vector in a block of their number (pushing one by one grew it to 8
    // places for 5 endpoints: 3.3 MiB of slack on a 10k-service map, all live at once
    // while recovery builds the services).
    let b = &mut rec.builders[i];
    let mut endpoints = std::mem::take(&mut b.endpoints).into_vec();
    if endpoints.is_empty() {
        endpoints.reserve_exact(picks.len());
    }
    for (target, p, ev) in picks {
        let mut evidence = Quotes::one(ev);
        let mut address = None;
        if let Some(ep) = rec.chains.get(target) {
            for r in &ep.rules {
                let RuleBody::Nft(n) = &r.body else { continue };
                // Only its NAT statements (most rules are not read again for them).
                for (_, args) in n.nat_statements(&r.text) {
                    if let Some(a) = args
                        .split_whitespace()
                        .find(|w| split_host_port(w).is_some())
                    {
                        address = Some(
                            spelt_in(&r.text, a)
                                .map_or_else(|| Cow::Owned(a.to_string()), Cow::Borrowed),
                        );
                        evidence.push(Evidence::rule(table, ep, r));
                    }
                }
            }
        }
        if address.is_none() {
            // The endpoint chain is not in the input (a truncated listing): its name
            // carries the address (`endpoint-HASH-ns/name/proto/port__IP/PORT`).
            address = endpoint_address_from_name(target).map(Cow::Owned);
        }
        match endpoints.iter_mut().find(|e| e.chain() == Some(target)) {
            Some(e) => {
                if local {
                    e.local = Some(true);
                } else {
                    e.set_probability(Some(p));
                }
            }
            None => endpoints.push(RecoveredEndpoint::new(
                address,
                Some(p),
                local.then_some(true),
                Some(target),
                evidence,
            )),
        }
    }
    rec.builders[i].endpoints = endpoints.into();
}

/// `part`, a string of a statement of a rule whose text is `text`, as the same
/// characters of `text`: they live as long as the rule, the statements read from its
/// text do not (see [`plumb_ruleset::nft::NftRule::statements`]).
fn spelt_in<'a>(text: &'a str, part: &str) -> Option<&'a str> {
    let at = text.find(part)?;
    text.get(at..at + part.len())
}

/// The endpoints a `dnat` statement of a service chain picks, with their probability:
/// `dnat to IP:PORT` (one endpoint), `dnat ip addr . port to numgen random mod N map
/// { K : IP . PORT, ... }` (a key may be a range `a-b`: that many of the N draws). An
/// address is written `IP:PORT`, `[IP6]:PORT`. Empty when the statement is anything else.
fn dnat_picks(text: &str) -> Vec<(String, f64)> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let Some(to) = words.iter().position(|w| *w == "to") else {
        return Vec::new();
    };
    let rest = &words[to + 1..];
    match rest {
        ["numgen", "random", "mod", n, tail @ ..] => {
            let Some(n) = n.parse::<u32>().ok().filter(|&n| n > 0) else {
                return Vec::new();
            };
            let (Some(open), Some(close)) = (text.find('{'), text.rfind('}')) else {
                return Vec::new();
            };
            if !tail.contains(&"map") || open > close {
                return Vec::new();
            }
            let mut out: Vec<(String, f64)> = Vec::new();
            for entry in text[open + 1..close].split(',') {
                let Some((key, value)) = entry
                    .split_once(':')
                    .filter(|(k, _)| k.trim().chars().all(|c| c.is_ascii_digit() || c == '-'))
                else {
                    continue;
                };
                let key = key.trim();
                let draws = match key.split_once('-') {
                    Some((a, b)) => match (a.parse::<u32>(), b.parse::<u32>()) {
                        (Ok(a), Ok(b)) if b >= a => b - a + 1,
                        _ => continue,
                    },
                    None => 1,
                };
                let Some(address) = map_value_address(value) else {
                    continue;
                };
                let p = f64::from(draws) / f64::from(n);
                match out.iter_mut().find(|(a, _)| *a == address) {
                    Some(e) => e.1 += p,
                    None => out.push((address, p)),
                }
            }
            out
        }
        [addr, ..] if split_host_port(addr).is_some() => vec![(addr.to_string(), 1.0)],
        _ => Vec::new(),
    }
}

/// `10.0.0.1 . 80` or `fd00::1 . 80` (a concatenated map value) as `IP:PORT` /
/// `[IP6]:PORT`; `10.0.0.1:80` as is.
fn map_value_address(value: &str) -> Option<String> {
    let v = value.trim();
    if let Some((ip, port)) = v.split_once(" . ") {
        let ip: IpAddr = ip.trim().parse().ok()?;
        let port: u16 = port.trim().parse().ok()?;
        return Some(match ip {
            IpAddr::V4(a) => format!("{a}:{port}"),
            IpAddr::V6(a) => format!("[{a}]:{port}"),
        });
    }
    split_host_port(v).map(|_| v.to_string())
}

/// The address an endpoint chain's name spells: `endpoint-HASH-ns/name/proto/port__IP/PORT`
/// -> `IP:PORT` (`[IP6]:PORT`).
fn endpoint_address_from_name(chain: &str) -> Option<String> {
    let (_, ep) = chain.rsplit_once("__")?;
    let (ip, port) = ep.rsplit_once('/')?;
    let ip: IpAddr = ip.parse().ok()?;
    let port: u16 = port.parse().ok()?;
    Some(match ip {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => format!("[{a}]:{port}"),
    })
}

fn firewall_chain<'a>(rec: &mut Recovery<'a>, c: &'a Chain, i: usize) {
    for r in &c.rules {
        let RuleBody::Nft(n) = &r.body else { continue };
        for s in n.statements(&r.text).iter() {
            if let StatementKind::Match { left, right, .. } = &s.kind
                && (left == "ip saddr" || left == "ip6 saddr")
            {
                let values: Vec<&Value> = match right {
                    Value::Set(v) => v.iter().collect(),
                    v => vec![v],
                };
                let b = &mut rec.builders[i];
                for v in values {
                    let range = match v {
                        Value::Prefix(a, l) => format!("{a}/{l}"),
                        Value::Single(a) if a.parse::<IpAddr>().is_ok() => {
                            if b.load_balancer_ips.iter().any(|x| x.to_string() == *a) {
                                continue;
                            }
                            format!("{a}/32")
                        }
                        _ => continue,
                    };
                    b.source_ranges.push_unique(range);
                }
                b.evidence.push(Evidence::rule(rec.table, c, r));
            }
        }
    }
}

/// `timeout 3h` / `timeout 10800s` in a set's attributes -> seconds.
fn set_timeout_seconds(s: &NftSet) -> Option<u32> {
    s.attributes
        .iter()
        .find_map(|a| a.strip_prefix("timeout "))
        .and_then(|t| parse_nft_duration(t.trim()))
}

/// nft time values: `3h`, `1d2h3m4s`, `250ms`, a bare number of seconds.
fn parse_nft_duration(t: &str) -> Option<u32> {
    if let Ok(n) = t.parse::<u32>() {
        return Some(n);
    }
    let mut total: u64 = 0;
    let mut num = String::new();
    let mut chars = t.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let n: u64 = num.parse().ok()?;
        num.clear();
        let unit = if c == 'm' && chars.peek() == Some(&'s') {
            chars.next();
            0
        } else {
            match c {
                'd' => 86400,
                'h' => 3600,
                'm' => 60,
                's' => 1,
                _ => return None,
            }
        };
        total = total.saturating_add(n.saturating_mul(unit));
    }
    if !num.is_empty() {
        return None;
    }
    u32::try_from(total).ok()
}

fn finish<'a>(rec: &mut Recovery<'a>, mut b: Builder<'a>) -> RecoveredService<'a> {
    let mut notes = std::mem::take(&mut b.notes).into_vec();
    if b.external_ambiguous {
        notes.push(
            Cow::Borrowed(
                "nftables mode sends external and load-balancer IPs to the same chain: listed as external IPs",
            ),
        );
    }
    if b.endpoints.iter().any(|e| e.address().is_none()) {
        notes.push(Cow::Borrowed(
            "some endpoint chains are missing: their addresses are unknown",
        ));
    }
    if b.affinity == Some(0) {
        notes.push(Cow::Borrowed(
            "ClientIP affinity set found but its timeout could not be read",
        ));
    }
    // Endpoint chain hashes.
    if let (Some(name), Some(proto)) = (&b.name, &b.protocol)
        && let Some((ns, svc, port)) = split_service_port_name(name)
    {
        for e in &b.endpoints {
            if let (Some(chain), Some(addr)) = (e.chain(), e.address()) {
                if chain.ends_with("...") {
                    continue;
                }
                let expected =
                    nft_endpoint_chain_name(NftChainPrefix::Endpoint, ns, svc, proto, port, addr);
                if expected != chain {
                    rec.mismatches.push(NameMismatch {
                        chain,
                        service: format!("{name} ({proto})"),
                        endpoint: Some(addr.to_string()),
                        expected,
                        evidence: e.evidence().first().unwrap_or(Evidence::named(chain)),
                    });
                }
            }
        }
    }
    let mut endpoints = b.endpoints;
    if endpoints.iter().any(|e| e.local.is_some()) {
        for e in &mut endpoints {
            e.local.get_or_insert(false);
        }
    }
    RecoveredService {
        name_source: b.name_source.unwrap_or(NameSource::Unnamed),
        name: b.name,
        protocol: b.protocol,
        cluster_ip: b.cluster_ip,
        port: b.port,
        node_ports: b.node_ports,
        external_ips: b.external_ips,
        load_balancer_ips: b.load_balancer_ips,
        load_balancer_source_ranges: b.source_ranges,
        health_check_node_port: None,
        session_affinity_seconds: b.affinity,
        internal_traffic_local: b.internal_local,
        external_traffic_local: b.external_local,
        endpoints,
        no_endpoints: b.no_endpoints,
        chains: b.chains,
        evidence: b.evidence,
        notes: notes.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A builder is at least as large as the service it becomes (and as aligned), so
    /// that `collect` turns the builders' block into the services' (it takes a new
    /// block otherwise: 2.7 MiB more on a 10k-service map's peak).
    #[test]
    fn services_are_collected_into_the_builders_block() {
        use std::mem::{align_of, size_of};
        assert!(
            size_of::<Builder>() >= size_of::<RecoveredService>(),
            "Builder {} bytes, RecoveredService {}",
            size_of::<Builder>(),
            size_of::<RecoveredService>()
        );
        assert_eq!(align_of::<Builder>(), align_of::<RecoveredService>());
        let builders: Vec<Builder> = (0..8).map(|_| Builder::default()).collect();
        let block = builders.as_ptr() as usize;
        let table = Table::new(
            Family::Ip,
            Backend::Nftables,
            "kube-proxy",
            plumb_ruleset::Location::default(),
        );
        let mut rec = Recovery {
            table: &table,
            builders: Vec::new(),
            by_name: FastMap::default(),
            chains: ChainIndex::new(&[]),
            mismatches: Vec::new(),
        };
        let services: Vec<RecoveredService> =
            builders.into_iter().map(|b| finish(&mut rec, b)).collect();
        assert_eq!(services.as_ptr() as usize, block, "a new block was taken");
    }

    #[test]
    fn chain_names_split() {
        let (p, base) = split_chain("service-P6J77WGM-riset/hellopod-np-svc/tcp/").unwrap();
        assert_eq!(p, NftChainPrefix::Service);
        assert_eq!(
            base_parts(base),
            Some(("riset", "hellopod-np-svc", "tcp", ""))
        );
        let (p, base) =
            split_chain("endpoint-VNXJG24O-riset/hellopod-np-svc/tcp/__10.42.2.218/8080").unwrap();
        assert_eq!(p, NftChainPrefix::Endpoint);
        assert_eq!(
            base_parts(base),
            Some(("riset", "hellopod-np-svc", "tcp", ""))
        );
        assert!(split_chain("services").is_none());
        assert!(split_chain("service-endpoints-check").is_none());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_nft_duration("3h"), Some(10800));
        assert_eq!(parse_nft_duration("10800s"), Some(10800));
        assert_eq!(parse_nft_duration("1d2h3m4s"), Some(93784));
        assert_eq!(parse_nft_duration("250ms"), Some(0));
        assert_eq!(parse_nft_duration("x"), None);
    }
}
