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
//! datagrams per `sendmmsg`. The kernel's own generator (pktgen) would go further, but
//! needs a kernel built with CONFIG_NET_PKTGEN.
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
                        send_loop(sockets, to, t as u64, threads as u64, stop, sent);
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
    }
    sums
}

/// The load read by `plumb observe` itself, its output thrown away (`> /dev/null`);
/// what it handled is read from its metrics.
fn cli(ns: &plumb_os::netns::Netns, what: &str, secs: u64, plumb: &str) {
    use std::io::{BufRead, BufReader};
    let drops = what == "cli-drops";
    if drops {
        drops_setup(ns);
    } else {
        conntrack_setup(ns);
    }
    let cpu0 = children_cpu();
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
        "{what}: plumb observe -o json > /dev/null handled {:.0} events/s over {wall:.1} s ({:.0} datagrams/s generated); its CPU {:.2} core over its {:.0} s run (children included); lost {}",
        handled / wall,
        sent.load(Ordering::Relaxed) as f64 / wall,
        cpu / (secs + 3) as f64,
        (secs + 3),
        m.get("plumb_observe_lost_events_total")
            .copied()
            .unwrap_or(0.0),
    );
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
        other => eprintln!(
            "usage: observe_load conntrack|drops|cli-conntrack|cli-drops [SECS] [PLUMB] (not {other})"
        ),
    }
}
