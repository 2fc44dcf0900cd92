//! xt extensions (the `match` and `target` expressions of iptables-nft rules): each
//! info blob decoded from its kernel uapi layout (/usr/include/linux/netfilter*/,
//! x86-64 and aarch64 alignment: the same for these structs) and printed as the
//! extension's save function prints it. `None`: this extension, revision or one of
//! its flags is not decoded exactly, and the table is read with the save tool.

use std::fmt::Write as _;
use std::net::Ipv6Addr;

/// What an extension's printing depends on besides its blob.
pub(crate) struct Ctx {
    /// `nfgen_family` of the table (2: ip, 10: ip6).
    pub family: u8,
}

/// A little-endian-agnostic reader of native-endian fields at fixed offsets.
struct Blob<'a>(&'a [u8]);

impl Blob<'_> {
    fn u8(&self, at: usize) -> Option<u8> {
        self.0.get(at).copied()
    }
    fn u16(&self, at: usize) -> Option<u16> {
        Some(u16::from_ne_bytes(self.0.get(at..at + 2)?.try_into().ok()?))
    }
    fn be16(&self, at: usize) -> Option<u16> {
        Some(u16::from_be_bytes(self.0.get(at..at + 2)?.try_into().ok()?))
    }
    fn u32(&self, at: usize) -> Option<u32> {
        Some(u32::from_ne_bytes(self.0.get(at..at + 4)?.try_into().ok()?))
    }
    fn bytes(&self, at: usize, len: usize) -> Option<&[u8]> {
        self.0.get(at..at.checked_add(len)?)
    }
    /// A NUL-terminated string in a fixed field of `len` bytes (must end inside it).
    fn cstr(&self, at: usize, len: usize) -> Option<&str> {
        let field = self.bytes(at, len)?;
        let end = field.iter().position(|&b| b == 0)?;
        std::str::from_utf8(&field[..end]).ok()
    }
}

/// iptables' `xtables_save_string`: as is when only `[A-Za-z0-9_-]` (and not
/// empty), else in double quotes with `"`, `\` and `'` escaped by a backslash.
pub(crate) fn save_string(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if plain {
        return format!(" {s}");
    }
    let mut out = String::from(" \"");
    for c in s.chars() {
        if matches!(c, '"' | '\\' | '\'') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// `/etc/protocols` names iptables-save prints for `-p` (those of the nodes plumb
/// reads; another number is not decoded).
pub(crate) fn proto_name(p: u8) -> Option<&'static str> {
    Some(match p {
        1 => "icmp",
        2 => "igmp",
        4 => "ipencap",
        6 => "tcp",
        17 => "udp",
        41 => "ipv6",
        47 => "gre",
        50 => "esp",
        51 => "ah",
        58 => "ipv6-icmp",
        132 => "sctp",
        136 => "udplite",
        _ => return None,
    })
}

/// `ADDR/PREFIX` (a contiguous mask) or `ADDR/MASK`, as iptables-save prints `-s`.
pub(crate) fn push_addr_mask(
    out: &mut String,
    family: u8,
    addr: &[u8],
    mask: &[u8],
) -> Result<(), String> {
    let bits: u32 = mask.iter().map(|b| b.count_ones()).sum();
    let contiguous = mask
        .iter()
        .flat_map(|b| (0..8).rev().map(move |i| b >> i & 1))
        .skip(bits as usize)
        .all(|b| b == 0);
    match (family, <[u8; 4]>::try_from(addr), <[u8; 4]>::try_from(mask)) {
        (2, Ok(a), Ok(m)) => {
            push_ipv4(out, a);
            out.push('/');
            if contiguous {
                push_decimal(out, bits);
            } else {
                push_ipv4(out, m);
            }
            Ok(())
        }
        (10, _, _) if contiguous && mask.len() == 16 => {
            let a: [u8; 16] = addr.try_into().map_err(|_| "address length")?;
            let _ = write!(out, "{}/{bits}", Ipv6Addr::from(a));
            Ok(())
        }
        _ => Err("address with a mask not decoded".into()),
    }
}

/// Writes `a` in dotted decimal, as `Ipv4Addr`'s `Display` prints it, without the
/// formatter (a 10k-service dump prints ~250k addresses).
pub(crate) fn push_ipv4(out: &mut String, a: [u8; 4]) {
    for (i, octet) in a.into_iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        push_decimal(out, u32::from(octet));
    }
}

