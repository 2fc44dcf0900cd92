//! What the checks look at: a parsed ruleset, where it came from, and how complete it is.
//!
//! `CheckInput` is built once per run (the kube-proxy service map is recovered here, once) and
//! handed to every check. It also turns model locations into quoted [`Evidence`] with the
//! right source name: a file, or the dump command a live table was read with.

pub mod inventory;
pub(crate) mod node;
pub mod shapes;

use inventory::Inventory;
use plumb_findings::Evidence;
use plumb_kubeproxy::recover::{ServiceMap, recover};
use plumb_ruleset::fasthash::FxHasher;
use plumb_ruleset::iptables::TARGET_EXTENSIONS;
use plumb_ruleset::{Backend, Chain, Completeness, Family, Rule, RuleBody, Ruleset, Table};
use std::collections::HashSet;
use std::hash::BuildHasherDefault;

/// Sets and maps keyed by names and rule texts from the input: FxHash (plumb-ruleset's
/// parser hasher, 8 bytes per step) instead of SipHash, whose DoS resistance cost a third
/// of the checks' time on a 100k-rule dump, and of byte-at-a-time FNV, which made
/// `duplicate-rule` (every rule's text hashed) its most expensive check.
pub type FastSet<K> = HashSet<K, BuildHasherDefault<FxHasher>>;
pub use plumb_ruleset::fasthash::FastMap;

/// Every chain reference of one table, computed once and shared by the checks.
pub struct TableRefs<'a> {
    /// Chains declared in the table.
    pub declared: ChainSet<'a>,
    /// Declared chains some rule or verdict-map element references: one bit per chain
    /// of the table, by index (of the first chain of a name). A second [`ChainSet`] took
    /// 0.3 to 0.6 MiB on a 10k-service node's 58k nat chains, held at the peak of
    /// `plumb check`; [`TableRefs::is_referenced`] looks names up in `declared`.
    referenced: Vec<u64>,
    /// Names referenced that the table does not declare.
    referenced_others: FastSet<&'a str>,
    /// (target chain, rule) for every rule that jumps or goes to a chain the table does
    /// not declare, deletes (`-X`) or declares empty: what `dangling-reference` and
    /// `stale-chain` report. Jumps to other chains are in `referenced` only.
    pub rules: Vec<(&'a str, &'a Rule)>,
}

/// The chains a table declares, by name. A chain is held by its index in the table (4
/// bytes: the name is the chain's own). A set of the names took 16 bytes a chain: on a
/// 10k-service node's 58k nat chains, two such sets of a table held 4.4 MiB through
/// `plumb check`.
pub struct ChainSet<'a> {
    chains: &'a [Chain],
    indexes: hashbrown::HashTable<u32>,
}

/// The FxHash of `s`, as [`FastSet`] and [`FastMap`] hash it.
pub(crate) fn fx_hash(s: &str) -> u64 {
    use std::hash::BuildHasher;
    BuildHasherDefault::<FxHasher>::default().hash_one(s)
}

impl<'a> ChainSet<'a> {
    fn hash(name: &str) -> u64 {
        fx_hash(name)
    }

