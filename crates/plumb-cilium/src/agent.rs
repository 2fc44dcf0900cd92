//! What Cilium's agent says about itself, read from its CLI's output: `cilium-dbg status`
//! (text, as sysdumps keep it, or `-o json`) for the kube-proxy replacement setting, and
//! `cilium-dbg service list -o json` for its Services as [`Frontend`]s.
//!
//! The JSON shapes are the agent API's models (cilium `api/v1/models`):
//! - status: `{"kube-proxy-replacement": {"mode": "True", ...}, ...}` (`StatusResponse`;
//!   `mode` is `True`/`False` from 1.14, `Strict`/`Partial`/`Probe`/`Disabled` before);
//! - service list: `[{"spec": {"id": 4, "frontend-address": {"ip", "port",
//!   "protocol", "scope"}, "backend-addresses": [{"ip", "port", "protocol", "state"}],
//!   "flags": {"type": "ClusterIP", "name", "namespace"}}, "status": ...}]` (`Service`).
//!
//! - endpoint list: the text table (`ENDPOINT ... STATUS`, one row per endpoint, labels
//!   continuing on indented lines) or `-o json` (`[{"id", "status": {"state",
//!   "external-identifiers": {"k8s-namespace", "k8s-pod-name"}}}]`).
//!
//! Unknown fields are ignored; an entry that lacks what a frontend needs is reported,
//! never guessed, and the others are kept.

use crate::layout::{BackendState, L4Proto, Scope};
use crate::lbmap::{BackendRef, Frontend, FrontendKind, Problem, ServiceRef};
use serde::Deserialize;
use std::net::IpAddr;

/// The `KubeProxyReplacement` value of a `cilium-dbg status` output, text or JSON:
/// `True`, `Strict`, `False`, `Disabled` (the first word of the text line; the devices
/// that follow are not kept). None when the output does not say.
pub fn kube_proxy_replacement(output: &str) -> Option<String> {
    let trimmed = output.trim_start();
    if trimmed.starts_with('{') {
        #[derive(Deserialize)]
        struct Status {
            #[serde(rename = "kube-proxy-replacement")]
            kpr: Option<Mode>,
        }
        #[derive(Deserialize)]
        struct Mode {
            mode: Option<String>,
        }
        let s: Status = serde_json::from_str(trimmed).ok()?;
        return s.kpr?.mode.filter(|m| !m.is_empty());
    }
    // `KubeProxyReplacement:   True   [eth0 ...]` (a TAB or spaces after the colon).
    output.lines().find_map(|l| {
        let rest = l.trim().strip_prefix("KubeProxyReplacement:")?;
        rest.split_whitespace().next().map(str::to_string)
    })
}

#[derive(Deserialize)]
struct Service {
    spec: Option<Spec>,
}

#[derive(Deserialize)]
struct Spec {
    id: Option<i64>,
    #[serde(rename = "frontend-address")]
    frontend: Option<Address>,
    #[serde(rename = "backend-addresses", default)]
    backends: Vec<Address>,
    flags: Option<Flags>,
}

#[derive(Deserialize)]
struct Address {
    ip: Option<String>,
    port: Option<u16>,
    protocol: Option<String>,
    scope: Option<String>,
    state: Option<String>,
}

#[derive(Deserialize)]
struct Flags {
    #[serde(rename = "type")]
    kind: Option<String>,
    name: Option<String>,
    namespace: Option<String>,
}

fn proto(p: Option<&str>) -> L4Proto {
    p.and_then(L4Proto::from_name).unwrap_or(L4Proto::ANY)
}

fn state(s: Option<&str>) -> BackendState {
    match s {
        None | Some("active") => BackendState::Active,
        Some("terminating") => BackendState::Terminating,
        Some("quarantined") => BackendState::Quarantined,
        Some("maintenance") => BackendState::Maintenance,
        Some(_) => BackendState::Unknown(u8::MAX),
    }
}

