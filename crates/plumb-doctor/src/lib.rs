//! plumb-doctor: node-local root-cause diagnosis from a node's [`Facts`]. Pure: facts in
//! (gathered live, from a namespace, or from a bundle by plumb-collect), report out.
//!
//! - [`checks`]: node checks (one module each, stable ids); the ruleset integrity checks
//!   come from plumb-check and run over the same facts.
//! - [`reasoning`]: ranks candidate causes by the symptoms they explain.
//! - [`report`]: the versioned JSON report and its human rendering.

pub mod checks;
pub mod context;
pub mod reasoning;
pub mod report;

pub use reasoning::Confidence;
pub use report::{REPORT_VERSION, Report};

use context::{Ctx, NodeValues};
use plumb_check::{Finding, Status};
use plumb_facts::{Facts, SourceKind};

/// Runs every check over `facts` and concludes.
pub fn diagnose(facts: &Facts) -> Report {
    let ruleset_findings = match facts.ruleset.value() {
        Some(rs) => {
            let origin = match &facts.source {
                Some(s) if matches!(s.kind, SourceKind::Live | SourceKind::Namespace) => {
                    plumb_check::Origin::Live { netns: None }
                }
                _ => plumb_check::Origin::File(
                    facts.ruleset.source().unwrap_or("ruleset").to_string(),
                ),
            };
            plumb_check::run(&plumb_check::Facts::new(rs, origin, false))
        }
        None => vec![Finding::unknown(
            "ruleset-unreadable",
            plumb_check::Severity::High,
            "no ruleset could be read, so kube-proxy's and the CNI's rules were not checked",
        )],
    };
    let ctx = Ctx {
        facts,
        ruleset_findings,
        values: NodeValues::from_facts(facts),
    };
    let mut findings: Vec<Finding> = checks::ALL.iter().flat_map(|c| c(&ctx)).collect();
    findings.extend(ctx.ruleset_findings.iter().cloned());
    let conclusion = reasoning::conclude(&findings);
    order(&mut findings, conclusion.as_ref());
    Report {
        version: REPORT_VERSION,
        source: facts.source.clone(),
        root_cause: conclusion.as_ref().map(|c| c.root_cause.clone()),
        confidence: conclusion.as_ref().map(|c| c.confidence),
        supporting: conclusion.map(|c| c.supporting).unwrap_or_default(),
        findings,
    }
}

/// Root cause, supporting problems, other problems (worst first), unknown, ok.
fn order(findings: &mut [Finding], c: Option<&reasoning::Conclusion>) {
    let rank = |f: &Finding| -> (u8, std::cmp::Reverse<plumb_check::Severity>) {
        let r = match f.status {
            Status::Problem if c.is_some_and(|c| c.root_cause == f.id) => 0,
            Status::Problem if c.is_some_and(|c| c.supporting.contains(&f.id)) => 1,
            Status::Problem => 2,
            Status::Unknown => 3,
            Status::Ok => 4,
        };
        (r, std::cmp::Reverse(f.severity))
    };
    findings.sort_by_key(|f| rank(f));
}
