//! Heap of recovering the service map of a kube-proxy `iptables-save` dump and of
//! kube-proxy's nftables-mode transaction (2,000 services of 5 endpoints), counted by
//! a wrapping global allocator: what the map holds and what recovery peaks at, per
//! service port, besides the parsed model. Its own binary: the counting allocator is
//! process-wide.

use plumb_kubeproxy::recover::{Evidence, Quotes, RecoveredEndpoint, RecoveredService, recover};
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

/// The map holds at most 630 bytes a service port of about 5 endpoints (612:
/// positions for evidence, an endpoint's rules in place as one table and two 8-byte
/// positions, its probability in 8 bytes, its address a slice of the DNAT rule and its
/// chain read from that rule's place, the services in one block of their size and
/// their lists in boxed slices; with vectors it held 680, with 80-byte endpoints 756, with 12-byte positions 794, with 112-byte endpoints
/// 930, with copies of the evidence and addresses 1,410), and recovery peaks at 870
/// (851; 988 with vectors, 1,063 with 80-byte endpoints, 1,101 with 12-byte positions and the services'
/// rules and chains in blocks grown by doubling; 1,260 with 112-byte endpoints; with a
/// second copy of the services and blocks grown by doubling it peaked at 2,240).
#[test]
fn a_service_map_costs_under_630_bytes_a_service_port() {
    let _turn = heap::measuring();
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
    eprintln!("{ports} service ports, {endpoints} endpoints");
    assert_bytes_a_port("iptables mode", ports, held, peak, 630.0, 870.0);
}

/// An endpoint's one or two rules of one table are held in place as the table and two
/// positions of 8 bytes (24 bytes), not as two whole `Evidence`s (48) nor in a
/// vector's block of their own (24 and 48); with the probability in 8 bytes, the
/// address a slice of its rule and the endpoint chain read from the second rule, an
/// endpoint takes 64 bytes (it took 112, then 88 with positions of 12 bytes, then 80
/// with the address as a `Cow` and the chain held: a 10k-service map holds 47.5k
/// endpoints, a service's 5 in a block of 320 bytes rather than 448).
#[test]
fn an_endpoints_rules_are_held_in_place() {
    let quotes = std::mem::size_of::<Quotes>();
    assert!(quotes <= 24, "Quotes is {quotes} bytes");
    let endpoint = std::mem::size_of::<RecoveredEndpoint>();
    assert!(endpoint <= 64, "RecoveredEndpoint is {endpoint} bytes");
}

/// A service's eight lists (endpoints, rules, chains, addresses, notes) are boxed
/// slices of 16 bytes, not vectors of 24: a service takes at most 216 bytes (it took
/// 280; a 10k-service map holds 10k in one block).
#[test]
fn a_services_lists_are_boxed_slices() {
    let service = std::mem::size_of::<RecoveredService>();
    assert!(service <= 216, "RecoveredService is {service} bytes");
}

/// The endpoint chain read from the quoted rules is the one the rules name, and an
/// endpoint whose chain is not in the input keeps the name its service's rule gives.
#[test]
fn an_endpoints_chain_is_read_from_its_rules() {
    let text = plumb_kubeproxy::generated_save_text(20, 3).expect("valid generator config");
    // The same rules without the endpoint chains (a capture cut short).
    let cut: String = text
        .lines()
        .filter(|l| !l.starts_with("-A KUBE-SEP-") && !l.starts_with(":KUBE-SEP-"))
        .flat_map(|l| [l, "\n"])
        .collect();
    for (text, quoted) in [(text, 2), (cut, 1)] {
        let parsed = parse_owned(text.into_bytes(), &ParseOptions::default()).unwrap();
        let maps = recover(&parsed.ruleset);
        let mut seen = 0;
        for s in &maps[0].services {
            for e in &s.endpoints {
                let chain = e.chain().expect("an endpoint chain");
                assert!(chain.starts_with("KUBE-SEP-"), "{chain}");
                assert_eq!(e.evidence().len(), quoted, "{e:?}");
                let first = e.evidence().first().expect("the rule that picks it");
                assert!(first.text().contains(chain), "{chain} in {}", first.text());
                if let Some(dnat) = e.evidence().get(1) {
                    assert_eq!(dnat.chain(), chain);
                    assert!(dnat.text().contains(e.address().expect("an address")));
                }
                seen += 1;
            }
        }
        assert!(seen >= 40, "{seen} endpoints");
    }
}

