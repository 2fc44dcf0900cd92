//! Prints what the lab's kube-proxy emulator feeds `iptables-restore` on its first full
//! sync (`--noflush --counters`), for timing the restore outside the lab:
//! `cargo run --release -p plumb-lab --example kube_proxy_payload -- 10000 > payload`
//! (then `ip netns exec NS iptables-nft-restore -w 5 -W 100000 --noflush --counters < payload`).

use plumb_kubeproxy::{KubeProxyRules, ProxierOptions};
use plumb_lab::actors::kube_proxy::lab_cluster;

fn main() {
    let services = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    let cluster = lab_cluster(
        services,
        "plumb-node",
        std::net::Ipv4Addr::new(192, 168, 100, 10),
        "192.168.100.11:6443".parse().expect("valid address"),
    );
    let rules = KubeProxyRules::new(&cluster, &ProxierOptions::default());
    print!("{}", rules.to_restore_payload());
}
