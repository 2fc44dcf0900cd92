//! The legacy iptables tables (iptables-legacy, ip6tables-legacy) from the kernel's
//! `ipt_entry` blobs ([`plumb_os::xtables::read_tables`]), decoded without sockets:
//! pure, never panics on any bytes (cargo-fuzz `xt_legacy`, proptest on mutated
//! blobs).
//!
//! Each table is translated into the section `iptables-legacy-save` prints for it
//! (`-c`: with the rules' counters), and that text is read by plumb's iptables-save
//! reader, so the model from the kernel's bytes is the model from the save tool by
//! construction; the oracle test (`tests/legacy_oracle.rs`) compares the two texts on
//! the corpus loaded into namespaces. The layouts are the kernel's uapi structs
//! (`linux/netfilter_ipv4/ip_tables.h`, `linux/netfilter_ipv6/ip6_tables.h`,
//! `linux/netfilter/x_tables.h`; x86-64 and aarch64 align them alike); matches and
//! targets are printed by the same extension decoders as iptables-nft's xt blobs.
//! Anything not decoded exactly — an extension, a revision, a flag, a blob whose
//! chains are not laid out as iptables writes them — makes the *table*
//! [`LegacyTableRead::Fallback`] with the reason, and the caller reads it with the
//! save tool: a rule is never guessed.

use crate::nft_netlink::xt;
use plumb_os::xtables::{RawTable, XtFamily};
use plumb_ruleset::Family;
use std::fmt::Write as _;

/// How one legacy table was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LegacyTableRead {
    /// Translated: the `*table` ... `COMMIT` section `iptables-legacy-save` prints.
    Save(String),
    /// Something not decoded exactly: read it with the save tool; the reason says what.
    Fallback(String),
}

/// One legacy table of a namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LegacyTable {
    /// Table name.
    pub name: String,
    /// How it was read.
    pub read: LegacyTableRead,
}

/// A family's legacy tables as read through getsockopt.
#[derive(Clone, Debug)]
pub struct Read {
    /// Where they were read (`iptables-legacy getsockopt (netns NAME)`), for evidence.
    pub source: String,
    /// Every table the namespace lists, in its order.
    pub tables: Vec<LegacyTable>,
}

/// Names of the built-in chains by hook (`NF_INET_PRE_ROUTING` ... `POST_ROUTING`).
const HOOK_CHAINS: [&str; 5] = ["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"];

/// Where an entry's fields are, per family.
#[derive(Clone, Copy)]
struct Layout {
    /// `sizeof(struct ipt_entry)` / `ip6t_entry`.
    entry: usize,
    target_offset: usize,
    next_offset: usize,
    counters: usize,
    /// `nfgen_family` code the extension printers use (2, 10).
    af: u8,
}

const V4: Layout = Layout {
    entry: 112,
    target_offset: 88,
    next_offset: 90,
    counters: 96,
    af: 2,
};
const V6: Layout = Layout {
    entry: 168,
    target_offset: 140,
    next_offset: 142,
    counters: 152,
    af: 10,
};

/// `sizeof(struct xt_entry_match)` / `xt_entry_target`: u16 size, char name[29],
/// u8 revision.
const EXT_HEADER: usize = 32;
/// `XT_ALIGN`: 8 on the 64-bit architectures plumb runs on.
const ALIGN: usize = 8;

/// Standard verdicts (`-NF_* - 1`) by name.
const VERDICTS: [(i32, &str); 4] = [(-1, "DROP"), (-2, "ACCEPT"), (-4, "QUEUE"), (-5, "RETURN")];

/// A match or target: name, revision, data.
struct Ext<'a> {
    name: &'a str,
    rev: u8,
    data: &'a [u8],
}

/// One entry of the blob.
struct Entry<'a> {
    offset: usize,
    /// The entry's fixed part (`ipt_ip` ... counters).
    head: &'a [u8],
    next_offset: usize,
    packets: u64,
    bytes: u64,
    matches: Vec<Ext<'a>>,
    target: Ext<'a>,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// A NUL-terminated string inside a fixed field (the NUL must be there).
