//! Property: random secrets (random key spellings, values from realistic alphabets)
//! planted in random shapes of every supported format — YAML block and flow, block
//! scalars, env lists, argv lists, JSON compact and pretty, PEM in a JSON string and
//! bare, JWTs, log lines with CRI/klog prefixes, headers, URLs, `ps` lines — never
//! survive redaction; the surrounding non-secret lines come back unchanged; the count is
//! exactly the number planted; and a second redaction changes nothing.

use plumb_facts::redact::{Format, redact_as};
use proptest::prelude::*;

/// Key words: an optional qualifier and a secret noun.
fn key_words() -> impl Strategy<Value = Vec<&'static str>> {
    let prefix = prop::sample::select(vec![
        vec![],
        vec!["db"],
        vec!["agent"],
        vec!["k8s", "auth"],
        vec!["etcd", "s3"],
        vec!["oidc", "client"],
        vec!["admin"],
        vec!["service", "account"],
        vec!["registry"],
    ]);
    let core = prop::sample::select(vec![
        vec!["token"],
        vec!["password"],
        vec!["passwd"],
        vec!["secret"],
        vec!["api", "key"],
        vec!["access", "key"],
        vec!["secret", "key"],
        vec!["private", "key"],
        vec!["client", "key"],
        vec!["credentials"],
        vec!["passphrase"],
    ]);
    (prefix, core).prop_map(|(mut p, c)| {
        p.extend(c);
        p
    })
}

#[derive(Clone, Copy, Debug)]
enum Style {
    Kebab,
    Snake,
    Camel,
    Pascal,
    UpperSnake,
}

fn spell(words: &[&str], style: Style) -> String {
    let cap = |w: &str| {
        let mut c = w.chars();
        c.next()
            .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
            .unwrap_or_default()
    };
    match style {
        Style::Kebab => words.join("-"),
        Style::Snake => words.join("_"),
        Style::UpperSnake => words.join("_").to_ascii_uppercase(),
        Style::Pascal => words.iter().map(|w| cap(w)).collect(),
        Style::Camel => words
            .iter()
            .enumerate()
            .map(|(i, w)| if i == 0 { w.to_string() } else { cap(w) })
            .collect(),
    }
}

fn key() -> impl Strategy<Value = String> {
    let style = prop::sample::select(vec![
        Style::Kebab,
        Style::Snake,
        Style::Camel,
        Style::Pascal,
        Style::UpperSnake,
    ]);
    (key_words(), style).prop_map(|(w, s)| spell(&w, s))
}

fn env_name() -> impl Strategy<Value = String> {
    key_words().prop_map(|w| spell(&w, Style::UpperSnake))
}

fn flag() -> impl Strategy<Value = String> {
    key_words().prop_map(|w| format!("--{}", w.join("-")))
}

/// A token: base64/base64url-ish, starting with an alphanumeric.
fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Za-z0-9][A-Za-z0-9+/_.~-]{11,39}",
        "[0-9a-f]{16,64}",
        "K10[0-9a-f]{16,32}::server:[0-9a-f]{8,16}",
    ]
}

/// A password written inside quotes (no quote or backslash; spaces allowed inside).
fn quoted_password() -> impl Strategy<Value = String> {
    "[A-Za-z0-9][A-Za-z0-9!#$%^&*()_+~.,;:@ -]{6,22}[A-Za-z0-9!#%*_+~.]"
}

/// A password as one argv word (no white space).
fn word_password() -> impl Strategy<Value = String> {
    "[A-Za-z0-9][A-Za-z0-9!#$%^&*()_+~.,;:@'\"=-]{7,23}"
}

/// A password inside a URL's userinfo (unreserved and sub-delims but no `,` or `;`).
fn url_password() -> impl Strategy<Value = String> {
    "[A-Za-z0-9][A-Za-z0-9._~!$*+=-]{7,23}"
}

fn pem_body() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec("[A-Za-z0-9+/]{40,64}", 1..4)
}

