//! `plumb trace --all-services`: every ClusterIP and NodePort of kube-proxy's service
//! map (`plumb_kubeproxy::recover`), traced from a pod and from the host through one
//! reading and one index of the ruleset. Says, per service, whether it is reachable and
//! if not why: no endpoints, dropped or rejected by a rule (named, with its owner), or
//! accepted without DNAT (nothing answers).
//!
//! Streams, so that memory stays what the ruleset, the service map and the index hold,
//! whatever the number of services:
//! - each service is written as soon as its traces are done (text: a line for those
//!   not reachable, all with `--verbose`; JSON: an item of `services`), and not kept;
//!   JSON's `summary` and `notes` therefore follow `services`;
//! - the compiled rules of a service's own chains are released once it is traced
//!   ([`Index::release`]): no other service's trace enters them.
//!
//! On a 10k-service node, keeping both made the command's peak grow from ~55 MiB after
//! the index to 120 MiB by the last service (docs/benchmarks.md).

use super::trace::{missing_tables_message, node, ruleset, template};
use super::trace_batch::{options, rule_label, socket};
use crate::Verdict;
use crate::flags::TraceArgs;
use crate::output;
use anyhow::bail;
use plumb_kubeproxy::recover::{NoEndpoints, ProxyMode, RecoveredService, ServiceMap, recover};
use plumb_trace::batch::{DecidingRule, deciding_rule};
use plumb_trace::{Index, Node, Origin, Packet, Proto, Trace, TraceOptions, trace_with};
use serde::Serialize;
use std::cell::RefCell;
use std::io::Write;
use std::net::IpAddr;

/// What happened to the probes of one address of a service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
enum Reach {
    /// Every outcome is accepted and DNATed to an endpoint.
    Ok,
    /// Outcomes fail only under conditions on facts plumb was not told (an
    /// interface, a source address): not counted as broken, since a real packet may
    /// never meet them; the reason names the conditions.
    Conditional,
    /// plumb cannot tell (a trace ended INDETERMINATE or was handed to userspace).
    Unknown,
    /// Some outcomes fail whatever the unknown facts (for some endpoints, say).
    Partly,
    /// Every outcome fails.
    Broken,
}

/// One traced address of a service.
#[derive(Debug, Serialize)]
struct Probe {
    /// `cluster-ip` or `node-port`.
    kind: &'static str,
    from: Origin,
    dst: String,
    status: Reach,
    /// The verdict of every outcome when they agree, else MIXED.
    verdict: &'static str,
    dnat: Vec<String>,
    /// Why it fails (absent when it does not).
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// The rule that took the first failing outcome's verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    decided_by: Option<DecidingRule>,
}

#[derive(Debug, Serialize)]
struct ServiceReach {
    service: String,
    protocol: Option<String>,
    cluster_ip: Option<IpAddr>,
    port: Option<u16>,
    node_ports: Vec<u16>,
    /// Endpoints kube-proxy programmed for it.
    endpoints: usize,
    status: Reach,
    /// The distinct reasons of its failing probes.
    reasons: Vec<String>,
    probes: Vec<Probe>,
}

#[derive(Debug, Default, Serialize)]
struct Summary {
    services: usize,
    ok: usize,
    broken: usize,
    partly: usize,
    unknown: usize,
    /// Services that fail only under conditions on facts plumb was not told.
    conditional: usize,
    /// Services plumb did not trace (no ClusterIP or port recovered, IPVS mode).
    not_traced: usize,
}

/// Stands for the node's address when `--local-addr` gives none and the ruleset names
/// none (TEST-NET-1, not loopback: kube-proxy treats NodePorts on 127.0.0.0/8 specially).
const NODE_ADDRESS: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 10));

/// The first address of kube-proxy's nftables-mode set `nodeport-ips`: with
/// `--nodeport-addresses` (the default `primary` since 1.31) NodePorts are served on
/// those addresses only (`ip daddr @nodeport-ips … vmap @service-nodeports`), so a
/// NodePort traced to any other address would find no service and be called broken.
/// IPv4 first (the address is used for the `ip` table's NodePorts).
fn nodeport_address(ruleset: &plumb_ruleset::Ruleset) -> Option<IpAddr> {
    let addrs = || {
        ruleset
            .tables
            .iter()
            .filter(|t| plumb_kubeproxy::recover::nft::is_kube_proxy_table(t))
            .flat_map(|t| t.sets.iter())
            .filter(|s| &*s.name == "nodeport-ips")
            .flat_map(|s| s.elements.iter())
            .filter_map(|e| e.key_text.trim().parse::<IpAddr>().ok())
    };
    addrs().find(IpAddr::is_ipv4).or_else(|| addrs().next())
}

