//! Privileged: the kfree_skb program reports a packet an iptables DROP rule drops in a
//! private namespace, with reason NETFILTER_DROP named from the kernel's BTF, its
//! addresses and ports, and the namespace's inode; packets of other namespaces and
//! ordinary frees are not reported.

use plumb_observe::drops::{DropFilter, DropProbe};
use plumb_os::netns::Netns;
use std::time::{Duration, Instant};

/// A private namespace named from `prefix` with `lo` up, `route` (the `ip` arguments)
/// added, and `rules` loaded with `restore` (`iptables-nft-restore` or the ip6 one).
fn dropping_namespace(prefix: &str, route: &[&str], restore: &str, rules: &str) -> Netns {
    let ns = Netns::create(prefix).expect("a private namespace");
    for args in [&["link", "set", "lo", "up"][..], route] {
        let (ok, _, err) = ns.exec("ip", args, None).unwrap();
        assert!(ok, "ip {args:?}: {err}");
    }
    let (ok, _, err) = ns.exec(restore, &[], Some(rules)).unwrap();
    assert!(ok, "{err}");
    ns
}

/// The drop probe with `filter`; `None` (after saying why) where this kernel cannot
/// load it.
fn attach(filter: &DropFilter) -> Option<DropProbe> {
    match DropProbe::attach(filter) {
        Ok(p) => Some(p),
        Err(e) if e.unavailable() => {
            plumb_testkit::skip(&format!("no drop probe here: {e}"));
            None
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn an_iptables_drop_is_reported_with_reason_netfilter_drop() {
    if !plumb_testkit::privileged(&["ip", "iptables-nft-restore"]) {
        return;
    }
    let rules = "*filter\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -d 10.43.0.7/32 -p udp -m udp --dport 53 -j DROP\nCOMMIT\n";
    let ns = dropping_namespace(
        "plumb-observe-drop",
        &["route", "add", "10.43.0.0/16", "dev", "lo"],
        "iptables-nft-restore",
        rules,
    );
    let inode = plumb_os::netns::inode_of(ns.name()).unwrap();
    let Some(mut probe) = attach(&DropFilter {
        netns_inode: inode,
        all_reasons: false,
        ..Default::default()
    }) else {
        return;
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

/// An IPv6 packet with an extension header (destination options) before its UDP header:
/// the program walks the header and reports UDP and its ports, not the extension
/// header's type.
#[test]
fn ipv6_ports_are_found_after_extension_headers() {
    if !plumb_testkit::privileged(&["ip", "ip6tables-nft-restore"]) {
        return;
    }
    use std::os::fd::AsRawFd;
    let rules = "*filter\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -d fd00::7/128 -j DROP\nCOMMIT\n";
    let ns = dropping_namespace(
        "plumb-observe2-ext6",
        &["-6", "route", "add", "fd00::/64", "dev", "lo"],
        "ip6tables-nft-restore",
        rules,
    );
    let inode = plumb_os::netns::inode_of(ns.name()).unwrap();
    let Some(mut probe) = attach(&DropFilter {
        netns_inode: inode,
        all_reasons: false,
        ..Default::default()
    }) else {
        return;
    };
    let name = ns.name().to_string();
    let send = || {
        plumb_os::netns::on_thread(Some(&name), || {
            let s = std::net::UdpSocket::bind("[::1]:0")?;
            // Destination options: next header (filled in by the kernel), length 0
            // (8 bytes), one PadN option of 4 bytes.
            let opts: [u8; 8] = [0, 0, 1, 4, 0, 0, 0, 0];
            // SAFETY: a valid socket and an 8-byte buffer.
            let r = unsafe {
                libc::setsockopt(
                    s.as_raw_fd(),
                    libc::IPPROTO_IPV6,
                    libc::IPV6_DSTOPTS,
                    opts.as_ptr().cast(),
                    opts.len() as libc::socklen_t,
                )
            };
            if r != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let _ = s.send_to(b"x", "[fd00::7]:5353"); // EPERM: the drop in OUTPUT
            Ok(())
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = Vec::new();
    while got.is_empty() && Instant::now() < deadline {
        send().expect("a datagram with destination options");
        probe.wait(Duration::from_millis(200));
        probe.drain(&mut |d| got.push(d));
    }
    let d = got.first().expect("a drop within 10 s");
    assert_eq!(
        d.addresses.map(|(_, dst)| dst.to_string()).as_deref(),
        Some("fd00::7")
    );
    assert_eq!(
        d.protocol, 17,
        "the upper layer, not destination options: {d:?}"
    );
    assert_eq!(d.ports.map(|p| p.1), Some(5353), "{d:?}");
}

/// The user's filters are applied in the kernel: drops that do not match them are
/// counted there (`filtered`) and never put in the ring buffer, so user space reads
/// only the matching ones. Two destinations are dropped in raw PREROUTING; a probe
/// filtered on one address reports exactly the drops to it, and one filtered on the
/// other's port exactly those.
#[test]
fn drops_the_filters_leave_out_never_reach_user_space() {
    use plumb_observe::drops::DropMatch;
    if !plumb_testkit::privileged(&["ip", "iptables-nft-restore"]) {
        return;
    }
    // Dropped on the way back in over lo: every send succeeds and makes one drop.
    let rules = "*raw\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -d 10.43.0.0/16 -j DROP\nCOMMIT\n";
    let ns = dropping_namespace(
        &format!("plumb-drops-filter-{}", std::process::id()),
        &["route", "add", "10.43.0.0/16", "dev", "lo"],
        "iptables-nft-restore",
        rules,
    );
    let inode = plumb_os::netns::inode_of(ns.name()).unwrap();
    let (to_a, to_b) = (30u64, 50u64);
    for only in [
        DropMatch {
            ips: vec!["10.43.0.7".parse().unwrap()],
            ..DropMatch::default()
        },
        DropMatch {
            ports: vec![8080],
            protocols: vec![17],
            ..DropMatch::default()
        },
    ] {
        let Some(mut probe) = attach(&DropFilter {
            netns_inode: inode,
            all_reasons: false,
            only: only.clone(),
        }) else {
            return;
        };
        plumb_os::netns::on_thread(Some(ns.name()), || {
            let s = std::net::UdpSocket::bind("127.0.0.1:0")?;
            for _ in 0..to_a {
                s.send_to(b"x", "10.43.0.7:53")?;
            }
            for _ in 0..to_b {
                s.send_to(b"x", "10.43.0.8:8080")?;
            }
            Ok::<(), std::io::Error>(())
        })
        .expect("sends");
        let (want, other) = if only.ips.is_empty() {
            (to_b, to_a)
        } else {
            (to_a, to_b)
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut got = Vec::new();
        while (got.len() as u64) < want && Instant::now() < deadline {
            probe.wait(Duration::from_millis(100));
            probe.drain(&mut |d| got.push(d));
        }
        // Anything more would be in the ring buffer by now.
        probe.wait(Duration::from_millis(200));
        probe.drain(&mut |d| got.push(d));
        let c = probe.counters();
        assert_eq!(got.len() as u64, want, "{only:?}: {c:?}");
        assert!(got.iter().all(|d| only.matches(d)), "{only:?}: {got:?}");
        assert_eq!(c.reported, want, "{only:?}");
        assert_eq!(
            c.filtered, other,
            "{only:?}: the others counted in the kernel"
        );
        assert_eq!(c.lost, 0);
    }
}
