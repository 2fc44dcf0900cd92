//! Hubble's flows as a sysdump holds them (`hubble-flows-<pod>-<time>.json`: one JSON
//! object per line, `{"flow": {...}, "node_name": ..., "time": ...}`, as `hubble observe
//! -o json` and Hubble's exporter print them), summed up: how many flows, how many
//! dropped, and the drops grouped by reason and destination.
//!
//! Flows are what the datapath saw during the capture. A drop by policy is often the
//! policy doing its job, so the summary is information for a reader (and evidence beside
//! other findings), never a diagnosis by itself.
//!
//! Field names per Cilium's `api/v1/flow/README.md`: `verdict` (FORWARDED, DROPPED,
//! ...), `drop_reason_desc` (an enum name such as POLICY_DENIED; older exports carry only
//! the numeric `drop_reason`), `IP.destination`, `l4.{TCP,UDP,SCTP}.destination_port`,
//! `l4.{ICMPv4,ICMPv6}.type`, `destination.{namespace,pod_name}`.

use serde::Serialize;
use serde_json::Value;

/// Longest line read: a flow with many labels is a few KiB; a longer line is counted
/// as unreadable rather than parsed.
pub const MAX_LINE: usize = 64 * 1024;
/// Groups kept (the most frequent first); the rest are counted in `other_groups`.
pub const MAX_GROUPS: usize = 20;

/// Dropped flows with the same reason and destination.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DropGroup {
    /// `POLICY_DENIED`, `INVALID_SOURCE_IP`, ... (`drop reason 133` when only the number
    /// is given).
    pub reason: String,
    /// `namespace/pod:port/PROTO`, or the address when the destination is no pod.
    pub destination: String,
    /// How many flows.
    pub count: usize,
    /// The first of them: its time, source and line in the file.
    pub first: String,
}

/// What a flows file holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FlowSummary {
    /// Flows read.
    pub flows: usize,
    /// Of them, dropped (`verdict` DROPPED).
    pub dropped: usize,
    /// The drops by reason and destination, the most frequent first (at most
    /// [`MAX_GROUPS`]).
    pub groups: Vec<DropGroup>,
    /// Groups beyond [`MAX_GROUPS`].
    pub other_groups: usize,
    /// The nodes the flows were seen on (`node_name`).
    pub nodes: Vec<String>,
    /// Lines that are no flow (not JSON, too long, no `flow` object): how many, and the
    /// first with its line number.
    pub unreadable: usize,
    /// The first unreadable line's number and why.
    pub first_unreadable: Option<String>,
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter()
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// Where a flow went: the pod when Hubble named one, else the address; with the port
/// and protocol (or the ICMP type).
fn destination(flow: &Value) -> String {
    let l4 = flow.get("l4");
    let port = ["TCP", "UDP", "SCTP"].iter().find_map(|p| {
        let d = l4?.get(p)?.get("destination_port")?.as_u64()?;
        Some(format!(":{d}/{p}"))
    });
    let icmp = ["ICMPv4", "ICMPv6"].iter().find_map(|p| {
        let t = l4?.get(p)?;
        Some(format!(
            " {p} type {}",
            t.get("type").and_then(Value::as_u64).unwrap_or(0)
        ))
    });
    let what = port.or(icmp).unwrap_or_default();
    match (
        str_at(flow, &["destination", "namespace"]),
        str_at(flow, &["destination", "pod_name"]),
    ) {
        (Some(ns), Some(pod)) => format!("{ns}/{pod}{what}"),
        _ => {
            let ip = str_at(flow, &["IP", "destination"]).unwrap_or("?");
            if ip.contains(':') && what.starts_with(':') {
                format!("[{ip}]{what}")
            } else {
                format!("{ip}{what}")
            }
        }
    }
}

fn source(flow: &Value) -> String {
    match (
        str_at(flow, &["source", "namespace"]),
        str_at(flow, &["source", "pod_name"]),
    ) {
        (Some(ns), Some(pod)) => format!("{ns}/{pod}"),
        _ => str_at(flow, &["IP", "source"]).unwrap_or("?").to_string(),
    }
}

fn reason(flow: &Value) -> String {
    if let Some(r) = str_at(flow, &["drop_reason_desc"]) {
        return r.to_string();
    }
    match flow.get("drop_reason").and_then(Value::as_u64) {
        Some(n) => format!("drop reason {n}"),
        None => "no reason given".into(),
    }
}

/// A drop group's key: (reason, destination).
type GroupKey = (String, String);
/// A drop group's tally: (count, first flow, order of first sight).
type Tally = (usize, String, usize);

