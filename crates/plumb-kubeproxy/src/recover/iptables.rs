//! Service-map recovery for kube-proxy's iptables mode.
//!
//! Reads what `syncProxyRules` (kubernetes `pkg/proxy/iptables/proxier.go`) writes, in the
//! order a packet meets it:
//! - nat `KUBE-SERVICES`: one rule per ClusterIP / external IP / load-balancer IP jumping to
//!   `KUBE-SVC-*`, `KUBE-SVL-*`, `KUBE-EXT-*` or `KUBE-FW-*` (comment `NAME cluster IP`, ...);
//! - nat `KUBE-NODEPORTS`: `--dport NODEPORT -j KUBE-EXT-*`;
//! - `KUBE-SVC-*` / `KUBE-SVL-*`: the `statistic --probability` cascade to `KUBE-SEP-*`
//!   (and `recent --rcheck` rules for ClientIP affinity); `KUBE-SEP-*` ends in `DNAT`;
//! - `KUBE-EXT-*`: a `pod traffic for ...` short-circuit means `externalTrafficPolicy: Local`;
//! - `KUBE-FW-*`: `-s RANGE -j KUBE-EXT-*` rules are `loadBalancerSourceRanges`;
//! - filter `KUBE-SERVICES` / `KUBE-EXTERNAL-SERVICES`: `has no endpoints` REJECT and
//!   `has no local endpoints` DROP; filter `KUBE-NODEPORTS`: health-check node ports.
//!
//! Everything is keyed by the 16-character hash shared by a service port's SVC/SVL/EXT/FW
//! chains, so rules without comments still land on the right service.

use super::{
    Evidence, NameMismatch, NameSource, NoEndpoints, ProxyMode, Quotes, RecoveredEndpoint,
    RecoveredService, ServiceMap, host_addr, sort_in_place_by, split_service_port_name,
};
use crate::chain_name::{
    ChainPrefix, chain_matches_endpoint, endpoint_chain_name, parse_chain_name,
    port_proto_hash_bytes,
};
use plumb_ruleset::fasthash::FastMap;
use plumb_ruleset::iptables::listing::{ListedMatch, ListedRule, Negatable};
use plumb_ruleset::iptables::{XtBuf, XtViewOf};
use plumb_ruleset::parallel::map_chunks;
use plumb_ruleset::{Backend, Chain, Family, Rule, RuleBody, Ruleset, Table};
use std::borrow::Cow;
use std::net::IpAddr;

/// What a kube-proxy comment says about the rule (the name is returned alongside).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Says<'c> {
    ClusterIp,
    ExternalIp,
    LoadBalancerIp,
    NoEndpoints,
    NoLocalEndpoints,
    HealthCheck,
    /// `NAME -> 10.42.0.5:8443` (endpoint choice).
    Endpoint(&'c str),
    /// Just `NAME` (endpoint chains, NodePorts).
    Bare,
    PodTraffic,
    /// Other comments of EXT/FW chains that only carry the name.
    Other,
}

