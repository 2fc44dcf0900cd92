//! Privileged, with the lab: `plumb watch --lab` names venAgent (Illumio VEN) as the writer
//! that deletes kube-proxy's chains and reports the fight, names real UFW as the writer of
//! its policy change and chains (`ufw-active`), and on a healthy node with kube-proxy
//! syncing it reports no foreign change for a minute; on an iptables-legacy lab the
//! agent is named through audit. One lab per machine:
//! `--test-threads=1`. Skipped (with a reason) when not root.

mod common;

use common::{Child, T, Watch};
use plumb_lab::{Backend, Lab, LabOptions, Scenario};
use serde_json::Value;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Runs `argv` in the lab's node namespace (with its private UFW files), bounded by `T`.
fn node_run(lab: &Lab, argv: &[&str]) {
    let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
    let mut child = Child(
        plumb_lab::ufw::node_command(lab.root(), &argv)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{argv:?}: {e}")),
    );
    let deadline = Instant::now() + T;
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "{argv:?} did not end in {T:?}");
        std::thread::park_timeout(Duration::from_millis(20));
    };
    assert!(status.success(), "{argv:?}: {status}");
}

fn up(scenario: Scenario) -> Option<Lab> {
    up_on(scenario, Backend::Nft)
}

fn up_on(scenario: Scenario, backend: Backend) -> Option<Lab> {
    if !plumb_testkit::privileged(&["ip", "iptables-nft-restore", "ufw"]) {
        return None;
    }
    let _ = plumb_lab::down();
    let opts = LabOptions {
        actor_exe: Some(env!("CARGO_BIN_EXE_plumb").into()),
        backend,
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
    let by_agent = assert_agent_reverts_reported(&lab);
    assert!(by_agent["generation"].is_u64(), "{by_agent}");
}

/// The same incident on an iptables-legacy node: no netlink events there, audit's
/// NETFILTER_CFG records trigger the re-read and name the writer.
#[test]
fn venagent_reverts_on_legacy_are_attributed_through_audit() {
    let Some(lab) = up_on(Scenario::SecurityAgentRevert, Backend::Legacy) else {
        return;
    };
    // Enabled for the test only if it was off, restored on drop.
    let _audit = plumb_watch::audit_control::AuditEnabled::new().ok();
    let by_agent = assert_agent_reverts_reported(&lab);
    // Read from the legacy tables: no nf_tables generation.
    assert!(by_agent["generation"].is_null(), "{by_agent}");
}

/// Watches the running lab until the agent's revert of kube-proxy's chains and the fight
/// with kube-proxy are reported (each bounded by [`common::T`]: a loaded machine slows the
/// revert cycle, so a fixed watch window would miss the third revert); returns the
/// agent's event.
fn assert_agent_reverts_reported(_lab: &Lab) -> Value {
    let w = Watch::start(&["--lab", "--json", "--duration", "300"]);
    let by_agent = w.wait_event(
        &|e| {
            e["kind"] == "foreign-change"
                && e["actor"]["identity"]["name"] == "illumio-ven"
                && e["owner"] == "kube-proxy"
        },
        "revert of kube-proxy's chains attributed to the agent",
    );
    assert_eq!(by_agent["netns"], "plumb-node");
    w.wait_event(
        &|e| {
            e["kind"] == "foreign-change"
                && e["chains"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|c| c == "KUBE-SERVICES"))
        },
        "KUBE-SERVICES deletion",
    );
    let fight = w.wait_event(&|e| e["kind"] == "fight", "fight with kube-proxy");
    assert!(fight.to_string().contains("kube-proxy"), "{fight}");
    by_agent
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

#[test]
fn ufw_policy_change_and_chains_are_attributed_to_ufw() {
    let Some(lab) = up(Scenario::UfwActive) else {
        return;
    };
    // Real UFW writes through short-lived iptables children of its ufw-init script:
    // audit (exe, ppid) names the parent when a child is gone before plumb looks.
    // Enabled for the test only if it was off, restored on drop.
    let _audit = plumb_watch::audit_control::AuditEnabled::new().ok();
    let w = Watch::start(&["--lab", "--json", "--duration", "90"]);
    // UFW off (policies back to ACCEPT, its chains flushed), then on again: FORWARD
    // to DROP, its chains filled and hooked into INPUT/FORWARD/OUTPUT.
    node_run(&lab, &["ufw", "--force", "disable"]);
    node_run(&lab, &["ufw", "--force", "enable"]);
    let by_ufw = |v: &Value| v["actor"]["identity"]["name"] == "ufw";
    let policy = w.wait_event(
        &|v| {
            v["kind"] == "policy-change"
                && v["chains"] == serde_json::json!(["FORWARD"])
                && v["details"].to_string().contains("-> DROP")
                && by_ufw(v)
        },
        "FORWARD policy change to DROP attributed to ufw",
    );
    assert_eq!(policy["netns"], "plumb-node", "{policy}");
    assert_eq!(policy["table"], "filter", "{policy}");
    let chains = w.wait_event(
        &|v| {
            v["owner"] == "ufw"
                && by_ufw(v)
                && v["chains"].as_array().is_some_and(|c| {
                    c.iter()
                        .any(|c| c.as_str().is_some_and(|c| c.starts_with("ufw-")))
                })
        },
        "ufw chains written by ufw",
    );
    assert_eq!(chains["kind"], "owner-change", "{chains}");
    drop(w);
    drop(lab);
}

/// firewalld's reload (its `iptables-restore` children, parent `firewalld`) flushes
/// kube-proxy's chains: a foreign change attributed to firewalld, and kube-proxy putting
/// them back.
#[test]
fn firewalld_reload_wipe_is_attributed_to_firewalld() {
    let Some(lab) = up(Scenario::FirewalldReload) else {
        return;
    };
    let w = Watch::start(&["--lab", "--json", "--duration", "120"]);
    // One flush per table (security, raw, mangle, nat, filter): the nat one takes the
    // Service chains.
    let wipe = w.wait_event(
        &|e| {
            e["kind"] == "foreign-change"
                && e["actor"]["identity"]["name"] == "firewalld"
                && e["owner"] == "kube-proxy"
                && e["table"] == "nat"
                && e["chains"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|c| c == "KUBE-SERVICES"))
        },
        "firewalld's flush of kube-proxy's nat chains",
    );
    assert_eq!(wipe["netns"], "plumb-node", "{wipe}");
    assert_eq!(wipe["actor"]["identity"]["kind"], "host-firewall", "{wipe}");
    w.wait_event(
        &|e| {
            e["kind"] == "foreign-change"
                && e["actor"]["identity"]["name"] == "firewalld"
                && e["chains"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|c| c == "CNI-HOSTPORT-DNAT"))
        },
        "firewalld's flush of the portmap plugin's hostPort DNAT",
    );
    drop(w);
    drop(lab);
}

/// calico-node (Felix) deleting kube-proxy's chains is named as calico-node, not as a
/// security agent.
#[test]
fn calico_node_cleanup_is_attributed_to_calico_node() {
    let Some(lab) = up(Scenario::CalicoBpfCleanup) else {
        return;
    };
    let w = Watch::start(&["--lab", "--json", "--duration", "120"]);
    let cleanup = w.wait_event(
        &|e| {
            e["kind"] == "foreign-change"
                && e["owner"] == "kube-proxy"
                && e["chains"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|c| c == "KUBE-SERVICES"))
        },
        "deletion of kube-proxy's KUBE-SERVICES",
    );
    assert_eq!(
        cleanup["actor"]["identity"]["name"], "calico-node",
        "{cleanup}"
    );
    assert_eq!(cleanup["actor"]["identity"]["kind"], "cni", "{cleanup}");
    drop(w);
    drop(lab);
}
