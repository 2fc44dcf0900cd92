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
        /// The virtual IP (a ClusterIP, a node address for a NodePort, an external IP).
        address: IpAddr,
        /// The service port.
        port: u16,
    },
    /// `FWM  100`: packets with this firewall mark.
    FirewallMark {
        /// The fwmark a rule set on the packet (`-j MARK`), decimal as printed.
        mark: u32,
    },
}

/// One real server (`  -> 10.244.1.6:80  Masq  1  0  0`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RealServer {
    /// The endpoint's address (a pod IP for kube-proxy).
    pub address: IpAddr,
    /// The endpoint's port.
    pub port: u16,
    /// `Masq`, `Route`, `Tunnel`, `Local` as printed. The columns are `None` in output
    /// that does not show them (`ipvsadm -ln --stats`, `--rate`, `--thresholds`).
    pub forward: Option<String>,
    /// Weight 0: the server takes no new connections (kube-proxy's graceful termination).
    pub weight: Option<u32>,
    /// `ActiveConn`: connections in ESTABLISHED state; `None` when the output has no such column.
    pub active_connections: Option<u64>,
    /// `InActConn`: other connections (closing, waiting); `None` when not shown.
    pub inactive_connections: Option<u64>,
    /// Where the `->` line was read.
    pub location: Location,
    /// The line as read (trimmed).
    pub text: Box<str>,
}

/// One virtual service with its real servers, in the order `ipvsadm` printed them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VirtualService {
    /// What the service matches: protocol, address and port, or a firewall mark.
    pub address: VirtualAddress,
    /// `rr`, `wrr`, `lc`, `sh`, ...;
    /// `None` in output that does not show it (`--stats`, `--rate`).
    pub scheduler: Option<String>,
    /// `persistent 10800`: client affinity timeout in seconds.
    pub persistent_seconds: Option<u32>,
    /// The words after the scheduler plumb did not interpret (`ops`, `mask ...`).
    pub flags: Vec<String>,
    /// The endpoints, in the order printed; empty for a service with no ready endpoints.
    pub real_servers: Vec<RealServer>,
    /// Where the service line was read.
    pub location: Location,
    /// The virtual service line as read (trimmed).
    pub text: Box<str>,
}

/// One set of an `ipset list` output: its name, type and members as printed
/// (`10.96.0.10,udp:53` in a `hash:ip,port` set).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct IpSetListing {
    /// Set name (`KUBE-CLUSTER-IP`, `KUBE-NODE-PORT-TCP`).
    pub name: String,
    /// `hash:ip,port`, `bitmap:port`, ...
    pub kind: String,
    /// The members in the order printed, each the first word of its line (`10.96.0.1,tcp:443`;
    /// `timeout 0` and other options dropped); empty for an empty set.
    pub members: Vec<String>,
    /// Where the `Name:` line was read.
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
