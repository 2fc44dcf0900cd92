//! A counting global allocator for memory tests and measuring examples: bytes live now,
//! the peak since the last [`reset_peak`], and all bytes ever allocated ([`allocated`]). Process-wide, so a test using it gets its
//! own binary (one test file or example) and installs it with
//! `#[global_allocator] static A: plumb_testkit::heap::Counting = plumb_testkit::heap::Counting;`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// The system allocator, counting live bytes and their peak.
pub struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static TOTAL: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; only counters are
// updated beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Relaxed) + layout.size();
        PEAK.fetch_max(live, Relaxed);
        TOTAL.fetch_add(layout.size(), Relaxed);
        // SAFETY: forwarding the caller's layout to the system allocator unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Relaxed);
        // SAFETY: ptr was allocated by System.alloc with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A turn to measure: the counters are process-wide, so the tests of one binary that
/// read them take turns (a test that panicked while measuring does not block the rest).
pub fn measuring() -> std::sync::MutexGuard<'static, ()> {
    MEASURING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Bytes allocated and not yet freed.
pub fn live() -> usize {
    LIVE.load(Relaxed)
}

/// The most bytes live at once since the last [`reset_peak`].
pub fn peak() -> usize {
    PEAK.load(Relaxed)
}

/// Starts a new peak from what is live now; returns that.
pub fn reset_peak() -> usize {
    let now = live();
    PEAK.store(now, Relaxed);
    now
}

/// Bytes allocated since the process started, freed or not. A block grown or shrunk by
/// `realloc` counts its new size (the default `realloc` allocates, copies and frees), so
/// the difference over a piece of work bounds the bytes it copied that way.
pub fn allocated() -> usize {
    TOTAL.load(Relaxed)
}
