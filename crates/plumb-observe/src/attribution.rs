//! Which netfilter rule dropped a packet: per-rule counter deltas around the drop.
//!
//! A `NETFILTER_DROP` says only that some hook returned NF_DROP. The rule is found
//! from the counters netfilter keeps on every rule (iptables) or `counter` statement
//! (nft) and on iptables' built-in chain policies: the caller reads the ruleset
//! read-only before and after a window of drops ([`CounterSnapshot::of`]), and
//! [`attribute`] compares the two over the rules that can drop (a DROP or REJECT
//! target, an nft `drop`/`reject` verdict) and the DROP policies. One candidate whose
//! count went up: that rule. Several: [`RuleMatch::Ambiguous`], all listed — never a
//! guess. None: [`RuleMatch::NotFound`] with why (nft rules without `counter`, nft
//! policies, which have no counters, or a drop outside the tables read).
//!
//! Pure: rulesets in, an answer out; only [`read_counted`] reads the kernel (the dump
//! tools, and the legacy tables through getsockopt).

use plumb_ruleset::owner::{Attribution, rule_owner};
use plumb_ruleset::{Chain, Policy, Rule, RuleBody, Ruleset, Table};
use serde::Serialize;
use std::collections::HashMap;

/// A rule (or chain policy) that can drop, and how often it did in the window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DropRule {
    /// Address family of its table (`ip`, `ip6`, `inet`).
    pub family: String,
    /// Its table.
    pub table: String,
    /// Its chain.
    pub chain: String,
    /// The rule as the dump prints it, or `policy DROP` for a chain's policy.
    pub text: String,
    /// Who wrote it (plumb's owner attribution), e.g. `kube-proxy`, `ufw`, `builtin`.
    pub owner: String,
    /// Why plumb believes that owner.
    pub owner_evidence: String,
    /// Packets it counted in the window.
    pub packets: u64,
}

/// The answer for a window of netfilter drops.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum RuleMatch {
    /// Exactly one dropping rule or policy counted packets in the window.
    Found {
        /// That rule.
        rule: DropRule,
    },
    /// Several did: any of them may have dropped a given packet.
    Ambiguous {
        /// Every one that counted, most packets first.
        candidates: Vec<DropRule>,
    },
    /// None did; the text says why that can happen here.
    NotFound {
        /// Why no rule could be named.
        why: String,
    },
}

/// What identifies a rule across two reads: family, table, chain, its text (or `None`
/// for the policy) and which occurrence of that text in the chain it is. Positions are
/// not used: a rule inserted above would shift them.
type Key = (String, String, String, Option<String>, usize);

/// The counters of every rule and policy that can drop, at one moment.
#[derive(Clone, Debug, Default)]
pub struct CounterSnapshot {
    counters: HashMap<Key, (u64, DropRule)>,
    /// Dropping rules with no counter (nft rules without a `counter` statement) and
    /// nft base chains whose policy is drop: what cannot be attributed by counters.
    uncounted: Vec<String>,
}

fn drops(rule: &Rule) -> bool {
    match &rule.body {
        RuleBody::Xt(_) => rule
            .xt()
            .and_then(|x| x.target().map(|t| matches!(t.name(), "DROP" | "REJECT")))
            .unwrap_or(false),
        RuleBody::Nft(n) => n.statements.iter().any(|s| {
            matches!(
                &s.kind,
                plumb_ruleset::nft::StatementKind::Verdict(
                    plumb_ruleset::nft::Verdict::Drop | plumb_ruleset::nft::Verdict::Reject(_)
                )
            )
        }),
        RuleBody::Approximate(_) => {
            let t = rule.text.as_str();
            t.contains("-j DROP") || t.contains("-j REJECT")
        }
    }
}

