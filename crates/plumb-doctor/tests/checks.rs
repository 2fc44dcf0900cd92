//! Node checks on hand-built facts: each check's problem, ok and unknown answers, and the
//! reasoning's choices, without any IO (the lab and bundle tests cover the edges).

use plumb_doctor::diagnose;
use plumb_facts::parse::logs::{LogLine, Signal};
use plumb_facts::parse::rke2::{ProbePaths, Rke2Config};
use plumb_facts::{Connect, ConnectOutcome, Fact, Facts, HttpReply, LogFile, PodRef};
use plumb_findings::Status;
use std::collections::BTreeMap;

fn finding<'a>(r: &'a plumb_doctor::Report, id: &str) -> &'a plumb_findings::Finding {
    r.findings
        .iter()
        .find(|f| f.id == id)
        .unwrap_or_else(|| panic!("no finding {id}"))
}

fn reply(path: &str, status: u16, body: &str) -> Fact<HttpReply> {
    let url = format!("http://127.0.0.1:10256{path}");
    Fact::known(
        HttpReply {
            url: url.clone(),
            status,
            body: body.into(),
        },
        url,
    )
}

fn sysctls(pairs: &[(&str, &str)]) -> Fact<BTreeMap<String, String>> {
    Fact::known(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        "sysctl -a",
    )
}

#[test]
fn nothing_known_is_unknown_not_a_problem() {
    let r = diagnose(&Facts::default());
    assert_eq!(r.root_cause, None);
    assert_eq!(
        r.problems().count(),
        0,
        "{:?}",
        r.problems().map(|f| &f.id).collect::<Vec<_>>()
    );
    assert_eq!(finding(&r, "sysctl-requirement").status, Status::Unknown);
    assert_eq!(finding(&r, "kube-proxy-unhealthy").status, Status::Unknown);
}

#[test]
fn ip_forward_off_is_critical_and_the_root_cause() {
    let f = Facts {
        sysctls: sysctls(&[("net.ipv4.ip_forward", "0")]),
        ..Facts::default()
    };
    let r = diagnose(&f);
    assert_eq!(r.root_cause.as_deref(), Some("sysctl-requirement"));
    assert_eq!(
        finding(&r, "sysctl-requirement").severity,
        plumb_findings::Severity::Critical
    );
}

#[test]
fn conntrack_low_is_ruled_out_and_full_is_a_problem() {
    let low = diagnose(&Facts {
        sysctls: sysctls(&[
            ("net.netfilter.nf_conntrack_count", "100"),
            ("net.netfilter.nf_conntrack_max", "1000"),
        ]),
        ..Facts::default()
    });
    assert_eq!(finding(&low, "conntrack-pressure").status, Status::Ok);
    let full = diagnose(&Facts {
        sysctls: sysctls(&[
            ("net.netfilter.nf_conntrack_count", "990"),
            ("net.netfilter.nf_conntrack_max", "1000"),
        ]),
        ..Facts::default()
    });
    assert_eq!(finding(&full, "conntrack-pressure").status, Status::Problem);
}

