//! The trace workload shared by the criterion bench and the `trace_cost` example: the
//! node's local address and pod-originated packets to every 97th service, so lookups
//! spread over the whole KUBE-SERVICES chain.

use plumb_kubeproxy::Cluster;
use plumb_trace::{Node, Origin, Packet, Proto};
use std::net::IpAddr;

pub fn node() -> Node {
    Node {
        local_addrs: vec![plumb_trace::addr::Cidr::parse("192.168.122.10/24").unwrap()],
        ..Node::default()
    }
}

pub fn packets(cluster: &Cluster) -> Vec<Packet> {
    cluster
        .services
        .iter()
        .step_by(97)
        .map(|s| {
            let proto = if s.protocol == plumb_kubeproxy::Protocol::Udp {
                Proto::Udp
            } else {
                Proto::Tcp
            };
            let mut p = Packet::new(IpAddr::V4(s.cluster_ip), s.port, proto, Origin::Pod);
            p.src = Some("10.42.0.9".parse().unwrap());
            p
        })
        .collect()
}
