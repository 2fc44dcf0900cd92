//! The packet plumb traces, and what plumb knows about the node it arrives at.
//!
//! Fields plumb does not know are `None` (a source port picked by the kernel, the
//! interface routing will choose): a rule that depends on one gives an explicit
//! "indeterminate" branch rather than a guess.

use crate::addr::Cidr;
use crate::ipset::IpSets;
use serde::Serialize;
use std::net::IpAddr;

/// Layer-4 protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    Tcp,
    Udp,
    Icmp,
    /// Any other IP protocol number.
    Other(u8),
}

impl Proto {
    pub fn number(self) -> u8 {
        match self {
            Proto::Tcp => 6,
            Proto::Udp => 17,
            Proto::Icmp => 1,
            Proto::Other(n) => n,
        }
    }

    pub fn from_number(n: u8) -> Proto {
        match n {
            6 => Proto::Tcp,
            17 => Proto::Udp,
            1 | 58 => Proto::Icmp,
            n => Proto::Other(n),
        }
    }

    pub fn parse(s: &str) -> Option<Proto> {
        crate::addr::protocol_number(s).map(Proto::from_number)
    }

    /// Whether the protocol has ports (tcp, udp, sctp, udplite, dccp).
    pub fn has_ports(self) -> bool {
        matches!(self.number(), 6 | 17 | 132 | 136 | 33)
    }

    pub fn name(self) -> String {
        crate::addr::protocol_name(self.number())
    }
}

/// Where the packet comes from, which decides the hooks it traverses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// Sent by a process on the node: OUTPUT, then POSTROUTING.
    Host,
    /// From a pod on this node (arrives on the pod's veth): PREROUTING, then INPUT or FORWARD.
    Pod,
    /// From another machine (arrives on a node interface): like `Pod`.
    External,
}

impl Origin {
    pub fn parse(s: &str) -> Option<Origin> {
        Some(match s {
            "host" | "local" => Origin::Host,
            "pod" => Origin::Pod,
            "external" | "remote" => Origin::External,
            _ => return None,
        })
    }
}

/// Conntrack state of the packet's connection, as `-m conntrack --ctstate` sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum CtState {
    New,
    Established,
    Related,
    Invalid,
    Untracked,
}

impl CtState {
    pub fn parse(s: &str) -> Option<CtState> {
        Some(match s.to_ascii_uppercase().as_str() {
            "NEW" => CtState::New,
            "ESTABLISHED" => CtState::Established,
            "RELATED" => CtState::Related,
            "INVALID" => CtState::Invalid,
            "UNTRACKED" => CtState::Untracked,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CtState::New => "NEW",
            CtState::Established => "ESTABLISHED",
            CtState::Related => "RELATED",
            CtState::Invalid => "INVALID",
            CtState::Untracked => "UNTRACKED",
        }
    }
}

/// The packet to trace. `src` and ports may be unknown.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Packet {
    pub src: Option<IpAddr>,
    pub sport: Option<u16>,
    pub dst: IpAddr,
    /// Destination port (ignored for protocols without ports).
    pub dport: Option<u16>,
    pub proto: Proto,
    /// ICMP type (default: echo request, 8).
    pub icmp_type: u8,
    pub origin: Origin,
    pub in_iface: Option<String>,
    pub out_iface: Option<String>,
    /// Bridge ports for `-m physdev` (`None`: not bridged or unknown).
    pub physdev_in: Option<String>,
    pub physdev_out: Option<String>,
    pub mark: u32,
    pub ct_mark: u32,
    pub ct_state: CtState,
}

impl Packet {
    /// A NEW TCP connection from the host to `dst:dport`; other fields unknown or zero.
    pub fn new(dst: IpAddr, dport: u16, proto: Proto, origin: Origin) -> Packet {
        Packet {
            src: None,
            sport: None,
            dst,
            dport: Some(dport),
            proto,
            icmp_type: 8,
            origin,
            in_iface: None,
            out_iface: None,
            physdev_in: None,
            physdev_out: None,
            mark: 0,
            ct_mark: 0,
            ct_state: CtState::New,
        }
    }

    pub fn is_ipv6(&self) -> bool {
        self.dst.is_ipv6()
    }
}

/// How `-m recent --rcheck/--update` (kube-proxy session affinity) is decided.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecentAssumption {
    /// Both possibilities: "the client has an affinity entry" and "it has none"
    /// (outcomes carry the condition).
    #[default]
    Branch,
    /// A client that has not connected before: no list has an entry for it.
    Fresh,
}

/// What plumb knows about the node: its addresses and ipsets, and assumptions for
/// state it cannot see.
#[derive(Clone, Debug, Default)]
pub struct Node {
    /// The node's local addresses, with prefix length when known (for broadcast).
    /// 127.0.0.0/8 and ::1 are always local.
    pub local_addrs: Vec<Cidr>,
    pub ipsets: IpSets,
    pub recent: RecentAssumption,
}

impl Node {
    pub fn is_local(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(v4) if v4.octets()[0] == 127 => true,
            IpAddr::V6(v6) if v6.is_loopback() => true,
            _ => self.local_addrs.iter().any(|c| c.addr == ip),
        }
    }

    /// The kernel's address type (`inet_addr_type` over the local routing table).
    pub fn addr_type(&self, ip: IpAddr) -> AddrType {
        if self.is_local(ip) {
            return AddrType::Local;
        }
        match ip {
            IpAddr::V4(v4) => {
                if v4.is_unspecified() || v4.is_broadcast() {
                    AddrType::Broadcast
                } else if v4.is_multicast() {
                    AddrType::Multicast
                } else if self.local_addrs.iter().any(|c| c.broadcast() == Some(ip)) {
                    AddrType::Broadcast
                } else {
                    AddrType::Unicast
                }
            }
            IpAddr::V6(v6) => {
                if v6.is_multicast() {
                    AddrType::Multicast
                } else if v6.is_unspecified() {
                    AddrType::Unspec
                } else {
                    AddrType::Unicast
                }
            }
        }
    }
}

/// Address types of `-m addrtype` (the ones plumb can decide).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddrType {
    Unspec,
    Unicast,
    Local,
    Broadcast,
    Anycast,
    Multicast,
    Blackhole,
    Unreachable,
    Prohibit,
    Throw,
    Nat,
    XResolve,
}

impl AddrType {
    pub fn parse(s: &str) -> Option<AddrType> {
        Some(match s.to_ascii_uppercase().as_str() {
            "UNSPEC" => AddrType::Unspec,
            "UNICAST" => AddrType::Unicast,
            "LOCAL" => AddrType::Local,
            "BROADCAST" => AddrType::Broadcast,
            "ANYCAST" => AddrType::Anycast,
            "MULTICAST" => AddrType::Multicast,
            "BLACKHOLE" => AddrType::Blackhole,
            "UNREACHABLE" => AddrType::Unreachable,
            "PROHIBIT" => AddrType::Prohibit,
            "THROW" => AddrType::Throw,
            "NAT" => AddrType::Nat,
            "XRESOLVE" => AddrType::XResolve,
            _ => return None,
        })
    }
}
