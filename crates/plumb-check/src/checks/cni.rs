//! Finding: `cni-chains-missing` — the CNI is evidently present but some of its chains are
//! not.
//!
//! - Flannel writes nat `FLANNEL-POSTRTG` ("flanneld masq") and filter `FLANNEL-FWD`
//!   ("flanneld forward"); one without the other means its rules were partly removed.
//! - Calico (and Canal) write `cali-INPUT`/`cali-FORWARD`/`cali-OUTPUT` in filter and
//!   `cali-PREROUTING`/`cali-POSTROUTING`/`cali-OUTPUT` in nat, hooked from the built-in
//!   chains.
//! - Cilium writes `CILIUM_INPUT`/`CILIUM_FORWARD`/`CILIUM_OUTPUT` (filter) and
//!   `CILIUM_PRE_nat`/`CILIUM_POST_nat`/`CILIUM_OUTPUT_nat` (nat), hooked by "cilium-feeder"
//!   rules.
//! - kube-proxy programs services but no CNI chain exists at all: either the CNI does not
//!   use iptables, or its rules are gone (install-cni never finished) — `unknown`.
//!
//! Only judged on complete dumps.

use super::{owner_name, short_list};
use crate::facts::{Facts, group_name};
use plumb_findings::{Finding, Severity};
use plumb_kubeproxy::chain_name::parse_chain_name;
use plumb_ruleset::{Backend, Family, Table};

pub const ID: &str = "cni-chains-missing";

/// (CNI, table, chain, hooked from built-in chain).
const EXPECTED: &[(&str, &str, &str, Option<&str>)] = &[
    ("flannel", "nat", "FLANNEL-POSTRTG", Some("POSTROUTING")),
    ("flannel", "filter", "FLANNEL-FWD", Some("FORWARD")),
    ("calico", "filter", "cali-INPUT", Some("INPUT")),
    ("calico", "filter", "cali-FORWARD", Some("FORWARD")),
    ("calico", "filter", "cali-OUTPUT", Some("OUTPUT")),
    ("calico", "nat", "cali-PREROUTING", Some("PREROUTING")),
    ("calico", "nat", "cali-POSTROUTING", Some("POSTROUTING")),
    ("calico", "nat", "cali-OUTPUT", Some("OUTPUT")),
    ("cilium", "filter", "CILIUM_INPUT", Some("INPUT")),
    ("cilium", "filter", "CILIUM_FORWARD", Some("FORWARD")),
    ("cilium", "filter", "CILIUM_OUTPUT", Some("OUTPUT")),
    ("cilium", "nat", "CILIUM_PRE_nat", Some("PREROUTING")),
    ("cilium", "nat", "CILIUM_POST_nat", Some("POSTROUTING")),
    ("cilium", "nat", "CILIUM_OUTPUT_nat", Some("OUTPUT")),
];

fn owns(tables: &[&Table], cni: &str) -> bool {
    tables
        .iter()
        .any(|t| t.chains.iter().any(|c| owner_name(&c.name) == Some(cni)))
}

