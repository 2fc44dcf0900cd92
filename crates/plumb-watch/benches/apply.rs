//! The listener's per-notification cost, replayed from real kernel notifications:
//! decoding alone, decoding plus applying to watch's state ([`Transaction`]), and
//! detection on the change sets: what `plumb watch` spends its CPU on during
//! kube-proxy churn.
//!
//! The notifications are recorded once (root only) in a private network namespace:
//! a 10k-service kube-proxy ruleset restored by `iptables-nft-restore` (load), the
//! same again (a full sync: flush and refill), a security agent's revert of the nat
//! table, and a sync that repairs it. They are kept in
//! `target/bench-data/watch-replay-10000.bin` (u32 little-endian length, datagram)
//! and replayed from there; without root or iptables-nft the bench says why and
//! measures nothing.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use plumb_os::netns::Netns;
use plumb_watch::actor::{Actor, ProcInfo};
use plumb_watch::changes::ChangeSet;
use plumb_watch::detect::{FightTracker, Source, detect};
use plumb_watch::nft_events::{NftEvent, NftListener, Received, decode_each};
use plumb_watch::state::{NftState, Transaction};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const SERVICES: usize = 10_000;
/// load, sync, revert, repairing sync (iptables-nft-restore commits one or more
/// transactions for each).
const RESTORES: usize = 4;

fn recording_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/bench-data")
        .join(format!("watch-replay-{SERVICES}.bin"))
}

fn read_recording(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while let Some((len, tail)) = rest.split_first_chunk::<4>() {
        let len = u32::from_le_bytes(*len) as usize;
        let Some((d, tail)) = tail.split_at_checked(len) else {
            break;
        };
        out.push(d.to_vec());
        rest = tail;
    }
    out
}

fn generations(datagrams: &[Vec<u8>]) -> usize {
    let mut n = 0;
    for d in datagrams {
        decode_each(d, &mut |e| {
            n += usize::from(matches!(e, NftEvent::Gen { .. }))
        });
    }
    n
}

/// Records the notifications of the four transactions, or says why it cannot.
fn record() -> Result<Vec<Vec<u8>>, String> {
    if !plumb_os::netns::can_create() {
        return Err("needs root and ip(8) to record notifications".into());
    }
    let saved = plumb_kubeproxy::generated_save_text(SERVICES, 3).map_err(|e| e.to_string())?;
    let revert = plumb_watch::impersonate::pre_kubernetes_payload(&["nat"]);
    let ns = Netns::create("plumb-bench-apply").map_err(|e| e.to_string())?;
    let mut listener = NftListener::open(Some(ns.name()), 512 << 20).map_err(|e| e.to_string())?;
    let restore = |input: &str| -> Result<(), String> {
        match ns.exec("iptables-nft-restore", &[], Some(input)) {
            Ok((true, _, _)) => Ok(()),
            Ok((false, _, err)) => Err(format!("iptables-nft-restore failed: {err}")),
            Err(e) => Err(format!("iptables-nft-restore: {e}")),
        }
    };
    let mut datagrams = Vec::new();
    for input in [&saved, &saved, &revert, &saved] {
        restore(input)?;
        // The kernel queued every notification before the restore returned: drain
        // them (one receive timeout of silence ends it), so the buffer never fills.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if Instant::now() > deadline {
                return Err("notifications still arriving 60 s after a restore".into());
            }
            match listener.receive_datagrams(&mut |d| datagrams.push(d.to_vec())) {
                Ok(Received::Gap) => return Err("notifications lost while recording".into()),
                Ok(Received::Idle) => break,
                Ok(_) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
    }
    Ok(datagrams)
}

fn recording() -> Result<Vec<Vec<u8>>, String> {
    let path = recording_path();
    if let Ok(bytes) = std::fs::read(&path) {
        let d = read_recording(&bytes);
        if generations(&d) >= RESTORES {
            return Ok(d);
        }
    }
    let d = record()?;
    let mut bytes = Vec::new();
    for x in &d {
        bytes.extend_from_slice(&(x.len() as u32).to_le_bytes());
        bytes.extend_from_slice(x);
    }
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = std::fs::write(&path, bytes);
    Ok(d)
}

