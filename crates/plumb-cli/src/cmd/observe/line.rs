//! The JSON lines of `plumb observe`, with Hubble's field names where the concepts
//! match (docs/observe.md): flows and notices through serde; drops through the
//! hand-written writer in `drop_line`, which a test holds to these types' bytes.

use plumb_observe::attribution::RuleMatch;
use plumb_observe::conntrack::Event;
use plumb_observe::names::{LbFrontend, ServiceName};
use plumb_observe::trace::Confirmation;
use serde::Serialize;
use std::net::IpAddr;
use std::time::SystemTime;

/// One output line, with Hubble's field names where the concepts match.
#[derive(Serialize)]
pub(super) struct Line<'a> {
    pub(super) time: String,
    pub(super) verdict: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) drop_reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) drop_reason_desc: Option<&'a str>,
    /// The reason's number in this kernel's `enum skb_drop_reason`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) drop_reason_code: Option<u32>,
    /// NEW, UPDATE or DESTROY for connections.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) conntrack: Option<Event>,
    #[serde(rename = "IP", skip_serializing_if = "Option::is_none")]
    pub(super) ip: Option<Ip>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) l4: Option<L4>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) source: Option<Endpoint>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) destination: Option<Endpoint>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) destination_service: Option<ServiceName>,
    /// The Cilium load-balancer frontend the connection went to (its maps hold
    /// addresses, not Service names), on nodes where Cilium serves Services.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) destination_frontend: Option<LbFrontend>,
    /// Where DNAT sent the connection (`ip:port`), when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) translated_destination: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) traffic: Option<Traffic>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) rule: Option<&'a RuleMatch>,
    /// With `--confirm-with-trace`: what nftrace saw drop the packet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) trace: Option<Confirmation>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) interface: Option<Interface>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) netns: Option<&'a str>,
    /// Identical drops this line stands for, when more than one (aggregated while the
    /// output was behind): an extension of Hubble's schema.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) count: Option<u64>,
}

#[derive(Serialize)]
pub(super) struct Ip {
    pub(super) source: IpAddr,
    pub(super) destination: IpAddr,
    #[serde(rename = "ipVersion")]
    pub(super) ip_version: &'static str,
}

/// Hubble's `l4`: one key naming the protocol.
#[derive(Serialize)]
pub(super) enum L4 {
    #[serde(rename = "TCP")]
    Tcp(Ports),
    #[serde(rename = "UDP")]
    Udp(Ports),
    #[serde(rename = "SCTP")]
    Sctp(Ports),
    #[serde(rename = "ICMPv4")]
    Icmp4(Icmp),
    #[serde(rename = "ICMPv6")]
    Icmp6(Icmp),
    #[serde(rename = "other")]
    Other { protocol: u8 },
}

#[derive(Serialize)]
pub(super) struct Ports {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) source_port: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) destination_port: Option<u16>,
}

#[derive(Serialize)]
pub(super) struct Icmp {
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub(super) kind: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) code: Option<u8>,
}

#[derive(Serialize)]
pub(super) struct Endpoint {
    pub(super) namespace: String,
}

#[derive(Serialize)]
pub(super) struct Interface {
    pub(super) index: u32,
}

#[derive(Serialize)]
pub(super) struct Traffic {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) packets_original: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) bytes_original: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) packets_reply: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) bytes_reply: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) duration_ns: Option<u64>,
}

/// A line that is not a flow: what is not observed, and events lost (Hubble's
/// `lost_events` shape).
#[derive(Serialize)]
pub(super) struct Notice<'a> {
    pub(super) time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) notice: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) lost_events: Option<Lost>,
}

#[derive(Serialize)]
pub(super) struct Lost {
    pub(super) source: &'static str,
    pub(super) num_events_lost: u64,
}

pub(super) fn rfc3339(t: SystemTime) -> String {
    plumb_watch::event::rfc3339(t)
}

pub(super) fn hostport(ip: IpAddr, port: Option<u16>) -> String {
    match port {
        Some(p) if ip.is_ipv6() => format!("[{ip}]:{p}"),
        Some(p) => format!("{ip}:{p}"),
        None => ip.to_string(),
    }
}

pub(super) fn l4_of(protocol: u8, ports: Option<(u16, u16)>, icmp: Option<(u8, u8)>) -> L4 {
    let p = Ports {
        source_port: ports.map(|p| p.0),
        destination_port: ports.map(|p| p.1),
    };
    let i = Icmp {
        kind: icmp.map(|i| i.0),
        code: icmp.map(|i| i.1),
    };
    match protocol {
        6 => L4::Tcp(p),
        17 => L4::Udp(p),
        132 => L4::Sctp(p),
        1 => L4::Icmp4(i),
        58 => L4::Icmp6(i),
        n => L4::Other { protocol: n },
    }
}
