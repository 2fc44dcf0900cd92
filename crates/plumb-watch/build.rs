//! Compiles `bpf/writer.bpf.c` (the batch-send probe, see src/writer_probe.rs) with
//! clang into `$OUT_DIR/writer.bpf.o` when clang and libbpf's headers
//! (`bpf/bpf_helpers.h`, Debian: libbpf-dev) are present. Otherwise the crate is built
//! with `--cfg plumb_no_bpf`: `WriterProbe::attach` then says so, and nothing else
//! changes. `PLUMB_CLANG` names another clang; `PLUMB_NO_BPF=1` forces the fallback.

include!("../../build-support/bpf_clang.rs");

fn main() {
    println!("cargo::rustc-check-cfg=cfg(plumb_no_bpf)");
    if let Err(why) = compile_bpf("bpf/writer.bpf.c", "writer.bpf.o") {
        println!("cargo::rustc-cfg=plumb_no_bpf");
        println!("cargo::warning=plumb-watch built without the eBPF writer probe: {why}");
    }
}
