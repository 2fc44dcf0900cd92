//! Fills Cilium's LB maps (1.13+ layouts) with N ClusterIP services of 5 backends each,
//! pinned in `GLOBALS` (a directory on a mounted bpffs): the fixture of
//! `scripts/bench-cilium`. Usage: `cilium_maps GLOBALS N`.

use plumb_cilium::layout::{
    Backend, BackendLayout, BackendState, L4Proto, RevNat, Scope, ServiceFlags, ServiceKey,
    ServiceValue,
};
use plumb_testkit::bpf::pinned_map;
use std::net::{IpAddr, Ipv4Addr};

const BACKENDS: u16 = 5;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(dir), Some(n)) = (args.get(1), args.get(2).and_then(|n| n.parse::<u32>().ok()))
    else {
        eprintln!("usage: cilium_maps GLOBALS N");
        std::process::exit(2);
    };
    let dir = std::path::Path::new(dir);
    let (mut services, mut backends, mut rev_nat) = (Vec::new(), Vec::new(), Vec::new());
    let mut next_backend = 1u32;
    for i in 0..n {
        let vip = IpAddr::V4(Ipv4Addr::from(0x0a2b_0000 + i)); // 10.43.x.y
        let rev = u16::try_from(i % 65_535 + 1).expect("in range");
        let key = |slot| {
            ServiceKey {
                address: vip,
                port: 80,
                slot,
                proto: L4Proto::TCP,
                scope: Scope::External,
            }
            .encode()
        };
        let value = |backend_id, count| {
            ServiceValue {
                backend_id,
                count,
                rev_nat: rev,
                flags: ServiceFlags(ServiceFlags::ROUTABLE),
                qcount: 0,
            }
            .encode()
        };
        services.push((key(0), value(0, BACKENDS)));
        for slot in 1..=BACKENDS {
            let id = next_backend;
            next_backend += 1;
            services.push((key(slot), value(id, 0)));
            let pod = IpAddr::V4(Ipv4Addr::from(0x0a2a_0000 + id)); // 10.42.x.y
            backends.push((
                id.to_le_bytes().to_vec(),
                Backend {
                    address: pod,
                    port: 8080,
                    proto: L4Proto::TCP,
                    state: BackendState::Active,
                    cluster_id: 0,
                    zone: 0,
                }
                .encode(BackendLayout::V3),
            ));
        }
        rev_nat.push((
            rev.to_be_bytes().to_vec(),
            RevNat {
                address: vip,
                port: 80,
            }
            .encode(),
        ));
    }
    pinned_map(dir, "cilium_lb4_services_v2", 12, 12, &services);
    pinned_map(dir, "cilium_lb4_backends_v3", 4, 12, &backends);
    pinned_map(dir, "cilium_lb4_reverse_nat", 2, 6, &rev_nat);
    println!(
        "{} services entries, {} backends, {} reverse-NAT entries in {}",
        services.len(),
        backends.len(),
        rev_nat.len(),
        dir.display()
    );
}
