//! The node's history: every dated signal plumb read — container (re)starts of kube-proxy,
//! install-cni, the CNI agents and coredns (one CRI log file per restart), kubelet's probe
//! failures, liveness kills and back-offs (RKE2's agent log, journal excerpts), the
//! security agents' tamper and revert lines, audit NETFILTER_CFG records — in time order,
//! with per-container counts. Pure: built from [`Facts`], no IO.
//!
//! A diagnosis made from the history holds whether or not a crash-looping container
//! happens to be up at the moment doctor runs. Findings quote the same file and line an
//! entry carries, so a finding's evidence can be found in the timeline.
//!
//! Times are kept as written; entries are ordered by a key read from them (RFC 3339,
//! calico's `YYYY-MM-DD hh:mm:ss.mmm`, klog's `MMDD hh:mm:ss.us`, syslog's `Mon DD
//! hh:mm:ss`, audit's `audit(EPOCH.ms:serial)`). Formats without a year take the latest
//! year the dated entries show; an entry with no readable time sorts with the entry before
//! it in its file.

use crate::model::{Facts, LogFile};
use crate::parse::logs::{LogLine, Signal, probe_kind, probe_status, subject_container};
use serde::Serialize;
use std::collections::BTreeMap;

/// Most entries kept (the newest); the counts cover all of them.
pub const MAX_ENTRIES: usize = 2000;

/// One dated event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Entry {
    /// Position in the timeline (1-based, oldest first): what findings and `--timeline` cite.
    pub n: usize,
    /// The time as written, when the line has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// Who wrote the line: a container name, `kubelet`, an agent, `audit`.
    pub component: String,
    /// The container the line is about (kubelet's probe of `kube-proxy`), or the writer's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// What the line means.
    pub signal: Signal,
    /// `liveness`, `readiness` or `startup` for probe failures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe: Option<&'static str>,
    /// The HTTP status a probe failure quotes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<u16>,
    /// For container starts: the restart number (the N of N.log).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart: Option<u32>,
    /// The file the line was read from (node or bundle path).
    pub source: String,
    /// Line number (1-based) in that file.
    pub line: u32,
    /// The message, cut to 300 characters.
    pub text: String,
    #[serde(skip)]
    key: i64,
}

/// What the timeline says about one container.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ContainerHistory {
    /// Container name (`kube-proxy`, `install-cni`).
    pub container: String,
    /// Restarts seen: the highest restart number of its log files, or kubelet's liveness
    /// kills when that is more.
    pub restarts: u32,
    /// Log files read (one per start kubelet kept).
    pub logs: u32,
    /// kubelet's `failed liveness probe, will be restarted` lines about it.
    pub liveness_restarts: u32,
    /// Failed probes of any kind (liveness, readiness, startup) kubelet logged about it.
    pub probe_failures: u32,
    /// Status codes of failed HTTP probes, with counts.
    pub probe_codes: BTreeMap<u16, u32>,
    /// `CrashLoopBackOff` / `Back-off restarting failed container` lines about it.
    pub back_offs: u32,
    /// iptables-restore failures in its log (failed restores and missing chains).
    pub restore_failures: u32,
}

/// The node's history.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Timeline {
    /// Oldest first.
    pub entries: Vec<Entry>,
    /// Per container, by name.
    pub containers: Vec<ContainerHistory>,
    /// Entries left out beyond [`MAX_ENTRIES`] (the oldest).
    #[serde(skip_serializing_if = "is_zero")]
    pub dropped: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Timeline {
    /// The history of one container, if the timeline has any.
    pub fn container(&self, name: &str) -> Option<&ContainerHistory> {
        self.containers.iter().find(|c| c.container == name)
    }

    /// The entry read from `source` at `line`.
    pub fn at(&self, source: &str, line: u32) -> Option<&Entry> {
        self.entries
            .iter()
            .find(|e| e.line == line && e.source == source)
    }

    /// Entries with this signal about `container` (any container when `None`).
    pub fn about<'a>(
        &'a self,
        container: Option<&'a str>,
        signal: Signal,
    ) -> impl Iterator<Item = &'a Entry> {
        self.entries.iter().filter(move |e| {
            e.signal == signal && container.is_none_or(|c| e.container.as_deref() == Some(c))
        })
    }
}