/// Reads a kube-proxy comment: the service port name and what the rule is for.
fn read_comment(c: &str) -> Option<(&str, Says<'_>)> {
    const SUFFIXES: &[(&str, Says<'static>)] = &[
        (" cluster IP", Says::ClusterIp),
        (" external IP", Says::ExternalIp),
        (" loadbalancer IP", Says::LoadBalancerIp),
        (" has no endpoints", Says::NoEndpoints),
        (" has no local endpoints", Says::NoLocalEndpoints),
        (" health check node port", Says::HealthCheck),
    ];
    const WRAPPED: &[(&str, &str, Says<'static>)] = &[
        (
            "pod traffic for ",
            " external destinations",
            Says::PodTraffic,
        ),
        (
            "masquerade traffic for ",
            " external destinations",
            Says::Other,
        ),
        (
            "masquerade LOCAL traffic for ",
            " external destinations",
            Says::Other,
        ),
        (
            "route LOCAL traffic for ",
            " external destinations",
            Says::Other,
        ),
        (
            "other traffic to ",
            " will be dropped by KUBE-PROXY-FIREWALL",
            Says::Other,
        ),
    ];
    let named = |n: &str| split_service_port_name(n).is_some();
    for (suffix, says) in SUFFIXES {
        if let Some(n) = c.strip_suffix(suffix)
            && named(n)
        {
            return Some((n, *says));
        }
    }
    for (prefix, suffix, says) in WRAPPED {
        if let Some(n) = c.strip_prefix(prefix).and_then(|r| r.strip_suffix(suffix))
            && named(n)
        {
            return Some((n, *says));
        }
    }
    if let Some((n, addr)) = c.split_once(" -> ")
        && named(n)
    {
        return Some((n, Says::Endpoint(addr)));
    }
    if let Some((n, _)) = c.split_once(" traffic not accepted by ")
        && named(n)
    {
        return Some((n, Says::Other));
    }
    named(c).then_some((c, Says::Bare))
}

/// Small accessors over a rule, indexed in an [`XtBuf`]: recovery reads every
/// kube-proxy rule once, so it neither allocates an index per rule nor makes the rules
/// keep one (strings read borrow the rule text, `'a`, not the buffer, `'b`). The text
/// is the one the caller read (`rule.text.read()`), which keeps nothing of a packed
/// text; what recovery keeps of it is made to last with `RuleText::lasting`. A rule read
/// from an `iptables -L` listing answers the same questions from its columns and the
/// option text plumb recognised (`tcp dpt:53`, `to:10.244.0.11:80`, `statistic mode
/// random probability 0.5`, `/* comment */`).
struct R<'b, 'a> {
    rule: &'a Rule,
    v: Body<'b, 'a>,
}

enum Body<'b, 'a> {
    Xt(XtViewOf<'b, 'a>),
    Listed(&'a ListedRule),
}

/// A listing's address column as an address (`None` for any: `0.0.0.0/0`, `anywhere`).
fn listed_addr(n: &Negatable) -> Option<(bool, Cow<'_, str>)> {
    match &*n.value {
        "0.0.0.0/0" | "::/0" | "anywhere" | "" => None,
        v => Some((n.negated, Cow::Borrowed(v))),
    }
}

/// A port as a listing made without `-n` prints it (`https`, `domain`): the services
/// kube-proxy's own and common Services use. Numbers parse as themselves.
fn listed_port(p: &str) -> Option<u16> {
    if let Ok(n) = p.parse() {
        return Some(n);
    }
    Some(match p {
        "http" | "www" => 80,
        "https" => 443,
        "domain" => 53,
        "ssh" => 22,
        "redis" => 6379,
        "mysql" => 3306,
        "postgresql" => 5432,
        "kubernetes" => 6443,
        _ => return None,
    })
}

impl<'b, 'a: 'b> R<'b, 'a> {
    fn new(rule: &'a Rule, text: &'a str, buf: &'b mut XtBuf) -> Option<R<'b, 'a>> {
        let v = match &rule.body {
            RuleBody::Approximate(l) => Body::Listed(l),
            _ => Body::Xt(rule.xt_of(text, buf)?),
        };
        Some(R { rule, v })
    }

    fn target(&self) -> Option<&'a str> {
        match &self.v {
            Body::Xt(v) => v.target().map(|t| t.name()),
            Body::Listed(l) => l.target.as_deref(),
        }
    }

    /// A generic option (`-s`, `-d`, `-p`): negated, value.
    fn generic(&self, short: &str) -> Option<(bool, Cow<'a, str>)> {
        match &self.v {
            Body::Xt(v) => {
                let o = v.generic_option(short)?;
                Some((o.negated(), o.arg(0)?))
            }
            Body::Listed(l) => match short {
                "-s" => listed_addr(&l.source),
                "-d" => listed_addr(&l.destination),
                "-p" => {
                    let p = match &*l.protocol.value {
                        "all" | "0" | "" => return None,
                        "6" => "tcp",
                        "17" => "udp",
                        "132" => "sctp",
                        p => p,
                    };
                    Some((l.protocol.negated, Cow::Borrowed(p)))
                }
                _ => None,
            },
        }
    }

    fn has_match(&self, name: &str) -> bool {
        match &self.v {
            Body::Xt(v) => v.match_named(name).is_some(),
            Body::Listed(l) => l.matches.iter().any(|m| {
                matches!(
                    (m, name),
                    (ListedMatch::AddrType { .. }, "addrtype")
                        | (ListedMatch::Statistic { .. }, "statistic")
                        | (ListedMatch::Recent { .. }, "recent")
                )
            }),
        }
    }

    fn dst_host(&self) -> Option<IpAddr> {
        match self.generic("-d")? {
            (false, d) => host_addr(&d),
            _ => None,
        }
    }

    fn protocol(&self) -> Option<String> {
        match self.generic("-p")? {
            (false, p) => Some(p.to_ascii_lowercase()),
            _ => None,
        }
    }

    fn dport(&self) -> Option<u16> {
        match &self.v {
            Body::Xt(v) => v.matches().find_map(|m| {
                let o = m
                    .option("--dport")
                    .or_else(|| m.option("--destination-port"))?;
                if o.negated() {
                    return None;
                }
                o.arg(0)?.parse().ok()
            }),
            Body::Listed(l) => l.matches.iter().find_map(|m| match m {
                ListedMatch::Ports {
                    destination: Some(d),
                    ..
                } if !d.negated && d.last.is_none() => listed_port(&d.first),
                _ => None,
            }),
        }
    }

    fn comment(&self) -> Option<Cow<'a, str>> {
        match &self.v {
            Body::Xt(v) => v.comments().next(),
            Body::Listed(l) => l.comment.as_deref().map(Cow::Borrowed),
        }
    }

    fn probability(&self) -> Option<f64> {
        match &self.v {
            Body::Xt(v) => {
                let m = v.match_named("statistic")?;
                if m.option("--mode").and_then(|o| o.arg(0)).as_deref() != Some("random") {
                    return None;
                }
                m.option("--probability")?.arg(0)?.parse().ok()
            }
            Body::Listed(l) => l.matches.iter().find_map(|m| match m {
                ListedMatch::Statistic {
                    mode,
                    negated: false,
                    probability: Some(p),
                    ..
                } if mode == "random" => p.parse().ok(),
                _ => None,
            }),
        }
    }

    /// `-m recent --rcheck --seconds N`: the affinity timeout.
    fn recent_check_seconds(&self) -> Option<u32> {
        match &self.v {
            Body::Xt(v) => {
                let m = v.match_named("recent")?;
                m.option("--rcheck")?;
                m.option("--seconds")?.arg(0)?.parse().ok()
            }
            Body::Listed(l) => l.matches.iter().find_map(|m| match m {
                ListedMatch::Recent {
                    command,
                    seconds: Some(s),
                    negated: false,
                    ..
                } if command == "CHECK" => s.parse().ok(),
                _ => None,
            }),
        }
    }

    fn dst_type_local(&self) -> bool {
        match &self.v {
            Body::Xt(v) => v.match_named("addrtype").is_some_and(|m| {
                m.option("--dst-type")
                    .and_then(|o| o.arg(0))
                    .is_some_and(|t| t == "LOCAL")
            }),
            Body::Listed(l) => l.matches.iter().any(|m| {
                matches!(m, ListedMatch::AddrType { destination_type: Some(d), .. }
                    if !d.negated && &*d.value == "LOCAL")
            }),
        }
    }

    fn dnat_to(&self) -> Option<Cow<'a, str>> {
        if self.target()? != "DNAT" {
            return None;
        }
        match &self.v {
            Body::Xt(v) => v.target()?.option("--to-destination")?.arg(0),
            Body::Listed(l) => l.nat_to().first().cloned().map(Cow::Owned),
        }
    }
}

