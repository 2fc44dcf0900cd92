//! Addresses, prefixes and port ranges as the kernel compares them.
//!
//! Parsing follows iptables' and nft's spellings: `10.0.0.0/8`, `10.0.0.1`,
//! `10.0.0.0/255.0.0.0`, IPv6 with `/len`; ports `80`, `1024:65535` (iptables) and
//! `1024-65535` (nft). Parsing never panics; `None` means "not a value plumb reads".

use std::net::IpAddr;

/// An address prefix (`10.42.0.0/16`), IPv4 or IPv6.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cidr {
    /// The address as written; host bits are kept (`contains` masks both sides).
    pub addr: IpAddr,
    /// Prefix length: 0 to 32 for IPv4, 0 to 128 for IPv6.
    pub len: u8,
}

impl Cidr {
    /// The prefix holding just `addr` (/32 or /128).
    pub fn host(addr: IpAddr) -> Cidr {
        let len = if addr.is_ipv4() { 32 } else { 128 };
        Cidr { addr, len }
    }

    /// `A`, `A/LEN` or `A/MASK` (dotted IPv4 mask, contiguous or not treated as prefix).
    pub fn parse(s: &str) -> Option<Cidr> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = a.parse().ok()?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match l {
            None => max,
            Some(l) => match l.parse::<u8>() {
                Ok(n) if n <= max => n,
                Ok(_) => return None,
                Err(_) => {
                    let mask: std::net::Ipv4Addr = l.parse().ok()?;
                    let bits = mask.to_bits();
                    let n = bits.leading_ones() as u8;
                    // Only contiguous masks are prefixes.
                    if !addr.is_ipv4() || bits.checked_shl(n as u32).unwrap_or(0) != 0 {
                        return None;
                    }
                    n
                }
            },
        };
        Some(Cidr { addr, len })
    }

    /// Whether `ip` is in the prefix (never for an address of the other family).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - self.len as u32).unwrap_or(0);
                n.to_bits() & mask == a.to_bits() & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX.checked_shl(128 - self.len as u32).unwrap_or(0);
                n.to_bits() & mask == a.to_bits() & mask
            }
            _ => false,
        }
    }

    /// Whether the prefix is a single address (/32 or /128).
    pub fn is_host(&self) -> bool {
        self.len == if self.addr.is_ipv4() { 32 } else { 128 }
    }

    /// The directed broadcast address of an IPv4 prefix shorter than /31.
    pub fn broadcast(&self) -> Option<IpAddr> {
        match self.addr {
            IpAddr::V4(a) if self.len < 31 => {
                let host = u32::MAX >> self.len;
                Some(IpAddr::V4(std::net::Ipv4Addr::from_bits(
                    a.to_bits() | host,
                )))
            }
            _ => None,
        }
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_host() {
            write!(f, "{}", self.addr)
        } else {
            write!(f, "{}/{}", self.addr, self.len)
        }
    }
}

/// An inclusive address range (`10.0.0.1-10.0.0.9`, iprange, nft ranges).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddrRange {
    /// First address of the range.
    pub from: IpAddr,
    /// Last address, included.
    pub to: IpAddr,
}

impl AddrRange {
    /// Reads `FROM-TO` (`10.0.0.1-10.0.0.9`); `None` unless both ends are addresses.
    pub fn parse(s: &str) -> Option<AddrRange> {
        let (a, b) = s.split_once('-')?;
        Some(AddrRange {
            from: a.trim().parse().ok()?,
            to: b.trim().parse().ok()?,
        })
    }

    /// Whether `ip` is within the range (never when the families differ).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.from, self.to, ip) {
            (IpAddr::V4(f), IpAddr::V4(t), IpAddr::V4(a)) => f <= a && a <= t,
            (IpAddr::V6(f), IpAddr::V6(t), IpAddr::V6(a)) => f <= a && a <= t,
            _ => false,
        }
    }
}

/// An inclusive port range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortRange {
    /// First port.
    pub from: u16,
    /// Last port, included.
    pub to: u16,
}

impl PortRange {
    /// The range holding just port `p`.
    pub fn single(p: u16) -> PortRange {
        PortRange { from: p, to: p }
    }

