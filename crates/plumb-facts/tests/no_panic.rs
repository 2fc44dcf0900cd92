//! Every parser takes arbitrary text (bundles come from anywhere) without panicking, and
//! redaction never leaves a secret value it recognised.

use plumb_facts::redact::redact;
use proptest::prelude::*;

/// Text made of fragments the parsers look for, shuffled with noise.
fn fragments() -> impl Strategy<Value = String> {
    let pieces = prop::sample::select(vec![
        "LISTEN",
        "UNCONN",
        "users:((\"",
        "pid=",
        ",fd=",
        ":",
        "[::]",
        "%lo",
        "=",
        " ",
        "\n",
        "\t",
        "Status: ",
        "Default: ",
        "(routed)",
        ",",
        "PID",
        "COMMAND",
        "CMD",
        " \\_ ",
        "-",
        "●",
        "loaded",
        "active",
        ".service",
        "stderr F ",
        "stdout P ",
        "2024-08-27T17:30:29.4Z",
        "E0827 17:30:29.414588 1 x.go:1] ",
        "dial tcp ",
        ": i/o timeout",
        "Chain '",
        "' does not exist",
        "token: ",
        "--token=",
        "Bearer ",
        "-----BEGIN RSA PRIVATE KEY-----",
        "-----END",
        "é",
        "\u{0}",
        "{\"lastUpdated\": \"",
        "\"}",
        "cni:",
        "  - ",
        "spec:",
        "containers:",
    ]);
    prop::collection::vec(
        prop_oneof![pieces.prop_map(str::to_string), "[a-z0-9./]{0,6}"],
        0..60,
    )
    .prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn parsers_never_panic(text in fragments()) {
        plumb_facts::run_every_parser(&text);
    }

    #[test]
    fn redaction_removes_recognised_secret_values(secret in "[A-Za-z0-9]{12,20}", noise in fragments()) {
        let text = format!("{noise}\ntoken: {secret}\nx --token={secret} y\nAuthorization: Bearer {secret}\n");
        let (r, n) = redact(&text);
        prop_assert!(n >= 1);
        prop_assert!(!r.contains(&secret), "{}", r);
    }
}
