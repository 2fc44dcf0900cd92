//! Finding: `stale-chain` — chains that are declared but nothing references.
//!
//! An unreferenced user chain is never evaluated. Typical sources: kube-proxy's
//! `KUBE-SEP-*` chains whose service chain was deleted, `KUBE-SVC-*`/`KUBE-SEP-*` leftovers
//! after a switch to IPVS mode (facts-kubernetes.md), chains of an uninstalled CNI or
//! firewall. kube-proxy's unreachable *service* chains (not in IPVS mode) are reported by
//! `kube-proxy-service-unreachable` because they mean broken services, not litter.
//!
//! Chains unreferenced *by design* are not findings; the owner catalogue
//! (`unreferenced_by_design` in plumb-ruleset's `data/owners.json`) says which and why:
//! canaries and the backend hint, UFW's logging/limit/skip chains, Docker's empty DOCKER
//! chain, portmap's CNI-HOSTPORT-SETMARK without hostPorts, IPVS-mode KUBE-FIREWALL /
//! KUBE-LOAD-BALANCER without LoadBalancer services, firewalld's unbound zone chains.
//! A flushed table (every chain empty) is one `table-flushed` finding instead.
//!
//! The reverse also counts: a chain the catalogue marks `empty_is_stale` (portmap's
//! per-container `CNI-DN-*` DNAT chain) that is still jumped to but holds no rule is left
//! from a container removed without its CNI DEL.
//!
//! Only judged on complete dumps: in a restore payload the references may be in the kernel.

use super::{owner_name, short_list};
use crate::facts::CheckInput;
use crate::facts::shapes::{ipvs_mode, is_flushed};
use plumb_findings::{Finding, Severity};
use plumb_kubeproxy::ChainPrefix;
use plumb_kubeproxy::chain_name::parse_chain_name;
use plumb_ruleset::{Backend, Table};
use std::collections::BTreeMap;

/// Finding id: a declared chain nothing references (or a referenced chain the catalogue
/// says must not be empty).
pub const ID: &str = "stale-chain";

/// True when the catalogue says nothing jumps to `chain` on a healthy node.
fn by_design(chain: &plumb_ruleset::Chain, ipvs: bool) -> bool {
    plumb_ruleset::owner::unreferenced_by_design(&chain.name).is_some_and(|(_, r)| {
        (!r.only_if_empty || chain.rules.is_empty()) && (!r.only_in_ipvs || ipvs)
    })
}

/// Reports unreferenced chains except those unreferenced by design and those of a
/// flushed table; only on complete dumps.
pub fn check(facts: &CheckInput) -> Vec<Finding> {
    if !facts.is_full() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let proxy_ipvs = facts
        .ruleset
        .tables
        .iter()
        .any(|t| &*t.name == "nat" && ipvs_mode(t));
    for table in &facts.ruleset.tables {
        if is_flushed(table) {
            continue; // table-flushed
        }
        let refs = facts.refs_of(table);
        // kube-proxy runs one mode for both families: an IPv6 nat table with no services
        // shows no ipset match of its own.
        let ipvs = proxy_ipvs;
        empty_but_referenced(facts, table, &refs.rules, &mut out);
        // owner -> chains
        let mut stale: BTreeMap<String, Vec<&plumb_ruleset::Chain>> = BTreeMap::new();
        for c in &table.chains {
            if c.is_builtin() || refs.is_referenced(&c.name) || by_design(c, ipvs) {
                continue;
            }
            if !ipvs
                && matches!(
                    parse_chain_name(&c.name),
                    Some((ChainPrefix::Svc | ChainPrefix::Svl, _))
                )
            {
                continue; // kube-proxy-service-unreachable
            }
            let owner = if table.backend == Backend::Nftables {
                plumb_ruleset::owner::table_owner(table)
                    .map(|a| a.owner.0)
                    .unwrap_or_else(|| "unknown".into())
            } else {
                owner_name(&c.name).unwrap_or("unknown").to_string()
            };
            stale.entry(owner).or_default().push(c);
        }
        for (owner, chains) in stale {
            out.push(finding(facts, table, &owner, &chains, ipvs));
        }
    }
    if out.is_empty() {
        out.push(Finding::ok(
            ID,
            "every user chain is referenced by some rule",
        ));
    }
    out
}

