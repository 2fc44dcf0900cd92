//! A native rule's expressions back into the statement text `nft list` prints for it,
//! as nft's delinearization does for the forms decoded here: loads (payload, meta, ct,
//! numgen, fib) into registers, compares (with masks, prefixes, `<`/`>` and ranges),
//! set and verdict-map lookups (named or anonymous, concatenations of registers),
//! protocol dependencies (a `meta l4proto tcp` just before a transport header field,
//! printed as `tcp dport`; in an `inet` table a `meta nfproto ipv4` just before a
//! network header field, printed as `ip saddr`), `meta mark set`, `ct mark set`,
//! `update @set`, `dnat to`, `masquerade`, `reject`, `log`, `limit`, `notrack`,
//! counters, verdicts and the rule's comment. Anything else is an error naming it: the
//! table falls back to `nft list table`.

use super::datatype::{self, Datatype};
use super::set::SetAcc;
use super::{AF_INET, AF_INET_ANY, AF_INET6, by_kind, udata_comment};
use crate::nft_netlink::{be32, data_value, exprs};
use plumb_os::netlink::Attr;
use std::collections::HashMap;
use std::fmt::Write as _;

/// What a register holds: an expression's text and type (its padded size is the
/// number of 4-byte registers it takes).
#[derive(Clone, Debug)]
struct Loaded {
    text: String,
    t: Datatype,
    len: usize,
    /// A payload field of the transport header whose protocol no dependency said
    /// (`th dport`): printed only in a concatenation.
    transport: Option<&'static str>,
    /// A header field of an inet table that took the protocol match before it as its
    /// dependency (the match is not printed): not decoded in a concatenation.
    dependent: bool,
    /// Address prefix loaded (a shorter payload load of an address).
    prefix: Option<usize>,
    /// `& mask ^ xor` applied.
    masked: Option<(Vec<u8>, Vec<u8>)>,
    /// A constant an `immediate` put there (a NAT address or port).
    constant: Option<Vec<u8>>,
}

/// The byte offset of register `r` in the register file (NFT_REG_1..4 are 16 bytes,
/// NFT_REG32_00..15 four).
fn reg_offset(r: u32) -> Option<usize> {
    match r {
        1..=4 => Some((r as usize - 1) * 16),
        8..=23 => Some((r as usize - 8) * 4),
        _ => None,
    }
}

/// A verdict (`NFTA_DATA_VERDICT` nested in an `nft_data`) as nft prints it.
pub fn verdict_text(data: Attr<'_>) -> Option<String> {
    let v = data.nested().find(|x| x.kind == 2)?;
    let a = by_kind::<3>(v.value);
    let code = be32(a[1])? as i32;
    let chain = a[2].map(|x| x.string());
    Some(match (code, chain) {
        (1, None) => "accept".into(),
        (0, None) => "drop".into(),
        (-1, None) => "continue".into(),
        (-5, None) => "return".into(),
        (-3, Some(c)) => format!("jump {c}"),
        (-4, Some(c)) => format!("goto {c}"),
        _ => return None,
    })
}