/// Builds the timeline from every log in `facts`.
pub fn build(facts: &Facts) -> Timeline {
    let files: Vec<(&LogFile, &str)> = facts
        .pod_logs
        .iter()
        .map(|f| (f, "pod"))
        .chain(facts.node_logs.iter().map(|f| (f, "node")))
        .chain(facts.agent_logs.iter().map(|f| (f, "agent")))
        .collect();
    // The reference year for year-less stamps: the latest year a full date shows.
    let year = files
        .iter()
        .flat_map(|(f, _)| f.first.iter().chain(f.signals.iter().map(|(_, l)| l)))
        .filter_map(full_date_year)
        .max()
        .unwrap_or(1970);
    let mut entries = Vec::new();
    for (file, _) in &files {
        let own = file
            .pod
            .as_ref()
            .map(|p| p.container.clone())
            .or_else(|| file.component.clone())
            .or_else(|| file.agent.clone())
            .unwrap_or_else(|| "log".to_string());
        let mut last_key = 0;
        let mut push = |signal: Signal, l: &LogLine, restart: Option<u32>| {
            let key = time_key(l, year).unwrap_or(last_key);
            last_key = key;
            let about = if file.pod.is_some() {
                Some(own.clone())
            } else {
                subject_container(&l.text).map(str::to_string)
            };
            let probe_failure = matches!(signal, Signal::ProbeFailed | Signal::LivenessRestart);
            entries.push(Entry {
                n: 0,
                time: l.time.clone().or_else(|| written_time(&l.text)),
                component: own.clone(),
                container: about,
                signal,
                probe: if probe_failure {
                    probe_kind(&l.text)
                } else {
                    None
                },
                code: if probe_failure {
                    probe_status(&l.text)
                } else {
                    None
                },
                restart,
                source: file.path.clone(),
                line: l.line,
                text: l.text.chars().take(300).collect(),
                key,
            });
        };
        if let Some(first) = &file.first {
            push(Signal::ContainerStart, first, file.restart);
        }
        for (s, l) in &file.signals {
            push(*s, l, None);
        }
    }
    // Stable: equal keys keep file order.
    entries.sort_by_key(|e| e.key);
    let mut containers: BTreeMap<String, ContainerHistory> = BTreeMap::new();
    for f in &facts.pod_logs {
        if let Some(p) = &f.pod {
            let c = containers.entry(p.container.clone()).or_default();
            c.logs += 1;
            c.restarts = c.restarts.max(f.restart.unwrap_or(0));
        }
    }
    for e in &entries {
        let Some(name) = &e.container else { continue };
        let c = containers.entry(name.clone()).or_default();
        match e.signal {
            Signal::ProbeFailed => {
                c.probe_failures += 1;
                if let Some(code) = e.code {
                    *c.probe_codes.entry(code).or_default() += 1;
                }
            }
            Signal::LivenessRestart => c.liveness_restarts += 1,
            Signal::BackOff => c.back_offs += 1,
            Signal::RestoreFailed | Signal::ChainDoesNotExist => c.restore_failures += 1,
            _ => {}
        }
    }
    let containers = containers
        .into_iter()
        .map(|(name, mut c)| {
            c.container = name;
            c.restarts = c.restarts.max(c.liveness_restarts);
            c
        })
        .collect();
    let dropped = entries.len().saturating_sub(MAX_ENTRIES);
    entries.drain(..dropped);
    for (i, e) in entries.iter_mut().enumerate() {
        e.n = i + 1;
    }
    Timeline {
        entries,
        containers,
        dropped,
    }
}

/// The time text of a line without a CRI stamp (syslog prefix, klog header, audit).
fn written_time(text: &str) -> Option<String> {
    if let Some(a) = audit_stamp(text) {
        return Some(a.to_string());
    }
    if let Some(t) = text.get(..15).filter(|t| syslog_key(t, 1970).is_some()) {
        return Some(t.to_string());
    }
    if let Some(t) = text.get(..19).filter(|t| iso_key(t).is_some()) {
        return Some(t.to_string());
    }
    crate::parse::logs::klog(text).map(|k| k.time.to_string())
}

