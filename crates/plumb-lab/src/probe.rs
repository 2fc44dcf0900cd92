//! Observing the lab from outside with real packets: TCP connects and HTTP(S) requests made
//! from inside a lab namespace, and deadline-bounded waits for a symptom.

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::error::LabError;
use crate::http;
use plumb_os::netns;

/// How a TCP connect ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Connect {
    /// Handshake completed.
    Connected,
    /// No answer within the timeout (what install-cni logs as "i/o timeout").
    TimedOut,
    /// Refused, unreachable, ...: the error text.
    Failed(String),
}

/// A TCP connect to `addr` from namespace `ns`.
pub fn tcp_connect(ns: &str, addr: SocketAddr, timeout: Duration) -> Result<Connect, LabError> {
    netns::on_thread(Some(ns), move || {
        Ok(match TcpStream::connect_timeout(&addr, timeout) {
            Ok(_) => Connect::Connected,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => Connect::TimedOut,
            Err(e) => Connect::Failed(e.to_string()),
        })
    })
    .map_err(|e| LabError::io(format!("entering namespace {ns}"), e))
}

/// A plain HTTP GET from namespace `ns`: (status, body).
pub fn http_get(ns: &str, addr: SocketAddr, path: &str) -> Result<http::Response, LabError> {
    let path = path.to_string();
    netns::on_thread(Some(ns), move || {
        Ok(
            TcpStream::connect_timeout(&addr, Duration::from_secs(2)).and_then(|s| {
                s.set_read_timeout(Some(Duration::from_secs(2)))?;
                http::exchange(&s, "GET", &addr.to_string(), &path, b"")
            }),
        )
    })
    .map_err(|e| LabError::io(format!("entering namespace {ns}"), e))?
    .map_err(|e| LabError::io(format!("GET http://{addr}{}", ""), e))
}

/// Polls `check` every `every` until it returns `Some`, or fails after `deadline`.
pub fn wait_for<T>(
    what: &str,
    deadline: Duration,
    every: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> Result<T, LabError> {
    let start = Instant::now();
    loop {
        if let Some(v) = check() {
            return Ok(v);
        }
        if start.elapsed() >= deadline {
            return Err(LabError::Timeout {
                what: what.to_string(),
                seconds: start.elapsed().as_secs_f64(),
            });
        }
        std::thread::sleep(every.min(deadline.saturating_sub(start.elapsed())));
    }
}
