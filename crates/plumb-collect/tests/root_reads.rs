//! `--root DIR`: node files are read as if DIR were `/`. A symlink never leads out of DIR
//! (absolute targets mean DIR/target, `..` stops at DIR), whether it names a file or a
//! directory on the way; FIFOs and devices are refused without being opened (a FIFO
//! would block the read forever).

use plumb_collect::node::{LiveNode, NodeSource};
use plumb_os::runner::SystemRunner;
use plumb_testkit::Scratch;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

struct Tree {
    _scratch: Scratch,
    root: std::path::PathBuf,
    outside: std::path::PathBuf,
}

fn tree() -> Tree {
    let scratch = Scratch::new("root-reads");
    scratch.write("outside/shadow", "root:OUTSIDE-SECRET:19000::::::\n");
    scratch.write("node/etc/shadow-like", "INSIDE\n");
    scratch.write("node/etc/rancher/rke2/config.yaml", "cni: canal\n");
    let root = scratch.path().join("node");
    let outside = scratch.path().join("outside");
    let link = |target: &Path, at: &str| {
        let p = root.join(at);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        symlink(target, p).unwrap();
    };
    // Absolute target outside the root, by its real path.
    link(&outside.join("shadow"), "etc/abs-escape");
    // Relative target climbing above the root.
    link(
        Path::new("../../../../../../outside/shadow"),
        "etc/rancher/rel-escape",
    );
    // Absolute target inside the root's view.
    link(Path::new("/etc/shadow-like"), "etc/rancher/rke2/in-root");
    // A directory on the way that points outside.
    link(&outside, "etc/cni");
    Tree {
        _scratch: scratch,
        root,
        outside,
    }
}

fn node(root: &Path) -> LiveNode<SystemRunner> {
    LiveNode::new(SystemRunner, None, root)
}

#[test]
fn symlinks_never_lead_out_of_the_root() {
    let t = tree();
    let n = node(&t.root);
    assert_eq!(
        n.file("/etc/rancher/rke2/config.yaml").unwrap().text(),
        "cni: canal\n"
    );
    for path in [
        "/etc/abs-escape",
        "/etc/rancher/rel-escape",
        "/etc/cni/shadow",
        "/../outside/shadow",
    ] {
        match n.file(path) {
            Ok(c) => panic!("{path} read {:?} from outside the root", c.text()),
            Err(e) => assert!(e.contains("does not exist"), "{path}: {e}"),
        }
        assert!(!n.exists(path), "{path}");
    }
    assert!(n.dir("/etc/cni").is_err());
    // An absolute symlink means the same path under the root.
    assert_eq!(
        n.file("/etc/rancher/rke2/in-root").unwrap().text(),
        "INSIDE\n"
    );
    // The files the links name are really there, outside.
    assert!(t.outside.join("shadow").is_file());
}

#[test]
fn fifos_and_devices_are_refused_without_blocking() {
    let t = tree();
    let fifo = t.root.join("var/log/pods/ns_pod_uid/c/0.log");
    std::fs::create_dir_all(fifo.parent().unwrap()).unwrap();
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    symlink("/dev/zero", t.root.join("etc/zero")).unwrap();
    let (tx, rx) = mpsc::channel();
    let root = t.root.clone();
    std::thread::spawn(move || {
        let n = node(&root);
        let fifo = n.file("/var/log/pods/ns_pod_uid/c/0.log");
        // /dev/zero under the root does not exist; the host's is never reached.
        let zero = n.file("/etc/zero");
        let _ = tx.send((fifo.map(|c| c.bytes.len()), zero.map(|c| c.bytes.len())));
    });
    let (fifo, zero) = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("reading a FIFO under the root blocked");
    let e = fifo.unwrap_err();
    assert!(e.contains("FIFO"), "{e}");
    assert!(zero.unwrap_err().contains("does not exist"));
    // A device is refused, not opened.
    let n = node(Path::new("/"));
    let e = n.file("/dev/null").unwrap_err();
    assert!(e.contains("character device"), "{e}");
}

#[test]
fn the_live_machine_reads_through_the_same_door() {
    let n = node(Path::new("/"));
    // /proc/self is a symlink to the pid: resolved the way the kernel would.
    assert!(
        n.file("/proc/self/status")
            .unwrap()
            .text()
            .contains("Name:")
    );
    assert!(n.exists("/proc/self"));
    assert!(n.dir("/proc/self/fd").unwrap().len() >= 3);
}
