//! The event contract: one JSON object per line (`plumb watch --json`) and one human
//! line per event. Other tools and the tests rely on these fields:
//!
//! `{"time","kind","table","chains":[…],"owner","actor":{"pid","comm","exe","unit",…},
//! "latency_ms", …}` with `kind` one of `foreign-change`, `fight`, `policy-change`,
//! `owner-change`, `rewrite` (owned chains rewritten with the same rules by another
//! writer: no net change), `resync`, `gap`. Times are UTC (RFC 3339, milliseconds). An event
//! with `"preliminary": true` reports what a big transaction has done while the kernel
//! is still sending it (see [`crate::listener`]); the complete event of the same
//! `generation` follows.

use crate::actor::Actor;
use crate::detect::{Action, Detection, FightInfo, Kind};
use serde::Serialize;
use std::time::{SystemTime, UNIX_EPOCH};

pub use crate::detect::MAX_LISTED_CHAINS;

/// One watch event.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Event {
    /// When plumb reported it: UTC, RFC 3339 with milliseconds
    /// (`2024-09-17T12:57:29.009Z`).
    pub time: String,
    /// What kind of event (`foreign-change`, `fight`, `policy-change`,
    /// `owner-change`, `rewrite`, `resync`, `gap`).
    pub kind: Kind,
    /// What happened to the chains (`deleted`, `flushed`, `modified`, `added`,
    /// `restored`, `rewritten`, `inserted`, `unhooked`, `policy`, `fight`, `changed`).
    pub action: Action,
    /// The watched network namespace (`null`: the host's).
    pub netns: Option<String>,
    /// The table's family (`ip`, `ip6`, `inet`, ...); empty for a gap.
    pub family: String,
    /// The table's name (`nat`, `kube-proxy`); empty for a gap.
    pub table: String,
    /// The affected chains, sorted, the first [`MAX_LISTED_CHAINS`] only. For
    /// `unhooked`, the removed hook rules as `CHAIN -j TARGET`; for `policy`, the base
    /// chain; for `inserted`, the built-in chains the rules went into.
    pub chains: Vec<String>,
    /// Number of affected chains (`chains` may be cut at [`MAX_LISTED_CHAINS`]).
    pub chain_count: usize,
    /// Whose chains they are (`kube-proxy`, `kubelet`, `calico`, ...), from the
    /// ownership catalogue; `null` for events not about owned chains (policy changes,
    /// insertions, resyncs, gaps).
    pub owner: Option<String>,
    /// Who wrote the change; its fields are `null` when unknown (resync, legacy
    /// poll, gap).
    pub actor: Actor,
    /// Milliseconds from the transaction's first notification (about its commit) to
    /// this event; `null` for changes found by a re-read (resync, legacy) and gaps.
    pub latency_ms: Option<f64>,
    /// The nf_tables generation the transaction committed; `null` when not from a
    /// notification (resync, legacy, gap).
    pub generation: Option<u32>,
    /// Rules added to the affected chains.
    pub rules_added: usize,
    /// Rules removed from the affected chains.
    pub rules_removed: usize,
    /// Further facts, one sentence each ("canary/hint chain KUBE-PROXY-CANARY
    /// vanished", "whole nat table flushed", a policy's `FORWARD policy ACCEPT ->
    /// DROP`, ...).
    pub details: Vec<String>,
    /// For a foreign change that removed owned objects: the how-many-th removal of
    /// the same objects by the same writer within the fight window (1 the first
    /// time); `null` otherwise.
    pub revert: Option<u32>,
    /// For a removal that makes a fight (and for the `fight` event itself): the two
    /// parties, the counts and the period; `null` otherwise.
    pub fight: Option<FightInfo>,
    /// Reported while a big transaction was still being sent (what it had done so
    /// far, its writer named by the eBPF writer probe): the complete event of the same
    /// generation follows, and may differ (a chain deleted so far may be re-created
    /// later). Absent when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub preliminary: bool,
}

impl Event {
    /// An event from a finding.
    pub fn from_finding(
        f: Detection,
        at: SystemTime,
        netns: Option<&str>,
        actor: &Actor,
        generation: Option<u32>,
        latency_ms: Option<f64>,
    ) -> Event {
        let chain_count = f.chain_count.max(f.chains.len());
        let mut chains = f.chains;
        chains.truncate(MAX_LISTED_CHAINS);
        Event {
            time: rfc3339(at),
            kind: f.kind,
            action: f.action,
            netns: netns.map(str::to_string),
            family: f.family,
            table: f.table,
            chains,
            chain_count,
            owner: f.owner,
            actor: actor.clone(),
            latency_ms,
            generation,
            rules_added: f.rules_added,
            rules_removed: f.rules_removed,
            details: f.details,
            revert: f.revert,
            fight: f.fight,
            preliminary: false,
        }
    }

    /// A gap: events were lost (`reason`), a resync follows.
    pub fn gap(at: SystemTime, netns: Option<&str>, reason: &str) -> Event {
        Event {
            time: rfc3339(at),
            kind: Kind::Gap,
            action: Action::Changed,
            netns: netns.map(str::to_string),
            family: String::new(),
            table: String::new(),
            chains: Vec::new(),
            chain_count: 0,
            owner: None,
            actor: Actor::unknown(),
            latency_ms: None,
            generation: None,
            rules_added: 0,
            rules_removed: 0,
            details: vec![reason.to_string()],
            revert: None,
            fight: None,
            preliminary: false,
        }
    }

