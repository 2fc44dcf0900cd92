//! Synthetic load for `plumb observe`'s two sources, in a private network namespace
//! (root): how many events per second the reader keeps up with, the CPU its thread
//! uses, and how many events were lost.
//!
//!   cargo run --release -p plumb-observe --example observe_load -- conntrack 5
//!   cargo run --release -p plumb-observe --example observe_load -- drops 5
//!
//! conntrack: the generator sends UDP datagrams from 64 sockets (one per batch) to rotating
//! ports of 127.0.0.1 (every datagram a new connection; the namespace's UDP timeout is
//! 1 s so the table does not fill); the reader is [`ConntrackListener`] (NEW and
//! DESTROY groups) decoding every event into a flow.
//! drops: a generator sends UDP datagrams over lo that an iptables DROP rule in raw
//! PREROUTING drops (each one a NETFILTER_DROP kfree_skb); the reader is [`DropProbe`] draining and
//! decoding the ring buffer. The generator's rate with and without the probe
//! attached gives the program's cost per drop on the sending CPU.
//!
//! cli-conntrack / cli-drops PLUMB: the same load, read by `PLUMB observe --netns NS
//! -o json > /dev/null` (the whole command: queue, names, attribution, JSON) instead
//! of the library: events handled per second (from its metrics) and its CPU (user +
//! system, the dump tools it runs included).
//!
//!   target/release/examples/observe_load cli-drops 5 target/release/plumb
//!
//! `--threads N` sends from N threads (default 1); every thread sends in batches of 64
//! datagrams per `sendmmsg`. `--packet` sends the drop load as prebuilt Ethernet frames
//! on `lo` through an AF_PACKET socket with PACKET_QDISC_BYPASS instead of UDP sockets
//! (no routing or socket layer on the way out: the cheapest real packet this kernel can
//! make without pktgen, which needs CONFIG_NET_PKTGEN).
//!
//! cli-inject PLUMB [--rate N]: the user-space pipeline beyond what real packets reach
//! here. `PLUMB observe` runs as for cli-drops; a small BPF program (hand-assembled
//! below, run with BPF_PROG_TEST_RUN, never attached) writes NETFILTER_DROP records of
//! the watched namespace into the command's own ring buffer (found by its id, type and
//! name), 513 per run, at N records/s (default: as fast as it can). What the ring
//! buffer had no room for is counted by the injector; what the command handled, from
//! its metrics.
//!
//!   target/release/examples/observe_load cli-inject 5 target/release/plumb --rate 1000000
//!
//! The namespace is deleted at the end, also on failure.

use plumb_observe::drops::{DropFilter, DropProbe};
use plumb_observe::listener::ConntrackListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn thread_cpu() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec for clock_gettime to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Sender threads (`--threads N`, default 1).
static THREADS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);

/// Datagrams per `sendmmsg` call.
const BATCH: usize = 64;

/// `--packet`: the drop load as AF_PACKET frames on lo.
static PACKET: AtomicBool = AtomicBool::new(false);

/// Sends UDP datagrams from inside `ns` until `stop`, from `--threads` threads, in
/// batches of [`BATCH`] per `sendmmsg` (one syscall per batch); `to(i)` is the i-th
/// destination (IPv4).
fn generator(
    ns: String,
    sockets: usize,
    to: fn(u64) -> std::net::SocketAddr,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let threads = THREADS.load(Ordering::Relaxed).max(1);
        std::thread::scope(|sc| {
            for t in 0..threads {
                let (ns, stop, sent) = (&ns, &stop, &sent);
                sc.spawn(move || {
                    let _ = plumb_os::netns::on_thread(Some(ns), || {
                        if PACKET.load(Ordering::Relaxed) {
                            packet_loop(to(0), stop, sent);
                        } else {
                            send_loop(sockets, to, t as u64, threads as u64, stop, sent);
                        }
                        Ok::<(), std::io::Error>(())
                    });
                });
            }
        });
    })
}

