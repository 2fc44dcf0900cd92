//! The node's own network settings: the Service CIDR, the pod (cluster) CIDR, the
//! `kubernetes` Service ClusterIP and the API endpoint behind it — read from what the node
//! shows, in this order of trust:
//!
//! 1. kube-proxy's rules for `default/kubernetes:https` (the ClusterIP it translates, the
//!    `! -s POD-CIDR` of its masquerade rule, the DNAT destination): what the dataplane
//!    actually does;
//! 2. command lines and static pod manifests (`--service-cluster-ip-range`,
//!    `--cluster-cidr`), kube-proxy's config (`clusterCIDR`), kubeadm's
//!    (`serviceSubnet`, `podSubnet`), RKE2's and k3s's config (`service-cidr`, `cluster-cidr`);
//!    MicroShift's `/etc/microshift/config.yaml` (`network.serviceNetwork` and
//!    `network.clusterNetwork`, YAML lists; openshift/microshift docs/user/howto_config.md);
//! 3. the distribution's defaults (RKE2 and k3s 10.43.0.0/16 and 10.42.0.0/16, kubeadm
//!    10.96.0.0/12, MicroShift 10.43.0.0/16 and 10.42.0.0/16 (`microshift show-config`),
//!    EKS 10.100.0.0/16 — or 172.20.0.0/16 when the VPC is in 10.0.0.0/8, which the node's
//!    files do not show; the pod addresses are the VPC's own with the VPC CNI), marked as
//!    defaults so that reports say so.
//!
//! Pure: [`settings_in`] (in `parse::settings`) reads one text, [`network`] decides
//! from [`Facts`].

use crate::fact::Fact;
use crate::model::Facts;
use plumb_ruleset::Ruleset;
use serde::Serialize;

use crate::parse::settings::ipv4_cidr;
pub use crate::parse::settings::{Setting, SettingKey, settings_in};

/// One decided value and where it came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Decided {
    /// The value: an IPv4 CIDR (`10.43.0.0/16`) or address (`10.43.0.1`, `192.168.1.10:6443`).
    pub value: String,
    /// Where it was read (a rule, a file and key, a process argument) or, for a default,
    /// which distribution's default it is.
    pub source: String,
    /// True when nothing on the node gave it: a distribution's default.
    pub default: bool,
}

impl Decided {
    fn found(value: impl Into<String>, source: impl Into<String>) -> Decided {
        Decided {
            value: value.into(),
            source: source.into(),
            default: false,
        }
    }
}

/// The node's network settings, each with its source.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClusterNetwork {
    /// The Service CIDR ClusterIPs come from.
    pub service_cidr: Decided,
    /// The pod (cluster) CIDR: addresses of pods on every node.
    pub cluster_cidr: Decided,
    /// The `kubernetes` Service ClusterIP (no port).
    pub kubernetes_clusterip: Decided,
    /// Where kube-proxy sends the `kubernetes` Service (`192.168.1.10:6443`), when its
    /// rules show it.
    pub api_endpoint: Option<Decided>,
}

/// What kube-proxy's rules say about the `kubernetes` Service.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KubernetesService {
    /// The ClusterIP of `default/kubernetes:https` (no port); `None` when no rule names it.
    pub clusterip: Option<String>,
    /// The `! -s` of the masquerade rule: kube-proxy's idea of the pod CIDR.
    pub cluster_cidr: Option<String>,
    /// The first DNAT destination.
    pub endpoint: Option<String>,
}