/// The statement text of one rule (`NFTA_RULE_EXPRESSIONS` and `USERDATA`), without
/// indentation. `set` finds a set of the table by name.
pub fn rule_text<'s>(
    family: u8,
    expressions: Option<Attr<'_>>,
    userdata: Option<Attr<'_>>,
    set: &dyn Fn(&str) -> Option<&'s SetAcc>,
) -> Result<String, String> {
    let mut regs: HashMap<usize, Loaded> = HashMap::new();
    // Statements printed so far, and the protocol matches and contexts header fields
    // depend on.
    let mut out = Statements::default();
    let list = expressions.map(exprs).unwrap_or_default();
    let mut verdict_done = false;
    let mut iter = list.iter().peekable();
    while let Some(e) = iter.next() {
        if verdict_done {
            return Err(format!("expression {} after the verdict", e.name));
        }
        match e.name {
            "payload" => {
                // DREG 1, BASE 2, OFFSET 3, LEN 4, SREG 5 (a write).
                let a = by_kind::<9>(e.data);
                if a[5].is_some() {
                    return Err("payload write".into());
                }
                let dreg = reg_of(a[1])?;
                let (base, offset, len) = (
                    be32(a[2]).ok_or("payload without base")?,
                    be32(a[3]).ok_or("payload without offset")?,
                    be32(a[4]).ok_or("payload without length")? as usize,
                );
                regs.insert(dreg, payload_field(family, base, offset, len, &mut out)?);
            }
            "meta" => {
                // DREG 1, KEY 2, SREG 3.
                let a = by_kind::<4>(e.data);
                let key = be32(a[2]).ok_or("meta without key")?;
                if let Some(sreg) = a[3] {
                    // `meta mark set meta mark OP X`.
                    let src = regs
                        .get(&reg_offset(sreg.be_u32().unwrap_or(0)).ok_or("meta register")?)
                        .ok_or("meta set from an empty register")?;
                    if key != 3 {
                        return Err(format!("meta set of key {key}"));
                    }
                    let value = match &src.constant {
                        Some(c) => mark_constant(c)?,
                        None if src.masked.is_none() => plain_mark(src)?,
                        None => value_expr(src)?,
                    };
                    out.push(format!("meta mark set {value}"));
                    continue;
                }
                let dreg = reg_of(a[1])?;
                let (text, t, len) = match key {
                    3 => ("meta mark", Datatype::Mark, 4),
                    6 => ("iifname", Datatype::Ifname, 16),
                    7 => ("oifname", Datatype::Ifname, 16),
                    15 => ("meta nfproto", Datatype::NfProto, 1),
                    19 => ("meta pkttype", Datatype::PktType, 1),
                    16 => ("meta l4proto", Datatype::InetProto, 1),
                    k => return Err(format!("meta key {k}")),
                };
                regs.insert(dreg, loaded(text, t, len));
            }
            "ct" => {
                // DREG 1, KEY 2, DIRECTION 3, SREG 4.
                let a = by_kind::<5>(e.data);
                let key = be32(a[2]).ok_or("ct without key")?;
                if a[3].is_some() {
                    return Err("ct with a direction".into());
                }
                if let Some(sreg) = a[4] {
                    // `ct mark set 0x...` from an immediate, `ct mark set meta mark`.
                    let src = regs
                        .get(&reg_of(Some(sreg))?)
                        .ok_or("ct set from an empty register")?;
                    if key != 3 {
                        return Err(format!("ct set of key {key}"));
                    }
                    let value = match &src.constant {
                        Some(c) => mark_constant(c)?,
                        None => plain_mark(src)?,
                    };
                    out.push(format!("ct mark set {value}"));
                    continue;
                }
                let (text, t) = match key {
                    0 => ("ct state", Datatype::CtState),
                    2 => ("ct status", Datatype::CtStatus),
                    3 => ("ct mark", Datatype::Mark),
                    k => return Err(format!("ct key {k}")),
                };
                regs.insert(reg_of(a[1])?, loaded(text, t, 4));
            }
            "numgen" => {
                // DREG 1, MODULUS 2, TYPE 3, OFFSET 4.
                let a = by_kind::<5>(e.data);
                let modulus = be32(a[2]).ok_or("numgen without modulus")?;
                if be32(a[3]) != Some(1) || be32(a[4]).unwrap_or(0) != 0 {
                    return Err("numgen other than random without offset".into());
                }
                let text = format!("numgen random mod {modulus}");
                regs.insert(reg_of(a[1])?, loaded(&text, Datatype::Integer, 4));
            }
            "fib" => {
                // DREG 1, RESULT 2, FLAGS 3.
                // Flags SADDR 1, DADDR 2, MARK 4, IIF 8, PRESENT 32; results
                // OIF 1, OIFNAME 2, ADDRTYPE 3: `fib saddr . iif oif missing`,
                // `fib daddr type local`.
                let a = by_kind::<4>(e.data);
                let flags = be32(a[3]).ok_or("fib without flags")?;
                let inputs: Vec<&str> = [(1, "saddr"), (2, "daddr"), (4, "mark"), (8, "iif")]
                    .iter()
                    .filter(|(bit, _)| flags & bit != 0)
                    .map(|(_, name)| *name)
                    .collect();
                // OIF as an input is not checked against nft.
                if flags & !(1 | 2 | 4 | 8 | 32) != 0 || flags & 3 == 0 || flags & 3 == 3 {
                    return Err("fib flags not decoded".into());
                }
                let present = flags & 32 != 0;
                let (result, t) = match (be32(a[2]), present) {
                    (Some(3), false) => ("type", Datatype::FibAddrType),
                    (Some(1), true) => ("oif", Datatype::Boolean),
                    _ => return Err("fib result not decoded".into()),
                };
                let text = format!("fib {} {result}", inputs.join(" . "));
                regs.insert(reg_of(a[1])?, loaded(&text, t, 4));
            }
            "bitwise" => {
                // SREG 1, DREG 2, LEN 3, MASK 4, XOR 5, OP 6, DATA 7.
                let a = by_kind::<8>(e.data);
                if be32(a[6]).unwrap_or(0) != 0 {
                    return Err("bitwise shift".into());
                }
                let mask = data_value(a[4]).ok_or("bitwise without mask")?;
                let xor = data_value(a[5]).ok_or("bitwise without xor")?;
                let mut src = regs
                    .get(&reg_of(a[1])?)
                    .cloned()
                    .ok_or("bitwise of an empty register")?;
                if src.masked.is_some()
                    || src.prefix.is_some()
                    || src.constant.is_some()
                    || mask.len() != src.len
                {
                    return Err("bitwise not decoded".into());
                }
                src.masked = Some((mask.to_vec(), xor.to_vec()));
                regs.insert(reg_of(a[2])?, src);
            }
            "cmp" => {
                // SREG 1, OP 2, DATA 3.
                let a = by_kind::<4>(e.data);
                let sreg = reg_of(a[1])?;
                let src = regs.get(&sreg).cloned().ok_or("cmp of an empty register")?;
                if src.constant.is_some() {
                    return Err("compare of a constant".into());
                }
                let op = be32(a[2]).ok_or("cmp without op")?;
                let value = data_value(a[3]).ok_or("cmp without data")?;
                // `>= lo` then `<= hi` of the same register: the range `lo-hi`.
                let upper = iter.peek().filter(|n| n.name == "cmp").and_then(|n| {
                    let b = by_kind::<4>(n.data);
                    (op == 5 && be32(b[2]) == Some(3) && reg_of(b[1]).ok() == Some(sreg))
                        .then(|| data_value(b[3]))
                        .flatten()
                });
                let text = match upper {
                    Some(hi) => {
                        iter.next();
                        range_text(&src, false, value, hi)?
                    }
                    None => compare(&src, op, value)?,
                };
                out.push(text);
                // `meta l4proto tcp` before a transport field and, in an inet table,
                // `meta nfproto ipv4` before a network field are those fields'
                // dependencies: nft prints `tcp dport 80`, `ip saddr 10.0.0.1`.
                let protocol_match =
                    matches!(&*src.text, "meta l4proto" | "ip protocol" | "ip6 nexthdr");
                if protocol_match && op == 0 {
                    out.protocol_fixed = true;
                }
                // `ip protocol tcp` is a port's dependency in an ip table (nft prints
                // `tcp dport 22`), not in an inet one (`ip protocol tcp tcp dport 22`).
                let l4_match = match &*src.text {
                    "meta l4proto" => true,
                    "ip protocol" => family == AF_INET,
                    "ip6 nexthdr" => family == AF_INET6,
                    _ => false,
                };
                let dependency = match (&*src.text, op, value) {
                    _ if src.masked.is_some() => None,
                    (_, 0, [6]) if l4_match => Some(Dependency::Transport("tcp")),
                    (_, 0, [17]) if l4_match => Some(Dependency::Transport("udp")),
                    ("meta l4proto", 0, [1]) => Some(Dependency::Transport("icmp")),
                    ("meta l4proto", 0, [58]) => Some(Dependency::Transport("icmpv6")),
                    ("meta nfproto", 0, [2]) if family == AF_INET_ANY => {
                        Some(Dependency::Network(AF_INET))
                    }
                    ("meta nfproto", 0, [10]) if family == AF_INET_ANY => {
                        Some(Dependency::Network(AF_INET6))
                    }
                    _ => None,
                };
                out.pending = dependency.map(|d| (out.printed.len() - 1, d));
            }
            "range" => {
                // SREG 1, OP 2, FROM_DATA 3, TO_DATA 4.
                let a = by_kind::<5>(e.data);
                let src = regs
                    .get(&reg_of(a[1])?)
                    .cloned()
                    .ok_or("range of an empty register")?;
                let invert = match be32(a[2]) {
                    Some(0) => false,
                    Some(1) => true,
                    _ => return Err("range op".into()),
                };
                let lo = data_value(a[3]).ok_or("range without start")?;
                let hi = data_value(a[4]).ok_or("range without end")?;
                out.push(range_text(&src, invert, lo, hi)?);
            }
            "lookup" => {
                // SET 1, SREG 2, DREG 3, SET_ID 4, FLAGS 5.
                let a = by_kind::<6>(e.data);
                let name = a[1].map(|x| x.string()).ok_or("lookup without set")?;
                let s = set(&name).ok_or_else(|| format!("lookup of unknown set {name}"))?;
                let start = reg_of(a[2])?;
                let lhs = concat_text(&regs, start, s.key_len as usize)?;
                if s.key_types()? != concat_types(&regs, start, s.key_len as usize) {
                    return Err(format!("set {name}: key type not the expression's"));
                }
                let invert = match be32(a[5]).unwrap_or(0) {
                    0 => false,
                    1 => true,
                    f => return Err(format!("lookup flags {f}")),
                };
                let target = if s.anonymous() {
                    let items = s.element_texts()?;
                    format!("{{ {} }}", items.join(", "))
                } else {
                    format!("@{}", s.name)
                };
                let text = match (a[3].map(|x| x.be_u32()), s.is_map()) {
                    (None, false) => {
                        format!("{lhs} {}{target}", if invert { "!= " } else { "" })
                    }
                    (Some(Some(0)), true) if !invert => {
                        verdict_done = true;
                        format!("{lhs} vmap {target}")
                    }
                    _ => return Err("lookup into a data map".into()),
                };
                out.push(text);
            }
            "dynset" => {
                // SET_NAME 1, SET_ID 2, OP 3, SREG_KEY 4, SREG_DATA 5, TIMEOUT 6,
                // EXPR 7, PAD 8, FLAGS 9, EXPRESSIONS 10.
                let a = by_kind::<11>(e.data);
                // The kernel dumps the timeout always: 0 when the rule gives none
                // (the element then takes the set's), printed by nft 1.0.6 only when
                // not 0 (`update @s { ip saddr timeout 1h }`).
                let timeout = match a[6] {
                    None => 0,
                    Some(t) => t.be_u64().ok_or("dynset timeout not decoded")?,
                };
                if a[5].is_some() || a[7].is_some() || a[10].is_some() {
                    return Err("dynset with data or expressions".into());
                }
                if be32(a[9]).unwrap_or(0) != 0 {
                    return Err("dynset flags".into());
                }
                let op = match be32(a[3]) {
                    Some(0) => "add",
                    Some(1) => "update",
                    _ => return Err("dynset op".into()),
                };
                let name = a[1].map(|x| x.string()).ok_or("dynset without set")?;
                let s = set(&name).ok_or_else(|| format!("dynset of unknown set {name}"))?;
                let mut key = concat_text(&regs, reg_of(a[4])?, s.key_len as usize)?;
                if let Some(t) = super::set::duration_text(timeout) {
                    let _ = write!(key, " timeout {t}");
                }
                out.push(format!("{op} @{name} {{ {key} }}"));
            }
            "immediate" => {
                // DREG 1, DATA 2.
                let a = by_kind::<3>(e.data);
                let dreg = be32(a[1]).ok_or("immediate without register")?;
                let data = a[2].ok_or("immediate without data")?;
                if dreg == 0 {
                    out.push(verdict_text(data).ok_or("verdict not decoded")?);
                    verdict_done = true;
                } else {
                    let v = data_value(Some(data)).ok_or("immediate without value")?;
                    let mut l = loaded("", Datatype::Integer, v.len());
                    l.constant = Some(v.to_vec());
                    regs.insert(reg_of(a[1])?, l);
                }
            }
            "counter" => {
                // BYTES 1, PACKETS 2.
                let a = by_kind::<3>(e.data);
                let bytes = a[1].and_then(|x| x.be_u64()).unwrap_or(0);
                let packets = a[2].and_then(|x| x.be_u64()).unwrap_or(0);
                out.push(format!("counter packets {packets} bytes {bytes}"));
            }
            "nat" => {
                // In an inet table `dnat ip to`: a `meta nfproto` just before it may
                // be its dependency, not decoded.
                if family == AF_INET_ANY
                    && out.pending.is_some_and(|(i, _)| i + 1 == out.printed.len())
                {
                    return Err("nat just after its protocol".into());
                }
                out.push(nat_text(family, e.data, &regs)?);
                verdict_done = true;
            }
            "masq" => {
                // FLAGS 1, REG_PROTO_MIN 2, REG_PROTO_MAX 3.
                let a = by_kind::<4>(e.data);
                if a[2].is_some() || a[3].is_some() {
                    return Err("masquerade to ports".into());
                }
                // NF_NAT_RANGE_PROTO_RANDOM 4, PERSISTENT 8, PROTO_RANDOM_FULLY 16.
                out.push(match be32(a[1]).unwrap_or(0) {
                    0 => "masquerade".into(),
                    0x4 => "masquerade random".into(),
                    0x8 => "masquerade persistent".into(),
                    0xc => "masquerade random,persistent".into(),
                    0x10 => "masquerade fully-random".into(),
                    f => return Err(format!("masquerade flags 0x{f:x}")),
                });
                verdict_done = true;
            }
            "redir" => {
                // REG_PROTO_MIN 1, REG_PROTO_MAX 2, FLAGS 3 (PROTO_SPECIFIED 2).
                let a = by_kind::<4>(e.data);
                let port = |r: Option<Attr<'_>>| -> Result<u16, String> {
                    let l = regs
                        .get(&reg_of(r)?)
                        .ok_or("redirect from an empty register")?;
                    match l.constant.as_deref() {
                        Some([hi, lo, ..]) => Ok(u16::from_be_bytes([*hi, *lo])),
                        _ => Err("redirect from a register not filled by an immediate".into()),
                    }
                };
                let text = match (a[1], be32(a[3]).unwrap_or(0)) {
                    (None, 0) if a[2].is_none() => "redirect".to_string(),
                    (Some(min), 2) => {
                        let lo = port(Some(min))?;
                        match a[2] {
                            Some(max) if be32(Some(max)) != be32(Some(min)) => {
                                format!("redirect to :{lo}-{}", port(Some(max))?)
                            }
                            _ => format!("redirect to :{lo}"),
                        }
                    }
                    _ => return Err("redirect flags not decoded".into()),
                };
                out.push(text);
                verdict_done = true;
            }
            "reject" => {
                let text = reject_text(family, e.data, &mut out)?;
                out.push(text);
                verdict_done = true;
            }
            "log" => out.push(log_text(e.data)?),
            "limit" => out.push(limit_text(e.data)?),
            "notrack" => out.push("notrack".into()),
            "exthdr" => {
                // DREG 1, TYPE 2, OFFSET 3, LEN 4, FLAGS 5, OP 6, SREG 7: only the TCP
                // MSS option's value (`tcp option maxseg size`), in a rule whose
                // protocol a tcp field before it set.
                let a = by_kind::<8>(e.data);
                let mss = a[2].map(|x| x.value) == Some(&[2][..])
                    && be32(a[3]) == Some(2)
                    && be32(a[4]) == Some(2)
                    && be32(a[5]).unwrap_or(0) == 0
                    && be32(a[6]) == Some(1);
                if !mss || out.transport != Some("tcp") {
                    return Err("exthdr other than the tcp mss after a tcp field".into());
                }
                let text = "tcp option maxseg size";
                match a[7] {
                    None => {
                        regs.insert(reg_of(a[1])?, loaded(text, Datatype::InetService, 2));
                    }
                    Some(sreg) => {
                        let src = regs
                            .get(&reg_of(Some(sreg))?)
                            .ok_or("exthdr write of an empty register")?;
                        let c = src
                            .constant
                            .as_deref()
                            .ok_or("exthdr write of a value not decoded")?;
                        let [hi, lo] = c
                            .get(..2)
                            .and_then(|v| <[u8; 2]>::try_from(v).ok())
                            .ok_or("exthdr write length")?;
                        out.push(format!("{text} set {}", u16::from_be_bytes([hi, lo])));
                    }
                }
            }
            other => return Err(format!("expression {other}")),
        }
    }
    let mut s = out.printed.join(" ");
    if let Some(u) = userdata {
        for (kind, value) in super::set::udata(u.value) {
            match (kind, udata_comment(value)) {
                (0, Some(c)) => {
                    let _ = write!(s, " comment \"{c}\"");
                }
                _ => return Err("rule user data not decoded".into()),
            }
        }
    }
    if s.is_empty() {
        return Err("an empty rule".into());
    }
    Ok(s)
}

