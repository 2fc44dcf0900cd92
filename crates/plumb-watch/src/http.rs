//! The HTTP endpoint of watch's metrics: `GET /metrics` (Prometheus text format
//! 0.0.4, or OpenMetrics 1.0 when the client's `Accept` header prefers it),
//! `GET /healthz` (alive) and `GET /readyz` (subscribed and baseline read). Nothing
//! else: other paths are 404, other methods 405.
//!
//! Decision: hyper's HTTP/1 server on a tokio `current_thread` runtime that lives on
//! one thread of its own (`plumb-metrics`). The rest of watch stays threads, not
//! async (ARCHITECTURE.md); this one thread is async because a server that handles
//! one connection at a time can be held by any client that connects and then sends
//! slowly, and a thread per connection costs a stack each. On one async thread every
//! connection is a small task: a slow client costs a socket and a few KB, never
//! another client's time. axum is not used: routing three fixed paths is a `match`,
//! and the limits below need the connection loop anyway.
//!
//! Limits ([`ServerLimits`]), so that no client can block a scrape:
//! - the request head must be complete within [`ServerLimits::header_timeout`]
//!   (5 s) of connecting, however slowly its bytes come; then the connection is closed;
//! - a connection lives at most [`ServerLimits::request_timeout`] (10 s), response
//!   included;
//! - one request per connection (`Connection: close`): no idle keep-alive
//!   connections to hold;
//! - a request head of at most [`MAX_HEAD`] bytes;
//! - at most [`ServerLimits::max_connections`] (64) connections at once: a new
//!   connection beyond that closes the oldest one that has not sent its request head
//!   yet (or, when all are being answered, the oldest), so idle and slow clients can
//!   never keep a scraper out: accepting never waits, and a scrape needs a
//!   millisecond.
//!
//! [`MetricsServer::bind`] binds the address without listening (a bad or taken
//! address fails at once, and the kernel refuses connections); [`MetricsServer::serve`]
//! starts listening, which `plumb watch` does only once the watcher is ready.

use crate::metrics::Metrics;
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{ACCEPT, ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::oneshot;

/// Largest request head accepted (hyper's smallest read buffer); a bigger one is
/// answered 431 and closed.
pub const MAX_HEAD: usize = 8 * 1024;

/// Pending connections the kernel keeps for the accept loop (which never waits).
const BACKLOG: u32 = 128;

/// Content type of the Prometheus text format.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Content type of the OpenMetrics text format.
pub const OPENMETRICS_TEXT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How long and how many clients may hold the endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerLimits {
    /// From connecting to the end of the request head.
    pub header_timeout: Duration,
    /// From connecting to the end of the response: the connection is closed then.
    pub request_timeout: Duration,
    /// Open connections at most; a new one beyond closes an old one.
    pub max_connections: usize,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            header_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            max_connections: 64,
        }
    }
}

/// What the endpoint serves: metrics that render themselves in both text formats and
/// say when they are ready. watch's [`Metrics`] is one; `plumb observe` has its own.
pub trait Exposition: Clone + Send + Sync + 'static {
    /// The OpenMetrics text exposition.
    fn render_openmetrics(&self) -> String;
    /// The Prometheus text exposition (format 0.0.4).
    fn render(&self) -> String;
    /// Whether `/readyz` answers 200.
    fn is_ready(&self) -> bool;
}

impl Exposition for Metrics {
    fn render_openmetrics(&self) -> String {
        Metrics::render_openmetrics(self)
    }
    fn render(&self) -> String {
        Metrics::render(self)
    }
    fn is_ready(&self) -> bool {
        Metrics::is_ready(self)
    }
}

/// The metrics endpoint, bound to its address but not yet listening.
pub struct MetricsServer {
    socket: TcpSocket,
    local: SocketAddr,
    limits: ServerLimits,
}

impl std::fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsServer")
            .field("local", &self.local)
            .field("limits", &self.limits)
            .finish()
    }
}

