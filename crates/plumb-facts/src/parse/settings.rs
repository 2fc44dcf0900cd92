//! Network settings a text names: the Service and pod CIDRs as command-line flags
//! (`--service-cluster-ip-range=…`), YAML keys (`serviceSubnet: …`) or YAML lists
//! (MicroShift's `serviceNetwork:` then `- 10.43.0.0/16`). [`crate::cluster`] decides
//! between them.

use serde::Serialize;

/// Which setting a [`Setting`] gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SettingKey {
    /// The range ClusterIPs are allocated from (`--service-cluster-ip-range`, `service-cidr`,
    /// `serviceSubnet`).
    ServiceCidr,
    /// The pod network's range (`--cluster-cidr`, `clusterCIDR`, `podSubnet`).
    ClusterCidr,
}

/// A network setting found in a file or command line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Setting {
    /// Which setting this is.
    pub key: SettingKey,
    /// The IPv4 value (dual-stack lists keep their IPv4 member).
    pub value: String,
    /// File or process it was read from, with the spelling found
    /// (`/etc/kubernetes/manifests/kube-apiserver.yaml: --service-cluster-ip-range`).
    pub source: String,
}

/// Spellings of each setting: flags (`--x=v`, `--x v`), YAML keys (`x: v`).
const SPELLINGS: &[(&str, SettingKey)] = &[
    ("service-cluster-ip-range", SettingKey::ServiceCidr),
    ("service-cidr", SettingKey::ServiceCidr),
    ("serviceSubnet", SettingKey::ServiceCidr),
    ("cluster-cidr", SettingKey::ClusterCidr),
    ("clusterCIDR", SettingKey::ClusterCidr),
    ("podSubnet", SettingKey::ClusterCidr),
    // MicroShift's config.yaml (and OpenShift's network config): lists under the key.
    ("serviceNetwork", SettingKey::ServiceCidr),
    ("clusterNetwork", SettingKey::ClusterCidr),
];

/// The settings a text names (a manifest, a config file, a command line).
pub fn settings_in(text: &str, source: &str) -> Vec<Setting> {
    let mut out = Vec::new();
    // A YAML key whose value is a list on the following lines (`serviceNetwork:` then
    // `- 10.43.0.0/16`, or OpenShift's `- cidr: 10.128.0.0/14`): its first IPv4 item.
    let mut list_of: Option<(&str, SettingKey)> = None;
    for raw in text.lines() {
        if let Some((name, key)) = list_of {
            let item = raw.trim_start();
            if let Some(v) = item.strip_prefix('-') {
                let v = v.trim();
                let v = v.strip_prefix("cidr:").map_or(v, str::trim);
                if let Some(v) = ipv4_cidr(v) {
                    out.push(Setting {
                        key,
                        value: v,
                        source: format!("{source}: {name}"),
                    });
                    list_of = None;
                }
                continue;
            }
            if !item.is_empty() && !item.starts_with('#') {
                list_of = None;
            }
        }
        let line = raw.trim_start_matches([' ', '\t', '-', '"', '\'']);
        let words: Vec<&str> = line.split_whitespace().collect();
        for (i, w) in words.iter().enumerate() {
            let next = words.get(i + 1).copied();
            let w = w.trim_start_matches(['-', '"', '\'', '[']);
            for (name, key) in SPELLINGS {
                let Some(rest) = w.strip_prefix(name) else {
                    continue;
                };
                let value = match rest.strip_prefix('=') {
                    Some(v) if !v.is_empty() => Some(v),
                    _ if rest == ":" || rest.is_empty() => next,
                    _ => None,
                };
                if rest == ":" && next.is_none() {
                    list_of = Some((name, *key));
                }
                if let Some(v) = value.and_then(ipv4_cidr) {
                    out.push(Setting {
                        key: *key,
                        value: v,
                        source: format!("{source}: {name}"),
                    });
                }
            }
        }
    }
    out
}

/// The IPv4 member of `10.42.0.0/16,fd00::/56` (quotes and commas stripped).
pub(crate) fn ipv4_cidr(v: &str) -> Option<String> {
    v.trim_matches(['"', '\'', ',', ']', '['])
        .split(',')
        .map(|c| c.trim_matches(['"', '\'', ' ']))
        .find(|c| {
            let (ip, len) = c.split_once('/').unwrap_or((c, "32"));
            ip.parse::<std::net::Ipv4Addr>().is_ok() && len.parse::<u8>().is_ok_and(|l| l <= 32)
        })
        .map(str::to_string)
}
