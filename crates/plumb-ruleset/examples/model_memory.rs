//! Measures what parsing a dump costs in heap: peak bytes while parsing and bytes the
//! finished model holds, next to the input's size (the model's memory budget is
//! 3x the input). Counts every allocation through a wrapping global allocator.
//!
//! `cargo run --release -p plumb-ruleset --example model_memory -- DUMP`

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Relaxed) + layout.size();
        PEAK.fetch_max(live, Relaxed);
        // SAFETY: forwarding the caller's layout to the system allocator unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Relaxed);
        // SAFETY: ptr was allocated by System.alloc with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn mib(n: usize) -> f64 {
    n as f64 / (1024.0 * 1024.0)
}

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: model_memory DUMP");
        std::process::exit(2);
    };
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        eprintln!("{path}: {e}");
        std::process::exit(2);
    });
    let input = bytes.len();
    let before = LIVE.load(Relaxed);
    PEAK.store(before, Relaxed);
    let parsed = plumb_ruleset::format::parse_owned(bytes, &Default::default());
    let held = LIVE.load(Relaxed);
    let peak = PEAK.load(Relaxed);
    let rules = parsed.as_ref().map(|p| p.ruleset.rule_count()).unwrap_or(0);
    println!(
        "input {:.1} MiB, {rules} rules; model holds {:.1} MiB ({:.2}x input, input text included); peak while parsing {:.1} MiB ({:.2}x, the input buffer included)",
        mib(input),
        mib(held),
        held as f64 / input as f64,
        mib(peak),
        peak as f64 / input as f64,
    );
    drop(parsed);
}
