//! Where `plumb services` / `plumb check` hold heap on one dump: the parse, the service
//! map, the check facts and each check, as the peak while the phase ran and what it
//! still holds after, next to the input's size. Counts every allocation through a
//! wrapping global allocator. With `--packed`, the rule texts are packed after the
//! parse (`Ruleset::pack_texts`) and the input dropped, and each phase also says how
//! many strides of packed lines it left read back (`Source::strides_read_back`).
//! `cargo run --release -p plumb-check --example phase_memory -- DUMP [--packed]`

use plumb_check::{CheckInput, Origin, checks, run};
use plumb_kubeproxy::recover::recover;
use plumb_ruleset::format::{ParseOptions, parse_owned};
use plumb_testkit::heap;

#[global_allocator]
static GLOBAL: heap::Counting = heap::Counting;

fn main() {
    let path = std::env::args()
        .nth(1)
        .expect("usage: phase_memory DUMP [--packed]");
    let mode = std::env::args().nth(2);
    let pack = mode.as_deref() == Some("--packed");
    let in_pieces = mode.as_deref() == Some("--pieces");
    let input = std::fs::metadata(&path).expect("dump").len() as f64;
    let bytes = if in_pieces {
        Vec::new()
    } else {
        std::fs::read(&path).expect("read dump")
    };
    let mib = |n: usize| n as f64 / (1024.0 * 1024.0);
    let phase = |name: &str, base: usize| {
        let (live, peak) = (heap::live(), heap::peak());
        println!(
            "{name:<40} peak {:>7.1} MiB ({:.2}x)  holds {:>7.1} MiB ({:.2}x)  phase +{:.1} MiB",
            mib(peak),
            peak as f64 / input,
            mib(live),
            live as f64 / input,
            mib(peak.saturating_sub(base)),
        );
        heap::reset_peak()
    };
    heap::reset_peak();
    let base = phase("input", 0);
    let mut parsed = if in_pieces {
        // Pieces of whole lines of about 1 MiB, read from the file as they are parsed.
        use std::io::BufRead;
        let text = std::io::BufReader::new(std::fs::File::open(&path).expect("open"));
        let mut lines = text.lines().map(|l| l.expect("read"));
        let pieces = std::iter::from_fn(move || {
            let mut piece = String::new();
            for l in lines.by_ref() {
                piece.push_str(&l);
                piece.push('\n');
                if piece.len() >= 1 << 20 {
                    break;
                }
            }
            (!piece.is_empty()).then_some(piece)
        });
        let mut pieces = pieces.peekable();
        let first = pieces.next().expect("a piece");
        plumb_ruleset::format::parse_pieces(first, pieces, "", &ParseOptions::default())
    } else {
        parse_owned(bytes, &ParseOptions::default()).expect("parse")
    };
    let base = phase("parse (input freed or shared)", base);
    if pack {
        parsed.ruleset.pack_texts();
    }
    // Every packed source (one per piece read), to count the strides read back.
    let mut packed_sources: Vec<plumb_ruleset::SourceText> = Vec::new();
    for r in parsed
        .ruleset
        .tables
        .iter()
        .flat_map(|t| &t.chains)
        .flat_map(|c| &c.rules)
        .filter(|r| r.text.is_packed())
    {
        if !packed_sources
            .last()
            .is_some_and(|s| std::sync::Arc::ptr_eq(s, r.text.source()))
        {
            packed_sources.push(r.text.source().clone());
        }
    }
    let base = if pack {
        phase("pack texts (input dropped)", base)
    } else {
        base
    };
    let strides = || {
        if !packed_sources.is_empty() {
            let n: usize = packed_sources.iter().map(|s| s.strides_read_back()).sum();
            println!("{:<40} {n} strides of packed lines read back", "");
        }
    };
    let maps = recover(&parsed.ruleset);
    let after_maps = phase("service map (recover)", base);
    strides();
    drop(maps);
    let base = phase("service map dropped", after_maps);
    let facts = CheckInput::new(&parsed.ruleset, Origin::File(path.clone()), false);
    let mut base = phase("check facts (map + references)", base);
    strides();
    for c in checks::ALL {
        let findings = (c.check)(&facts);
        base = phase(c.ids[0].0, base);
        strides();
        drop(findings);
    }
    let findings = run(facts);
    phase("all checks (run)", base);
    strides();
    drop(findings);
}
