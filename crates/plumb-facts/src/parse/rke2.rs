//! RKE2's node configuration (`/etc/rancher/rke2/config.yaml`) and the kube-proxy
//! static pod manifest (`/var/lib/rancher/rke2/agent/pod-manifests/kube-proxy.yaml`).
//!
//! Only the keys doctor uses are read; everything else is ignored. Defaults are RKE2's
//! (cluster-cidr 10.42.0.0/16, service-cidr 10.43.0.0/16, cni canal) and applied by the
//! caller, so "not set" stays distinguishable from "set to the default".

use serde::{Deserialize, Serialize};

/// `cni:` is a string (`canal`) or a list (`[multus, canal]`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum OneOrMany {
    /// A single string, which may itself be comma-separated (`multus,canal`).
    One(String),
    /// A YAML list.
    Many(Vec<String>),
}

impl OneOrMany {
    /// The values, in order, with a single string split at commas.
    pub fn items(&self) -> Vec<&str> {
        match self {
            OneOrMany::One(s) => s.split(',').map(str::trim).collect(),
            OneOrMany::Many(v) => v.iter().map(String::as_str).collect(),
        }
    }
}

/// The keys of RKE2's config.yaml doctor reads; `None` when the file does not set one
/// (the accessors apply RKE2's defaults).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Rke2Config {
    /// `cni:` the CNI plugin(s) RKE2 deploys (`canal`, `calico`, `cilium`, `none`, or a
    /// list with `multus` first).
    pub cni: Option<OneOrMany>,
    /// `disable-kube-proxy:` true when RKE2 runs no kube-proxy (a CNI replaces it).
    pub disable_kube_proxy: Option<bool>,
    /// `cluster-cidr:` the pod network's IPv4 (and IPv6) CIDRs, as written.
    pub cluster_cidr: Option<String>,
    /// `service-cidr:` the Service ClusterIP range(s), as written.
    pub service_cidr: Option<String>,
    /// `cluster-dns:` the ClusterIP of the cluster's DNS Service.
    pub cluster_dns: Option<String>,
    /// `node-ip:` the address(es) the node advertises.
    pub node_ip: Option<OneOrMany>,
    /// `server:` the supervisor URL an agent joins (`https://10.0.0.1:9345`); unset on the
    /// first server.
    pub server: Option<String>,
}

impl Rke2Config {
    /// RKE2's pod CIDR when `cluster-cidr` is not set.
    pub const DEFAULT_CLUSTER_CIDR: &str = "10.42.0.0/16";
    /// RKE2's Service CIDR when `service-cidr` is not set.
    pub const DEFAULT_SERVICE_CIDR: &str = "10.43.0.0/16";
    /// RKE2's CNI when `cni` is not set.
    pub const DEFAULT_CNI: &str = "canal";

    /// The pod CIDR as configured, else RKE2's default.
    pub fn cluster_cidr(&self) -> &str {
        self.cluster_cidr
            .as_deref()
            .unwrap_or(Self::DEFAULT_CLUSTER_CIDR)
    }

    /// The Service CIDR as configured, else RKE2's default.
    pub fn service_cidr(&self) -> &str {
        self.service_cidr
            .as_deref()
            .unwrap_or(Self::DEFAULT_SERVICE_CIDR)
    }

    /// The CNI plugins as configured (a comma-separated string split), else `canal`.
    pub fn cni(&self) -> Vec<&str> {
        self.cni
            .as_ref()
            .map(OneOrMany::items)
            .unwrap_or_else(|| vec![Self::DEFAULT_CNI])
    }
}

/// Parses config.yaml; the error names the problem and, when known, the line.
pub fn parse_config(text: &str) -> Result<Rke2Config, String> {
    if text.trim().is_empty() {
        return Ok(Rke2Config::default());
    }
    serde_saphyr::from_str(text).map_err(|e| e.to_string())
}

/// The probe paths of a kube-proxy static pod (what kubelet calls on 10256).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ProbePaths {
    /// Path of the liveness probe's HTTP GET (`/livez` or `/healthz`); `None` when the
    /// container has no HTTP liveness probe.
    pub liveness: Option<String>,
    /// Path of the readiness probe's HTTP GET, when there is one.
    pub readiness: Option<String>,
    /// Path of the startup probe's HTTP GET, when there is one.
    pub startup: Option<String>,
}

#[derive(Deserialize)]
struct Pod {
    spec: PodSpec,
}

#[derive(Deserialize)]
struct PodSpec {
    #[serde(default)]
    containers: Vec<Container>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Container {
    #[serde(default)]
    name: String,
    liveness_probe: Option<Probe>,
    readiness_probe: Option<Probe>,
    startup_probe: Option<Probe>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Probe {
    http_get: Option<HttpGet>,
}

#[derive(Deserialize)]
struct HttpGet {
    path: Option<String>,
}

/// Probe paths of the `kube-proxy` container (or the first one) of a pod manifest.
pub fn parse_probe_paths(text: &str) -> Result<ProbePaths, String> {
    let pod: Pod = serde_saphyr::from_str(text).map_err(|e| e.to_string())?;
    let c = pod
        .spec
        .containers
        .iter()
        .find(|c| c.name == "kube-proxy")
        .or(pod.spec.containers.first())
        .ok_or("the manifest has no containers")?;
    let path = |p: &Option<Probe>| p.as_ref()?.http_get.as_ref()?.path.clone();
    Ok(ProbePaths {
        liveness: path(&c.liveness_probe),
        readiness: path(&c.readiness_probe),
        startup: path(&c.startup_probe),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_keys_defaults_and_errors() {
        let c = parse_config(
            "token: K10secret\ncni: canal\ncluster-cidr: 10.50.0.0/16\ndisable-kube-proxy: false\ntls-san:\n  - a.example\n",
        )
        .unwrap();
        assert_eq!(c.cni(), vec!["canal"]);
        assert_eq!(c.cluster_cidr(), "10.50.0.0/16");
        assert_eq!(c.service_cidr(), "10.43.0.0/16");
        assert_eq!(c.disable_kube_proxy, Some(false));
        let l = parse_config("cni:\n  - multus\n  - canal\n").unwrap();
        assert_eq!(l.cni(), vec!["multus", "canal"]);
        assert_eq!(parse_config("").unwrap(), Rke2Config::default());
        assert!(parse_config("cni: [unclosed\n").is_err());
    }

    #[test]
    fn kube_proxy_probe_paths() {
        let p = parse_probe_paths(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kube-proxy\nspec:\n  containers:\n  - name: kube-proxy\n    livenessProbe:\n      httpGet:\n        host: localhost\n        path: /healthz\n        port: 10256\n    startupProbe:\n      httpGet:\n        path: /healthz\n        port: 10256\n",
        )
        .unwrap();
        assert_eq!(p.liveness.as_deref(), Some("/healthz"));
        assert_eq!(p.startup.as_deref(), Some("/healthz"));
        assert_eq!(p.readiness, None);
        assert!(parse_probe_paths("spec: {}\n").is_err());
    }
}
