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

use plumb_os::nftables::{ChainId, Count, Counters};
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
        RuleBody::Nft(n) => n.statements(&rule.text).iter().any(|s| {
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

/// A rule's text without its counter values: the `[packets:bytes] ` that
/// `iptables-save -c` puts first, and the `packets N bytes M` after an nft `counter`
/// statement. The counters change between two reads, the rule does not.
fn without_counters(text: &str) -> std::borrow::Cow<'_, str> {
    let mut text = text;
    if let Some(rest) = text.strip_prefix('[')
        && let Some((counts, after)) = rest.split_once("] ")
        && counts.split_once(':').is_some_and(|(p, b)| {
            !p.is_empty()
                && !b.is_empty()
                && (p.bytes().chain(b.bytes())).all(|c| c.is_ascii_digit())
        })
    {
        text = after;
    }
    if !text.contains("counter packets ") {
        return std::borrow::Cow::Borrowed(text);
    }
    // `counter packets N bytes M` -> `counter`, word by word.
    let words: Vec<&str> = text.split(' ').collect();
    let mut out: Vec<&str> = Vec::with_capacity(words.len());
    let mut i = 0;
    while i < words.len() {
        let w = words[i];
        out.push(w);
        let digits = |s: Option<&&str>| {
            s.is_some_and(|s| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()))
        };
        if w == "counter"
            && words.get(i + 1) == Some(&"packets")
            && digits(words.get(i + 2))
            && words.get(i + 3) == Some(&"bytes")
            && digits(words.get(i + 4))
        {
            i += 5;
        } else {
            i += 1;
        }
    }
    std::borrow::Cow::Owned(out.join(" "))
}

