//! Values as `iptables-save` spells them: protocol names, masked addresses, ports and
//! port ranges (service names resolved), marks, TCP flags, conntrack states, icmp and
//! DSCP names, NAT ranges and log levels.

use crate::model::Family;
use std::fmt::Write;
use std::net::{Ipv4Addr, Ipv6Addr};

/// `-p` value as iptables-save prints it: the names iptables knows, lower case.
pub fn protocol_name(p: &str) -> &str {
    const NAMES: &[(&str, &str)] = &[
        ("0", "all"),
        ("1", "icmp"),
        ("6", "tcp"),
        ("17", "udp"),
        ("33", "dccp"),
        ("50", "esp"),
        ("51", "ah"),
        ("58", "ipv6-icmp"),
        ("132", "sctp"),
        ("135", "mh"),
        ("136", "udplite"),
    ];
    for &(num, name) in NAMES {
        if p == num || p.eq_ignore_ascii_case(name) {
            return name;
        }
    }
    if p.eq_ignore_ascii_case("icmpv6") {
        return "ipv6-icmp";
    }
    p
}

/// Address with prefix as iptables prints it: host bits cleared, `/len` (or a dotted
/// mask when the mask is not contiguous). `None` when it is not a literal address.
pub fn address(s: &str, family: Family) -> Option<String> {
    let (addr, mask) = match s.split_once('/') {
        Some((a, m)) => (a, Some(m)),
        None => (s, None),
    };
    match family {
        Family::Ip6 => {
            let a: Ipv6Addr = addr.parse().ok()?;
            let len: u32 = match mask {
                None => 128,
                Some(m) => match m.parse::<u32>() {
                    Ok(l) if l <= 128 => l,
                    _ => {
                        let mm: Ipv6Addr = m.parse().ok()?;
                        let bits = u128::from(mm);
                        if bits.leading_ones() + bits.trailing_zeros() != 128 {
                            return Some(format!(
                                "{}/{}",
                                Ipv6Addr::from(u128::from(a) & bits),
                                mm
                            ));
                        }
                        bits.leading_ones()
                    }
                },
            };
            let m = if len == 0 {
                0
            } else {
                u128::MAX << (128 - len)
            };
            Some(format!("{}/{}", Ipv6Addr::from(u128::from(a) & m), len))
        }
        _ => {
            let a: Ipv4Addr = addr.parse().ok()?;
            let bits = match mask {
                None => u32::MAX,
                Some(m) => match m.parse::<u32>() {
                    Ok(l) if l <= 32 => {
                        if l == 0 {
                            0
                        } else {
                            u32::MAX << (32 - l)
                        }
                    }
                    _ => u32::from(m.parse::<Ipv4Addr>().ok()?),
                },
            };
            let net = Ipv4Addr::from(u32::from(a) & bits);
            if bits.leading_ones() + bits.trailing_zeros() == 32 {
                Some(format!("{}/{}", net, bits.leading_ones()))
            } else {
                Some(format!("{}/{}", net, Ipv4Addr::from(bits)))
            }
        }
    }
}

/// Well-known service names iptables resolves through /etc/services.
pub(super) fn service_port(name: &str) -> Option<u16> {
    const SERVICES: &[(&str, u16)] = &[
        ("ftp-data", 20),
        ("ftp", 21),
        ("ssh", 22),
        ("telnet", 23),
        ("smtp", 25),
        ("domain", 53),
        ("http", 80),
        ("www", 80),
        ("pop3", 110),
        ("ntp", 123),
        ("imap2", 143),
        ("snmp", 161),
        ("https", 443),
        ("imaps", 993),
        ("pop3s", 995),
    ];
    SERVICES.iter().find(|(n, _)| *n == name).map(|&(_, p)| p)
}

/// A port number, or a service name resolved to its number.
pub(super) fn port(s: &str) -> String {
    match service_port(s) {
        Some(p) => p.to_string(),
        None => s.to_string(),
    }
}

/// `a:b` ranges: `4:4` -> `4`, `:4` -> `0:4`, `4:` -> `4:MAX`, `:` -> `0:MAX`.
/// Returns None when the range is the whole space and not negated (iptables omits it).
pub(super) fn range(s: &str, max: u64, negated: bool, sep: char, names: bool) -> Option<String> {
    let conv = |v: &str| if names { port(v) } else { v.to_string() };
    let Some((lo, hi)) = s.split_once(sep) else {
        return Some(conv(s));
    };
    let lo = if lo.is_empty() {
        "0".to_string()
    } else {
        conv(lo)
    };
    let hi = if hi.is_empty() {
        max.to_string()
    } else {
        conv(hi)
    };
    if lo == hi {
        return Some(lo);
    }
    if lo == "0" && hi == max.to_string() && !negated {
        return None;
    }
    Some(format!("{lo}{sep}{hi}"))
}

/// A decimal or `0x` hexadecimal number.
pub(super) fn parse_u32(s: &str) -> Option<u32> {
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u32::from_str_radix(h, 16).ok()
    } else {
        s.parse().ok()
    }
}

/// `value[/mask]` as two numbers; mask defaults to all ones.
pub(super) fn value_mask(s: &str) -> Option<(u32, u32)> {
    match s.split_once('/') {
        Some((v, m)) => Some((parse_u32(v)?, parse_u32(m)?)),
        None => Some((parse_u32(s)?, u32::MAX)),
    }
}

/// `--mark` style: `0xV` when the mask is all ones, else `0xV/0xM`.
pub(super) fn mark_match(s: &str) -> String {
    match value_mask(s) {
        Some((v, u32::MAX)) => format!("{v:#x}"),
        Some((v, m)) => format!("{v:#x}/{m:#x}"),
        None => s.to_string(),
    }
}