/// Replays every datagram as the listener thread does; returns each transaction's
/// change set and the chains at the end.
fn replay(datagrams: &[Vec<u8>]) -> (Vec<ChangeSet>, usize) {
    let mut state = NftState::default();
    let mut txn = Transaction::default();
    let mut changes = Vec::new();
    for d in datagrams {
        decode_each(d, &mut |e| match e {
            NftEvent::Gen { .. } => changes.push(std::mem::take(&mut txn).finish(&mut state)),
            e => txn.push(&mut state, &e),
        });
    }
    (changes, state.chain_names().count())
}

fn actor(comm: &str) -> Actor {
    Actor::from_chain(&[ProcInfo {
        pid: 1,
        comm: Some(comm.into()),
        ..ProcInfo::default()
    }])
}

/// Detection of every change set, as the detection loop does: kube-proxy's writes,
/// and the agent's revert (the one that removes more chains than it adds).
fn detect_all(changes: &[ChangeSet], kube_proxy: &Actor, agent: &Actor) -> usize {
    let mut fights = FightTracker::default();
    let mut findings = 0;
    for (i, c) in changes.iter().enumerate() {
        let reverts = c
            .tables
            .iter()
            .any(|t| t.chains_removed.len() > t.chains_added.len() + 1000);
        let who = if reverts { agent } else { kube_proxy };
        findings += detect(c, who, Source::Write, i as u64 * 1000, &mut fights).len();
    }
    findings
}

fn bench(c: &mut Criterion) {
    let datagrams = match recording() {
        Ok(d) => d,
        Err(why) => {
            eprintln!("apply bench skipped: {why}");
            return;
        }
    };
    let mut messages = 0u64;
    for d in &datagrams {
        decode_each(d, &mut |_| messages += 1);
    }
    let bytes: usize = datagrams.iter().map(Vec::len).sum();
    eprintln!(
        "replaying {} datagrams, {messages} notifications, {} MiB",
        datagrams.len(),
        bytes >> 20
    );
    let (changes, chains) = replay(&datagrams);
    let (kube_proxy, agent) = (actor("kube-proxy"), actor("venAgent"));
    eprintln!(
        "replay: {} transactions, {chains} chains at the end, {} findings",
        changes.len(),
        detect_all(&changes, &kube_proxy, &agent)
    );
    assert!(
        chains > 3 * SERVICES,
        "the replayed ruleset has a chain per service and endpoint"
    );
    let mut g = c.benchmark_group("watch_listener");
    g.sample_size(10);
    g.throughput(Throughput::Elements(messages));
    g.bench_function("decode", |b| {
        b.iter(|| {
            let mut n = 0usize;
            for d in &datagrams {
                decode_each(d, &mut |e| {
                    n += usize::from(matches!(e, NftEvent::Rule { .. }))
                });
            }
            n
        })
    });
    g.bench_function("decode_and_apply", |b| b.iter(|| replay(&datagrams)));
    g.finish();
    // As the listener decodes: a datagram the kernel has just copied is in cache. The
    // same 256 datagrams (~1 MiB, a sync's) over and over.
    let hot = &datagrams[datagrams.len() / 2..][..256.min(datagrams.len() / 2)];
    let mut hot_messages = 0u64;
    for d in hot {
        decode_each(d, &mut |_| hot_messages += 1);
    }
    let mut g = c.benchmark_group("watch_listener_in_cache");
    g.throughput(Throughput::Elements(hot_messages));
    g.bench_function("decode", |b| {
        b.iter(|| {
            let mut n = 0usize;
            for d in hot {
                decode_each(d, &mut |e| {
                    n += usize::from(matches!(e, NftEvent::Rule { .. }))
                });
            }
            n
        })
    });
    // Applied onto the state the replay had reached, each run as a transaction of its
    // own that is never finished (its effects stay, as at a gap): the rule counts grow,
    // the work per notification is the listener's.
    let mut state = NftState::default();
    let mut txn = Transaction::default();
    for d in &datagrams[..datagrams.len() / 2] {
        decode_each(d, &mut |e| match e {
            NftEvent::Gen { .. } => {
                std::mem::take(&mut txn).finish(&mut state);
            }
            e => txn.push(&mut state, &e),
        });
    }
    g.bench_function("decode_and_apply", |b| {
        b.iter(|| {
            let mut t = Transaction::default();
            for d in hot {
                decode_each(d, &mut |e| t.push(&mut state, &e));
            }
            t.len()
        })
    });
    g.finish();
    let mut g = c.benchmark_group("watch_listener");
    g.sample_size(10);
    g.bench_function("detect", |b| {
        b.iter(|| detect_all(&changes, &kube_proxy, &agent))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
