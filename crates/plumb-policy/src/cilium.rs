//! CiliumNetworkPolicy and CiliumClusterwideNetworkPolicy (cilium.io/v2): the model,
//! how a manifest's `spec` is read into it, and the matching of one rule against one
//! peer and port.
//!
//! The semantics follow Cilium's own translation and policy code, cited where used:
//! - `pkg/k8s/apis/cilium.io/utils/utils.go` (`ParseToCiliumRule`,
//!   `getEndpointSelector`): a CNP's `endpointSelector` gets
//!   `k8s:io.kubernetes.pod.namespace=<policy namespace>` added; a `fromEndpoints` /
//!   `toEndpoints` selector that names neither the namespace label nor a namespace-labels
//!   key (`io.cilium.k8s.namespace.labels.*`) gets the policy's namespace added (CNP) or
//!   `io.kubernetes.pod.namespace Exists` (CCNP, so `{}` never selects world or the
//!   host); a selector on `reserved:` labels is left alone.
//! - `pkg/policy/api/entity.go` (`EntitySelectorMapping`, `InitEntities`): each entity
//!   is a selector on reserved labels; `cluster` is host, remote-node, init, ingress,
//!   health, unmanaged, kube-apiserver and every endpoint labelled with the local
//!   cluster's name; `all` is the wildcard.
//! - `pkg/policy/api/rule.go` `Sanitize` (tested by `TestSanitizeDefaultDeny`): a rule
//!   puts its endpoints in default deny for a direction when it has at least one allow
//!   or deny rule there, unless `enableDefaultDeny` says otherwise.
//! - `pkg/policy/api/{ingress,egress}.go` `AllowsWildcarding` and the policy language
//!   doc ("limits ... to emit packets using TCP on port 80, to any layer 3
//!   destination"): a rule with ports but no peer allows every peer on those ports; a
//!   rule with neither (`{}`) allows nothing; `toFQDNs` turns wildcarding off.
//! - Documentation/security/policy/language.rst: CIDR rules apply only to peers outside
//!   the cluster (not to pods or nodes); deny rules beat allow rules; if one rule allows
//!   a port without L7 rules, another rule's L7 rules for the same peer and port have no
//!   effect; L7 HTTP `method`/`path`/`host` are regular expressions (Envoy matches them
//!   against the whole value).

use crate::model::{IpBlock, Labels, PortRef, Requirement, Selector};
use serde::Serialize;
use serde_json::Value;

pub use crate::model::cilium::{
    CiliumPolicy, CiliumPort, CiliumRule, DnsRule, FqdnSelector, HttpRule, IcmpField, L7Rules,
    PortRule, Subject,
};

impl FqdnSelector {
    /// Whether `name` (with or without the trailing dot) is selected.
    pub fn matches(&self, name: &str) -> bool {
        self.match_name.as_deref().is_some_and(|n| dns_eq(n, name))
            || self
                .match_pattern
                .as_deref()
                .is_some_and(|p| dns_pattern(p, name))
    }

    /// How it reads in a policy.
    pub fn describe(&self) -> String {
        match (&self.match_name, &self.match_pattern) {
            (Some(n), _) => format!("matchName {n}"),
            (None, Some(p)) => format!("matchPattern {p}"),
            (None, None) => "(empty)".into(),
        }
    }
}

/// The entities Cilium knows (`pkg/policy/api/entity.go`).
pub const ENTITIES: &[&str] = &[
    "all",
    "world",
    "world-ipv4",
    "world-ipv6",
    "cluster",
    "host",
    "init",
    "ingress",
    "unmanaged",
    "remote-node",
    "health",
    "none",
    "kube-apiserver",
];

/// Whether an endpoint with Cilium labels `labels` (keys `source:key`) belongs to
/// `entity`, the cluster being named `cluster`.
pub fn entity_matches(entity: &str, labels: &Labels, cluster: &str) -> bool {
    let reserved = |name: &str| labels.contains_key(&format!("reserved:{name}"));
    match entity {
        "all" => true,
        "world" => reserved("world") || reserved("world-ipv4") || reserved("world-ipv6"),
        "cluster" => {
            [
                "host",
                "remote-node",
                "init",
                "ingress",
                "health",
                "unmanaged",
                "kube-apiserver",
            ]
            .iter()
            .any(|e| reserved(e))
                || labels
                    .get("k8s:io.cilium.k8s.policy.cluster")
                    .map(String::as_str)
                    == Some(cluster)
        }
        "none" => false,
        other => reserved(other),
    }
}

