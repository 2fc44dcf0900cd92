//! Finding: `duplicate-rule` — the same rule repeated in one chain, the later copy dead.
//!
//! kube-proxy, Felix and Flannel never write a rule twice into one chain: a repeated rule
//! comes from a script or agent appending (`iptables -A`) on every start or in a loop, or
//! from two tools managing the same chain. Counters (`iptables-save -c`) and nft handles
//! are ignored when comparing.
//!
//! Positional semantics: a later copy is reported only when it is provably dead weight —
//! - nothing between the two copies can change what it matches: every rule in between
//!   ends in ACCEPT, DROP, REJECT, RETURN, a NAT target (terminal), LOG/NFLOG or no
//!   target. A MARK, a CONNMARK, a jump to a chain that may mark, CT/NOTRACK could make
//!   the later copy match packets the first did not;
//! - all its columns are known: a listing without `-v` hides `-i`/`-o` (two `ACCEPT all
//!   -- anywhere anywhere` lines may be `-o docker0` and `-i docker0`), a listing row with
//!   unrecognised option text, an nft view of an xtables extension (`xt match`/`xt target`)
//!   and a rule the reader could not read to its end (a damaged region: the next line is
//!   a read error, or the line ends in a `\` continuation) say too little;
//! - its counters, when shown, are 0 (a copy that counted packets is not dead).

use super::rule_body_text;
use crate::facts::CheckInput;
use crate::facts::{FastMap, FastSet, fx_hash};
use plumb_findings::{Finding, Severity};
use plumb_ruleset::{Rule, RuleBody, Table};

/// Finding id: a rule repeated in the same chain whose later copy can never match.
pub const ID: &str = "duplicate-rule";

/// Chains up to this many rules are checked by comparing rules pairwise.
const SMALL_CHAIN: usize = 8;

/// True when every column of the rule (whose text is `text`) is known, so equal texts
/// mean equal rules.
fn columns_known(rule: &Rule, text: &str, error_lines: &FastSet<u32>) -> bool {
    let text = text.trim_end();
    // The rule's line is found only when some line could not be read.
    if text.ends_with('\\') || (!error_lines.is_empty() && error_lines.contains(&(rule.line() + 1)))
    {
        return false;
    }
    match &rule.body {
        RuleBody::Approximate(l) => l.interfaces_listed && l.unrecognised.is_empty(),
        RuleBody::Nft(_) => {
            !text.contains("xt match") && !text.contains("xt target") && !text.contains("# Warning")
        }
        RuleBody::Xt(_) => true,
    }
}

/// Targets after which a later rule sees the packet as it was (or not at all).
const INERT_TARGETS: &[&str] = &[
    "ACCEPT",
    "DROP",
    "REJECT",
    "RETURN",
    "DNAT",
    "SNAT",
    "MASQUERADE",
    "REDIRECT",
    "LOG",
    "NFLOG",
    "ULOG",
];

/// True when the rule changes nothing a later rule could match on: it ends in a
/// verdict, RETURN, a NAT target (terminal: a packet it matches leaves the chain, one it
/// does not match goes on unchanged), a log target or nothing — or it jumps to a chain
/// of `table` whose own rules are all of that kind (a logging chain that ends in DROP).
fn inert(rule: &Rule, table: &Table) -> bool {
    let jump_is_inert = |name: &str, goto: bool| {
        !goto
            && table
                .chain(name)
                .is_some_and(|c| c.rules.iter().all(|r| inert_in_place(r) == Some(true)))
    };
    match inert_in_place(rule) {
        Some(b) => b,
        None => match &rule.body {
            RuleBody::Xt(_) => rule
                .xt_target()
                .is_some_and(|t| jump_is_inert(t.name, t.goto)),
            RuleBody::Approximate(l) => l
                .target
                .as_deref()
                .is_some_and(|t| jump_is_inert(t, l.goto)),
            RuleBody::Nft(_) => false,
        },
    }
}

/// [`inert`] without following jumps: `None` for a jump or goto to a user chain whose
/// rules decide.
fn inert_in_place(rule: &Rule) -> Option<bool> {
    match &rule.body {
        RuleBody::Xt(_) => match rule.xt_target() {
            None => Some(true),
            Some(t) if !t.goto && INERT_TARGETS.contains(&t.name) => Some(true),
            Some(t) if t.chain_reference().is_some() && !t.has_options => None,
            Some(_) => Some(false),
        },
        RuleBody::Approximate(l) => match l.target.as_deref() {
            None => Some(true),
            Some(t) if !l.goto && INERT_TARGETS.contains(&t) => Some(true),
            Some(_) if l.chain_reference().is_some() => None,
            Some(_) => Some(false),
        },
        RuleBody::Nft(_) => {
            let t = rule.text.read();
            Some(
                ![
                    "jump",
                    "goto",
                    " set ",
                    "tproxy",
                    "xt target",
                    "queue",
                    "dup ",
                    "fwd ",
                    "notrack",
                    "ct zone",
                ]
                .iter()
                .any(|w| t.contains(w)),
            )
        }
    }
}