fn jwt() -> impl Strategy<Value = String> {
    "eyJ[A-Za-z0-9_-]{10,30}\\.eyJ[A-Za-z0-9_-]{4,30}\\.[A-Za-z0-9_-]{10,40}"
}

/// A shape: its text and the secret values planted in it (a PEM body's lines are one
/// value, so they are kept together as one entry, joined by newlines, and checked line
/// by line).
type Shape = (String, Vec<String>);

/// The strings that must not survive: each planted value, a PEM body line by line.
fn pieces(secrets: &[String]) -> impl Iterator<Item = &str> {
    secrets.iter().flat_map(|s| s.split('\n'))
}

fn yaml_shape() -> impl Strategy<Value = Shape> {
    prop_oneof![
        (key(), token()).prop_map(|(k, v)| (format!("{k}: {v}\n"), vec![v])),
        (key(), quoted_password()).prop_map(|(k, v)| (format!("{k}: \"{v}\"\n"), vec![v])),
        (key(), quoted_password(), any::<bool>()).prop_map(|(k, v, folded)| (
            format!("{k}: {}\n  {v}\n", if folded { ">-" } else { "|" }),
            vec![v]
        )),
        (key(), token()).prop_map(|(k, v)| (
            format!("mirror: {{endpoint: registry.local, {k}: {v}}}\n"),
            vec![v]
        )),
        (env_name(), quoted_password()).prop_map(|(n, v)| (
            format!("env:\n- name: {n}\n  value: \"{v}\"\n- name: KUBERNETES_SERVICE_HOST\n  value: 10.43.0.1\n"),
            vec![v]
        )),
        (env_name(), token()).prop_map(|(n, v)| (
            format!("env: [{{name: {n}, value: {v}}}]\n"),
            vec![v]
        )),
        (flag(), quoted_password()).prop_map(|(f, v)| (
            format!("command:\n- kube-proxy\n- {f}\n- \"{v}\"\n- --v=2\n"),
            vec![v]
        )),
        (flag(), token()).prop_map(|(f, v)| (format!("args:\n- {f}={v}\n"), vec![v])),
        url_password().prop_map(|p| (
            format!("datastore-endpoint: \"postgres://rke2:{p}@db.local:5432/kubernetes\"\n"),
            vec![p]
        )),
        pem_body().prop_map(|b| (
            format!(
                "tls-material: |\n  -----BEGIN RSA PRIVATE KEY-----\n{}  -----END RSA PRIVATE KEY-----\n",
                b.iter().map(|l| format!("  {l}\n")).collect::<String>()
            ),
            vec![b.join("\n")]
        )),
        jwt().prop_map(|j| (format!("note: {j}\n"), vec![j])),
    ]
}

fn json_entry() -> impl Strategy<Value = Shape> {
    prop_oneof![
        (key(), quoted_password()).prop_map(|(k, v)| (format!("\"{k}\": \"{v}\""), vec![v])),
        (key(), token()).prop_map(|(k, v)| (
            format!("\"policy\": {{\"type\":\"k8s\",\"{k}\":\"{v}\"}}"),
            vec![v]
        )),
        (key(), quoted_password())
            .prop_map(|(k, v)| (format!("\"users\": [{{\"{k}\":\"{v}\"}}]"), vec![v])),
        pem_body().prop_map(|b| (
            format!(
                "\"key\": \"-----BEGIN PRIVATE KEY-----\\n{}\\n-----END PRIVATE KEY-----\\n\"",
                b.join("\\n")
            ),
            vec![b.join("\n")]
        )),
        (env_name(), quoted_password()).prop_map(|(n, v)| (
            format!("\"env\": [{{\"name\":\"{n}\",\"value\":\"{v}\"}}]"),
            vec![v]
        )),
        (flag(), quoted_password())
            .prop_map(|(f, v)| (format!("\"args\": [\"{f}\", \"{v}\"]"), vec![v])),
        jwt().prop_map(|j| (format!("\"note\": \"{j}\""), vec![j])),
    ]
}

