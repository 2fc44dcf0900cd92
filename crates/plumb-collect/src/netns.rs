//! Private network namespaces for privileged tests and the lab.
//!
//! A `Netns` is created empty (only a down loopback: no links to the host, no
//! routes), so nothing done inside it can reach the machine's network or firewall.
//! It is deleted on drop, including when a test panics.

use std::process::Command;

/// A named network namespace that exists until dropped.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

/// True when running as root with `ip` available: privileged tests can run.
pub fn can_create() -> bool {
    // SAFETY-free check: effective uid from /proc (no libc dependency).
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false);
    root && crate::runner::which("ip").is_some()
}

impl Netns {
    /// Creates `<prefix>-<pid>-<n>`; fails if `ip netns add` fails.
    pub fn create(prefix: &str) -> std::io::Result<Netns> {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let status = Command::new("ip").args(["netns", "add", &name]).status()?;
        if !status.success() {
            return Err(std::io::Error::other(format!(
                "ip netns add {name} failed: {status}"
            )));
        }
        let ns = Netns { name };
        // Loopback up so local sockets work; still no link to the outside.
        let _ = ns.exec("ip", &["link", "set", "lo", "up"], None);
        Ok(ns)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs a command inside the namespace, feeding `stdin`; returns (success, stdout,
    /// stderr). Bounded by [`EXEC_TIMEOUT`]: a hung command becomes an error.
    pub fn exec(
        &self,
        program: &str,
        args: &[&str],
        stdin: Option<&str>,
    ) -> std::io::Result<(bool, String, String)> {
        let out = crate::runner::run_with_input(
            program,
            args,
            Some(&self.name),
            stdin.map(str::as_bytes),
            EXEC_TIMEOUT,
        )
        .map_err(std::io::Error::other)?;
        Ok((
            out.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            out.stderr,
        ))
    }
}

/// Longest a command inside a test namespace may run (a 10k-service restore takes ~2 s).
pub const EXEC_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}