fn cstr(b: &[u8], at: usize, len: usize) -> Option<&str> {
    let field = b.get(at..at.checked_add(len)?)?;
    let end = field.iter().position(|&c| c == 0)?;
    std::str::from_utf8(&field[..end]).ok()
}

/// The extension (match or target) occupying exactly `b`.
fn ext<'a>(b: &'a [u8], what: &str, at: usize) -> Result<Ext<'a>, String> {
    let size = u16_at(b, 0).ok_or_else(|| format!("{what} at {at} cut short"))? as usize;
    if size < EXT_HEADER || !size.is_multiple_of(ALIGN) || size > b.len() {
        return Err(format!("{what} at {at} has size {size}"));
    }
    let name = cstr(b, 2, 29).ok_or_else(|| format!("{what} at {at} has no name"))?;
    Ok(Ext {
        name,
        rev: b[31],
        data: &b[EXT_HEADER..size],
    })
}

/// Every entry of the blob, checked for the layout iptables writes: sizes aligned and
/// inside the blob, matches ending at the target, the target ending the entry.
fn entries<'a>(blob: &'a [u8], l: &Layout) -> Result<Vec<Entry<'a>>, String> {
    let mut out = Vec::new();
    let mut offset = 0;
    while offset < blob.len() {
        let rest = &blob[offset..];
        let head = rest
            .get(..l.entry)
            .ok_or_else(|| format!("entry at {offset} cut short"))?;
        let bad = |what: &str| format!("entry at {offset}: {what}");
        let target_offset = u16_at(head, l.target_offset).ok_or_else(|| bad("no size"))? as usize;
        let next_offset = u16_at(head, l.next_offset).ok_or_else(|| bad("no size"))? as usize;
        if !next_offset.is_multiple_of(ALIGN)
            || next_offset > rest.len()
            || target_offset < l.entry
            || target_offset + EXT_HEADER > next_offset
        {
            return Err(bad(&format!(
                "target offset {target_offset}, next offset {next_offset}"
            )));
        }
        let mut matches = Vec::new();
        let mut at = l.entry;
        while at < target_offset {
            let m = ext(&rest[at..target_offset], "match", offset + at)?;
            at += m.data.len() + EXT_HEADER;
            matches.push(m);
        }
        let target = ext(
            &rest[target_offset..next_offset],
            "target",
            offset + target_offset,
        )?;
        if target_offset + EXT_HEADER + target.data.len() != next_offset {
            return Err(bad("the target does not end the entry"));
        }
        out.push(Entry {
            offset,
            head,
            next_offset,
            packets: u64_at(head, l.counters).unwrap_or(0),
            bytes: u64_at(head, l.counters + 8).unwrap_or(0),
            matches,
            target,
        });
        offset += next_offset;
    }
    Ok(out)
}

/// The standard target's verdict (`xt_standard_target`: an int).
fn verdict(t: &Ext<'_>) -> Option<i32> {
    if !t.name.is_empty() {
        return None;
    }
    Some(i32::from_ne_bytes(t.data.get(..4)?.try_into().ok()?))
}

/// True for an entry matching everything (no address, interface, protocol, flag or
/// match): policies and the return at the end of a user chain.
fn unconditional(e: &Entry<'_>, l: &Layout) -> bool {
    e.matches.is_empty() && e.head[..l.target_offset - 4].iter().all(|&b| b == 0)
}

struct Chain<'a> {
    name: String,
    /// (policy, packets, bytes) of a built-in chain.
    policy: Option<(&'static str, u64, u64)>,
    rules: Vec<&'a Entry<'a>>,
}

