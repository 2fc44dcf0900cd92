//! The `/metrics` endpoint cannot be blocked: real TCP on loopback against
//! [`plumb_watch::http::MetricsServer`] with its default limits.
//!
//! - 50 clients sending their request head one byte every 1.5 s, plus 10 that send
//!   nothing, are held open while 10 scrapes in a row each get a valid 200 within 1 s;
//!   then the slow and the idle connections are closed at the header timeout (5 s);
//! - more idle connections than the connection limit never keep a scraper out;
//! - content negotiation (Prometheus text or OpenMetrics), `/healthz`, `/readyz`,
//!   404 and 405.
//!
//! Every wait is bounded; every client thread stops by a deadline.

use plumb_watch::http::{MetricsServer, OPENMETRICS_TEXT, PROMETHEUS_TEXT, ServerHandle};
use plumb_watch::metrics::{ErrorKind, Metrics};
use std::io::{ErrorKind as IoKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Bound of one scrape (connect, request, whole response).
const SCRAPE_BOUND: Duration = Duration::from_secs(1);
/// The default header timeout, as documented.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

fn serve() -> (Metrics, ServerHandle) {
    let metrics = Metrics::new();
    metrics.error(ErrorKind::Decode);
    let server = MetricsServer::bind("127.0.0.1:0".parse().unwrap()).expect("bind");
    let handle = server.serve(metrics.clone()).expect("serve");
    (metrics, handle)
}

/// A response: status line, headers (lower-case names), body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One request on a fresh connection, read to the end within `bound`.
fn request(addr: SocketAddr, head: &str, bound: Duration) -> Result<Answer, String> {
    let deadline = Instant::now() + bound;
    let mut s = TcpStream::connect_timeout(&addr, bound).map_err(|e| format!("connect: {e}"))?;
    s.write_all(head.as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "no complete answer within {bound:?} ({} bytes so far)",
                raw.len()
            ));
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), IoKind::WouldBlock | IoKind::TimedOut) => continue,
            Err(e) => return Err(format!("read: {e}")),
        }
    }
    let text = String::from_utf8(raw).map_err(|e| format!("not UTF-8: {e}"))?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no end of head in {text:?}"))?;
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no status in {head:?}"))?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Ok(Answer {
        status,
        headers,
        body: body.to_string(),
    })
}

fn get(addr: SocketAddr, path: &str, accept: Option<&str>) -> Result<Answer, String> {
    let accept = accept
        .map(|a| format!("Accept: {a}\r\n"))
        .unwrap_or_default();
    request(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: plumb\r\n{accept}\r\n"),
        SCRAPE_BOUND,
    )
}

/// A scrape as Prometheus' text-format scraper does it: a 200 with a valid body.
fn scrape(addr: SocketAddr) -> Result<Duration, String> {
    let t = Instant::now();
    let a = get(addr, "/metrics", None)?;
    let took = t.elapsed();
    if a.status != 200 {
        return Err(format!("status {}", a.status));
    }
    if a.header("content-type") != Some(PROMETHEUS_TEXT) {
        return Err(format!("content-type {:?}", a.header("content-type")));
    }
    if a.header("content-length") != Some(&a.body.len().to_string()) {
        return Err(format!(
            "content-length {:?}, body {} bytes",
            a.header("content-length"),
            a.body.len()
        ));
    }
    for want in [
        "# TYPE plumb_watch_errors_total counter",
        "plumb_watch_errors_total{kind=\"decode\"} 1",
    ] {
        if !a.body.contains(want) {
            return Err(format!("{want:?} missing in {}", a.body));
        }
    }
    Ok(took)
}

/// Whether the server has closed `s` (EOF or reset), without blocking.
fn closed_by_server(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut b = [0u8; 512];
    let closed = loop {
        match s.peek(&mut b) {
            Ok(0) => break true,
            // Whatever the server sent before closing (an error status).
            Ok(_) => match (&*s).read(&mut b) {
                Ok(0) => break true,
                Ok(_) => continue,
                Err(e) if e.kind() == IoKind::WouldBlock => break false,
                Err(_) => break true,
            },
            Err(e) if e.kind() == IoKind::WouldBlock => break false,
            Err(_) => break true,
        }
    };
    s.set_nonblocking(false).unwrap();
    closed
}

