//! `plumb man` prints a man page generated from the same definition as `--help`.

use std::process::Command;

#[test]
fn the_man_page_is_roff_and_lists_every_subcommand() {
    let out = Command::new(env!("CARGO_BIN_EXE_plumb"))
        .arg("man")
        .output()
        .expect("running plumb man");
    assert_eq!(out.status.code(), Some(0));
    let page = String::from_utf8(out.stdout).expect("UTF-8 roff");
    assert!(page.contains(".TH plumb 1"), "{page}");
    for sub in [
        "ruleset",
        "services",
        "check",
        "collect",
        "doctor",
        "lab",
        "trace",
        "watch",
        "completions",
        "man",
    ] {
        assert!(
            page.contains(&format!("plumb\\-{sub}")),
            "{sub} missing from the man page"
        );
    }
}