    fn empty(chains: &'a [Chain], capacity: usize) -> ChainSet<'a> {
        ChainSet {
            chains,
            indexes: hashbrown::HashTable::with_capacity(capacity),
        }
    }

    /// The chains of `chains`, by index.
    fn of_chains(chains: &'a [Chain]) -> ChainSet<'a> {
        let mut set = ChainSet::empty(chains, chains.len());
        for i in 0..chains.len() {
            set.insert_index(i);
        }
        set
    }

    /// The index of the first chain named `name`, if the table has one.
    fn index_of(&self, name: &str) -> Option<usize> {
        let chains = self.chains;
        self.indexes
            .find(Self::hash(name), |&j| &*chains[j as usize].name == name)
            .map(|&j| j as usize)
    }

    fn insert_index(&mut self, i: usize) {
        let chains = self.chains;
        let name = &*chains[i].name;
        let h = Self::hash(name);
        if self
            .indexes
            .find(h, |&j| &*chains[j as usize].name == name)
            .is_none()
        {
            // A table holds fewer than 2^32 chains (inputs are under 4 GiB).
            self.indexes
                .insert_unique(h, i as u32, |&j| Self::hash(&chains[j as usize].name));
        }
    }

    /// Whether the set holds `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.index_of(name).is_some()
    }

    /// The number of names in the set.
    pub fn len(&self) -> usize {
        self.indexes.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<'a> TableRefs<'a> {
    fn new(table: &'a Table) -> TableRefs<'a> {
        let declared = ChainSet::of_chains(&table.chains);
        // Every (chain, rule) a rule transfers to, in one walk.
        let references = || {
            table.chains.iter().flat_map(|c| &c.rules).flat_map(|r| {
                let mut out: [Option<&'a str>; 1] = [None];
                let mut more = Vec::new();
                match &r.body {
                    RuleBody::Xt(_) => {
                        // The target the parser recorded: no rule is indexed here.
                        if let Some(t) = r.xt_target() {
                            let name = t.name;
                            // A declared chain is a chain; otherwise a target with options
                            // or a known extension is not (the rest are dangling jumps).
                            // The set is asked last: most targets are plain chain names.
                            let is_chain = t.goto
                                || (!t.has_options && !TARGET_EXTENSIONS.contains(&name))
                                || declared.contains(name);
                            if is_chain {
                                out[0] = Some(name);
                            }
                        }
                    }
                    _ => more = r.chain_references().into_iter().map(|x| x.chain).collect(),
                }
                out.into_iter()
                    .flatten()
                    .chain(more)
                    .map(move |name| (name, r))
            })
        };
        // Kept: the jumps `dangling-reference` and `stale-chain` report, to chains not
        // declared, deleted by the input or empty. Jumps to declared chains with rules
        // (70k on a 10k-service node, 1.6 MiB) are only counted in `referenced`.
        let empty: FastSet<&str> = table
            .chains
            .iter()
            .filter(|c| c.rules.is_empty())
            .map(|c| &*c.name)
            .collect();
        let mut rules = Vec::new();
        let mut referenced = vec![0u64; table.chains.len().div_ceil(64)];
        let mut referenced_others = FastSet::default();
        // Records a reference to `name`; whether the table declares it.
        let mut reference = |name: &'a str| match declared.index_of(name) {
            Some(i) => {
                referenced[i / 64] |= 1 << (i % 64);
                true
            }
            None => {
                referenced_others.insert(name);
                false
            }
        };
        for (name, rule) in references() {
            let keep = !reference(name)
                || empty.contains(name)
                || table.deleted_chains.iter().any(|d| &**d == name);
            if keep {
                rules.push((name, rule));
            }
        }
        for s in &table.sets {
            for x in s.verdict_targets() {
                reference(x.chain);
            }
        }
        TableRefs {
            declared,
            referenced,
            referenced_others,
            rules,
        }
    }

    /// Whether some rule or verdict-map element of the table references chain `name`.
    pub fn is_referenced(&self, name: &str) -> bool {
        match self.declared.index_of(name) {
            Some(i) => self.referenced[i / 64] & (1 << (i % 64)) != 0,
            None => self.referenced_others.contains(name),
        }
    }
}

/// Where the ruleset was read from (names evidence sources).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A file (or `<stdin>`): evidence says `FILE:LINE`.
    File(String),
    /// Read live with the native tools (optionally in a network namespace): evidence names
    /// the dump command of each table's backend and family.
    Live {
        /// The network namespace read (`None`: plumb's own).
        netns: Option<String>,
    },
}

/// Everything a check needs.
pub struct CheckInput<'a> {
    /// The ruleset the checks judge (every table read, all backends and families).
    pub ruleset: &'a Ruleset,
    /// Where it was read from: decides how evidence names its sources.
    pub origin: Origin,
    /// The user said the input is a restore payload (`--partial`).
    pub partial_flag: bool,
    /// kube-proxy's service maps, recovered once. [`crate::run`] releases them once the
    /// checks that read them ran (the [`crate::checks::Check`]s marked
    /// `reads_service_maps`); every other check must not read them.
    pub services: Vec<ServiceMap<'a>>,
    /// Chain references per table, parallel to `ruleset.tables`.
    pub refs: Vec<TableRefs<'a>>,
    /// The CNIs and the kube-proxy generation the ruleset shows.
    pub inventory: Inventory,
    /// What the host-firewall check (`checks::shadow`) reads about the node ([`node`]), taken here
    /// while the service maps are held (ClusterIPs and the few services it traces).
    pub(crate) nodes: node::Nodes,
}

impl<'a> CheckInput<'a> {
    /// Prepares the facts once per run: recovers kube-proxy's service map, indexes chain
    /// references per table, infers the [`Inventory`] and what the host-firewall check
    /// needs of the service map.
    /// `partial_flag` is the user's `--partial`.
    pub fn new(ruleset: &'a Ruleset, origin: Origin, partial_flag: bool) -> CheckInput<'a> {
        // One after the other: the references' 1.3 MiB (10k-service node) built beside
        // the map's recovery would add to its peak, the highest of `plumb check`.
        let services = recover(ruleset);
        let refs = ruleset.tables.iter().map(TableRefs::new).collect();
        let mut facts = CheckInput {
            ruleset,
            origin,
            partial_flag,
            services,
            refs,
            inventory: Inventory::default(),
            nodes: Default::default(),
        };
        facts.inventory = inventory::infer(&facts);
        facts.nodes = node::Nodes::infer(&facts);
        facts
    }

    /// The chain references of `table` (which must belong to this ruleset).
    pub fn refs_of(&self, table: &Table) -> &TableRefs<'a> {
        let i = self
            .ruleset
            .tables
            .iter()
            .position(|t| std::ptr::eq(t, table))
            .expect("table of this ruleset");
        &self.refs[i]
    }

    /// True when absent chains may exist elsewhere: a restore payload, by flag or by content.
    /// A partial input is never judged as a full dump.
    pub fn is_partial(&self) -> bool {
        self.partial_flag || self.ruleset.completeness == Completeness::Partial
    }

    /// True when the input was cut short: absence proves nothing either.
    pub fn is_truncated(&self) -> bool {
        self.ruleset.completeness == Completeness::Truncated
    }

    /// True when parts of the input could not be read: absence proves nothing either.
    pub fn is_damaged(&self) -> bool {
        self.ruleset.completeness == Completeness::Damaged
    }

    /// True when the ruleset can be judged as the complete state of the kernel.
    pub fn is_full(&self) -> bool {
        !self.partial_flag && self.ruleset.completeness == Completeness::Full
    }

    /// Name of the source a table was read from.
    pub fn source(&self, table: &Table) -> String {
        self.source_of(table.backend, table.family, &table.name)
    }

    /// Name of the source the table `name` of this backend and family was read from. On
    /// a live node native nft tables are listed one `nft list table` each (line numbers
    /// count in that listing); iptables tables come from the save tool of their backend.
    pub fn source_of(&self, backend: Backend, family: Family, name: &str) -> String {
        match &self.origin {
            Origin::File(name) => name.clone(),
            Origin::Live { netns } => {
                let tool = match (backend, family) {
                    (Backend::Nftables, _) => format!("nft list table {family} {name}"),
                    (Backend::IptablesLegacy, Family::Ip6) => "ip6tables-legacy-save".into(),
                    (Backend::IptablesLegacy, _) => "iptables-legacy-save".into(),
                    (_, Family::Ip6) => "ip6tables-nft-save".into(),
                    _ => "iptables-nft-save".into(),
                };
                match netns {
                    Some(n) => format!("ip netns exec {n} {tool}"),
                    None => tool,
                }
            }
        }
    }

    /// Evidence quoting one rule.
    pub fn rule(&self, table: &Table, rule: &Rule) -> Evidence {
        Evidence {
            source: self.source(table),
            line: Some(rule.line()).filter(|&l| l > 0),
            text: rule.text.to_string(),
        }
    }

    /// Evidence quoting a chain declaration (`:NAME` in iptables-save, `chain NAME` in nft).
    pub fn chain(&self, table: &Table, chain: &Chain) -> Evidence {
        let text = match (table.backend, chain.policy()) {
            (Backend::Nftables, _) => format!("chain {} {{", chain.name),
            (_, Some(p)) => format!(":{} {}", chain.name, p.as_iptables()),
            (_, None) => format!(":{} -", chain.name),
        };
        Evidence {
            source: self.source(table),
            line: Some(chain.location.line).filter(|&l| l > 0),
            text,
        }
    }

    /// A statement about the input as a whole (no line).
    pub fn note(&self, text: impl Into<String>) -> Evidence {
        let source = match &self.origin {
            Origin::File(n) => n.clone(),
            Origin::Live { netns: Some(n) } => format!("network namespace {n}"),
            Origin::Live { netns: None } => "this machine".into(),
        };
        Evidence {
            source,
            line: None,
            text: text.into(),
        }
    }

    /// iptables tables (either backend), i.e. everything but native nft tables.
    pub fn xt_tables(&self) -> impl Iterator<Item = &'a Table> {
        self.ruleset
            .tables
            .iter()
            .filter(|t| t.backend != Backend::Nftables)
    }

    /// The iptables table `name` of the same backend and family as `like`.
    pub fn sibling(&self, like: &Table, name: &str) -> Option<&'a Table> {
        self.ruleset
            .tables
            .iter()
            .find(|t| t.backend == like.backend && t.family == like.family && &*t.name == name)
    }

