//! Privileged: the kfree_skb program reports a packet an iptables DROP rule drops in a
//! private namespace, with reason NETFILTER_DROP named from the kernel's BTF, its
//! addresses and ports, and the namespace's inode; packets of other namespaces and
//! ordinary frees are not reported.

use plumb_observe::drops::{DropFilter, DropProbe};
use std::time::{Duration, Instant};

#[test]
fn an_iptables_drop_is_reported_with_reason_netfilter_drop() {
    if !plumb_testkit::privileged(&["ip", "iptables-nft-restore"]) {
        return;
    }
    let ns = plumb_os::netns::Netns::create("plumb-observe-drop").expect("a private namespace");
    let (ok, _, err) = ns.exec("ip", &["link", "set", "lo", "up"], None).unwrap();
    assert!(ok, "{err}");
    let (ok, _, err) = ns
        .exec("ip", &["route", "add", "10.43.0.0/16", "dev", "lo"], None)
        .unwrap();
    assert!(ok, "{err}");
    let rules = "*filter\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -d 10.43.0.7/32 -p udp -m udp --dport 53 -j DROP\nCOMMIT\n";
    let (ok, _, err) = ns.exec("iptables-nft-restore", &[], Some(rules)).unwrap();
    assert!(ok, "{err}");
    let inode = plumb_os::netns::inode_of(ns.name()).unwrap();
    let mut probe = match DropProbe::attach(&DropFilter {
        netns_inode: inode,
        all_reasons: false,
    }) {
        Ok(p) => p,
        Err(e) if e.unavailable() => {
            plumb_testkit::skip(&format!("no drop probe here: {e}"));
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let name = ns.name().to_string();
    let send = || {
        plumb_os::netns::on_thread(Some(&name), || {
            let s = std::net::UdpSocket::bind("127.0.0.1:0")?;
            s.send_to(b"x", "10.43.0.7:53")
        })
    };
    // The host's own traffic in the meantime must not show up (other namespace).
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = Vec::new();
    while got.is_empty() && Instant::now() < deadline {
        let _ = send(); // EPERM: the drop in OUTPUT
        probe.wait(Duration::from_millis(200));
        probe.drain(&mut |d| got.push(d));
    }
    let reasons = probe.reasons().clone();
    let d = got.first().expect("a drop within 10 s");
    assert!(
        got.iter().all(|d| u64::from(d.netns_inode) == inode),
        "{got:?}"
    );
    assert_eq!(reasons.name(d.reason), Some("NETFILTER_DROP"), "{d:?}");
    assert_eq!(
        d.addresses.map(|(_, dst)| dst.to_string()).as_deref(),
        Some("10.43.0.7")
    );
    assert_eq!(d.protocol, 17);
    assert_eq!(d.ports.map(|p| p.1), Some(53));
    let c = probe.counters();
    assert!(c.reported >= got.len() as u64, "{c:?}");
    assert_eq!(c.lost, 0);
}
