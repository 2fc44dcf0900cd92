//! Accuracy on real nodes: `plumb check` and `plumb services` on every real-world ruleset
//! of the shared corpus (rulesets people posted from their clusters, in every format),
//! judged against what the corpus README says a correct tool must and must not report.
//!
//! Prints one line per file and the rates `docs/accuracy.md` records:
//! - problem precision: problem findings whose id is a true problem on that node, over all
//!   problem findings (ids the README leaves open are not counted either way);
//! - problem recall: true problems found, over true problems listed;
//! - input handling: genuine dumps read with no parse diagnostics, fragments read as
//!   fragments (never `full`, no parse errors), damaged inputs flagged;
//! - service maps: files whose recovered service ports match the README.
//!
//! It fails when precision is under 95 %, or any listed true problem, damaged input or
//! service map is missed.

#[path = "real_world/expectations.rs"]
mod expectations;

use expectations::{ALL, Expect, Input, Services};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// Finding ids that claim something is absent: never acceptable on a fragment.
const MISSING_IDS: &[&str] = &[
    "dangling-reference",
    "kube-proxy-rules-missing",
    "kube-proxy-canary-missing",
    "cni-chains-missing",
];

struct Run {
    /// The JSON document, or the reason there is none (plumb refused the input).
    json: Result<Value, String>,
}

