//! The lab's network: namespaces, veth links, addresses and routes (RKE2 defaults).
//!
//! ```text
//!   plumb-pod-N  eth0 10.42.0.(10+N)/24 ── vethN ┐
//!                                                cni0 10.42.0.1/24 (bridge)   plumb-node
//!                                 eth0 192.168.100.10/24 ── eth0 192.168.100.11/24   plumb-api (:6443)
//! ```
//!
//! Links exist only between lab namespaces; no namespace has a default route or a link to
//! the host namespace, so nothing leaves the machine. Routes are specific:
//! - node: `10.43.0.0/16 via 192.168.100.11`. On a real node the default route carries
//!   Service traffic that no DNAT rule caught; here it goes to the API namespace, which has
//!   forwarding off and drops it silently, so a missing DNAT is an i/o timeout (as in seed
//!   000), not "network is unreachable".
//! - API endpoint: `10.42.0.0/16 via 192.168.100.10` (pod sources are not masqueraded).
//! - pods: `10.42.0.0/16` and `10.43.0.0/16` via `10.42.0.1`.

use std::net::Ipv4Addr;
use std::process::Command;

use crate::error::LabError;
use crate::state::{API_NETNS, NETNS_PREFIX, NODE_NETNS};

/// The node's address (also what kube-proxy reports as its node IP).
pub const NODE_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 100, 10);
/// The API endpoint's address.
pub const API_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 100, 11);
/// The API endpoint's port.
pub const API_PORT: u16 = 6443;
/// The `kubernetes` Service ClusterIP.
pub const CLUSTER_IP: Ipv4Addr = Ipv4Addr::new(10, 43, 0, 1);
/// The node's bridge address (pods' gateway).
pub const BRIDGE_IP: Ipv4Addr = Ipv4Addr::new(10, 42, 0, 1);

/// Name of pod namespace `i`.
pub fn pod_netns(i: usize) -> String {
    format!("plumb-pod-{i}")
}

/// Address of pod `i`.
pub fn pod_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 42, 0, 10 + i as u8)
}

/// What to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologySpec {
    /// Number of pod namespaces.
    pub pods: usize,
    /// `net.ipv4.ip_forward` in the node namespace.
    pub node_ip_forward: bool,
    /// The node's pod-side devices: a Canal/Flannel node's `cni0` bridge with `vethN`
    /// pod links, or a Cilium node's names (`cilium_host` for the device holding the
    /// router address, `lxcN` pod links). The lab bridges them either way.
    pub pod_devices: PodDevices,
}

/// Names of the node's pod-side devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodDevices {
    /// The bridge holding the pods' gateway address.
    pub bridge: &'static str,
    /// Prefix of the pods' host-side links.
    pub veth_prefix: &'static str,
}

impl PodDevices {
    /// Canal/Flannel: `cni0`, `vethN`.
    pub const CANAL: PodDevices = PodDevices {
        bridge: "cni0",
        veth_prefix: "veth",
    };
    /// Cilium: `cilium_host`, `lxcN`.
    pub const CILIUM: PodDevices = PodDevices {
        bridge: "cilium_host",
        veth_prefix: "lxc",
    };
}

/// Runs `ip ARGS`, failing with its stderr.
pub fn ip(args: &[&str]) -> Result<(), LabError> {
    run_program("ip", args)
}

