//! `plumb trace` command line: bounded on pathological rulesets, the exit status of
//! an incomplete trace, and `--ipsets` read like every other input.

use plumb_testkit::{Scratch, conditional_jump_chains};
use std::process::Command;

fn plumb(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(args)
        .output()
        .expect("run plumb");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const EMPTY: &str = "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\nCOMMIT\n*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n";

/// A 2.7 KB ruleset of 29 chains with two conditional jumps each, all on the same source
/// match: the condition is asked once per path, so the trace ends in two outcomes, with
/// small output and quickly.
#[test]
fn conditional_jump_chains_trace_small() {
    let dir = Scratch::new("trace-chains");
    dir.write(
        "rules",
        &conditional_jump_chains(29, |_, _| "-s 10.0.0.0/8".into()),
    );
    let rules = dir.path().join("rules");
    let started = std::time::Instant::now();
    let (code, out, err) = plumb(&[
        "trace",
        "--dst",
        "10.1.1.1:80",
        "--from",
        "external",
        "--ruleset",
        rules.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.len() < 16_000, "{} bytes", out.len());
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["outcomes"].as_array().unwrap().len(), 2);
    assert_eq!(v["incomplete"], serde_json::Value::Null);
    // Generous for a debug build on a shared machine.
    assert!(started.elapsed().as_secs() < 20);
}

/// An incomplete trace says INDETERMINATE and exits 1 (text and JSON); a complete
/// one exits 0 whatever its verdicts.
#[test]
fn incomplete_trace_says_indeterminate_and_exits_1() {
    let dir = Scratch::new("trace-limit");
    dir.write(
        "rules",
        &conditional_jump_chains(29, |_, _| "-m limit --limit 5/sec".into()),
    );
    let rules = dir.path().join("rules");
    let args = |extra: &[&'static str]| {
        let mut a = vec![
            "trace",
            "--dst",
            "10.1.1.1:80",
            "--from",
            "external",
            "--max-paths",
            "16",
            "--ruleset",
            rules.to_str().unwrap(),
        ];
        a.extend_from_slice(extra);
        a
    };
    let (code, out, err) = plumb(&args(&[]));
    assert_eq!(code, 1, "{err}");
    assert!(
        out.lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("INDETERMINATE: more than 16 paths")),
        "{out}"
    );
    assert!(out.contains("raise --max-paths"), "{out}");
    let (code, out, _) = plumb(&args(&["--json"]));
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["incomplete"], "more than 16 paths");
    assert_eq!(v["truncated"], true);
    assert!(v["outcomes"].as_array().unwrap().len() <= 17);
    // A DROP is an answer, not a problem: exit 0.
    dir.write("drop", &EMPTY.replace(":FORWARD ACCEPT", ":FORWARD DROP"));
    let drop = dir.path().join("drop");
    let (code, out, err) = plumb(&[
        "trace",
        "--dst",
        "10.1.1.1:80",
        "--from",
        "external",
        "--ruleset",
        drop.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("DROP"), "{out}");
    let (code, _, err) = plumb(&["trace", "--dst", "10.1.1.1:80", "--max-paths", "0"]);
    assert_eq!(code, 2, "{err}");
}

/// `--ipsets` is read like the ruleset: bounded by --max-input-size, text only, and an
/// unreadable line is named FILE:LINE.
#[test]
fn ipsets_input_is_bounded_and_errors_name_file_and_line() {
    let dir = Scratch::new("trace-ipsets");
    dir.write("rules", EMPTY);
    let rules = dir.path().join("rules");
    let trace = |ipsets: &std::path::Path, extra: &[&str]| {
        let mut a = vec![
            "trace",
            "--dst",
            "10.1.1.1:80",
            "--from",
            "external",
            "--src",
            "10.9.9.9",
            "--ruleset",
            rules.to_str().unwrap(),
            "--ipsets",
            ipsets.to_str().unwrap(),
        ];
        a.extend_from_slice(extra);
        plumb(&a)
    };
    dir.write("good", "create S hash:net family inet\nadd S 10.0.0.0/8\n");
    let (code, _, err) = trace(&dir.path().join("good"), &[]);
    assert_eq!(code, 0, "{err}");

    dir.write(
        "bad",
        "create S hash:net family inet\nadd S 10.0.0.0/8\nadd S not-an-address\n",
    );
    let bad = dir.path().join("bad");
    let (code, _, err) = trace(&bad, &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains(&format!("{}:3: unreadable element", bad.display())),
        "{err}"
    );

    let not_text = dir.path().join("latin1");
    std::fs::write(
        &not_text,
        b"create S hash:net family inet\nadd S 10.0.0.0/8 \xe9t\xe9\n",
    )
    .unwrap();
    let (code, _, err) = trace(&not_text, &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains(&format!("{}:2: not UTF-8", not_text.display())),
        "{err}"
    );

    // The size bound applies to --ipsets as to --ruleset.
    let (code, _, err) = trace(&dir.path().join("good"), &["--max-input-size", "40"]);
    assert_eq!(code, 2);
    assert!(err.contains("over the limit of 40 bytes"), "{err}");
    assert!(err.contains("--ipsets"), "{err}");
}