/// A service port being recovered: the service as read so far and what `finish`
/// still needs. The service is filled in place so that the map is the builders' own
/// block (no second copy of 10k services at the peak of `plumb services`). The hash
/// its chains share is read from its first chain (see [`Builder::hash`]) rather than
/// kept: 17 bytes more made every builder, and so the map's block, 16 bytes larger.
struct Builder<'a> {
    ambiguous_external: bool,
    unlabelled_ips: bool,
    s: RecoveredService<'a>,
}

impl Default for Builder<'_> {
    fn default() -> Self {
        Builder {
            ambiguous_external: false,
            unlabelled_ips: false,
            s: RecoveredService::empty(),
        }
    }
}

impl Builder<'_> {
    /// The hash shared by the service port's chains, when it has any. Asked when the
    /// per-service chains are read: every builder then was made for a hash by the nat
    /// rules and chains ([`Recovery::builder`]), each of which gives it a chain with
    /// that hash at once, and only chains with that hash.
    fn hash(&self) -> Option<Hash16> {
        let (_, hash) = parse_chain_name(self.s.chains.first()?)?;
        hash16(hash)
    }

    fn name(&mut self, n: &str) {
        if self.s.name.is_none() {
            self.s.name = Some(n.to_string());
        }
    }

    /// Sets the protocol from `r` unless known (reading it allocates: ask only then).
    fn protocol_from(&mut self, r: &R<'_, '_>) {
        if self.s.protocol.is_none() {
            self.s.protocol = r.protocol();
        }
    }
}

struct Group<'a> {
    family: Family,
    backend: Backend,
    nat: Option<&'a Table>,
    filter: Option<&'a Table>,
}

/// Recovers the service maps of every iptables backend and family in `ruleset`.
pub fn recover(ruleset: &Ruleset) -> Vec<ServiceMap<'_>> {
    let mut groups: Vec<Group> = Vec::new();
    for t in &ruleset.tables {
        if t.backend == Backend::Nftables || !matches!(&*t.name, "nat" | "filter") {
            continue;
        }
        let g = match groups
            .iter_mut()
            .position(|g| g.family == t.family && g.backend == t.backend)
        {
            Some(i) => &mut groups[i],
            None => {
                groups.push(Group {
                    family: t.family,
                    backend: t.backend,
                    nat: None,
                    filter: None,
                });
                groups.last_mut().expect("just pushed")
            }
        };
        // A ruleset merged from several dumps may repeat a table; the first one wins.
        match &*t.name {
            "nat" if g.nat.is_none() => g.nat = Some(t),
            "filter" if g.filter.is_none() => g.filter = Some(t),
            _ => {}
        }
    }
    groups
        .into_iter()
        .filter(has_kube_proxy_rules)
        .map(recover_group)
        .collect()
}

fn has_kube_proxy_rules(g: &Group) -> bool {
    let svc_chain = |t: &Table| {
        t.chains.iter().any(|c| {
            &*c.name == "KUBE-SERVICES" && !c.rules.is_empty()
                || parse_chain_name(&c.name).is_some()
        })
    };
    g.nat.is_some_and(svc_chain) || g.filter.is_some_and(svc_chain)
}

/// A kube-proxy chain hash (16 base32 characters), held inline: map keys that are not
/// pointers into the input compare without a cache miss, and 40k lookups add up.
type Hash16 = [u8; 16];

fn hash16(hash: &str) -> Option<Hash16> {
    hash.as_bytes().try_into().ok()
}

struct Recovery<'a> {
    builders: Vec<Builder<'a>>,
    /// Builders by the hash their chains share (or kube-proxy's hash of the name a
    /// filter rule's comment gives).
    by_hash: FastMap<Hash16, usize>,
    /// Builders for filter rules that name a service without a protocol.
    by_other_key: FastMap<String, usize>,
    /// nat's per-service and endpoint chains by prefix and hash.
    nat_chains: NatChains<'a>,
}

impl<'a> Recovery<'a> {
    /// Adds a builder. The block grows by an eighth, not by doubling: the builders'
    /// block becomes the map's (see `recover_group`), so its unused part would stay
    /// for as long as the map (up to 2.7 MiB on a 10k-service node).
    fn push(&mut self, b: Builder<'a>) {
        if self.builders.len() == self.builders.capacity() {
            self.builders
                .reserve_exact(self.builders.capacity() / 8 + 16);
        }
        self.builders.push(b);
    }

    /// The builder of the service port whose chains carry `hash`.
    fn builder(&mut self, hash: Hash16) -> usize {
        let next = self.builders.len();
        let i = *self.by_hash.entry(hash).or_insert(next);
        if i == next {
            self.push(Builder::default());
        }
        i
    }

    /// The builder for a rule that names its service only in a comment (filter rules).
    fn builder_for_name(&mut self, name: &str, protocol: Option<&str>, r: &R<'_, '_>) -> usize {
        if let Some(p) = protocol {
            return self.builder(port_proto_hash_bytes(name, p));
        }
        let key = format!("{name}|{}", r.rule.text);
        let next = self.builders.len();
        let i = *self.by_other_key.entry(key).or_insert(next);
        if i == next {
            self.push(Builder::default());
        }
        i
    }
}

/// Services per worker thread below which recovery stays on one thread.
const MIN_SERVICES_PER_WORKER: usize = 1024;

