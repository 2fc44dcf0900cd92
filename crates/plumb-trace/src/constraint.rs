//! What a path assumes about the packet fields plumb was not told: one set of
//! possible values per unknown field ([`Constraints`]).
//!
//! The fields plumb can leave unknown are the source address, the source and
//! destination ports, the input and output interfaces, and the NAT status of an
//! existing connection. Each has a set of values still possible on a path: address
//! and port sets are unions of ranges ([`RangeSet`], so prefixes, ranges and their
//! complements are exact), an interface is "matches one of these patterns and none of
//! those" ([`IfaceSet`]), and the NAT status is a subset of {none, SNAT, DNAT, both}.
//! Everything else plumb cannot decide (session affinity, rate limits, unknown ipsets,
//! matches it does not evaluate) is an *atom*: a yes/no fact with a key that names
//! exactly what it depends on, so meeting the same question twice gets the same answer.
//!
//! A condition on an unknown field is a [`Fact`]. [`Constraints::decide`] says whether
//! the path's sets already imply it or its negation; only when both are still
//! possible does the simulator fork, and [`Constraints::assume`] intersects (or, for
//! the branch where the condition does not match, subtracts). An assumption that
//! leaves a set empty is a path that cannot happen: it is dropped, not reported. A
//! condition met again is decided by the sets, so an outcome never lists one twice.
//!
//! Two constraint sets that differ in one field only, with no value of it in
//! common, have an exact union ([`Constraints::disjoint_union`]): the simulator uses
//! it to merge the two sides of a fork that lead to the same place.

use crate::ir::{AddrMatch, IfacePattern, Ports};
use crate::packet::{AddrType, Node, Packet};
use std::net::IpAddr;
use std::sync::Arc;

/// A set of integers as sorted, disjoint, non-adjacent inclusive ranges.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct RangeSet {
    ranges: Vec<(u128, u128)>,
}

impl RangeSet {
    /// `lo..=hi` (empty when `lo > hi`).
    pub fn range(lo: u128, hi: u128) -> RangeSet {
        if lo > hi {
            RangeSet::default()
        } else {
            RangeSet {
                ranges: vec![(lo, hi)],
            }
        }
    }

    /// The union of inclusive ranges, in any order; empty ones are ignored.
    pub fn from_ranges(iter: impl IntoIterator<Item = (u128, u128)>) -> RangeSet {
        let mut v: Vec<(u128, u128)> = iter.into_iter().filter(|(a, b)| a <= b).collect();
        v.sort_unstable();
        let mut out: Vec<(u128, u128)> = Vec::with_capacity(v.len());
        for (a, b) in v {
            match out.last_mut() {
                Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
                _ => out.push((a, b)),
            }
        }
        RangeSet { ranges: out }
    }

    /// The ranges, sorted and disjoint.
    pub fn ranges(&self) -> &[(u128, u128)] {
        &self.ranges
    }

    /// Whether no value is possible.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Whether `v` is in the set.
    pub fn contains(&self, v: u128) -> bool {
        let i = self.ranges.partition_point(|r| r.1 < v);
        self.ranges.get(i).is_some_and(|r| r.0 <= v)
    }

    /// The one value of a single-value set.
    pub fn single(&self) -> Option<u128> {
        match self.ranges.as_slice() {
            [(a, b)] if a == b => Some(*a),
            _ => None,
        }
    }

    /// The values in both sets.
    pub fn intersect(&self, other: &RangeSet) -> RangeSet {
        let (mut i, mut j) = (0, 0);
        let mut out = Vec::new();
        while i < self.ranges.len() && j < other.ranges.len() {
            let (a, b) = self.ranges[i];
            let (c, d) = other.ranges[j];
            let lo = a.max(c);
            let hi = b.min(d);
            if lo <= hi {
                out.push((lo, hi));
            }
            if b < d {
                i += 1;
            } else {
                j += 1;
            }
        }
        RangeSet { ranges: out }
    }

    /// The values in either set.
    pub fn union(&self, other: &RangeSet) -> RangeSet {
        RangeSet::from_ranges(self.ranges.iter().chain(&other.ranges).copied())
    }

    /// `0..=max` minus this set.
    pub fn complement(&self, max: u128) -> RangeSet {
        let mut out = Vec::with_capacity(self.ranges.len() + 1);
        let mut next: Option<u128> = Some(0);
        for &(a, b) in &self.ranges {
            if let Some(n) = next
                && a > n
            {
                out.push((n, a - 1));
            }
            next = b.checked_add(1);
        }
        if let Some(n) = next
            && n <= max
        {
            out.push((n, max));
        }
        RangeSet { ranges: out }
    }

    /// This set minus `other`, within `0..=max`.
    pub fn subtract(&self, other: &RangeSet, max: u128) -> RangeSet {
        self.intersect(&other.complement(max))
    }

    /// Whether this set is `0..=max`.
    pub fn is_full(&self, max: u128) -> bool {
        self.ranges.as_slice() == [(0, max)]
    }
}

/// Largest value of an address of the family.
fn addr_max(v6: bool) -> u128 {
    if v6 { u128::MAX } else { u32::MAX as u128 }
}

fn addr_bits(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => a.to_bits() as u128,
        IpAddr::V6(a) => a.to_bits(),
    }
}

fn addr_of(v: u128, v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(std::net::Ipv6Addr::from_bits(v))
    } else {
        IpAddr::V4(std::net::Ipv4Addr::from_bits(v as u32))
    }
}

/// A set of addresses of one family.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AddrSet {
    /// IPv6 addresses (`false`: IPv4); an address of the other family is never in the set.
    pub v6: bool,
    /// The addresses as integers (an IPv4 address's 32 bits, an IPv6 address's 128).
    pub set: RangeSet,
}

impl AddrSet {
    /// Every address of the family.
    pub fn full(v6: bool) -> AddrSet {
        AddrSet {
            v6,
            set: RangeSet::range(0, addr_max(v6)),
        }
    }

    /// The addresses an address match accepts (none of another family).
    pub fn of_match(m: &AddrMatch, v6: bool) -> AddrSet {
        let mut ranges = Vec::new();
        collect_match(m, v6, &mut ranges);
        AddrSet {
            v6,
            set: RangeSet::from_ranges(ranges),
        }
    }

