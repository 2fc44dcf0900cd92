//! Diagnoses from the node's history and its own values: kube-proxy's probe-semantics
//! crash loop named whether or not kube-proxy is up at the moment, the tamper diagnosis
//! without the agent's log, reverts counted once, the kubernetes ClusterIP from the
//! ruleset (not RKE2's default), the new causes on real-world logs, remediation on every
//! problem, and the timeline.

use plumb_doctor::{Report, diagnose};
use plumb_facts::parse::logs::{cri_lines, signal};
use plumb_facts::parse::rke2::ProbePaths;
use plumb_facts::{
    AgentSighting, Fact, Facts, HttpReply, LogFile, pod_ref_from_path, restart_from_path,
};
use plumb_findings::{Confidence, Finding, Status};

/// A log file as plumb-collect reads one: its signal lines, and for pod logs the
/// restart number and first line.
fn log(path: &str, text: &str) -> LogFile {
    let lines = cri_lines(text);
    let pod = path
        .starts_with("/var/log/pods/")
        .then(|| pod_ref_from_path(path))
        .flatten();
    LogFile {
        path: path.into(),
        restart: pod.as_ref().and(restart_from_path(path)),
        first: pod.as_ref().and_then(|_| lines.first().cloned()),
        pod,
        lines_read: lines.len(),
        signals: lines
            .iter()
            .filter_map(|l| Some((signal(&l.text)?, l.clone())))
            .collect(),
        ..LogFile::default()
    }
}

fn kubelet(text: &str) -> LogFile {
    LogFile {
        component: Some("kubelet".into()),
        ..log("/var/lib/rancher/rke2/agent/logs/kubelet.log", text)
    }
}

fn finding<'a>(r: &'a Report, id: &str) -> &'a Finding {
    r.findings
        .iter()
        .find(|f| f.id == id)
        .unwrap_or_else(|| panic!("no finding {id}"))
}

fn reply(path: &str, status: u16) -> Fact<HttpReply> {
    let url = format!("http://127.0.0.1:10256{path}");
    Fact::known(
        HttpReply {
            url: url.clone(),
            status,
            body: "{}".into(),
        },
        url,
    )
}

const KP: &str = "/var/log/pods/kube-system_kube-proxy-node1_u1/kube-proxy";

/// kubelet's log of the probe-semantics incident: liveness failures with 503, kills,
/// back-off; kube-proxy's own logs of four starts look normal.
fn probe_flap_facts() -> Facts {
    let mut k = String::new();
    for i in 0..3 {
        k.push_str(&format!(
            "I1130 08:1{i}:01.000001 2101 prober.go:107] \"Probe failed\" probeType=\"Liveness\" pod=\"kube-system/kube-proxy-node1\" podUID=\"u1\" containerName=\"kube-proxy\" probeResult=\"failure\" output=\"HTTP probe failed with statuscode: 503\"\n\
             I1130 08:1{i}:02.000001 2101 kuberuntime_manager.go:1056] \"Message for Container of pod\" containerName=\"kube-proxy\" pod=\"kube-system/kube-proxy-node1\" containerMessage=\"Container kube-proxy failed liveness probe, will be restarted\"\n\
             E1130 08:1{i}:03.000001 2101 pod_workers.go:1300] \"Error syncing pod, skipping\" err=\"failed to \\\"StartContainer\\\" for \\\"kube-proxy\\\" with CrashLoopBackOff: \\\"back-off 40s restarting failed container=kube-proxy pod=kube-proxy-node1_kube-system(u1)\\\"\"\n"
        ));
    }
    let pod_logs = (0..4)
        .map(|n| {
            log(
                &format!("{KP}/{n}.log"),
                &format!("2026-11-30T08:1{n}:00.000000001Z stderr F I1130 08:1{n}:00.000001 1 server_others.go:152] \"Using iptables Proxier\"\n"),
            )
        })
        .collect();
    Facts {
        pod_logs,
        node_logs: vec![kubelet(&k)],
        kube_proxy_probes: Fact::known(
            ProbePaths {
                liveness: Some("/healthz".into()),
                ..ProbePaths::default()
            },
            "/var/lib/rancher/rke2/agent/pod-manifests/kube-proxy.yaml",
        ),
        ..Facts::default()
    }
}

