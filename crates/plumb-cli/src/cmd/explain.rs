//! `plumb explain [ID]`: what each finding id means and which command reports it, from
//! the checks' own catalogues (plumb-check's `ALL`, plumb-doctor's `CATALOGUE`), so the
//! list, the completions and the checks cannot drift apart.

use crate::Verdict;
use serde::Serialize;
use std::io::Write;

/// One finding id.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Entry {
    /// The stable id findings carry.
    pub id: &'static str,
    /// The command that reports it: `check` (rules) or `doctor` (the node; doctor also
    /// runs every `check` id).
    pub command: &'static str,
    /// What a problem with this id says.
    pub summary: &'static str,
}

/// Every finding id, rules first, each once.
pub fn catalogue() -> impl Iterator<Item = Entry> {
    let rules = plumb_check::checks::ALL.iter().flat_map(|c| {
        c.ids.iter().map(|(id, summary)| Entry {
            id,
            command: "check",
            summary,
        })
    });
    let node = plumb_doctor::checks::CATALOGUE
        .iter()
        .map(|(id, summary)| Entry {
            id,
            command: "doctor",
            summary,
        });
    rules.chain(node)
}

pub fn run(id: Option<&str>, json: bool) -> anyhow::Result<Verdict> {
    let entries: Vec<Entry> = catalogue()
        .filter(|e| id.is_none_or(|id| e.id == id))
        .collect();
    if json {
        crate::output::json(&entries)?;
        return Ok(Verdict::Clean);
    }
    let mut out = std::io::stdout().lock();
    let width = entries.iter().map(|e| e.id.len()).max().unwrap_or(0);
    for e in &entries {
        writeln!(out, "{:<width$}  {:<6}  {}", e.id, e.command, e.summary)?;
    }
    Ok(Verdict::Clean)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_have_summaries() {
        let all: Vec<Entry> = catalogue().collect();
        let mut ids: Vec<&str> = all.iter().map(|e| e.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), all.len(), "an id is listed twice");
        assert!(all.iter().all(|e| !e.summary.is_empty()));
        assert!(ids.contains(&"forward-drop-blocks-pods"));
        assert!(ids.contains(&"security-agent-tamper"));
    }
}
