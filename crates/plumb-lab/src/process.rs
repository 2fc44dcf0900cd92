//! Processes the lab starts and how it finds them again: spawning actors detached from the
//! caller, and scanning `/proc` for anything that belongs to the lab (an executable under
//! the lab root, or a process inside a lab network namespace), even after a crash.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

/// A process found in `/proc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessInfo {
    /// Process id.
    pub pid: u32,
    /// `/proc/PID/comm`.
    pub comm: String,
    /// `/proc/PID/exe` target, if readable.
    pub exe: Option<PathBuf>,
}

fn read_process(pid: u32) -> Option<ProcessInfo> {
    let dir = PathBuf::from(format!("/proc/{pid}"));
    let comm = fs::read_to_string(dir.join("comm")).ok()?;
    Some(ProcessInfo {
        pid,
        comm: comm.trim_end().to_string(),
        exe: fs::read_link(dir.join("exe")).ok(),
    })
}

/// Information about one process, if it exists.
pub fn info(pid: u32) -> Option<ProcessInfo> {
    read_process(pid)
}

/// Every process whose executable lies under `root` or whose network namespace inode is in
/// `netns_inodes`. The caller itself is never listed.
pub fn lab_processes(root: Option<&Path>, netns_inodes: &HashSet<u64>) -> Vec<ProcessInfo> {
    let me = std::process::id();
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let in_ns = plumb_os::netns::inode(&entry.path().join("ns/net"))
            .ok()
            .is_some_and(|ino| netns_inodes.contains(&ino));
        let Some(p) = read_process(pid) else { continue };
        let under_root = match (root, &p.exe) {
            (Some(r), Some(exe)) => exe.starts_with(r),
            _ => false,
        };
        if in_ns || under_root {
            found.push(p);
        }
    }
    found
}

/// Sends `signal` to `pid`; false if it does not exist.
pub fn signal(pid: u32, signal: i32) -> bool {
    // SAFETY: kill(2) with a positive pid only signals that process.
    unsafe { libc::kill(pid as libc::pid_t, signal) == 0 }
}

/// Whether `pid` still exists (zombies count as gone; our own are reaped).
pub fn alive(pid: u32) -> bool {
    let mut status = 0;
    // SAFETY: WNOHANG waitpid on a specific pid; fails harmlessly if it is not our child.
    unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) };
    plumb_os::process::running(pid)
}

/// SIGTERM, wait up to `grace`, then SIGKILL and wait up to one more second. Returns the
/// pids still alive afterwards.
pub fn terminate(pids: &[u32], grace: Duration) -> Vec<u32> {
    for &p in pids {
        signal(p, libc::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && pids.iter().any(|&p| alive(p)) {
        thread::sleep(Duration::from_millis(20));
    }
    for &p in pids.iter().filter(|&&p| alive(p)) {
        signal(p, libc::SIGKILL);
    }
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline && pids.iter().any(|&p| alive(p)) {
        thread::sleep(Duration::from_millis(20));
    }
    pids.iter().copied().filter(|&p| alive(p)).collect()
}
