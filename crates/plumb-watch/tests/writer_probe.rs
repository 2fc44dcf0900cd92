//! Privileged: the eBPF writer probe (plumb_watch::writer_probe) against real
//! iptables-nft and nft in private network namespaces.
//!
//! Skipped with a printed reason when not root, when a tool is missing, or when the
//! probe is unavailable (built without clang/libbpf-dev, no BTF, no CAP_BPF); with
//! `PLUMB_REQUIRE_ALL=1` (as in CI) each skip is a failure. Every wait has a deadline;
//! namespaces are deleted on drop (panics included). Negative checks end with a
//! barrier: a batch sent in the watched namespace *after* the command under test,
//! whose report proves any report of that command would already have been read (the
//! ring buffer keeps the order of reservations, and the command had exited).

use plumb_os::netns::Netns;
use plumb_watch::writer_probe::{
    BatchSend, NFNL_MSG_BATCH_BEGIN, WriterProbe, netns_inode_by_name,
};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(10);

fn setup() -> Option<()> {
    if !plumb_testkit::privileged(&[
        "ip",
        "nft",
        "iptables-nft",
        "iptables-nft-save",
        "iptables-nft-restore",
    ]) {
        return None;
    }
    Some(())
}

/// Attaches the probe to `ns`, or `None` after printing why BPF is unavailable.
fn attach(ns: &Netns) -> Option<WriterProbe> {
    let inode = netns_inode_by_name(ns.name()).expect("netns inode");
    match WriterProbe::attach(inode) {
        Ok(p) => Some(p),
        Err(e) if e.unavailable() => {
            plumb_testkit::skip(&e.to_string());
            None
        }
        Err(e) => panic!("attaching the writer probe: {e}"),
    }
}

/// Runs `cmd args` in `ns` with `ip netns exec` (which execs it: same pid), waits for
/// it to exit (bounded) and asserts success. Returns its pid.
fn run_in(ns: &Netns, cmd: &str, args: &[&str]) -> u32 {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns.name(), cmd])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {cmd}: {e}"));
    let pid = child.id();
    let deadline = Instant::now() + DEADLINE;
    let status = loop {
        if let Some(s) = child.try_wait().expect("waiting for child") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd} {args:?} did not exit within {DEADLINE:?}");
        }
        std::thread::park_timeout(Duration::from_millis(5));
    };
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut err);
    }
    assert!(status.success(), "{cmd} {args:?}: {status}: {err}");
    pid
}

/// Polls until a report matches `want`; returns every report read so far.
fn wait_for(
    probe: &mut WriterProbe,
    seen: &mut Vec<BatchSend>,
    what: &str,
    want: impl Fn(&BatchSend) -> bool,
) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if seen.iter().any(&want) {
            return;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "no report of {what} within {DEADLINE:?}; got {seen:#?}"
        );
        seen.extend(probe.poll(left));
    }
}

/// A batch sent in `ns` after everything before it; returns its pid once reported.
fn barrier(ns: &Netns, probe: &mut WriterProbe, seen: &mut Vec<BatchSend>, n: u32) -> u32 {
    let pid = run_in(
        ns,
        "nft",
        &["add", "table", "ip", &format!("plumbbarrier{n}")],
    );
    wait_for(probe, seen, "the barrier batch", |e| {
        e.pid == pid && e.batch
    });
    pid
}

#[test]
fn iptables_nft_and_nft_batches_are_reported_with_pid_and_comm() {
    if setup().is_none() {
        return;
    }
    let ns = Netns::create("plumb-bpf-test").expect("netns");
    let Some(mut probe) = attach(&ns) else { return };
    let mut seen = Vec::new();

    let ipt = run_in(&ns, "iptables-nft", &["-t", "filter", "-N", "PLUMBTEST"]);
    wait_for(&mut probe, &mut seen, "iptables-nft's batch", |e| {
        e.pid == ipt && e.batch
    });
    let nft = run_in(&ns, "nft", &["add", "table", "ip", "plumbt"]);
    wait_for(&mut probe, &mut seen, "nft's batch", |e| {
        e.pid == nft && e.batch
    });

    let of = |pid: u32| seen.iter().filter(move |e| e.pid == pid);
    eprintln!("reports: {seen:#?}");
    for e in of(ipt) {
        // comm is the name exec'd: the iptables-nft symlink, not xtables-nft-multi.
        assert_eq!(e.comm, "iptables-nft", "{e:?}");
        assert_eq!(e.tid, ipt, "single-threaded");
    }
    for e in of(nft) {
        assert_eq!(e.comm, "nft", "{e:?}");
    }
    let batch = of(ipt).find(|e| e.batch).unwrap();
    assert_eq!(batch.first_nlmsg_type, Some(NFNL_MSG_BATCH_BEGIN));
    // The report's time is CLOCK_MONOTONIC, comparable with the caller's clock.
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec out-pointer.
    assert_eq!(
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) },
        0
    );
    let now_ns = now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64;
    assert!(batch.monotonic_ns <= now_ns && now_ns - batch.monotonic_ns < 60_000_000_000);
    // Only the two writers sent anything here.
    assert!(
        seen.iter().all(|e| e.pid == ipt || e.pid == nft),
        "{seen:#?}"
    );
}

