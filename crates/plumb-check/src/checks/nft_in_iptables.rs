//! Finding: `nft-rule-in-iptables-table` — a native nft rule inside a table that
//! iptables-nft manages.
//!
//! nft prints `# Warning: table ip nat is managed by iptables-nft, do not touch!` for a
//! reason: kube-proxy, the CNIs and every other iptables user rewrite these chains with
//! `iptables-restore`, which knows nothing of a rule it did not write. A rule someone added
//! with `nft` (the MicroShift documentation's `tcp dport 30700 ip daddr ... drop` in
//! `ip nat PREROUTING`) works today, is shown by iptables-save as a rule it cannot
//! translate (or not at all), and is lost when the chain's owner restores it.
//!
//! Which rules: those the nft-view translation kept as nft rules because iptables-nft did
//! not write them (no counter: iptables-nft gives every rule one; see
//! `plumb_ruleset::nft::iptables_nft`). Severity MEDIUM: the node is not broken by the
//! rule, but a firewall decision that lives where its owner does not manage it changes
//! packet fate today and vanishes without a trace on the next restore — a "do not touch"
//! warning, not an outage.

use crate::facts::CheckInput;
use plumb_findings::{Finding, Severity};
use plumb_ruleset::nft::iptables_nft::foreign_rules;

/// Finding id: a native nft rule inside a table iptables-nft manages.
pub const ID: &str = "nft-rule-in-iptables-table";

/// Reports rules of an nft view that iptables-nft did not write, in the tables it
/// manages (they are lost on the owner's next restore).
pub fn check(facts: &CheckInput) -> Vec<Finding> {
    let rules: Vec<_> = foreign_rules(facts.ruleset).collect();
    if rules.is_empty() {
        return if facts.ruleset.tables.iter().any(|t| t.nft_view) {
            vec![Finding::ok(
                ID,
                "every rule of the iptables-nft tables was written by iptables-nft",
            )]
        } else {
            Vec::new()
        };
    }
    let mut chains: Vec<String> = rules
        .iter()
        .map(|(t, c, _)| format!("{} {} {}", t.family, t.name, c.name))
        .collect();
    chains.dedup();
    let evidence: Vec<_> = rules.iter().map(|(t, _, r)| facts.rule(t, r)).collect();
    vec![
        Finding::problem(
            ID,
            Severity::Medium,
            format!(
                "{} native nft rule(s) inside iptables-nft chain(s) {}",
                rules.len(),
                super::short_list(&chains, 3)
            ),
        )
        .with_evidence(evidence)
        .explain("These chains belong to tables iptables-nft manages (`nft list ruleset` warns: \"do not touch\"), but the rules were written with nft or another netlink tool, not by iptables. They act on packets now; iptables-save cannot show them as iptables rules, and the chain's owner (kube-proxy, the CNI, the distribution's firewall) drops them the next time it restores the chain.")
        .fix("Move the rule into a table of its own (`table inet filter-local { ... }` with a base chain at a priority before or after the iptables-nft one) or express it with the owner's tool (iptables, a NetworkPolicy, a firewalld rule).")
        .do_not("edit or flush the iptables-nft chain itself with nft: its owner rewrites it and may fail on rules it does not understand."),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::Origin;
    use plumb_findings::Status;
    use plumb_ruleset::format::{ParseOptions, parse_bytes};

    fn run(text: &str) -> Vec<Finding> {
        let rs = parse_bytes(text.as_bytes(), &ParseOptions::default())
            .unwrap()
            .ruleset;
        check(&CheckInput::new(&rs, Origin::File("x.nft".into()), false))
    }

    #[test]
    fn a_hand_written_drop_in_ip_nat_prerouting_is_reported_with_its_line() {
        let f = run(
            "table ip nat {\n\tchain PREROUTING {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t\ttcp dport 30700 ip daddr 192.168.150.33 drop # handle 134\n\t\tcounter packets 1 bytes 2 jump KUBE-SERVICES\n\t}\n\tchain KUBE-SERVICES {\n\t}\n}\n",
        );
        assert!(f[0].is_problem(), "{f:?}");
        assert_eq!(f[0].severity, Severity::Medium);
        assert_eq!(f[0].evidence.len(), 1);
        assert_eq!(f[0].evidence[0].line, Some(4));
        assert!(f[0].evidence[0].text.contains("30700"));
    }

    #[test]
    fn iptables_nft_rules_alone_are_ok_and_native_tables_are_not_judged() {
        let f = run(
            "table ip nat {\n\tchain PREROUTING {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t\tcounter packets 1 bytes 2 jump KUBE-SERVICES\n\t}\n\tchain KUBE-SERVICES {\n\t}\n}\n",
        );
        assert_eq!(f[0].status, Status::Ok);
        let f = run(
            "table inet filter {\n\tchain input {\n\t\ttype filter hook input priority 0; policy accept;\n\t\ttcp dport 22 drop\n\t}\n}\n",
        );
        assert!(f.is_empty(), "{f:?}");
    }
}
