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
    /// TCP (protocol 6).
    Tcp,
    /// UDP (protocol 17).
    Udp,
    /// ICMP (protocol 1) or ICMPv6 (58); the family comes from the addresses.
    Icmp,
    /// Any other IP protocol number.
    Other(u8),
}

impl Proto {
    /// The IP protocol number (`Icmp` is 1).
    pub fn number(self) -> u8 {
        match self {
            Proto::Tcp => 6,
            Proto::Udp => 17,
            Proto::Icmp => 1,
            Proto::Other(n) => n,
        }
    }

    /// The protocol of an IP protocol number; 1 and 58 (ICMPv6) are both [`Proto::Icmp`].
    pub fn from_number(n: u8) -> Proto {
        match n {
            6 => Proto::Tcp,
            17 => Proto::Udp,
            1 | 58 => Proto::Icmp,
            n => Proto::Other(n),
        }
    }

    /// Reads a protocol name or number as iptables accepts it (`tcp`, `udp`, `icmp`, `6`);
    /// `None` when unknown.
    pub fn parse(s: &str) -> Option<Proto> {
        crate::addr::protocol_number(s).map(Proto::from_number)
    }

    /// Whether the protocol has ports (tcp, udp, sctp, udplite, dccp).
    pub fn has_ports(self) -> bool {
        matches!(self.number(), 6 | 17 | 132 | 136 | 33)
    }

    /// The protocol's name as iptables prints it (`tcp`, `udp`, `icmp`, `sctp`), else its number.
    pub fn name(self) -> String {
        crate::addr::protocol_name(self.number())
    }
}

/// Where the packet comes from, which decides the hooks it traverses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
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
    /// Reads an origin as the CLI spells it: `host` (or `local`), `pod`, `external` (or `remote`).
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
    /// The first packet of a connection (a SYN for TCP): NAT rules are evaluated for it.
    New,
    /// A packet of a connection seen both ways: NAT chains are not traversed (conntrack
    /// applies the connection's NAT).
    Established,
    /// A packet related to an existing connection (an ICMP error).
    Related,
    /// A packet conntrack could not classify.
    Invalid,
    /// A packet in a connection conntrack does not track (`NOTRACK` in `raw`).
    Untracked,
}

impl CtState {
    /// Reads a state name in any case (`NEW`, `established`); `None` when unknown.
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

    /// The state's name as `--ctstate` spells it (`NEW`, `ESTABLISHED`, ...).
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
    /// Source address; `None` when not known (any client; for a host's packet, the one
    /// the kernel picks).
    pub src: Option<IpAddr>,
    /// Source port; `None` when not known (an ephemeral port).
    pub sport: Option<u16>,
    /// Destination address, before any DNAT (a ClusterIP, a NodePort's node address).
    pub dst: IpAddr,
    /// Destination port (ignored for protocols without ports).
    pub dport: Option<u16>,
    /// Layer-4 protocol.
    pub proto: Proto,
    /// ICMP type (default: echo request, 8).
    pub icmp_type: u8,
    /// Where the packet comes from, which decides the hooks it traverses.
    pub origin: Origin,
    /// Interface the packet arrives on (a pod's `veth…`, `eth0`); `None` when not known.
    /// Ignored for a host's packet, which has none.
    pub in_iface: Option<String>,
    /// Interface the packet leaves by; `None` when routing is not known (a local destination leaves
    /// by `lo`).
    pub out_iface: Option<String>,
    /// Bridge ports for `-m physdev` (`None`: not bridged or unknown).
    pub physdev_in: Option<String>,
    /// Bridge port the frame leaves by (`None`: not bridged or unknown).
    pub physdev_out: Option<String>,
    /// The packet's mark (`meta mark`, `-m mark`) as it arrives at the first hook; usually 0.
    pub mark: u32,
    /// The connection's mark (`ct mark`, `-m connmark`) as it arrives.
    pub ct_mark: u32,
    /// The connection's conntrack state; NAT chains see only [`CtState::New`] connections.
    pub ct_state: CtState,
}

impl Packet {
    /// The first packet (NEW) of a connection to `dst:dport` over `proto` from `origin`;
    /// source, source port and interfaces unknown, marks zero, ICMP type echo request.
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

    /// Whether the packet is IPv6 (its destination is), which decides the tables it
    /// traverses (ip6tables, nft `ip6`).
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
    /// The ipsets rules match with `-m set` (read from `ipset save`); a match on
    /// a set not in it is indeterminate.
    pub ipsets: IpSets,
    /// How `-m recent` session affinity is decided.
    pub recent: RecentAssumption,
}

impl Node {
    /// Whether `ip` is one of the node's addresses (loopback always is).
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
    /// No address (`0.0.0.0`, `::`).
    Unspec,
    /// An ordinary address of another machine, reached through a gateway or on link.
    Unicast,
    /// An address of this node.
    Local,
    /// A broadcast address (`255.255.255.255`, `0.0.0.0` for IPv4, a local subnet's broadcast).
    Broadcast,
    /// An anycast address.
    Anycast,
    /// A multicast address.
    Multicast,
    /// A destination the routing table drops (`blackhole` route).
    Blackhole,
    /// A destination routing rejects as unreachable.
    Unreachable,
    /// A destination routing rejects as prohibited.
    Prohibit,
    /// A `throw` route: the lookup continues in the next table.
    Throw,
    /// A NAT route (obsolete kernel type).
    Nat,
    /// An external-resolver route (obsolete kernel type).
    XResolve,
}

impl AddrType {
    /// Reads a type as `-m addrtype` spells it (`LOCAL`, `unicast`); `None` when unknown.
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

/// The source address a trace starts with: the packet's, or for a packet the host
/// sends, the node's first address of the family (the kernel picks a local one).
pub fn source_of(p: &Packet, node: &Node) -> Option<IpAddr> {
    p.src.or_else(|| {
        (p.origin == Origin::Host).then(|| {
            node.local_addrs
                .iter()
                .find(|c| c.addr.is_ipv4() == p.dst.is_ipv4() && !c.addr.is_loopback())
                .map(|c| c.addr)
        })?
    })
}
