//! Compiled matches ([`Cond`]) and their evaluation against a packet.
//!
//! Rules are compiled once ([`xt`] for iptables rules, `crate::nft` for native nft)
//! into conditions that evaluate without parsing. Evaluation returns [`Eval`]: a
//! definite yes/no, a random branch with its probability (`statistic`, `numgen`), or
//! an explicit unknown with the reason (a field plumb was not told, a match it does
//! not model) that the simulator turns into two labelled branches.

pub mod listed;
pub mod xt;

use crate::addr::PortRange;
use crate::constraint::{AddrSet, Fact, RangeSet, ct_nat, port_set};
use crate::ipset::{Dim, Key};
use crate::ir::{AddrMatch, Cond, Field, IfacePattern, Ports, RecentMode, ct_bits};
use crate::packet::Node;
use std::net::IpAddr;

/// Result of evaluating one condition.
#[derive(Clone, Debug, PartialEq)]
pub enum Eval {
    /// The condition holds for this packet.
    Yes,
    /// The condition fails for this packet.
    No,
    /// Matches with this probability (independent random draw).
    Random(f64),
    /// plumb cannot decide; the string says why.
    Unknown(String),
}

impl Eval {
    fn from(b: bool) -> Eval {
        if b { Eval::Yes } else { Eval::No }
    }

    fn negate_if(self, neg: bool) -> Eval {
        if !neg {
            return self;
        }
        match self {
            Eval::Yes => Eval::No,
            Eval::No => Eval::Yes,
            Eval::Random(p) => Eval::Random(1.0 - p),
            u => u,
        }
    }
}

impl AddrMatch {
    /// Whether `ip` is in the prefix, the range, or any of the alternatives.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match self {
            AddrMatch::Net(c) => c.contains(ip),
            AddrMatch::Range(r) => r.contains(ip),
            AddrMatch::Any(v) => v.iter().any(|m| m.contains(ip)),
        }
    }
}

impl std::ops::Deref for Ports {
    type Target = [PortRange];
    fn deref(&self) -> &[PortRange] {
        match self {
            Ports::One(r) => std::slice::from_ref(r),
            Ports::Many(v) => v,
        }
    }
}

impl From<Vec<PortRange>> for Ports {
    fn from(v: Vec<PortRange>) -> Ports {
        match v.as_slice() {
            [one] => Ports::One(*one),
            _ => Ports::Many(v.into_boxed_slice()),
        }
    }
}

impl IfacePattern {
    /// Reads an interface argument: a trailing `+` (iptables) or `*` (nft) makes it a prefix
    /// pattern.
    pub fn parse(s: &str) -> IfacePattern {
        match s.strip_suffix('+').or_else(|| s.strip_suffix('*')) {
            Some(p) => IfacePattern {
                name: p.to_string(),
                prefix: true,
            },
            None => IfacePattern {
                name: s.to_string(),
                prefix: false,
            },
        }
    }

    /// Whether the interface `iface` matches the pattern.
    pub fn matches(&self, iface: &str) -> bool {
        if self.prefix {
            iface.starts_with(&self.name)
        } else {
            iface == self.name
        }
    }
}

