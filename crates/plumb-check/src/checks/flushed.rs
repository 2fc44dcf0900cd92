//! Finding: `table-flushed` — a table whose chains are all declared and all empty.
//!
//! `iptables -F` (or a firewall manager's reload) empties every chain of a table but
//! keeps the user chains: what is left is a table of declarations with no rule in any
//! chain and no reference to any chain. Every owner's rules are gone at once — kube-proxy's
//! hooks and service rules, the CNI's forward-accept rules, Docker's — until each owner
//! re-syncs (kube-proxy notices through its canary). One finding names the owners whose
//! chains were emptied; the other checks do not report the same table chain by chain
//! (`stale-chain`, missing hooks).
//!
//! A table with only built-in chains and no rules is a fresh table, not a flushed one.
//! Only judged on complete dumps.

use super::short_list;
use crate::facts::CheckInput;
use crate::facts::shapes::is_flushed;
use plumb_findings::{Finding, Severity};
use plumb_ruleset::owner;

/// Finding id: a table whose chains are all declared and all empty (`iptables -F`).
pub const ID: &str = "table-flushed";

/// Display name of an owner: a CNI's catalogue name, else the owner name.
fn owner_display(name: &str) -> String {
    match owner::entry(name).and_then(|e| e.cni.as_ref()) {
        Some(c) => c.name.clone(),
        None if name == "docker" => "Docker".into(),
        None => name.to_string(),
    }
}

/// Reports each flushed table with the owners whose chains it emptied; only on
/// complete dumps.
pub fn check(facts: &CheckInput) -> Vec<Finding> {
    if !facts.is_full() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for table in facts.ruleset.tables.iter().filter(|t| is_flushed(t)) {
        let mut owners: Vec<String> = Vec::new();
        let mut unknown = 0usize;
        for c in table.chains.iter().filter(|c| !c.is_builtin()) {
            match owner::chain_name_owner(&c.name) {
                Some(o) => {
                    let d = owner_display(o);
                    if !owners.contains(&d) {
                        owners.push(d);
                    }
                }
                None => unknown += 1,
            }
        }
        if unknown > 0 {
            owners.push(format!("{unknown} chain(s) of unknown owners"));
        }
        let user = table.chains.iter().filter(|c| !c.is_builtin()).count();
        let who = match owners.len() {
            0 => "every rule is gone".to_string(),
            1 => format!("rules of {} are gone", owners[0]),
            n => format!(
                "rules of {} and {} are gone",
                owners[..n - 1].join(", "),
                owners[n - 1]
            ),
        };
        let chains: Vec<&str> = table
            .chains
            .iter()
            .filter(|c| !c.is_builtin())
            .map(|c| &*c.name)
            .collect();
        out.push(
            Finding::problem(
                ID,
                Severity::High,
                format!(
                    "{} {} {} table flushed: {user} chains declared, all empty; {who}",
                    table.backend, table.family, table.name
                ),
            )
            .with_evidence(
                table
                    .chains
                    .iter()
                    .filter(|c| c.is_builtin())
                    .take(3)
                    .map(|c| facts.chain(table, c))
                    .chain(std::iter::once(facts.note(format!(
                        "{} table: no rule in any chain; user chains: {}",
                        table.name,
                        short_list(&chains, 6)
                    )))),
            )
            .explain("Every chain of this table is declared but empty and nothing jumps anywhere: the table was flushed (`iptables -F`, a firewall manager's reload or a security agent restoring an empty snapshot). The owners' rules — service translation and forwarding accepts, the CNI's policy and forward rules, Docker's forwarding — are all missing until each owner re-syncs; kube-proxy notices through its canary chain and rebuilds its rules, other owners only on restart or their own resync.")
            .fix("Find what flushed the table (shell history, a firewall reload, a security agent's log; `plumb watch` names the writer of the next flush) and stop it.")
            .fix("Restart the owners that do not resync on their own (Docker, the CNI's agent pod) once the cause is gone.")
            .do_not("flush the table again or restore an old iptables-save snapshot: it brings back stale service rules."),
        );
    }
    let judged = facts
        .ruleset
        .tables
        .iter()
        .any(|t| t.backend != plumb_ruleset::Backend::Nftables || !t.chains.is_empty());
    if out.is_empty() && judged {
        out.push(Finding::ok(ID, "no table is flushed"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use plumb_findings::Status;

    fn run(text: &str) -> Vec<Finding> {
        crate::checks::run_on_dump(check, text)
    }

    #[test]
    fn all_empty_table_with_user_chains_is_one_finding() {
        let f = run(
            "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:DOCKER - [0:0]\n:KUBE-FORWARD - [0:0]\n:WEAVE-NPC - [0:0]\n:my-chain - [0:0]\nCOMMIT\n",
        );
        assert_eq!(f.len(), 1, "{f:#?}");
        assert!(f[0].is_problem());
        assert!(
            f[0].title
                .ends_with("4 chains declared, all empty; rules of Docker, kube-proxy, Weave Net and 1 chain(s) of unknown owners are gone"),
            "{}",
            f[0].title
        );
    }

    #[test]
    fn a_mangle_table_of_canaries_is_not_flushed() {
        let f = run(
            "*mangle\n:PREROUTING ACCEPT [0:0]\n:KUBE-IPTABLES-HINT - [0:0]\n:KUBE-KUBELET-CANARY - [0:0]\n:KUBE-PROXY-CANARY - [0:0]\nCOMMIT\n",
        );
        assert_eq!(f[0].status, Status::Ok, "{f:#?}");
    }

    #[test]
    fn fresh_or_used_tables_are_not_flushed() {
        let fresh = run(
            "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n",
        );
        assert_eq!(fresh[0].status, Status::Ok);
        let used = run(
            "*filter\n:INPUT ACCEPT [0:0]\n:A - [0:0]\n:B - [0:0]\n:C - [0:0]\n-A INPUT -j A\nCOMMIT\n",
        );
        assert_eq!(used[0].status, Status::Ok);
    }
}