#[test]
fn probe_semantics_is_named_from_history_whether_kube_proxy_is_down_or_up() {
    // Down at the moment doctor runs: nothing answers on 10256.
    let down = Facts {
        kube_proxy_healthz: Fact::unknown("http://127.0.0.1:10256/healthz: Connection refused"),
        kube_proxy_livez: Fact::unknown("http://127.0.0.1:10256/livez: Connection refused"),
        ..probe_flap_facts()
    };
    // Up between kills: both endpoints answer 200.
    let up = Facts {
        kube_proxy_healthz: reply("/healthz", 200),
        kube_proxy_livez: reply("/livez", 200),
        ..probe_flap_facts()
    };
    for (when, facts) in [("down", down), ("up", up)] {
        let r = diagnose(&facts);
        assert_eq!(
            r.root_cause.as_deref(),
            Some("kube-proxy-probe-semantics"),
            "kube-proxy {when}: {:?}",
            r.problems().map(|f| (&f.id, &f.title)).collect::<Vec<_>>()
        );
        let p = finding(&r, "kube-proxy-probe-semantics");
        assert!(
            p.title.contains("3 times") && p.title.contains("HTTP 503"),
            "{}",
            p.title
        );
        assert!(
            p.remediation[0].contains("/var/lib/rancher/rke2/agent/pod-manifests/kube-proxy.yaml")
                && p.remediation[0].contains("/livez")
                && p.remediation[0].contains("1.28"),
            "{:?}",
            p.remediation
        );
        // The RKE2 releases whose manifest probes /livez, as rancher/rke2's history shows
        // them (each line's first release).
        assert!(
            p.remediation.iter().any(|x| [
                "v1.31.12+rke2r1",
                "v1.32.8+rke2r1",
                "v1.33.4+rke2r1",
                "v1.34.1+rke2r1"
            ]
            .iter()
            .all(|v| x.contains(v))
                && x.contains("1.30 and older lines keep /healthz")),
            "{:?}",
            p.remediation
        );
        assert!(p.evidence.iter().any(|e| e.text.contains("[timeline #")));
        let u = finding(&r, "kube-proxy-unhealthy");
        assert_eq!(u.status, Status::Problem, "{when}");
        assert!(u.title.contains("crash-looping"), "{when}: {}", u.title);
        assert!(!u.title.contains("not running"));
    }
}

#[test]
fn agent_present_chains_deleted_no_agent_log_is_tamper_with_medium_confidence() {
    let deleted = "2026-11-30T08:00:00.000000001Z stderr F E1130 08:00:00.000001 1 proxier.go:1598] \"Failed to execute iptables-restore\" err=\"exit status 1: iptables-restore: line 3 failed: Chain 'KUBE-SVC-NPX46M4PTMTKRN6Y' does not exist\"\n";
    let f = Facts {
        pod_logs: vec![log(&format!("{KP}/0.log"), deleted)],
        agents: vec![AgentSighting {
            agent: "illumio-ven".into(),
            how: "process venAgent[4211]".into(),
            source: "ps".into(),
        }],
        ..Facts::default()
    };
    let r = diagnose(&f);
    assert_eq!(r.root_cause.as_deref(), Some("security-agent-tamper"));
    assert_eq!(r.confidence, Some(Confidence::Medium));
    assert!(
        r.to_confirm
            .iter()
            .any(|c| c.contains("/opt/illumio_ven_data/log")),
        "{:?}",
        r.to_confirm
    );
    let t = finding(&r, "security-agent-tamper");
    assert!(t.remediation.iter().any(|x| x.contains("grep -ri tamper")));
    // With the agent's own log admitting it, the same diagnosis is sure.
    let admitted = Facts {
        agent_logs: vec![LogFile {
            agent: Some("illumio-ven".into()),
            ..log(
                "/opt/illumio_ven_data/log/platform.log",
                "2026-11-30 08:00:01 Repeated FW tampering has been detected\n2026-11-30 08:00:02 Successfully reverted out of band firewall changes\n",
            )
        }],
        ..f
    };
    let r = diagnose(&admitted);
    assert_eq!(r.root_cause.as_deref(), Some("security-agent-tamper"));
    assert!(r.confidence >= Some(Confidence::Medium));
    assert!(r.to_confirm.is_empty());
}