/// Writes `n` in decimal, as `Display` prints it.
fn push_decimal(out: &mut String, mut n: u32) {
    let mut digits = [0u8; 10];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &digits[at..] {
        out.push(char::from(d));
    }
}

/// The save text (` -m NAME ...`) of match `name` revision `rev`.
pub(crate) fn save_match(name: &str, rev: u32, info: &[u8], ctx: &Ctx) -> Option<String> {
    let b = Blob(info);
    // Room for the common extensions' words, so that the text rarely grows.
    let mut s = String::with_capacity(96);
    s.push_str(" -m ");
    s.push_str(name);
    match (name, rev) {
        ("comment", 0) => {
            s.push_str(" --comment");
            s.push_str(&save_string(b.cstr(0, 256)?));
        }
        ("mark" | "connmark", 1) => {
            // xt_mark_mtinfo1 / xt_connmark_mtinfo1: mark, mask, invert.
            let (mark, mask, invert) = (b.u32(0)?, b.u32(4)?, b.u8(8)?);
            if invert > 1 {
                return None;
            }
            if invert == 1 {
                s.push_str(" !");
            }
            s.push_str(" --mark");
            mark_mask(&mut s, mark, mask);
        }
        ("statistic", 0) => {
            // xt_statistic_info: u16 mode, u16 flags, union { u32 probability;
            // struct { u32 every, packet, count } }, then a kernel pointer.
            let (mode, flags) = (b.u16(0)?, b.u16(2)?);
            if flags & !1 != 0 {
                return None;
            }
            let inv = if flags & 1 != 0 { " !" } else { "" };
            match mode {
                0 => {
                    let p = f64::from(b.u32(4)?) / f64::from(0x8000_0000u32);
                    let _ = write!(s, " --mode random{inv} --probability {p:.11}");
                }
                1 => {
                    let (every, packet) = (b.u32(4)?, b.u32(8)?);
                    let _ = write!(
                        s,
                        " --mode nth{inv} --every {} --packet {packet}",
                        every.checked_add(1)?
                    );
                }
                _ => return None,
            }
        }
        ("conntrack", 3) => return conntrack(&b),
        ("addrtype", 1) => {
            // xt_addrtype_info_v1: u16 source, u16 dest, u32 flags.
            let (src, dst, flags) = (b.u16(0)?, b.u16(2)?, b.u32(4)?);
            if flags & !0xf != 0 {
                return None;
            }
            for (types, inv, opt) in [(src, 1, "--src-type"), (dst, 2, "--dst-type")] {
                if types != 0 {
                    if flags & inv != 0 {
                        s.push_str(" !");
                    }
                    let _ = write!(s, " {opt} {}", addr_types(types)?);
                }
            }
            if flags & 4 != 0 {
                s.push_str(" --limit-iface-in");
            }
            if flags & 8 != 0 {
                s.push_str(" --limit-iface-out");
            }
        }
        ("multiport", 1) => {
            // xt_multiport_v1: u8 flags, u8 count, u16 ports[15], u8 pflags[15],
            // u8 invert.
            let (flags, count, invert) = (b.u8(0)?, b.u8(1)? as usize, b.u8(47)?);
            if count == 0 || count > 15 || invert > 1 {
                return None;
            }
            if invert == 1 {
                s.push_str(" !");
            }
            s.push_str(match flags {
                0 => " --sports ",
                1 => " --dports ",
                2 => " --ports ",
                _ => return None,
            });
            let mut i = 0;
            while i < count {
                if i > 0 {
                    s.push(',');
                }
                let _ = write!(s, "{}", b.u16(2 + 2 * i)?);
                if b.u8(32 + i)? != 0 {
                    i += 1;
                    if i >= count {
                        return None;
                    }
                    let _ = write!(s, ":{}", b.u16(2 + 2 * i)?);
                }
                i += 1;
            }
        }
        ("recent", 0 | 1) => {
            // xt_recent_mtinfo(_v1): u32 seconds, u32 hit_count, u8 check_set,
            // u8 invert, char name[200], u8 side; v1 adds the mask at 212.
            let (seconds, hits, check, invert) = (b.u32(0)?, b.u32(4)?, b.u8(8)?, b.u8(9)?);
            let (name, side) = (b.cstr(10, 200)?, b.u8(210)?);
            if check & !0x3f != 0 || invert > 1 || side > 1 {
                return None;
            }
            if invert == 1 {
                s.push_str(" !");
            }
            for (bit, opt) in [
                (2, " --set"),
                (1, " --rcheck"),
                (4, " --update"),
                (8, " --remove"),
            ] {
                if check & bit != 0 {
                    s.push_str(opt);
                }
            }
            if seconds != 0 {
                let _ = write!(s, " --seconds {}", seconds as i32);
            }
            if check & 32 != 0 {
                s.push_str(" --reap");
            }
            if hits != 0 {
                let _ = write!(s, " --hitcount {}", hits as i32);
            }
            if check & 16 != 0 {
                s.push_str(" --rttl");
            }
            let _ = write!(s, " --name {name}");
            if rev == 1 {
                s.push_str(" --mask ");
                push_addr(&mut s, b.bytes(212, if ctx.family == 2 { 4 } else { 16 })?)?;
            }
            s.push_str(if side == 0 { " --rsource" } else { " --rdest" });
        }
        ("icmp", 0) => {
            // ipt_icmp: u8 type, u8 code[2], u8 invflags.
            let (kind, lo, hi, inv) = (b.u8(0)?, b.u8(1)?, b.u8(2)?, b.u8(3)?);
            if inv > 1 {
                return None;
            }
            if inv == 1 {
                s.push_str(" !");
            }
            if kind == 0xff {
                s.push_str(" --icmp-type any");
            } else {
                let _ = write!(s, " --icmp-type {kind}");
                if lo != 0 || hi != 0xff {
                    let _ = write!(s, "/{lo}");
                }
            }
        }
        ("physdev", 0) => {
            // xt_physdev_info: char physindev[16], in_mask[16], physoutdev[16],
            // out_mask[16]; u8 invert, u8 bitmask.
            let (invert, bitmask) = (b.u8(64)?, b.u8(65)?);
            if bitmask & !0x1f != 0 || invert & !bitmask != 0 {
                return None;
            }
            let physin = b.cstr(0, 16)?;
            let physout = b.cstr(32, 16)?;
            // Printed in this order: is-in, in, is-out, out, is-bridged.
            for (bit, opt, name) in [
                (8, " --physdev-is-in", None),
                (1, " --physdev-in", Some(physin)),
                (16, " --physdev-is-out", None),
                (2, " --physdev-out", Some(physout)),
                (4, " --physdev-is-bridged", None),
            ] {
                if bitmask & bit != 0 {
                    if invert & bit != 0 {
                        s.push_str(" !");
                    }
                    s.push_str(opt);
                    // Device names are printed as they are (no quoting).
                    if let Some(n) = name {
                        let _ = write!(s, " {n}");
                    }
                }
            }
        }
        ("tcp", 0) => {
            // xt_tcp: u16 spts[2], u16 dpts[2], u8 option, flg_mask, flg_cmp, invflags.
            let inv = b.u8(11)?;
            if inv & !0x0f != 0 {
                return None;
            }
            ports(&b, inv, &mut s)?;
            let (option, mask, cmp) = (b.u8(8)?, b.u8(9)?, b.u8(10)?);
            if option != 0 || inv & 8 != 0 {
                if inv & 8 != 0 {
                    s.push_str(" !");
                }
                let _ = write!(s, " --tcp-option {option}");
            }
            if (mask | cmp) & !0x3f != 0 {
                return None; // ECE/CWR have no name in iptables
            }
            if mask != 0 || inv & 4 != 0 {
                if inv & 4 != 0 {
                    s.push_str(" !");
                }
                let _ = write!(s, " --tcp-flags {} {}", tcp_flags(mask), tcp_flags(cmp));
            }
        }
        ("udp", 0) => {
            // xt_udp: u16 spts[2], u16 dpts[2], u8 invflags.
            let inv = b.u8(8)?;
            if inv & !0x03 != 0 {
                return None;
            }
            ports(&b, inv, &mut s)?;
        }
        _ => return None,
    }
    let _ = ctx.family;
    Some(s)
}