fn reg_of(a: Option<Attr<'_>>) -> Result<usize, String> {
    let r = be32(a).ok_or("expression without register")?;
    reg_offset(r).ok_or_else(|| format!("register {r}"))
}

fn loaded(text: &str, t: Datatype, len: usize) -> Loaded {
    Loaded {
        text: text.to_string(),
        t,
        len,
        transport: None,
        dependent: false,
        prefix: None,
        masked: None,
        constant: None,
    }
}

/// The protocol match a header field loaded next may take as its dependency.
#[derive(Clone, Copy, Debug)]
enum Dependency {
    /// `meta l4proto tcp|udp`: the protocol's name.
    Transport(&'static str),
    /// `meta nfproto ipv4|ipv6` in an inet table: the family.
    Network(u8),
}

/// The statements of a rule printed so far, and the protocol match (and its index)
/// a header field loaded right after it takes as its dependency; the protocols
/// dependencies set for the rest of the rule.
#[derive(Default)]
struct Statements {
    printed: Vec<String>,
    pending: Option<(usize, Dependency)>,
    transport: Option<&'static str>,
    network: Option<u8>,
    /// A protocol matched (`meta l4proto`, `ip protocol`, `ip6 nexthdr` equal to one
    /// value) and printed.
    protocol_fixed: bool,
}

impl Statements {
    fn push(&mut self, s: String) {
        self.printed.push(s);
        self.pending = None;
    }