/// Sources a Cilium label key may name before `:`.
const SOURCES: &[&str] = &[
    "k8s",
    "reserved",
    "any",
    "unspec",
    "container",
    "cidr",
    "fqdn",
    "cilium-generated",
];

/// The value of selector key `key` in Cilium labels `labels` (keys `source:key`): a key
/// with a source looks in that source only, `any:` or no source in every source.
pub fn label_value<'l>(labels: &'l Labels, key: &str) -> Option<&'l String> {
    match key.split_once(':') {
        Some((src, k)) if src != "any" && SOURCES.contains(&src) => {
            labels.get(&format!("{src}:{k}"))
        }
        Some(("any", k)) => any_source(labels, k),
        _ => any_source(labels, key),
    }
}

fn any_source<'l>(labels: &'l Labels, key: &str) -> Option<&'l String> {
    labels
        .get(&format!("k8s:{key}"))
        .or_else(|| labels.get(&format!("reserved:{key}")))
}

/// Whether selector `s` selects an endpoint with Cilium labels `labels`.
pub fn selects(s: &Selector, labels: &Labels) -> bool {
    s.match_labels
        .iter()
        .all(|(k, v)| label_value(labels, k) == Some(v))
        && s.match_expressions.iter().all(|r| {
            let v = label_value(labels, &r.key);
            match r.operator.as_str() {
                "In" => v.is_some_and(|v| r.values.contains(v)),
                "NotIn" => v.is_none_or(|v| !r.values.contains(v)),
                "Exists" => v.is_some(),
                "DoesNotExist" => v.is_none(),
                _ => false,
            }
        })
}

/// The namespace label Cilium gives every pod.
pub const NAMESPACE_LABEL: &str = "io.kubernetes.pod.namespace";
/// The prefix of the namespace's labels Cilium copies onto every pod.
pub const NAMESPACE_LABELS_PREFIX: &str = "io.cilium.k8s.namespace.labels.";

/// A selector key without its source prefix (`k8s:app` -> `app`).
pub fn label_key(key: &str) -> &str {
    strip_source(key).1
}

fn strip_source(key: &str) -> (&str, &str) {
    match key.split_once(':') {
        Some((src, k)) if SOURCES.contains(&src) => (src, k),
        _ => ("any", key),
    }
}

fn has_key(s: &Selector, pred: impl Fn(&str, &str) -> bool) -> bool {
    s.match_labels.keys().any(|k| {
        let (src, k) = strip_source(k);
        pred(src, k)
    }) || s.match_expressions.iter().any(|r| {
        let (src, k) = strip_source(&r.key);
        pred(src, k)
    })
}

/// A peer selector as Cilium scopes it (`getEndpointSelector`): `namespace` is the
/// CNP's, None for a CCNP.
fn scope_peer(mut s: Selector, namespace: Option<&str>) -> Selector {
    if has_key(&s, |src, _| src == "reserved") {
        return s;
    }
    let names_namespace = has_key(&s, |src, k| {
        (src == "k8s" || src == "any") && k == NAMESPACE_LABEL
    });
    if names_namespace {
        return s;
    }
    match namespace {
        None => s.match_expressions.push(Requirement {
            key: format!("k8s:{NAMESPACE_LABEL}"),
            operator: "Exists".into(),
            values: Vec::new(),
        }),
        Some(ns) => {
            let names_ns_labels = has_key(&s, |src, k| {
                (src == "k8s" || src == "any") && k.starts_with(NAMESPACE_LABELS_PREFIX)
            });
            if !names_ns_labels {
                s.match_labels
                    .insert(format!("k8s:{NAMESPACE_LABEL}"), ns.to_string());
            }
        }
    }
    s
}

// ---------------------------------------------------------------------------
// Reading a manifest.

type R<T> = Result<T, String>;

fn known(v: &Value, fields: &[&str], at: &str) -> R<()> {
    match v.as_object() {
        Some(m) => match m.keys().find(|k| !fields.contains(&k.as_str())) {
            Some(k) => Err(format!("{at}.{k} is not a field plumb evaluates")),
            None => Ok(()),
        },
        None if v.is_null() => Ok(()),
        None => Err(format!("{at} is not a mapping")),
    }
}