/// Classifies one probe's trace.
fn probe(
    index: &Index<'_>,
    kind: &'static str,
    packet: &Packet,
    t: &Trace,
    svc: &RecoveredService<'_>,
) -> Probe {
    let mut dnat: Vec<String> = Vec::new();
    let mut failing = Vec::new();
    let mut unknown = None;
    for o in &t.outcomes {
        if let Some(d) = &o.dnat
            && !dnat.contains(d)
        {
            dnat.push(d.clone());
        }
        match o.verdict {
            plumb_trace::Verdict::Accept if o.dnat.is_some() => {}
            plumb_trace::Verdict::Indeterminate | plumb_trace::Verdict::Queue => {
                unknown.get_or_insert(o);
            }
            _ => failing.push(o),
        }
    }
    let unconditional = failing.iter().any(|o| o.conditions.is_empty());
    let status = if failing.len() == t.outcomes.len() && !failing.is_empty() {
        Reach::Broken
    } else if unconditional {
        Reach::Partly
    } else if unknown.is_some() {
        Reach::Unknown
    } else if !failing.is_empty() {
        Reach::Conditional
    } else {
        Reach::Ok
    };
    let dst = match packet.dport {
        Some(p) => socket(packet.dst, p),
        None => packet.dst.to_string(),
    };
    // The failing outcome to explain: one that fails whatever the unknown facts, if any.
    let first_failing = failing
        .iter()
        .find(|o| o.conditions.is_empty())
        .or(failing.first());
    let (reason, decided_by) = match first_failing.or(unknown.as_ref()) {
        None => (None, None),
        Some(o) => {
            let d = deciding_rule(index, o);
            let by = d.as_ref().map(rule_label).unwrap_or_default();
            let text = d.as_ref().map(|d| d.text.as_str()).unwrap_or_default();
            let reason = match o.verdict {
                plumb_trace::Verdict::Accept => format!(
                    "accepted without DNAT: nothing answers at {dst} (the service's chains lead to no endpoint)"
                ),
                plumb_trace::Verdict::Drop | plumb_trace::Verdict::Reject
                    if svc.endpoints.is_empty()
                        && d.as_ref().is_some_and(|d| d.owner == "kube-proxy") =>
                {
                    let how = match svc.no_endpoints {
                        Some(NoEndpoints::DropNoLocal) => "no local endpoints",
                        _ => "no endpoints",
                    };
                    format!("{how}: kube-proxy {} it ({by}: {text})", verb(o.verdict))
                }
                plumb_trace::Verdict::Drop | plumb_trace::Verdict::Reject => {
                    format!("{} by {by}: {text}", participle(o.verdict))
                }
                _ => format!("undetermined: {}", o.why),
            };
            let reason = match (status, o.conditions.is_empty()) {
                (Reach::Partly | Reach::Conditional, false) => {
                    format!("{reason} (when {})", o.conditions.join("; "))
                }
                _ => reason,
            };
            (Some(reason), d)
        }
    };
    Probe {
        kind,
        from: packet.origin,
        dst,
        status,
        verdict: plumb_trace::batch::common_verdict(t),
        dnat,
        reason,
        decided_by,
    }
}

fn verb(v: plumb_trace::Verdict) -> &'static str {
    if v == plumb_trace::Verdict::Drop {
        "drops"
    } else {
        "rejects"
    }
}

fn participle(v: plumb_trace::Verdict) -> &'static str {
    if v == plumb_trace::Verdict::Drop {
        "dropped"
    } else {
        "rejected"
    }
}