    /// The dependency of a header field loaded now: the protocol match printed last,
    /// taken out of the statements.
    fn take_dependency(&mut self) -> Option<Dependency> {
        let (i, d) = self.pending.take()?;
        if i + 1 != self.printed.len() {
            return None;
        }
        self.printed.pop();
        match d {
            Dependency::Transport(p) => self.transport = Some(p),
            Dependency::Network(f) => self.network = Some(f),
        }
        Some(d)
    }
}

/// A payload load's field (`ip saddr`, `tcp dport`, `th dport`, a prefix of an
/// address), taking the protocol match just before it as its dependency.
fn payload_field(
    family: u8,
    base: u32,
    offset: u32,
    len: usize,
    out: &mut Statements,
) -> Result<Loaded, String> {
    // Base 1: network header; 2: transport header.
    let addr = |text: &str, t: Datatype, full: usize| {
        let mut l = loaded(text, t, full);
        if len < full {
            l.prefix = Some(len * 8);
        }
        l
    };
    let peek = out.pending.filter(|(i, _)| *i + 1 == out.printed.len());
    let (network, dependent) = match (family, base, peek) {
        (AF_INET_ANY, 1, Some((_, Dependency::Network(f)))) => {
            out.take_dependency();
            (f, true)
        }
        (AF_INET_ANY, 1, _) => (
            out.network
                .ok_or("a network header field without its family")?,
            false,
        ),
        _ => (family, false),
    };
    let mut field = match (network, base, offset, len) {
        (AF_INET, 1, 9, 1) => loaded("ip protocol", Datatype::InetProto, 1),
        (AF_INET, 1, 12, 1..=4) => addr("ip saddr", Datatype::Ipv4Addr, 4),
        (AF_INET, 1, 16, 1..=4) => addr("ip daddr", Datatype::Ipv4Addr, 4),
        (AF_INET6, 1, 6, 1) => loaded("ip6 nexthdr", Datatype::InetProto, 1),
        (AF_INET6, 1, 8, 1..=16) => addr("ip6 saddr", Datatype::Ipv6Addr, 16),
        (AF_INET6, 1, 24, 1..=16) => addr("ip6 daddr", Datatype::Ipv6Addr, 16),
        (_, 2, _, _) => transport_field(family, offset, len, peek, out)?,
        _ => return Err(format!("payload base {base} offset {offset} length {len}")),
    };
    field.dependent |= dependent;
    Ok(field)
}

/// A transport header field (`tcp dport`, `udp sport`, `tcp flags`, `icmp type`,
/// `icmpv6 type`, `th dport`): its protocol from the `meta l4proto` (or, in an ip
/// table, `ip protocol`) match just before it, taken out of the statements, or from
/// such a match an earlier field of the rule took. In an inet table an ICMP field's
/// `meta l4proto` also takes the `meta nfproto` before it.
fn transport_field(
    family: u8,
    offset: u32,
    len: usize,
    peek: Option<(usize, Dependency)>,
    out: &mut Statements,
) -> Result<Loaded, String> {
    let (proto, dependent) = match peek {
        Some((_, Dependency::Transport(p))) => (Some(p), true),
        _ => (out.transport, false),
    };
    let (text, t): (String, Datatype) = match (offset, len, proto) {
        (0 | 2, 2, Some(p @ ("tcp" | "udp"))) => (
            format!("{p} {}", if offset == 0 { "sport" } else { "dport" }),
            Datatype::InetService,
        ),
        // A port of no protocol a match fixed: `th dport`.
        (0 | 2, 2, None) => (
            format!("th {}", if offset == 0 { "sport" } else { "dport" }),
            Datatype::InetService,
        ),
        (13, 1, Some("tcp")) => ("tcp flags".into(), Datatype::TcpFlag),
        (0, 1, Some("icmp")) => ("icmp type".into(), Datatype::IcmpType),
        (0, 1, Some("icmpv6")) => ("icmpv6 type".into(), Datatype::Icmp6Type),
        _ => {
            return Err(format!(
                "transport header offset {offset} length {len} of {}",
                proto.unwrap_or("no protocol")
            ));
        }
    };
    if dependent {
        if family == AF_INET_ANY && matches!(proto, Some("icmp" | "icmpv6")) {
            // `meta nfproto ipv4 meta l4proto icmp`: both dependencies.
            let want = if proto == Some("icmp") {
                "meta nfproto ipv4"
            } else {
                "meta nfproto ipv6"
            };
            let n = out.printed.len();
            if n < 2 || out.printed[n - 2] != want {
                return Err(format!("{text} without its family"));
            }
            out.take_dependency();
            out.printed.pop();
        } else {
            out.take_dependency();
        }
    }
    let mut l = loaded(&text, t, len);
    l.dependent = dependent && family == AF_INET_ANY;
    // A port no match fixed the protocol of, after a match that fixed one nft
    // names it by (`ip protocol tcp` not just before it): not decoded alone.
    if proto.is_none() && out.protocol_fixed {
        l.transport = Some("th");
    }
    Ok(l)
}

/// A relational statement: `LHS VALUE`, `LHS != VALUE`, `LHS & M == V`, a prefix,
/// a `ct state` flag test.
fn compare(src: &Loaded, op: u32, value: &[u8]) -> Result<String, String> {
    if src.transport.is_some() {
        return Err(format!("{} without its protocol", src.text));
    }
    let op_text = match op {
        0 => "",
        1 => "!= ",
        // `<`, `<=`, `>`, `>=` of a value in network byte order.
        2..=5 if src.masked.is_none() && src.prefix.is_none() && src.t.big_endian() => {
            let v = datatype::value_text(src.t, value)
                .ok_or_else(|| format!("value of {} not decoded", src.text))?;
            let sign = ["<", "<=", ">", ">="][op as usize - 2];
            return Ok(format!("{} {sign} {v}", src.text));
        }
        _ => return Err(format!("cmp op {op}")),
    };
    if let Some(bits) = src.prefix {
        let full = src.len;
        let mut v = value.to_vec();
        v.resize(full, 0);
        let addr = datatype::value_text(src.t, &v).ok_or("address not decoded")?;
        return Ok(format!("{} {op_text}{addr}/{bits}", src.text));
    }
    match &src.masked {
        // `iifname "eth*"`: a compare of the name's first bytes.
        None if src.t == Datatype::Ifname && value.len() < 16 && !value.contains(&0) => {
            let name = std::str::from_utf8(value).map_err(|_| "interface name not decoded")?;
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b'*' | b'\\'))
            {
                return Err("interface name not decoded".into());
            }
            Ok(format!("{} {op_text}\"{name}*\"", src.text))
        }
        // `tcp flags == syn`: an exact compare of a bitmask, not decoded.
        None if src.t.bitmask() => Err(format!("an exact compare of {}", src.text)),
        None => {
            let v = datatype::value_text(src.t, value)
                .ok_or_else(|| format!("value of {} not decoded", src.text))?;
            Ok(format!("{} {op_text}{v}", src.text))
        }
        Some((mask, xor)) => {
            if xor.iter().any(|&b| b != 0) {
                return Err("compare of a value with xor".into());
            }
            // An address prefix that is not on a byte boundary.
            if matches!(src.t, Datatype::Ipv4Addr | Datatype::Ipv6Addr) {
                let bits = prefix_bits(mask).ok_or("address mask not a prefix")?;
                let addr = datatype::value_text(src.t, value).ok_or("address not decoded")?;
                return Ok(format!("{} {op_text}{addr}/{bits}", src.text));
            }
            // `ct state new`, `ct status dnat`, `tcp flags syn`: a flag test
            // (`& flags != 0`); `tcp flags syn / syn,ack`: `& mask == flags`.
            if matches!(
                src.t,
                Datatype::CtState | Datatype::CtStatus | Datatype::TcpFlag
            ) {
                let names = |v: &[u8]| {
                    datatype::value_text(src.t, v)
                        .ok_or_else(|| format!("{} flags not decoded", src.text))
                };
                // `& syn == syn` and `& 0xff == 0xff` print otherwise: not decoded.
                return match op {
                    1 if value.iter().all(|&b| b == 0) => {
                        Ok(format!("{} {}", src.text, names(mask)?))
                    }
                    0 if src.t == Datatype::TcpFlag
                        && value.iter().any(|&b| b != 0)
                        && value != mask.as_slice() =>
                    {
                        Ok(format!("{} {} / {}", src.text, names(value)?, names(mask)?))
                    }
                    _ => Err(format!("{} test not decoded", src.text)),
                };
            }
            if src.t != Datatype::Mark {
                return Err(format!("masked compare of {}", src.text));
            }
            // A mask of leading ones nft prints as a prefix (`meta mark
            // 0xffffff00/24`): not decoded.
            let bits = u32::from_ne_bytes(mask.as_slice().try_into().map_err(|_| "mask length")?);
            if bits.leading_ones() + bits.trailing_zeros() == 32 {
                return Err("a mark prefix not decoded".into());
            }
            let m = datatype::value_text(src.t, mask).ok_or("mask not decoded")?;
            let v = datatype::value_text(src.t, value).ok_or("value not decoded")?;
            let op = if op == 0 { "==" } else { "!=" };
            Ok(format!("{} & {m} {op} {v}", src.text))
        }
    }
}

