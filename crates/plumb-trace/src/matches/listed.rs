//! Compiling a rule read from an `iptables -L`/`-nL`/`-nvL` listing into [`Cond`]s and
//! an [`Action`].
//!
//! A listing prints a rule's columns and a prose rendering of its matches. What the
//! reader recognised is compiled exactly like the iptables-save form; everything else
//! becomes [`Cond::Unknown`] with its text, so a trace branches on it instead of
//! guessing. In particular, a listing made without `-v` has no `in`/`out` columns: the
//! rule may carry `-i`/`-o` conditions nobody can see (`DROP all -- anywhere anywhere`
//! in FORWARD is often `-o weave -j DROP`), so such a rule gets one unknown condition
//! that names the rule, and a verdict that depends on it is conditional, never certain.

use super::{AddrMatch, Cond, IfacePattern, Ports, ct_bits};
use crate::addr::{Cidr, PortRange, parse_mark, protocol_number};
use crate::ir::{Action, Jump, MarkOp, NatSpec};
use crate::packet::AddrType;
use plumb_ruleset::model::listed::{
    Fragment, ListedMatch, ListedRule, ListedTarget, Negatable, PortDirection,
};

/// The conditions of a listed rule (in the kernel's order: columns first, then matches)
/// and its action. `place` names the rule (`FORWARD rule 4`) in the text of conditions
/// the listing hides.
pub fn compile(
    rule: &ListedRule,
    place: &str,
    resolve: &dyn Fn(&str) -> Option<u32>,
    out: &mut Vec<Cond>,
) -> Action {
    // Generic columns.
    let proto = match protocol_of(&rule.protocol.value) {
        Some(0) if !rule.protocol.negated => None,
        Some(p) => {
            out.push(Cond::Proto(p, rule.protocol.negated));
            (!rule.protocol.negated).then_some(p)
        }
        None => {
            out.push(Cond::Unknown(format!("-p {}", rule.protocol.value)));
            None
        }
    };
    address(&rule.source, false, out);
    address(&rule.destination, true, out);
    if rule.interfaces_listed {
        if let Some(i) = &rule.in_interface {
            out.push(Cond::InIface(IfacePattern::parse(&i.value), i.negated));
        }
        if let Some(o) = &rule.out_interface {
            out.push(Cond::OutIface(IfacePattern::parse(&o.value), o.negated));
        }
    } else {
        out.push(Cond::Unknown(format!(
            "the interfaces of {place}, which the listing does not show (`iptables -nvL` shows them)"
        )));
    }
    match rule.fragment {
        Fragment::Fragments => out.push(Cond::Fragment(false)),
        Fragment::NotFragments => out.push(Cond::Fragment(true)),
        Fragment::Any | Fragment::NotShown => {}
    }
    for m in &rule.matches {
        compile_match(m, proto, out);
    }
    for u in &rule.unrecognised {
        out.push(Cond::Unknown(u.clone()));
    }
    action(rule, resolve)
}

/// A protocol column: `tcp`, `6`, `all`, `0`.
fn protocol_of(s: &str) -> Option<u8> {
    protocol_number(s)
}

/// A source/destination column: `0.0.0.0/0`, `anywhere`, `10.0.0.1`, `10.0.0.0/8`;
/// a host name (a listing made without `-n`) is unknown.
fn address(col: &Negatable, dst: bool, out: &mut Vec<Cond>) {
    let v = &*col.value;
    let any = matches!(v, "" | "anywhere" | "0.0.0.0/0" | "::/0" | "anywhere/0");
    if any {
        if col.negated {
            out.push(Cond::Const(false, "! anywhere"));
        }
        return;
    }
    // `iptables -L` without `-n` prints 127.0.0.1 as `localhost`.
    let v = match v.strip_prefix("localhost") {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => {
            std::borrow::Cow::Owned(format!("127.0.0.1{rest}"))
        }
        _ => std::borrow::Cow::Borrowed(v),
    };
    let v = &*v;
    match Cidr::parse(v) {
        Some(c) => {
            let m = AddrMatch::Net(c);
            out.push(if dst {
                Cond::Dst(m, col.negated)
            } else {
                Cond::Src(m, col.negated)
            });
        }
        None => out.push(Cond::Unknown(format!(
            "{}{} {v}",
            if col.negated { "! " } else { "" },
            if dst { "-d" } else { "-s" }
        ))),
    }
}