fn sockaddr(a: std::net::SocketAddr) -> libc::sockaddr_in {
    let std::net::SocketAddr::V4(v4) = a else {
        panic!("IPv4 destinations only")
    };
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: v4.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*v4.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

/// One sender thread: destinations `i` with `i % of == nth`, so threads share the
/// destination sequence without overlap.
fn send_loop(
    sockets: usize,
    to: fn(u64) -> std::net::SocketAddr,
    nth: u64,
    of: u64,
    stop: &AtomicBool,
    sent: &AtomicU64,
) {
    use std::os::fd::AsRawFd;
    let socks: Vec<_> = (0..sockets)
        .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    let payload = [b'x'];
    let mut addrs = vec![sockaddr(to(0)); BATCH];
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr() as *mut libc::c_void,
        iov_len: 1,
    };
    let mut i = nth;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..16 {
            // One batch per socket turn: socket k takes destinations of its own.
            let s = &socks[((i / of) as usize / BATCH) % socks.len()];
            for a in addrs.iter_mut() {
                *a = sockaddr(to(i));
                i += of;
            }
            // SAFETY: zeroed mmsghdrs are valid; each points at live buffers below.
            let mut msgs: Vec<libc::mmsghdr> =
                (0..BATCH).map(|_| unsafe { std::mem::zeroed() }).collect();
            for (m, a) in msgs.iter_mut().zip(addrs.iter_mut()) {
                m.msg_hdr.msg_name = (a as *mut libc::sockaddr_in).cast();
                m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as u32;
                m.msg_hdr.msg_iov = &mut iov;
                m.msg_hdr.msg_iovlen = 1;
            }
            // SAFETY: msgs, addrs, iov and payload outlive the call.
            let n = unsafe { libc::sendmmsg(s.as_raw_fd(), msgs.as_mut_ptr(), BATCH as u32, 0) };
            // A dropped datagram fails the call (EPERM) after the ones before it: the
            // kernel dropped the first one too, so count it and go on.
            let done = if n < 0 { 1 } else { n.max(1) as u64 };
            sent.fetch_add(done, Ordering::Relaxed);
        }
    }
}

/// One IPv4/UDP frame from 10.43.0.9:40000 to `to`, with a correct header checksum.
fn frame(to: std::net::SocketAddr) -> Vec<u8> {
    let std::net::SocketAddr::V4(to) = to else {
        panic!("IPv4 destinations only")
    };
    let mut f = vec![0u8; 12]; // lo's MAC addresses are zero
    f.extend(0x0800u16.to_be_bytes());
    let mut ip = vec![0x45, 0, 0, 29, 0, 0, 0x40, 0, 64, 17, 0, 0];
    ip.extend([10, 43, 0, 9]);
    ip.extend(to.ip().octets());
    let sum: u32 = ip
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    let sum = !(((sum & 0xffff) + (sum >> 16)) as u16);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend(ip);
    f.extend(40000u16.to_be_bytes());
    f.extend(to.port().to_be_bytes());
    f.extend(9u16.to_be_bytes());
    f.extend([0u8, 0, b'x']);
    f
}

/// One `--packet` sender thread: the same frame to `to`, in batches of [`BATCH`] per
/// `sendmmsg` on an AF_PACKET socket bound to lo (protocol 0: it receives nothing),
/// bypassing the qdisc layer.
fn packet_loop(to: std::net::SocketAddr, stop: &AtomicBool, sent: &AtomicU64) {
    // SAFETY: plain socket calls on a descriptor this function owns and closes.
    unsafe {
        let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0);
        assert!(
            fd >= 0,
            "AF_PACKET socket: {}",
            std::io::Error::last_os_error()
        );
        let one: libc::c_int = 1;
        libc::setsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_QDISC_BYPASS,
            (&one as *const libc::c_int).cast(),
            4,
        );
        let mut sll: libc::sockaddr_ll = std::mem::zeroed();
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_ifindex = libc::if_nametoindex(c"lo".as_ptr()) as i32;
        let r = libc::bind(
            fd,
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        );
        assert_eq!(r, 0, "bind to lo: {}", std::io::Error::last_os_error());
        let f = frame(to);
        let mut iov = libc::iovec {
            iov_base: f.as_ptr() as *mut libc::c_void,
            iov_len: f.len(),
        };
        let mut msgs: Vec<libc::mmsghdr> = (0..BATCH).map(|_| std::mem::zeroed()).collect();
        for m in msgs.iter_mut() {
            m.msg_hdr.msg_iov = &mut iov;
            m.msg_hdr.msg_iovlen = 1;
        }
        while !stop.load(Ordering::Relaxed) {
            let n = libc::sendmmsg(fd, msgs.as_mut_ptr(), BATCH as u32, 0);
            if n > 0 {
                sent.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
        libc::close(fd);
    }
}

