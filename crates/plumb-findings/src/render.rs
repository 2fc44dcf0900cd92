//! The one text renderer of findings. Commands choose a layout — a list of findings
//! (`plumb check`) or a diagnosis with a root cause (`plumb doctor`) — and a [`Style`];
//! every finding's body (evidence, why, next steps, what not to do) is written by the
//! same code. JSON is the findings' serde form inside each command's envelope.
//!
//! Evidence is printed in normal weight: it is what the reader checks first. Colour
//! marks only severities and headings.

use crate::conclusion::Conclusion;
use crate::finding::{Finding, Severity, Status};
use std::fmt::Write as _;

/// How text is styled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Style {
    /// ANSI colours and bold (the caller decides: `--color`, a terminal, NO_COLOR).
    pub color: bool,
}

/// ANSI escapes of one style, empty strings when plain.
struct Paint {
    bold: &'static str,
    red: &'static str,
    yellow: &'static str,
    green: &'static str,
    dim: &'static str,
    reset: &'static str,
}

impl Style {
    fn paint(self) -> Paint {
        if self.color {
            Paint {
                bold: "\x1b[1m",
                red: "\x1b[31m",
                yellow: "\x1b[33m",
                green: "\x1b[32m",
                dim: "\x1b[2m",
                reset: "\x1b[0m",
            }
        } else {
            Paint {
                bold: "",
                red: "",
                yellow: "",
                green: "",
                dim: "",
                reset: "",
            }
        }
    }
}

impl Paint {
    fn severity(&self, s: Severity) -> &'static str {
        match s {
            Severity::Critical | Severity::High => self.red,
            Severity::Medium => self.yellow,
            Severity::Low | Severity::Info => "",
        }
    }
}

/// A list of findings, worst first (`plumb check`): every problem and every finding that
/// could not be decided with its whole body, then one line naming the checks that ruled
/// their problem out. `findings` must be in report order ([`crate::sort`]).
pub fn finding_list(findings: &[Finding], style: Style) -> String {
    let p = style.paint();
    let mut o = String::new();
    for f in findings.iter().filter(|f| f.status != Status::Ok) {
        let (label, color) = match f.status {
            Status::Problem => (
                f.severity.as_str().to_ascii_uppercase(),
                p.severity(f.severity),
            ),
            _ => ("UNKNOWN".to_string(), p.dim),
        };
        let _ = writeln!(
            o,
            "{color}{p_bold}{label:<9}{reset} {p_bold}{}{reset}  {}",
            f.id,
            f.title,
            p_bold = p.bold,
            reset = p.reset
        );
        body(&mut o, f, &p, "  ");
        o.push('\n');
    }
    let ok: Vec<&str> = findings
        .iter()
        .filter(|f| f.status == Status::Ok)
        .map(|f| f.id.as_str())
        .collect();
    if !ok.is_empty() {
        let _ = writeln!(
            o,
            "{}checked, no problem:{} {}",
            p.green,
            p.reset,
            ok.join(", ")
        );
    }
    o
}

/// One line counting the problems by severity: `2 problem(s): 1 critical, 1 high`, or
/// `no problems found`.
pub fn problem_count(findings: &[Finding]) -> String {
    let count = |s: Severity| {
        findings
            .iter()
            .filter(|f| f.is_problem() && f.severity == s)
            .count()
    };
    let total: usize = findings.iter().filter(|f| f.is_problem()).count();
    if total == 0 {
        return "no problems found".into();
    }
    let by_severity: Vec<String> = [
        Severity::Critical,
        Severity::High,
        Severity::Medium,
        Severity::Low,
        Severity::Info,
    ]
    .into_iter()
    .filter(|s| count(*s) > 0)
    .map(|s| format!("{} {s}", count(s)))
    .collect();
    format!("{total} problem(s): {}", by_severity.join(", "))
}