fn array<'v>(v: Option<&'v Value>, at: &str) -> R<&'v [Value]> {
    match v {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(_) => Err(format!("{at} is not a list")),
    }
}

fn string(v: &Value, at: &str) -> R<String> {
    v.as_str()
        .map(String::from)
        .ok_or(format!("{at} is not a string"))
}

/// Reads one CNP/CCNP manifest into its specs. `namespace` is None for a CCNP.
pub fn read(
    v: &Value,
    kind: &'static str,
    name: &str,
    namespace: Option<&str>,
) -> R<Vec<CiliumPolicy>> {
    let mut specs = Vec::new();
    if let Some(s) = v.get("spec").filter(|s| !s.is_null()) {
        specs.push((None, s));
    }
    for (i, s) in array(v.get("specs"), "specs")?.iter().enumerate() {
        specs.push((Some(i), s));
    }
    if specs.is_empty() {
        return Err("no spec".into());
    }
    let several = specs.len() > 1;
    specs
        .into_iter()
        .enumerate()
        .map(|(n, (i, s))| {
            let at = match i {
                Some(i) => format!("specs[{i}]"),
                None => "spec".into(),
            };
            let mut p = spec(s, kind, name, namespace, &at)?;
            p.part = several.then_some(i.unwrap_or(n));
            p.spec_at = at;
            Ok(p)
        })
        .collect()
}

fn spec(
    s: &Value,
    kind: &'static str,
    name: &str,
    namespace: Option<&str>,
    at: &str,
) -> R<CiliumPolicy> {
    known(
        s,
        &[
            "endpointSelector",
            "nodeSelector",
            "ingress",
            "ingressDeny",
            "egress",
            "egressDeny",
            "enableDefaultDeny",
            "description",
            "labels",
        ],
        at,
    )?;
    let mut replaced_namespace_match = None;
    let subject = match (s.get("endpointSelector"), s.get("nodeSelector")) {
        (Some(e), None) => {
            let mut sel = selector(e, &format!("{at}.endpointSelector"))?;
            if let Some(ns) = namespace {
                replaced_namespace_match = sel
                    .match_labels
                    .iter()
                    .find(|(k, v)| strip_source(k) == ("k8s", NAMESPACE_LABEL) && *v != ns)
                    .map(|(_, v)| v.clone());
                // ParseToCiliumRule: `AddMatch("k8s.io.kubernetes.pod.namespace", ns)`
                // overwrites a `k8s:` namespace match (Cilium logs "illegal namespace
                // match ... removing"); a match spelled without a source or with `any:`
                // is another key, kept and ANDed with the policy's namespace (so a
                // different namespace there selects nothing), as are expressions.
                sel.match_labels
                    .retain(|k, _| strip_source(k) != ("k8s", NAMESPACE_LABEL));
                sel.match_labels
                    .insert(format!("k8s:{NAMESPACE_LABEL}"), ns.to_string());
            }
            Subject::Endpoints(sel)
        }
        (None, Some(n)) => {
            if namespace.is_some() {
                return Err(format!(
                    "{at}.nodeSelector: only a CiliumClusterwideNetworkPolicy selects nodes"
                ));
            }
            Subject::Nodes(selector(n, &format!("{at}.nodeSelector"))?)
        }
        (Some(_), Some(_)) => {
            return Err(format!(
                "{at}: endpointSelector and nodeSelector are mutually exclusive"
            ));
        }
        (None, None) => return Err(format!("{at}: neither endpointSelector nor nodeSelector")),
    };
    let rules = |key: &str, from: bool, deny: bool| -> R<Vec<CiliumRule>> {
        array(s.get(key), &format!("{at}.{key}"))?
            .iter()
            .enumerate()
            .map(|(i, r)| rule(r, from, deny, namespace, &format!("{at}.{key}[{i}]")))
            .collect()
    };
    let ingress = rules("ingress", true, false)?;
    let ingress_deny = rules("ingressDeny", true, true)?;
    let egress = rules("egress", false, false)?;
    let egress_deny = rules("egressDeny", false, true)?;
    let dd = s.get("enableDefaultDeny");
    if let Some(d) = dd {
        known(
            d,
            &["ingress", "egress"],
            &format!("{at}.enableDefaultDeny"),
        )?;
    }
    let flag = |dir: &str, has_rules: bool| -> R<bool> {
        match dd.and_then(|d| d.get(dir)) {
            None | Some(Value::Null) => Ok(has_rules),
            Some(Value::Bool(true)) if !has_rules => Err(format!(
                "{at}.enableDefaultDeny.{dir} is true with no {dir} rule: Cilium releases \
                 differ on whether that isolates (cilium/cilium#35558)"
            )),
            Some(Value::Bool(b)) => Ok(*b),
            Some(o) => Err(format!("{at}.enableDefaultDeny.{dir} {o} is not a boolean")),
        }
    };
    Ok(CiliumPolicy {
        kind,
        namespace: namespace.map(String::from),
        name: name.to_string(),
        part: None,
        subject,
        default_deny_ingress: flag("ingress", !ingress.is_empty() || !ingress_deny.is_empty())?,
        default_deny_egress: flag("egress", !egress.is_empty() || !egress_deny.is_empty())?,
        ingress,
        ingress_deny,
        egress,
        egress_deny,
        source: String::new(),
        spec_at: at.to_string(),
        replaced_namespace_match,
    })
}

