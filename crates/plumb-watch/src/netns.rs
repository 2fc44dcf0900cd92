//! Entering a network namespace for exactly one operation.
//!
//! Netlink subscriptions are per namespace, so the nftables socket must be created
//! inside the watched namespace. [`in_netns`] does that on a short-lived thread:
//! the thread enters the namespace (`setns`), runs the closure and ends, so no
//! thread of plumb is ever left in the wrong namespace even if something fails
//! half-way. Sockets keep the namespace they were created in.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// The path of a namespace given by name (`/run/netns/NAME`) or path.
pub fn netns_path(netns: &str) -> String {
    if netns.contains('/') {
        netns.to_string()
    } else {
        format!("/run/netns/{netns}")
    }
}

/// Inode of a network namespace (`/proc/PID/ns/net` or a bind mount), the id that
/// tells namespaces apart.
pub fn netns_inode(path: &str) -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata(path)?.ino())
}

/// Runs `f` inside `netns` (or right here when `None`) and returns its result.
pub fn in_netns<T: Send>(
    netns: Option<&str>,
    f: impl FnOnce() -> io::Result<T> + Send,
) -> io::Result<T> {
    let Some(netns) = netns else {
        return f();
    };
    let target = File::open(netns_path(netns))?;
    std::thread::scope(|s| {
        s.spawn(move || {
            // SAFETY: setns with a valid, open namespace fd; it changes only this
            // thread's network namespace, and this thread ends right after `f`.
            let rc = unsafe { libc::setns(target.as_raw_fd(), libc::CLONE_NEWNET) };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
            f()
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("namespace thread panicked")))
    })
}
