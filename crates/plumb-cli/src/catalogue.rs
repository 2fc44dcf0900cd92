//! Every finding id plumb can report, from the checks' own catalogues (plumb-check's
//! `ALL`, plumb-doctor's and plumb-cilium's `CATALOGUE`), so that `plumb explain`, the completions and
//! the checks cannot drift apart.

use serde::Serialize;

/// One finding id.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Entry {
    /// The stable id findings carry.
    pub id: &'static str,
    /// The command that reports it: `check` (rules), `doctor` (the node; doctor also
    /// runs every `check` id) or `cilium verify`.
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
    let cilium = plumb_cilium::verify::CATALOGUE
        .iter()
        .map(|(id, summary)| Entry {
            id,
            command: "cilium verify",
            summary,
        });
    let preflight = plumb_cilium::preflight::CATALOGUE
        .iter()
        .chain(plumb_cilium::conflicts::CATALOGUE)
        .map(|(id, summary)| Entry {
            id,
            command: "cilium preflight",
            summary,
        });
    rules.chain(node).chain(cilium).chain(preflight)
}
