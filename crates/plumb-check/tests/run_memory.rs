//! What `plumb_check::run` holds at once, counted by a wrapping global allocator on a
//! kube-proxy dump of 2,000 services: the service maps are released before the checks
//! that do not read them run, the host-firewall check's trace index among them. Its own
//! binary: the counting allocator is process-wide.

use plumb_check::{CheckInput, Origin, checks, run};
use plumb_kubeproxy::recover::recover;
use plumb_ruleset::format::{ParseOptions, parse_owned};
use plumb_testkit::heap;

#[global_allocator]
static GLOBAL: heap::Counting = heap::Counting;

/// kube-proxy's `iptables-save` dump of `services` services of 5 endpoints each, with a
/// filter table (so the host-firewall check traces its flows).
fn dump(services: usize) -> String {
    plumb_kubeproxy::generated_save_text(services, 5).expect("valid generator config")
}

/// The checks' heap over what the facts hold when `run` starts stays under a quarter of
/// the service maps' size. Holding the maps while the host-firewall check builds its
/// trace index (one parallel pass of every check) peaked at the index's size over the
/// maps, about 60% of the maps on kube-proxy dumps (6.2 MiB over 10.3 MiB of maps on a
/// 10k-service node); released first, the checks peak under what the facts held.
#[test]
fn run_never_holds_the_service_maps_and_the_trace_index_at_once() {
    let parsed = parse_owned(dump(2000).into_bytes(), &ParseOptions::default()).unwrap();
    let base = heap::live();
    let maps = recover(&parsed.ruleset);
    let map_bytes = heap::live() - base;
    assert!(
        maps.iter().map(|m| m.services.len()).sum::<usize>() >= 2000,
        "the maps hold the services"
    );
    drop(maps);
    let facts = CheckInput::new(&parsed.ruleset, Origin::File("dump".into()), false);
    let before = heap::reset_peak();
    let findings = run(facts);
    let over = heap::peak().saturating_sub(before);
    eprintln!(
        "service maps {map_bytes} bytes; run peaks {over} bytes over the facts it was given ({:.0}% of the maps)",
        100.0 * over as f64 / map_bytes as f64
    );
    // The host-firewall check did trace the flows (its index is built).
    assert!(
        findings.iter().any(|f| f.id == checks::shadow::ID_FORWARD),
        "forward-drop-blocks-pods was judged: {findings:#?}"
    );
    assert!(
        over * 4 <= map_bytes,
        "run peaks {over} bytes over its facts, more than a quarter of the {map_bytes} bytes of service maps: are the maps held while the trace index is built?"
    );
}