/// A Cilium label selector: keys may carry a source (`k8s:`, `reserved:`, `any:`).
fn selector(v: &Value, at: &str) -> R<Selector> {
    known(v, &["matchLabels", "matchExpressions"], at)?;
    let mut s = Selector::default();
    if let Some(m) = v.get("matchLabels").and_then(Value::as_object) {
        for (k, val) in m {
            check_source(k, at)?;
            let val = match val {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                o => o.to_string(),
            };
            s.match_labels.insert(k.clone(), val);
        }
    }
    for (i, e) in array(v.get("matchExpressions"), at)?.iter().enumerate() {
        let at = format!("{at}.matchExpressions[{i}]");
        known(e, &["key", "operator", "values"], &at)?;
        let key = e
            .get("key")
            .and_then(Value::as_str)
            .ok_or(format!("{at}: no key"))?;
        check_source(key, &at)?;
        let operator = e.get("operator").and_then(Value::as_str).unwrap_or("");
        if !matches!(operator, "In" | "NotIn" | "Exists" | "DoesNotExist") {
            return Err(format!("{at}: operator {operator:?}"));
        }
        s.match_expressions.push(Requirement {
            key: key.into(),
            operator: operator.into(),
            values: array(e.get("values"), &at)?
                .iter()
                .map(|x| {
                    x.as_str()
                        .map(String::from)
                        .unwrap_or_else(|| x.to_string())
                })
                .collect(),
        });
    }
    Ok(s)
}

fn check_source(key: &str, at: &str) -> R<()> {
    match key.split_once(':') {
        Some((src, _)) if !matches!(src, "k8s" | "reserved" | "any") => Err(format!(
            "{at}: label source {src:?} in {key:?} (plumb knows k8s:, reserved: and any:)"
        )),
        _ => Ok(()),
    }
}

fn cidr(s: &str, at: &str) -> R<(std::net::IpAddr, u8)> {
    // A bare address is a host route (`api.CIDR` accepts both).
    let (a, l) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let addr: std::net::IpAddr = a
        .parse()
        .map_err(|_| format!("{at}: {s:?} is not a CIDR"))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len = match l {
        Some(l) => l
            .parse::<u8>()
            .map_err(|_| format!("{at}: {s:?} is not a CIDR"))?,
        None => max,
    };
    if len > max {
        return Err(format!("{at}: {s:?} has a prefix longer than {max}"));
    }
    Ok((addr, len))
}