#[test]
fn each_revert_is_counted_once() {
    let mut text = String::new();
    for i in 0..18 {
        text.push_str(&format!(
            "2026-11-30 08:00:{i:02} Repeated FW tampering has been detected\n2026-11-30 08:00:{i:02} Successfully reverted out of band firewall changes\n"
        ));
    }
    text.push_str("2026-11-30 08:01:00 Repeated FW tampering has been detected\n2026-11-30 08:01:01 Repeated FW tampering has been detected\n");
    let f = Facts {
        agent_logs: vec![LogFile {
            agent: Some("illumio-ven".into()),
            ..log("/opt/illumio_ven_data/log/platform.log", &text)
        }],
        ..Facts::default()
    };
    let t = diagnose(&f);
    let t = finding(&t, "security-agent-tamper");
    assert!(
        t.title.contains("reverted firewall changes 18 times")
            && t.title.contains("tampering 20 times"),
        "{}",
        t.title
    );
}

#[test]
fn the_kubernetes_clusterip_comes_from_the_ruleset_not_rke2_defaults() {
    let save = "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]\n:KUBE-SEP-AAAA - [0:0]\n:KUBE-MARK-MASQ - [0:0]\n\
        -A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
        -A KUBE-SERVICES -d 10.2.0.1/32 -p tcp -m comment --comment \"default/kubernetes:https cluster IP\" -m tcp --dport 443 -j KUBE-SVC-NPX46M4PTMTKRN6Y\n\
        -A KUBE-SVC-NPX46M4PTMTKRN6Y ! -s 10.1.0.0/16 -d 10.2.0.1/32 -p tcp -m comment --comment \"default/kubernetes:https cluster IP\" -m tcp --dport 443 -j KUBE-MARK-MASQ\n\
        -A KUBE-SVC-NPX46M4PTMTKRN6Y -m comment --comment \"default/kubernetes:https -> 172.16.0.5:6443\" -j KUBE-SEP-AAAA\n\
        -A KUBE-SEP-AAAA -p tcp -m comment --comment \"default/kubernetes:https\" -m tcp -j DNAT --to-destination 172.16.0.5:6443\n\
        COMMIT\n";
    let rs = plumb_ruleset::iptables::save::parse(save, &Default::default());
    let coredns = "2026-11-30T08:00:00.000000001Z stdout F [ERROR] plugin/kubernetes: Failed to watch *v1.Namespace: Get \"https://10.2.0.1:443/api/v1/namespaces?limit=500\": dial tcp 10.2.0.1:443: i/o timeout\n";
    let f = Facts {
        ruleset: Fact::known(rs, "iptables-save"),
        pod_logs: vec![log(
            "/var/log/pods/kube-system_coredns-abc_u9/coredns/0.log",
            coredns,
        )],
        distribution: Some("kubeadm".into()),
        ..Facts::default()
    };
    let r = diagnose(&f);
    let n = r.network.as_ref().unwrap();
    assert_eq!(n.kubernetes_clusterip.value, "10.2.0.1");
    assert!(!n.kubernetes_clusterip.default);
    assert_eq!(n.cluster_cidr.value, "10.1.0.0/16");
    assert_eq!(n.api_endpoint.as_ref().unwrap().value, "172.16.0.5:6443");
    // No service CIDR anywhere: kubeadm's default, and said so.
    assert!(n.service_cidr.default && n.service_cidr.source.contains("not found on the node"));
    let c = finding(&r, "clusterip-unreachable");
    assert_eq!(c.status, Status::Problem, "{}", c.title);
    assert!(c.title.contains("10.2.0.1:443"), "{}", c.title);
    assert!(
        c.evidence
            .iter()
            .any(|e| e.text.contains("coredns") || e.source.contains("coredns"))
    );
}

