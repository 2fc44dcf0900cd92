//! Privileged: conntrack's events in a private network namespace. A DNAT rule sends
//! 10.43.0.1:443 (a "ClusterIP") to 127.0.0.1:8443 where a listener answers; the
//! connection's NEW event shows the original destination and the endpoint DNAT chose,
//! and closing it gives a DESTROY.

use plumb_observe::conntrack::Event;
use plumb_observe::listener::ConntrackListener;
use std::time::{Duration, Instant};

#[test]
fn a_connection_to_a_cluster_ip_is_seen_with_its_dnat() {
    if !plumb_testkit::privileged(&["ip", "iptables-nft-restore"]) {
        return;
    }
    let ns = plumb_os::netns::Netns::create("plumb-observe").expect("a private namespace");
    let (ok, _, err) = ns.exec("ip", &["link", "set", "lo", "up"], None).unwrap();
    assert!(ok, "{err}");
    let rules = "*nat\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -d 10.43.0.1/32 -p tcp -m tcp --dport 443 -j DNAT --to-destination 127.0.0.1:8443\nCOMMIT\n";
    let (ok, _, err) = ns.exec("iptables-nft-restore", &[], Some(rules)).unwrap();
    assert!(ok, "{err}");
    // The route to 10.43.0.1 goes out of lo: add it, as a node's route to its Service CIDR.
    let (ok, _, err) = ns
        .exec("ip", &["route", "add", "10.43.0.0/16", "dev", "lo"], None)
        .unwrap();
    assert!(ok, "{err}");
    let name = ns.name().to_string();
    let mut listener = ConntrackListener::open(Some(&name)).expect("subscribe");
    let server = plumb_os::netns::on_thread(Some(&name), || {
        std::net::TcpListener::bind("127.0.0.1:8443")
    })
    .expect("listen");
    let client = plumb_os::netns::on_thread(Some(&name), || {
        std::net::TcpStream::connect_timeout(
            &"10.43.0.1:443".parse().unwrap(),
            Duration::from_secs(2),
        )
    })
    .expect("connect through the DNAT");
    let (accepted, _) = server.accept().expect("the backend got it");
    drop(client);
    drop(accepted);

    let deadline = Instant::now() + Duration::from_secs(10);
    let (mut new, mut destroyed) = (None, false);
    while Instant::now() < deadline && (new.is_none() || !destroyed) {
        for f in listener.receive().expect("receive").flows {
            if f.original.destination.to_string() != "10.43.0.1" {
                continue;
            }
            match f.event {
                Event::New => new = Some(f),
                Event::Destroy => destroyed = true,
                Event::Update => {}
            }
        }
        if new.is_some() && !destroyed {
            // Closed TCP connections linger in TIME_WAIT; flushing ends them now.
            let _ = ns.exec("conntrack", &["-F"], None);
        }
    }
    let new = new.expect("a NEW event for the connection");
    assert_eq!(new.protocol, 6);
    assert_eq!(new.original.destination_port, Some(443));
    assert_eq!(
        new.dnat(),
        Some(("127.0.0.1".parse().unwrap(), Some(8443))),
        "the reply comes from the endpoint DNAT chose"
    );
    assert!(destroyed, "a DESTROY event once the connection is gone");
}

/// `--enable-accounting` turns acct and timestamps on in the namespace only, and the
/// guard puts the previous values back.
#[test]
fn accounting_is_enabled_in_the_namespace_and_restored() {
    if !plumb_testkit::privileged(&["ip", "iptables-nft-restore"]) {
        return;
    }
    use plumb_observe::accounting::Accounting;
    let ns = plumb_os::netns::Netns::create("plumb-observe-acct").expect("a private namespace");
    // conntrack's sysctls appear once the module is loaded; a NAT rule loads it.
    let rules = "*nat\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -d 10.43.0.1/32 -j ACCEPT\nCOMMIT\n";
    let (ok, _, err) = ns.exec("iptables-nft-restore", &[], Some(rules)).unwrap();
    assert!(ok, "{err}");
    let host = Accounting::read(None).unwrap();
    let before = Accounting::read(Some(ns.name())).unwrap();
    {
        let markers = plumb_testkit::Scratch::new("plumb-observe-acct-markers");
        let guard = Accounting::enable(Some(ns.name()), markers.path()).unwrap();
        assert_eq!(guard.before(), before);
        assert_eq!(
            std::fs::read_dir(markers.path()).unwrap().count(),
            1,
            "the old values are on disk before anything changes"
        );
        let on = Accounting::read(Some(ns.name())).unwrap();
        assert!(on.bytes_and_packets && on.timestamps);
        assert_eq!(
            Accounting::read(None).unwrap(),
            host,
            "the host's are untouched"
        );
    }
    assert_eq!(Accounting::read(Some(ns.name())).unwrap(), before);
}
