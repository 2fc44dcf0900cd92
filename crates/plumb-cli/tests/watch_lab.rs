//! Privileged, with the lab: `plumb watch --lab` names venAgent (Illumio VEN) as the writer
//! that deletes kube-proxy's chains and reports the fight, and on a healthy node with
//! kube-proxy syncing it reports no foreign change for a minute. One lab per machine:
//! `--test-threads=1`. Skipped (with a reason) when not root.

use plumb_lab::{Lab, LabOptions, Scenario};
use serde_json::Value;

fn up(scenario: Scenario) -> Option<Lab> {
    if !plumb_testkit::privileged(&["ip", "iptables-nft-restore", "ufw"]) {
        return None;
    }
    let _ = plumb_lab::down();
    let opts = LabOptions {
        actor_exe: Some(env!("CARGO_BIN_EXE_plumb").into()),
        ..LabOptions::default()
    };
    Some(Lab::up_with(scenario, opts).unwrap_or_else(|e| panic!("{scenario} up: {e}")))
}

/// Runs `plumb watch --lab --json --duration SECS`; returns the events and the summary.
fn watch(secs: u32) -> (Vec<Value>, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(["watch", "--lab", "--json", "--duration", &secs.to_string()])
        .output()
        .expect("running plumb watch");
    let events = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    (events, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn venagent_reverts_are_attributed_and_the_fight_reported() {
    let Some(lab) = up(Scenario::SecurityAgentRevert) else {
        return;
    };
    let (events, summary) = watch(20);
    let foreign: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "foreign-change")
        .collect();
    assert!(!foreign.is_empty(), "no foreign change in 20 s\n{summary}");
    let by_agent = foreign
        .iter()
        .find(|e| e["actor"]["identity"]["name"] == "illumio-ven" && e["owner"] == "kube-proxy")
        .unwrap_or_else(|| panic!("no revert attributed to the agent: {foreign:?}"));
    assert_eq!(by_agent["netns"], "plumb-node");
    assert!(
        foreign.iter().any(|e| e["chains"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c == "KUBE-SERVICES"))),
        "KUBE-SERVICES deletion not reported"
    );
    let fight = events
        .iter()
        .find(|e| e["kind"] == "fight")
        .unwrap_or_else(|| panic!("no fight reported\n{summary}"));
    assert!(fight.to_string().contains("kube-proxy"), "{fight}");
    drop(lab);
}

#[test]
fn a_healthy_node_has_no_foreign_change_for_a_minute() {
    let Some(lab) = up(Scenario::Healthy) else {
        return;
    };
    let (events, summary) = watch(60);
    let foreign: Vec<&Value> = events
        .iter()
        .filter(|e| matches!(e["kind"].as_str(), Some("foreign-change" | "fight")))
        .collect();
    assert!(
        foreign.is_empty(),
        "false positives on a healthy node: {foreign:?}\n{summary}"
    );
    drop(lab);
}