/// `cilium-dbg service list -o json` -> frontends (in the agent's order) and what could
/// not be read (`entry N: why`). Not JSON at all is one error.
pub fn service_list(json: &str) -> (Vec<Frontend>, Vec<String>) {
    let services: Vec<Service> = match serde_json::from_str(json) {
        Ok(s) => s,
        Err(e) => return (Vec::new(), vec![format!("not a service list in JSON: {e}")]),
    };
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for (i, s) in services.into_iter().enumerate() {
        let Some(spec) = s.spec else {
            errors.push(format!("entry {i}: no spec"));
            continue;
        };
        let id = spec.id.map_or(String::new(), |id| format!(" (id {id})"));
        let Some(fe) = spec.frontend else {
            errors.push(format!("entry {i}{id}: no frontend-address"));
            continue;
        };
        let (Some(address), Some(port)) = (fe.ip.as_deref().and_then(|a| a.parse().ok()), fe.port)
        else {
            errors.push(format!(
                "entry {i}{id}: frontend-address without a valid ip and port"
            ));
            continue;
        };
        let (kind, name, namespace) = spec
            .flags
            .map_or((None, None, None), |f| (f.kind, f.name, f.namespace));
        let kind = kind.and_then(|k| FrontendKind::from_name(&k));
        // The Kubernetes Service: both parts, or none.
        let service = match (namespace, name) {
            (Some(namespace), Some(name)) if !namespace.is_empty() && !name.is_empty() => {
                Some(ServiceRef { namespace, name })
            }
            _ => None,
        };
        let mut backends = Vec::new();
        for (slot, b) in spec.backends.iter().enumerate() {
            let addr: Option<IpAddr> = b.ip.as_deref().and_then(|a| a.parse().ok());
            match (addr, b.port) {
                (Some(address), Some(port)) => backends.push(BackendRef {
                    slot: u16::try_from(slot + 1).unwrap_or(u16::MAX),
                    id: None,
                    address,
                    port,
                    proto: proto(b.protocol.as_deref()),
                    state: state(b.state.as_deref()),
                }),
                _ => errors.push(format!(
                    "entry {i}{id}: backend {} without a valid ip and port",
                    slot + 1
                )),
            }
        }
        let problems = if backends.is_empty() {
            vec![Problem::NoBackends]
        } else {
            Vec::new()
        };
        out.push(Frontend {
            address,
            port,
            proto: proto(fe.protocol.as_deref()),
            scope: if fe.scope.as_deref() == Some("internal") {
                Scope::Internal
            } else {
                Scope::External
            },
            kind,
            options: Vec::new(),
            rev_nat: spec.id.and_then(|id| u16::try_from(id).ok()),
            backends,
            problems,
            service,
        });
    }
    (out, errors)
}

/// One endpoint of the agent (a pod, the host, the health endpoint).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Endpoint {
    /// The endpoint id.
    pub id: u64,
    /// Its state (`ready`, `not-ready`, `waiting-for-identity`, `regenerating`, ...).
    pub state: String,
    /// What it is: the pod (`namespace/name`), or its first label (`reserved:host`).
    pub what: String,
}

impl Endpoint {
    /// States an endpoint is stuck in rather than passing through: it does not get
    /// traffic or policy as it should (`regenerating`, `waiting-to-regenerate`,
    /// `restoring` and `disconnecting` are transient and not counted).
    pub fn stuck(&self) -> bool {
        matches!(
            self.state.as_str(),
            "not-ready" | "waiting-for-identity" | "invalid" | "disconnected"
        )
    }
}

