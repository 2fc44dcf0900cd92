//! A private temporary directory (mode 0700), removed with everything in it on drop — and
//! on SIGINT, SIGTERM or SIGHUP, which end the process without running drops (bundle
//! extraction; no tempfile dependency for one use).
//!
//! Every live directory is in one process-wide list. The first [`TempDir`] installs a
//! handler for the three signals that only writes the signal's number to a pipe (write(2)
//! is async-signal-safe); a thread blocked on that pipe removes every listed directory,
//! keeps the list locked so no new one appears, restores the signal's default action and
//! sends the signal to the process again, which then ends as it would have without plumb
//! (a shell reports 128 + the signal's number).
//!
//! A signal whose action is not the default when the first directory is made is left
//! alone: one ignored (`nohup` ignores SIGHUP) stays ignored, and a handler installed by
//! someone else keeps working. plumb-watch's `signals` module handles SIGINT and SIGTERM
//! too, to stop a watch cleanly; a watch never creates a TempDir, so the two never share a
//! process. Both have the same shape (a handler that records the signal, a thread that
//! acts on it) and can become one place that owns the process's signals, with a list of
//! what to do on each (remove these directories, set this stop flag).

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, Once};

/// A directory under `$TMPDIR`, private to this user, removed with its contents on drop
/// and when the process is ended by SIGINT, SIGTERM or SIGHUP.
pub struct TempDir(PathBuf);

/// Directories alive now, for the signal thread.
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn live() -> MutexGuard<'static, Vec<PathBuf>> {
    // A panic while the list was locked leaves it valid: a Vec of paths.
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

impl TempDir {
    /// Creates `$TMPDIR/<prefix>-<pid>-<n>` with mode 0700; fails rather than reuse an
    /// existing one.
    pub fn create(prefix: &str) -> Result<TempDir, String> {
        static N: AtomicUsize = AtomicUsize::new(0);
        remove_on_signals();
        let p = std::env::temp_dir().join(format!(
            "{prefix}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        // Listed before the directory exists, under the lock: a signal arriving now
        // either finds it listed, or stops the process before it is created.
        let mut live = live();
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&p)
            .map_err(|e| format!("{}: {e}", p.display()))?;
        live.push(p.clone());
        Ok(TempDir(p))
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let mut live = live();
        let _ = std::fs::remove_dir_all(&self.0);
        live.retain(|p| p != &self.0);
    }
}

/// The write end of the signal pipe (-1 before it exists).
static SIGNAL_PIPE: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(sig: libc::c_int) {
    // SAFETY: errno is thread-local and only read and restored here; write(2) is
    // async-signal-safe; the descriptor is the pipe's write end, never closed.
    unsafe {
        let errno = *libc::__errno_location();
        let byte = sig as u8;
        libc::write(
            SIGNAL_PIPE.load(Ordering::Relaxed),
            &byte as *const u8 as *const libc::c_void,
            1,
        );
        *libc::__errno_location() = errno;
    }
}

/// Installs the handlers and the thread, once per process.
fn remove_on_signals() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return;
        }
        let [read_end, write_end] = fds;
        SIGNAL_PIPE.store(write_end, Ordering::Relaxed);
        let spawned = std::thread::Builder::new()
            .name("plumb-tempdir-signals".into())
            .spawn(move || wait_and_remove(read_end));
        if spawned.is_err() {
            return;
        }
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            // SAFETY: sigaction is given valid pointers to zeroed or queried structs; the
            // handler is an extern "C" fn that only calls async-signal-safe functions.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut old) != 0
                    || old.sa_sigaction != libc::SIG_DFL
                {
                    continue;
                }
                let mut new: libc::sigaction = std::mem::zeroed();
                new.sa_sigaction = on_signal as *const () as libc::sighandler_t;
                new.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut new.sa_mask);
                libc::sigaction(sig, &new, std::ptr::null_mut());
            }
        }
    });
}

fn wait_and_remove(read_end: libc::c_int) {
    let mut byte = 0u8;
    loop {
        // SAFETY: reads one byte into `byte` from the pipe's read end, owned by this thread.
        let n = unsafe { libc::read(read_end, &mut byte as *mut u8 as *mut libc::c_void, 1) };
        if n == 1 {
            break;
        }
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        return;
    }
    let sig = libc::c_int::from(byte);
    // Held until the process ends: no directory is created or forgotten meanwhile, and a
    // drop on another thread waits here instead of racing.
    let live = live();
    for p in live.iter() {
        // An extraction still writing into it can refill a directory between the walk
        // and the final rmdir; a few tries outlast that.
        for _ in 0..10 {
            match std::fs::remove_dir_all(p) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => continue,
                _ => break,
            }
        }
    }
    // SAFETY: restores the default action and sends the signal to this process, which
    // ends it as the signal would have; _exit is the fallback should it be blocked.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::kill(libc::getpid(), sig);
        std::thread::sleep(std::time::Duration::from_secs(1));
        libc::_exit(128 + sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_temporary_directory_is_private_and_removed_on_drop() {
        let t = TempDir::create("plumb-unit").unwrap();
        let mode = std::fs::metadata(t.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "mode {mode:o}");
        let p = t.path().to_path_buf();
        assert!(live().contains(&p));
        std::fs::write(p.join("f"), "x").unwrap();
        drop(t);
        assert!(!p.exists());
        assert!(!live().contains(&p));
    }
}
