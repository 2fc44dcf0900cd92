//! `plumb explain [ID]`: what each finding id means and which command reports it
//! ([`crate::catalogue`]).

use crate::Verdict;
use crate::catalogue::{Entry, catalogue};
use std::io::Write;

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
        writeln!(out, "{:<width$}  {:<16}  {}", e.id, e.command, e.summary)?;
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
