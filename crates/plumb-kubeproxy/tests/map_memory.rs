//! Heap of recovering the service map of a kube-proxy `iptables-save` dump (2,000
//! services of 5 endpoints), counted by a wrapping global allocator: what the map
//! holds and what recovery peaks at, per service port, besides the parsed model.
//! Its own binary: the counting allocator is process-wide.

use plumb_kubeproxy::recover::{Evidence, recover};
use plumb_ruleset::format::{ParseOptions, parse_owned};
use plumb_testkit::heap;

#[global_allocator]
static GLOBAL: heap::Counting = heap::Counting;

/// A rule quoted as evidence is held as its place in the model (24 bytes), not as the
/// table, chain and text it reads from there (56 bytes: a 10k-service map holds 110k).
#[test]
fn evidence_is_a_place_in_the_model() {
    assert!(
        std::mem::size_of::<Evidence>() <= 24,
        "Evidence is {} bytes",
        std::mem::size_of::<Evidence>()
    );
}

/// The map holds at most 1,000 bytes a service port of about 5 endpoints (930:
/// positions for evidence, an endpoint's rules in place, addresses borrowed from the
/// DNAT rules, the services in one block of their size; with copies of the evidence
/// and addresses it held 1,410), and recovery peaks at 1,400 (1,260; with a second
/// copy of the services and blocks grown by doubling it peaked at 2,240).
#[test]
fn a_service_map_costs_under_1000_bytes_a_service_port() {
    let services = 2000;
    let text = plumb_kubeproxy::generated_save_text(services, 5).expect("valid generator config");
    let parsed = parse_owned(text.into_bytes(), &ParseOptions::default()).unwrap();
    let before = heap::reset_peak();
    let maps = recover(&parsed.ruleset);
    let peak = heap::peak() - before;
    let held = heap::live() - before;
    assert_eq!(maps.len(), 1);
    let ports = maps[0].services.len();
    assert!(ports >= services, "{ports} service ports");
    let endpoints: usize = maps[0].services.iter().map(|s| s.endpoints.len()).sum();
    let per_port = |bytes: usize| bytes as f64 / ports as f64;
    eprintln!(
        "{ports} service ports, {endpoints} endpoints: the map holds {:.0} and recovery peaks at {:.0} bytes a service port",
        per_port(held),
        per_port(peak)
    );
    assert!(
        per_port(held) <= 1000.0,
        "the map holds {:.0} bytes a service port",
        per_port(held)
    );
    assert!(
        per_port(peak) <= 1400.0,
        "recovery peaks at {:.0} bytes a service port",
        per_port(peak)
    );
}

/// An endpoint's one or two rules are held in place (48 bytes), not in a vector's
/// block of their own (24 and 48).
#[test]
fn an_endpoints_rules_are_held_in_place() {
    assert!(
        std::mem::size_of::<plumb_kubeproxy::recover::Quotes>() <= 48,
        "Quotes is {} bytes",
        std::mem::size_of::<plumb_kubeproxy::recover::Quotes>()
    );
}
