//! Redaction of secrets before anything leaves the node in a bundle.
//!
//! Two passes over every text, whose findings (byte ranges of secret *values*) are merged
//! and each replaced by `REDACTED` — keys, flags, schemes, user names, hosts and PEM
//! BEGIN/END lines stay, so the reader sees that something was there:
//! 1. a structural pass chosen by the text's [`Format`]: YAML and JSON by their parse
//!    (`structured.rs`), process lists by argv words (`argv.rs`), CRI/klog log lines by
//!    their message (`logs.rs`); a text that does not parse keeps what was found before
//!    the error;
//! 2. the pattern pass (`patterns.rs`) over the whole text, whatever its format: URL and
//!    DSN passwords, PEM private keys, JWTs, bearer tokens, `key=value`, `key: value`,
//!    `"key": "value"` and headers of secret-like keys ([`keys`]), `--secret-flag value`,
//!    and YAML block scalars and lists read line by line.
//!
//! Nothing else changes: lines are never dropped or reordered (a multi-line secret value
//! becomes one `REDACTED`), and a text with no secret comes back byte for byte (iptables
//! and nft dumps included: tested on the corpus). The count returned is the number of
//! values replaced. Redaction is idempotent: passes repeat until nothing more is found,
//! and `REDACTED`, empty values, nulls and booleans are never counted.
//!
//! Deliberately not hidden: IP addresses and CIDRs (the diagnosis needs them; sos --clean
//! and Rancher -o exist for that), user names in URLs, public certificates
//! (`certificate-authority-data`, `client-certificate-data`, `BEGIN CERTIFICATE`).

mod argv;
pub mod keys;
mod logs;
mod patterns;
mod structured;

pub use keys::{REDACTED, is_secret_env_name, is_secret_key};

use std::ops::Range;

/// What a text is, which decides its structural pass. Every format also gets the
/// pattern pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Format {
    /// YAML: RKE2's config, static pod manifests, kubeconfigs.
    Yaml,
    /// JSON: CNI configs, probe results, health answers.
    Json,
    /// Log lines: CRI pod logs, klog, plain agent logs (a JSON object in a line is read
    /// as JSON).
    Log,
    /// A process list with command lines (`ps -eo pid,comm,args`): words are argv.
    ProcessList,
    /// Anything else (rulesets, sysctls, unit lists): the pattern pass only.
    Text,
}

impl Format {
    /// The format of a node file, from where it lives and its name.
    pub fn of_node_file(path: &str) -> Format {
        let name = path.rsplit('/').next().unwrap_or(path);
        let ext = name.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
        match ext.as_deref() {
            _ if name.ends_with("kubeconfig") => Format::Yaml,
            Some("yaml" | "yml") => Format::Yaml,
            Some("json" | "conf" | "conflist") => Format::Json,
            Some("log") => Format::Log,
            _ if path.starts_with("/var/log/") => Format::Log,
            _ => Format::Text,
        }
    }
}

/// How many times the passes may repeat before the text is taken as it is (each round
/// replaces only values not already `REDACTED`; real texts settle in one or two).
const MAX_ROUNDS: usize = 4;

/// Text with secrets replaced, and how many values were replaced; the pattern pass only
/// (for text of no known format). Same as `redact_as(text, Format::Text)`.
pub fn redact(text: &str) -> (String, usize) {
    redact_as(text, Format::Text)
}

/// Text of a known format with secrets replaced, and how many values were replaced.
pub fn redact_as(text: &str, format: Format) -> (String, usize) {
    let mut current = text.to_string();
    let mut total = 0;
    for _ in 0..MAX_ROUNDS {
        let spans = find(&current, format);
        let (next, n) = apply(&current, spans);
        if n == 0 {
            break;
        }
        total += n;
        current = next;
    }
    (current, total)
}

/// The ranges of secret values in `text`, unsorted and possibly overlapping.
fn find(text: &str, format: Format) -> Vec<Range<usize>> {
    let mut spans = Vec::new();
    match format {
        Format::Yaml => structured::scan(text, 0..text.len(), false, &mut spans),
        Format::Json => structured::scan(text, 0..text.len(), true, &mut spans),
        Format::Log => logs::scan(text, &mut spans),
        Format::ProcessList => argv::scan(text, &mut spans),
        Format::Text => {}
    }
    patterns::scan(text, &mut spans);
    spans
}

