//! Privileged: Cilium's LB maps as the agent pins them (names, key and value layouts of
//! Cilium 1.13 and later), on a bpffs mounted below a private node root, read back by
//! `plumb_collect::cilium::read_lb_maps` into frontends. The services are the
//! kube-proxy-free guide's: one ClusterIP and three NodePort frontends (one per device
//! and `0.0.0.0`), each to the same two backends; plus a frontend left without backends
//! and a slot naming a backend the backends map lacks.

use plumb_cilium::layout::{
    Backend, BackendLayout, BackendState, L4Proto, RevNat, Scope, ServiceFlags, ServiceKey,
    ServiceValue,
};
use plumb_cilium::{FrontendKind, Problem};
use plumb_testkit::bpf::{Bpffs, pinned_map};

fn key(addr: &str, port: u16, slot: u16) -> Vec<u8> {
    ServiceKey {
        address: addr.parse().unwrap(),
        port,
        slot,
        proto: L4Proto::TCP,
        scope: Scope::External,
    }
    .encode()
}

fn value(backend_id: u32, count: u16, rev_nat: u16, flags: u16) -> Vec<u8> {
    ServiceValue {
        backend_id,
        count,
        rev_nat,
        flags: ServiceFlags(flags),
        qcount: 0,
    }
    .encode()
}

#[test]
fn the_maps_of_a_kube_proxy_free_node_read_as_its_service_list() {
    if !plumb_testkit::privileged(&["mount", "umount"]) {
        return;
    }
    let Some(fs) = Bpffs::mount() else {
        plumb_testkit::skip("cannot mount a bpffs (mount -t bpf)");
        return;
    };
    // The node root is the bpffs' parent layout: ROOT/sys/fs/bpf is the mount.
    let globals = fs.0.join("tc/globals");
    let routable = ServiceFlags::ROUTABLE;
    let nodeport = ServiceFlags::NODEPORT | ServiceFlags::ROUTABLE;
    let frontends = [
        ("10.104.239.135", 80, routable, 4u16),
        ("0.0.0.0", 31940, nodeport, 5),
        ("192.168.178.29", 31940, nodeport, 6),
        ("172.16.0.29", 31940, nodeport, 7),
    ];
    let mut services = Vec::new();
    let mut rev_nat = Vec::new();
    for (addr, port, flags, id) in frontends {
        services.push((key(addr, port, 0), value(0, 2, id, flags)));
        services.push((key(addr, port, 1), value(1, 0, id, flags)));
        services.push((key(addr, port, 2), value(2, 0, id, flags)));
        rev_nat.push((
            id.to_be_bytes().to_vec(),
            RevNat {
                address: addr.parse().unwrap(),
                port,
            }
            .encode(),
        ));
    }
    // A ClusterIP whose backends are gone, and one whose slot names a missing backend.
    services.push((key("10.43.0.50", 443, 0), value(0, 0, 8, routable)));
    services.push((key("10.43.0.60", 80, 0), value(0, 1, 9, routable)));
    services.push((key("10.43.0.60", 80, 1), value(99, 0, 9, routable)));
    let backend = |addr: &str| {
        Backend {
            address: addr.parse().unwrap(),
            port: 80,
            proto: L4Proto::TCP,
            state: BackendState::Active,
            cluster_id: 0,
            zone: 0,
        }
        .encode(BackendLayout::V3)
    };
    let backends = vec![
        (1u32.to_le_bytes().to_vec(), backend("10.217.0.107")),
        (2u32.to_le_bytes().to_vec(), backend("10.217.0.149")),
    ];
    pinned_map(&globals, "cilium_lb4_services_v2", 12, 12, &services);
    pinned_map(&globals, "cilium_lb4_backends_v3", 4, 12, &backends);
    pinned_map(&globals, "cilium_lb4_reverse_nat", 2, 6, &rev_nat);

    let read = plumb_collect::cilium::read_lb_maps_in(&globals);
    assert!(read.problems.is_empty(), "{:?}", read.problems);
    assert_eq!(read.backend_layout, Some(BackendLayout::V3));
    let names: Vec<&str> = read.maps.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "cilium_lb4_services_v2",
            "cilium_lb4_backends_v3",
            "cilium_lb4_reverse_nat"
        ]
    );
    let guide: Vec<_> = read
        .frontends
        .iter()
        .filter(|f| f.problems.is_empty())
        .collect();
    assert_eq!(guide.len(), 4, "{:#?}", read.frontends);
    for f in &guide {
        let backends: Vec<String> = f
            .backends
            .iter()
            .map(|b| format!("{}:{}", b.address, b.port))
            .collect();
        assert_eq!(backends, ["10.217.0.107:80", "10.217.0.149:80"]);
    }
    let kinds: Vec<Option<FrontendKind>> = guide.iter().map(|f| f.kind).collect();
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == Some(FrontendKind::NodePort))
            .count(),
        3
    );
    let broken: Vec<(String, &[Problem])> = read
        .frontends
        .iter()
        .filter(|f| !f.problems.is_empty())
        .map(|f| (f.display_address(), f.problems.as_slice()))
        .collect();
    assert_eq!(
        broken,
        [
            (
                "10.43.0.50:443/TCP".to_string(),
                &[Problem::NoBackends, Problem::RevNatMissing { id: 8 }][..]
            ),
            (
                "10.43.0.60:80/TCP".to_string(),
                &[
                    Problem::BackendNotFound { slot: 1, id: 99 },
                    Problem::RevNatMissing { id: 9 }
                ][..]
            ),
        ]
    );
}

