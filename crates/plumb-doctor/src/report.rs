//! The doctor's report: root cause first, its evidence, what to do and not do, then the
//! other problems, what could not be checked, and what was ruled out. JSON is versioned
//! (`version`); the human form reads top-down like the write-ups' conclusions.

use crate::reasoning::Confidence;
use plumb_check::{Finding, Status};
use plumb_facts::SourceInfo;
use serde::Serialize;
use std::fmt::Write as _;

/// JSON schema version of [`Report`].
pub const REPORT_VERSION: u32 = 1;

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub version: u32,
    pub source: Option<SourceInfo>,
    /// Finding id of the root cause, or null when no problem explains anything.
    pub root_cause: Option<String>,
    pub confidence: Option<Confidence>,
    /// Problem ids the root cause explains.
    pub supporting: Vec<String>,
    /// Every finding: root cause, supporting, other problems, unknown, ok (ruled out).
    pub findings: Vec<Finding>,
}

impl Report {
    pub fn problems(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| f.status == Status::Problem)
    }

    /// Human report. `color` adds ANSI colours (callers decide: terminal and no NO_COLOR).
    pub fn render(&self, color: bool) -> String {
        let (bold, red, yellow, green, dim, reset) = if color {
            (
                "\x1b[1m", "\x1b[31m", "\x1b[33m", "\x1b[32m", "\x1b[2m", "\x1b[0m",
            )
        } else {
            ("", "", "", "", "", "")
        };
        let mut o = String::new();
        if let Some(s) = &self.source {
            let _ = writeln!(o, "{dim}plumb doctor: {}{reset}", s.description);
            for note in &s.notes {
                let _ = writeln!(o, "{yellow}note:{reset} {note}");
            }
            let _ = writeln!(o);
        }
        let by_id = |id: &str| {
            self.findings
                .iter()
                .find(|f| f.id == id && f.status == Status::Problem)
        };
        match self.root_cause.as_deref().and_then(by_id) {
            Some(root) => {
                let conf = self
                    .confidence
                    .map(|c| format!("{c:?}").to_lowercase())
                    .unwrap_or_default();
                let _ = writeln!(
                    o,
                    "{bold}{red}ROOT CAUSE{reset} {bold}[{}]{reset} {} {dim}(confidence {conf}){reset}",
                    root.id, root.title
                );
                render_body(&mut o, root, dim, reset);
                if !self.supporting.is_empty() {
                    let _ = writeln!(o, "\n{bold}Explained by it{reset}");
                    for id in &self.supporting {
                        if let Some(f) = by_id(id) {
                            let _ = writeln!(o, "  {yellow}[{}]{reset} {}", f.id, f.title);
                            for e in f.evidence.iter().take(3) {
                                let _ = writeln!(o, "      {dim}{e}{reset}");
                            }
                        }
                    }
                }
            }
            None => {
                let _ = writeln!(
                    o,
                    "{bold}{green}No problem found{reset} that explains a dataplane failure."
                );
            }
        }
        let others: Vec<&Finding> = self
            .problems()
            .filter(|f| {
                Some(f.id.as_str()) != self.root_cause.as_deref()
                    && !self.supporting.contains(&f.id)
            })
            .collect();
        if !others.is_empty() {
            let _ = writeln!(o, "\n{bold}Other problems{reset}");
            for f in others {
                let _ = writeln!(o, "  {yellow}[{}] {}{reset} {}", f.severity, f.id, f.title);
                for e in f.evidence.iter().take(2) {
                    let _ = writeln!(o, "      {dim}{e}{reset}");
                }
            }
        }
        let unknown: Vec<&Finding> = self
            .findings
            .iter()
            .filter(|f| f.status == Status::Unknown)
            .collect();
        if !unknown.is_empty() {
            let _ = writeln!(o, "\n{bold}Could not check{reset}");
            for f in unknown {
                let _ = writeln!(o, "  {dim}[{}] {}{reset}", f.id, f.title);
            }
        }
        let ok: Vec<&Finding> = self
            .findings
            .iter()
            .filter(|f| f.status == Status::Ok)
            .collect();
        if !ok.is_empty() {
            let _ = writeln!(o, "\n{bold}Checked and ruled out{reset}");
            for f in ok {
                let _ = writeln!(o, "  {green}ok{reset} {dim}[{}]{reset} {}", f.id, f.title);
            }
        }
        o
    }
}

fn render_body(o: &mut String, f: &Finding, dim: &str, reset: &str) {
    if !f.evidence.is_empty() {
        let _ = writeln!(o, "\nEvidence");
        for e in &f.evidence {
            let _ = writeln!(o, "  {dim}{e}{reset}");
        }
    }
    if !f.explanation.is_empty() {
        let _ = writeln!(o, "\nWhy\n  {}", f.explanation);
    }
    if !f.remediation.is_empty() {
        let _ = writeln!(o, "\nNext steps");
        for (i, r) in f.remediation.iter().enumerate() {
            let _ = writeln!(o, "  {}. {r}", i + 1);
        }
    }
    if !f.do_not.is_empty() {
        let _ = writeln!(o, "\nDo not");
        for d in &f.do_not {
            let _ = writeln!(o, "  - {d}");
        }
    }
}
