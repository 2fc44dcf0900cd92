//! Native nftables rules (kube-proxy's nftables mode, firewalld, ...): statements
//! compiled into conditions and actions, and sets/maps compiled for fast lookups.
//!
//! A statement sequence runs in order: matches, then statements with effects, then
//! at most one verdict. Verdict maps (`ip daddr . meta l4proto . th dport vmap
//! @service-ips`) are hash lookups; `numgen random mod N vmap { ... }` is a random
//! branch with probability 1/N per entry.

use crate::addr::{Cidr, PortRange, protocol_number};
use crate::ir::{Action, Jump, MapVerdict, MarkOp, NatSpec};
use crate::ir::{AddrMatch, Cond, Field, IfacePattern, ct_bits};
use crate::ir::{Atom, CompiledSet, Pattern, SetRef};
use crate::packet::AddrType;
use crate::set_keys::ExactKeys;
use plumb_ruleset::RuleText;
use plumb_ruleset::nft::{NatKind, NftSet, Op, Statement, StatementKind, Value, Verdict};
use std::collections::HashMap;

/// The field a selector reads, and the protocol it implies (`tcp dport` -> 6).
pub fn selector(s: &str) -> Option<(Field, Option<u8>)> {
    let s = s.trim();
    Some(match s {
        "ip daddr" | "ip6 daddr" => (Field::Dst, None),
        "ip saddr" | "ip6 saddr" => (Field::Src, None),
        "meta l4proto" | "ip protocol" | "ip6 nexthdr" | "l4proto" => (Field::Proto, None),
        "th dport" => (Field::Dport, None),
        "th sport" => (Field::Sport, None),
        "meta iifname" | "iifname" | "meta iif" | "iif" => (Field::InIface, None),
        "meta oifname" | "oifname" | "meta oif" | "oif" => (Field::OutIface, None),
        "meta mark" | "mark" => (Field::Mark, None),
        _ => {
            let (proto, rest) = s.split_once(' ')?;
            let p = match proto {
                "tcp" => 6,
                "udp" => 17,
                "sctp" => 132,
                "udplite" => 136,
                "dccp" => 33,
                _ => return None,
            };
            match rest {
                "dport" => (Field::Dport, Some(p)),
                "sport" => (Field::Sport, Some(p)),
                _ => return None,
            }
        }
    })
}

fn fields_of(key: &str) -> Option<(Vec<Field>, Vec<u8>)> {
    let mut fields = Vec::new();
    let mut protos = Vec::new();
    for part in key.split(" . ") {
        let (f, p) = selector(part)?;
        fields.push(f);
        protos.extend(p);
    }
    Some((fields, protos))
}

