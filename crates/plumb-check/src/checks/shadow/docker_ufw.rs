//! Finding: `docker-bypasses-ufw` — on a host with UFW, Docker's FORWARD chains come
//! before UFW's (`-A FORWARD -j DOCKER...` above `-A FORWARD -j ufw-before-forward`) and
//! accept connections to published container ports, so UFW's rules (and its default
//! deny) never see them: a port UFW denies on the host is open through the container.
//!
//! Decided by tracing a new connection from outside to each port Docker's DOCKER chain
//! accepts: the finding is a problem when the trace accepts it in a Docker chain without
//! passing through a UFW chain. UFW's FORWARD policy DROP is its default and is not a
//! finding by itself. ip6tables dumps are judged the same way (UFW's chains are
//! `ufw6-*` there); an IPv6 problem's title starts with `IPv6:`.

use crate::facts::CheckInput;
use plumb_findings::{Evidence, Finding, Severity};
use plumb_ruleset::iptables::XtBuf;
use plumb_ruleset::{Chain, Family, Table};
use plumb_trace::addr::Cidr;
use plumb_trace::constraint::Fact;
use plumb_trace::ir::IfacePattern;
use plumb_trace::{Index, Node, Origin, Packet, Proto, StepKind, Verdict, trace};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub const ID: &str = "docker-bypasses-ufw";

/// A port the DOCKER chain accepts: container address, port, protocol, the rule.
struct Published<'a> {
    addr: IpAddr,
    port: u16,
    proto: Proto,
    rule: &'a plumb_ruleset::Rule,
}

fn published<'a>(docker: &'a Chain, v6: bool) -> Vec<Published<'a>> {
    let mut buf = XtBuf::default();
    let mut out = Vec::new();
    for r in &docker.rules {
        let Some(v) = r.xt_in(&mut buf) else { continue };
        if v.target().map(|t| t.name()) != Some("ACCEPT") {
            continue;
        }
        let addr = v
            .generic_option("-d")
            .filter(|o| !o.negated())
            .and_then(|o| o.arg(0))
            .and_then(|a| Cidr::parse(&a))
            .filter(|c| c.is_host() && c.addr.is_ipv6() == v6)
            .map(|c| c.addr);
        let proto = v
            .generic_option("-p")
            .and_then(|o| o.arg(0))
            .and_then(|p| Proto::parse(&p));
        let port = v
            .matches()
            .flat_map(|m| m.options().collect::<Vec<_>>())
            .find(|o| !o.negated() && matches!(o.name(), "--dport" | "--destination-port"))
            .and_then(|o| o.arg(0))
            .and_then(|p| p.parse::<u16>().ok());
        if let (Some(addr), Some(proto), Some(port)) = (addr, proto, port) {
            out.push(Published {
                addr,
                port,
                proto,
                rule: r,
            });
        }
    }
    out
}

/// The position in FORWARD of the first rule jumping to a chain whose name starts with
/// one of `prefixes`.
/// The first rule of `fwd` that jumps to a chain named with one of `prefixes`, with
/// its 1-based position.
fn first_jump<'a>(fwd: &'a Chain, prefixes: &[&str]) -> Option<(u32, &'a plumb_ruleset::Rule)> {
    fwd.positioned().find(|(_, r)| {
        r.chain_references()
            .iter()
            .any(|c| prefixes.iter().any(|p| c.chain.starts_with(p)))
    })
}

pub fn check(facts: &CheckInput) -> Vec<Finding> {
    let mut out = Vec::new();
    if !facts.is_full() {
        return out;
    }
    // ip6tables too: Docker publishes ports on IPv6 (`ip6tables: true`, the default
    // since Docker 27) with the same chains, and UFW writes ip6tables rules.
    for filter in facts
        .xt_tables()
        .filter(|t| &*t.name == "filter" && matches!(t.family, Family::Ip | Family::Ip6))
    {
        if let Some(mut f) = judge(facts, filter) {
            if filter.family == Family::Ip6 {
                f.title = format!("IPv6: {}", f.title);
            }
            out.push(f);
        }
    }
    // One finding per family at most; an IPv4 "ok" says nothing once IPv6 has the
    // problem (and the other way round), so only problems are kept when there are any.
    if out.iter().any(|f| f.is_problem()) {
        out.retain(|f| f.is_problem());
    } else {
        out.truncate(1);
    }
    out
}

