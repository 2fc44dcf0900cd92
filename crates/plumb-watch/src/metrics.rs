//! Prometheus metrics (prometheus-client, no global registry), rendered in the
//! Prometheus text format or as OpenMetrics; [`crate::http`] serves them.
//!
//! Label values are bounded: owners come from the ownership catalogue, actors are
//! catalogue identities or a 15-character comm (capped at [`MAX_ACTOR_LABELS`]
//! distinct values, then `other`), error kinds are a fixed set.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

type Labels = Vec<(String, String)>;

/// Most distinct actor label values; the rest are `other`.
pub const MAX_ACTOR_LABELS: usize = 64;

/// Error kinds counted in `plumb_watch_errors_total{kind}`.
#[derive(Clone, Copy, Debug)]
pub enum ErrorKind {
    /// Receiving nftables notifications failed (other than lost messages, which are
    /// gaps).
    NetlinkReceive,
    /// Receiving audit records failed (ENOBUFS included: records were lost).
    AuditReceive,
    /// Audit was asked for and cannot be listened to (counted once at start).
    AuditUnavailable,
    /// A baseline, resync or legacy re-read failed in part.
    Reread,
    /// A notification could not be decoded.
    Decode,
}

impl ErrorKind {
    fn as_str(self) -> &'static str {
        match self {
            ErrorKind::NetlinkReceive => "netlink-receive",
            ErrorKind::AuditReceive => "audit-receive",
            ErrorKind::AuditUnavailable => "audit-unavailable",
            ErrorKind::Reread => "reread",
            ErrorKind::Decode => "decode",
        }
    }
}

/// All of watch's metrics.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    changes: Family<Labels, Counter>,
    foreign: Family<Labels, Counter>,
    fights: Family<Labels, Counter>,
    last_foreign: Gauge<f64, AtomicU64>,
    chains: Family<Labels, Gauge>,
    latency: Histogram,
    errors: Family<Labels, Counter>,
    gaps: Counter,
    actors: Arc<Mutex<BTreeSet<String>>>,
    ready: Arc<AtomicBool>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Registers every metric at zero; not ready until the flag of
    /// [`Metrics::ready_flag`] is set.
    pub fn new() -> Metrics {
        let mut r = Registry::default();
        let changes = Family::<Labels, Counter>::default();
        let foreign = Family::<Labels, Counter>::default();
        let fights = Family::<Labels, Counter>::default();
        let last_foreign = Gauge::<f64, AtomicU64>::default();
        let chains = Family::<Labels, Gauge>::default();
        // 0.5 ms .. ~8 s.
        let latency = Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
            0.0005, 2.0, 15,
        ));
        let errors = Family::<Labels, Counter>::default();
        let gaps = Counter::default();
        r.register(
            "plumb_watch_changes",
            "Netfilter changes seen, by owner of the objects, writer and kind",
            changes.clone(),
        );
        r.register(
            "plumb_watch_foreign_changes",
            "Changes to owned objects by a writer that is not their owner",
            foreign.clone(),
        );
        r.register(
            "plumb_watch_fights",
            "Revert fights detected (owned objects removed and restored repeatedly)",
            fights.clone(),
        );
        r.register(
            "plumb_watch_last_foreign_change_timestamp_seconds",
            "Unix time of the last foreign change (0: none yet)",
            last_foreign.clone(),
        );
        r.register(
            "plumb_watch_chains",
            "Chains currently in the watched nf_tables tables, by owner",
            chains.clone(),
        );
        r.register(
            "plumb_watch_detection_latency_seconds",
            "Kernel notification to event, seconds",
            latency.clone(),
        );
        r.register(
            "plumb_watch_errors",
            "Errors by kind (watch carries on)",
            errors.clone(),
        );
        r.register(
            "plumb_watch_event_gaps",
            "Times notifications were lost (ENOBUFS) and a full resync followed",
            gaps.clone(),
        );
        Metrics {
            registry: Arc::new(r),
            changes,
            foreign,
            fights,
            last_foreign,
            chains,
            latency,
            errors,
            gaps,
            actors: Arc::default(),
            ready: Arc::default(),
        }
    }

    fn actor_label(&self, actor: &str) -> String {
        let mut set = self.actors.lock().unwrap_or_else(|e| e.into_inner());
        if set.contains(actor) {
            return actor.to_string();
        }
        if set.len() < MAX_ACTOR_LABELS {
            set.insert(actor.to_string());
            return actor.to_string();
        }
        "other".into()
    }

    /// The flag `/readyz` reports: pass it as [`crate::WatchOptions::ready`]; it is set
    /// once watch is subscribed and has read its baseline.
    pub fn ready_flag(&self) -> Arc<AtomicBool> {
        self.ready.clone()
    }

    /// Whether watch is subscribed and has read its baseline (`/readyz`).
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    /// Counts one event.
    pub fn event(&self, e: &crate::event::Event, unix_secs: f64) {
        use crate::detect::Kind;
        let owner = e.owner.clone().unwrap_or_else(|| "none".into());
        let actor = self.actor_label(&e.actor.metric_label());
        match e.kind {
            Kind::Gap => {
                self.gaps.inc();
                return;
            }
            Kind::Fight => {
                let remover = e
                    .fight
                    .as_ref()
                    .map(|f| self.actor_label(&f.remover))
                    .unwrap_or_else(|| actor.clone());
                self.fights
                    .get_or_create(&vec![("owner".into(), owner), ("remover".into(), remover)])
                    .inc();
                return;
            }
            Kind::ForeignChange => {
                self.foreign
                    .get_or_create(&vec![
                        ("owner".into(), owner.clone()),
                        ("actor".into(), actor.clone()),
                    ])
                    .inc();
                self.last_foreign.set(unix_secs);
            }
            _ => {}
        }
        self.changes
            .get_or_create(&vec![
                ("owner".into(), owner),
                ("actor".into(), actor),
                ("kind".into(), e.kind.as_str().into()),
            ])
            .inc();
        if let Some(ms) = e.latency_ms {
            self.latency.observe(ms / 1000.0);
        }
    }

    /// Records an error.
    pub fn error(&self, kind: ErrorKind) {
        self.errors
            .get_or_create(&vec![("kind".into(), kind.as_str().into())])
            .inc();
    }

    /// Sets the chains-per-owner gauge from chain names.
    pub fn set_chains<'a>(&self, names: impl Iterator<Item = &'a str>) {
        let mut counts: std::collections::BTreeMap<String, i64> = Default::default();
        for n in names {
            let owner = if crate::changes::is_builtin_chain(n) {
                "builtin".to_string()
            } else {
                plumb_ruleset::owner::owner_name_of_chain(n)
                    .unwrap_or("unknown")
                    .to_string()
            };
            *counts.entry(owner).or_default() += 1;
        }
        // Owners seen before but now without chains go to 0.
        self.chains.clear();
        for (o, n) in counts {
            self.chains.get_or_create(&vec![("owner".into(), o)]).set(n);
        }
    }

    /// The OpenMetrics text exposition, as prometheus-client writes it.
    pub fn render_openmetrics(&self) -> String {
        let mut s = String::new();
        let _ = encode(&mut s, &self.registry);
        s
    }

    /// The Prometheus text exposition (format 0.0.4), what `/metrics` serves and
    /// `promtool check metrics` lints: counter families are named with their
    /// `_total` suffix in HELP/TYPE, and the OpenMetrics `# EOF` is dropped.
    pub fn render(&self) -> String {
        to_prometheus_text(&self.render_openmetrics())
    }
}

