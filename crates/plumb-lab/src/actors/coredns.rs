//! `coredns`: CoreDNS's kubernetes plugin as it starts in a pod (pod namespace, no host
//! network), the witness of the host-reject scenario.
//!
//! Its client-go reflectors list Namespaces, Services and EndpointSlices from the API
//! through the `kubernetes` Service (`--server`, 10.43.0.1:443). Each failed list is logged
//! as CoreDNS does (`[ERROR] plugin/kubernetes: pkg/mod/k8s.io/client-go@v0.29.3/tools/
//! cache/reflector.go:229: Failed to watch *v1.Namespace: failed to list *v1.Namespace:
//! Get "https://10.43.0.1:443/api/v1/namespaces?limit=500&resourceVersion=0": dial tcp
//! 10.43.0.1:443: connect: no route to host`) and retried after client-go's back-off
//! (800 ms doubling, scaled cap `--max-backoff`); until the first list succeeds the ready
//! plugin answers 503 and logs `[INFO] plugin/ready: Still waiting on: "kubernetes"`
//! (each readiness probe; here every `--ready-log-interval`). Only the TCP connect is
//! attempted: in the incidents modelled the connect is what fails.
//!
//! `--serve` makes it kube-dns's backend too (the kube-proxy-free scenarios): it
//! listens on 53/UDP (each datagram is answered with itself), 53/TCP (accepts) and
//! 9153/TCP (`/metrics`, HTTP 200), so a connect through the `kube-dns` Service reaches
//! a real socket.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use super::install_cni::go_errno;
use super::{Flags, nap, terminating};

/// Listens on :53 (UDP and TCP) and :9153 (metrics), each on its own thread for the
/// process's life.
fn serve() -> Result<(), String> {
    let udp = UdpSocket::bind("0.0.0.0:53").map_err(|e| format!("listen udp :53: {e}"))?;
    let dns = TcpListener::bind("0.0.0.0:53").map_err(|e| format!("listen tcp :53: {e}"))?;
    let metrics =
        TcpListener::bind("0.0.0.0:9153").map_err(|e| format!("listen tcp :9153: {e}"))?;
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while let Ok((n, from)) = udp.recv_from(&mut buf) {
            let _ = udp.send_to(&buf[..n], from);
        }
    });
    std::thread::spawn(move || {
        for c in dns.incoming() {
            drop(c);
        }
    });
    std::thread::spawn(move || {
        for mut c in metrics.incoming().flatten() {
            let _ = c.set_read_timeout(Some(Duration::from_secs(1)));
            let mut req = [0u8; 1024];
            let _ = c.read(&mut req);
            let body =
                "# TYPE coredns_build_info gauge\ncoredns_build_info{version=\"1.11.3\"} 1\n";
            let _ = write!(
                c,
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    Ok(())
}

fn say(line: &str) {
    println!("{line}");
}

/// Runs CoreDNS's start until SIGTERM.
pub fn main(f: &Flags) -> Result<i32, String> {
    let server: SocketAddr = f.parse_or("server", "10.43.0.1:443".parse().unwrap())?;
    let dial = f.duration_or("dial-timeout", Duration::from_secs(5))?;
    let max_backoff = f.duration_or("max-backoff", Duration::from_secs(8))?;
    let ready_every = f.duration_or("ready-log-interval", Duration::from_secs(5))?;
    if f.get("serve").is_some() {
        serve()?;
    }
    say(".:53");
    say("[INFO] plugin/reload: Running configuration SHA512 = 3f4a0b1e");
    say("CoreDNS-1.11.3");
    say("linux/amd64, go1.22.7, a6338e9");
    say("[WARNING] plugin/kubernetes: starting server with unsynced Kubernetes API");
    let kinds = [
        (
            "*v1.Namespace",
            "/api/v1/namespaces?limit=500&resourceVersion=0",
        ),
        (
            "*v1.Service",
            "/api/v1/services?limit=500&resourceVersion=0",
        ),
        (
            "*v1.EndpointSlice",
            "/apis/discovery.k8s.io/v1/endpointslices?limit=500&resourceVersion=0",
        ),
    ];
    let mut backoff = Duration::from_millis(800);
    let mut next_ready_log = Instant::now() + ready_every;
    let mut synced = false;
    while !terminating() {
        if !synced {
            match TcpStream::connect_timeout(&server, dial) {
                Ok(_) => {
                    synced = true;
                    say("[INFO] plugin/kubernetes: Kubernetes API connection established");
                }
                Err(e) => {
                    let why = if e.kind() == std::io::ErrorKind::TimedOut {
                        "i/o timeout".to_string()
                    } else {
                        format!("connect: {}", go_errno(&e))
                    };
                    for (kind, path) in kinds {
                        say(&format!(
                            "[ERROR] plugin/kubernetes: pkg/mod/k8s.io/client-go@v0.29.3/tools/cache/reflector.go:229: Failed to watch {kind}: failed to list {kind}: Get \"https://{server}{path}\": dial tcp {server}: {why}"
                        ));
                    }
                }
            }
        }
        if !synced && Instant::now() >= next_ready_log {
            say("[INFO] plugin/ready: Still waiting on: \"kubernetes\"");
            next_ready_log = Instant::now() + ready_every;
        }
        let wait = if synced { ready_every } else { backoff };
        backoff = (backoff * 2).min(max_backoff);
        if !nap(wait) {
            break;
        }
    }
    Ok(0)
}
