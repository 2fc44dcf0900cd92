//! Splitting per-item work over the machine's cores, for the whole-ruleset passes
//! (service-map recovery, checks) that must stay fast on 10k-service nodes.
//!
//! Scoped threads from std, no pool: the passes run once per command, a spawn costs tens
//! of microseconds, and short inputs stay on the calling thread. Results come back in
//! input order, so output does not depend on the number of cores.

use std::num::NonZeroUsize;

/// At most this many threads: the passes are memory-bound beyond a few cores.
const MAX_WORKERS: usize = 4;

/// The cores this process may run on (its affinity mask; 1 when unknown).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, NonZeroUsize::get)
}

/// How many threads to split work of `len` items into, each getting at least `min_chunk`.
pub fn workers_for(len: usize, min_chunk: usize) -> usize {
    cores().min(MAX_WORKERS).min(len / min_chunk.max(1)).max(1)
}

/// Runs `f` on contiguous chunks of `items`, one per worker (see [`workers_for`]), and
/// returns the results in chunk order. A panic in `f` propagates to the caller.
pub fn map_chunks<T, R, F>(items: &mut [T], min_chunk: usize, f: F) -> Vec<R>
where
    T: Send,
    R: Send,
    F: Fn(&mut [T]) -> R + Sync,
{
    let workers = workers_for(items.len(), min_chunk);
    if workers == 1 {
        return vec![f(items)];
    }
    let size = items.len().div_ceil(workers);
    std::thread::scope(|s| {
        let f = &f;
        let mut chunks = items.chunks_mut(size);
        // The calling thread takes the first chunk itself.
        let first = chunks.next();
        let handles: Vec<_> = chunks.map(|c| s.spawn(move || f(c))).collect();
        let mut out = Vec::with_capacity(handles.len() + 1);
        out.extend(first.map(f));
        for h in handles {
            match h.join() {
                Ok(r) => out.push(r),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        out
    })
}

/// Runs two independent computations, the second on another thread when the machine
/// has more than one core.
pub fn join<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA,
    B: FnOnce() -> RB + Send,
    RB: Send,
{
    if cores() == 1 {
        let ra = a();
        return (ra, b());
    }
    std::thread::scope(|s| {
        let hb = s.spawn(b);
        let ra = a();
        match hb.join() {
            Ok(rb) => (ra, rb),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_every_item_once_in_order() {
        for len in [0, 1, 5, 1000, 4097] {
            let mut items: Vec<usize> = (0..len).collect();
            let parts = map_chunks(&mut items, 1, |c| {
                for x in c.iter_mut() {
                    *x *= 2;
                }
                c.to_vec()
            });
            let flat: Vec<usize> = parts.into_iter().flatten().collect();
            assert_eq!(flat, (0..len).map(|x| x * 2).collect::<Vec<_>>());
            assert_eq!(items, flat);
        }
    }

    #[test]
    fn short_inputs_stay_on_one_worker() {
        assert_eq!(workers_for(10, 100), 1);
        assert_eq!(workers_for(0, 0), 1);
        assert!(workers_for(1_000_000, 1) <= MAX_WORKERS);
    }

    #[test]
    fn join_returns_both_results() {
        let v = [1, 2, 3];
        assert_eq!(join(|| v.len(), || v.iter().sum::<i32>()), (3, 6));
    }
}
