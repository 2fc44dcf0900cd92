//! Reading rules through a reused `XtBuf` (whole-ruleset passes) and the target the
//! parser recorded give exactly what the kept per-rule index gives, and the allocation-free owner count agrees with the
//! per-rule owner functions; over every ruleset in the shared corpus.

mod common;

use plumb_ruleset::iptables::{XtBuf, XtViewOf};
use plumb_ruleset::owner::{chain_owner, count, rule_owner};
use plumb_ruleset::{ParseOptions, Ruleset, parse_bytes};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Everything a view says, flattened for comparison.
fn describe(v: &XtViewOf<'_, '_>) -> String {
    let opt = |o: plumb_ruleset::iptables::XtOptionViewOf<'_, '_>| {
        format!(
            "{}{}={:?}",
            if o.negated() { "!" } else { "" },
            o.name(),
            o.args().collect::<Vec<_>>()
        )
    };
    let mut s = format!("words={:?}", v.raw_words().collect::<Vec<_>>());
    s += &format!(" generic={:?}", v.generic().map(opt).collect::<Vec<_>>());
    for m in v.matches() {
        s += &format!(
            " m:{}{}={:?}",
            m.module(),
            if m.implicit() { "(implicit)" } else { "" },
            m.options().map(opt).collect::<Vec<_>>()
        );
    }
    if let Some(t) = v.target() {
        s += &format!(
            " t:{}{}={:?}",
            t.name(),
            if t.is_goto() { "(goto)" } else { "" },
            t.options().map(opt).collect::<Vec<_>>()
        );
    }
    s += &format!(" comments={:?}", v.comments().collect::<Vec<_>>());
    s += &format!(" ref={:?}", v.chain_reference());
    s
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else if std::fs::metadata(&p).is_ok_and(|m| m.len() < 4 << 20) {
            out.push(p);
        }
    }
}

fn corpus_rulesets() -> Vec<(PathBuf, Ruleset)> {
    let Some(dir) = common::corpus_dir() else {
        return Vec::new();
    };
    let mut paths = Vec::new();
    files(&dir, &mut paths);
    paths.sort();
    paths
        .into_iter()
        .filter_map(|p| {
            let bytes = std::fs::read(&p).ok()?;
            let parsed = parse_bytes(&bytes, &ParseOptions::default()).ok()?;
            Some((p, parsed.ruleset))
        })
        .collect()
}

fn generated() -> Ruleset {
    // Long and short rules interleaved, quoted comments, a goto, a bad rule.
    let text = "*nat\n:PREROUTING ACCEPT [0:0]\n:X - [0:0]\n:Y - [0:0]\n\
-A PREROUTING -m comment --comment \"kubernetes service portals\" -j X\n\
-A X -m comment --comment \"ns/a:p \\\"q\\\" -> 10.0.0.1:80\" -m tcp -p tcp -d 10.43.0.1/32 --dport 80 -m statistic --mode random --probability 0.5 -j Y\n\
-A X -g Y\n\
-A X -p udp ! --dport 53 -j DNAT --to-destination 10.0.0.2:53\n\
-A Y --dport 80 stray -j\n\
-A Y -j RETURN\n\
COMMIT\n";
    parse_bytes(text.as_bytes(), &ParseOptions::default())
        .unwrap()
        .ruleset
}

/// The parser records each rule's target; `xt_target` and `chain_references` read it.
#[test]
fn xt_in_and_recorded_target_read_what_xt_reads() {
    let mut sets = corpus_rulesets();
    sets.push(("generated".into(), generated()));
    let mut buf = XtBuf::default();
    let mut compared = 0;
    for (path, rs) in &sets {
        for t in &rs.tables {
            for c in &t.chains {
                for r in &c.rules {
                    let recorded = r.xt_target().map(|t| (t.name, t.goto, t.has_options));
                    let recorded_refs = r.chain_references();
                    let Some(fresh) = r.xt_in(&mut buf).map(|v| describe(&v)) else {
                        assert!(r.xt().is_none());
                        continue;
                    };
                    let v = r.xt().unwrap();
                    let target = v
                        .target()
                        .map(|t| (t.name(), t.is_goto(), t.options().next().is_some()));
                    assert_eq!(recorded, target, "{}: {}", path.display(), &*r.text);
                    let refs: Vec<_> = v.chain_reference().into_iter().collect();
                    assert_eq!(recorded_refs, refs, "{}: {}", path.display(), &*r.text);
                    let kept = describe(&r.xt().unwrap());
                    assert_eq!(fresh, kept, "{}: {}", path.display(), &*r.text);
                    // Once the rule keeps an index, xt_in reads that one.
                    assert_eq!(describe(&r.xt_in(&mut buf).unwrap()), kept);
                    compared += 1;
                }
            }
        }
    }
    assert!(compared >= 5, "{compared}");
}

#[test]
fn owner_count_agrees_with_per_rule_owners() {
    let mut sets = corpus_rulesets();
    sets.push(("generated".into(), generated()));
    for (path, rs) in &sets {
        let mut chains: BTreeMap<String, usize> = BTreeMap::new();
        let mut rules: BTreeMap<String, usize> = BTreeMap::new();
        for t in &rs.tables {
            for c in &t.chains {
                *chains.entry(chain_owner(t, c).owner.0).or_default() += 1;
                for r in &c.rules {
                    *rules.entry(rule_owner(t, c, r).owner.0).or_default() += 1;
                }
            }
        }
        let counted = count(rs);
        assert_eq!(counted.chains, chains, "{}", path.display());
        assert_eq!(counted.rules, rules, "{}", path.display());
    }
}
