//! Compiles `bpf/writer.bpf.c` (the batch-send probe, see src/writer_probe.rs) with
//! clang into `$OUT_DIR/writer.bpf.o` when clang and libbpf's headers
//! (`bpf/bpf_helpers.h`, Debian: libbpf-dev) are present. Otherwise the crate is built
//! with `--cfg plumb_no_bpf`: `WriterProbe::attach` then says so, and nothing else
//! changes. `PLUMB_CLANG` names another clang; `PLUMB_NO_BPF=1` forces the fallback.

use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCE: &str = "bpf/writer.bpf.c";

fn main() {
    println!("cargo::rustc-check-cfg=cfg(plumb_no_bpf)");
    println!("cargo::rerun-if-changed={SOURCE}");
    println!("cargo::rerun-if-env-changed=PLUMB_CLANG");
    println!("cargo::rerun-if-env-changed=PLUMB_NO_BPF");
    // Installing clang or libbpf-dev must take effect without `cargo clean`: a watched
    // path that is missing makes cargo rerun this script on every build, until both
    // are there (then only their upgrades do).
    if std::env::var_os("PLUMB_CLANG").is_none() {
        println!("cargo::rerun-if-changed=/usr/bin/clang");
    }
    if let Err(why) = build() {
        println!("cargo::rustc-cfg=plumb_no_bpf");
        println!("cargo::warning=plumb-watch built without the eBPF writer probe: {why}");
    }
}

fn build() -> Result<(), String> {
    if std::env::var_os("PLUMB_NO_BPF").is_some_and(|v| v == "1") {
        return Err("PLUMB_NO_BPF=1".into());
    }
    let arch = match std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64") => "x86",
        Ok("aarch64") => "arm64",
        Ok(other) => return Err(format!("no BPF build for target arch {other}")),
        Err(_) => return Err("CARGO_CFG_TARGET_ARCH not set".into()),
    };
    let clang = std::env::var("PLUMB_CLANG").unwrap_or_else(|_| "clang".into());
    if Command::new(&clang).arg("--version").output().is_err() {
        return Err(format!(
            "{clang} not found (apt-get install clang libbpf-dev)"
        ));
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
    let out =
        PathBuf::from(std::env::var_os("OUT_DIR").ok_or("OUT_DIR not set")?).join("writer.bpf.o");
    let result = Command::new(&clang)
        .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"])
        .arg(format!("-D__TARGET_ARCH_{arch}"))
        .arg("-I")
        .arg(headers)
        .args(["-c", SOURCE, "-o"])
        .arg(&out)
        .output()
        .map_err(|e| format!("running {clang}: {e}"))?;
    if !result.status.success() {
        // clang and the headers are there: a failure is a bug in the C source, which
        // must not turn silently into a build without the probe.
        panic!(
            "{clang} failed to compile {SOURCE}:\n{}",
            String::from_utf8_lossy(&result.stderr)
        );
    }
    Ok(())
}