/// `cilium-dbg endpoint list`, text or `-o json`, into endpoints (rows it cannot read
/// are skipped: the table has no other row kinds than its header and label lines).
pub fn endpoint_list(output: &str) -> Vec<Endpoint> {
    let trimmed = output.trim_start();
    if trimmed.starts_with('[') {
        #[derive(Deserialize)]
        struct Ep {
            id: Option<u64>,
            status: Option<EpStatus>,
        }
        #[derive(Deserialize)]
        struct EpStatus {
            state: Option<String>,
            #[serde(rename = "external-identifiers")]
            external: Option<External>,
        }
        #[derive(Deserialize)]
        struct External {
            #[serde(rename = "k8s-namespace")]
            namespace: Option<String>,
            #[serde(rename = "k8s-pod-name")]
            pod: Option<String>,
        }
        let eps: Vec<Ep> = serde_json::from_str(trimmed).unwrap_or_default();
        return eps
            .into_iter()
            .filter_map(|e| {
                let status = e.status?;
                let what = status
                    .external
                    .and_then(|x| Some(format!("{}/{}", x.namespace?, x.pod?)))
                    .unwrap_or_default();
                Some(Endpoint {
                    id: e.id?,
                    state: status.state?,
                    what,
                })
            })
            .collect();
    }
    let mut out: Vec<Endpoint> = Vec::new();
    for line in output.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(id) = words.first().and_then(|w| w.parse::<u64>().ok()) else {
            // A label continuation line: the pod's namespace and name are labels.
            if let (Some(last), [label]) = (out.last_mut(), words.as_slice())
                && let Some(ns) = label.strip_prefix("k8s:io.kubernetes.pod.namespace=")
            {
                last.what = format!("{ns} ({})", last.what);
            }
            continue;
        };
        let (Some(state), Some(label)) = (words.last(), words.iter().find(|w| w.contains(':')))
        else {
            continue;
        };
        out.push(Endpoint {
            id,
            state: state.to_string(),
            what: label.to_string(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_proxy_replacement_from_text_and_json() {
        assert_eq!(
            kube_proxy_replacement(
                "KVStore:                 Ok   Disabled\nKubeProxyReplacement:    True\t[eth0 (Direct Routing), eth1]\n"
            )
            .as_deref(),
            Some("True")
        );
        assert_eq!(
            kube_proxy_replacement(r#"{"kube-proxy-replacement":{"mode":"Strict","devices":[]}}"#)
                .as_deref(),
            Some("Strict")
        );
        assert_eq!(kube_proxy_replacement("{}"), None);
        assert_eq!(kube_proxy_replacement("{not json"), None);
        assert_eq!(kube_proxy_replacement("nothing here"), None);
    }

    #[test]
    fn service_list_keeps_good_entries_and_names_bad_ones() {
        let (f, e) = service_list(
            r#"[{"spec":{"id":4,"frontend-address":{"ip":"10.104.239.135","port":80,"protocol":"TCP","scope":"external"},
                 "backend-addresses":[{"ip":"10.217.0.107","port":80,"protocol":"TCP","state":"active"}],
                 "flags":{"type":"ClusterIP","name":"x","namespace":"default"}}},
                {"spec":{"id":5,"frontend-address":{"ip":"nope","port":1}}},
                {"spec":{"id":6,"frontend-address":{"ip":"0.0.0.0","port":30965,"protocol":"TCP"},"flags":{"type":"NodePort"}}}]"#,
        );
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].display_address(), "10.104.239.135:80/TCP");
        assert_eq!(f[0].kind, Some(FrontendKind::ClusterIP));
        assert_eq!(f[0].backends[0].port, 80);
        assert_eq!(f[1].problems, [Problem::NoBackends]);
        // The Kubernetes names in the flags are kept; a NodePort without them has none.
        assert_eq!(
            f[0].service,
            Some(ServiceRef {
                namespace: "default".into(),
                name: "x".into()
            })
        );
        assert_eq!(f[1].service, None);
        assert_eq!(e.len(), 1);
        assert!(e[0].contains("id 5"), "{e:?}");
        assert_eq!(service_list("[").1.len(), 1);
    }

    #[test]
    fn endpoint_rows_with_label_continuations() {
        let eps = endpoint_list(
            "ENDPOINT   POLICY (ingress)   POLICY (egress)   IDENTITY   LABELS (source:key[=value])   IPv6   IPv4         STATUS\n           ENFORCEMENT        ENFORCEMENT\n232        Disabled           Disabled          16530      k8s:class=deathstar                  10.0.0.147   not-ready\n                                                           k8s:io.kubernetes.pod.namespace=default\n726        Disabled           Disabled          1          reserved:host                                     ready\n",
        );
        assert_eq!(eps.len(), 2);
        assert_eq!(eps[0].id, 232);
        assert!(eps[0].stuck());
        assert_eq!(eps[0].what, "default (k8s:class=deathstar)");
        assert_eq!(eps[1].state, "ready");
        let json = endpoint_list(
            r#"[{"id":7,"status":{"state":"waiting-for-identity","external-identifiers":{"k8s-namespace":"default","k8s-pod-name":"web-1"}}}]"#,
        );
        assert_eq!(json[0].what, "default/web-1");
        assert!(json[0].stuck());
    }
}

#[cfg(test)]
mod never_panic {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any text, and JSON-looking text, is read or refused without a panic.
        #[test]
        fn agent_outputs_never_panic(s in "\\PC{0,400}", json in r#"[\[{\]}":,0-9a-z -]{0,200}"#) {
            for t in [&s, &json] {
                let _ = kube_proxy_replacement(t);
                let _ = service_list(t);
                let _ = endpoint_list(t);
            }
        }
    }
}
