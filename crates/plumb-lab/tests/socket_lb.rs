//! Privileged: the lab's socket load balancer with real packets. A private network
//! namespace holds a "pod" listening on 10.42.0.5:8080 and no route to the Service
//! CIDR; Cilium's LB maps (pinned on a private bpffs) say ClusterIP 10.43.0.1:443 goes
//! to that pod; the connect4 program is attached to a cgroup this test creates. A
//! shell in that cgroup reaches the ClusterIP with no netfilter rule at all; the same
//! shell outside the cgroup cannot (the host never sees the lab's Services); after the
//! frontend is deleted from the map, the cgroup's shell cannot either — as on a
//! kube-proxy-free node whose agent dropped the Service. `plumb cilium`'s reader sees
//! the same map the datapath uses. Everything is removed on drop, failures included.

use plumb_cilium::layout::L4Proto;
use plumb_lab::socket_lb::{LbService, SocketLb};
use plumb_os::netns::Netns;
use plumb_testkit::bpf::Bpffs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// A cgroup v2 directory of this test's own; removed on drop (it is empty by then:
/// the shells that joined it have exited).
struct Cgroup(PathBuf);

impl Cgroup {
    fn create() -> Option<Cgroup> {
        let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
        let root = mounts.lines().find_map(|l| {
            let mut w = l.split_whitespace();
            let (_, point, fstype) = (w.next()?, w.next()?, w.next()?);
            (fstype == "cgroup2").then(|| PathBuf::from(point))
        })?;
        let dir = root.join(format!("plumb-socklb-test-{}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        Some(Cgroup(dir))
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Connects to `target` (`IP/PORT`) with bash's /dev/tcp from `ns`, after joining
/// `cgroup` when given; true when the connection was made. The cgroup is joined before
/// entering the namespace (`ip netns exec` mounts a sysfs of its own, without the
/// cgroup tree); membership passes on through exec.
fn connects(ns: &Netns, cgroup: Option<&Path>, target: &str) -> bool {
    let join = cgroup
        .map(|c| format!("echo $$ > {}/cgroup.procs && ", c.display()))
        .unwrap_or_default();
    let script = format!(
        "{join}exec ip netns exec {} bash -c 'exec 3<>/dev/tcp/{target}'",
        ns.name()
    );
    let out = std::process::Command::new("timeout")
        .args(["5", "bash", "-c", &script])
        .output()
        .expect("bash runs");
    out.status.success()
}

#[test]
fn a_cluster_ip_is_reached_through_the_maps_alone_and_only_from_the_lab_cgroup() {
    if !plumb_testkit::privileged(&["ip", "bash", "timeout", "mount"]) {
        return;
    }
    let Some(fs) = Bpffs::mount() else {
        plumb_testkit::skip("cannot mount a bpffs (mount -t bpf)");
        return;
    };
    let Some(cgroup) = Cgroup::create() else {
        plumb_testkit::skip("no cgroup v2 hierarchy to create a cgroup in");
        return;
    };
    let ns = Netns::create("plumb-socklb").expect("a private namespace");
    for cmd in [
        "ip link set lo up",
        // A veth pair with both ends here: the pod's address, and no other link.
        "ip link add pod0 type veth peer name pod1",
        "ip addr add 10.42.0.5/24 dev pod0",
        "ip link set pod0 up",
        "ip link set pod1 up",
    ] {
        let words: Vec<&str> = cmd.split(' ').collect();
        let (ok, _, err) = ns.exec(words[0], &words[1..], None).unwrap();
        assert!(ok, "{cmd}: {err}");
    }
    // The pod: a listener in the namespace, accepting whatever comes.
    let listener = plumb_os::netns::on_thread(Some(ns.name()), || {
        std::net::TcpListener::bind("10.42.0.5:8080")
    })
    .expect("listen in the namespace");
    listener.set_nonblocking(true).unwrap();

    let globals = fs.0.join("tc/globals");
    let mut lb = SocketLb::load(&globals).expect("load the socket load balancer");
    lb.attach(&cgroup.0).expect("attach to the test's cgroup");
    let kubernetes = LbService {
        address: Ipv4Addr::new(10, 43, 0, 1),
        port: 443,
        proto: L4Proto::TCP,
        backends: vec![(Ipv4Addr::new(10, 42, 0, 5), 8080)],
    };
    lb.program(&kubernetes).expect("program the Service");

    assert!(
        connects(&ns, Some(&cgroup.0), "10.43.0.1/443"),
        "a process in the lab cgroup reaches the ClusterIP through the maps"
    );
    assert!(
        listener.accept().is_ok(),
        "the connection arrived at the backend"
    );
    assert!(
        !connects(&ns, None, "10.43.0.1/443"),
        "outside the cgroup nothing translates the ClusterIP (no route)"
    );

    // plumb's reader sees what the datapath uses.
    let read = plumb_collect::cilium::read_lb_maps_in(&globals);
    assert!(read.problems.is_empty(), "{:?}", read.problems);
    let f: Vec<String> = read
        .frontends
        .iter()
        .map(|f| {
            let b: Vec<String> = f
                .backends
                .iter()
                .map(|b| format!("{}:{}", b.address, b.port))
                .collect();
            format!("{} -> {}", f.display_address(), b.join(","))
        })
        .collect();
    assert_eq!(f, ["10.43.0.1:443/TCP -> 10.42.0.5:8080"]);

    lb.remove(&kubernetes).expect("delete the frontend");
    assert!(
        !connects(&ns, Some(&cgroup.0), "10.43.0.1/443"),
        "without its frontend entry the ClusterIP is not translated any more"
    );
    drop(lb);
}
