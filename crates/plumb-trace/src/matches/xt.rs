//! Compiling an iptables rule's generic options and matches into [`Cond`]s.
//!
//! Every option of every module is either understood or turns the whole match into
//! [`Cond::Unknown`] with its text: plumb never ignores an option silently.

use super::{AddrMatch, Cond, IfacePattern, Ports, RecentMode, ct_bits};
use crate::addr::{AddrRange, Cidr, PortRange, parse_mark, parse_port_list, protocol_number};
use crate::packet::AddrType;
use plumb_ruleset::iptables::{XtMatchView, XtOptionView, XtView};

/// The conditions of an xt rule, in the order the kernel tests them: generic
/// options first (`ip_packet_match`), then matches as written.
pub fn compile(view: &XtView<'_>) -> Vec<Cond> {
    let mut out = Vec::new();
    compile_into(view, &mut out);
    out
}

/// [`compile`], appending to `out`.
pub fn compile_into(view: &XtView<'_>, out: &mut Vec<Cond>) {
    for o in view.generic() {
        let neg = o.negated();
        let arg = o.arg(0).unwrap_or_default();
        let name = o.name();
        let c = match name {
            "-s" | "--source" | "--src" => addr(&arg).map(|m| Cond::Src(m, neg)),
            "-d" | "--destination" | "--dst" => addr(&arg).map(|m| Cond::Dst(m, neg)),
            "-p" | "--protocol" => match protocol_number(&arg) {
                Some(0) if !neg => continue,
                Some(p) => Some(Cond::Proto(p, neg)),
                None => None,
            },
            "-i" | "--in-interface" => Some(Cond::InIface(IfacePattern::parse(&arg), neg)),
            "-o" | "--out-interface" => Some(Cond::OutIface(IfacePattern::parse(&arg), neg)),
            "-f" | "--fragment" => Some(Cond::Fragment(neg)),
            _ => None,
        };
        out.push(c.unwrap_or_else(|| Cond::Unknown(option_text(&o))));
    }
    for m in view.matches() {
        compile_match(&m, out);
    }
}

fn option_text(o: &XtOptionView<'_>) -> String {
    let mut s = String::new();
    if o.negated() {
        s.push_str("! ");
    }
    s.push_str(o.name());
    for a in o.raw_args() {
        s.push(' ');
        s.push_str(a);
    }
    s
}

fn match_text(m: &XtMatchView<'_>) -> String {
    let mut s = format!("-m {}", m.module());
    for o in m.options() {
        s.push(' ');
        s.push_str(&option_text(&o));
    }
    s
}

fn addr(s: &str) -> Option<AddrMatch> {
    if s.contains('-') && !s.contains('/') {
        return AddrRange::parse(s).map(AddrMatch::Range);
    }
    Cidr::parse(s).map(AddrMatch::Net)
}

fn compile_match(m: &XtMatchView<'_>, out: &mut Vec<Cond>) {
    let start = out.len();
    if compile_known(m, out).is_none() {
        out.truncate(start);
        out.push(Cond::Unknown(match_text(m)));
    }
}

