//! Host security agents (Illumio VEN, Tanium, Trellix/McAfee ENS): the
//! catalogue in `data/agents.json` and matching of what a node shows against it.
//!
//! An agent is "present" when any of its units, processes or install paths is seen,
//! and "tampering" when its logs carry one of its revert phrases. The catalogue is
//! data so that support engineers can add the agent they meet without a rebuild of
//! the logic (a rebuild of the binary is still needed: it is embedded).

use serde::{Deserialize, Serialize};
use std::sync::OnceLock;

/// One host security agent of the catalogue: the systemd units, process names, install
/// paths and log directories that show it is installed or running, and the log phrases
/// that mean it acted on the firewall.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Agent {
    /// Stable catalogue name (`illumio-ven`): what [`crate::AgentSighting::agent`] and
    /// findings quote.
    pub name: String,
    /// Product name for people (`Illumio VEN`).
    pub display: String,
    /// Whether it enforces its own view of the host firewall (and may revert others').
    pub manages_firewall: bool,
    /// systemd unit names (`illumio-ven.service`); one listed by systemctl shows the agent.
    pub units: Vec<String>,
    /// Process names as the kernel keeps them (`comm`, at most 15 bytes: `venAgent`).
    pub processes: Vec<String>,
    /// Install directories (`/opt/illumio_ven`); any file at or under one shows the agent.
    pub paths: Vec<String>,
    /// Directories holding the agent's own logs, read for tamper and revert lines.
    pub log_dirs: Vec<String>,
    /// Phrases (matched case-insensitively, anywhere in a line) that mean the agent detected
    /// or reverted changes to the firewall made by someone else.
    pub tamper_phrases: Vec<String>,
}

#[derive(Deserialize)]
struct Catalogue {
    agents: Vec<Agent>,
}

/// The embedded catalogue.
pub fn catalogue() -> &'static [Agent] {
    static C: OnceLock<Vec<Agent>> = OnceLock::new();
    C.get_or_init(|| {
        serde_json::from_str::<Catalogue>(include_str!("../data/agents.json"))
            .map(|c| c.agents)
            .unwrap_or_default()
    })
}

impl Agent {
    /// Whether `unit` (a full name such as `illumio-ven.service`) is one of the agent's units.
    pub fn matches_unit(&self, unit: &str) -> bool {
        self.units.iter().any(|u| u == unit)
    }

    /// `comm` is at most 15 bytes in the kernel: compare on that prefix.
    pub fn matches_process(&self, comm: &str) -> bool {
        let comm = truncate15(comm);
        self.processes.iter().any(|p| truncate15(p) == comm)
    }

    /// Whether `path` is one of the agent's install or log directories, or lies under one.
    pub fn matches_path(&self, path: &str) -> bool {
        self.paths
            .iter()
            .chain(&self.log_dirs)
            .any(|p| path == p || path.starts_with(&format!("{p}/")))
    }

    /// Whether a shared log line (syslog, journal) comes from this agent: it names one
    /// of its processes (`venAgent[4211]: ...`).
    pub fn is_mentioned_in(&self, line: &str) -> bool {
        self.processes.iter().any(|p| line.contains(p.as_str()))
    }

    /// Whether a log line carries one of the agent's tamper phrases (case-insensitive).
    pub fn is_tamper_line(&self, line: &str) -> bool {
        let lower = line.to_ascii_lowercase();
        self.tamper_phrases
            .iter()
            .any(|p| lower.contains(&p.to_ascii_lowercase()))
    }
}

fn truncate15(s: &str) -> &str {
    let mut end = s.len().min(15);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_loads_and_matches() {
        let c = catalogue();
        assert!(c.len() >= 3);
        let ven = c.iter().find(|a| a.name == "illumio-ven").unwrap();
        assert!(ven.matches_process("venAgent"));
        assert!(
            ven.matches_process("venPlatformHandler"),
            "comm is cut at 15 bytes"
        );
        assert!(ven.matches_path("/opt/illumio_ven_data/log/platform.log"));
        assert!(!ven.matches_path("/opt/illumio_ven_database"));
        assert!(ven.is_tamper_line("2024-01-02 Repeated FW TAMPERING has been detected"));
        assert!(!ven.is_tamper_line("policy sync complete"));
    }
}
