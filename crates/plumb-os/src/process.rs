//! Whether a process recorded earlier (in a marker file, in the name of a table plumb
//! added) is still running: what decides if what it left behind is a leftover.

/// Whether process `pid` exists and is not a zombie (a zombie has run its last code:
/// what it would have cleaned up, it never will). Read from `/proc/PID/stat`, so it
/// speaks of this process's PID namespace.
pub fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the first field after the `)` that closes the command name
        // (which may itself hold `)`).
        Ok(stat) => {
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next());
            state.is_some() && state != Some('Z')
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_runs_and_a_reaped_child_does_not() {
        assert!(running(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!running(pid));
    }

    #[test]
    fn a_zombie_is_not_running() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Not waited for: it stays a zombie until reaped. Poll with a deadline for it
        // to exit.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while running(pid) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!running(pid), "pid {pid} still running after 10 s");
        let exists = std::path::Path::new(&format!("/proc/{pid}")).exists();
        child.wait().unwrap();
        assert!(exists, "pid {pid} is a zombie until reaped");
    }
}