/// ` 0xMARK` or ` 0xMARK/0xMASK` (the mask only when not all ones).
fn mark_mask(s: &mut String, mark: u32, mask: u32) {
    // libxt_mark's print_mark.
    if mask == u32::MAX {
        let _ = write!(s, " 0x{mark:x}");
    } else {
        let _ = write!(s, " 0x{mark:x}/0x{mask:x}");
    }
}

/// `--sport`/`--dport` of tcp and udp (all ports: not printed).
fn ports(b: &Blob<'_>, inv: u8, s: &mut String) -> Option<()> {
    for (at, bit, opt) in [(0, 1, "--sport"), (4, 2, "--dport")] {
        let (lo, hi) = (b.u16(at)?, b.u16(at + 2)?);
        if lo != 0 || hi != 0xffff {
            if inv & bit != 0 {
                s.push_str(" !");
            }
            if lo == hi {
                let _ = write!(s, " {opt} {lo}");
            } else {
                let _ = write!(s, " {opt} {lo}:{hi}");
            }
        }
    }
    Some(())
}

pub(crate) fn tcp_flags(flags: u8) -> String {
    const NAMES: [(&str, u8); 6] = [
        ("FIN", 0x01),
        ("SYN", 0x02),
        ("RST", 0x04),
        ("PSH", 0x08),
        ("ACK", 0x10),
        ("URG", 0x20),
    ];
    let mut out = Vec::new();
    for (name, bit) in NAMES {
        if flags & bit != 0 {
            out.push(name);
        }
    }
    // Callers refuse bits 0x40 and 0x80 (no name) before printing.
    if out.is_empty() {
        "NONE".into()
    } else {
        out.join(",")
    }
}