/// Chains the catalogue calls litter when empty (portmap's CNI-DN-*), still jumped to.
fn empty_but_referenced(
    facts: &CheckInput,
    table: &Table,
    jumps: &[(&str, &plumb_ruleset::Rule)],
    out: &mut Vec<Finding>,
) {
    let mut chains = Vec::new();
    let mut evidence = Vec::new();
    let mut why = "";
    let mut owner = "";
    for c in table.chains.iter().filter(|c| c.rules.is_empty()) {
        let Some((o, rule)) = plumb_ruleset::owner::empty_is_stale(&c.name) else {
            continue;
        };
        let from: Vec<_> = jumps.iter().filter(|(t, _)| *t == &*c.name).collect();
        if from.is_empty() {
            continue; // unreferenced: the general rule reports it
        }
        chains.push(&*c.name);
        evidence.push(facts.chain(table, c));
        evidence.extend(from.iter().take(1).map(|(_, r)| facts.rule(table, r)));
        why = &rule.why;
        owner = o;
    }
    if chains.is_empty() {
        return;
    }
    out.push(
        Finding::problem(
            ID,
            Severity::Low,
            format!(
                "{} {} {}: {} empty {owner} chain(s) still jumped to: {}",
                table.backend,
                table.family,
                table.name,
                chains.len(),
                short_list(&chains, 4)
            ),
        )
        .with_evidence(evidence)
        .explain(format!("{}. The jump to it matches nothing and falls through, so traffic is not affected, but the rule that jumps there is stale too.", capitalise(why)))
        .fix("Remove the container runtime's leftovers with its own tool (for nerdctl/containerd: `nerdctl network prune` or a CNI DEL for the old container) rather than by hand."),
    );
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

fn finding(
    facts: &CheckInput,
    table: &Table,
    owner: &str,
    chains: &[&plumb_ruleset::Chain],
    ipvs: bool,
) -> Finding {
    let names: Vec<&str> = chains.iter().map(|c| &*c.name).collect();
    let kube = owner == "kube-proxy";
    let severity = if kube {
        Severity::Medium
    } else {
        Severity::Low
    };
    let explanation = if kube && ipvs {
        "kube-proxy runs in IPVS mode here (KUBE-SERVICES matches ipsets), so iptables-mode KUBE-SVC/KUBE-SEP chains are leftovers of an earlier mode: nothing reaches them. Harmless for traffic, confusing for anyone reading the rules."
    } else if kube {
        "kube-proxy removes endpoint and service chains it no longer references in each full sync. Unreferenced KUBE-* chains mean a sync did not complete (a failing iptables-restore) or another tool deleted the rules that referenced them (the service chain or its jumps) — check kube-proxy's log for restore failures."
    } else {
        "Nothing jumps to these chains, so they are never evaluated: leftovers of an uninstalled or restarted component. Harmless for traffic, but they hide what is really in effect."
    };
    let f = Finding::problem(
        ID,
        severity,
        format!(
            "{} {} {}: {} unreferenced {owner} chain(s): {}",
            table.backend,
            table.family,
            table.name,
            names.len(),
            short_list(&names, 4)
        ),
    )
    .with_evidence(chains.iter().map(|c| facts.chain(table, c)))
    .explain(explanation);
    if kube && ipvs {
        f.fix("They disappear after a reboot or `kube-proxy --cleanup` run by the cluster's tooling; no action is needed for traffic.")
    } else if kube {
        f.fix("Let kube-proxy finish a full sync (restart the kube-proxy pod if its log shows restore failures) and check again.")
    } else {
        f.fix("Identify the owner from the chain names and remove the component's rules with its own tool, not by hand.")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::Origin;
    use plumb_findings::Status;
    use plumb_ruleset::format::{ParseOptions, parse_bytes};

    fn run(text: &str, partial: bool) -> Vec<Finding> {
        let text = crate::checks::full_dump(text);
        let rs = parse_bytes(text.as_bytes(), &ParseOptions::default())
            .unwrap()
            .ruleset;
        check(&CheckInput::new(&rs, Origin::File("dump".into()), partial))
    }

    #[test]
    fn orphan_endpoint_chain_is_stale_and_canaries_are_not() {
        let f = run(
            "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-PROXY-CANARY - [0:0]\n:KUBE-SEP-SXIVWICOYRO3J4NJ - [0:0]\n-A KUBE-SEP-SXIVWICOYRO3J4NJ -p tcp -j DNAT --to-destination 10.180.0.1:80\nCOMMIT\n",
            false,
        );
        assert_eq!(f.len(), 1);
        assert!(f[0].is_problem());
        assert_eq!(f[0].severity, Severity::Medium);
        assert!(f[0].title.contains("KUBE-SEP-SXIVWICOYRO3J4NJ"));
        assert!(!f[0].title.contains("CANARY"));
        assert_eq!(f[0].evidence[0].line, Some(7));
    }

    #[test]
    fn ipvs_leftovers_are_explained_as_such() {
        let f = run(
            "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]\n-A PREROUTING -j KUBE-SERVICES\n-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT\nCOMMIT\n",
            false,
        );
        assert!(f[0].is_problem());
        assert!(f[0].explanation.contains("IPVS"));
    }

    #[test]
    fn chains_unreferenced_by_design_are_not_stale() {
        // UFW's optional chains, Docker's empty DOCKER chain, portmap's SETMARK chain
        // without hostPorts, Weave's canary: the catalogue says why each is unreferenced.
        let f = run(
            "*filter\n:INPUT DROP [0:0]\n:ufw-logging-allow - [0:0]\n:ufw-skip-to-policy-output - [0:0]\n:ufw-user-limit - [0:0]\n:ufw-user-limit-accept - [0:0]\n:ufw-user-logging-input - [0:0]\n:DOCKER - [0:0]\n:WEAVE-CANARY - [0:0]\n-A ufw-user-limit -j REJECT\nCOMMIT\n*nat\n:PREROUTING ACCEPT [0:0]\n:CNI-HOSTPORT-SETMARK - [0:0]\n-A CNI-HOSTPORT-SETMARK -j MARK --set-xmark 0x2000/0x2000\nCOMMIT\n",
            false,
        );
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].status, Status::Ok, "{f:#?}");
        // Docker's DOCKER chain is by design only while empty.
        let f = run(
            "*nat\n:PREROUTING ACCEPT [0:0]\n:DOCKER - [0:0]\n-A DOCKER -i docker0 -j RETURN\nCOMMIT\n",
            false,
        );
        assert!(f[0].is_problem() && f[0].title.contains("docker"), "{f:#?}");
    }

    #[test]
    fn ipvs_firewall_chains_without_load_balancers_are_by_design() {
        let ipvs = "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-FIREWALL - [0:0]\n:KUBE-LOAD-BALANCER - [0:0]\n-A PREROUTING -j KUBE-SERVICES\n-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT\nCOMMIT\n";
        assert_eq!(run(ipvs, false)[0].status, Status::Ok);
        // Outside IPVS mode an unreferenced KUBE-LOAD-BALANCER is litter.
        let iptables = ipvs.replace(
            "-m set --match-set KUBE-CLUSTER-IP dst,dst ",
            "-d 10.0.0.1/32 ",
        );
        assert!(run(&iptables, false)[0].is_problem());
    }

    #[test]
    fn empty_portmap_dnat_chain_still_jumped_to_is_stale() {
        let f = run(
            "*nat\n:PREROUTING ACCEPT [0:0]\n:CNI-HOSTPORT-DNAT - [0:0]\n:CNI-DN-2d72aeb202429907277c5 - [0:0]\n:CNI-DN-04579c7bb67f4c3f6cca0 - [0:0]\n-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT\n-A CNI-HOSTPORT-DNAT -p tcp -m multiport --dports 8082 -j CNI-DN-2d72aeb202429907277c5\n-A CNI-HOSTPORT-DNAT -p tcp -m multiport --dports 8081 -j CNI-DN-04579c7bb67f4c3f6cca0\n-A CNI-DN-04579c7bb67f4c3f6cca0 -p tcp -m tcp --dport 8081 -j DNAT --to-destination 10.4.0.10:80\nCOMMIT\n",
            false,
        );
        assert_eq!(f.len(), 1, "{f:#?}");
        assert!(f[0].is_problem());
        assert_eq!(f[0].severity, Severity::Low);
        assert!(
            f[0].title.ends_with(
                "1 empty cni-plugins chain(s) still jumped to: CNI-DN-2d72aeb202429907277c5"
            ),
            "{}",
            f[0].title
        );
        assert!(
            f[0].evidence[1]
                .text
                .contains("-j CNI-DN-2d72aeb202429907277c5")
        );
    }

    #[test]
    fn flushed_table_is_left_to_table_flushed() {
        let f = run(
            "*filter\n:INPUT ACCEPT [0:0]\n:KUBE-FORWARD - [0:0]\n:KUBE-SERVICES - [0:0]\n:WEAVE-NPC - [0:0]\nCOMMIT\n",
            false,
        );
        assert_eq!(f[0].status, Status::Ok, "{f:#?}");
    }

    #[test]
    fn partial_input_is_not_judged() {
        let f = run("*nat\n:KUBE-SEP-SXIVWICOYRO3J4NJ - [0:0]\nCOMMIT\n", true);
        assert!(f.is_empty());
        let f = run(
            "*filter\n:INPUT ACCEPT [0:0]\n:A - [0:0]\n-A INPUT -j A\nCOMMIT\n",
            false,
        );
        assert_eq!(f[0].status, Status::Ok);
    }
}