/// Reads the `default/kubernetes:https` rules of a ruleset (iptables-save, nft text and
/// `-nvL` listings).
pub fn kubernetes_service(rs: &Ruleset) -> KubernetesService {
    let mut out = KubernetesService::default();
    for rule in rs
        .tables
        .iter()
        .flat_map(|t| t.chains.iter())
        .flat_map(|c| c.rules.iter())
    {
        let text: &str = &rule.text;
        if !text.contains("default/kubernetes:https") {
            continue;
        }
        let words: Vec<&str> = text.split_whitespace().collect();
        let after = |flag: &str| {
            words
                .iter()
                .position(|w| *w == flag)
                .and_then(|i| words.get(i + 1))
                .copied()
        };
        let negated_after = |flag: &str| {
            words
                .windows(3)
                .find(|w| w[0] == "!" && w[1] == flag)
                .map(|w| w[2])
        };
        if text.contains("cluster IP") {
            let dst = after("-d")
                .or_else(|| after("daddr"))
                .or_else(|| {
                    // `-nvL`: the destination column is the last word before the comment.
                    let i = words.iter().position(|w| *w == "/*")?;
                    words.get(i.checked_sub(1)?).copied()
                })
                .map(|d| d.trim_end_matches("/32"))
                .filter(|d| d.parse::<std::net::Ipv4Addr>().is_ok());
            if out.clusterip.is_none() {
                out.clusterip = dst.map(str::to_string);
            }
            if out.cluster_cidr.is_none() {
                out.cluster_cidr = negated_after("-s")
                    .or_else(|| {
                        words
                            .windows(3)
                            .find(|w| w[0] == "saddr" && w[1] == "!=")
                            .map(|w| w[2])
                    })
                    .and_then(ipv4_cidr);
            }
        }
        if out.endpoint.is_none()
            && let Some(d) = after("--to-destination").or_else(|| after("dnat").and(after("to")))
        {
            out.endpoint = Some(d.to_string());
        }
    }
    out
}

/// The first address of a CIDR (`10.43.0.0/16` -> `10.43.0.1`).
pub fn first_address(cidr: &str) -> Option<String> {
    let base: std::net::Ipv4Addr = cidr.split('/').next()?.parse().ok()?;
    Some(std::net::Ipv4Addr::from(u32::from(base).wrapping_add(1)).to_string())
}

/// Defaults of the distribution (RKE2's when it is not known: plumb's first platform):
/// (service CIDR, where that default comes from, pod CIDR, where that one comes from).
fn defaults(
    distribution: Option<&str>,
) -> (&'static str, &'static str, &'static str, &'static str) {
    match distribution {
        Some("kubeadm") => (
            "10.96.0.0/12",
            "kubeadm's default",
            "10.244.0.0/16",
            "kubeadm's default",
        ),
        Some("k3s") => (
            "10.43.0.0/16",
            "k3s's default",
            "10.42.0.0/16",
            "k3s's default",
        ),
        Some("microshift") => (
            "10.43.0.0/16",
            "MicroShift's default",
            "10.42.0.0/16",
            "MicroShift's default",
        ),
        // EKS: "10.100.0.0/16 or 172.20.0.0/16" (the latter when the VPC is in
        // 10.0.0.0/8); pods take VPC addresses (VPC CNI), so there is no pod CIDR to quote.
        Some("eks") => (
            "10.100.0.0/16",
            "EKS's default (172.20.0.0/16 instead when the VPC is in 10.0.0.0/8)",
            "the VPC's CIDR",
            "EKS with the VPC CNI: pods take addresses of the VPC's subnets",
        ),
        _ => (
            "10.43.0.0/16",
            "RKE2's default",
            "10.42.0.0/16",
            "RKE2's default",
        ),
    }
}