fn rule(r: &Value, from: bool, deny: bool, namespace: Option<&str>, at: &str) -> R<CiliumRule> {
    let (eps, ents, cidr_k, set_k, nodes_k) = if from {
        (
            "fromEndpoints",
            "fromEntities",
            "fromCIDR",
            "fromCIDRSet",
            "fromNodes",
        )
    } else {
        (
            "toEndpoints",
            "toEntities",
            "toCIDR",
            "toCIDRSet",
            "toNodes",
        )
    };
    let mut fields = vec![eps, ents, cidr_k, set_k, nodes_k, "toPorts", "icmps"];
    if !from && !deny {
        fields.push("toFQDNs");
    }
    known(r, &fields, at)?;
    let mut out = CiliumRule::default();
    for (i, e) in array(r.get(eps), at)?.iter().enumerate() {
        let s = selector(e, &format!("{at}.{eps}[{i}]"))?;
        out.endpoints.push(scope_peer(s, namespace));
    }
    for (i, n) in array(r.get(nodes_k), at)?.iter().enumerate() {
        out.nodes
            .push(selector(n, &format!("{at}.{nodes_k}[{i}]"))?);
    }
    for (i, e) in array(r.get(ents), at)?.iter().enumerate() {
        let e = string(e, &format!("{at}.{ents}[{i}]"))?;
        if !ENTITIES.contains(&e.as_str()) {
            return Err(format!("{at}.{ents}[{i}]: unknown entity {e:?}"));
        }
        out.entities.push(e);
    }
    for (i, c) in array(r.get(cidr_k), at)?.iter().enumerate() {
        let at = format!("{at}.{cidr_k}[{i}]");
        out.cidrs.push(IpBlock {
            cidr: cidr(&string(c, &at)?, &at)?,
            except: Vec::new(),
        });
    }
    for (i, c) in array(r.get(set_k), at)?.iter().enumerate() {
        let at = format!("{at}.{set_k}[{i}]");
        known(c, &["cidr", "except"], &at)?;
        let Some(base) = c.get("cidr").and_then(Value::as_str) else {
            return Err(format!(
                "{at}: no cidr (cidrGroupRef and cidrGroupSelector need CiliumCIDRGroups plumb does not read)"
            ));
        };
        let mut except = Vec::new();
        for (j, e) in array(c.get("except"), &at)?.iter().enumerate() {
            let at = format!("{at}.except[{j}]");
            except.push(cidr(&string(e, &at)?, &at)?);
        }
        out.cidrs.push(IpBlock {
            cidr: cidr(base, &at)?,
            except,
        });
    }
    for (i, f) in array(r.get("toFQDNs"), at)?.iter().enumerate() {
        let at = format!("{at}.toFQDNs[{i}]");
        known(f, &["matchName", "matchPattern"], &at)?;
        out.fqdns.push(FqdnSelector {
            match_name: f.get("matchName").and_then(Value::as_str).map(String::from),
            match_pattern: f
                .get("matchPattern")
                .and_then(Value::as_str)
                .map(String::from),
        });
    }
    for (i, p) in array(r.get("toPorts"), at)?.iter().enumerate() {
        let at = format!("{at}.toPorts[{i}]");
        let mut pf = vec!["ports"];
        if !deny {
            pf.push("rules");
        }
        known(p, &pf, &at)?;
        let mut ports = Vec::new();
        for (j, q) in array(p.get("ports"), &at)?.iter().enumerate() {
            ports.push(port(q, &format!("{at}.ports[{j}]"))?);
        }
        let l7 = match p.get("rules").filter(|v| !v.is_null()) {
            None => None,
            Some(rules) => l7(rules, &format!("{at}.rules"))?,
        };
        out.ports.push(PortRule { ports, l7 });
    }
    for (i, ic) in array(r.get("icmps"), at)?.iter().enumerate() {
        let at = format!("{at}.icmps[{i}]");
        known(ic, &["fields"], &at)?;
        for (j, f) in array(ic.get("fields"), &at)?.iter().enumerate() {
            let at = format!("{at}.fields[{j}]");
            known(f, &["family", "type"], &at)?;
            let family = f
                .get("family")
                .and_then(Value::as_str)
                .unwrap_or("IPv4")
                .to_string();
            let icmp_type = match f.get("type") {
                Some(Value::Number(n)) => n.as_u64().and_then(|n| u8::try_from(n).ok()),
                Some(Value::String(s)) => s.parse().ok().or_else(|| icmp_name(&family, s)),
                _ => None,
            }
            .ok_or(format!("{at}.type is not an ICMP type plumb knows"))?;
            out.icmps.push(IcmpField { family, icmp_type });
        }
    }
    Ok(out)
}

