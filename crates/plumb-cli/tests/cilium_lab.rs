//! Privileged end to end on the kube-proxy-free lab scenarios (`cilium-kpr`,
//! `cilium-leftovers`): Services answer through Cilium's pinned maps and the lab's
//! socket load balancer with no KUBE-* rule; `plumb services`, `plumb cilium
//! services|verify|preflight` and `plumb doctor` judge the node as kube-proxy-free; the
//! load balancer serves the lab's cgroup only and never touches the host's bpffs or
//! root cgroup; `lab down` removes the pins, the bpffs mount and the cgroup, also when
//! the state file is gone. One lab per machine: run with `--test-threads=1` under the
//! lab lock. Skipped (with a reason) when not root.

use plumb_lab::{Lab, LabOptions, Scenario};
use serde_json::Value;
use std::net::SocketAddr;
use std::process::{Command, Output};
use std::time::Duration;

fn root_or_skip() -> bool {
    plumb_testkit::privileged(&["ip", "iptables-nft-restore", "bash", "curl", "bpftool"])
}

fn up(scenario: Scenario) -> Lab {
    up_with_services(scenario, None)
}

fn up_with_services(scenario: Scenario, services: Option<usize>) -> Lab {
    let _ = plumb_lab::down();
    let opts = LabOptions {
        actor_exe: Some(env!("CARGO_BIN_EXE_plumb").into()),
        services,
        ..LabOptions::default()
    };
    Lab::up_with(scenario, opts).unwrap_or_else(|e| panic!("{scenario} up: {e}"))
}

fn plumb(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(args)
        .output()
        .expect("running plumb")
}

fn json(args: &[&str]) -> (i32, Value) {
    let out = plumb(args);
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "plumb {args:?}: JSON: {e}\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), v)
}

fn with_status<'a>(report: &'a Value, status: &str) -> Vec<&'a Value> {
    report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["status"] == status)
        .collect()
}

fn ids(findings: &[&Value]) -> Vec<String> {
    findings
        .iter()
        .map(|f| f["id"].as_str().unwrap().to_string())
        .collect()
}

/// A connect from the lab's node through `plumb lab exec` (so in the lab's cgroup):
/// TCP with bash's /dev/tcp, UDP by sending a datagram and reading the echo coredns
/// sends back. True when it worked within 3 s.
fn lab_connect(address: &str, port: u64, proto: &str) -> bool {
    let script = match proto {
        "TCP" => format!("exec 3<>/dev/tcp/{address}/{port}"),
        "UDP" => format!(
            // One datagram each way; `head` reads it whole (bash's `read` takes a
            // datagram a byte at a time and loses the rest).
            "exec 3<>/dev/udp/{address}/{port}; printf plumb >&3; [ \"$(timeout 2 head -c 5 <&3)\" = plumb ]"
        ),
        other => panic!("unexpected protocol {other}"),
    };
    plumb(&["lab", "exec", "--", "timeout", "3", "bash", "-c", &script])
        .status
        .success()
}

