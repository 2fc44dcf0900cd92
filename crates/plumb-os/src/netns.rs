//! Network namespaces: naming one, entering one for exactly one operation, and creating
//! private ones for tests and the lab.
//!
//! One naming rule for every command: a bare name is an `ip netns` handle under
//! `/run/netns` (`/var/run` is a symlink to `/run`), anything with a `/` is a path to a
//! namespace file (`/proc/PID/ns/net`, a bind mount); `.`, `..` and the empty name are
//! refused.
//!
//! plumb's own threads never change namespace. Work inside one runs either on a
//! short-lived thread that joins it and ends ([`on_thread`]; sockets keep the namespace
//! they were created in), or in a child process between fork and exec ([`command_in`]).

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where `ip netns add NAME` keeps its handles.
pub const NETNS_DIR: &str = "/run/netns";

/// The namespace file of `netns`: `/run/netns/NAME` for a name, the path itself for a
/// path. Refuses names that are empty, `.` or `..`.
pub fn path(netns: &str) -> io::Result<PathBuf> {
    if netns.contains('/') {
        return Ok(PathBuf::from(netns));
    }
    if netns.is_empty() || netns == "." || netns == ".." {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad network namespace name {netns:?}"),
        ));
    }
    Ok(Path::new(NETNS_DIR).join(netns))
}

/// Opens the namespace file of `netns`, saying which file could not be opened.
pub fn open(netns: &str) -> io::Result<File> {
    let p = path(netns)?;
    File::open(&p).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("network namespace {netns} ({}): {e}", p.display()),
        )
    })
}

/// The inode of a namespace file (`/proc/PID/ns/net`, `/run/netns/NAME`): the id that
/// tells namespaces apart.
pub fn inode(path: &Path) -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata(path)?.ino())
}

/// The inode of the namespace `netns` names.
pub fn inode_of(netns: &str) -> io::Result<u64> {
    inode(&path(netns)?)
}

/// The inode of the calling thread's network namespace.
pub fn current_inode() -> io::Result<u64> {
    inode(Path::new("/proc/thread-self/ns/net"))
}

fn setns(fd: RawFd) -> io::Result<()> {
    // SAFETY: a plain syscall on an open namespace descriptor; CLONE_NEWNET limits it to
    // the calling thread's network namespace.
    let rc = unsafe { libc::setns(fd, libc::CLONE_NEWNET) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Runs `f` inside `netns` (or right here when `None`) on a thread that joins the
/// namespace and ends with `f`, and returns its result.
pub fn on_thread<T: Send>(
    netns: Option<&str>,
    f: impl FnOnce() -> io::Result<T> + Send,
) -> io::Result<T> {
    let Some(netns) = netns else {
        return f();
    };
    let target = open(netns)?;
    std::thread::scope(|s| {
        s.spawn(move || {
            setns(target.as_raw_fd())
                .map_err(|e| io::Error::new(e.kind(), format!("entering {netns}: {e}")))?;
            f()
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("namespace thread panicked")))
    })
}

/// Makes `cmd` run inside `netns`, optionally in a new session (so a Ctrl-C aimed at the
/// terminal's process group does not reach it). The namespace is opened now, so a
/// missing one is reported here rather than as an exec failure.
pub fn command_in(cmd: &mut Command, netns: &str, new_session: bool) -> io::Result<()> {
    let ns = open(netns)?;
    let fd = ns.as_raw_fd();
    // SAFETY: only async-signal-safe calls (setns, setsid) between fork and exec; `ns`
    // stays open in the parent until the closure (and the Command) is dropped.
    unsafe {
        cmd.pre_exec(move || {
            let _keep = &ns;
            setns(fd)?;
            if new_session && libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(())
}

/// True when running as root with `ip` available: private namespaces can be created.
pub fn can_create() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    root && crate::runner::which("ip").is_some()
}

/// A private network namespace that exists until dropped: created empty (only a
/// loopback, brought up: no links to the host, no routes), so nothing done inside it can
/// reach the machine's network or firewall. Deleted on drop, panics included.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

/// Longest a command inside a private namespace may run (a 10k-service restore takes
/// about 2 s).
pub const EXEC_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

impl Netns {
    /// Creates `<prefix>-<pid>-<n>`; fails if `ip netns add` fails.
    pub fn create(prefix: &str) -> io::Result<Netns> {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let status = Command::new("ip").args(["netns", "add", &name]).status()?;
        if !status.success() {
            return Err(io::Error::other(format!(
                "ip netns add {name} failed: {status}"
            )));
        }
        let ns = Netns { name };
        // Loopback up so local sockets work; still no link to the outside.
        let _ = ns.exec("ip", &["link", "set", "lo", "up"], None);
        Ok(ns)
    }

    /// The namespace's `ip netns` name.
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
    ) -> io::Result<(bool, String, String)> {
        let out = crate::runner::run_with_input(
            program,
            args,
            Some(&self.name),
            stdin.map(str::as_bytes),
            EXEC_TIMEOUT,
        )
        .map_err(io::Error::other)?;
        Ok((
            out.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            out.stderr,
        ))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_paths() {
        assert_eq!(path("node").unwrap(), Path::new("/run/netns/node"));
        assert_eq!(path("/proc/1/ns/net").unwrap(), Path::new("/proc/1/ns/net"));
        for bad in ["", ".", ".."] {
            let e = path(bad).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
        }
    }

    #[test]
    fn a_missing_namespace_names_its_file() {
        let e = open("plumb-no-such-namespace").unwrap_err();
        assert!(
            e.to_string().contains("/run/netns/plumb-no-such-namespace"),
            "{e}"
        );
        let e = on_thread(Some("plumb-no-such-namespace"), || Ok(())).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn without_a_namespace_the_closure_runs_here() {
        let here = current_inode().unwrap();
        let seen = on_thread(None, current_inode).unwrap();
        assert_eq!(here, seen);
    }

    #[test]
    fn a_private_namespace_is_entered_and_left() {
        if !plumb_testkit::privileged(&["ip"]) {
            return;
        }
        let ns = Netns::create("plumb-os-test").unwrap();
        let here = current_inode().unwrap();
        let inside = on_thread(Some(ns.name()), current_inode).unwrap();
        assert_ne!(here, inside, "the thread did not change namespace");
        assert_eq!(inside, inode_of(ns.name()).unwrap());
        assert_eq!(here, current_inode().unwrap(), "the caller moved");
        let name = ns.name().to_string();
        drop(ns);
        assert!(!path(&name).unwrap().exists(), "namespace not deleted");
    }
}