/// The common ICMP type names Cilium accepts (`ICMPField.Type`).
fn icmp_name(family: &str, name: &str) -> Option<u8> {
    let v4 = [
        ("EchoReply", 0),
        ("DestinationUnreachable", 3),
        ("Redirect", 5),
        ("Echo", 8),
        ("EchoRequest", 8),
        ("RouterAdvertisement", 9),
        ("RouterSelection", 10),
        ("TimeExceeded", 11),
        ("ParameterProblem", 12),
        ("Timestamp", 13),
        ("TimestampReply", 14),
    ];
    let v6 = [
        ("DestinationUnreachable", 1),
        ("PacketTooBig", 2),
        ("TimeExceeded", 3),
        ("ParameterProblem", 4),
        ("EchoRequest", 128),
        ("EchoReply", 129),
        ("RouterSolicitation", 133),
        ("RouterAdvertisement", 134),
        ("NeighborSolicitation", 135),
        ("NeighborAdvertisement", 136),
    ];
    let table: &[(&str, u8)] = if family == "IPv6" { &v6 } else { &v4 };
    table.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

fn port(q: &Value, at: &str) -> R<CiliumPort> {
    known(q, &["port", "endPort", "protocol"], at)?;
    let port = match q.get("port") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => match s.parse::<u16>() {
            Ok(0) => None,
            Ok(n) => Some(PortRef::Number(n)),
            Err(_) if s.is_empty() => None,
            Err(_) => Some(PortRef::Name(s.clone())),
        },
        Some(n) => match n.as_u64().and_then(|n| u16::try_from(n).ok()) {
            Some(0) => None,
            Some(n) => Some(PortRef::Number(n)),
            None => return Err(format!("{at}.port {n} is not a port")),
        },
    };
    let end_port = match q.get("endPort") {
        None | Some(Value::Null) => None,
        Some(e) => match e.as_u64().and_then(|n| u16::try_from(n).ok()) {
            Some(0) => None,
            Some(n) => Some(n),
            None => return Err(format!("{at}.endPort {e} is not a port")),
        },
    };
    let protocol = q
        .get("protocol")
        .and_then(Value::as_str)
        .unwrap_or("ANY")
        .to_ascii_uppercase();
    let protocol = if protocol.is_empty() {
        "ANY".into()
    } else {
        protocol
    };
    if !matches!(protocol.as_str(), "TCP" | "UDP" | "SCTP" | "ANY") {
        return Err(format!(
            "{at}.protocol {protocol:?} (TCP, UDP, SCTP or ANY)"
        ));
    }
    Ok(CiliumPort {
        port,
        end_port,
        protocol,
    })
}

fn l7(v: &Value, at: &str) -> R<Option<L7Rules>> {
    known(v, &["http", "dns", "kafka"], at)?;
    let present: Vec<&str> = ["http", "dns", "kafka"]
        .into_iter()
        .filter(|k| v.get(*k).is_some_and(|x| !x.is_null()))
        .collect();
    if present.len() > 1 {
        return Err(format!(
            "{at}: {} in one port rule (Cilium allows one L7 protocol per port)",
            present.join(" and ")
        ));
    }
    let opt = |x: &Value, k: &str| {
        x.get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(String::from)
    };
    Ok(match present.first() {
        None => None,
        Some(&"http") => {
            let mut rules = Vec::new();
            for (i, h) in array(v.get("http"), at)?.iter().enumerate() {
                let at = format!("{at}.http[{i}]");
                known(h, &["method", "path", "host", "headers"], &at)?;
                for k in ["method", "path", "host"] {
                    if let Some(re) = opt(h, k) {
                        regex::Regex::new(&re).map_err(|e| format!("{at}.{k} {re:?}: {e}"))?;
                    }
                }
                rules.push(HttpRule {
                    method: opt(h, "method"),
                    path: opt(h, "path"),
                    host: opt(h, "host"),
                    headers: array(h.get("headers"), &at)?
                        .iter()
                        .filter_map(|x| x.as_str().map(String::from))
                        .collect(),
                });
            }
            Some(L7Rules::Http(rules))
        }
        Some(&"dns") => {
            let mut rules = Vec::new();
            for (i, d) in array(v.get("dns"), at)?.iter().enumerate() {
                known(d, &["matchName", "matchPattern"], &format!("{at}.dns[{i}]"))?;
                rules.push(DnsRule {
                    match_name: opt(d, "matchName"),
                    match_pattern: opt(d, "matchPattern"),
                });
            }
            Some(L7Rules::Dns(rules))
        }
        Some(_) => {
            let mut rules = Vec::new();
            for (i, k) in array(v.get("kafka"), at)?.iter().enumerate() {
                known(
                    k,
                    &["role", "apiKey", "apiVersion", "clientID", "topic"],
                    &format!("{at}.kafka[{i}]"),
                )?;
                rules.push(crate::model::labels_from_json(Some(k)));
            }
            Some(L7Rules::Kafka(rules))
        }
    })
}

