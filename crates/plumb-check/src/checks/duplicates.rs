//! Finding: `duplicate-rule` — the same rule repeated in one chain.
//!
//! kube-proxy, Felix and Flannel never write a rule twice into one chain: a repeated rule
//! comes from a script or agent appending (`iptables -A`) on every start or in a loop, or
//! from two tools managing the same chain. The second copy of a terminal rule is dead
//! weight; copies keep growing until restores and packet traversal slow down. Counters
//! (`iptables-save -c`) and nft handles are ignored when comparing.

use super::rule_body_text;
use crate::facts::Facts;
use crate::facts::FastMap;
use plumb_findings::{Finding, Severity};

pub const ID: &str = "duplicate-rule";

/// Chains up to this many rules are checked by comparing rules pairwise.
const SMALL_CHAIN: usize = 8;

pub fn check(facts: &Facts) -> Vec<Finding> {
    let mut out = Vec::new();
    for table in &facts.ruleset.tables {
        let mut evidence = Vec::new();
        let mut chains: Vec<&str> = Vec::new();
        let mut seen: FastMap<&str, u32> = FastMap::default();
        let mut small: Vec<&str> = Vec::new();
        for c in &table.chains {
            // Most chains hold a few rules (kube-proxy's: one to four): comparing them
            // with each other is cheaper than hashing every rule's text.
            let few = c.rules.len() <= SMALL_CHAIN;
            seen.clear();
            small.clear();
            for r in &c.rules {
                let key = rule_body_text(r);
                if key.is_empty() {
                    continue;
                }
                // The nft text reader keeps the statements only; key on chain + text.
                let repeated = if few {
                    let repeated = small.contains(&key);
                    small.push(key);
                    repeated
                } else {
                    match seen.insert(key, r.location.line) {
                        Some(first) => {
                            seen.insert(key, first);
                            true
                        }
                        None => false,
                    }
                };
                if repeated {
                    evidence.push(facts.rule(table, r));
                    if !chains.contains(&&*c.name) {
                        chains.push(&c.name);
                    }
                }
            }
        }
        if evidence.is_empty() {
            continue;
        }
        let n = evidence.len();
        out.push(
            Finding::problem(
                ID,
                if n > 100 { Severity::Medium } else { Severity::Low },
                format!(
                    "{} {} {}: {n} duplicated rule(s) in {}",
                    table.backend,
                    table.family,
                    table.name,
                    super::short_list(&chains, 4)
                ),
            )
            .with_evidence(evidence)
            .explain("The same rule appears more than once in one chain. Kubernetes components never do that; a script or agent that appends its rules on every start (or in a loop) does. Only the first copy of a terminal rule ever matches; the copies accumulate.")
            .fix("Find the writer from the chain's owner and the rule text, and make it check before appending (`iptables -C ... || iptables -A ...`)."),
        );
    }
    if out.is_empty() {
        out.push(Finding::ok(ID, "no chain holds the same rule twice"));
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
    fn repeated_rule_with_different_counters_is_found() {
        let f = run(
            "*filter\n:INPUT ACCEPT [0:0]\n[1:2] -A INPUT -p tcp -m tcp --dport 22 -j ACCEPT\n[0:0] -A INPUT -p udp -j ACCEPT\n[5:6] -A INPUT -p tcp -m tcp --dport 22 -j ACCEPT\nCOMMIT\n",
        );
        assert!(f[0].is_problem(), "{f:#?}");
        assert_eq!(f[0].evidence.len(), 1);
        assert_eq!(f[0].evidence[0].line, Some(7));
    }

    #[test]
    fn repeats_are_found_in_long_chains_too() {
        let mut text = String::from("*filter\n:INPUT ACCEPT [0:0]\n");
        for port in 1..=20 {
            text.push_str(&format!(
                "-A INPUT -p tcp -m tcp --dport {port} -j ACCEPT\n"
            ));
        }
        text.push_str("-A INPUT -p tcp -m tcp --dport 7 -j ACCEPT\nCOMMIT\n");
        let f = run(&text);
        assert!(f[0].is_problem(), "{f:#?}");
        assert_eq!(f[0].evidence.len(), 1);
        assert_eq!(f[0].evidence[0].line, Some(25));
    }

    #[test]
    fn same_rule_in_different_chains_is_fine() {
        let f = run(
            "*filter\n:INPUT ACCEPT [0:0]\n:X - [0:0]\n-A INPUT -j ACCEPT\n-A X -j ACCEPT\nCOMMIT\n",
        );
        assert_eq!(f[0].status, Status::Ok);
    }
}
