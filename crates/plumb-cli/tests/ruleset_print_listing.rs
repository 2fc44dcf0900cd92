//! `plumb ruleset print` of an `iptables -L` listing: rows that translate exactly print
//! as `iptables-save` rules, every other row is a `# not translated` comment with a
//! warning on stderr and exit status 1; no listing row is ever printed as a rule.

use std::path::PathBuf;
use std::process::{Command, Output};

/// Writes `text` to a file of this test process and runs `plumb ruleset print` on it.
fn print(name: &str, text: &str) -> Output {
    let dir = std::env::temp_dir().join(format!("plumb-print-listing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path: PathBuf = dir.join(name);
    std::fs::write(&path, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(["ruleset", "print"])
        .arg(&path)
        .env("NO_COLOR", "1")
        .output()
        .expect("running plumb");
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_dir(&dir);
    out
}

const VERBOSE_NAT: &str = "\
Chain PREROUTING (policy ACCEPT 0 packets, 0 bytes)
 pkts bytes target     prot opt in     out     source               destination
   10   600 KUBE-SERVICES  all  --  *      *       0.0.0.0/0            0.0.0.0/0            /* kubernetes service portals */

Chain INPUT (policy ACCEPT 0 packets, 0 bytes)
 pkts bytes target     prot opt in     out     source               destination

Chain OUTPUT (policy ACCEPT 0 packets, 0 bytes)
 pkts bytes target     prot opt in     out     source               destination

Chain POSTROUTING (policy ACCEPT 0 packets, 0 bytes)
 pkts bytes target     prot opt in     out     source               destination
    0     0 MASQUERADE  all  --  *      !docker0  172.17.0.0/16        0.0.0.0/0

Chain KUBE-SERVICES (1 references)
 pkts bytes target     prot opt in     out     source               destination
    0     0 DNAT       tcp  --  *      *       0.0.0.0/0            10.96.0.1            /* default/kubernetes:https */ tcp dpt:443 to:192.168.1.10:6443
";

#[test]
fn a_verbose_numeric_listing_prints_as_iptables_save() {
    let out = print("nat.nvL", VERBOSE_NAT);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert_eq!(
        stdout,
        "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n\
         -A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
         -A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE\n\
         -A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -m comment --comment \"default/kubernetes:https\" -m tcp --dport 443 -j DNAT --to-destination 192.168.1.10:6443\n\
         COMMIT\n"
    );
}

#[test]
fn rows_a_listing_does_not_show_whole_are_comments_a_warning_and_exit_1() {
    let plain = "\
Chain INPUT (policy ACCEPT)
target     prot opt source               destination
ACCEPT     all  --  0.0.0.0/0            0.0.0.0/0
REJECT     all  --  0.0.0.0/0            0.0.0.0/0            reject-with icmp-host-prohibited

Chain FORWARD (policy ACCEPT)
target     prot opt source               destination

Chain OUTPUT (policy ACCEPT)
target     prot opt source               destination
";
    let out = print("filter.nL", plain);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    for l in stdout.lines() {
        assert!(
            l.starts_with('*')
                || l.starts_with(':')
                || l.starts_with("# not translated")
                || l == "COMMIT",
            "{l:?} in {stdout}"
        );
    }
    assert_eq!(stdout.matches("# not translated").count(), 2, "{stdout}");
    assert!(
        stdout.contains("# not translated (line 4): listing made without -v"),
        "{stdout}"
    );
    assert!(
        stderr.contains("2 listed rule(s) could not be translated"),
        "{stderr}"
    );
    assert!(stderr.contains("NOT the whole ruleset"), "{stderr}");
}