/// Reads a flows file (JSON lines). Never fails: what is not a flow is counted.
pub fn summarize(text: &str) -> FlowSummary {
    let mut out = FlowSummary::default();
    let mut groups: std::collections::HashMap<GroupKey, Tally> = std::collections::HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let mut bad = |why: String| {
            out.unreadable += 1;
            if out.first_unreadable.is_none() {
                out.first_unreadable = Some(format!("line {}: {why}", i + 1));
            }
        };
        if line.len() > MAX_LINE {
            bad(format!("longer than {MAX_LINE} bytes"));
            continue;
        }
        let v: Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(e) => {
                bad(format!("not JSON ({e})"));
                continue;
            }
        };
        let Some(flow) = v.get("flow").filter(|f| f.is_object()) else {
            bad("no \"flow\" object".into());
            continue;
        };
        out.flows += 1;
        if let Some(node) = str_at(&v, &["node_name"]).or_else(|| str_at(flow, &["node_name"]))
            && !out.nodes.iter().any(|n| n == node)
            && out.nodes.len() < 64
        {
            out.nodes.push(node.to_string());
        }
        if str_at(flow, &["verdict"]) != Some("DROPPED") {
            continue;
        }
        out.dropped += 1;
        let key = (reason(flow), destination(flow));
        let order = groups.len();
        let g = groups.entry(key).or_insert_with(|| {
            let time = str_at(flow, &["time"])
                .or_else(|| str_at(&v, &["time"]))
                .unwrap_or("?");
            (
                0,
                format!("{time} from {} (line {})", source(flow), i + 1),
                order,
            )
        });
        g.0 += 1;
    }
    let mut all: Vec<(GroupKey, Tally)> = groups.into_iter().collect();
    // Most frequent first; ties in the order first seen.
    all.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.1.2.cmp(&b.1.2)));
    out.other_groups = all.len().saturating_sub(MAX_GROUPS);
    out.groups = all
        .into_iter()
        .take(MAX_GROUPS)
        .map(|((reason, destination), (count, first, _))| DropGroup {
            reason,
            destination,
            count,
            first,
        })
        .collect();
    out
}

impl FlowSummary {
    /// One line per group: `3 x POLICY_DENIED -> default/deathstar:80/TCP`.
    pub fn group_lines(&self) -> Vec<String> {
        self.groups
            .iter()
            .map(|g| format!("{} x {} -> {}", g.count, g.reason, g.destination))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOCS: &str = r#"{"flow":{"time":"2023-08-21T12:12:13.517394084Z","verdict":"DROPPED","IP":{"source":"fe80::64d8:8aff:fe72:fc14","destination":"ff02::2","ipVersion":"IPv6"},"l4":{"ICMPv6":{"type":133}},"source":{},"destination":{},"node_name":"kind-kind/kind-worker","drop_reason_desc":"INVALID_SOURCE_IP"},"node_name":"kind-kind/kind-worker","time":"2023-08-21T12:12:13.517394084Z"}
{"flow":{"time":"2023-08-21T12:12:18.510175415Z","verdict":"DROPPED","IP":{"source":"10.244.1.60","destination":"10.244.1.5","ipVersion":"IPv4"},"l4":{"TCP":{"source_port":44916,"destination_port":80,"flags":{"SYN":true}}},"source":{"namespace":"default","pod_name":"xwing"},"destination":{"namespace":"default","pod_name":"deathstar-7848d6c4d5-th9v2"},"node_name":"kind-kind/kind-worker","drop_reason_desc":"POLICY_DENIED"},"node_name":"kind-kind/kind-worker","time":"2023-08-21T12:12:18.510175415Z"}
"#;

    #[test]
    fn drops_are_grouped_by_reason_and_destination() {
        let text = format!(
            "{DOCS}{}\n{{\"flow\":{{\"verdict\":\"FORWARDED\"}}}}\nnot json\n",
            DOCS.lines().nth(1).unwrap()
        );
        let s = summarize(&text);
        assert_eq!((s.flows, s.dropped, s.unreadable), (4, 3, 1));
        assert_eq!(
            s.group_lines(),
            [
                "2 x POLICY_DENIED -> default/deathstar-7848d6c4d5-th9v2:80/TCP",
                "1 x INVALID_SOURCE_IP -> ff02::2 ICMPv6 type 133",
            ]
        );
        assert!(s.groups[0].first.contains("from default/xwing (line 2)"));
        assert_eq!(s.nodes, ["kind-kind/kind-worker"]);
        assert_eq!(
            s.first_unreadable.as_deref().unwrap().get(..7),
            Some("line 5:")
        );
    }

    #[test]
    fn a_numeric_reason_and_an_address_destination() {
        let s = summarize(
            r#"{"flow":{"verdict":"DROPPED","drop_reason":181,"IP":{"destination":"fd00::1"},"l4":{"UDP":{"destination_port":53}}}}"#,
        );
        assert_eq!(s.group_lines(), ["1 x drop reason 181 -> [fd00::1]:53/UDP"]);
    }

    #[test]
    fn groups_are_bounded() {
        let text: String = (0..MAX_GROUPS + 5)
            .map(|i| {
                format!(
                    "{{\"flow\":{{\"verdict\":\"DROPPED\",\"IP\":{{\"destination\":\"10.0.0.{i}\"}}}}}}\n"
                )
            })
            .collect();
        let s = summarize(&text);
        assert_eq!(
            (s.groups.len(), s.other_groups, s.dropped),
            (MAX_GROUPS, 5, MAX_GROUPS + 5)
        );
    }

    proptest::proptest! {
        #[test]
        fn never_panics(text in ".{0,400}") {
            let _ = summarize(&text);
        }
    }
}
