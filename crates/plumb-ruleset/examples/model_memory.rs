//! Measures what parsing a dump costs in heap: peak bytes while parsing and bytes the
//! finished model holds, next to the input's size (the model's memory budget is
//! 3x the input), then what each part of the model holds (freed one after another).
//! Counts every allocation through a wrapping global allocator, at the size asked for:
//! a vector's room never written to is counted here but is not resident.
//!
//! `cargo run --release -p plumb-ruleset --example model_memory -- DUMP`

use plumb_testkit::heap;

#[global_allocator]
static GLOBAL: heap::Counting = heap::Counting;

fn mib(n: usize) -> f64 {
    n as f64 / (1024.0 * 1024.0)
}

fn main() {
    let (_, bytes) = plumb_testkit::example_input("model_memory DUMP");
    let input = bytes.len();
    heap::reset_peak();
    let parsed = plumb_ruleset::format::parse_owned(bytes, &Default::default());
    let held = heap::live();
    let peak = heap::peak();
    let rules = parsed.as_ref().map(|p| p.ruleset.rule_count()).unwrap_or(0);
    println!(
        "input {:.1} MiB, {rules} rules; model holds {:.1} MiB ({:.2}x input, input text included); peak while parsing {:.1} MiB ({:.2}x, the input buffer included)",
        mib(input),
        mib(held),
        held as f64 / input as f64,
        mib(peak),
        peak as f64 / input as f64,
    );
    // Where the model's heap is: each part's bytes, freed one after another.
    let Ok(mut parsed) = parsed else { return };
    let elements: usize = (parsed.ruleset.tables.iter())
        .flat_map(|t| &t.sets)
        .map(|s| s.elements.len())
        .sum();
    let sets: usize = parsed.ruleset.tables.iter().map(|t| t.sets.len()).sum();
    println!(
        "  {} chains, {sets} sets, {elements} set elements",
        parsed.ruleset.chain_count()
    );
    let mut part = |what: &str, take: &mut dyn FnMut(&mut plumb_ruleset::Ruleset)| {
        let before = heap::live();
        take(&mut parsed.ruleset);
        println!("  {what}: {:.2} MiB", mib(before - heap::live()));
    };
    part("diagnostics", &mut |r| r.diagnostics = Vec::new());
    part("set elements", &mut |r| {
        r.tables
            .iter_mut()
            .flat_map(|t| &mut t.sets)
            .for_each(|s| s.elements = Vec::new())
    });
    part("sets (rest)", &mut |r| {
        r.tables.iter_mut().for_each(|t| t.sets = Vec::new())
    });
    part("rules", &mut |r| {
        r.tables
            .iter_mut()
            .flat_map(|t| &mut t.chains)
            .for_each(|c| c.rules = Vec::new())
    });
    // The input text goes with the last span of it (chains' names, rules' texts).
    part("chains (and the input text)", &mut |r| {
        r.tables.iter_mut().for_each(|t| t.chains = Vec::new())
    });
    part("tables", &mut |r| r.tables = Vec::new());
    drop(parsed);
}
