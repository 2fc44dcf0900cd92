//! Which table a listing shows: the name of the bundle file it came from, a separator
//! line before it (`# Table: nat`, the command that printed it), or its built-in chains.

use crate::model::{Family, Table};

/// What a bundle's file name says about the listing inside: sosreport
/// (`iptables_-t_nat_-nvL`, `ip6tables_-vnxL`) and Rancher's collector
/// (`iptables`, `iptablesnat`, `iptablesmangle`, `ip6tables`).
/// `None` for names that are not listings (`iptables-save`, Rancher's `iptablessave`).
pub fn source_of_file_name(file_name: &str) -> Option<(Family, &str)> {
    let (family, rest) = if let Some(r) = file_name.strip_prefix("ip6tables") {
        (Family::Ip6, r)
    } else if let Some(r) = file_name.strip_prefix("iptables") {
        (Family::Ip, r)
    } else {
        return None;
    };
    if rest.contains("save") || rest.starts_with("-restore") {
        return None;
    }
    // Rancher: "iptables" + table name.
    if let Some(t) = TABLES.iter().find(|t| rest == **t) {
        return Some((family, t));
    }
    if rest.is_empty() {
        return Some((family, "filter"));
    }
    // sosreport: the command with spaces turned into underscores.
    let words: Vec<&str> = rest.split('_').filter(|w| !w.is_empty()).collect();
    if !words.iter().any(|w| is_list_flag(w)) {
        return None;
    }
    let table = words
        .windows(2)
        .find(|w| w[0] == "-t" || w[0] == "--table")
        .map(|w| w[1])
        .and_then(|t| TABLES.iter().find(|k| **k == t).copied())
        .unwrap_or("filter");
    Some((family, table))
}

pub(super) const TABLES: &[&str] = &["filter", "nat", "mangle", "raw", "security"];

pub(super) fn is_list_flag(w: &str) -> bool {
    w == "--list" || (w.starts_with('-') && !w.starts_with("--") && w.contains('L'))
}

/// A separator line naming the table of what follows: `# Table: nat`, `Table: nat`,
/// `*nat`, `=== mangle ===`, a bare `nat` (from `echo nat`), or the command itself
/// (`# iptables -t nat -nvL`, `$ sudo ip6tables -vnxL`).
pub(super) fn table_separator(trimmed: &str) -> Option<&str> {
    let s = trimmed
        .trim_start_matches(|c: char| "#=-*>$ \t".contains(c))
        .trim_end_matches(|c: char| "#=-*: \t".contains(c));
    if let Some(t) = TABLES.iter().find(|t| s == **t) {
        return Some(t);
    }
    let mut w = s.split_whitespace().peekable();
    let first = w.next()?;
    if first.eq_ignore_ascii_case("table") || first.eq_ignore_ascii_case("table:") {
        let name = w
            .next()?
            .trim_matches(|c| c == '\'' || c == '"' || c == ':');
        let name = name.strip_prefix(':').unwrap_or(name);
        return TABLES.iter().find(|t| name == **t).copied();
    }
    if let Some(name) = first
        .strip_prefix("Table:")
        .or_else(|| first.strip_prefix("table:"))
        .filter(|n| !n.is_empty())
    {
        return TABLES.iter().find(|t| name == **t).copied();
    }
    // A command line.
    let mut cmd = first;
    if cmd == "sudo" {
        cmd = w.next()?;
    }
    let cmd = cmd.rsplit('/').next().unwrap_or(cmd);
    if !matches!(
        cmd,
        "iptables"
            | "ip6tables"
            | "iptables-legacy"
            | "ip6tables-legacy"
            | "iptables-nft"
            | "ip6tables-nft"
    ) {
        return None;
    }
    let args: Vec<&str> = w.collect();
    if !args.iter().any(|a| is_list_flag(a)) {
        return None;
    }
    let mut table = "filter";
    for (i, a) in args.iter().enumerate() {
        let v = if *a == "-t" || *a == "--table" {
            args.get(i + 1).copied()
        } else {
            a.strip_prefix("--table=")
        };
        if let Some(v) = v {
            table = TABLES.iter().find(|t| v == **t).copied()?;
        }
    }
    Some(table)
}

/// The table a listing shows, from the built-in chains it lists.
pub(super) fn guess_table(table: &Table) -> Option<&'static str> {
    let mut builtins: Vec<&str> = table
        .chains
        .iter()
        .filter(|c| c.is_builtin())
        .map(|c| &*c.name)
        .collect();
    builtins.sort_unstable();
    Some(match builtins.as_slice() {
        ["FORWARD", "INPUT", "OUTPUT"] => "filter",
        ["INPUT", "OUTPUT", "POSTROUTING", "PREROUTING"] => "nat",
        ["FORWARD", "INPUT", "OUTPUT", "POSTROUTING", "PREROUTING"] => "mangle",
        ["OUTPUT", "PREROUTING"] => "raw",
        _ => return None,
    })
}

/// The table of a listing without all the built-in chains of one (`iptables -t nat -L
/// KUBE-SERVICES`): from what its rules jump to and its chains' names (see
/// [`crate::iptables::tables`]). `None` when nothing points to a table.
pub(super) fn infer_table(table: &Table) -> Option<&'static str> {
    use crate::iptables::tables::Evidence;
    use crate::model::RuleBody;
    let mut ev = Evidence::default();
    for c in &table.chains {
        ev.add_name(&c.name);
        for r in &c.rules {
            if let RuleBody::Approximate(l) = &r.body {
                ev.add_rule(&c.name, l.target.as_deref());
            }
        }
    }
    let (t, why) = ev.decide();
    let decided =
        ev.allowed.single().is_some() || why.starts_with("names") || !ev.allowed.contains("filter");
    decided.then_some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separators() {
        assert_eq!(table_separator("# Table: nat"), Some("nat"));
        assert_eq!(table_separator("Table: mangle"), Some("mangle"));
        assert_eq!(table_separator("*raw"), Some("raw"));
        assert_eq!(table_separator("=== nat ==="), Some("nat"));
        assert_eq!(table_separator("# iptables -t nat -nvL"), Some("nat"));
        assert_eq!(table_separator("$ sudo ip6tables -vnxL"), Some("filter"));
        assert_eq!(table_separator("iptables --table=raw -L -n"), Some("raw"));
        assert_eq!(table_separator("iptables -t nat -A FOO"), None);
        assert_eq!(table_separator("ACCEPT all"), None);
    }

    #[test]
    fn file_names() {
        assert_eq!(
            source_of_file_name("iptables_-t_nat_-nvL"),
            Some((Family::Ip, "nat"))
        );
        assert_eq!(
            source_of_file_name("ip6tables_-vnxL"),
            Some((Family::Ip6, "filter"))
        );
        assert_eq!(
            source_of_file_name("iptablesmangle"),
            Some((Family::Ip, "mangle"))
        );
        assert_eq!(
            source_of_file_name("iptables"),
            Some((Family::Ip, "filter"))
        );
        assert_eq!(source_of_file_name("iptablessave"), None);
        assert_eq!(source_of_file_name("iptables-save"), None);
        assert_eq!(source_of_file_name("nft_list_ruleset"), None);
    }
}