/// The names of the bits set in an addrtype mask, comma-separated as iptables prints them.
fn addr_types(mask: u16) -> Option<String> {
    use plumb_ruleset::iptables::ADDR_TYPES as NAMES;
    if mask >> 12 != 0 {
        return None;
    }
    Some(
        NAMES
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, n)| *n)
            .collect::<Vec<_>>()
            .join(","),
    )
}

/// conntrack revision 3: `--ctstate` and `--ctstatus` only (other options: not
/// decoded); with `XT_CONNTRACK_STATE_ALIAS`, the `state` match it stands for.
fn conntrack(b: &Blob<'_>) -> Option<String> {
    // Offsets in xt_conntrack_mtinfo3: 8 addresses of 16 bytes, expires 2 x u32
    // (128), l4proto (136), 4 ports (138), match_flags (146), invert_flags (148),
    // state_mask (150), status_mask (152).
    let (flags, invert) = (b.u16(146)?, b.u16(148)?);
    let (state, status) = (b.u16(150)?, b.u16(152)?);
    const STATE: u16 = 1;
    const STATUS: u16 = 1 << 6;
    const STATE_ALIAS: u16 = 1 << 13;
    // XT_CONNTRACK_STATE_BIT(ctinfo) = 1 << (ctinfo % 3 + 1); SNAT, DNAT, UNTRACKED
    // follow IP_CT_NUMBER (5). Printed in this order.
    const STATES: [(u16, &str); 7] = [
        (1, "INVALID"),
        (1 << 3, "NEW"),
        (1 << 2, "RELATED"),
        (1 << 1, "ESTABLISHED"),
        (1 << 8, "UNTRACKED"),
        (1 << 6, "SNAT"),
        (1 << 7, "DNAT"),
    ];
    let states = |mask: u16| -> Option<String> {
        if mask & !STATES.iter().fold(0, |a, (b, _)| a | b) != 0 {
            return None;
        }
        Some(
            STATES
                .iter()
                .filter(|(bit, _)| mask & bit != 0)
                .map(|(_, n)| *n)
                .collect::<Vec<_>>()
                .join(","),
        )
    };
    if flags == STATE | STATE_ALIAS && invert & !STATE == 0 {
        let inv = if invert != 0 { " !" } else { "" };
        return Some(format!(" -m state{inv} --state {}", states(state)?));
    }
    if flags & !(STATE | STATUS) != 0 || invert & !flags != 0 {
        return None;
    }
    let mut s = String::from(" -m conntrack");
    if flags & STATE != 0 {
        if invert & STATE != 0 {
            s.push_str(" !");
        }
        let _ = write!(s, " --ctstate {}", states(state)?);
    }
    if flags & STATUS != 0 {
        if invert & STATUS != 0 {
            s.push_str(" !");
        }
        const NAMES: [(u16, &str); 4] = [
            (1 << 0, "EXPECTED"),
            (1 << 1, "SEEN_REPLY"),
            (1 << 2, "ASSURED"),
            (1 << 3, "CONFIRMED"),
        ];
        if status & !0xf != 0 || status == 0 {
            return None;
        }
        let names: Vec<&str> = NAMES
            .iter()
            .filter(|(bit, _)| status & bit != 0)
            .map(|(_, n)| *n)
            .collect();
        let _ = write!(s, " --ctstatus {}", names.join(","));
    }
    Some(s)
}