/// The section `iptables-legacy-save` (`-c` when `counters`) prints for `t`, or why
/// it cannot be given exactly.
pub fn decode_table(family: XtFamily, t: &RawTable, counters: bool) -> Result<String, String> {
    let l = match family {
        XtFamily::Ipv4 => V4,
        XtFamily::Ipv6 => V6,
    };
    let all = entries(&t.entries, &l)?;
    if all.len() != t.num_entries as usize {
        return Err(format!(
            "{} entries, the kernel said {}",
            all.len(),
            t.num_entries
        ));
    }
    if t.valid_hooks & !0x1f != 0 {
        return Err(format!("hooks {:#x}", t.valid_hooks));
    }
    let hook_at = |offset: usize| {
        (0..5).find(|&h| t.valid_hooks & (1 << h) != 0 && t.hook_entry[h] as usize == offset)
    };
    let mut chains: Vec<Chain<'_>> = Vec::new();
    // (index in `chains`, built-in hook) of the chain being read.
    let mut current: Option<(usize, Option<usize>)> = None;
    let mut ended = false;
    // User chain names seen (a set: a 10k-service table has 58k chains).
    let mut names = std::collections::HashSet::new();
    for (i, e) in all.iter().enumerate() {
        if ended {
            return Err(format!("entry at {} after the end of the table", e.offset));
        }
        if let Some(h) = hook_at(e.offset) {
            if current.is_some() {
                return Err(format!("chain {} starts inside another", HOOK_CHAINS[h]));
            }
            chains.push(Chain {
                name: HOOK_CHAINS[h].to_string(),
                policy: None,
                rules: Vec::new(),
            });
            current = Some((chains.len() - 1, Some(h)));
        }
        if e.target.name == "ERROR" {
            let name = cstr(e.target.data, 0, 30).ok_or("error target without a name")?;
            match current {
                Some((_, Some(h))) => {
                    return Err(format!("chain {} has no policy", HOOK_CHAINS[h]));
                }
                // The user chain's last entry is its return, not a rule.
                Some((c, None)) => {
                    let foot = chains[c].rules.pop();
                    let is_return = foot
                        .is_some_and(|f| verdict(&f.target) == Some(-5) && unconditional(f, &l));
                    if !is_return {
                        return Err(format!(
                            "chain {} does not end with its return",
                            chains[c].name
                        ));
                    }
                }
                None => {}
            }
            if i + 1 == all.len() {
                if name != "ERROR" {
                    return Err("the table does not end with its ERROR entry".into());
                }
                ended = true;
                current = None;
                continue;
            }
            if name.is_empty() || !names.insert(name) {
                return Err(format!("chain name {name:?}"));
            }
            chains.push(Chain {
                name: name.to_string(),
                policy: None,
                rules: Vec::new(),
            });
            current = Some((chains.len() - 1, None));
            continue;
        }
        match current {
            Some((c, Some(h))) if t.underflow[h] as usize == e.offset => {
                let policy = match verdict(&e.target) {
                    Some(-1) => "DROP",
                    Some(-2) => "ACCEPT",
                    _ => {
                        return Err(format!(
                            "chain {} has policy {:?}",
                            chains[c].name,
                            verdict(&e.target)
                        ));
                    }
                };
                if !unconditional(e, &l) {
                    return Err(format!("chain {}'s policy has conditions", chains[c].name));
                }
                chains[c].policy = Some((policy, e.packets, e.bytes));
                current = None;
            }
            Some((c, _)) => chains[c].rules.push(e),
            None => return Err(format!("entry at {} is outside any chain", e.offset)),
        }
    }
    if !ended {
        return Err("the table does not end with its ERROR entry".into());
    }
    for h in (0..5).filter(|h| t.valid_hooks & (1 << h) != 0) {
        if !chains
            .iter()
            .any(|c| c.name == HOOK_CHAINS[h] && c.policy.is_some())
        {
            return Err(format!("built-in chain {} missing", HOOK_CHAINS[h]));
        }
    }
    // Jump targets: a user chain's first entry, after its ERROR head.
    let mut starts = std::collections::HashMap::new();
    {
        let mut pending: Option<&str> = None;
        for e in &all {
            if let Some(name) = pending.take() {
                starts.insert(e.offset, name);
            }
            if e.target.name == "ERROR" {
                pending = cstr(e.target.data, 0, 30);
            }
        }
    }
    // Built-in chains in blob order, then user chains by name (libiptc's order).
    let (builtin, mut user): (Vec<&Chain<'_>>, Vec<&Chain<'_>>) =
        chains.iter().partition(|c| c.policy.is_some());
    user.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    let order: Vec<&Chain<'_>> = builtin.into_iter().chain(user).collect();
    let mut out = String::with_capacity(t.entries.len() / 2 + 256);
    let _ = writeln!(out, "*{}", t.name);
    for c in &order {
        match c.policy {
            Some((p, packets, bytes)) => {
                let _ = writeln!(out, ":{} {p} [{packets}:{bytes}]", c.name);
            }
            None => {
                let _ = writeln!(out, ":{} - [0:0]", c.name);
            }
        }
    }
    for c in &order {
        for e in &c.rules {
            if counters {
                let _ = write!(out, "[{}:{}] ", e.packets, e.bytes);
            }
            let _ = write!(out, "-A {}", c.name);
            rule(&mut out, e, &l, &starts).map_err(|why| format!("chain {}: {why}", c.name))?;
            out.push('\n');
        }
    }
    out.push_str("COMMIT\n");
    Ok(out)
}

