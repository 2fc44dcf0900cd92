//! Which table a rule belongs to when the input does not say: `iptables -t nat -S` read
//! without `--table`, `iptables-save | grep X` captures (no `*table`/`COMMIT` lines, the
//! tables' lines one after another), single-chain listings (`iptables -t nat -L CHAIN`).
//!
//! Two kinds of evidence, used in this order:
//! - **What the kernel allows** ([`TableSet`]): a built-in chain exists only in some
//!   tables (`POSTROUTING`: nat, mangle), and some targets are registered for one table
//!   only (`DNAT`/`SNAT`/`MASQUERADE`/`REDIRECT`: nat; `REJECT`: filter; `CT`/`NOTRACK`:
//!   raw; `TPROXY`, `TOS`, `TTL`: mangle; `DROP` is refused in nat). A table outside
//!   this set is impossible.
//! - **Conventions** ([`vote`]): the chains kube-proxy, CNI plugins and Docker create in
//!   one table (`KUBE-SVC-*`, `KUBE-MARK-MASQ`, `CNI-HOSTPORT-DNAT`: nat;
//!   `KUBE-FORWARD`, `DOCKER-USER`: filter; Cilium's `*_nat`/`*_mangle`/`*_raw`). They
//!   choose among the possible tables.
//!
//! With neither, the table is `filter`, what `iptables` itself assumes without `-t`.
//! [`sections`] splits a headerless capture into runs of lines of one table each: in
//! `iptables-save` and `-S` output a table's chains are declared before its rules and a
//! chain's rules are listed together, so a declaration after a rule, or a second run of
//! rules of the same chain, starts the next table.

use crate::model::xt::words::{Word, split};

/// The tables iptables knows, in the order ties are broken (filter first: what
/// `iptables` uses without `-t`).
pub const TABLES: [&str; 5] = ["filter", "nat", "mangle", "raw", "security"];

/// A set of tables (bit i = `TABLES[i]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableSet(u8);

impl TableSet {
    /// Every table.
    pub const ALL: TableSet = TableSet(0b1_1111);

    fn of(names: &[&str]) -> TableSet {
        TableSet(
            names
                .iter()
                .filter_map(|n| TABLES.iter().position(|t| t == n))
                .fold(0, |acc, i| acc | 1 << i),
        )
    }

    /// Tables in both sets.
    pub fn and(self, other: TableSet) -> TableSet {
        TableSet(self.0 & other.0)
    }

    /// Whether the set holds no table.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether the set holds `table` (`nat`, `filter`, `mangle`, `raw`, `security`).
    pub fn contains(self, table: &str) -> bool {
        TABLES
            .iter()
            .position(|t| *t == table)
            .is_some_and(|i| self.0 & (1 << i) != 0)
    }

    /// The only table in the set, if there is exactly one.
    pub fn single(self) -> Option<&'static str> {
        (self.0.count_ones() == 1).then(|| TABLES[self.0.trailing_zeros() as usize])
    }

    fn names(self) -> impl Iterator<Item = &'static str> {
        TABLES
            .iter()
            .enumerate()
            .filter(move |(i, _)| self.0 & (1 << i) != 0)
            .map(|(_, t)| *t)
    }
}

/// The tables that have built-in chain `chain` (`None`: not a built-in chain name).
pub fn builtin_chain_tables(chain: &str) -> Option<TableSet> {
    Some(TableSet::of(match chain {
        "PREROUTING" => &["nat", "mangle", "raw"],
        "INPUT" => &["filter", "nat", "mangle", "security"],
        "FORWARD" => &["filter", "mangle", "security"],
        "OUTPUT" => &TABLES,
        "POSTROUTING" => &["nat", "mangle"],
        _ => return None,
    }))
}