/// A diagnosis (`plumb doctor`): the root cause with its whole body, the problems it
/// explains, other problems, what could not be checked, what was ruled out.
/// `findings` must be in report order ([`crate::sort_with`]).
pub fn diagnosis(conclusion: Option<&Conclusion>, findings: &[Finding], style: Style) -> String {
    let p = style.paint();
    let mut o = String::new();
    let problem = |id: &str| {
        findings
            .iter()
            .find(|f| f.id == id && f.status == Status::Problem)
    };
    let root = conclusion.and_then(|c| problem(&c.root_cause).map(|f| (c, f)));
    match root {
        Some((c, root)) => {
            let _ = writeln!(
                o,
                "{}{}ROOT CAUSE{} {}[{}]{} {} {}(confidence {}){}",
                p.bold,
                p.red,
                p.reset,
                p.bold,
                root.id,
                p.reset,
                root.title,
                p.dim,
                c.confidence.as_str(),
                p.reset
            );
            section_body(&mut o, root, &p);
            if !c.supporting.is_empty() {
                let _ = writeln!(o, "\n{}Explained by it{}", p.bold, p.reset);
                for f in c.supporting.iter().filter_map(|id| problem(id)) {
                    let _ = writeln!(
                        o,
                        "  {}[{}]{} {}{}",
                        p.yellow,
                        f.id,
                        p.reset,
                        f.title,
                        approximate_suffix(f)
                    );
                    for e in f.evidence.iter().take(3) {
                        let _ = writeln!(o, "      {e}");
                    }
                }
            }
        }
        None => {
            let _ = writeln!(
                o,
                "{}{}No problem found{} that explains a dataplane failure.",
                p.bold, p.green, p.reset
            );
        }
    }
    let explained = |f: &Finding| {
        conclusion.is_some_and(|c| c.root_cause == f.id || c.supporting.contains(&f.id))
    };
    let others: Vec<&Finding> = findings
        .iter()
        .filter(|f| f.is_problem() && !explained(f))
        .collect();
    if !others.is_empty() {
        let _ = writeln!(o, "\n{}Other problems{}", p.bold, p.reset);
        for f in others {
            let _ = writeln!(
                o,
                "  {}[{}] {}{} {}{}",
                p.severity(f.severity),
                f.severity,
                f.id,
                p.reset,
                f.title,
                approximate_suffix(f)
            );
            for e in f.evidence.iter().take(2) {
                let _ = writeln!(o, "      {e}");
            }
        }
    }
    let unknown: Vec<&Finding> = findings
        .iter()
        .filter(|f| f.status == Status::Unknown)
        .collect();
    if !unknown.is_empty() {
        let _ = writeln!(o, "\n{}Could not check{}", p.bold, p.reset);
        for f in unknown {
            let _ = writeln!(o, "  [{}] {}{}", f.id, f.title, approximate_suffix(f));
        }
    }
    let ok: Vec<&Finding> = findings.iter().filter(|f| f.status == Status::Ok).collect();
    if !ok.is_empty() {
        let _ = writeln!(o, "\n{}Checked and ruled out{}", p.bold, p.reset);
        for f in ok {
            let _ = writeln!(o, "  {}ok{} [{}] {}", p.green, p.reset, f.id, f.title);
        }
    }
    o
}

/// A finding's body in the list layout: indented evidence, then `why:`, `fix:` and
/// `do not:` lines.
fn body(o: &mut String, f: &Finding, p: &Paint, indent: &str) {
    if let Some(reason) = &f.approximate {
        let _ = writeln!(o, "{indent}{}approximate:{} {reason}", p.bold, p.reset);
    }
    for e in &f.evidence {
        let _ = writeln!(o, "{indent}  {e}");
    }
    if !f.explanation.is_empty() {
        let _ = writeln!(o, "{indent}{}why:{} {}", p.bold, p.reset, f.explanation);
    }
    for r in &f.remediation {
        let _ = writeln!(o, "{indent}{}fix:{} {r}", p.bold, p.reset);
    }
    for d in &f.do_not {
        let _ = writeln!(o, "{indent}{}do not:{} {}", p.bold, p.reset, do_not_text(d));
    }
}

/// A finding's body in the diagnosis layout: headed sections.
fn section_body(o: &mut String, f: &Finding, p: &Paint) {
    if let Some(reason) = &f.approximate {
        let _ = writeln!(o, "\n{}Approximate{}\n  {reason}", p.bold, p.reset);
    }
    if !f.evidence.is_empty() {
        let _ = writeln!(o, "\n{}Evidence{}", p.bold, p.reset);
        for e in &f.evidence {
            let _ = writeln!(o, "  {e}");
        }
    }
    if !f.explanation.is_empty() {
        let _ = writeln!(o, "\n{}Why{}\n  {}", p.bold, p.reset, f.explanation);
    }
    if !f.remediation.is_empty() {
        let _ = writeln!(o, "\n{}Next steps{}", p.bold, p.reset);
        for (i, r) in f.remediation.iter().enumerate() {
            let _ = writeln!(o, "  {}. {r}", i + 1);
        }
    }
    if !f.do_not.is_empty() {
        let _ = writeln!(o, "\n{}Do not{}", p.bold, p.reset);
        for d in &f.do_not {
            let _ = writeln!(o, "  - {}", do_not_text(d));
        }
    }
}

