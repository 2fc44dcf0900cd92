//! The API server endpoint (in `plumb-api`): TLS on `--bind-address:--secure-port`
//! (0.0.0.0:6443) answering what node-local checks and install-cni ask for:
//! `/readyz`, `/livez`, `/healthz` (`?verbose` lists the checks as kube-apiserver does:
//! `[+]ping ok` ... `readyz check passed`), `/version`, and `POST .../serviceaccounts/NAME/token`
//! (a TokenRequest answered 201 with a lab token). Everything else is a 404 Status.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::{Flags, terminating};
use crate::clock::Utc;
use crate::{http, tls};

const CHECKS: &[&str] = &[
    "ping",
    "log",
    "etcd",
    "etcd-readiness",
    "informer-sync",
    "poststarthook/start-apiserver-admission-initializer",
    "poststarthook/generic-apiserver-start-informers",
    "poststarthook/rbac/bootstrap-roles",
    "shutdown",
];

fn verbose(kind: &str) -> String {
    let mut out = String::new();
    for c in CHECKS {
        if kind == "livez" && (*c == "informer-sync" || *c == "shutdown" || *c == "etcd-readiness")
        {
            continue;
        }
        out.push_str(&format!("[+]{c} ok\n"));
    }
    out.push_str(&format!("{kind} check passed\n"));
    out
}

fn respond(req: &http::Request) -> (u16, &'static str, String) {
    let json = "application/json";
    match (req.method.as_str(), req.path()) {
        ("GET", p @ ("/readyz" | "/livez" | "/healthz")) => {
            let kind = &p[1..];
            if req.has_query("verbose") {
                (200, "text/plain; charset=utf-8", verbose(kind))
            } else {
                (200, "text/plain; charset=utf-8", "ok".into())
            }
        }
        ("GET", "/version") => (
            200,
            json,
            r#"{"major":"1","minor":"31","gitVersion":"v1.31.4+rke2r1","gitCommit":"0000000000000000000000000000000000000000","gitTreeState":"clean","buildDate":"2024-12-10T00:00:00Z","goVersion":"go1.22.9 X:boringcrypto","compiler":"gc","platform":"linux/amd64"}"#.into(),
        ),
        ("POST", p) if p.starts_with("/api/v1/namespaces/") && p.ends_with("/token") => {
            let parts: Vec<&str> = p.split('/').collect();
            let (ns, sa) = (parts.get(4).copied().unwrap_or(""), parts.get(6).copied().unwrap_or(""));
            let body = format!(
                r#"{{"kind":"TokenRequest","apiVersion":"authentication.k8s.io/v1","metadata":{{"name":"{sa}","namespace":"{ns}","creationTimestamp":null}},"spec":{{"audiences":["https://kubernetes.default.svc.cluster.local","rke2"],"expirationSeconds":86400,"boundObjectRef":null}},"status":{{"token":"plumb-lab-token.{ns}.{sa}","expirationTimestamp":"2099-01-01T00:00:00Z"}}}}"#
            );
            (201, json, body)
        }
        _ => (
            404,
            json,
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","details":{},"code":404}"#.to_string(),
        ),
    }
}

/// Runs the endpoint until SIGTERM.
pub fn main(f: &Flags) -> Result<i32, String> {
    let cert = PathBuf::from(f.req("tls-cert-file")?);
    let key = PathBuf::from(f.req("tls-private-key-file")?);
    let addr: SocketAddr = format!(
        "{}:{}",
        f.get("bind-address").unwrap_or("0.0.0.0"),
        f.get("secure-port").unwrap_or("6443")
    )
    .parse()
    .map_err(|e| format!("bad bind address: {e}"))?;
    let config = tls::server_config(&cert, &key).map_err(|e| e.to_string())?;
    let listener = TcpListener::bind(addr).map_err(|e| format!("listen {addr}: {e}"))?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    eprintln!(
        "{}",
        crate::logfmt::klog(
            'I',
            "secure_serving.go:213",
            "Serving securely on",
            &[("address", crate::logfmt::s(addr.to_string()))]
        )
    );
    while !terminating() {
        let (tcp, peer) = match listener.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            Err(_) => continue,
        };
        let config = Arc::clone(&config);
        std::thread::spawn(move || {
            let _ = tcp.set_nonblocking(false);
            let _ = tcp.set_read_timeout(Some(Duration::from_secs(10)));
            let Ok(conn) = rustls::ServerConnection::new(config) else {
                return;
            };
            let mut tls = rustls::StreamOwned::new(conn, tcp);
            let Ok(req) = http::read_request(&mut tls) else {
                return;
            };
            let (status, ct, body) = respond(&req);
            eprintln!(
                "{} {} {} {} from {peer}",
                Utc::now().rfc3339_nanos(),
                req.method,
                req.target,
                status
            );
            let _ = http::write_response(&mut tls, status, ct, &[], body.as_bytes());
            tls.conn.send_close_notify();
            let _ = std::io::Write::flush(&mut tls);
        });
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_the_paths_node_checks_use() {
        let get = |t: &str| http::Request {
            method: "GET".into(),
            target: t.into(),
            body: vec![],
        };
        let (code, _, body) = respond(&get("/readyz?verbose"));
        assert_eq!(code, 200);
        assert!(body.starts_with("[+]ping ok\n") && body.ends_with("readyz check passed\n"));
        assert!(respond(&get("/version")).2.contains("\"gitVersion\""));
        let post = http::Request {
            method: "POST".into(),
            target: "/api/v1/namespaces/kube-system/serviceaccounts/canal/token".into(),
            body: vec![],
        };
        let (code, _, body) = respond(&post);
        assert_eq!(code, 201);
        assert!(body.contains("\"token\":\"plumb-lab-token.kube-system.canal\""));
        assert_eq!(respond(&get("/nope")).0, 404);
    }
}
