//! Every secret shape collect must hide, as files under `tests/redaction/`: each planted
//! value carries a distinct `PLANTEDnn` marker and each text that must stay a `KEEPnn`
//! marker. No marker of a secret survives, every KEEP marker does, and the count is
//! exactly the number of planted secrets (so nothing else was counted or replaced).

use plumb_facts::redact::{Format, redact_as};
use std::collections::BTreeSet;
use std::path::PathBuf;

fn fixtures() -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/redaction");
    let mut v: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                plumb_testkit_read(&p),
            )
        })
        .collect();
    v.sort();
    v
}

fn plumb_testkit_read(p: &std::path::Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The format collect gives such a file (`.ps` stands for `ps` output).
fn format_of(name: &str) -> Format {
    if name.ends_with(".ps") {
        Format::ProcessList
    } else {
        Format::of_node_file(name)
    }
}

fn markers(text: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut from = 0;
    while let Some(i) = text[from..].find(prefix).map(|i| i + from) {
        let end = i + prefix.len() + 2;
        if let Some(m) = text.get(i..end) {
            out.insert(m.to_string());
        }
        from = i + prefix.len();
    }
    out
}

#[test]
fn no_planted_secret_survives_and_the_count_is_exact() {
    let all = fixtures();
    assert!(all.len() >= 12, "fixtures missing: {}", all.len());
    let mut failures = Vec::new();
    for (name, text) in &all {
        let planted = markers(text, "PLANTED");
        let keep = markers(text, "KEEP");
        assert!(!planted.is_empty(), "{name}: no planted secret");
        let (out, n) = redact_as(text, format_of(name));
        let survived = markers(&out, "PLANTED");
        let lost: Vec<_> = keep.difference(&markers(&out, "KEEP")).cloned().collect();
        if !survived.is_empty() || !lost.is_empty() || n != planted.len() {
            failures.push(format!(
                "{name} ({:?}): survived {survived:?}, lost {lost:?}, count {n} for {} planted\n{out}",
                format_of(name),
                planted.len()
            ));
        }
        // Idempotent.
        let (again, m) = redact_as(&out, format_of(name));
        assert_eq!(
            (again.as_str(), m),
            (out.as_str(), 0),
            "{name}: second redaction"
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n---\n"));
}

/// An inline PEM key inside a JSON string (one line, `\n` escapes) is redacted without
/// swallowing the lines after it.
#[test]
fn pem_inside_a_json_string_keeps_the_lines_after_it() {
    let text = plumb_testkit_read(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/redaction/pem-in-json.json"),
    );
    let (out, _) = redact_as(&text, Format::Json);
    assert_eq!(out.lines().count(), text.lines().count(), "{out}");
    assert!(out.contains(
        "\"key\": \"-----BEGIN RSA PRIVATE KEY-----\\nREDACTED\\n-----END RSA PRIVATE KEY-----\\n\""
    ), "{out}");
    assert!(
        out.contains("\"truncated\": \"-----BEGIN PRIVATE KEY-----\\nREDACTED\","),
        "{out}"
    );
}

/// Rulesets (iptables-save, `-S`, `-nvL` listings, nft text and JSON), conntrack and CNI
/// files and log samples of the shared corpus hold no secret: redaction must give them
/// back byte for byte (chain names such as KUBE-SVC-..., comments, addresses, sysctl
/// names, "token" in prose).
#[test]
fn corpus_rulesets_and_logs_come_back_byte_for_byte() {
    let Some(corpus) = plumb_testkit::corpus_dir() else {
        return;
    };
    let dirs = [
        "general-iptables-save",
        "kube-proxy-iptables",
        "kube-proxy-nftables",
        "iptables-upstream",
        "nftables-upstream",
        "firewalld-upstream-tests",
        "real-world/iptables-save",
        "real-world/iptables-list",
        "real-world/nft",
        "real-world/host-firewall",
        "conntrack",
        "other-cni",
        "logs",
    ];
    let mut checked = 0;
    let mut changed = Vec::new();
    for d in dirs {
        let mut stack = vec![corpus.join(d)];
        while let Some(p) = stack.pop() {
            if p.is_dir() {
                stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&p) else {
                continue;
            };
            let name = p.to_string_lossy();
            for format in [Format::Text, Format::of_node_file(&name)] {
                let (out, n) = redact_as(&text, format);
                checked += 1;
                if out != text || n != 0 {
                    changed.push(format!("{name} ({format:?}): {n} replaced"));
                }
            }
        }
    }
    assert!(checked > 1000, "only {checked} corpus files read");
    assert!(changed.is_empty(), "{}", changed.join("\n"));
}
