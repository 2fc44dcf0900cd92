//! Privileged: `plumb observe` in private namespaces — a connection through a DNAT rule
//! is a FORWARDED line with the endpoint it was translated to; a packet an iptables
//! rule drops is a DROPPED line with reason NETFILTER_DROP and that rule named (text,
//! chain, table, owner); the filters keep what they say.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Starts `plumb observe ARGS` and waits (bounded) until it says it is listening.
fn observe(args: &[&str]) -> Child {
    observe_with_metrics(args).0
}

/// Like [`observe`]; also gives the metrics address it printed, if any.
fn observe_with_metrics(args: &[&str]) -> (Child, Option<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_plumb"))
        .arg("observe")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("plumb observe");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut metrics = None;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("observe: {line}");
            if let Some(url) = line.strip_prefix("plumb observe: metrics on http://") {
                metrics = url.strip_suffix("/metrics").map(str::to_string);
            }
            if line.contains("listening in") {
                let _ = tx.send(metrics.take());
            }
        }
    });
    let metrics = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("plumb observe says it is listening within 20 s");
    (child, metrics)
}

/// `GET /metrics` over plain HTTP/1.0.
fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body
}

fn json_lines(child: Child) -> Vec<serde_json::Value> {
    let out = child
        .wait_with_output()
        .expect("observe ends after --duration");
    assert!(out.status.success(), "exit {:?}", out.status);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn netns_with(prefix: &str, rules: &str) -> plumb_os::netns::Netns {
    let ns = plumb_os::netns::Netns::create(prefix).expect("a private namespace");
    for args in [
        &["link", "set", "lo", "up"][..],
        &["route", "add", "10.43.0.0/16", "dev", "lo"],
    ] {
        let (ok, _, err) = ns.exec("ip", args, None).unwrap();
        assert!(ok, "{err}");
    }
    let (ok, _, err) = ns.exec("iptables-nft-restore", &[], Some(rules)).unwrap();
    assert!(ok, "{err}");
    ns
}

#[test]
fn observe_prints_a_cluster_ip_connection_with_its_endpoint() {
    if !plumb_testkit::privileged(&["ip", "iptables-nft-restore"]) {
        return;
    }
    let ns = netns_with(
        "plumb-observe-cli",
        "*nat\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -d 10.43.0.1/32 -p tcp -m tcp --dport 443 -j DNAT --to-destination 127.0.0.1:8443\nCOMMIT\n",
    );
    let observer = observe(&["--netns", ns.name(), "--duration", "3", "-o", "json"]);
    let name = ns.name().to_string();
    let server = plumb_os::netns::on_thread(Some(&name), || {
        std::net::TcpListener::bind("127.0.0.1:8443")
    })
    .unwrap();
    for _ in 0..3 {
        let _ = plumb_os::netns::on_thread(Some(&name), || {
            std::net::TcpStream::connect_timeout(
                &"10.43.0.1:443".parse().unwrap(),
                Duration::from_secs(1),
            )
        });
        let _ = server.accept();
    }
    let lines = json_lines(observer);
    let line = lines
        .iter()
        .find(|v| v["conntrack"] == "NEW" && v["IP"]["destination"] == "10.43.0.1")
        .unwrap_or_else(|| panic!("no NEW line for 10.43.0.1: {lines:?}"));
    assert_eq!(line["verdict"], "FORWARDED");
    assert_eq!(line["IP"]["ipVersion"], "IPv4");
    assert_eq!(line["l4"]["TCP"]["destination_port"], 443);
    assert_eq!(line["translated_destination"], "127.0.0.1:8443");
    assert_eq!(line["netns"], ns.name());
}

/// The drop is reported with the kernel's reason and the rule that dropped it, named
/// from its counter; packets the accepting rule beside it let through are not blamed
/// on a rule. `--verdict dropped` leaves the connections out.
#[test]
fn observe_names_the_rule_that_dropped_a_packet() {
    if !plumb_testkit::privileged(&["ip", "iptables-nft-restore", "iptables-nft-save"]) {
        return;
    }
    let ns = netns_with(
        "plumb-observe-drop-cli",
        "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:BLOCKED - [0:0]\n-A OUTPUT -d 10.43.0.8/32 -p udp -m udp --dport 53 -j ACCEPT\n-A OUTPUT -d 10.43.0.7/32 -j BLOCKED\n-A BLOCKED -p udp -m udp --dport 53 -m comment --comment \"blocked dns\" -j DROP\nCOMMIT\n",
    );
    let (observer, metrics) = observe_with_metrics(&[
        "--netns",
        ns.name(),
        "--duration",
        "4",
        "--verdict",
        "dropped",
        "--metrics-addr",
        "127.0.0.1:0",
        "-o",
        "json",
    ]);
    let metrics = metrics.expect("the metrics address on stderr");
    let name = ns.name().to_string();
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut sent = 0;
    while Instant::now() < deadline && sent < 3 {
        let _ = plumb_os::netns::on_thread(Some(&name), || {
            let s = std::net::UdpSocket::bind("127.0.0.1:0")?;
            let _ = s.send_to(b"x", "10.43.0.8:53");
            s.send_to(b"x", "10.43.0.7:53")
        });
        sent += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    // The drops are counted by reason and by the owner of the rule (bounded labels),
    // once their window was attributed.
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut text = scrape(&metrics);
    while !text.contains("reason=\"NETFILTER_DROP\"") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        text = scrape(&metrics);
    }
    let counted = text
        .lines()
        .find(|l| l.starts_with("plumb_observe_drops_total{") && l.contains("NETFILTER_DROP"))
        .unwrap_or_else(|| panic!("no NETFILTER_DROP counter:\n{text}"));
    assert!(counted.contains("owner=\""), "{counted}");
    // After the first full read, the counters of the dropping chains come over netlink.
    let netlink = text
        .lines()
        .find(|l| l.starts_with("plumb_observe_ruleset_reads_total{how=\"netlink\"}"))
        .unwrap_or_else(|| panic!("no netlink counter read:\n{text}"));
    assert!(!netlink.ends_with(" 0"), "{netlink}");
    let lines = json_lines(observer);
    assert!(
        lines.iter().all(|v| v["verdict"] != "FORWARDED"),
        "--verdict dropped: {lines:?}"
    );
    let drop = lines
        .iter()
        .find(|v| v["verdict"] == "DROPPED" && v["IP"]["destination"] == "10.43.0.7")
        .unwrap_or_else(|| panic!("no DROPPED line for 10.43.0.7: {lines:?}"));
    assert_eq!(drop["drop_reason"], "NETFILTER_DROP");
    assert_eq!(drop["drop_reason_desc"], "NETFILTER_DROP");
    assert_eq!(drop["l4"]["UDP"]["destination_port"], 53);
    let rule = &drop["rule"];
    assert_eq!(rule["status"], "found", "{rule}");
    assert_eq!(rule["rule"]["chain"], "BLOCKED");
    assert_eq!(rule["rule"]["table"], "filter");
    assert_eq!(rule["rule"]["family"], "ip");
    let text = rule["rule"]["text"].as_str().unwrap();
    assert!(
        text.starts_with("-A BLOCKED") && text.contains("-j DROP"),
        "{rule}"
    );
    assert!(rule["rule"]["owner"].is_string(), "{rule}");
    // The accepted packets go on to lo, where the kernel drops them later for another
    // reason (no local address): they are drops, but not netfilter's.
    for v in lines
        .iter()
        .filter(|v| v["IP"]["destination"] == "10.43.0.8")
    {
        assert_ne!(v["drop_reason"], "NETFILTER_DROP", "{v}");
        assert!(v["rule"].is_null(), "{v}");
    }
}

/// Filters that cannot match anything are refused with the reason, not run.
#[test]
fn observe_refuses_an_unknown_reason_and_a_bad_service() {
    if !plumb_testkit::privileged(&["ip"]) {
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(["observe", "--reason", "NO_SUCH_REASON", "--duration", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("NO_SUCH_REASON") && err.contains("NETFILTER_DROP"),
        "{err}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(["observe", "--service", "kube-dns", "--duration", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("NAMESPACE/NAME"));
}

/// Without CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN the drop program cannot load:
/// observe says so once (stderr and one JSON notice line) and reports flows anyway.
#[test]
fn observe_without_bpf_permission_reports_flows_only() {
    if !plumb_testkit::privileged(&["ip", "iptables-nft-restore", "setpriv"]) {
        return;
    }
    let ns = netns_with(
        "plumb-observe-nobpf",
        "*nat\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -d 10.43.0.1/32 -p tcp -m tcp --dport 443 -j DNAT --to-destination 127.0.0.1:8443\nCOMMIT\n",
    );
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns.name(), "setpriv"])
        .args(["--bounding-set", "-bpf,-perfmon,-sys_admin"])
        .args(["--inh-caps", "-bpf,-perfmon,-sys_admin", "--"])
        .arg(env!("CARGO_BIN_EXE_plumb"))
        .args(["observe", "--duration", "3", "-o", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("setpriv plumb observe");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let collected = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("listening in") {
                let _ = tx.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("listening within 20 s");
    let name = ns.name().to_string();
    let server = plumb_os::netns::on_thread(Some(&name), || {
        std::net::TcpListener::bind("127.0.0.1:8443")
    })
    .unwrap();
    let _ = plumb_os::netns::on_thread(Some(&name), || {
        std::net::TcpStream::connect_timeout(
            &"10.43.0.1:443".parse().unwrap(),
            Duration::from_secs(1),
        )
    });
    let _ = server.accept();
    let lines = json_lines(child);
    let stderr = collected.join().unwrap();
    let notices: Vec<_> = lines.iter().filter(|v| v["notice"].is_string()).collect();
    assert_eq!(notices.len(), 1, "{lines:?}");
    let n = notices[0]["notice"].as_str().unwrap();
    assert!(
        n.contains("flows only") && n.contains("not permitted"),
        "{n}"
    );
    assert_eq!(stderr.matches("flows only").count(), 1, "{stderr}");
    assert!(
        lines
            .iter()
            .any(|v| v["verdict"] == "FORWARDED" && v["IP"]["destination"] == "10.43.0.1"),
        "flows still reported: {lines:?}"
    );
    // Asked for drops only, it refuses instead of watching nothing.
    let out = Command::new("ip")
        .args(["netns", "exec", ns.name(), "setpriv"])
        .args(["--bounding-set", "-bpf,-perfmon,-sys_admin"])
        .args(["--inh-caps", "-bpf,-perfmon,-sys_admin", "--"])
        .arg(env!("CARGO_BIN_EXE_plumb"))
        .args(["observe", "--duration", "1", "--verdict", "dropped"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot be observed here"), "{err}");
}

/// `--last N` prints only the last N events of the watch, after it ends.
#[test]
fn observe_last_prints_only_the_last_events() {
    if !plumb_testkit::privileged(&["ip", "iptables-nft-restore", "iptables-nft-save"]) {
        return;
    }
    let ns = netns_with(
        "plumb-observe-last",
        "*filter\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -d 10.43.0.7/32 -p udp -j DROP\nCOMMIT\n",
    );
    let observer = observe(&[
        "--netns",
        ns.name(),
        "--duration",
        "3",
        "--last",
        "1",
        "--verdict",
        "dropped",
        "-o",
        "json",
    ]);
    let name = ns.name().to_string();
    for port in [51, 52, 53] {
        let _ = plumb_os::netns::on_thread(Some(&name), || {
            let s = std::net::UdpSocket::bind("127.0.0.1:0")?;
            s.send_to(b"x", ("10.43.0.7", port))
        });
        std::thread::sleep(Duration::from_millis(400));
    }
    let lines = json_lines(observer);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["l4"]["UDP"]["destination_port"], 53, "{lines:?}");
}

/// On kube-proxy's nftables mode (its own transaction from the Kubernetes tests,
/// loaded into a private namespace): a connection to a ClusterIP is named as its
/// Service with the endpoint its DNAT chose, and a drop by a rule without a `counter`
/// statement is reported with why no rule can be named — never a guess.
#[test]
fn observe_on_kube_proxy_nftables_mode() {
    if !plumb_testkit::privileged(&["ip", "nft", "iptables-nft-save"]) {
        return;
    }
    let Some((_, ordered)) = plumb_testkit::kube_proxy_nft_transaction() else {
        return;
    };
    let ns = plumb_os::netns::Netns::create("plumb-observe-nftmode").expect("a private namespace");
    for args in [
        &["link", "set", "lo", "up"][..],
        &["route", "add", "172.30.0.0/16", "dev", "lo"],
        &["route", "add", "10.180.0.0/16", "dev", "lo"],
    ] {
        let (ok, _, err) = ns.exec("ip", args, None).unwrap();
        assert!(ok, "{err}");
    }
    let (ok, _, err) = ns.exec("nft", &["-f", "-"], Some(&ordered)).unwrap();
    assert!(ok, "{err}");
    let observer = observe(&["--netns", ns.name(), "--duration", "3", "-o", "json"]);
    let name = ns.name().to_string();
    for to in ["172.30.0.41:80", "172.30.0.99:80"] {
        let _ = plumb_os::netns::on_thread(Some(&name), || {
            std::net::TcpStream::connect_timeout(&to.parse().unwrap(), Duration::from_millis(300))
        });
    }
    let lines = json_lines(observer);
    let flow = lines
        .iter()
        .find(|v| v["conntrack"] == "NEW" && v["IP"]["destination"] == "172.30.0.41")
        .unwrap_or_else(|| panic!("no flow to 172.30.0.41: {lines:?}"));
    assert_eq!(
        flow["destination_service"],
        serde_json::json!({"namespace": "ns1", "name": "svc1"})
    );
    assert_eq!(flow["translated_destination"], "10.180.0.1:80");
    let dropped = lines
        .iter()
        .find(|v| v["drop_reason"] == "NETFILTER_DROP" && v["IP"]["destination"] == "172.30.0.99")
        .unwrap_or_else(|| panic!("no netfilter drop to 172.30.0.99: {lines:?}"));
    let rule = &dropped["rule"];
    assert_eq!(rule["status"], "not_found", "{rule}");
    let why = rule["why"].as_str().unwrap();
    assert!(
        why.contains("Drop traffic to unallocated ClusterIPs") && why.contains("no counter"),
        "{why}"
    );
}

/// `--enable-accounting` turns conntrack's counters and timestamps on in the watched
/// namespace only, DESTROY lines then carry bytes, packets and a duration, and an
/// interrupted observe (SIGINT) puts the settings back.
#[test]
fn observe_enable_accounting_counts_and_restores_on_interrupt() {
    if !plumb_testkit::privileged(&["ip", "iptables-nft-restore", "kill"]) {
        return;
    }
    let ns = netns_with(
        "plumb-observe-acct-cli",
        "*nat\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -d 10.43.0.1/32 -p tcp -m tcp --dport 443 -j DNAT --to-destination 127.0.0.1:8443\nCOMMIT\n",
    );
    let sysctl = |key: &str| {
        let (ok, out, err) = ns.exec("sysctl", &["-n", key], None).unwrap();
        assert!(ok, "{err}");
        out.trim().to_string()
    };
    let before = (
        sysctl("net.netfilter.nf_conntrack_acct"),
        sysctl("net.netfilter.nf_conntrack_timestamp"),
    );
    assert_eq!(
        before,
        ("0".into(), "0".into()),
        "a fresh namespace starts with both off"
    );
    let observer = observe(&["--netns", ns.name(), "--enable-accounting", "-o", "json"]);
    assert_eq!(sysctl("net.netfilter.nf_conntrack_acct"), "1");
    let name = ns.name().to_string();
    let server = plumb_os::netns::on_thread(Some(&name), || {
        std::net::TcpListener::bind("127.0.0.1:8443")
    })
    .unwrap();
    {
        let c = plumb_os::netns::on_thread(Some(&name), || {
            std::net::TcpStream::connect_timeout(
                &"10.43.0.1:443".parse().unwrap(),
                Duration::from_secs(1),
            )
        })
        .unwrap();
        let (s, _) = server.accept().unwrap();
        drop(c);
        drop(s);
    }
    // The closed connection's DESTROY comes when conntrack's TIME_WAIT ends; a NEW and
    // an UPDATE carry the counters already. Give the events a moment, then interrupt.
    std::thread::sleep(Duration::from_millis(500));
    let killed = Command::new("kill")
        .args(["-INT", &observer.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let lines = json_lines(observer);
    assert!(
        lines.iter().any(|v| v["traffic"]["packets_original"]
            .as_u64()
            .is_some_and(|p| p > 0)),
        "counters on some line: {lines:?}"
    );
    assert_eq!(
        (
            sysctl("net.netfilter.nf_conntrack_acct"),
            sysctl("net.netfilter.nf_conntrack_timestamp"),
        ),
        before,
        "restored after SIGINT"
    );
}

/// A packet a tc BPF filter drops (as Cilium's datapath does at tc) is a drop with reason
/// TC_EGRESS whose line says that no netfilter rule is involved and where to look.
#[test]
fn observe_says_a_tc_drop_is_not_netfilters() {
    if !plumb_testkit::privileged(&["ip", "tc", "iptables-nft-restore"]) {
        return;
    }
    let ns = netns_with(
        "plumb-observe-tc",
        "*filter\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n",
    );
    for args in [
        &["qdisc", "add", "dev", "lo", "clsact"][..],
        // A classic-BPF filter in direct-action mode answering TC_ACT_SHOT (2) for
        // every packet: a datapath dropping at tc, as Cilium's does.
        &[
            "filter",
            "add",
            "dev",
            "lo",
            "egress",
            "bpf",
            "da",
            "bytecode",
            "1,6 0 0 2,",
        ],
    ] {
        let (ok, _, err) = ns.exec("tc", args, None).unwrap();
        assert!(ok, "tc {args:?}: {err}");
    }
    let observer = observe(&[
        "--netns",
        ns.name(),
        "--duration",
        "2",
        "--verdict",
        "dropped",
        "-o",
        "json",
    ]);
    let name = ns.name().to_string();
    let _ = plumb_os::netns::on_thread(Some(&name), || {
        let s = std::net::UdpSocket::bind("127.0.0.1:0")?;
        s.send_to(b"x", "10.43.0.9:53")
    });
    let lines = json_lines(observer);
    let dropped = lines
        .iter()
        .find(|v| v["IP"]["destination"] == "10.43.0.9")
        .unwrap_or_else(|| panic!("no drop to 10.43.0.9: {lines:?}"));
    assert_eq!(dropped["drop_reason"], "TC_EGRESS", "{dropped}");
    assert_eq!(dropped["rule"]["status"], "not_found");
    assert!(
        dropped["rule"]["why"]
            .as_str()
            .unwrap()
            .contains("not by netfilter"),
        "{dropped}"
    );
}

/// A `--enable-accounting` run killed with SIGKILL runs no destructor: its marker under
/// /run/plumb keeps the old values, and the next `plumb observe` (any namespace) puts
/// them back, says so, and removes the marker.
#[test]
fn observe_restores_accounting_a_killed_run_left_on() {
    if !plumb_testkit::privileged(&["ip", "iptables-nft-restore", "sysctl"]) {
        return;
    }
    let ns = netns_with(
        "plumb-observe2-acct-kill",
        "*nat\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -d 10.43.0.1/32 -j ACCEPT\nCOMMIT\n",
    );
    let sysctl = |key: &str| {
        let (ok, out, err) = ns.exec("sysctl", &["-n", key], None).unwrap();
        assert!(ok, "{err}");
        out.trim().to_string()
    };
    let both = || {
        (
            sysctl("net.netfilter.nf_conntrack_acct"),
            sysctl("net.netfilter.nf_conntrack_timestamp"),
        )
    };
    assert_eq!(both(), ("0".into(), "0".into()), "a fresh namespace");
    let mut killed = observe(&["--netns", ns.name(), "--enable-accounting"]);
    assert_eq!(both(), ("1".into(), "1".into()));
    killed.kill().unwrap(); // SIGKILL
    let _ = killed.wait();
    assert_eq!(both(), ("1".into(), "1".into()), "nothing ran at the kill");
    let inode = plumb_os::netns::inode_of(ns.name()).unwrap();
    let marker = std::path::PathBuf::from(format!(
        "/run/plumb/observe-accounting/netns-{}-{inode}",
        ns.name()
    ));
    assert!(marker.is_file(), "{} kept", marker.display());

    let next = Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(["observe", "--netns", ns.name(), "--duration", "0.5"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&next.stderr);
    assert!(next.status.success(), "{stderr}");
    assert_eq!(both(), ("0".into(), "0".into()), "put back: {stderr}");
    assert!(
        stderr.contains("put back nf_conntrack_acct=0, nf_conntrack_timestamp=0")
            && stderr.contains(ns.name()),
        "{stderr}"
    );
    assert!(!marker.exists(), "marker removed");
}

/// `--confirm-with-trace` writes a table: refused in the host's namespace, whether
/// unnamed or named.
#[test]
fn observe_refuses_trace_confirmation_outside_a_lab_or_own_namespace() {
    if !plumb_testkit::privileged(&["ip"]) {
        return;
    }
    let host_tables = Command::new("nft").args(["list", "tables"]).output().ok();
    let out = Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(["observe", "--confirm-with-trace", "--duration", "1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--confirm-with-trace") && stderr.contains("--lab"),
        "{stderr}"
    );
    // The host's namespace under a name of its own (`ip netns attach NAME PID` of this process; deleting
    // the name later removes only the name).
    let name = format!("plumb-observe2-hostalias-{}", std::process::id());
    let attached = Command::new("ip")
        .args(["netns", "attach", &name, &std::process::id().to_string()])
        .status()
        .unwrap()
        .success();
    let out = attached.then(|| {
        Command::new(env!("CARGO_BIN_EXE_plumb"))
            .args([
                "observe",
                "--netns",
                &name,
                "--confirm-with-trace",
                "--duration",
                "1",
            ])
            .output()
            .unwrap()
    });
    if attached {
        let _ = Command::new("ip").args(["netns", "delete", &name]).status();
    }
    let out = out.expect("the host's namespace attached under a name");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is the host's namespace"), "{stderr}");
    if let Some(before) = host_tables {
        let after = Command::new("nft")
            .args(["list", "tables"])
            .output()
            .unwrap();
        assert_eq!(
            before.stdout, after.stdout,
            "the host's ruleset is untouched"
        );
    }
}

/// When the output is behind (nobody reads plumb's stdout for a while), identical drops
/// are printed once with their number in `count`, said once in a notice, instead of
/// being lost: the counts of the lines (plus any events reported lost) add up to the
/// drops made.
#[test]
fn observe_aggregates_identical_drops_when_the_output_is_behind() {
    if !plumb_testkit::privileged(&["ip", "iptables-nft-restore"]) {
        return;
    }
    let ns = netns_with(
        &format!("plumb-drops-agg-{}", std::process::id()),
        "*raw\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -d 10.43.0.7/32 -j DROP\nCOMMIT\n",
    );
    let mut observer = observe(&[
        "--netns",
        ns.name(),
        "--duration",
        "8",
        "--verdict",
        "dropped",
        "-o",
        "json",
    ]);
    // Nobody reads stdout while the drops are made: plumb's writes block once the pipe
    // and its buffer are full, and its queue fills behind them.
    let made: u64 = 100_000;
    plumb_os::netns::on_thread(Some(ns.name()), || {
        let s = std::net::UdpSocket::bind("127.0.0.1:0")?;
        for _ in 0..made {
            s.send_to(b"x", "10.43.0.7:53")?;
        }
        Ok::<(), std::io::Error>(())
    })
    .expect("sends");
    let lines = json_lines_of(&mut observer);
    let (mut counted, mut lost, mut aggregated) = (0u64, 0u64, 0u64);
    for v in &lines {
        if v["IP"]["destination"] == "10.43.0.7" {
            let n = v["count"].as_u64().unwrap_or(1);
            counted += n;
            if n > 1 {
                aggregated += 1;
            }
        }
        lost += v["lost_events"]["num_events_lost"].as_u64().unwrap_or(0);
    }
    eprintln!("{counted} drops in the lines ({aggregated} lines with a count), {lost} lost");
    assert!(aggregated > 0, "no line with a count");
    assert!(
        lines
            .iter()
            .any(|v| v["notice"].as_str().is_some_and(|n| n.contains("count"))),
        "no notice about aggregation"
    );
    assert_eq!(counted + lost, made, "lines {counted}, lost {lost}");
}

/// Reads the JSON lines of a running observer until it ends (bounded: 60 s).
fn json_lines_of(child: &mut Child) -> Vec<serde_json::Value> {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let lines: Vec<String> = BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect();
        let _ = tx.send(lines);
    });
    let lines = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("observe ends after --duration");
    let status = child.wait().unwrap();
    assert!(status.success(), "exit {status:?}");
    lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}
