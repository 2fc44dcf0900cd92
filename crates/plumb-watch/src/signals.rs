//! SIGINT/SIGTERM end a watch cleanly (with its summary) instead of killing it.
//!
//! The handler only stores to a static atomic (async-signal-safe); a small thread
//! forwards it to the watch's stop flag.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

static SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    SIGNALLED.store(true, Ordering::SeqCst);
}

/// Installs the handlers and returns a flag that becomes true on SIGINT or SIGTERM.
pub fn stop_on_signals() -> Arc<AtomicBool> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: installs a handler that only performs an atomic store, which is
        // async-signal-safe; the function pointer has the C ABI signal() expects.
        unsafe {
            libc::signal(sig, on_signal as *const () as libc::sighandler_t);
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let _ = std::thread::Builder::new()
        .name("plumb-signals".into())
        .spawn(move || {
            while !SIGNALLED.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(200));
            }
            s.store(true, Ordering::SeqCst);
        });
    stop
}