/// Decides the node's network settings from its facts.
pub fn network(facts: &Facts) -> ClusterNetwork {
    let rules = facts
        .ruleset
        .value()
        .map(kubernetes_service)
        .unwrap_or_default();
    let rules_src = facts.ruleset.source().unwrap_or("ruleset");
    let mut settings = facts.cluster_settings.clone();
    if let Fact::Known { value, source } = &facts.rke2_config {
        if let Some(v) = value.service_cidr.as_deref().and_then(ipv4_cidr) {
            settings.push(Setting {
                key: SettingKey::ServiceCidr,
                value: v,
                source: format!("{source}: service-cidr"),
            });
        }
        if let Some(v) = value.cluster_cidr.as_deref().and_then(ipv4_cidr) {
            settings.push(Setting {
                key: SettingKey::ClusterCidr,
                value: v,
                source: format!("{source}: cluster-cidr"),
            });
        }
    }
    let first = |key: SettingKey| {
        settings
            .iter()
            .find(|s| s.key == key)
            .map(|s| Decided::found(s.value.clone(), s.source.clone()))
    };
    let (def_svc, svc_name, def_pod, pod_name) = defaults(facts.distribution.as_deref());
    let default = |v: &str, name: &str| Decided {
        value: v.to_string(),
        source: format!("{name}, not found on the node"),
        default: true,
    };
    let service_cidr = first(SettingKey::ServiceCidr).unwrap_or_else(|| default(def_svc, svc_name));
    let cluster_cidr = rules
        .cluster_cidr
        .as_ref()
        .map(|c| {
            Decided::found(
                c.clone(),
                format!("{rules_src}: kube-proxy's masquerade rule for default/kubernetes:https"),
            )
        })
        .or_else(|| first(SettingKey::ClusterCidr))
        .unwrap_or_else(|| default(def_pod, pod_name));
    let kubernetes_clusterip = match &rules.clusterip {
        Some(ip) => Decided::found(
            ip.clone(),
            format!("{rules_src}: kube-proxy's rule \"default/kubernetes:https cluster IP\""),
        ),
        None => Decided {
            value: first_address(&service_cidr.value).unwrap_or_else(|| "10.43.0.1".into()),
            source: if service_cidr.default {
                format!("first address of {}", service_cidr.source)
            } else {
                format!(
                    "first address of the Service CIDR {} ({})",
                    service_cidr.value, service_cidr.source
                )
            },
            default: service_cidr.default,
        },
    };
    let api_endpoint = rules.endpoint.as_ref().map(|e| {
        Decided::found(
            e.clone(),
            format!("{rules_src}: kube-proxy's DNAT for default/kubernetes:https"),
        )
    });
    ClusterNetwork {
        service_cidr,
        cluster_cidr,
        kubernetes_clusterip,
        api_endpoint,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_and_yaml_keys() {
        let s = settings_in(
            "    - --service-cluster-ip-range=10.2.0.0/16,fd00:2::/112\n    - --cluster-cidr 10.1.0.0/16\nclusterCIDR: \"10.5.0.0/16\"\nnetworking:\n  serviceSubnet: 10.96.0.0/12\nservice-cidr: fd00::/108,10.7.0.0/16\n",
            "f",
        );
        let got: Vec<(SettingKey, &str)> = s.iter().map(|s| (s.key, s.value.as_str())).collect();
        assert_eq!(
            got,
            vec![
                (SettingKey::ServiceCidr, "10.2.0.0/16"),
                (SettingKey::ClusterCidr, "10.1.0.0/16"),
                (SettingKey::ClusterCidr, "10.5.0.0/16"),
                (SettingKey::ServiceCidr, "10.96.0.0/12"),
                (SettingKey::ServiceCidr, "10.7.0.0/16"),
            ]
        );
        assert_eq!(s[0].source, "f: service-cluster-ip-range");
        assert!(settings_in("cluster-cidr: not-a-cidr\n--service-cidr=\n", "f").is_empty());
    }

    /// MicroShift's config.yaml keeps both as YAML lists (openshift/microshift
    /// docs/user/howto_config.md); OpenShift's network config lists `- cidr: X`.
    #[test]
    fn yaml_lists_under_the_key() {
        let s = settings_in(
            "network:\n  clusterNetwork:\n    - 10.72.0.0/16\n  serviceNetwork:\n  # the Services\n    - fd00::/112\n    - 10.73.0.0/16\n  serviceNodePortRange: 30000-32767\n",
            "/etc/microshift/config.yaml",
        );
        let got: Vec<(SettingKey, &str)> = s.iter().map(|s| (s.key, s.value.as_str())).collect();
        assert_eq!(
            got,
            vec![
                (SettingKey::ClusterCidr, "10.72.0.0/16"),
                (SettingKey::ServiceCidr, "10.73.0.0/16")
            ]
        );
        let s = settings_in(
            "clusterNetwork:\n- cidr: 10.128.0.0/14\n  hostPrefix: 23\nserviceNetwork:\n- 172.30.0.0/16\n",
            "f",
        );
        let got: Vec<(SettingKey, &str)> = s.iter().map(|s| (s.key, s.value.as_str())).collect();
        assert_eq!(
            got,
            vec![
                (SettingKey::ClusterCidr, "10.128.0.0/14"),
                (SettingKey::ServiceCidr, "172.30.0.0/16")
            ]
        );
    }
}
