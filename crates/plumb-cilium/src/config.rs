//! The configuration a node needs for Cilium with kube-proxy replacement, derived from
//! the node's own facts rather than copied from an example: RKE2's `config.yaml`
//! fragment and the Cilium Helm values (`kubeProxyReplacement`, `k8sServiceHost` and
//! `k8sServicePort` — the API server the agent must reach without kube-proxy —, IPAM
//! and the pod CIDR). A value the node does not show is left as a placeholder with a
//! note saying where to find it, never guessed.

use crate::preflight::Release;
use serde::Serialize;

/// A value and where it was read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Sourced {
    /// The value (`192.168.1.10:6443`, `10.42.0.0/16`).
    pub value: String,
    /// Where it came from (a rule, a file, a distribution's convention).
    pub source: String,
}

/// What the generator reads about the node.
#[derive(Clone, Debug, Default)]
pub struct NodeNetwork {
    /// `rke2`, `k3s`, `kubeadm`, ... when the node's files say.
    pub distribution: Option<String>,
    /// The API server endpoint kube-proxy sends the `kubernetes` Service to
    /// (`HOST:PORT`).
    pub api_endpoint: Option<Sourced>,
    /// The pod (cluster) CIDR.
    pub pod_cidr: Option<Sourced>,
}

/// The generated configuration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Generated {
    /// RKE2's `/etc/rancher/rke2/config.yaml` lines, on an RKE2 node.
    pub rke2_config: Option<String>,
    /// Cilium's Helm values (for RKE2: the `valuesContent` of the `rke2-cilium`
    /// HelmChartConfig).
    pub helm_values: String,
    /// What the values rest on, and what is left to fill in.
    pub notes: Vec<String>,
}

/// The configuration for `release` on the node `n`.
pub fn generate(release: Release, n: &NodeNetwork) -> Generated {
    let mut notes = Vec::new();
    let rke2 = n.distribution.as_deref() == Some("rke2");
    // 1.14 made the option a boolean; before, "strict" was full replacement.
    let kpr = if release >= Release(1, 14) {
        "true"
    } else {
        "strict"
    };
    let (host, port) = if rke2 {
        notes.push("k8sServiceHost/Port: RKE2 runs a load balancer for the API server on every node at 127.0.0.1:6443, which needs no Service to reach".into());
        ("127.0.0.1".to_string(), "6443".to_string())
    } else if let Some(e) = &n.api_endpoint
        && let Some((h, p)) = e.value.rsplit_once(':')
    {
        notes.push(format!(
            "k8sServiceHost/Port: the API server the kubernetes Service is sent to ({})",
            e.source
        ));
        (h.trim_matches(['[', ']']).to_string(), p.to_string())
    } else {
        notes.push("k8sServiceHost/Port: the node does not show the API server's address (no kube-proxy rule for the kubernetes Service): fill in the address of the API server or its load balancer; without kube-proxy the agent cannot reach it through the Service".into());
        ("<API-SERVER-ADDRESS>".to_string(), "6443".to_string())
    };
    let mut values =
        format!("kubeProxyReplacement: {kpr}\nk8sServiceHost: {host}\nk8sServicePort: {port}\n");
    match &n.pod_cidr {
        Some(c) => {
            // Kubernetes IPAM keeps the per-node pod ranges the cluster already allocates
            // from this CIDR, so pod addresses stay in the range the node's routes and
            // policies expect.
            values.push_str("ipam:\n  mode: kubernetes\n");
            values.push_str(&format!("ipv4NativeRoutingCIDR: {}\n", c.value));
            notes.push(format!("pod CIDR {} ({})", c.value, c.source));
        }
        None => {
            values.push_str("ipam:\n  mode: kubernetes\n");
            notes.push("the pod CIDR was not found on the node: Kubernetes IPAM takes each node's podCIDR from the API".into());
        }
    }
    let rke2_config = rke2.then(|| "cni: cilium\ndisable-kube-proxy: true\n".to_string());
    if rke2 {
        notes.push("RKE2: put the values in the valuesContent of a HelmChartConfig named rke2-cilium in kube-system (/var/lib/rancher/rke2/server/manifests/rke2-cilium-config.yaml); with kube-proxy already deployed, delete /var/lib/rancher/rke2/agent/pod-manifests/kube-proxy.yaml and restart rke2-server".into());
    }
    Generated {
        rke2_config,
        helm_values: values,
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sourced(v: &str) -> Option<Sourced> {
        Some(Sourced {
            value: v.into(),
            source: "test".into(),
        })
    }

    #[test]
    fn rke2_uses_its_local_api_load_balancer() {
        let g = generate(
            Release(1, 16),
            &NodeNetwork {
                distribution: Some("rke2".into()),
                api_endpoint: sourced("192.168.1.10:6443"),
                pod_cidr: sourced("10.42.0.0/16"),
            },
        );
        assert!(
            g.helm_values
                .contains("k8sServiceHost: 127.0.0.1\nk8sServicePort: 6443")
        );
        assert!(g.helm_values.contains("kubeProxyReplacement: true"));
        assert_eq!(
            g.rke2_config.as_deref(),
            Some("cni: cilium\ndisable-kube-proxy: true\n")
        );
        assert!(
            g.helm_values
                .contains("ipv4NativeRoutingCIDR: 10.42.0.0/16")
        );
    }

    #[test]
    fn elsewhere_the_api_endpoint_is_the_node_s_and_an_unknown_one_is_a_placeholder() {
        let g = generate(
            Release(1, 13),
            &NodeNetwork {
                distribution: Some("kubeadm".into()),
                api_endpoint: sourced("[fd00::10]:6443"),
                pod_cidr: None,
            },
        );
        assert!(g.helm_values.contains("kubeProxyReplacement: strict"));
        assert!(g.helm_values.contains("k8sServiceHost: fd00::10\n"));
        assert!(g.rke2_config.is_none());
        let g = generate(Release(1, 16), &NodeNetwork::default());
        assert!(
            g.helm_values
                .contains("k8sServiceHost: <API-SERVER-ADDRESS>")
        );
        assert!(g.notes.iter().any(|n| n.contains("fill in")));
    }
}
