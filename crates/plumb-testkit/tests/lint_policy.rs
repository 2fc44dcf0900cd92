//! Every crate of the workspace denies missing docs on its public items: the attribute
//! sits at the top of each crate root (`src/lib.rs`, or `src/main.rs` for the binary).
//! A workspace-wide `[lints]` table would also apply to tests and benches, whose
//! macro-generated items cannot carry docs, so the rule is checked here instead.

use std::path::Path;

#[test]
fn every_crate_root_denies_missing_docs() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("crates/");
    let mut roots = Vec::new();
    for entry in std::fs::read_dir(crates).expect("read crates/") {
        let dir = entry.expect("entry").path();
        let root = ["src/lib.rs", "src/main.rs"]
            .iter()
            .map(|f| dir.join(f))
            .find(|p| p.is_file());
        if let Some(root) = root {
            roots.push(root);
        }
    }
    assert!(
        roots.len() >= 10,
        "expected the workspace's crates, got {roots:?}"
    );
    let missing: Vec<String> = roots
        .iter()
        .filter(|r| {
            !std::fs::read_to_string(r)
                .expect("read crate root")
                .lines()
                .any(|l| l.trim() == "#![deny(missing_docs)]")
        })
        .map(|r| r.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "crate roots without #![deny(missing_docs)]: {missing:?}"
    );
}
