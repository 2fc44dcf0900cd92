//! `plumb check`: integrity findings over a ruleset (file, netns or this machine).

use super::input::{load_source_with, write_read_problems};
use crate::Verdict;
use crate::flags::{InputFlags, SourceFlags};
use crate::output;
use plumb_check::{CheckInput, Origin};
use plumb_findings::Finding;
use serde::Serialize;
use std::io::Write;

pub fn run(
    source: &SourceFlags,
    input: &InputFlags,
    partial: bool,
    json: bool,
    style: plumb_findings::Style,
) -> anyhow::Result<Verdict> {
    // A file is read in pieces, its rule texts packed: every check reads them without
    // keeping them (plumb-check's tests/packed_texts.rs).
    let src = load_source_with(source, input, super::pieces::load_in_pieces)?;
    let origin = match &src.live {
        Some(netns) => Origin::Live {
            netns: netns.clone(),
        },
        None => Origin::File(src.name.clone()),
    };
    let facts = CheckInput::new(&src.ruleset, origin, partial);
    // What the output shows beside the findings: `run` takes the facts (it releases the
    // service maps halfway).
    let (partial, truncated, damaged) =
        (facts.is_partial(), facts.is_truncated(), facts.is_damaged());
    let inventory = facts.inventory.clone();
    let findings = plumb_check::run(facts);
    let problems = findings.iter().filter(|f| f.is_problem()).count();
    // Parse errors are problems of the input: a damaged ruleset is never "clean".
    let parse_errors = src.ruleset.error_count();
    if json {
        #[derive(Serialize)]
        struct Out<'a> {
            source: &'a str,
            format: &'a str,
            completeness: plumb_ruleset::Completeness,
            partial: bool,
            problems: usize,
            /// Parts of the input that could not be read (`completeness` is then
            /// `damaged`); the first of them in `parse_error_samples`.
            parse_errors: usize,
            parse_error_samples: Vec<&'a plumb_ruleset::Diagnostic>,
            hint: Option<&'a str>,
            /// The CNIs and the kube-proxy generation the ruleset shows, with evidence.
            inventory: &'a plumb_check::inventory::Inventory,
            findings: &'a [Finding],
            /// How each read of a live node went (a table that could not be read, with
            /// why: `completeness` is then `damaged`); absent for a file.
            #[serde(skip_serializing_if = "<[_]>::is_empty")]
            tools: &'a [plumb_collect::ToolOutcome],
        }
        output::json(&Out {
            source: &src.name,
            format: src.format,
            completeness: src.ruleset.completeness,
            partial,
            problems,
            parse_errors,
            parse_error_samples: src
                .ruleset
                .errors()
                .take(super::input::ERRORS_SHOWN)
                .collect(),
            hint: src.hint.as_deref(),
            inventory: &inventory,
            findings: &findings,
            tools: &src.tools,
        })?;
    } else {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        writeln!(
            out,
            "plumb check: {} ({}{})\n",
            src.name,
            src.format,
            if partial {
                ", partial: chains declared elsewhere are not judged"
            } else if truncated {
                ", TRUNCATED"
            } else if damaged {
                ", DAMAGED"
            } else {
                ""
            }
        )?;
        write_read_problems(&mut out, &src.name, &src.ruleset, src.hint.as_deref())?;
        // What the ruleset shows about the node: the checks' answers depend on it.
        if let Some(g) = &inventory.kube_proxy {
            writeln!(out, "seen: {}", g.describe())?;
        }
        if !inventory.cnis.is_empty() {
            writeln!(out, "seen: CNI {}", inventory.describe_cnis())?;
        }
        if inventory.kube_proxy.is_some() || !inventory.cnis.is_empty() {
            writeln!(out)?;
        }
        super::input::write_failed_reads(&mut out, &src.tools)?;
        out.write_all(plumb_findings::render::finding_list(&findings, style).as_bytes())?;
        let count = plumb_findings::render::problem_count(&findings);
        match parse_errors {
            0 => writeln!(out, "{count}")?,
            e if problems == 0 => writeln!(
                out,
                "{count} in what could be read; {e} part(s) of the input could not be read"
            )?,
            e => writeln!(out, "{count}; {e} part(s) of the input could not be read")?,
        }
        out.flush()?;
    }
    super::leak_at_exit(findings);
    super::leak_at_exit(src);
    Ok(if problems > 0 || parse_errors > 0 {
        Verdict::Problems
    } else {
        Verdict::Clean
    })
}