impl MetricsServer {
    /// Binds `addr` (port 0: any free port) without listening: connections are
    /// refused until [`MetricsServer::serve`].
    pub fn bind(addr: SocketAddr) -> io::Result<MetricsServer> {
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        // As std's TcpListener does: a restart may bind while old connections linger
        // in TIME_WAIT.
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        let local = socket.local_addr()?;
        Ok(MetricsServer {
            socket,
            local,
            limits: ServerLimits::default(),
        })
    }

    /// Replaces the default limits.
    pub fn with_limits(mut self, limits: ServerLimits) -> MetricsServer {
        self.limits = limits;
        self
    }

    /// The bound address (the port chosen when it was 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Listens and serves `metrics` from a thread of its own; returns once the socket
    /// listens. Serving stops when the handle is dropped.
    pub fn serve<M: Exposition>(self, metrics: M) -> io::Result<ServerHandle> {
        let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
        let (listening_tx, listening_rx) = std::sync::mpsc::channel::<io::Result<()>>();
        let MetricsServer {
            socket,
            local,
            limits,
        } = self;
        let thread = std::thread::Builder::new()
            .name("plumb-metrics".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_io()
                    .enable_time()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = listening_tx.send(Err(e));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let listener = match socket.listen(BACKLOG) {
                        Ok(l) => l,
                        Err(e) => {
                            let _ = listening_tx.send(Err(e));
                            return;
                        }
                    };
                    let _ = listening_tx.send(Ok(()));
                    accept_loop(listener, metrics, limits, shutdown_rx).await;
                });
            })?;
        match listening_rx.recv() {
            Ok(Ok(())) => Ok(ServerHandle {
                local,
                shutdown: Some(shutdown_tx),
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(io::Error::other("the metrics server thread ended early"))
            }
        }
    }
}

/// A serving metrics endpoint; dropping it stops the server and closes its
/// connections.
#[derive(Debug)]
pub struct ServerHandle {
    local: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ServerHandle {
    /// The address served.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        if let Some(s) = self.shutdown.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// An open connection, as the accept loop sees it.
struct Open {
    /// Closes the connection when sent (or dropped); closed itself once the
    /// connection's task has ended.
    close: oneshot::Sender<()>,
    /// Its request head was read and answered.
    answered: Arc<AtomicBool>,
}

async fn accept_loop<M: Exposition>(
    listener: TcpListener,
    metrics: M,
    limits: ServerLimits,
    mut shutdown: oneshot::Receiver<()>,
) {
    // In order of arrival: the front is the oldest.
    let mut open: VecDeque<Open> = VecDeque::new();
    loop {
        let stream = match first(&mut shutdown, listener.accept()).await {
            First::A(_) => break,
            First::B(Ok((stream, _))) => stream,
            // Out of file descriptors (or a connection reset before accept): wait a
            // little rather than spin; connections wait in the backlog meanwhile.
            First::B(Err(_)) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        open.retain(|c| !c.close.is_closed());
        while open.len() >= limits.max_connections.max(1) {
            let oldest_waiting = open
                .iter()
                .position(|c| !c.answered.load(Ordering::Relaxed))
                .unwrap_or(0);
            if let Some(c) = open.remove(oldest_waiting) {
                let _ = c.close.send(());
            }
        }
        let (close, closed) = oneshot::channel();
        let answered = Arc::new(AtomicBool::new(false));
        open.push_back(Open {
            close,
            answered: answered.clone(),
        });
        tokio::spawn(serve_connection(
            stream,
            metrics.clone(),
            limits,
            answered,
            closed,
        ));
    }
}

async fn serve_connection<M: Exposition>(
    stream: TcpStream,
    metrics: M,
    limits: ServerLimits,
    answered: Arc<AtomicBool>,
    closed: oneshot::Receiver<()>,
) {
    let _ = stream.set_nodelay(true);
    let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
        answered.store(true, Ordering::Relaxed);
        std::future::ready(Ok::<_, Infallible>(respond(&metrics, &req)))
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(false)
        .max_buf_size(MAX_HEAD);
    let connection = http.serve_connection(TokioIo::new(stream), service);
    // Whichever comes first: the connection ends, its time is up, or the accept loop
    // closes it. Dropping the connection closes the socket.
    let _ = tokio::time::timeout(limits.request_timeout, first(connection, closed)).await;
}

/// Which of two futures finished first.
enum First<A, B> {
    A(A),
    B(B),
}

/// Runs two futures until one finishes (`a` is polled first); drops the other.
async fn first<A: Future, B: Future>(a: A, b: B) -> First<A::Output, B::Output> {
    let (mut a, mut b) = (std::pin::pin!(a), std::pin::pin!(b));
    std::future::poll_fn(|cx| {
        if let std::task::Poll::Ready(x) = a.as_mut().poll(cx) {
            return std::task::Poll::Ready(First::A(x));
        }
        b.as_mut().poll(cx).map(First::B)
    })
    .await
}

/// The answer to one request.
fn respond<B, M: Exposition>(metrics: &M, req: &Request<B>) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    if !matches!(path, "/metrics" | "/healthz" | "/readyz") {
        return plain(StatusCode::NOT_FOUND, "not found\n");
    }
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "only GET\n");
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    match path {
        "/metrics" => {
            let accept = req
                .headers()
                .get_all(ACCEPT)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect::<Vec<_>>()
                .join(",");
            let (ctype, body) = if prefers_openmetrics(&accept) {
                (OPENMETRICS_TEXT, metrics.render_openmetrics())
            } else {
                (PROMETHEUS_TEXT, metrics.render())
            };
            let mut r = Response::new(Full::new(Bytes::from(body)));
            r.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static(ctype));
            r
        }
        "/healthz" => plain(StatusCode::OK, "ok\n"),
        _ if metrics.is_ready() => plain(StatusCode::OK, "ready\n"),
        _ => plain(StatusCode::SERVICE_UNAVAILABLE, "reading the baseline\n"),
    }
}

