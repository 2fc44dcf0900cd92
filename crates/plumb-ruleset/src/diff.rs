//! Semantic diff of two rulesets: tables and chains added or removed, policy
//! changes, rules added, removed or moved — ignoring counters and handles.
//!
//! Rules are compared by identity text (canonical iptables-save form for xtables
//! rules, the statement text without counters for nft), as multisets per chain,
//! so a 10k-rule chain diffs in O(n log n): no quadratic edit distance. A rule
//! present on both sides whose order relative to the others changed is "moved"
//! (common rules outside a longest increasing subsequence of positions).

use crate::iptables::canonical::write_spec;
use crate::model::{Backend, Chain, Family, Rule, Ruleset, Table};
use serde::Serialize;
use std::collections::HashMap;

/// One difference.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Change {
    /// A table only `new` has.
    TableAdded {
        /// The table's label: `nat` (iptables IPv4), `ip6 nat` (ip6tables), `inet kube-proxy`
        /// (native nft).
        table: String,
    },
    /// A table only `old` has.
    TableRemoved {
        /// The table's label, as in [`Change::TableAdded`].
        table: String,
    },
    /// A chain only `new` has (in a table both sides have).
    ChainAdded {
        /// The table's label, as in [`Change::TableAdded`].
        table: String,
        /// Name of the added chain.
        chain: String,
        /// How many rules the added chain holds.
        rules: usize,
    },
    /// A chain only `old` has (in a table both sides have).
    ChainRemoved {
        /// The table's label, as in [`Change::TableAdded`].
        table: String,
        /// Name of the removed chain.
        chain: String,
        /// How many rules the removed chain held.
        rules: usize,
    },
    /// A chain's default verdict differs (or it became, or stopped being, a base chain).
    PolicyChanged {
        /// The table's label, as in [`Change::TableAdded`].
        table: String,
        /// Name of the chain.
        chain: String,
        /// The old policy in iptables spelling (`ACCEPT`, `DROP`), `-` for none.
        from: String,
        /// The new policy, spelled as `from`.
        to: String,
    },
    /// A rule only `new` has (counting duplicates: a third copy where `old` had two is added).
    RuleAdded {
        /// The table's label, as in [`Change::TableAdded`].
        table: String,
        /// Name of the chain.
        chain: String,
        /// 1-based position of the rule in `new`'s chain.
        position: u32,
        /// The rule's identity text ([`rule_identity`]: canonical, without counters or handle).
        rule: String,
    },
    /// A rule only `old` has.
    RuleRemoved {
        /// The table's label, as in [`Change::TableAdded`].
        table: String,
        /// Name of the chain.
        chain: String,
        /// 1-based position the rule had in `old`'s chain.
        position: u32,
        /// The rule's identity text ([`rule_identity`]).
        rule: String,
    },
    /// A rule both sides have whose order relative to the other common rules changed.
    RuleMoved {
        /// The table's label, as in [`Change::TableAdded`].
        table: String,
        /// Name of the chain.
        chain: String,
        /// 1-based position in `old`'s chain.
        from: u32,
        /// 1-based position in `new`'s chain.
        to: u32,
        /// The rule's identity text ([`rule_identity`]).
        rule: String,
    },
}

impl Change {
    /// The label of the table the change is in (`nat`, `ip6 nat`, `inet kube-proxy`).
    pub fn table(&self) -> &str {
        match self {
            Change::TableAdded { table }
            | Change::TableRemoved { table }
            | Change::ChainAdded { table, .. }
            | Change::ChainRemoved { table, .. }
            | Change::PolicyChanged { table, .. }
            | Change::RuleAdded { table, .. }
            | Change::RuleRemoved { table, .. }
            | Change::RuleMoved { table, .. } => table,
        }
    }
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Change::TableAdded { table } => write!(f, "+ table {table}"),
            Change::TableRemoved { table } => write!(f, "- table {table}"),
            Change::ChainAdded {
                table,
                chain,
                rules,
            } => write!(f, "+ chain {table} {chain} ({rules} rules)"),
            Change::ChainRemoved {
                table,
                chain,
                rules,
            } => write!(f, "- chain {table} {chain} ({rules} rules)"),
            Change::PolicyChanged {
                table,
                chain,
                from,
                to,
            } => write!(f, "~ policy {table} {chain}: {from} -> {to}"),
            Change::RuleAdded {
                table,
                chain,
                position,
                rule,
            } => write!(f, "+ {table} {chain} #{position}: {rule}"),
            Change::RuleRemoved {
                table,
                chain,
                position,
                rule,
            } => write!(f, "- {table} {chain} #{position}: {rule}"),
            Change::RuleMoved {
                table,
                chain,
                from,
                to,
                rule,
            } => {
                write!(f, "~ {table} {chain} moved #{from} -> #{to}: {rule}")
            }
        }
    }
}

