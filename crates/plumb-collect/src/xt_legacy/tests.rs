//! Decoder tests on tables captured from the kernel (`fixtures/`: framed blobs and the
//! text `iptables-legacy-save -c` printed for them; written by the ignored
//! `write_fixtures` test of `tests/legacy_oracle.rs`).

use super::*;
use proptest::prelude::*;

const FIXTURES: [(&[u8], &str); 4] = [
    (
        include_bytes!("fixtures/v4-filter.bin"),
        include_str!("fixtures/v4-filter.save"),
    ),
    (
        include_bytes!("fixtures/v4-nat.bin"),
        include_str!("fixtures/v4-nat.save"),
    ),
    (
        include_bytes!("fixtures/v6-filter.bin"),
        include_str!("fixtures/v6-filter.save"),
    ),
    (
        include_bytes!("fixtures/v6-nat.bin"),
        include_str!("fixtures/v6-nat.save"),
    ),
];

/// The fixture's text with the fixture name `table` instead of the real one.
fn renamed(save: &str) -> String {
    let (first, rest) = save.split_once('\n').unwrap();
    assert!(first.starts_with('*'));
    format!("*table\n{rest}")
}

#[test]
fn captured_tables_decode_to_the_save_tools_text() {
    for (bin, save) in FIXTURES {
        let t = decode_frame(bin, true).expect("frame");
        assert_eq!(t.read, LegacyTableRead::Save(renamed(save)));
    }
}

#[test]
fn without_counters_the_rules_carry_none() {
    let t = decode_frame(FIXTURES[0].0, false).expect("frame");
    let LegacyTableRead::Save(text) = t.read else {
        panic!("{t:?}")
    };
    assert!(text.lines().all(|l| !l.starts_with('[')));
    // Policies keep theirs, as iptables-legacy-save prints them.
    assert!(text.contains(":INPUT ACCEPT [0:0]"), "{text}");
}

/// The v4 filter fixture's raw parts, to change one field.
fn v4_filter() -> (XtFamily, RawTable) {
    let bin = FIXTURES[0].0;
    let word = |i: usize| u32::from_le_bytes(bin[1 + 4 * i..5 + 4 * i].try_into().unwrap());
    let mut t = RawTable {
        name: "filter".into(),
        valid_hooks: word(0),
        num_entries: word(11),
        entries: bin[49..].to_vec(),
        ..RawTable::default()
    };
    for h in 0..5 {
        t.hook_entry[h] = word(1 + h);
        t.underflow[h] = word(6 + h);
    }
    (XtFamily::Ipv4, t)
}

/// Offset of the first entry whose match or target is `name`.
fn entry_with(t: &RawTable, name: &str) -> usize {
    let all = entries(&t.entries, &V4).unwrap();
    all.iter()
        .find(|e| e.target.name == name || e.matches.iter().any(|m| m.name == name))
        .unwrap()
        .offset
}

#[test]
fn an_extension_not_decoded_names_itself() {
    let (f, mut t) = v4_filter();
    // Rename the first `comment` match to one plumb does not know.
    let at = entry_with(&t, "comment");
    let pos = t.entries[at..]
        .windows(8)
        .position(|w| w == b"comment\0")
        .unwrap();
    t.entries[at + pos..at + pos + 8].copy_from_slice(b"length\0\0");
    let why = decode_table(f, &t, true).unwrap_err();
    assert_eq!(why, "chain INPUT: match length revision 0 not decoded");
}

#[test]
fn a_jump_into_the_middle_of_a_chain_is_not_guessed() {
    let (f, mut t) = v4_filter();
    let all = entries(&t.entries, &V4).unwrap();
    // The first jump to a user chain; point it 8 bytes further.
    let (offset, at) = all
        .iter()
        .find_map(|e| {
            let v = verdict(&e.target)?;
            (v > 0 && v as usize != e.offset + e.next_offset)
                .then_some((e.offset, e.offset + e.next_offset - 8))
        })
        .unwrap();
    let v = i32::from_ne_bytes(t.entries[at..at + 4].try_into().unwrap());
    t.entries[at..at + 4].copy_from_slice(&(v + 112).to_ne_bytes());
    let why = decode_table(f, &t, true).unwrap_err();
    assert!(
        why.contains("not the start of a chain"),
        "{why} (entry {offset})"
    );
}

