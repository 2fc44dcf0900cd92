//! Rule attribution on a node whose firewall is iptables-legacy: the counters are read
//! through the getsockopt reader, and the legacy rule that dropped the packets is
//! named. Privileged: root, iptables-legacy; the namespace is private and deleted on
//! drop.

use plumb_observe::attribution::{CounterSnapshot, RuleMatch, attribute, read_counted};
use plumb_os::netns::Netns;

/// Sends `n` UDP datagrams to 127.0.0.1:`port` from inside `ns` (a send the firewall
/// drops fails with EPERM: ignored).
fn send(ns: &Netns, port: u16, n: usize) {
    plumb_os::netns::on_thread(Some(ns.name()), || {
        let s = std::net::UdpSocket::bind("127.0.0.1:0")?;
        for _ in 0..n {
            let _ = s.send_to(b"x", ("127.0.0.1", port));
        }
        Ok(())
    })
    .expect("send");
}

#[test]
fn a_legacy_drop_rule_is_named_from_its_counters() {
    if !plumb_testkit::privileged(&["ip", "iptables-legacy-restore"]) {
        return;
    }
    let ns = Netns::create("plumb-legacy-observe").expect("netns");
    let rules = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:BLOCK - [0:0]\n-A OUTPUT -p udp -m udp --dport 9 -j BLOCK\n-A OUTPUT -p udp -m udp --dport 10 -j DROP\n-A BLOCK -m comment --comment \"no discard\" -j DROP\nCOMMIT\n";
    let (ok, _, err) = ns
        .exec("iptables-legacy-restore", &[], Some(rules))
        .expect("restore");
    assert!(ok, "{err}");
    let runner = plumb_os::runner::SystemRunner;
    let (before, _) = read_counted(&runner, Some(ns.name())).expect("read");
    assert!(
        before
            .tables
            .iter()
            .any(|t| t.backend == plumb_ruleset::Backend::IptablesLegacy),
        "the legacy table was not read"
    );
    send(&ns, 9, 3);
    let (after, problems) = read_counted(&runner, Some(ns.name())).expect("read");
    let answer = attribute(&CounterSnapshot::of(&before), &CounterSnapshot::of(&after));
    let RuleMatch::Found { rule } = answer else {
        panic!("{answer:?} ({problems:?})");
    };
    assert_eq!(rule.table, "filter");
    assert_eq!(rule.chain, "BLOCK");
    assert!(rule.text.contains("no discard"), "{}", rule.text);
    assert_eq!(rule.packets, 3);
    // Reading created no table.
    let (_, names, _) = ns
        .exec("cat", &["/proc/net/ip_tables_names"], None)
        .expect("cat");
    assert_eq!(names, "filter\n");
}