/// A rule's text after `-A CHAIN`, as iptables-legacy-save's `print_rule` writes it.
fn rule(
    out: &mut String,
    e: &Entry<'_>,
    l: &Layout,
    starts: &std::collections::HashMap<usize, &str>,
) -> Result<(), String> {
    let goto = ip_part(out, e.head, l)?;
    let ctx = xt::Ctx { family: l.af };
    for m in &e.matches {
        let text = match (m.name, m.rev) {
            ("limit", 0) => {
                // xt_rateinfo: u32 avg, u32 burst, then the kernel's own state.
                let (avg, burst) = (u32_at(m.data, 0), u32_at(m.data, 4));
                avg.zip(burst).and_then(|(a, b)| xt::limit_avg(a, b))
            }
            // xt_set names its ipset by the kernel's index: the name needs an ipset
            // query, not this decoder.
            ("set", _) => None,
            _ => xt::save_match(m.name, u32::from(m.rev), m.data, &ctx),
        };
        let text =
            text.ok_or_else(|| format!("match {} revision {} not decoded", m.name, m.rev))?;
        out.push_str(&text);
    }
    let t = &e.target;
    if !t.name.is_empty() {
        if goto {
            return Err(format!("goto with target {}", t.name));
        }
        let text = match (t.name, t.rev) {
            ("NFLOG", 0) => nflog(t.data),
            _ => xt::save_target(t.name, u32::from(t.rev), t.data, &ctx),
        };
        let text =
            text.ok_or_else(|| format!("target {} revision {} not decoded", t.name, t.rev))?;
        let _ = write!(out, " -j {}{text}", t.name);
        return Ok(());
    }
    let v = verdict(t).ok_or("standard target without a verdict")?;
    let name = if v < 0 {
        VERDICTS
            .iter()
            .find(|(x, _)| *x == v)
            .map(|(_, n)| *n)
            .ok_or_else(|| format!("verdict {v}"))?
    } else if v as usize == e.offset + e.next_offset {
        // Falls through to the next entry: a rule without a target.
        if goto {
            return Err("goto without a chain".into());
        }
        return Ok(());
    } else {
        starts
            .get(&(v as usize))
            .copied()
            .ok_or_else(|| format!("jump to offset {v}, not the start of a chain"))?
    };
    let _ = write!(out, " -{} {name}", if goto { 'g' } else { 'j' });
    Ok(())
}