/// `n` when `mask` is `n` one bits then zeros.
fn prefix_bits(mask: &[u8]) -> Option<usize> {
    let mut seen_zero = false;
    let mut n = 0;
    for b in mask {
        for i in (0..8).rev() {
            if b >> i & 1 == 1 {
                if seen_zero {
                    return None;
                }
                n += 1;
            } else {
                seen_zero = true;
            }
        }
    }
    Some(n)
}

/// The value of a `meta mark set` (`meta mark | 0x4000`, `meta mark ^ 0x4000`).
fn value_expr(src: &Loaded) -> Result<String, String> {
    let Some((mask, xor)) = &src.masked else {
        return Err("meta set of an unmasked value".into());
    };
    if src.t != Datatype::Mark || src.text != "meta mark" {
        return Err("meta set of a value not decoded".into());
    }
    let m = u32::from_ne_bytes(mask.as_slice().try_into().map_err(|_| "mask length")?);
    let x = u32::from_ne_bytes(xor.as_slice().try_into().map_err(|_| "xor length")?);
    if m == u32::MAX {
        Ok(format!("meta mark ^ 0x{x:08x}"))
    } else if m == !x {
        Ok(format!("meta mark | 0x{x:08x}"))
    } else if x == 0 {
        Ok(format!("meta mark & 0x{m:08x}"))
    } else {
        Err("meta mark set not decoded".into())
    }
}

