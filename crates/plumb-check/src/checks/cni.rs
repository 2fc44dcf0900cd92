//! Findings: `cni-chains-missing` — the CNI is evidently present but some of its chains
//! are not, or nothing shows any CNI; `multiple-cnis` — two pod networks active at once.
//!
//! Which CNIs are here comes from [`crate::facts::inventory`] (the owner catalogue: chain names,
//! comments, interfaces, ipsets, rule shapes, each match quoted).
//!
//! - A CNI whose catalogue entry lists chains it writes together (`expects`: Flannel's
//!   `FLANNEL-POSTRTG`/`FLANNEL-FWD`, Calico's `cali-*` hooks, Cilium's `CILIUM_*`) and of
//!   which some are present: the others missing, or not hooked from their built-in
//!   chain, mean its rules were partly removed. Old Flannel (a single `FLANNEL` chain, or
//!   plain POSTROUTING masquerade) writes neither, so nothing is expected of it.
//! - kube-proxy programs services but there is no CNI evidence of any kind (no chain,
//!   comment, interface, ipset or rule shape of any catalogued CNI, no CNI nft table):
//!   either the CNI does not use netfilter here or its rules are gone — `unknown`.
//! - `multiple-cnis`: two CNIs that each claim the pod network have active hooks (jumps
//!   from built-in chains, rules on their interfaces) and are not documented to run
//!   together. Roles come from the catalogue: k3s's Flannel + kube-router policy +
//!   portmap, Canal (Calico policy on Flannel), Cilium chained on the AWS VPC CNI and
//!   Cilium beside kube-proxy are normal combinations.
//!
//! Only judged on complete dumps (a filtered or partial capture proves no absence).

use super::short_list;
use crate::facts::inventory::CniFound;
use crate::facts::{CheckInput, group_name};
use plumb_findings::{Finding, Severity};
use plumb_kubeproxy::chain_name::parse_chain_name;
use plumb_ruleset::{Backend, Family, Table, owner};

/// Finding id: a CNI with part of its expected chains or hooks missing, or no CNI
/// evidence at all beside kube-proxy's services.
pub const ID: &str = "cni-chains-missing";
/// Finding id: two CNIs that each claim the pod network are active, in a combination
/// not documented to work.
pub const ID_MULTIPLE: &str = "multiple-cnis";

/// Judges the CNIs the [`crate::inventory`] found: missing chains or hooks of a present
/// CNI, no CNI at all, or two competing pod networks; `unknown` on partial input.
pub fn check(facts: &CheckInput) -> Vec<Finding> {
    if !facts.is_full() {
        return Vec::new();
    }
    let inv = &facts.inventory;
    let mut out = Vec::new();
    let mut judged = false;
    for group in facts.xt_groups() {
        let tables: Vec<&Table> = ["nat", "filter"]
            .iter()
            .filter_map(|n| facts.xt_table(group, n))
            .collect();
        for cni in &inv.cnis {
            if owner::entry(cni.owner).is_some_and(|e| !e.expects.is_empty()) {
                judged |= missing_for(facts, group, cni, &mut out);
            }
        }
        if inv.cnis.is_empty() && group.1 == Family::Ip {
            let nat = tables.iter().find(|t| &*t.name == "nat");
            let services =
                nat.is_some_and(|t| t.chains.iter().any(|c| parse_chain_name(&c.name).is_some()));
            if let Some(nat) = nat
                && services
            {
                judged = true;
                out.push(
                    Finding::unknown(
                        ID,
                        Severity::Medium,
                        format!(
                            "{}: kube-proxy programs services but the ruleset shows no CNI at all",
                            group_name(group)
                        ),
                    )
                    .with_evidence([facts.note(format!(
                        "{} chains in nat; no chain, comment, interface, ipset or rule of a known CNI in any table",
                        nat.chains.len()
                    ))])
                    .explain("Every CNI plumb knows (Flannel old and new, Calico, Cilium, Weave Net, the AWS VPC CNI, Antrea, OVN-Kubernetes, openshift-sdn, kube-router, kubenet, the CNI bridge and portmap plugins) leaves some trace in netfilter: chains, comments, rules on its interfaces. None is here. Either the CNI does not use netfilter on this node (Cilium or Calico in eBPF mode, a cloud CNI plumb does not know), or it never finished initialising or its rules were removed — a node whose security agent reverted kube-proxy's rules had no CNI config because install-cni could not reach the API server through the `kubernetes` ClusterIP.")
                    .fix("Check which CNI the cluster uses (`/etc/cni/net.d`, the CNI DaemonSet's pod on this node) and its logs."),
                );
            }
        }
    }
    if !inv.cnis.is_empty() {
        judged = true;
    }
    if judged && !out.iter().any(|f| f.id == ID) {
        out.push(Finding::ok(
            ID,
            format!("CNI evidence: {}", inv.describe_cnis()),
        ));
    }
    multiple(facts, &mut out);
    out
}