fn log_message() -> impl Strategy<Value = Shape> {
    prop_oneof![
        (key(), token()).prop_map(|(k, v)| (format!("\"Using config\" {k}={v} v=2"), vec![v])),
        (key(), quoted_password())
            .prop_map(|(k, v)| (format!("\"Connecting\" {k}=\"{v}\" host=\"db\""), vec![v])),
        (key(), quoted_password()).prop_map(|(k, v)| (
            format!("{{\"level\":\"info\",\"{k}\":\"{v}\",\"user\":\"kp\"}}"),
            vec![v]
        )),
        (
            prop::sample::select(vec![
                "X-Auth-Token",
                "X-Api-Key",
                "Authorization: Bearer",
                "Proxy-Authorization: Basic"
            ]),
            token()
        )
            .prop_map(|(h, v)| {
                let line = match h.split_once(": ") {
                    Some((name, scheme)) => format!("{name}: {scheme} {v}"),
                    None => format!("{h}: {v}"),
                };
                (line, vec![v])
            }),
        token().prop_map(|v| (
            format!("request failed: Authorization: Bearer {v} rejected"),
            vec![v]
        )),
        url_password().prop_map(|p| (
            format!("connecting to mysql://root:{p}@10.0.0.5:3306/kine"),
            vec![p]
        )),
        jwt().prop_map(|j| (format!("got token {j} from cache"), vec![j])),
        (key(), quoted_password()).prop_map(|(k, v)| (
            format!("{{\"log\":\"cfg {{\\\"{k}\\\":\\\"{v}\\\"}}\",\"stream\":\"stdout\"}}"),
            vec![v]
        )),
        (key(), token())
            .prop_map(|(k, v)| (format!("GET /api/v1/pods?{k}={v}&watch=true"), vec![v])),
    ]
}

fn log_line() -> impl Strategy<Value = Shape> {
    (log_message(), any::<bool>(), any::<bool>()).prop_map(|((m, s), cri, klog)| {
        let mut line = String::new();
        if cri {
            line.push_str("2024-08-27T17:30:29.414588001Z stderr F ");
        }
        if klog {
            line.push_str("I0827 17:30:29.414588 1 server.go:10] ");
        }
        line.push_str(&m);
        line.push('\n');
        (line, s)
    })
}

fn ps_line() -> impl Strategy<Value = Shape> {
    prop_oneof![
        (flag(), word_password())
            .prop_map(|(f, v)| (format!("  1234 rke2 rke2 agent {f}={v} --debug\n"), vec![v])),
        (flag(), word_password())
            .prop_map(|(f, v)| (format!("  1234 rke2 rke2 agent {f} {v} --debug\n"), vec![v])),
        (key(), word_password())
            .prop_map(|(k, v)| (format!("  1600 agent /opt/agent {k}={v} mode=x\n"), vec![v])),
        url_password().prop_map(|p| (
            format!("  1400 k3s k3s server --datastore-endpoint=postgres://k3s:{p}@db:5432/k3s\n"),
            vec![p]
        )),
    ]
}

fn text_line() -> impl Strategy<Value = Shape> {
    prop_oneof![
        token().prop_map(|v| (format!("Authorization: Bearer {v}\n"), vec![v])),
        url_password().prop_map(|p| (
            format!("url=https://user:{p}@example.internal/path\n"),
            vec![p]
        )),
        pem_body().prop_map(|b| (
            format!(
                "-----BEGIN EC PRIVATE KEY-----\n{}\n-----END EC PRIVATE KEY-----\n",
                b.join("\n")
            ),
            vec![b.join("\n")]
        )),
        jwt().prop_map(|j| (format!("id {j}\n"), vec![j])),
        (key(), token()).prop_map(|(k, v)| (format!("{k}={v}\n"), vec![v])),
    ]
}