#[test]
fn healthz_503_with_livez_200_is_probe_semantics_and_both_200_is_a_red_herring() {
    let probes = Fact::known(
        ProbePaths {
            liveness: Some("/healthz".into()),
            ..ProbePaths::default()
        },
        "/var/lib/rancher/rke2/agent/pod-manifests/kube-proxy.yaml",
    );
    let r = diagnose(&Facts {
        kube_proxy_healthz: reply(
            "/healthz",
            503,
            r#"{"lastUpdated": "a","currentTime": "b", "nodeEligible": false}"#,
        ),
        kube_proxy_livez: reply("/livez", 200, r#"{"lastUpdated": "a","currentTime": "b"}"#),
        kube_proxy_probes: probes.clone(),
        ..Facts::default()
    });
    assert_eq!(r.root_cause.as_deref(), Some("kube-proxy-probe-semantics"));
    assert!(
        finding(&r, "kube-proxy-unhealthy")
            .explanation
            .contains("nodeEligible is false")
    );
    let fine = diagnose(&Facts {
        kube_proxy_healthz: reply("/healthz", 200, "{}"),
        kube_proxy_livez: reply("/livez", 200, "{}"),
        kube_proxy_probes: probes,
        ..Facts::default()
    });
    let p = finding(&fine, "kube-proxy-probe-semantics");
    assert_eq!(p.status, Status::Ok);
    assert!(p.title.contains("red herring"));
}

#[test]
fn clusterip_timeout_with_local_api_up_and_install_cni_fatal() {
    let fatal = "2026-11-30 08:13:03.606 [FATAL][1] cni-installer/<nil> <nil>: Unable to create token for CNI kubeconfig error=Post \"https://10.50.0.1:443/x\": dial tcp 10.50.0.1:443: i/o timeout";
    let f = Facts {
        rke2_config: Fact::known(
            Rke2Config {
                service_cidr: Some("10.50.0.0/16".into()),
                ..Rke2Config::default()
            },
            "/etc/rancher/rke2/config.yaml",
        ),
        clusterip_connect: Fact::known(
            Connect {
                target: "10.50.0.1:443".into(),
                outcome: ConnectOutcome::TimedOut,
                millis: 1000,
            },
            "TCP connect to 10.50.0.1:443",
        ),
        api_local_connect: Fact::known(
            Connect {
                target: "10.0.0.5:6443".into(),
                outcome: ConnectOutcome::Connected,
                millis: 1,
            },
            "TCP connect to 10.0.0.5:6443",
        ),
        cni_conf_files: Fact::known(vec![], "/etc/cni/net.d"),
        pod_logs: vec![LogFile {
            path: "/var/log/pods/kube-system_rke2-canal-abc_u/install-cni/0.log".into(),
            pod: Some(PodRef {
                namespace: "kube-system".into(),
                pod: "rke2-canal-abc".into(),
                container: "install-cni".into(),
            }),
            agent: None,
            lines_read: 1,
            signals: vec![(
                Signal::InstallCniFatal,
                LogLine {
                    line: 1,
                    time: None,
                    text: fatal.into(),
                },
            )],
            ..LogFile::default()
        }],
        ..Facts::default()
    };
    let r = diagnose(&f);
    let c = finding(&r, "clusterip-unreachable");
    assert_eq!(c.status, Status::Problem);
    assert!(
        c.title.contains("10.50.0.1:443") && c.title.contains("answers on its own address"),
        "{}",
        c.title
    );
    let cni = finding(&r, "cni-not-initialized");
    assert_eq!(cni.status, Status::Problem);
    assert!(
        cni.remediation[0].contains("kube-system/rke2-canal-abc"),
        "{:?}",
        cni.remediation
    );
    assert!(r.root_cause.is_some());
}

#[test]
fn kube_proxy_not_running_on_a_node_and_disabled_by_config() {
    let node_cfg = Fact::known(Rke2Config::default(), "/etc/rancher/rke2/config.yaml");
    let r = diagnose(&Facts {
        rke2_config: node_cfg,
        kube_proxy_healthz: Fact::unknown(
            "http://127.0.0.1:10256/healthz: Connection refused (os error 111)",
        ),
        ..Facts::default()
    });
    let f = finding(&r, "kube-proxy-unhealthy");
    assert_eq!(f.status, Status::Problem);
    assert!(f.title.contains("not running"));
    // Not a Kubernetes node: the same refusal means nothing.
    let r = diagnose(&Facts {
        kube_proxy_healthz: Fact::unknown("Connection refused"),
        ..Facts::default()
    });
    assert_eq!(finding(&r, "kube-proxy-unhealthy").status, Status::Unknown);
    let disabled = Fact::known(
        Rke2Config {
            disable_kube_proxy: Some(true),
            ..Rke2Config::default()
        },
        "/etc/rancher/rke2/config.yaml",
    );
    let r = diagnose(&Facts {
        rke2_config: disabled,
        ..Facts::default()
    });
    assert_eq!(finding(&r, "kube-proxy-unhealthy").status, Status::Ok);
}

#[test]
fn a_machine_that_is_not_a_node_has_nothing_to_diagnose() {
    let source = Some(plumb_facts::SourceInfo {
        kind: plumb_facts::SourceKind::Live,
        description: "this machine".into(),
        notes: Vec::new(),
    });
    let laptop = Facts {
        source: source.clone(),
        sysctls: sysctls(&[("net.ipv4.ip_forward", "0")]),
        ..Facts::default()
    };
    let r = diagnose(&laptop);
    assert_eq!(r.root_cause, None);
    assert_eq!(r.findings.len(), 1);
    assert_eq!(r.findings[0].id, plumb_doctor::ID_NOT_A_NODE);
    // The same sysctl on a node (RKE2 config present) is the root cause.
    let node = Facts {
        source,
        sysctls: sysctls(&[("net.ipv4.ip_forward", "0")]),
        rke2_config: Fact::known(Rke2Config::default(), "/etc/rancher/rke2/config.yaml"),
        ..Facts::default()
    };
    assert_eq!(
        diagnose(&node).root_cause.as_deref(),
        Some("sysctl-requirement")
    );
}

#[test]
fn every_node_check_id_is_in_the_catalogue() {
    let check_ids: Vec<&str> = plumb_check::checks::ALL
        .iter()
        .flat_map(|c| c.ids.iter().map(|(id, _)| *id))
        .collect();
    let r = diagnose(&Facts::default());
    let known: Vec<&str> = plumb_doctor::checks::CATALOGUE
        .iter()
        .map(|(id, _)| *id)
        .collect();
    for f in &r.findings {
        assert!(
            known.contains(&f.id.as_str()) || check_ids.contains(&f.id.as_str()),
            "{} is not in plumb_doctor::checks::CATALOGUE",
            f.id
        );
    }
    let mut unique = known.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), known.len(), "an id is listed twice");
}