/// `None` when some option is not understood.
fn compile_known(m: &XtMatchView<'_>, out: &mut Vec<Cond>) -> Option<()> {
    let module = m.module();
    match module {
        "comment" | "nfacct" => {}
        "tcp" | "udp" | "sctp" | "udplite" | "dccp" => {
            out.push(Cond::ModuleProto(protocol_number(module)?));
            for o in m.options() {
                let neg = o.negated();
                let arg = o.arg(0).unwrap_or_default();
                match o.name() {
                    "--dport" | "--destination-port" => {
                        out.push(Cond::Dport(Ports::One(PortRange::parse(&arg)?), neg))
                    }
                    "--sport" | "--source-port" => {
                        out.push(Cond::Sport(Ports::One(PortRange::parse(&arg)?), neg))
                    }
                    "--syn" if module == "tcp" => out.push(Cond::TcpSyn(neg)),
                    "--tcp-flags" if module == "tcp" => {
                        // A NEW connection's first packet carries SYN only.
                        let mask = o.arg(0)?;
                        let set = o.arg(1)?;
                        let upper = |s: &str| s.to_ascii_uppercase();
                        let syn_only = upper(&set) == "SYN" && upper(&mask).contains("SYN");
                        if !syn_only {
                            return None;
                        }
                        out.push(Cond::TcpSyn(neg));
                    }
                    _ => return None,
                }
            }
        }
        "icmp" => {
            out.push(Cond::ModuleProto(1));
            for o in m.options() {
                match o.name() {
                    "--icmp-type" => {
                        let arg = o.arg(0)?;
                        let (ty, code) = icmp_type(&arg)?;
                        out.push(Cond::IcmpType {
                            ty,
                            code,
                            neg: o.negated(),
                        });
                    }
                    _ => return None,
                }
            }
        }
        "multiport" => {
            for o in m.options() {
                let neg = o.negated();
                let list = Ports::from(parse_port_list(&o.arg(0)?)?);
                out.push(match o.name() {
                    "--dports" | "--destination-ports" => Cond::Dport(list, neg),
                    "--sports" | "--source-ports" => Cond::Sport(list, neg),
                    "--ports" => Cond::EitherPort(list, neg),
                    _ => return None,
                });
            }
        }
        "mark" | "connmark" => {
            for o in m.options() {
                if o.name() != "--mark" {
                    return None;
                }
                let (value, mask) = parse_mark(&o.arg(0)?)?;
                let neg = o.negated();
                out.push(if module == "mark" {
                    Cond::Mark { value, mask, neg }
                } else {
                    Cond::ConnMark { value, mask, neg }
                });
            }
        }
        "conntrack" | "state" => {
            for o in m.options() {
                let neg = o.negated();
                let arg = o.arg(0)?;
                out.push(match o.name() {
                    "--ctstate" | "--state" => Cond::CtState(ct_bits::parse(&arg)?, neg),
                    "--ctorigsrc" => Cond::CtOrigSrc(addr(&arg)?, neg),
                    "--ctorigdst" => Cond::CtOrigDst(addr(&arg)?, neg),
                    "--ctorigdstport" => Cond::CtOrigDport(PortRange::parse(&arg)?, neg),
                    "--ctproto" => Cond::Proto(protocol_number(&arg)?, neg),
                    "--ctdir" if arg.eq_ignore_ascii_case("ORIGINAL") => {
                        if neg {
                            Cond::Const(
                                false,
                                "--ctdir REPLY (plumb traces original-direction packets)",
                            )
                        } else {
                            continue;
                        }
                    }
                    _ => return None,
                });
            }
        }
        "addrtype" => {
            for o in m.options() {
                let neg = o.negated();
                let dst = match o.name() {
                    "--src-type" => false,
                    "--dst-type" => true,
                    _ => return None,
                };
                let types = o
                    .arg(0)?
                    .split(',')
                    .map(AddrType::parse)
                    .collect::<Option<Vec<_>>>()?;
                out.push(Cond::AddrType { dst, types, neg });
            }
        }
        "statistic" => {
            let mut mode = None;
            let (mut p, mut every, mut neg) = (None, None, false);
            for o in m.options() {
                match o.name() {
                    "--mode" => mode = Some(o.arg(0)?),
                    "--probability" => {
                        p = Some(o.arg(0)?.parse::<f64>().ok()?);
                        neg |= o.negated();
                    }
                    "--every" => {
                        every = Some(o.arg(0)?.parse::<u32>().ok()?);
                        neg |= o.negated();
                    }
                    "--packet" => {}
                    _ => return None,
                }
            }
            match mode.as_deref() {
                Some("random") => {
                    let p = p?;
                    if !p.is_finite() {
                        return None;
                    }
                    // The kernel compares a 31-bit random number with round(p * 2^31).
                    let scaled = (p * 2147483648.0).round() / 2147483648.0;
                    out.push(Cond::Statistic { p: scaled, neg });
                }
                Some("nth") => out.push(Cond::Nth { every: every?, neg }),
                _ => return None,
            }
        }
        "recent" => {
            let (mut name, mut mode, mut source, mut neg) =
                ("DEFAULT".to_string(), None, true, false);
            for o in m.options() {
                match o.name() {
                    "--name" => name = o.arg(0)?.to_string(),
                    "--set" | "--rcheck" | "--update" | "--remove" => {
                        neg |= o.negated();
                        mode = Some(match o.name() {
                            "--set" => RecentMode::Set,
                            "--rcheck" => RecentMode::Check,
                            "--update" => RecentMode::Update,
                            _ => RecentMode::Remove,
                        });
                    }
                    "--rsource" => source = true,
                    "--rdest" => source = false,
                    // Timing options narrow "has an entry" to "has a recent enough entry":
                    // the branch plumb offers already covers both.
                    "--seconds" | "--reap" | "--mask" | "--rttl" => {}
                    "--hitcount" if o.arg(0).as_deref() == Some("1") => {}
                    _ => return None,
                }
            }
            out.push(Cond::Recent {
                name,
                mode: mode?,
                source,
                neg,
            });
        }
        "set" => {
            for o in m.options() {
                match o.name() {
                    "--match-set" => {
                        let name = o.arg(0)?.to_string();
                        let dims = o
                            .arg(1)?
                            .split(',')
                            .map(|f| match f {
                                "src" => Some(true),
                                "dst" => Some(false),
                                _ => None,
                            })
                            .collect::<Option<Vec<_>>>()?;
                        out.push(Cond::IpSet {
                            name,
                            dims,
                            neg: o.negated(),
                        });
                    }
                    _ => return None,
                }
            }
        }
        "physdev" => {
            for o in m.options() {
                let neg = o.negated();
                out.push(match o.name() {
                    "--physdev-in" => Cond::PhysdevIn(Some(IfacePattern::parse(&o.arg(0)?)), neg),
                    "--physdev-out" => Cond::PhysdevOut(Some(IfacePattern::parse(&o.arg(0)?)), neg),
                    "--physdev-is-in" => Cond::PhysdevIn(None, neg),
                    "--physdev-is-out" => Cond::PhysdevOut(None, neg),
                    "--physdev-is-bridged" => Cond::PhysdevBridged(neg),
                    _ => return None,
                });
            }
        }
        "limit" => out.push(Cond::Limit(match_text(m))),
        "iprange" => {
            for o in m.options() {
                let r = AddrMatch::Range(AddrRange::parse(&o.arg(0)?)?);
                out.push(match o.name() {
                    "--src-range" => Cond::Src(r, o.negated()),
                    "--dst-range" => Cond::Dst(r, o.negated()),
                    _ => return None,
                });
            }
        }
        "policy" => {
            // plumb traces plain (non-IPsec) packets.
            let mut none = None;
            for o in m.options() {
                match o.name() {
                    "--dir" => {}
                    "--pol" => none = Some(o.arg(0)? == "none"),
                    _ => return None,
                }
            }
            if !none? {
                out.push(Cond::Const(
                    false,
                    "--pol ipsec (plumb traces plain packets)",
                ));
            }
        }
        _ => return None,
    }
    Some(())
}

/// `echo-request`, `8`, `3/3`, `any`.
fn icmp_type(s: &str) -> Option<(Option<u8>, Option<u8>)> {
    if let Some((t, c)) = s.split_once('/') {
        return Some((Some(t.parse().ok()?), Some(c.parse().ok()?)));
    }
    Some(match s {
        "any" => (None, None),
        "echo-reply" | "pong" => (Some(0), None),
        "destination-unreachable" => (Some(3), None),
        "port-unreachable" => (Some(3), Some(3)),
        "redirect" => (Some(5), None),
        "echo-request" | "ping" => (Some(8), None),
        "time-exceeded" | "ttl-exceeded" => (Some(11), None),
        "parameter-problem" => (Some(12), None),
        "timestamp-request" => (Some(13), None),
        "timestamp-reply" => (Some(14), None),
        n => (Some(n.parse().ok()?), None),
    })
}
