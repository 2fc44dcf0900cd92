//! Privileged: `plumb services` on a kube-proxy-free node. In a private mount namespace
//! (so the host's /sys/fs/bpf is untouched) a bpffs holds Cilium's LB maps, made with
//! bpftool in Cilium's layouts; the node's network namespace has no kube-proxy rule.
//! plumb then shows Cilium's service map, `"mode": "cilium-bpf"`.

use std::process::Command;

#[test]
fn a_kube_proxy_free_node_shows_cilium_s_service_map() {
    if !plumb_testkit::privileged(&["unshare", "mount", "bpftool", "ip"]) {
        return;
    }
    let ns = plumb_os::netns::Netns::create("plumb-svc-cilium").expect("a private namespace");
    let g = "/sys/fs/bpf/tc/globals";
    // 10.43.0.10:53/UDP -> 10.42.0.5:53: slot 0 (count 1, rev-NAT 1, routable), slot 1
    // (backend 7); keys and values in Cilium's byte orders.
    let script = format!(
        "set -e; mount -t bpf bpf /sys/fs/bpf; mkdir -p {g}; \
         bpftool map create {g}/cilium_lb4_services_v2 type hash key 12 value 12 entries 64 name lb4_services; \
         bpftool map create {g}/cilium_lb4_backends_v3 type hash key 4 value 12 entries 64 name lb4_backends; \
         bpftool map update pinned {g}/cilium_lb4_services_v2 key hex 0a 2b 00 0a 00 35 00 00 11 00 00 00 value hex 00 00 00 00 01 00 00 01 40 00 00 00; \
         bpftool map update pinned {g}/cilium_lb4_services_v2 key hex 0a 2b 00 0a 00 35 01 00 11 00 00 00 value hex 07 00 00 00 00 00 00 01 40 00 00 00; \
         bpftool map update pinned {g}/cilium_lb4_backends_v3 key hex 07 00 00 00 value hex 0a 2a 00 05 00 35 11 00 00 00 00 00; \
         exec {} services --netns {} -o json",
        env!("CARGO_BIN_EXE_plumb"),
        ns.name()
    );
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .output()
        .expect("unshare runs");
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["mode"], "cilium-bpf");
    assert_eq!(v["backend_layout"], "v3");
    let f = &v["frontends"][0];
    assert_eq!(f["address"], "10.43.0.10");
    assert_eq!(f["port"], 53);
    assert_eq!(f["proto"], "UDP");
    assert_eq!(f["backends"][0]["address"], "10.42.0.5");
    assert_eq!(f["backends"][0]["port"], 53);
}
