//! `shadow::inbound`: what the host firewall's INPUT does with a port other nodes send
//! to (`plumb cilium preflight`'s tunnel ports), judged from every outcome of the trace.
//!
//! The data file is the real ruleset of the lab's `ufw-active` node (UFW 0.36 enabled
//! with its defaults beside kube-proxy, dumped with `iptables-save` v1.8.9 nf_tables).

use plumb_check::checks::shadow::{Inbound, inbound};
use plumb_check::{CheckInput, Origin};
use plumb_ruleset::format::{ParseOptions, parse_bytes};
use plumb_trace::Proto;

const UFW_LAB: &str = include_str!("data/ufw-active-lab.iptables-save");

fn judge(text: &str, proto: Proto, port: u16) -> Inbound {
    let rs = parse_bytes(text.as_bytes(), &ParseOptions::default())
        .expect("the dump reads")
        .ruleset;
    let input = CheckInput::new(&rs, Origin::File("ufw".into()), false);
    inbound(&input, proto, port)
}

/// UFW's after-logging chain logs with `-m limit` before the DROP policy: the trace
/// forks on the rate limit (logged or not), and both branches meet the same policy.
/// The port is blocked, not "may be" (it was `Maybe`, "it rests on: limit").
#[test]
fn ufw_rate_limited_log_before_the_drop_policy_is_blocked_not_maybe() {
    assert!(UFW_LAB.contains("-A ufw-after-logging-input -m limit"));
    for port in [8472, 8473, 6081] {
        match judge(UFW_LAB, Proto::Udp, port) {
            Inbound::Blocked { rule, evidence } => {
                assert!(
                    rule.contains("policy DROP of filter INPUT"),
                    "{port}: {rule}"
                );
                assert!(!evidence.is_empty(), "{port}");
            }
            other => panic!("{port}/udp: {other:?}"),
        }
    }
}

/// The lab ruleset with `rule` appended to the filter table (before its COMMIT).
fn with_filter_rule(rule: &str) -> String {
    let filter_at = UFW_LAB.find("*filter").expect("a filter table");
    format!(
        "{}{}",
        &UFW_LAB[..filter_at],
        UFW_LAB[filter_at..].replacen("COMMIT\n", &format!("{rule}\nCOMMIT\n"), 1)
    )
}

/// A port UFW allows stays open on the same ruleset.
#[test]
fn a_port_ufw_allows_is_open() {
    let text = with_filter_rule("-A ufw-user-input -p udp -m udp --dport 8472 -j ACCEPT");
    assert_eq!(judge(&text, Proto::Udp, 8472), Inbound::Open);
}

/// A fork whose outcomes really differ stays open: a rate-limited ACCEPT for the port
/// before the DROP policy lets some packets through and stops others.
#[test]
fn a_fork_with_different_verdicts_stays_maybe() {
    let text = with_filter_rule(
        "-A ufw-user-input -p udp -m udp --dport 8472 -m limit --limit 10/sec -j ACCEPT",
    );
    match judge(&text, Proto::Udp, 8472) {
        Inbound::Maybe { rule, why, .. } => {
            assert!(rule.contains("policy DROP of filter INPUT"), "{rule}");
            assert!(why.contains("other outcomes"), "{why}");
            assert!(why.contains("limit"), "{why}");
        }
        other => panic!("{other:?}"),
    }
}