fn recover_group(g: Group<'_>) -> ServiceMap<'_> {
    let mut rec = Recovery {
        builders: Vec::new(),
        by_hash: FastMap::default(),
        by_other_key: FastMap::default(),
        nat_chains: NatChains::default(),
    };
    let mut buf = XtBuf::default();
    if let Some(nat) = g.nat {
        rec.nat_chains = NatChains::new(&nat.chains);
    }
    // One builder per hash of the nat table's service chains, and at most one per rule
    // of the filter chains read, in one block of that size: growing it while the
    // endpoints are read would hold two copies at the peak of `plumb services`, and the
    // block becomes the map's.
    let filter_rules_read: usize = g.filter.map_or(0, |t| {
        t.chains
            .iter()
            .filter(|c| FILTER_CHAINS.contains(&&*c.name))
            .map(|c| c.rules.len())
            .sum()
    });
    rec.builders
        .reserve_exact(rec.nat_chains.service_ports() + filter_rules_read);
    if let Some(nat) = g.nat {
        if let Some(c) = nat.chain("KUBE-SERVICES") {
            nat_services(&mut rec, nat, c, &mut buf);
        }
        if let Some(c) = nat.chain("KUBE-NODEPORTS") {
            nat_nodeports(&mut rec, nat, c, &mut buf);
        }
        // Chains nothing in KUBE-SERVICES/NODEPORTS reached (stale, or reached only via EXT).
        for c in &nat.chains {
            if let Some((prefix, hash)) = parse_chain_name(&c.name)
                && prefix != ChainPrefix::Sep
                && let Some(hash) = hash16(hash)
            {
                let i = rec.builder(hash);
                rec.builders[i].s.chains.push_unique(&*c.name);
            }
        }
    }
    // Per-service chains: each service port reads only its own chains, so the ports are
    // split over the cores (most of the work on a 10k-service node).
    // Without a nat table no service port has chains to read.
    if let Some(nat) = g.nat {
        let nat_chains = &rec.nat_chains;
        map_chunks(&mut rec.builders, MIN_SERVICES_PER_WORKER, |chunk| {
            // Two index buffers: the endpoint cascade reads a SEP rule while it holds an
            // SVC rule.
            let mut bufs = [XtBuf::default(), XtBuf::default()];
            for b in chunk {
                if let Some(hash) = b.hash() {
                    service_chains(nat_chains, nat, hash, b, &mut bufs);
                }
            }
        });
    }
    if let Some(filter) = g.filter {
        filter_rules(&mut rec, filter, &mut buf);
    }
    let parts = map_chunks(&mut rec.builders, MIN_SERVICES_PER_WORKER, |chunk| {
        let mut mismatches = Vec::new();
        for b in chunk {
            finish(&mut mismatches, b);
        }
        mismatches
    });
    let name_mismatches = parts.into_iter().flatten().collect();
    // The services are taken out of the builders' own block (`collect` reuses it), and
    // the chain indexes are freed first: no second copy of the map at the peak of
    // `plumb services`.
    let builders = std::mem::take(&mut rec.builders);
    drop(rec);
    let mut services: Vec<RecoveredService> = builders.into_iter().map(|b| b.s).collect();
    sort_in_place_by(&mut services, |a, b| {
        (a.name.is_none(), &a.name, a.chains.first()).cmp(&(
            b.name.is_none(),
            &b.name,
            b.chains.first(),
        ))
    });
    ServiceMap {
        mode: ProxyMode::Iptables,
        family: g.family,
        backend: g.backend,
        services,
        name_mismatches,
    }
}

/// The per-service chain (SVC, SVL, EXT, FW: not an endpoint's SEP) a capture rule of
/// KUBE-SERVICES or KUBE-NODEPORTS jumps to, with its prefix and hash.
fn service_target<'a>(r: &R<'_, 'a>) -> Option<(&'a str, ChainPrefix, Hash16)> {
    let target = r.target()?;
    let (prefix, hash) = parse_chain_name(target)?;
    if prefix == ChainPrefix::Sep {
        return None;
    }
    Some((target, prefix, hash16(hash)?))
}

/// The jump target of `rule` (read from `text`, the rule's text as read) as a string
/// that lasts as long as the ruleset: a part of the rule's text, or a listed rule's
/// target column.
fn lasting_target<'a>(rule: &'a Rule, text: &str, target: &str) -> Option<&'a str> {
    rule.text
        .lasting(text, target)
        .or_else(|| match &rule.body {
            RuleBody::Approximate(l) => l.target.as_deref().filter(|t| *t == target),
            _ => None,
        })
}

/// [`lasting_target`], else the name of the chain it names, found by `prefix` and
/// `hash`.
fn lasting_service_target<'a>(
    rule: &'a Rule,
    text: &str,
    target: &str,
    nat_chains: &NatChains<'a>,
    prefix: ChainPrefix,
    hash: Hash16,
) -> Option<&'a str> {
    lasting_target(rule, text, target).or_else(|| {
        let c = nat_chains.get(&(prefix, hash))?;
        (*c.name == *target).then_some(&*c.name)
    })
}

