//! What a rule does when it matches ([`Action`]), compiled from iptables targets.
//!
//! Terminal verdicts end the base chain (ACCEPT) or the packet (DROP, REJECT); NAT
//! targets rewrite the packet and end the nat chain; MARK/CONNMARK change marks and
//! continue; logging and other targets that do not change the path continue. A
//! target plumb does not model ends the trace with an explicit unknown outcome.

use crate::addr::{PortRange, parse_mark};
use crate::ir::{Action, Jump, MarkOp, NatSpec};
use plumb_ruleset::iptables::XtTargetView;

impl NatSpec {
    /// `10.42.1.5:8443`, `10.0.0.1-10.0.0.3:80-90`, `:8080`, `[fd00::1]:80`.
    pub fn parse(s: &str) -> Option<NatSpec> {
        let s = s.trim();
        let (addr_part, port_part) = if let Some(rest) = s.strip_prefix('[') {
            let (a, p) = rest.split_once(']')?;
            (a, p.strip_prefix(':'))
        } else if s.matches(':').count() > 1 {
            (s, None)
        } else {
            match s.split_once(':') {
                Some((a, p)) => (a, Some(p)),
                None => (s, None),
            }
        };
        let (addr, addr_to) = if addr_part.is_empty() {
            (None, None)
        } else if let Some((a, b)) = addr_part.split_once('-') {
            (Some(a.parse().ok()?), Some(b.parse().ok()?))
        } else {
            (Some(addr_part.parse().ok()?), None)
        };
        let ports = match port_part {
            Some(p) => Some(PortRange::parse(p)?),
            None => None,
        };
        Some(NatSpec {
            addr,
            addr_to: addr_to.filter(|t| Some(*t) != addr),
            ports,
            text: s.to_string(),
        })
    }
}

impl MarkOp {
    /// The mark after the operation.
    pub fn apply(self, old: u32) -> u32 {
        (old & !self.clear) ^ self.xor
    }
}

/// Targets that let the packet continue without changing anything plumb traces.
const NO_EFFECT: &[&str] = &[
    "AUDIT",
    "CHECKSUM",
    "CLASSIFY",
    "CONNSECMARK",
    "DSCP",
    "ECN",
    "HL",
    "IDLETIMER",
    "LED",
    "RATEEST",
    "SECMARK",
    "TCPMSS",
    "TCPOPTSTRIP",
    "TEE",
    "TOS",
    "TTL",
    "SET",
];