/// `plumb trace --all-services`.
pub fn run_all_services(args: &TraceArgs) -> anyhow::Result<Verdict> {
    let template = template(args)?;
    let mut node = node(args)?;
    let (source, ruleset) = ruleset(args)?;
    let maps = recover(&ruleset);
    let index = Index::build(&ruleset);
    let node_address = match node.local_addrs.first() {
        Some(c) => c.addr,
        None => {
            let addr = nodeport_address(&ruleset).unwrap_or(NODE_ADDRESS);
            node.local_addrs.push(plumb_trace::addr::Cidr {
                addr,
                len: if addr.is_ipv4() { 32 } else { 128 },
            });
            addr
        }
    };
    let mut tracer = Tracer {
        index,
        template,
        node,
        options: options(args),
        node_address,
        summary: Summary::default(),
        notes: Vec::new(),
    };
    // Said before anything is written: a trace without the tables it needs would
    // call every service broken.
    if let Some(lacking) = tracer.missing_tables(&maps) {
        bail!("{}", missing_tables_message(&source, &lacking));
    }
    if args.output.json() {
        output::json(&Json {
            source: &source,
            maps: &maps,
            tracer: RefCell::new(&mut tracer),
        })?;
    } else {
        let mut out = std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout().lock());
        tracer.run(&maps, |s| write_service_text(&mut out, s, args.verbose))?;
        write_summary_text(&mut out, &tracer, args.verbose)?;
        out.flush()?;
    }
    let s = &tracer.summary;
    let verdict = if s.broken + s.partly > 0 {
        Verdict::Problems
    } else {
        Verdict::Clean
    };
    super::leak_at_exit(tracer);
    super::leak_at_exit(maps);
    super::leak_at_exit(ruleset);
    Ok(verdict)
}

/// What the services are traced with, and what has been counted of them so far.
struct Tracer<'r> {
    index: Index<'r>,
    /// The packet of the command's flags, given each target's address and port.
    template: Packet,
    node: Node,
    options: TraceOptions,
    /// The address NodePorts are traced to (the first --local-addr, else the first of
    /// kube-proxy's nftables set `nodeport-ips`, else a documentation address standing
    /// for the node's).
    node_address: IpAddr,
    summary: Summary,
    /// Why some services were not traced.
    notes: Vec<String>,
}