/// ` (approximate: reason)` after a one-line mention of an approximate finding.
fn approximate_suffix(f: &Finding) -> String {
    f.approximate
        .as_deref()
        .map(|r| format!(" (approximate: {r})"))
        .unwrap_or_default()
}

/// A "do not" item without a leading "do not" of its own (the heading says it), so
/// that no line reads "do not: Do not ...".
fn do_not_text(d: &str) -> &str {
    let t = d.trim_start();
    for prefix in ["Do not ", "do not ", "Don't ", "don't "] {
        if let Some(rest) = t.strip_prefix(prefix) {
            return rest;
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conclusion::Confidence;
    use crate::finding::Evidence;

    fn sample() -> Vec<Finding> {
        vec![
            Finding::problem("cause", Severity::Critical, "the cause")
                .with_evidence([Evidence {
                    source: "dump.txt".into(),
                    line: Some(7),
                    text: "-A KUBE-SERVICES -j DROP".into(),
                }])
                .explain("because")
                .fix("do this")
                .do_not("Do not flush iptables: it makes things worse."),
            Finding::problem("symptom", Severity::Medium, "a symptom"),
            Finding::unknown("unsure", Severity::High, "could not tell"),
            Finding::ok("fine", "all good"),
        ]
    }

    #[test]
    fn approximate_findings_say_so_in_both_layouts() {
        let f = vec![
            Finding::problem("cause", Severity::High, "the cause")
                .approximate("read from a listing that hides columns"),
        ];
        let list = finding_list(&f, Style::default());
        assert!(
            list.contains("HIGH      cause  the cause\n  approximate: read from a listing that hides columns\n"),
            "{list}"
        );
        let c = Conclusion {
            root_cause: "cause".into(),
            confidence: Confidence::Low,
            supporting: vec![],
        };
        let d = diagnosis(Some(&c), &f, Style::default());
        assert!(
            d.contains("\nApproximate\n  read from a listing that hides columns\n"),
            "{d}"
        );
        let exact = finding_list(&sample(), Style::default());
        assert!(!exact.contains("approximate"), "{exact}");
    }

    #[test]
    fn the_list_shows_bodies_once_and_never_doubles_do_not() {
        let text = finding_list(&sample(), Style::default());
        assert!(text.contains("CRITICAL  cause  the cause\n"), "{text}");
        assert!(
            text.contains("    dump.txt:7: -A KUBE-SERVICES -j DROP\n"),
            "{text}"
        );
        assert!(text.contains("  do not: flush iptables"), "{text}");
        assert!(!text.to_lowercase().contains("do not: do not"), "{text}");
        assert!(text.contains("UNKNOWN   unsure"), "{text}");
        assert!(text.ends_with("checked, no problem: fine\n"), "{text}");
        assert!(!text.contains('\x1b'), "plain style has no escapes");
    }

    #[test]
    fn colour_marks_severity_and_headings_but_not_evidence() {
        let text = finding_list(&sample(), Style { color: true });
        let evidence = text
            .lines()
            .find(|l| l.contains("dump.txt:7"))
            .expect("evidence line");
        assert!(
            !evidence.contains('\x1b'),
            "evidence in normal weight: {evidence:?}"
        );
        assert!(text.contains("\x1b[31m"), "critical in red");
    }

    #[test]
    fn the_diagnosis_leads_with_the_root_cause() {
        let c = Conclusion {
            root_cause: "cause".into(),
            confidence: Confidence::Medium,
            supporting: vec!["symptom".into()],
        };
        let text = diagnosis(Some(&c), &sample(), Style::default());
        assert!(
            text.starts_with("ROOT CAUSE [cause] the cause (confidence medium)\n"),
            "{text}"
        );
        assert!(text.contains("\nDo not\n  - flush iptables"), "{text}");
        assert!(
            text.contains("Explained by it\n  [symptom] a symptom"),
            "{text}"
        );
        assert!(
            !text.contains("Other problems"),
            "symptom is explained: {text}"
        );
        assert!(text.contains("Could not check\n  [unsure]"), "{text}");
        assert!(text.contains("ok [fine] all good"), "{text}");
        let none = diagnosis(None, &sample(), Style::default());
        assert!(none.starts_with("No problem found"), "{none}");
        assert!(
            none.contains("Other problems\n  [critical] cause"),
            "{none}"
        );
    }

    #[test]
    fn problem_count_by_severity() {
        assert_eq!(
            problem_count(&sample()),
            "2 problem(s): 1 critical, 1 medium"
        );
        assert_eq!(problem_count(&[]), "no problems found");
    }
}
