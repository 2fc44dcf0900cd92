//! Reading the state watch starts from (and resynchronises to): every nf_tables
//! table, chain and rule (iptables-nft's tables and native ones, all families) from
//! netlink dumps ([`crate::nft_events::dump_ruleset`]), applied to an empty
//! [`NftState`] as the listener applies notifications. Only chain names, policies,
//! rule counts and owned hook jumps are kept.
//!
//! Why not `iptables-nft-save` and `nft list`: on a 10k-service node the save took
//! ~15 s (the kernel's answer, then text, then parsing it again), `nft list tables`
//! 24 s (nft 1.0.6 fetches the whole ruleset first); the dumps take ~0.6 s (rules
//! are dumped chain by chain: see `nft_events::dump_ruleset`), so watch is ready
//! sooner and blind for less time after lost events.
//! Read-only: only GET requests are sent.

use crate::state::{NftState, Transaction};

/// What reading the baseline gave.
#[derive(Debug, Default)]
pub struct Baseline {
    /// Every nf_tables table, chain and rule count of the namespace as the dumps gave
    /// them; empty when the dump failed (`problems` says why).
    pub state: NftState,
    /// The nf_tables generation the state was read at (None: the read failed).
    pub generation: Option<u32>,
    /// What failed, with why.
    pub problems: Vec<String>,
}

/// Reads the nf_tables state of this machine or of `netns`.
pub fn read(netns: Option<&str>) -> Baseline {
    let mut state = NftState::default();
    // The dump applied as one transaction that is never finished: its effects stay,
    // and no change set is computed for 40k new chains.
    let mut txn = Transaction::default();
    let read = crate::nft_events::dump_ruleset(netns, &mut |e| match e {
        Some(e) => txn.push(&mut state, &e),
        None => {
            state = NftState::default();
            txn = Transaction::default();
        }
    });
    match read {
        Ok(generation) => Baseline {
            state,
            generation: Some(generation),
            problems: Vec::new(),
        },
        Err(e) => Baseline {
            problems: vec![format!("dumping the nf_tables ruleset: {e}")],
            ..Baseline::default()
        },
    }
}
