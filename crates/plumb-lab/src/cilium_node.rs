//! The kube-proxy-free scenarios (`cilium-kpr`, `cilium-leftovers`): what Cilium with
//! kube-proxy replacement leaves on a node, without a Cilium agent.
//!
//! - **Its maps**: `cilium_lb4_services_v2`, `cilium_lb4_backends_v3` and
//!   `cilium_lb4_reverse_nat`, in Cilium's layouts, filled for the lab's Services
//!   ([`services`]) and pinned under `ROOT/sys/fs/bpf/tc/globals` — on a bpffs the lab
//!   mounts at `ROOT/sys/fs/bpf` for itself. The host's `/sys/fs/bpf` is never written, so
//!   no host tool takes this machine for a Cilium node; plumb's readers find the maps
//!   through the lab root (`--lab`, `--root`).
//! - **Its socket load balancer**: the lab's cgroup connect4/sendmsg4 programs
//!   ([`crate::socket_lb`]) attached to a cgroup the lab creates under the cgroup2
//!   hierarchy ([`CGROUP_NAME`], found from /proc/mounts) — never the root cgroup —
//!   through BPF links pinned in the lab's bpffs (`ROOT/sys/fs/bpf/plumb-lab/links`), so
//!   they outlive `lab up`. The lab's actors and `lab exec` commands run in that cgroup
//!   ([`join_cgroup`]); host processes never see the lab's Services.
//! - `cilium-leftovers` adds what a Canal node leaves behind ([`write_leftovers`]).
//!
//! [`teardown`] removes the links' pins, the maps' pins, the bpffs mount and the cgroup;
//! it is idempotent and needs no state (the paths follow from the lab root and the
//! cgroup2 mount), so `lab down` works after a crash.

use std::ffi::CString;
use std::net::Ipv4Addr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use plumb_cilium::layout::L4Proto;

use crate::error::LabError;
use crate::socket_lb::{LbService, SocketLb};
use crate::topology::{self, API_IP, API_PORT, CLUSTER_IP};

/// The lab's cgroup, directly below the cgroup2 mount.
pub const CGROUP_NAME: &str = "plumb-lab";
/// The lab's bpffs mount point, below the lab root (where Cilium's is on a node).
pub const BPFFS: &str = "sys/fs/bpf";
/// Cilium's global maps' directory, below the lab root.
pub const GLOBALS: &str = "sys/fs/bpf/tc/globals";
/// The socket load balancer's pinned links, below the lab root.
pub const LINKS: &str = "sys/fs/bpf/plumb-lab/links";
/// kube-dns's ClusterIP (RKE2's `cluster-dns`).
pub const DNS_IP: Ipv4Addr = Ipv4Addr::new(10, 43, 0, 10);

/// A Service port of the kube-proxy-free lab: its name (`namespace/name:port`) and
/// what the load balancer programs for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabService {
    /// `namespace/name:port`.
    pub name: String,
    /// Frontend and backends.
    pub lb: LbService,
}

/// The lab's Services, every backend a real listener: `default/kubernetes` to the API
/// endpoint, `kube-system/kube-dns` (53/UDP, 53/TCP, 9153/TCP) to the coredns pod in pod
/// namespace 0.
pub fn services() -> Vec<LabService> {
    let coredns = topology::pod_ip(0);
    let svc = |name: &str, address, port, proto, backend: (Ipv4Addr, u16)| LabService {
        name: name.to_string(),
        lb: LbService {
            address,
            port,
            proto,
            backends: vec![backend],
        },
    };
    vec![
        svc(
            "default/kubernetes:https",
            CLUSTER_IP,
            443,
            L4Proto::TCP,
            (API_IP, API_PORT),
        ),
        svc(
            "kube-system/kube-dns:dns",
            DNS_IP,
            53,
            L4Proto::UDP,
            (coredns, 53),
        ),
        svc(
            "kube-system/kube-dns:dns-tcp",
            DNS_IP,
            53,
            L4Proto::TCP,
            (coredns, 53),
        ),
        svc(
            "kube-system/kube-dns:metrics",
            DNS_IP,
            9153,
            L4Proto::TCP,
            (coredns, 9153),
        ),
    ]
}

/// Most frontends `lab up cilium-kpr --services N` programs: each takes two entries of
/// the services map (the frontend and its one backend slot), far below its 65,536.
pub const MAX_SERVICES: usize = 10_000;

/// The first ClusterIP of the services beyond [`services`]'s four (10.43.1.0 upwards).
const EXTRA_BASE: Ipv4Addr = Ipv4Addr::new(10, 43, 1, 0);