    fn table_label(&self) -> String {
        match self.family.as_str() {
            "ip" | "" => self.table.clone(),
            f => format!("{f} {}", self.table),
        }
    }

    /// The human line: `14:02:07.113 venAgent[4211] (/opt/illumio/...) deleted 12
    /// kube-proxy chains in nat (KUBE-SVC-… …) — 3rd revert in 21 s, fight with kube-proxy`.
    pub fn human(&self) -> String {
        let clock = self.time.get(11..23).unwrap_or(&self.time);
        let body = self.human_body();
        let mut line = if self.preliminary {
            format!("{clock} (preliminary) {body}")
        } else {
            format!("{clock} {body}")
        };
        if self.kind == Kind::ForeignChange {
            self.push_revert_and_details(&mut line);
        }
        if let Some(ms) = self.latency_ms {
            line.push_str(&format!(" [{ms:.1} ms]"));
        }
        line
    }

    /// The writer for the human line: display name, exe and unit, catalogue label.
    fn human_writer(&self) -> String {
        let who = match (&self.actor.exe, &self.actor.unit) {
            (Some(exe), Some(unit)) => format!("{} ({exe}, {unit})", self.actor.display()),
            (Some(exe), None) => format!("{} ({exe})", self.actor.display()),
            (None, Some(unit)) => format!("{} ({unit})", self.actor.display()),
            (None, None) => self.actor.display(),
        };
        match &self.actor.identity {
            Some(id) if id.label.is_some() => {
                format!("{who} [{}]", id.label.as_deref().unwrap_or(""))
            }
            _ => who,
        }
    }

    /// What happened, in words, by kind and action (the human line without its time
    /// and suffixes).
    fn human_body(&self) -> String {
        let who = self.human_writer();
        let chains = list_chains(&self.chains, self.chain_count);
        let owner = self.owner.as_deref().unwrap_or("");
        let table = self.table_label();
        let plural = |n: usize, w: &str| {
            if n == 1 {
                format!("1 {w}")
            } else {
                format!("{n} {w}s")
            }
        };
        match (self.kind, self.action) {
            (Kind::Gap, _) => format!(
                "GAP: events lost ({}); resynchronising from a full dump",
                self.details.join("; ")
            ),
            (Kind::Resync, _) => {
                format!("resync: {table} changed while events were lost ({chains}); writer unknown")
            }
            (Kind::PolicyChange, _) => format!(
                "{who} changed policy in {table}: {}",
                self.details.join("; ")
            ),
            (Kind::Fight, _) => match &self.fight {
                Some(f) => format!(
                    "FIGHT in {table}: {} removes {owner} objects, {} restores them — {} reverts in {:.0} s (every {:.1} s) ({chains})",
                    f.remover, f.restorer, f.reverts, f.span_s, f.period_s
                ),
                None => format!("FIGHT in {table} ({chains})"),
            },
            (_, Action::Inserted) => format!(
                "{who} inserted {} ahead of kube-proxy/CNI hooks in {table} ({})",
                plural(self.rules_added, "rule"),
                self.details.first().cloned().unwrap_or_default()
            ),
            (_, Action::Rewritten) => format!(
                "{who} rewrote {} in {table} with the same rules, no net change ({chains})",
                plural(self.chain_count, &format!("{owner} chain"))
            ),
            (_, Action::Unhooked) => {
                format!("{who} removed {owner} hook rules in {table} ({chains})")
            }
            (_, action) => {
                let what = match action {
                    Action::Modified => format!(
                        "modified {} (+{} -{} rules)",
                        plural(self.chain_count, &format!("{owner} chain")),
                        self.rules_added,
                        self.rules_removed
                    ),
                    a => format!(
                        "{} {}",
                        a.as_str(),
                        plural(self.chain_count, &format!("{owner} chain"))
                    ),
                };
                format!("{who} {what} in {table} ({chains})")
            }
        }
    }

    /// A foreign change's suffixes: the how-many-th revert (and the fight it makes),
    /// then its details (none for an insertion: its body quotes the first).
    fn push_revert_and_details(&self, line: &mut String) {
        if let Some(n) = self.revert.filter(|&n| n > 1) {
            match &self.fight {
                Some(f) => line.push_str(&format!(
                    " — {} revert in {:.0} s, fight with {}",
                    ordinal(n),
                    f.span_s,
                    f.restorer
                )),
                None => line.push_str(&format!(" — {} revert", ordinal(n))),
            }
        }
        for d in self
            .details
            .iter()
            .filter(|_| self.action != Action::Inserted)
        {
            line.push_str(&format!("; {d}"));
        }
    }
}

fn list_chains(chains: &[String], total: usize) -> String {
    const SHOWN: usize = 3;
    let mut s = chains
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if total > SHOWN {
        s.push_str(" …");
    }
    s
}

/// `1st`, `2nd`, `3rd`, `4th`, `11th`, `21st`.
pub fn ordinal(n: u32) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// UTC RFC 3339 with milliseconds, without a date-time dependency.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, dd) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{dd:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// Howard Hinnant's days-to-civil algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn time_format() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_796_047_327_113);
        assert_eq!(rfc3339(t), "2026-11-30T14:02:07.113Z");
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00.000Z"
        );
    }

    #[test]
    fn ordinals() {
        let v: Vec<String> = [1, 2, 3, 4, 11, 12, 13, 21, 22, 101].map(ordinal).into();
        assert_eq!(
            v,
            [
                "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st"
            ]
        );
    }
}
