//! `venAgent`: an Illumio-VEN-like host security agent in "firewall tamper protection"
//! mode, the actor of the security-agent scenario. At start it snapshots the firewall (`iptables-save`); then,
//! after `--arm-delay`, every `--interval` it compares the live firewall with the snapshot
//! (counters and comments ignored) and, when they differ, restores the snapshot with
//! `iptables-restore` (no `--noflush`: every table present now is replaced by its snapshot
//! version, or emptied if the snapshot did not have it). That deletes kube-proxy's chains.
//!
//! Log lines go to `--log` (default `opt/illumio_ven_data/log/platform.log` under the lab
//! root). The two messages field reports quote — "Repeated FW tampering has been detected" and
//! "Successfully reverted out of band firewall changes" — were observed in the field and are
//! not in public docs; the surrounding format here is the lab's own (documented in
//! docs/lab.md). The writes themselves are made by `iptables-restore` children whose parent
//! is this process (comm `venAgent`), like kube-proxy's.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use super::{Flags, nap, terminating};
use crate::clock::Utc;
use crate::iptables::{Tools, normalize_save};
use crate::logfmt::LogFile;

fn builtins(table: &str) -> &'static [&'static str] {
    match table {
        "filter" => &["INPUT", "FORWARD", "OUTPUT"],
        "nat" => &["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"],
        "mangle" => &["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"],
        "raw" => &["PREROUTING", "OUTPUT"],
        "security" => &["INPUT", "FORWARD", "OUTPUT"],
        _ => &[],
    }
}

/// Splits `iptables-save` text into (table, text of that table including `*t` .. `COMMIT`).
fn tables(save: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in save.lines() {
        if line.starts_with('#') {
            continue;
        }
        if let Some(t) = line.strip_prefix('*') {
            out.push((t.to_string(), String::new()));
        }
        if let Some((_, text)) = out.last_mut() {
            text.push_str(line);
            text.push('\n');
        }
    }
    out
}

fn chain_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix(':'))
        .filter_map(|l| l.split(' ').next())
        .map(String::from)
        .collect()
}

/// The restore input that puts every table of `current` back to `snapshot`.
pub fn revert_payload(snapshot: &str, current: &str) -> String {
    let snap = tables(snapshot);
    let mut out = String::new();
    for (name, _) in tables(current) {
        match snap.iter().find(|(n, _)| *n == name) {
            Some((_, text)) => out.push_str(text),
            None => {
                out.push_str(&format!("*{name}\n"));
                for b in builtins(&name) {
                    out.push_str(&format!(":{b} ACCEPT [0:0]\n"));
                }
                out.push_str("COMMIT\n");
            }
        }
    }
    out
}

/// What changed, in the agent's words: per table, chains added and removed.
fn describe(snapshot: &str, current: &str) -> String {
    let snap = tables(snapshot);
    let mut parts = Vec::new();
    for (name, text) in tables(current) {
        let before = snap
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, t)| chain_names(t))
            .unwrap_or_default();
        let after = chain_names(&text);
        let added = after.difference(&before).count();
        let removed = before.difference(&after).count();
        let same = snap
            .iter()
            .find(|(n, _)| *n == name)
            .is_some_and(|(_, t)| normalize_save(t) == normalize_save(&text));
        if !same {
            parts.push(format!(
                "table={name} chains_added={added} chains_removed={removed}"
            ));
        }
    }
    parts.join(", ")
}

/// Runs the agent until SIGTERM.
pub fn main(f: &Flags) -> Result<i32, String> {
    let log_path = PathBuf::from(f.req("log")?);
    let interval = f.duration_or("interval", Duration::from_secs(2))?;
    let arm_delay = f.duration_or("arm-delay", Duration::from_secs(3))?;
    let tools = Tools::new(f.get("iptables").unwrap_or("iptables"));
    let mut log = LogFile::open(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
    let pid = std::process::id();
    let mut say = |level: &str, msg: &str| {
        let _ = log.line(&format!(
            "{} venAgent[{pid}]: {level:<5} <firewall> {msg}",
            Utc::now().rfc3339_nanos()
        ));
    };
    say(
        "INFO",
        "VEN agent started; firewall mode: enforced, tamper protection: on",
    );
    let snapshot = tools
        .save()
        .map_err(|e| format!("iptables-save: {e}"))?
        .stdout;
    let snap_tables = tables(&snapshot);
    say(
        "INFO",
        &format!(
            "Firewall snapshot taken: {} tables, {} chains",
            snap_tables.len(),
            snap_tables
                .iter()
                .map(|(_, t)| chain_names(t).len())
                .sum::<usize>()
        ),
    );
    if !nap(arm_delay) {
        return Ok(0);
    }
    say("INFO", "Policy applied; tamper detection armed");
    let mut detections = 0u64;
    while !terminating() {
        if let Ok(cur) = tools.save()
            && cur.ok()
            && normalize_save(&cur.stdout) != normalize_save(&snapshot)
        {
            detections += 1;
            let what = describe(&snapshot, &cur.stdout);
            if detections == 1 {
                say("WARN", &format!("FW tampering has been detected: {what}"));
            } else {
                say(
                    "WARN",
                    &format!(
                        "Repeated FW tampering has been detected (count={detections}): {what}"
                    ),
                );
            }
            let payload = revert_payload(&snapshot, &cur.stdout);
            match tools.restore(&["-w", "5"], &payload) {
                Ok(o) if o.ok() => {
                    say("INFO", "Successfully reverted out of band firewall changes")
                }
                Ok(o) => say(
                    "ERROR",
                    &format!(
                        "Failed to revert out of band firewall changes: {}",
                        o.combined.trim()
                    ),
                ),
                Err(e) => say(
                    "ERROR",
                    &format!("Failed to revert out of band firewall changes: {e}"),
                ),
            }
        }
        if !nap(interval) {
            break;
        }
    }
    say("INFO", "VEN agent stopping");
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revert_restores_snapshot_tables_and_empties_new_ones() {
        let snap = "*filter\n:INPUT ACCEPT [0:0]\n:KUBE-FIREWALL - [0:0]\nCOMMIT\n";
        let cur = "# x\n*nat\n:PREROUTING ACCEPT [1:2]\n:KUBE-SVC-A - [0:0]\nCOMMIT\n*filter\n:INPUT ACCEPT [5:6]\n:KUBE-FIREWALL - [0:0]\n:KUBE-FORWARD - [0:0]\nCOMMIT\n";
        let p = revert_payload(snap, cur);
        assert!(p.starts_with("*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n"));
        assert!(p.contains("*filter\n:INPUT ACCEPT [0:0]\n:KUBE-FIREWALL - [0:0]\nCOMMIT\n"));
        assert!(!p.contains("KUBE-SVC-A") && !p.contains("KUBE-FORWARD"));
        assert_eq!(
            describe(snap, cur),
            "table=nat chains_added=2 chains_removed=0, table=filter chains_added=1 chains_removed=0"
        );
    }
}
