//! How a value of an nft datatype prints in `nft list` (nft 1.0.6, numeric ports and
//! no name lookups but for protocols), and how nft orders a set's elements: the
//! datatypes kube-proxy's nftables mode and host firewalls (firewalld, netavark,
//! flannel, netbird, hand-written) use, each value checked against nft's listing by
//! `tests/native_oracle.rs`, and `None` for any other (the table then falls back to
//! `nft list table`).

use std::cmp::Ordering;
use std::fmt::Write as _;

/// A datatype by nft's number (`enum datatypes` in nftables' `datatype.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Datatype {
    /// 1: `verdict` (map data only).
    Verdict,
    /// 2: `nf_proto` (`meta nfproto`), one byte.
    NfProto,
    /// 4: `integer`, host byte order (a `numgen` result).
    Integer,
    /// 7: `ipv4_addr`.
    Ipv4Addr,
    /// 8: `ipv6_addr`.
    Ipv6Addr,
    /// 12: `inet_proto`.
    InetProto,
    /// 13: `inet_service` (a port), network byte order.
    InetService,
    /// 19: `mark`, host byte order.
    Mark,
    /// 14: `icmp_type`, one byte.
    IcmpType,
    /// 15: `tcp_flag`, a bitmask of one byte.
    TcpFlag,
    /// 26: `ct_state`, a bitmask in host byte order.
    CtState,
    /// 28: `ct_status`, a bitmask in host byte order.
    CtStatus,
    /// 29: `icmpv6_type`, one byte.
    Icmp6Type,
    /// 31: `pkt_type` (`meta pkttype`), one byte.
    PktType,
    /// 38: `fib_addrtype`, host byte order.
    FibAddrType,
    /// 39: `boolean` (`fib ... oif exists`), host byte order.
    Boolean,
    /// 41: `ifname`.
    Ifname,
}

/// Bits of one component in a concatenation's type number (`TYPE_BITS`).
const TYPE_BITS: u32 = 6;

impl Datatype {
    /// The datatype of nft number `n`.
    pub fn from_number(n: u32) -> Option<Datatype> {
        Some(match n {
            1 => Datatype::Verdict,
            2 => Datatype::NfProto,
            4 => Datatype::Integer,
            7 => Datatype::Ipv4Addr,
            8 => Datatype::Ipv6Addr,
            12 => Datatype::InetProto,
            13 => Datatype::InetService,
            19 => Datatype::Mark,
            14 => Datatype::IcmpType,
            15 => Datatype::TcpFlag,
            26 => Datatype::CtState,
            28 => Datatype::CtStatus,
            29 => Datatype::Icmp6Type,
            31 => Datatype::PktType,
            38 => Datatype::FibAddrType,
            39 => Datatype::Boolean,
            41 => Datatype::Ifname,
            _ => return None,
        })
    }

    /// The name `type` prints.
    pub fn name(self) -> &'static str {
        match self {
            Datatype::Verdict => "verdict",
            Datatype::NfProto => "nf_proto",
            Datatype::Integer => "integer",
            Datatype::Ipv4Addr => "ipv4_addr",
            Datatype::Ipv6Addr => "ipv6_addr",
            Datatype::InetProto => "inet_proto",
            Datatype::InetService => "inet_service",
            Datatype::Mark => "mark",
            Datatype::TcpFlag => "tcp_flag",
            Datatype::IcmpType => "icmp_type",
            Datatype::Icmp6Type => "icmpv6_type",
            Datatype::PktType => "pkt_type",
            Datatype::CtState => "ct_state",
            Datatype::CtStatus => "ct_status",
            Datatype::FibAddrType => "fib_addrtype",
            Datatype::Boolean => "boolean",
            Datatype::Ifname => "ifname",
        }
    }

    /// Bytes of a value (`None`: as long as the set key says, for `integer`).
    pub fn len(self) -> Option<usize> {
        match self {
            Datatype::Verdict | Datatype::Integer => None,
            Datatype::Ipv4Addr
            | Datatype::Mark
            | Datatype::CtState
            | Datatype::CtStatus
            | Datatype::FibAddrType
            | Datatype::Boolean => Some(4),
            Datatype::Ipv6Addr | Datatype::Ifname => Some(16),
            Datatype::InetProto
            | Datatype::NfProto
            | Datatype::TcpFlag
            | Datatype::IcmpType
            | Datatype::Icmp6Type
            | Datatype::PktType => Some(1),
            Datatype::InetService => Some(2),
        }
    }

    /// Whether values are in network byte order (compared so when nft sorts them).
    ///
    /// `ifname` is a string nft keeps in host byte order: its sets sort so (`"lo"`
    /// before `"eth0"`), and it has no ranges.
    pub fn big_endian(self) -> bool {
        matches!(
            self,
            Datatype::Ipv4Addr | Datatype::Ipv6Addr | Datatype::InetService
        )
    }

    /// Whether values are flags nft prints by name (`syn`, `established,related`).
    pub fn bitmask(self) -> bool {
        matches!(
            self,
            Datatype::TcpFlag | Datatype::CtState | Datatype::CtStatus
        )
    }

    /// How many elements of a named set of this key type `elements = { }` prints on
    /// a line (nft's `calculate_delim`); `None` for the types whose named sets are
    /// not checked against nft 1.0.6 (not decoded).
    pub fn per_line(self) -> Option<usize> {
        match self {
            Datatype::Integer
            | Datatype::NfProto
            | Datatype::InetProto
            | Datatype::InetService
            | Datatype::Mark => Some(5),
            Datatype::Ipv4Addr | Datatype::CtState => Some(2),
            Datatype::TcpFlag
            | Datatype::CtStatus
            | Datatype::IcmpType
            | Datatype::Icmp6Type
            | Datatype::PktType
            | Datatype::Boolean => None,
            _ => Some(1),
        }
    }
}

