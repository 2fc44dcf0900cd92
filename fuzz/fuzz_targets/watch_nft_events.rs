//! Fuzz target: plumb watch's nftables notification decoder must never panic on kernel
//! bytes, and whatever it decodes must go through batching, the chain state and
//! detection without panicking either; the scout's head decoder (a datagram cut
//! anywhere) and its sample likewise.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plumb_watch::detect::{FightTracker, Source, detect};
use plumb_watch::nft_events::{Batcher, decode, decode_head};
use plumb_watch::scout::Sample;
use plumb_watch::state::NftState;

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
    let mut sample = Sample::default();
    decode_head(data, &mut |e| sample.push(&e));
    let _ = detect(&sample.changes(), &plumb_watch::Actor::unknown(), Source::Write, 0, &mut fights);
});
