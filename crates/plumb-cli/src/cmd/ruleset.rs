//! `plumb ruleset show|parse|print|diff`.

use super::input::load;
use super::input::{live_rulesets, write_read_problems};
use crate::Verdict;
use crate::flags::RulesetCommand;
use crate::output;
use plumb_collect::ToolOutcome;
use plumb_ruleset::diff::{Change, diff};
use plumb_ruleset::iptables::canonical::{PrintOptions, SaveReport, save_text_report};
use plumb_ruleset::summary::{Summary, summarize};
use plumb_ruleset::{Completeness, Severity};
use serde::Serialize;
use std::io::Write;

pub fn run(cmd: RulesetCommand) -> anyhow::Result<Verdict> {
    match cmd {
        RulesetCommand::Show { netns, output } => show(netns.as_deref(), output.json()),
        RulesetCommand::Parse {
            file,
            input,
            output,
        } => {
            let json = output.json();
            let loaded = load(&file, &input)?;
            let summary = summarize(&loaded.parsed.ruleset);
            let verdict = verdict(&summary);
            if json {
                #[derive(Serialize)]
                struct Out<'a> {
                    source: &'a str,
                    format: &'static str,
                    #[serde(flatten)]
                    summary: &'a Summary,
                }
                output::json(&Out {
                    source: &loaded.name,
                    format: loaded.parsed.format.name(),
                    summary: &summary,
                })?;
            } else {
                let mut out = std::io::stdout().lock();
                writeln!(
                    out,
                    "{}: {} ({})",
                    loaded.name,
                    loaded.parsed.format.name(),
                    completeness(&summary)
                )?;
                print_summary(&mut out, &summary, &loaded.name)?;
            }
            super::leak_at_exit(loaded);
            Ok(verdict)
        }
        RulesetCommand::Print {
            file,
            input,
            counters,
        } => {
            let loaded = load(&file, &input)?;
            let report = save_text_report(&loaded.parsed.ruleset, PrintOptions { counters });
            std::io::stdout().lock().write_all(report.text.as_bytes())?;
            let summary = summarize(&loaded.parsed.ruleset);
            print_diagnostics_to_stderr(&loaded.name, &summary);
            let refused = listing_print_warnings(&loaded.name, &loaded.parsed.ruleset, &report);
            Ok(if refused {
                Verdict::Problems
            } else {
                verdict(&summary)
            })
        }
        RulesetCommand::Diff {
            old,
            new,
            input,
            output,
        } => {
            let json = output.json();
            let a = load(&old, &input)?;
            let b = load(&new, &input)?;
            let changes = diff(&a.parsed.ruleset, &b.parsed.ruleset);
            {
                // A diff of damaged input is not a diff of the rulesets: say so first.
                let mut err = std::io::stderr().lock();
                write_read_problems(&mut err, &a.name, &a.parsed.ruleset, a.hint.as_deref())?;
                write_read_problems(&mut err, &b.name, &b.parsed.ruleset, b.hint.as_deref())?;
            }
            if json {
                #[derive(Serialize)]
                struct Out<'a> {
                    old: &'a str,
                    new: &'a str,
                    changes: &'a [Change],
                }
                output::json(&Out {
                    old: &a.name,
                    new: &b.name,
                    changes: &changes,
                })?;
            } else {
                let mut out = std::io::stdout().lock();
                for c in &changes {
                    writeln!(out, "{c}")?;
                }
                writeln!(
                    out,
                    "{} change(s) from {} to {}",
                    changes.len(),
                    a.name,
                    b.name
                )?;
            }
            // Like diff(1): differences are "problems" for scripts.
            Ok(if changes.is_empty() {
                Verdict::Clean
            } else {
                Verdict::Problems
            })
        }
    }
}

fn show(netns: Option<&str>, json: bool) -> anyhow::Result<Verdict> {
    let collected = live_rulesets(netns)?;
    let summary = summarize(&collected.ruleset);
    let where_ = netns
        .map(|n| format!("network namespace {n}"))
        .unwrap_or_else(|| "this machine".into());
    if json {
        #[derive(Serialize)]
        struct Out<'a> {
            source: &'a str,
            tools: &'a [ToolOutcome],
            #[serde(flatten)]
            summary: &'a Summary,
        }
        output::json(&Out {
            source: &where_,
            tools: &collected.tools,
            summary: &summary,
        })?;
    } else {
        let mut out = std::io::stdout().lock();
        writeln!(out, "rulesets of {where_}")?;
        for t in &collected.tools {
            let detail = if t.detail.is_empty() {
                String::new()
            } else {
                format!(": {}", t.detail)
            };
            writeln!(out, "  {:<22} {}{}", t.tool, t.status, detail)?;
        }
        print_summary(&mut out, &summary, &where_)?;
    }
    Ok(verdict(&summary))
}

