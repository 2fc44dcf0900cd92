//! The log signals on the real-world logs of the corpus (`real-world/logs/README.md` says
//! what a correct tool extracts from each): each file yields the signal its README names
//! and not the ones its traps invite; the healthy kube-proxy start-up yields no failure.

use plumb_facts::parse::logs::{Signal, cri_lines, probe_status, signal, subject_container};
use std::collections::BTreeSet;

fn signals_of(name: &str) -> Option<BTreeSet<Signal>> {
    let dir = plumb_testkit::corpus_dir()?.join("real-world/logs");
    let text = plumb_testkit::read(&dir.join(name));
    Some(
        cri_lines(&text)
            .iter()
            .filter_map(|l| signal(&l.text))
            .collect(),
    )
}

fn check(name: &str, must: &[Signal], must_not: &[Signal]) {
    let Some(got) = signals_of(name) else { return };
    for s in must {
        assert!(got.contains(s), "{name}: {s:?} not found in {got:?}");
    }
    for s in must_not {
        assert!(
            !got.contains(s),
            "{name}: {s:?} must not be found ({got:?})"
        );
    }
}

#[test]
fn healthy_kube_proxy_startup_yields_no_failure() {
    let Some(got) = signals_of("kube-proxy-1.28.15_healthy-startup_NO-FAILURE.log") else {
        return;
    };
    assert!(
        got.iter().all(|s| !s.is_failure()),
        "a healthy start-up (it sets nf_conntrack_max) is not a failure: {got:?}"
    );
}

#[test]
fn iptables_generation_id_is_userspace_kernel_incompatibility() {
    check(
        "dockerd-in-container_iptables-nft-1.8.10_Could-not-fetch-rule-set-generation-id_Invalid-argument.log",
        &[Signal::IptablesIncompatible],
        &[Signal::RestoreFailed],
    );
}

#[test]
fn no_route_to_host_to_the_clusterip() {
    check(
        "calico-kube-controllers_no-route-to-host_10.96.0.1_vs-node-curl-ok.log",
        &[Signal::NoRouteToHost],
        &[Signal::ClusterIpTimeout],
    );
}

#[test]
fn conntrack_sysctl_permission_denied() {
    check(
        "rancher-embedded-kube-proxy_F-nf_conntrack_max-permission-denied.log",
        &[Signal::ConntrackPermission],
        &[],
    );
}

#[test]
fn restore_option_rejected_old_iptables_and_xor_mark() {
    check(
        "kube-proxy_iptables-restore-invalid-option-5_old-iptables+sysctl-bridge-nf-missing.log",
        &[Signal::RestoreOptionRejected],
        &[Signal::ChainDoesNotExist],
    );
    check(
        "kube-proxy-1.26_ip6tables-restore-unknown-option-xor-mark_kernel-xt_mark-regression.log",
        &[
            Signal::RestoreOptionRejected,
            Signal::RestoreFailed,
            Signal::SyncFailed,
        ],
        &[Signal::ChainDoesNotExist],
    );
}

#[test]
fn nftables_mode_without_nft_is_the_binary_not_the_table() {
    // The CHAIN_DEL "busy" lines of the start-up cleanup are warnings, not failures.
    check(
        "kube-proxy-1.36.1_nftables-mode_cleanup-CHAIN_DEL-busy_nft-list-table-failed.log",
        &[Signal::NftUnavailable],
        &[Signal::RestoreFailed, Signal::ChainDoesNotExist],
    );
}

#[test]
fn clusterip_io_timeout_and_upstream_dns_is_not_kube_proxy() {
    check(
        "kube-state-metrics_k8s-1.18_dial-tcp-10.96.0.1-443-io-timeout.log",
        &[Signal::ClusterIpTimeout],
        &[],
    );
    // CoreDNS's "read udp ... i/o timeout" is a dead upstream resolver, not a dial to a Service.
    check(
        "coredns_upstream-unreachable-backend_io-timeout_TKE.log",
        &[],
        &[Signal::ClusterIpTimeout],
    );
}

#[test]
fn kubelet_journal_back_off_names_its_container() {
    let Some(dir) = plumb_testkit::corpus_dir() else {
        return;
    };
    let text = plumb_testkit::read(&dir.join(
        "real-world/logs/kubelet-1.28_journal_flannel-subnet.env-missing_apiserver-refused.log",
    ));
    let backoffs: Vec<_> = cri_lines(&text)
        .into_iter()
        .filter(|l| signal(&l.text) == Some(Signal::BackOff))
        .collect();
    assert!(!backoffs.is_empty());
    assert_eq!(
        subject_container(&backoffs[0].text),
        Some("kube-apiserver"),
        "{}",
        backoffs[0].text
    );
}

#[test]
fn calico_liveness_events_are_probe_failures_and_back_off() {
    check(
        "calico-node-v3.20_liveness-bird-not-running_BackOff.log",
        &[Signal::ProbeFailed, Signal::BackOff],
        &[],
    );
}

#[test]
fn kubelet_probe_lines_of_the_probe_semantics_incident() {
    let event = "Warning  Unhealthy  kubelet  Liveness probe failed: HTTP probe failed with statuscode: 503";
    assert_eq!(signal(event), Some(Signal::ProbeFailed));
    assert_eq!(probe_status(event), Some(503));
    let kill = r#"I1130 08:13:03.123456 2101 kuberuntime_manager.go:1056] "Message for Container of pod" containerName="kube-proxy" containerStatusID={"Type":"containerd","ID":"ab"} pod="kube-system/kube-proxy-node1" containerMessage="Container kube-proxy failed liveness probe, will be restarted""#;
    assert_eq!(signal(kill), Some(Signal::LivenessRestart));
    assert_eq!(subject_container(kill), Some("kube-proxy"));
    let probe = r#"I1130 08:13:01.000001 2101 prober.go:107] "Probe failed" probeType="Liveness" pod="kube-system/kube-proxy-node1" podUID="u" containerName="kube-proxy" probeResult="failure" output="HTTP probe failed with statuscode: 503""#;
    assert_eq!(signal(probe), Some(Signal::ProbeFailed));
    assert_eq!(subject_container(probe), Some("kube-proxy"));
    let back = r#"E1130 08:14:00.000001 2101 pod_workers.go:1300] "Error syncing pod, skipping" err="failed to \"StartContainer\" for \"kube-proxy\" with CrashLoopBackOff: \"back-off 40s restarting failed container=kube-proxy pod=kube-proxy-node1_kube-system(u)\"""#;
    assert_eq!(signal(back), Some(Signal::BackOff));
    assert_eq!(subject_container(back), Some("kube-proxy"));
    let sandbox = r#"E1130 08:15:00.1 2101 pod_workers.go:1300] "Error syncing pod" err="failed to \"CreatePodSandbox\" for \"coredns-x\" with CreatePodSandboxError: \"Failed to create sandbox for pod: plugin type=\\\"calico\\\" failed (add): error getting ClusterInformation: Get \\\"https://10.2.0.1:443/apis/crd.projectcalico.org/v1/clusterinformations/default\\\": dial tcp 10.2.0.1:443: i/o timeout\"""#;
    assert_eq!(signal(sandbox), Some(Signal::CniSandboxFailed));
}
