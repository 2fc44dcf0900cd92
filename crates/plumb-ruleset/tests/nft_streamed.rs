//! The nft text reader translates iptables-nft's tables as it reads them
//! (`parse_text_translated`, what `format::parse_*` use) instead of holding every rule
//! as nft statements until the end: that read must give exactly the model of the
//! whole-way read (`parse_text`, then `iptables_nft::translate`) on every nft text of
//! the corpus and of our fixtures, diagnostics included.

mod common;

use plumb_ruleset::format::{Format, detect};
use plumb_ruleset::nft::{
    iptables_nft, parse_text, parse_text_streamed, parse_text_translated,
    parse_text_translated_owned,
};
use plumb_ruleset::{Backend, Ruleset};
use proptest::prelude::*;
use std::path::{Path, PathBuf};

fn nft_texts(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            nft_texts(&p, out);
        } else if p.metadata().is_ok_and(|m| m.len() < 64 << 20)
            && let Ok(text) = std::fs::read_to_string(&p)
            && detect(&text).is_ok_and(|f| f == Format::NftText)
        {
            out.push(p);
        }
    }
}

fn whole_way(text: &str) -> Ruleset {
    let mut rs = parse_text(text);
    iptables_nft::translate(&mut rs);
    rs
}

/// A table named as iptables names its tables, that turns out to have a set after
/// its first chain was read: its chains' names must not hold the text either.
#[test]
fn a_table_that_stops_being_streamed_holds_no_span_of_the_text() {
    let text = "table ip filter {\n\tchain INPUT {\n\t\ttype filter hook input priority filter; policy accept;\n\t}\n\n\tchain X {\n\t}\n\n\tset s {\n\t\ttype ipv4_addr\n\t}\n}\n";
    let shared = plumb_ruleset::Source::read(text.to_string());
    let rs = parse_text_translated_owned(std::sync::Arc::clone(&shared));
    assert_eq!(rs.tables[0].chains.len(), 2);
    assert_eq!(&*rs.tables[0].chains[1].name, "X");
    assert_eq!(std::sync::Arc::strong_count(&shared), 1);
    assert_eq!(model(&rs), model(&whole_way(text)));
}

/// An iptables-nft listing with a small native table beside it: the native rules'
/// and statements' texts, spans of the text while reading, are copied into a text of
/// their own (less than the text), so that the text is freed before the iptables
/// tables are built; and a mostly native listing keeps the text they are spans of.
#[test]
fn native_rules_beside_iptables_nft_tables_hold_no_span_of_the_text() {
    let mut text = String::from(
        "table inet own {
	chain c {
		ip daddr 10.0.0.1  tcp dport 80 accept
		ip saddr 10.0.0.2 drop
	}
}
table ip filter {
	chain INPUT {
		type filter hook input priority filter; policy accept;
",
    );
    for i in 0..200 {
        text.push_str(&format!(
            "		ip saddr 10.1.0.{i} counter packets 0 bytes 0 accept
"
        ));
    }
    text.push_str(
        "	}
}
",
    );
    let want = model(&whole_way(&text));
    let shared = plumb_ruleset::Source::read(text.clone());
    let rs = parse_text_translated_owned(std::sync::Arc::clone(&shared));
    assert_eq!(std::sync::Arc::strong_count(&shared), 1);
    assert_eq!(model(&rs), want);
    let plumb_ruleset::RuleBody::Nft(n) = &rs.tables[0].chains[0].rules[0].body else {
        panic!("not an nft rule: {:?}", rs.tables[0].chains[0].rules[0]);
    };
    assert_eq!(
        &*rs.tables[0].chains[0].rules[0].text,
        "ip daddr 10.0.0.1 tcp dport 80 accept"
    );
    let statements = n.statements(&rs.tables[0].chains[0].rules[0].text);
    assert_eq!(&*statements[2].text, "accept");
    let native = &text[..text.find("table ip filter").unwrap()];
    let shared = plumb_ruleset::Source::read(native.to_string());
    let rs = parse_text_translated_owned(std::sync::Arc::clone(&shared));
    assert_eq!(model(&rs), model(&whole_way(native)));
    assert!(std::sync::Arc::strong_count(&shared) > 1);
}

/// A base chain policy iptables cannot spell: the table's iptables text does not read
/// back, which the read that takes the text must know before it frees the text.
#[test]
fn a_policy_iptables_cannot_spell_is_known_before_the_text_is_freed() {
    let text = "table ip filter {\n\tchain INPUT {\n\t\ttype filter hook input priority filter; policy \"drop now\";\n\t\tcounter packets 0 bytes 0 jump X\n\t}\n\n\tchain X {\n\t\tcounter packets 1 bytes 2 accept\n\t}\n}\n";
    let want = model(&whole_way(text));
    assert_eq!(model(&owned(text)), want);
    assert_eq!(model(&parse_text_translated(text)), want);
}