/// The (concatenated) expression in the registers from byte offset `start` that make
/// a key of `key_len` bytes: each component takes whole 4-byte registers.
fn concat_text(
    regs: &HashMap<usize, Loaded>,
    start: usize,
    key_len: usize,
) -> Result<String, String> {
    let mut parts = Vec::new();
    let mut at = start;
    while at < start + key_len {
        let l = regs.get(&at).ok_or("lookup key from an empty register")?;
        if l.masked.is_some() || l.prefix.is_some() || l.constant.is_some() {
            return Err("lookup key of a masked value or a constant".into());
        }
        parts.push(l.text.clone());
        at += if key_len == l.len {
            l.len
        } else {
            l.len.div_ceil(4) * 4
        };
    }
    if at != start + key_len || parts.is_empty() {
        return Err("lookup key length not decoded".into());
    }
    // A transport field alone needs its dependency; in a concatenation nft prints
    // `th dport`. A field that took its dependency in a concatenation: not decoded.
    let first = regs.get(&start);
    if parts.len() == 1 && first.is_some_and(|l| l.transport.is_some()) {
        return Err("lookup of a transport field without its protocol".into());
    }
    // `ip daddr . tcp dport`: the port took its `meta l4proto tcp`, as nft prints it
    // in an ip or ip6 table; in an inet table not checked against nft.
    if parts.len() > 1 {
        let mut at = start;
        while let Some(l) = regs.get(&at).filter(|_| at < start + key_len) {
            if l.dependent {
                return Err("a concatenation with a protocol dependency".into());
            }
            at += l.len.div_ceil(4) * 4;
        }
    }
    Ok(parts.join(" . "))
}

