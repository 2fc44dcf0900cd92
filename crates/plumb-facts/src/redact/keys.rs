//! Which key names hold secrets, and which values are not worth hiding.
//!
//! A key is split into lower-case words (`etcd-s3-secret-key` → etcd s3 secret key,
//! `k8sAuthToken` → k8s auth token, `APIKey` → api key) and judged by its *last* word, so
//! `token`, `agent-token`, `K8S_AUTH_TOKEN` and `X-Auth-Token` are secrets while
//! `token-bucket`, `token-file`, `secretName`, `secretKeyRef` and `password-min-length`
//! are not (they name a secret or describe one, they do not hold it). Trailing `data`,
//! `value` and `base64` are ignored (`client-key-data` is a client key).
//!
//! `key` alone is not a secret (Kubernetes tolerations and selectors say `key:`), nor is
//! `topologyKey` or `public-key`; a key is secret when a word before it says what kind:
//! private, client, access, secret, api, signing, encryption, ssh, tls, session... —
//! see `KEY_QUALIFIERS`.
//!
//! Public certificate data (`certificate-authority-data`, `client-certificate-data`,
//! `-----BEGIN CERTIFICATE-----`) is not secret and is kept: it grants nothing without
//! the private key.

/// Last words that make a key secret.
const SECRET_WORDS: &[&str] = &[
    "password",
    "passwd",
    "passphrase",
    "pass",
    "secret",
    "token",
    "credential",
    "credentials",
    "auth",
    "authorization",
    "apikey",
    "privatekey",
    "secretkey",
    "accesskey",
    "clientkey",
    "sshkey",
];

/// Endings of one-word keys that make them secret (`PGPASSWORD`, `accesstoken`).
const SECRET_SUFFIXES: &[&str] = &["password", "passwd", "passphrase", "secret", "token"];

/// Words before a final `key` that make it a secret key.
pub(crate) const KEY_QUALIFIERS: &[&str] = &[
    "private",
    "client",
    "access",
    "secret",
    "api",
    "signing",
    "encryption",
    "ssh",
    "tls",
    "session",
    "master",
    "shared",
    "auth",
    "hmac",
    "fastopen",
    "storage",
    "account",
    "license",
    "psk",
    "aes",
    "crypt",
];

/// Trailing words that describe the encoding, not the meaning (`client-key-data`).
const ENCODING_WORDS: &[&str] = &["data", "value", "b64", "base64"];

/// Words of an environment variable name that make its value secret
/// (`{name: DB_PASSWORD, value: X}`): any word, not only the last.
const ENV_WORDS: &[&str] = &[
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "key",
    "apikey",
    "credential",
    "credentials",
];

/// Cheap pre-check: a secret key contains one of these (ASCII, any case).
const HINTS: &[&[u8]] = &[
    b"pass",
    b"secret",
    b"token",
    b"key",
    b"auth",
    b"credential",
    b"cookie",
];

/// Whether `text` contains a word every secret-like key, flag or variable name contains
/// (`pass`, `secret`, `token`, `key`, `auth`, `credential`, `cookie`, any case): text
/// without one holds no `key=value` secret.
pub(crate) fn has_hint(text: &[u8]) -> bool {
    text.iter().enumerate().any(|(i, &c)| {
        matches!(c | 0x20, b'p' | b's' | b't' | b'k' | b'a' | b'c')
            && HINTS
                .iter()
                .any(|h| text.len() - i >= h.len() && text[i..i + h.len()].eq_ignore_ascii_case(h))
    })
}

fn contains_ignore_case(hay: &[u8], needle: &[u8]) -> bool {
    hay.len() >= needle.len()
        && hay
            .windows(needle.len())
            .any(|w| w.eq_ignore_ascii_case(needle))
}

/// The key's words, lower-cased: split at anything not alphanumeric and at camelCase
/// boundaries (`APIKey` → api, key).
pub(crate) fn words(key: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut cur = String::new();
    let chars: Vec<char> = key.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_ascii_alphanumeric() {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            continue;
        }
        if c.is_ascii_uppercase() && !cur.is_empty() {
            let prev = chars[i - 1];
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_ascii_lowercase());
            if prev.is_ascii_lowercase()
                || prev.is_ascii_digit()
                || (prev.is_ascii_uppercase() && next_lower)
            {
                out.push(std::mem::take(&mut cur));
            }
        }
        cur.push(c.to_ascii_lowercase());
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Whether a key (YAML/JSON key, `key=value` name, `--flag` name, header name) holds a
/// secret value.
pub fn is_secret_key(key: &str) -> bool {
    if key.len() > 80
        || !HINTS
            .iter()
            .any(|h| contains_ignore_case(key.as_bytes(), h))
    {
        return false;
    }
    let mut w = words(key);
    while w.len() > 1
        && w.last()
            .is_some_and(|l| ENCODING_WORDS.contains(&l.as_str()))
    {
        w.pop();
    }
    let Some(last) = w.last() else {
        return false;
    };
    if SECRET_WORDS.contains(&last.as_str()) || SECRET_SUFFIXES.iter().any(|s| last.ends_with(s)) {
        return true;
    }
    // The `Cookie` and `Set-Cookie` headers; not `sock_cookie` (a socket's id).
    if last == "cookie" && (w.len() == 1 || (w.len() == 2 && w[0] == "set")) {
        return true;
    }
    last == "key" && w.len() >= 2 && KEY_QUALIFIERS.contains(&w[w.len() - 2].as_str())
}

