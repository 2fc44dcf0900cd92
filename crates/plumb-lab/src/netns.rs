//! Entering the lab's network namespaces: in a child before `exec` (actors, commands) and
//! on a short-lived thread (probes), so the calling process never leaves its own.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

/// Where `ip netns add NAME` keeps the namespace handle.
pub fn path(name: &str) -> PathBuf {
    PathBuf::from("/run/netns").join(name)
}

/// Opens a namespace handle.
pub fn open(name: &str) -> io::Result<File> {
    File::open(path(name))
}

fn setns(fd: RawFd) -> io::Result<()> {
    // SAFETY: plain syscall on a descriptor we own; CLONE_NEWNET limits it to the network
    // namespace of the calling thread.
    let rc = unsafe { libc::setns(fd, libc::CLONE_NEWNET) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Makes `cmd` run inside network namespace `name`, in a new session (so a Ctrl-C aimed at
/// the terminal's process group does not reach it). The handle is opened now, so a
/// missing namespace is reported here rather than as an exec failure.
pub fn command_in(cmd: &mut Command, name: &str, new_session: bool) -> io::Result<()> {
    let ns = open(name)?;
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

/// Runs `f` on a new thread that has joined network namespace `name`.
pub fn run_in<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> io::Result<T> {
    let ns = open(name)?;
    std::thread::spawn(move || -> io::Result<T> {
        setns(ns.as_raw_fd())?;
        Ok(f())
    })
    .join()
    .map_err(|_| io::Error::other("namespace thread panicked"))?
}

/// The namespace inode of a path such as `/proc/PID/ns/net` or `/run/netns/NAME`.
pub fn inode(path: &std::path::Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| m.ino())
}