fn full_date_year(l: &LogLine) -> Option<i64> {
    let t = l.time.as_deref().unwrap_or(&l.text);
    let y: i64 = t.get(..4)?.parse().ok()?;
    (t.as_bytes().get(4) == Some(&b'-') && (1990..3000).contains(&y)).then_some(y)
}

/// Microseconds since the epoch (UTC; offsets applied when written) of a line's time.
fn time_key(l: &LogLine, year: i64) -> Option<i64> {
    if let Some(t) = &l.time
        && let Some(k) = iso_key(t)
    {
        return Some(k);
    }
    let t = l.text.as_str();
    if let Some(a) = audit_stamp(t) {
        return audit_key(a);
    }
    iso_key(t)
        .or_else(|| t.get(..15).and_then(|s| syslog_key(s, year)))
        .or_else(|| {
            let k = crate::parse::logs::klog(t)?;
            klog_key(k.time, year)
        })
}

/// `audit(1726575449.009:1078)` or `audit(2020-03-11 21:25:21.491:269)` -> the stamp
/// inside, without the serial.
fn audit_stamp(text: &str) -> Option<&str> {
    let rest = &text[text.find("audit(")? + 6..];
    let inner = &rest[..rest.find(')')?];
    Some(&inner[..inner.rfind(':')?])
}

fn audit_key(stamp: &str) -> Option<i64> {
    if let Some(k) = iso_key(stamp) {
        return Some(k);
    }
    let (secs, frac) = stamp.split_once('.').unwrap_or((stamp, "0"));
    Some(secs.parse::<i64>().ok()? * 1_000_000 + micros(frac))
}

fn digits(s: &str, at: usize, n: usize) -> Option<i64> {
    let d = s.get(at..at + n)?;
    d.bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| d.parse().ok())
        .flatten()
}

/// The fraction digits after a decimal point, as microseconds.
fn micros(frac: &str) -> i64 {
    let d: String = frac
        .chars()
        .take_while(char::is_ascii_digit)
        .take(6)
        .collect();
    if d.is_empty() {
        return 0;
    }
    d.parse::<i64>().unwrap_or(0) * 10_i64.pow(6 - d.len() as u32)
}

/// `YYYY-MM-DD[T ]hh:mm:ss[.frac][Z|±hh:mm|±hhmm]` at the start of `s`.
fn iso_key(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || !(b[10] == b'T' || b[10] == b' ') {
        return None;
    }
    let (y, mo, d) = (digits(s, 0, 4)?, digits(s, 5, 2)?, digits(s, 8, 2)?);
    let (h, mi, sec) = (digits(s, 11, 2)?, digits(s, 14, 2)?, digits(s, 17, 2)?);
    let mut rest = &s[19..];
    let mut us = 0;
    if let Some(f) = rest.strip_prefix(['.', ',']) {
        us = micros(f);
        rest = f.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    let offset = match rest.as_bytes().first() {
        Some(sign @ (b'+' | b'-')) => {
            let o = rest[1..].replace(':', "");
            let (oh, om) = (digits(&o, 0, 2)?, digits(&o, 2, 2).unwrap_or(0));
            let secs = oh * 3600 + om * 60;
            if *sign == b'+' { secs } else { -secs }
        }
        _ => 0,
    };
    Some(civil(y, mo, d, h, mi, sec)? * 1_000_000 + us - offset * 1_000_000)
}

/// klog's `MMDD hh:mm:ss.uuuuuu`.
fn klog_key(t: &str, year: i64) -> Option<i64> {
    let (mo, d) = (digits(t, 0, 2)?, digits(t, 2, 2)?);
    let (h, mi, s) = (digits(t, 5, 2)?, digits(t, 8, 2)?, digits(t, 11, 2)?);
    let us = t.get(14..).map(micros).unwrap_or(0);
    Some(civil(year, mo, d, h, mi, s)? * 1_000_000 + us)
}

/// syslog's `Mon DD hh:mm:ss` (15 characters).
fn syslog_key(t: &str, year: i64) -> Option<i64> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let mo = MONTHS.iter().position(|m| t.starts_with(m))? as i64 + 1;
    let day = t.get(4..6)?.trim().parse::<i64>().ok()?;
    if t.as_bytes().get(3) != Some(&b' ') || t.as_bytes().get(6) != Some(&b' ') {
        return None;
    }
    let (h, mi, s) = (digits(t, 7, 2)?, digits(t, 10, 2)?, digits(t, 13, 2)?);
    Some(civil(year, mo, day, h, mi, s)? * 1_000_000)
}