fn counters(rule: &Rule) -> Option<u64> {
    rule.counters()
        .map(|c| c.packets)
        .or_else(|| match &rule.body {
            RuleBody::Nft(n) => n.counters(&rule.text).map(|c| c.packets),
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

/// One rule or policy that can drop, as the model has it.
struct DropEntry {
    /// Family, table and chain as the kernel names them.
    chain: ChainId,
    /// The rule's position in its chain (None: the chain's policy).
    position: Option<usize>,
    key: Key,
    /// The rule, its owner, and the packets the model counted (None: no counter).
    rule: DropRule,
    counted: Option<u64>,
    /// What to say when it has no counter.
    uncounted: String,
}

/// Every rule and DROP policy of `rs` that can drop.
fn drop_entries(rs: &Ruleset) -> Vec<DropEntry> {
    let mut out = Vec::new();
    for t in &rs.tables {
        for c in &t.chains {
            let id: ChainId = (t.family.nfproto(), t.name.to_string(), c.name.to_string());
            let mut seen: HashMap<std::borrow::Cow<'_, str>, usize> = HashMap::new();
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
                let counted = c.base.as_ref().and_then(|b| b.counters).map(|n| n.packets);
                out.push(DropEntry {
                    chain: id.clone(),
                    position: None,
                    key: (
                        t.family.to_string(),
                        t.name.to_string(),
                        c.name.to_string(),
                        None,
                        0,
                    ),
                    rule: rule_of(
                        "policy DROP".into(),
                        counted.unwrap_or(0),
                        policy_owner(t, c),
                    ),
                    counted,
                    uncounted: format!(
                        "the drop policy of {} {} {} (no counters)",
                        t.family, t.name, c.name
                    ),
                });
            }
            for (i, r) in c.rules.iter().enumerate() {
                if !drops(r) {
                    continue;
                }
                let text = without_counters(r.text.as_str());
                let n = seen.entry(text.clone()).or_default();
                *n += 1;
                let counted = counters(r);
                out.push(DropEntry {
                    chain: id.clone(),
                    position: Some(i),
                    key: (
                        t.family.to_string(),
                        t.name.to_string(),
                        c.name.to_string(),
                        Some(text.to_string()),
                        *n,
                    ),
                    rule: rule_of(text.to_string(), counted.unwrap_or(0), rule_owner(t, c, r)),
                    counted,
                    uncounted: format!("{} {} {}: `{text}` (no counter)", t.family, t.name, c.name),
                });
            }
        }
    }
    out
}

impl CounterSnapshot {
    /// The counters of `rs`'s dropping rules and DROP policies.
    pub fn of(rs: &Ruleset) -> CounterSnapshot {
        let mut s = CounterSnapshot::default();
        for e in drop_entries(rs) {
            match e.counted {
                Some(n) => {
                    s.counters.insert(e.key, (n, e.rule));
                }
                None => s.uncounted.push(e.uncounted),
            }
        }
        s
    }

    /// How many dropping rules and policies with counters the snapshot holds.
    pub fn len(&self) -> usize {
        self.counters.len()
    }

    /// Every counted rule and policy with its count (`packets`), in a stable order.
    pub fn rules(&self) -> Vec<&DropRule> {
        let mut v: Vec<(&Key, &DropRule)> =
            self.counters.iter().map(|(k, (_, r))| (k, r)).collect();
        v.sort_by(|a, b| a.0.cmp(b.0));
        v.into_iter().map(|(_, r)| r).collect()
    }

    /// The dropping rules and policies that have no counter.
    pub fn uncounted(&self) -> &[String] {
        &self.uncounted
    }

    /// The snapshot holds no counted dropping rule.
    pub fn is_empty(&self) -> bool {
        self.counters.is_empty()
    }
}

/// How to read the counters of the rules that can drop over netlink, chain by chain,
/// instead of dumping the whole ruleset with the save tools at every window: made
/// from one full read (the rules' text and owners) and the netlink counters of its
/// dropping chains read at the same generation, which line up rule by rule (the
/// kernel's order is the dump's order). Valid while the generation stays the same;
/// any change to the ruleset needs a new full read.
#[derive(Clone, Debug)]
pub struct NetlinkPlan {
    generation: u32,
    chains: Vec<ChainId>,
    policies: Vec<ChainId>,
    /// (chain, rule handle) -> the entry's key and rule.
    rules: HashMap<(ChainId, u64), (Key, DropRule)>,
    /// chain -> its DROP policy's key and rule.
    policy_rules: HashMap<ChainId, (Key, DropRule)>,
    /// Dropping rules without counters (said when nothing is found).
    uncounted: Vec<String>,
}

impl NetlinkPlan {
    /// The chains whose rules can drop, and the base chains with a DROP policy, of
    /// `rs`: what [`NetlinkPlan::new`] needs read. Only nf_tables tables (iptables-nft
    /// and native); None when `rs` holds a table netlink cannot read (iptables-legacy,
    /// or a dump that does not say its backend).
    pub fn chains_to_read(rs: &Ruleset) -> Option<(Vec<ChainId>, Vec<ChainId>)> {
        if rs.tables.iter().any(|t| {
            matches!(
                t.backend,
                plumb_ruleset::Backend::IptablesLegacy | plumb_ruleset::Backend::IptablesUnknown
            )
        }) {
            return None;
        }
        let mut chains = Vec::new();
        let mut policies = Vec::new();
        for e in drop_entries(rs) {
            let list = if e.position.is_some() {
                &mut chains
            } else {
                &mut policies
            };
            if !list.contains(&e.chain) {
                list.push(e.chain);
            }
        }
        Some((chains, policies))
    }

    /// The plan for `rs` (a full read: the save tools' text, or plumb's netlink reader's,
    /// which leaves rule counters out) and `c`, the counters of its
    /// [`NetlinkPlan::chains_to_read`] read over netlink. The counts are the kernel's
    /// (`c`); `rs` gives the rules' text and owners. An error says where the two
    /// differ (a chain with another number of rules, a counter the kernel lacks): the
    /// ruleset changed between the reads, and the caller reads in full again.
    pub fn new(rs: &Ruleset, c: &Counters) -> Result<NetlinkPlan, String> {
        let (chains, policies) =
            Self::chains_to_read(rs).ok_or("a table netlink does not read (iptables-legacy)")?;
        let mut plan = NetlinkPlan {
            generation: c.generation,
            chains,
            policies,
            rules: HashMap::new(),
            policy_rules: HashMap::new(),
            uncounted: Vec::new(),
        };
        for t in &rs.tables {
            for ch in &t.chains {
                let id: ChainId = (t.family.nfproto(), t.name.to_string(), ch.name.to_string());
                if !plan.chains.contains(&id) {
                    continue;
                }
                let got = c.rules.get(&id).map_or(0, Vec::len);
                if got != ch.rules.len() {
                    return Err(format!(
                        "{} {}: {} rules in the dump, {got} over netlink",
                        t.name,
                        ch.name,
                        ch.rules.len()
                    ));
                }
            }
        }
        for e in drop_entries(rs) {
            let where_ = || format!("{} {}", e.chain.1, e.chain.2);
            match e.position {
                Some(i) => {
                    let r = &c.rules[&e.chain][i];
                    // The kernel's counter decides: a ruleset read over netlink
                    // carries the rules' text without their counters.
                    match r.count {
                        Some(_) => {
                            plan.rules
                                .insert((e.chain.clone(), r.handle), (e.key, e.rule));
                        }
                        None if e.counted.is_none() => plan.uncounted.push(e.uncounted),
                        None => {
                            return Err(format!(
                                "{}: rule {} has a counter in the dump, none over netlink",
                                where_(),
                                i + 1
                            ));
                        }
                    }
                }
                None => match (c.policies.get(&e.chain), e.counted) {
                    (Some(Some(_)), _) => {
                        plan.policy_rules.insert(e.chain, (e.key, e.rule));
                    }
                    (Some(None), None) => plan.uncounted.push(e.uncounted),
                    (Some(None), Some(_)) => {
                        return Err(format!(
                            "{}: its policy has no counters over netlink",
                            where_()
                        ));
                    }
                    (None, _) => return Err(format!("{}: not found over netlink", where_())),
                },
            }
        }
        Ok(plan)
    }

    /// The generation the plan was made at.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// The chains whose rules to read, and the chains whose policy to read.
    pub fn chains(&self) -> (&[ChainId], &[ChainId]) {
        (&self.chains, &self.policies)
    }

    /// The snapshot that `c` (the plan's chains read over netlink) gives; an error
    /// when `c` was read at another generation (the ruleset changed: read in full).
    pub fn snapshot(&self, c: &Counters) -> Result<CounterSnapshot, String> {
        if c.generation != self.generation {
            return Err(format!(
                "the ruleset changed (generation {} -> {})",
                self.generation, c.generation
            ));
        }
        let mut s = CounterSnapshot {
            uncounted: self.uncounted.clone(),
            ..CounterSnapshot::default()
        };
        let mut put = |key: &Key, rule: &DropRule, n: Count| {
            let mut r = rule.clone();
            r.packets = n.packets;
            s.counters.insert(key.clone(), (n.packets, r));
        };
        for (chain, rules) in &c.rules {
            for r in rules {
                if let (Some((key, rule)), Some(n)) =
                    (self.rules.get(&(chain.clone(), r.handle)), r.count)
                {
                    put(key, rule, n);
                }
            }
        }
        for (chain, n) in &c.policies {
            if let (Some((key, rule)), Some(n)) = (self.policy_rules.get(chain), n) {
                put(key, rule, *n);
            }
        }
        if s.counters.len() != self.rules.len() + self.policy_rules.len() {
            return Err("a rule of the plan is missing from the netlink read".into());
        }
        Ok(s)
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

    /// nft prints a `counter`'s values inside the rule: two reads of the same rule are
    /// one rule whose count moved, so a second rule that did not move is no candidate.
    #[test]
    fn an_nft_rule_is_the_same_rule_when_its_counter_moves() {
        let nft = |a: u64, b: u64| {
            plumb_ruleset::nft::parse_text(&format!(
                "table inet fw {{\n chain input {{\n  type filter hook input priority 0; policy accept;\n  tcp dport 22 counter packets {a} bytes 60 drop\n  udp dport 9 counter packets {b} bytes 29 drop\n }}\n}}\n"
            ))
        };
        let m = attribute(
            &CounterSnapshot::of(&nft(7, 3)),
            &CounterSnapshot::of(&nft(7, 5)),
        );
        let RuleMatch::Found { rule } = m else {
            panic!("{m:?}")
        };
        assert_eq!(rule.packets, 2);
        assert_eq!(rule.text, "udp dport 9 counter drop");
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
