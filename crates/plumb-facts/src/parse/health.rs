//! kube-proxy's health server body (pkg/proxy/healthcheck, proxier health server):
//! `{"lastUpdated": "2024-06-16 13:10:38.185 +0000 UTC m=+18599.92","currentTime": "…", "nodeEligible": true}`.
//! Served on 127.0.0.1:10256 (`/healthz` and, since 1.31, `/livez`) with status 200 when
//! healthy and 503 when not; the body has the same shape either way.

use serde::{Deserialize, Serialize};

/// The body kube-proxy's `/healthz` and `/livez` return.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProxyHealth {
    /// When kube-proxy last completed a sync, as Go prints a time
    /// (`2024-06-16 13:10:38.185 +0000 UTC m=+18599.92`).
    pub last_updated: String,
    /// kube-proxy's clock when it answered, in the same form: the gap to `last_updated`
    /// is how long it has not synced.
    pub current_time: String,
    /// Absent before 1.28 (KEP-3836); false while the node is being deleted or drained
    /// by the cluster autoscaler: /healthz then fails while kube-proxy itself is fine.
    #[serde(default)]
    pub node_eligible: Option<bool>,
}

/// Parses a body; `None` when it is not kube-proxy's JSON.
pub fn parse(body: &str) -> Option<ProxyHealth> {
    serde_json::from_str(body.trim()).ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_both_generations_of_the_body() {
        let h = super::parse(r#"{"lastUpdated": "2024-06-16 13:10:38.185046097 +0000 UTC m=+18599.921395918","currentTime": "2024-06-16 13:10:38.185046097 +0000 UTC m=+18599.921395918", "nodeEligible": true}"#).unwrap();
        assert_eq!(h.node_eligible, Some(true));
        let old = super::parse(r#"{"lastUpdated": "a","currentTime": "b"}"#).unwrap();
        assert_eq!(old.node_eligible, None);
        assert!(super::parse("ok").is_none());
    }
}