/// A rule's text without the `[packets:bytes] ` that `iptables-save -c` puts first:
/// the counters change between two reads, the rule does not.
fn without_counters(text: &str) -> &str {
    if let Some(rest) = text.strip_prefix('[')
        && let Some((counts, after)) = rest.split_once("] ")
        && counts.split_once(':').is_some_and(|(p, b)| {
            !p.is_empty()
                && !b.is_empty()
                && (p.bytes().chain(b.bytes())).all(|c| c.is_ascii_digit())
        })
    {
        return after;
    }
    text
}

fn counters(rule: &Rule) -> Option<u64> {
    rule.counters
        .map(|c| c.packets)
        .or_else(|| match &rule.body {
            RuleBody::Nft(n) => n.counters().map(|c| c.packets),
            _ => None,
        })
}

/// Writers known to set a built-in chain's policy to DROP (host firewalls, Docker's
/// FORWARD): the policy is theirs when the chain hooks exactly one of them.
const POLICY_SETTERS: &[&str] = &["ufw", "firewalld", "docker"];

fn policy_owner(table: &Table, chain: &Chain) -> Attribution {
    let mut setters: Vec<String> = chain
        .rules
        .iter()
        .map(|r| rule_owner(table, chain, r).owner.0)
        .filter(|o| POLICY_SETTERS.contains(&o.as_str()))
        .collect();
    setters.sort();
    setters.dedup();
    match setters.as_slice() {
        [one] => Attribution {
            owner: plumb_ruleset::owner::Owner(one.clone()),
            evidence: format!(
                "{} hooks {one}'s chains, and {one} sets its policy",
                chain.name
            ),
        },
        [] => Attribution {
            owner: plumb_ruleset::owner::Owner::builtin(),
            evidence: "the built-in chain's policy (the kernel does not record who set it)".into(),
        },
        many => Attribution {
            owner: plumb_ruleset::owner::Owner::unknown(),
            evidence: format!(
                "{} hooks chains of {}: any of them may have set the policy",
                chain.name,
                many.join(", ")
            ),
        },
    }
}

impl CounterSnapshot {
    /// The counters of `rs`'s dropping rules and DROP policies.
    pub fn of(rs: &Ruleset) -> CounterSnapshot {
        let mut s = CounterSnapshot::default();
        for t in &rs.tables {
            for c in &t.chains {
                let mut seen: HashMap<&str, usize> = HashMap::new();
                let rule_of = |text: String, packets: u64, who: Attribution| DropRule {
                    family: t.family.to_string(),
                    table: t.name.to_string(),
                    chain: c.name.to_string(),
                    text,
                    owner: who.owner.0,
                    owner_evidence: who.evidence,
                    packets,
                };
                if c.policy() == Some(&Policy::Drop) {
                    match c.base.as_ref().and_then(|b| b.counters) {
                        Some(n) => {
                            let key = (
                                t.family.to_string(),
                                t.name.to_string(),
                                c.name.to_string(),
                                None,
                                0,
                            );
                            let r = rule_of("policy DROP".into(), n.packets, policy_owner(t, c));
                            s.counters.insert(key, (n.packets, r));
                        }
                        None => s.uncounted.push(format!(
                            "the drop policy of {} {} {} (no counters)",
                            t.family, t.name, c.name
                        )),
                    }
                }
                for r in &c.rules {
                    if !drops(r) {
                        continue;
                    }
                    let text = without_counters(r.text.as_str());
                    let n = seen.entry(text).or_default();
                    *n += 1;
                    let Some(packets) = counters(r) else {
                        s.uncounted.push(format!(
                            "{} {} {}: `{text}` (no counter)",
                            t.family, t.name, c.name
                        ));
                        continue;
                    };
                    let key = (
                        t.family.to_string(),
                        t.name.to_string(),
                        c.name.to_string(),
                        Some(text.to_string()),
                        *n,
                    );
                    let d = rule_of(text.to_string(), packets, rule_owner(t, c, r));
                    s.counters.insert(key, (packets, d));
                }
            }
        }
        s
    }