/// NAT flags (`NF_NAT_RANGE_*`).
const MAP_IPS: u32 = 1;
const PROTO_SPECIFIED: u32 = 2;
const PROTO_RANDOM: u32 = 4;
const PERSISTENT: u32 = 8;
const PROTO_RANDOM_FULLY: u32 = 16;

/// A NAT range in one layout: flags, addresses, ports (network order).
struct NatRange {
    flags: u32,
    min: Vec<u8>,
    max: Vec<u8>,
    min_port: u16,
    max_port: u16,
}

fn nat_range(b: &Blob<'_>, rev: u32, family: u8) -> Option<NatRange> {
    match (rev, family) {
        // nf_nat_ipv4_multi_range_compat: rangesize, then flags, min_ip, max_ip,
        // min, max.
        (0, 2) => {
            if b.u32(0)? != 1 {
                return None;
            }
            Some(NatRange {
                flags: b.u32(4)?,
                min: b.bytes(8, 4)?.to_vec(),
                max: b.bytes(12, 4)?.to_vec(),
                min_port: b.be16(16)?,
                max_port: b.be16(18)?,
            })
        }
        // nf_nat_range (1) and nf_nat_range2 (2, base_proto after): flags,
        // min_addr[16], max_addr[16], min_proto, max_proto.
        (1 | 2, 2 | 10) => {
            let alen = if family == 2 { 4 } else { 16 };
            if rev == 2 && b.u32(0)? & 32 != 0 {
                return None; // PROTO_OFFSET
            }
            Some(NatRange {
                flags: b.u32(0)?,
                min: b.bytes(4, alen)?.to_vec(),
                max: b.bytes(20, alen)?.to_vec(),
                min_port: b.be16(36)?,
                max_port: b.be16(38)?,
            })
        }
        _ => None,
    }
}

/// Writes an IPv4 (4 bytes) or IPv6 (16) address; `None` for any other length.
fn push_addr(out: &mut String, a: &[u8]) -> Option<()> {
    match a.len() {
        4 => push_ipv4(out, a.try_into().ok()?),
        16 => {
            let _ = write!(out, "{}", Ipv6Addr::from(<[u8; 16]>::try_from(a).ok()?));
        }
        _ => return None,
    }
    Some(())
}