fn judge(facts: &CheckInput, filter: &Table) -> Option<Finding> {
    let fwd = filter.chain("FORWARD")?;
    // UFW's ip6tables chains are ufw6-*.
    let ufw_jump = first_jump(fwd, &["ufw-before-forward", "ufw6-before-forward"])?;
    let docker = filter.chain("DOCKER")?;
    let docker_jump = first_jump(fwd, &["DOCKER-FORWARD", "DOCKER"])?;
    if docker_jump.0 > ufw_jump.0 {
        return Some(Finding::ok(ID, "UFW's FORWARD chains come before Docker's"));
    }
    let ports = published(docker, filter.family == Family::Ip6);
    if ports.is_empty() {
        return Some(Finding::ok(ID, "Docker publishes no container port"));
    }
    let index = Index::build(facts.ruleset);
    let v6 = filter.family == Family::Ip6;
    // A placeholder address of this host (documentation ranges).
    let host = if v6 {
        IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10))
    } else {
        IpAddr::V4(Ipv4Addr::new(192, 0, 2, 10))
    };
    let node = Node {
        local_addrs: vec![Cidr::host(host)],
        ..Default::default()
    };
    // A connection from another machine: it does not arrive on lo or a Docker bridge.
    let outside = Fact::InIface(
        ["lo", "docker0", "br-+"]
            .iter()
            .map(|s| IfacePattern::parse(s))
            .collect(),
    );
    let mut bypassed: Vec<String> = Vec::new();
    let mut denied_on_host: Vec<String> = Vec::new();
    let mut evidence: Vec<Evidence> = vec![facts.rule(filter, docker_jump.1)];
    for p in &ports {
        let packet = Packet::new(p.addr, p.port, p.proto, Origin::External);
        let t = trace(&index, &packet, &node);
        let accepted_by_docker = t.outcomes.iter().any(|o| {
            let mut c = o.constraints.clone();
            if o.verdict != Verdict::Accept || !c.assume(&outside, false) {
                return false;
            }
            let fwd_steps = o.steps.iter().filter(|s| {
                s.kind == StepKind::Matched && s.hook == plumb_trace::ir::HookId::Forward
            });
            let mut last_chain = None;
            let mut through_ufw = false;
            for s in fwd_steps {
                let name = &*index.chain(s.chain).chain.name;
                through_ufw |= name.starts_with("ufw-") || name.starts_with("ufw6-");
                last_chain = Some(name);
            }
            !through_ufw && last_chain.is_some_and(|n| n.starts_with("DOCKER"))
        });
        if !accepted_by_docker {
            continue;
        }
        let what = format!("{}:{}/{}", p.addr, p.port, p.proto.name());
        evidence.push(facts.rule(filter, p.rule));
        // Would UFW let the same port in on the host itself?
        let on_host = Packet::new(host, p.port, p.proto, Origin::External);
        let h = trace(&index, &on_host, &node);
        if h.outcomes.iter().all(|o| {
            let mut c = o.constraints.clone();
            !c.assume(&outside, false) || matches!(o.verdict, Verdict::Drop | Verdict::Reject)
        }) {
            denied_on_host.push(format!("{}/{}", p.port, p.proto.name()));
        }
        bypassed.push(what);
    }
    if bypassed.is_empty() {
        return Some(Finding::ok(
            ID,
            "no published container port is accepted before UFW's chains",
        ));
    }
    evidence.push(facts.rule(filter, ufw_jump.1));
    let denied = if denied_on_host.is_empty() {
        String::new()
    } else {
        format!(
            "; UFW denies {} on the host itself",
            denied_on_host.join(", ")
        )
    };
    Some(
        Finding::problem(
            ID,
            Severity::Medium,
            format!(
                "published container ports bypass UFW: Docker's FORWARD chains (rule {}) accept {} before UFW's (rule {}){denied}",
                docker_jump.0,
                bypassed.join(", "),
                ufw_jump.0
            ),
        )
        .with_evidence(evidence)
        .explain("Docker DNATs published ports to the container and accepts them in its own FORWARD chains, which it inserts above UFW's. UFW's rules only apply to INPUT and to forwarded traffic that reaches ufw-before-forward, so `ufw deny` or UFW's default deny does not close a published port: anyone who can reach the host can reach it.")
        .fix("Publish ports on 127.0.0.1 only (`-p 127.0.0.1:9000:9000`) when they need not be public, or filter published ports in the DOCKER-USER chain (which Docker evaluates first), for example with ufw-docker's rules.")
        .do_not("Do not set Docker's `iptables: false` to fix this: containers lose outbound NAT and published ports stop working."),
    )
}
