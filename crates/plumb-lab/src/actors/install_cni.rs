//! Canal's `install-cni` init container: it asks the API server for a ServiceAccount token
//! through the `kubernetes` Service (`https://10.43.0.1:443`, by design: the pod network is
//! not up yet), with a dial timeout. On a timeout it logs Calico's ERROR and FATAL lines —
//! `Unable to create token for CNI kubeconfig error=Post "https://10.43.0.1:443/api/v1/
//! namespaces/kube-system/serviceaccounts/canal/token": dial tcp 10.43.0.1:443: i/o
//! timeout` — and exits 1, so the kubelet crash-loops it and `/etc/cni/net.d` stays
//! empty. On success it writes `10-canal.conflist` and `calico-kubeconfig` and exits 0.
//! Lines follow calico's format (`2006-01-02 15:04:05.000 [LEVEL][pid] file: msg`).

use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::Flags;
use crate::clock::Utc;
use crate::{http, tls};

fn say(level: &str, file: &str, msg: &str) {
    println!(
        "{} [{level}][{}] {file}: {msg}",
        Utc::now().calico(),
        std::process::id()
    );
}

const CONFLIST: &str = r#"{
  "name": "k8s-pod-network",
  "cniVersion": "0.3.1",
  "plugins": [
    {
      "type": "calico",
      "log_level": "info",
      "datastore_type": "kubernetes",
      "nodename": "plumb-node",
      "mtu": 1450,
      "ipam": {"type": "host-local", "subnet": "usePodCidr"},
      "policy": {"type": "k8s"},
      "kubernetes": {"kubeconfig": "/etc/cni/net.d/calico-kubeconfig"}
    },
    {"type": "portmap", "snat": true, "capabilities": {"portMappings": true}},
    {"type": "bandwidth", "capabilities": {"bandwidth": true}}
  ]
}
"#;

/// Runs one install-cni attempt; the exit code is the container's.
pub fn main(f: &Flags) -> Result<i32, String> {
    let server: SocketAddr = f.parse_or("server", "10.43.0.1:443".parse().unwrap())?;
    let ca = PathBuf::from(f.req("ca")?);
    let cni_dir = PathBuf::from(f.req("cni-net-dir")?);
    let timeout = f.duration_or("dial-timeout", Duration::from_secs(30))?;
    let sa = f.get("service-account").unwrap_or("canal");
    say(
        "INFO",
        "cni-installer/<nil> <nil>",
        "Running as a Kubernetes pod",
    );
    say(
        "INFO",
        "cni-installer/<nil> <nil>",
        "CNI plugin version: v3.28.2",
    );
    say(
        "INFO",
        "cni-installer/<nil> <nil>",
        "/host/secondary-bin-dir is not writeable, skipping",
    );
    say(
        "INFO",
        "cni-installer/<nil> <nil>",
        "Wrote Calico CNI binaries to /host/opt/cni/bin",
    );
    eprintln!(
        "{}",
        crate::logfmt::klog('W', "client_config.go:659", "", &[])
            .replace("\"\"", "Neither --kubeconfig nor --master was specified.  Using the inClusterConfig.  This might not work.")
    );
    let path = format!("/api/v1/namespaces/kube-system/serviceaccounts/{sa}/token");
    let url = format!("https://{server}{path}");
    let fail = |err: String| {
        let msg = format!("Unable to create token for CNI kubeconfig error=Post \"{url}\": {err}");
        say("ERROR", "cni-installer/<nil> <nil>", &msg);
        say("FATAL", "cni-installer/<nil> <nil>", &msg);
        Ok(1)
    };
    let tcp = match TcpStream::connect_timeout(&server, timeout) {
        Ok(t) => t,
        Err(e) if e.kind() == ErrorKind::TimedOut || e.kind() == ErrorKind::WouldBlock => {
            return fail(format!("dial tcp {server}: i/o timeout"));
        }
        Err(e) => return fail(format!("dial tcp {server}: connect: {}", go_errno(&e))),
    };
    let _ = tcp.set_read_timeout(Some(timeout));
    let _ = tcp.set_write_timeout(Some(timeout));
    let config = tls::client_config(&ca).map_err(|e| e.to_string())?;
    let ip: IpAddr = server.ip();
    let conn = rustls::ClientConnection::new(Arc::clone(&config), tls::server_name(ip))
        .map_err(|e| e.to_string())?;
    let stream = rustls::StreamOwned::new(conn, tcp);
    let body = br#"{"kind":"TokenRequest","apiVersion":"authentication.k8s.io/v1","spec":{"audiences":null,"expirationSeconds":86400}}"#;
    let resp = match http::exchange(stream, "POST", &server.to_string(), &path, body) {
        Ok(r) => r,
        Err(e) if e.kind() == ErrorKind::TimedOut || e.kind() == ErrorKind::WouldBlock => {
            return fail("net/http: TLS handshake timeout".into());
        }
        Err(e) => return fail(e.to_string()),
    };
    if resp.status != 201 {
        return fail(format!(
            "the server responded with the status code {} but did not return more information",
            resp.status
        ));
    }
    let token = serde_json::from_str::<serde_json::Value>(&resp.body)
        .ok()
        .and_then(|v| v["status"]["token"].as_str().map(String::from))
        .unwrap_or_default();
    std::fs::create_dir_all(&cni_dir).map_err(|e| e.to_string())?;
    let kubeconfig = format!(
        "# Kubeconfig file for Calico CNI plugin. Installed by calico/node.\napiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: https://{server}\n    certificate-authority-data: \"<redacted by plumb lab>\"\nusers:\n- name: calico\n  user:\n    token: {token}\ncontexts:\n- name: calico-context\n  context:\n    cluster: local\n    user: calico\ncurrent-context: calico-context\n"
    );
    std::fs::write(cni_dir.join("calico-kubeconfig"), kubeconfig).map_err(|e| e.to_string())?;
    std::fs::write(cni_dir.join("10-canal.conflist"), CONFLIST).map_err(|e| e.to_string())?;
    say(
        "INFO",
        "cni-installer/<nil> <nil>",
        "Created /host/etc/cni/net.d/10-canal.conflist",
    );
    say(
        "INFO",
        "cni-installer/<nil> <nil>",
        "Done configuring CNI.  Sleep= false",
    );
    Ok(0)
}

/// Go's text for common connect errors.
pub fn go_errno(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ENETUNREACH) => "network is unreachable".into(),
        Some(libc::ECONNREFUSED) => "connection refused".into(),
        Some(libc::EHOSTUNREACH) => "no route to host".into(),
        _ => e.to_string(),
    }
}