/// `-j NFLOG` options from an `xt_nflog_info` (u32 len, u16 group, u16 threshold,
/// u16 flags, u16 pad, char prefix[64]), as libxt_NFLOG prints them.
fn nflog(b: &[u8]) -> Option<String> {
    let (len, group, threshold, flags) =
        (u32_at(b, 0)?, u16_at(b, 4)?, u16_at(b, 6)?, u16_at(b, 8)?);
    if flags & !1 != 0 {
        return None;
    }
    let prefix = cstr(b, 12, 64)?;
    let mut s = String::new();
    if !prefix.is_empty() {
        s.push_str(" --nflog-prefix");
        s.push_str(&xt::save_string(prefix));
    }
    if group != 0 {
        let _ = write!(s, " --nflog-group {group}");
    }
    if flags & 1 != 0 {
        let _ = write!(s, " --nflog-size {len}");
    } else if len != 0 {
        let _ = write!(s, " --nflog-range {len}");
    }
    if threshold != 0 {
        let _ = write!(s, " --nflog-threshold {threshold}");
    }
    Some(s)
}

/// The address, interface, protocol and fragment part of a rule; gives whether the
/// rule is a goto.
fn ip_part(out: &mut String, h: &[u8], l: &Layout) -> Result<bool, String> {
    // ipt_ip: src, dst, smsk, dmsk (4 each), iniface, outiface, iniface_mask,
    // outiface_mask (16 each), u16 proto, u8 flags, u8 invflags.
    // ip6t_ip6: the same with 16-byte addresses, then u16 proto, u8 tos, u8 flags,
    // u8 invflags.
    let v6 = l.af == 10;
    let alen = if v6 { 16 } else { 4 };
    let ifs = 4 * alen;
    let proto_at = ifs + 64;
    let proto = u16_at(h, proto_at).ok_or("entry cut short")?;
    let (flags, inv) = if v6 {
        if h[proto_at + 2] != 0 {
            return Err("tos match".into());
        }
        (h[proto_at + 3], h[proto_at + 4])
    } else {
        (h[proto_at + 2], h[proto_at + 3])
    };
    // IPT_F_FRAG 1, IPT_F_GOTO 2 / IP6T_F_PROTO 1, IP6T_F_TOS 2, IP6T_F_GOTO 4.
    let (known_flags, goto_flag) = if v6 { (0x05, 0x04) } else { (0x03, 0x02) };
    if flags & !known_flags != 0 {
        return Err(format!("entry flags {flags:#x}"));
    }
    // IPT_INV_VIA_IN 1, VIA_OUT 2, TOS 4, SRCIP 8, DSTIP 0x10, FRAG 0x20, PROTO 0x40.
    let known_inv = if v6 { 0x5b } else { 0x7b };
    if inv & !known_inv != 0 {
        return Err(format!("inversion flags {inv:#x}"));
    }
    for (letter, at, mask_at, bit) in [('s', 0, 2 * alen, 0x08), ('d', alen, 3 * alen, 0x10)] {
        let (addr, mask) = (&h[at..at + alen], &h[mask_at..mask_at + alen]);
        let invert = inv & bit != 0;
        if !invert && addr.iter().all(|&b| b == 0) && mask.iter().all(|&b| b == 0) {
            continue;
        }
        if invert {
            out.push_str(" !");
        }
        let _ = write!(out, " -{letter} ");
        xt::push_addr_mask(out, l.af, addr, mask)?;
    }
    for (letter, at, bit) in [('i', ifs, 0x01), ('o', ifs + 16, 0x02)] {
        let name = cstr(h, at, 16).ok_or("interface name without its end")?;
        let mask = &h[at + 32..at + 48];
        // As xtables_parse_interface writes them: `name+` matches the bytes before
        // the `+`, an exact name its bytes and the NUL.
        let covered = match name.strip_suffix('+') {
            Some(prefix) => prefix.len(),
            None if name.is_empty() => 0,
            None => name.len() + 1,
        };
        let expected = mask
            .iter()
            .enumerate()
            .all(|(i, &b)| b == if i < covered { 0xff } else { 0 });
        if !expected {
            return Err("interface mask not as iptables writes it".into());
        }
        let invert = inv & bit != 0;
        if name.is_empty() {
            if invert {
                return Err("inverted empty interface".into());
            }
            continue;
        }
        if name == "+" && !invert {
            continue;
        }
        if invert {
            out.push_str(" !");
        }
        let _ = write!(out, " -{letter} {name}");
    }
    let proto_inv = inv & 0x40 != 0;
    if v6 && flags & 1 == 0 && (proto != 0 || proto_inv) {
        return Err("protocol without its flag".into());
    }
    if proto != 0 {
        let p = u8::try_from(proto).map_err(|_| format!("protocol {proto}"))?;
        if proto_inv {
            out.push_str(" !");
        }
        let _ = write!(
            out,
            " -p {}",
            xt::proto_name(p).ok_or(format!("protocol {p}"))?
        );
    } else if proto_inv {
        return Err("inverted protocol 0".into());
    }
    if !v6 {
        match (flags & 1 != 0, inv & 0x20 != 0) {
            (true, false) => out.push_str(" -f"),
            (true, true) => out.push_str(" ! -f"),
            (false, true) => return Err("inverted fragment flag alone".into()),
            (false, false) => {}
        }
    }
    Ok(flags & goto_flag != 0)
}