fn counted(rule: &Rule) -> bool {
    rule.counters().is_some_and(|c| c.packets > 0)
}

/// Reports each chain holding provably dead copies of an earlier rule, with both lines.
pub fn check(facts: &CheckInput) -> Vec<Finding> {
    let error_lines: FastSet<u32> = facts.ruleset.errors().map(|d| d.line).collect();
    let mut out = Vec::new();
    for table in &facts.ruleset.tables {
        // nft's listing of an iptables-nft table leaves out what it cannot print (the
        // comment match among others: Cilium's two `-i lxc+ -j ACCEPT` rules differ only
        // in their comments), so equal rules there may be different rules.
        if table.nft_view {
            continue;
        }
        let mut evidence = Vec::new();
        let mut chains: Vec<&str> = Vec::new();
        // The hash of a rule's text (counters and handle left out) -> the index of the
        // last rule seen with it. Hashes, not the texts: a packed text is read back
        // into `buf` one rule at a time and not kept. Equal hashes are confirmed on the
        // texts.
        let mut seen: FastMap<u64, usize> = FastMap::default();
        let mut small: Vec<(u64, usize)> = Vec::new();
        let mut buf = String::new();
        for c in &table.chains {
            // Most chains hold a few rules (kube-proxy's: one to four): comparing them
            // with each other is cheaper than a map.
            let few = c.rules.len() <= SMALL_CHAIN;
            seen.clear();
            small.clear();
            for (i, r) in c.rules.iter().enumerate() {
                let text = r.text.read_in(&mut buf);
                let key = rule_body_text(text);
                if key.is_empty() {
                    continue;
                }
                let hash = fx_hash(key);
                let earlier = if few {
                    let e = small
                        .iter()
                        .rev()
                        .find(|(k, _)| *k == hash)
                        .map(|(_, j)| *j);
                    small.push((hash, i));
                    e
                } else {
                    seen.insert(hash, i)
                };
                let Some(j) = earlier else { continue };
                let first = c.rules[j].text.read();
                let dead = rule_body_text(&first) == key
                    && columns_known(r, text, &error_lines)
                    && columns_known(&c.rules[j], &first, &error_lines)
                    && !counted(r)
                    && c.rules[j + 1..i].iter().all(|b| inert(b, table));
                if dead {
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
            .explain("The same rule appears more than once in one chain, and nothing between the copies changes what the later one matches (no MARK, CONNMARK, NAT or jump in between; its counters, where shown, are 0). Kubernetes components never do that; a script or agent that appends its rules on every start (or in a loop) does. Only the first copy of a terminal rule ever matches; the copies accumulate.")
            .fix("Find the writer from the chain's owner and the rule text, and make it check before appending (`iptables -C ... || iptables -A ...`)."),
        );
    }
    if out.is_empty() {
        out.push(Finding::ok(ID, "no chain holds a dead copy of a rule"));
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
    fn later_copy_is_dead_only_with_zero_counters() {
        let f = run(
            "*filter\n:INPUT ACCEPT [0:0]\n[1:2] -A INPUT -p tcp -m tcp --dport 22 -j ACCEPT\n[0:0] -A INPUT -p udp -j ACCEPT\n[0:0] -A INPUT -p tcp -m tcp --dport 22 -j ACCEPT\nCOMMIT\n",
        );
        assert!(f[0].is_problem(), "{f:#?}");
        assert_eq!(f[0].evidence.len(), 1);
        assert_eq!(f[0].evidence[0].line, Some(7));
        // The later copy counted packets: it is not dead.
        let f = run(
            "*filter\n:INPUT ACCEPT [0:0]\n[1:2] -A INPUT -p tcp -m tcp --dport 22 -j ACCEPT\n[0:0] -A INPUT -p udp -j ACCEPT\n[5:6] -A INPUT -p tcp -m tcp --dport 22 -j ACCEPT\nCOMMIT\n",
        );
        assert_eq!(f[0].status, Status::Ok, "{f:#?}");
    }

    #[test]
    fn a_mark_or_a_jump_between_the_copies_keeps_the_later_one_alive() {
        for between in [
            "-A POSTROUTING -s 10.0.0.0/8 -j MARK --set-xmark 0x21/0xffffffff",
            "-A POSTROUTING -j CONNMARK --restore-mark",
            "-A POSTROUTING -j MAYBE-MARKS",
        ] {
            let f = run(&format!(
                "*nat\n:POSTROUTING ACCEPT [0:0]\n:MAYBE-MARKS - [0:0]\n-A MAYBE-MARKS -s 10.1.0.0/16 -j MARK --set-xmark 0x21/0xffffffff\n-A POSTROUTING -m mark --mark 0x21 -j MASQUERADE\n{between}\n-A POSTROUTING -m mark --mark 0x21 -j MASQUERADE\nCOMMIT\n"
            ));
            assert_eq!(f[0].status, Status::Ok, "{between}: {f:#?}");
        }
        // Terminal NAT rules between copies change nothing for the packets that go on
        // (libvirt's masquerade rules appended on every restart).
        let f = run(
            "*nat\n:POSTROUTING ACCEPT [0:0]\n-A POSTROUTING -s 192.168.122.0/24 ! -d 192.168.122.0/24 -p tcp -j MASQUERADE --to-ports 1024-65535\n-A POSTROUTING -s 192.168.122.0/24 ! -d 192.168.122.0/24 -j MASQUERADE\n-A POSTROUTING -s 192.168.122.0/24 ! -d 192.168.122.0/24 -p tcp -j MASQUERADE --to-ports 1024-65535\nCOMMIT\n",
        );
        assert!(f[0].is_problem(), "{f:#?}");
        // A jump to a chain that only logs and drops changes nothing for what goes on.
        let f = run(
            "*filter\n:INPUT DROP [0:0]\n:LOGGING - [0:0]\n-A INPUT -p tcp -m tcp --dport 13001 -j ACCEPT\n-A INPUT -j LOGGING\n-A INPUT -p tcp -m tcp --dport 13001 -j ACCEPT\n-A LOGGING -j LOG --log-prefix \"dropped: \"\n-A LOGGING -j DROP\nCOMMIT\n",
        );
        assert!(f[0].is_problem(), "{f:#?}");
        // Adjacent copies (cce-cilium's doubled masquerade) are a true duplicate.
        let f = run(
            "*nat\n:POSTROUTING ACCEPT [0:0]\n-A POSTROUTING -m mark --mark 0x21 -j MASQUERADE\n-A POSTROUTING -s 10.0.0.0/8 -j RETURN\n-A POSTROUTING -m mark --mark 0x21 -j MASQUERADE\nCOMMIT\n",
        );
        assert!(f[0].is_problem(), "{f:#?}");
    }

    #[test]
    fn listing_without_interfaces_and_wrapped_fragments_are_not_evidence() {
        use plumb_ruleset::format::{ParseOptions, parse_bytes};
        let check_text = |t: &str| {
            let rs = parse_bytes(t.as_bytes(), &ParseOptions::default())
                .unwrap()
                .ruleset;
            check(&CheckInput::new(
                &rs,
                crate::facts::Origin::File("l".into()),
                false,
            ))
        };
        // `iptables -nL`: the two ACCEPT rows may differ in -i/-o.
        let no_v = "Chain FORWARD (policy ACCEPT)\ntarget     prot opt source               destination         \nACCEPT     all  --  0.0.0.0/0            0.0.0.0/0           \nACCEPT     all  --  0.0.0.0/0            0.0.0.0/0           \n";
        assert_eq!(check_text(no_v)[0].status, Status::Ok);
        // `iptables -nvL` shows them: equal rows with zero counters are duplicates.
        let v = "Chain FORWARD (policy ACCEPT 0 packets, 0 bytes)\n pkts bytes target     prot opt in     out     source               destination         \n    0     0 ACCEPT     all  --  docker0 *       0.0.0.0/0            0.0.0.0/0           \n    0     0 ACCEPT     all  --  docker0 *       0.0.0.0/0            0.0.0.0/0           \n";
        assert!(check_text(v)[0].is_problem(), "{:#?}", check_text(v));
        // A rule cut by a `\` line continuation is a fragment.
        let f = run(
            "*nat\n:KUBE-SERVICES - [0:0]\n-A KUBE-SERVICES -d 192.168.121.201/32 -p tcp \\\n-A KUBE-SERVICES -d 192.168.121.201/32 -p tcp \\\nCOMMIT\n",
        );
        assert!(f.iter().all(|x| !x.is_problem()), "{f:#?}");
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
