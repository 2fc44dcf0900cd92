//! The order findings are reported in, the same for every command: the root cause (when
//! a diagnosis has one), what it explains, other problems worst first, then what could
//! not be checked, then what was ruled out.

use crate::conclusion::Conclusion;
use crate::finding::{Finding, Status};
use std::cmp::Reverse;

/// Orders findings for display: problems first, then unknown, then ok; within a status
/// by severity (highest first), then id and title.
pub fn sort(findings: &mut [Finding]) {
    sort_with(findings, None);
}

/// Like [`sort`], with the root cause of `conclusion` first and the problems it
/// explains right after it.
pub fn sort_with(findings: &mut [Finding], conclusion: Option<&Conclusion>) {
    let rank = |f: &Finding| -> u8 {
        match f.status {
            Status::Problem if conclusion.is_some_and(|c| c.root_cause == f.id) => 0,
            Status::Problem if conclusion.is_some_and(|c| c.supporting.contains(&f.id)) => 1,
            Status::Problem => 2,
            Status::Unknown => 3,
            Status::Ok => 4,
        }
    };
    findings.sort_by(|a, b| {
        rank(a)
            .cmp(&rank(b))
            .then(Reverse(a.severity).cmp(&Reverse(b.severity)))
            .then(a.id.cmp(&b.id))
            .then(a.title.cmp(&b.title))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conclusion::Confidence;
    use crate::finding::Severity;

    fn ids(f: &[Finding]) -> Vec<&str> {
        f.iter().map(|f| f.id.as_str()).collect()
    }

    #[test]
    fn problems_worst_first_then_unknown_then_ok() {
        let mut f = vec![
            Finding::ok("a-ok", "t"),
            Finding::unknown("b-unknown", Severity::High, "t"),
            Finding::problem("c-low", Severity::Low, "t"),
            Finding::problem("d-critical", Severity::Critical, "t"),
        ];
        sort(&mut f);
        assert_eq!(ids(&f), ["d-critical", "c-low", "b-unknown", "a-ok"]);
    }

    #[test]
    fn the_root_cause_and_what_it_explains_come_first() {
        let mut f = vec![
            Finding::problem("other", Severity::Critical, "t"),
            Finding::problem("symptom", Severity::Low, "t"),
            Finding::problem("cause", Severity::Medium, "t"),
            Finding::ok("fine", "t"),
        ];
        let c = Conclusion {
            root_cause: "cause".into(),
            confidence: Confidence::Medium,
            supporting: vec!["symptom".into()],
        };
        sort_with(&mut f, Some(&c));
        assert_eq!(ids(&f), ["cause", "symptom", "other", "fine"]);
    }
}
