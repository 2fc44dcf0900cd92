//! Privileged end-to-end tests: each scenario comes up, shows its symptom with real
//! packets, and `down` leaves nothing behind. Run serially (`--test-threads=1`): there is
//! one lab per machine. Skipped (with a reason) when not root.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use plumb_lab::layout::paths;
use plumb_lab::probe::Connect;
use plumb_lab::{Lab, LabOptions, Scenario};

fn root_or_skip() -> bool {
    plumb_testkit::privileged(&[])
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

/// The agent's first revert comes within seconds, then most connects to the ClusterIP
/// time out (kube-proxy's resyncs open windows of at most the agent's interval).
fn assert_reverts_break_the_service(lab: &Lab, from_pod: bool) {
    lab.wait_until("the agent's first revert", Duration::from_secs(15), |lab| {
        lab.read(paths::VEN_LOG)
            .contains("Successfully reverted out of band firewall changes")
    })
    .unwrap();
    let mut timeouts = 0;
    for _ in 0..5 {
        if connect(lab, from_pod, lab.cluster_ip(), Duration::from_secs(1)) == Connect::TimedOut {
            timeouts += 1;
        }
    }
    assert!(timeouts >= 3, "only {timeouts}/5 connects timed out");
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
    // ...then the agent reverts kube-proxy's rules within seconds and it keeps failing.
    assert_reverts_break_the_service(&lab, false);
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

fn host_fingerprint() -> (String, Vec<u8>) {
    let rules = std::process::Command::new("iptables")
        .arg("-S")
        .output()
        .unwrap()
        .stdout;
    let mut ufw = Vec::new();
    for f in [
        "/etc/ufw/ufw.conf",
        "/etc/ufw/user.rules",
        "/etc/default/ufw",
    ] {
        ufw.extend(std::fs::read(f).unwrap_or_default());
    }
    (String::from_utf8_lossy(&rules).into_owned(), ufw)
}

/// The same incident on an iptables-legacy node: kube-proxy, kubelet and the agent all
/// write with iptables-legacy; the symptom and the logs are the same.
#[test]
fn security_agent_revert_on_legacy() {
    if !root_or_skip() {
        return;
    }
    let lab = up_with(
        Scenario::SecurityAgentRevert,
        LabOptions {
            backend: plumb_lab::Backend::Legacy,
            ..LabOptions::default()
        },
    );
    let svc = lab.cluster_ip();
    assert_eq!(
        connect(&lab, true, svc, Duration::from_secs(2)),
        Connect::Connected
    );
    // The rules are in the legacy tables, not in nftables.
    let legacy = lab
        .node_output(&["iptables-legacy-save", "-t", "nat"])
        .unwrap();
    assert!(legacy.contains("-A KUBE-SERVICES"), "{legacy}");
    let nft = lab
        .node_output(&["iptables-nft-save", "-t", "nat"])
        .unwrap();
    assert!(!nft.contains("KUBE-SERVICES"), "{nft}");
    assert_reverts_break_the_service(&lab, true);
    lab.wait_until(
        "kube-proxy's restore failure",
        Duration::from_secs(20),
        |lab| {
            lab.pod_logs("kube-proxy")
                .contains("\"Failed to execute iptables-restore\"")
        },
    )
    .unwrap_or_else(|e| panic!("{e}: {}", lab.pod_logs("kube-proxy")));
    // iptables-legacy-restore words the missing chain its own way (kube-proxy passes
    // the tool's message through).
    let log = lab.pod_logs("kube-proxy");
    assert!(log.contains("Couldn't load target"), "{log}");
    assert_clean_after_down(lab);
}

#[test]
fn ufw_active() {
    if !root_or_skip() {
        return;
    }
    let host_before = host_fingerprint();
    let lab = up(Scenario::UfwActive);
    let svc = lab.cluster_ip();
    let status = lab.node_output(&["ufw", "status", "verbose"]).unwrap();
    assert!(status.contains("Status: active"), "{status}");
    assert!(
        lab.node_output(&["iptables", "-S", "FORWARD"])
            .unwrap()
            .contains("-P FORWARD DROP")
    );
    // Pod -> Service is dropped in FORWARD; the node itself still reaches it.
    assert_eq!(
        connect(&lab, true, svc, Duration::from_secs(2)),
        Connect::TimedOut
    );
    assert_eq!(
        connect(&lab, false, svc, Duration::from_secs(2)),
        Connect::Connected
    );
    lab.wait_until("kube-proxy /healthz 503", Duration::from_secs(30), |lab| {
        lab.kube_proxy_health("/healthz")
            .is_ok_and(|r| r.status == 503)
    })
    .unwrap();
    assert!(
        lab.pod_logs("kube-proxy")
            .contains("holding the xtables lock")
    );
    lab.wait_until(
        "kubelet to restart kube-proxy",
        Duration::from_secs(30),
        |lab| {
            lab.read(paths::KUBELET_LOG)
                .contains("Container kube-proxy failed liveness probe, will be restarted")
        },
    )
    .unwrap();
    assert_clean_after_down(lab);
    assert_eq!(
        host_fingerprint(),
        host_before,
        "the host's firewall or UFW files changed"
    );
}

#[test]
fn probe_semantics() {
    if !root_or_skip() {
        return;
    }
    let lab = up(Scenario::ProbeSemantics);
    let h = lab.kube_proxy_health("/healthz").unwrap();
    assert_eq!(h.status, 503);
    assert!(h.body.contains("\"nodeEligible\": false"), "{}", h.body);
    let l = lab.kube_proxy_health("/livez").unwrap();
    assert_eq!(l.status, 200, "{}", l.body);
    assert!(!l.body.contains("nodeEligible"));
    // Rules intact: the Service works from the node and from a pod.
    assert_eq!(
        connect(&lab, false, lab.cluster_ip(), Duration::from_secs(2)),
        Connect::Connected
    );
    assert_eq!(
        connect(&lab, true, lab.cluster_ip(), Duration::from_secs(2)),
        Connect::Connected
    );
    assert!(
        lab.read(paths::KUBE_PROXY_MANIFEST)
            .contains("path: /healthz")
    );
    lab.wait_until(
        "kubelet to restart kube-proxy",
        Duration::from_secs(20),
        |lab| {
            lab.read(paths::KUBELET_LOG)
                .contains("failed liveness probe, will be restarted")
        },
    )
    .unwrap();
    assert_clean_after_down(lab);
}

#[test]
fn backend_mix() {
    if !root_or_skip() {
        return;
    }
    let lab = up(Scenario::BackendMix);
    let legacy = lab.node_output(&["iptables-legacy-save"]).unwrap();
    let nft = lab.node_output(&["iptables-nft-save"]).unwrap();
    assert!(
        legacy.contains(":KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]"),
        "{legacy}"
    );
    assert!(
        !legacy.contains("-A PREROUTING"),
        "the stale legacy rules are not hooked"
    );
    assert!(nft.contains(
        "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES"
    ));
    assert!(legacy.contains("192.168.100.99:6443") && !nft.contains("192.168.100.99"));
    assert_eq!(
        connect(&lab, true, lab.cluster_ip(), Duration::from_secs(2)),
        Connect::Connected
    );
    assert_clean_after_down(lab);
}

#[test]
fn no_endpoints() {
    if !root_or_skip() {
        return;
    }
    let lab = up(Scenario::NoEndpoints);
    lab.wait_until("kube-dns REJECT rules", Duration::from_secs(15), |lab| {
        lab.node_output(&["iptables-save", "-t", "filter"])
            .is_ok_and(|t| t.contains("kube-system/kube-dns:dns-tcp has no endpoints"))
    })
    .unwrap();
    let dns: SocketAddr = "10.43.0.10:53".parse().unwrap();
    match connect(&lab, true, dns, Duration::from_secs(2)) {
        Connect::Failed(e) => assert!(e.contains("refused"), "{e}"),
        other => panic!("expected a refused connection, got {other:?}"),
    }
    assert_eq!(
        connect(&lab, true, lab.cluster_ip(), Duration::from_secs(2)),
        Connect::Connected
    );
    assert_clean_after_down(lab);
}

#[test]
fn sysctl_missing() {
    if !root_or_skip() {
        return;
    }
    let lab = up(Scenario::SysctlMissing);
    assert_eq!(
        lab.node_output(&["sysctl", "-n", "net.ipv4.ip_forward"])
            .unwrap()
            .trim(),
        "0"
    );
    assert_eq!(
        connect(&lab, false, lab.cluster_ip(), Duration::from_secs(2)),
        Connect::Connected
    );
    assert_eq!(
        connect(&lab, true, lab.cluster_ip(), Duration::from_secs(2)),
        Connect::TimedOut
    );
    assert_clean_after_down(lab);
}

#[test]
fn a_second_up_is_refused_and_drop_cleans_up() {
    if !root_or_skip() {
        return;
    }
    let lab = up(Scenario::Healthy);
    let err = Lab::up_with(
        Scenario::Healthy,
        LabOptions {
            actor_exe: Some(env!("CARGO_BIN_EXE_plumb-lab-actor").into()),
            ..LabOptions::default()
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("already running"), "{err}");
    drop(lab);
    assert!(
        plumb_lab::leftovers().is_empty(),
        "{:?}",
        plumb_lab::leftovers()
    );
}

#[test]
fn down_after_a_crash_finds_leftovers_by_name() {
    if !root_or_skip() {
        return;
    }
    let lab = up(Scenario::SecurityAgentRevert);
    let state = lab.detach();
    // Simulate a crash: the state file is gone, processes and namespaces remain.
    std::fs::remove_file(plumb_lab::state::state_path()).unwrap();
    let left = plumb_lab::leftovers();
    assert!(
        !left.namespaces.is_empty() && !left.processes.is_empty(),
        "{left:?}"
    );
    let report = plumb_lab::down();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert!(
        plumb_lab::leftovers().is_empty(),
        "{:?}",
        plumb_lab::leftovers()
    );
    assert!(!state.root.exists());
}

/// Regression for the 10k-service lab benchmark: on nft, kube-proxy's emulator leads each table
/// of a full sync with a chainless `-S` (iptables-nft's per-chain cache request list is
/// quadratic; docs/lab.md). The kernel must end up exactly where kube-proxy's own bytes
/// (`--exact-restore-payload`) put it.
#[test]
fn nft_full_sync_listing_leaves_the_exact_payloads_ruleset() {
    if !root_or_skip() {
        return;
    }
    let save = |exact: bool| {
        let lab = up_with(
            Scenario::Healthy,
            LabOptions {
                services: Some(300),
                exact_restore_payload: exact,
                ..LabOptions::default()
            },
        );
        let text = lab.node_output(&["iptables-nft-save"]).unwrap();
        assert_clean_after_down(lab);
        plumb_lab::iptables::normalize_save(&text)
    };
    let hinted = save(false);
    let exact = save(true);
    assert!(
        hinted
            .lines()
            .filter(|l| l.starts_with("-A KUBE-SEP-"))
            .count()
            >= 600,
        "{hinted}"
    );
    assert!(hinted == exact, "the -S listing changed the ruleset");
}

/// The kernel refuses kube-proxy's iptables (the real iptables-nft prints its own
/// generation-id error): none of kube-proxy's rules exist, the ClusterIP times out, while
/// kubelet's iptables (the node's) writes fine.
#[test]
fn iptables_incompatible() {
    if !root_or_skip() {
        return;
    }
    let lab = up(Scenario::IptablesIncompatible);
    let log = lab.pod_logs("kube-proxy");
    assert!(
        log.contains("Could not fetch rule set generation id: Invalid argument"),
        "{log}"
    );
    assert!(log.contains("Failed to ensure chain exists"), "{log}");
    assert!(log.contains("Could not set up iptables canary"), "{log}");
    assert!(!log.contains("SyncProxyRules complete"), "{log}");
    let nat = lab.node_output(&["iptables-save", "-t", "nat"]).unwrap();
    assert!(!nat.contains("KUBE-SERVICES"), "{nat}");
    let mangle = lab.node_output(&["iptables-save", "-t", "mangle"]).unwrap();
    assert!(
        mangle.contains("KUBE-KUBELET-CANARY"),
        "kubelet writes: {mangle}"
    );
    assert_eq!(
        connect(&lab, false, lab.cluster_ip(), Duration::from_secs(1)),
        Connect::TimedOut
    );
    assert_clean_after_down(lab);
}

/// iptables-services' shipped rules: a pod's connect to the kubernetes Service is refused
/// at once with "no route to host" (ICMP host-prohibited) while the node's own connect
/// works; CoreDNS logs the refusals and stays not ready.
#[test]
fn host_reject() {
    if !root_or_skip() {
        return;
    }
    let host = host_fingerprint();
    let lab = up(Scenario::HostReject);
    let svc = lab.cluster_ip();
    assert_eq!(
        connect(&lab, false, svc, Duration::from_secs(2)),
        Connect::Connected
    );
    match connect(&lab, true, svc, Duration::from_secs(2)) {
        Connect::Failed(e) => assert!(e.contains("No route to host"), "{e}"),
        other => panic!("pod -> Service: {other:?}"),
    }
    let filter = lab.node_output(&["iptables-save", "-t", "filter"]).unwrap();
    assert!(
        filter.contains("-A FORWARD -j REJECT --reject-with icmp-host-prohibited"),
        "{filter}"
    );
    lab.wait_until("CoreDNS's refusals", Duration::from_secs(20), |l| {
        let log = l.pod_logs("coredns");
        log.contains("connect: no route to host")
            && log.contains("Still waiting on: \"kubernetes\"")
    })
    .unwrap();
    assert!(!lab.pod_logs("coredns").contains("connection established"));
    assert_clean_after_down(lab);
    assert_eq!(host_fingerprint(), host, "the host's firewall is untouched");
}

/// Felix (eBPF mode) deletes kube-proxy's Service chains and hook rules but not the
/// utility chains; kube-proxy's partial restores then fail on the missing chains.
#[test]
fn calico_bpf_cleanup() {
    if !root_or_skip() {
        return;
    }
    let lab = up(Scenario::CalicoBpfCleanup);
    lab.wait_until(
        "Felix's cleanup and a failed restore",
        Duration::from_secs(30),
        |l| {
            l.pod_logs("calico-node")
                .contains("Found unexpected chain, marking for cleanup chainName=\"KUBE-SVC-")
                && l.pod_logs("kube-proxy").contains("does not exist")
        },
    )
    .unwrap();
    let log = lab.pod_logs("calico-node");
    assert!(
        log.contains("BPF enabled, configuring iptables layer to clean up kube-proxy's rules."),
        "{log}"
    );
    // KUBE-NODEPORTS stays referenced from INPUT: Felix cannot delete it and gives up.
    assert!(log.contains("CHAIN_DEL failed (Device or resource busy): chain KUBE-NODEPORTS"));
    let nat = lab.node_output(&["iptables-save", "-t", "nat"]).unwrap();
    assert!(
        nat.contains(":KUBE-MARK-MASQ"),
        "utility chains stay: {nat}"
    );
    assert_clean_after_down(lab);
}

/// A firewalld reload flushes every table: kube-proxy's rules come back with its next
/// sync, the portmap plugin's hostPort DNAT never does.
#[test]
fn firewalld_reload() {
    if !root_or_skip() {
        return;
    }
    let host = host_fingerprint();
    let lab = up(Scenario::FirewalldReload);
    let nat = |l: &Lab| {
        l.node_output(&["iptables-save", "-t", "nat"])
            .unwrap_or_default()
    };
    assert!(nat(&lab).contains("CNI-HOSTPORT-DNAT"), "{}", nat(&lab));
    lab.wait_until(
        "a reload wiping the hostPort DNAT",
        Duration::from_secs(30),
        |l| !nat(l).contains("CNI-HOSTPORT-DNAT"),
    )
    .unwrap();
    lab.wait_until(
        "kube-proxy's resync after the flush",
        Duration::from_secs(30),
        |l| {
            l.pod_logs("kube-proxy")
                .contains("Reloading after iptables flush")
                && nat(l).contains("KUBE-SVC-NPX46M4PTMTKRN6Y")
        },
    )
    .unwrap();
    assert!(!nat(&lab).contains("CNI-HOSTPORT-DNAT"));
    let filter = lab.node_output(&["iptables-save", "-t", "filter"]).unwrap();
    assert!(filter.contains(":INPUT_ZONES"), "{filter}");
    assert!(filter.contains("-A FWDI_trusted -j ACCEPT"), "{filter}");
    // Pods' traffic is in the trusted zone: the Service works from a pod between reloads.
    lab.wait_until(
        "pod -> Service between reloads",
        Duration::from_secs(30),
        |l| {
            l.connect_from_pod(0, l.cluster_ip(), Duration::from_millis(500))
                .is_ok_and(|c| c == Connect::Connected)
        },
    )
    .unwrap();
    assert!(
        lab.read(paths::FIREWALLD_LOG)
            .contains("DEBUG1: Loading firewalld config file '/etc/firewalld/firewalld.conf'")
    );
    assert_clean_after_down(lab);
    assert_eq!(host_fingerprint(), host, "the host's firewall is untouched");
}