fn conntrack_setup(ns: &plumb_os::netns::Netns) {
    let rules = "*raw\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -p udp -m conntrack --ctstate NEW -j ACCEPT\nCOMMIT\n";
    let (ok, _, err) = ns.exec("iptables-nft-restore", &[], Some(rules)).unwrap();
    assert!(ok, "{err}");
    let (ok, _, err) = ns
        .exec(
            "sysctl",
            &["-qw", "net.netfilter.nf_conntrack_udp_timeout=1"],
            None,
        )
        .unwrap();
    assert!(ok, "{err}");
}

fn conntrack_load(
    ns: &str,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
) -> std::thread::JoinHandle<()> {
    generator(
        ns.to_string(),
        64,
        |i| std::net::SocketAddr::from(([127, 0, 0, 1], 1024 + (i % 60000) as u16)),
        stop,
        sent,
    )
}

fn conntrack(ns: &plumb_os::netns::Netns, secs: u64) {
    conntrack_setup(ns);
    let mut l = ConntrackListener::open(Some(ns.name())).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let g = conntrack_load(ns.name(), stop.clone(), sent.clone());
    let (mut new, mut destroy, mut lost) = (0u64, 0u64, 0u64);
    let cpu0 = thread_cpu();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(secs) {
        let r = l.receive_batch(1024).unwrap();
        lost += u64::from(r.lost);
        if r.flows.len() >= 64 {
            // As plumb observe's reader does: under load, one wakeup per batch.
            std::thread::sleep(Duration::from_millis(2));
        }
        for f in &r.flows {
            match f.event {
                plumb_observe::Event::New => new += 1,
                plumb_observe::Event::Destroy => destroy += 1,
                _ => {}
            }
        }
    }
    let wall = start.elapsed().as_secs_f64();
    let cpu = (thread_cpu() - cpu0).as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let _ = g.join();
    println!(
        "conntrack: {:.0} events/s ({:.0} NEW/s, {:.0} DESTROY/s) read over {wall:.1} s; reader CPU {:.2} core; {:.0} datagrams/s sent; ENOBUFS overflows {lost}",
        (new + destroy) as f64 / wall,
        new as f64 / wall,
        destroy as f64 / wall,
        cpu / wall,
        sent.load(Ordering::Relaxed) as f64 / wall,
    );
}

fn send_rate(ns: &plumb_os::netns::Netns, secs: f64) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let g = generator(
        ns.name().to_string(),
        1,
        |_| std::net::SocketAddr::from(([10, 43, 0, 7], 53)),
        stop.clone(),
        sent.clone(),
    );
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    let _ = g.join();
    sent.load(Ordering::Relaxed) as f64 / secs
}

fn drops_setup(ns: &plumb_os::netns::Netns) {
    let (ok, _, err) = ns
        .exec("ip", &["route", "add", "10.43.0.0/16", "dev", "lo"], None)
        .unwrap();
    assert!(ok, "{err}");
    // Dropped on the way back in (raw PREROUTING, after lo), not in OUTPUT: the send
    // succeeds, so a `sendmmsg` batch is not cut short by EPERM at its first datagram.
    let rules = "*raw\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -d 10.43.0.7/32 -j DROP\nCOMMIT\n";
    let (ok, _, err) = ns.exec("iptables-nft-restore", &[], Some(rules)).unwrap();
    assert!(ok, "{err}");
}