fn nat_services<'a>(rec: &mut Recovery<'a>, table: &'a Table, chain: &'a Chain, buf: &mut XtBuf) {
    // One buffer for the texts read back (packed texts: see `RuleText::read_in`).
    let mut read = String::new();
    for rule in &chain.rules {
        let text = rule.text.read_in(&mut read);
        let Some(r) = R::new(rule, text, buf) else {
            continue;
        };
        let Some((target, prefix, hash)) = service_target(&r) else {
            continue;
        };
        let target = lasting_service_target(rule, text, target, &rec.nat_chains, prefix, hash);
        let i = rec.builder(hash);
        let comment = r.comment();
        let said = comment.as_deref().and_then(read_comment);
        let b = &mut rec.builders[i];
        if let Some(target) = target {
            b.s.chains.push_unique(target);
        }
        b.s.evidence.push(Evidence::rule(table, chain, rule));
        b.protocol_from(&r);
        if let Some((n, _)) = said {
            b.name(n);
        }
        let says = said.map(|(_, s)| s);
        let ip = r.dst_host();
        let kind = match (says, prefix) {
            (Some(s @ (Says::ClusterIp | Says::ExternalIp | Says::LoadBalancerIp)), _) => s,
            // Without a comment (an nft listing shows none) the first address that
            // leads to the service chain is its ClusterIP; later ones are external or
            // load-balancer IPs, which only the comment tells apart.
            (None, ChainPrefix::Svc | ChainPrefix::Svl)
                if b.s.cluster_ip.is_some() && ip.is_some() && b.s.cluster_ip != ip =>
            {
                b.unlabelled_ips = true;
                Says::ExternalIp
            }
            (_, ChainPrefix::Svc | ChainPrefix::Svl) => Says::ClusterIp,
            (_, ChainPrefix::Fw) => Says::LoadBalancerIp,
            _ => {
                b.unlabelled_ips = true;
                Says::ExternalIp
            }
        };
        match kind {
            Says::ClusterIp => {
                if b.s.cluster_ip.is_none() {
                    b.s.cluster_ip = ip;
                    b.s.port = r.dport().or(b.s.port);
                }
                if prefix == ChainPrefix::Svl {
                    b.s.internal_traffic_local = true;
                }
            }
            Says::LoadBalancerIp => {
                if let Some(ip) = ip {
                    b.s.load_balancer_ips.push_unique(ip);
                }
                b.s.port = b.s.port.or(r.dport());
            }
            _ => {
                if let Some(ip) = ip {
                    b.s.external_ips.push_unique(ip);
                }
                b.s.port = b.s.port.or(r.dport());
            }
        }
    }
}

fn nat_nodeports<'a>(rec: &mut Recovery<'a>, table: &'a Table, chain: &'a Chain, buf: &mut XtBuf) {
    // One buffer for the texts read back (packed texts: see `RuleText::read_in`).
    let mut read = String::new();
    for rule in &chain.rules {
        let text = rule.text.read_in(&mut read);
        let Some(r) = R::new(rule, text, buf) else {
            continue;
        };
        let Some((target, prefix, hash)) = service_target(&r) else {
            continue;
        };
        let target = lasting_service_target(rule, text, target, &rec.nat_chains, prefix, hash);
        let i = rec.builder(hash);
        let b = &mut rec.builders[i];
        if let Some(target) = target {
            b.s.chains.push_unique(target);
        }
        if let Some((n, _)) = r.comment().as_deref().and_then(read_comment) {
            b.name(n);
        }
        b.protocol_from(&r);
        if let Some(p) = r.dport() {
            if !b.s.node_ports.contains(&p) {
                b.s.evidence.push(Evidence::rule(table, chain, rule));
            }
            b.s.node_ports.push_unique(p);
        }
    }
}

/// nat's per-service and endpoint chains by prefix and hash. Holds only each chain's
/// index (4 bytes; the key is read again from the chain's name): a map holding keys
/// and references took 32 bytes a chain, 4 MiB on a 10k-service node's 58k chains at
/// the peak of `plumb services`.
#[derive(Default)]
struct NatChains<'a> {
    chains: &'a [Chain],
    indexes: hashbrown::HashTable<u32>,
}

impl<'a> NatChains<'a> {
    fn key(c: &Chain) -> Option<(ChainPrefix, Hash16)> {
        let (prefix, hash) = parse_chain_name(&c.name)?;
        Some((prefix, hash16(hash)?))
    }

    fn hash(key: &(ChainPrefix, Hash16)) -> u64 {
        use std::hash::{BuildHasher, BuildHasherDefault};
        BuildHasherDefault::<plumb_ruleset::fasthash::FxHasher>::default().hash_one(key)
    }

    /// The kube-proxy chains of `chains`; of two with one key, the later.
    fn new(chains: &'a [Chain]) -> NatChains<'a> {
        let count = chains.iter().filter(|c| Self::key(c).is_some()).count();
        let mut indexes = hashbrown::HashTable::with_capacity(count);
        let rehash = |&j: &u32| Self::key(&chains[j as usize]).map_or(0, |k| Self::hash(&k));
        for (i, c) in chains.iter().enumerate() {
            let Some(key) = Self::key(c) else { continue };
            // Chains are fewer than 2^32 (the parser refuses inputs of 4 GiB).
            let i = i as u32;
            let h = Self::hash(&key);
            match indexes.find_mut(h, |&j: &u32| Self::key(&chains[j as usize]) == Some(key)) {
                Some(j) => *j = i,
                None => {
                    indexes.insert_unique(h, i, rehash);
                }
            }
        }
        NatChains { chains, indexes }
    }

    /// How many service ports the chains serve: distinct hashes over the SVC, SVL, EXT
    /// and FW chains (sorted and counted: no lookups).
    fn service_ports(&self) -> usize {
        let mut hashes: Vec<Hash16> = self
            .indexes
            .iter()
            .filter_map(|&j| Self::key(&self.chains[j as usize]))
            .filter(|&(prefix, _)| prefix != ChainPrefix::Sep)
            .map(|(_, hash)| hash)
            .collect();
        hashes.sort_unstable();
        hashes.dedup();
        hashes.len()
    }

    fn get(&self, key: &(ChainPrefix, Hash16)) -> Option<&'a Chain> {
        let chains = self.chains;
        self.indexes
            .find(Self::hash(key), |&j| {
                Self::key(&chains[j as usize]).as_ref() == Some(key)
            })
            .map(|&j| &chains[j as usize])
    }
}