/// Non-secret lines of each format that must come back unchanged.
fn noise(format: Format) -> &'static [&'static str] {
    match format {
        Format::Yaml => &[
            "cni: canal",
            "cluster-cidr: 10.42.0.0/16",
            "token-bucket: 5",
            "secretName: kube-proxy-token",
            "topologyKey: kubernetes.io/hostname",
            "certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==",
        ],
        Format::Json => &[],
        Format::Log => &[
            "2024-08-27T17:30:29.414588001Z stderr F E0827 17:30:29.414588 1 proxier.go:1598] \"Failed to execute iptables-restore\" err=\"exit status 1: iptables-restore: line 3 failed: Chain 'KUBE-SVC-NPX46M4PTMTKRN6Y' does not exist\"",
            "token-bucket refill rate=5 burst=10",
            "Unable to create token for CNI kubeconfig error=\"connection refused\"",
        ],
        Format::ProcessList => &[
            "    PID COMMAND         COMMAND",
            "   1900 kube-proxy      kube-proxy --hostname-override=node-1 --cluster-cidr=10.42.0.0/16",
        ],
        _ => &[
            "-A KUBE-SERVICES -d 10.43.0.1/32 -p tcp -m comment --comment \"default/kubernetes:https cluster IP\" -m tcp --dport 443 -j KUBE-SVC-NPX46M4PTMTKRN6Y",
            "net.ipv4.tcp_keepalive_time = 7200",
        ],
    }
}

/// A document of one format: noise and planted shapes in random order.
fn document() -> impl Strategy<Value = (Format, String, Vec<String>)> {
    let lines = |s: BoxedStrategy<Shape>, f: Format| {
        (
            prop::collection::vec(s, 1..6),
            prop::collection::vec(any::<bool>(), 8),
        )
            .prop_map(move |(shapes, mix)| {
                let mut text = String::new();
                let mut secrets = Vec::new();
                let noise = noise(f);
                for (i, (t, s)) in shapes.into_iter().enumerate() {
                    if mix[i % mix.len()] && !noise.is_empty() {
                        text.push_str(noise[i % noise.len()]);
                        text.push('\n');
                    }
                    text.push_str(&t);
                    secrets.extend(s);
                }
                for n in noise {
                    text.push_str(n);
                    text.push('\n');
                }
                (f, text, secrets)
            })
    };
    let json =
        (prop::collection::vec(json_entry(), 1..6), any::<bool>()).prop_map(|(entries, pretty)| {
            let mut secrets = Vec::new();
            let mut parts = vec![
                "\"mtu\": 1450".to_string(),
                "\"nodename\": \"node-1\"".to_string(),
            ];
            for (t, s) in entries {
                parts.push(t);
                secrets.extend(s);
            }
            let text = if pretty {
                format!("{{\n  {}\n}}\n", parts.join(",\n  "))
            } else {
                format!("{{{}}}", parts.join(","))
            };
            (Format::Json, text, secrets)
        });
    prop_oneof![
        lines(yaml_shape().boxed(), Format::Yaml),
        json,
        lines(log_line().boxed(), Format::Log),
        lines(ps_line().boxed(), Format::ProcessList),
        lines(text_line().boxed(), Format::Text),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn planted_secrets_never_survive((format, text, secrets) in document()) {
        let (out, n) = redact_as(&text, format);
        for s in pieces(&secrets) {
            prop_assert!(!out.contains(s), "{:?} survived in {:?}:\n{}\n---\n{}", s, format, text, out);
        }
        for line in noise(format) {
            prop_assert!(out.lines().any(|l| l == *line), "{:?} lost:\n{}", line, out);
        }
        prop_assert_eq!(n, secrets.len(), "{:?}:\n{}\n---\n{}", format, text, out);
        let (again, m) = redact_as(&out, format);
        prop_assert_eq!((again.as_str(), m), (out.as_str(), 0));
    }
}