/// The differences from `old` to `new`, in table and chain order.
pub fn diff(old: &Ruleset, new: &Ruleset) -> Vec<Change> {
    let mut out = Vec::new();
    let (old_keys, new_keys) = (table_keys(old), table_keys(new));
    let old_tables: HashMap<_, &Table> = old_keys.iter().cloned().zip(&old.tables).collect();
    let new_set: std::collections::HashSet<_> = new_keys.iter().collect();
    for (k, t) in old_keys.iter().zip(&old.tables) {
        if !new_set.contains(k) {
            out.push(Change::TableRemoved {
                table: table_label(t),
            });
        }
    }
    for (k, t) in new_keys.iter().zip(&new.tables) {
        match old_tables.get(k) {
            None => out.push(Change::TableAdded {
                table: table_label(t),
            }),
            Some(o) => diff_table(o, t, &mut out),
        }
    }
    out
}

/// Identity of each table: family, native-nft or not, name, and which occurrence of that
/// name it is (a text may hold `*nat` twice; the n-th pairs with the n-th).
fn table_keys(rs: &Ruleset) -> Vec<(Family, bool, &str, usize)> {
    let mut seen: HashMap<(Family, bool, &str), usize> = HashMap::new();
    rs.tables
        .iter()
        .map(|t| {
            let k = (t.family, t.backend == Backend::Nftables, &*t.name);
            let n = seen.entry(k).or_default();
            *n += 1;
            (k.0, k.1, k.2, *n - 1)
        })
        .collect()
}

fn table_label(t: &Table) -> String {
    match (t.backend, t.family) {
        (Backend::Nftables, f) => format!("{f} {}", t.name),
        (_, Family::Ip6) => format!("ip6 {}", t.name),
        _ => t.name.to_string(),
    }
}

fn diff_table(old: &Table, new: &Table, out: &mut Vec<Change>) {
    let label = table_label(new);
    let old_chains: HashMap<&str, &Chain> = old.chains.iter().map(|c| (&*c.name, c)).collect();
    let new_chains: HashMap<&str, &Chain> = new.chains.iter().map(|c| (&*c.name, c)).collect();
    for c in &old.chains {
        if !new_chains.contains_key(&*c.name) {
            out.push(Change::ChainRemoved {
                table: label.clone(),
                chain: c.name.to_string(),
                rules: c.rules.len(),
            });
        }
    }
    for c in &new.chains {
        let Some(o) = old_chains.get(&*c.name) else {
            out.push(Change::ChainAdded {
                table: label.clone(),
                chain: c.name.to_string(),
                rules: c.rules.len(),
            });
            continue;
        };
        let (op, np) = (o.policy(), c.policy());
        if op != np {
            let show = |p: Option<&crate::Policy>| {
                p.map(|p| p.as_iptables().to_string())
                    .unwrap_or_else(|| "-".into())
            };
            out.push(Change::PolicyChanged {
                table: label.clone(),
                chain: c.name.to_string(),
                from: show(op),
                to: show(np),
            });
        }
        let view = old.nft_view || new.nft_view;
        diff_rules(&label, o, c, old.family, view, out);
    }
}

/// Identity of a rule for diffing: canonical text without counters.
pub fn rule_identity(rule: &Rule, family: Family) -> String {
    match rule.xt() {
        Some(x) => {
            let mut s = String::with_capacity(rule.text.len());
            write_spec(&mut s, &x, family);
            s.trim_start().to_string()
        }
        None => strip_nft_noise(&rule.text),
    }
}