#[test]
fn structure_the_kernel_never_gives_is_refused_not_read() {
    let (f, t) = v4_filter();
    // Cut short anywhere: an error, never a table with rules missing.
    for cut in [1, 8, 111, 112, t.entries.len() / 2, t.entries.len() - 1] {
        let mut short = t.clone();
        short.entries.truncate(cut);
        assert!(decode_table(f, &short, true).is_err(), "cut at {cut}");
    }
    let mut count = t.clone();
    count.num_entries += 1;
    assert!(
        decode_table(f, &count, true)
            .unwrap_err()
            .contains("entries")
    );
    let mut hooks = t.clone();
    hooks.valid_hooks |= 1; // PREROUTING, which filter does not have
    assert!(decode_table(f, &hooks, true).is_err());
    let mut policy = t;
    policy.underflow[1] = 0;
    assert!(decode_table(f, &policy, true).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Captured tables with bytes changed, inserted or cut anywhere: a table or a
    /// reason, never a panic; what is translated reads back through the
    /// iptables-save reader.
    #[test]
    fn mutated_blobs_never_panic(
        which in 0usize..4,
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 1..8),
    ) {
        let mut bytes = FIXTURES[which].0.to_vec();
        for (at, value, kind) in edits {
            if bytes.is_empty() {
                break;
            }
            let at = at % bytes.len();
            match kind {
                0 => bytes[at] = value,
                1 => bytes.insert(at, value),
                _ => bytes.truncate(at),
            }
        }
        if let Some(LegacyTable { read: LegacyTableRead::Save(text), .. }) =
            decode_frame(&bytes, true)
        {
            let input = plumb_ruleset::iptables::save::IptablesInput::default();
            let rs = plumb_ruleset::iptables::save::parse(&text, &input);
            prop_assert_eq!(rs.tables.len(), 1);
        }
    }

    /// Any bytes at all.
    #[test]
    fn any_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = decode_frame(&bytes, true);
    }
}

/// An IPv4 `filter` table with `chains` user chains, each holding one rule that jumps
/// to the next (the last accepts), as iptables lays them out.
fn chained_table(chains: usize) -> RawTable {
    fn entry(out: &mut Vec<u8>, target: &[u8]) {
        let mut head = [0u8; 112];
        head[88..90].copy_from_slice(&112u16.to_ne_bytes());
        head[90..92].copy_from_slice(&((112 + target.len()) as u16).to_ne_bytes());
        out.extend_from_slice(&head);
        out.extend_from_slice(target);
    }
    fn standard(verdict: i32) -> Vec<u8> {
        let mut t = vec![0u8; 40];
        t[..2].copy_from_slice(&40u16.to_ne_bytes());
        t[32..36].copy_from_slice(&verdict.to_ne_bytes());
        t
    }
    fn error(name: &str) -> Vec<u8> {
        let mut t = vec![0u8; 64];
        t[..2].copy_from_slice(&64u16.to_ne_bytes());
        t[2..7].copy_from_slice(b"ERROR");
        t[32..32 + name.len()].copy_from_slice(name.as_bytes());
        t
    }
    let mut blob = Vec::new();
    for _ in 0..3 {
        entry(&mut blob, &standard(-2)); // ACCEPT policies of INPUT, FORWARD, OUTPUT
    }
    let base = blob.len();
    let chain_size = 176 + 152 + 152;
    for i in 0..chains {
        entry(&mut blob, &error(&format!("KUBE-C{i}")));
        let next = if i + 1 < chains {
            (base + (i + 1) * chain_size + 176) as i32
        } else {
            -2
        };
        entry(&mut blob, &standard(next));
        entry(&mut blob, &standard(-5));
    }
    entry(&mut blob, &error("ERROR"));
    RawTable {
        name: "filter".into(),
        valid_hooks: 0b01110,
        hook_entry: [0, 0, 152, 304, 0],
        underflow: [0, 0, 152, 304, 0],
        num_entries: (3 + 3 * chains + 1) as u32,
        entries: blob,
    }
}

/// A 10k-service table has 58k chains: decoding is linear in them (checking each
/// chain's name against all the others made it quadratic: 105 s for that table).
#[test]
fn decoding_is_linear_in_the_chains() {
    let cost = |chains: usize| {
        let t = chained_table(chains);
        (0..3)
            .map(|_| {
                let started = std::time::Instant::now();
                let text = decode_table(XtFamily::Ipv4, &t, false).unwrap();
                let elapsed = started.elapsed();
                assert!(text.contains("-A KUBE-C0 -j KUBE-C1\n"), "{}", &text[..300]);
                assert_eq!(text.matches("\n-A ").count(), chains);
                elapsed
            })
            .min()
            .unwrap()
    };
    let small = cost(2_000);
    let large = cost(16_000);
    let ratio = large.as_secs_f64() / small.as_secs_f64();
    assert!(
        ratio < 24.0,
        "8x the chains took {ratio:.1}x the time ({small:?} -> {large:?})"
    );
}
