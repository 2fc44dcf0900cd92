//! Privileged: `plumb collect` of a network namespace standing for a node, with a node file
//! tree beside it, read back as a bundle: the same facts, secrets redacted, nothing
//! overwritten. Skips with a reason when not root.

use plumb_collect::bundle_writer::write_bundle;
use plumb_collect::facts::{GatherOptions, gather};
use plumb_collect::node::{BundleKind, LiveNode, NodeSource, open_bundle};
use plumb_os::netns::Netns;
use plumb_os::runner::SystemRunner;
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
    // Every restart's log (kubelet names them 0.log, 1.log, ...), kubelet's own log (a
    // secret in it), and the static pod manifests (kube-proxy's probes, the API server's
    // Service CIDR).
    for n in 1..=2 {
        w(
            &format!("var/log/pods/kube-system_kube-proxy-n1_u1/kube-proxy/{n}.log"),
            &format!(
                "2026-11-30T08:0{n}:00.000000001Z stderr F I1130 08:0{n}:00.000001 1 server.go:1] \"Using iptables Proxier\"\n"
            ),
        );
    }
    w(
        "var/lib/rancher/rke2/agent/logs/kubelet.log",
        "I1130 08:01:30.000001 2101 prober.go:107] \"Probe failed\" probeType=\"Liveness\" pod=\"kube-system/kube-proxy-n1\" containerName=\"kube-proxy\" probeResult=\"failure\" output=\"HTTP probe failed with statuscode: 503\"\n\
         I1130 08:01:31.000001 2101 kuberuntime_manager.go:1056] \"Message for Container of pod\" containerName=\"kube-proxy\" pod=\"kube-system/kube-proxy-n1\" containerMessage=\"Container kube-proxy failed liveness probe, will be restarted\"\n\
         I1130 08:01:32.000001 2101 server.go:1] \"request\" header=\"Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.secretpayload\"\n",
    );
    w(
        "var/lib/rancher/rke2/agent/pod-manifests/kube-proxy.yaml",
        "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: kube-proxy\n    livenessProbe:\n      httpGet:\n        path: /healthz\n        port: 10256\n",
    );
    w(
        "var/lib/rancher/rke2/agent/pod-manifests/kube-apiserver.yaml",
        "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: kube-apiserver\n    command:\n    - kube-apiserver\n    - --service-cluster-ip-range=10.2.0.0/16\n",
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
    // Every restart's log came along, and kubelet's log (redacted), and the manifests.
    let restarts: Vec<Option<u32>> = from_bundle.pod_logs.iter().map(|l| l.restart).collect();
    assert_eq!(restarts, vec![Some(0), Some(1), Some(2)]);
    let kubelet_log = bundle
        .file("/var/lib/rancher/rke2/agent/logs/kubelet.log")
        .unwrap()
        .text()
        .into_owned();
    assert!(!kubelet_log.contains("secretpayload"), "{kubelet_log}");
    let kubelet: Vec<_> = from_bundle
        .node_logs
        .iter()
        .filter(|l| l.component.as_deref() == Some("kubelet"))
        .collect();
    assert_eq!(kubelet.len(), 1, "{:?}", from_bundle.node_logs);
    assert_eq!(kubelet[0].signals.len(), 2);
    assert_eq!(
        from_bundle
            .kube_proxy_probes
            .value()
            .and_then(|p| p.liveness.as_deref()),
        Some("/healthz")
    );
    assert!(
        from_bundle
            .cluster_settings
            .iter()
            .any(|s| s.value == "10.2.0.0/16"),
        "{:?}",
        from_bundle.cluster_settings
    );
    let timeline = plumb_facts::timeline::build(&from_bundle);
    let kp = timeline.container("kube-proxy").unwrap();
    assert_eq!((kp.restarts, kp.logs, kp.liveness_restarts), (2, 3, 1));
    assert_eq!(kp.probe_codes.get(&503), Some(&1));
    // Probe results travel in the bundle, including "could not connect".
    assert_eq!(from_live.clusterip_connect, from_bundle.clusterip_connect);
    assert!(from_bundle.kube_proxy_healthz.value().is_none());
    assert!(
        !matches!(&from_bundle.kube_proxy_healthz, plumb_facts::Fact::Unknown { reason } if reason.contains("holds no live"))
    );
    // The boot-time state of the firewall managers' and agents' units travels too (this
    // machine's systemd answers for the named units only: a few lines).
    if let Some(live_units) = from_live.unit_files.value() {
        let back = from_bundle
            .unit_files
            .value()
            .expect("unit files in the bundle");
        assert_eq!(live_units, back);
        assert!(back.len() <= plumb_collect::node::unit_file_names().len());
        assert!(
            back.iter()
                .all(|u| plumb_collect::node::unit_file_names().contains(&u.name)),
            "{back:?}"
        );
    }
}
