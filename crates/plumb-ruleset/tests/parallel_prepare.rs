//! The iptables reader prepares rule lines ahead, in blocks, on several threads: every
//! rule must still get the words, target, counters and diagnostics of its own line,
//! across block boundaries, with `-I` inserts, `[packets:bytes]` prefixes, trailing
//! `-c` counters and bad lines mixed in.

use plumb_ruleset::iptables::save::{IptablesInput, parse};

/// Far more lines than one read-ahead block, so chunks and blocks have seams.
const RULES: usize = 50_000;

fn dump() -> String {
    let mut s =
        String::from("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n");
    for c in 0..100 {
        s.push_str(&format!(":C{c} - [0:0]\n"));
    }
    for i in 0..RULES {
        let chain = format!("C{}", i % 100);
        match i % 7 {
            0 => s.push_str(&format!(
                "[{i}:{}] -A {chain} -s 10.0.{}.{}/32 -j T{i}\n",
                i * 2,
                i % 250,
                i % 200
            )),
            1 => s.push_str(&format!(
                "-A {chain} -p tcp --dport {} -j T{i} -c {i} {}\n",
                i % 65000 + 1,
                i * 3
            )),
            2 if i % 1000 == 2 => s.push_str(&format!(
                "-A {chain} -m comment --comment \"unterminated {i}\n"
            )),
            3 => s.push_str(&format!("-I {chain} 1 -d 10.1.0.0/16 -j T{i}\n")),
            _ => s.push_str(&format!(
                "-A {chain} -m comment --comment \"rule {i}\" -j T{i}\n"
            )),
        }
    }
    s.push_str("COMMIT\n");
    s
}

#[test]
fn every_rule_carries_its_own_line_across_block_seams() {
    let text = dump();
    let lines: Vec<&str> = text.split('\n').collect();
    let rs = parse(&text, &IptablesInput::default());
    let filter = &rs.tables[0];
    let mut rules = 0;
    for chain in &filter.chains {
        for rule in &chain.rules {
            rules += 1;
            let line = lines[rule.location().line as usize - 1];
            assert_eq!(&*rule.text, line, "rule text is its line");
            let i: usize = match line.rsplit_once(" -j T") {
                Some((_, rest)) => rest.split(' ').next().unwrap().parse().unwrap(),
                None => {
                    // The unterminated-quote lines: kept verbatim, without a target.
                    assert!(line.contains("unterminated"), "{line}");
                    assert!(rule.xt_target().is_none());
                    continue;
                }
            };
            let target = rule.xt_target().expect("target recorded");
            assert_eq!(
                target.name,
                format!("T{i}"),
                "line {}",
                rule.location().line
            );
            let expected_counters = match i % 7 {
                0 => Some((i as u64, i as u64 * 2)),
                1 => Some((i as u64, i as u64 * 3)),
                _ => None,
            };
            assert_eq!(
                rule.counters().map(|c| (c.packets, c.bytes)),
                expected_counters,
                "line {}",
                rule.location().line
            );
        }
    }
    assert_eq!(rules, RULES);
    // One diagnostic per unterminated quote, on its own line.
    let bad: Vec<u32> = rs
        .diagnostics
        .iter()
        .filter(|d| d.message.contains("unterminated quote"))
        .map(|d| d.line)
        .collect();
    let expected: Vec<u32> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.contains("unterminated"))
        .map(|(n, _)| n as u32 + 1)
        .collect();
    assert_eq!(bad, expected);
    assert!(!expected.is_empty());
    // -I CHAIN 1 puts each inserted rule first: chain C3's first rule is the last
    // inserted one into it.
    let c3 = filter.chain("C3").unwrap();
    let last_insert = (0..RULES)
        .filter(|i| i % 100 == 3 && i % 7 == 3)
        .max()
        .unwrap();
    assert_eq!(
        c3.rules[0].xt_target().unwrap().name,
        format!("T{last_insert}")
    );
}