fn verdict(s: &Summary) -> Verdict {
    let errors = s.diagnostics.iter().any(|d| d.severity == Severity::Error);
    if errors || s.completeness != Completeness::Full && s.completeness != Completeness::Partial {
        Verdict::Problems
    } else {
        Verdict::Clean
    }
}

fn completeness(s: &Summary) -> String {
    let what = match s.completeness {
        Completeness::Full => "complete dump",
        Completeness::Partial => {
            "partial (a restore payload or a fragment): chains and rules it does not show may exist"
        }
        Completeness::Truncated => "TRUNCATED",
        Completeness::Damaged => "DAMAGED: parts could not be read",
    };
    if s.approximate {
        format!("{what}; approximate: listing format loses detail")
    } else {
        what.to_string()
    }
}

fn print_summary(out: &mut impl Write, s: &Summary, source: &str) -> std::io::Result<()> {
    let backends: Vec<&str> = s.backends.iter().map(|b| b.as_str()).collect();
    writeln!(
        out,
        "backends: {}",
        if backends.is_empty() {
            "none".into()
        } else {
            backends.join(", ")
        }
    )?;
    if !s.tables.is_empty() {
        writeln!(
            out,
            "\n{:<8} {:<20} {:<16} {:>7} {:>8}",
            "FAMILY", "TABLE", "BACKEND", "CHAINS", "RULES"
        )?;
        for t in &s.tables {
            writeln!(
                out,
                "{:<8} {:<20} {:<16} {:>7} {:>8}",
                t.family,
                t.name,
                t.backend.as_str(),
                t.chains,
                t.rules
            )?;
        }
        writeln!(out, "\n{:<14} {:>7} {:>8}", "OWNER", "CHAINS", "RULES")?;
        let mut owners: Vec<&String> = s.owners.keys().chain(s.owner_rules.keys()).collect();
        owners.sort();
        owners.dedup();
        for o in owners {
            let c = s.owners.get(o).copied().unwrap_or(0);
            let r = s.owner_rules.get(o).copied().unwrap_or(0);
            writeln!(out, "{o:<14} {c:>7} {r:>8}")?;
        }
    }
    if s.ipvs_virtual_services > 0 || s.ipsets > 0 {
        writeln!(
            out,
            "
IPVS virtual services: {}, ipsets: {} (see plumb services)",
            s.ipvs_virtual_services, s.ipsets
        )?;
    }
    if s.diagnostics.is_empty() {
        writeln!(out, "\nno problems")?;
    } else {
        writeln!(out, "\n{} problem(s):", s.diagnostics.len())?;
        for d in &s.diagnostics {
            writeln!(out, "  {}", diagnostic_line(source, d))?;
        }
    }
    Ok(())
}

fn diagnostic_line(source: &str, d: &plumb_ruleset::Diagnostic) -> String {
    let sev = match d.severity {
        Severity::Error => "error",
        Severity::Note => "note",
    };
    let text = if d.text.is_empty() {
        String::new()
    } else {
        format!("\n      | {}", d.text)
    };
    format!(
        "{source}:{}:{}: {sev}: {}{text}",
        d.line, d.column, d.message
    )
}

/// Warnings on stderr for a printed listing: the rows left out (as `# not translated`
/// comments), counters the listing rounded, and that a partial listing restored
/// without `--noflush` would delete what it does not show. Returns whether rows were
/// left out: the output is then not the whole ruleset, and `print` exits 1 so that a
/// script piping it to `iptables-restore` stops.
fn listing_print_warnings(
    source: &str,
    ruleset: &plumb_ruleset::Ruleset,
    report: &SaveReport,
) -> bool {
    if !report.refused.is_empty() {
        eprintln!(
            "{source}: warning: {} listed rule(s) could not be translated exactly and are printed as `# not translated` comments; the output is NOT the whole ruleset:",
            report.refused.len()
        );
        for r in report.refused.iter().take(10) {
            eprintln!("  line {} ({} {}): {}", r.line, r.table, r.chain, r.reason);
        }
        if report.refused.len() > 10 {
            eprintln!("  ... and {} more", report.refused.len() - 10);
        }
    }
    if report.rounded_counters > 0 {
        eprintln!(
            "{source}: note: {} rule(s) printed without counters: the listing rounded them (K/M/G); list with -x for exact counters",
            report.rounded_counters
        );
    }
    if ruleset.approximate && ruleset.completeness != Completeness::Full {
        eprintln!(
            "{source}: warning: the listing shows only part of its tables; restoring this output without --noflush would delete every chain and rule it does not show"
        );
    }
    !report.refused.is_empty()
}

fn print_diagnostics_to_stderr(source: &str, s: &Summary) {
    for d in &s.diagnostics {
        eprintln!("{}", diagnostic_line(source, d));
    }
}