/// kube-proxy's and security agents' writer: a restore of many chains and rules is
/// one `sendmsg` (one report), and comm is cut to 15 bytes.
#[test]
fn a_large_iptables_nft_restore_is_one_batch() {
    if setup().is_none() {
        return;
    }
    let ns = Netns::create("plumb-bpf-test").expect("netns");
    let Some(mut probe) = attach(&ns) else { return };
    let mut seen = Vec::new();
    let mut payload = String::from("*filter\n");
    for i in 0..2000 {
        payload.push_str(&format!(":PLUMB{i} - [0:0]\n"));
    }
    for i in 0..2000 {
        payload.push_str(&format!(
            "-A PLUMB{i} -s 10.0.{}.{}/32 -j ACCEPT\n",
            i / 250,
            i % 250
        ));
    }
    payload.push_str("COMMIT\n");
    let dir = plumb_testkit::Scratch::new("bpf-restore");
    dir.write("rules", &payload);
    let file = dir.path().join("rules");

    let restore = run_in(&ns, "iptables-nft-restore", &[file.to_str().unwrap()]);
    let nft = barrier(&ns, &mut probe, &mut seen, 0);
    let mine: Vec<_> = seen.iter().filter(|e| e.pid == restore).collect();
    assert_eq!(mine.len(), 1, "{seen:#?}");
    assert!(mine[0].batch, "{:?}", mine[0]);
    assert_eq!(mine[0].comm, "iptables-nft-re", "comm is 15 bytes at most");
    assert!(
        seen.iter().all(|e| e.pid == restore || e.pid == nft),
        "{seen:#?}"
    );
}

#[test]
fn batches_in_another_namespace_are_not_reported() {
    if setup().is_none() {
        return;
    }
    let watched = Netns::create("plumb-bpf-test").expect("netns");
    let other = Netns::create("plumb-bpf-test").expect("second netns");
    let Some(mut probe) = attach(&watched) else {
        return;
    };
    let mut seen = Vec::new();

    let ipt = run_in(&other, "iptables-nft", &["-t", "filter", "-N", "PLUMBTEST"]);
    let nft = run_in(&other, "nft", &["add", "table", "ip", "plumbt"]);
    barrier(&watched, &mut probe, &mut seen, 0);
    assert!(
        !seen.iter().any(|e| e.pid == ipt || e.pid == nft),
        "sends in {} reported by the probe of {}: {seen:#?}",
        other.name(),
        watched.name()
    );
}

/// iptables-nft-save and `nft list ruleset` dump with sendto/recvmsg: no batch and
/// (observed on Linux 6.18, iptables 1.8.9, nftables 1.0.6, with strace) no sendmsg
/// at all, so they are not reported.
#[test]
fn a_dump_is_not_reported() {
    if setup().is_none() {
        return;
    }
    let ns = Netns::create("plumb-bpf-test").expect("netns");
    let Some(mut probe) = attach(&ns) else { return };
    let mut seen = Vec::new();
    // Something to dump.
    run_in(&ns, "iptables-nft", &["-t", "filter", "-N", "PLUMBTEST"]);

    let save = run_in(&ns, "iptables-nft-save", &[]);
    let list = run_in(&ns, "nft", &["list", "ruleset"]);
    barrier(&ns, &mut probe, &mut seen, 0);
    let dumps: Vec<_> = seen
        .iter()
        .filter(|e| e.pid == save || e.pid == list)
        .collect();
    assert!(dumps.is_empty(), "dumps reported: {dumps:#?}");
}