    /// How many dropping rules and policies with counters the snapshot holds.
    pub fn len(&self) -> usize {
        self.counters.len()
    }

    /// The snapshot holds no counted dropping rule.
    pub fn is_empty(&self) -> bool {
        self.counters.is_empty()
    }
}

/// The rule that dropped the netfilter drops seen between `before` and `after`. A rule
/// that is only in `after` counts all its packets (it was added in the window); a
/// counter that went down (the rule was replaced, counters reset) counts its new value.
pub fn attribute(before: &CounterSnapshot, after: &CounterSnapshot) -> RuleMatch {
    let mut moved: Vec<DropRule> = after
        .counters
        .iter()
        .filter_map(|(k, (now, rule))| {
            let then = before.counters.get(k).map_or(0, |(n, _)| *n);
            let delta = if *now >= then { now - then } else { *now };
            (delta > 0).then(|| DropRule {
                packets: delta,
                ..rule.clone()
            })
        })
        .collect();
    moved.sort_by(|a, b| {
        b.packets
            .cmp(&a.packets)
            .then_with(|| (&a.table, &a.chain, &a.text).cmp(&(&b.table, &b.chain, &b.text)))
    });
    match moved.len() {
        1 => RuleMatch::Found {
            rule: moved.remove(0),
        },
        0 => {
            let mut why =
                String::from("no dropping rule or DROP policy counted a packet in the window");
            if !after.uncounted.is_empty() {
                why.push_str("; these can drop but have no counters: ");
                let shown: Vec<&str> = after.uncounted.iter().take(5).map(String::as_str).collect();
                why.push_str(&shown.join("; "));
                if after.uncounted.len() > 5 {
                    why.push_str(&format!(" (and {} more)", after.uncounted.len() - 5));
                }
            }
            RuleMatch::NotFound { why }
        }
        _ => RuleMatch::Ambiguous { candidates: moved },
    }
}

/// Reads the ruleset of `netns` (this machine's when None) with every rule's counters,
/// read-only: `iptables-nft-save -c` and `ip6tables-nft-save -c` (the netlink reader
/// leaves rule counters out), the native nf_tables tables from `nft list ruleset`
/// (its `counter` statements), and the legacy tables through the getsockopt reader
/// ([`legacy_counted`]). A tool that is missing or fails is skipped and named in the
/// second value; an error only when nothing could be read.
pub fn read_counted(
    runner: &dyn plumb_os::runner::Runner,
    netns: Option<&str>,
) -> Result<(Ruleset, Vec<String>), String> {
    use plumb_ruleset::iptables::save::{IptablesInput, parse};
    let timeout = std::time::Duration::from_secs(20);
    let mut rs = Ruleset::default();
    let mut problems = Vec::new();
    let mut read_any = false;
    for (tool, family) in [
        ("iptables-nft-save", plumb_ruleset::Family::Ip),
        ("ip6tables-nft-save", plumb_ruleset::Family::Ip6),
    ] {
        match runner.run(tool, &["-c"], netns, timeout) {
            Ok(out) if out.success() => {
                let input = IptablesInput {
                    family,
                    backend: Some(plumb_ruleset::Backend::IptablesNft),
                    ..IptablesInput::default()
                };
                rs.merge(parse(&String::from_utf8_lossy(&out.stdout), &input));
                read_any = true;
            }
            Ok(out) => problems.push(format!("{tool} -c failed: {}", out.stderr.trim())),
            Err(e) => problems.push(format!("{tool} -c: {e}")),
        }
    }
    match runner.run("nft", &["list", "ruleset"], netns, timeout) {
        Ok(out) if out.success() => {
            let mut native = plumb_ruleset::nft::parse_text(&String::from_utf8_lossy(&out.stdout));
            // iptables-nft's tables show up in `nft list ruleset` too; they were read
            // above with their counters.
            native.tables.retain(|t| {
                !rs.tables
                    .iter()
                    .any(|x| x.family == t.family && x.name == t.name)
            });
            rs.merge(native);
            read_any = true;
        }
        Ok(out) => problems.push(format!("nft list ruleset failed: {}", out.stderr.trim())),
        Err(e) => problems.push(format!("nft list ruleset: {e}")),
    }
    for family in [plumb_ruleset::Family::Ip, plumb_ruleset::Family::Ip6] {
        match legacy_counted(runner, netns, family, timeout) {
            Ok(Some(legacy)) => {
                rs.merge(legacy);
                read_any = true;
            }
            Ok(None) => {}
            Err(e) => problems.push(e),
        }
    }
    if read_any {
        Ok((rs, problems))
    } else {
        Err(problems.join("; "))
    }
}