/// Runs `program ARGS`, failing with its stderr.
pub fn run_program(program: &str, args: &[&str]) -> Result<(), LabError> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| LabError::io(format!("running {program}"), e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(LabError::Command {
            command: format!("{program} {}", args.join(" ")),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

fn sysctl(ns: &str, key: &str, value: &str) -> Result<(), LabError> {
    // Per-namespace keys only (net.ipv4.ip_forward, net.ipv4.conf.*): the host's stay as they are.
    run_program(
        "ip",
        &[
            "netns",
            "exec",
            ns,
            "sysctl",
            "-q",
            "-w",
            &format!("{key}={value}"),
        ],
    )
}

fn veth(a_ns: &str, a_name: &str, b_ns: &str, b_name: &str) -> Result<(), LabError> {
    // Temporary unique names: both ends are created directly inside their namespaces, then
    // renamed there (two ends may want the same final name, e.g. eth0).
    let ta = format!("plv{}a", std::process::id() % 100_000);
    let tb = format!("plv{}b", std::process::id() % 100_000);
    ip(&[
        "link", "add", &ta, "netns", a_ns, "type", "veth", "peer", "name", &tb, "netns", b_ns,
    ])?;
    ip(&["-n", a_ns, "link", "set", &ta, "name", a_name])?;
    ip(&["-n", b_ns, "link", "set", &tb, "name", b_name])
}

/// Whether `name` is one of the lab's namespaces: `plumb-node`, `plumb-api` or
/// `plumb-pod-N`. Other `plumb-*` namespaces (other tests' `plumb-t-…`) are not the lab's
/// and are never touched.
pub fn is_lab_namespace(name: &str) -> bool {
    name == NODE_NETNS
        || name == API_NETNS
        || name
            .strip_prefix(NETNS_PREFIX)
            .and_then(|r| r.strip_prefix("pod-"))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Lists the lab's network namespaces (see [`is_lab_namespace`]).
pub fn lab_namespaces() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return Vec::new();
    };
    let mut names: Vec<String> = dir
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| is_lab_namespace(n))
        .collect();
    names.sort();
    names
}

/// Builds the lab network. On error the caller tears down whatever exists.
pub fn create(spec: &TopologySpec) -> Result<Vec<String>, LabError> {
    let mut names = vec![NODE_NETNS.to_string(), API_NETNS.to_string()];
    names.extend((0..spec.pods).map(pod_netns));
    for n in &names {
        ip(&["netns", "add", n])?;
        ip(&["-n", n, "link", "set", "lo", "up"])?;
    }
    let node = NODE_NETNS;
    let api = API_NETNS;
    veth(node, "eth0", api, "eth0")?;
    ip(&[
        "-n",
        node,
        "addr",
        "add",
        &format!("{NODE_IP}/24"),
        "dev",
        "eth0",
    ])?;
    ip(&[
        "-n",
        api,
        "addr",
        "add",
        &format!("{API_IP}/24"),
        "dev",
        "eth0",
    ])?;
    ip(&["-n", node, "link", "set", "eth0", "up"])?;
    ip(&["-n", api, "link", "set", "eth0", "up"])?;
    let bridge = spec.pod_devices.bridge;
    ip(&["-n", node, "link", "add", bridge, "type", "bridge"])?;
    ip(&[
        "-n",
        node,
        "addr",
        "add",
        &format!("{BRIDGE_IP}/24"),
        "dev",
        bridge,
    ])?;
    ip(&["-n", node, "link", "set", bridge, "up"])?;
    ip(&[
        "-n",
        node,
        "route",
        "add",
        "10.43.0.0/16",
        "via",
        &API_IP.to_string(),
    ])?;
    ip(&[
        "-n",
        api,
        "route",
        "add",
        "10.42.0.0/16",
        "via",
        &NODE_IP.to_string(),
    ])?;
    for i in 0..spec.pods {
        let pod = pod_netns(i);
        let host_end = format!("{}{i}", spec.pod_devices.veth_prefix);
        veth(node, &host_end, &pod, "eth0")?;
        ip(&["-n", node, "link", "set", &host_end, "master", bridge])?;
        ip(&["-n", node, "link", "set", &host_end, "up"])?;
        ip(&[
            "-n",
            &pod,
            "addr",
            "add",
            &format!("{}/24", pod_ip(i)),
            "dev",
            "eth0",
        ])?;
        ip(&["-n", &pod, "link", "set", "eth0", "up"])?;
        ip(&[
            "-n",
            &pod,
            "route",
            "add",
            "10.42.0.0/16",
            "via",
            &BRIDGE_IP.to_string(),
        ])?;
        ip(&[
            "-n",
            &pod,
            "route",
            "add",
            "10.43.0.0/16",
            "via",
            &BRIDGE_IP.to_string(),
        ])?;
    }
    sysctl(
        node,
        "net.ipv4.ip_forward",
        if spec.node_ip_forward { "1" } else { "0" },
    )?;
    // kube-proxy sets this itself for localhost NodePorts (proxier.go); per namespace.
    sysctl(node, "net.ipv4.conf.all.route_localnet", "1")?;
    sysctl(api, "net.ipv4.ip_forward", "0")?;
    Ok(names)
}

/// Deletes every lab namespace (their veths go with them). Returns what was deleted and
/// the errors met.
pub fn destroy() -> (Vec<String>, Vec<String>) {
    let mut deleted = Vec::new();
    let mut errors = Vec::new();
    for n in lab_namespaces() {
        match ip(&["netns", "delete", &n]) {
            Ok(()) => deleted.push(n),
            Err(e) => errors.push(e.to_string()),
        }
    }
    (deleted, errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_labs_own_namespaces_count() {
        for n in ["plumb-node", "plumb-api", "plumb-pod-0", "plumb-pod-12"] {
            assert!(is_lab_namespace(n), "{n}");
        }
        for n in [
            "plumb-t-rt-123-0",
            "plumb-pod-",
            "plumb-pod-x",
            "plumb-nodes",
            "other",
        ] {
            assert!(!is_lab_namespace(n), "{n}");
        }
    }
}
