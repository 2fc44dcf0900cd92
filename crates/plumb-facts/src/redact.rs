//! Redaction of secrets before anything leaves the node in a bundle.
//!
//! What is hidden (the value is replaced by `REDACTED`, the key stays so the reader sees
//! that something was there):
//! - YAML/INI-style keys whose name says secret: `token`, `agent-token`, `secret`,
//!   `password`, `*-key`, `client-key-data`, `client-certificate-data`,
//!   `certificate-authority-data`, `etcd-s3-secret-key` (RKE2 config, kubeconfigs, CNI
//!   kubeconfigs);
//! - `--token=VALUE` / `--token VALUE` style flags in command lines (ps output, unit files);
//! - `Authorization: Bearer VALUE` and `bearer VALUE` in logs;
//! - PEM blocks (`-----BEGIN ... PRIVATE KEY-----` through `-----END ...-----`).
//!
//! Deliberately not hidden: IP addresses and CIDRs (the diagnosis needs them; sos --clean
//! and Rancher -o exist for that).

/// Text with secrets replaced, and how many replacements were made.
pub fn redact(text: &str) -> (String, usize) {
    let mut out = String::with_capacity(text.len());
    let mut count = 0;
    let mut in_pem = false;
    for line in text.split_inclusive('\n') {
        if in_pem {
            if line.contains("-----END ") {
                in_pem = false;
                out.push_str(line);
            }
            continue;
        }
        if line.contains("-----BEGIN ") && line.contains("PRIVATE KEY-----") {
            in_pem = true;
            count += 1;
            out.push_str(line);
            out.push_str("REDACTED\n");
            continue;
        }
        let (l, n) = redact_line(line);
        count += n;
        out.push_str(&l);
    }
    (out, count)
}

const SECRET_KEYS: &[&str] = &[
    "token",
    "secret",
    "password",
    "passwd",
    "client-key-data",
    "client-certificate-data",
    "certificate-authority-data",
    "access-key",
    "secret-key",
    "private-key",
];

fn is_secret_key(key: &str) -> bool {
    let k = key
        .trim()
        .trim_start_matches("- ")
        .trim_matches(['"', '\''])
        .to_ascii_lowercase();
    !k.is_empty()
        && SECRET_KEYS
            .iter()
            .any(|s| k == *s || k.ends_with(&format!("-{s}")) || k.ends_with(&format!("_{s}")))
}

fn redact_line(line: &str) -> (String, usize) {
    let (body, nl) = match line.strip_suffix('\n') {
        Some(b) => (b, "\n"),
        None => (line, ""),
    };
    // key: value
    if let Some((k, v)) = body.split_once(':')
        && is_secret_key(k)
        && !v.trim().is_empty()
        && !k.trim().trim_start_matches("- ").contains(' ')
    {
        return (format!("{k}: REDACTED{nl}"), 1);
    }
    let mut out = body.to_string();
    let mut n = 0;
    // --flag=value / --flag value
    for flag in [
        "--token",
        "--agent-token",
        "--password",
        "--etcd-s3-secret-key",
        "--etcd-s3-access-key",
    ] {
        let mut from = 0;
        while let Some(i) = out[from..].find(flag).map(|i| i + from) {
            let after = i + flag.len();
            let rest = &out[after..];
            let value_start = match rest.chars().next() {
                Some('=') | Some(' ') => after + 1,
                _ => {
                    from = after;
                    continue;
                }
            };
            let value_end = out[value_start..]
                .find([' ', '\t', '"', '\''])
                .map_or(out.len(), |e| value_start + e);
            if value_end > value_start && &out[value_start..value_end] != "REDACTED" {
                out.replace_range(value_start..value_end, "REDACTED");
                n += 1;
            }
            from = value_start + "REDACTED".len().min(out.len() - value_start);
        }
    }
    // Bearer tokens.
    let lower = out.to_ascii_lowercase();
    if let Some(i) = lower.find("bearer ") {
        let start = i + 7;
        let end = out[start..]
            .find([' ', '"', '\'', ','])
            .map_or(out.len(), |e| start + e);
        if end > start {
            out.replace_range(start..end, "REDACTED");
            n += 1;
        }
    }
    (format!("{out}{nl}"), n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rke2_config_kubeconfig_flags_bearer_and_pem() {
        let (r, n) = redact(
            "token: K10abc::server:def\nagent-token: xyz\ncni: canal\nusers:\n- name: x\n  user:\n    client-key-data: LS0tLS1CRUdJTi\n",
        );
        assert_eq!(n, 3);
        assert!(r.contains("token: REDACTED\n") && r.contains("agent-token: REDACTED"));
        assert!(r.contains("    client-key-data: REDACTED"));
        assert!(r.contains("cni: canal"));
        assert!(!r.contains("K10abc") && !r.contains("LS0tLS1"));

        let (r, n) =
            redact("root 12 rke2 agent --token=K10secret --server https://10.0.0.1:9345\n");
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
}