/// The legacy tables of one family with their rules' counters, through the getsockopt
/// reader (`plumb_collect::xt_legacy`: only the tables the namespace lists, so none is
/// created); a table it cannot translate exactly from `iptables-legacy-save -c` (the
/// same read-only getsockopt calls). `None`: the namespace has no legacy table.
fn legacy_counted(
    runner: &dyn plumb_os::runner::Runner,
    netns: Option<&str>,
    family: plumb_ruleset::Family,
    timeout: std::time::Duration,
) -> Result<Option<Ruleset>, String> {
    use plumb_collect::xt_legacy::{LegacyTableRead, read};
    use plumb_ruleset::iptables::save::{IptablesInput, parse};
    let tool = if family == plumb_ruleset::Family::Ip6 {
        "ip6tables-legacy-save"
    } else {
        "iptables-legacy-save"
    };
    let deadline = std::time::Instant::now() + timeout;
    let tables = match read(netns, family, Some(deadline), true) {
        Ok(t) if t.is_empty() => return Ok(None),
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
            return Err(format!(
                "{tool}: could not read the legacy tables through getsockopt within {} s",
                timeout.as_secs()
            ));
        }
        Err(e) => return Err(format!("{tool}: legacy getsockopt read: {e}")),
    };
    let mut text = String::new();
    let mut saved: Option<String> = None;
    for t in &tables {
        match &t.read {
            LegacyTableRead::Save(section) => text.push_str(section),
            LegacyTableRead::Fallback(_) => {
                if saved.is_none() {
                    let out = runner
                        .run(tool, &["-c"], netns, timeout)
                        .map_err(|e| format!("{tool} -c: {e}"))?;
                    if !out.success() {
                        return Err(format!("{tool} -c failed: {}", out.stderr.trim()));
                    }
                    saved = Some(String::from_utf8_lossy(&out.stdout).into_owned());
                }
                let all = saved.as_deref().unwrap_or("");
                // The section from its `*table` line (after the tool's header line).
                let header = format!("\n*{}\n", t.name);
                if let Some(start) = all.find(&header).map(|at| at + 1)
                    && let Some(len) = all[start..].find("\nCOMMIT\n")
                {
                    text.push_str(&all[start..start + len + "\nCOMMIT\n".len()]);
                }
            }
        }
    }
    let input = IptablesInput {
        family,
        backend: Some(plumb_ruleset::Backend::IptablesLegacy),
        ..IptablesInput::default()
    };
    Ok(Some(parse(&text, &input)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rs(save: &str) -> Ruleset {
        plumb_ruleset::iptables::save::parse(
            save,
            &plumb_ruleset::iptables::save::IptablesInput::default(),
        )
    }

    const UFW: &str = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [{fwd}:0]\n:OUTPUT ACCEPT [0:0]\n:ufw-before-forward - [0:0]\n:ufw-reject-forward - [0:0]\n[0:0] -A FORWARD -j ufw-before-forward\n[{rej}:0] -A ufw-reject-forward -j REJECT --reject-with icmp-port-unreachable\nCOMMIT\n";

    fn ufw(fwd: u64, rej: u64) -> Ruleset {
        rs(&UFW
            .replace("{fwd}", &fwd.to_string())
            .replace("{rej}", &rej.to_string()))
    }

    #[test]
    fn the_forward_policy_of_ufw_is_named_with_its_owner() {
        let m = attribute(
            &CounterSnapshot::of(&ufw(3, 0)),
            &CounterSnapshot::of(&ufw(5, 0)),
        );
        let RuleMatch::Found { rule } = m else {
            panic!("{m:?}")
        };
        assert_eq!(
            (
                rule.chain.as_str(),
                rule.text.as_str(),
                rule.owner.as_str(),
                rule.packets
            ),
            ("FORWARD", "policy DROP", "ufw", 2)
        );
    }

    /// `iptables-save -c` prints each rule's counters first: the same rule read twice
    /// is one rule whose count went up, not a new rule counted whole.
    #[test]
    fn a_rule_is_the_same_rule_when_its_counters_change() {
        let m = attribute(
            &CounterSnapshot::of(&ufw(3, 40)),
            &CounterSnapshot::of(&ufw(3, 41)),
        );
        let RuleMatch::Found { rule } = m else {
            panic!("{m:?}")
        };
        assert_eq!(rule.packets, 1);
        assert!(
            rule.text.starts_with("-A ufw-reject-forward"),
            "{}",
            rule.text
        );
    }

    #[test]
    fn a_reject_rule_is_named_with_its_owner() {
        let m = attribute(
            &CounterSnapshot::of(&ufw(3, 0)),
            &CounterSnapshot::of(&ufw(3, 1)),
        );
        let RuleMatch::Found { rule } = m else {
            panic!("{m:?}")
        };
        assert_eq!(rule.chain, "ufw-reject-forward");
        assert!(rule.text.contains("-j REJECT"), "{}", rule.text);
        assert_eq!(rule.owner, "ufw");
    }

    #[test]
    fn two_rules_counting_is_ambiguous_not_a_guess() {
        let m = attribute(
            &CounterSnapshot::of(&ufw(3, 0)),
            &CounterSnapshot::of(&ufw(4, 2)),
        );
        let RuleMatch::Ambiguous { candidates } = m else {
            panic!("{m:?}")
        };
        assert_eq!(candidates.len(), 2);
        assert_eq!(candidates[0].packets, 2, "most packets first");
    }

    #[test]
    fn nothing_counted_says_why() {
        let m = attribute(
            &CounterSnapshot::of(&ufw(3, 0)),
            &CounterSnapshot::of(&ufw(3, 0)),
        );
        assert!(matches!(m, RuleMatch::NotFound { .. }), "{m:?}");
        let nft = plumb_ruleset::nft::parse_text(
            "table inet fw {\n chain input {\n  type filter hook input priority 0; policy drop;\n  tcp dport 22 drop\n }\n}\n",
        );
        let s = CounterSnapshot::of(&nft);
        let RuleMatch::NotFound { why } = attribute(&s, &s) else {
            panic!()
        };
        assert!(why.contains("no counter"), "{why}");
        assert!(why.contains("drop policy of inet fw input"), "{why}");
    }

    #[test]
    fn nft_counter_statements_count() {
        let nft = |n: u64| {
            plumb_ruleset::nft::parse_text(&format!(
                "table ip kube-proxy {{\n chain filter-forward {{\n  type filter hook forward priority -110; policy accept;\n  ct state invalid counter packets {n} bytes 0 drop\n }}\n}}\n"
            ))
        };
        let m = attribute(&CounterSnapshot::of(&nft(0)), &CounterSnapshot::of(&nft(1)));
        let RuleMatch::Found { rule } = m else {
            panic!("{m:?}")
        };
        assert_eq!(
            (rule.table.as_str(), rule.owner.as_str()),
            ("kube-proxy", "kube-proxy")
        );
    }
}
