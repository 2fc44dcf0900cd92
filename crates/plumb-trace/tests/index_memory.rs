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
    let id = chain_id(&index, "nat", "KUBE-SERVICES");
    let rules = index.chain(id).chain.rules.len();
    assert!(rules >= 1900, "{rules} rules");
    let (compiled, held, peak) = compile_measured(&index, id);
    assert_eq!(compiled, rules);
    assert_bytes_each("KUBE-SERVICES", "a rule", rules, held, peak, 400.0);
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
    let id = chain_id(&index, "kube-proxy", "services");
    let (compiled, held, peak) = compile_measured(&index, id);
    assert!(compiled >= 1, "{compiled} rules");
    assert_bytes_each(
        "services, @service-ips",
        "an element",
        elements,
        held,
        peak,
        100.0,
    );
}

/// The index id of chain `chain` of table `table`.
fn chain_id(index: &Index<'_>, table: &str, chain: &str) -> u32 {
    index
        .chains
        .iter()
        .position(|c| &*c.chain.name == chain && &*index.tables[c.table as usize].name == table)
        .unwrap_or_else(|| panic!("chain {chain} of table {table}")) as u32
}

/// Compiles chain `id` (rules and sets): how many rules, and the bytes it then holds
/// and peaked at.
fn compile_measured(index: &Index<'_>, id: u32) -> (usize, usize, usize) {
    let before = heap::reset_peak();
    let compiled = index.rules(id).len();
    let peak = heap::peak() - before;
    let held = heap::live() - before;
    (compiled, held, peak)
}

/// What a compiled chain holds and peaked at, in bytes for each of `count` things
/// (`each`: "a rule", "an element"), printed and both held to `max`.
fn assert_bytes_each(what: &str, each: &str, count: usize, held: usize, peak: usize, max: f64) {
    let (held, peak) = (held as f64 / count as f64, peak as f64 / count as f64);
    eprintln!("{what}, {count}: holds {held:.0} and peaks at {peak:.0} bytes {each}");
    assert!(held <= max, "{what}: holds {held:.0} bytes {each}");
    assert!(peak <= max, "{what}: peaks at {peak:.0} bytes {each}");
}