fn drops_load(
    ns: &str,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
) -> std::thread::JoinHandle<()> {
    generator(
        ns.to_string(),
        1,
        |_| std::net::SocketAddr::from(([10, 43, 0, 7], 53)),
        stop,
        sent,
    )
}

fn children_cpu() -> f64 {
    // SAFETY: a zeroed rusage is a valid value for getrusage to fill.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid rusage pointer.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// `GET /metrics` and the sum of each family's samples.
fn scrape(addr: &str) -> std::collections::BTreeMap<String, f64> {
    use std::io::{Read, Write};
    let mut sums = std::collections::BTreeMap::new();
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return sums;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n");
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    for l in body.lines().filter(|l| l.starts_with("plumb_observe_")) {
        let name = l.split(['{', ' ']).next().unwrap_or_default().to_string();
        let v: f64 = l
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        *sums.entry(name).or_default() += v;
        // Lost events also by where (`source`).
        if let Some(source) = l
            .strip_prefix("plumb_observe_lost_events_total{source=\"")
            .and_then(|r| r.split('"').next())
        {
            *sums.entry(format!("lost {source}")).or_default() += v;
        }
    }
    sums
}

/// The load read by `plumb observe` itself, its output thrown away (`> /dev/null`);
/// what it handled is read from its metrics.
fn cli(ns: &plumb_os::netns::Netns, what: &str, secs: u64, plumb: &str) {
    let drops = what == "cli-drops";
    if drops {
        drops_setup(ns);
    } else {
        conntrack_setup(ns);
    }
    let cpu0 = children_cpu();
    let (mut child, addr) = spawn_observer(ns, secs, plumb);
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let g = if drops {
        drops_load(ns.name(), stop.clone(), sent.clone())
    } else {
        conntrack_load(ns.name(), stop.clone(), sent.clone())
    };
    std::thread::sleep(Duration::from_secs(secs));
    stop.store(true, Ordering::Relaxed);
    let _ = g.join();
    let wall = start.elapsed().as_secs_f64();
    // The last window is attributed, the last events counted.
    std::thread::sleep(Duration::from_millis(1500));
    let m = scrape(&addr);
    let _ = child.wait();
    let cpu = children_cpu() - cpu0;
    let handled = m.get("plumb_observe_drops_total").copied().unwrap_or(0.0)
        + m.get("plumb_observe_flows_total").copied().unwrap_or(0.0);
    println!(
        "{what}: plumb observe -o json > /dev/null handled {:.0} events/s over {wall:.1} s ({:.0} datagrams/s generated); its CPU {cpu:.2} s = {:.2} core per second of load (its {} s run: start-up and idle tail included, children included); lost {}",
        handled / wall,
        sent.load(Ordering::Relaxed) as f64 / wall,
        cpu / wall,
        (secs + 3),
        m.get("plumb_observe_lost_events_total")
            .copied()
            .unwrap_or(0.0),
    );
    for (k, v) in m.iter().filter(|(k, _)| k.starts_with("lost ")) {
        println!("  {k}: {v}");
    }
    if let Some(a) = m
        .get("plumb_observe_aggregated_drops_total")
        .filter(|a| **a > 0.0)
    {
        println!(
            "  of the drops handled, {a} were printed as part of an identical drop's line (count)"
        );
    }
}

fn drops(ns: &plumb_os::netns::Netns, secs: u64) {
    drops_setup(ns);
    let inode = plumb_os::netns::inode_of(ns.name()).unwrap();
    // Rounds alternate without and with the probe (the machine's load moves between
    // runs); the best rate of each is compared.
    let (mut best_without, mut best_with, mut best_other) = (0f64, 0f64, 0f64);
    let (mut got, mut wall, mut cpu, mut lost, mut reported) = (0u64, 0f64, 0f64, 0u64, 0u64);
    for _ in 0..secs {
        best_without = best_without.max(send_rate(ns, 1.0));
        {
            // Attached for another namespace: what drops elsewhere on a node cost.
            let _other = DropProbe::attach(&DropFilter {
                netns_inode: 1,
                all_reasons: false,
                ..Default::default()
            })
            .unwrap();
            best_other = best_other.max(send_rate(ns, 1.0));
        }
        let mut p = DropProbe::attach(&DropFilter {
            netns_inode: inode,
            all_reasons: false,
            ..Default::default()
        })
        .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let g = generator(
            ns.name().to_string(),
            1,
            |_| std::net::SocketAddr::from(([10, 43, 0, 7], 53)),
            stop.clone(),
            sent.clone(),
        );
        let cpu0 = thread_cpu();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(1) {
            p.wait(Duration::from_millis(50));
            p.drain(&mut |d| {
                std::hint::black_box(&d);
                got += 1;
            });
        }
        let w = start.elapsed().as_secs_f64();
        wall += w;
        cpu += (thread_cpu() - cpu0).as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        let _ = g.join();
        p.drain(&mut |_| got += 1);
        let c = p.counters();
        lost += c.lost;
        reported += c.reported;
        best_with = best_with.max(sent.load(Ordering::Relaxed) as f64 / w);
    }
    println!(
        "drops: {:.0} drops/s read over {wall:.1} s; reader CPU {:.3} core; lost in the ring buffer {lost} of {}; sender (best of {secs} 1-s rounds) {best_without:.0}/s without the probe, {best_with:.0}/s with it (+{:.0} ns per drop on the sending CPU), {best_other:.0}/s with it watching another namespace (+{:.0} ns)",
        got as f64 / wall,
        cpu / wall,
        reported + lost,
        (1e9 / best_with - 1e9 / best_without).max(0.0),
        (1e9 / best_other - 1e9 / best_without).max(0.0),
    );
}

fn main() {
    let mut args: Vec<String> = std::env::args().collect();
    if let Some(k) = args.iter().position(|a| a == "--threads") {
        let n: usize = args
            .get(k + 1)
            .and_then(|n| n.parse().ok())
            .expect("--threads N");
        THREADS.store(n, Ordering::Relaxed);
        args.drain(k..k + 2);
    }
    let mut rate = 0u64;
    if let Some(k) = args.iter().position(|a| a == "--rate") {
        rate = args
            .get(k + 1)
            .and_then(|n| n.parse().ok())
            .expect("--rate N");
        args.drain(k..k + 2);
    }
    if let Some(k) = args.iter().position(|a| a == "--packet") {
        PACKET.store(true, Ordering::Relaxed);
        args.remove(k);
    }
    let what = args.get(1).map(String::as_str).unwrap_or("conntrack");
    let secs: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5);
    let ns =
        plumb_os::netns::Netns::create("plumb-observe-load").expect("a private namespace (root)");
    let (ok, _, err) = ns.exec("ip", &["link", "set", "lo", "up"], None).unwrap();
    assert!(ok, "{err}");
    match what {
        "conntrack" => conntrack(&ns, secs),
        "drops" => drops(&ns, secs),
        "cli-conntrack" | "cli-drops" => cli(
            &ns,
            what,
            secs,
            args.get(3)
                .map(String::as_str)
                .unwrap_or("target/release/plumb"),
        ),
        "cli-inject" => cli_inject(
            &ns,
            secs,
            args.get(3)
                .map(String::as_str)
                .unwrap_or("target/release/plumb"),
            rate,
        ),
        other => eprintln!(
            "usage: observe_load conntrack|drops|cli-conntrack|cli-drops|cli-inject [SECS] [PLUMB] [--threads N] [--packet] [--rate N] (not {other})"
        ),
    }
}