/// Other sendmsg calls in the watched namespace: UDP from this test process and
/// rtnetlink (`ip link`), a netlink socket of another protocol.
#[test]
fn other_sendmsg_is_not_reported() {
    if setup().is_none() {
        return;
    }
    let ns = Netns::create("plumb-bpf-test").expect("netns");
    let Some(mut probe) = attach(&ns) else { return };
    let mut seen = Vec::new();

    plumb_os::netns::on_thread(Some(ns.name()), || {
        let sock = std::net::UdpSocket::bind("127.0.0.1:0")?;
        sock.connect(sock.local_addr()?)?;
        let mut payload = *b"not a netlink batch";
        let mut iov = libc::iovec {
            iov_base: payload.as_mut_ptr().cast(),
            iov_len: payload.len(),
        };
        // SAFETY: zeroed msghdr is valid; it points to one live iovec.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        use std::os::fd::AsRawFd;
        // SAFETY: a connected socket and a valid msghdr.
        let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, 0) };
        assert_eq!(
            n,
            payload.len() as isize,
            "{}",
            std::io::Error::last_os_error()
        );
        Ok(())
    })
    .expect("UDP sendmsg in the namespace");
    let ip = run_in(&ns, "ip", &["link", "set", "lo", "up"]);
    barrier(&ns, &mut probe, &mut seen, 0);
    let me = std::process::id();
    assert!(
        !seen.iter().any(|e| e.pid == me || e.pid == ip),
        "non-netfilter sendmsg reported: {seen:#?}"
    );
}

/// Sends `n` netlink messages with `sendmsg` on a netfilter socket in `ns`, of a type
/// the kernel ignores (NLMSG_NOOP, no ack: no effect, no answer).
fn send_noops(ns: &Netns, n: u32) {
    plumb_os::netns::on_thread(Some(ns.name()), || {
        // SAFETY: plain socket(2); the fd is closed below.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_NETFILTER,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut noop = [0u8; 16];
        noop[0..4].copy_from_slice(&16u32.to_ne_bytes());
        noop[4..6].copy_from_slice(&(libc::NLMSG_NOOP as u16).to_ne_bytes());
        noop[6..8].copy_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
        // SAFETY: all-zero sockaddr_nl is the kernel's address (pid 0, no groups).
        let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        kernel.nl_family = libc::AF_NETLINK as u16;
        let mut result = Ok(());
        for _ in 0..n {
            let mut iov = libc::iovec {
                iov_base: noop.as_mut_ptr().cast(),
                iov_len: noop.len(),
            };
            // SAFETY: zeroed msghdr is valid; it points to the live address and iovec.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_name = (&mut kernel as *mut libc::sockaddr_nl).cast();
            msg.msg_namelen = std::mem::size_of::<libc::sockaddr_nl>() as u32;
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            // SAFETY: an open socket and a valid msghdr.
            if unsafe { libc::sendmsg(fd, &msg, 0) } < 0 {
                result = Err(std::io::Error::last_os_error());
                break;
            }
        }
        // SAFETY: closes the fd opened above, once.
        unsafe { libc::close(fd) };
        result
    })
    .expect("sendmsg on a netfilter socket in the namespace");
}

/// Reports the ring buffer has no room for are counted, and the count arrives with
/// the next report that gets through: sends = reports read + dropped, exactly.
#[test]
fn dropped_reports_are_counted_exactly() {
    if setup().is_none() {
        return;
    }
    let ns = Netns::create("plumb-bpf-test").expect("netns");
    let Some(mut probe) = attach(&ns) else { return };
    let me = std::process::id();
    // The ring (256 KiB) holds ~4,600 reports; nobody reads it while these are sent.
    const SENT: u32 = 8_000;
    send_noops(&ns, SENT);
    let mut read = 0u32;
    loop {
        let got = probe.drain();
        if got.is_empty() {
            break;
        }
        read += got.iter().filter(|b| b.pid == me).count() as u32;
        assert!(got.iter().all(|b| !b.batch), "NOOPs are not batches");
    }
    assert!(read > 0 && read < SENT, "read {read} of {SENT}");
    send_noops(&ns, 1);
    let mut seen = Vec::new();
    wait_for(&mut probe, &mut seen, "the report after the drops", |b| {
        b.pid == me
    });
    let last = seen.iter().rfind(|b| b.pid == me).expect("a report");
    assert_eq!(
        read + last.dropped_before,
        SENT,
        "read {read}, dropped {}",
        last.dropped_before
    );
}