/// Rewrites prometheus-client's OpenMetrics text as Prometheus text format 0.0.4.
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let counters: BTreeSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = line
            .strip_prefix("# HELP ")
            .map(|r| ("# HELP ", r))
            .or_else(|| line.strip_prefix("# TYPE ").map(|r| ("# TYPE ", r)));
        match meta {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                if counters.contains(name) {
                    out.push_str(&format!("{prefix}{name}_total {tail}\n"));
                } else {
                    out.push_str(line);
                    out.push('\n');
                }
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_all_families_and_bounds_actor_labels() {
        let m = Metrics::new();
        m.error(ErrorKind::Decode);
        m.set_chains(["KUBE-SERVICES", "INPUT", "ufw-before-input", "X"].into_iter());
        for i in 0..(MAX_ACTOR_LABELS + 5) {
            assert_eq!(
                m.actor_label(&format!("a{i}")) == "other",
                i >= MAX_ACTOR_LABELS
            );
        }
        let text = m.render();
        for name in [
            "plumb_watch_errors_total{kind=\"decode\"} 1",
            "plumb_watch_chains{owner=\"kube-proxy\"} 1",
            "plumb_watch_chains{owner=\"builtin\"} 1",
            "plumb_watch_last_foreign_change_timestamp_seconds 0",
            "plumb_watch_event_gaps_total 0",
            "# TYPE plumb_watch_detection_latency_seconds histogram",
            "# TYPE plumb_watch_errors_total counter",
            "# HELP plumb_watch_errors_total Errors by kind",
        ] {
            assert!(text.contains(name), "{name} missing in\n{text}");
        }
        assert!(!text.contains("# EOF"));
    }
}