/// The components of a (concatenated) key type number, first component first.
pub fn components(mut n: u32) -> Option<Vec<Datatype>> {
    let mut out = Vec::new();
    while n != 0 {
        out.push(Datatype::from_number(n & ((1 << TYPE_BITS) - 1))?);
        n >>= TYPE_BITS;
        if out.len() > 8 {
            return None;
        }
    }
    out.reverse();
    (!out.is_empty()).then_some(out)
}

/// The text of value `v` of type `t`, or `None` when it is not decoded exactly.
pub fn value_text(t: Datatype, v: &[u8]) -> Option<String> {
    match t {
        Datatype::Ipv4Addr => {
            let [a, b, c, d] = v else { return None };
            Some(format!("{a}.{b}.{c}.{d}"))
        }
        Datatype::Ipv6Addr => ipv6_text(v),
        Datatype::InetProto => {
            let [p] = v else { return None };
            proto_name(*p).map(str::to_string)
        }
        Datatype::InetService => {
            let [a, b] = v else { return None };
            Some(u16::from_be_bytes([*a, *b]).to_string())
        }
        Datatype::Mark => Some(format!("0x{:08x}", u32_ne(v)?)),
        Datatype::Integer => match v.len() {
            4 => Some(u32_ne(v)?.to_string()),
            1 => Some(v[0].to_string()),
            _ => None,
        },
        Datatype::CtState => ct_state_text(u32_ne(v)?),
        Datatype::CtStatus => flags_text(
            u32_ne(v)?,
            &[
                (1, "expected"),
                (2, "seen-reply"),
                (4, "assured"),
                (8, "confirmed"),
                (16, "snat"),
                (32, "dnat"),
                (512, "dying"),
            ],
        ),
        Datatype::TcpFlag => {
            let [f] = v else { return None };
            flags_text(
                u32::from(*f),
                &[
                    (1, "fin"),
                    (2, "syn"),
                    (4, "rst"),
                    (8, "psh"),
                    (16, "ack"),
                    (32, "urg"),
                    (64, "ecn"),
                    (128, "cwr"),
                ],
            )
        }
        Datatype::FibAddrType => {
            let names = [
                "unspec",
                "unicast",
                "local",
                "broadcast",
                "anycast",
                "multicast",
                "blackhole",
                "unreachable",
                "prohibit",
            ];
            names
                .get(usize::try_from(u32_ne(v)?).ok()?)
                .map(|s| s.to_string())
        }
        Datatype::Ifname => {
            let end = v.iter().position(|&b| b == 0)?;
            if v.get(end..)?.iter().any(|&b| b != 0) {
                return None;
            }
            let name = std::str::from_utf8(v.get(..end)?).ok()?;
            // nft escapes a literal `*` (`"dummy\*"`): not decoded.
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b'*' | b'\\'))
            {
                return None;
            }
            Some(format!("\"{name}\""))
        }
        Datatype::IcmpType => {
            let [t] = v else { return None };
            let names: &[(u8, &str)] = &[
                (0, "echo-reply"),
                (3, "destination-unreachable"),
                (4, "source-quench"),
                (5, "redirect"),
                (8, "echo-request"),
                (9, "router-advertisement"),
                (10, "router-solicitation"),
                (11, "time-exceeded"),
                (12, "parameter-problem"),
                (13, "timestamp-request"),
                (14, "timestamp-reply"),
                (15, "info-request"),
                (16, "info-reply"),
                (17, "address-mask-request"),
                (18, "address-mask-reply"),
            ];
            names
                .iter()
                .find(|(n, _)| n == t)
                .map(|(_, s)| s.to_string())
        }
        Datatype::Icmp6Type => {
            let [t] = v else { return None };
            let names: &[(u8, &str)] = &[
                (1, "destination-unreachable"),
                (2, "packet-too-big"),
                (3, "time-exceeded"),
                (4, "parameter-problem"),
                (128, "echo-request"),
                (129, "echo-reply"),
                (130, "mld-listener-query"),
                (131, "mld-listener-report"),
                (133, "nd-router-solicit"),
                (134, "nd-router-advert"),
                (135, "nd-neighbor-solicit"),
                (136, "nd-neighbor-advert"),
                (137, "nd-redirect"),
                (143, "mld2-listener-report"),
            ];
            names
                .iter()
                .find(|(n, _)| n == t)
                .map(|(_, s)| s.to_string())
        }
        Datatype::Boolean => match u32_ne(v)? {
            0 => Some("missing".into()),
            1 => Some("exists".into()),
            _ => None,
        },
        Datatype::PktType => match v {
            [0] => Some("host".into()),
            [1] => Some("broadcast".into()),
            [2] => Some("multicast".into()),
            [3] => Some("other".into()),
            _ => None,
        },
        Datatype::NfProto => match v {
            [2] => Some("ipv4".into()),
            [10] => Some("ipv6".into()),
            _ => None,
        },
        Datatype::Verdict => None,
    }
}