    /// `80`, `1024:65535`, `:1023`, `1024:`, and nft's `1024-65535`.
    pub fn parse(s: &str) -> Option<PortRange> {
        let s = s.trim();
        let split = s.split_once(':').or_else(|| s.split_once('-'));
        match split {
            None => s.parse().ok().map(PortRange::single),
            Some((a, b)) => {
                let from = if a.is_empty() { 0 } else { a.parse().ok()? };
                let to = if b.is_empty() { 65535 } else { b.parse().ok()? };
                Some(PortRange { from, to })
            }
        }
    }

    /// Whether port `p` is within the range.
    pub fn contains(&self, p: u16) -> bool {
        self.from <= p && p <= self.to
    }
}

/// A list of port ranges (`--dports 80,443,8000:8080`).
pub fn parse_port_list(s: &str) -> Option<Vec<PortRange>> {
    s.split(',').map(PortRange::parse).collect()
}

/// An IP protocol number from a name or number as iptables and nft write it.
pub fn protocol_number(s: &str) -> Option<u8> {
    const NAMES: &[(&str, u8)] = &[
        ("tcp", 6),
        ("udp", 17),
        ("icmp", 1),
        ("icmpv6", 58),
        ("ipv6-icmp", 58),
        ("sctp", 132),
        ("udplite", 136),
        ("dccp", 33),
        ("esp", 50),
        ("ah", 51),
        ("gre", 47),
        ("igmp", 2),
        ("ipip", 4),
        ("all", 0),
    ];
    // Case-insensitive without allocating (called for every rule while compiling).
    NAMES
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(s))
        .map(|&(_, p)| p)
        .or_else(|| s.parse().ok())
}

/// The name iptables prints for a protocol number.
pub fn protocol_name(n: u8) -> String {
    match n {
        6 => "tcp".into(),
        17 => "udp".into(),
        1 => "icmp".into(),
        58 => "ipv6-icmp".into(),
        132 => "sctp".into(),
        n => n.to_string(),
    }
}

/// A mark value with an optional mask: `0x4000/0x4000`, `16384`.
pub fn parse_mark(s: &str) -> Option<(u32, u32)> {
    let (v, m) = match s.split_once('/') {
        Some((v, m)) => (v, Some(m)),
        None => (s, None),
    };
    let num = |x: &str| -> Option<u32> {
        let x = x.trim();
        match x.strip_prefix("0x").or_else(|| x.strip_prefix("0X")) {
            Some(h) => u32::from_str_radix(h, 16).ok(),
            None => x.parse().ok(),
        }
    };
    Some((num(v)?, m.map(num).unwrap_or(Some(u32::MAX))?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs() {
        let c = Cidr::parse("10.42.0.0/16").unwrap();
        assert!(c.contains("10.42.9.1".parse().unwrap()));
        assert!(!c.contains("10.43.0.1".parse().unwrap()));
        assert!(
            Cidr::parse("0.0.0.0/0")
                .unwrap()
                .contains("1.2.3.4".parse().unwrap())
        );
        assert_eq!(Cidr::parse("10.0.0.0/255.0.0.0").unwrap().len, 8);
        assert!(Cidr::parse("10.0.0.0/33").is_none());
        assert!(
            Cidr::parse("fd00::/8")
                .unwrap()
                .contains("fd12::1".parse().unwrap())
        );
        assert_eq!(
            Cidr::parse("10.0.0.1/24").unwrap().broadcast(),
            Some("10.0.0.255".parse().unwrap())
        );
    }

    #[test]
    fn ports_and_marks() {
        assert_eq!(
            PortRange::parse("1024:"),
            Some(PortRange {
                from: 1024,
                to: 65535
            })
        );
        assert_eq!(PortRange::parse("30000-32767").unwrap().to, 32767);
        assert_eq!(parse_port_list("80,443").unwrap().len(), 2);
        assert_eq!(parse_mark("0x4000/0x4000"), Some((0x4000, 0x4000)));
        assert_eq!(parse_mark("1"), Some((1, u32::MAX)));
    }
}