/// `n` Service ports for the lab: [`services`]'s four (the lab's own checks use them),
/// then `default/lab-svc-K:http` (ClusterIP 10.43.1.0 + K, port 80/TCP) whose backend
/// is, in turn, each of the lab's real TCP listeners (the API endpoint, coredns's 53 and
/// 9153), so every one of them answers. Fewer than 4 or more than [`MAX_SERVICES`] is
/// refused.
pub fn services_for(n: usize) -> Result<Vec<LabService>, LabError> {
    let mut out = services();
    if n < out.len() || n > MAX_SERVICES {
        return Err(LabError::Other(format!(
            "--services {n}: the kube-proxy-free scenarios program {} to {MAX_SERVICES} Service ports (the first {} are the lab's kubernetes and kube-dns Services)",
            out.len(),
            out.len()
        )));
    }
    let coredns = topology::pod_ip(0);
    let listeners = [(API_IP, API_PORT), (coredns, 53), (coredns, 9153)];
    let base = u32::from(EXTRA_BASE);
    for k in 0..n - out.len() {
        out.push(LabService {
            name: format!("default/lab-svc-{k}:http"),
            lb: LbService {
                address: Ipv4Addr::from(base + k as u32),
                port: 80,
                proto: L4Proto::TCP,
                backends: vec![listeners[k % listeners.len()]],
            },
        });
    }
    Ok(out)
}

/// The cgroup2 hierarchy's mount point (`/sys/fs/cgroup` on a unified host,
/// `/sys/fs/cgroup/unified` on a hybrid one), from /proc/mounts.
pub fn cgroup2_root() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        let (_, point, fstype) = (w.next()?, w.next()?, w.next()?);
        (fstype == "cgroup2").then(|| PathBuf::from(unescape_mount(point)))
    })
}

/// /proc/mounts writes a space as `\040` (and tab, newline, backslash likewise).
fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8)
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The lab's cgroup path (whether or not it exists); None without a cgroup2 hierarchy.
pub fn lab_cgroup() -> Option<PathBuf> {
    cgroup2_root().map(|r| r.join(CGROUP_NAME))
}

/// Makes `cmd`'s child join `cgroup` before it runs (it writes `0`, itself, to
/// `cgroup.procs`); a child that cannot join fails to start rather than run outside it.
pub fn join_cgroup(cmd: &mut Command, cgroup: &Path) {
    let procs = cgroup.join("cgroup.procs");
    let Ok(path) = CString::new(procs.as_os_str().as_bytes()) else {
        return;
    };
    // SAFETY: between fork and exec the closure calls only async-signal-safe functions
    // (open, write, close) on memory allocated before the fork.
    unsafe {
        cmd.pre_exec(move || {
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let n = libc::write(fd, b"0".as_ptr().cast(), 1);
            let err = std::io::Error::last_os_error();
            libc::close(fd);
            if n != 1 {
                return Err(err);
            }
            Ok(())
        });
    }
}

/// Moves this process into `cgroup` (`plumb doctor --lab`: its probes are then served
/// by the lab's socket load balancer, as the node's processes are).
pub fn join_self(cgroup: &Path) -> std::io::Result<()> {
    std::fs::write(cgroup.join("cgroup.procs"), std::process::id().to_string())
}

/// Sets up the node's Cilium state: the bpffs at `ROOT/sys/fs/bpf`, the maps filled
/// for `services` ([`services_for`]), the lab cgroup `cgroup` and the socket load
/// balancer attached to it.
/// The `pods` pod namespaces get a route to the API endpoint's network through the
/// node: a socket load balancer hands a pod the backend's own address (the API
/// endpoint, for `kubernetes`), where a ClusterIP route alone sufficed with DNAT.
pub fn setup(
    root: &Path,
    cgroup: &Path,
    pods: usize,
    services: &[LabService],
) -> Result<(), LabError> {
    for i in 0..pods {
        let ns = topology::pod_netns(i);
        topology::ip(&[
            "-n",
            &ns,
            "route",
            "add",
            "192.168.100.0/24",
            "via",
            &topology::BRIDGE_IP.to_string(),
        ])?;
    }
    let bpffs = root.join(BPFFS);
    std::fs::create_dir_all(&bpffs)
        .map_err(|e| LabError::io(format!("creating {}", bpffs.display()), e))?;
    topology::run_program("mount", &["-t", "bpf", "bpf", &bpffs.to_string_lossy()])?;
    if cgroup.parent().is_none_or(|p| p == Path::new("/")) {
        return Err(LabError::Other(format!(
            "{} is not below a cgroup2 mount",
            cgroup.display()
        )));
    }
    match std::fs::create_dir(cgroup) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(LabError::io(format!("creating {}", cgroup.display()), e)),
    }
    let mut lb = SocketLb::load(&root.join(GLOBALS))?;
    lb.attach_pinned(cgroup, &root.join(LINKS))?;
    for s in services {
        lb.program(&s.lb)?;
    }
    Ok(())
}