/// A port as a listing prints it: a number, or a service name without `-n`.
fn port_number(s: &str) -> Option<u16> {
    if let Ok(n) = s.parse() {
        return Some(n);
    }
    // The names `iptables -L` prints for the ports Kubernetes nodes use most
    // (from /etc/services); any other name is unknown.
    const NAMES: &[(&str, u16)] = &[
        ("ssh", 22),
        ("domain", 53),
        ("http", 80),
        ("https", 443),
        ("bootps", 67),
        ("bootpc", 68),
        ("bgp", 179),
        ("ntp", 123),
        ("mdns", 5353),
        ("kubernetes", 6443),
        ("etcd-client", 2379),
        ("etcd-server", 2380),
        ("http-alt", 8080),
        ("webcache", 8080),
        ("ipp", 631),
        ("microsoft-ds", 445),
        ("netbios-ns", 137),
        ("netbios-dgm", 138),
        ("netbios-ssn", 139),
        ("postgresql", 5432),
        ("redis", 6379),
    ];
    NAMES.iter().find(|(n, _)| *n == s).map(|&(_, p)| p)
}

fn port_range(p: &PortRange_) -> Option<PortRange> {
    let from = port_number(&p.first)?;
    let to = match &p.last {
        Some(l) => port_number(l)?,
        None => from,
    };
    Some(PortRange { from, to })
}

type PortRange_ = plumb_ruleset::model::listed::PortRange;

fn compile_match(m: &ListedMatch, proto: Option<u8>, out: &mut Vec<Cond>) {
    match m {
        ListedMatch::Comment(_) => {}
        ListedMatch::Ports {
            protocol,
            source,
            destination,
            tcp_flags,
        } => {
            let Some(p) = protocol_number(protocol) else {
                out.push(Cond::Unknown(protocol.clone()));
                return;
            };
            out.push(Cond::ModuleProto(p));
            for (side, dst) in [(source, false), (destination, true)] {
                let Some(r) = side else { continue };
                match port_range(r) {
                    Some(range) => out.push(if dst {
                        Cond::Dport(Ports::One(range), r.negated)
                    } else {
                        Cond::Sport(Ports::One(range), r.negated)
                    }),
                    None => out.push(Cond::Unknown(format!(
                        "{protocol} {}:{}",
                        if dst { "dpt" } else { "spt" },
                        r.first
                    ))),
                }
            }
            if let Some(f) = tcp_flags {
                // `flags:0x17/0x02` is `--syn`; other flag tests are not evaluated.
                match f.as_str() {
                    "0x17/0x02" => out.push(Cond::TcpSyn(false)),
                    "!0x17/0x02" => out.push(Cond::TcpSyn(true)),
                    other => out.push(Cond::Unknown(format!("flags:{other}"))),
                }
            }
        }
        ListedMatch::Multiport {
            direction,
            negated,
            ports,
        } => {
            let ranges: Option<Vec<PortRange>> = ports
                .iter()
                .map(|p| match p.split_once(':') {
                    Some((a, b)) => Some(PortRange {
                        from: port_number(a)?,
                        to: port_number(b)?,
                    }),
                    None => port_number(p).map(PortRange::single),
                })
                .collect();
            let Some(ranges) = ranges else {
                out.push(Cond::Unknown(format!("multiport {}", ports.join(","))));
                return;
            };
            if let Some(p) = proto {
                out.push(Cond::ModuleProto(p));
            }
            let ports = Ports::from(ranges);
            out.push(match direction {
                PortDirection::Source => Cond::Sport(ports, *negated),
                PortDirection::Destination => Cond::Dport(ports, *negated),
                PortDirection::Either => Cond::EitherPort(ports, *negated),
            });
        }
        ListedMatch::ConnState {
            negated, states, ..
        } => match ct_bits::parse(&states.join(",")) {
            Some(bits) => out.push(Cond::CtState(bits, *negated)),
            None => out.push(Cond::Unknown(format!("state {}", states.join(",")))),
        },
        ListedMatch::Mark {
            negated,
            value,
            mask,
        } => {
            let text = match mask {
                Some(m) => format!("{value}/{m}"),
                None => value.clone(),
            };
            match parse_mark(&text) {
                Some((value, mask)) => out.push(Cond::Mark {
                    value: value & mask,
                    mask,
                    neg: *negated,
                }),
                None => out.push(Cond::Unknown(format!("mark match {text}"))),
            }
        }
        ListedMatch::AddrType {
            source_type,
            destination_type,
            limit_in,
            limit_out,
        } => {
            if *limit_in || *limit_out {
                out.push(Cond::Unknown("ADDRTYPE limit-in/limit-out".into()));
                return;
            }
            for (t, dst) in [(source_type, false), (destination_type, true)] {
                let Some(t) = t else { continue };
                let types: Option<Vec<AddrType>> =
                    t.value.split(',').map(AddrType::parse).collect();
                match types {
                    Some(types) => out.push(Cond::AddrType {
                        dst,
                        types,
                        neg: t.negated,
                    }),
                    None => out.push(Cond::Unknown(format!("addrtype {}", t.value))),
                }
            }
        }
        ListedMatch::Statistic {
            mode,
            negated,
            probability,
            every,
            ..
        } => {
            let c = match (mode.as_str(), probability, every) {
                ("random", Some(p), _) => {
                    p.parse().ok().map(|p| Cond::Statistic { p, neg: *negated })
                }
                ("nth", _, Some(e)) => e.parse().ok().map(|every| Cond::Nth {
                    every,
                    neg: *negated,
                }),
                _ => None,
            };
            out.push(c.unwrap_or_else(|| Cond::Unknown(format!("statistic mode {mode}"))));
        }
        ListedMatch::Set {
            negated,
            name,
            flags,
        } => out.push(Cond::IpSet {
            name: name.clone(),
            dims: flags.split(',').map(|f| f == "src").collect(),
            neg: *negated,
        }),
        ListedMatch::Limit { average, burst } => {
            out.push(Cond::Limit(format!("limit: avg {average} burst {burst}")))
        }
        ListedMatch::Recent { name, .. } => out.push(Cond::Unknown(format!(
            "recent {}",
            name.as_deref().unwrap_or("DEFAULT")
        ))),
        ListedMatch::Physdev { options } => out.push(Cond::Unknown(format!(
            "PHYSDEV match {}",
            options.join(" ")
        ))),
        other => out.push(Cond::Unknown(format!("{other:?}"))),
    }
}

