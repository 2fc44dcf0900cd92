//! Shared helpers for integration tests: locating the shared corpus.
#![allow(dead_code)]

use std::path::PathBuf;

/// `../shared/corpus` beside the workspace (or `$PLUMB_CORPUS`); `None` with a printed
/// reason when it is absent, so tests that need it skip instead of failing.
pub fn corpus_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("PLUMB_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus")
        });
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!(
            "SKIP: corpus not found at {} (set PLUMB_CORPUS)",
            dir.display()
        );
        None
    }
}

pub fn read(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}