/// Removes what [`setup`] made below `root` and the cgroup: the links' pins (which
/// detaches the programs), the maps' pins, the bpffs mount, the cgroup. Idempotent;
/// returns what it could not remove. Processes must be gone first (a cgroup with
/// members cannot be removed).
pub fn teardown(root: &Path, cgroup: Option<&Path>) -> Vec<String> {
    let mut errors = Vec::new();
    let bpffs = root.join(BPFFS);
    if is_bpffs(&bpffs) {
        for dir in [root.join(LINKS), root.join(GLOBALS)] {
            if let Ok(entries) = std::fs::read_dir(&dir) {
                for e in entries.flatten() {
                    if let Err(err) = std::fs::remove_file(e.path()) {
                        errors.push(format!("unpinning {}: {err}", e.path().display()));
                    }
                }
            }
        }
        if let Err(e) = topology::run_program("umount", &[&bpffs.to_string_lossy()]) {
            errors.push(e.to_string());
        }
    }
    if let Some(c) = cgroup
        && c.exists()
        && let Err(e) = std::fs::remove_dir(c)
    {
        errors.push(format!("removing the lab cgroup {}: {e}", c.display()));
    }
    errors
}

/// Whether `dir` is a bpffs mount point.
fn is_bpffs(dir: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/self/mounts") else {
        return false;
    };
    text.lines().any(|l| {
        let mut w = l.split_whitespace();
        let (_, point, fstype) = (w.next(), w.next(), w.next());
        fstype == Some("bpf") && point.is_some_and(|p| Path::new(&unescape_mount(p)) == dir)
    })
}

/// Cilium's CNI configuration, as the agent writes it (`cni-exclusive` off).
const CILIUM_CONFLIST: &str = r#"{
  "cniVersion": "0.3.1",
  "name": "cilium",
  "plugins": [
    {
       "type": "cilium-cni",
       "enable-debug": false,
       "log-file": "/var/run/cilium/cilium-cni.log"
    }
  ]
}
"#;

/// Canal's CNI configuration as RKE2's rke2-canal writes it (calico + flannel,
/// portmap, bandwidth).
const CANAL_CONFLIST: &str = r#"{
  "name": "k8s-pod-network",
  "cniVersion": "0.3.1",
  "plugins": [
    {
      "type": "calico",
      "log_level": "info",
      "datastore_type": "kubernetes",
      "nodename": "plumb-node",
      "mtu": 1450,
      "ipam": {
          "type": "host-local",
          "subnet": "usePodCidr"
      },
      "policy": {
          "type": "k8s"
      },
      "kubernetes": {
          "kubeconfig": "/etc/cni/net.d/calico-kubeconfig"
      }
    },
    {
      "type": "portmap",
      "snat": true,
      "capabilities": {"portMappings": true}
    },
    {
      "type": "bandwidth",
      "capabilities": {"bandwidth": true}
    }
  ]
}
"#;

/// The name of Cilium's CNI configuration in each scenario: `05-cilium.conflist` (the
/// agent's default) on the clean node; on the leftovers node `20-cilium.conflist`
/// (a name chosen with `cni.customConf`), so Canal's `10-canal.conflist` sorts ahead
/// of it and the container runtime still picks Canal.
pub fn cilium_conf_name(leftovers: bool) -> &'static str {
    if leftovers {
        "20-cilium.conflist"
    } else {
        "05-cilium.conflist"
    }
}

/// Writes Cilium's CNI configuration into `ROOT/etc/cni/net.d`.
pub fn write_cni_conf(root: &Path, leftovers: bool) -> Result<(), LabError> {
    let dir = root.join(crate::layout::paths::CNI_NET_DIR);
    std::fs::create_dir_all(&dir).map_err(|e| LabError::io("creating etc/cni/net.d", e))?;
    let path = dir.join(cilium_conf_name(leftovers));
    std::fs::write(&path, CILIUM_CONFLIST)
        .map_err(|e| LabError::io(format!("writing {}", path.display()), e))
}