/// Replaces the union of `spans` (overlapping ranges merge into one value) and counts
/// the values replaced; a value that already reads `REDACTED` is left and not counted.
fn apply(text: &str, mut spans: Vec<Range<usize>>) -> (String, usize) {
    spans.retain(|r| r.start < r.end && r.end <= text.len());
    spans.sort_by_key(|r| (r.start, r.end));
    let mut merged: Vec<Range<usize>> = Vec::with_capacity(spans.len());
    for r in spans {
        match merged.last_mut() {
            Some(last) if r.start < last.end => last.end = last.end.max(r.end),
            _ => merged.push(r),
        }
    }
    let mut out = String::with_capacity(text.len());
    let mut count = 0;
    let mut at = 0;
    for r in merged {
        if &text[r.clone()] == REDACTED {
            continue;
        }
        out.push_str(&text[at..r.start]);
        out.push_str(REDACTED);
        at = r.end;
        count += 1;
    }
    out.push_str(&text[at..]);
    (out, count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rke2_config_kubeconfig_flags_bearer_and_pem() {
        let (r, n) = redact_as(
            "token: K10abc::server:def\nagent-token: xyz\ncni: canal\nusers:\n- name: x\n  user:\n    client-key-data: LS0tLS1CRUdJTi\n",
            Format::Yaml,
        );
        assert_eq!(n, 3, "{r}");
        assert!(r.contains("token: REDACTED\n") && r.contains("agent-token: REDACTED"));
        assert!(r.contains("    client-key-data: REDACTED"));
        assert!(r.contains("cni: canal"));
        assert!(!r.contains("K10abc") && !r.contains("LS0tLS1"));

        let (r, n) = redact_as(
            "root 12 rke2 agent --token=K10secret --server https://10.0.0.1:9345\n",
            Format::ProcessList,
        );
        assert_eq!(
            (r.as_str(), n),
            (
                "root 12 rke2 agent --token=REDACTED --server https://10.0.0.1:9345\n",
                1
            )
        );
        let (r, _) = redact("curl -H 'Authorization: Bearer eyJhbGciOi.abc' https://x\n");
        assert!(r.contains("Bearer REDACTED'"), "{r}");

        let (r, n) = redact(
            "a\n-----BEGIN RSA PRIVATE KEY-----\nMIIE\nabc\n-----END RSA PRIVATE KEY-----\nb\n",
        );
        assert_eq!(n, 1);
        assert_eq!(
            r,
            "a\n-----BEGIN RSA PRIVATE KEY-----\nREDACTED\n-----END RSA PRIVATE KEY-----\nb\n"
        );
        // Nothing secret: unchanged.
        let plain = "net.ipv4.ip_forward = 1\nKUBE-SVC-NPX46M4PTMTKRN6Y\n";
        assert_eq!(redact(plain), (plain.to_string(), 0));
    }

    #[test]
    fn formats_of_node_files() {
        assert_eq!(
            Format::of_node_file("/etc/rancher/rke2/config.yaml"),
            Format::Yaml
        );
        assert_eq!(
            Format::of_node_file("/etc/cni/net.d/10-canal.conflist"),
            Format::Json
        );
        assert_eq!(
            Format::of_node_file("/etc/cni/net.d/calico-kubeconfig"),
            Format::Yaml
        );
        assert_eq!(
            Format::of_node_file("/var/log/pods/kube-system_kube-proxy-x_u/kube-proxy/0.log"),
            Format::Log
        );
        assert_eq!(Format::of_node_file("/var/log/messages"), Format::Log);
        assert_eq!(
            Format::of_node_file("/proc/net/ip_tables_names"),
            Format::Text
        );
    }

    /// A pod can write what it likes into its log: text made of nothing but URL
    /// separators or secret hints must still be read in linear time (it took minutes
    /// when each `://` looked 1 KiB ahead).
    #[test]
    fn adversarial_text_is_read_in_linear_time() {
        for unit in ["x://", "eyJ", "token="] {
            let text = unit.repeat((2 << 20) / unit.len());
            let t = std::time::Instant::now();
            for format in [Format::Text, Format::Log] {
                let _ = redact_as(&text, format);
            }
            let took = t.elapsed();
            // Linear: under a second unoptimised on an idle machine; quadratic (a 1 KiB
            // look-ahead per `://`): about 90 s. The bound leaves room for a busy machine.
            assert!(
                took < std::time::Duration::from_secs(30),
                "{unit:?}: {took:?}"
            );
        }
    }

    #[test]
    fn overlapping_findings_are_one_value() {
        let (r, n) = apply("a secret b", vec![2..6, 4..8, 2..8]);
        assert_eq!((r.as_str(), n), ("a REDACTED b", 1));
        let (r, n) = apply("x REDACTED y", vec![2..10, 3..9]);
        assert_eq!((r.as_str(), n), ("x REDACTED y", 0));
    }
}