/// The tables in which the kernel accepts target `target` (`None`: any table, or a
/// chain). From the `.table` of each target's registration in the kernel
/// (`xt_nat`, `ipt_REJECT`, `xt_CT`, `xt_TPROXY`, ...) and iptables refusing DROP in nat.
pub fn target_tables(target: &str) -> Option<TableSet> {
    Some(TableSet::of(match target {
        "DNAT" | "SNAT" | "MASQUERADE" | "REDIRECT" | "NETMAP" => &["nat"],
        "REJECT" => &["filter"],
        "CT" | "NOTRACK" => &["raw"],
        "TPROXY" | "TOS" | "TTL" | "HL" | "DSCP" | "ECN" | "CHECKSUM" | "TCPOPTSTRIP"
        | "CLASSIFY" => &["mangle"],
        "SECMARK" | "CONNSECMARK" => &["mangle", "security"],
        "DROP" => &["filter", "mangle", "raw", "security"],
        _ => return None,
    }))
}

/// The table a chain of this name conventionally lives in (a vote, not a rule: the
/// chain's owner creates it there). `KUBE-SERVICES`, `KUBE-NODEPORTS`, `KUBE-FIREWALL`
/// and `DOCKER` exist in two tables and give no vote.
pub fn vote(chain: &str) -> Option<&'static str> {
    const NAT_PREFIXES: [&str; 9] = [
        "KUBE-SVC-",
        "KUBE-SEP-",
        "KUBE-EXT-",
        "KUBE-FW-",
        "KUBE-XLB-",
        "KUBE-SVL-",
        "CNI-DN-",
        "AWS-SNAT-CHAIN",
        "cali-nat-",
    ];
    const NAT: [&str; 12] = [
        "KUBE-MARK-MASQ",
        "KUBE-MARK-DROP",
        "KUBE-POSTROUTING",
        "KUBE-NODE-PORT",
        "KUBE-LOAD-BALANCER",
        "KUBE-LOOP-BACK",
        "CNI-HOSTPORT-DNAT",
        "CNI-HOSTPORT-MASQ",
        "CNI-HOSTPORT-SETMARK",
        "FLANNEL-POSTRTG",
        "ANTREA-POSTROUTING",
        "LIBVIRT_PRT",
    ];
    const FILTER_PREFIXES: [&str; 6] = [
        "DOCKER-ISOLATION",
        "ufw-",
        "ufw6-",
        "WEAVE-NPC",
        "cali-fw-",
        "cali-tw-",
    ];
    const FILTER: [&str; 9] = [
        "KUBE-FORWARD",
        "KUBE-PROXY-FIREWALL",
        "KUBE-EXTERNAL-SERVICES",
        "DOCKER-USER",
        "FLANNEL-FWD",
        "cali-from-wl-dispatch",
        "cali-to-wl-dispatch",
        "LIBVIRT_FWI",
        "LIBVIRT_FWO",
    ];
    if NAT.contains(&chain) || NAT_PREFIXES.iter().any(|p| chain.starts_with(p)) {
        return Some("nat");
    }
    if FILTER.contains(&chain) || FILTER_PREFIXES.iter().any(|p| chain.starts_with(p)) {
        return Some("filter");
    }
    // Cilium names its chains after their table: CILIUM_PRE_nat, CILIUM_OUTPUT_raw.
    ["nat", "mangle", "raw"].into_iter().find(|t| {
        chain
            .strip_suffix(t)
            .is_some_and(|r| r.ends_with('_') && r.len() > 1)
    })
}

/// What one table guess rests on, gathered over the lines of a section.
#[derive(Clone, Debug)]
pub struct Evidence {
    /// Tables every line allows.
    pub allowed: TableSet,
    /// Convention votes per table (`TABLES` order).
    votes: [u32; 5],
    /// The first line that narrowed `allowed`, for the note.
    pub deciding: Option<String>,
}

impl Default for Evidence {
    fn default() -> Self {
        Evidence {
            allowed: TableSet::ALL,
            votes: [0; 5],
            deciding: None,
        }
    }
}

impl Evidence {
    /// Adds what a rule says: the chain it is in (`None` for a declaration only) and
    /// its target (`-j X`). False when the rule contradicts what was gathered so far
    /// (nothing is added then): it belongs to another table.
    pub fn add_rule(&mut self, chain: &str, target: Option<&str>) -> bool {
        let mut allowed = self.allowed;
        let mut why = None;
        if let Some(t) = builtin_chain_tables(chain) {
            allowed = allowed.and(t);
            why = Some(format!("built-in chain {chain}"));
        }
        if let Some(target) = target
            && let Some(t) = target_tables(target)
        {
            let narrowed = allowed.and(t);
            if narrowed != allowed {
                why = Some(format!("target {target}"));
            }
            allowed = narrowed;
        }
        if allowed.is_empty() {
            return false;
        }
        if allowed.single().is_some() && self.allowed.single().is_none() {
            self.deciding = why;
        }
        self.allowed = allowed;
        self.add_name(chain);
        if let Some(target) = target {
            self.add_name(target);
        }
        true
    }

