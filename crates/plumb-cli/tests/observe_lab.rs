//! Privileged end to end on the lab (docs/lab.md): `plumb observe --lab -o json` sees
//! what the scenario does to a pod's traffic — on `healthy` the connection to
//! 10.43.0.1:443 as the `default/kubernetes` Service translated to the API endpoint; on
//! `ufw-active` the pod's SYN dropped with NETFILTER_DROP by UFW's FORWARD policy; on
//! `no-endpoints` the SYN to kube-dns rejected by kube-proxy's "has no endpoints" rule;
//! on the kube-proxy-free `cilium-kpr` the connections Cilium's socket load balancer
//! translated named by their frontends from its maps, and said once that Cilium's BPF
//! drops are not netfilter's.
//! One lab per machine: run under the lab lock with `--test-threads=1`.

use plumb_lab::{Backend, Lab, LabOptions, Scenario};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn root_or_skip() -> bool {
    plumb_testkit::privileged(&["ip", "iptables-nft-restore", "iptables-nft-save", "ufw"])
}

fn up(scenario: Scenario) -> Lab {
    let _ = plumb_lab::down();
    let opts = LabOptions {
        actor_exe: Some(env!("CARGO_BIN_EXE_plumb").into()),
        backend: Backend::Nft,
        ..LabOptions::default()
    };
    Lab::up_with(scenario, opts).unwrap_or_else(|e| panic!("{scenario} up: {e}"))
}

