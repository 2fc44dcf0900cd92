//! What the eBPF writer probe (plumb_watch::writer_probe) costs the rest of the
//! machine: it runs on every syscall entry. Times `getppid` (the compare-and-return
//! path) and UDP `sendmsg` on loopback in a private network namespace (the path that
//! walks fd -> file -> socket and rejects the family), without and with the probe
//! attached to that namespace, alternating rounds; prints the minimum and median ns per
//! syscall. First, how long a report takes to reach a reader blocked in
//! `WriterProbe::poll` (50 `nft add table` batches).
//!
//! Root only (namespaces, BPF). Run on a quiet machine:
//!
//! ```sh
//! cargo run --release -p plumb-watch --example bpf_overhead -- [getppid_calls] [sendmsg_calls] [rounds]
//! ```
//! Defaults: 10_000_000 getppid, 1_000_000 sendmsg, 3 rounds.

use plumb_os::netns::Netns;
use plumb_watch::writer_probe::{WriterProbe, netns_inode_by_name};
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::time::Instant;

fn getppid_ns(calls: u64) -> f64 {
    let t = Instant::now();
    for _ in 0..calls {
        // SAFETY: no arguments, no memory; a raw syscall (glibc does not cache it).
        std::hint::black_box(unsafe { libc::syscall(libc::SYS_getppid) });
    }
    t.elapsed().as_nanos() as f64 / calls as f64
}

fn sendmsg_ns(sock: &UdpSocket, calls: u64) -> f64 {
    let mut payload = [0u8; 64];
    let mut iov = libc::iovec {
        iov_base: payload.as_mut_ptr().cast(),
        iov_len: payload.len(),
    };
    // SAFETY: a zeroed msghdr is valid; it points to one live iovec.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    let fd = sock.as_raw_fd();
    let t = Instant::now();
    for _ in 0..calls {
        // SAFETY: a connected UDP socket and a valid msghdr. Datagrams the receiver
        // has no room for are dropped; sendmsg still succeeds.
        let n = unsafe { libc::sendmsg(fd, &msg, 0) };
        assert!(n >= 0, "sendmsg: {}", std::io::Error::last_os_error());
    }
    t.elapsed().as_nanos() as f64 / calls as f64
}

/// (min, median): the minimum is the least disturbed by other load on the machine.
fn stats(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[0], v[v.len() / 2])
}

fn monotonic_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Delivery latency: from nft's batch `sendmsg` (the report's time) to this process
/// holding the report, blocked in `WriterProbe::poll` meanwhile. Returns sorted µs.
fn delivery_us(ns: &Netns, probe: &mut WriterProbe, batches: u32) -> Vec<f64> {
    let mut lat = Vec::new();
    for i in 0..batches {
        let mut child = std::process::Command::new("ip")
            .args(["netns", "exec", ns.name(), "nft", "add", "table", "ip"])
            .arg(format!("plumblat{i}"))
            .spawn()
            .expect("spawning nft");
        let pid = child.id();
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        'wait: while Instant::now() < deadline {
            for e in probe.poll(deadline - Instant::now()) {
                if e.pid == pid && e.batch {
                    lat.push((monotonic_ns() - e.monotonic_ns) as f64 / 1000.0);
                    break 'wait;
                }
            }
        }
        assert!(child.wait().expect("nft").success(), "nft failed");
    }
    assert_eq!(lat.len(), batches as usize, "a batch was not reported");
    lat.sort_by(f64::total_cmp);
    lat
}

fn main() {
    let arg = |i: usize, d: u64| {
        std::env::args()
            .nth(i)
            .map(|s| s.replace('_', "").parse().expect("a number"))
            .unwrap_or(d)
    };
    let (getppids, sendmsgs, rounds) = (arg(1, 10_000_000), arg(2, 1_000_000), arg(3, 3));

    let ns = Netns::create("plumb-bpf-overhead").expect("creating a netns (root?)");
    let inode = netns_inode_by_name(ns.name()).expect("netns inode");
    let sock = plumb_os::netns::on_thread(Some(ns.name()), || {
        let s = UdpSocket::bind("127.0.0.1:0")?;
        s.connect(s.local_addr()?)?;
        Ok(s)
    })
    .expect("UDP socket in the netns");

    let batches = 50;
    // The probe is detached at the end of this block.
    let lat = {
        let mut probe = WriterProbe::attach(inode).expect("attaching the probe");
        delivery_us(&ns, &mut probe, batches)
    };
    println!(
        "delivery of {batches} nft batches, sendmsg to poll() returning, µs: min {:.1}, median {:.1}, p90 {:.1}, max {:.1}",
        lat[0],
        lat[lat.len() / 2],
        lat[lat.len() * 9 / 10],
        lat[lat.len() - 1]
    );

    let (mut g0, mut g1, mut s0, mut s1) = (vec![], vec![], vec![], vec![]);
    // Warm up.
    getppid_ns(getppids / 10);
    sendmsg_ns(&sock, sendmsgs / 10);
    for _ in 0..rounds {
        g0.push(getppid_ns(getppids));
        s0.push(sendmsg_ns(&sock, sendmsgs));
        {
            // Detached at the end of this block.
            let _probe = WriterProbe::attach(inode).expect("attaching the probe");
            g1.push(getppid_ns(getppids));
            s1.push(sendmsg_ns(&sock, sendmsgs));
        }
    }
    println!("ns per syscall over {rounds} rounds, min / median:");
    println!("                       without          with            overhead (min, median)");
    for (name, without, with) in [
        (format!("getppid x{getppids}"), g0, g1),
        (format!("UDP sendmsg x{sendmsgs}"), s0, s1),
    ] {
        let ((a0, m0), (a1, m1)) = (stats(without), stats(with));
        println!(
            "{name:<22} {a0:7.1} / {m0:7.1}  {a1:7.1} / {m1:7.1}  {:+7.1}, {:+7.1}",
            a1 - a0,
            m1 - m0
        );
    }
}
