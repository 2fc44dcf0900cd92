//! Compiles `bpf/sock_lb.bpf.c` (the kube-proxy-free lab's socket load balancer, see
//! src/socket_lb.rs) with clang into `$OUT_DIR/sock_lb.bpf.o` when clang and libbpf's
//! headers are present. Otherwise the crate is built with `--cfg plumb_no_bpf`:
//! `SocketLb::load` then says so. `PLUMB_CLANG` names another clang; `PLUMB_NO_BPF=1`
//! forces the fallback.

include!("../../build-support/bpf_clang.rs");

fn main() {
    println!("cargo::rustc-check-cfg=cfg(plumb_no_bpf)");
    if let Err(why) = compile_bpf("bpf/sock_lb.bpf.c", "sock_lb.bpf.o") {
        println!("cargo::rustc-cfg=plumb_no_bpf");
        println!("cargo::warning=plumb-lab built without the socket load balancer: {why}");
    }
}
