//! Fuzz target: arbitrary bytes as a support-bundle archive (plain tar, gzip, xz or zip,
//! told by magic bytes; read from a file as bundles are) extracted with small limits. It must never panic, never write beside the
//! destination (`..`, absolute paths, links), and leave only 0600 files, 0700 directories
//! and symbolic links in it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plumb_collect::archive::{Limits, extract_file};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn check_tree(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let m = std::fs::symlink_metadata(&p).unwrap();
        let mode = m.permissions().mode() & 0o7777;
        if m.is_dir() {
            assert_eq!(mode, 0o700, "{}", p.display());
            check_tree(&p);
        } else if m.is_file() {
            assert_eq!(mode, 0o600, "{}", p.display());
        } else {
            assert!(m.file_type().is_symlink(), "{} is {:?}", p.display(), m.file_type());
        }
    }
}

fuzz_target!(|data: &[u8]| {
    // dest sits two levels down so that `..` and `../..` would land in directories
    // this target can see.
    let base = std::env::temp_dir().join(format!("plumb-fuzz-bundle-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let dest = base.join("box/dest");
    std::fs::create_dir_all(&dest).unwrap();
    let limits = Limits {
        max_bytes: 1 << 20,
        max_members: 256,
    };
    let input = base.join("input");
    std::fs::write(&input, data).unwrap();
    let _ = extract_file(std::fs::File::open(&input).unwrap(), &dest, &limits);
    std::fs::remove_file(&input).unwrap();
    assert_eq!(names(&base), ["box"], "written beside the destination");
    assert_eq!(names(&base.join("box")), ["dest"], "written beside the destination");
    check_tree(&dest);
    std::fs::remove_dir_all(&base).unwrap();
});
