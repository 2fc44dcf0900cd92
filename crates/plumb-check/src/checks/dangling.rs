//! Finding: `dangling-reference` — a rule jumps or goes to a chain that does not exist.
//!
//! The kernel refuses a jump to a missing chain, so a complete dump never holds one: the
//! text was edited or assembled, or it is a restore payload. Loaded with
//! `iptables-restore --noflush`, such a rule fails exactly the way kube-proxy's partial
//! sync fails when something deleted a `KUBE-SVC-*` chain behind its back (a security agent reverting its rules):
//! `iptables-restore: line N failed` / `Chain 'KUBE-SVC-…' does not exist`, after which
//! kube-proxy counts `kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total`
//! and forces a full resync.
//!
//! With a partial input (`--partial`, or a payload recognised as one) chains that are not
//! declared may live in the kernel, so only references to chains the payload itself
//! deletes (`-X`) are problems. With a truncated input the answer is `unknown`.

use super::short_list;
use crate::facts::CheckInput;
use plumb_findings::{Evidence, Finding, Severity};
use plumb_ruleset::{Backend, Table};

/// Finding id: a jump, goto or verdict-map entry naming a chain that does not exist.
pub const ID: &str = "dangling-reference";

/// Verdict-map elements of an nft table that reference a chain, as evidence.
fn set_references<'a>(facts: &CheckInput, table: &'a Table) -> Vec<(&'a str, Evidence)> {
    let mut out = Vec::new();
    if table.backend == Backend::Nftables {
        for s in &table.sets {
            for e in &s.elements {
                if let Some(x) = e.verdict.as_ref().and_then(|v| v.chain_ref()) {
                    out.push((
                        x.chain,
                        Evidence {
                            source: facts.source(table),
                            line: Some(s.location.line).filter(|&l| l > 0),
                            text: format!(
                                "map {}: {} : {}",
                                s.name,
                                e.key_text,
                                e.value.as_deref().unwrap_or("")
                            ),
                        },
                    ));
                }
            }
        }
    }
    out
}