/// Waits up to `bound` for the server to close `s`; returns when it did.
fn wait_closed(s: &TcpStream, bound: Duration) -> Option<Instant> {
    let deadline = Instant::now() + bound;
    while Instant::now() < deadline {
        if closed_by_server(s) {
            return Some(Instant::now());
        }
        std::thread::park_timeout(Duration::from_millis(20));
    }
    None
}

#[test]
fn slow_and_idle_clients_never_delay_a_scrape_and_are_closed_at_the_header_timeout() {
    let (_metrics, server) = serve();
    let addr = server.local_addr();
    let opened = Instant::now();
    let slow: Vec<TcpStream> = (0..50)
        .map(|i| TcpStream::connect(addr).unwrap_or_else(|e| panic!("slow client {i}: {e}")))
        .collect();
    let idle: Vec<TcpStream> = (0..10)
        .map(|i| TcpStream::connect(addr).unwrap_or_else(|e| panic!("idle client {i}: {e}")))
        .collect();
    // One thread sends the next byte of every slow client's request head every 1.5 s
    // (a head that would never end: a header line that goes on and on).
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<TcpStream> = slow.iter().map(|s| s.try_clone().unwrap()).collect();
    let stop2 = stop.clone();
    let trickle = std::thread::spawn(move || {
        let head = b"GET /metrics HTTP/1.1\r\nHost: plumb\r\nX-Slow: ";
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut sent = 0usize;
        let mut next = Instant::now();
        while !stop2.load(Ordering::SeqCst) && Instant::now() < deadline {
            if Instant::now() >= next {
                let byte = head.get(sent).copied().unwrap_or(b'a');
                for mut w in &writers {
                    // A connection the server closed fails here: that is its business.
                    let _ = w.write_all(&[byte]);
                }
                sent += 1;
                next += Duration::from_millis(1500);
            }
            std::thread::park_timeout(Duration::from_millis(20));
        }
        sent
    });

    // Ten scrapes in a row while all of them are held open.
    let mut took = Vec::new();
    for i in 0..10 {
        match scrape(addr) {
            Ok(t) => {
                assert!(t < SCRAPE_BOUND, "scrape {i} took {t:?}");
                took.push(t);
            }
            Err(e) => panic!("scrape {i} with 60 slow or idle clients open: {e}"),
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    let scrapes_done = opened.elapsed();
    eprintln!(
        "10 scrapes in {scrapes_done:?} after opening 60 slow/idle connections; slowest {:?}",
        took.iter().max()
    );
    // The slow clients were held open meanwhile (they had not reached the header
    // timeout yet): the scrapes did not succeed because the others were gone.
    if scrapes_done < HEADER_TIMEOUT - Duration::from_millis(500) {
        let open = slow
            .iter()
            .chain(&idle)
            .filter(|s| !closed_by_server(s))
            .count();
        assert_eq!(open, 60, "connections closed before the header timeout");
    } else {
        eprintln!("note: scrapes took too long to check the clients were still open");
    }

    // Then every slow and idle connection is closed at the header timeout (5 s from
    // connecting), however many bytes it sent.
    for (i, s) in slow.iter().chain(&idle).enumerate() {
        let at = wait_closed(s, Duration::from_secs(15))
            .unwrap_or_else(|| panic!("connection {i} still open 15 s after connecting"));
        let after = at.duration_since(opened);
        assert!(
            after >= HEADER_TIMEOUT - Duration::from_millis(100),
            "connection {i} closed after {after:?}, before the header timeout"
        );
        assert!(
            after <= HEADER_TIMEOUT + Duration::from_secs(5),
            "connection {i} closed only after {after:?}"
        );
    }
    stop.store(true, Ordering::SeqCst);
    let sent = trickle.join().unwrap();
    assert!(sent >= 3, "the slow clients sent {sent} bytes each");
    // And the server still answers.
    scrape(addr).expect("a scrape after the slow clients were closed");
}

#[test]
fn more_idle_connections_than_the_limit_cannot_keep_a_scraper_out() {
    let (_metrics, server) = serve();
    let addr = server.local_addr();
    let limit = plumb_watch::http::ServerLimits::default().max_connections;
    let idle: Vec<TcpStream> = (0..limit + 36)
        .map(|i| TcpStream::connect(addr).unwrap_or_else(|e| panic!("idle client {i}: {e}")))
        .collect();
    for i in 0..10 {
        let t = scrape(addr).unwrap_or_else(|e| panic!("scrape {i} with {} idle: {e}", idle.len()));
        assert!(t < SCRAPE_BOUND, "scrape {i} took {t:?}");
    }
    // The oldest idle connections made room (closed at once, not at the header
    // timeout); at most `limit` connections are open.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let open = idle.iter().filter(|s| !closed_by_server(s)).count();
        if open <= limit {
            // The newest ones are among those kept.
            assert!(!closed_by_server(idle.last().unwrap()));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{open} idle connections still open, limit {limit}"
        );
        std::thread::park_timeout(Duration::from_millis(20));
    }
    for s in &idle {
        let _ = s.shutdown(Shutdown::Both);
    }
}

#[test]
fn serves_prometheus_text_or_openmetrics_health_and_readiness_only() {
    let (metrics, server) = serve();
    let addr = server.local_addr();
    let text = get(addr, "/metrics", Some("*/*")).unwrap();
    assert_eq!(text.status, 200);
    assert_eq!(text.header("content-type"), Some(PROMETHEUS_TEXT));
    assert!(!text.body.contains("# EOF"), "{}", text.body);
    assert!(
        text.body
            .contains("# TYPE plumb_watch_errors_total counter")
    );
    // What Prometheus asks for by default.
    let om = get(
        addr,
        "/metrics",
        Some("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"),
    )
    .unwrap();
    assert_eq!(om.status, 200);
    assert_eq!(om.header("content-type"), Some(OPENMETRICS_TEXT));
    assert!(om.body.ends_with("# EOF\n"), "{}", om.body);
    assert!(om.body.contains("# TYPE plumb_watch_errors counter"));
    assert!(
        om.body
            .contains("plumb_watch_errors_total{kind=\"decode\"} 1")
    );

    let health = get(addr, "/healthz", None).unwrap();
    assert_eq!((health.status, health.body.as_str()), (200, "ok\n"));
    let not_ready = get(addr, "/readyz", None).unwrap();
    assert_eq!(not_ready.status, 503);
    metrics.ready_flag().store(true, Ordering::SeqCst);
    let ready = get(addr, "/readyz", None).unwrap();
    assert_eq!((ready.status, ready.body.as_str()), (200, "ready\n"));

    assert_eq!(get(addr, "/", None).unwrap().status, 404);
    assert_eq!(get(addr, "/metrics/x", None).unwrap().status, 404);
    let post = request(
        addr,
        "POST /metrics HTTP/1.1\r\nHost: plumb\r\nContent-Length: 0\r\n\r\n",
        SCRAPE_BOUND,
    )
    .unwrap();
    assert_eq!(post.status, 405);
    assert_eq!(post.header("allow"), Some("GET, HEAD"));
    // One request per connection: the server says so and closes.
    assert_eq!(text.header("connection"), Some("close"));
    // A request head larger than the limit is refused, not buffered.
    let big = request(
        addr,
        &format!(
            "GET /metrics HTTP/1.1\r\nHost: plumb\r\nX-Big: {}\r\n\r\n",
            "a".repeat(plumb_watch::http::MAX_HEAD * 2)
        ),
        SCRAPE_BOUND,
    );
    assert!(
        big.as_ref().map_or(true, |a| a.status == 431),
        "{:?}",
        big.map(|a| a.status)
    );
}

#[test]
fn a_bound_server_refuses_connections_until_it_serves() {
    let metrics = Metrics::new();
    metrics.error(ErrorKind::Decode);
    let server = MetricsServer::bind("127.0.0.1:0".parse().unwrap()).expect("bind");
    let addr = server.local_addr();
    let refused = TcpStream::connect_timeout(&addr, SCRAPE_BOUND);
    assert_eq!(
        refused.as_ref().map_err(|e| e.kind()).err(),
        Some(IoKind::ConnectionRefused),
        "{refused:?}"
    );
    let handle = server.serve(metrics).expect("serve");
    scrape(addr).expect("a scrape once serving");
    drop(handle);
    let after = TcpStream::connect_timeout(&addr, SCRAPE_BOUND);
    assert!(
        after.is_err(),
        "still accepting after the handle was dropped"
    );
}
