//! `sysctl -a` output and sysctl.d files: `net.ipv4.ip_forward = 1`.
//!
//! Keys are normalised to dotted form (`net/ipv4/ip_forward` and `net.ipv4.ip_forward`
//! are the same setting); comments (`#`, `;`) and blank lines are skipped; a line
//! without `=` is reported with its number, never dropped silently.

use std::collections::BTreeMap;

/// Settings read, and lines that were not `key = value`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sysctls {
    /// Settings by normalised dotted key.
    pub values: BTreeMap<String, Setting>,
    /// (line number, raw text) of lines that are not `key = value`.
    pub bad_lines: Vec<(u32, String)>,
}

/// One setting with the line it was read from (the last one wins, as in sysctl).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setting {
    /// The value as written, trimmed (`1`, `262144`, `4096 87380 6291456`).
    pub value: String,
    /// Line number (1-based) of the winning assignment.
    pub line: u32,
}

impl Sysctls {
    /// A value by key, in dotted or slashed form.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values
            .get(&normalise_key(key))
            .map(|s| s.value.as_str())
    }
}

/// `net/ipv4/ip_forward` -> `net.ipv4.ip_forward`.
pub fn normalise_key(key: &str) -> String {
    key.trim().trim_start_matches('-').replace('/', ".")
}

/// Reads `sysctl -a` output or a sysctl.d file; never fails (bad lines are collected).
pub fn parse(text: &str) -> Sysctls {
    let mut out = Sysctls::default();
    for (i, raw) in text.lines().enumerate() {
        let n = u32::try_from(i + 1).unwrap_or(u32::MAX);
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        // `sysctl -a` on old kernels prints permission errors inline.
        if line.starts_with("sysctl:") {
            continue;
        }
        match line.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => {
                out.values.insert(
                    normalise_key(k),
                    Setting {
                        value: v.trim().to_string(),
                        line: n,
                    },
                );
            }
            _ => out.bad_lines.push((n, raw.to_string())),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_sysctl_a_and_conf_spellings() {
        let s = parse(
            "net.ipv4.ip_forward = 1\n# comment\n; other\n-net/bridge/bridge-nf-call-iptables=1\n\
             net.netfilter.nf_conntrack_max\t=\t262144\nnet.ipv4.ip_forward = 0\ngarbage\n",
        );
        assert_eq!(s.get("net.ipv4.ip_forward"), Some("0"), "last one wins");
        assert_eq!(s.values["net.ipv4.ip_forward"].line, 6);
        assert_eq!(s.get("net/bridge/bridge-nf-call-iptables"), Some("1"));
        assert_eq!(s.get("net.netfilter.nf_conntrack_max"), Some("262144"));
        assert_eq!(s.bad_lines, vec![(7, "garbage".to_string())]);
    }
}