    /// The addresses whose `Node::addr_type` is one of `types` (`-m addrtype --src-type`).
    pub fn of_types(types: &[AddrType], node: &Node, v6: bool) -> AddrSet {
        let max = addr_max(v6);
        let host = |ip: IpAddr| (addr_bits(ip), addr_bits(ip));
        let local = RangeSet::from_ranges(
            node.local_addrs
                .iter()
                .filter(|c| c.addr.is_ipv6() == v6)
                .map(|c| host(c.addr))
                .chain(if v6 {
                    vec![(1, 1)]
                } else {
                    vec![(0x7f00_0000, 0x7fff_ffff)]
                }),
        );
        let (broadcast, multicast, unspec) = if v6 {
            (
                RangeSet::default(),
                RangeSet::range(0xff << 120, u128::MAX),
                RangeSet::range(0, 0),
            )
        } else {
            let directed = node.local_addrs.iter().filter_map(|c| c.broadcast());
            (
                RangeSet::from_ranges(
                    [(0, 0), (u32::MAX as u128, u32::MAX as u128)]
                        .into_iter()
                        .chain(directed.filter(|b| b.is_ipv4()).map(host)),
                ),
                RangeSet::range(0xe000_0000, 0xefff_ffff),
                RangeSet::default(),
            )
        };
        // `Node::addr_type` checks local first, then (v4) broadcast before multicast.
        let broadcast = broadcast.subtract(&local, max);
        let multicast = multicast.subtract(&local, max).subtract(&broadcast, max);
        let unspec = unspec.subtract(&local, max).subtract(&multicast, max);
        let unicast = local
            .union(&broadcast)
            .union(&multicast)
            .union(&unspec)
            .complement(max);
        let mut set = RangeSet::default();
        for t in types {
            let part = match t {
                AddrType::Local => &local,
                AddrType::Broadcast => &broadcast,
                AddrType::Multicast => &multicast,
                AddrType::Unspec => &unspec,
                AddrType::Unicast => &unicast,
                _ => continue,
            };
            set = set.union(part);
        }
        AddrSet { v6, set }
    }

    /// Whether `ip` is in the set (never for an address of the other family).
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv6() == self.v6 && self.set.contains(addr_bits(ip))
    }

    fn max(&self) -> u128 {
        addr_max(self.v6)
    }

    /// Every address of `other` is in this set (of the same family).
    pub fn covers(&self, other: &AddrSet) -> bool {
        self.v6 == other.v6 && other.set.subtract(&self.set, self.max()).is_empty()
    }

    /// No address is in both sets.
    pub fn disjoint(&self, other: &AddrSet) -> bool {
        self.v6 != other.v6 || self.set.intersect(&other.set).is_empty()
    }

    /// A member, preferring an ordinary-looking address.
    pub fn pick(&self) -> Option<IpAddr> {
        let preferred: [u128; 2] = if self.v6 {
            [0x2001_0db8_0000_0000_0000_0000_0000_0009, 1 << 125]
        } else {
            [0xcb00_7109, 0x0a63_0009] // 203.0.113.9, 10.99.0.9
        };
        let v = preferred
            .into_iter()
            .find(|v| self.set.contains(*v))
            .or_else(|| {
                // Skip the all-zeros address when the range has more.
                self.set
                    .ranges()
                    .first()
                    .map(|&(a, b)| if a == 0 && b > 0 { 1 } else { a })
            })?;
        Some(addr_of(v, self.v6))
    }

    /// Prefixes covering exactly this set, in order.
    pub fn prefixes(&self) -> Vec<crate::addr::Cidr> {
        let bits: u32 = if self.v6 { 128 } else { 32 };
        let mut out = Vec::new();
        for &(mut a, b) in self.set.ranges() {
            loop {
                // The largest aligned block starting at `a` that stays within `b`: as
                // many low bits as `a` has zeros, and no more than the span holds
                // (computed, not searched bit by bit: conditions on a source address
                // are described for every outcome of every trace).
                let aligned = a.trailing_zeros().min(bits);
                let span = b - a; // the block holds span + 1 addresses
                let fits = if span == u128::MAX {
                    128
                } else {
                    127 - (span + 1).leading_zeros()
                };
                let len = bits - aligned.min(fits);
                out.push(crate::addr::Cidr {
                    addr: addr_of(a, self.v6),
                    len: len as u8,
                });
                let size_bits = bits - len;
                let last = if size_bits >= 128 {
                    u128::MAX
                } else {
                    a | ((1u128 << size_bits) - 1)
                };
                if last >= b {
                    break;
                }
                a = last + 1;
            }
        }
        out
    }
}

fn collect_match(m: &AddrMatch, v6: bool, out: &mut Vec<(u128, u128)>) {
    match m {
        AddrMatch::Net(c) => {
            if c.addr.is_ipv6() != v6 {
                return;
            }
            let bits: u32 = if v6 { 128 } else { 32 };
            let host_bits = bits - (c.len as u32).min(bits);
            let span = if host_bits >= 128 {
                u128::MAX
            } else {
                (1u128 << host_bits) - 1
            };
            let base = addr_bits(c.addr) & !span;
            out.push((base, base | span));
        }
        AddrMatch::Range(r) => {
            if r.from.is_ipv6() == v6 && r.to.is_ipv6() == v6 {
                out.push((addr_bits(r.from), addr_bits(r.to)));
            }
        }
        AddrMatch::Any(v) => v.iter().for_each(|m| collect_match(m, v6, out)),
    }
}

const PORT_MAX: u128 = 65535;

/// The ports a port match accepts.
pub fn port_set(ports: &Ports) -> RangeSet {
    RangeSet::from_ranges(ports.iter().map(|r| (r.from as u128, r.to as u128)))
}

/// Interface names still possible: each entry of `any_of` is a list of patterns one
/// of which the name matches; the name matches none of `none_of`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct IfaceSet {
    any_of: Vec<Vec<IfacePattern>>,
    none_of: Vec<IfacePattern>,
}

/// Two patterns' common names as one pattern, if they have any.
fn combine(a: &IfacePattern, b: &IfacePattern) -> Option<IfacePattern> {
    match (a.prefix, b.prefix) {
        (false, false) => (a.name == b.name).then(|| a.clone()),
        (false, true) => a.name.starts_with(&b.name).then(|| a.clone()),
        (true, false) => b.name.starts_with(&a.name).then(|| b.clone()),
        (true, true) => {
            if a.name.starts_with(&b.name) {
                Some(a.clone())
            } else if b.name.starts_with(&a.name) {
                Some(b.clone())
            } else {
                None
            }
        }
    }
}