/// Drops `counter packets N bytes M` and `# handle N` from nft rule text.
fn strip_nft_noise(text: &str) -> String {
    let text = text.split(" # handle ").next().unwrap_or(text);
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut out: Vec<&str> = Vec::with_capacity(words.len());
    let mut i = 0;
    while i < words.len() {
        if words[i] == "counter"
            && words.get(i + 1) == Some(&"packets")
            && words.get(i + 3) == Some(&"bytes")
        {
            out.push("counter");
            i += 5;
            continue;
        }
        out.push(words[i]);
        i += 1;
    }
    out.join(" ")
}

fn diff_rules(
    table: &str,
    old: &Chain,
    new: &Chain,
    family: Family,
    nft_view: bool,
    out: &mut Vec<Change>,
) {
    let old_ids: Vec<String> = old.rules.iter().map(|r| rule_identity(r, family)).collect();
    let new_ids: Vec<String> = new.rules.iter().map(|r| rule_identity(r, family)).collect();
    if old_ids == new_ids {
        return;
    }
    // An nft listing of an iptables-nft table does not show comments, nor the options
    // of extensions nft prints by name only: compare what both views show.
    let (old_keys, new_keys) = if nft_view {
        (
            old_ids.iter().map(|i| view_segments(i).join(" ")).collect(),
            new_ids.iter().map(|i| view_segments(i).join(" ")).collect(),
        )
    } else {
        (old_ids.clone(), new_ids.clone())
    };
    // Pair equal rules in order of appearance (duplicates pair up one to one).
    let mut available: HashMap<&str, std::collections::VecDeque<usize>> = HashMap::new();
    for (i, id) in new_keys.iter().enumerate() {
        available.entry(id).or_default().push_back(i);
    }
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    let mut unpaired_old = Vec::new();
    for (i, id) in old_keys.iter().enumerate() {
        match available.get_mut(id.as_str()).and_then(|q| q.pop_front()) {
            Some(j) => pairs.push((i, j)),
            None => unpaired_old.push(i),
        }
    }
    if nft_view {
        // A rule with an extension shown by name only pairs with a rule that has that
        // extension with any options (in order of appearance).
        let mut taken: std::collections::HashSet<usize> = pairs.iter().map(|&(_, j)| j).collect();
        let old_segs: Vec<Vec<String>> = old_ids.iter().map(|i| view_segments(i)).collect();
        let new_segs: Vec<Vec<String>> = new_ids.iter().map(|i| view_segments(i)).collect();
        unpaired_old.retain(|&i| {
            let found = (0..new_ids.len()).find(|j| {
                !taken.contains(j)
                    && (segments_agree(&old_segs[i], &new_segs[*j])
                        || segments_agree(&new_segs[*j], &old_segs[i]))
            });
            match found {
                Some(j) => {
                    taken.insert(j);
                    pairs.push((i, j));
                    false
                }
                None => true,
            }
        });
        pairs.sort_unstable();
    }
    for i in unpaired_old {
        out.push(Change::RuleRemoved {
            table: table.into(),
            chain: new.name.to_string(),
            position: i as u32 + 1,
            rule: old_ids[i].clone(),
        });
    }
    let paired_new: std::collections::HashSet<usize> = pairs.iter().map(|&(_, j)| j).collect();
    for (j, id) in new_ids.iter().enumerate() {
        if !paired_new.contains(&j) {
            out.push(Change::RuleAdded {
                table: table.into(),
                chain: new.name.to_string(),
                position: j as u32 + 1,
                rule: id.clone(),
            });
        }
    }
    let keep = longest_increasing(&pairs.iter().map(|&(_, j)| j).collect::<Vec<_>>());
    for (k, &(i, j)) in pairs.iter().enumerate() {
        if !keep[k] {
            out.push(Change::RuleMoved {
                table: table.into(),
                chain: new.name.to_string(),
                from: i as u32 + 1,
                to: j as u32 + 1,
                rule: old_ids[i].clone(),
            });
        }
    }
}

