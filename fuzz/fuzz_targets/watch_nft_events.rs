//! Fuzz target: plumb watch's nftables notification decoder must never panic on kernel
//! bytes, and whatever it decodes must go through batching, the chain state and
//! detection without panicking either, also half-way through a transaction (what a
//! preliminary event judges: `Transaction::changes_so_far`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use plumb_watch::detect::{FightTracker, Source, detect};
use plumb_watch::nft_events::{Batcher, decode, decode_each};
use plumb_watch::state::{NftState, Transaction};

fuzz_target!(|data: &[u8]| {
    let msgs = decode(data);
    let mut batcher = Batcher::default();
    let mut state = NftState::default();
    let mut fights = FightTracker::default();
    let mut all = msgs.clone();
    all.push(plumb_watch::nft_events::NftMessage::Gen { id: 1, pid: Some(1), comm: None });
    for b in batcher.push(all, std::time::SystemTime::UNIX_EPOCH) {
        let changes = state.apply(&b);
        let _ = detect(&changes, &plumb_watch::Actor::unknown(), Source::Write, 0, &mut fights);
    }
    let mut t = Transaction::default();
    decode_each(data, &mut |e| t.push(&mut state, &e));
    let so_far = t.changes_so_far(&state);
    let _ = detect(&so_far, &plumb_watch::Actor::unknown(), Source::Write, 0, &mut fights);
    assert_eq!(t.finish(&mut state), so_far);
});
