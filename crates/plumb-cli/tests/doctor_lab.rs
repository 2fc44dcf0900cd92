//! Privileged end to end: for every lab scenario, `plumb doctor --lab --json` names the
//! scenario's root cause (docs/lab.md), and on `healthy` it reports no problem at all.
//! One lab per machine: run with `--test-threads=1`. Skipped (with a reason) when not root.

use plumb_lab::layout::paths;
use plumb_lab::{Backend, Lab, LabOptions, Scenario};
use std::time::Duration;

fn root_or_skip() -> bool {
    plumb_testkit::privileged(&["ip", "iptables-nft-restore", "ufw"])
}

fn up_on(scenario: Scenario, backend: Backend) -> Lab {
    let _ = plumb_lab::down();
    let opts = LabOptions {
        actor_exe: Some(env!("CARGO_BIN_EXE_plumb").into()),
        backend,
        ..LabOptions::default()
    };
    Lab::up_with(scenario, opts).unwrap_or_else(|e| panic!("{scenario} up: {e}"))
}

/// Runs `plumb doctor --lab --json`; returns (exit code, report).
fn doctor() -> (i32, serde_json::Value) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(["doctor", "--lab", "--json"])
        .output()
        .expect("running plumb doctor");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor JSON: {e}\n{}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap_or(-1), report)
}

fn problems(report: &serde_json::Value) -> Vec<String> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["status"] == "problem")
        .map(|f| f["id"].as_str().unwrap().to_string())
        .collect()
}

fn expect_root_cause(scenario: Scenario, id: &str, wait: impl FnMut(&Lab) -> bool, what: &str) {
    expect_root_cause_on(Backend::Nft, scenario, id, wait, what);
}

fn expect_root_cause_on(
    backend: Backend,
    scenario: Scenario,
    id: &str,
    wait: impl FnMut(&Lab) -> bool,
    what: &str,
) {
    if !root_or_skip() {
        return;
    }
    let lab = up_on(scenario, backend);
    lab.wait_until(what, Duration::from_secs(60), wait)
        .unwrap_or_else(|e| panic!("{scenario}: {e}"));
    let (code, report) = doctor();
    assert_eq!(
        report["root_cause"],
        id,
        "{scenario}: problems {:?}\n{}",
        problems(&report),
        serde_json::to_string_pretty(&report).unwrap()
    );
    assert_eq!(code, 1, "{scenario}: a root cause means exit 1");
    let down = lab.down();
    assert!(down.errors.is_empty(), "{:?}", down.errors);
}

#[test]
fn healthy_has_no_problem_at_all() {
    healthy_on(Backend::Nft);
}

/// An iptables-legacy node: kube-proxy's rules live in the legacy tables only, which is
/// no backend mix and no problem.
#[test]
fn healthy_on_legacy_has_no_problem_at_all() {
    healthy_on(Backend::Legacy);
}

fn healthy_on(backend: Backend) {
    if !root_or_skip() {
        return;
    }
    let lab = up_on(Scenario::Healthy, backend);
    lab.wait_until(
        "install-cni to write the CNI config",
        Duration::from_secs(60),
        |l| {
            l.read(&format!("{}/10-canal.conflist", paths::CNI_NET_DIR))
                .contains('{')
        },
    )
    .unwrap();
    let (code, report) = doctor();
    assert_eq!(report["root_cause"], serde_json::Value::Null);
    assert_eq!(
        problems(&report),
        Vec::<String>::new(),
        "zero false positives on a healthy node"
    );
    assert_eq!(code, 0);
    assert_eq!(report["version"], 1);
    drop(lab);
}

/// The agent reverted at least once and install-cni gave up (the security-agent incident's symptoms).
fn agent_incident_seen(l: &Lab) -> bool {
    l.read(paths::VEN_LOG).contains("reverted") && l.pod_logs("install-cni").contains("FATAL")
}

#[test]
fn security_agent_revert_is_the_agent() {
    expect_root_cause(
        Scenario::SecurityAgentRevert,
        "security-agent-tamper",
        agent_incident_seen,
        "a revert and install-cni's FATAL",
    );
}

/// The same incident on an iptables-legacy node (the restore failure reads
/// "Couldn't load target" there).
#[test]
fn security_agent_revert_on_legacy_is_the_agent() {
    expect_root_cause_on(
        Backend::Legacy,
        Scenario::SecurityAgentRevert,
        "security-agent-tamper",
        agent_incident_seen,
        "a revert and install-cni's FATAL",
    );
}

#[test]
fn ufw_active_is_ufw() {
    expect_root_cause(
        Scenario::UfwActive,
        "host-firewall-ufw",
        |l| {
            l.node_output(&["iptables-save", "-t", "filter"])
                .is_ok_and(|s| s.contains(":ufw-"))
        },
        "UFW's chains",
    );
}

#[test]
fn probe_semantics_is_probe_semantics() {
    expect_root_cause(
        Scenario::ProbeSemantics,
        "kube-proxy-probe-semantics",
        |l| {
            l.kube_proxy_health("/healthz")
                .is_ok_and(|h| h.status == 503)
        },
        "/healthz 503",
    );
}

#[test]
fn backend_mix_is_backend_mix() {
    expect_root_cause(
        Scenario::BackendMix,
        "iptables-backend-mix",
        |l| {
            l.node_output(&["iptables-legacy-save"])
                .is_ok_and(|s| s.contains("KUBE-SERVICES"))
        },
        "stale legacy rules",
    );
}

#[test]
fn no_endpoints_is_no_endpoints() {
    expect_root_cause(
        Scenario::NoEndpoints,
        "service-no-endpoints",
        |l| {
            l.node_output(&["iptables-save", "-t", "filter"])
                .is_ok_and(|s| s.contains("has no endpoints"))
        },
        "kube-proxy's REJECT rules",
    );
}

#[test]
fn sysctl_missing_is_the_sysctl() {
    expect_root_cause(
        Scenario::SysctlMissing,
        "sysctl-requirement",
        |_| true,
        "nothing",
    );
}