impl IfaceSet {
    fn with_any(&self, pats: &[IfacePattern]) -> IfaceSet {
        let mut s = self.clone();
        let mut p = pats.to_vec();
        p.sort();
        p.dedup();
        s.any_of.push(p);
        s.any_of.sort();
        s.any_of.dedup();
        s
    }

    fn with_none(&self, pats: &[IfacePattern]) -> IfaceSet {
        let mut s = self.clone();
        s.none_of.extend(pats.iter().cloned());
        s.none_of.sort();
        s.none_of.dedup();
        s
    }

    fn excluded(&self, name: &str) -> bool {
        self.none_of.iter().any(|n| n.matches(name))
    }

    /// A name in the set, or `None` when it is empty.
    pub fn pick(&self) -> Option<String> {
        // Every combination of one pattern per `any_of` entry narrows to one of the
        // patterns mentioned, so the candidates stay as few as the patterns.
        let mut cands = vec![IfacePattern {
            name: String::new(),
            prefix: true,
        }];
        for alts in &self.any_of {
            let mut next: Vec<IfacePattern> = Vec::new();
            for c in &cands {
                for p in alts {
                    if let Some(x) = combine(c, p)
                        && !next.contains(&x)
                    {
                        next.push(x);
                    }
                }
            }
            cands = next;
            if cands.is_empty() {
                return None;
            }
        }
        cands.iter().find_map(|c| self.name_in(c))
    }

    /// A name matching `p` and none of `none_of`.
    fn name_in(&self, p: &IfacePattern) -> Option<String> {
        if !p.prefix {
            return (!p.name.is_empty() && !self.excluded(&p.name)).then(|| p.name.clone());
        }
        if self
            .none_of
            .iter()
            .any(|n| n.prefix && p.name.starts_with(&n.name))
        {
            return None;
        }
        let nice = ["", "0", "1", "2", "3", "9"];
        let base = if p.name.is_empty() { "eth" } else { &p.name };
        for s in nice {
            let name = format!("{base}{s}");
            if name.starts_with(&p.name) && !name.is_empty() && !self.excluded(&name) {
                return Some(name);
            }
        }
        // Each exclusion extends `p`: pick a next character no excluded prefix starts
        // with, then pad past every excluded name.
        let firsts: Vec<char> = self
            .none_of
            .iter()
            .filter(|n| n.prefix)
            .filter_map(|n| n.name.strip_prefix(p.name.as_str())?.chars().next())
            .collect();
        let c = ('!'..='~').find(|c| *c != '/' && !firsts.contains(c))?;
        let longest = self.none_of.iter().map(|n| n.name.len()).max().unwrap_or(0);
        let mut name = format!("{}{c}", p.name);
        while name.len() <= longest {
            name.push('0');
        }
        (!self.excluded(&name)).then_some(name)
    }

    /// Whether no interface name is possible (none matches a pattern of every `any_of`
    /// list and no exclusion).
    pub fn is_empty(&self) -> bool {
        self.pick().is_none()
    }

    /// The lists of patterns the name must match (one of each list).
    pub fn required(&self) -> &[Vec<IfacePattern>] {
        &self.any_of
    }

    /// The patterns the name must not match.
    pub fn excluded_patterns(&self) -> &[IfacePattern] {
        &self.none_of
    }

    /// Whether `name` matches one pattern of every `any_of` list and no excluded pattern.
    pub fn contains(&self, name: &str) -> bool {
        self.any_of
            .iter()
            .all(|alts| alts.iter().any(|p| p.matches(name)))
            && !self.excluded(name)
    }

    fn describe(&self, what: &str) -> String {
        let pat = |p: &IfacePattern| format!("{}{}", p.name, if p.prefix { "+" } else { "" });
        let mut parts = Vec::new();
        for alts in &self.any_of {
            let list = alts.iter().map(pat).collect::<Vec<_>>().join(" or ");
            if alts.len() == 1 && !alts[0].prefix {
                parts.push(format!("is {list}"));
            } else {
                parts.push(format!("matches {list}"));
            }
        }
        if !self.none_of.is_empty() {
            let list = self.none_of.iter().map(pat).collect::<Vec<_>>().join(", ");
            parts.push(format!("does not match {list}"));
        }
        format!("{what} {}", parts.join(" and "))
    }
}

/// The NAT status of an existing connection: bit `i` of a mask stands for SNAT = `i & 1`,
/// DNAT = `i & 2`.
pub mod ct_nat {
    use crate::ir::ct_bits;

    /// Every combination.
    pub const ANY: u8 = 0b1111;

    /// The `ct_bits` of combination `i`.
    pub fn bits(i: u8) -> u16 {
        (if i & 1 != 0 { ct_bits::SNAT } else { 0 }) | (if i & 2 != 0 { ct_bits::DNAT } else { 0 })
    }

    /// The combinations for which a connection with state bit `base` has a bit of `bits`.
    pub fn matching(base: u16, bits: u16) -> u8 {
        (0..4u8)
            .filter(|i| (base | self::bits(*i)) & bits != 0)
            .fold(0, |m, i| m | (1 << i))
    }
}

/// What an undecided condition says about the unknown fields: it matches exactly when
/// this fact holds (the simulator applies the condition's negation).
#[derive(Clone, Debug, PartialEq)]
pub enum Fact {
    /// The original source address is in the set.
    Src(AddrSet),
    /// The original source port is in the set.
    Sport(RangeSet),
    /// The original destination port is in the set.
    Dport(RangeSet),
    /// The input interface matches one of the patterns.
    InIface(Vec<IfacePattern>),
    /// The output interface matches one of the patterns.
    OutIface(Vec<IfacePattern>),
    /// The connection's NAT status is one of the combinations of the mask ([`ct_nat`]).
    CtNat(u8),
    /// A yes/no fact that is not about one field: `key` names what it depends on,
    /// `text` says in words what "yes" means.
    Atom {
        /// Names what the fact depends on; facts with the same key are one question.
        key: Arc<str>,
        /// What "yes" means, in words.
        text: Arc<str>,
    },
}

