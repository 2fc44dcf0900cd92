//! IPVS virtual services (`ipvsadm -ln`) and ipset listings (`ipset list`): the rest
//! of kube-proxy's IPVS mode, which keeps its service map in the kernel's IPVS table
//! and matches service addresses with ipsets (`KUBE-CLUSTER-IP`) instead of one
//! iptables rule per service. Read by `crate::ipvs`.

use super::Location;
use serde::Serialize;
use std::net::IpAddr;

/// What a virtual service matches: a protocol, address and port, or a firewall mark.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum VirtualAddress {
    /// `TCP  10.96.0.1:443`, `UDP  [fd00::10]:53`, `SCTP ...`.
    Service {
        /// `tcp`, `udp` or `sctp`.
        protocol: String,
        address: IpAddr,
        port: u16,
    },
    /// `FWM  100`: packets with this firewall mark.
    FirewallMark { mark: u32 },
}

/// One real server (`  -> 10.244.1.6:80  Masq  1  0  0`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RealServer {
    pub address: IpAddr,
    pub port: u16,
    /// `Masq`, `Route`, `Tunnel`, `Local` as printed. The columns are `None` in output
    /// that does not show them (`ipvsadm -ln --stats`, `--rate`, `--thresholds`).
    pub forward: Option<String>,
    /// Weight 0: the server takes no new connections (kube-proxy's graceful termination).
    pub weight: Option<u32>,
    pub active_connections: Option<u64>,
    pub inactive_connections: Option<u64>,
    pub location: Location,
    /// The line as read (trimmed).
    pub text: Box<str>,
}

/// One virtual service with its real servers, in the order `ipvsadm` printed them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VirtualService {
    pub address: VirtualAddress,
    /// `rr`, `wrr`, `lc`, `sh`, ...;
    /// `None` in output that does not show it (`--stats`, `--rate`).
    pub scheduler: Option<String>,
    /// `persistent 10800`: client affinity timeout in seconds.
    pub persistent_seconds: Option<u32>,
    /// The words after the scheduler plumb did not interpret (`ops`, `mask ...`).
    pub flags: Vec<String>,
    pub real_servers: Vec<RealServer>,
    pub location: Location,
    /// The virtual service line as read (trimmed).
    pub text: Box<str>,
}

/// One set of an `ipset list` output: its name, type and members as printed
/// (`10.96.0.10,udp:53` in a `hash:ip,port` set).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct IpSetListing {
    pub name: String,
    /// `hash:ip,port`, `bitmap:port`, ...
    pub kind: String,
    pub members: Vec<String>,
    pub location: Location,
}

impl IpSetListing {
    /// Whether `address`, `protocol`, `port` is a member of a `hash:ip,port` set
    /// (`10.96.0.10,udp:53`; an IPv6 address as printed).
    pub fn has_ip_port(&self, address: IpAddr, protocol: &str, port: u16) -> bool {
        self.members.iter().any(|m| {
            let Some((a, pp)) = m.split_once(',') else {
                return false;
            };
            let Some((p, n)) = pp.split_once(':') else {
                return false;
            };
            a.parse::<IpAddr>().is_ok_and(|a| a == address)
                && p.eq_ignore_ascii_case(protocol)
                && n.parse::<u16>().is_ok_and(|n| n == port)
        })
    }

    /// Whether `port` is a member of a `bitmap:port` set (`31730`, `tcp:31730`).
    pub fn has_port(&self, port: u16) -> bool {
        self.members.iter().any(|m| {
            let n = m.rsplit(':').next().unwrap_or(m);
            n.parse::<u16>().is_ok_and(|n| n == port)
        })
    }
}