/// Facts whose kube-proxy log is a real-world file.
fn kube_proxy_log_facts(name: &str) -> Option<Facts> {
    let dir = plumb_testkit::corpus_dir()?.join("real-world/logs");
    let text = plumb_testkit::read(&dir.join(name));
    Some(Facts {
        pod_logs: vec![log(&format!("{KP}/0.log"), &text)],
        ..Facts::default()
    })
}

#[test]
fn real_world_kube_proxy_failures_are_named_with_high_confidence() {
    for (file, cause) in [
        (
            "kube-proxy-1.36.1_nftables-mode_cleanup-CHAIN_DEL-busy_nft-list-table-failed.log",
            "kube-proxy-nft-unavailable",
        ),
        (
            "rancher-embedded-kube-proxy_F-nf_conntrack_max-permission-denied.log",
            "kube-proxy-conntrack-permission",
        ),
        (
            "kube-proxy-1.26_ip6tables-restore-unknown-option-xor-mark_kernel-xt_mark-regression.log",
            "iptables-userspace-incompatible",
        ),
        (
            "kube-proxy_iptables-restore-invalid-option-5_old-iptables+sysctl-bridge-nf-missing.log",
            "iptables-userspace-incompatible",
        ),
        (
            "dockerd-in-container_iptables-nft-1.8.10_Could-not-fetch-rule-set-generation-id_Invalid-argument.log",
            "iptables-userspace-incompatible",
        ),
    ] {
        let Some(f) = kube_proxy_log_facts(file) else {
            return;
        };
        let r = diagnose(&f);
        assert_eq!(r.root_cause.as_deref(), Some(cause), "{file}");
        assert_eq!(r.confidence, Some(Confidence::High), "{file}");
        let own = finding(&r, cause);
        assert!(!own.remediation.is_empty(), "{file}");
    }
    // The nftables file's cleanup lines are not restore failures.
    let f = kube_proxy_log_facts(
        "kube-proxy-1.36.1_nftables-mode_cleanup-CHAIN_DEL-busy_nft-list-table-failed.log",
    )
    .unwrap();
    assert_eq!(
        finding(&diagnose(&f), "kube-proxy-restore-failures").status,
        Status::Ok
    );
}

#[test]
fn a_healthy_kube_proxy_startup_is_no_problem() {
    let Some(f) = kube_proxy_log_facts("kube-proxy-1.28.15_healthy-startup_NO-FAILURE.log") else {
        return;
    };
    let r = diagnose(&f);
    assert_eq!(r.root_cause, None);
    assert_eq!(
        r.problems().map(|f| &f.id).collect::<Vec<_>>(),
        Vec::<&String>::new()
    );
    for id in [
        "kube-proxy-restore-failures",
        "iptables-userspace-incompatible",
        "kube-proxy-nft-unavailable",
        "kube-proxy-conntrack-permission",
    ] {
        assert_eq!(finding(&r, id).status, Status::Ok, "{id}");
    }
}

