//! A ruleset whose rule texts are packed word by word (`Ruleset::pack_texts`) reads as
//! the ruleset it was packed from: on every iptables-save dump of the corpus, the
//! model's JSON (texts, locations, counters), its canonical print, the recovered
//! service maps and `plumb check`'s findings are the same, byte for byte. Service
//! recovery and the checks read the packed texts without keeping them read back.

mod common;

use plumb_check::{CheckInput, Origin, run};
use plumb_kubeproxy::recover::recover;
use plumb_ruleset::format::{ParseOptions, parse_bytes};
use plumb_ruleset::{Ruleset, iptables::canonical};

/// What the commands print of a ruleset, as one string per view.
fn views(rs: &Ruleset) -> [String; 4] {
    let findings = run(CheckInput::new(rs, Origin::File("dump".into()), false));
    [
        serde_json::to_string(rs).expect("model JSON"),
        canonical::save_text(rs, Default::default()),
        serde_json::to_string(&recover(rs)).expect("service maps JSON"),
        serde_json::to_string(&findings).expect("findings JSON"),
    ]
}

#[test]
fn packed_rulesets_read_as_the_rulesets_they_were_packed_from() {
    let Some(corpus) = common::corpus_dir() else {
        return;
    };
    let mut files = Vec::new();
    let mut dirs: Vec<_> = [
        "kube-proxy-iptables",
        "general-iptables-save",
        "real-world/iptables-save",
        "other-cni",
    ]
    .iter()
    .map(|d| corpus.join(d))
    .collect();
    while let Some(dir) = dirs.pop() {
        for path in std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
        {
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    // And a generated kube-proxy table: 300 services of 4 endpoints.
    let generated = plumb_kubeproxy::generated_save_text(300, 4).expect("generate");
    let inputs = files
        .iter()
        .map(|p| {
            (
                p.display().to_string(),
                std::fs::read(p).expect("read corpus file"),
            )
        })
        .chain([("generated".to_string(), generated.into_bytes())]);
    let (mut dumps, mut packed_rules, mut pieced) = (0, 0, 0);
    for (path, bytes) in inputs {
        let Ok(parsed) = parse_bytes(&bytes, &ParseOptions::default()) else {
            continue;
        };
        if let Ok(text) = std::str::from_utf8(&bytes) {
            read_in_pieces_as_whole(&path, text, &parsed.ruleset, &mut pieced);
        }
        let mut packed = parsed.ruleset.clone();
        let n = packed.pack_texts();
        if n == 0 {
            continue;
        }
        dumps += 1;
        packed_rules += n;
        // Recovering the service maps and writing them out reads packed texts without
        // keeping them read back (what makes packing save memory).
        let source = packed
            .tables
            .iter()
            .flat_map(|t| &t.chains)
            .flat_map(|c| &c.rules)
            .find(|r| r.text.is_packed())
            .map(|r| r.text.source().clone())
            .expect("a packed rule");
        serde_json::to_string(&recover(&packed)).expect("service maps JSON");
        assert_eq!(
            source.strides_read_back(),
            0,
            "{path}: recovery kept packed texts read back"
        );
        // And so do the checks (what `plumb check` runs on a dump read in pieces).
        run(CheckInput::new(&packed, Origin::File("dump".into()), false));
        assert_eq!(
            source.strides_read_back(),
            0,
            "{path}: the checks kept packed texts read back"
        );
        let names = ["model JSON", "canonical print", "service maps", "findings"];
        for ((want, got), view) in views(&parsed.ruleset).iter().zip(views(&packed)).zip(names) {
            assert!(
                *want == got,
                "{path}: the {view} of the packed ruleset differs"
            );
        }
    }
    // The corpus holds dozens of dumps with thousands of rules: a packing that
    // silently packs nothing must not pass.
    assert!(
        dumps >= 40 && packed_rules >= 5_000 && pieced >= 30,
        "{dumps} dumps, {packed_rules} rules packed, {pieced} read in pieces"
    );
}

/// `text` in pieces of at least `size` bytes, each ending at a line's end (the last
/// as the text ends).
fn pieces(text: &str, size: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let cut = match rest.get(size.min(rest.len())..).and_then(|r| r.find('\n')) {
            Some(i) => size + i + 1,
            None => rest.len(),
        };
        out.push(rest[..cut].to_string());
        rest = &rest[cut..];
    }
    out
}

/// A dump read in pieces of a few lines (and of one line more than the whole) reads as
/// the dump read whole, its rule texts packed piece by piece.
fn read_in_pieces_as_whole(path: &str, text: &str, whole: &Ruleset, pieced: &mut usize) {
    let options = ParseOptions::default();
    if !plumb_ruleset::format::reads_in_pieces(text, &options) {
        return;
    }
    let headers: String = text
        .lines()
        .filter(|l| l.starts_with("# Generated by "))
        .map(|l| format!("{l}\n"))
        .collect();
    let want = views(whole);
    for size in [1, 300, 4096] {
        let mut parts = pieces(text, size).into_iter();
        let first = parts.next().unwrap_or_default();
        let read = plumb_ruleset::format::parse_pieces(first, parts, &headers, &options);
        let got = views(&read.ruleset);
        for (i, view) in ["model JSON", "canonical print", "service maps", "findings"]
            .iter()
            .enumerate()
        {
            if want[i] != got[i] {
                let at = want[i]
                    .bytes()
                    .zip(got[i].bytes())
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
                panic!(
                    "{path} read in pieces of {size} bytes: the {view} differs at byte {at}: {:?} against {:?}",
                    &want[i][at.saturating_sub(80)..(at + 80).min(want[i].len())],
                    &got[i][at.saturating_sub(80)..(at + 80).min(got[i].len())],
                );
            }
        }
    }
    *pieced += 1;
}
