//! The drop program in the binary is exactly what its committed source compiles to,
//! from any checkout directory: the source is copied elsewhere and compiled again
//! with the flags of build-support/bpf_clang.rs, and the two objects must be equal
//! byte for byte (CI runs this, so a committed source and a shipped program cannot
//! drift apart).

use std::process::Command;

#[test]
fn the_drop_program_rebuilds_byte_for_byte() {
    let built = plumb_observe::drops::object();
    if built.is_empty() {
        plumb_testkit::skip("built without the eBPF drop program (no clang or libbpf-dev)");
        return;
    }
    let (arch, multiarch) = match std::env::consts::ARCH {
        "x86_64" => ("x86", "x86_64-linux-gnu"),
        "aarch64" => ("arm64", "aarch64-linux-gnu"),
        other => {
            plumb_testkit::skip(&format!("no BPF build for {other}"));
            return;
        }
    };
    let headers = ["/usr/include", "/usr/local/include"]
        .into_iter()
        .find(|d| std::path::Path::new(d).join("bpf/bpf_helpers.h").is_file())
        .expect("the build found libbpf's headers");
    let scratch = plumb_testkit::Scratch::new("observe-bpf");
    let dir = scratch.path().join("elsewhere");
    std::fs::create_dir_all(dir.join("bpf")).unwrap();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/bpf/drops.bpf.c"),
        dir.join("bpf/drops.bpf.c"),
    )
    .unwrap();
    // The flags of build-support/bpf_clang.rs, in its order.
    let clang = std::env::var("PLUMB_CLANG").unwrap_or_else(|_| "clang".into());
    let out = Command::new(clang)
        .current_dir(&dir)
        .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"])
        .arg("-fdebug-compilation-dir=.")
        .arg(format!("-D__TARGET_ARCH_{arch}"))
        .args(["-I", headers, "-I", &format!("{headers}/{multiarch}")])
        .args(["-c", "bpf/drops.bpf.c", "-o", "drops.bpf.o"])
        .output()
        .expect("clang runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let again = std::fs::read(dir.join("drops.bpf.o")).unwrap();
    assert!(
        again == built,
        "the object rebuilt from bpf/drops.bpf.c differs from the one built into plumb ({} vs {} bytes)",
        again.len(),
        built.len()
    );
}