/// The types of the registers [`concat_text`] reads.
fn concat_types(regs: &HashMap<usize, Loaded>, start: usize, key_len: usize) -> Vec<Datatype> {
    let mut out = Vec::new();
    let mut at = start;
    while let Some(l) = regs.get(&at).filter(|_| at < start + key_len) {
        out.push(l.t);
        at += if key_len == l.len {
            l.len
        } else {
            l.len.div_ceil(4) * 4
        };
    }
    out
}

/// `dnat to ADDR[:PORT]` / `snat to ...` from the registers the immediates filled.
fn nat_text(family: u8, data: &[u8], regs: &HashMap<usize, Loaded>) -> Result<String, String> {
    // TYPE 1, FAMILY 2, REG_ADDR_MIN 3, REG_ADDR_MAX 4, REG_PROTO_MIN 5,
    // REG_PROTO_MAX 6, FLAGS 7.
    let a = by_kind::<8>(data);
    let kind = match be32(a[1]) {
        Some(0) => "snat",
        Some(1) => "dnat",
        _ => return Err("nat type".into()),
    };
    // In an inet table the statement names its family (`dnat ip to`).
    let (family, named) = match (family, be32(a[2]).map(|f| f as u8)) {
        (AF_INET_ANY, Some(f @ (AF_INET | AF_INET6))) => (f, true),
        (t, Some(f)) if t == f => (f, false),
        _ => return Err("nat of another family".into()),
    };
    // MAP_IPS 1 and PROTO_SPECIFIED 2 follow from the registers.
    if be32(a[7]).unwrap_or(0) & !3 != 0 {
        return Err("nat flags not decoded".into());
    }
    let value = |r: Option<Attr<'_>>| -> Result<Option<Vec<u8>>, String> {
        let Some(r) = r else { return Ok(None) };
        let l = regs
            .get(&reg_of(Some(r))?)
            .ok_or("nat from an empty register")?;
        l.constant
            .clone()
            .map(Some)
            .ok_or_else(|| "nat from a register not filled by an immediate".into())
    };
    let addr = value(a[3])?.ok_or("nat without address")?;
    // The kernel dumps the maximum registers as the minimum ones when not given.
    if a[4].is_some_and(|r| be32(Some(r)) != be32(a[3]))
        || a[6].is_some_and(|r| be32(Some(r)) != be32(a[5]))
    {
        return Err("nat to a range".into());
    }
    let t = if family == AF_INET6 {
        Datatype::Ipv6Addr
    } else {
        Datatype::Ipv4Addr
    };
    let addr_text = datatype::value_text(t, addr.get(..t.len().unwrap_or(4)).ok_or("nat address")?)
        .ok_or("nat address not decoded")?;
    let mut s = match (named, family) {
        (false, _) => format!("{kind} to "),
        (true, AF_INET6) => format!("{kind} ip6 to "),
        (true, _) => format!("{kind} ip to "),
    };
    match value(a[5])? {
        None => s.push_str(&addr_text),
        Some(p) => {
            let port =
                u16::from_be_bytes([*p.first().ok_or("nat port")?, *p.get(1).ok_or("nat port")?]);
            if family == AF_INET6 {
                let _ = write!(s, "[{addr_text}]:{port}");
            } else {
                let _ = write!(s, "{addr_text}:{port}");
            }
        }
    }
    Ok(s)
}

/// A 4-byte mark constant an immediate loaded, as nft prints a mark (`0x0001bd20`).
fn mark_constant(c: &[u8]) -> Result<String, String> {
    datatype::value_text(Datatype::Mark, c).ok_or_else(|| "a mark constant not decoded".into())
}

/// `FIELD lo-hi` / `FIELD != lo-hi` of a value in network byte order.
fn range_text(src: &Loaded, invert: bool, lo: &[u8], hi: &[u8]) -> Result<String, String> {
    if src.transport.is_some() {
        return Err(format!("{} without its protocol", src.text));
    }
    if src.masked.is_some() || src.prefix.is_some() || !src.t.big_endian() {
        return Err(format!("a range of {} not decoded", src.text));
    }
    let text = |v: &[u8]| {
        datatype::value_text(src.t, v).ok_or_else(|| format!("value of {} not decoded", src.text))
    };
    let (lo, hi) = (text(lo)?, text(hi)?);
    Ok(format!(
        "{} {}{lo}-{hi}",
        src.text,
        if invert { "!= " } else { "" }
    ))
}

/// `log [prefix "..."] [group G] [snaplen S] [queue-threshold Q] [level L]` (nft
/// 1.0.6's `log_stmt_print`; zero snaplen and threshold, and the default level
/// `warn`, not printed): a prefix of printable characters without a quote; flags are
/// not decoded.
fn log_text(data: &[u8]) -> Result<String, String> {
    // GROUP 1 (u16), PREFIX 2, SNAPLEN 3 (u32), QTHRESHOLD 4 (u16), LEVEL 5, FLAGS 6.
    let a = by_kind::<7>(data);
    if be32(a[6]).unwrap_or(0) != 0 {
        return Err("log flags".into());
    }
    let be16 = |x: Option<Attr<'_>>| -> Result<Option<u16>, String> {
        match x.map(|x| x.value) {
            None => Ok(None),
            Some(&[hi, lo]) => Ok(Some(u16::from_be_bytes([hi, lo]))),
            Some(_) => Err("log attribute not decoded".into()),
        }
    };
    let mut s = String::from("log");
    if let Some(p) = a[2] {
        let (last, text) = p.value.split_last().ok_or("log prefix not decoded")?;
        let text = std::str::from_utf8(text).map_err(|_| "log prefix not decoded")?;
        if *last != 0
            || !text.chars().all(|c| c == ' ' || c.is_ascii_graphic())
            || text.contains(['"', '\\'])
        {
            return Err("log prefix not decoded".into());
        }
        let _ = write!(s, " prefix \"{text}\"");
    }
    if let Some(g) = be16(a[1])? {
        let _ = write!(s, " group {g}");
    }
    match a[3].map(|x| x.be_u32()) {
        None | Some(Some(0)) => {}
        Some(Some(n)) => {
            let _ = write!(s, " snaplen {n}");
        }
        Some(None) => return Err("log snaplen not decoded".into()),
    }
    if let Some(q) = be16(a[4])?.filter(|q| *q != 0) {
        let _ = write!(s, " queue-threshold {q}");
    }
    let levels = [
        "emerg", "alert", "crit", "err", "warn", "notice", "info", "debug", "audit",
    ];
    match a[5].map(|x| x.be_u32()) {
        None | Some(Some(4)) => {}
        Some(Some(l)) if a[1].is_none() => {
            let name = levels.get(l as usize).ok_or("log level not decoded")?;
            let _ = write!(s, " level {name}");
        }
        _ => return Err("log level not decoded".into()),
    }
    Ok(s)
}