/// An atom and the answer a path assumed for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Atom {
    /// Names what the fact depends on (a recent list, a rate limit, a match's text): two
    /// facts with the same key get the same answer on a path.
    pub key: Arc<str>,
    /// What "yes" means, in words, as outcomes print it.
    pub text: Arc<str>,
    /// The answer the path assumed: the fact holds (`true`) or does not.
    pub holds: bool,
}

/// The values of the unknown fields a path (or an outcome) still allows. Boxed, and
/// absent while nothing is assumed: every path carries one, most assume nothing.
#[derive(Clone, Debug, Default)]
pub struct Constraints(Option<Box<Sets>>);

/// The sets of [`Constraints`]; `None` is "any value".
#[derive(Clone, Debug, Default)]
struct Sets {
    src: Option<AddrSet>,
    sport: Option<RangeSet>,
    dport: Option<RangeSet>,
    in_iface: Option<IfaceSet>,
    out_iface: Option<IfaceSet>,
    ct_nat: Option<u8>,
    /// In the order they were assumed (a path assumes few).
    atoms: Vec<Atom>,
}

/// Equal sets of packets: atoms compared as a set.
impl PartialEq for Sets {
    fn eq(&self, o: &Sets) -> bool {
        self.src == o.src
            && self.sport == o.sport
            && self.dport == o.dport
            && self.in_iface == o.in_iface
            && self.out_iface == o.out_iface
            && self.ct_nat == o.ct_nat
            && self.atoms.len() == o.atoms.len()
            && self
                .atoms
                .iter()
                .all(|a| o.atom(&a.key).is_some_and(|b| b.holds == a.holds))
    }
}

/// Which field two constraint sets differ in (for [`Constraints::disjoint_union`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Var {
    Src,
    Sport,
    Dport,
    InIface,
    OutIface,
    CtNat,
    Atom(usize),
}

static NO_SETS: Sets = Sets {
    src: None,
    sport: None,
    dport: None,
    in_iface: None,
    out_iface: None,
    ct_nat: None,
    atoms: Vec::new(),
};

impl PartialEq for Constraints {
    fn eq(&self, o: &Constraints) -> bool {
        self.sets() == o.sets()
    }
}

impl Constraints {
    fn sets(&self) -> &Sets {
        self.0.as_deref().unwrap_or(&NO_SETS)
    }

    fn sets_mut(&mut self) -> &mut Sets {
        self.0.get_or_insert_with(Default::default)
    }

    fn from_sets(s: Sets) -> Constraints {
        if s.is_empty() {
            Constraints(None)
        } else {
            Constraints(Some(Box::new(s)))
        }
    }

    /// No assumption at all.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|s| s.is_empty())
    }

    /// The atoms assumed, in order.
    pub fn atoms(&self) -> &[Atom] {
        &self.sets().atoms
    }

    /// The source address set, when one was assumed.
    pub fn src(&self) -> Option<&AddrSet> {
        self.sets().src.as_ref()
    }

    /// The source port set, when one was assumed.
    pub fn sport(&self) -> Option<&RangeSet> {
        self.sets().sport.as_ref()
    }

    /// The destination port set, when one was assumed.
    pub fn dport(&self) -> Option<&RangeSet> {
        self.sets().dport.as_ref()
    }

    /// The input interface names still possible, when something was assumed.
    pub fn in_iface(&self) -> Option<&IfaceSet> {
        self.sets().in_iface.as_ref()
    }

    /// The output interface names still possible, when something was assumed.
    pub fn out_iface(&self) -> Option<&IfaceSet> {
        self.sets().out_iface.as_ref()
    }

    /// The NAT statuses of an existing connection still possible ([`ct_nat`] mask),
    /// when something was assumed.
    pub fn ct_nat(&self) -> Option<u8> {
        self.sets().ct_nat
    }

    /// `Some(true)` when every packet the sets allow satisfies `fact`, `Some(false)`
    /// when none does, `None` when both are possible.
    pub fn decide(&self, fact: &Fact) -> Option<bool> {
        self.sets().decide(fact)
    }

    /// Adds `fact` (or its negation); `false` when nothing is left (an impossible path).
    pub fn assume(&mut self, fact: &Fact, holds: bool) -> bool {
        self.sets_mut().assume(fact, holds)
    }

    /// [`Constraints::assume`], keeping an atom's key and text without copying them.
    pub fn assume_owned(&mut self, fact: Fact, holds: bool) -> bool {
        self.sets_mut().assume_owned(fact, holds)
    }

    /// Whether an address or port set is assumed (one may pin a field to one value).
    #[inline]
    pub fn has_ranges(&self) -> bool {
        self.0.as_ref().is_some_and(|s| s.has_ranges())
    }

    /// The one source address the sets allow.
    pub fn single_src(&self) -> Option<IpAddr> {
        self.sets().single_src()
    }

    /// The one source port the sets allow.
    pub fn single_sport(&self) -> Option<u16> {
        self.sets().single_sport()
    }

    /// The one destination port the sets allow.
    pub fn single_dport(&self) -> Option<u16> {
        self.sets().single_dport()
    }

    /// The union of two sets of packets that have none in common, when it is a
    /// `Constraints` again: they differ in one field only, where their values do
    /// not overlap (two sides of one fork, or of forks on the same field). `None`
    /// otherwise, and for sets that overlap: a union of overlapping sets would count
    /// the common packets once where two routes lead them.
    pub fn disjoint_union(&self, other: &Constraints) -> Option<Constraints> {
        self.sets()
            .disjoint_union(other.sets())
            .map(Constraints::from_sets)
    }

    /// The assumptions in words, one per field, in a fixed order.
    pub fn conditions(&self) -> Vec<String> {
        match &self.0 {
            None => Vec::new(),
            Some(s) => s.conditions(),
        }
    }

    /// Whether `packet`'s fields are in the sets; `None` when the sets say something a
    /// packet cannot carry (atoms, NAT status).
    pub fn admits(&self, packet: &Packet) -> Option<bool> {
        self.sets().admits(packet)
    }

    /// `packet` with every field it leaves unknown filled from the sets (any value where
    /// they say nothing): a fully specified packet these constraints allow, as traced
    /// on `node`. `None` when they say something a packet cannot carry (atoms, NAT
    /// status) or nothing is left.
    pub fn witness(&self, packet: &Packet, node: &Node) -> Option<Packet> {
        self.sets().witness(packet, node)
    }
}