/// Compiles an iptables target. `resolve` maps a chain name to its id.
pub fn compile_xt(t: &XtTargetView<'_>, resolve: &dyn Fn(&str) -> Option<u32>) -> Action {
    let name = t.name();
    let opt = |n: &str| t.option(n).and_then(|o| o.arg(0));
    let unknown = || {
        let mut s = format!("-j {name}");
        for o in t.options() {
            s.push(' ');
            s.push_str(o.name());
            for a in o.raw_args() {
                s.push(' ');
                s.push_str(a);
            }
        }
        Action::Unknown(s)
    };
    let jump = |n: &str| match resolve(n) {
        Some(id) => Jump::Chain(id),
        None => Jump::Missing(n.to_string()),
    };
    if t.is_goto() {
        return Action::Goto(jump(name));
    }
    match name {
        "ACCEPT" => Action::Accept,
        "DROP" => Action::Drop,
        "RETURN" => Action::Return,
        "REJECT" => Action::Reject(opt("--reject-with").map(|w| w.into_owned())),
        "QUEUE" => Action::Queue("QUEUE".into()),
        "NFQUEUE" => Action::Queue(format!(
            "NFQUEUE {}",
            opt("--queue-num").unwrap_or(std::borrow::Cow::Borrowed("0"))
        )),
        "DNAT" => match opt("--to-destination").as_deref().and_then(NatSpec::parse) {
            Some(spec) if t.options().count() <= 3 => Action::Dnat(Box::new(spec)),
            _ => unknown(),
        },
        "SNAT" => match opt("--to-source").as_deref().and_then(NatSpec::parse) {
            Some(spec) => Action::Snat(Box::new(spec)),
            None => unknown(),
        },
        "MASQUERADE" | "REDIRECT" => {
            let ports = match opt("--to-ports") {
                Some(p) => match PortRange::parse(&p.replace('-', ":")) {
                    Some(r) => Some(r),
                    None => return unknown(),
                },
                None => None,
            };
            if name == "MASQUERADE" {
                Action::Masquerade(ports)
            } else {
                Action::Redirect(ports)
            }
        }
        "MARK" => mark_op(t).map(Action::Mark).unwrap_or_else(unknown),
        "CONNMARK" => {
            let masks = || {
                let m = |n: &str| opt(n).and_then(|v| parse_mark(&v)).map(|(v, _)| v);
                let both = opt("--mask").and_then(|v| parse_mark(&v)).map(|(v, _)| v);
                (
                    m("--nfmask").or(both).unwrap_or(u32::MAX),
                    m("--ctmask").or(both).unwrap_or(u32::MAX),
                )
            };
            if t.option("--save-mark").is_some() {
                let (nfmask, ctmask) = masks();
                Action::SaveMark { nfmask, ctmask }
            } else if t.option("--restore-mark").is_some() {
                let (nfmask, ctmask) = masks();
                Action::RestoreMark { nfmask, ctmask }
            } else {
                mark_op(t).map(Action::ConnMark).unwrap_or_else(unknown)
            }
        }
        "LOG" | "NFLOG" | "ULOG" | "TRACE" => Action::Log(name.to_string()),
        "NOTRACK" => Action::NoTrack,
        "CT" => {
            if t.option("--notrack").is_some() {
                Action::NoTrack
            } else if t.options().all(|o| {
                matches!(
                    o.name(),
                    "--zone"
                        | "--zone-orig"
                        | "--zone-reply"
                        | "--helper"
                        | "--timeout"
                        | "--ctevents"
                        | "--expevents"
                )
            }) {
                Action::NoEffect(format!("CT {}", opt("--zone").unwrap_or_default()))
            } else {
                unknown()
            }
        }
        n if NO_EFFECT.contains(&n) => Action::NoEffect(n.to_string()),
        n if plumb_ruleset::iptables::TARGET_EXTENSIONS.contains(&n) => unknown(),
        n => Action::Jump(jump(n)),
    }
}

fn mark_op(t: &XtTargetView<'_>) -> Option<MarkOp> {
    let o = t.options().next()?;
    let (v, m) = parse_mark(&o.arg(0)?)?;
    Some(match o.name() {
        "--set-xmark" => MarkOp { clear: m, xor: v },
        // --set-mark v/m: (old & !m) | v == (old & !m) ^ v when v within m.
        "--set-mark" => {
            if m == u32::MAX {
                MarkOp {
                    clear: u32::MAX,
                    xor: v,
                }
            } else {
                MarkOp {
                    clear: m | v,
                    xor: v,
                }
            }
        }
        "--and-mark" => MarkOp { clear: !v, xor: 0 },
        "--or-mark" => MarkOp { clear: v, xor: v },
        "--xor-mark" => MarkOp { clear: 0, xor: v },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nat_specs() {
        let s = NatSpec::parse("10.42.1.5:8443").unwrap();
        assert_eq!(s.addr, Some("10.42.1.5".parse().unwrap()));
        assert_eq!(s.ports, Some(PortRange::single(8443)));
        assert_eq!(
            NatSpec::parse("10.0.0.1-10.0.0.3").unwrap().addr_to,
            Some("10.0.0.3".parse().unwrap())
        );
        assert!(NatSpec::parse("0.0.0.0:0:x").is_none());
    }

    #[test]
    fn mark_ops() {
        // kube-proxy: --set-xmark 0x4000/0x4000 sets the bit; --set-xmark 0x4000/0x0 toggles it.
        assert_eq!(
            MarkOp {
                clear: 0x4000,
                xor: 0x4000
            }
            .apply(0x1),
            0x4001
        );
        assert_eq!(
            MarkOp {
                clear: 0,
                xor: 0x4000
            }
            .apply(0x4001),
            0x1
        );
    }
}