fn num(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

fn port_num(s: &str) -> Option<u64> {
    num(s).or_else(|| {
        Some(match s {
            "http" => 80,
            "https" => 443,
            "domain" => 53,
            "ssh" => 22,
            _ => return None,
        })
    })
}

fn pattern(field: Field, v: &Value) -> Option<Pattern> {
    Some(match (field, v) {
        (Field::Src | Field::Dst, Value::Single(s)) => Pattern::Exact(Atom::Addr(s.parse().ok()?)),
        (Field::Src | Field::Dst, Value::Prefix(a, l)) => {
            let c = Cidr::parse(&format!("{a}/{l}"))?;
            if c.is_host() {
                Pattern::Exact(Atom::Addr(c.addr))
            } else {
                Pattern::Net(c)
            }
        }
        (Field::Src | Field::Dst, Value::Range(a, b)) => {
            Pattern::AddrRange(a.parse().ok()?, b.parse().ok()?)
        }
        (Field::Proto, Value::Single(s)) => Pattern::Exact(Atom::Num(protocol_number(s)? as u64)),
        (Field::Sport | Field::Dport | Field::Mark, Value::Single(s)) => {
            Pattern::Exact(Atom::Num(port_num(s)?))
        }
        (Field::Sport | Field::Dport | Field::Mark, Value::Range(a, b)) => {
            Pattern::NumRange(port_num(a)?, port_num(b)?)
        }
        (Field::InIface | Field::OutIface, Value::Single(s)) => match s.strip_suffix('*') {
            Some(p) => Pattern::NamePrefix(p.to_string()),
            None => Pattern::Exact(Atom::Name(s.clone())),
        },
        _ => return None,
    })
}

fn map_verdict(v: &Verdict, resolve: &dyn Fn(&str) -> Option<u32>) -> MapVerdict {
    let jump = |n: &str| match resolve(n) {
        Some(id) => Jump::Chain(id),
        None => Jump::Missing(n.to_string()),
    };
    match v {
        Verdict::Accept => MapVerdict::Accept,
        Verdict::Drop => MapVerdict::Drop,
        Verdict::Reject(_) => MapVerdict::Reject,
        Verdict::Return => MapVerdict::Return,
        Verdict::Continue => MapVerdict::Continue,
        Verdict::Queue(_) => MapVerdict::Queue,
        Verdict::Jump(c) => MapVerdict::Jump(jump(c)),
        Verdict::Goto(c) => MapVerdict::Goto(jump(c)),
    }
}

/// Sets `list[i]` to `value` when it is something, filling the places before it with
/// `None`: a list that no element fills stays empty.
fn put_at<T>(list: &mut Vec<Option<T>>, i: usize, value: Option<T>) {
    if let Some(v) = value {
        if list.len() <= i {
            list.resize_with(i + 1, || None);
        }
        list[i] = Some(v);
    }
}

impl CompiledSet {
    fn add(
        &mut self,
        fields: &[Field],
        key: &Value,
        idx: usize,
        verdict: Option<MapVerdict>,
        comment: Option<RuleText>,
    ) {
        let parts: Vec<&Value> = match key {
            Value::Concat(v) => v.iter().collect(),
            v => vec![v],
        };
        put_at(&mut self.verdicts, idx, verdict);
        put_at(&mut self.comments, idx, comment);
        if parts.len() != fields.len() {
            self.partial = true;
            return;
        }
        let pats: Option<Vec<Pattern>> = fields
            .iter()
            .zip(&parts)
            .map(|(f, v)| pattern(*f, v))
            .collect();
        match pats {
            Some(p) if p.iter().all(|p| matches!(p, Pattern::Exact(_))) => {
                let encode = |out: &mut Vec<u8>| {
                    for part in &p {
                        if let Pattern::Exact(a) = part {
                            crate::ir::encode_atom(a, out);
                        }
                    }
                };
                if !self.exact.insert(encode, idx) {
                    self.partial = true;
                }
            }
            Some(p) => self.patterns.push((p, idx)),
            None => self.partial = true,
        }
    }

    /// Compiles a named set for lookups by `fields`.
    pub fn named(
        set: &NftSet,
        fields: &[Field],
        resolve: &dyn Fn(&str) -> Option<u32>,
    ) -> CompiledSet {
        let mut c = CompiledSet {
            name: set.name.to_string(),
            exact: ExactKeys::with_capacity(set.elements.len()),
            ..Default::default()
        };
        for (i, e) in set.elements.iter().enumerate() {
            let v = e.verdict.as_ref().map(|v| map_verdict(v, resolve));
            c.add(fields, &e.key(), i, v, e.comment.clone());
        }
        c
    }

    /// Compiles an anonymous set of values.
    pub fn anonymous(values: &[Value], fields: &[Field]) -> CompiledSet {
        let mut c = CompiledSet {
            name: "{...}".into(),
            ..Default::default()
        };
        for (i, v) in values.iter().enumerate() {
            c.add(fields, v, i, None, None);
        }
        c
    }
}

/// Compiles nft rules for one table; sets are added to `sets` on first use.
pub struct Compiler<'a> {
    /// The named sets and maps of the table being compiled.
    pub table_sets: &'a [NftSet],
    /// Resolves a chain name of the table to its chain id; `None` for a chain the table lacks.
    pub resolve: &'a dyn Fn(&str) -> Option<u32>,
    /// Where compiled sets go; a [`SetRef`] is a position in it.
    pub sets: &'a mut Vec<CompiledSet>,
    /// (table-local set name, fields) -> compiled index.
    pub cache: &'a mut HashMap<(String, Vec<Field>), SetRef>,
}

/// A compiled nft rule: conditions and actions in statement order.
pub type Items = Vec<crate::ir::Item>;