impl Sets {
    /// No assumption at all.
    #[inline]
    fn is_empty(&self) -> bool {
        !self.has_ranges()
            && self.in_iface.is_none()
            && self.out_iface.is_none()
            && self.ct_nat.is_none()
            && self.atoms.is_empty()
    }

    fn atom(&self, key: &str) -> Option<&Atom> {
        self.atoms.iter().find(|a| &*a.key == key)
    }

    /// `Some(true)` when every packet the sets allow satisfies `fact`, `Some(false)`
    /// when none does, `None` when both are possible.
    fn decide(&self, fact: &Fact) -> Option<bool> {
        fn sets(cur: &RangeSet, f: &RangeSet, max: u128) -> Option<bool> {
            if cur.intersect(f).is_empty() {
                Some(false)
            } else if cur.subtract(f, max).is_empty() {
                Some(true)
            } else {
                None
            }
        }
        fn ifaces(cur: &Option<IfaceSet>, p: &[IfacePattern]) -> Option<bool> {
            let cur = cur.clone().unwrap_or_default();
            if cur.with_any(p).is_empty() {
                Some(false)
            } else if cur.with_none(p).is_empty() {
                Some(true)
            } else {
                None
            }
        }
        let full_ports = RangeSet::range(0, PORT_MAX);
        match fact {
            Fact::Src(a) => {
                let full = AddrSet::full(a.v6);
                let cur = self.src.as_ref().unwrap_or(&full);
                sets(&cur.set, &a.set, a.max())
            }
            Fact::Sport(p) => sets(self.sport.as_ref().unwrap_or(&full_ports), p, PORT_MAX),
            Fact::Dport(p) => sets(self.dport.as_ref().unwrap_or(&full_ports), p, PORT_MAX),
            Fact::InIface(p) => ifaces(&self.in_iface, p),
            Fact::OutIface(p) => ifaces(&self.out_iface, p),
            Fact::CtNat(m) => {
                let cur = self.ct_nat.unwrap_or(ct_nat::ANY);
                if cur & m == 0 {
                    Some(false)
                } else if cur & !m == 0 {
                    Some(true)
                } else {
                    None
                }
            }
            Fact::Atom { key, .. } => self.atom(key).map(|a| a.holds),
        }
    }

    /// Adds `fact` (or its negation); `false` when nothing is left (an impossible path).
    fn assume(&mut self, fact: &Fact, holds: bool) -> bool {
        fn narrow(cur: &mut Option<RangeSet>, f: &RangeSet, max: u128, holds: bool) -> bool {
            let base = cur.take().unwrap_or_else(|| RangeSet::range(0, max));
            let new = if holds {
                base.intersect(f)
            } else {
                base.subtract(f, max)
            };
            let ok = !new.is_empty();
            *cur = (!new.is_full(max)).then_some(new);
            ok
        }
        fn narrow_iface(cur: &mut Option<IfaceSet>, p: &[IfacePattern], holds: bool) -> bool {
            let base = cur.take().unwrap_or_default();
            let new = if holds {
                base.with_any(p)
            } else {
                base.with_none(p)
            };
            let ok = !new.is_empty();
            *cur = Some(new);
            ok
        }
        match fact {
            Fact::Src(a) => {
                let max = a.max();
                let mut cur = self.src.take().map(|s| s.set);
                let ok = narrow(&mut cur, &a.set, max, holds);
                self.src = cur.map(|set| AddrSet { v6: a.v6, set });
                ok
            }
            Fact::Sport(p) => narrow(&mut self.sport, p, PORT_MAX, holds),
            Fact::Dport(p) => narrow(&mut self.dport, p, PORT_MAX, holds),
            Fact::InIface(p) => narrow_iface(&mut self.in_iface, p, holds),
            Fact::OutIface(p) => narrow_iface(&mut self.out_iface, p, holds),
            Fact::CtNat(m) => {
                let cur = self.ct_nat.unwrap_or(ct_nat::ANY);
                let new = if holds { cur & m } else { cur & !m };
                self.ct_nat = (new != ct_nat::ANY).then_some(new);
                new != 0
            }
            Fact::Atom { key, text } => match self.atom(key) {
                Some(a) => a.holds == holds,
                None => {
                    self.atoms.push(Atom {
                        key: key.clone(),
                        text: text.clone(),
                        holds,
                    });
                    true
                }
            },
        }
    }

    /// [`Constraints::assume`], keeping an atom's key and text without copying them.
    fn assume_owned(&mut self, fact: Fact, holds: bool) -> bool {
        match fact {
            Fact::Atom { key, text } => match self.atom(&key) {
                Some(a) => a.holds == holds,
                None => {
                    self.atoms.push(Atom { key, text, holds });
                    true
                }
            },
            f => self.assume(&f, holds),
        }
    }

    /// Whether an address or port set is assumed (one may pin a field to one value).
    #[inline]
    fn has_ranges(&self) -> bool {
        self.src.is_some() || self.sport.is_some() || self.dport.is_some()
    }

    /// The one source address / source port / destination port the sets allow.
    fn single_src(&self) -> Option<IpAddr> {
        let s = self.src.as_ref()?;
        s.set.single().map(|v| addr_of(v, s.v6))
    }

    fn single_sport(&self) -> Option<u16> {
        self.sport.as_ref()?.single().map(|v| v as u16)
    }

    fn single_dport(&self) -> Option<u16> {
        self.dport.as_ref()?.single().map(|v| v as u16)
    }

    /// The fields in which `self` and `other` differ.
    fn differences(&self, other: &Sets) -> Vec<Var> {
        let mut d = Vec::new();
        if self.src != other.src {
            d.push(Var::Src);
        }
        if self.sport != other.sport {
            d.push(Var::Sport);
        }
        if self.dport != other.dport {
            d.push(Var::Dport);
        }
        if self.in_iface != other.in_iface {
            d.push(Var::InIface);
        }
        if self.out_iface != other.out_iface {
            d.push(Var::OutIface);
        }
        if self.ct_nat != other.ct_nat {
            d.push(Var::CtNat);
        }
        // Atoms: each key is a field of its own.
        for (i, a) in self.atoms.iter().enumerate() {
            if other.atom(&a.key).is_none_or(|b| b.holds != a.holds) {
                d.push(Var::Atom(i));
            }
        }
        if other.atoms.iter().any(|b| self.atom(&b.key).is_none()) {
            d.push(Var::Atom(usize::MAX));
        }
        d
    }

