//! Helpers shared by plumb's integration tests (a dev-dependency only):
//! - [`corpus_dir`]: the shared corpus (`../shared/corpus` beside the workspace, or
//!   `$PLUMB_CORPUS`), or a printed skip reason;
//! - [`Scratch`]: a private directory under `$TMPDIR`, removed on drop (panics included);
//! - [`privileged`]: whether privileged tests can run (root, and the named tools), with a
//!   printed reason when not;
//! - [`kube_proxy_nft_transaction`]: kube-proxy's nftables transaction from the corpus;
//! - [`conditional_jump_chains`]: a small ruleset whose conditional jumps multiply the
//!   paths a naive packet trace follows;
//! - [`bpf`]: real BPF maps created, filled and pinned on a private bpffs;
//! - [`heap`]: a counting global allocator for memory tests and examples.

#![deny(missing_docs)]

use std::path::{Path, PathBuf};

pub mod bpf;
pub mod heap;

/// The variable that turns every skip into a failure. CI sets it (`scripts/test-all`):
/// a CI that silently lost root, a tool or the corpus must go red, not green.
pub const REQUIRE_ALL: &str = "PLUMB_REQUIRE_ALL";

/// Skips the calling test with a printed reason — or, when `PLUMB_REQUIRE_ALL=1`, fails
/// it with that reason. Every privileged or corpus test that cannot run calls this and
/// returns.
pub fn skip(reason: &str) {
    if std::env::var(REQUIRE_ALL).is_ok_and(|v| v == "1") {
        panic!("test could not run and {REQUIRE_ALL}=1 forbids skipping: {reason}");
    }
    eprintln!("SKIP: {reason}");
}

/// The shared corpus, or `None` after [`skip`] said why.
pub fn corpus_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("PLUMB_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus")
        });
    if dir.is_dir() {
        Some(dir)
    } else {
        skip(&format!(
            "corpus not found at {} (set PLUMB_CORPUS)",
            dir.display()
        ));
        None
    }
}

/// The corpus path of kube-proxy's nftables-mode transaction (the upstream proxier
/// test's expected `nft -f` input, six services; Apache-2.0).
pub const KUBE_PROXY_NFT_TRANSACTION: &str =
    "kube-proxy-nftables/k8s-proxier-test/TestOverallNFTablesRules.expected.nft-transaction";

/// kube-proxy's nftables transaction as (the file's text, the same lines ordered for
/// `nft -f`), or `None` without the corpus. The upstream test sorts its expected lines,
/// so rules precede the chains and sets they name; kube-proxy itself declares first,
/// which `nft -f` needs.
pub fn kube_proxy_nft_transaction() -> Option<(String, String)> {
    let text = read(&corpus_dir()?.join(KUBE_PROXY_NFT_TRANSACTION));
    let declares = |l: &str| {
        ["add table", "add set", "add map", "add chain"]
            .iter()
            .any(|p| l.starts_with(p))
    };
    let ordered = text
        .lines()
        .filter(|l| declares(l))
        .chain(text.lines().filter(|l| !declares(l)))
        .map(|l| format!("{l}\n"))
        .collect();
    Some((text, ordered))
}

/// An iptables-save ruleset (nat and filter tables) whose FORWARD chain jumps to
/// `C0`, and each chain `Ci` of `chains` has two rules jumping to `Ci+1` (the last
/// chain's rules DROP), under the conditions `cond(i, 0)` and `cond(i, 1)`.
///
/// With conditions on something a trace is not told (`-s 10.0.0.0/8` for a packet
/// whose source is unknown), a trace that forks at each rule and never decides a
/// condition twice follows a number of paths exponential in `chains`: 29 chains
/// (about 2.7 KB) once took a trace to 4.4 GB and 617 MB of output.
pub fn conditional_jump_chains(chains: usize, cond: impl Fn(usize, usize) -> String) -> String {
    let mut s = String::from(
        "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\nCOMMIT\n\
         *filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n",
    );
    for i in 0..chains {
        s.push_str(&format!(":C{i} - [0:0]\n"));
    }
    if chains > 0 {
        s.push_str("-A FORWARD -j C0\n");
    }
    for i in 0..chains {
        let next = if i + 1 < chains {
            format!("C{}", i + 1)
        } else {
            "DROP".to_string()
        };
        for k in 0..2 {
            s.push_str(&format!("-A C{i} {} -j {next}\n", cond(i, k)));
        }
    }
    s.push_str("COMMIT\n");
    s
}

/// Reads a file the test needs, panicking with its path.
pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Runs `program` with `args`, `input` written to its stdin from another thread (the
/// program may stop reading early: a failed write is expected then), and waits for
/// its output.
pub fn run_with_stdin(program: &str, args: &[&str], input: &[u8]) -> std::process::Output {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("waiting for {program}: {e}"));
    writer.join().expect("stdin writer");
    out
}

/// The file named by an example's first argument, read whole; exits 2 with `usage`
/// when there is none, or with the error when it cannot be read.
pub fn example_input(usage: &str) -> (String, Vec<u8>) {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: {usage}");
        std::process::exit(2);
    };
    match std::fs::read(&path) {
        Ok(bytes) => (path, bytes),
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::exit(2);
        }
    }
}

/// A scratch directory removed with its contents on drop.
pub struct Scratch(PathBuf);

impl Scratch {
    /// `$TMPDIR/plumb-t-<tag>-<pid>-<n>`, created empty.
    pub fn new(tag: &str) -> Scratch {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "plumb-t-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap_or_else(|e| panic!("creating {}: {e}", p.display()));
        Scratch(p)
    }

    /// The directory (removed when the `Scratch` is dropped).
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `text` at `rel` (parents created).
    pub fn write(&self, rel: &str, text: &str) {
        let p = self.0.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)
                .unwrap_or_else(|e| panic!("creating {}: {e}", parent.display()));
        }
        std::fs::write(&p, text).unwrap_or_else(|e| panic!("writing {}: {e}", p.display()));
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// True when running as root with every tool in `tools` on PATH (or in /usr/sbin, /sbin);
/// otherwise calls [`skip`] with the reason and returns false.
pub fn privileged(tools: &[&str]) -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1));
    if euid != Some("0") {
        skip("needs root (network namespaces, netfilter)");
        return false;
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = |t: &str| {
        std::env::split_paths(&path)
            .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
            .any(|d| d.join(t).is_file())
    };
    if let Some(t) = tools.iter().find(|t| !found(t)) {
        skip(&format!("{t} not installed"));
        return false;
    }
    true
}