impl Compiler<'_> {
    fn named_set(&mut self, name: &str, fields: &[Field]) -> Option<SetRef> {
        let key = (name.to_string(), fields.to_vec());
        if let Some(r) = self.cache.get(&key) {
            return Some(*r);
        }
        let set = self.table_sets.iter().find(|s| &*s.name == name)?;
        let c = CompiledSet::named(set, fields, self.resolve);
        self.sets.push(c);
        let r = (self.sets.len() - 1) as SetRef;
        self.cache.insert(key, r);
        Some(r)
    }

    /// Compiles one rule's statements ([`plumb_ruleset::nft::NftRule::statements`]) into its conditions and
    /// actions, in statement order.
    pub fn compile(&mut self, statements: &[Statement]) -> Items {
        let mut items = Vec::new();
        self.compile_into(statements, &mut items);
        items
    }

    /// Appends the items of a rule's statements ([`plumb_ruleset::nft::NftRule::statements`]) to `items`.
    pub fn compile_into(&mut self, statements: &[Statement], items: &mut Items) {
        use crate::ir::Item;
        for s in statements {
            match &s.kind {
                StatementKind::Match { left, op, right } => {
                    for c in self.compile_match(left, *op, right, &s.text) {
                        items.push(Item::Cond(c));
                    }
                }
                StatementKind::Verdict(v) => {
                    items.push(Item::Act(match map_verdict(v, self.resolve) {
                        MapVerdict::Accept => Action::Accept,
                        MapVerdict::Drop => Action::Drop,
                        MapVerdict::Reject => Action::Reject(match v {
                            Verdict::Reject(w) => w.clone(),
                            _ => None,
                        }),
                        MapVerdict::Return => Action::Return,
                        MapVerdict::Continue => Action::Continue,
                        MapVerdict::Queue => Action::Queue("queue".into()),
                        MapVerdict::Jump(j) => Action::Jump(j),
                        MapVerdict::Goto(j) => Action::Goto(j),
                    }))
                }
                StatementKind::VerdictMap { key, map } => {
                    items.push(Item::Act(self.compile_vmap(key, map, &s.text)))
                }
                StatementKind::Nat { kind, args } => {
                    items.push(Item::Act(nat(*kind, args, &s.text)))
                }
                StatementKind::Mangle { key, value } => {
                    items.push(Item::Act(mangle(key, value, &s.text)))
                }
                StatementKind::Counter(_) | StatementKind::Comment(_) => {}
                StatementKind::Log { .. } => items.push(Item::Act(Action::Log("log".into()))),
                StatementKind::Other(kw) => match kw.as_str() {
                    "limit" => items.push(Item::Cond(Cond::Limit(s.text.to_string()))),
                    "notrack" => items.push(Item::Act(Action::NoTrack)),
                    // `update @affinity-X { ip saddr }` (kube-proxy's ClientIP affinity),
                    // `add @set { .. }`, `delete @set { .. }`: they change a dynamic set
                    // later packets look up, not this packet's path.
                    "update" | "add" | "delete" if s.text.contains("@") => {
                        items.push(Item::Act(Action::NoEffect(s.text.to_string())))
                    }
                    _ => items.push(Item::Act(Action::Unknown(s.text.to_string()))),
                },
                _ => items.push(Item::Act(Action::Unknown(s.text.to_string()))),
            }
        }
    }

    fn compile_vmap(
        &mut self,
        key: &str,
        map: &plumb_ruleset::nft::VerdictMapRef,
        text: &str,
    ) -> Action {
        use plumb_ruleset::nft::VerdictMapRef;
        let words: Vec<&str> = key.split_whitespace().collect();
        if let ["numgen", "random", "mod", n, rest @ ..] = words.as_slice() {
            let (Some(modulus), VerdictMapRef::Inline(entries)) = (num(n), map) else {
                return Action::Unknown(text.to_string());
            };
            let offset = match rest {
                [] => 0,
                ["offset", o] => match num(o) {
                    Some(o) => o,
                    None => return Action::Unknown(text.to_string()),
                },
                _ => return Action::Unknown(text.to_string()),
            };
            let mut out = Vec::new();
            for (k, v) in entries {
                let range = match k.split_once('-') {
                    Some((a, b)) => num(a).zip(num(b)),
                    None => num(k).map(|x| (x, x)),
                };
                let Some((a, b)) = range else {
                    return Action::Unknown(text.to_string());
                };
                out.push((a as u32, b as u32, map_verdict(v, self.resolve)));
            }
            if modulus == 0 || modulus > u32::MAX as u64 {
                return Action::Unknown(text.to_string());
            }
            return Action::Numgen {
                modulus: modulus as u32,
                offset: offset as u32,
                entries: out,
            };
        }
        let Some((fields, _)) = fields_of(key) else {
            return Action::Unknown(text.to_string());
        };
        let set = match map {
            VerdictMapRef::Named(n) => self.named_set(n, &fields),
            VerdictMapRef::Inline(entries) => {
                let mut c = CompiledSet {
                    name: "{...}".into(),
                    ..Default::default()
                };
                for (i, (k, v)) in entries.iter().enumerate() {
                    let value = if fields.len() > 1 {
                        Value::Concat(k.split(" . ").map(Value::atom).collect())
                    } else {
                        Value::atom(k)
                    };
                    c.add(&fields, &value, i, Some(map_verdict(v, self.resolve)), None);
                }
                self.sets.push(c);
                Some((self.sets.len() - 1) as SetRef)
            }
        };
        match set {
            Some(set) => Action::VerdictMap { fields, set },
            None => Action::Unknown(format!("{text} (map not defined)")),
        }
    }

    fn compile_match(&mut self, left: &str, op: Op, right: &Value, text: &str) -> Vec<Cond> {
        let unknown = || vec![Cond::Unknown(text.to_string())];
        let neg = match op {
            Op::Implicit | Op::Eq => false,
            Op::Ne => true,
            Op::Lt | Op::Gt | Op::Le | Op::Ge => {
                // Only port comparisons are modelled.
                let Some((f @ (Field::Dport | Field::Sport), proto)) = selector(left) else {
                    return unknown();
                };
                let Value::Single(s) = right else {
                    return unknown();
                };
                let Some(n) = port_num(s).and_then(|n| u16::try_from(n).ok()) else {
                    return unknown();
                };
                let r = match op {
                    Op::Lt if n > 0 => PortRange { from: 0, to: n - 1 },
                    Op::Le => PortRange { from: 0, to: n },
                    Op::Gt if n < 65535 => PortRange {
                        from: n + 1,
                        to: 65535,
                    },
                    Op::Ge => PortRange { from: n, to: 65535 },
                    _ => return vec![Cond::Const(false, "empty port comparison")],
                };
                let mut out: Vec<Cond> = proto.map(Cond::ModuleProto).into_iter().collect();
                out.push(if f == Field::Dport {
                    Cond::Dport(crate::ir::Ports::One(r), false)
                } else {
                    Cond::Sport(crate::ir::Ports::One(r), false)
                });
                return out;
            }
        };
        let l = left.trim();
        // Bitwise mark tests: `meta mark & 0x4000 == 0`.
        for (prefix, ct) in [
            ("meta mark & ", false),
            ("mark & ", false),
            ("meta mark and ", false),
            ("mark and ", false),
            ("ct mark & ", true),
            ("ct mark and ", true),
        ] {
            if let Some(mask) = l.strip_prefix(prefix) {
                let (Some(mask), Value::Single(v)) = (num(mask), right) else {
                    return unknown();
                };
                let Some(value) = num(v) else {
                    return unknown();
                };
                let (value, mask) = (value as u32, mask as u32);
                return vec![if ct {
                    Cond::ConnMark {
                        value: value & mask,
                        mask,
                        neg,
                    }
                } else {
                    Cond::Mark {
                        value: value & mask,
                        mask,
                        neg,
                    }
                }];
            }
        }
        match l {
            "ct state" | "ct status" => {
                let words: Vec<String> = match right {
                    Value::Single(s) => s.split(',').map(|w| w.trim().to_string()).collect(),
                    Value::Set(v) => v
                        .iter()
                        .filter_map(|v| match v {
                            Value::Single(s) => Some(s.clone()),
                            _ => None,
                        })
                        .collect(),
                    _ => return unknown(),
                };
                let bits = words.iter().try_fold(0u16, |acc, w| {
                    let b = match (l, w.as_str()) {
                        ("ct state", "new") => ct_bits::NEW,
                        ("ct state", "established") => ct_bits::ESTABLISHED,
                        ("ct state", "related") => ct_bits::RELATED,
                        ("ct state", "invalid") => ct_bits::INVALID,
                        ("ct state", "untracked") => ct_bits::UNTRACKED,
                        ("ct status", "dnat") => ct_bits::DNAT,
                        ("ct status", "snat") => ct_bits::SNAT,
                        _ => return None,
                    };
                    Some(acc | b)
                });
                match bits {
                    Some(b) => vec![Cond::CtState(b, neg)],
                    None => unknown(),
                }
            }
            "ct mark" => match right {
                Value::Single(v) => match num(v) {
                    Some(v) => vec![Cond::ConnMark {
                        value: v as u32,
                        mask: u32::MAX,
                        neg,
                    }],
                    None => unknown(),
                },
                _ => unknown(),
            },
            "fib daddr type" | "fib saddr type" => {
                let types: Option<Vec<AddrType>> = match right {
                    Value::Single(s) => s.split(',').map(AddrType::parse).collect(),
                    Value::Set(v) => v
                        .iter()
                        .map(|v| match v {
                            Value::Single(s) => AddrType::parse(s),
                            _ => None,
                        })
                        .collect(),
                    _ => None,
                };
                match types {
                    Some(types) => vec![Cond::AddrType {
                        dst: l.starts_with("fib daddr"),
                        types,
                        neg,
                    }],
                    None => unknown(),
                }
            }
            "icmp type" => match right {
                Value::Single(s) => {
                    let ty = match s.as_str() {
                        "echo-request" => 8,
                        "echo-reply" => 0,
                        "destination-unreachable" => 3,
                        other => match other.parse() {
                            Ok(n) => n,
                            Err(_) => return unknown(),
                        },
                    };
                    vec![Cond::IcmpType {
                        ty: Some(ty),
                        code: None,
                        neg,
                    }]
                }
                _ => unknown(),
            },
            _ => self
                .compile_field_match(l, neg, right)
                .unwrap_or_else(unknown),
        }
    }

    fn compile_field_match(&mut self, left: &str, neg: bool, right: &Value) -> Option<Vec<Cond>> {
        let (fields, protos) = fields_of(left)?;
        let mut out: Vec<Cond> = protos.iter().map(|p| Cond::ModuleProto(*p)).collect();
        if let Value::Named(n) = right {
            let set = self.named_set(n, &fields)?;
            out.push(Cond::NftSet { fields, set, neg });
            return Some(out);
        }
        if fields.len() != 1 {
            let values = match right {
                Value::Set(v) => v.clone(),
                v => vec![v.clone()],
            };
            self.sets.push(CompiledSet::anonymous(&values, &fields));
            out.push(Cond::NftSet {
                fields,
                set: (self.sets.len() - 1) as SetRef,
                neg,
            });
            return Some(out);
        }
        let field = fields[0];
        let values: Vec<&Value> = match right {
            Value::Set(v) => v.iter().collect(),
            v => vec![v],
        };
        let c = match field {
            Field::Src | Field::Dst => {
                let ms = values
                    .iter()
                    .map(|v| match pattern(field, v)? {
                        Pattern::Exact(Atom::Addr(a)) => Some(AddrMatch::Net(Cidr::host(a))),
                        Pattern::Net(c) => Some(AddrMatch::Net(c)),
                        Pattern::AddrRange(f, t) => {
                            Some(AddrMatch::Range(crate::addr::AddrRange { from: f, to: t }))
                        }
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()?;
                let m = if ms.len() == 1 {
                    ms.into_iter().next()?
                } else {
                    AddrMatch::Any(ms)
                };
                if field == Field::Src {
                    Cond::Src(m, neg)
                } else {
                    Cond::Dst(m, neg)
                }
            }
            Field::Sport | Field::Dport => {
                let rs = values
                    .iter()
                    .map(|v| match pattern(field, v)? {
                        Pattern::Exact(Atom::Num(n)) => {
                            Some(PortRange::single(u16::try_from(n).ok()?))
                        }
                        Pattern::NumRange(a, b) => Some(PortRange {
                            from: u16::try_from(a).ok()?,
                            to: u16::try_from(b).ok()?,
                        }),
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()?;
                if field == Field::Dport {
                    Cond::Dport(rs.into(), neg)
                } else {
                    Cond::Sport(rs.into(), neg)
                }
            }
            Field::Proto if values.len() == 1 => match pattern(field, values[0])? {
                Pattern::Exact(Atom::Num(n)) => Cond::Proto(u8::try_from(n).ok()?, neg),
                _ => return None,
            },
            Field::InIface | Field::OutIface => {
                let pat = values
                    .iter()
                    .map(|v| match v {
                        Value::Single(s) => Some(IfacePattern::parse(s)),
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()?;
                Cond::NftIface {
                    out: field == Field::OutIface,
                    pat,
                    neg,
                }
            }
            Field::Mark if values.len() == 1 => match pattern(field, values[0])? {
                Pattern::Exact(Atom::Num(n)) => Cond::Mark {
                    value: n as u32,
                    mask: u32::MAX,
                    neg,
                },
                _ => return None,
            },
            _ => {
                let vals: Vec<Value> = values.into_iter().cloned().collect();
                self.sets.push(CompiledSet::anonymous(&vals, &fields));
                Cond::NftSet {
                    fields,
                    set: (self.sets.len() - 1) as SetRef,
                    neg,
                }
            }
        };
        out.push(c);
        Some(out)
    }
}

fn nat(kind: NatKind, args: &str, text: &str) -> Action {
    let mut words = args.split_whitespace().peekable();
    if matches!(words.peek(), Some(&"ip") | Some(&"ip6")) {
        words.next();
    }
    let mut spec = None;
    let mut ports = None;
    while let Some(w) = words.next() {
        match w {
            "to" => {
                let Some(v) = words.next() else {
                    return Action::Unknown(text.to_string());
                };
                match kind {
                    NatKind::Masquerade | NatKind::Redirect => {
                        match v.strip_prefix(':').and_then(PortRange::parse) {
                            Some(p) => ports = Some(p),
                            None => return Action::Unknown(text.to_string()),
                        }
                    }
                    _ => match NatSpec::parse(v) {
                        Some(s) => spec = Some(s),
                        None => return Action::Unknown(text.to_string()),
                    },
                }
            }
            "fully-random"
            | "random"
            | "persistent"
            | "fully-random,persistent"
            | "random,persistent" => {}
            w if w
                .split(',')
                .all(|f| matches!(f, "fully-random" | "random" | "persistent")) => {}
            _ => return Action::Unknown(text.to_string()),
        }
    }
    match kind {
        NatKind::Dnat => spec
            .map(|s| Action::Dnat(Box::new(s)))
            .unwrap_or_else(|| Action::Unknown(text.to_string())),
        NatKind::Snat => spec
            .map(|s| Action::Snat(Box::new(s)))
            .unwrap_or_else(|| Action::Unknown(text.to_string())),
        NatKind::Masquerade => Action::Masquerade(ports),
        NatKind::Redirect => Action::Redirect(ports),
    }
}

fn mangle(key: &str, value: &str, text: &str) -> Action {
    let key = key.trim();
    let value = value.trim();
    let is_mark = |s: &str| s == "meta mark" || s == "mark";
    if is_mark(key) {
        if value == "ct mark" {
            return Action::RestoreMark {
                nfmask: u32::MAX,
                ctmask: u32::MAX,
            };
        }
        if let Some(v) = num(value) {
            return Action::Mark(MarkOp {
                clear: u32::MAX,
                xor: v as u32,
            });
        }
        for (op, f) in [
            (" | ", 0u8),
            (" or ", 0),
            (" ^ ", 1),
            (" xor ", 1),
            (" & ", 2),
            (" and ", 2),
        ] {
            if let Some((l, r)) = value.split_once(op)
                && is_mark(l.trim())
                && let Some(v) = num(r)
            {
                let v = v as u32;
                return Action::Mark(match f {
                    0 => MarkOp { clear: v, xor: v },
                    1 => MarkOp { clear: 0, xor: v },
                    _ => MarkOp { clear: !v, xor: 0 },
                });
            }
        }
    }
    if key == "ct mark" {
        if is_mark(value) {
            return Action::SaveMark {
                nfmask: u32::MAX,
                ctmask: u32::MAX,
            };
        }
        if let Some(v) = num(value) {
            return Action::ConnMark(MarkOp {
                clear: u32::MAX,
                xor: v as u32,
            });
        }
    }
    Action::Unknown(text.to_string())
}