/// The addresses of a service to trace: `cluster-ip` or `node-port`, address, port.
type Targets = Vec<(&'static str, IpAddr, u16)>;

impl<'r> Tracer<'r> {
    /// What a trace to the service's addresses lacks, when some tables it needs are
    /// not in the input (the first family that lacks some, as `Index::missing_tables`).
    fn missing_tables(&self, maps: &[ServiceMap<'_>]) -> Option<Vec<String>> {
        let mut asked = [false; 2];
        for map in maps.iter().filter(|m| m.mode != ProxyMode::Ipvs) {
            for svc in &map.services {
                let Ok((_, targets)) = self.targets(map, svc) else {
                    continue;
                };
                for (_, dst, _) in targets {
                    let v6 = dst.is_ipv6();
                    if std::mem::replace(&mut asked[v6 as usize], true) {
                        continue;
                    }
                    let lacking = self.index.missing_tables(v6);
                    if !lacking.is_empty() {
                        return Some(lacking);
                    }
                    if asked == [true; 2] {
                        return None;
                    }
                }
            }
        }
        None
    }

    /// The protocol and addresses to trace `svc` at, or why it is not traced.
    fn targets(
        &self,
        map: &ServiceMap<'_>,
        svc: &RecoveredService<'_>,
    ) -> Result<(Proto, Targets), &'static str> {
        let proto = svc
            .protocol
            .as_deref()
            .and_then(|p| Proto::parse(&p.to_ascii_lowercase()));
        let (Some(proto), Some(port)) = (proto, svc.port) else {
            return Err("no protocol or port recovered");
        };
        let mut targets = Vec::new();
        if let Some(ip) = svc.cluster_ip {
            targets.push(("cluster-ip", ip, port));
        }
        if self.node_address.is_ipv4() == (map.family == plumb_ruleset::Family::Ip) {
            for &np in &svc.node_ports {
                targets.push(("node-port", self.node_address, np));
            }
        }
        if targets.is_empty() {
            return Err("no ClusterIP or NodePort recovered");
        }
        Ok((proto, targets))
    }

    /// Traces every service of `maps` in order and hands each traced one to `emit`
    /// (which writes it: it is not kept); counts them all in `summary`.
    fn run<E>(
        &mut self,
        maps: &[ServiceMap<'_>],
        mut emit: impl FnMut(&ServiceReach) -> Result<(), E>,
    ) -> Result<(), E> {
        for map in maps {
            if map.mode == ProxyMode::Ipvs {
                self.summary.services += map.services.len();
                self.summary.not_traced += map.services.len();
                self.notes.push(format!(
                    "{} IPVS virtual services not traced: IPVS forwards outside netfilter's rules",
                    map.services.len()
                ));
                continue;
            }
            for svc in &map.services {
                self.summary.services += 1;
                match self.targets(map, svc) {
                    Ok((proto, targets)) => emit(&self.service(svc, proto, targets))?,
                    Err(why) => {
                        self.summary.not_traced += 1;
                        self.notes
                            .push(format!("{}: not traced ({why})", svc.display_name()));
                    }
                }
            }
        }
        Ok(())
    }

    /// Traces `svc` at each target from a pod and from the host, counts its status,
    /// then releases its own chains.
    fn service(
        &mut self,
        svc: &RecoveredService<'_>,
        proto: Proto,
        targets: Targets,
    ) -> ServiceReach {
        let mut probes = Vec::new();
        for (kind, dst, dport) in targets {
            for origin in [Origin::Pod, Origin::Host] {
                let mut p = self.template.clone();
                p.dst = dst;
                p.dport = Some(dport);
                p.proto = proto;
                p.origin = origin;
                if p.src.is_some_and(|s| s.is_ipv4() != dst.is_ipv4()) {
                    p.src = None;
                    p.sport = None;
                }
                let t = trace_with(&self.index, &p, &self.node, &self.options);
                probes.push(probe(&self.index, kind, &p, &t, svc));
            }
        }
        release_own_chains(&mut self.index, svc);
        let status = probes.iter().map(|p| p.status).max().unwrap_or(Reach::Ok);
        let s = &mut self.summary;
        match status {
            Reach::Ok => s.ok += 1,
            Reach::Broken => s.broken += 1,
            Reach::Partly => s.partly += 1,
            Reach::Unknown => s.unknown += 1,
            Reach::Conditional => s.conditional += 1,
        }
        let mut reasons: Vec<String> = Vec::new();
        for p in &probes {
            if let Some(r) = &p.reason {
                let r = format!("{} {} from {}: {r}", p.kind, p.dst, origin_name(p.from));
                if !reasons.contains(&r) {
                    reasons.push(r);
                }
            }
        }
        ServiceReach {
            service: svc.display_name(),
            protocol: svc.protocol.clone(),
            cluster_ip: svc.cluster_ip,
            port: svc.port,
            node_ports: svc.node_ports.to_vec(),
            endpoints: svc.endpoints.len(),
            status,
            reasons,
            probes,
        }
    }
}

/// The JSON report, written while the services are traced: `source`, `node_address`,
/// `services` (each item as its service is traced), then `summary` and `notes`.
struct Json<'x, 'r> {
    source: &'x str,
    maps: &'x [ServiceMap<'x>],
    tracer: RefCell<&'x mut Tracer<'r>>,
}

impl Serialize for Json<'_, '_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let node_address = self.tracer.borrow().node_address;
        let mut st = s.serialize_struct("AllServices", 5)?;
        st.serialize_field("source", self.source)?;
        st.serialize_field("node_address", &node_address)?;
        st.serialize_field("services", &Services(self))?;
        let tracer = self.tracer.borrow();
        st.serialize_field("summary", &tracer.summary)?;
        st.serialize_field("notes", &tracer.notes)?;
        st.end()
    }
}

/// `services` of [`Json`]: the array is written as the services are traced.
struct Services<'j, 'x, 'r>(&'j Json<'x, 'r>);

impl Serialize for Services<'_, '_, '_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = s.serialize_seq(None)?;
        self.0
            .tracer
            .borrow_mut()
            .run(self.0.maps, |r| seq.serialize_element(r))?;
        seq.end()
    }
}

/// Frees the compiled rules of the chains only `svc` uses (its service and endpoint
/// chains), now that its traces are done: no other service's trace enters them, and
/// kept they made the index hold every chain of the node by the last service. Shared
/// chains (`KUBE-SERVICES`, `KUBE-MARK-MASQ`, the base chains) stay compiled.
fn release_own_chains(index: &mut Index<'_>, svc: &RecoveredService<'_>) {
    let own = svc
        .chains
        .iter()
        .copied()
        .chain(svc.endpoints.iter().filter_map(|e| e.chain()));
    for name in own {
        let ids: Vec<u32> = index.chains_named(name).collect();
        for id in ids {
            index.release(id);
        }
    }
}

fn origin_name(o: Origin) -> &'static str {
    match o {
        Origin::Host => "the host",
        Origin::Pod => "a pod",
        Origin::External => "outside",
    }
}

