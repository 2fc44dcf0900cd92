//! Fuzz target: packing lines word by word is exact. Every line reads back byte for
//! byte with the line number it was packed with (numbers that go back and forth
//! included), and any other offset reads as nothing, never a panic. The same lines
//! packed in pieces (words numbered once for all) read back from their piece.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plumb_ruleset::model::packed::PackedBuilder;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut b = PackedBuilder::new();
    let mut packed = Vec::new();
    for (i, line) in text.split('\n').enumerate() {
        // Line numbers from the text itself: mostly rising, sometimes falling.
        let n = (i as u32).wrapping_mul(7) ^ u32::from(line.bytes().next().unwrap_or(0));
        packed.push((b.push(line, n).expect("small input"), line, n));
    }
    let p = b.finish();
    assert_eq!(p.len(), packed.len());
    for &(at, line, n) in &packed {
        assert_eq!(p.text(at).as_deref(), Some(line));
        assert_eq!(p.line(at), Some(n));
    }
    // In pieces: a new piece after each line that starts with a byte below 'A'.
    let mut b = PackedBuilder::new();
    let mut pieces = Vec::new();
    let mut open = Vec::new();
    for &(_, line, n) in &packed {
        open.push((b.push(line, n).expect("small input"), line, n));
        if line.bytes().next().is_some_and(|c| c < b'A') {
            pieces.push((b.finish_piece(), std::mem::take(&mut open)));
        }
    }
    pieces.push((b.finish_piece(), open));
    for (piece, lines) in &pieces {
        for &(at, line, n) in lines {
            assert_eq!(piece.text(at).as_deref(), Some(line));
            assert_eq!(piece.line(at), Some(n));
        }
    }
    let starts: std::collections::HashSet<u32> = packed.iter().map(|p| p.0).collect();
    for at in 0..(p.heap_bytes() as u32).min(4096) {
        if !starts.contains(&at) {
            assert_eq!(p.text(at), None, "offset {at} is no record's start");
        }
    }
});