/// What conditions can see of the packet at the current hook.
pub struct View<'a> {
    /// Source address; `None` when the trace was not told it (any client, or the address
    /// the kernel picks for a host's packet).
    pub src: Option<IpAddr>,
    /// Destination address, as possibly rewritten by DNAT on this path.
    pub dst: IpAddr,
    /// Source port; `None` when not told (an ephemeral port).
    pub sport: Option<u16>,
    /// Destination port; `None` when not told or for protocols without ports.
    pub dport: Option<u16>,
    /// Layer-4 protocol number (6 TCP, 17 UDP, 1 ICMP, ...).
    pub proto: u8,
    /// ICMP type of an ICMP packet (8: echo request).
    pub icmp_type: u8,
    /// `Some("")`: the hook has no such device; `None`: unknown.
    pub in_iface: Option<&'a str>,
    /// Output interface, as for `in_iface`: `Some("")` at hooks without an output device
    /// (prerouting, input), `None` when routing is not known.
    pub out_iface: Option<&'a str>,
    /// Bridge port the frame came in on (`-m physdev`); `None` when not known or not bridged.
    pub physdev_in: Option<&'a str>,
    /// Bridge port the frame leaves by; `None` when not known or not bridged.
    pub physdev_out: Option<&'a str>,
    /// The packet's mark (`meta mark`, `-j MARK`), as rules on this path set it.
    pub mark: u32,
    /// The connection's mark (`ct mark`, `-j CONNMARK`).
    pub ct_mark: u32,
    /// `ct_bits` of the connection (state plus SNAT/DNAT status); `None` unknown.
    pub ct: Option<u16>,
    /// The connection's original source (conntrack's tuple); `None` when unknown.
    pub orig_src: Option<IpAddr>,
    /// The connection's original destination, before any DNAT.
    pub orig_dst: IpAddr,
    /// The connection's original destination port; `None` when unknown.
    pub orig_dport: Option<u16>,
    /// The node the packet is traced on: its addresses, ipsets, assumptions.
    pub node: &'a Node,
    /// Lists `-m recent --set` added this source to during this trace.
    pub recent_added: &'a [String],
    /// The nft sets and maps of the table being evaluated, compiled.
    pub sets: &'a [crate::ir::CompiledSet],
}

/// What [`Cond::fact`] needs to know about the path beyond the packet's fields.
#[derive(Clone, Copy, Debug)]
pub struct FactContext {
    /// The conntrack state bit of an existing connection whose NAT status is unknown
    /// (`View::ct` is `None`): ESTABLISHED or RELATED.
    pub ct_base: u16,
    /// An unknown `View::src` is the packet's original source (no MASQUERADE rewrote it).
    pub src_is_orig: bool,
    /// The hook, and how many times the path rewrote the packet or its marks: they
    /// tell apart facts that may differ after a rewrite or at another hook.
    pub hook: crate::ir::HookId,
    /// How many times the path rewrote the packet or its marks so far (see `hook`).
    pub generation: u32,
    /// The condition's place: chain, rule and item (for facts of one rule).
    pub site: (u32, u32, u16),
}

impl View<'_> {
    fn has_ports(&self) -> bool {
        matches!(self.proto, 6 | 17 | 132 | 136 | 33)
    }

    /// The value of a field as a set/map key atom.
    pub fn atom(&self, f: Field) -> Option<crate::ir::Atom> {
        use crate::ir::Atom;
        Some(match f {
            Field::Src => Atom::Addr(self.src?),
            Field::Dst => Atom::Addr(self.dst),
            Field::Sport => Atom::Num(self.sport? as u64),
            Field::Dport => Atom::Num(self.dport? as u64),
            Field::Proto => Atom::Num(self.proto as u64),
            Field::Mark => Atom::Num(self.mark as u64),
            Field::InIface => Atom::Name(self.in_iface?.to_string()),
            Field::OutIface => Atom::Name(self.out_iface?.to_string()),
        })
    }
}

/// An undecidable condition, phrased as the statement that holds when it matches.
fn unknown(what: &str, cond: &Cond) -> Eval {
    Eval::Unknown(format!(
        "`{}` matches ({what} is not known)",
        cond.describe()
    ))
}

impl Cond {
    /// Conditions whose result depends only on the packet (no randomness, no state change).
    pub fn is_pure(&self) -> bool {
        !matches!(
            self,
            Cond::Statistic { .. } | Cond::Nth { .. } | Cond::Recent { .. } | Cond::Limit(_)
        )
    }

