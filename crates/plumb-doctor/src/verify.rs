//! `plumb doctor --verify BEFORE.json`: what changed between an earlier doctor report
//! (its JSON, as `plumb doctor --json` printed it) and the report of this run, after a
//! fix. Pure: the CLI reads the file and parses it into an [`EarlierReport`]; nothing is
//! kept between runs but that file.
//!
//! Findings are matched by id and subject. The subject is the finding's title with its
//! numbers masked (`reverted firewall changes 38 times` and `... 40 times` are one
//! subject), so several problems of one id (one per chain, per Service) stay apart; a
//! problem whose id is still a problem now under another title is still present (its
//! wording changed, not the fact).
//!
//! The verdict: *fixed* when the earlier root cause and every problem it explained
//! (`supporting`) are no longer problems and were each checked and ruled out (`ok`) or
//! are not reported at all, and no other root cause took its place. A check that now
//! cannot tell (`unknown`) proves nothing, so it is not fixed. A new root cause is
//! `changed`: the earlier one is gone, but the node is not healthy, so not fixed.

use crate::Report;
use plumb_findings::{Finding, Status};
use serde::{Deserialize, Serialize};

/// JSON schema version of [`Verification`].
pub const VERIFY_VERSION: u32 = 1;

/// The parts of an earlier `plumb doctor --json` report the comparison needs; other
/// fields are ignored, so reports of any later layout with the same fields are read.
#[derive(Clone, Debug, Deserialize)]
pub struct EarlierReport {
    /// The report's schema version ([`crate::REPORT_VERSION`] when made by this plumb).
    pub version: u32,
    /// What was diagnosed then.
    #[serde(default)]
    pub source: Option<EarlierSource>,
    /// The root cause then, if any.
    #[serde(default)]
    pub root_cause: Option<String>,
    /// The problem ids the root cause explained then.
    #[serde(default)]
    pub supporting: Vec<String>,
    /// Every finding then.
    pub findings: Vec<EarlierFinding>,
}

/// What an earlier report was made from.
#[derive(Clone, Debug, Deserialize)]
pub struct EarlierSource {
    /// `live node`, `sosreport at ...`, ...
    pub description: String,
}

/// One finding of an earlier report.
#[derive(Clone, Debug, Deserialize)]
pub struct EarlierFinding {
    /// Finding id.
    pub id: String,
    /// `problem`, `ok` or `unknown`.
    pub status: String,
    /// Its title then.
    #[serde(default)]
    pub title: String,
}

/// Why an earlier report cannot be compared.
#[derive(Debug, PartialEq, Eq)]
pub enum VerifyError {
    /// The report's version is not one this plumb reads.
    Version(u32),
    /// A finding's status is not `problem`, `ok` or `unknown`.
    Status {
        /// The finding's id.
        id: String,
        /// The status it had.
        status: String,
    },
}

impl std::fmt::Display for VerifyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VerifyError::Version(v) => write!(
                f,
                "report version {v} is not one this plumb reads (it writes and reads version {})",
                crate::REPORT_VERSION
            ),
            VerifyError::Status { id, status } => write!(
                f,
                "finding {id} has status {status:?} (expected problem, ok or unknown)"
            ),
        }
    }
}

impl std::error::Error for VerifyError {}

/// What happened to the earlier root cause.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RootCauseChange {
    /// There was one, and now there is none.
    Gone,
    /// Now there is another one (or there was none and now there is one).
    Changed,
    /// The same root cause as before.
    Same,
    /// There was none and there is none.
    None,
}

/// The root cause before and now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RootCause {
    /// gone, changed, same or none.
    pub change: RootCauseChange,
    /// The earlier root cause.
    pub before: Option<String>,
    /// This run's root cause.
    pub now: Option<String>,
}

/// One finding compared.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FindingChange {
    /// Finding id.
    pub id: String,
    /// The title with its numbers masked (what the finding is about).
    pub subject: String,
    /// The title before (absent for a new finding).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    /// The title now (absent when the id is not reported any more).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub now: Option<String>,
    /// Status now: `problem`, `ok`, `unknown`, or `absent` (not reported).
    pub status_now: String,
    /// The earlier root cause or one of the problems it explained.
    pub was_root_cause: bool,
}