/// An ICMPv6 type name as the number save prints.
pub(super) fn icmp6_type(s: &str) -> String {
    const TYPES: &[(&str, &str)] = &[
        ("destination-unreachable", "1"),
        ("packet-too-big", "2"),
        ("time-exceeded", "3"),
        ("parameter-problem", "4"),
        ("echo-request", "128"),
        ("echo-reply", "129"),
        ("mld-listener-query", "130"),
        ("mld-listener-report", "131"),
        ("mld-listener-done", "132"),
        ("mld-listener-reduction", "132"),
        ("router-solicitation", "133"),
        ("router-advertisement", "134"),
        ("neighbour-solicitation", "135"),
        ("neighbor-solicitation", "135"),
        ("neighbour-advertisement", "136"),
        ("neighbor-advertisement", "136"),
        ("redirect", "137"),
    ];
    TYPES
        .iter()
        .find(|(n, _)| *n == s)
        .map(|(_, v)| v.to_string())
        .unwrap_or_else(|| s.to_string())
}

/// DSCP class names (RFC 2474/2597/3246) as the `0x%02x` value iptables prints.
pub(super) fn dscp_class(s: &str) -> String {
    let v = match s.to_ascii_uppercase().as_str() {
        "BE" => Some(0),
        "EF" => Some(46),
        c if c.starts_with("CS") => c[2..]
            .parse::<u32>()
            .ok()
            .filter(|&n| n <= 7)
            .map(|n| n * 8),
        c if c.starts_with("AF") && c.len() == 4 => {
            let x = c[2..3].parse::<u32>().ok();
            let y = c[3..4].parse::<u32>().ok();
            x.zip(y).map(|(x, y)| x * 8 + y * 2)
        }
        _ => None,
    };
    v.map(|v| format!("{v:#04x}"))
        .unwrap_or_else(|| s.to_string())
}

/// TCP flag lists in save's order (`ALL` spelled out).
pub(super) fn tcp_flags(s: &str) -> String {
    const ORDER: &[&str] = &["FIN", "SYN", "RST", "PSH", "ACK", "URG"];
    match s {
        "ALL" => return ORDER.join(","),
        "NONE" => return "NONE".into(),
        _ => {}
    }
    in_order(s, ORDER)
}

/// The comma-separated names of `s` in `order`, or `s` as written when it names
/// something `order` does not list.
fn in_order(s: &str, order: &[&str]) -> String {
    let set: Vec<&str> = s.split(',').collect();
    if set.iter().any(|f| !order.contains(f)) {
        return s.to_string();
    }
    order
        .iter()
        .filter(|f| set.contains(f))
        .copied()
        .collect::<Vec<_>>()
        .join(",")
}

/// Conntrack states in save's order.
pub(super) fn ct_states(s: &str) -> String {
    const ORDER: &[&str] = &[
        "INVALID",
        "NEW",
        "RELATED",
        "ESTABLISHED",
        "UNTRACKED",
        "SNAT",
        "DNAT",
    ];
    in_order(s, ORDER)
}

/// An ICMP type name as the number save prints (`any` for the whole range).
pub(super) fn icmp_type(s: &str) -> String {
    const TYPES: &[(&str, &str)] = &[
        ("echo-reply", "0"),
        ("pong", "0"),
        ("destination-unreachable", "3"),
        ("source-quench", "4"),
        ("redirect", "5"),
        ("echo-request", "8"),
        ("ping", "8"),
        ("time-exceeded", "11"),
        ("ttl-exceeded", "11"),
        ("parameter-problem", "12"),
        ("timestamp-request", "13"),
        ("timestamp-reply", "14"),
    ];
    if s == "255/0:255" {
        return "any".into();
    }
    TYPES
        .iter()
        .find(|(n, _)| *n == s)
        .map(|(_, v)| v.to_string())
        .unwrap_or_else(|| s.to_string())
}

/// `1.1.1.1:ssh` -> `1.1.1.1:22`; ranges `a-b` and `/base` keep their shape.
pub(super) fn nat_range(s: &str) -> String {
    // IPv6 with port: [addr]:port
    if let Some(rest) = s.strip_prefix('[')
        && let Some((addr, port_part)) = rest.split_once("]:")
    {
        return format!("[{addr}]:{}", nat_ports(port_part));
    }
    match s.rsplit_once(':') {
        Some((addr, ports)) if !addr.contains(':') => format!("{addr}:{}", nat_ports(ports)),
        _ => s.to_string(),
    }
}

/// The port part of a NAT range: `a[-b][/base]`, service names resolved.
fn nat_ports(s: &str) -> String {
    let (range_part, base) = match s.split_once('/') {
        Some((r, b)) => (r, Some(b)),
        None => (s, None),
    };
    let mut out = if service_port(range_part).is_some() {
        port(range_part)
    } else {
        range_part
            .split('-')
            .map(port)
            .collect::<Vec<_>>()
            .join("-")
    };
    if let Some(b) = base {
        let _ = write!(out, "/{}", port(b));
    }
    out
}

/// A syslog level name as its number.
pub(super) fn log_level(s: &str) -> String {
    const LEVELS: &[&str] = &[
        "emerg", "alert", "crit", "error", "warning", "notice", "info", "debug",
    ];
    if let Some(i) = LEVELS.iter().position(|l| *l == s) {
        return i.to_string();
    }
    match s {
        "panic" => "0".into(),
        "err" => "3".into(),
        "warn" => "4".into(),
        _ => s.to_string(),
    }
}