/// Reports every reference to an undeclared chain (on partial input, only chains the
/// payload itself deletes); `unknown` when the input was cut short.
pub fn check(facts: &CheckInput) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut skipped_partial = 0usize;
    for (table, refs) in facts.ruleset.tables.iter().zip(&facts.refs) {
        let declared = &refs.declared;
        let deleted: Vec<&str> = table.deleted_chains.iter().map(|c| &**c).collect();
        let mut missing: Vec<&str> = Vec::new();
        let mut deleted_refs: Vec<&str> = Vec::new();
        let mut evidence = Vec::new();
        let cheap = refs
            .rules
            .iter()
            .filter(|(t, _)| deleted.contains(t) || !declared.contains(t))
            .map(|(t, r)| (*t, facts.rule(table, r)));
        let all: Vec<(&str, Evidence)> = cheap
            .chain(
                set_references(facts, table)
                    .into_iter()
                    .filter(|(t, _)| deleted.contains(t) || !declared.contains(t)),
            )
            .collect();
        for (target, ev) in all {
            if deleted.contains(&target) {
                if !deleted_refs.contains(&target) {
                    deleted_refs.push(target);
                }
                evidence.push(ev);
            } else if !declared.contains(target) {
                if facts.is_partial() {
                    skipped_partial += 1;
                    continue;
                }
                if !missing.contains(&target) {
                    missing.push(target);
                }
                evidence.push(ev);
            }
        }
        if missing.is_empty() && deleted_refs.is_empty() {
            continue;
        }
        let kube = missing.iter().chain(&deleted_refs).any(|c| {
            *c == "KUBE-SERVICES" || c.starts_with("KUBE-SVC-") || c.starts_with("KUBE-SEP-")
        });
        let severity = if kube {
            Severity::Critical
        } else {
            Severity::High
        };
        let mut names: Vec<&str> = deleted_refs.clone();
        names.extend(&missing);
        let title = format!(
            "{} rule(s) in {} {} reference {} chain(s) that do not exist: {}",
            evidence.len(),
            table.family,
            table.name,
            names.len(),
            short_list(&names, 4)
        );
        // An nft table of one chain whose jumps leave it is the output of `nft list
        // chain` (a complete `nft list ruleset` never holds a jump to a missing chain):
        // the targets were not listed, not deleted.
        let one_chain_listing = deleted_refs.is_empty()
            && table.backend == Backend::Nftables
            && table.chains.len() == 1;
        let f = if one_chain_listing {
            Finding::unknown(ID, Severity::Info, title).explain(
                "The input holds a single chain of this table, as `nft list chain` prints it: the chains it jumps to are not listed, which says nothing about whether they exist. Collect `nft list ruleset` to decide.",
            )
        } else if !deleted_refs.is_empty() || facts.is_full() {
            let why = if !deleted_refs.is_empty() {
                format!(
                    "This restore payload deletes {} (-X) while rules still jump to it. iptables-restore refuses the whole transaction (`Chain '{}' does not exist` / `Couldn't load target`), so none of the payload is applied.",
                    short_list(&deleted_refs, 3),
                    deleted_refs[0]
                )
            } else {
                format!(
                    "The kernel never holds a jump to a missing chain, so a complete dump with one was edited or assembled from pieces. Loaded with iptables-restore --noflush it fails with `Chain '{}' does not exist` — the same failure kube-proxy logs when something deleted its chains between syncs (a security agent reverting kube-proxy's rules). kube-proxy then counts kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total and forces a full resync.",
                    missing[0]
                )
            };
            Finding::problem(ID, severity, title)
                .explain(why)
                .fix("If this file is a kube-proxy restore payload rather than a dump, re-run with --partial.")
                .fix("If kube-proxy's chains are the ones missing, find what deletes them: the security agent's tamper log (`grep -i tamper`), `plumb watch`, audit NETFILTER_CFG records.")
                .do_not("Do not flush iptables or delete chains by hand: kube-proxy and the CNI rebuild their rules on their next full sync, and flushing removes the CNI's rules too.")
        } else {
            Finding::unknown(ID, Severity::Medium, title).explain(
                "The input is truncated: the referenced chains may simply be after the cut. Collect a complete dump to decide.",
            )
        };
        out.push(f.with_evidence(evidence));
    }
    if out.is_empty() {
        let mut title = "every jump, goto and verdict-map target exists".to_string();
        if skipped_partial > 0 {
            title = format!(
                "no dangling references ({skipped_partial} reference(s) to chains declared elsewhere not judged: partial input)"
            );
        }
        out.push(Finding::ok(ID, title));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::Origin;
    use plumb_ruleset::format::{ParseOptions, parse_bytes};

    #[test]
    fn a_listed_nft_chain_jumping_elsewhere_is_a_partial_listing() {
        // `nft -a list chain ip nat PREROUTING` on an OVN-Kubernetes node: the kernel
        // refuses a jump to a missing chain, so the listing shows only some chains.
        let text = "table ip nat {\n\tchain PREROUTING { # handle 1\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t\tcounter packets 108 bytes 18074 jump OVN-KUBE-ETP # handle 116\n\t}\n}\n";
        let rs = parse_bytes(text.as_bytes(), &ParseOptions::default())
            .unwrap()
            .ruleset;
        assert_eq!(rs.completeness, plumb_ruleset::Completeness::Partial);
        let f = check(&CheckInput::new(&rs, Origin::File("f".into()), false));
        assert!(f.iter().all(|f| !f.is_problem()), "{f:#?}");
    }

    fn run(text: &str, partial: bool) -> Vec<Finding> {
        let text = crate::checks::full_dump(text);
        let rs = parse_bytes(text.as_bytes(), &ParseOptions::default())
            .unwrap()
            .ruleset;
        check(&CheckInput::new(&rs, Origin::File("dump".into()), partial))
    }

    const DUMP: &str = "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n-A PREROUTING -j KUBE-SERVICES\n-A KUBE-SERVICES -d 10.43.0.1/32 -p tcp -m tcp --dport 443 -j KUBE-SVC-NPX46M4PTMTKRN6Y\n-A KUBE-SERVICES -j DNAT --to-destination 1.2.3.4\nCOMMIT\n";

    #[test]
    fn a_dump_jumping_to_a_missing_chain_was_edited_and_is_not_judged() {
        // iptables-restore refuses such a dump (the kernel never held it): the input is
        // damaged, and the dangling jump is named without a claim about the node.
        let f = run(DUMP, false);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].status, plumb_findings::Status::Unknown, "{f:#?}");
        assert!(f[0].title.contains("KUBE-SVC-NPX46M4PTMTKRN6Y"));
        assert_eq!(f[0].evidence[0].line, Some(8));
    }

    #[test]
    fn partial_input_is_not_judged_as_full() {
        let f = run(DUMP, true);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].status, plumb_findings::Status::Ok);
        assert!(f[0].title.contains("declared elsewhere"));
    }

    #[test]
    fn reference_to_chain_deleted_by_the_payload_is_a_problem_even_when_partial() {
        let payload = "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-X27LE4BHSL4DOUIK - [0:0]\n-A KUBE-SERVICES -j KUBE-SVC-X27LE4BHSL4DOUIK\n-X KUBE-SVC-X27LE4BHSL4DOUIK\nCOMMIT\n";
        let f = run(payload, true);
        assert!(f[0].is_problem(), "{f:?}");
        assert!(f[0].explanation.contains("-X"));
    }

    #[test]
    fn consistent_dump_is_ok() {
        let f = run(
            "*filter\n:INPUT ACCEPT [0:0]\n:X - [0:0]\n-A INPUT -j X\n-A INPUT -j LOG --log-prefix a\nCOMMIT\n",
            false,
        );
        assert_eq!(f[0].status, plumb_findings::Status::Ok);
    }
}