/// Reads the SVC, SVL, EXT and FW chains of one service port into its builder.
fn service_chains<'a>(
    nat_chains: &NatChains<'a>,
    table: &'a Table,
    hash: Hash16,
    b: &mut Builder<'a>,
    bufs: &mut [XtBuf; 2],
) {
    let chain = |p: ChainPrefix| nat_chains.get(&(p, hash));
    let (svc, svl, ext, fw) = (
        chain(ChainPrefix::Svc),
        chain(ChainPrefix::Svl),
        chain(ChainPrefix::Ext),
        chain(ChainPrefix::Fw),
    );
    let mut eps: Vec<RecoveredEndpoint<'a>> = Vec::new();
    for (c, local) in [(svc, false), (svl, true)] {
        let Some(c) = c else { continue };
        let mut cascade = endpoint_cascade(nat_chains, table, c, b, bufs);
        if eps.is_empty() {
            // The cascade holds each endpoint chain once: it is the list itself.
            if local {
                for e in &mut cascade {
                    e.local = Some(true);
                }
            }
            eps = cascade;
            continue;
        }
        for e in cascade {
            match eps.iter_mut().find(|x| x.chain() == e.chain()) {
                Some(x) => {
                    if local {
                        x.local = Some(true);
                    }
                }
                None => eps.push(RecoveredEndpoint {
                    local: local.then_some(true),
                    ..e
                }),
            }
        }
    }
    if svl.is_some() {
        for e in &mut eps {
            e.local.get_or_insert(false);
        }
    }
    if let Some(c) = ext {
        // One buffer for the texts read back (packed texts: see `RuleText::read_in`).
        let mut read = String::new();
        for rule in &c.rules {
            let text = rule.text.read_in(&mut read);
            let Some(r) = R::new(rule, text, &mut bufs[0]) else {
                continue;
            };
            let comment = r.comment();
            let said = comment.as_deref().and_then(read_comment).map(|(_, s)| s);
            let to = r.target().and_then(parse_chain_name).map(|(p, _)| p);
            let pod_shortcut = said == Some(Says::PodTraffic)
                || (to == Some(ChainPrefix::Svc)
                    && r.generic("-s").is_some_and(|(neg, _)| !neg)
                    && !r.has_match("addrtype"));
            if pod_shortcut || to == Some(ChainPrefix::Svl) {
                b.s.external_traffic_local = true;
            }
        }
    }
    if let Some(c) = fw {
        // One buffer for the texts read back (packed texts: see `RuleText::read_in`).
        let mut read = String::new();
        for rule in &c.rules {
            let text = rule.text.read_in(&mut read);
            let Some(r) = R::new(rule, text, &mut bufs[0]) else {
                continue;
            };
            if r.target().and_then(parse_chain_name).map(|(p, _)| p) != Some(ChainPrefix::Ext) {
                continue;
            }
            let Some((false, src)) = r.generic("-s") else {
                continue;
            };
            // kube-proxy adds `-s LB_IP` rules ("allow from node") after the ranges.
            if host_addr(&src).is_some_and(|ip| b.s.load_balancer_ips.contains(&ip)) {
                continue;
            }
            let range = match src.split_once('/') {
                Some(_) => src.into_owned(),
                None => format!("{src}/32"),
            };
            b.s.load_balancer_source_ranges.push_unique(range);
            b.s.evidence.push(Evidence::rule(table, c, rule));
        }
    }
    b.s.endpoints = eps.into();
}

/// The endpoints a `KUBE-SVC-*`/`KUBE-SVL-*` chain picks from, with their probabilities.
fn endpoint_cascade<'a>(
    nat_chains: &NatChains<'a>,
    table: &'a Table,
    chain: &'a Chain,
    b: &mut Builder<'a>,
    bufs: &mut [XtBuf; 2],
) -> Vec<RecoveredEndpoint<'a>> {
    let [buf, sep_buf] = bufs;
    // One endpoint per rule that jumps to an endpoint chain (the parser recorded the
    // targets: nothing is indexed to count them): the map's biggest vectors are made
    // at their size, neither grown by doubling nor copied to fit. The targets are
    // found once (a packed text's target is a word found by walking its line).
    let targets: Vec<Option<&str>> = chain
        .rules
        .iter()
        .map(|r| r.xt_target().map(|t| t.name))
        .collect();
    let seps = targets
        .iter()
        .filter(|t| t.is_none_or(|t| t.starts_with(ChainPrefix::Sep.as_str())))
        .count();
    let mut out: Vec<RecoveredEndpoint<'a>> = Vec::with_capacity(seps);
    let mut remaining = 1.0f64;
    let mut exact = true;
    // Buffers for the texts read back (packed texts: see `RuleText::read_in`).
    let (mut read, mut sep_read) = (String::new(), String::new());
    for (rule, target) in chain.rules.iter().zip(targets) {
        // The masquerade-mark rule only fills in what KUBE-SERVICES did not say (name,
        // protocol, ClusterIP): skip it unindexed when all of that is known already.
        // The recorded target is a word: a packed text is not read back for it.
        if target == Some("KUBE-MARK-MASQ")
            && b.s.name.is_some()
            && b.s.protocol.is_some()
            && b.s.cluster_ip.is_some()
        {
            continue;
        }
        let text = rule.text.read_in(&mut read);
        let Some(r) = R::new(rule, text, buf) else {
            continue;
        };
        let Some(target) = r.target() else { continue };
        if target == "KUBE-MARK-MASQ" {
            if b.s.name.is_none()
                && let Some((n, _)) = r.comment().as_deref().and_then(read_comment)
            {
                b.name(n);
            }
            if b.s.protocol.is_none() {
                b.s.protocol = r.protocol();
            }
            if b.s.cluster_ip.is_none() {
                b.s.cluster_ip = r.dst_host();
                b.s.port = b.s.port.or(r.dport());
            }
            continue;
        }
        if !matches!(parse_chain_name(target), Some((ChainPrefix::Sep, _))) {
            continue;
        }
        if let Some(s) = r.recent_check_seconds() {
            // ClientIP affinity: returning clients go straight to their endpoint.
            b.s.session_affinity_seconds = Some(s);
            continue;
        }
        let p = match r.probability() {
            Some(p) => p.clamp(0.0, 1.0),
            None if r.has_match("statistic") => {
                exact = false;
                0.0
            }
            None => 1.0,
        };
        let effective = remaining * p;
        remaining *= 1.0 - p;
        let mut evidence = Quotes::one(Evidence::rule(table, chain, rule));
        let mut address = None;
        let sep = parse_chain_name(target)
            .and_then(|(prefix, hash)| nat_chains.get(&(prefix, hash16(hash)?)));
        if let Some(sep) = sep {
            for sr in &sep.rules {
                // Only the DNAT rule says anything here (the other one marks for
                // masquerade): skip the rest without indexing them.
                // (The recorded target: a packed text is read back only for the DNAT.)
                let dnat = match &sr.body {
                    RuleBody::Xt(_) => sr.xt_target().is_some_and(|t| t.name == "DNAT"),
                    _ => sr.text.contains("DNAT"),
                };
                if !dnat {
                    continue;
                }
                let sr_text = sr.text.read_in(&mut sep_read);
                let Some(x) = R::new(sr, sr_text, sep_buf) else {
                    continue;
                };
                if let Some(to) = x.dnat_to() {
                    address = Some(match to {
                        Cow::Borrowed(a) => sr
                            .text
                            .lasting(sr_text, a)
                            .map_or_else(|| Cow::Owned(a.to_string()), Cow::Borrowed),
                        Cow::Owned(a) => Cow::Owned(a),
                    });
                    evidence.push(Evidence::rule(table, sep, sr));
                    if b.s.protocol.is_none() {
                        b.s.protocol = x.protocol();
                    }
                    if b.s.name.is_none()
                        && let Some((n, _)) = x.comment().as_deref().and_then(read_comment)
                    {
                        b.name(n);
                    }
                }
            }
        }
        if address.is_none() || b.s.name.is_none() {
            let comment = r.comment();
            if let Some((n, Says::Endpoint(addr))) = comment.as_deref().and_then(read_comment) {
                b.name(n);
                address.get_or_insert_with(|| Cow::Owned(addr.to_string()));
            }
        }
        if out.iter().any(|e| e.chain() == Some(target)) {
            continue;
        }
        // The endpoint chain's name as the chain has it when it is in the input (the
        // same text as the jump's target), else the target as the rule has it.
        let chain = sep
            .map(|c| &*c.name)
            .filter(|name| *name == target)
            .or_else(|| lasting_target(rule, text, target));
        out.push(RecoveredEndpoint::new(
            address,
            Some(effective),
            None,
            chain,
            evidence,
        ));
    }
    if !exact {
        for e in &mut out {
            e.set_probability(None);
        }
    }
    out
}

