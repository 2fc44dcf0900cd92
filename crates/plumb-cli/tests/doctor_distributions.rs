//! `plumb doctor --bundle` on small sosreport-shaped trees of each distribution
//! (tests/data/distributions/*: a README in each says what it stands for and where the
//! layout comes from): the distribution is recognised, the Service and pod CIDRs and the
//! `kubernetes` ClusterIP come from that distribution's own files (or are said to be its
//! defaults), and kube-proxy is looked for where the distribution runs it (static pod,
//! DaemonSet, inside k3s, or not at all on MicroShift).

use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/data/distributions/{name}"))
}

fn doctor(name: &str) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(["doctor", "--json", "--bundle"])
        .arg(fixture(name))
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{name}: {e}\n{}", String::from_utf8_lossy(&out.stderr)))
}

/// (value, source, default) of a network setting.
fn net<'a>(r: &'a serde_json::Value, what: &str) -> (&'a str, &'a str, bool) {
    let d = &r["network"][what];
    (
        d["value"].as_str().unwrap(),
        d["source"].as_str().unwrap(),
        d["default"].as_bool().unwrap(),
    )
}

fn finding<'a>(r: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == id)
        .unwrap_or_else(|| panic!("no {id}"))
}

fn every_problem_has_remediation(r: &serde_json::Value) {
    for f in r["findings"].as_array().unwrap() {
        if f["status"] == "problem" {
            assert!(
                f["remediation"].as_array().is_some_and(|x| !x.is_empty()),
                "{} has no remediation",
                f["id"]
            );
        }
    }
}

#[test]
fn rke2_reads_config_yaml_and_the_static_pod() {
    let r = doctor("rke2");
    assert_eq!(r["distribution"], "rke2");
    assert_eq!(
        net(&r, "service_cidr"),
        (
            "10.53.0.0/16",
            "etc/rancher/rke2/config.yaml: service-cidr",
            false
        )
    );
    assert_eq!(net(&r, "kubernetes_clusterip").0, "10.53.0.1");
    assert_eq!(net(&r, "cluster_cidr").0, "10.52.0.0/16");
    // The static pod manifest's probes were read (liveness on /livez: nothing to change).
    assert_eq!(finding(&r, "kube-proxy-probe-semantics")["status"], "ok");
    every_problem_has_remediation(&r);
}

#[test]
fn k3s_reads_its_config() {
    let r = doctor("k3s");
    assert_eq!(r["distribution"], "k3s");
    assert_eq!(
        net(&r, "service_cidr"),
        (
            "10.63.0.0/16",
            "etc/rancher/k3s/config.yaml: service-cidr",
            false
        )
    );
    assert_eq!(net(&r, "kubernetes_clusterip").0, "10.63.0.1");
    assert_eq!(net(&r, "cluster_cidr").0, "10.62.0.0/16");
    every_problem_has_remediation(&r);
}

#[test]
fn kubeadm_reads_the_api_servers_manifest_and_the_controller_manager() {
    let r = doctor("kubeadm");
    assert_eq!(r["distribution"], "kubeadm");
    let (svc, src, default) = net(&r, "service_cidr");
    assert_eq!((svc, default), ("10.96.0.0/12", false));
    assert!(src.contains("service-cluster-ip-range"), "{src}");
    assert_eq!(net(&r, "kubernetes_clusterip").0, "10.96.0.1");
    assert_eq!(
        net(&r, "cluster_cidr"),
        (
            "10.244.0.0/16",
            "etc/kubernetes/manifests/kube-controller-manager.yaml: cluster-cidr",
            false
        )
    );
    // kube-proxy is a DaemonSet: its pod log is read (a start in the timeline).
    assert!(
        r["timeline"]["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["component"] == "kube-proxy" && e["signal"] == "container-start")
    );
    every_problem_has_remediation(&r);
}

/// Nothing on an EKS node names the Service CIDR: the default is EKS's and said to be
/// one; the VPC CNI's own log (aws-node, /var/log/aws-routed-eni/ipamd.log) is read into
/// the timeline and its timeout to the ClusterIP is the symptom.
#[test]
fn eks_is_recognised_its_defaults_are_said_and_aws_node_logs_are_read() {
    let r = doctor("eks");
    assert_eq!(r["distribution"], "eks");
    let (svc, src, default) = net(&r, "service_cidr");
    assert_eq!((svc, default), ("10.100.0.0/16", true));
    assert!(src.starts_with("EKS's default"), "{src}");
    assert_eq!(
        net(&r, "kubernetes_clusterip"),
        ("10.100.0.1", net(&r, "kubernetes_clusterip").1, true)
    );
    let entries = r["timeline"]["entries"].as_array().unwrap();
    assert!(
        entries
            .iter()
            .any(|e| e["component"] == "aws-node" && e["signal"] == "cluster-ip-timeout"),
        "{entries:#?}"
    );
    assert_eq!(finding(&r, "clusterip-unreachable")["status"], "problem");
    every_problem_has_remediation(&r);
}

/// MicroShift lists its networks in /etc/microshift/config.yaml and runs no kube-proxy:
/// kube-proxy's checks say so instead of "no kube-proxy log was readable".
#[test]
fn microshift_reads_config_yaml_lists_and_expects_no_kube_proxy() {
    let r = doctor("microshift");
    assert_eq!(r["distribution"], "microshift");
    assert_eq!(
        net(&r, "service_cidr"),
        (
            "10.73.0.0/16",
            "etc/microshift/config.yaml: serviceNetwork",
            false
        )
    );
    assert_eq!(
        net(&r, "cluster_cidr"),
        (
            "10.72.0.0/16",
            "etc/microshift/config.yaml: clusterNetwork",
            false
        )
    );
    assert_eq!(net(&r, "kubernetes_clusterip").0, "10.73.0.1");
    for id in [
        "kube-proxy-restore-failures",
        "kube-proxy-unhealthy",
        "kube-proxy-probe-semantics",
        "kubernetes-service-not-translated",
    ] {
        let f = finding(&r, id);
        assert_eq!(f["status"], "ok", "{f:#}");
        assert!(
            f["title"]
                .as_str()
                .unwrap()
                .starts_with("MicroShift runs no kube-proxy")
        );
    }
    assert_eq!(r["root_cause"], serde_json::Value::Null);
}