/// The synthetic injector of `cli-inject`: drop records written into a running `plumb
/// observe`'s ring buffer by a BPF program run with BPF_PROG_TEST_RUN.
mod inject {
    use std::io;

    const BPF_PROG_LOAD: libc::c_long = 5;
    const BPF_PROG_TEST_RUN: libc::c_long = 10;
    const BPF_MAP_GET_NEXT_ID: libc::c_long = 12;
    const BPF_MAP_GET_FD_BY_ID: libc::c_long = 14;
    const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
    const BPF_PROG_TYPE_RAW_TRACEPOINT: u32 = 17;
    const BPF_MAP_TYPE_RINGBUF: u32 = 27;
    /// Records per run: the loop, then one more that wakes the reader.
    pub const PER_RUN: u64 = 513;

    fn bpf(cmd: libc::c_long, attr: &mut [u8; 128]) -> io::Result<i64> {
        // SAFETY: attr is a zero-padded bpf_attr of 128 bytes for `cmd`.
        let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), 128u32) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r)
        }
    }

    fn put32(a: &mut [u8; 128], at: usize, v: u32) {
        a[at..at + 4].copy_from_slice(&v.to_ne_bytes());
    }
    fn put64(a: &mut [u8; 128], at: usize, v: u64) {
        a[at..at + 8].copy_from_slice(&v.to_ne_bytes());
    }

    /// The ids of the ring buffers named `events` (plumb's drop program's), in order.
    pub fn ring_buffers() -> Vec<u32> {
        let mut ids = Vec::new();
        let mut id = 0u32;
        loop {
            let mut a = [0u8; 128];
            put32(&mut a, 0, id);
            if bpf(BPF_MAP_GET_NEXT_ID, &mut a).is_err() {
                return ids;
            }
            id = u32::from_ne_bytes(a[4..8].try_into().unwrap());
            let mut a = [0u8; 128];
            put32(&mut a, 0, id);
            let Ok(fd) = bpf(BPF_MAP_GET_FD_BY_ID, &mut a) else {
                continue;
            };
            let mut info = [0u8; 128];
            let mut a = [0u8; 128];
            put32(&mut a, 0, fd as u32);
            put32(&mut a, 4, 128);
            put64(&mut a, 8, info.as_mut_ptr() as u64);
            let ok = bpf(BPF_OBJ_GET_INFO_BY_FD, &mut a).is_ok();
            // SAFETY: fd came from the kernel above and is closed once.
            unsafe { libc::close(fd as i32) };
            let ty = u32::from_ne_bytes(info[0..4].try_into().unwrap());
            if ok && ty == BPF_MAP_TYPE_RINGBUF && info[24..31] == *b"events\0" {
                ids.push(id);
            }
        }
    }

    fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> [u8; 8] {
        let mut i = [0u8; 8];
        i[0] = code;
        i[1] = dst | (src << 4);
        i[2..4].copy_from_slice(&off.to_le_bytes());
        i[4..8].copy_from_slice(&imm.to_le_bytes());
        i
    }

    /// A loaded injector writing `record` (72 bytes, its time replaced by the time of
    /// the write) into ring buffer `map_id`.
    pub struct Injector {
        prog: i32,
    }

    impl Injector {
        pub fn new(map_id: u32, record: &[u8; 72]) -> io::Result<Injector> {
            let mut a = [0u8; 128];
            put32(&mut a, 0, map_id);
            let map = bpf(BPF_MAP_GET_FD_BY_ID, &mut a)? as i32;
            let mut p: Vec<[u8; 8]> = Vec::new();
            let loops = (PER_RUN - 1) as i32;
            p.push(insn(0xb7, 6, 0, 0, loops)); // r6 = loops
            p.push(insn(0xb7, 7, 0, 0, 0)); // r7 = 0 (failed outputs)
            for (k, w) in record.chunks(4).enumerate() {
                // *(u32 *)(r10 - 72 + 4k) = word
                let word = i32::from_ne_bytes(w.try_into().unwrap());
                p.push(insn(0x62, 10, 0, -72 + 4 * k as i16, word));
            }
            let output = |p: &mut Vec<[u8; 8]>, flags: i32| {
                p.push(insn(0x85, 0, 0, 0, 5)); // call bpf_ktime_get_ns
                p.push(insn(0x7b, 10, 0, -72, 0)); // *(u64 *)(r10 - 72) = r0
                p.push(insn(0x18, 1, 1, 0, map)); // r1 = map (BPF_PSEUDO_MAP_FD)
                p.push(insn(0, 0, 0, 0, 0));
                p.push(insn(0xbf, 2, 10, 0, 0)); // r2 = r10
                p.push(insn(0x07, 2, 0, 0, -72)); // r2 -= 72
                p.push(insn(0xb7, 3, 0, 0, 72)); // r3 = 72
                p.push(insn(0xb7, 4, 0, 0, flags)); // r4 = flags
                p.push(insn(0x85, 0, 0, 0, 130)); // call bpf_ringbuf_output
                p.push(insn(0x77, 0, 0, 0, 63)); // r0 >>= 63: 1 when it failed
                p.push(insn(0x0f, 7, 0, 0, 0)); // r7 += r0
            };
            let top = p.len();
            output(&mut p, 1); // BPF_RB_NO_WAKEUP
            p.push(insn(0x17, 6, 0, 0, 1)); // r6 -= 1
            let back = top as i16 - (p.len() as i16 + 1);
            p.push(insn(0x55, 6, 0, back, 0)); // if r6 != 0 goto top
            output(&mut p, 2); // BPF_RB_FORCE_WAKEUP
            p.push(insn(0xbf, 0, 7, 0, 0)); // r0 = r7
            p.push(insn(0x95, 0, 0, 0, 0)); // exit
            let code: Vec<u8> = p.concat();
            let license = c"GPL";
            let mut log = vec![0u8; 1 << 16];
            let mut a = [0u8; 128];
            put32(&mut a, 0, BPF_PROG_TYPE_RAW_TRACEPOINT);
            put32(&mut a, 4, p.len() as u32);
            put64(&mut a, 8, code.as_ptr() as u64);
            put64(&mut a, 16, license.as_ptr() as u64);
            a[48..60].copy_from_slice(b"plumb_inject");
            let mut r = bpf(BPF_PROG_LOAD, &mut a);
            if r.is_err() {
                // Again with the verifier's log (the last 1 MiB of it), to say why.
                log.resize(1 << 20, 0);
                put32(&mut a, 24, 1);
                put32(&mut a, 28, log.len() as u32);
                put64(&mut a, 32, log.as_mut_ptr() as u64);
                r = bpf(BPF_PROG_LOAD, &mut a);
            }
            // SAFETY: map is ours; the program holds its own reference.
            unsafe { libc::close(map) };
            match r {
                Ok(fd) => Ok(Injector { prog: fd as i32 }),
                Err(e) => {
                    let end = log.iter().position(|b| *b == 0).unwrap_or(0);
                    Err(io::Error::new(
                        e.kind(),
                        format!("{e}: {}", String::from_utf8_lossy(&log[..end])),
                    ))
                }
            }
        }

        /// Writes [`PER_RUN`] records; returns how many found no room.
        pub fn run(&self) -> io::Result<u64> {
            let mut a = [0u8; 128];
            put32(&mut a, 0, self.prog as u32);
            bpf(BPF_PROG_TEST_RUN, &mut a)?;
            Ok(u64::from(u32::from_ne_bytes(a[4..8].try_into().unwrap())))
        }
    }

    impl Drop for Injector {
        fn drop(&mut self) {
            // SAFETY: the program's descriptor, closed once.
            unsafe { libc::close(self.prog) };
        }
    }
}

