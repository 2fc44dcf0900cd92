//! CPU time to decode one rule notification as the listener does (rule fingerprint
//! included), on the replay the `apply` bench records (`cargo bench -p plumb-watch
//! --bench apply` writes `target/bench-data/watch-replay-10000.bin`, root only): the
//! same 256 datagrams of a kube-proxy sync, in cache, decoded REPS times (default
//! 400). Thread CPU time, not wall time, so that other work on a shared machine does
//! not count; take the smallest of several runs.
//!
//! `cargo run --release -p plumb-watch --example decode_cost -- [REPS]`

use plumb_watch::nft_events::{NftEvent, decode_each};

fn thread_cpu_ns() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e9 + ts.tv_nsec as f64
}

fn main() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../target/bench-data/watch-replay-10000.bin"
    );
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            eprintln!(
                "decode_cost: reading {path}: {e} (record it with `cargo bench -p plumb-watch --bench apply`, as root)"
            );
            std::process::exit(2);
        }
    };
    let mut datagrams = Vec::new();
    let mut rest = &bytes[..];
    while let Some((len, tail)) = rest.split_first_chunk::<4>() {
        let len = u32::from_le_bytes(*len) as usize;
        let Some((d, tail)) = tail.split_at_checked(len) else {
            break;
        };
        datagrams.push(d);
        rest = tail;
    }
    let hot = &datagrams[datagrams.len() / 2..][..256.min(datagrams.len() / 2)];
    let reps: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(400);
    let (mut notifications, mut rules) = (0usize, 0usize);
    let start = thread_cpu_ns();
    for _ in 0..reps {
        for d in hot {
            decode_each(d, &mut |e| {
                notifications += 1;
                rules += usize::from(matches!(e, NftEvent::Rule { .. }));
            });
        }
    }
    let ns = (thread_cpu_ns() - start) / notifications.max(1) as f64;
    println!("{notifications} notifications ({rules} rules): {ns:.1} ns of CPU each");
}