fn plain(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Whether an `Accept` header asks for OpenMetrics over the Prometheus text format:
/// the highest quality (`q`) given to `application/openmetrics-text` is above zero
/// and not below the highest given to `text/plain` (or `text/*`, `*/*`). Prometheus
/// sends `application/openmetrics-text;version=1.0.0,…,text/plain;version=0.0.4;q=0.5,…`;
/// curl's `*/*` and an absent header get the Prometheus text format.
pub fn prefers_openmetrics(accept: &str) -> bool {
    let (mut openmetrics, mut text) = (0.0f32, 0.0f32);
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.split_once('='))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
            .and_then(|(_, v)| v.trim().parse::<f32>().ok())
            .filter(|q| q.is_finite())
            .unwrap_or(1.0)
            .clamp(0.0, 1.0);
        match media.as_str() {
            "application/openmetrics-text" => openmetrics = openmetrics.max(q),
            "text/plain" | "text/*" | "*/*" => text = text.max(q),
            _ => {}
        }
    }
    openmetrics > 0.0 && openmetrics >= text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openmetrics_only_when_the_client_prefers_it() {
        // What Prometheus 2.x/3.x sends.
        assert!(prefers_openmetrics(
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
        ));
        assert!(prefers_openmetrics("application/openmetrics-text"));
        assert!(prefers_openmetrics(
            "Application/OpenMetrics-Text; version=1.0.0"
        ));
        // curl, a browser, no header, Prometheus told to use the text format.
        assert!(!prefers_openmetrics("*/*"));
        assert!(!prefers_openmetrics(""));
        assert!(!prefers_openmetrics(
            "text/html,application/xhtml+xml,*/*;q=0.8"
        ));
        assert!(!prefers_openmetrics(
            "text/plain;version=0.0.4;q=1,application/openmetrics-text;q=0.5"
        ));
        assert!(!prefers_openmetrics("application/openmetrics-text;q=0"));
        // Garbage q values count as 1 or are clamped; never a panic.
        assert!(prefers_openmetrics("application/openmetrics-text;q=NaN"));
        assert!(!prefers_openmetrics("application/openmetrics-text;q=-3"));
    }
}
