//! The lab's actor executable for tests of this crate: the same busybox-style dispatch as
//! the plumb binary (`kube-proxy`, `venAgent`, ... chosen by the executable's name).

fn main() {
    match plumb_lab::actors::dispatch_by_name() {
        Some(code) => std::process::exit(code),
        None => {
            eprintln!(
                "plumb-lab-actor: run me under an actor's name (kube-proxy, kubelet, venAgent, install-cni, kube-apiserver)"
            );
            std::process::exit(2);
        }
    }
}