/// kube-proxy's nftables mode leaves a table `ip kube-proxy` and no `KUBE-` chain: a
/// namespace holding it is a node to diagnose. Regression: doctor answered "no sign of a
/// Kubernetes node here" on a generated nftables-mode node and checked nothing.
#[test]
fn a_kube_proxy_nftables_table_is_a_sign_of_a_node() {
    let cluster = plumb_kubeproxy::generate(&plumb_kubeproxy::GeneratorConfig {
        services: 20,
        ..Default::default()
    })
    .unwrap();
    let text = plumb_kubeproxy::nft_transaction(&cluster, &Default::default());
    let rs = plumb_ruleset::parse_bytes(text.as_bytes(), &Default::default())
        .unwrap()
        .ruleset;
    let facts = Facts {
        source: Some(plumb_facts::SourceInfo {
            kind: plumb_facts::SourceKind::Namespace,
            description: "network namespace n".into(),
            notes: Vec::new(),
        }),
        ruleset: Fact::known(rs, "nf_tables netlink"),
        ..Facts::default()
    };
    assert_eq!(
        plumb_doctor::kubernetes_signs(&facts),
        ["nftables table ip kube-proxy"]
    );
    let r = diagnose(&facts);
    assert!(
        r.findings
            .iter()
            .all(|f| f.id != plumb_doctor::ID_NOT_A_NODE),
        "{:#?}",
        r.findings
    );
    // The ruleset was checked: its services without endpoints are reported.
    assert_eq!(finding(&r, "service-no-endpoints").status, Status::Problem);
}