/// A jump to a chain whose name is 256 bytes or more (a streamed rule holds the
/// target's length in a byte): read the whole way, the same model.
#[test]
fn a_jump_to_a_long_chain_name_reads_the_same() {
    let long = "L".repeat(300);
    let text = format!(
        "table ip filter {{\n\tchain INPUT {{\n\t\ttype filter hook input priority filter; policy accept;\n\t\tcounter packets 0 bytes 0 jump {long}\n\t}}\n\n\tchain {long} {{\n\t\tcounter packets 1 bytes 2 accept\n\t}}\n}}\n"
    );
    let want = model(&whole_way(&text));
    assert_eq!(model(&owned(&text)), want);
    assert_eq!(model(&parse_text_translated(&text)), want);
}

/// The read that takes the text (what `format::parse_owned` uses).
fn owned(text: &str) -> Ruleset {
    parse_text_translated_owned(plumb_ruleset::Source::read(text.to_string()))
}

/// Everything the model holds, rule bodies included.
fn model(rs: &Ruleset) -> String {
    format!("{rs:#?}")
}

#[test]
fn translating_as_read_gives_the_whole_way_model_on_every_nft_text() {
    let mut files = Vec::new();
    nft_texts(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/nft"),
        &mut files,
    );
    let fixtures = files.len();
    if let Some(c) = common::corpus_dir() {
        nft_texts(&c, &mut files);
    }
    files.sort();
    assert!(fixtures > 0, "no nft text fixtures");
    let (mut streamed, mut translated_tables) = (0, 0);
    let mut differ = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let want = model(&whole_way(&text));
        if let Some(rs) = parse_text_streamed(&text) {
            streamed += 1;
            translated_tables += rs
                .tables
                .iter()
                .filter(|t| t.backend == Backend::IptablesNft)
                .count();
            if model(&rs) != want {
                differ.push(f.display().to_string());
            }
        }
        assert_eq!(
            model(&parse_text_translated(&text)),
            want,
            "{}",
            f.display()
        );
        // Handed the text (chain names first spans of it, then of their own text).
        assert_eq!(model(&owned(&text)), want, "{}", f.display());
        // ... and, unless native nft rules or set elements keep their texts as spans
        // of it, nothing read holds it afterwards: it is freed once read.
        let shared = plumb_ruleset::Source::read(text);
        let rs = parse_text_translated_owned(std::sync::Arc::clone(&shared));
        let native = rs
            .tables
            .iter()
            .flat_map(|t| &t.chains)
            .flat_map(|c| &c.rules)
            .any(|r| matches!(r.body, plumb_ruleset::RuleBody::Nft(_)))
            || rs
                .tables
                .iter()
                .flat_map(|t| &t.sets)
                .any(|s| !s.elements.is_empty());
        if !native {
            assert_eq!(std::sync::Arc::strong_count(&shared), 1, "{}", f.display());
        }
        drop(rs);
    }
    eprintln!(
        "{} nft texts, {streamed} read streaming ({translated_tables} iptables-nft tables translated as read)",
        files.len()
    );
    assert!(differ.is_empty(), "streaming read differs: {differ:#?}");
    assert!(streamed > 0);
}

/// A listing of iptables-nft tables (with a rule another tool wrote, a jump to a
/// missing chain and one to a base chain) is translated as read, with the whole-way
/// read's model and diagnostics.
#[test]
fn iptables_nft_listing_is_translated_as_read() {
    let text = "table ip nat {\n\tchain PREROUTING {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t\tcounter packets 5 bytes 300 jump KUBE-SERVICES\n\t}\n\tchain KUBE-SERVICES {\n\t\tip daddr 10.96.0.1 tcp dport 443 counter packets 0 bytes 0 jump KUBE-SVC-A\n\t\tip daddr 10.96.0.2 tcp dport 80 jump KUBE-SVC-A\n\t\tcounter packets 0 bytes 0 jump KUBE-MISSING\n\t\tcounter packets 0 bytes 0 jump PREROUTING\n\t}\n\tchain KUBE-SVC-A {\n\t\tcounter packets 0 bytes 0 dnat to 10.0.0.1:443\n\t}\n}\ntable inet other {\n\tchain c {\n\t\tjump d\n\t}\n\tchain e {\n\t}\n}\n";
    let rs = parse_text_streamed(text).expect("read streaming");
    assert_eq!(model(&rs), model(&whole_way(text)));
    let nat = &rs.tables[0];
    assert_eq!(nat.backend, Backend::IptablesNft);
    assert_eq!(nat.chain("KUBE-SERVICES").unwrap().rules.len(), 4);
    let errors: Vec<String> = rs.errors().map(|d| d.message.clone()).collect();
    assert!(
        errors.iter().any(|m| m.contains("'KUBE-MISSING'"))
            && errors.iter().any(|m| m.contains("base chain 'PREROUTING'"))
            && errors.iter().any(|m| m.contains("chain 'd'")),
        "{errors:?}"
    );
}