/// The save text (after `-j NAME`) of target `name` revision `rev`.
pub(crate) fn save_target(name: &str, rev: u32, info: &[u8], ctx: &Ctx) -> Option<String> {
    let b = Blob(info);
    let mut s = String::with_capacity(64);
    match (name, rev) {
        ("MARK", 2) => {
            // xt_mark_tginfo2: mark, mask.
            let _ = write!(s, " --set-xmark 0x{:x}/0x{:x}", b.u32(0)?, b.u32(4)?);
        }
        ("CONNMARK", 1) => {
            // xt_connmark_tginfo1: ctmark, ctmask, nfmask, u8 mode.
            let (ctmark, ctmask, nfmask, mode) = (b.u32(0)?, b.u32(4)?, b.u32(8)?, b.u8(12)?);
            match mode {
                0 => {
                    let _ = write!(s, " --set-xmark 0x{ctmark:x}/0x{ctmask:x}");
                }
                1 => {
                    let _ = write!(
                        s,
                        " --save-mark --nfmask 0x{nfmask:x} --ctmask 0x{ctmask:x}"
                    );
                }
                2 => {
                    let _ = write!(
                        s,
                        " --restore-mark --nfmask 0x{nfmask:x} --ctmask 0x{ctmask:x}"
                    );
                }
                _ => return None,
            }
        }
        ("CONNMARK", 2) => {
            // xt_connmark_tginfo2: ctmark, ctmask, nfmask, u8 shift_dir, shift_bits,
            // mode.
            let (ctmark, ctmask, nfmask) = (b.u32(0)?, b.u32(4)?, b.u32(8)?);
            let (dir, bits, mode) = (b.u8(12)?, b.u8(13)?, b.u8(14)?);
            match mode {
                0 if bits == 0 => {
                    let _ = write!(s, " --set-xmark 0x{ctmark:x}/0x{ctmask:x}");
                }
                1 | 2 => {
                    let what = if mode == 1 { "save" } else { "restore" };
                    let _ = write!(
                        s,
                        " --{what}-mark --nfmask 0x{nfmask:x} --ctmask 0x{ctmask:x}"
                    );
                    match (bits, dir) {
                        (0, _) => {}
                        (n, 0) => {
                            let _ = write!(s, " --left-shift-mark {n}");
                        }
                        (n, 1) => {
                            let _ = write!(s, " --right-shift-mark {n}");
                        }
                        _ => return None,
                    }
                }
                _ => return None,
            }
        }
        ("LOG", 0) => {
            // xt_log_info: u8 level, u8 logflags, char prefix[30].
            let (level, flags) = (b.u8(0)?, b.u8(1)?);
            let prefix = b.cstr(2, 30)?;
            if flags & !0x2f != 0 || level > 7 {
                return None;
            }
            if !prefix.is_empty() {
                s.push_str(" --log-prefix");
                s.push_str(&save_string(prefix));
            }
            if level != 4 {
                let _ = write!(s, " --log-level {level}");
            }
            for (bit, opt) in [
                (1, " --log-tcp-sequence"),
                (2, " --log-tcp-options"),
                (4, " --log-ip-options"),
                (8, " --log-uid"),
                (0x20, " --log-macdecode"),
            ] {
                if flags & bit != 0 {
                    s.push_str(opt);
                }
            }
        }
        ("DNAT" | "SNAT", 0..=2) => {
            let r = nat_range(&b, rev, ctx.family)?;
            if r.flags
                & !(MAP_IPS | PROTO_SPECIFIED | PROTO_RANDOM | PERSISTENT | PROTO_RANDOM_FULLY)
                != 0
                || (name == "DNAT" && r.flags & PROTO_RANDOM_FULLY != 0)
            {
                return None;
            }
            if r.flags & (MAP_IPS | PROTO_SPECIFIED) == 0 {
                return None;
            }
            let opt = if name == "DNAT" {
                "--to-destination"
            } else {
                "--to-source"
            };
            let _ = write!(s, " {opt} ");
            let v6 = ctx.family == 10;
            let bracket = v6 && r.flags & PROTO_SPECIFIED != 0;
            if r.flags & MAP_IPS != 0 {
                if bracket {
                    s.push('[');
                }
                push_addr(&mut s, &r.min)?;
                if r.min != r.max {
                    s.push('-');
                    push_addr(&mut s, &r.max)?;
                }
                if bracket {
                    s.push(']');
                }
            }
            if r.flags & PROTO_SPECIFIED != 0 {
                let _ = write!(s, ":{}", r.min_port);
                if r.max_port != r.min_port {
                    let _ = write!(s, "-{}", r.max_port);
                }
            }
            if r.flags & PROTO_RANDOM != 0 {
                s.push_str(" --random");
            }
            if r.flags & PROTO_RANDOM_FULLY != 0 {
                s.push_str(" --random-fully");
            }
            if r.flags & PERSISTENT != 0 {
                s.push_str(" --persistent");
            }
        }
        ("MASQUERADE", 0) => {
            let r = nat_range(&b, if ctx.family == 2 { 0 } else { 1 }, ctx.family)?;
            if r.flags & !(PROTO_SPECIFIED | PROTO_RANDOM | PROTO_RANDOM_FULLY) != 0 {
                return None;
            }
            if r.flags & PROTO_SPECIFIED != 0 {
                let _ = write!(s, " --to-ports {}", r.min_port);
                if r.max_port != r.min_port {
                    let _ = write!(s, "-{}", r.max_port);
                }
            }
            if r.flags & PROTO_RANDOM != 0 {
                s.push_str(" --random");
            }
            if r.flags & PROTO_RANDOM_FULLY != 0 {
                s.push_str(" --random-fully");
            }
        }
        ("REJECT", 0) => {
            let with = b.u32(0)?;
            let names: &[&str] = if ctx.family == 2 {
                &[
                    "icmp-net-unreachable",
                    "icmp-host-unreachable",
                    "icmp-proto-unreachable",
                    "icmp-port-unreachable",
                    "",
                    "icmp-net-prohibited",
                    "icmp-host-prohibited",
                    "tcp-reset",
                    "icmp-admin-prohibited",
                ]
            } else {
                &[
                    "icmp6-no-route",
                    "icmp6-adm-prohibited",
                    "",
                    "icmp6-addr-unreachable",
                    "icmp6-port-unreachable",
                    "",
                    "tcp-reset",
                    "icmp6-policy-fail",
                    "icmp6-reject-route",
                ]
            };
            let n = names.get(with as usize).filter(|n| !n.is_empty())?;
            let _ = write!(s, " --reject-with {n}");
        }
        _ => return None,
    }
    Some(s)
}