/// `plumb doctor --verify`'s result (JSON: this, with the run's full report in `report`).
#[derive(Clone, Debug, Serialize)]
pub struct Verification {
    /// [`VERIFY_VERSION`].
    pub version: u32,
    /// True when the earlier root cause and the problems it explained are gone (ruled out
    /// or not reported) and no root cause took its place.
    pub fixed: bool,
    /// One sentence saying why `fixed` is what it is.
    pub verdict: String,
    /// What the earlier report was made from (its source description).
    pub before_source: Option<String>,
    /// The earlier root cause and this run's.
    pub root_cause: RootCause,
    /// Earlier problems that are no longer problems (status now `ok`, `unknown` or
    /// `absent`; only `ok` and `absent` count as fixed).
    pub resolved: Vec<FindingChange>,
    /// Earlier problems that are still problems.
    pub still_present: Vec<FindingChange>,
    /// Problems that the earlier report did not have.
    pub new: Vec<FindingChange>,
    /// This run's full report.
    pub report: Report,
}

/// The title with each run of digits replaced by `#`: what a finding is about, without
/// the counts and times that change from run to run.
pub fn subject(title: &str) -> String {
    let mut s = String::with_capacity(title.len());
    let mut in_digits = false;
    for c in title.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                s.push('#');
            }
            in_digits = true;
        } else {
            s.push(c);
            in_digits = false;
        }
    }
    s
}

fn status_str(s: Status) -> &'static str {
    match s {
        Status::Problem => "problem",
        Status::Ok => "ok",
        Status::Unknown => "unknown",
    }
}