fn action(rule: &ListedRule, resolve: &dyn Fn(&str) -> Option<u32>) -> Action {
    let Some(target) = rule.target.as_deref() else {
        // A rule without a target only counts packets.
        return Action::NoEffect("(no target)".into());
    };
    let jump = |n: &str| match resolve(n) {
        Some(id) => Jump::Chain(id),
        None => Jump::Missing(n.to_string()),
    };
    if rule.goto {
        return Action::Goto(jump(target));
    }
    let details = rule.target_details.as_deref();
    match target {
        "ACCEPT" => Action::Accept,
        "DROP" => Action::Drop,
        "RETURN" => Action::Return,
        "REJECT" => Action::Reject(match details {
            Some(ListedTarget::Reject { with }) => Some(with.clone()),
            _ => None,
        }),
        "LOG" | "NFLOG" | "ULOG" | "TRACE" => Action::Log(target.to_string()),
        "DNAT" | "SNAT" => match details {
            Some(ListedTarget::Nat { to, .. }) if to.len() == 1 => match NatSpec::parse(&to[0]) {
                Some(spec) if target == "DNAT" => Action::Dnat(Box::new(spec)),
                Some(spec) => Action::Snat(Box::new(spec)),
                None => Action::Unknown(format!("{target} to:{}", to[0])),
            },
            _ => Action::Unknown(format!("{target} {}", rule.extra)),
        },
        "MASQUERADE" => Action::Masquerade(None),
        "MARK" => match details.and_then(|d| d.mark_xset()) {
            Some((value, mask)) => Action::Mark(MarkOp {
                clear: mask,
                xor: value,
            }),
            None => Action::Unknown(format!("MARK {}", rule.extra)),
        },
        t if rule.chain_reference().is_some() => Action::Jump(jump(t)),
        t => Action::Unknown(format!("-j {t} (from a listing)")),
    }
}