    /// Adds the vote of a chain's name.
    pub fn add_name(&mut self, chain: &str) {
        if let Some(v) = vote(chain)
            && let Some(i) = TABLES.iter().position(|t| *t == v)
        {
            self.votes[i] += 1;
        }
    }

    /// The table: the only one allowed, else the allowed table with most votes (ties:
    /// `TABLES` order), and why.
    pub fn decide(&self) -> (&'static str, String) {
        if let Some(t) = self.allowed.single() {
            let why = self.deciding.clone().unwrap_or_default();
            return (t, why);
        }
        let best = self
            .allowed
            .names()
            .map(|t| {
                let i = TABLES.iter().position(|x| *x == t).unwrap_or(0);
                (self.votes[i], std::cmp::Reverse(i), t)
            })
            .max();
        match best {
            Some((v, _, t)) if v > 0 => (t, format!("names of its chains ({v} vote(s))")),
            _ => {
                let t = if self.allowed.contains("filter") {
                    "filter"
                } else {
                    self.allowed.names().next().unwrap_or("filter")
                };
                (
                    t,
                    "no table-specific chain or target; iptables' default".into(),
                )
            }
        }
    }
}

/// A run of lines of one table in a headerless capture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    /// First line of the run (1-based).
    pub first_line: u32,
    /// The table the run's lines are read in (`nat`, `filter`, ...).
    pub table: &'static str,
    /// Why this table (for the note the reader writes).
    pub why: String,
}

/// One line of `-S` or save syntax, as far as table inference needs it.
enum Line<'a> {
    /// `:NAME POLICY [..]` or `-N NAME` or `-P NAME POLICY`.
    Declare(&'a str),
    /// `-A CHAIN ... -j TARGET`.
    Append(&'a str, Option<&'a str>),
    Other,
}

fn classify<'a>(line: &'a str, words: &mut Vec<Word>) -> Line<'a> {
    let t = line.trim();
    if let Some(rest) = t.strip_prefix(':') {
        return rest
            .split_whitespace()
            .next()
            .map_or(Line::Other, Line::Declare);
    }
    // `[packets:bytes] -A ...`
    let t = match t.strip_prefix('[') {
        Some(r) => r.split_once(']').map_or(t, |(_, r)| r.trim_start()),
        None => t,
    };
    let mut it = t.split_whitespace();
    let (Some(cmd), Some(chain)) = (it.next(), it.next()) else {
        return Line::Other;
    };
    match cmd {
        "-N" | "--new-chain" | "-P" | "--policy" => Line::Declare(chain),
        "-A" | "--append" | "-I" | "--insert" => {
            words.clear();
            let offset = t.as_ptr() as usize - line.as_ptr() as usize;
            let _ = split(line, offset, words);
            let target = words
                .windows(2)
                .find(|w| matches!(w[0].raw(line), "-j" | "--jump" | "-g" | "--goto"))
                .map(|w| w[1].raw(line));
            Line::Append(chain, target)
        }
        _ => Line::Other,
    }
}