    /// Evaluates the condition against what the path knows of the packet: yes, no, a random draw,
    /// or unknown with the statement that would make it match.
    pub fn eval(&self, v: &View<'_>) -> Eval {
        match self {
            Cond::Src(m, neg) => match v.src {
                Some(a) => Eval::from(m.contains(a)).negate_if(*neg),
                None => unknown("the source address", self),
            },
            Cond::Dst(m, neg) => Eval::from(m.contains(v.dst)).negate_if(*neg),
            Cond::Proto(p, neg) => Eval::from(v.proto == *p).negate_if(*neg),
            Cond::ModuleProto(p) => Eval::from(v.proto == *p),
            Cond::InIface(p, neg) => match v.in_iface {
                Some(i) => Eval::from(p.matches(i)).negate_if(*neg),
                None => unknown("the input interface", self),
            },
            Cond::OutIface(p, neg) => match v.out_iface {
                Some(i) => Eval::from(p.matches(i)).negate_if(*neg),
                None => unknown("the output interface", self),
            },
            Cond::NftIface { out, pat, neg } => match if *out { v.out_iface } else { v.in_iface } {
                Some("") => Eval::No,
                Some(i) => Eval::from(pat.iter().any(|p| p.matches(i))).negate_if(*neg),
                None => unknown("the interface", self),
            },
            Cond::Sport(r, neg) => {
                if !v.has_ports() {
                    return Eval::No;
                }
                match v.sport {
                    Some(p) => Eval::from(r.iter().any(|r| r.contains(p))).negate_if(*neg),
                    None => unknown("the source port", self),
                }
            }
            Cond::Dport(r, neg) => {
                if !v.has_ports() {
                    return Eval::No;
                }
                match v.dport {
                    Some(p) => Eval::from(r.iter().any(|r| r.contains(p))).negate_if(*neg),
                    None => unknown("the destination port", self),
                }
            }
            Cond::EitherPort(r, neg) => {
                if !v.has_ports() {
                    return Eval::No;
                }
                let hit = |p: Option<u16>| p.map(|p| r.iter().any(|r| r.contains(p)));
                match (hit(v.sport), hit(v.dport)) {
                    (Some(true), _) | (_, Some(true)) => Eval::Yes.negate_if(*neg),
                    (Some(false), Some(false)) => Eval::No.negate_if(*neg),
                    _ => unknown("the source port", self),
                }
            }
            Cond::TcpSyn(neg) => match v.ct {
                Some(ct) if v.proto == 6 && ct & ct_bits::NEW != 0 => Eval::Yes.negate_if(*neg),
                _ if v.proto != 6 => Eval::No,
                _ => unknown("the TCP flags", self),
            },
            Cond::IcmpType { ty, code, neg } => {
                if v.proto != 1 {
                    return Eval::No;
                }
                let m = ty.is_none_or(|t| t == v.icmp_type) && code.is_none_or(|c| c == 0);
                Eval::from(m).negate_if(*neg)
            }
            Cond::Mark { value, mask, neg } => Eval::from(v.mark & mask == *value).negate_if(*neg),
            Cond::ConnMark { value, mask, neg } => {
                Eval::from(v.ct_mark & mask == *value).negate_if(*neg)
            }
            Cond::CtState(bits, neg) => match v.ct {
                Some(ct) => Eval::from(ct & bits != 0).negate_if(*neg),
                None => unknown("the connection's NAT status", self),
            },
            Cond::CtOrigSrc(m, neg) => match v.orig_src {
                Some(a) => Eval::from(m.contains(a)).negate_if(*neg),
                None => unknown("the source address", self),
            },
            Cond::CtOrigDst(m, neg) => Eval::from(m.contains(v.orig_dst)).negate_if(*neg),
            Cond::CtOrigDport(r, neg) => match v.orig_dport {
                Some(p) => Eval::from(r.contains(p)).negate_if(*neg),
                None => unknown("the destination port", self),
            },
            Cond::AddrType { dst, types, neg } => {
                let addr = if *dst { Some(v.dst) } else { v.src };
                match addr {
                    Some(a) => {
                        let t = v.node.addr_type(a);
                        Eval::from(types.contains(&t)).negate_if(*neg)
                    }
                    None => unknown("the source address", self),
                }
            }
            Cond::Statistic { p, neg } => Eval::Random(p.clamp(0.0, 1.0)).negate_if(*neg),
            Cond::Nth { every, neg } => Eval::Random(1.0 / (*every).max(1) as f64).negate_if(*neg),
            Cond::Recent {
                name,
                mode,
                source,
                neg,
            } => {
                if *mode == RecentMode::Set {
                    return Eval::Yes.negate_if(*neg);
                }
                if v.recent_added.iter().any(|n| n == name) {
                    return Eval::Yes.negate_if(*neg);
                }
                if *source && v.src.is_none() {
                    return unknown("the source address", self);
                }
                match v.node.recent {
                    crate::packet::RecentAssumption::Fresh => Eval::No.negate_if(*neg),
                    crate::packet::RecentAssumption::Branch => Eval::Unknown(format!(
                        "the client has an entry in recent list {name} (session affinity){}",
                        if *neg {
                            " [negated match: it does not]"
                        } else {
                            ""
                        }
                    )),
                }
            }
            Cond::IpSet { name, dims, neg } => {
                let key = |i: usize, d: Dim| {
                    let src = dims.get(i).copied().unwrap_or(true);
                    match d {
                        Dim::Port => Key::Port(v.proto, if src { v.sport } else { v.dport }),
                        Dim::Iface => Key::Iface(if src { v.in_iface } else { v.out_iface }),
                        _ => Key::Addr(if src { v.src } else { Some(v.dst) }),
                    }
                };
                if v.node.ipsets.get(name).is_none() {
                    return Eval::Unknown(format!(
                        "`{}` matches (ipset {name} is not known: pass `ipset save` output with --ipsets)",
                        self.describe()
                    ));
                }
                match crate::ipset::contains(&v.node.ipsets, name, &key, 0) {
                    Some(b) => Eval::from(b).negate_if(*neg),
                    None => unknown("a field the set needs", self),
                }
            }
            Cond::PhysdevIn(p, neg) => match (v.physdev_in, p) {
                (Some(i), Some(p)) => Eval::from(p.matches(i)).negate_if(*neg),
                (Some(_), None) => Eval::Yes.negate_if(*neg),
                (None, _) => unknown("the bridge port", self),
            },
            Cond::PhysdevOut(p, neg) => match (v.physdev_out, p) {
                (Some(i), Some(p)) => Eval::from(p.matches(i)).negate_if(*neg),
                (Some(_), None) => Eval::Yes.negate_if(*neg),
                (None, _) => unknown("the bridge port", self),
            },
            Cond::PhysdevBridged(neg) => match (v.physdev_in, v.physdev_out) {
                (Some(_), _) | (_, Some(_)) => Eval::Yes.negate_if(*neg),
                _ => unknown("whether the packet is bridged", self),
            },
            Cond::Limit(text) => Eval::Unknown(format!(
                "`{text}` matches (the packet is within the rate limit)"
            )),
            Cond::Fragment(neg) => Eval::No.negate_if(*neg),
            Cond::NftSet { fields, set, neg } => {
                let mut key = Vec::with_capacity(fields.len());
                for f in fields {
                    match v.atom(*f) {
                        Some(a) => key.push(a),
                        None => return unknown("a field of the lookup key", self),
                    }
                }
                match crate::ir::lookup(v.sets, set, &key) {
                    Some(hit) => Eval::from(hit.is_some()).negate_if(*neg),
                    None => unknown("the set content", self),
                }
            }
            Cond::Const(b, _) => Eval::from(*b),
            Cond::Unknown(text) => Eval::Unknown(format!(
                "`{text}` matches (plumb does not evaluate this match)"
            )),
        }
    }