/// `plumb observe --lab ARGS -o json`, once it says it is listening (bounded wait).
fn observe(args: &[&str]) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(["observe", "--lab", "-o", "json"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("plumb observe");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("observe: {line}");
            if line.contains("listening in") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("plumb observe listening within 30 s");
    child
}

fn lines(child: Child) -> Vec<serde_json::Value> {
    let out = child
        .wait_with_output()
        .expect("observe ends after --duration");
    assert!(out.status.success(), "exit {:?}", out.status);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// A few connects from pod 0 to `addr`, spread over a second.
fn connect_from_pod(lab: &Lab, addr: SocketAddr) {
    for _ in 0..3 {
        let _ = lab.connect_from_pod(0, addr, Duration::from_millis(300));
    }
}

#[test]
fn healthy_shows_the_kubernetes_service_and_its_endpoint() {
    if !root_or_skip() {
        return;
    }
    let lab = up(Scenario::Healthy);
    let observer = observe(&["--duration", "4", "--verdict", "forwarded"]);
    connect_from_pod(&lab, lab.cluster_ip());
    let all = lines(observer);
    let flow = all
        .iter()
        .find(|v| {
            v["IP"]["destination"] == "10.43.0.1"
                && v["l4"]["TCP"]["destination_port"] == 443
                && v["IP"]["source"]
                    .as_str()
                    .is_some_and(|s| s.starts_with("10.42."))
        })
        .unwrap_or_else(|| panic!("no pod flow to 10.43.0.1:443: {all:?}"));
    assert_eq!(flow["verdict"], "FORWARDED");
    assert_eq!(
        flow["destination_service"],
        serde_json::json!({"namespace": "default", "name": "kubernetes"})
    );
    assert_eq!(
        flow["translated_destination"],
        lab.api_endpoint().to_string()
    );
    assert_eq!(flow["netns"], "plumb-node");
    drop(lab);
}

#[test]
fn ufw_active_drops_pod_to_service_with_ufws_policy_named() {
    if !root_or_skip() {
        return;
    }
    let lab = up(Scenario::UfwActive);
    lab.wait_until("UFW's chains", Duration::from_secs(30), |l| {
        l.node_output(&["iptables-save", "-t", "filter"])
            .is_ok_and(|s| s.contains(":ufw-"))
    })
    .expect("ufw active");
    let observer = observe(&[
        "--duration",
        "5",
        "--verdict",
        "dropped",
        "--reason",
        "NETFILTER_DROP",
    ]);
    connect_from_pod(&lab, lab.cluster_ip());
    let all = lines(observer);
    let api = lab.api_endpoint();
    // FORWARD comes after kube-proxy's DNAT: the dropped SYN goes to the endpoint.
    let dropped = all
        .iter()
        .find(|v| {
            v["IP"]["destination"] == api.ip().to_string()
                && v["l4"]["TCP"]["destination_port"] == api.port()
        })
        .unwrap_or_else(|| panic!("no drop of the pod's SYN to {api}: {all:?}"));
    assert_eq!(dropped["verdict"], "DROPPED");
    assert_eq!(dropped["drop_reason"], "NETFILTER_DROP");
    assert_eq!(dropped["destination_service"]["name"], "kubernetes");
    let rule = &dropped["rule"];
    assert_eq!(rule["status"], "found", "{rule}");
    assert_eq!(rule["rule"]["chain"], "FORWARD", "{rule}");
    assert_eq!(rule["rule"]["text"], "policy DROP", "{rule}");
    assert_eq!(rule["rule"]["owner"], "ufw", "{rule}");
    drop(lab);
}

/// `--confirm-with-trace` on the lab: nftrace sees the same FORWARD policy drop the
/// counters named, and the trace table is gone afterwards.
#[test]
fn ufw_active_drop_is_confirmed_by_nftrace() {
    if !root_or_skip() || !plumb_testkit::privileged(&["nft"]) {
        return;
    }
    let lab = up(Scenario::UfwActive);
    lab.wait_until("UFW's chains", Duration::from_secs(30), |l| {
        l.node_output(&["iptables-save", "-t", "filter"])
            .is_ok_and(|s| s.contains(":ufw-"))
    })
    .expect("ufw active");
    let observer = observe(&[
        "--duration",
        "5",
        "--reason",
        "NETFILTER_DROP",
        "--confirm-with-trace",
    ]);
    connect_from_pod(&lab, lab.cluster_ip());
    let all = lines(observer);
    let api = lab.api_endpoint();
    let dropped = all
        .iter()
        .find(|v| v["IP"]["destination"] == api.ip().to_string() && v["rule"]["status"] == "found")
        .unwrap_or_else(|| panic!("no attributed drop to {api}: {all:?}"));
    let trace = &dropped["trace"];
    assert_eq!(trace["agrees"], true, "{dropped}");
    assert_eq!(trace["trace"]["chain"], "FORWARD", "{trace}");
    assert_eq!(trace["trace"]["text"], "policy drop", "{trace}");
    let tables = lab.node_output(&["nft", "list", "tables"]).unwrap();
    assert!(!tables.contains("plumb-observe-trace"), "removed: {tables}");
    drop(lab);
}

#[test]
fn no_endpoints_reject_is_kube_proxys_rule() {
    if !root_or_skip() {
        return;
    }
    let lab = up(Scenario::NoEndpoints);
    lab.wait_until("kube-proxy's REJECT rules", Duration::from_secs(30), |l| {
        l.node_output(&["iptables-save", "-t", "filter"])
            .is_ok_and(|s| s.contains("has no endpoints"))
    })
    .expect("kube-dns without endpoints");
    let observer = observe(&["--duration", "5", "--verdict", "dropped", "--port", "53"]);
    let dns: SocketAddr = "10.43.0.10:53".parse().unwrap();
    connect_from_pod(&lab, dns);
    let all = lines(observer);
    let dropped = all
        .iter()
        .find(|v| v["IP"]["destination"] == "10.43.0.10" && v["drop_reason"] == "NETFILTER_DROP")
        .unwrap_or_else(|| panic!("no netfilter drop to 10.43.0.10:53: {all:?}"));
    assert_eq!(
        dropped["destination_service"],
        serde_json::json!({"namespace": "kube-system", "name": "kube-dns"})
    );
    let rule = &dropped["rule"];
    assert_eq!(rule["status"], "found", "{rule}");
    let text = rule["rule"]["text"].as_str().unwrap();
    assert!(
        text.contains("has no endpoints") && text.contains("-j REJECT"),
        "{rule}"
    );
    assert_eq!(rule["rule"]["owner"], "kube-proxy", "{rule}");
    drop(lab);
}

/// `plumb lab exec -- ARGS` (in the node namespace and the lab's cgroup, where the
/// socket load balancer is attached); its output, whatever the exit.
fn lab_exec(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(["lab", "exec", "--"])
        .args(args)
        .output()
        .expect("plumb lab exec");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn cilium_kpr_flows_are_named_by_cilium_frontends() {
    if !root_or_skip() || !plumb_testkit::privileged(&["curl", "bash"]) {
        return;
    }
    let lab = up(Scenario::CiliumKpr);
    let observer = observe(&["--duration", "4", "--verdict", "forwarded"]);
    let version = lab_exec(&[
        "curl",
        "-sk",
        "--max-time",
        "2",
        "https://10.43.0.1/version",
    ]);
    assert!(
        version.contains("gitVersion"),
        "curl via the ClusterIP: {version}"
    );
    lab_exec(&["bash", "-c", "exec 3<>/dev/tcp/10.43.0.10/53"]);
    let all = lines(observer);
    // The socket load balancer chose the backend at connect time: conntrack shows the
    // API endpoint, and the maps lead back to the ClusterIP.
    let api = lab.api_endpoint();
    let flow = all
        .iter()
        .find(|v| {
            v["IP"]["destination"] == api.ip().to_string()
                && v["l4"]["TCP"]["destination_port"] == api.port()
        })
        .unwrap_or_else(|| panic!("no flow to {api}: {all:?}"));
    assert_eq!(
        flow["destination_frontend"],
        serde_json::json!({"address": "10.43.0.1:443/TCP", "kind": "ClusterIP"}),
        "{flow}"
    );
    assert!(
        flow.get("destination_service").is_none(),
        "no kube-proxy: {flow}"
    );
    let dns = all
        .iter()
        .find(|v| v["l4"]["TCP"]["destination_port"] == 53)
        .unwrap_or_else(|| panic!("no flow to kube-dns's backend: {all:?}"));
    assert_eq!(
        dns["destination_frontend"]["address"], "10.43.0.10:53/TCP",
        "{dns}"
    );
    let notices: Vec<&str> = all
        .iter()
        .filter_map(|v| v["notice"].as_str())
        .filter(|n| n.contains("not netfilter's"))
        .collect();
    assert_eq!(notices.len(), 1, "said once: {all:?}");
    assert!(notices[0].contains("Cilium"), "{}", notices[0]);
    drop(lab);
}