#[test]
fn every_problem_of_the_node_checks_carries_remediation() {
    let mut reports = vec![
        diagnose(&probe_flap_facts()),
        diagnose(&reverted_facts()),
        diagnose(&Facts {
            kube_proxy_healthz: reply("/healthz", 503),
            kube_proxy_livez: reply("/livez", 503),
            api_local_connect: Fact::known(
                plumb_facts::Connect {
                    target: "10.0.0.5:6443".into(),
                    outcome: plumb_facts::ConnectOutcome::Refused,
                    millis: 1,
                },
                "TCP connect to 10.0.0.5:6443",
            ),
            pod_logs: vec![log(
                &format!("{KP}/0.log"),
                "E1130 1 x] is forbidden: User \"system:kube-proxy\" cannot get resource \"nodes\"\n",
            )],
            cni_conf_files: Fact::known(vec![], "/etc/cni/net.d"),
            ..Facts::default()
        }),
    ];
    for file in [
        "kube-proxy-1.36.1_nftables-mode_cleanup-CHAIN_DEL-busy_nft-list-table-failed.log",
        "rancher-embedded-kube-proxy_F-nf_conntrack_max-permission-denied.log",
        "kube-proxy-1.26_ip6tables-restore-unknown-option-xor-mark_kernel-xt_mark-regression.log",
    ] {
        reports.extend(kube_proxy_log_facts(file).map(|f| diagnose(&f)));
    }
    let mut problems = 0;
    for r in &reports {
        for p in r.problems() {
            problems += 1;
            assert!(
                !p.remediation.is_empty(),
                "{} has no remediation: {}",
                p.id,
                p.title
            );
        }
    }
    assert!(problems >= 8, "{problems}");
    for id in ["kubernetes-service-not-translated", "security-agent-tamper"] {
        assert!(
            reports.iter().any(|r| r.problems().any(|p| p.id == id)),
            "{id} is among the problems whose remediation is checked"
        );
    }
}

#[test]
fn the_timeline_orders_restarts_and_kubelet_lines_and_counts_them() {
    let r = diagnose(&probe_flap_facts());
    let t = &r.timeline;
    let kp = t.container("kube-proxy").unwrap();
    assert_eq!(kp.logs, 4);
    assert_eq!(kp.restarts, 3);
    assert_eq!(kp.liveness_restarts, 3);
    assert_eq!(kp.back_offs, 3);
    assert_eq!(kp.probe_codes.get(&503), Some(&3));
    // Oldest first: start 0 (08:10:00), then kubelet's probe failure (08:10:01), ...
    let first: Vec<_> = t.entries.iter().take(4).map(|e| e.signal).collect();
    use plumb_facts::parse::logs::Signal::*;
    assert_eq!(
        first,
        vec![ContainerStart, ProbeFailed, LivenessRestart, BackOff]
    );
    assert_eq!(t.entries[4].restart, Some(1));
    assert!(t.entries.windows(2).all(|w| w[0].n + 1 == w[1].n));
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["timeline"]["entries"][0]["signal"], "container-start");
}

/// A full iptables-nft dump read as the node's ruleset.
fn ruleset(text: &str) -> Fact<plumb_ruleset::Ruleset> {
    let rs = plumb_ruleset::format::parse_bytes(
        text.as_bytes(),
        &plumb_ruleset::format::ParseOptions::default(),
    )
    .unwrap()
    .ruleset;
    Fact::known(rs, "iptables-nft-save")
}

/// What the agent's revert leaves: its snapshot of the host firewall, kubelet's chains
/// only (no kube-proxy chain at all), so no ruleset check has anything of kube-proxy's to
/// report.
const REVERTED: &str = "# Generated by iptables-save v1.8.9 (nf_tables) on Mon Nov 30 08:00:00 2026\n*mangle\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n:KUBE-IPTABLES-HINT - [0:0]\n:KUBE-KUBELET-CANARY - [0:0]\nCOMMIT\n*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n:KUBE-KUBELET-CANARY - [0:0]\nCOMMIT\n*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:KUBE-FIREWALL - [0:0]\n:KUBE-KUBELET-CANARY - [0:0]\n-A INPUT -j KUBE-FIREWALL\n-A OUTPUT -j KUBE-FIREWALL\n-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment \"block incoming localnet connections\" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP\nCOMMIT\n";