/// `limit rate [over] N/UNIT [burst B packets]` of packets (nft 1.0.6's
/// `limit_stmt_print`; the burst of 5, nft's default, and 0 not printed); a limit of
/// bytes is not decoded.
fn limit_text(data: &[u8]) -> Result<String, String> {
    // RATE 1, UNIT 2, BURST 3, TYPE 4, FLAGS 5.
    let a = by_kind::<6>(data);
    if be32(a[4]).unwrap_or(0) != 0 {
        return Err("a limit of bytes".into());
    }
    let rate = a[1].and_then(|x| x.be_u64()).ok_or("limit without rate")?;
    let unit = match a[2].and_then(|x| x.be_u64()) {
        Some(1) => "second",
        Some(60) => "minute",
        Some(3600) => "hour",
        Some(86_400) => "day",
        _ => return Err("limit unit not decoded".into()),
    };
    let over = match be32(a[5]).unwrap_or(0) {
        0 => "",
        1 => "over ",
        _ => return Err("limit flags not decoded".into()),
    };
    let mut s = format!("limit rate {over}{rate}/{unit}");
    match be32(a[3]).unwrap_or(0) {
        0 | 5 => {}
        b => {
            let _ = write!(s, " burst {b} packets");
        }
    }
    Ok(s)
}

/// `reject [with icmp|icmpv6|icmpx|tcp CODE]` as nft 1.0.6's `reject_stmt_print`
/// writes it: the protocol's port-unreachable is the default, not printed; a
/// `with icmp` reject of an inet table takes the `meta nfproto` just before it, and
/// a `with tcp reset` the `meta l4proto tcp` just before it (or a tcp field's), as
/// their dependencies (not printed).
fn reject_text(family: u8, data: &[u8], out: &mut Statements) -> Result<String, String> {
    // TYPE 1, ICMP_CODE 2.
    let a = by_kind::<3>(data);
    let code = a[2].and_then(|x| x.value.first().copied());
    let name = |names: &[(u8, &'static str)]| {
        code.and_then(|c| names.iter().find(|(n, _)| *n == c).map(|(_, s)| *s))
            .ok_or_else(|| "reject code not decoded".to_string())
    };
    const ICMP: &[(u8, &str)] = &[
        (0, "net-unreachable"),
        (1, "host-unreachable"),
        (2, "prot-unreachable"),
        (3, "port-unreachable"),
        (9, "net-prohibited"),
        (10, "host-prohibited"),
        (13, "admin-prohibited"),
    ];
    const ICMPV6: &[(u8, &str)] = &[
        (0, "no-route"),
        (1, "admin-prohibited"),
        (3, "addr-unreachable"),
        (4, "port-unreachable"),
    ];
    const ICMPX: &[(u8, &str)] = &[
        (0, "no-route"),
        (1, "port-unreachable"),
        (2, "host-unreachable"),
        (3, "admin-prohibited"),
    ];
    let pending = out.pending.filter(|(i, _)| *i + 1 == out.printed.len());
    match be32(a[1]) {
        // ICMPX_UNREACH.
        Some(2) => {
            if pending.is_some() {
                return Err("reject with icmpx just after a protocol match".into());
            }
            Ok(match name(ICMPX)? {
                "port-unreachable" => "reject".into(),
                n => format!("reject with icmpx {n}"),
            })
        }
        // TCP_RST.
        Some(1) => {
            match pending {
                Some((_, Dependency::Transport("tcp"))) => {
                    out.take_dependency();
                }
                _ if out.transport == Some("tcp") => {}
                _ => return Err("reject with tcp reset without its protocol".into()),
            }
            Ok("reject with tcp reset".into())
        }
        // ICMP_UNREACH: the family's ICMP.
        Some(0) => {
            let network = match (family, pending) {
                (AF_INET_ANY, Some((_, Dependency::Network(f)))) => {
                    out.take_dependency();
                    if matches!((f, code), (AF_INET, Some(3)) | (AF_INET6, Some(4))) {
                        return Err("reject with port-unreachable in an inet table".into());
                    }
                    f
                }
                (AF_INET_ANY, _) => return Err("reject with icmp without its family".into()),
                (f, _) => f,
            };
            if pending.is_some() && family != AF_INET_ANY {
                return Err("reject just after a protocol match".into());
            }
            match network {
                AF_INET => Ok(match name(ICMP)? {
                    "port-unreachable" => "reject".into(),
                    n => format!("reject with icmp {n}"),
                }),
                AF_INET6 => Ok(match name(ICMPV6)? {
                    "port-unreachable" => "reject".into(),
                    n => format!("reject with icmpv6 {n}"),
                }),
                _ => Err("reject in a family not decoded".into()),
            }
        }
        _ => Err("reject type not decoded".into()),
    }
}

/// `ct mark` / `meta mark` loaded as it is, as the value a mark is set to.
fn plain_mark(src: &Loaded) -> Result<String, String> {
    match (&*src.text, &src.masked, src.prefix) {
        ("ct mark" | "meta mark", None, None) => Ok(src.text.clone()),
        _ => Err("mark set of a value not decoded".into()),
    }
}