#[test]
fn a_root_without_cilium_maps_is_not_a_cilium_node() {
    let dir = plumb_testkit::Scratch::new("cilium-none");
    assert!(plumb_collect::cilium::read_lb_maps(dir.path()).is_none());
}

/// The IPv6 twins (`cilium_lb6_*`: 24-byte keys, 24-byte v3 backends, 18-byte packed
/// reverse NAT) read live beside the IPv4 maps: each family's ids are its own, so
/// backend 1 of IPv6 is not backend 1 of IPv4.
#[test]
fn ipv6_maps_are_read_live_beside_the_ipv4_ones() {
    if !plumb_testkit::privileged(&["mount", "umount"]) {
        return;
    }
    let Some(fs) = Bpffs::mount() else {
        plumb_testkit::skip("cannot mount a bpffs (mount -t bpf)");
        return;
    };
    let globals = fs.0.join("tc/globals");
    let backend = |addr: &str, port| {
        Backend {
            address: addr.parse().unwrap(),
            port,
            proto: L4Proto::TCP,
            state: BackendState::Active,
            cluster_id: 0,
            zone: 0,
        }
        .encode(BackendLayout::V3)
    };
    let routable = ServiceFlags::ROUTABLE;
    pinned_map(
        &globals,
        "cilium_lb4_services_v2",
        12,
        12,
        &[
            (key("10.43.0.1", 443, 0), value(0, 1, 1, routable)),
            (key("10.43.0.1", 443, 1), value(1, 0, 1, routable)),
        ],
    );
    pinned_map(
        &globals,
        "cilium_lb4_backends_v3",
        4,
        12,
        &[(1u32.to_le_bytes().to_vec(), backend("192.168.100.11", 6443))],
    );
    pinned_map(
        &globals,
        "cilium_lb6_services_v2",
        24,
        12,
        &[
            (key("fd00:43::1", 443, 0), value(0, 2, 1, routable)),
            (key("fd00:43::1", 443, 1), value(1, 0, 1, routable)),
            (key("fd00:43::1", 443, 2), value(2, 0, 1, routable)),
        ],
    );
    pinned_map(
        &globals,
        "cilium_lb6_backends_v3",
        4,
        24,
        &[
            (1u32.to_le_bytes().to_vec(), backend("fd00:100::11", 6443)),
            (2u32.to_le_bytes().to_vec(), backend("fd00:100::12", 6443)),
        ],
    );
    pinned_map(
        &globals,
        "cilium_lb6_reverse_nat",
        2,
        18,
        &[(
            1u16.to_be_bytes().to_vec(),
            RevNat {
                address: "fd00:43::1".parse().unwrap(),
                port: 443,
            }
            .encode(),
        )],
    );
    let read = plumb_collect::cilium::read_lb_maps_in(&globals);
    assert!(read.problems.is_empty(), "{:?}", read.problems);
    let shown: Vec<String> = read
        .frontends
        .iter()
        .map(|f| {
            let b: Vec<String> = f
                .backends
                .iter()
                .map(|b| std::net::SocketAddr::new(b.address, b.port).to_string())
                .collect();
            format!("{} -> {}", f.display_address(), b.join(","))
        })
        .collect();
    assert_eq!(
        shown,
        [
            "10.43.0.1:443/TCP -> 192.168.100.11:6443",
            "[fd00:43::1]:443/TCP -> [fd00:100::11]:6443,[fd00:100::12]:6443",
        ]
    );
    // The IPv4 family has no reverse-NAT map here; the IPv6 one has its entry.
    assert!(read.frontends.iter().all(|f| f.problems.is_empty()));
}
