//! The metrics `plumb observe --metrics-addr` serves (OpenMetrics and Prometheus
//! text), with bounded labels.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use std::sync::Arc;

/// The metrics of `--metrics-addr`; labels are bounded: verdict (2), protocol (6),
/// the kernel's reasons (one enum), owners (the catalogue plus builtin, unknown,
/// ambiguous, none), lost-event sources (3).
#[derive(Clone)]
pub(super) struct Metrics {
    pub(super) registry: Arc<Registry>,
    pub(super) flows: Family<Vec<(String, String)>, Counter>,
    pub(super) drops: Family<Vec<(String, String)>, Counter>,
    pub(super) lost: Family<Vec<(String, String)>, Counter>,
    pub(super) reads: Family<Vec<(String, String)>, Counter>,
    pub(super) aggregated: Counter,
}

impl Metrics {
    pub(super) fn new() -> Metrics {
        let mut r = Registry::default();
        let flows = Family::default();
        let drops = Family::default();
        let lost = Family::default();
        let reads = Family::default();
        let aggregated = Counter::default();
        r.register(
            "plumb_observe_flows",
            "Connection events conntrack reported, by verdict and protocol",
            flows.clone(),
        );
        r.register(
            "plumb_observe_drops",
            "Packets the kernel dropped, by reason and by the owner of the netfilter rule",
            drops.clone(),
        );
        r.register(
            "plumb_observe_lost_events",
            "Events lost before plumb could read them, by where",
            lost.clone(),
        );
        r.register(
            "plumb_observe_ruleset_reads",
            "Reads of the rule counters for attribution, by how: netlink (the chains that can drop), full (the whole ruleset over netlink) or tools (the dump tools)",
            reads.clone(),
        );
        r.register(
            "plumb_observe_aggregated_drops",
            "Drops printed as part of an identical drop's line (its count) because the output was behind",
            aggregated.clone(),
        );
        Metrics {
            registry: Arc::new(r),
            flows,
            drops,
            lost,
            reads,
            aggregated,
        }
    }
}

impl plumb_watch::http::Exposition for Metrics {
    fn render_openmetrics(&self) -> String {
        let mut s = String::new();
        let _ = encode(&mut s, &self.registry);
        s
    }
    fn render(&self) -> String {
        plumb_watch::metrics::to_prometheus_text(&self.render_openmetrics())
    }
    fn is_ready(&self) -> bool {
        true
    }
}

pub(super) fn label(k: &str, v: &str) -> (String, String) {
    (k.to_string(), v.to_string())
}
