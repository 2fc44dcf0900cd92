//! plumb-check: integrity checks over a node's netfilter rulesets, as [`Finding`]s.
//!
//! Each check is one module under [`checks`] with a doc comment that explains it, one
//! `check(&Facts) -> Vec<Finding>` function and its tests (rust-analyzer's diagnostics
//! style). A check returns an `ok` finding when it ruled its problem out, so reports can
//! say what was checked. Findings are plumb-findings' type; `plumb doctor` runs these
//! checks too.
//!
//! Pure crate: no IO, no clock, no processes. Facts in, findings out. A partial input
//! (a kube-proxy restore payload) is never judged as a full dump: checks that need the
//! whole kernel state skip it or answer `unknown`.

pub mod checks;
pub mod facts;
pub mod inventory;

pub use facts::{Facts, Origin};
use plumb_findings::Finding;

/// Runs every check and returns the findings sorted for display (problems first, worst first).
/// The checks are independent and split over the cores (a 10k-service dump takes tens of
/// milliseconds per check).
pub fn run(facts: &Facts) -> Vec<Finding> {
    let mut all: Vec<&checks::Check> = checks::ALL.iter().collect();
    let parts = plumb_ruleset::parallel::map_chunks(&mut all, 1, |chunk| {
        let mut out = Vec::new();
        for c in chunk.iter() {
            out.extend((c.check)(facts));
        }
        out
    });
    let mut out: Vec<Finding> = parts.into_iter().flatten().collect();
    plumb_findings::sort(&mut out);
    out
}