/// Reads and decodes the legacy tables of `family` in this namespace or in `netns`
/// (only those it lists: nothing is created); `counters`: the rules' counters too, as
/// `iptables-legacy-save -c`. Errors: the read failed, or `deadline` passed
/// (`io::ErrorKind::TimedOut`).
pub fn read(
    netns: Option<&str>,
    family: Family,
    deadline: Option<std::time::Instant>,
    counters: bool,
) -> std::io::Result<Vec<LegacyTable>> {
    let xf = xt_family(family);
    let raw = plumb_os::xtables::read_tables(netns, xf, deadline)?;
    Ok(raw.iter().map(|t| decode(xf, t, counters)).collect())
}

fn xt_family(family: Family) -> XtFamily {
    if family == Family::Ip6 {
        XtFamily::Ipv6
    } else {
        XtFamily::Ipv4
    }
}

fn decode(xf: XtFamily, t: &RawTable, counters: bool) -> LegacyTable {
    LegacyTable {
        name: t.name.clone(),
        read: match decode_table(xf, t, counters) {
            Ok(s) => LegacyTableRead::Save(s),
            Err(why) => LegacyTableRead::Fallback(why),
        },
    }
}

/// Bytes of the framing fixtures and the fuzz target use: byte 0 the family (0: IPv4,
/// else IPv6), then `valid_hooks`, `hook_entry[5]`, `underflow[5]`, `num_entries`
/// (u32, little-endian), then the blob.
pub fn frame(family: XtFamily, t: &RawTable) -> Vec<u8> {
    let mut out = vec![u8::from(family == XtFamily::Ipv6)];
    let fields = std::iter::once(t.valid_hooks)
        .chain(t.hook_entry)
        .chain(t.underflow)
        .chain(std::iter::once(t.num_entries));
    for v in fields {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&t.entries);
    out
}

/// Decodes a table framed as [`frame`] writes it (named `table`); `None` when the
/// frame is shorter than its header.
pub fn decode_frame(bytes: &[u8], counters: bool) -> Option<LegacyTable> {
    let (&fam, rest) = bytes.split_first()?;
    let header = rest.get(..48)?;
    let word = |i: usize| u32::from_le_bytes(header[4 * i..4 * i + 4].try_into().unwrap_or([0; 4]));
    let mut t = RawTable {
        name: "table".into(),
        valid_hooks: word(0),
        num_entries: word(11),
        entries: rest[48..].to_vec(),
        ..RawTable::default()
    };
    for h in 0..5 {
        t.hook_entry[h] = word(1 + h);
        t.underflow[h] = word(6 + h);
    }
    let xf = if fam == 0 {
        XtFamily::Ipv4
    } else {
        XtFamily::Ipv6
    };
    Some(decode(xf, &t, counters))
}

#[cfg(test)]
mod tests;