/// `-m limit` from nft's native `limit` expression (rate per unit of seconds, burst),
/// as iptables-nft reads it back into an `xt_rateinfo` (avg = 10000 * unit / rate)
/// and libxt_limit prints it.
pub(crate) fn limit(rate: u64, unit: u64, burst: u32) -> Option<String> {
    const SCALE: u64 = 10_000;
    if rate == 0 {
        return None;
    }
    // avg is a u32 in xt_rateinfo.
    let period = u32::try_from(SCALE.checked_mul(unit)? / rate).ok()?;
    limit_avg(period, burst)
}

/// `-m limit` from an `xt_rateinfo`'s `avg` (the period in 1/10000 s) and burst, as
/// libxt_limit prints it.
pub(crate) fn limit_avg(avg: u32, burst: u32) -> Option<String> {
    const SCALE: u64 = 10_000;
    const RATES: [(&str, u64); 4] = [
        ("day", SCALE * 24 * 60 * 60),
        ("hour", SCALE * 60 * 60),
        ("min", SCALE * 60),
        ("sec", SCALE),
    ];
    let period = u64::from(avg);
    if period == 0 {
        return None;
    }
    let mut i = 1;
    while i < RATES.len() {
        let mult = RATES[i].1;
        if period > mult || mult / period < mult % period {
            break;
        }
        i += 1;
    }
    let (name, mult) = RATES[i - 1];
    let mut s = format!(" -m limit --limit {}/{name}", mult / period);
    if burst != 5 {
        let _ = write!(s, " --limit-burst {burst}");
    }
    Some(s)
}

/// `-j NFLOG` from nft's native `log` expression with a group, as libxt_NFLOG prints
/// the `xt_nflog_info` iptables-nft reads back.
pub(crate) fn nflog(prefix: Option<&str>, group: u16, snaplen: u32, threshold: u16) -> String {
    let mut s = String::from(" -j NFLOG");
    if let Some(p) = prefix.filter(|p| !p.is_empty()) {
        s.push_str(" --nflog-prefix");
        s.push_str(&save_string(p));
    }
    if group != 0 {
        let _ = write!(s, " --nflog-group {group}");
    }
    if snaplen != 0 {
        let _ = write!(s, " --nflog-size {snaplen}");
    }
    if threshold != 0 {
        let _ = write!(s, " --nflog-threshold {threshold}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    /// The hand-written printers print what `Display` prints: every octet value in
    /// every position, and the numbers around each digit-count boundary.
    #[test]
    fn addresses_and_numbers_print_as_display_prints_them() {
        for v in 0..=255u8 {
            for at in 0..4 {
                let mut a = [1u8, 22, 133, 4];
                a[at] = v;
                let mut s = String::new();
                push_ipv4(&mut s, a);
                assert_eq!(s, Ipv4Addr::from(a).to_string());
            }
        }
        for n in [0, 9, 10, 99, 100, 4_294_967_295, 1_000_000_000, 999_999_999] {
            let mut s = String::from("x");
            push_decimal(&mut s, n);
            assert_eq!(s, format!("x{n}"));
        }
        let mut s = String::new();
        push_addr_mask(&mut s, 2, &[10, 0, 0, 0], &[255, 0, 255, 0]).unwrap();
        assert_eq!(s, "10.0.0.0/255.0.255.0");
        s.clear();
        push_addr_mask(&mut s, 2, &[10, 96, 0, 1], &[255, 255, 255, 255]).unwrap();
        assert_eq!(s, "10.96.0.1/32");
    }
}