// ---------------------------------------------------------------------------
// L7 and DNS matching.

fn dns_eq(a: &str, b: &str) -> bool {
    a.trim_end_matches('.')
        .eq_ignore_ascii_case(b.trim_end_matches('.'))
}

/// A DNS `matchPattern` against `name` (language.rst, "DNS Policy and IP
/// Discovery"): `*` alone matches every name; `*` inside a label matches 0 or more
/// characters other than `.`; a leading `**.` matches one or more labels.
pub fn dns_pattern(pattern: &str, name: &str) -> bool {
    let p = pattern.trim_end_matches('.').to_ascii_lowercase();
    let n = name.trim_end_matches('.').to_ascii_lowercase();
    if p == "*" {
        return true;
    }
    if let Some(rest) = p.strip_prefix("**.") {
        return n
            .char_indices()
            .filter(|(_, c)| *c == '.')
            .any(|(i, _)| glob(rest.as_bytes(), &n.as_bytes()[i + 1..]));
    }
    glob(p.as_bytes(), n.as_bytes())
}

fn glob(p: &[u8], n: &[u8]) -> bool {
    match p.split_first() {
        None => n.is_empty(),
        Some((b'*', rest)) => (0..=n.len())
            .take_while(|&i| i == 0 || n[i - 1] != b'.')
            .any(|i| glob(rest, &n[i..])),
        Some((c, rest)) => n.first() == Some(c) && glob(rest, &n[1..]),
    }
}

/// An L7 request to judge against L7 rules.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "protocol")]
pub enum Request {
    /// An HTTP request.
    Http {
        /// `GET`, `POST`, ...
        method: String,
        /// The path, starting with `/`.
        path: String,
    },
    /// A DNS query for a name.
    Dns {
        /// The queried name.
        name: String,
    },
}

fn full_match(re: &str, s: &str) -> bool {
    // Envoy matches a policy's regex against the whole value (safe_regex).
    regex::Regex::new(&format!("^(?:{re})$")).is_ok_and(|r| r.is_match(s))
}

impl L7Rules {
    /// Whether `request` passes these rules: Some(answer), or None when the request
    /// is of another protocol than the rules.
    pub fn allows(&self, request: &Request) -> Option<bool> {
        match (self, request) {
            (L7Rules::Http(rules), Request::Http { method, path }) => Some(
                rules.is_empty()
                    || rules.iter().any(|r| {
                        r.method.as_deref().is_none_or(|m| full_match(m, method))
                            && r.path.as_deref().is_none_or(|p| full_match(p, path))
                            // Headers and host are not part of a plumb request: a rule
                            // that needs them cannot be said to match.
                            && r.host.is_none()
                            && r.headers.is_empty()
                    }),
            ),
            (L7Rules::Dns(rules), Request::Dns { name }) => Some(rules.iter().any(|r| {
                r.match_name.as_deref().is_some_and(|n| dns_eq(n, name))
                    || r.match_pattern
                        .as_deref()
                        .is_some_and(|p| dns_pattern(p, name))
            })),
            _ => None,
        }
    }

