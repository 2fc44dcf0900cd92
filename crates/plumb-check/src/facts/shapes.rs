//! Predicates on one table's shape that the inventory and the checks both use: a
//! table wiped by a flush, kube-proxy's IPVS mode.

use plumb_ruleset::iptables::XtBuf;
use plumb_ruleset::{Table, owner};

/// User chains a table must declare before "all empty" means flushed.
const MIN_USER_CHAINS: usize = 3;

/// True when every chain of `table` is empty and it declares at least a few user chains
/// that hold rules on a healthy node (canaries, hints and other chains the catalogue
/// calls unreferenced by design are empty anyway: a mangle table of canaries is not
/// flushed).
pub fn is_flushed(table: &Table) -> bool {
    // The first rule ends it: a live table answers at once.
    table.chains.iter().all(|c| c.rules.is_empty())
        && table
            .chains
            .iter()
            .filter(|c| !c.is_builtin() && owner::unreferenced_by_design(&c.name).is_none())
            .count()
            >= MIN_USER_CHAINS
}

/// True when nat `KUBE-SERVICES` selects services through ipsets (IPVS mode).
pub fn ipvs_mode(nat: &Table) -> bool {
    let mut buf = XtBuf::default();
    nat.chain("KUBE-SERVICES").is_some_and(|c| {
        // `-m set` needs the word "set": rules without it are not indexed.
        c.rules.iter().filter(|r| r.text.contains("set")).any(|r| {
            r.xt_in(&mut buf).is_some_and(|v| {
                v.match_named("set").is_some_and(|m| {
                    m.option("--match-set")
                        .and_then(|o| o.arg(0))
                        .is_some_and(|s| s.starts_with("KUBE-"))
                })
            })
        })
    })
}
