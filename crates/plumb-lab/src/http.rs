//! Just enough HTTP/1.1 for the lab: one request per connection, `Content-Length` bodies,
//! `Connection: close`. Used by the API endpoint, kube-proxy's health server and the
//! clients that probe them; keeps hyper and an async runtime out of the lab.

use std::io::{self, BufRead, BufReader, Read, Write};

/// A parsed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`, ...
    pub method: String,
    /// Path with query, e.g. `/readyz?verbose`.
    pub target: String,
    /// Body bytes.
    pub body: Vec<u8>,
}

impl Request {
    /// The path without the query.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }

    /// Whether the query has `key` (with or without a value).
    pub fn has_query(&self, key: &str) -> bool {
        self.target
            .split_once('?')
            .is_some_and(|(_, q)| q.split('&').any(|kv| kv.split('=').next() == Some(key)))
    }
}

const MAX_HEADER_BYTES: usize = 16 * 1024;
const MAX_BODY_BYTES: usize = 1024 * 1024;

fn bad(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

/// Reads one request.
pub fn read_request(stream: impl Read) -> io::Result<Request> {
    let mut r = BufReader::new(stream);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts
        .next()
        .ok_or_else(|| bad("empty request"))?
        .to_string();
    let target = parts
        .next()
        .ok_or_else(|| bad("no request target"))?
        .to_string();
    let (_, len) = read_headers(&mut r)?;
    let mut body = vec![0; len.min(MAX_BODY_BYTES)];
    r.read_exact(&mut body)?;
    Ok(Request {
        method,
        target,
        body,
    })
}

fn read_headers(r: &mut impl BufRead) -> io::Result<(Vec<(String, String)>, usize)> {
    let mut headers = Vec::new();
    let mut total = 0;
    let mut len = 0;
    loop {
        let mut h = String::new();
        let n = r.read_line(&mut h)?;
        total += n;
        if n == 0 || h == "\r\n" || h == "\n" {
            break;
        }
        if total > MAX_HEADER_BYTES {
            return Err(bad("headers too large"));
        }
        if let Some((k, v)) = h.split_once(':') {
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_string());
            if k == "content-length" {
                len = v.parse().map_err(|_| bad("bad content-length"))?;
            }
            headers.push((k, v));
        }
    }
    Ok((headers, len))
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        404 => "Not Found",
        405 => "Method Not Allowed",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

/// Writes a complete response and flushes.
pub fn write_response(
    mut stream: impl Write,
    status: u16,
    content_type: &str,
    extra_headers: &[(&str, &str)],
    body: &[u8],
) -> io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n",
        reason(status),
        body.len()
    );
    for (k, v) in extra_headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    stream.flush()
}

/// A response as a client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Body text (lossy UTF-8).
    pub body: String,
}

/// Sends one request over `stream` and reads the response.
pub fn exchange(
    mut stream: impl Read + Write,
    method: &str,
    host: &str,
    target: &str,
    body: &[u8],
) -> io::Result<Response> {
    let head = format!(
        "{method} {target} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: plumb-lab\r\nAccept: application/json, */*\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    stream.flush()?;
    let mut r = BufReader::new(stream);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("bad status line"))?;
    let (_, len) = read_headers(&mut r)?;
    let mut body = vec![0; len.min(MAX_BODY_BYTES)];
    r.read_exact(&mut body)?;
    Ok(Response {
        status,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_and_response_round_trip() {
        let raw = b"POST /api/v1/x?verbose&a=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}";
        let req = read_request(&raw[..]).unwrap();
        assert_eq!(req.method, "POST");
        assert_eq!(req.path(), "/api/v1/x");
        assert!(req.has_query("verbose") && req.has_query("a") && !req.has_query("b"));
        assert_eq!(req.body, b"{}");
        let mut out = Vec::new();
        write_response(&mut out, 503, "application/json", &[("X-A", "b")], b"{}").unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("HTTP/1.1 503 Service Unavailable\r\n"));
        assert!(text.contains("X-A: b\r\n") && text.ends_with("\r\n\r\n{}"));
    }
}