/// Protocol names nft prints: `getprotobynumber`'s name on the reading host, so only
/// those whose name is the same in every distribution's protocols database. nft
/// prints any other protocol by a name or a number that depends on the host's
/// `/etc/protocols`: not decoded.
fn proto_name(p: u8) -> Option<&'static str> {
    Some(match p {
        1 => "icmp",
        6 => "tcp",
        17 => "udp",
        58 => "ipv6-icmp",
        132 => "sctp",
        _ => return None,
    })
}

/// `ct state` flags in bit order, comma-separated.
fn ct_state_text(v: u32) -> Option<String> {
    flags_text(
        v,
        &[
            (1, "invalid"),
            (2, "established"),
            (4, "related"),
            (8, "new"),
            (64, "untracked"),
        ],
    )
}

/// A bitmask's flags by name in bit order, comma-separated; `None` for 0 or a bit
/// without a name.
fn flags_text(v: u32, names: &[(u32, &str)]) -> Option<String> {
    if v == 0 || v & !names.iter().fold(0, |a, (b, _)| a | b) != 0 {
        return None;
    }
    let set: Vec<&str> = names
        .iter()
        .filter(|(b, _)| v & b != 0)
        .map(|(_, n)| *n)
        .collect();
    Some(set.join(","))
}

/// An IPv6 address as glibc's `inet_ntop` prints it (the longest run of two or more
/// zero groups as `::`, the first on a tie); `None` for the forms where glibc prints
/// an embedded IPv4 address (`::a.b.c.d`, `::ffff:a.b.c.d`).
fn ipv6_text(v: &[u8]) -> Option<String> {
    let b: [u8; 16] = v.try_into().ok()?;
    let groups: Vec<u16> = b
        .chunks(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .collect();
    if groups[..5].iter().all(|&g| g == 0)
        && (groups[5] == 0xffff || (groups[5] == 0 && (groups[6] != 0)))
    {
        return None;
    }
    let (mut best, mut best_len) = (usize::MAX, 0);
    let mut i = 0;
    while i < 8 {
        if groups[i] == 0 {
            let start = i;
            while i < 8 && groups[i] == 0 {
                i += 1;
            }
            if i - start > best_len && i - start >= 2 {
                best = start;
                best_len = i - start;
            }
        } else {
            i += 1;
        }
    }
    let mut s = String::new();
    let mut i = 0;
    while i < 8 {
        if i == best {
            s.push_str("::");
            i += best_len;
            continue;
        }
        if !s.is_empty() && !s.ends_with(':') {
            s.push(':');
        }
        let _ = write!(s, "{:x}", groups[i]);
        i += 1;
    }
    Some(s)
}

fn u32_ne(v: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(v.try_into().ok()?))
}