    /// Each rule in words (`GET /path`, `matchPattern *`, ...).
    pub fn describe(&self) -> Vec<String> {
        match self {
            L7Rules::Http(rules) => rules
                .iter()
                .map(|r| {
                    let mut s = format!(
                        "http {} {}",
                        r.method.as_deref().unwrap_or("*"),
                        r.path.as_deref().unwrap_or("*")
                    );
                    if let Some(h) = &r.host {
                        s.push_str(&format!(" host {h}"));
                    }
                    for h in &r.headers {
                        s.push_str(&format!(" header {h}"));
                    }
                    s
                })
                .collect(),
            L7Rules::Dns(rules) => rules
                .iter()
                .map(|r| match (&r.match_name, &r.match_pattern) {
                    (Some(n), _) => format!("dns matchName {n}"),
                    (None, Some(p)) => format!("dns matchPattern {p}"),
                    _ => "dns (empty)".into(),
                })
                .collect(),
            L7Rules::Kafka(rules) => rules
                .iter()
                .map(|r| {
                    let parts: Vec<String> = r.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    format!("kafka {}", parts.join(" "))
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_patterns_as_the_policy_language_describes() {
        assert!(dns_pattern("*.cilium.io", "sub.cilium.io"));
        assert!(!dns_pattern("*.cilium.io", "cilium.io"));
        assert!(!dns_pattern("*.cilium.io", "a.sub.cilium.io"));
        assert!(dns_pattern("part*ial.com", "partial.com"));
        assert!(dns_pattern("part*ial.com", "part-extra-ial.com."));
        assert!(dns_pattern("*", "anything.example"));
        assert!(dns_pattern("**.cilium.io", "a.b.cilium.io"));
        assert!(!dns_pattern("**.cilium.io", "cilium.io"));
    }

    #[test]
    fn a_cnp_peer_selector_is_scoped_to_the_policy_namespace_unless_it_names_one() {
        let s = |k: &str| Selector {
            match_labels: [(k.to_string(), "x".to_string())].into(),
            match_expressions: Vec::new(),
        };
        let scoped = scope_peer(s("app"), Some("ns1"));
        assert_eq!(
            scoped.match_labels["k8s:io.kubernetes.pod.namespace"],
            "ns1"
        );
        let named = scope_peer(s("k8s:io.kubernetes.pod.namespace"), Some("ns1"));
        assert_eq!(named.match_labels.len(), 1);
        let ns_labels = scope_peer(s("io.cilium.k8s.namespace.labels.team"), Some("ns1"));
        assert_eq!(ns_labels.match_labels.len(), 1);
        let ccnp = scope_peer(Selector::default(), None);
        assert_eq!(ccnp.match_expressions[0].operator, "Exists");
        let reserved = scope_peer(s("reserved:host"), Some("ns1"));
        assert_eq!(reserved.match_labels.len(), 1);
    }

    /// A CNP applies only in its own namespace: an endpointSelector naming another
    /// one is rewritten as Cilium's `ParseToCiliumRule` does.
    #[test]
    fn a_cnp_endpoint_selector_naming_another_namespace_is_read_as_cilium_does() {
        let subject = |key: &str| {
            let v: Value = serde_json::json!({
                "spec": {"endpointSelector": {"matchLabels": {key: "b", "app": "x"}},
                         "ingress": [{"fromEntities": ["all"]}]}
            });
            let p = read(&v, "CiliumNetworkPolicy", "p", Some("a")).unwrap();
            let Subject::Endpoints(s) = &p[0].subject else {
                panic!("endpoints")
            };
            s.clone()
        };
        let pod = |ns: &str| -> Labels {
            [
                ("k8s:app".to_string(), "x".to_string()),
                (format!("k8s:{NAMESPACE_LABEL}"), ns.to_string()),
            ]
            .into()
        };
        // `k8s:` is overwritten by the policy's namespace.
        let k8s = subject("k8s:io.kubernetes.pod.namespace");
        assert!(selects(&k8s, &pod("a")));
        assert!(!selects(&k8s, &pod("b")));
        // Without a source (or `any:`) it stays: a and b at once, nothing.
        for key in [
            "io.kubernetes.pod.namespace",
            "any:io.kubernetes.pod.namespace",
        ] {
            let s = subject(key);
            assert!(!selects(&s, &pod("a")), "{key}");
            assert!(!selects(&s, &pod("b")), "{key}");
        }
    }

    #[test]
    fn http_rules_match_the_whole_method_and_path() {
        let r = L7Rules::Http(vec![HttpRule {
            method: Some("GET".into()),
            path: Some("/public".into()),
            host: None,
            headers: Vec::new(),
        }]);
        let req = |m: &str, p: &str| Request::Http {
            method: m.into(),
            path: p.into(),
        };
        assert_eq!(r.allows(&req("GET", "/public")), Some(true));
        assert_eq!(r.allows(&req("GET", "/public/x")), Some(false));
        assert_eq!(r.allows(&req("POST", "/public")), Some(false));
        assert_eq!(r.allows(&Request::Dns { name: "x".into() }), None);
    }
}
