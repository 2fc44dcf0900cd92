//! `plumb_check::run` releases kube-proxy's service maps before it runs the checks not
//! marked `reads_service_maps`: each of those must answer the same without the maps.

mod common;

use plumb_check::{CheckInput, Origin, checks};
use plumb_findings::Finding;
use plumb_ruleset::format::{ParseOptions, parse_bytes};

/// Findings of every check (in `checks::ALL` order) with and without the service maps.
fn both_ways(rs: &plumb_ruleset::Ruleset) -> (Vec<Vec<Finding>>, Vec<Vec<Finding>>) {
    let mut facts = CheckInput::new(rs, Origin::File("f".into()), false);
    let with = checks::ALL.iter().map(|c| (c.check)(&facts)).collect();
    facts.services = Vec::new();
    let without = checks::ALL.iter().map(|c| (c.check)(&facts)).collect();
    (with, without)
}

fn json(f: &[Finding]) -> String {
    serde_json::to_string(f).expect("findings serialize")
}

/// `run` releases the maps before the checks not marked `reads_service_maps`: each of
/// them answers the same without the maps, on a generated dump and on the corpus's
/// kube-proxy dumps (a check that read them would lose services there, and `run` would
/// report less than the check finds on its own).
#[test]
fn checks_not_marked_as_reading_the_service_maps_do_not_read_them() {
    let generated = plumb_kubeproxy::generated_save_text(300, 5).expect("valid generator config");
    let mut texts = vec![("generated".to_string(), generated)];
    if let Some(dir) = common::corpus_dir() {
        let mut files: Vec<_> = walk(&dir.join("kube-proxy-iptables"));
        files.extend(walk(&dir.join("kube-proxy-nftables")));
        files.sort();
        for f in files {
            texts.push((f.display().to_string(), common::read(&f)));
        }
    }
    let mut judged = 0;
    let mut marked_differ = 0;
    let mut read = 0;
    for (name, text) in &texts {
        let Ok(p) = parse_bytes(text.as_bytes(), &ParseOptions::default()) else {
            continue;
        };
        read += 1;
        let (with, without) = both_ways(&p.ruleset);
        for ((check, with), without) in checks::ALL.iter().zip(&with).zip(&without) {
            if check.reads_service_maps {
                marked_differ += usize::from(json(with) != json(without));
                continue;
            }
            judged += 1;
            assert_eq!(
                json(with),
                json(without),
                "{name}: {} is not marked reads_service_maps but answers differently without them",
                check.ids[0].0
            );
        }
    }
    eprintln!(
        "{read} of {} inputs read, {judged} answers compared",
        texts.len()
    );
    assert!(judged > 0);
    // The test can tell: the marked checks do answer differently without the maps.
    assert!(marked_differ > 0, "no marked check used the maps");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else if p.metadata().is_ok_and(|m| m.len() < 4 << 20)
            && !p
                .extension()
                .is_some_and(|x| ["md", "go", "json", "sh", "py"].contains(&&*x.to_string_lossy()))
        {
            out.push(p);
        }
    }
    out
}