/// Compares the earlier report with this run's.
pub fn compare(before: &EarlierReport, now: Report) -> Result<Verification, VerifyError> {
    if before.version != crate::REPORT_VERSION {
        return Err(VerifyError::Version(before.version));
    }
    for f in &before.findings {
        if !matches!(f.status.as_str(), "problem" | "ok" | "unknown") {
            return Err(VerifyError::Status {
                id: f.id.clone(),
                status: f.status.clone(),
            });
        }
    }
    let was_target = |id: &str| {
        before.root_cause.as_deref() == Some(id) || before.supporting.iter().any(|s| s == id)
    };
    let now_problems: Vec<&Finding> = now.problems().collect();
    let mut taken = vec![false; now_problems.len()];
    let mut resolved = Vec::new();
    let mut still_present = Vec::new();
    let earlier: Vec<&EarlierFinding> = before
        .findings
        .iter()
        .filter(|f| f.status == "problem")
        .collect();
    // Two passes: exact (id, subject) matches first, so a reworded problem does not take
    // the place of another problem of the same id that kept its subject.
    let mut matched: Vec<Option<usize>> = vec![None; earlier.len()];
    for (i, b) in earlier.iter().enumerate() {
        let key = subject(&b.title);
        if let Some(j) = (0..now_problems.len()).find(|&j| {
            !taken[j] && now_problems[j].id == b.id && subject(&now_problems[j].title) == key
        }) {
            taken[j] = true;
            matched[i] = Some(j);
        }
    }
    for (i, b) in earlier.iter().enumerate() {
        if matched[i].is_some() {
            continue;
        }
        if let Some(j) = (0..now_problems.len()).find(|&j| !taken[j] && now_problems[j].id == b.id)
        {
            taken[j] = true;
            matched[i] = Some(j);
        }
    }
    for (i, b) in earlier.iter().enumerate() {
        let change = |now_title: Option<String>, status_now: &str| FindingChange {
            id: b.id.clone(),
            subject: subject(&b.title),
            before: Some(b.title.clone()),
            now: now_title,
            status_now: status_now.to_string(),
            was_root_cause: was_target(&b.id),
        };
        match matched[i] {
            Some(j) => still_present.push(change(Some(now_problems[j].title.clone()), "problem")),
            None => {
                // Not a problem now: what the check says instead, if it still reports.
                let other = now
                    .findings
                    .iter()
                    .find(|f| f.id == b.id && !f.is_problem());
                resolved.push(match other {
                    Some(f) => change(Some(f.title.clone()), status_str(f.status)),
                    None => change(None, "absent"),
                });
            }
        }
    }
    let new: Vec<FindingChange> = now_problems
        .iter()
        .zip(&taken)
        .filter(|(_, t)| !**t)
        .map(|(f, _)| FindingChange {
            id: f.id.clone(),
            subject: subject(&f.title),
            before: None,
            now: Some(f.title.clone()),
            status_now: "problem".into(),
            was_root_cause: false,
        })
        .collect();
    let change = match (&before.root_cause, &now.root_cause) {
        (None, None) => RootCauseChange::None,
        (Some(_), None) => RootCauseChange::Gone,
        (Some(b), Some(n)) if b == n => RootCauseChange::Same,
        _ => RootCauseChange::Changed,
    };
    let unproven: Vec<&FindingChange> = resolved
        .iter()
        .filter(|c| c.was_root_cause && c.status_now == "unknown")
        .collect();
    let lingering: Vec<&FindingChange> =
        still_present.iter().filter(|c| c.was_root_cause).collect();
    let (fixed, verdict) = match change {
        RootCauseChange::Same => (
            false,
            format!(
                "not fixed: the root cause is still {}",
                now.root_cause.as_deref().unwrap_or_default()
            ),
        ),
        RootCauseChange::Changed => (
            false,
            match &before.root_cause {
                Some(b) => format!(
                    "not fixed: the root cause is now {} (was {b})",
                    now.root_cause.as_deref().unwrap_or_default()
                ),
                None => format!(
                    "not fixed: there is a root cause now, {}, and there was none before",
                    now.root_cause.as_deref().unwrap_or_default()
                ),
            },
        ),
        _ if !lingering.is_empty() => (
            false,
            format!(
                "not fixed: the root cause is gone but {} it explained {} still a problem",
                lingering
                    .iter()
                    .map(|c| c.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                if lingering.len() == 1 { "is" } else { "are" }
            ),
        ),
        _ if !unproven.is_empty() => (
            false,
            format!(
                "not proven: {} could not be checked this time (unknown), so the fix is not confirmed",
                unproven
                    .iter()
                    .map(|c| c.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        RootCauseChange::Gone => (
            true,
            format!(
                "fixed: {} and the problems it explained are gone",
                before.root_cause.as_deref().unwrap_or_default()
            ),
        ),
        RootCauseChange::None => (true, "no root cause before and none now".to_string()),
    };
    Ok(Verification {
        version: VERIFY_VERSION,
        fixed,
        verdict,
        before_source: before.source.as_ref().map(|s| s.description.clone()),
        root_cause: RootCause {
            change,
            before: before.root_cause.clone(),
            now: now.root_cause.clone(),
        },
        resolved,
        still_present,
        new,
        report: now,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use plumb_findings::{Confidence, Severity};

    fn report(root: Option<&str>, supporting: &[&str], findings: Vec<Finding>) -> Report {
        Report {
            version: crate::REPORT_VERSION,
            source: None,
            distribution: None,
            root_cause: root.map(str::to_string),
            confidence: root.map(|_| Confidence::High),
            supporting: supporting.iter().map(|s| s.to_string()).collect(),
            to_confirm: Vec::new(),
            network: None,
            timeline: Default::default(),
            findings,
        }
    }

    fn earlier(r: &Report) -> EarlierReport {
        serde_json::from_value(serde_json::to_value(r).unwrap()).unwrap()
    }

    fn p(id: &str, title: &str) -> Finding {
        Finding::problem(id, Severity::High, title).fix("x")
    }

    #[test]
    fn subject_masks_numbers_only() {
        assert_eq!(
            subject("venAgent reverted firewall changes 38 times at 10.43.0.1"),
            "venAgent reverted firewall changes # times at #.#.#.#"
        );
    }

    #[test]
    fn gone_when_root_cause_and_supporting_are_ruled_out() {
        let before = report(
            Some("sysctl-requirement"),
            &["clusterip-unreachable"],
            vec![
                p("sysctl-requirement", "net.ipv4.ip_forward=0"),
                p(
                    "clusterip-unreachable",
                    "10.43.0.1:443 times out after 3000 ms",
                ),
            ],
        );
        let now = report(
            None,
            &[],
            vec![
                Finding::ok("sysctl-requirement", "sysctls are as Kubernetes needs"),
                Finding::ok("clusterip-unreachable", "10.43.0.1:443 answers"),
            ],
        );
        let v = compare(&earlier(&before), now).unwrap();
        assert!(v.fixed, "{}", v.verdict);
        assert_eq!(v.root_cause.change, RootCauseChange::Gone);
        assert_eq!(v.resolved.len(), 2);
        assert!(v.still_present.is_empty() && v.new.is_empty());
        assert_eq!(v.resolved[0].status_now, "ok");
    }

    #[test]
    fn same_root_cause_with_new_counts_is_still_present() {
        let before = report(
            Some("security-agent-tamper"),
            &[],
            vec![p(
                "security-agent-tamper",
                "venAgent reverted firewall changes 38 times",
            )],
        );
        let now = report(
            Some("security-agent-tamper"),
            &[],
            vec![p(
                "security-agent-tamper",
                "venAgent reverted firewall changes 40 times",
            )],
        );
        let v = compare(&earlier(&before), now).unwrap();
        assert!(!v.fixed);
        assert_eq!(v.root_cause.change, RootCauseChange::Same);
        assert_eq!(v.still_present.len(), 1);
        assert!(v.resolved.is_empty() && v.new.is_empty());
    }

    #[test]
    fn several_problems_of_one_id_are_kept_apart_by_subject() {
        let before = report(
            Some("a"),
            &[],
            vec![
                p("a", "root"),
                p("dup", "chain KUBE-SVC-AAAA"),
                p("dup", "chain KUBE-SVC-BBBB"),
            ],
        );
        let now = report(
            Some("a"),
            &[],
            vec![p("a", "root"), p("dup", "chain KUBE-SVC-BBBB")],
        );
        let v = compare(&earlier(&before), now).unwrap();
        assert_eq!(v.resolved.len(), 1);
        assert_eq!(v.resolved[0].before.as_deref(), Some("chain KUBE-SVC-AAAA"));
        assert_eq!(v.still_present.len(), 2);
    }

    #[test]
    fn a_new_root_cause_is_changed_and_not_fixed() {
        let before = report(
            Some("host-firewall-ufw"),
            &[],
            vec![p("host-firewall-ufw", "UFW")],
        );
        let now = report(
            Some("sysctl-requirement"),
            &[],
            vec![p("sysctl-requirement", "ip_forward=0")],
        );
        let v = compare(&earlier(&before), now).unwrap();
        assert!(!v.fixed);
        assert_eq!(v.root_cause.change, RootCauseChange::Changed);
        assert_eq!(v.resolved[0].status_now, "absent");
        assert_eq!(v.new[0].id, "sysctl-requirement");
    }

    #[test]
    fn a_supporting_problem_left_or_an_unknown_now_is_not_fixed() {
        let before = report(Some("r"), &["s"], vec![p("r", "root"), p("s", "symptom")]);
        let lingering = report(None, &[], vec![Finding::ok("r", "fine"), p("s", "symptom")]);
        let v = compare(&earlier(&before), lingering).unwrap();
        assert!(
            !v.fixed && v.verdict.contains("s it explained is still"),
            "{}",
            v.verdict
        );
        let unknown = report(
            None,
            &[],
            vec![
                Finding::unknown("r", Severity::High, "cannot tell"),
                Finding::ok("s", "fine"),
            ],
        );
        let v = compare(&earlier(&before), unknown).unwrap();
        assert!(
            !v.fixed && v.verdict.starts_with("not proven"),
            "{}",
            v.verdict
        );
    }

    #[test]
    fn other_versions_and_statuses_are_refused() {
        let mut e = earlier(&report(None, &[], vec![]));
        e.version = 7;
        assert_eq!(
            compare(&e, report(None, &[], vec![])).unwrap_err(),
            VerifyError::Version(7)
        );
        let mut e = earlier(&report(None, &[], vec![p("x", "t")]));
        e.findings[0].status = "broken".into();
        assert!(matches!(
            compare(&e, report(None, &[], vec![])),
            Err(VerifyError::Status { .. })
        ));
    }
}