/// The filter chains whose rules name service ports.
const FILTER_CHAINS: [&str; 4] = [
    "KUBE-SERVICES",
    "KUBE-EXTERNAL-SERVICES",
    "KUBE-NODEPORTS",
    "KUBE-PROXY-FIREWALL",
];

fn filter_rules<'a>(rec: &mut Recovery<'a>, filter: &'a Table, buf: &mut XtBuf) {
    for chain in &filter.chains {
        let which = &*chain.name;
        if !FILTER_CHAINS.contains(&which) {
            continue;
        }
        // One buffer for the texts read back (packed texts: see `RuleText::read_in`).
        let mut read = String::new();
        for rule in &chain.rules {
            let text = rule.text.read_in(&mut read);
            let Some(r) = R::new(rule, text, buf) else {
                continue;
            };
            let comment = r.comment();
            if comment.is_none() && filter.nft_view && which == "KUBE-SERVICES" {
                no_endpoints_unnamed(rec, filter, chain, rule, &r);
                continue;
            }
            let Some((name, says)) = comment.as_deref().and_then(read_comment) else {
                continue;
            };
            let proto = r.protocol();
            let i = if says == Says::HealthCheck {
                // Health-check node ports are TCP whatever the service protocol is.
                let existing = ["tcp", "udp", "sctp"]
                    .iter()
                    .find_map(|p| rec.by_hash.get(&port_proto_hash_bytes(name, p)).copied());
                match existing {
                    Some(i) => i,
                    None => rec.builder_for_name(name, None, &r),
                }
            } else {
                rec.builder_for_name(name, proto.as_deref(), &r)
            };
            let b = &mut rec.builders[i];
            b.name(name);
            if says != Says::HealthCheck && b.s.protocol.is_none() {
                b.s.protocol = proto;
            }
            b.s.evidence.push(Evidence::rule(filter, chain, rule));
            match (which, says) {
                ("KUBE-SERVICES", Says::NoEndpoints | Says::NoLocalEndpoints) => {
                    b.s.cluster_ip = b.s.cluster_ip.or(r.dst_host());
                    b.s.port = b.s.port.or(r.dport());
                    if says == Says::NoEndpoints {
                        b.s.no_endpoints = Some(NoEndpoints::Reject);
                    } else {
                        b.s.internal_traffic_local = true;
                        b.s.no_endpoints.get_or_insert(NoEndpoints::DropNoLocal);
                    }
                }
                ("KUBE-EXTERNAL-SERVICES", Says::NoEndpoints | Says::NoLocalEndpoints) => {
                    if says == Says::NoEndpoints {
                        b.s.no_endpoints = Some(NoEndpoints::Reject);
                    } else {
                        b.s.external_traffic_local = true;
                        b.s.no_endpoints.get_or_insert(NoEndpoints::DropNoLocal);
                    }
                    if r.dst_type_local() {
                        if let Some(p) = r.dport() {
                            b.s.node_ports.push_unique(p);
                        }
                    } else if let Some(ip) = r.dst_host() {
                        b.s.port = b.s.port.or(r.dport());
                        if !b.s.load_balancer_ips.contains(&ip) && !b.s.external_ips.contains(&ip) {
                            b.s.external_ips.push(ip);
                            b.ambiguous_external = true;
                        }
                    }
                }
                ("KUBE-NODEPORTS", Says::HealthCheck) => {
                    b.s.health_check_node_port = r.dport();
                }
                ("KUBE-PROXY-FIREWALL", _) => {
                    if let Some(ip) = r.dst_host() {
                        b.s.external_ips.retain(|x| *x != ip);
                        b.s.load_balancer_ips.push_unique(ip);
                    }
                }
                _ => {}
            }
        }
    }
}

