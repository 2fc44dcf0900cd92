// Shared by the build scripts that compile eBPF C (plumb-watch's writer probe,
// plumb-lab's socket load balancer): `include!`d, so each keeps its own `main`.

/// Compiles `source` (relative to the crate) with clang `-target bpf` into
/// `$OUT_DIR/<output>`. `Err` with why when clang or libbpf's headers are missing or
/// `PLUMB_NO_BPF=1` (the crate then builds without the program); a compile error in
/// the C source panics, since it must not turn silently into a build without it.
/// `PLUMB_CLANG` names another clang.
fn compile_bpf(source: &str, output: &str) -> Result<(), String> {
    use std::path::{Path, PathBuf};
    use std::process::Command;
    println!("cargo::rerun-if-changed={source}");
    println!("cargo::rerun-if-env-changed=PLUMB_CLANG");
    println!("cargo::rerun-if-env-changed=PLUMB_NO_BPF");
    // Installing clang or libbpf-dev must take effect without `cargo clean`: a watched
    // path that is missing makes cargo rerun this script on every build, until both
    // are there (then only their upgrades do).
    if std::env::var_os("PLUMB_CLANG").is_none() {
        println!("cargo::rerun-if-changed=/usr/bin/clang");
    }
    if std::env::var_os("PLUMB_NO_BPF").is_some_and(|v| v == "1") {
        return Err("PLUMB_NO_BPF=1".into());
    }
    let (arch, multiarch) = match std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64") => ("x86", "x86_64-linux-gnu"),
        Ok("aarch64") => ("arm64", "aarch64-linux-gnu"),
        Ok(other) => return Err(format!("no BPF build for target arch {other}")),
        Err(_) => return Err("CARGO_CFG_TARGET_ARCH not set".into()),
    };
    let clang = std::env::var("PLUMB_CLANG").unwrap_or_else(|_| "clang".into());
    if Command::new(&clang).arg("--version").output().is_err() {
        return Err(format!("{clang} not found (apt-get install clang libbpf-dev)"));
    }
    let headers = ["/usr/include", "/usr/local/include"]
        .iter()
        .map(Path::new)
        .find(|d| d.join("bpf/bpf_helpers.h").is_file());
    let Some(headers) = headers else {
        println!("cargo::rerun-if-changed=/usr/include/bpf/bpf_helpers.h");
        return Err(
            "libbpf headers (bpf/bpf_helpers.h) not found (apt-get install libbpf-dev)".into(),
        );
    };
    println!(
        "cargo::rerun-if-changed={}",
        headers.join("bpf/bpf_helpers.h").display()
    );
    let out = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("OUT_DIR not set")?).join(output);
    let result = Command::new(&clang)
        .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"])
        // The object does not depend on where the checkout is (DWARF's comp_dir).
        .arg("-fdebug-compilation-dir=.")
        .arg(format!("-D__TARGET_ARCH_{arch}"))
        .arg("-I")
        .arg(headers)
        // <linux/bpf.h> includes <asm/types.h>, which Debian keeps per architecture.
        .arg("-I")
        .arg(headers.join(multiarch))
        .args(["-c", source, "-o"])
        .arg(&out)
        .output()
        .map_err(|e| format!("running {clang}: {e}"))?;
    if !result.status.success() {
        panic!(
            "{clang} failed to compile {source}:\n{}",
            String::from_utf8_lossy(&result.stderr)
        );
    }
    Ok(())
}
