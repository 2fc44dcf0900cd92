//! The messages the listener threads (nf_tables notifications, audit, legacy polling)
//! send to the detection loop in [`crate::watcher`]: committed transactions, early
//! views of big ones, resyncs, gaps and errors. A module of its own so that the
//! producers and the consumer both depend on it and not on each other.

use crate::actor::Actor;
use crate::audit::NetfilterAudit;
use crate::changes::ChangeSet;
use crate::metrics::ErrorKind;
use std::time::SystemTime;

/// One committed nf_tables transaction, applied on the listener thread.
pub(crate) struct Committed {
    pub(crate) changes: ChangeSet,
    pub(crate) actor: Actor,
    pub(crate) generation: u32,
    /// First notification of the transaction (≈ the commit).
    pub(crate) started: SystemTime,
}

/// What the listener threads tell the detection loop.
pub(crate) enum Msg {
    Committed(Box<Committed>),
    /// What a big transaction still being read has done so far
    /// ([`crate::state::Transaction::changes_so_far`]), with its writer and how the
    /// writer was known.
    Early(Box<Committed>, &'static str),
    Resync(Box<ChangeSet>),
    Gap,
    /// Transactions already in the dump the state came from, undone and not reported.
    AlreadyInDump(u64),
    /// A resync's dump failed (the ruleset kept changing): the old state is kept.
    ResyncFailed,
    Audit(Box<NetfilterAudit>),
    Error(ErrorKind, String),
}
