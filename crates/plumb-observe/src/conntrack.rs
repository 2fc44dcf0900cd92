//! ctnetlink event messages (subsystem `NFNL_SUBSYS_CTNETLINK`, `IPCTNL_MSG_CT_NEW` /
//! `IPCTNL_MSG_CT_DELETE`) decoded into [`Flow`]s. Layouts from the kernel's uapi
//! `linux/netfilter/nfnetlink_conntrack.h`: after the 4-byte `nfgenmsg`, attributes
//! `CTA_TUPLE_ORIG` and `CTA_TUPLE_REPLY` (each nesting `CTA_TUPLE_IP` with the addresses
//! and `CTA_TUPLE_PROTO` with the protocol and ports, all in network byte order) and
//! `CTA_STATUS`. Pure: decoding never panics on any bytes (unit tests and a proptest).

use plumb_os::netlink::{Message, attrs};
use serde::Serialize;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const NFNL_SUBSYS_CTNETLINK: u16 = 1;
const IPCTNL_MSG_CT_NEW: u16 = 0;
const IPCTNL_MSG_CT_DELETE: u16 = 2;
const NLM_F_CREATE: u16 = 0x400;

const CTA_TUPLE_ORIG: u16 = 1;
const CTA_TUPLE_REPLY: u16 = 2;
const CTA_STATUS: u16 = 3;
const CTA_COUNTERS_ORIG: u16 = 9;
const CTA_COUNTERS_REPLY: u16 = 10;
const CTA_TIMESTAMP: u16 = 20;
const CTA_COUNTERS_PACKETS: u16 = 1;
const CTA_COUNTERS_BYTES: u16 = 2;
const CTA_COUNTERS32_PACKETS: u16 = 3;
const CTA_COUNTERS32_BYTES: u16 = 4;
const CTA_TIMESTAMP_START: u16 = 1;
const CTA_TIMESTAMP_STOP: u16 = 2;
const CTA_TUPLE_IP: u16 = 1;
const CTA_TUPLE_PROTO: u16 = 2;
const CTA_IP_V4_SRC: u16 = 1;
const CTA_IP_V4_DST: u16 = 2;
const CTA_IP_V6_SRC: u16 = 3;
const CTA_IP_V6_DST: u16 = 4;
const CTA_PROTO_NUM: u16 = 1;
const CTA_PROTO_SRC_PORT: u16 = 2;
const CTA_PROTO_DST_PORT: u16 = 3;

/// What happened to the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Event {
    /// A connection the kernel just confirmed (its first packet passed every hook).
    New,
    /// A change to a known connection (state, mark, NAT).
    Update,
    /// The connection ended (closed or timed out).
    Destroy,
}

/// One direction of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Tuple {
    /// Source address.
    pub source: IpAddr,
    /// Destination address.
    pub destination: IpAddr,
    /// Source port (TCP, UDP, SCTP).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_port: Option<u16>,
    /// Destination port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destination_port: Option<u16>,
}

/// A connection as one conntrack event reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Flow {
    /// What happened.
    pub event: Event,
    /// IP protocol number (6 TCP, 17 UDP, 1 ICMP, ...).
    pub protocol: u8,
    /// The connection as its first packet was sent.
    pub original: Tuple,
    /// The connection as replies come back: after DNAT its source is the endpoint
    /// that was chosen, after SNAT its destination is the translated source.
    pub reply: Tuple,
    /// `CTA_STATUS` bits (`IPS_*`), when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u32>,
    /// Packets and bytes in the original direction (`CTA_COUNTERS_ORIG`): only when
    /// `net.netfilter.nf_conntrack_acct` is on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counters_original: Option<Counters>,
    /// Packets and bytes in the reply direction (`CTA_COUNTERS_REPLY`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counters_reply: Option<Counters>,
    /// When the connection started and (DESTROY) stopped, CLOCK_REALTIME nanoseconds
    /// (`CTA_TIMESTAMP`): only when `net.netfilter.nf_conntrack_timestamp` is on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_ns: Option<u64>,
    /// See `start_ns`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_ns: Option<u64>,
}

/// Packet and byte counts of one direction of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Packets.
    pub packets: u64,
    /// Bytes (whole IP packets).
    pub bytes: u64,
}

impl Flow {
    /// How long the connection lasted (DESTROY) or has lasted so far, when conntrack
    /// keeps timestamps.
    pub fn duration_ns(&self) -> Option<u64> {
        Some(self.stop_ns?.saturating_sub(self.start_ns?))
    }
}

