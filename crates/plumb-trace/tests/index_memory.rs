//! Heap of compiling kube-proxy's nat `KUBE-SERVICES` (one rule a service port of a
//! 2,000-service `iptables-save` dump) for tracing, counted by a wrapping global
//! allocator, per rule. `plumb check`'s forward-drop-blocks-pods compiles it on every
//! node that runs kube-proxy; and of compiling kube-proxy's nftables-mode `services`
//! chain with its `@service-ips` map, which the same check compiles on nftables-mode
//! nodes. Its own binary: the counting allocator is process-wide.

use plumb_ruleset::format::{ParseOptions, parse_owned};
use plumb_testkit::heap;
use plumb_trace::Index;
use plumb_trace::ir::Item;

#[global_allocator]
static GLOBAL: heap::Counting = heap::Counting;

/// A compiled condition or action is 56 bytes: the rare large ones (DNAT and SNAT
/// specs) are boxed (unboxed, every item was 72).
#[test]
fn an_item_is_56_bytes() {
    assert!(
        std::mem::size_of::<Item>() <= 56,
        "Item is {} bytes",
        std::mem::size_of::<Item>()
    );
}

/// KUBE-SERVICES compiles into at most 400 bytes a rule (about 360: five 56-byte
/// items, the rule and its dispatch entry) and peaks at 420 (about 380). Its items are
/// counted before they are compiled into one block of that size; grown by doubling
/// from four a rule, the block held 650 bytes a rule and peaked at 880 while it was
/// copied.
#[test]
fn kube_services_compiles_into_under_400_bytes_a_rule() {
    let _turn = heap::measuring();
    let text = plumb_kubeproxy::generated_save_text(2000, 5).expect("valid generator config");
    let parsed = parse_owned(text.into_bytes(), &ParseOptions::default()).unwrap();
    let index = Index::build(&parsed.ruleset);
    let id = index
        .chains
        .iter()
        .position(|c| {
            &*c.chain.name == "KUBE-SERVICES" && &*index.tables[c.table as usize].name == "nat"
        })
        .expect("nat KUBE-SERVICES") as u32;
    let rules = index.chain(id).chain.rules.len();
    assert!(rules >= 1900, "{rules} rules");
    let before = heap::reset_peak();
    let compiled = index.rules(id).len();
    let peak = heap::peak() - before;
    let held = heap::live() - before;
    assert_eq!(compiled, rules);
    let per_rule = |bytes: usize| bytes as f64 / rules as f64;
    eprintln!(
        "KUBE-SERVICES, {rules} rules: holds {:.0} and peaks at {:.0} bytes a rule compiled",
        per_rule(held),
        per_rule(peak)
    );
    assert!(
        per_rule(held) <= 400.0,
        "holds {:.0} bytes a rule",
        per_rule(held)
    );
    assert!(
        per_rule(peak) <= 400.0,
        "peaks at {:.0} bytes a rule",
        per_rule(peak)
    );
}

/// kube-proxy's nftables-mode `services` chain is one verdict-map lookup in
/// `@service-ips` (`address . protocol . port : goto service-...`, one element a
/// service port with endpoints): compiled for tracing, the map holds at most 100 bytes
/// an element and peaks at 100 (76 and 79: the key encoded in 10 bytes, ~14 of
/// bookkeeping, the 32-byte verdict, the comment a span of the ruleset). As a hash map of
/// atom vectors with copied comments it held 324 and peaked at 328.
#[test]
fn service_ips_compiles_into_under_100_bytes_an_element() {
    let _turn = heap::measuring();
    let text = plumb_kubeproxy::generated_nft_text(2000, 5).expect("valid generator config");
    let parsed = parse_owned(text.into_bytes(), &ParseOptions::default()).unwrap();
    let table = parsed
        .ruleset
        .tables
        .iter()
        .find(|t| &*t.name == "kube-proxy")
        .expect("the kube-proxy table");
    let elements = table
        .sets
        .iter()
        .find(|s| &*s.name == "service-ips")
        .expect("@service-ips")
        .elements
        .len();
    assert!(elements >= 1800, "{elements} elements");
    let index = Index::build(&parsed.ruleset);
    let id = index
        .chains
        .iter()
        .position(|c| {
            &*c.chain.name == "services" && &*index.tables[c.table as usize].name == "kube-proxy"
        })
        .expect("the services chain") as u32;
    let before = heap::reset_peak();
    let compiled = index.rules(id).len();
    let peak = heap::peak() - before;
    let held = heap::live() - before;
    assert!(compiled >= 1, "{compiled} rules");
    let per_element = |bytes: usize| bytes as f64 / elements as f64;
    eprintln!(
        "services, @service-ips of {elements} elements: holds {:.0} and peaks at {:.0} bytes an element",
        per_element(held),
        per_element(peak)
    );
    assert!(
        per_element(held) <= 100.0,
        "holds {:.0} bytes an element",
        per_element(held)
    );
    assert!(
        per_element(peak) <= 100.0,
        "peaks at {:.0} bytes an element",
        per_element(peak)
    );
}
