//! plumb's own text — every string in the binary (output, --help, explanations) and
//! the user docs — describes the incidents in plumb's words: never by the file names of
//! the write-ups it was built from, and never by work periods or issue numbers, which
//! users cannot know.

use std::path::Path;

/// `needle` followed by an ASCII digit, anywhere in `hay`.
fn followed_by_digit(hay: &[u8], needle: &[u8]) -> Vec<String> {
    hay.windows(needle.len() + 1)
        .enumerate()
        .filter(|(_, w)| {
            w[..needle.len()].eq_ignore_ascii_case(needle) && w[needle.len()].is_ascii_digit()
        })
        .map(|(i, _)| {
            let end = (i + needle.len() + 40).min(hay.len());
            String::from_utf8_lossy(&hay[i..end]).replace('\n', " ")
        })
        .collect()
}

/// What must not appear: the write-ups by number (`seed 000`, `seed000`: their file
/// names start with three digits from 0), numbered work periods and issues. (Plain
/// `seed` + digit is not looked for: mangled symbols such as `..._seed17h...` are.)
fn history_mentions(text: &[u8]) -> Vec<String> {
    let mut found: Vec<String> = ["seed ", "session ", "issue ", "issue #"]
        .iter()
        .flat_map(|n| followed_by_digit(text, n.as_bytes()))
        .collect();
    found.extend(followed_by_digit(text, b"seed0"));
    found
}

#[test]
fn the_binary_never_mentions_write_ups_work_periods_or_issues() {
    let bin = std::fs::read(env!("CARGO_BIN_EXE_plumb")).expect("reading the plumb binary");
    let found = history_mentions(&bin);
    assert!(
        found.is_empty(),
        "history in the binary's strings: {found:?}"
    );
}

#[test]
fn the_user_docs_never_mention_write_ups_work_periods_or_issues() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let docs = [
        "README.md",
        "ARCHITECTURE.md",
        "docs/security.md",
        "docs/lab.md",
        "docs/bundles.md",
        "docs/conformance.md",
        "docs/benchmarks.md",
    ];
    for doc in docs {
        let text = std::fs::read(root.join(doc)).unwrap_or_else(|e| panic!("{doc}: {e}"));
        let found = history_mentions(&text);
        assert!(found.is_empty(), "{doc}: {found:?}");
    }
}

#[test]
fn the_check_catches_what_it_is_for() {
    assert_eq!(history_mentions(b"as in seed 000, a").len(), 1);
    assert_eq!(history_mentions(b"see Session 6").len(), 1);
    assert_eq!(history_mentions(b"(issue 5)").len(), 1);
    assert_eq!(history_mentions(b"Tree::new(\"seed000\")").len(), 1);
    assert!(history_mentions(b"a seeded random session id; an issue with x").is_empty());
}