fn run(args: &[&str], file: &Path) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(args)
        .args(["--json", "--ruleset"])
        .arg(file)
        .env("NO_COLOR", "1")
        .output()
        .expect("running plumb");
    let json = if out.status.code() == Some(2) {
        Err(String::from_utf8_lossy(&out.stderr)
            .lines()
            .next()
            .unwrap_or("")
            .to_string())
    } else {
        serde_json::from_slice(&out.stdout).map_err(|e| {
            format!(
                "no JSON ({e}); stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
    };
    Run { json }
}

/// The verdict on one file.
#[derive(Default)]
struct Verdict {
    true_problems: usize,
    false_problems: Vec<String>,
    missed: Vec<&'static str>,
    input_ok: bool,
    input_note: String,
    services_ok: Option<bool>,
    services_note: String,
}

fn judge(e: &Expect, check: &Run, services: &Run) -> Verdict {
    let mut v = Verdict::default();
    match &check.json {
        Err(why) => {
            v.input_ok = e.input == Input::Either;
            v.input_note = format!("refused: {why}");
            v.missed = e.problems.to_vec();
        }
        Ok(doc) => {
            let completeness = doc["completeness"].as_str().unwrap_or("?");
            let errors = doc["parse_errors"].as_u64().unwrap_or(u64::MAX);
            let problems: Vec<&str> = doc["findings"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|f| f["status"] == "problem")
                .filter_map(|f| f["id"].as_str())
                .collect();
            for id in &problems {
                if e.problems.contains(id) {
                    v.true_problems += 1;
                } else if !e.tolerated.contains(id) {
                    v.false_problems.push(id.to_string());
                }
            }
            v.missed = e
                .problems
                .iter()
                .copied()
                .filter(|id| !problems.contains(id))
                .collect();
            let missing_claimed = problems.iter().any(|id| MISSING_IDS.contains(id));
            v.input_ok = match e.input {
                Input::Genuine => errors == 0 && completeness == "full",
                Input::Fragment => errors == 0 && completeness != "full" && !missing_claimed,
                Input::Damaged => errors > 0 || completeness != "full",
                Input::Either => true,
            };
            v.input_note = format!("{completeness}, {errors} parse error(s)");
        }
    }
    let (specs, exact) = match e.services {
        Services::NotJudged => return v,
        Services::Exact(s) => (s, true),
        Services::AtLeast(s) => (s, false),
    };
    let got: Vec<String> = match &services.json {
        Err(why) => {
            v.services_ok = Some(false);
            v.services_note = format!("refused: {why}");
            return v;
        }
        Ok(doc) => recovered(doc),
    };
    let missing: Vec<&str> = specs
        .iter()
        .copied()
        .filter(|s| !got.iter().any(|g| spec_matches(s, g)))
        .collect();
    let extra: Vec<&String> = got
        .iter()
        .filter(|g| !specs.iter().any(|s| spec_matches(s, g)))
        .collect();
    v.services_ok = Some(missing.is_empty() && (!exact || extra.is_empty()));
    if v.services_ok != Some(true) {
        v.services_note = format!("missing {missing:?}");
        if exact {
            v.services_note += &format!(", unexpected {extra:?}");
        }
    }
    v
}

/// The recovered service ports as `"NAME IP:PORT/PROTO ENDPOINTS"`.
fn recovered(doc: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for m in doc["maps"].as_array().into_iter().flatten() {
        for s in m["services"].as_array().into_iter().flatten() {
            let port = s["port"]
                .as_u64()
                .map_or_else(|| "-".to_string(), |p| p.to_string());
            let eps = s["endpoints"].as_array().map_or(0, Vec::len);
            out.push(format!(
                "{} {}:{}/{} {}",
                s["name"].as_str().unwrap_or("?"),
                s["cluster_ip"].as_str().unwrap_or("-"),
                port,
                s["protocol"].as_str().unwrap_or("?"),
                eps
            ));
        }
    }
    out
}

/// Whether a recovered service line matches an expectation (`*` port and `?` endpoint
/// count match anything). A recovered name `?` (the capture does not show names: nft's
/// listing of iptables-nft rules omits their comments) matches any expected name.
fn spec_matches(spec: &str, got: &str) -> bool {
    let (s, g): (Vec<&str>, Vec<&str>) = (spec.split(' ').collect(), got.split(' ').collect());
    if s.len() != 3 || g.len() != 3 || (s[0] != g[0] && g[0] != "?") {
        return false;
    }
    let addr = |x: &str| -> Option<(String, String, String)> {
        let (ip, rest) = x.rsplit_once(':')?;
        let (port, proto) = rest.split_once('/')?;
        Some((ip.to_string(), port.to_string(), proto.to_string()))
    };
    let (Some((sip, sport, sproto)), Some((gip, gport, gproto))) = (addr(s[1]), addr(g[1])) else {
        return false;
    };
    sip == gip
        && sproto == gproto
        && (sport == "*" || sport == gport)
        && (s[2] == "?" || s[2] == g[2])
}

#[test]
fn real_world_rulesets_are_judged_as_the_corpus_readme_says() {
    let Some(corpus) = plumb_testkit::corpus_dir() else {
        return;
    };
    let dir = corpus.join("real-world");
    let (mut true_p, mut false_p, mut listed, mut found) = (0, 0, 0, 0);
    let (mut inputs_ok, mut maps_judged, mut maps_ok) = (0, 0, 0);
    let mut failures = Vec::new();
    for e in ALL {
        let path = dir.join(e.file);
        assert!(path.is_file(), "corpus file missing: {}", path.display());
        let v = judge(e, &run(&["check"], &path), &run(&["services"], &path));
        true_p += v.true_problems;
        false_p += v.false_problems.len();
        listed += e.problems.len();
        found += e.problems.len() - v.missed.len();
        inputs_ok += usize::from(v.input_ok);
        if let Some(ok) = v.services_ok {
            maps_judged += 1;
            maps_ok += usize::from(ok);
        }
        let mark = |ok: bool| if ok { "ok " } else { "BAD" };
        let services = v.services_ok.map_or("-  ", mark);
        println!(
            "{} input {} services {} problems +{} -{:?} missed {:?}  ({}) {}",
            short(e.file),
            mark(v.input_ok),
            services,
            v.true_problems,
            v.false_problems,
            v.missed,
            v.input_note,
            v.services_note
        );
        if !v.input_ok || !v.missed.is_empty() || v.services_ok == Some(false) {
            failures.push(short(e.file));
        }
    }
    let precision = if true_p + false_p == 0 {
        1.0
    } else {
        true_p as f64 / (true_p + false_p) as f64
    };
    println!(
        "\nproblem precision {:.1} % ({true_p} true / {} reported), recall {found}/{listed}, \
         inputs read right {inputs_ok}/{}, service maps right {maps_ok}/{maps_judged}",
        precision * 100.0,
        true_p + false_p,
        ALL.len()
    );
    assert!(
        precision >= 0.95,
        "problem precision {:.1} % is under 95 %",
        precision * 100.0
    );
    assert!(failures.is_empty(), "files judged wrong: {failures:?}");
}

/// The file name up to its first `_` (enough to tell the corpus files apart in a line).
fn short(file: &str) -> String {
    let name = file.rsplit('/').next().unwrap_or(file);
    let cut: String = name.chars().take(48).collect();
    format!("{cut:<48}")
}
