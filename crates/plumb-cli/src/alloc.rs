//! The process's memory allocator: the system's (glibc) until [`use_mimalloc`] is
//! called, mimalloc after that. `main` switches for the one-shot commands that read
//! whole rulesets (`check`, `services`, `trace`, `doctor`, ...) and not for the
//! long-running ones (`watch`, `lab`).
//!
//! Why: mimalloc asks the kernel for transparent huge pages for its arenas, so the
//! ~60 MB that `plumb check` touches on a 10k-service ruleset costs ~250 page faults
//! instead of ~15,000, and the command runs ~20 % faster (docs/benchmarks.md). For a
//! process that stays, the same habit keeps more memory resident: `plumb watch`
//! peaked at 44 MB with mimalloc against 36 MB with glibc under the 10k churn
//! benchmark (target < 40 MB), so watch keeps glibc.
//!
//! Peak RSS on the 10k-service dump, mimalloc / glibc in one run: `ruleset parse` 42.0 /
//! 42.2 MiB, `services` 62.3 / 65.2, `check` 71.8 / 76.5, the same ruleset as nft text
//! 77.6 / 78.4, for the same CPU time: glibc is nowhere lower, so one-shot commands use
//! mimalloc. mimalloc leaves a block in place when it shrinks to half its size or more
//! (`shrink_to_fit` frees nothing then): vectors that must be tight are grown exactly
//! or copied into a block of their size (the iptables reader, service recovery).
//!
//! How: allocations go to mimalloc once switched, else to the system allocator.
//! Frees and reallocations go to whichever allocator owns the pointer
//! (`mi_is_in_heap_region`, a page-map lookup, asked only after the switch), so what
//! was allocated before the switch (argument parsing) is freed correctly after it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, Ordering};

static MIMALLOC: AtomicBool = AtomicBool::new(false);

/// mimalloc v3's `mi_option_arena_eager_commit` (`mimalloc.h`, `mi_option_e`: the fifth
/// option); libmimalloc-sys names no constant for it.
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;

/// mimalloc v3's `mi_option_purge_delay` (the sixteenth option of `mi_option_e`).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// From now on, new allocations come from mimalloc (for the rest of the process).
///
/// Arenas are committed as they are used, not when they are reserved: on Linux
/// (overcommit) mimalloc's default commits a whole arena at once, and the part the
/// kernel then backs with transparent huge pages stays resident. Off, peak RSS on a
/// 10k-service x 5-endpoint dump (18.3 MB) drops from 78 to 66 MB for
/// `ruleset parse`, 106 to 95 MB for `services` and 136 to 106-112 MB for `check`,
/// with the same CPU time (docs/benchmarks.md).
///
/// Memory freed is given back at once rather than after mimalloc's default 10 ms
/// delay: a command that reads a ruleset frees its parse-time buffers (an nft
/// listing's tokens, the translation's text) while it still allocates, and the
/// delay kept them resident beside what came next (peak RSS of `plumb check` on
/// that dump 115 -> 101 MB, `ruleset parse` 67 -> 60 MB, same CPU time).
pub fn use_mimalloc() {
    // SAFETY: sets options before mimalloc's first allocation in this process (no
    // allocation has gone to mimalloc before the switch below).
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_ARENA_EAGER_COMMIT, 0);
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0);
    }
    MIMALLOC.store(true, Ordering::Relaxed);
}

/// From now on, memory freed stays mapped for a second before it is given back
/// (mimalloc's own default), instead of at once. For a command past its read that
/// allocates and frees the same memory in rounds: `trace --flows` frees each round's
/// traces and threads, and giving their pages back at once made ~9,000 `madvise`
/// calls on 100k flows, each interrupting the other core, then page faults to get
/// them again. No effect before [`use_mimalloc`].
pub fn keep_freed_memory() {
    if switched() {
        // SAFETY: mimalloc reads the purge delay each time it schedules a purge;
        // setting an option is allowed at any time.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 1000) };
    }
}

/// The global allocator (see the module documentation).
pub struct Switching;

fn switched() -> bool {
    MIMALLOC.load(Ordering::Relaxed)
}

/// Whether mimalloc allocated `p`. Only meaningful after the switch: before it,
/// mimalloc allocated nothing.
fn from_mimalloc(p: *mut u8) -> bool {
    // SAFETY: a read-only lookup of an address in mimalloc's page map; any address.
    switched() && unsafe { libmimalloc_sys::mi_is_in_heap_region(p.cast()) }
}

// SAFETY: every method forwards to an allocator that upholds GlobalAlloc's contract;
// a pointer is always freed or reallocated by the allocator that returned it
// (`from_mimalloc`), and a move between allocators copies min(old, new) bytes.
unsafe impl GlobalAlloc for Switching {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees (non-zero size layout).
        unsafe {
            if switched() {
                mimalloc::MiMalloc.alloc(layout)
            } else {
                System.alloc(layout)
            }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        unsafe {
            if switched() {
                mimalloc::MiMalloc.alloc_zeroed(layout)
            } else {
                System.alloc_zeroed(layout)
            }
        }
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        // SAFETY: `p` came from the allocator `from_mimalloc` names, with `layout`.
        unsafe {
            if from_mimalloc(p) {
                mimalloc::MiMalloc.dealloc(p, layout)
            } else {
                System.dealloc(p, layout)
            }
        }
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `p` came from the allocator `from_mimalloc` names, with `layout`;
        // a block moving to mimalloc is copied (min of both sizes) and then freed by
        // the system allocator that returned it.
        unsafe {
            if from_mimalloc(p) {
                return mimalloc::MiMalloc.realloc(p, layout, new_size);
            }
            if !switched() {
                return System.realloc(p, layout, new_size);
            }
            let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
            let q = mimalloc::MiMalloc.alloc(new_layout);
            if !q.is_null() {
                std::ptr::copy_nonoverlapping(p, q, layout.size().min(new_size));
                System.dealloc(p, layout);
            }
            q
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_from_before_the_switch_are_freed_and_grown_by_their_own_allocator() {
        let l = Layout::from_size_align(64, 8).unwrap();
        // SAFETY: a test of the allocator itself; every block is freed once with its
        // own layout.
        unsafe {
            let a = Switching.alloc(l);
            a.write_bytes(7, 64);
            assert!(!from_mimalloc(a));
            use_mimalloc();
            let b = Switching.alloc(l);
            assert!(from_mimalloc(b), "allocated by mimalloc after the switch");
            assert!(!from_mimalloc(a), "still the system's");
            // Growing the old block moves it to mimalloc, contents kept.
            let a2 = Switching.realloc(a, l, 4096);
            assert!(from_mimalloc(a2));
            assert!((0..64).all(|i| *a2.add(i) == 7));
            Switching.dealloc(a2, Layout::from_size_align(4096, 8).unwrap());
            Switching.dealloc(b, l);
            let z = Switching.alloc_zeroed(l);
            assert!((0..64).all(|i| *z.add(i) == 0));
            Switching.dealloc(z, l);
        }
    }
}