/// Seconds since the epoch of a UTC civil time (Howard Hinnant's days_from_civil).
fn civil(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64) -> Option<i64> {
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + mi * 60 + s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_formats_agree_on_one_instant() {
        let epoch = 1_726_575_449_i64 * 1_000_000; // 2024-09-17T12:17:29Z
        assert_eq!(iso_key("2024-09-17T12:17:29Z"), Some(epoch));
        assert_eq!(iso_key("2024-09-17T14:17:29+02:00"), Some(epoch));
        assert_eq!(iso_key("2024-09-17 12:17:29.5"), Some(epoch + 500_000));
        assert_eq!(audit_key("1726575449.009"), Some(epoch + 9_000));
        assert_eq!(klog_key("0917 12:17:29.000001", 2024), Some(epoch + 1));
        assert_eq!(syslog_key("Sep 17 12:17:29", 2024), Some(epoch));
        assert_eq!(
            syslog_key("Sep  7 12:17:29", 2024),
            Some(epoch - 10 * 86_400 * 1_000_000)
        );
        assert_eq!(iso_key("not a time at all!!"), None);
        assert_eq!(klog_key("1399 99:99:99", 2024), None);
    }

    #[test]
    fn audit_records_and_kubelet_lines_interleave_by_time() {
        let line = |n: u32, text: &str| LogLine {
            line: n,
            time: None,
            text: text.into(),
        };
        let facts = Facts {
            node_logs: vec![
                LogFile {
                    path: "/var/log/audit/audit.log".into(),
                    component: Some("audit".into()),
                    signals: vec![(
                        Signal::NetfilterChange,
                        line(
                            7,
                            "type=NETFILTER_CFG msg=audit(1726575449.009:1078): table=nat family=2 entries=90 op=xt_replace pid=7226 comm=\"iptables-restor\"",
                        ),
                    )],
                    ..LogFile::default()
                },
                LogFile {
                    path: "kubelet.log".into(),
                    component: Some("kubelet".into()),
                    signals: vec![
                        (
                            Signal::ProbeFailed,
                            line(
                                1,
                                "I0917 12:17:28.000000 1 prober.go:107] \"Probe failed\" probeType=\"Liveness\" containerName=\"kube-proxy\" output=\"HTTP probe failed with statuscode: 503\"",
                            ),
                        ),
                        (
                            Signal::BackOff,
                            line(
                                2,
                                "E0917 12:17:30.000000 1 x.go:1] back-off restarting failed container=kube-proxy",
                            ),
                        ),
                    ],
                    ..LogFile::default()
                },
                LogFile {
                    path: "dated".into(),
                    first: None,
                    signals: vec![(
                        Signal::SyncFailed,
                        line(1, "2024-09-17T12:00:00Z sync failed"),
                    )],
                    ..LogFile::default()
                },
            ],
            ..Facts::default()
        };
        let t = build(&facts);
        let order: Vec<Signal> = t.entries.iter().map(|e| e.signal).collect();
        assert_eq!(
            order,
            vec![
                Signal::SyncFailed,
                Signal::ProbeFailed,
                Signal::NetfilterChange,
                Signal::BackOff
            ]
        );
        assert_eq!(t.entries[2].time.as_deref(), Some("1726575449.009"));
        assert_eq!(t.entries[1].code, Some(503));
        assert_eq!(t.container("kube-proxy").unwrap().back_offs, 1);
    }
}
