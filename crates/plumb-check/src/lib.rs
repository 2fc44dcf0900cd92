//! plumb-check: integrity checks over a node's netfilter rulesets, as [`Finding`]s.
//!
//! Each check is one module under [`checks`] with a doc comment that explains it, one
//! `check(&CheckInput) -> Vec<Finding>` function and its tests (rust-analyzer's diagnostics
//! style). A check returns an `ok` finding when it ruled its problem out, so reports can
//! say what was checked. Findings are plumb-findings' type; `plumb doctor` runs these
//! checks too.
//!
//! Pure crate: no IO, no clock, no processes. CheckInput in, findings out. A partial input
//! (a kube-proxy restore payload) is never judged as a full dump: checks that need the
//! whole kernel state skip it or answer `unknown`.

#![deny(missing_docs)]

pub mod checks;
pub mod facts;

pub use facts::inventory;

pub use facts::{CheckInput, Origin};
use plumb_findings::Finding;

/// Runs every check and returns the findings sorted for display (problems first, worst first).
/// The checks are independent and split over the cores (a 10k-service dump takes tens of
/// milliseconds per check).
///
/// Takes the facts by value to release kube-proxy's service maps halfway: the checks that
/// read them (`reads_service_maps`) run first, then the maps are dropped, then every other
/// check runs. Among those is the host-firewall check, whose trace index is the largest
/// thing a check builds; [`CheckInput::new`] already took what it needs of the maps.
/// Held together, maps and index made the peak of `plumb check`: on a 10k-service node
/// (15.4 MiB of nft text, a 26.3 MiB model) the maps hold 7.6 MiB and the index peaks
/// at 5.9 MiB, 40.7 MiB of heap in the checks. Apart, the checks peak at 35.2 MiB, under
/// the parse (37.5 MiB) and the maps' recovery in [`CheckInput::new`] (36.8 MiB, as in
/// `plumb services`); `phase_memory` example.
pub fn run(mut facts: CheckInput<'_>) -> Vec<Finding> {
    let (with_maps, without): (Vec<usize>, Vec<usize>) =
        (0..checks::ALL.len()).partition(|&i| checks::ALL[i].reads_service_maps);
    let mut found: Vec<Vec<Finding>> = vec![Vec::new(); checks::ALL.len()];
    let mut phase = |facts: &CheckInput, mut which: Vec<usize>| {
        let parts = plumb_ruleset::parallel::map_chunks(&mut which, 1, |chunk| {
            chunk
                .iter()
                .map(|&i| (i, (checks::ALL[i].check)(facts)))
                .collect::<Vec<_>>()
        });
        for (i, f) in parts.into_iter().flatten() {
            found[i] = f;
        }
    };
    phase(&facts, with_maps);
    facts.services = Vec::new();
    phase(&facts, without);
    // In the order of `checks::ALL`, as when all ran at once.
    let mut out: Vec<Finding> = found.into_iter().flatten().collect();
    mark_approximate(&facts, &mut out);
    plumb_findings::sort(&mut out);
    out
}

/// Every problem and unknown drawn from a listing says so: the listing does not show all
/// an `iptables-save` dump shows, so a conclusion from it is approximate. Done here, once,
/// so no check can forget it. `ok` findings are left alone: "checked, no problem" lists
/// only ids.
fn mark_approximate(facts: &CheckInput, findings: &mut [Finding]) {
    let Some(reason) = approximate_reason(facts.ruleset) else {
        return;
    };
    for f in findings
        .iter_mut()
        .filter(|f| f.status != plumb_findings::Status::Ok && f.approximate.is_none())
    {
        f.approximate = Some(reason.clone());
    }
}

/// Why conclusions about `ruleset` are approximate, or `None` for exact input. A listing
/// made without `-v` hides the interface columns (rules that differ only in `-i`/`-o`
/// print the same), which matters more than the prose and rounding every listing has.
pub fn approximate_reason(ruleset: &plumb_ruleset::Ruleset) -> Option<String> {
    if !ruleset.approximate {
        return None;
    }
    let hides_interfaces = ruleset
        .tables
        .iter()
        .flat_map(|t| &t.chains)
        .flat_map(|c| &c.rules)
        .any(
            |r| matches!(&r.body, plumb_ruleset::RuleBody::Approximate(l) if !l.interfaces_listed),
        );
    Some(if hides_interfaces {
        "read from a listing that hides columns (no -v: interfaces are not shown)".into()
    } else {
        "read from a listing, which prints options as prose and may round counters".into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use plumb_findings::Status;
    use plumb_ruleset::format::{ParseOptions, parse_bytes};

    fn findings(text: &str) -> Vec<Finding> {
        let rs = parse_bytes(text.as_bytes(), &ParseOptions::default())
            .unwrap()
            .ruleset;
        assert!(rs.approximate, "read as a listing");
        run(CheckInput::new(&rs, Origin::File("listing".into()), false))
    }

    const HEADER: &str = "target     prot opt source               destination\n";

    #[test]
    fn every_problem_and_unknown_from_a_listing_is_approximate() {
        let text = format!(
            "Chain INPUT (policy ACCEPT)\n{HEADER}KUBE-GONE  all  --  0.0.0.0/0            0.0.0.0/0\n\n\
             Chain FORWARD (policy DROP)\n{HEADER}\n\
             Chain OUTPUT (policy ACCEPT)\n{HEADER}\n\
             Chain KUBE-LEFT (0 references)\n{HEADER}ACCEPT     all  --  0.0.0.0/0            0.0.0.0/0\n"
        );
        let f = findings(&text);
        let judged: Vec<&Finding> = f.iter().filter(|f| f.status != Status::Ok).collect();
        assert!(
            judged.iter().any(|f| f.id == "dangling-reference"),
            "the dangling jump is judged: {f:#?}"
        );
        for x in &judged {
            let reason = x.approximate.as_deref().unwrap_or_else(|| panic!("{x:#?}"));
            assert!(reason.contains("hides columns"), "{reason}");
        }
        assert!(
            f.iter()
                .filter(|f| f.status == Status::Ok)
                .all(|f| f.approximate.is_none())
        );
    }

    #[test]
    fn a_verbose_listing_is_approximate_without_hidden_columns() {
        let vheader =
            " pkts bytes target     prot opt in     out     source               destination\n";
        let text = format!(
            "Chain INPUT (policy ACCEPT 0 packets, 0 bytes)\n{vheader}    0     0 KUBE-GONE  all  --  *      *       0.0.0.0/0            0.0.0.0/0\n\n\
             Chain FORWARD (policy ACCEPT 0 packets, 0 bytes)\n{vheader}\n\
             Chain OUTPUT (policy ACCEPT 0 packets, 0 bytes)\n{vheader}\n"
        );
        let f = findings(&text);
        let dangling = f
            .iter()
            .find(|f| f.id == "dangling-reference" && f.status != Status::Ok)
            .unwrap_or_else(|| panic!("{f:#?}"));
        let reason = dangling.approximate.as_deref().expect("approximate");
        assert!(reason.contains("prose"), "{reason}");
    }

    #[test]
    fn findings_from_a_dump_are_not_approximate() {
        let text = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n\
                    -A INPUT -j KUBE-GONE\nCOMMIT\n";
        let rs = parse_bytes(text.as_bytes(), &ParseOptions::default())
            .unwrap()
            .ruleset;
        let f = run(CheckInput::new(&rs, Origin::File("dump".into()), false));
        assert!(f.iter().any(|f| f.status != Status::Ok), "{f:#?}");
        assert!(f.iter().all(|f| f.approximate.is_none()), "{f:#?}");
    }
}