/// The order nft prints a set's elements in: keys compared as numbers, a single
/// type's in its byte order, a concatenation's whole padded key in host byte order
/// (nft sorts the raw key before splitting it). Keys of different lengths (never in
/// one set) compare by length.
pub fn key_order(types: &[Datatype], a: &[u8], b: &[u8]) -> Ordering {
    let big = matches!(types, [t] if t.big_endian());
    a.len().cmp(&b.len()).then_with(|| {
        if big {
            a.cmp(b)
        } else {
            a.iter().rev().cmp(b.iter().rev())
        }
    })
}

/// An address prefix's text (`10.0.0.0/8`) when `lo..=hi` is one, else a range
/// (`a-b`), or the single value.
pub fn interval_text(t: Datatype, lo: &[u8], hi: &[u8]) -> Option<String> {
    if lo == hi {
        return value_text(t, lo);
    }
    if lo.len() != hi.len() {
        return None;
    }
    if matches!(t, Datatype::Ipv4Addr | Datatype::Ipv6Addr)
        && let Some(len) = prefix_len(lo, hi)
    {
        return Some(format!("{}/{len}", value_text(t, lo)?));
    }
    if !t.big_endian() {
        return None;
    }
    Some(format!("{}-{}", value_text(t, lo)?, value_text(t, hi)?))
}

/// `Some(n)` when `lo..=hi` is the prefix `lo/n`.
fn prefix_len(lo: &[u8], hi: &[u8]) -> Option<usize> {
    let bits = lo.len() * 8;
    // The number of trailing bits where lo is 0 and hi is 1, all the way down.
    let mut host = 0;
    for i in (0..bits).rev() {
        let (byte, bit) = (i / 8, 7 - (i % 8));
        let (l, h) = ((lo[byte] >> bit) & 1, (hi[byte] >> bit) & 1);
        if l == 0 && h == 1 {
            host += 1;
        } else {
            break;
        }
    }
    let net = bits - host;
    let same = (0..net).all(|i| {
        let (byte, bit) = (i / 8, 7 - (i % 8));
        (lo[byte] >> bit) & 1 == (hi[byte] >> bit) & 1
    });
    same.then_some(net)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concatenated_keys_sort_as_nft_does() {
        // 10.43.8.0 . tcp . 5432 before 198.18.3.4 . tcp . 5432 (host order of the
        // whole key: the address's last byte weighs more than its first).
        let key = |a: [u8; 4]| [&a[..], &[6, 0, 0, 0], &[0x15, 0x38, 0, 0]].concat();
        let t = [
            Datatype::Ipv4Addr,
            Datatype::InetProto,
            Datatype::InetService,
        ];
        assert_eq!(
            key_order(&t, &key([10, 43, 8, 0]), &key([198, 18, 3, 4])),
            Ordering::Less
        );
        assert_eq!(
            key_order(&[Datatype::Ipv4Addr], &[10, 43, 8, 0], &[9, 18, 3, 4]),
            Ordering::Greater
        );
    }

    #[test]
    fn prefixes_ranges_and_types_print_as_nft_does() {
        let t = Datatype::Ipv4Addr;
        assert_eq!(
            interval_text(t, &[10, 0, 0, 0], &[10, 255, 255, 255]).unwrap(),
            "10.0.0.0/8"
        );
        assert_eq!(
            interval_text(t, &[192, 168, 1, 1], &[192, 168, 1, 9]).unwrap(),
            "192.168.1.1-192.168.1.9"
        );
        assert_eq!(components((7 << 12) | (12 << 6) | 13).unwrap().len(), 3);
        assert_eq!(
            value_text(Datatype::Mark, &0x4000u32.to_ne_bytes()).unwrap(),
            "0x00004000"
        );
        assert_eq!(
            value_text(Datatype::CtState, &10u32.to_ne_bytes()).unwrap(),
            "established,new"
        );
        let v6 = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        assert_eq!(value_text(Datatype::Ipv6Addr, &v6).unwrap(), "2001:db8::1");
        assert_eq!(value_text(Datatype::InetProto, &[6]).unwrap(), "tcp");
    }
}