    /// Whether the condition is negated (`!`).
    fn negated(&self) -> bool {
        match self {
            Cond::Src(_, n)
            | Cond::Dst(_, n)
            | Cond::Proto(_, n)
            | Cond::InIface(_, n)
            | Cond::OutIface(_, n)
            | Cond::Sport(_, n)
            | Cond::Dport(_, n)
            | Cond::EitherPort(_, n)
            | Cond::TcpSyn(n)
            | Cond::CtState(_, n)
            | Cond::CtOrigSrc(_, n)
            | Cond::CtOrigDst(_, n)
            | Cond::CtOrigDport(_, n)
            | Cond::PhysdevIn(_, n)
            | Cond::PhysdevOut(_, n)
            | Cond::PhysdevBridged(n)
            | Cond::Fragment(n) => *n,
            Cond::NftIface { neg, .. }
            | Cond::IcmpType { neg, .. }
            | Cond::Mark { neg, .. }
            | Cond::ConnMark { neg, .. }
            | Cond::AddrType { neg, .. }
            | Cond::Statistic { neg, .. }
            | Cond::Nth { neg, .. }
            | Cond::Recent { neg, .. }
            | Cond::IpSet { neg, .. }
            | Cond::NftSet { neg, .. } => *neg,
            Cond::ModuleProto(_) | Cond::Limit(_) | Cond::Const(..) | Cond::Unknown(_) => false,
        }
    }