pub fn check(facts: &Facts) -> Vec<Finding> {
    if !facts.is_full() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut judged = false;
    let native_cni = facts.ruleset.tables.iter().any(|t| {
        t.backend == Backend::Nftables
            && plumb_ruleset::owner::table_owner(t)
                .is_some_and(|a| matches!(a.owner.0.as_str(), "flannel" | "calico" | "cilium"))
    });
    for group in facts.xt_groups() {
        let tables: Vec<&Table> = ["nat", "filter"]
            .iter()
            .filter_map(|n| facts.xt_table(group, n))
            .collect();
        let present: Vec<&str> = ["flannel", "calico", "cilium"]
            .into_iter()
            .filter(|c| owns(&tables, c))
            .collect();
        for cni in &present {
            judged = true;
            missing_for(facts, group, cni, &mut out);
        }
        if present.is_empty() && !native_cni && group.1 == Family::Ip {
            let services = tables.iter().any(|t| {
                &*t.name == "nat" && t.chains.iter().any(|c| parse_chain_name(&c.name).is_some())
            });
            if services {
                judged = true;
                let nat = tables
                    .iter()
                    .find(|t| &*t.name == "nat")
                    .expect("found above");
                out.push(
                    Finding::unknown(
                        ID,
                        Severity::Medium,
                        format!(
                            "{}: kube-proxy programs services but no CNI chains (FLANNEL-*, cali-*, CILIUM_*) exist",
                            group_name(group)
                        ),
                    )
                    .with_evidence([facts.note(format!("{} chains in nat, none owned by a CNI", nat.chains.len()))])
                    .explain("Flannel, Calico/Canal and Cilium all install iptables chains on every node. Their absence means either a CNI that does not use iptables here (Cilium or Calico in eBPF mode, a cloud CNI), or that the CNI never finished initialising or its rules were removed — a node whose security agent reverted kube-proxy's rules had no CNI config because install-cni could not reach the API server through the `kubernetes` ClusterIP.")
                    .fix("Check which CNI the cluster uses (`/etc/cni/net.d`, the CNI DaemonSet's pod on this node) and its logs."),
                );
            }
        }
    }
    if judged && !out.iter().any(|f| f.id == ID) {
        out.push(Finding::ok(ID, "the CNI's chains and hooks are in place"));
    }
    out
}

fn missing_for(facts: &Facts, group: (Backend, Family), cni: &str, out: &mut Vec<Finding>) {
    let mut missing = Vec::new();
    let mut unhooked = Vec::new();
    let mut evidence = Vec::new();
    for (c, table, chain, hook) in EXPECTED.iter().filter(|e| e.0 == cni) {
        let _ = c;
        let Some(t) = facts.xt_table(group, table) else {
            continue;
        };
        match t.chain(chain) {
            None => {
                missing.push(format!("{table} {chain}"));
                evidence.push(facts.note(format!(
                    "{table} table of {} declares no {chain}",
                    group_name(group)
                )));
            }
            Some(_) => {
                if let Some(h) = hook
                    && let Some(b) = t.chain(h)
                    && !b
                        .rules
                        .iter()
                        .any(|r| r.chain_references().iter().any(|x| x.chain == *chain))
                {
                    unhooked.push(format!("{table} {h} -> {chain}"));
                    evidence.push(facts.chain(t, b));
                }
            }
        }
    }
    if missing.is_empty() && unhooked.is_empty() {
        return;
    }
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
            format!("{}: {cni} is present but {}", group_name(group), parts.join("; ")),
        )
        .with_evidence(evidence)
        .explain(format!("{cni} installs these chains together and hooks them into the built-in chains; finding some without the others means its rules were partly removed or replaced (a firewall reload, a security agent reverting \"foreign\" rules) or the agent is not running on this node. Pod traffic then misses the CNI's masquerade or forward-accept rules."))
        .fix(format!("Check that the {cni} pod on this node is running; it rewrites its chains on its next resync. If they vanish again, find what removes them (`plumb watch`)."))
        .do_not("hand-edit CNI files or flush iptables."),
    );
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
        let half = FLANNEL.replace(":FLANNEL-FWD - [0:0]\n", "").replace(
            "-A FORWARD -m comment --comment \"flanneld forward\" -j FLANNEL-FWD\n",
            "",
        );
        let f = run(&half);
        assert!(f[0].is_problem(), "{f:#?}");
        assert!(f[0].title.contains("filter FLANNEL-FWD"));
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
    fn kube_proxy_without_any_cni_is_unknown() {
        let f = run(
            "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]\n-A PREROUTING -j KUBE-SERVICES\n-A KUBE-SERVICES -j KUBE-SVC-NPX46M4PTMTKRN6Y\nCOMMIT\n",
        );
        assert_eq!(f[0].status, Status::Unknown);
    }
}
