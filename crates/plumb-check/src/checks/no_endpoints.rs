//! Finding: `service-no-endpoints` — services kube-proxy rejects because they have no
//! endpoints.
//!
//! kube-proxy answers connections to a service without ready endpoints with an ICMP
//! reject (filter `KUBE-SERVICES` "NAME has no endpoints" REJECT; nftables mode:
//! `no-endpoint-services` -> `reject-chain`). Often legitimate (scaled to zero), but for
//! cluster plumbing — `kube-system/kube-dns`, `default/kubernetes` — it breaks the cluster
//! (corpus: a k3s node whose kube-dns and metrics-server had no endpoints). Services with
//! `Local` policy and no local endpoints are dropped by design and not reported.

use super::short_list;
use crate::facts::CheckInput;
use plumb_findings::{Evidence, Finding, Severity};
use plumb_kubeproxy::recover::NoEndpoints;

/// Finding id: Services kube-proxy rejects for having no endpoints.
pub const ID: &str = "service-no-endpoints";

/// Lists the Services kube-proxy answers with a reject: severity medium when one is
/// `kube-system/*` or `default/kubernetes`, low otherwise; `Local`-policy drops are not
/// reported.
pub fn check(facts: &CheckInput) -> Vec<Finding> {
    let mut names: Vec<String> = Vec::new();
    let mut evidence = Vec::new();
    for map in &facts.services {
        let source = facts.source_of(map.backend, map.family, map.table_name());
        for s in &map.services {
            if s.no_endpoints != Some(NoEndpoints::Reject) {
                continue;
            }
            names.push(s.display_name());
            let ev = s
                .evidence
                .iter()
                .find(|e| {
                    e.text().contains("has no endpoints") || e.chain().starts_with("no-endpoint")
                })
                .or(s.evidence.first());
            if let Some(e) = ev {
                evidence.push(Evidence {
                    source: source.clone(),
                    line: Some(e.line()).filter(|&l| l > 0),
                    text: e.text().to_string(),
                });
            }
        }
    }
    // The REJECT rules themselves, for inputs the service map could not be read from
    // (a filter-table listing without the nat table): kube-proxy's "NAME has no
    // endpoints" comment names the service port.
    let mut rejects = 0usize;
    for table in facts.xt_tables().filter(|t| &*t.name == "filter") {
        for chain in ["KUBE-SERVICES", "KUBE-EXTERNAL-SERVICES"] {
            let Some(c) = table.chain(chain) else {
                continue;
            };
            for r in &c.rules {
                if !r.text.contains("has no endpoints") {
                    continue;
                }
                let name = r
                    .comments()
                    .iter()
                    .find_map(|c| c.strip_suffix(" has no endpoints").map(str::to_string));
                let Some(name) = name else { continue };
                rejects += 1;
                if !names.contains(&name) {
                    names.push(name);
                    evidence.push(facts.rule(table, r));
                }
            }
        }
    }
    if facts.services.is_empty() && rejects == 0 {
        return Vec::new();
    }
    if names.is_empty() {
        return vec![Finding::ok(ID, "every recovered service has endpoints")];
    }
    names.sort();
    names.dedup();
    let system = names
        .iter()
        .any(|n| n.starts_with("kube-system/") || n.starts_with("default/kubernetes"));
    vec![
        Finding::problem(
            ID,
            if system { Severity::Medium } else { Severity::Low },
            format!(
                "{} service port(s) have no endpoints: {}",
                names.len(),
                short_list(&names, 4)
            ),
        )
        .with_evidence(evidence)
        .explain("kube-proxy has no ready endpoint for these service ports, so it rejects connections to them (clients see \"connection refused\" or ICMP port unreachable, not a timeout). For application services this may be intended (scaled to zero); for kube-system services such as kube-dns it means their pods are not running or not ready — often because the CNI is not initialised (pods stay Pending when install-cni cannot reach the API server).")
        .fix("Check the pods behind them: `kubectl -n <ns> get endpointslices -l kubernetes.io/service-name=<name>` and the pods' readiness.")
        .fix("If kube-system pods are Pending, look at the CNI first (`/etc/cni/net.d` empty, install-cni errors)."),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::Origin;
    use plumb_findings::Status;
    use plumb_kubeproxy::{
        GeneratorConfig, IptablesSaveOptions, KubeProxyRules, ProxierOptions, generate,
    };
    use plumb_ruleset::format::{ParseOptions, parse_bytes};

    fn run(config: GeneratorConfig) -> Vec<Finding> {
        let c = generate(&config).unwrap();
        let text = KubeProxyRules::new(&c, &ProxierOptions::default())
            .to_iptables_save(&IptablesSaveOptions::default());
        let rs = parse_bytes(text.as_bytes(), &ParseOptions::default())
            .unwrap()
            .ruleset;
        check(&CheckInput::new(&rs, Origin::File("dump".into()), false))
    }

    #[test]
    fn services_without_endpoints_are_listed_with_their_reject_rule() {
        let f = run(GeneratorConfig {
            services: 60,
            no_endpoints_fraction: 0.5,
            ..Default::default()
        });
        assert!(f[0].is_problem());
        assert_eq!(f[0].severity, Severity::Low);
        assert!(f[0].evidence[0].text.contains("has no endpoints"));
        assert!(f[0].evidence[0].text.contains("-j REJECT"));
    }

    #[test]
    fn reject_rules_of_a_filter_listing_name_the_services() {
        // `iptables --list` of filter only: the nat table (and the service map) is absent.
        let text = "Chain KUBE-SERVICES (2 references)\ntarget     prot opt source               destination         \nREJECT     tcp  --  anywhere             10.96.7.189          /* argocd/argocd-redis-ha-announce-2:tcp-server has no endpoints */ tcp dpt:6379 reject-with icmp-port-unreachable\n";
        let rs = parse_bytes(text.as_bytes(), &ParseOptions::default())
            .unwrap()
            .ruleset;
        let f = check(&CheckInput::new(&rs, Origin::File("l".into()), false));
        assert!(f[0].is_problem(), "{f:#?}");
        assert_eq!(
            f[0].title,
            "1 service port(s) have no endpoints: argocd/argocd-redis-ha-announce-2:tcp-server"
        );
        assert!(f[0].evidence[0].text.contains("has no endpoints"));
    }

    #[test]
    fn all_endpoints_ready_is_ok() {
        let f = run(GeneratorConfig {
            services: 30,
            no_endpoints_fraction: 0.0,
            ..Default::default()
        });
        assert_eq!(f[0].status, Status::Ok);
    }
}
