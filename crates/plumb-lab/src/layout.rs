//! The node's file view under the lab root, laid out as on an RKE2 node: configuration,
//! kubeconfig and TLS files, the kube-proxy static pod manifest, CNI and log directories,
//! and the actors' executables at their real-looking paths.

use std::fs;
use std::path::{Path, PathBuf};

use crate::actors::{self, ActorKind};
use crate::error::LabError;
use crate::tls::Pki;
use crate::topology::{API_IP, API_PORT, NODE_IP};

/// Paths (relative to the lab root) other plumb commands read.
pub mod paths {
    /// RKE2 configuration.
    pub const RKE2_CONFIG: &str = "etc/rancher/rke2/config.yaml";
    /// Kubeconfig pointing at the API endpoint.
    pub const RKE2_KUBECONFIG: &str = "etc/rancher/rke2/rke2.yaml";
    /// The kube-proxy static pod manifest.
    pub const KUBE_PROXY_MANIFEST: &str =
        "var/lib/rancher/rke2/agent/pod-manifests/kube-proxy.yaml";
    /// CNI configuration directory.
    pub const CNI_NET_DIR: &str = "etc/cni/net.d";
    /// Pod logs.
    pub const POD_LOGS: &str = "var/log/pods";
    /// kubelet's log.
    pub const KUBELET_LOG: &str = "var/lib/rancher/rke2/agent/logs/kubelet.log";
    /// The security agent's log.
    pub const VEN_LOG: &str = "opt/illumio_ven_data/log/platform.log";
    /// CA of the API endpoint.
    pub const SERVER_CA: &str = "var/lib/rancher/rke2/server/tls/server-ca.crt";
    /// Serving certificate.
    pub const SERVING_CERT: &str = "var/lib/rancher/rke2/server/tls/serving-kube-apiserver.crt";
    /// Serving key.
    pub const SERVING_KEY: &str = "var/lib/rancher/rke2/server/tls/serving-kube-apiserver.key";
    /// The lab's own bookkeeping (pod specs, status, start flag).
    pub const LAB_STATE_DIR: &str = "var/lib/plumb-lab";
    /// iptables-services' rules file (host-reject).
    pub const SYSCONFIG_IPTABLES: &str = "etc/sysconfig/iptables";
    /// firewalld's log (`/var/log/firewalld`, firewalld-reload).
    pub const FIREWALLD_LOG: &str = "var/log/firewalld";
    /// Actors' own stderr (not part of a real node's layout).
    pub const ACTOR_LOGS: &str = "var/log/plumb-lab";
}

fn write(root: &Path, rel: &str, text: &str) -> Result<(), LabError> {
    let p = root.join(rel);
    if let Some(d) = p.parent() {
        fs::create_dir_all(d).map_err(|e| LabError::io(format!("creating {}", d.display()), e))?;
    }
    fs::write(&p, text).map_err(|e| LabError::io(format!("writing {}", p.display()), e))
}

fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Writes configuration, certificates and directories. `kube_proxy_args` None: a
/// kube-proxy-free node (RKE2 with `cni: cilium` and `disable-kube-proxy: true`, no
/// kube-proxy static pod manifest).
pub fn write_node_files(
    root: &Path,
    pki: &Pki,
    liveness_path: &str,
    kube_proxy_args: Option<&[String]>,
) -> Result<(), LabError> {
    let dataplane = if kube_proxy_args.is_some() {
        "cni: canal\n"
    } else {
        "cni: cilium\ndisable-kube-proxy: true\n"
    };
    let kube_proxy = if kube_proxy_args.is_some() {
        "kube-proxy-arg:\n  - healthz-bind-address=127.0.0.1:10256\n"
    } else {
        ""
    };
    write(
        root,
        paths::RKE2_CONFIG,
        &format!(
            "# /etc/rancher/rke2/config.yaml (plumb lab node)\nserver: https://{API_IP}:9345\ntoken: K10plumblab0000000000000000000000000000000000000000::server:plumblabsecret\nnode-name: plumb-node\nnode-ip: {NODE_IP}\n{dataplane}cluster-cidr: 10.42.0.0/16\nservice-cidr: 10.43.0.0/16\ncluster-dns: 10.43.0.10\n{kube_proxy}"
        ),
    )?;
    write(
        root,
        paths::RKE2_KUBECONFIG,
        &format!(
            "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {}\n    server: https://{API_IP}:{API_PORT}\n  name: default\ncontexts:\n- context:\n    cluster: default\n    user: default\n  name: default\ncurrent-context: default\nkind: Config\npreferences: {{}}\nusers:\n- name: default\n  user:\n    token: plumb-lab-admin-token\n",
            base64(pki.ca_cert.as_bytes())
        ),
    )?;
    write(root, paths::SERVER_CA, &pki.ca_cert)?;
    write(root, paths::SERVING_CERT, &pki.server_cert)?;
    write(root, paths::SERVING_KEY, &pki.server_key)?;
    for d in [
        paths::CNI_NET_DIR,
        paths::POD_LOGS,
        paths::LAB_STATE_DIR,
        paths::ACTOR_LOGS,
    ] {
        fs::create_dir_all(root.join(d)).map_err(|e| LabError::io(format!("creating {d}"), e))?;
    }
    let Some(kube_proxy_args) = kube_proxy_args else {
        return Ok(());
    };
    let mut command = String::from("    - kube-proxy\n");
    for a in kube_proxy_args {
        command.push_str(&format!("    - {a}\n"));
    }
    write(
        root,
        paths::KUBE_PROXY_MANIFEST,
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  labels:\n    component: kube-proxy\n    tier: control-plane\n  name: kube-proxy\n  namespace: kube-system\nspec:\n  containers:\n  - command:\n{command}    image: index.docker.io/rancher/hardened-kubernetes:v1.31.4-rke2r1-build20241211\n    livenessProbe:\n      failureThreshold: 8\n      httpGet:\n        host: localhost\n        path: {liveness_path}\n        port: 10256\n        scheme: HTTP\n      initialDelaySeconds: 10\n      periodSeconds: 10\n      timeoutSeconds: 15\n    name: kube-proxy\n    startupProbe:\n      failureThreshold: 24\n      httpGet:\n        host: localhost\n        path: {liveness_path}\n        port: 10256\n        scheme: HTTP\n      initialDelaySeconds: 10\n      periodSeconds: 10\n      timeoutSeconds: 5\n    securityContext:\n      privileged: true\n  hostNetwork: true\n  priorityClassName: system-cluster-critical\n"
        ),
    )
}

/// Places the actor executables: a hard link to `exe` when on the same filesystem, a
/// copy otherwise.
pub fn install_actors(root: &Path, exe: &Path, optional: &[ActorKind]) -> Result<(), LabError> {
    // The agent, firewalld and calico-node are installed only where a scenario runs them:
    // on a healthy node nothing of them exists, so doctor's checks have nothing to find
    // (no false positive).
    for a in actors::ALL
        .into_iter()
        .filter(|a| !actors::OPTIONAL.contains(a) || optional.contains(a))
    {
        let target = actor_path(root, a);
        if let Some(d) = target.parent() {
            fs::create_dir_all(d)
                .map_err(|e| LabError::io(format!("creating {}", d.display()), e))?;
        }
        let _ = fs::remove_file(&target);
        if fs::hard_link(exe, &target).is_err() {
            fs::copy(exe, &target).map_err(|e| {
                LabError::io(
                    format!("copying {} to {}", exe.display(), target.display()),
                    e,
                )
            })?;
        }
    }
    Ok(())
}

/// Where actor `a` lives.
pub fn actor_path(root: &Path, a: ActorKind) -> PathBuf {
    root.join(a.path)
}

/// A pseudo-random RFC 4122 v4 UUID (pod UIDs).
pub fn uuid() -> String {
    let mut buf = [0u8; 16];
    // SAFETY: getrandom fills the buffer we own.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n != 16 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        buf = (t ^ u128::from(std::process::id())).to_le_bytes();
    }
    buf[6] = (buf[6] & 0x0f) | 0x40;
    buf[8] = (buf[8] & 0x3f) | 0x80;
    let h: String = buf.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        let u = uuid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
    }
}