fn multiple(facts: &CheckInput, out: &mut Vec<Finding>) {
    let inv = &facts.inventory;
    if inv.cnis.is_empty() {
        return;
    }
    let pairs = inv.conflicting_networks();
    if pairs.is_empty() {
        out.push(Finding::ok(
            ID_MULTIPLE,
            "one pod network (other CNIs here are policy engines or plugins it chains)",
        ));
        return;
    }
    let mut names: Vec<&str> = Vec::new();
    let mut evidence = Vec::new();
    for (a, b) in &pairs {
        for c in [a, b] {
            if !names.contains(&c.name) {
                names.push(c.name);
                evidence.extend(c.hooks.iter().take(2).cloned());
            }
        }
    }
    out.push(
        Finding::problem(
            ID_MULTIPLE,
            Severity::Medium,
            format!(
                "{} CNIs' hooks are active at once: {}",
                names.len(),
                short_list(&names, 4)
            ),
        )
        .with_evidence(evidence)
        .explain(format!(
            "Each of {} installs its own pod network (addresses, routes, forward and masquerade rules), and built-in chains jump to the rules of each. They are not documented to run together, so a pod's traffic is handled by whichever rules come first: one CNI's policy or DROP may stop the other's pods, and masquerading may differ by node. This is usually a CNI that was replaced without removing the old one (its DaemonSet, its files in /etc/cni/net.d, its rules).",
            names.join(" and ")
        ))
        .fix("Decide which CNI the cluster uses; delete the other's DaemonSet and its config in /etc/cni/net.d on every node, then reboot the nodes (or remove its interfaces and rules with its own cleanup tool).")
        .do_not("flush iptables to remove the old CNI's rules: kube-proxy's and the remaining CNI's rules go too."),
    );
}