/// A canonical rule split into its generic part, its matches (`-m NAME ...`) and its
/// target (`-j NAME ...`), as far as an nft listing of an iptables-nft table shows them:
/// without comments, `-m state --state` as `-m conntrack --ctstate` (nft prints both
/// as `ct state`), conntrack state lists sorted.
fn view_segments(id: &str) -> Vec<String> {
    let mut segs: Vec<String> = Vec::new();
    let mut cur = String::new();
    let mut words = Vec::new();
    if crate::model::xt::words::split(id, 0, &mut words).is_err() {
        return vec![id.to_string()];
    }
    for w in &words {
        let t = w.raw(id);
        if matches!(t, "-m" | "-j" | "-g") && !cur.is_empty() {
            segs.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push(' ');
        }
        cur.push_str(t);
    }
    if !cur.is_empty() {
        segs.push(cur);
    }
    // `-m tcp` without options (kube-proxy's DNAT rules) prints nothing in nft.
    segs.retain(|s| {
        !s.starts_with("-m comment ") && !matches!(s.as_str(), "-m tcp" | "-m udp" | "-m sctp")
    });
    for s in &mut segs {
        // One port or range: nft prints `-m multiport --dports 1:2` as `tcp dport 1-2`.
        for (from, to) in [
            ("-m multiport --dports ", "--dport "),
            ("-m multiport ! --dports ", "! --dport "),
            ("-m multiport --sports ", "--sport "),
            ("-m multiport ! --sports ", "! --sport "),
            ("-m tcp ", ""),
            ("-m udp ", ""),
            ("-m sctp ", ""),
        ] {
            if let Some(rest) = s.strip_prefix(from)
                && !rest.contains(',')
            {
                *s = format!("-m l4 {to}{rest}");
                break;
            }
        }
        let body = s
            .strip_prefix("-m state ")
            .map(|r| r.replacen("--state ", "--ctstate ", 1));
        if let Some(b) = body {
            *s = format!("-m conntrack {b}");
        }
        if s.starts_with("-m conntrack ") {
            let words: Vec<String> = s
                .split(' ')
                .map(|w| {
                    if w.chars().all(|c| c.is_ascii_uppercase() || c == ',') && w.contains(',') {
                        let mut v: Vec<&str> = w.split(',').collect();
                        v.sort_unstable();
                        v.join(",")
                    } else {
                        w.to_string()
                    }
                })
                .collect();
            *s = words.join(" ");
        }
    }
    // Matches are a conjunction; nft prints some translations in another order than
    // iptables lists the matches (`skuid 0 ct state new` for conntrack, then owner).
    let first_match = segs
        .iter()
        .position(|s| s.starts_with("-m "))
        .unwrap_or(segs.len());
    let target = segs
        .iter()
        .position(|s| s.starts_with("-j ") || s.starts_with("-g "))
        .unwrap_or(segs.len())
        .max(first_match);
    segs[first_match..target].sort_by_key(|s| port_module(s.split(' ').nth(1).unwrap_or("")));
    segs
}

/// A match module's name, with the port matches nft prints alike (`tcp`, `udp`, `sctp`,
/// `multiport` and their normal form `l4`) as one.
fn port_module(m: &str) -> String {
    match m {
        "tcp" | "udp" | "sctp" | "multiport" | "l4" => "l4".into(),
        m => m.to_string(),
    }
}

/// Whether `view`'s segments equal `other`'s, where a segment whose options the nft
/// view did not show (`-m NAME` + [`crate::nft::iptables_nft::NOT_SHOWN`]) stands for
/// that extension with any options, or for nothing (a `-m tcp` without options is not
/// a segment of the other side's canonical form).
fn segments_agree(view: &[String], other: &[String]) -> bool {
    use crate::nft::iptables_nft::NOT_SHOWN;
    match view.split_first() {
        None => other.is_empty(),
        Some((v, rest)) if v.ends_with(NOT_SHOWN) => {
            let same_extension = |o: &String| {
                let (mut vw, mut ow) = (v.split(' '), o.split(' '));
                vw.next() == ow.next()
                    && port_module(vw.next().unwrap_or("")) == port_module(ow.next().unwrap_or(""))
            };
            other
                .split_first()
                .is_some_and(|(o, orest)| same_extension(o) && segments_agree(rest, orest))
                || segments_agree(rest, other)
        }
        Some((v, rest)) => other
            .split_first()
            .is_some_and(|(o, orest)| v == o && segments_agree(rest, orest)),
    }
}