    /// The condition without its negation (a copy only when it is negated).
    fn positive(&self) -> std::borrow::Cow<'_, Cond> {
        if !self.negated() {
            return std::borrow::Cow::Borrowed(self);
        }
        let mut c = self.clone();
        match &mut c {
            Cond::Src(_, n)
            | Cond::Dst(_, n)
            | Cond::Proto(_, n)
            | Cond::InIface(_, n)
            | Cond::OutIface(_, n)
            | Cond::Sport(_, n)
            | Cond::Dport(_, n)
            | Cond::EitherPort(_, n)
            | Cond::TcpSyn(n)
            | Cond::CtState(_, n)
            | Cond::CtOrigSrc(_, n)
            | Cond::CtOrigDst(_, n)
            | Cond::CtOrigDport(_, n)
            | Cond::PhysdevIn(_, n)
            | Cond::PhysdevOut(_, n)
            | Cond::PhysdevBridged(n)
            | Cond::Fragment(n) => *n = false,
            Cond::NftIface { neg, .. }
            | Cond::IcmpType { neg, .. }
            | Cond::Mark { neg, .. }
            | Cond::ConnMark { neg, .. }
            | Cond::AddrType { neg, .. }
            | Cond::Statistic { neg, .. }
            | Cond::Nth { neg, .. }
            | Cond::Recent { neg, .. }
            | Cond::IpSet { neg, .. }
            | Cond::NftSet { neg, .. } => *neg = false,
            Cond::ModuleProto(_) | Cond::Limit(_) | Cond::Const(..) | Cond::Unknown(_) => {}
        }
        std::borrow::Cow::Owned(c)
    }

    /// What an undecided condition (`eval` gave `Unknown(why)`) says about what plumb
    /// does not know: the condition matches exactly when the fact holds, or exactly
    /// when it does not if the bool is true (a negated match).
    ///
    /// Conditions on an unknown field give a set of values of that field. Anything
    /// else is an atom whose key names what its answer depends on, so the same
    /// question gets the same answer along a path: an ipset, nft set or recent-list
    /// lookup by its key values; a match plumb does not evaluate by its text, hook and
    /// the path's rewrite count; a rate limit or quota (whose state each evaluation
    /// changes) by its rule (`cx.site`), so one path assumes one answer per rule;
    /// the keys of those start with `@`.
    pub fn fact(&self, v: &View<'_>, cx: &FactContext, why: &str) -> (Fact, bool) {
        let v6 = v.dst.is_ipv6();
        let unknown_src = v.src.is_none() && cx.src_is_orig;
        let field = match self {
            Cond::Src(m, neg) if unknown_src => Some((Fact::Src(AddrSet::of_match(m, v6)), *neg)),
            Cond::CtOrigSrc(m, neg) if v.orig_src.is_none() => {
                Some((Fact::Src(AddrSet::of_match(m, v6)), *neg))
            }
            Cond::AddrType {
                dst: false,
                types,
                neg,
            } if unknown_src => Some((Fact::Src(AddrSet::of_types(types, v.node, v6)), *neg)),
            Cond::Sport(r, neg) if v.sport.is_none() => Some((Fact::Sport(port_set(r)), *neg)),
            Cond::Dport(r, neg) if v.dport.is_none() => Some((Fact::Dport(port_set(r)), *neg)),
            Cond::CtOrigDport(r, neg) if v.orig_dport.is_none() => Some((
                Fact::Dport(RangeSet::range(r.from as u128, r.to as u128)),
                *neg,
            )),
            // One side is known and missed (a hit would have decided the match).
            Cond::EitherPort(r, neg) => match (v.sport, v.dport) {
                (None, Some(_)) => Some((Fact::Sport(port_set(r)), *neg)),
                (Some(_), None) => Some((Fact::Dport(port_set(r)), *neg)),
                _ => None,
            },
            Cond::InIface(p, neg) if v.in_iface.is_none() => {
                Some((Fact::InIface(vec![p.clone()]), *neg))
            }
            Cond::OutIface(p, neg) if v.out_iface.is_none() => {
                Some((Fact::OutIface(vec![p.clone()]), *neg))
            }
            Cond::NftIface {
                out: false,
                pat,
                neg,
            } if v.in_iface.is_none() => Some((Fact::InIface(pat.clone()), *neg)),
            Cond::NftIface {
                out: true,
                pat,
                neg,
            } if v.out_iface.is_none() => Some((Fact::OutIface(pat.clone()), *neg)),
            Cond::CtState(bits, neg) if v.ct.is_none() => {
                Some((Fact::CtNat(ct_nat::matching(cx.ct_base, *bits)), *neg))
            }
            _ => None,
        };
        if let Some(f) = field {
            return f;
        }
        let neg = self.negated();
        let pos = self.positive();
        // The text says what "matches" means for the condition without its negation.
        let text: std::sync::Arc<str> = match neg {
            false => why.into(),
            true => match pos.eval(v) {
                Eval::Unknown(w) => w.into(),
                _ => why.into(),
            },
        };
        let (chain, rule, item) = cx.site;
        let key = match &*pos {
            Cond::Limit(_) => format!("@{chain}:{rule}:{item} limit"),
            Cond::Unknown(t)
                if ["-m hashlimit", "-m quota"]
                    .iter()
                    .any(|m| t.starts_with(m)) =>
            {
                format!("@{chain}:{rule}:{item} match")
            }
            Cond::Recent { name, source, .. } => {
                if *source {
                    format!("recent {name} src={:?}", v.src)
                } else {
                    format!("recent {name} dst={}", v.dst)
                }
            }
            Cond::IpSet { .. } | Cond::NftSet { .. } => format!(
                "{pos:?} src={:?} sport={:?} dst={} dport={:?} proto={} in={:?} out={:?}",
                v.src, v.sport, v.dst, v.dport, v.proto, v.in_iface, v.out_iface
            ),
            Cond::TcpSyn(_) => "tcp syn".to_string(),
            other => format!("{other:?} @{:?}#{}", cx.hook, cx.generation),
        };
        (
            Fact::Atom {
                key: key.into(),
                text,
            },
            neg,
        )
    }

    /// A short description in iptables-like words, for "why" texts.
    pub fn describe(&self) -> String {
        let n = |neg: &bool| if *neg { "! " } else { "" };
        let ports = |r: &Ports| {
            r.iter()
                .map(|r| {
                    if r.from == r.to {
                        r.from.to_string()
                    } else {
                        format!("{}:{}", r.from, r.to)
                    }
                })
                .collect::<Vec<_>>()
                .join(",")
        };
        match self {
            Cond::Src(m, neg) => format!("{}-s {}", n(neg), addr_text(m)),
            Cond::Dst(m, neg) => format!("{}-d {}", n(neg), addr_text(m)),
            Cond::Proto(p, neg) => format!("{}-p {}", n(neg), crate::addr::protocol_name(*p)),
            Cond::ModuleProto(p) => format!("-m {}", crate::addr::protocol_name(*p)),
            Cond::InIface(p, neg) => {
                format!("{}-i {}{}", n(neg), p.name, if p.prefix { "+" } else { "" })
            }
            Cond::OutIface(p, neg) => {
                format!("{}-o {}{}", n(neg), p.name, if p.prefix { "+" } else { "" })
            }
            Cond::NftIface { out, neg, .. } => {
                format!(
                    "{}{}",
                    if *out { "oifname" } else { "iifname" },
                    if *neg { " !=" } else { "" }
                )
            }
            Cond::Sport(r, neg) => format!("{}--sport {}", n(neg), ports(r)),
            Cond::Dport(r, neg) => format!("{}--dport {}", n(neg), ports(r)),
            Cond::EitherPort(r, neg) => format!("{}--ports {}", n(neg), ports(r)),
            Cond::TcpSyn(neg) => format!("{}--syn", n(neg)),
            Cond::IcmpType { ty, neg, .. } => format!(
                "{}--icmp-type {}",
                n(neg),
                ty.map(|t| t.to_string()).unwrap_or("any".into())
            ),
            Cond::Mark { value, mask, neg } => format!("{}--mark {value:#x}/{mask:#x}", n(neg)),
            Cond::ConnMark { value, mask, neg } => {
                format!("connmark {}--mark {value:#x}/{mask:#x}", n(neg))
            }
            Cond::CtState(_, neg) => format!("{}--ctstate", n(neg)),
            Cond::CtOrigSrc(m, neg) => format!("{}--ctorigsrc {}", n(neg), addr_text(m)),
            Cond::CtOrigDst(m, neg) => format!("{}--ctorigdst {}", n(neg), addr_text(m)),
            Cond::CtOrigDport(r, neg) => format!("{}--ctorigdstport {}", n(neg), r.from),
            Cond::AddrType { dst, neg, .. } => {
                format!("{}--{}-type", n(neg), if *dst { "dst" } else { "src" })
            }
            Cond::Statistic { p, neg } => format!("{}statistic --probability {p}", n(neg)),
            Cond::Nth { every, neg } => format!("{}statistic --every {every}", n(neg)),
            Cond::Recent { name, .. } => format!("recent --name {name}"),
            Cond::IpSet { name, neg, .. } => format!("{}--match-set {name}", n(neg)),
            Cond::PhysdevIn(_, neg) => format!("{}--physdev-in", n(neg)),
            Cond::PhysdevOut(_, neg) => format!("{}--physdev-out", n(neg)),
            Cond::PhysdevBridged(neg) => format!("{}--physdev-is-bridged", n(neg)),
            Cond::Limit(t) => t.clone(),
            Cond::Fragment(neg) => format!("{}-f", n(neg)),
            Cond::NftSet { neg, .. } => {
                format!("set lookup{}", if *neg { " (negated)" } else { "" })
            }
            Cond::Const(_, why) => why.to_string(),
            Cond::Unknown(t) => t.clone(),
        }
    }
}

fn addr_text(m: &AddrMatch) -> String {
    match m {
        AddrMatch::Net(c) => c.to_string(),
        AddrMatch::Range(r) => format!("{}-{}", r.from, r.to),
        AddrMatch::Any(v) => v.iter().map(addr_text).collect::<Vec<_>>().join(","),
    }
}