    /// The union of two sets of packets that have none in common, when it is a
    /// `Constraints` again: they differ in one field only, where their values do
    /// not overlap (two sides of one fork, or of forks on the same field). `None`
    /// otherwise, and for sets that overlap: a union of overlapping sets would count
    /// the common packets once where two routes lead them.
    fn disjoint_union(&self, other: &Sets) -> Option<Sets> {
        let diff = self.differences(other);
        let [var] = diff.as_slice() else {
            return None;
        };
        let mut u = self.clone();
        let ranges = |a: &Option<RangeSet>, b: &Option<RangeSet>, max: u128| match (a, b) {
            (Some(a), Some(b)) if a.intersect(b).is_empty() => {
                let s = a.union(b);
                Some((!s.is_full(max)).then_some(s))
            }
            _ => None,
        };
        match *var {
            Var::Src => {
                u.src = match (&self.src, &other.src) {
                    (Some(a), Some(b)) if a.v6 == b.v6 && a.set.intersect(&b.set).is_empty() => {
                        let s = a.set.union(&b.set);
                        (!s.is_full(a.max())).then_some(AddrSet { v6: a.v6, set: s })
                    }
                    _ => return None,
                }
            }
            Var::Sport => u.sport = ranges(&self.sport, &other.sport, PORT_MAX)?,
            Var::Dport => u.dport = ranges(&self.dport, &other.dport, PORT_MAX)?,
            Var::InIface => {
                u.in_iface = iface_union(self.in_iface.as_ref()?, other.in_iface.as_ref()?)?
            }
            Var::OutIface => {
                u.out_iface = iface_union(self.out_iface.as_ref()?, other.out_iface.as_ref()?)?
            }
            Var::CtNat => {
                let (a, b) = (self.ct_nat?, other.ct_nat?);
                if a & b != 0 {
                    return None;
                }
                u.ct_nat = (a | b != ct_nat::ANY).then_some(a | b);
            }
            // The same atom answered both ways: the union does not constrain it.
            Var::Atom(i) => {
                let a = self.atoms.get(i)?;
                other
                    .atoms
                    .iter()
                    .find(|b| b.key == a.key && b.holds != a.holds)?;
                u.atoms.remove(i);
            }
        }
        Some(u)
    }

    /// The assumptions in words, one per field, in a fixed order.
    fn conditions(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(s) = &self.src {
            out.push(describe_addrs("source address", s));
        }
        if let Some(p) = &self.sport {
            out.push(describe_ports("source port", p));
        }
        if let Some(p) = &self.dport {
            out.push(describe_ports("destination port", p));
        }
        if let Some(i) = &self.in_iface {
            out.push(i.describe("input interface"));
        }
        if let Some(i) = &self.out_iface {
            out.push(i.describe("output interface"));
        }
        if let Some(m) = self.ct_nat {
            out.push(describe_ct_nat(m));
        }
        for a in &self.atoms {
            if a.holds {
                out.push(a.text.to_string());
            } else {
                out.push(format!("not: {}", a.text));
            }
        }
        out
    }

    /// Whether `packet`'s fields are in the sets; `None` when the sets say something a
    /// packet cannot carry (atoms, NAT status).
    fn admits(&self, packet: &Packet) -> Option<bool> {
        if !self.atoms.is_empty() || self.ct_nat.is_some() {
            return None;
        }
        let port_ok = |set: &Option<RangeSet>, p: Option<u16>| match (set, p) {
            (None, _) => true,
            (Some(s), Some(p)) => s.contains(p as u128),
            (Some(_), None) => false,
        };
        let iface_ok = |set: &Option<IfaceSet>, i: &Option<String>| match (set, i) {
            (None, _) => true,
            (Some(s), Some(i)) => s.contains(i),
            (Some(_), None) => false,
        };
        Some(
            self.src
                .as_ref()
                .is_none_or(|s| packet.src.is_some_and(|a| s.contains(a)))
                && port_ok(&self.sport, packet.sport)
                && port_ok(&self.dport, packet.dport)
                && iface_ok(&self.in_iface, &packet.in_iface)
                && iface_ok(&self.out_iface, &packet.out_iface),
        )
    }

    /// `packet` with every field it leaves unknown filled from the sets (any value where
    /// they say nothing): a fully specified packet these constraints allow, as traced
    /// on `node`. `None` when they say something a packet cannot carry (atoms, NAT
    /// status) or nothing is left.
    fn witness(&self, packet: &Packet, node: &Node) -> Option<Packet> {
        if !self.atoms.is_empty() || self.ct_nat.is_some() {
            return None;
        }
        let mut p = packet.clone();
        p.src = crate::packet::source_of(packet, node);
        if p.src.is_none() {
            let full = AddrSet::full(packet.is_ipv6());
            p.src = Some(self.src.as_ref().unwrap_or(&full).pick()?);
        }
        let port = |set: &Option<RangeSet>| -> Option<u16> {
            let full = RangeSet::range(0, PORT_MAX);
            let s = set.as_ref().unwrap_or(&full);
            [40000u128, 80, 1024]
                .into_iter()
                .find(|v| s.contains(*v))
                .or_else(|| s.ranges().first().map(|r| r.0))
                .map(|v| v as u16)
        };
        if p.proto.has_ports() {
            if p.sport.is_none() {
                p.sport = Some(port(&self.sport)?);
            }
            if p.dport.is_none() {
                p.dport = Some(port(&self.dport)?);
            }
        }
        if p.in_iface.is_none() && p.origin != crate::packet::Origin::Host {
            p.in_iface = Some(self.in_iface.clone().unwrap_or_default().pick()?);
        }
        if p.out_iface.is_none() {
            p.out_iface = Some(self.out_iface.clone().unwrap_or_default().pick()?);
        }
        Some(p)
    }
}

/// `S and matches P` with `S and matches none of P`: `S`.
fn iface_union(a: &IfaceSet, b: &IfaceSet) -> Option<Option<IfaceSet>> {
    let split = |a: &IfaceSet, b: &IfaceSet| {
        a.any_of.iter().enumerate().find_map(|(i, p)| {
            let mut s = a.clone();
            s.any_of.remove(i);
            (s.with_none(p) == *b).then_some(s)
        })
    };
    let s = split(a, b).or_else(|| split(b, a))?;
    Some((s != IfaceSet::default()).then_some(s))
}