    /// Distinct (backend, family) pairs of iptables tables, in input order.
    pub fn xt_groups(&self) -> Vec<(Backend, Family)> {
        let mut out: Vec<(Backend, Family)> = Vec::new();
        for t in self.xt_tables() {
            if !out.contains(&(t.backend, t.family)) {
                out.push((t.backend, t.family));
            }
        }
        out
    }

    /// The iptables table `name` of a (backend, family) group.
    pub fn xt_table(&self, group: (Backend, Family), name: &str) -> Option<&'a Table> {
        self.ruleset
            .tables
            .iter()
            .find(|t| t.backend == group.0 && t.family == group.1 && &*t.name == name)
    }
}

/// Human name of a (backend, family) group: `iptables-nft (IPv4)`.
pub fn group_name(group: (Backend, Family)) -> String {
    let fam = match group.1 {
        Family::Ip6 => "IPv6",
        Family::Ip => "IPv4",
        other => other.as_str(),
    };
    format!("{} ({fam})", group.0.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use plumb_ruleset::format::{ParseOptions, parse_bytes};

    /// Evidence names the command that printed the line it quotes: on a live node a native
    /// nft table is listed on its own (`nft list table`), so its line numbers count there,
    /// not in `nft list ruleset`; a service map's evidence in nftables mode too.
    #[test]
    fn live_evidence_names_the_listing_each_table_was_read_from() {
        let text = "table ip kube-proxy {\n\tchain services {\n\t\tip daddr 10.96.0.1 tcp dport 443 goto service-X\n\t}\n\tchain service-X {\n\t}\n}\n";
        let nft = parse_bytes(text.as_bytes(), &ParseOptions::default())
            .unwrap()
            .ruleset;
        let live = Origin::Live {
            netns: Some("n1".into()),
        };
        let facts = CheckInput::new(&nft, live, false);
        let table = &nft.tables[0];
        assert_eq!(
            facts.source(table),
            "ip netns exec n1 nft list table ip kube-proxy"
        );
        assert_eq!(
            facts.source_of(Backend::IptablesNft, Family::Ip6, "nat"),
            "ip netns exec n1 ip6tables-nft-save"
        );
        let file = CheckInput::new(&nft, Origin::File("dump.nft".into()), false);
        assert_eq!(file.source(table), "dump.nft");
    }
}