/// Starts `plumb observe -o json` in `ns` for `secs` + 3 s, its output thrown away, and
/// waits until it listens; gives the child and its metrics address.
fn spawn_observer(
    ns: &plumb_os::netns::Netns,
    secs: u64,
    plumb: &str,
) -> (std::process::Child, String) {
    use std::io::{BufRead, BufReader};
    let mut child = std::process::Command::new(plumb)
        .args(["observe", "--netns", ns.name(), "-o", "json"])
        .args(["--metrics-addr", "127.0.0.1:0", "--duration"])
        .arg((secs + 3).to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("plumb observe");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut addr = None;
        for l in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(a) = l.strip_prefix("plumb observe: metrics on http://") {
                addr = a.strip_suffix("/metrics").map(str::to_string);
            }
            if l.contains("listening in") {
                let _ = tx.send(addr.take());
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("observe listening")
        .expect("observe's metrics address");
    (child, addr)
}

/// `cli-inject`: `plumb observe` reading records the injector writes into its ring
/// buffer at `rate` per second (0: as fast as it can).
fn cli_inject(ns: &plumb_os::netns::Netns, secs: u64, plumb: &str, rate: u64) {
    drops_setup(ns);
    let before: Vec<u32> = inject::ring_buffers();
    let cpu0 = children_cpu();
    let (mut child, addr) = spawn_observer(ns, secs, plumb);
    let ring = *inject::ring_buffers()
        .iter()
        .rfind(|id| !before.contains(id))
        .expect("the command's ring buffer");
    // A NETFILTER_DROP of the watched namespace: 10.43.0.9:40000 -> 10.43.0.7:53/udp.
    let reasons = plumb_observe::drops::kernel_reasons().unwrap();
    let mut rec = [0u8; 72];
    rec[16..20]
        .copy_from_slice(&(plumb_os::netns::inode_of(ns.name()).unwrap() as u32).to_ne_bytes());
    rec[20..24].copy_from_slice(&reasons.value("NETFILTER_DROP").unwrap().to_ne_bytes());
    rec[24..28].copy_from_slice(&1u32.to_ne_bytes());
    rec[28..30].copy_from_slice(&0x0800u16.to_ne_bytes());
    rec[30] = 17;
    rec[31] = 1;
    rec[32..34].copy_from_slice(&40000u16.to_be_bytes());
    rec[34..36].copy_from_slice(&53u16.to_be_bytes());
    rec[36..40].copy_from_slice(&[10, 43, 0, 9]);
    rec[52..56].copy_from_slice(&[10, 43, 0, 7]);
    let inj = inject::Injector::new(ring, &rec).expect("the injector loads");
    let (mut written, mut full) = (0u64, 0u64);
    let cpu_inj0 = thread_cpu();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(secs) {
        if rate > 0 {
            let due = (start.elapsed().as_secs_f64() * rate as f64) as u64;
            if written >= due {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
        }
        let f = inj.run().expect("BPF_PROG_TEST_RUN");
        written += inject::PER_RUN;
        full += f;
    }
    let wall = start.elapsed().as_secs_f64();
    let inj_cpu = (thread_cpu() - cpu_inj0).as_secs_f64() / wall;
    std::thread::sleep(Duration::from_millis(1500));
    let m = scrape(&addr);
    let _ = child.wait();
    let cpu = children_cpu() - cpu0;
    let handled = m.get("plumb_observe_drops_total").copied().unwrap_or(0.0);
    println!(
        "cli-inject: plumb observe -o json > /dev/null handled {:.0} events/s over {wall:.1} s; {:.0} records/s written to its ring buffer, {:.0}/s found it full (injector {inj_cpu:.2} core); its CPU {cpu:.2} s = {:.2} core per second of load (its {} s run: start-up and idle tail included); lost (its own count) {}",
        handled / wall,
        (written - full) as f64 / wall,
        full as f64 / wall,
        cpu / wall,
        secs + 3,
        m.get("plumb_observe_lost_events_total")
            .copied()
            .unwrap_or(0.0),
    );
    for (k, v) in m.iter().filter(|(k, _)| k.starts_with("lost ")) {
        println!("  {k}: {v}");
    }
    if let Some(a) = m
        .get("plumb_observe_aggregated_drops_total")
        .filter(|a| **a > 0.0)
    {
        println!(
            "  of the drops handled, {a} were printed as part of an identical drop's line (count)"
        );
    }
}
