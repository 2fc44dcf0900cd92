//! `plumb cilium services|verify` on saved listings and a node file tree: the service
//! map from a real `cilium bpf lb list`, and the migration verdict with its exit code.

use plumb_testkit::Scratch;
use std::process::Command;

fn plumb(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("running plumb")
}

/// A frontend with two backends, as Cilium 1.17 lists it, and one without.
const LB_LIST: &str = "SERVICE ADDRESS               BACKEND ADDRESS (REVNAT_ID) (SLOT)\n\
10.43.0.10:53/UDP (0)         0.0.0.0:0 (2) (0) [ClusterIP, non-routable]\n\
10.43.0.10:53/UDP (1)         10.42.0.5:53/UDP (2) (1)\n\
10.43.0.10:53/UDP (2)         10.42.1.9:53/UDP (2) (2)\n\
192.168.60.179:443/TCP (0)    0.0.0.0:0 (15) (0) [ClusterIP, non-routable]\n";

#[test]
fn services_from_a_saved_listing_in_json() {
    let dir = Scratch::new("cilium-services");
    dir.write("lb.txt", LB_LIST);
    let path = dir.path().join("lb.txt");
    let out = plumb(&[
        "cilium",
        "services",
        "--lb-list",
        path.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["mode"], "cilium-bpf-lb-list");
    let f = v["frontends"].as_array().unwrap();
    assert_eq!(f.len(), 2);
    assert_eq!(f[0]["backends"].as_array().unwrap().len(), 2);
    assert_eq!(f[0]["backends"][1]["address"], "10.42.1.9");
    assert_eq!(f[1]["problems"][0]["kind"], "no-backends");
}

#[test]
fn a_node_without_maps_or_listing_is_an_error_that_says_where_it_looked() {
    let dir = Scratch::new("cilium-none");
    let out = plumb(&["cilium", "services", "--root", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("sys/fs/bpf/tc/globals"), "{err}");
}

#[test]
fn verify_names_what_is_left_and_exits_1_until_it_is_gone() {
    let dir = Scratch::new("cilium-verify");
    dir.write("lb.txt", LB_LIST);
    dir.write("root/etc/cni/net.d/05-cilium.conflist", "{}");
    dir.write("root/etc/cni/net.d/10-canal.conflist", "{}");
    dir.write(
        "root/var/lib/rancher/rke2/agent/pod-manifests/kube-proxy.yaml",
        "kind: Pod\n",
    );
    dir.write(
        "left.rules",
        "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-ERIFXISQEP7F7OF4 - [0:0]\n-A PREROUTING -j KUBE-SERVICES\nCOMMIT\n",
    );
    dir.write(
        "clean.rules",
        "*filter\n:INPUT ACCEPT [0:0]\n:KUBE-FIREWALL - [0:0]\nCOMMIT\n",
    );
    let p = |rel: &str| dir.path().join(rel).display().to_string();
    let run = |rules: &str| {
        plumb(&[
            "cilium",
            "verify",
            "--root",
            &p("root"),
            "--lb-list",
            &p("lb.txt"),
            "--ruleset",
            &p(rules),
            "-o",
            "json",
        ])
    };
    let out = run("left.rules");
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["verdict"], "incomplete");
    let problems: Vec<&str> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["status"] == "problem")
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    for id in [
        "kube-proxy-rules-remain",
        "kube-proxy-still-deployed",
        "old-cni-config",
        "cilium-frontend-without-backends",
    ] {
        assert!(problems.contains(&id), "{id} not in {problems:?}");
    }

    // What a finished migration leaves: kubelet's chain, Cilium's configuration only.
    std::fs::remove_file(dir.path().join("root/etc/cni/net.d/10-canal.conflist")).unwrap();
    std::fs::remove_file(
        dir.path()
            .join("root/var/lib/rancher/rke2/agent/pod-manifests/kube-proxy.yaml"),
    )
    .unwrap();
    let out = run("clean.rules");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["verdict"], "migrated", "{v:#}");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn preflight_judges_this_machine_s_kernel() {
    if !plumb_testkit::privileged(&[]) {
        return;
    }
    let out = plumb(&[
        "cilium",
        "preflight",
        "--cilium-version",
        "v1.16.3",
        "-o",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["release"], "1.16");
    let status = |id: &str| {
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["id"] == id)
            .map(|f| f["status"].as_str().unwrap().to_string())
            .unwrap_or_else(|| panic!("{id} missing: {v:#}"))
    };
    // This machine runs a 6.x kernel with BTF; as root every probe can answer.
    assert_eq!(status("cilium-kernel-version"), "ok");
    assert_eq!(status("cilium-kernel-btf"), "ok");
    assert_eq!(status("cilium-bpf-features"), "ok");
    for id in ["cilium-kernel-config", "cilium-bpffs", "cilium-cgroup2"] {
        status(id);
    }
    // The exit code follows the verdict.
    let go = v["verdict"] == "go";
    assert_eq!(out.status.code(), Some(if go { 0 } else { 1 }), "{v:#}");

    let bad = plumb(&["cilium", "preflight", "--cilium-version", "next"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--cilium-version next"));
}

#[test]
fn verify_before_matches_every_kube_proxy_service_against_cilium_s_frontends() {
    use plumb_kubeproxy::{
        GeneratorConfig, IptablesSaveOptions, KubeProxyRules, ProxierOptions, generate,
    };
    let cluster = generate(&GeneratorConfig {
        services: 3,
        ..Default::default()
    })
    .unwrap();
    let dump = KubeProxyRules::new(&cluster, &ProxierOptions::default())
        .to_iptables_save(&IptablesSaveOptions::default());
    let rs = plumb_ruleset::format::parse_bytes(dump.as_bytes(), &Default::default())
        .unwrap()
        .ruleset;
    // Cilium's listing of the same Services: each ClusterIP with kube-proxy's endpoints.
    let mut listing = String::new();
    let mut first_ip = None;
    for (i, s) in plumb_kubeproxy::recover::recover(&rs)
        .iter()
        .flat_map(|m| &m.services)
        .filter(|s| s.cluster_ip.is_some())
        .enumerate()
    {
        let front = format!(
            "{}:{}/{}",
            s.cluster_ip.unwrap(),
            s.port.unwrap(),
            s.protocol.as_deref().unwrap_or("tcp").to_uppercase()
        );
        first_ip.get_or_insert(front.clone());
        listing += &format!("{front} (0)   0.0.0.0:0 ({}) (0) [ClusterIP]\n", i + 1);
        for (slot, e) in s.endpoints.iter().enumerate() {
            listing += &format!(
                "{front} ({})   {}/TCP ({}) ({})\n",
                slot + 1,
                e.address().unwrap(),
                i + 1,
                slot + 1
            );
        }
    }
    let dir = Scratch::new("cilium-before");
    dir.write("before.save", &dump);
    dir.write("lb.txt", &listing);
    dir.write("rules", "*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n");
    dir.write("root/etc/cni/net.d/05-cilium.conflist", "{}");
    let p = |rel: &str| dir.path().join(rel).display().to_string();
    let run = || {
        plumb(&[
            "cilium",
            "verify",
            "--root",
            &p("root"),
            "--ruleset",
            &p("rules"),
            "--lb-list",
            &p("lb.txt"),
            "--before",
            &p("before.save"),
            "-o",
            "json",
        ])
    };
    let out = run();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["verdict"], "migrated", "{v:#}");

    // One ClusterIP fewer in Cilium: that Service is named as missing.
    let gone = first_ip.unwrap();
    let fewer: String = listing
        .lines()
        .filter(|l| !l.starts_with(&gone))
        .map(|l| format!("{l}\n"))
        .collect();
    dir.write("lb.txt", &fewer);
    let out = run();
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let missing = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "cilium-migration-missing-services")
        .unwrap();
    assert_eq!(missing["status"], "problem");
    let ip = gone.split(':').next().unwrap();
    assert!(
        missing["evidence"][0]["text"]
            .as_str()
            .unwrap()
            .contains(ip),
        "{missing:#}"
    );
}