impl Flow {
    /// The address and port the connection was translated to, when the reply comes from
    /// somewhere else than the original destination (DNAT: a ClusterIP to an endpoint).
    pub fn dnat(&self) -> Option<(IpAddr, Option<u16>)> {
        (self.reply.source != self.original.destination
            || self.reply.source_port != self.original.destination_port)
            .then_some((self.reply.source, self.reply.source_port))
    }
}

/// Decodes a ctnetlink event; None for any other message or one that does not decode.
pub fn decode(m: &Message<'_>) -> Option<Flow> {
    if m.kind >> 8 != NFNL_SUBSYS_CTNETLINK {
        return None;
    }
    let event = match m.kind & 0xff {
        IPCTNL_MSG_CT_NEW if m.flags & NLM_F_CREATE != 0 => Event::New,
        IPCTNL_MSG_CT_NEW => Event::Update,
        IPCTNL_MSG_CT_DELETE => Event::Destroy,
        _ => return None,
    };
    let body = m.payload.get(4..)?; // nfgenmsg
    let (mut orig, mut reply, mut status) = (None, None, None);
    let (mut counters_original, mut counters_reply, mut start_ns, mut stop_ns) =
        (None, None, None, None);
    for a in attrs(body) {
        match a.kind {
            CTA_TUPLE_ORIG => orig = tuple(a.value),
            CTA_TUPLE_REPLY => reply = tuple(a.value),
            CTA_STATUS => status = a.be_u32(),
            CTA_COUNTERS_ORIG => counters_original = counters(a.value),
            CTA_COUNTERS_REPLY => counters_reply = counters(a.value),
            CTA_TIMESTAMP => {
                for t in a.nested() {
                    match t.kind {
                        CTA_TIMESTAMP_START => start_ns = be64(t.value),
                        CTA_TIMESTAMP_STOP => stop_ns = be64(t.value),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    let (protocol, original) = orig?;
    let (_, reply) = reply?;
    Some(Flow {
        event,
        protocol,
        original,
        reply,
        status,
        counters_original,
        counters_reply,
        start_ns,
        stop_ns,
    })
}

fn counters(b: &[u8]) -> Option<Counters> {
    let (mut packets, mut bytes) = (None, None);
    for a in attrs(b) {
        match a.kind {
            CTA_COUNTERS_PACKETS => packets = be64(a.value),
            CTA_COUNTERS_BYTES => bytes = be64(a.value),
            CTA_COUNTERS32_PACKETS => packets = a.be_u32().map(u64::from),
            CTA_COUNTERS32_BYTES => bytes = a.be_u32().map(u64::from),
            _ => {}
        }
    }
    Some(Counters {
        packets: packets?,
        bytes: bytes?,
    })
}

fn be64(v: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(v.get(..8)?.try_into().ok()?))
}

fn tuple(b: &[u8]) -> Option<(u8, Tuple)> {
    let (mut src, mut dst, mut proto, mut sport, mut dport) = (None, None, None, None, None);
    for a in attrs(b) {
        match a.kind {
            CTA_TUPLE_IP => {
                for ip in a.nested() {
                    let v = ip.value;
                    let addr = match (ip.kind, v.len()) {
                        (CTA_IP_V4_SRC | CTA_IP_V4_DST, 4) => {
                            IpAddr::V4(Ipv4Addr::new(v[0], v[1], v[2], v[3]))
                        }
                        (CTA_IP_V6_SRC | CTA_IP_V6_DST, 16) => {
                            let mut o = [0u8; 16];
                            o.copy_from_slice(v);
                            IpAddr::V6(Ipv6Addr::from(o))
                        }
                        _ => continue,
                    };
                    if matches!(ip.kind, CTA_IP_V4_SRC | CTA_IP_V6_SRC) {
                        src = Some(addr);
                    } else {
                        dst = Some(addr);
                    }
                }
            }
            CTA_TUPLE_PROTO => {
                for p in a.nested() {
                    match p.kind {
                        CTA_PROTO_NUM => proto = p.value.first().copied(),
                        CTA_PROTO_SRC_PORT => sport = be16(p.value),
                        CTA_PROTO_DST_PORT => dport = be16(p.value),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Some((
        proto?,
        Tuple {
            source: src?,
            destination: dst?,
            source_port: sport,
            destination_port: dport,
        },
    ))
}

fn be16(v: &[u8]) -> Option<u16> {
    Some(u16::from_be_bytes(v.get(..2)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use plumb_os::netlink::build::{attr, message, nested};

    fn tuple_attr(kind: u16, src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
        nested(
            kind,
            &[
                nested(
                    CTA_TUPLE_IP,
                    &[attr(CTA_IP_V4_SRC, &src), attr(CTA_IP_V4_DST, &dst)],
                ),
                nested(
                    CTA_TUPLE_PROTO,
                    &[
                        attr(CTA_PROTO_NUM, &[6]),
                        attr(CTA_PROTO_SRC_PORT, &sport.to_be_bytes()),
                        attr(CTA_PROTO_DST_PORT, &dport.to_be_bytes()),
                    ],
                ),
            ],
        )
    }

    #[test]
    fn a_new_connection_to_a_cluster_ip_shows_the_endpoint_dnat_chose() {
        let mut payload = vec![2, 0, 0, 0]; // nfgenmsg: AF_INET
        payload.extend(tuple_attr(
            CTA_TUPLE_ORIG,
            [10, 42, 0, 9],
            [10, 43, 0, 1],
            40000,
            443,
        ));
        payload.extend(tuple_attr(
            CTA_TUPLE_REPLY,
            [192, 168, 1, 10],
            [10, 42, 0, 9],
            6443,
            40000,
        ));
        let bytes = message(
            (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW,
            NLM_F_CREATE,
            &payload,
        );
        let m = plumb_os::netlink::messages(&bytes).next().unwrap();
        let f = decode(&m).unwrap();
        assert_eq!(f.event, Event::New);
        assert_eq!(f.protocol, 6);
        assert_eq!(f.original.destination.to_string(), "10.43.0.1");
        assert_eq!(
            f.dnat(),
            Some(("192.168.1.10".parse().unwrap(), Some(6443)))
        );
    }

    #[test]
    fn a_destroy_carries_counters_and_timestamps_when_conntrack_keeps_them() {
        let mut payload = vec![2, 0, 0, 0];
        payload.extend(tuple_attr(
            CTA_TUPLE_ORIG,
            [10, 0, 0, 1],
            [10, 0, 0, 2],
            1,
            2,
        ));
        payload.extend(tuple_attr(
            CTA_TUPLE_REPLY,
            [10, 0, 0, 2],
            [10, 0, 0, 1],
            2,
            1,
        ));
        payload.extend(nested(
            CTA_COUNTERS_ORIG,
            &[
                attr(CTA_COUNTERS_PACKETS, &3u64.to_be_bytes()),
                attr(CTA_COUNTERS_BYTES, &180u64.to_be_bytes()),
            ],
        ));
        payload.extend(nested(
            CTA_TIMESTAMP,
            &[
                attr(CTA_TIMESTAMP_START, &1_000u64.to_be_bytes()),
                attr(CTA_TIMESTAMP_STOP, &251_000u64.to_be_bytes()),
            ],
        ));
        let bytes = message(
            (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_DELETE,
            0,
            &payload,
        );
        let m = plumb_os::netlink::messages(&bytes).next().unwrap();
        let f = decode(&m).unwrap();
        assert_eq!(f.event, Event::Destroy);
        assert_eq!(
            f.counters_original,
            Some(Counters {
                packets: 3,
                bytes: 180
            })
        );
        assert_eq!(f.counters_reply, None);
        assert_eq!(f.duration_ns(), Some(250_000));
    }

    #[test]
    fn other_messages_and_broken_bytes_are_not_flows() {
        let bytes = message(0x0a00, 0, &[1, 2, 3, 4]);
        let m = plumb_os::netlink::messages(&bytes).next().unwrap();
        assert!(decode(&m).is_none(), "nftables subsystem");
        let bytes = message(NFNL_SUBSYS_CTNETLINK << 8, 0, &[2, 0, 0, 0, 255, 0, 1]);
        let m = plumb_os::netlink::messages(&bytes).next().unwrap();
        assert!(decode(&m).is_none());
        for len in 0..64usize {
            let junk: Vec<u8> = (0..len as u8).collect();
            let bytes = message(NFNL_SUBSYS_CTNETLINK << 8, NLM_F_CREATE, &junk);
            if let Some(m) = plumb_os::netlink::messages(&bytes).next() {
                let _ = decode(&m);
            }
        }
    }
}
