//! The migration diff: the Services kube-proxy programmed before the move (read from a
//! saved dump by the caller) against the frontends Cilium's maps hold now. Every
//! ClusterIP and NodePort present in both is matched; a Service address kube-proxy
//! served that Cilium does not is a connection that fails after the move. Endpoints are
//! compared too, but only reported: pods come and go between the two reads.

use crate::layout::L4Proto;
use crate::lbmap::{Frontend, FrontendKind};
use plumb_findings::{Evidence, Finding, Severity};
use std::collections::BTreeSet;
use std::net::IpAddr;

/// Finding ids of the diff.
pub mod ids {
    /// A Service address kube-proxy served is not in Cilium's load balancer.
    pub const MISSING: &str = "cilium-migration-missing-services";
    /// A Service's endpoints differ between kube-proxy's rules and Cilium's maps.
    pub const ENDPOINTS: &str = "cilium-migration-endpoints-differ";
}

/// One Service port as kube-proxy programmed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeProxyService {
    /// `namespace/name:port`, when the rules named it.
    pub name: Option<String>,
    /// The ClusterIP.
    pub cluster_ip: Option<IpAddr>,
    /// The service port.
    pub port: Option<u16>,
    /// `tcp`, `udp` or `sctp`, when known.
    pub protocol: Option<String>,
    /// NodePorts.
    pub node_ports: Vec<u16>,
    /// Endpoints as `ip:port`.
    pub endpoints: Vec<String>,
}

impl KubeProxyService {
    fn label(&self) -> String {
        let addr = match (self.cluster_ip, self.port) {
            (Some(ip), Some(p)) => format!("{ip}:{p}"),
            _ => "(no ClusterIP)".into(),
        };
        match &self.name {
            Some(n) => format!("{n} ({addr})"),
            None => addr,
        }
    }

    fn proto(&self) -> Option<L4Proto> {
        self.protocol
            .as_deref()
            .and_then(|p| L4Proto::from_name(&p.to_ascii_uppercase()))
    }
}

/// Protocols match when they are equal or either side does not say (Cilium before 1.17
/// writes "any").
fn same_proto(a: L4Proto, b: Option<L4Proto>) -> bool {
    a == L4Proto::ANY || b.is_none_or(|b| b == a)
}

/// The diff as findings (two: missing Services, differing endpoints).
pub fn diff(
    before: &[KubeProxyService],
    source: &str,
    now: &[Frontend],
    now_source: &str,
) -> Vec<Finding> {
    let mut missing = Vec::new();
    let mut differ = Vec::new();
    for s in before {
        let proto = s.proto();
        if let (Some(ip), Some(port)) = (s.cluster_ip, s.port) {
            match now
                .iter()
                .find(|f| f.address == ip && f.port == port && same_proto(f.proto, proto))
            {
                None => missing.push(format!("{}: ClusterIP not in Cilium's maps", s.label())),
                Some(f) => {
                    let was: BTreeSet<&String> = s.endpoints.iter().collect();
                    let is: BTreeSet<String> = f
                        .active_backends()
                        .map(|b| match b.address {
                            IpAddr::V6(a) => format!("[{a}]:{}", b.port),
                            a => format!("{a}:{}", b.port),
                        })
                        .collect();
                    if !was.is_empty() && was.iter().copied().ne(is.iter()) {
                        differ.push(format!(
                            "{}: kube-proxy {:?}, Cilium {:?}",
                            s.label(),
                            was,
                            is
                        ));
                    }
                }
            }
        }
        for np in &s.node_ports {
            let found = now.iter().any(|f| {
                f.port == *np
                    && f.kind == Some(FrontendKind::NodePort)
                    && same_proto(f.proto, proto)
            });
            if !found {
                missing.push(format!("{}: NodePort {np} not in Cilium's maps", s.label()));
            }
        }
    }
    let evidence = |lines: &[String]| {
        lines
            .iter()
            .map(|l| Evidence {
                source: format!("{source} vs {now_source}"),
                line: None,
                text: l.clone(),
            })
            .collect::<Vec<_>>()
    };
    let checked = before.len();
    vec![
        if missing.is_empty() {
            Finding::ok(
                ids::MISSING,
                format!(
                    "every Service address of {checked} kube-proxy service ports is in Cilium's maps"
                ),
            )
        } else {
            Finding::problem(
                ids::MISSING,
                Severity::High,
                format!("{} Service address(es) kube-proxy served are not in Cilium's load balancer", missing.len()),
            )
            .with_evidence(evidence(&missing))
            .explain("Connections to these addresses worked through kube-proxy's rules; with kube-proxy gone nothing translates them. A Service deleted between the two reads is expected here; any other is a Service Cilium's agent has not programmed.")
            .fix("Compare with the agent's view: `kubectl -n kube-system exec ds/cilium -- cilium-dbg service list`; check the agent's log for the Service's name.")
        },
        if differ.is_empty() {
            Finding::ok(
                ids::ENDPOINTS,
                "the endpoints of every matched Service are the same",
            )
        } else {
            Finding::problem(
                ids::ENDPOINTS,
                Severity::Info,
                format!("{} Service(s) have other endpoints in Cilium's maps than in kube-proxy's rules", differ.len()),
            )
            .with_evidence(evidence(&differ))
            .explain("Pods restarted or were rescheduled between the two reads, or one side lags: worth a look only for a Service that fails.")
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lb_list;

    #[test]
    fn a_cluster_ip_cilium_lacks_is_missing_and_changed_endpoints_are_info() {
        let (now, errors) = lb_list::parse(concat!(
            "10.43.0.10:53/UDP (0)   0.0.0.0:0 (2) (0) [ClusterIP]\n",
            "10.43.0.10:53/UDP (1)   10.42.0.5:53/UDP (2) (1)\n",
            "0.0.0.0:30080/TCP (0)   0.0.0.0:0 (3) (0) [NodePort]\n",
            "0.0.0.0:30080/TCP (1)   10.42.0.7:8080/TCP (3) (1)\n",
        ));
        assert!(errors.is_empty());
        let before = vec![
            KubeProxyService {
                name: Some("kube-system/kube-dns:dns".into()),
                cluster_ip: Some("10.43.0.10".parse().unwrap()),
                port: Some(53),
                protocol: Some("udp".into()),
                node_ports: vec![],
                endpoints: vec!["10.42.0.9:53".into()],
            },
            KubeProxyService {
                name: Some("default/web:http".into()),
                cluster_ip: Some("10.43.0.80".parse().unwrap()),
                port: Some(80),
                protocol: Some("tcp".into()),
                node_ports: vec![30080, 30081],
                endpoints: vec!["10.42.0.7:8080".into()],
            },
        ];
        let f = diff(&before, "before.save", &now, "maps");
        assert!(f[0].is_problem());
        let texts: Vec<&str> = f[0].evidence.iter().map(|e| e.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "default/web:http (10.43.0.80:80): ClusterIP not in Cilium's maps",
                "default/web:http (10.43.0.80:80): NodePort 30081 not in Cilium's maps",
            ]
        );
        assert_eq!(f[1].severity, Severity::Info);
        assert!(
            f[1].evidence[0]
                .text
                .starts_with("kube-system/kube-dns:dns")
        );
    }
}