/// A service's line and reasons, when it is not reachable (any service with `verbose`).
fn write_service_text(
    out: &mut impl Write,
    s: &ServiceReach,
    verbose: bool,
) -> std::io::Result<()> {
    if matches!(s.status, Reach::Ok | Reach::Conditional) && !verbose {
        return Ok(());
    }
    let status = match s.status {
        Reach::Ok => "ok",
        Reach::Conditional => "CONDITIONAL",
        Reach::Unknown => "UNKNOWN",
        Reach::Partly => "PARTLY BROKEN",
        Reach::Broken => "BROKEN",
    };
    let addr = match (s.cluster_ip, s.port) {
        (Some(ip), Some(p)) => socket(ip, p),
        _ => "-".into(),
    };
    write!(
        out,
        "{status:<13} {} {} {addr}",
        s.service,
        s.protocol.as_deref().unwrap_or("?")
    )?;
    if !s.node_ports.is_empty() {
        let ports: Vec<String> = s.node_ports.iter().map(u16::to_string).collect();
        write!(out, " nodePort {}", ports.join(","))?;
    }
    writeln!(out, ", {} endpoints", s.endpoints)?;
    for reason in &s.reasons {
        writeln!(out, "    {reason}")?;
    }
    Ok(())
}

/// The notes, then the summary line.
fn write_summary_text(out: &mut impl Write, r: &Tracer<'_>, verbose: bool) -> std::io::Result<()> {
    for n in &r.notes {
        writeln!(out, "note: {n}")?;
    }
    let s = &r.summary;
    let traced = s.services - s.not_traced;
    write!(
        out,
        "{} of {} services broken ({} broken, {} partly broken",
        s.broken + s.partly,
        traced,
        s.broken,
        s.partly
    )?;
    if s.unknown > 0 {
        write!(out, ", {} undetermined", s.unknown)?;
    }
    if s.not_traced > 0 {
        write!(out, ", {} not traced", s.not_traced)?;
    }
    if s.conditional > 0 && !verbose {
        write!(
            out,
            ", {} failing only under conditions plumb was not told: --verbose lists them",
            s.conditional
        )?;
    } else if s.conditional > 0 {
        write!(
            out,
            ", {} failing only under conditions plumb was not told",
            s.conditional
        )?;
    }
    writeln!(
        out,
        "); traced from a pod and from the host, NodePorts at {}",
        r.node_address
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Once every service is traced, only the chains services share stay compiled
    /// (`KUBE-SERVICES`, the base chains, ...), in both dataplanes: each service's own
    /// chains were released. Kept, they were 200 here, and all 58k chains of a
    /// 10k-service node.
    #[test]
    fn traced_services_leave_only_shared_chains_compiled() {
        let cluster =
            plumb_kubeproxy::generate(&plumb_kubeproxy::GeneratorConfig::all_features(50, 3))
                .unwrap();
        let options = plumb_kubeproxy::ProxierOptions::default();
        let texts = [
            plumb_kubeproxy::KubeProxyRules::new(&cluster, &options)
                .to_iptables_save(&Default::default()),
            plumb_kubeproxy::nft_transaction(&cluster, &options),
        ];
        for text in texts {
            let rs = plumb_ruleset::parse_bytes(text.as_bytes(), &Default::default())
                .unwrap()
                .ruleset;
            let maps = recover(&rs);
            let own: usize = maps
                .iter()
                .flat_map(|m| &m.services)
                .map(|s| s.chains.len() + s.endpoints.len())
                .sum();
            assert!(own > 150, "{own} own chains");
            let mut tracer = Tracer {
                index: Index::build(&rs),
                template: Packet::new(NODE_ADDRESS, 1, Proto::Tcp, Origin::Host),
                node: Node::default(),
                options: TraceOptions::default(),
                node_address: NODE_ADDRESS,
                summary: Summary::default(),
                notes: Vec::new(),
            };
            let mut written = 0;
            tracer
                .run(&maps, |_| {
                    written += 1;
                    Ok::<(), ()>(())
                })
                .unwrap();
            let s = &tracer.summary;
            assert!(written > 40, "{written} services traced");
            assert_eq!(written, s.services - s.not_traced);
            assert_eq!(
                written,
                s.ok + s.broken + s.partly + s.unknown + s.conditional
            );
            let compiled = tracer.index.compiled_chains();
            assert!((1..=25).contains(&compiled), "{compiled} chains compiled");
        }
    }
}
