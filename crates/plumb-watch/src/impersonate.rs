//! Running iptables under another process name — for privileged tests and the lab.
//!
//! The kernel names a writer by its comm (NEWGEN, audit), which is the basename of
//! the executable. Copying the `xtables-nft-multi` (or `-legacy-multi`) binary to a
//! private directory as `venAgent` or `kube-proxy` and running `venAgent iptables-nft
//! ...` (the multi binary falls back to its first argument for the applet) gives a
//! real process with that comm, pid and exe making real changes — exactly what
//! plumb must attribute. Everything runs inside a namespace given by name; the
//! directory is removed on drop.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A private directory of renamed iptables binaries.
#[derive(Debug)]
pub struct Impersonator {
    dir: PathBuf,
}

/// What one impersonated command did.
#[derive(Debug, Clone)]
pub struct Ran {
    /// The process's pid: the writer the kernel names (`ip netns exec` execs in place).
    pub pid: u32,
    /// The renamed binary it ran.
    pub exe: PathBuf,
    /// Whether it exited with code 0 (a run past its deadline is an error instead).
    pub success: bool,
    /// What it printed, lossily decoded.
    pub stdout: String,
    /// What it printed on standard error, lossily decoded.
    pub stderr: String,
}

/// Which multi-call binary to copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// `xtables-nft-multi`: iptables-nft, changes through nf_tables.
    Nft,
    /// `xtables-legacy-multi`: iptables-legacy, changes through x_tables.
    Legacy,
}

impl Impersonator {
    /// Creates an empty private directory under the temp dir.
    pub fn new() -> io::Result<Impersonator> {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "plumb-actors-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)?;
        Ok(Impersonator { dir })
    }

    /// The directory holding the renamed binaries.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Installs the multi binary as `name` (e.g. `venAgent`); returns its path.
    pub fn install(&self, name: &str, flavor: Flavor) -> io::Result<PathBuf> {
        let multi = match flavor {
            Flavor::Nft => "xtables-nft-multi",
            Flavor::Legacy => "xtables-legacy-multi",
        };
        let src = plumb_os::runner::which(multi)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{multi} not found")))?;
        let dst = self.dir.join(name);
        if !dst.exists() {
            std::fs::copy(&src, &dst)?;
        }
        Ok(dst)
    }

    /// Runs `name applet args...` inside `netns` (via `ip netns exec`, which execs in
    /// place, so the returned pid is the writer's), feeding `stdin`, with a deadline.
    pub fn run(
        &self,
        netns: &str,
        name: &str,
        applet: &str,
        args: &[&str],
        stdin: Option<&str>,
        timeout: Duration,
    ) -> io::Result<Ran> {
        let exe = self.dir.join(name);
        if !exe.exists() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{name} not installed"),
            ));
        }
        let mut child = Command::new("ip")
            .args(["netns", "exec", netns])
            .arg(&exe)
            .arg(applet)
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let pid = child.id();
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            let input = input.to_string();
            std::thread::spawn(move || {
                use std::io::Write;
                let _ = pipe.write_all(input.as_bytes());
            });
        }
        let mut out = child.stdout.take();
        let mut err = child.stderr.take();
        let out_t = std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(o) = out.as_mut() {
                let _ = io::Read::read_to_string(o, &mut s);
            }
            s
        });
        let err_t = std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(e) = err.as_mut() {
                let _ = io::Read::read_to_string(e, &mut s);
            }
            s
        });
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(s) = child.try_wait()? {
                break s;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{name} {applet} {args:?} did not finish within {timeout:?}"),
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        Ok(Ran {
            pid,
            exe,
            success: status.success(),
            stdout: out_t.join().unwrap_or_default(),
            stderr: err_t.join().unwrap_or_default(),
        })
    }
}

impl Drop for Impersonator {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A security agent's "known good" ruleset: the tables as they were before
/// Kubernetes, which reverting agents restore (flushing everything else in them).
pub fn pre_kubernetes_payload(tables: &[&str]) -> String {
    let mut s = String::new();
    for t in tables {
        let chains: &[&str] = match *t {
            "nat" => &["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"],
            "mangle" => &["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"],
            "raw" => &["PREROUTING", "OUTPUT"],
            _ => &["INPUT", "FORWARD", "OUTPUT"],
        };
        s.push_str(&format!("*{t}\n"));
        for c in chains {
            s.push_str(&format!(":{c} ACCEPT [0:0]\n"));
        }
        s.push_str("COMMIT\n");
    }
    s
}
