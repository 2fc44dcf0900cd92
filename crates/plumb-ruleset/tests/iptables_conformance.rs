//! iptables' own rule-syntax suite (`extensions/*.t`, `rule;expected;OK|FAIL`):
//! every OK rule must parse and print as the saved form iptables expects.
//!
//! The pass rate is printed with every remaining failure and its cause, and the
//! test fails if it drops below the recorded floor (raise the floor as it improves).

mod common;

use plumb_ruleset::iptables::save::{IptablesInput, parse};
use plumb_ruleset::{Family, Severity};

/// Lowest acceptable pass rate (percent of OK rules). Raise it, never lower it.
const PASS_RATE_FLOOR: f64 = 95.0;

struct Case {
    file: String,
    line: usize,
    family: Family,
    rule: String,
    expected: String,
    /// The table and first chain the file names for its rules (`*nat`, `:PREROUTING`).
    table: String,
    chain: String,
}

fn cases(dir: &std::path::Path) -> (Vec<Case>, usize) {
    let mut out = Vec::new();
    let mut skipped_families = 0;
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !name.ends_with(".t") {
            continue;
        }
        // arptables and ebtables suites test other tools' syntax.
        if name.starts_with("libarpt_") || name.starts_with("libebt_") {
            skipped_families += 1;
            continue;
        }
        let family = if name.starts_with("libip6t_") || name.starts_with("ip6tables") {
            Family::Ip6
        } else {
            Family::Ip
        };
        let mut table = "filter".to_string();
        let mut chain = "INPUT".to_string();
        for (i, line) in common::read(&path).lines().enumerate() {
            if let Some(t) = line.strip_prefix('*') {
                table = t.trim().to_string();
            }
            if let Some(c) = line.strip_prefix(':') {
                chain = c.split(',').next().unwrap_or("INPUT").trim().to_string();
            }
            if line.starts_with('#')
                || line.starts_with(':')
                || line.starts_with('*')
                || line.trim().is_empty()
            {
                continue;
            }
            let parts: Vec<&str> = line.rsplitn(3, ';').collect();
            if parts.len() != 3 || parts[0] != "OK" {
                continue;
            }
            let (rule, expected) = (parts[2].to_string(), parts[1]);
            let expected = if expected == "=" {
                rule.clone()
            } else {
                expected.to_string()
            };
            let family = if rule.contains("::") || rule.contains("ip6") {
                Family::Ip6
            } else {
                family
            };
            out.push(Case {
                file: name.clone(),
                line: i + 1,
                family,
                rule,
                expected,
                table: table.clone(),
                chain: chain.clone(),
            });
        }
    }
    (out, skipped_families)
}

#[test]
fn ok_rules_print_in_saved_form() {
    let Some(corpus) = common::corpus_dir() else {
        return;
    };
    let (cases, skipped) = cases(&corpus.join("iptables-upstream/extensions"));
    assert!(
        cases.len() > 500,
        "expected the full suite, found {} cases",
        cases.len()
    );
    let mut failures = Vec::new();
    for c in &cases {
        let text = format!("*{}\n-A {} {}\nCOMMIT\n", c.table, c.chain, c.rule);
        let input = IptablesInput {
            family: c.family,
            table: None,
            ..Default::default()
        };
        let rs = parse(&text, &input);
        let errors: Vec<_> = rs
            .diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .collect();
        let rule = &rs.tables[0]
            .chains
            .iter()
            .find(|ch| *ch.name == *c.chain)
            .unwrap()
            .rules[0];
        let mut printed = String::new();
        plumb_ruleset::iptables::canonical::write_spec(&mut printed, &rule.xt().unwrap(), c.family);
        let printed = printed.trim_start();
        if !errors.is_empty() {
            failures.push(format!(
                "{}:{}: parse error {} in `{}`",
                c.file, c.line, errors[0], c.rule
            ));
        } else if printed != c.expected {
            failures.push(format!(
                "{}:{}: `{}`\n      expected `{}`\n      printed  `{}`",
                c.file, c.line, c.rule, c.expected, printed
            ));
        }
    }
    let passed = cases.len() - failures.len();
    let rate = 100.0 * passed as f64 / cases.len() as f64;
    println!(
        "iptables conformance: {passed}/{} OK rules print in saved form ({rate:.1}%); {skipped} arptables/ebtables files skipped",
        cases.len()
    );
    for f in &failures {
        println!("  FAIL {f}");
    }
    assert!(
        rate >= PASS_RATE_FLOOR,
        "pass rate {rate:.1}% fell below the floor {PASS_RATE_FLOOR}%"
    );
}