/// Whether an environment variable of this name holds a secret (its `value` is hidden).
pub fn is_secret_env_name(name: &str) -> bool {
    if !HINTS
        .iter()
        .any(|h| contains_ignore_case(name.as_bytes(), h))
    {
        return false;
    }
    is_secret_key(name) || words(name).iter().any(|w| ENV_WORDS.contains(&w.as_str()))
}

/// The replacement text.
pub const REDACTED: &str = "REDACTED";

/// Values that are not secrets whatever their key says: empty, YAML nulls and booleans,
/// `none`, and what redaction (or someone before it) already put there.
pub(crate) fn is_trivial_value(v: &str) -> bool {
    let v = v.trim().trim_matches(['"', '\'']).trim();
    v.is_empty()
        || v.chars().all(|c| c == '*')
        || [
            "null",
            "~",
            "true",
            "false",
            "yes",
            "no",
            "none",
            REDACTED,
            "<redacted>",
        ]
        .iter()
        .any(|t| v.eq_ignore_ascii_case(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_split_camel_case_and_separators() {
        assert_eq!(words("APIKey"), ["api", "key"]);
        assert_eq!(words("k8sAuthToken"), ["k8s", "auth", "token"]);
        assert_eq!(words("etcd-s3-secret-key"), ["etcd", "s3", "secret", "key"]);
        assert_eq!(words("--X-Auth-Token"), ["x", "auth", "token"]);
        assert_eq!(words("DB_PASSWORD"), ["db", "password"]);
    }

    #[test]
    fn secret_keys_by_their_last_word() {
        for k in [
            "token",
            "agent-token",
            "K8S_AUTH_TOKEN",
            "k8s_auth_token",
            "X-Auth-Token",
            "X-Api-Key",
            "Authorization",
            "password",
            "PGPASSWORD",
            "db_password",
            "client-secret",
            "clientSecret",
            "etcd-s3-secret-key",
            "etcd-s3-access-key",
            "client-key",
            "client-key-data",
            "privateKey",
            "api_key",
            "apikey",
            "auth",
            "credentials",
            "net.ipv4.tcp_fastopen_key",
            "--token",
            "id-token",
            "refresh-token",
            "Cookie",
            "Set-Cookie",
        ] {
            assert!(is_secret_key(k), "{k}");
        }
        for k in [
            "key",
            "topologyKey",
            "public-key",
            "token-bucket",
            "token-file",
            "tokenFile",
            "secretName",
            "secretKeyRef",
            "secret-name",
            "password-min-length",
            "certificate-authority-data",
            "client-certificate-data",
            "hostnameOverride",
            "tls-private-key-file",
            "--service-account-key-file",
            "keys",
            "bypass",
            "kube-proxy",
            "net.ipv4.tcp_keepalive_time",
            "ssh-authorized-keys",
            "sock_cookie",
        ] {
            assert!(!is_secret_key(k), "{k}");
        }
    }

    #[test]
    fn env_names_by_any_word() {
        for n in [
            "DB_PASSWORD",
            "AWS_SECRET_ACCESS_KEY",
            "API_KEY",
            "CATTLE_TOKEN",
            "SSH_KEY_PATH",
        ] {
            assert!(is_secret_env_name(n), "{n}");
        }
        for n in [
            "KUBERNETES_SERVICE_HOST",
            "KEYCLOAK_URL",
            "FELIX_LOGSEVERITYSCREEN",
        ] {
            assert!(!is_secret_env_name(n), "{n}");
        }
    }

    #[test]
    fn trivial_values() {
        for v in ["", "null", "~", "true", "\"\"", "REDACTED", "****"] {
            assert!(is_trivial_value(v), "{v}");
        }
        for v in ["0", "hunter2", "K10abc"] {
            assert!(!is_trivial_value(v), "{v}");
        }
    }
}