/// The host's root cgroup (v2) and what bpftool says is attached there.
fn root_cgroup_programs() -> String {
    let root = plumb_lab::cilium_node::cgroup2_root().expect("a cgroup2 mount");
    let out = Command::new("bpftool")
        .args(["cgroup", "show", &root.to_string_lossy()])
        .output()
        .expect("bpftool runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn cilium_kpr_serves_every_cluster_ip_through_the_socket_lb_and_reads_kube_proxy_free() {
    if !root_or_skip() {
        return;
    }
    let host_pins_before =
        std::path::Path::new("/sys/fs/bpf/tc/globals/cilium_lb4_services_v2").exists();
    let lab = up(Scenario::CiliumKpr);
    let state = lab.state().clone();
    let cgroup = state.cgroup.clone().expect("the lab records its cgroup");
    assert!(cgroup.is_dir(), "{} exists", cgroup.display());
    assert_ne!(
        Some(cgroup.as_path()),
        plumb_lab::cilium_node::cgroup2_root().as_deref(),
        "never the root cgroup"
    );

    // No kube-proxy rule at all.
    let rules = lab.node_output(&["iptables-save"]).unwrap();
    for chain in ["KUBE-SVC-", "KUBE-SEP-", "KUBE-SERVICES"] {
        assert!(!rules.contains(chain), "{chain} in\n{rules}");
    }

    // The node reaches the API through the kubernetes ClusterIP with curl.
    let out = plumb(&[
        "lab",
        "exec",
        "--",
        "curl",
        "-sk",
        "--max-time",
        "3",
        "https://10.43.0.1/version",
    ]);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("gitVersion"),
        "curl https://10.43.0.1/version: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The same ClusterIP from the node namespace but outside the lab's cgroup: nothing
    // translates it (its route leads to the API namespace, which drops it).
    let outside = lab
        .connect_from_node(
            "10.43.0.1:443".parse::<SocketAddr>().unwrap(),
            Duration::from_millis(500),
        )
        .unwrap();
    assert_ne!(outside, plumb_lab::probe::Connect::Connected);
    // Attached to the lab's cgroup only: the host's root cgroup has none of it, and
    // the host's bpffs holds no Cilium map of the lab's.
    let attached = root_cgroup_programs();
    assert!(!attached.contains("sock4_connect"), "{attached}");
    if !host_pins_before {
        assert!(!std::path::Path::new("/sys/fs/bpf/tc/globals/cilium_lb4_services_v2").exists());
    }

    // `plumb services` on the lab's node: Cilium's map, and every frontend answers.
    let (code, services) = json(&["services", "--netns", "plumb-node", "--json"]);
    assert_eq!(code, 0, "{services}");
    assert_eq!(services["mode"], "cilium-bpf");
    let frontends = services["frontends"].as_array().unwrap();
    let listed: Vec<String> = frontends
        .iter()
        .map(|f| {
            format!(
                "{}:{}/{}",
                f["address"].as_str().unwrap(),
                f["port"],
                f["proto"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        listed.len(),
        plumb_lab::cilium_node::services().len(),
        "{listed:?}"
    );
    for f in frontends {
        let (a, p, proto) = (
            f["address"].as_str().unwrap(),
            f["port"].as_u64().unwrap(),
            f["proto"].as_str().unwrap(),
        );
        assert!(
            lab_connect(a, p, proto),
            "{a}:{p}/{proto} through the lab's socket LB"
        );
    }

    // `--lab` names the same node; nothing of kube-proxy is left to mention.
    let (code, by_lab) = json(&["services", "--lab", "--json"]);
    assert_eq!(code, 0, "{by_lab}");
    assert_eq!(by_lab["mode"], "cilium-bpf");
    assert_eq!(by_lab["frontends"], services["frontends"]);
    assert!(by_lab.get("kube_proxy_leftovers").is_none(), "{by_lab:#}");

    // verify: migrated, exit 0.
    let (code, verify) = json(&["cilium", "verify", "--lab", "--json"]);
    assert_eq!(verify["verdict"], "migrated", "{verify:#}");
    assert_eq!(code, 0);
    assert_eq!(verify["lb"]["mode"], "cilium-bpf");
    // preflight: a verdict, and the lab's own API endpoint in the generated values.
    let (code, preflight) = json(&["cilium", "preflight", "--lab", "--json"]);
    assert!(
        matches!(preflight["verdict"].as_str(), Some("go" | "no-go")),
        "{preflight:#}"
    );
    assert_eq!(code, if preflight["verdict"] == "go" { 0 } else { 1 });
    assert!(
        preflight["config"]["helm_values"]
            .as_str()
            .unwrap()
            .contains("k8sServiceHost: 127.0.0.1"),
        "{preflight:#}"
    );
    // The move's own conflicts were judged on the lab node: its route for the Service
    // CIDR through eth0 (where the lab sends untranslated Service traffic) overlaps.
    let conflicts = preflight["conflicts"].as_array().unwrap();
    let overlap = conflicts
        .iter()
        .find(|f| f["id"] == "cilium-cidr-overlap")
        .unwrap_or_else(|| panic!("{preflight:#}"));
    assert!(
        overlap["title"]
            .as_str()
            .unwrap()
            .contains("route 10.43.0.0/16 via eth0"),
        "{overlap:#}"
    );
    // Nothing filters the lab node's INPUT: the tunnel ports are not a conflict.
    assert!(
        !conflicts
            .iter()
            .any(|f| f["id"] == "cilium-tunnel-port-blocked"),
        "{preflight:#}"
    );

    // doctor: nothing broken, kube-proxy's absence is the design, Cilium named.
    let (code, report) = json(&["doctor", "--lab", "--json"]);
    let problems = with_status(&report, "problem");
    assert!(
        problems.is_empty(),
        "problems {:?}\n{report:#}",
        ids(&problems)
    );
    assert_eq!(report["root_cause"], Value::Null);
    assert_eq!(code, 0);
    let ok = with_status(&report, "ok");
    let dataplane = ok
        .iter()
        .find(|f| f["id"] == "cilium-service-dataplane")
        .unwrap_or_else(|| panic!("{report:#}"));
    assert!(
        dataplane["title"]
            .as_str()
            .unwrap()
            .contains("kube-proxy replacement"),
        "{dataplane}"
    );
    for id in [
        "kube-proxy-unhealthy",
        "kubernetes-service-not-translated",
        "clusterip-unreachable",
    ] {
        assert!(ids(&ok).iter().any(|i| i == id), "{id} ok: {report:#}");
    }

    let down = lab.down();
    assert!(down.errors.is_empty(), "{:?}", down.errors);
    assert!(!cgroup.exists(), "the lab's cgroup is removed");
    assert!(
        plumb_lab::leftovers().is_empty(),
        "{:?}",
        plumb_lab::leftovers()
    );
}

#[test]
fn cilium_leftovers_are_named_by_verify_and_doctor() {
    if !root_or_skip() {
        return;
    }
    let lab = up(Scenario::CiliumLeftovers);
    // Services still work through the socket load balancer.
    assert!(lab_connect("10.43.0.1", 443, "TCP"));

    let (code, verify) = json(&["cilium", "verify", "--lab", "--json"]);
    assert_eq!(verify["verdict"], "incomplete", "{verify:#}");
    assert_eq!(code, 1);
    let problems = with_status(&verify, "problem");
    let problem_ids = ids(&problems);
    for id in [
        "kube-proxy-rules-remain",
        "old-cni-config",
        "old-cni-interfaces",
    ] {
        assert!(problem_ids.iter().any(|i| i == id), "{id}: {verify:#}");
    }
    let text = serde_json::to_string(&verify).unwrap();
    for leftover in [
        "10-canal.conflist",
        "calico-kubeconfig",
        "cali3f2a9c1d7e8",
        "flannel.1",
        "KUBE-SEP-",
    ] {
        assert!(text.contains(leftover), "{leftover} named: {verify:#}");
    }
    let (_, services) = json(&["cilium", "services", "--lab", "--json"]);
    assert_eq!(services["mode"], "cilium-bpf");
    // `plumb services` prints what serves the node -- Cilium's maps, not kube-proxy's
    // stale map -- and counts kube-proxy's rules as leftovers (they are not hooked).
    for args in [
        &["services", "--lab", "--json"][..],
        &["services", "--netns", "plumb-node", "--json"][..],
    ] {
        let (code, node) = json(args);
        assert_eq!(code, 0, "{args:?}: {node:#}");
        assert_eq!(node["mode"], "cilium-bpf", "{args:?}: {node:#}");
        assert_eq!(node["frontends"], services["frontends"], "{args:?}");
        let left = &node["kube_proxy_leftovers"];
        assert_eq!(left["stale"], true, "{node:#}");
        assert!(left["chains"].as_u64().unwrap() > 0, "{node:#}");
        assert!(left["service_ports"].as_u64().unwrap() > 0, "{node:#}");
        assert_eq!(left["hooked"], false, "{node:#}");
    }
    let text = plumb(&["services", "--lab"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("Cilium load balancer") && text.contains("stale leftovers"),
        "{text}"
    );
    assert!(!text.contains("kube-proxy iptables mode"), "{text}");
    // A kube-proxy that still runs in the node's namespace keeps its rules current:
    // they are then no leftover, and kube-proxy's map is printed with Cilium's count.
    let scratch = plumb_testkit::Scratch::new("cilium-lab-kube-proxy");
    let fake = scratch.path().join("kube-proxy");
    std::fs::copy("/bin/sleep", &fake).unwrap();
    let mut kube_proxy = Command::new("ip")
        .args(["netns", "exec", "plumb-node"])
        .arg(&fake)
        .arg("60")
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let beside = loop {
        let (code, v) = json(&["services", "--lab", "--json"]);
        if v.get("maps").is_some() || std::time::Instant::now() > deadline {
            break (code, v);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = kube_proxy.kill();
    let _ = kube_proxy.wait();
    let (_, beside) = beside;
    assert_eq!(beside["cilium_frontends"], 4, "{beside:#}");
    assert!(!beside["maps"].as_array().unwrap().is_empty(), "{beside:#}");
    assert!(beside.get("kube_proxy_leftovers").is_none(), "{beside:#}");
    // preflight reads the same node: Flannel's device is there, no policy chains.
    let (code, preflight) = json(&["cilium", "preflight", "--lab", "--json"]);
    assert!(
        matches!(preflight["verdict"].as_str(), Some("go" | "no-go")),
        "{preflight:#}"
    );
    assert_eq!(code, if preflight["verdict"] == "go" { 0 } else { 1 });

    // doctor: the leftovers, and no claim that kube-proxy is broken or the API down.
    let (code, report) = json(&["doctor", "--lab", "--json"]);
    assert_eq!(report["root_cause"], "old-cni-config", "{report:#}");
    assert_eq!(code, 1);
    let problem_ids = ids(&with_status(&report, "problem"));
    assert!(problem_ids.iter().any(|i| i == "kube-proxy-rules-remain"));
    for wrong in [
        "kube-proxy-rules-missing",
        "kube-proxy-unhealthy",
        "kubernetes-service-not-translated",
        "api-server-unhealthy",
        "clusterip-unreachable",
    ] {
        assert!(
            !problem_ids.iter().any(|i| i == wrong),
            "{wrong}: {report:#}"
        );
    }
    let down = lab.down();
    assert!(down.errors.is_empty(), "{:?}", down.errors);
}

/// `lab up cilium-kpr --services 50`: 50 frontends in Cilium's maps, and every one of
/// them answers through the socket load balancer (no KUBE-* rule anywhere).
#[test]
fn cilium_kpr_with_50_services_reaches_every_cluster_ip_through_the_socket_lb() {
    if !root_or_skip() {
        return;
    }
    // Out of range: refused before anything is made.
    let _ = plumb_lab::down();
    let out = plumb(&["lab", "up", "cilium-kpr", "--services", "3"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("program 4 to 10000 Service ports"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        plumb_lab::leftovers().is_empty(),
        "{:?}",
        plumb_lab::leftovers()
    );

    let lab = up_with_services(Scenario::CiliumKpr, Some(50));
    assert_eq!(lab.state().services, 50);
    let rules = lab.node_output(&["iptables-save"]).unwrap();
    assert!(!rules.contains("KUBE-SVC-"), "{rules}");
    let (code, services) = json(&["services", "--lab", "--json"]);
    assert_eq!(code, 0, "{services:#}");
    assert_eq!(services["mode"], "cilium-bpf");
    let frontends = services["frontends"].as_array().unwrap();
    assert_eq!(frontends.len(), 50, "{services:#}");
    let mut unreached = Vec::new();
    for f in frontends {
        let (a, p, proto) = (
            f["address"].as_str().unwrap(),
            f["port"].as_u64().unwrap(),
            f["proto"].as_str().unwrap(),
        );
        assert!(
            f["problems"].as_array().is_none_or(|p| p.is_empty()),
            "{f:#}"
        );
        if !lab_connect(a, p, proto) {
            unreached.push(format!("{a}:{p}/{proto}"));
        }
    }
    assert!(unreached.is_empty(), "not reached: {unreached:?}");
    let down = lab.down();
    assert!(down.errors.is_empty(), "{:?}", down.errors);
}

#[test]
fn lab_down_removes_the_socket_lb_without_the_state_file() {
    if !root_or_skip() {
        return;
    }
    let lab = up(Scenario::CiliumKpr);
    let state = lab.detach();
    let cgroup = state.cgroup.clone().unwrap();
    let links = state.root.join(plumb_lab::cilium_node::LINKS);
    let link_ids: Vec<u64> = plumb_lab::socket_lb::PROGRAMS
        .iter()
        .map(|p| {
            let out = Command::new("bpftool")
                .args(["-j", "link", "show", "pinned"])
                .arg(links.join(p))
                .output()
                .unwrap();
            let v: Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("bpftool link show pinned {p}: {e}"));
            v["id"].as_u64().expect("a link id")
        })
        .collect();
    // A crashed `up` or a lost state file: down finds everything by name.
    std::fs::remove_file(plumb_lab::state::state_path()).unwrap();
    let down = plumb_lab::down();
    assert!(down.errors.is_empty(), "{:?}", down.errors);
    assert!(!cgroup.exists(), "{} removed", cgroup.display());
    assert!(!links.exists());
    for id in &link_ids {
        let gone = Command::new("bpftool")
            .args(["link", "show", "id", &id.to_string()])
            .output()
            .unwrap();
        assert!(!gone.status.success(), "link {id} is detached and freed");
    }
    assert!(
        plumb_lab::leftovers().is_empty(),
        "{:?}",
        plumb_lab::leftovers()
    );
    // Idempotent.
    assert!(plumb_lab::down().was_clean());
}