/// A filter `KUBE-SERVICES` rule `-d IP -p PROTO --dport N -j REJECT` read from an nft
/// listing, which does not show kube-proxy's `has no endpoints` comment: the service
/// port without endpoints it rejects for, unnamed.
fn no_endpoints_unnamed<'a>(
    rec: &mut Recovery<'a>,
    table: &'a Table,
    chain: &'a Chain,
    rule: &'a Rule,
    r: &R<'_, '_>,
) {
    let (Some("REJECT"), Some(ip), Some(proto), Some(port)) =
        (r.target(), r.dst_host(), r.protocol(), r.dport())
    else {
        return;
    };
    let key = format!("no-endpoints|{ip}|{proto}|{port}");
    let next = rec.builders.len();
    let i = *rec.by_other_key.entry(key).or_insert(next);
    if i == next {
        rec.push(Builder::default());
    }
    let b = &mut rec.builders[i];
    b.s.protocol.get_or_insert(proto);
    b.s.cluster_ip = b.s.cluster_ip.or(Some(ip));
    b.s.port = b.s.port.or(Some(port));
    b.s.no_endpoints = Some(NoEndpoints::Reject);
    b.s.evidence.push(Evidence::rule(table, chain, rule));
}

/// Completes `b.s`: exact-size vectors, the notes, the name source, and the chain-name
/// checks (each mismatch is pushed to `mismatches`).
fn finish<'a>(mismatches: &mut Vec<NameMismatch<'a>>, b: &mut Builder<'a>) {
    let s = &mut b.s;
    const UNNAMED: &str =
        "no kube-proxy comments: name unknown, service identified by its chains and rules";
    const AMBIGUOUS: &str = "no endpoints: external and load-balancer IPs are rejected alike and cannot be told apart; listed as external IPs";
    const UNLABELLED: &str =
        "a KUBE-EXT capture rule has no comment: external or load-balancer IP, listed as external";
    const PARTIAL: &str =
        "some endpoint chains are not in the input (partial payload?): their addresses are unknown";
    s.name_source = if s.name.is_some() {
        NameSource::Comment
    } else {
        NameSource::Unnamed
    };
    let partial = s.endpoints.iter().any(|e| e.address().is_none());
    let notes = [
        (s.name.is_none(), UNNAMED),
        (b.ambiguous_external, AMBIGUOUS),
        (b.unlabelled_ips, UNLABELLED),
        (partial, PARTIAL),
    ];
    // Counted first: the vector is made at its size (see `RecoveredService::notes`).
    let count = notes.iter().filter(|(on, _)| *on).count();
    let mut kept = Vec::with_capacity(count);
    kept.extend(
        notes
            .iter()
            .filter(|(on, _)| *on)
            .map(|&(_, text)| Cow::Borrowed(text)),
    );
    s.notes = kept.into();
    let first_evidence = s.evidence.first().copied();
    if let (Some(name), Some(proto)) = (&s.name, &s.protocol) {
        // Each chain name is verified once: one hash per service port, one per endpoint.
        let hash = port_proto_hash_bytes(name, proto);
        for &c in &s.chains {
            if let Some((prefix, h)) = parse_chain_name(c)
                && h.as_bytes() != hash
            {
                let hash = String::from_utf8_lossy(&hash);
                mismatches.push(NameMismatch {
                    chain: c,
                    service: format!("{name} ({proto})"),
                    endpoint: None,
                    expected: format!("{}{hash}", prefix.as_str()),
                    evidence: first_evidence.unwrap_or(Evidence::named(c)),
                });
            }
        }
        for e in &s.endpoints {
            // An address redacted by whoever posted the capture (`<master-node-ip>:6443`)
            // is not the one kube-proxy hashed: the name cannot be checked.
            if let (Some(chain), Some(addr)) = (e.chain(), e.address())
                && super::split_host_port(addr).is_some()
                && !chain_matches_endpoint(chain, name, proto, addr)
            {
                mismatches.push(NameMismatch {
                    chain,
                    service: format!("{name} ({proto})"),
                    endpoint: Some(addr.to_string()),
                    expected: endpoint_chain_name(name, proto, addr),
                    evidence: e.evidence().first().unwrap_or(Evidence::named(chain)),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A builder is its service and two flags: its block, which becomes the map's, is
    /// at most 8 bytes a service larger than the services (24 when it kept the hash),
    /// and as aligned, so that `collect` reuses it.
    #[test]
    fn a_builder_is_its_service_and_two_flags() {
        use std::mem::{align_of, size_of};
        let (b, s) = (size_of::<Builder>(), size_of::<RecoveredService>());
        assert!(b <= s + 8, "Builder {b} bytes, RecoveredService {s}");
        assert_eq!(align_of::<Builder>(), align_of::<RecoveredService>());
    }

    #[test]
    fn comments_are_read() {
        assert_eq!(
            read_comment("default/kubernetes:https cluster IP"),
            Some(("default/kubernetes:https", Says::ClusterIp))
        );
        assert_eq!(
            read_comment("ns1/svc1:p80 -> 10.180.0.1:80"),
            Some(("ns1/svc1:p80", Says::Endpoint("10.180.0.1:80")))
        );
        assert_eq!(
            read_comment("pod traffic for ns2/svc2:p80 external destinations"),
            Some(("ns2/svc2:p80", Says::PodTraffic))
        );
        assert_eq!(
            read_comment("ns5/svc5:p80 traffic not accepted by KUBE-FW-NUKIZ6OKUXPJNT4C"),
            Some(("ns5/svc5:p80", Says::Other))
        );
        assert_eq!(
            read_comment("ns2/svc2:p80"),
            Some(("ns2/svc2:p80", Says::Bare))
        );
        assert_eq!(read_comment("kubernetes service portals"), None);
    }
}