/// Reports the expected chains of `cni` missing or unhooked in `group`. Returns whether
/// it judged (some expected chain is present).
fn missing_for(
    facts: &CheckInput,
    group: (Backend, Family),
    cni: &CniFound,
    out: &mut Vec<Finding>,
) -> bool {
    let Some(entry) = owner::entry(cni.owner) else {
        return false;
    };
    let present = entry.expects.iter().any(|e| {
        facts
            .xt_table(group, &e.table)
            .is_some_and(|t| t.chain(&e.chain).is_some())
    });
    if !present {
        return false;
    }
    let mut missing = Vec::new();
    let mut unhooked = Vec::new();
    let mut evidence = Vec::new();
    for e in &entry.expects {
        let Some(t) = facts.xt_table(group, &e.table) else {
            continue;
        };
        if crate::facts::shapes::is_flushed(t) {
            continue; // table-flushed
        }
        match t.chain(&e.chain) {
            None if e.optional.is_some() => {}
            None => {
                missing.push(format!("{} {}", e.table, e.chain));
                evidence.push(facts.note(format!(
                    "{} table of {} declares no {}",
                    e.table,
                    group_name(group),
                    e.chain
                )));
            }
            Some(_) => {
                if let Some(h) = e.hook.as_deref()
                    && let Some(b) = t.chain(h)
                    && !b
                        .rules
                        .iter()
                        .any(|r| r.chain_references().iter().any(|x| x.chain == e.chain))
                {
                    unhooked.push(format!("{} {h} -> {}", e.table, e.chain));
                    evidence.push(facts.chain(t, b));
                }
            }
        }
    }
    if missing.is_empty() && unhooked.is_empty() {
        return true;
    }
    let name = cni.name;
    let mut parts = Vec::new();
    if !missing.is_empty() {
        parts.push(format!("missing {}", short_list(&missing, 4)));
    }
    if !unhooked.is_empty() {
        parts.push(format!("not hooked: {}", short_list(&unhooked, 4)));
    }
    out.push(
        Finding::problem(
            ID,
            Severity::High,
            format!("{}: {name} is present but {}", group_name(group), parts.join("; ")),
        )
        .with_evidence(evidence)
        .explain(format!("{name} installs these chains together and hooks them into the built-in chains; finding some without the others means its rules were partly removed or replaced (a firewall reload, a security agent reverting \"foreign\" rules) or the agent is not running on this node. Pod traffic then misses the CNI's masquerade or forward-accept rules."))
        .fix(format!("Check that the {name} pod on this node is running; it rewrites its chains on its next resync. If they vanish again, find what removes them (`plumb watch`)."))
        .do_not("hand-edit CNI files or flush iptables."),
    );
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use plumb_findings::Status;

    fn run(text: &str) -> Vec<Finding> {
        crate::checks::run_on_dump(check, text)
    }

    const FLANNEL: &str = "*nat\n:PREROUTING ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n:FLANNEL-POSTRTG - [0:0]\n:KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]\n-A POSTROUTING -m comment --comment \"flanneld masq\" -j FLANNEL-POSTRTG\nCOMMIT\n*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:FLANNEL-FWD - [0:0]\n-A FORWARD -m comment --comment \"flanneld forward\" -j FLANNEL-FWD\nCOMMIT\n";

    #[test]
    fn flannel_complete_is_ok_and_half_removed_is_not() {
        assert_eq!(run(FLANNEL)[0].status, Status::Ok);
        let half = FLANNEL.replace(":FLANNEL-POSTRTG - [0:0]\n", "").replace(
            "-A POSTROUTING -m comment --comment \"flanneld masq\" -j FLANNEL-POSTRTG\n",
            "",
        );
        let f = run(&half);
        assert!(f[0].is_problem(), "{f:#?}");
        assert!(
            f[0].title.contains("missing nat FLANNEL-POSTRTG"),
            "{}",
            f[0].title
        );
        // Without FLANNEL-FWD altogether: flannel --iptables-forward-rules=false.
        let no_forward_rules = FLANNEL.replace(":FLANNEL-FWD - [0:0]\n", "").replace(
            "-A FORWARD -m comment --comment \"flanneld forward\" -j FLANNEL-FWD\n",
            "",
        );
        assert_eq!(run(&no_forward_rules)[0].status, Status::Ok);
        let unhooked = FLANNEL.replace(
            "-A FORWARD -m comment --comment \"flanneld forward\" -j FLANNEL-FWD\n",
            "",
        );
        let f = run(&unhooked);
        assert!(
            f[0].title
                .contains("not hooked: filter FORWARD -> FLANNEL-FWD"),
            "{}",
            f[0].title
        );
    }

    #[test]
    fn old_flannel_and_weave_are_cnis_and_not_partly_removed_flannel() {
        // Old Flannel: a single FLANNEL chain; nothing of the new chains is expected.
        let f = run(
            "*nat\n:POSTROUTING ACCEPT [0:0]\n:FLANNEL - [0:0]\n:KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]\n-A POSTROUTING -s 10.2.0.0/16 -j FLANNEL\n-A FLANNEL -d 10.2.0.0/16 -j ACCEPT\nCOMMIT\n",
        );
        let c = f.iter().find(|x| x.id == ID).unwrap();
        assert_eq!(c.status, Status::Ok, "{f:#?}");
        assert!(c.title.contains("Flannel"), "{}", c.title);
        let f = run(
            "*filter\n:FORWARD ACCEPT [0:0]\n:WEAVE-NPC - [0:0]\n-A FORWARD -o weave -j WEAVE-NPC\nCOMMIT\n*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]\nCOMMIT\n",
        );
        assert!(f.iter().all(|x| x.status == Status::Ok), "{f:#?}");
    }

    #[test]
    fn two_pod_networks_hooked_are_multiple_cnis() {
        let f = run(
            "*filter\n:FORWARD ACCEPT [0:0]\n:FLANNEL-FWD - [0:0]\n:WEAVE-NPC - [0:0]\n-A FORWARD -j WEAVE-NPC\n-A FORWARD -j FLANNEL-FWD\nCOMMIT\n",
        );
        let m = f.iter().find(|x| x.id == ID_MULTIPLE).unwrap();
        assert!(m.is_problem(), "{f:#?}");
        assert_eq!(
            m.title,
            "2 CNIs' hooks are active at once: Flannel, Weave Net"
        );
        assert_eq!(m.evidence.len(), 2);
        // Calico beside Flannel is Canal.
        let f = run(
            "*filter\n:FORWARD ACCEPT [0:0]\n:FLANNEL-FWD - [0:0]\n:cali-FORWARD - [0:0]\n-A FORWARD -j cali-FORWARD\n-A FORWARD -j FLANNEL-FWD\nCOMMIT\n",
        );
        let m = f.iter().find(|x| x.id == ID_MULTIPLE).unwrap();
        assert_eq!(m.status, Status::Ok, "{f:#?}");
    }

    #[test]
    fn kube_proxy_without_any_cni_is_unknown() {
        let f = run(
            "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]\n-A PREROUTING -j KUBE-SERVICES\n-A KUBE-SERVICES -j KUBE-SVC-NPX46M4PTMTKRN6Y\nCOMMIT\n",
        );
        assert_eq!(f[0].status, Status::Unknown);
    }
}