/// nftables mode: the services are in one block of about their number, services
/// without endpoints (they have no `service-` chain) counted in; reserving for the
/// `service-` chains alone, 5% of them doubled the block, half of it unused for as long
/// as the map. The map holds at most 610 bytes a service port (595; 661 with the
/// services' lists in vectors, 737 with 80-byte endpoints, 1,018 with the doubled
/// block and 12-byte positions), and recovery peaks at 690 (669; 739 with vectors,
/// 815 with 80-byte endpoints, 1,479 with
/// also the chains by name in a map of references, and the names' index and the
/// services' rules and chains in blocks grown by doubling live beside the endpoints).
#[test]
fn an_nft_service_map_is_in_blocks_of_its_size() {
    let _turn = heap::measuring();
    let text = plumb_kubeproxy::generated_nft_text(2000, 5).expect("valid generator config");
    let parsed = parse_owned(text.into_bytes(), &ParseOptions::default()).unwrap();
    let before = heap::reset_peak();
    let maps = recover(&parsed.ruleset);
    let peak = heap::peak() - before;
    let held = heap::live() - before;
    assert_eq!(maps.len(), 1);
    let services = &maps[0].services;
    let ports = services.len();
    let without = services.iter().filter(|s| s.endpoints.is_empty()).count();
    assert!(
        ports >= 2000 && without >= 50,
        "{ports} service ports, {without} without endpoints"
    );
    assert!(
        services.capacity() <= ports + ports / 8,
        "{ports} services in a block of {}",
        services.capacity()
    );
    assert_bytes_a_port("nftables mode", ports, held, peak, 610.0, 690.0);
}

/// `text` without its `-m comment --comment ...` matches, as an nft listing of the
/// same rules shows them.
fn without_comments(text: &str) -> String {
    const MATCH: &str = " -m comment --comment ";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(MATCH) {
        out.push_str(&rest[..at]);
        let arg = &rest[at + MATCH.len()..];
        let end = match arg.strip_prefix('"') {
            Some(quoted) => quoted.find('"').map_or(arg.len(), |i| i + 2),
            None => arg.find([' ', '\n']).unwrap_or(arg.len()),
        };
        rest = &arg[end..];
    }
    out.push_str(rest);
    out
}

/// Without kube-proxy's comments every service port carries the same note ("name
/// unknown"): it is a borrowed text in a vector of its size, so the map of such a dump
/// holds 820 bytes a service port at most (799; 839 with 12-byte positions; a note
/// that was a string of its own in a vector grown by pushing cost 152 bytes more: 96 +
/// 80 instead of 24).
#[test]
fn unnamed_services_notes_cost_no_text_of_their_own() {
    let _turn = heap::measuring();
    let text = plumb_kubeproxy::generated_save_text(2000, 5).expect("valid generator config");
    let text = without_comments(&text);
    assert!(!text.contains("--comment"));
    let parsed = parse_owned(text.into_bytes(), &ParseOptions::default()).unwrap();
    let before = heap::reset_peak();
    let maps = recover(&parsed.ruleset);
    let held = heap::live() - before;
    assert_eq!(maps.len(), 1);
    // Services without endpoints are known only by the filter rules' comments: the
    // others remain.
    let ports = maps[0].services.len();
    assert!(ports >= 1800, "{ports} service ports");
    let unnamed = maps[0]
        .services
        .iter()
        .filter(|s| s.name.is_none() && s.notes.first().is_some_and(|n| n.contains("name unknown")))
        .count();
    assert_eq!(
        unnamed, ports,
        "every service port is unnamed, and noted so"
    );
    let per_port = held as f64 / ports as f64;
    eprintln!("without comments the map holds {per_port:.0} bytes a service port");
    assert!(
        per_port <= 820.0,
        "the map holds {per_port:.0} bytes a service port"
    );
}

/// What a map holds (`held`) and what its recovery peaked at (`peak`), in bytes a
/// service port, printed and held to their bounds.
fn assert_bytes_a_port(
    mode: &str,
    ports: usize,
    held: usize,
    peak: usize,
    max_held: f64,
    max_peak: f64,
) {
    let (held, peak) = (held as f64 / ports as f64, peak as f64 / ports as f64);
    eprintln!(
        "{mode}, {ports} service ports: the map holds {held:.0} and recovery peaks at {peak:.0} bytes a service port"
    );
    assert!(
        held <= max_held,
        "{mode}: the map holds {held:.0} bytes a service port"
    );
    assert!(
        peak <= max_peak,
        "{mode}: recovery peaks at {peak:.0} bytes a service port"
    );
}