#[test]
fn verify_on_a_live_namespace_names_the_old_cni_s_interfaces() {
    if !plumb_testkit::privileged(&["ip"]) {
        return;
    }
    let ns = plumb_os::netns::Netns::create("plumb-cilium-links").expect("a private namespace");
    let (ok, _, err) = ns
        .exec(
            "ip",
            &[
                "link",
                "add",
                "flannel.1",
                "type",
                "veth",
                "peer",
                "name",
                "cali9f3e",
            ],
            None,
        )
        .unwrap();
    assert!(ok, "{err}");
    let dir = Scratch::new("cilium-links");
    dir.write("root/etc/cni/net.d/05-cilium.conflist", "{}");
    let root = dir.path().join("root");
    let out = plumb(&[
        "cilium",
        "verify",
        "--root",
        root.to_str().unwrap(),
        "--netns",
        ns.name(),
        "-o",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let f = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "old-cni-interfaces")
        .unwrap_or_else(|| panic!("{v:#}"));
    assert_eq!(f["status"], "problem");
    let title = f["title"].as_str().unwrap();
    assert!(
        title.contains("flannel.1") && title.contains("cali9f3e"),
        "{title}"
    );
    assert_eq!(v["verdict"], "incomplete");
}

#[test]
fn preflight_derives_the_configuration_from_the_node_s_files() {
    if !plumb_testkit::privileged(&[]) {
        return;
    }
    let fixtures =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/distributions");
    let config = |dist: &str| {
        let out = plumb(&[
            "cilium",
            "preflight",
            "--cilium-version",
            "1.16",
            "--root",
            fixtures.join(dist).to_str().unwrap(),
            "-o",
            "json",
        ]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["config"].clone()
    };
    let rke2 = config("rke2");
    assert_eq!(
        rke2["rke2_config"],
        "cni: cilium\ndisable-kube-proxy: true\n"
    );
    let values = rke2["helm_values"].as_str().unwrap();
    assert!(
        values.contains("k8sServiceHost: 127.0.0.1\nk8sServicePort: 6443"),
        "{values}"
    );
    // The pod CIDR the fixture's kube-proxy manifest gives, not RKE2's default.
    assert!(
        values.contains("ipv4NativeRoutingCIDR: 10.52.0.0/16"),
        "{values}"
    );

    let kubeadm = config("kubeadm");
    assert!(kubeadm["rke2_config"].is_null());
    let values = kubeadm["helm_values"].as_str().unwrap();
    // No kube-proxy rule on this machine names the API server: a placeholder, said so.
    assert!(
        values.contains("k8sServiceHost: <API-SERVER-ADDRESS>"),
        "{values}"
    );
    assert!(
        kubeadm["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains("fill in"))
    );
}

/// A Canal node's rules as loaded into a private namespace: a host firewall whose INPUT
/// accepts SSH and Flannel's 8472 only (Cilium's migration port 8473 and Geneve are
/// dropped by the policy), a hostPort DNAT of the portmap plugin and a Calico policy
/// chain; a VPN-like route over the Service CIDR.
const CANAL_NODE: &str = "*filter
:INPUT DROP [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-FIREWALL - [0:0]
:cali-FORWARD - [0:0]
:cali-pi-_Xk2PpQrs - [0:0]
-A INPUT -i lo -j ACCEPT
-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT
-A INPUT -p udp -m udp --dport 8472 -j ACCEPT
-A FORWARD -j cali-FORWARD
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:CNI-HOSTPORT-DNAT - [0:0]
:CNI-DN-3e1a2e5c0f4b4b9e7d1a2 - [0:0]
-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
-A CNI-HOSTPORT-DNAT -p tcp -m multiport --dports 8080 -j CNI-DN-3e1a2e5c0f4b4b9e7d1a2
-A CNI-DN-3e1a2e5c0f4b4b9e7d1a2 -p tcp -m tcp --dport 8080 -j DNAT --to-destination 10.42.0.10:80
COMMIT
";

#[test]
fn preflight_traces_the_tunnel_ports_and_names_overlaps_hostports_and_policies() {
    if !plumb_testkit::privileged(&["ip", "iptables-nft-restore"]) {
        return;
    }
    let ns = plumb_os::netns::Netns::create("plumb-cilium-preflight").expect("a namespace");
    for cmd in [
        "ip link set lo up",
        "ip link add eth0 type veth peer name eth0p",
        "ip link set eth0p up",
        "ip addr add 192.168.100.10/24 dev eth0",
        "ip link set eth0 up",
        "ip route add 10.43.0.0/16 via 192.168.100.1 dev eth0",
    ] {
        let w: Vec<&str> = cmd.split(' ').collect();
        let (ok, _, err) = ns.exec(w[0], &w[1..], None).unwrap();
        assert!(ok, "{cmd}: {err}");
    }
    let (ok, _, err) = ns
        .exec("iptables-nft-restore", &[], Some(CANAL_NODE))
        .unwrap();
    assert!(ok, "{err}");
    let dir = Scratch::new("cilium-preflight");
    dir.write(
        "root/etc/rancher/rke2/config.yaml",
        "cni: canal\ncluster-cidr: 10.42.0.0/16\nservice-cidr: 10.43.0.0/16\n",
    );
    let root = dir.path().join("root");
    let out = plumb(&[
        "cilium",
        "preflight",
        "--root",
        root.to_str().unwrap(),
        "--netns",
        ns.name(),
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
    });
    let conflict = |id: &str| {
        v["conflicts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["id"] == id)
            .unwrap_or_else(|| panic!("{id} in {v:#}"))
            .clone()
    };
    let tunnel = conflict("cilium-tunnel-port-blocked");
    assert_eq!(tunnel["status"], "problem", "{tunnel:#}");
    let title = tunnel["title"].as_str().unwrap();
    // 8472 is accepted by its rule; the migration port and Geneve meet the DROP policy.
    assert!(
        title.contains("8473/udp") && title.contains("6081/udp") && !title.contains("8472/udp"),
        "{title}"
    );
    let overlap = conflict("cilium-cidr-overlap");
    assert!(
        overlap["title"]
            .as_str()
            .unwrap()
            .contains("route 10.43.0.0/16 via eth0"),
        "{overlap:#}"
    );
    let hostport = conflict("cilium-hostport-users");
    assert!(
        hostport["evidence"][0]["text"]
            .as_str()
            .unwrap()
            .contains("10.42.0.10:80"),
        "{hostport:#}"
    );
    assert_eq!(conflict("cilium-network-policies")["status"], "problem");
}