/// Marks the members of one longest strictly increasing subsequence (O(n log n)).
fn longest_increasing(seq: &[usize]) -> Vec<bool> {
    let mut tails: Vec<usize> = Vec::new(); // index into seq of the tail of each length
    let mut prev: Vec<Option<usize>> = vec![None; seq.len()];
    for (i, &v) in seq.iter().enumerate() {
        let pos = tails.partition_point(|&t| seq[t] < v);
        if pos > 0 {
            prev[i] = Some(tails[pos - 1]);
        }
        if pos == tails.len() {
            tails.push(i);
        } else {
            tails[pos] = i;
        }
    }
    let mut keep = vec![false; seq.len()];
    let mut cur = tails.last().copied();
    while let Some(i) = cur {
        keep[i] = true;
        cur = prev[i];
    }
    keep
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iptables::save::{IptablesInput, parse};

    fn rs(rules: &str, policy: &str) -> Ruleset {
        parse(
            &format!(
                "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD {policy} [5:6]\n:X - [0:0]\n{rules}COMMIT\n"
            ),
            &IptablesInput::default(),
        )
    }

    /// Found by cargo-fuzz: a text holding `*nat` twice differed from itself.
    #[test]
    fn a_table_named_twice_pairs_by_occurrence() {
        let text = "*nat\n:POSTROUTING ACCEPT [0:0]\nCOMMIT\n*nat\n:X - [0:0]\nCOMMIT\n";
        let once = parse(text, &IptablesInput::default());
        assert!(
            once.diagnostics
                .iter()
                .any(|d| d.message.contains("table 'nat' appears again")),
            "{:?}",
            once.diagnostics
        );
        assert_eq!(diff(&once, &once), vec![]);
        let other = parse(
            "*nat\n:POSTROUTING ACCEPT [0:0]\nCOMMIT\n",
            &IptablesInput::default(),
        );
        assert_eq!(
            diff(&once, &other),
            vec![Change::TableRemoved {
                table: "nat".into()
            }]
        );
    }

    #[test]
    fn identical_rulesets_with_other_counters_have_no_changes() {
        let a = rs("[1:2] -A X -j ACCEPT\n", "ACCEPT");
        let b = rs("[9:9] -A X -j ACCEPT\n", "ACCEPT");
        assert!(diff(&a, &b).is_empty());
    }

    #[test]
    fn adds_removes_moves_and_policy() {
        let a = rs(
            "-A X -s 1.1.1.1/32 -j ACCEPT\n-A X -s 2.2.2.2/32 -j ACCEPT\n-A X -s 3.3.3.3/32 -j ACCEPT\n",
            "ACCEPT",
        );
        let b = rs(
            "-A X -s 3.3.3.3/32 -j ACCEPT\n-A X -s 1.1.1.1/32 -j ACCEPT\n-A X -s 4.4.4.4/32 -j DROP\n",
            "DROP",
        );
        let changes = diff(&a, &b);
        let kinds: Vec<String> = changes.iter().map(|c| c.to_string()).collect();
        assert!(
            kinds.contains(&"~ policy filter FORWARD: ACCEPT -> DROP".to_string()),
            "{kinds:?}"
        );
        assert!(
            kinds.contains(&"- filter X #2: -s 2.2.2.2/32 -j ACCEPT".to_string()),
            "{kinds:?}"
        );
        assert!(
            kinds.contains(&"+ filter X #3: -s 4.4.4.4/32 -j DROP".to_string()),
            "{kinds:?}"
        );
        assert_eq!(
            changes
                .iter()
                .filter(|c| matches!(c, Change::RuleMoved { .. }))
                .count(),
            1,
            "{kinds:?}"
        );
    }

    #[test]
    fn chains_added_and_removed() {
        let a = parse(
            "*nat\n:KUBE-SVC-A - [0:0]\n-A KUBE-SVC-A -j ACCEPT\nCOMMIT\n",
            &IptablesInput::default(),
        );
        let b = parse(
            "*nat\n:KUBE-SVC-B - [0:0]\nCOMMIT\n",
            &IptablesInput::default(),
        );
        let c = diff(&a, &b);
        assert_eq!(
            c[0],
            Change::ChainRemoved {
                table: "nat".into(),
                chain: "KUBE-SVC-A".into(),
                rules: 1
            }
        );
        assert_eq!(
            c[1],
            Change::ChainAdded {
                table: "nat".into(),
                chain: "KUBE-SVC-B".into(),
                rules: 0
            }
        );
    }

    #[test]
    fn lis_keeps_longest_order() {
        assert_eq!(longest_increasing(&[2, 0, 1]), vec![false, true, true]);
        assert_eq!(longest_increasing(&[]), Vec::<bool>::new());
    }
}
