//! Compiles `bpf/drops.bpf.c` (the kfree_skb drop program, see src/drops.rs) with
//! clang into `$OUT_DIR/drops.bpf.o` when clang and libbpf's headers are present.
//! Otherwise the crate is built with `--cfg plumb_no_bpf`: `DropProbe::attach` then
//! says so and `plumb observe` reports flows only. `PLUMB_CLANG` names another clang;
//! `PLUMB_NO_BPF=1` forces the fallback.

include!("../../build-support/bpf_clang.rs");

fn main() {
    println!("cargo::rustc-check-cfg=cfg(plumb_no_bpf)");
    if let Err(why) = compile_bpf("bpf/drops.bpf.c", "drops.bpf.o") {
        println!("cargo::rustc-cfg=plumb_no_bpf");
        println!("cargo::warning=plumb-observe built without the eBPF drop program: {why}");
    }
}