/// Splits a headerless `-S` or save-syntax text into runs of one table each and names
/// each run's table. Never empty: a text without rules is one `filter` section.
pub fn sections(text: &str) -> Vec<Section> {
    let mut out = Vec::new();
    let mut words = Vec::new();
    let mut start = 1u32;
    let mut ev = Evidence::default();
    // Chains whose run of rules ended in this section, the chain of the current run.
    let mut ended: Vec<&str> = Vec::new();
    let mut run: Option<&str> = None;
    let mut saw_rule = false;
    let push = |out: &mut Vec<Section>, start: u32, ev: &Evidence| {
        let (table, why) = ev.decide();
        out.push(Section {
            first_line: start,
            table,
            why,
        });
    };
    for (i, line) in text.split('\n').enumerate() {
        let n = i as u32 + 1;
        let (new_section, c, target, is_rule) = match classify(line, &mut words) {
            Line::Declare(c) => (saw_rule, c, None, false),
            Line::Append(c, t) => {
                let again = run != Some(c) && ended.contains(&c);
                (again, c, t, true)
            }
            Line::Other => continue,
        };
        let mut split_here = new_section;
        if !split_here && is_rule {
            let mut trial = ev.clone();
            split_here = !trial.add_rule(c, target);
        }
        if split_here && n > start {
            push(&mut out, start, &ev);
            start = n;
            ev = Evidence::default();
            ended.clear();
            run = None;
            saw_rule = false;
        }
        if is_rule {
            if run != Some(c) {
                if let Some(prev) = run {
                    ended.push(prev);
                }
                run = Some(c);
            }
            saw_rule = true;
            ev.add_rule(c, target);
        } else {
            ev.add_name(c);
            if let Some(t) = builtin_chain_tables(c) {
                ev.allowed = ev.allowed.and(t).max_or(ev.allowed);
            }
        }
    }
    push(&mut out, start, &ev);
    out
}

impl TableSet {
    /// `self`, or `fallback` when `self` is empty.
    fn max_or(self, fallback: TableSet) -> TableSet {
        if self.is_empty() { fallback } else { self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tables(text: &str) -> Vec<(u32, &'static str)> {
        sections(text)
            .into_iter()
            .map(|s| (s.first_line, s.table))
            .collect()
    }

    #[test]
    fn nat_from_targets_and_builtin_chains() {
        assert_eq!(
            tables(
                "-P PREROUTING ACCEPT\n-P INPUT ACCEPT\n-P OUTPUT ACCEPT\n-P POSTROUTING ACCEPT\n-A POSTROUTING -j MASQUERADE\n"
            ),
            vec![(1, "nat")]
        );
        // Only -A lines: POSTROUTING allows nat and mangle; KUBE-MARK-MASQ votes nat.
        assert_eq!(
            tables("-A POSTROUTING -j KUBE-POSTROUTING\n-A KUBE-SERVICES -j KUBE-MARK-MASQ\n"),
            vec![(1, "nat")]
        );
        assert_eq!(
            tables("-P INPUT DROP\n-A INPUT -j ACCEPT\n"),
            vec![(1, "filter")]
        );
    }

    #[test]
    fn kube_services_is_decided_by_its_targets() {
        assert_eq!(
            tables("-A KUBE-SERVICES -d 10.0.0.1/32 -j KUBE-SVC-AAAAAAAAAAAAAAAA\n"),
            vec![(1, "nat")]
        );
        assert_eq!(
            tables(
                "-A KUBE-SERVICES -d 10.0.0.1/32 -p tcp -j REJECT --reject-with icmp-port-unreachable\n"
            ),
            vec![(1, "filter")]
        );
    }

    #[test]
    fn interleaved_grep_capture_splits_per_table() {
        let text = ":CILIUM_POST_nat - [0:0]\n-A POSTROUTING -j CILIUM_POST_nat\n:CILIUM_PRE_mangle - [0:0]\n-A PREROUTING -j CILIUM_PRE_mangle\n-A CILIUM_PRE_mangle -p tcp -j TPROXY --on-port 1\n:CILIUM_INPUT - [0:0]\n-A INPUT -j CILIUM_INPUT\n-A CILIUM_INPUT -j ACCEPT\n:CILIUM_PRE_raw - [0:0]\n-A PREROUTING -j CILIUM_PRE_raw\n-A CILIUM_PRE_raw -j CT --notrack\n";
        assert_eq!(
            tables(text),
            vec![(1, "nat"), (3, "mangle"), (6, "filter"), (9, "raw")]
        );
    }

    #[test]
    fn a_contradicting_target_starts_another_table() {
        // No declarations between the tables (grep removed them).
        let text =
            "-A KUBE-SEP-X -j DNAT --to-destination 10.0.0.1:80\n-A KUBE-SERVICES -j REJECT\n";
        assert_eq!(tables(text), vec![(1, "nat"), (2, "filter")]);
    }

    #[test]
    fn empty_text_is_one_filter_section() {
        assert_eq!(tables(""), vec![(1, "filter")]);
    }
}