/// The leftovers of Canal on a node moved to Cilium: its CNI configuration and
/// kubeconfig, a `cali*` veth (its pod end in pod namespace 0) and `flannel.1` (a VXLAN
/// device on port 8472) in the node namespace, and kube-proxy's chains (without hooks,
/// as after kube-proxy was removed without `--cleanup`) in the node's iptables.
pub fn write_leftovers(root: &Path, iptables: &str) -> Result<(), LabError> {
    let dir = root.join(crate::layout::paths::CNI_NET_DIR);
    for (name, text) in [
        ("10-canal.conflist", CANAL_CONFLIST),
        (
            "calico-kubeconfig",
            "# Kubeconfig file for Calico CNI plugin. Installed by calico/node.\napiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: https://10.43.0.1:443\n    certificate-authority-data: \"\"\nusers:\n- name: calico\n  user:\n    token: \"\"\ncontexts:\n- name: calico-context\n  context:\n    cluster: local\n    user: calico\ncurrent-context: calico-context\n",
        ),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text)
            .map_err(|e| LabError::io(format!("writing {}", path.display()), e))?;
    }
    let node = crate::state::NODE_NETNS;
    let pod = topology::pod_netns(0);
    topology::ip(&[
        "-n",
        node,
        "link",
        "add",
        "cali3f2a9c1d7e8",
        "type",
        "veth",
        "peer",
        "name",
        "eth1",
        "netns",
        &pod,
    ])?;
    // flannel.1 is a VXLAN device; a kernel without the vxlan module gets a veth of
    // the same name (what verify looks at is the name), its peer in pod namespace 0.
    if topology::ip(&[
        "-n",
        node,
        "link",
        "add",
        "flannel.1",
        "type",
        "vxlan",
        "id",
        "1",
        "dstport",
        "8472",
        "nolearning",
    ])
    .is_err()
    {
        topology::ip(&[
            "-n",
            node,
            "link",
            "add",
            "flannel.1",
            "type",
            "veth",
            "peer",
            "name",
            "eth2",
            "netns",
            &pod,
        ])?;
    }
    // Added to what kubelet wrote (`--noflush`): kubelet's chains stay as they are.
    let payload =
        crate::backend_mix::stale_payload(4, std::net::SocketAddrV4::new(API_IP, API_PORT));
    let iptables = iptables.to_string();
    let out = plumb_os::netns::on_thread(Some(node), move || {
        Ok(crate::iptables::Tools::new(&iptables).restore(&["-w", "5", "--noflush"], &payload))
    })
    .map_err(|e| LabError::io("entering the node namespace", e))?
    .map_err(|e| LabError::io("running iptables-restore", e))?;
    if out.ok() {
        Ok(())
    } else {
        Err(LabError::Command {
            command: "iptables-restore --noflush of kube-proxy's stale chains".into(),
            status: format!("exit status {}", out.code),
            stderr: out.combined,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_service_has_a_listening_backend_in_the_lab() {
        let s = services();
        assert_eq!(s.len(), 4);
        assert!(s.iter().all(|s| s.lb.backends.len() == 1));
        assert_eq!(s[0].lb.backends[0], (API_IP, API_PORT));
    }

    #[test]
    fn extra_services_are_distinct_cluster_ips_on_real_listeners() {
        let s = services_for(50).unwrap();
        assert_eq!(s.len(), 50);
        assert_eq!(s[..4], services()[..]);
        let mut frontends: Vec<String> = s
            .iter()
            .map(|s| format!("{}:{}/{:?}", s.lb.address, s.lb.port, s.lb.proto))
            .collect();
        frontends.sort();
        frontends.dedup();
        assert_eq!(frontends.len(), 50);
        assert_eq!(s[4].lb.address, Ipv4Addr::new(10, 43, 1, 0));
        assert_eq!(s[49].lb.address, Ipv4Addr::new(10, 43, 1, 45));
        let listeners = [
            (API_IP, API_PORT),
            (topology::pod_ip(0), 53),
            (topology::pod_ip(0), 9153),
        ];
        assert!(s[4..].iter().all(|s| listeners.contains(&s.lb.backends[0])));
        assert_eq!(
            services_for(MAX_SERVICES)
                .unwrap()
                .last()
                .unwrap()
                .lb
                .address,
            Ipv4Addr::new(10, 43, 40, 11)
        );
        assert!(services_for(3).is_err());
        assert!(services_for(MAX_SERVICES + 1).is_err());
    }

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(unescape_mount(r"/a\040b"), "/a b");
        assert_eq!(unescape_mount("/sys/fs/cgroup"), "/sys/fs/cgroup");
    }

    #[test]
    fn canal_sorts_ahead_of_cilium_only_on_the_leftovers_node() {
        assert!("10-canal.conflist" < cilium_conf_name(true));
        assert!("10-canal.conflist" > cilium_conf_name(false));
    }
}
