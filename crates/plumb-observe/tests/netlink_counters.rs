//! Privileged: the rule counters read over netlink (only the chains that can drop)
//! equal what `iptables-nft-save -c` and `nft list ruleset` print, on a private
//! namespace with traffic counted by DROP and REJECT rules, a DROP policy, a native nft
//! `counter`, in IPv4 and IPv6 tables — with the rules' text from the save tools or
//! from plumb's netlink reader; a changed ruleset is refused, not misread.

use plumb_observe::attribution::{CounterSnapshot, NetlinkPlan, read_counted};
use plumb_os::nftables::read_counters;

const RULES4: &str = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [5:300]\n:OUTPUT ACCEPT [0:0]\n:KUBE-FIREWALL - [0:0]\n-A OUTPUT -j KUBE-FIREWALL\n-A OUTPUT -d 10.43.0.7/32 -p udp -m udp --dport 53 -j DROP\n-A OUTPUT -d 10.43.0.8/32 -p udp -j REJECT --reject-with icmp-port-unreachable\n-A OUTPUT -d 10.43.0.9/32 -j DROP\n-A OUTPUT -d 10.43.0.9/32 -j DROP\n-A KUBE-FIREWALL -d 10.43.0.6/32 -j DROP\nCOMMIT\n";
const RULES6: &str = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -d fd00::7/128 -p udp -j REJECT\nCOMMIT\n";
const NATIVE: &str = "table inet fw {\n chain input {\n  type filter hook input priority 0; policy accept;\n  udp dport 9 counter drop\n  udp dport 10 drop\n }\n}\n";

fn exec(ns: &plumb_os::netns::Netns, tool: &str, args: &[&str], stdin: Option<&str>) {
    let (ok, _, err) = ns.exec(tool, args, stdin).unwrap();
    assert!(ok, "{tool} {args:?}: {err}");
}

#[test]
fn netlink_counters_equal_the_save_tools() {
    if !plumb_testkit::privileged(&["ip", "iptables-nft-restore", "ip6tables-nft-restore", "nft"]) {
        return;
    }
    let ns = plumb_os::netns::Netns::create("plumb-observe2-counters").expect("a namespace");
    exec(&ns, "ip", &["link", "set", "lo", "up"], None);
    exec(
        &ns,
        "ip",
        &["route", "add", "10.43.0.0/16", "dev", "lo"],
        None,
    );
    exec(
        &ns,
        "ip",
        &["-6", "route", "add", "fd00::/64", "dev", "lo"],
        None,
    );
    exec(&ns, "iptables-nft-restore", &["-c"], Some(RULES4));
    exec(&ns, "ip6tables-nft-restore", &[], Some(RULES6));
    exec(&ns, "nft", &["-f", "-"], Some(NATIVE));
    let name = ns.name().to_string();
    let sent = plumb_os::netns::on_thread(Some(&name), || {
        let s = std::net::UdpSocket::bind("127.0.0.1:0")?;
        for (addr, n) in [
            ("10.43.0.7:53", 3),
            ("10.43.0.8:1", 2),
            ("10.43.0.9:1", 4),
            ("10.43.0.6:1", 1),
            ("127.0.0.1:9", 5),
            ("127.0.0.1:10", 1),
        ] {
            for _ in 0..n {
                let _ = s.send_to(b"x", addr); // EPERM where dropped in OUTPUT
            }
        }
        if let Ok(s6) = std::net::UdpSocket::bind("[::1]:0") {
            let _ = s6.send_to(b"x", "[fd00::7]:1");
        }
        Ok(())
    });
    sent.unwrap();

    let (rs, problems) =
        read_counted(&plumb_os::runner::SystemRunner, Some(&name)).expect("a full read");
    assert!(problems.is_empty(), "{problems:?}");
    let tools = CounterSnapshot::of(&rs);
    let (chains, policies) = NetlinkPlan::chains_to_read(&rs).expect("nf_tables only");
    let c = read_counters(Some(&name), &chains, &policies, None).expect("netlink counters");
    let plan = NetlinkPlan::new(&rs, &c).expect("the reads line up");
    let netlink = plan.snapshot(&c).expect("same generation");
    let show = |s: &CounterSnapshot| {
        s.rules()
            .iter()
            .map(|r| {
                format!(
                    "{} {} {}: {} = {}",
                    r.family, r.table, r.chain, r.text, r.packets
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(show(&netlink), show(&tools));
    assert_eq!(netlink.uncounted(), tools.uncounted());
    let counted = show(&tools);
    for want in [
        "ip filter OUTPUT: -A OUTPUT -d 10.43.0.7/32 -p udp -m udp --dport 53 -j DROP = 3",
        "ip filter OUTPUT: -A OUTPUT -d 10.43.0.8/32 -p udp -j REJECT --reject-with icmp-port-unreachable = 2",
        "ip filter FORWARD: policy DROP = 5",
        "ip filter KUBE-FIREWALL: -A KUBE-FIREWALL -d 10.43.0.6/32 -j DROP = 1",
        "inet fw input: udp dport 9 counter drop = 5",
    ] {
        assert!(counted.iter().any(|l| l == want), "{want} in {counted:#?}");
    }
    // The rules' text from plumb's netlink reader (no rule counters in it), the counts
    // from the kernel: the same snapshot again.
    let live = plumb_collect::rulesets::collect_live_rulesets(
        &plumb_os::runner::SystemRunner,
        Some(&name),
    )
    .ruleset;
    let (live_chains, live_policies) = NetlinkPlan::chains_to_read(&live).expect("nf_tables only");
    assert_eq!((&live_chains, &live_policies), (&chains, &policies));
    let live_plan = NetlinkPlan::new(&live, &c).expect("the netlink text lines up too");
    assert_eq!(show(&live_plan.snapshot(&c).unwrap()), show(&tools));

    // Only the chains that can drop are read.
    assert!(chains.iter().all(|c| c.2 != "INPUT"), "{chains:?}");

    // A changed ruleset: the netlink read is refused, not matched to the old rules.
    exec(
        &ns,
        "iptables-nft",
        &["-I", "OUTPUT", "-d", "10.43.0.5", "-j", "DROP"],
        None,
    );
    let c2 = read_counters(Some(&name), &chains, &policies, None).unwrap();
    assert!(plan.snapshot(&c2).is_err());
}