fn describe_addrs(what: &str, s: &AddrSet) -> String {
    let list = |p: &[crate::addr::Cidr]| {
        let shown: Vec<String> = p.iter().take(16).map(|c| c.to_string()).collect();
        let more = p.len().saturating_sub(shown.len());
        let mut t = shown.join(", ");
        if more > 0 {
            t.push_str(&format!(" and {more} more prefixes"));
        }
        t
    };
    let inside = s.prefixes();
    let outside = AddrSet {
        v6: s.v6,
        set: s.set.complement(s.max()),
    }
    .prefixes();
    if outside.len() < inside.len() {
        format!("{what} not in {}", list(&outside))
    } else {
        format!("{what} in {}", list(&inside))
    }
}

fn describe_ports(what: &str, p: &RangeSet) -> String {
    let list = |s: &RangeSet| {
        s.ranges()
            .iter()
            .map(|&(a, b)| {
                if a == b {
                    a.to_string()
                } else {
                    format!("{a}-{b}")
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let outside = p.complement(PORT_MAX);
    if outside.ranges().len() < p.ranges().len() {
        format!("{what} not {}", list(&outside))
    } else if p.single().is_some() {
        format!("{what} {}", list(p))
    } else {
        format!("{what} in {}", list(p))
    }
}

fn describe_ct_nat(m: u8) -> String {
    let names = ["no NAT", "SNAT only", "DNAT only", "SNAT and DNAT"];
    // Masks that are one field's value: say just that.
    match m {
        0b1010 => "the connection is source-NATed (SNAT)".into(),
        0b0101 => "the connection is not source-NATed".into(),
        0b1100 => "the connection is destination-NATed (DNAT)".into(),
        0b0011 => "the connection is not destination-NATed".into(),
        _ => format!(
            "the connection's NAT status is {}",
            (0..4)
                .filter(|i| m & (1 << i) != 0)
                .map(|i| names[i])
                .collect::<Vec<_>>()
                .join(" or ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::Cidr;

    fn net(s: &str) -> AddrSet {
        AddrSet::of_match(&AddrMatch::Net(Cidr::parse(s).unwrap()), s.contains(':'))
    }

    #[test]
    fn range_sets() {
        let a = RangeSet::from_ranges([(5, 10), (0, 2), (11, 12), (20, 30)]);
        assert_eq!(a.ranges(), &[(0, 2), (5, 12), (20, 30)]);
        let b = RangeSet::range(8, 25);
        assert_eq!(a.intersect(&b).ranges(), &[(8, 12), (20, 25)]);
        assert_eq!(a.subtract(&b, 40).ranges(), &[(0, 2), (5, 7), (26, 30)]);
        assert_eq!(a.complement(40).ranges(), &[(3, 4), (13, 19), (31, 40)]);
        assert!(
            RangeSet::range(0, u128::MAX)
                .complement(u128::MAX)
                .is_empty()
        );
        assert!(a.contains(6) && !a.contains(3) && a.contains(30) && !a.contains(31));
        assert_eq!(a.union(&b).ranges(), &[(0, 2), (5, 30)]);
    }

    #[test]
    fn contradictory_sources_leave_nothing() {
        let mut c = Constraints::default();
        assert!(c.assume(&Fact::Src(net("10.1.0.0/16")), true));
        assert_eq!(c.decide(&Fact::Src(net("10.2.0.0/16"))), Some(false));
        assert_eq!(c.decide(&Fact::Src(net("10.0.0.0/8"))), Some(true));
        assert_eq!(c.decide(&Fact::Src(net("10.1.2.0/24"))), None);
        assert!(!c.clone().assume(&Fact::Src(net("10.2.0.0/16")), true));
        // A negated condition subtracts.
        assert!(c.assume(&Fact::Src(net("10.1.2.0/24")), false));
        assert_eq!(c.decide(&Fact::Src(net("10.1.2.7/32"))), Some(false));
        assert_eq!(
            c.conditions(),
            vec![
                "source address in 10.1.0.0/23, 10.1.3.0/24, 10.1.4.0/22, 10.1.8.0/21, 10.1.16.0/20, 10.1.32.0/19, 10.1.64.0/18, 10.1.128.0/17"
                    .to_string()
            ]
        );
    }

    #[test]
    fn complements_read_as_not_in() {
        let mut c = Constraints::default();
        c.assume(&Fact::Src(net("10.0.0.0/8")), false);
        assert_eq!(c.conditions(), vec!["source address not in 10.0.0.0/8"]);
        let mut c = Constraints::default();
        c.assume(&Fact::Sport(RangeSet::range(1000, 1000)), false);
        assert_eq!(c.conditions(), vec!["source port not 1000"]);
        let mut c = Constraints::default();
        c.assume(&Fact::Sport(RangeSet::range(1000, 2000)), true);
        assert_eq!(c.conditions(), vec!["source port in 1000-2000"]);
    }

    #[test]
    fn unions_of_disjoint_sides_are_exact() {
        let mut a = Constraints::default();
        a.assume(&Fact::Src(net("10.1.0.0/16")), true);
        let mut b = Constraints::default();
        b.assume(&Fact::Src(net("10.1.0.0/16")), false);
        assert_eq!(a.disjoint_union(&b), Some(Constraints::default()));
        // Overlapping sets: no union (the common packets have two routes).
        assert_eq!(a.disjoint_union(&Constraints::default()), None);
        let mut c = Constraints::default();
        c.assume(&Fact::Src(net("10.0.0.0/8")), true);
        assert_eq!(a.disjoint_union(&c), None);
        // Two fields differ: no box holds exactly the union.
        b.assume(&Fact::Sport(RangeSet::range(1, 1)), true);
        assert_eq!(a.disjoint_union(&b), None);
        let atom = |holds| {
            let mut c = Constraints::default();
            c.assume(
                &Fact::Atom {
                    key: "k".into(),
                    text: "t".into(),
                },
                holds,
            );
            c
        };
        assert_eq!(
            atom(true).disjoint_union(&atom(false)),
            Some(Constraints::default())
        );
        assert_eq!(atom(true).disjoint_union(&Constraints::default()), None);
        let p = |s: &str| IfacePattern::parse(s);
        let mut base = Constraints::default();
        base.assume(&Fact::InIface(vec![p("veth+")]), true);
        let (mut x, mut y) = (base.clone(), base.clone());
        x.assume(&Fact::InIface(vec![p("veth1")]), true);
        y.assume(&Fact::InIface(vec![p("veth1")]), false);
        assert_eq!(x.disjoint_union(&y), Some(base.clone()));
        assert_eq!(y.disjoint_union(&x), Some(base));
    }

    #[test]
    fn interfaces() {
        let p = |s: &str| IfacePattern::parse(s);
        let mut c = Constraints::default();
        assert!(c.assume(&Fact::InIface(vec![p("veth+")]), true));
        assert_eq!(c.decide(&Fact::InIface(vec![p("eth0")])), Some(false));
        assert_eq!(c.decide(&Fact::InIface(vec![p("vet+")])), Some(true));
        assert_eq!(c.decide(&Fact::InIface(vec![p("veth1")])), None);
        assert!(c.assume(&Fact::InIface(vec![p("veth1")]), false));
        assert_eq!(c.decide(&Fact::InIface(vec![p("veth1")])), Some(false));
        assert!(!c.clone().assume(&Fact::InIface(vec![p("v+")]), false));
        let name = c.sets().in_iface.as_ref().unwrap().pick().unwrap();
        assert!(name.starts_with("veth") && name != "veth1", "{name}");
        assert_eq!(
            c.conditions(),
            vec!["input interface matches veth+ and does not match veth1"]
        );
        // Excluding every one-character continuation still leaves longer names.
        let mut c = Constraints::default();
        c.assume(&Fact::InIface(vec![p("x")]), false);
        for ch in ('!'..='~').filter(|c| !matches!(c, '+' | '*')) {
            c.assume(&Fact::InIface(vec![p(&format!("x{ch}"))]), false);
        }
        c.assume(&Fact::InIface(vec![p("x+")]), true);
        let name = c.sets().in_iface.as_ref().unwrap().pick().unwrap();
        assert!(
            c.sets().in_iface.as_ref().unwrap().contains(&name),
            "{name}"
        );
        assert!(name.len() > 2, "{name}");
    }

    #[test]
    fn addrtype_sets_agree_with_addr_type() {
        let node = Node {
            local_addrs: vec![Cidr::parse("192.168.122.10/24").unwrap()],
            ..Node::default()
        };
        for t in [
            AddrType::Local,
            AddrType::Unicast,
            AddrType::Broadcast,
            AddrType::Multicast,
        ] {
            let s = AddrSet::of_types(&[t], &node, false);
            for ip in [
                "192.168.122.10",
                "192.168.122.255",
                "127.0.0.1",
                "0.0.0.0",
                "255.255.255.255",
                "224.0.0.1",
                "10.1.2.3",
            ] {
                let ip: IpAddr = ip.parse().unwrap();
                assert_eq!(s.contains(ip), node.addr_type(ip) == t, "{t:?} {ip}");
            }
        }
    }

    #[test]
    fn prefixes_cover_ranges_exactly() {
        let s = AddrSet {
            v6: false,
            set: RangeSet::range(0, u32::MAX as u128),
        };
        assert_eq!(s.prefixes(), vec![Cidr::parse("0.0.0.0/0").unwrap()]);
        let s = AddrSet {
            v6: true,
            set: RangeSet::range(0, u128::MAX),
        };
        assert_eq!(s.prefixes(), vec![Cidr::parse("::/0").unwrap()]);
        let s = AddrSet {
            v6: false,
            set: RangeSet::range(3, 9),
        };
        let text: Vec<String> = s.prefixes().iter().map(|c| c.to_string()).collect();
        assert_eq!(text, ["0.0.0.3", "0.0.0.4/30", "0.0.0.8/31"]);
    }

    /// The computed blocks are those a bit-by-bit search finds: every range of a
    /// small space, and ranges near the top of the IPv4 and IPv6 spaces.
    #[test]
    fn prefixes_match_a_bit_by_bit_search() {
        fn search(v6: bool, mut a: u128, b: u128) -> Vec<(u128, u32)> {
            let bits: u32 = if v6 { 128 } else { 32 };
            let mut out = Vec::new();
            loop {
                let mut size_bits = 0;
                while size_bits < bits {
                    let mask = if size_bits + 1 >= 128 {
                        u128::MAX
                    } else {
                        (1u128 << (size_bits + 1)) - 1
                    };
                    if a & mask != 0 || a | mask > b {
                        break;
                    }
                    size_bits += 1;
                }
                out.push((a, bits - size_bits));
                let last = if size_bits >= 128 {
                    u128::MAX
                } else {
                    a | ((1u128 << size_bits) - 1)
                };
                if last >= b {
                    return out;
                }
                a = last + 1;
            }
        }
        let computed = |v6: bool, a: u128, b: u128| -> Vec<(u128, u32)> {
            AddrSet {
                v6,
                set: RangeSet::range(a, b),
            }
            .prefixes()
            .iter()
            .map(|c| {
                let n = match c.addr {
                    IpAddr::V4(v) => u128::from(u32::from(v)),
                    IpAddr::V6(v) => u128::from(v),
                };
                (n, u32::from(c.len))
            })
            .collect()
        };
        for a in 0..70u128 {
            for b in a..70 {
                assert_eq!(computed(false, a, b), search(false, a, b), "{a}..={b}");
            }
        }
        let top4 = u128::from(u32::MAX);
        for (v6, a, b) in [
            (false, 0, top4),
            (false, 1, top4),
            (false, top4 - 5, top4),
            (true, 0, u128::MAX),
            (true, 3, u128::MAX),
            (true, u128::MAX - 9, u128::MAX),
        ] {
            assert_eq!(computed(v6, a, b), search(v6, a, b), "{a}..={b}");
        }
    }

    #[test]
    fn ct_nat_status() {
        use crate::ir::ct_bits;
        let dnat = ct_nat::matching(ct_bits::ESTABLISHED, ct_bits::DNAT);
        assert_eq!(dnat, 0b1100);
        let est = ct_nat::matching(ct_bits::ESTABLISHED, ct_bits::ESTABLISHED);
        assert_eq!(est, ct_nat::ANY);
        let mut c = Constraints::default();
        assert_eq!(c.decide(&Fact::CtNat(est)), Some(true));
        assert!(c.assume(&Fact::CtNat(dnat), false));
        assert_eq!(c.decide(&Fact::CtNat(dnat)), Some(false));
        assert_eq!(
            c.conditions(),
            vec!["the connection is not destination-NATed"]
        );
    }
}
