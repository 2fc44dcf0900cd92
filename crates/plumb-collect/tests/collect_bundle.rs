//! Privileged: `plumb collect` of a network namespace standing for a node, with a node file
//! tree beside it, read back as a bundle: the same facts, secrets redacted, nothing
//! overwritten. Skips with a reason when not root.

use plumb_collect::SystemRunner;
use plumb_collect::bundle_writer::write_bundle;
use plumb_collect::facts::{GatherOptions, gather};
use plumb_collect::netns::Netns;
use plumb_collect::node::{BundleKind, LiveNode, Node, open_bundle};
use plumb_ruleset::Family;
use std::time::Duration;

#[test]
fn collect_then_read_back_as_a_bundle() {
    if !plumb_testkit::privileged(&["ip", "iptables-nft-restore"]) {
        return;
    }
    let scratch = plumb_testkit::Scratch::new("collect");
    let root = scratch.path().join("node");
    let w = |rel: &str, text: &str| {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    w(
        "etc/rancher/rke2/config.yaml",
        "token: K10supersecret::server:abc\ncni: canal\n",
    );
    w(
        "etc/cni/net.d/calico-kubeconfig",
        "users:\n- user:\n    token: eyJsecret\n",
    );
    w(
        "var/log/pods/kube-system_kube-proxy-n1_u1/kube-proxy/0.log",
        "2026-11-30T08:00:00.000000001Z stderr F E1130 08:00:00.000001 1 proxier.go:1598] \"Failed to execute iptables-restore\" err=\"exit status 1: iptables-restore: line 3 failed: Chain 'KUBE-SVC-NPX46M4PTMTKRN6Y' does not exist\"\n",
    );

    let ns = Netns::create("plumb-t-collect").unwrap();
    let save = "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\nCOMMIT\n";
    let (ok, _, err) = ns.exec("iptables-nft-restore", &[], Some(save)).unwrap();
    assert!(ok, "{err}");
    let live = LiveNode::new(SystemRunner, Some(ns.name().to_string()), &root);
    let options = GatherOptions {
        probe_timeout: Duration::from_millis(300),
        ..Default::default()
    };
    let out = scratch.path().join("bundle.tar.gz");
    let manifest = write_bundle(&live, &out, &options).expect("writing the bundle");
    assert!(out.is_file());
    // The config's token was redacted, the CNI kubeconfig was not collected at all.
    let cfg = manifest
        .entries
        .iter()
        .find(|e| e.path == "files/etc/rancher/rke2/config.yaml")
        .unwrap();
    assert_eq!(cfg.redactions, 1);
    assert!(
        !manifest
            .entries
            .iter()
            .any(|e| e.path.contains("kubeconfig"))
    );
    assert!(
        manifest
            .missing
            .iter()
            .any(|m| m.what == "iptables-legacy-save")
    );
    // Never overwrite.
    let again = write_bundle(&live, &out, &options).unwrap_err();
    assert!(again.contains("already exists"), "{again}");

    let bundle = open_bundle(&out).expect("reading it back");
    assert_eq!(bundle.kind(), BundleKind::Plumb);
    let text = bundle
        .file("/etc/rancher/rke2/config.yaml")
        .unwrap()
        .text()
        .into_owned();
    assert!(
        !text.contains("K10supersecret") && text.contains("token: REDACTED"),
        "{text}"
    );
    let (from_live, from_bundle) = (gather(&live, &options), gather(&bundle, &options));
    let tables = |f: &plumb_facts::Facts| {
        f.ruleset.value().map(|r| {
            r.tables
                .iter()
                .map(|t| (t.family, t.name.to_string(), t.rule_count()))
                .collect::<Vec<_>>()
        })
    };
    assert_eq!(tables(&from_live), tables(&from_bundle));
    assert!(
        from_bundle
            .ruleset
            .value()
            .unwrap()
            .table(Family::Ip, "nat")
            .is_some()
    );
    assert_eq!(
        from_live.sysctl("net.ipv4.ip_forward"),
        from_bundle.sysctl("net.ipv4.ip_forward")
    );
    assert_eq!(from_bundle.pod_logs.len(), 1);
    // Probe results travel in the bundle, including "could not connect".
    assert_eq!(from_live.clusterip_connect, from_bundle.clusterip_connect);
    assert!(from_bundle.kube_proxy_healthz.value().is_none());
    assert!(
        !matches!(&from_bundle.kube_proxy_healthz, plumb_facts::Fact::Unknown { reason } if reason.contains("holds no live"))
    );
}
