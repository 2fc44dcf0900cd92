//! Heap of compiling kube-proxy's nat `KUBE-SERVICES` (one rule a service port of a
//! 2,000-service `iptables-save` dump) for tracing, counted by a wrapping global
//! allocator, per rule. `plumb check`'s forward-drop-blocks-pods compiles it on every
//! node that runs kube-proxy. Its own binary: the counting allocator is process-wide.

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
