//! Privileged end-to-end tests: each scenario comes up, shows its symptom with real
//! packets, and `down` leaves nothing behind. Run serially (`--test-threads=1`): there is
//! one lab per machine. Skipped (with a reason) when not root.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use plumb_lab::layout::paths;
use plumb_lab::probe::Connect;
use plumb_lab::{Lab, LabOptions, Scenario};

fn root_or_skip() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root (network namespaces, iptables)");
        return false;
    }
    true
}

fn up(scenario: Scenario) -> Lab {
    up_with(scenario, LabOptions::default())
}

fn up_with(scenario: Scenario, mut opts: LabOptions) -> Lab {
    opts.actor_exe = Some(env!("CARGO_BIN_EXE_plumb-lab-actor").into());
    // A previous failed run may have left a lab: start clean.
    let _ = plumb_lab::down();
    let start = Instant::now();
    let lab = Lab::up_with(scenario, opts).unwrap_or_else(|e| panic!("{scenario} up: {e}"));
    eprintln!(
        "{scenario}: ready in {:.2} s",
        start.elapsed().as_secs_f64()
    );
    lab
}

fn assert_clean_after_down(lab: Lab) {
    let report = lab.down();
    assert!(report.errors.is_empty(), "down errors: {:?}", report.errors);
    let left = plumb_lab::leftovers();
    assert!(left.is_empty(), "leftovers after down: {left:?}");
    // down is idempotent
    let again = plumb_lab::down();
    assert!(again.was_clean() && again.errors.is_empty(), "{again:?}");
}

fn connect(lab: &Lab, from_pod: bool, addr: SocketAddr, timeout: Duration) -> Connect {
    if from_pod {
        lab.connect_from_pod(0, addr, timeout).unwrap()
    } else {
        lab.connect_from_node(addr, timeout).unwrap()
    }
}

#[test]
fn healthy() {
    if !root_or_skip() {
        return;
    }
    let lab = up(Scenario::Healthy);
    let svc = lab.cluster_ip();
    assert_eq!(
        connect(&lab, false, svc, Duration::from_secs(2)),
        Connect::Connected
    );
    assert_eq!(
        connect(&lab, true, svc, Duration::from_secs(2)),
        Connect::Connected
    );
    assert_eq!(
        connect(&lab, false, lab.api_endpoint(), Duration::from_secs(2)),
        Connect::Connected
    );
    let h = lab.kube_proxy_health("/healthz").unwrap();
    assert_eq!(h.status, 200, "{}", h.body);
    assert!(h.body.contains("\"nodeEligible\": true"), "{}", h.body);
    assert_eq!(lab.kube_proxy_health("/livez").unwrap().status, 200);
    lab.wait_until(
        "install-cni to write the CNI config",
        Duration::from_secs(20),
        |lab| {
            !lab.read(&format!("{}/10-canal.conflist", paths::CNI_NET_DIR))
                .is_empty()
        },
    )
    .unwrap();
    assert!(!lab.pod_logs("install-cni").contains("FATAL"));
    assert_clean_after_down(lab);
}

#[test]
fn security_agent_revert() {
    if !root_or_skip() {
        return;
    }
    let lab = up(Scenario::SecurityAgentRevert);
    let svc = lab.cluster_ip();
    // Works at first...
    assert_eq!(
        connect(&lab, false, svc, Duration::from_secs(2)),
        Connect::Connected
    );
    // ...then the agent reverts kube-proxy's rules within seconds.
    lab.wait_until("the agent's first revert", Duration::from_secs(15), |lab| {
        lab.read(paths::VEN_LOG)
            .contains("Successfully reverted out of band firewall changes")
    })
    .unwrap();
    // and keeps failing: most connects time out (kube-proxy's resyncs open windows of
    // at most the agent's interval).
    let mut timeouts = 0;
    for _ in 0..5 {
        if connect(&lab, false, svc, Duration::from_secs(1)) == Connect::TimedOut {
            timeouts += 1;
        }
    }
    assert!(timeouts >= 3, "only {timeouts}/5 connects timed out");
    // The API endpoint itself works.
    assert_eq!(
        connect(&lab, false, lab.api_endpoint(), Duration::from_secs(2)),
        Connect::Connected
    );
    lab.wait_until(
        "kube-proxy's restore failure",
        Duration::from_secs(20),
        |lab| {
            let log = lab.pod_logs("kube-proxy");
            log.contains("\"Failed to execute iptables-restore\"") && log.contains("does not exist")
        },
    )
    .unwrap();
    lab.wait_until("install-cni's FATAL", Duration::from_secs(20), |lab| {
        lab.pod_logs("install-cni").contains("[FATAL]")
    })
    .unwrap();
    let cni = lab.pod_logs("install-cni");
    assert!(cni.contains("Unable to create token for CNI kubeconfig error=Post \"https://10.43.0.1:443/api/v1/namespaces/kube-system/serviceaccounts/canal/token\": dial tcp 10.43.0.1:443: i/o timeout"), "{cni}");
    let agent = lab.read(paths::VEN_LOG);
    assert!(agent.contains("FW tampering has been detected"), "{agent}");
    assert_clean_after_down(lab);
}
