//! `plumb explain`: every finding id with the command that reports it; one id in JSON;
//! an unknown id is a usage error that lists the known ones (which shell completions
//! offer too).

use std::process::Command;

fn plumb(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("running plumb")
}

#[test]
fn one_id_in_json_and_every_id_in_text() {
    let out = plumb(&["explain", "table-flushed", "-o", "json"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v.as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(v[0]["id"], "table-flushed");
    assert_eq!(v[0]["command"], "check");

    let all = String::from_utf8(plumb(&["explain"]).stdout).unwrap();
    for id in [
        "dangling-reference",
        "docker-bypasses-ufw",
        "security-agent-tamper",
    ] {
        assert!(
            all.lines().any(|l| l.starts_with(id)),
            "{id} missing:\n{all}"
        );
    }
}

#[test]
fn an_unknown_id_is_a_usage_error_and_completions_know_the_ids() {
    let out = plumb(&["explain", "no-such-finding"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("multiple-cnis"));
    let bash = String::from_utf8(plumb(&["completions", "bash"]).stdout).unwrap();
    assert!(bash.contains("kube-proxy-canary-missing"));
}