/// A node whose kube-proxy table could not be read (`nft list table` timed out on a
/// 10k-service node) is still a node, and doctor says what it could not read instead of
/// "no sign of a Kubernetes node here"; with part of the ruleset missing it claims no
/// problem. Regression: doctor answered "nothing to diagnose" with no word of the timeout.
#[test]
fn an_unread_kube_proxy_table_is_reported_and_still_a_sign_of_a_node() {
    let ruleset = plumb_ruleset::Ruleset {
        completeness: plumb_ruleset::Completeness::Damaged,
        ..Default::default()
    };
    let read = |source: &str, outcome: &str| plumb_facts::RulesetRead {
        source: source.into(),
        outcome: outcome.into(),
        left_out: outcome.starts_with("failed"),
    };
    let facts = Facts {
        source: Some(plumb_facts::SourceInfo {
            kind: plumb_facts::SourceKind::Namespace,
            description: "network namespace n".into(),
            notes: Vec::new(),
        }),
        ruleset: Fact::known(ruleset, "nf_tables netlink (netns n) (generation 2)"),
        ruleset_reads: vec![
            read("nf_tables netlink (netns n) (generation 2)", "ok"),
            read(
                "iptables-legacy-save",
                "skipped: /proc/net/ip_tables_names lists no tables",
            ),
            read(
                "nft list table ip kube-proxy",
                "failed: nft: did not finish within 30s",
            ),
        ],
        ..Facts::default()
    };
    assert_eq!(
        plumb_doctor::kubernetes_signs(&facts),
        ["nftables table ip kube-proxy (its rules could not be read)"]
    );
    let r = diagnose(&facts);
    let unread = finding(&r, plumb_doctor::ID_RULESET_READ_FAILED);
    assert_eq!(unread.status, Status::Unknown);
    assert_eq!(unread.severity, plumb_findings::Severity::High);
    assert!(
        unread.title.contains("nft list table ip kube-proxy"),
        "{}",
        unread.title
    );
    assert_eq!(
        unread.evidence[0].text,
        "failed: nft: did not finish within 30s"
    );
    // Only that read failed: the skipped legacy read is not a failure.
    assert_eq!(
        r.findings
            .iter()
            .filter(|f| f.id == plumb_doctor::ID_RULESET_READ_FAILED)
            .count(),
        1
    );
    let problems: Vec<_> = r.findings.iter().filter(|f| f.is_problem()).collect();
    assert!(problems.is_empty(), "{problems:#?}");
}

/// doctor reports exactly the reads the reader says left tables out: a legacy save
/// tool missing while /proc lists legacy tables is one (the ruleset is damaged for it);
/// a failed getsockopt read the save tool made good is not, whatever its words say.
#[test]
fn reads_that_left_tables_out_are_reported_and_replaced_reads_are_not() {
    let ruleset = plumb_ruleset::Ruleset {
        completeness: plumb_ruleset::Completeness::Damaged,
        ..Default::default()
    };
    let read = |source: &str, outcome: &str, left_out: bool| plumb_facts::RulesetRead {
        source: source.into(),
        outcome: outcome.into(),
        left_out,
    };
    let facts = Facts {
        ruleset: Fact::known(ruleset, "nf_tables netlink (generation 2)"),
        ruleset_reads: vec![
            read("nf_tables netlink (generation 2)", "ok", false),
            read(
                "iptables-legacy getsockopt",
                "failed: table nat: entries changed while reading",
                false,
            ),
            read(
                "iptables-legacy-save",
                "missing: iptables-legacy-save: not installed",
                true,
            ),
        ],
        ..Facts::default()
    };
    let r = diagnose(&facts);
    let unread: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.id == plumb_doctor::ID_RULESET_READ_FAILED)
        .collect();
    assert_eq!(unread.len(), 1, "{unread:#?}");
    assert!(
        unread[0].title.contains("iptables-legacy-save"),
        "{}",
        unread[0].title
    );
    assert_eq!(unread[0].severity, plumb_findings::Severity::Medium);
}