/// Texts the streaming read does not follow are read the whole way, with the same
/// result: a script, a chain block opened twice, a set after translated rules.
#[test]
fn texts_the_streaming_read_does_not_follow_are_read_the_whole_way() {
    for text in [
        "table ip nat {\n chain X {\n  counter jump Y\n }\n chain Y {\n }\n}\nadd rule ip nat X counter accept\n",
        "table ip nat {\n chain X {\n  counter jump Y\n }\n chain Y {\n }\n chain X {\n  counter accept\n }\n}\n",
        "table ip nat {\n chain X {\n  counter accept\n }\n set s {\n  type ipv4_addr\n }\n}\n",
        "table ip nat {\n chain X {\n  counter accept\n }\n}\ntable ip nat {\n chain Y {\n }\n}\n",
    ] {
        assert!(parse_text_streamed(text).is_none(), "{text}");
        assert_eq!(model(&parse_text_translated(text)), model(&whole_way(text)));
    }
}

/// An iptables-nft listing as nft prints it (kube-proxy's nat and filter tables, a
/// rule nft prints with the extension's own text, a rule another tool wrote).
const IPTABLES_NFT: &str = "table ip nat {
\tchain PREROUTING {
\t\ttype nat hook prerouting priority dstnat; policy accept;
\t\t counter packets 12 bytes 720 jump KUBE-SERVICES
\t}

\tchain KUBE-MARK-MASQ {
\t\tcounter packets 0 bytes 0 meta mark set mark or 0x4000
\t}

\tchain KUBE-SERVICES {
\t\tmeta l4proto tcp ip daddr 10.43.0.10  tcp dport 53 counter packets 0 bytes 0 jump KUBE-SVC-ERIFXISQEP7F7OF4
\t\t# match-set KUBE-CLUSTER-IP dst,dst counter packets 0 bytes 0 jump KUBE-MARK-MASQ
\t\tip daddr 10.43.0.11 accept
\t}

\tchain KUBE-SVC-ERIFXISQEP7F7OF4 {
\t\tmeta l4proto tcp ip saddr != 10.42.0.0/16 ip daddr 10.43.0.10  tcp dport 53 counter packets 0 bytes 0 jump KUBE-MARK-MASQ
\t\tmeta random & 2147483647 < 1073741824 counter packets 0 bytes 0 jump KUBE-SEP-A
\t\tcounter packets 0 bytes 0 jump KUBE-SEP-B
\t}

\tchain KUBE-SEP-A {
\t\tip saddr 10.42.0.5 counter packets 0 bytes 0 jump KUBE-MARK-MASQ
\t\tmeta l4proto tcp  counter packets 0 bytes 0 dnat to 10.42.0.5:53
\t}

\tchain KUBE-SEP-B {
\t\tmeta l4proto tcp  counter packets 0 bytes 0 dnat to 10.42.0.6:53
\t}
}
table ip filter {
\tchain INPUT {
\t\ttype filter hook input priority filter; policy accept;
\t\tct state new  counter packets 0 bytes 0 jump KUBE-FIREWALL
\t}

\tchain KUBE-FIREWALL {
\t\tip saddr != 127.0.0.0/8 ip daddr 127.0.0.0/8 ct status dnat counter packets 0 bytes 0 drop
\t}
}
";

fn mutate(base: &str, edits: &[(usize, u8, char)]) -> String {
    let mut s: Vec<char> = base.chars().collect();
    for &(pos, op, c) in edits {
        if s.is_empty() {
            s.push(c);
            continue;
        }
        let p = pos % s.len();
        match op % 4 {
            0 => {
                s.remove(p);
            }
            1 => s.insert(p, c),
            2 => s[p] = c,
            _ => s.truncate(p),
        }
    }
    s.into_iter().collect()
}

#[test]
fn the_iptables_nft_listing_is_read_streaming() {
    let rs = parse_text_streamed(IPTABLES_NFT).expect("read streaming");
    assert_eq!(model(&rs), model(&whole_way(IPTABLES_NFT)));
    assert!(rs.tables.iter().all(|t| t.backend == Backend::IptablesNft));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Whatever an edit does to an iptables-nft listing (a cut, a brace, a quote, a
    /// set, a script command), both reads give the same model.
    #[test]
    fn both_reads_agree_on_mutated_iptables_nft_listings(
        edits in proptest::collection::vec(
            (any::<usize>(), any::<u8>(), prop_oneof![
                Just('{'), Just('}'), Just(';'), Just(','), Just('"'), Just('#'),
                Just('\n'), Just(' '), Just('@'), Just('x'), any::<char>(),
            ]),
            1..8,
        )
    ) {
        let m = mutate(IPTABLES_NFT, &edits);
        let want = model(&whole_way(&m));
        prop_assert_eq!(model(&parse_text_translated(&m)), want.clone());
        prop_assert_eq!(model(&owned(&m)), want);
    }
}
