//! Network probes of a running node: TCP connects and HTTP(S) GETs, optionally from inside
//! a network namespace (the lab's node), each bounded by a timeout.
//!
//! A probe thread enters the namespace with setns(2) and dies with it, so plumb's other
//! threads never change namespace. HTTPS probes do not verify the server certificate:
//! they ask a local API server whether it is ready (`/readyz` is readable anonymously),
//! send no credentials, and plumb has no CA for the node's private PKI.

use plumb_facts::{Connect, ConnectOutcome, HttpReply};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A TCP connect to `target` with a deadline.
pub fn tcp_connect(target: SocketAddr, timeout: Duration) -> Connect {
    let start = Instant::now();
    let outcome = match TcpStream::connect_timeout(&target, timeout) {
        Ok(_) => ConnectOutcome::Connected,
        Err(e) => match e.kind() {
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
                ConnectOutcome::TimedOut
            }
            std::io::ErrorKind::ConnectionRefused => ConnectOutcome::Refused,
            _ => ConnectOutcome::Unreachable,
        },
    };
    Connect {
        target: target.to_string(),
        outcome,
        millis: start.elapsed().as_millis() as u64,
    }
}

/// Largest body kept from a probe.
const MAX_BODY: usize = 16 * 1024;

/// `GET path` over plain HTTP or TLS; the reply's status and body.
pub fn http_get(
    target: SocketAddr,
    path: &str,
    tls: bool,
    timeout: Duration,
) -> Result<HttpReply, String> {
    let scheme = if tls { "https" } else { "http" };
    let url = format!("{scheme}://{target}{path}");
    let mut tcp =
        TcpStream::connect_timeout(&target, timeout).map_err(|e| format!("{url}: {e}"))?;
    tcp.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    tcp.set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {target}\r\nUser-Agent: plumb\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    );
    let raw = if tls {
        let config = tls_config();
        let name = rustls::pki_types::ServerName::from(target.ip());
        let conn =
            rustls::ClientConnection::new(config, name).map_err(|e| format!("{url}: {e}"))?;
        let mut stream = rustls::StreamOwned::new(conn, tcp);
        exchange(&mut stream, &request)
    } else {
        exchange(&mut tcp, &request)
    }
    .map_err(|e| format!("{url}: {e}"))?;
    let Some((status, body)) = parse_response(&raw) else {
        return Err(format!("{url}: not an HTTP response"));
    };
    Ok(HttpReply { url, status, body })
}

fn exchange(s: &mut (impl Read + Write), request: &str) -> std::io::Result<Vec<u8>> {
    s.write_all(request.as_bytes())?;
    let mut buf = Vec::new();
    // A TLS peer closing without close_notify is an error in rustls; keep what arrived.
    match s.take((MAX_BODY + 8192) as u64).read_to_end(&mut buf) {
        Ok(_) => Ok(buf),
        Err(_) if !buf.is_empty() => Ok(buf),
        Err(e) => Err(e),
    }
}

/// Status code and body (de-chunked) of an HTTP/1.x response.
fn parse_response(raw: &[u8]) -> Option<(u16, String)> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head
        .lines()
        .next()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let mut body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    body.truncate(body.floor_char_boundary(MAX_BODY));
    Some((status, body))
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            out.push_str(&rest[..rest.floor_char_boundary(n.min(rest.len()))]);
            break;
        }
        out.push_str(&rest[..rest.floor_char_boundary(n)]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

fn tls_config() -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Arc::new(AnyServerCert(provider.clone()));
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth(),
    )
}

/// Accepts any certificate but still checks the handshake signatures (see module doc).
#[derive(Debug)]
struct AnyServerCert(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyServerCert {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_plain_and_chunked() {
        let (s, b) = parse_response(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n\r\n{\"nodeEligible\": true}").unwrap();
        assert_eq!((s, b.as_str()), (503, "{\"nodeEligible\": true}"));
        let (s, b) = parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").unwrap();
        assert_eq!((s, b.as_str()), (200, "abcde"));
        assert!(parse_response(b"garbage").is_none());
    }

    /// A real server on loopback: status, body, and a refused port.
    #[test]
    fn http_get_and_connect_against_a_real_listener() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut buf = [0u8; 1024];
            let n = s.read(&mut buf).unwrap();
            assert!(String::from_utf8_lossy(&buf[..n]).starts_with("GET /livez HTTP/1.1"));
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .unwrap();
        });
        let r = http_get(addr, "/livez", false, Duration::from_secs(5)).unwrap();
        assert_eq!((r.status, r.body.as_str()), (200, "ok"));
        server.join().unwrap();
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        assert_eq!(
            tcp_connect(closed, Duration::from_secs(2)).outcome,
            ConnectOutcome::Refused
        );
    }
}