/// While the agent reverts, kube-proxy's rules are gone altogether: the report states
/// "no DNAT for 10.43.0.1:443 right now" as a finding (a supporting problem of the
/// tamper diagnosis, with remediation) and as evidence of the tamper finding itself.
/// Before, nothing of kube-proxy's was left to report (no KUBE-SVC chain, so no
/// rules-missing) and kube-proxy's findings vanished.
/// The agent's revert as the node shows it: its log, kube-proxy's failed restore, and a
/// ruleset without any kube-proxy chain.
fn reverted_facts() -> Facts {
    Facts {
        ruleset: ruleset(REVERTED),
        pod_logs: vec![log(
            &format!("{KP}/0.log"),
            "2026-11-30T08:00:00.000000001Z stderr F E1130 08:00:00.000001 1 proxier.go:1598] \"Failed to execute iptables-restore\" err=\"exit status 1: iptables-restore: line 3 failed: Chain 'KUBE-SVC-NPX46M4PTMTKRN6Y' does not exist\"\n",
        )],
        agent_logs: vec![LogFile {
            agent: Some("illumio-ven".into()),
            ..log(
                "/opt/illumio_ven_data/log/platform.log",
                "2026-11-30 08:00:01 Repeated FW tampering has been detected\n2026-11-30 08:00:02 Successfully reverted out of band firewall changes\n",
            )
        }],
        agents: vec![AgentSighting {
            agent: "illumio-ven".into(),
            how: "process venAgent[4211]".into(),
            source: "ps".into(),
        }],
        ..Facts::default()
    }
}

#[test]
fn a_revert_that_leaves_no_kube_proxy_chain_says_no_dnat_for_the_kubernetes_service() {
    let r = diagnose(&reverted_facts());
    assert_eq!(r.root_cause.as_deref(), Some("security-agent-tamper"));
    let no_dnat = finding(&r, "kubernetes-service-not-translated");
    assert_eq!(no_dnat.status, Status::Problem, "{no_dnat:#?}");
    assert_eq!(
        no_dnat.title,
        "no DNAT for the kubernetes Service 10.43.0.1:443 right now"
    );
    assert!(!no_dnat.remediation.is_empty());
    assert!(
        r.supporting
            .iter()
            .any(|s| s == "kubernetes-service-not-translated")
    );
    let t = finding(&r, "security-agent-tamper");
    assert!(
        t.evidence.iter().any(|e| e
            .text
            .starts_with("no DNAT for the kubernetes Service 10.43.0.1:443 right now")),
        "{:#?}",
        t.evidence
    );
}

/// kube-proxy's own rules for the `kubernetes` Service: ruled out, with where it goes;
/// a node without kube-proxy (no process, log, manifest or health) is not asked for it.
#[test]
fn the_kubernetes_dnat_present_is_ok_and_no_kube_proxy_is_not_a_problem() {
    let cluster = plumb_kubeproxy::generate(&plumb_kubeproxy::GeneratorConfig {
        services: 3,
        ..Default::default()
    })
    .unwrap();
    let text =
        plumb_kubeproxy::KubeProxyRules::new(&cluster, &plumb_kubeproxy::ProxierOptions::default())
            .to_iptables_save(&plumb_kubeproxy::IptablesSaveOptions::default());
    let r = diagnose(&Facts {
        ruleset: ruleset(&text),
        ..Facts::default()
    });
    let ok = finding(&r, "kubernetes-service-not-translated");
    assert_eq!(ok.status, Status::Ok, "{ok:#?}");
    assert!(ok.title.contains(":443 is translated to "), "{}", ok.title);
    let r = diagnose(&Facts {
        ruleset: ruleset(REVERTED),
        ..Facts::default()
    });
    assert_eq!(
        finding(&r, "kubernetes-service-not-translated").status,
        Status::Ok
    );
}
