//! The trace index: a ruleset compiled once for many traces.
//!
//! Chain names are resolved to ids and base chains are ordered per hook by priority
//! (iptables tables by their fixed priorities, nft chains by theirs). A chain's rules
//! are compiled into [`Item`]s when a trace first enters it ([`Index::code`];
//! `IndexOptions { lazy: false }` compiles everything in `build`), and
//! large chains get a dispatch table: rules whose leading conditions pin the
//! destination, protocol and destination port (kube-proxy's KUBE-SERVICES), only
//! protocol and port (KUBE-NODEPORTS) or only the destination are found by key;
//! every other rule stays on a fallback list, and the lists are merged in rule order
//! so first-match semantics are exact.

use crate::ir::Action;
use crate::ir::CompiledSet;
use crate::ir::{AddrMatch, Cond};
use crate::ir::{HookId, Item};
use crate::nft::Compiler;
use plumb_ruleset::fasthash::FastMap;
use plumb_ruleset::{Backend, Chain, Family, Hook, Policy, RuleBody, Ruleset, Table};
use std::net::IpAddr;

/// A compiled rule: its items are `Index::items(rule)` (one array for the whole index).
#[derive(Clone, Copy, Debug)]
pub struct CompiledRule {
    start: u32,
    end: u32,
    /// Index of the rule in its chain's `rules` (position - 1).
    pub rule: u32,
}

impl HookId {
    /// The hook's iptables name (`PREROUTING`, ...), as in JSON.
    pub fn name(self) -> &'static str {
        match self {
            HookId::Prerouting => "PREROUTING",
            HookId::Input => "INPUT",
            HookId::Forward => "FORWARD",
            HookId::Output => "OUTPUT",
            HookId::Postrouting => "POSTROUTING",
        }
    }

    fn from_hook(h: &Hook) -> Option<HookId> {
        Some(match h {
            Hook::Prerouting => HookId::Prerouting,
            Hook::Input => HookId::Input,
            Hook::Forward => HookId::Forward,
            Hook::Output => HookId::Output,
            Hook::Postrouting => HookId::Postrouting,
            _ => return None,
        })
    }

    /// NAT at this hook rewrites the destination (true) or the source (false).
    pub fn is_dst_nat(self) -> bool {
        matches!(self, HookId::Prerouting | HookId::Output)
    }
}

/// A base chain attached to a hook.
#[derive(Clone, Debug)]
pub struct BaseRef {
    /// The base chain, as a chain id of the [`Index`].
    pub chain: u32,
    /// Its order at the hook, lowest first: nft's `priority`, or the kernel's priority of
    /// the iptables table (raw -300, mangle -150, nat -100 (DNAT) or 100 (SNAT), filter 0,
    /// security 50).
    pub priority: i32,
    /// A NAT chain (iptables `nat` table, nft `type nat`): consulted only for a
    /// connection's first packet.
    pub nat: bool,
}

/// Rule lists of a dispatch table: for each key, a range of `rules`.
#[derive(Clone, Debug)]
pub struct KeyedRules<K> {
    ranges: FastMap<K, (u32, u32)>,
    rules: Vec<u32>,
}

impl<K> Default for KeyedRules<K> {
    fn default() -> Self {
        KeyedRules {
            ranges: FastMap::default(),
            rules: Vec::new(),
        }
    }
}

impl<K: std::hash::Hash + Eq + Copy + Ord> KeyedRules<K> {
    /// From `(key, rule)` pairs in rule order.
    fn build(mut pairs: Vec<(K, u32)>) -> KeyedRules<K> {
        // Stable: rules of one key stay in chain order.
        pairs.sort_by_key(|&(k, _)| k);
        let mut ranges = FastMap::default();
        ranges.reserve(pairs.len());
        let mut rules = Vec::with_capacity(pairs.len());
        let mut i = 0;
        while i < pairs.len() {
            let k = pairs[i].0;
            let start = rules.len() as u32;
            while i < pairs.len() && pairs[i].0 == k {
                rules.push(pairs[i].1);
                i += 1;
            }
            ranges.insert(k, (start, rules.len() as u32));
        }
        KeyedRules { ranges, rules }
    }

    /// The rules of `key`, in chain order.
    pub fn get(&self, key: &K) -> &[u32] {
        if self.rules.is_empty() {
            return &[];
        }
        match self.ranges.get(key) {
            Some(&(a, b)) => &self.rules[a as usize..b as usize],
            None => &[],
        }
    }

    /// How many rules are keyed.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether no rule is keyed.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

/// Dispatch of a large chain: rules whose leading conditions pin the destination
/// address, protocol and/or destination port are found by key; the rest are on a
/// fallback list. A packet's candidates are the merge, in rule order, of its keys'
/// lists and the fallback list, so first-match semantics are exact.
#[derive(Clone, Debug, Default)]
pub struct Dispatch {
    /// Rules that need one destination, protocol and destination port (kube-proxy's
    /// KUBE-SERVICES, KUBE-PROXY-FIREWALL).
    pub exact: KeyedRules<(IpAddr, u8, u16)>,
    /// Rules that need one protocol and destination port, any destination
    /// (KUBE-NODEPORTS, KUBE-EXTERNAL-SERVICES' NodePort rules).
    pub port: KeyedRules<(u8, u16)>,
    /// Rules that need one destination, any port.
    pub dst: KeyedRules<IpAddr>,
    /// Rules on no key's list: candidates for every packet.
    pub rest: Vec<u32>,
}

/// A chain of the index; its rules are compiled on first use ([`Index::code`]).
#[derive(Debug)]
pub struct CompiledChain<'r> {
    /// Index into [`Index::tables`] of the chain's table.
    pub table: u32,
    /// The chain in the ruleset.
    pub chain: &'r Chain,
    /// Boxed: an index holds one entry per chain (60k on a 10k-service node) and
    /// compiles a few; an unboxed `ChainCode` would make each entry ten times larger.
    /// A `OnceBox` (8 bytes) rather than a `OnceLock<Box<_>>` (16).
    code: once_cell::race::OnceBox<ChainCode>,
}

/// A chain's compiled rules and dispatch table.
#[derive(Debug, Default)]
pub struct ChainCode {
    /// Items of the chain's rules, rule after rule.
    items: Vec<Item>,
    rules: Vec<CompiledRule>,
    /// The dispatch table; `None` for chains under [`DISPATCH_MIN_RULES`] rules or when
    /// [`IndexOptions::dispatch`] is off. Boxed: most chains have none, and a
    /// `ChainCode` is allocated for every chain a trace enters (58k on a 10k-service
    /// node with `trace --all-services`).
    pub dispatch: Option<Box<Dispatch>>,
    /// The nft sets and maps the chain's rules look up (named sets of the table and
    /// anonymous ones), compiled with the chain; a [`crate::ir::SetRef`] is a position
    /// here. Kept per chain so that a chain compiles on first use like any other: one
    /// table-wide list would need every nft chain compiled up front (tens of MiB on a
    /// 10k-service nftables-mode node, for the few chains a trace enters). A named set
    /// that several traced chains use is compiled once per chain.
    pub sets: Vec<CompiledSet>,
}

/// Chains with at least this many rules get a dispatch table.
pub const DISPATCH_MIN_RULES: usize = 16;

/// How to build the index.
#[derive(Clone, Copy, Debug)]
pub struct IndexOptions {
    /// Build dispatch tables (off: a plain linear walk, for comparison).
    pub dispatch: bool,
    /// Compile a chain when a trace first enters it (on: a trace of a 10k-service
    /// ruleset compiles a few hundred rules, not 110k); off: compile every chain in
    /// `build`.
    pub lazy: bool,
}

impl Default for IndexOptions {
    fn default() -> Self {
        IndexOptions {
            dispatch: true,
            lazy: true,
        }
    }
}

/// A ruleset compiled for tracing. Borrows the ruleset for rule texts.
#[derive(Debug)]
pub struct Index<'r> {
    /// The ruleset the index was built from.
    pub ruleset: &'r Ruleset,
    /// The tables a trace can walk (those of families `ip`, `ip6` and `inet`); a table
    /// id is its position.
    pub tables: Vec<&'r Table>,
    /// Every chain of those tables; a chain id is its position.
    pub chains: Vec<CompiledChain<'r>>,
    /// Chain names of each table (in `tables` order), to resolve jumps.
    names: Vec<ChainNames<'r>>,
    options: IndexOptions,
    /// Base chains per [v4, v6] per hook, ordered by priority.
    hooks: [[Vec<BaseRef>; 5]; 2],
}

/// A table's chain names to chain ids (the first chain of a name wins). Holds only
/// the ids (4 bytes a chain; a name is read from its chain when a lookup finds its
/// hash): names held in the table took 40 bytes a chain, 5 MiB on a 10k-service
/// node's 58k nat chains, through every `plumb check` and `plumb trace`.
struct ChainNames<'r> {
    chains: &'r [Chain],
    first: u32,
    ids: hashbrown::HashTable<u32>,
}

impl std::fmt::Debug for ChainNames<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ChainNames({} names)", self.ids.len())
    }
}

impl<'r> ChainNames<'r> {
    fn hash(name: &str) -> u64 {
        use std::hash::{BuildHasher, BuildHasherDefault};
        BuildHasherDefault::<plumb_ruleset::fasthash::FxHasher>::default().hash_one(name)
    }

    /// The name of chain `id` (an id of this table).
    fn name(&self, id: u32) -> &'r str {
        self.chains
            .get((id - self.first) as usize)
            .map_or("", |c| &c.name)
    }

    fn new(chains: &'r [Chain], first: u32) -> ChainNames<'r> {
        let mut names = ChainNames {
            chains,
            first,
            ids: hashbrown::HashTable::with_capacity(chains.len()),
        };
        for (i, c) in chains.iter().enumerate() {
            let h = Self::hash(&c.name);
            if names.find(h, &c.name).is_none() {
                let id = first + i as u32;
                let ChainNames {
                    chains, first, ids, ..
                } = &mut names;
                let (chains, first) = (*chains, *first);
                ids.insert_unique(h, id, |&j| {
                    Self::hash(chains.get((j - first) as usize).map_or("", |c| &c.name))
                });
            }
        }
        names
    }

    fn find(&self, hash: u64, name: &str) -> Option<u32> {
        self.ids.find(hash, |&id| self.name(id) == name).copied()
    }

    fn get(&self, name: &str) -> Option<u32> {
        self.find(Self::hash(name), name)
    }
}

/// Fixed priorities of iptables tables (include/uapi/linux/netfilter_ipv4.h).
fn iptables_priority(table: &str, hook: HookId) -> i32 {
    match table {
        "raw" => -300,
        "mangle" => -150,
        "nat" if hook.is_dst_nat() => -100,
        "nat" => 100,
        "security" => 50,
        _ => 0,
    }
}

/// nft priority text: a number, a keyword, or `keyword +/- N`.
fn nft_priority(s: &str) -> i32 {
    let s = s.trim();
    let base = |k: &str| -> Option<i32> {
        Some(match k {
            "raw" => -300,
            "mangle" => -150,
            "dstnat" => -100,
            "filter" => 0,
            "security" => 50,
            "srcnat" => 100,
            n => n.parse().ok()?,
        })
    };
    if let Some(v) = base(s) {
        return v;
    }
    let words: Vec<&str> = s.split_whitespace().collect();
    match words.as_slice() {
        [k, "+", n] => base(k).unwrap_or(0) + n.parse::<i32>().unwrap_or(0),
        [k, "-", n] => base(k).unwrap_or(0) - n.parse::<i32>().unwrap_or(0),
        _ => 0,
    }
}

fn families(f: Family) -> &'static [usize] {
    match f {
        Family::Ip => &[0],
        Family::Ip6 => &[1],
        Family::Inet => &[0, 1],
        _ => &[],
    }
}

impl<'r> Index<'r> {
    /// Builds the index with [`IndexOptions::default`]: dispatch tables, lazy compilation.
    pub fn build(ruleset: &'r Ruleset) -> Index<'r> {
        Index::build_with(ruleset, IndexOptions::default())
    }

    /// Builds the index with the given options (see [`IndexOptions`]).
    pub fn build_with(ruleset: &'r Ruleset, options: IndexOptions) -> Index<'r> {
        let mut index = Index {
            ruleset,
            tables: Vec::new(),
            chains: Vec::new(),
            names: Vec::new(),
            options,
            hooks: Default::default(),
        };
        index
            .chains
            .reserve(ruleset.tables.iter().map(|t| t.chains.len()).sum());
        for table in &ruleset.tables {
            if families(table.family).is_empty() {
                continue;
            }
            let t = index.tables.len() as u32;
            index.tables.push(table);
            let first = index.chains.len() as u32;
            let names = ChainNames::new(&table.chains, first);
            let iptables = table.backend != Backend::Nftables;
            let mut conds = Vec::new();
            for (ci, chain) in table.chains.iter().enumerate() {
                let code = once_cell::race::OnceBox::new();
                if !options.lazy {
                    let _ = code.set(Box::new(compile_chain(
                        table, chain, &names, options, &mut conds,
                    )));
                }
                let id = first + ci as u32;
                if let Some(base) = &chain.base
                    && let Some(hook) = HookId::from_hook(&base.hook)
                {
                    let (priority, nat) = if iptables {
                        (iptables_priority(&table.name, hook), &*table.name == "nat")
                    } else {
                        (
                            base.priority.as_deref().map(nft_priority).unwrap_or(0),
                            base.chain_type.as_deref() == Some("nat"),
                        )
                    };
                    for &fam in families(table.family) {
                        index.hooks[fam][hook as usize].push(BaseRef {
                            chain: id,
                            priority,
                            nat,
                        });
                    }
                }
                index.chains.push(CompiledChain {
                    table: t,
                    chain,
                    code,
                });
            }
            index.names.push(names);
        }
        for fam in &mut index.hooks {
            for list in fam.iter_mut() {
                list.sort_by_key(|b| b.priority);
            }
        }
        index
    }

    /// Base chains of a hook for IPv4 (`v6 == false`) or IPv6, by priority.
    pub fn bases(&self, v6: bool, hook: HookId) -> &[BaseRef] {
        &self.hooks[v6 as usize][hook as usize]
    }

    /// How many chains are compiled so far (all of them after a `lazy: false` build).
    pub fn compiled_chains(&self) -> usize {
        self.chains
            .iter()
            .filter(|c| c.code.get().is_some())
            .count()
    }

    /// A chain's compiled rules, compiled now if no trace entered it yet.
    pub fn code(&self, chain: u32) -> &ChainCode {
        let c = &self.chains[chain as usize];
        c.code.get_or_init(|| {
            Box::new(compile_chain(
                self.tables[c.table as usize],
                c.chain,
                &self.names[c.table as usize],
                self.options,
                &mut Vec::new(),
            ))
        })
    }

    /// The chains named `name`: one id for each table that has a chain of that name.
    pub fn chains_named<'s>(&'s self, name: &'s str) -> impl Iterator<Item = u32> + 's {
        self.names.iter().filter_map(move |n| n.get(name))
    }

    /// Frees the compiled rules of `chain`; it compiles again if a trace enters it
    /// later. For callers whose traces each enter chains no other trace enters: `plumb
    /// trace --all-services` releases a service's own chains once it is traced, so
    /// that the index does not grow to hold every chain of the node (on a 10k-service
    /// node that was 60 MiB, half the command's peak).
    pub fn release(&mut self, chain: u32) {
        if let Some(c) = self.chains.get_mut(chain as usize) {
            c.code = once_cell::race::OnceBox::new();
        }
    }

    /// The conditions and actions of a compiled rule of `chain`, in order.
    pub fn items(&self, chain: u32, rule: &CompiledRule) -> &[Item] {
        &self.code(chain).items[rule.start as usize..rule.end as usize]
    }

    /// The compiled rules of a chain, in order (a rule that could not be read has
    /// none, so `CompiledRule::rule` says which of the chain's rules each one is).
    pub fn rules(&self, chain: u32) -> &[CompiledRule] {
        &self.code(chain).rules
    }

    /// The chain's dispatch table, if it has one.
    pub fn dispatch(&self, chain: u32) -> Option<&Dispatch> {
        self.code(chain).dispatch.as_deref()
    }

    /// The chain with this id (ids come from steps, jumps and base chains).
    pub fn chain(&self, id: u32) -> &CompiledChain<'r> {
        &self.chains[id as usize]
    }

    /// The table of the chain with this id.
    pub fn table_of(&self, chain: u32) -> &'r Table {
        self.tables[self.chains[chain as usize].table as usize]
    }

    /// Tables a trace of this family needs but the ruleset lacks. With iptables
    /// tables present, `filter` and `nat` must both be there (a dump of one table
    /// says nothing about the other); with none at all, every table is missing.
    pub fn missing_tables(&self, v6: bool) -> Vec<String> {
        let fam = if v6 { Family::Ip6 } else { Family::Ip };
        let relevant: Vec<&&Table> = self
            .tables
            .iter()
            .filter(|t| t.family == fam || t.family == Family::Inet)
            .collect();
        if relevant.is_empty() {
            return vec![format!("any {} table", if v6 { "IPv6" } else { "IPv4" })];
        }
        let xt: Vec<&&&Table> = relevant
            .iter()
            .filter(|t| t.backend != Backend::Nftables)
            .collect();
        if xt.is_empty() {
            return Vec::new();
        }
        ["filter", "nat"]
            .iter()
            .filter(|n| !xt.iter().any(|t| &*t.name == **n))
            .map(|n| format!("{} {n}", fam.as_str()))
            .collect()
    }

    /// The policy of a base chain (`None` for user chains).
    pub fn policy(&self, chain: u32) -> Option<&'r Policy> {
        self.chains[chain as usize].chain.policy()
    }
}

/// Compiles one chain's rules (with the nft sets they use) and, if it is large, its
/// dispatch table.
fn compile_chain(
    table: &Table,
    chain: &Chain,
    names: &ChainNames<'_>,
    options: IndexOptions,
    conds: &mut Vec<Cond>,
) -> ChainCode {
    let resolve = |n: &str| names.get(n);
    let mut xt_buf = plumb_ruleset::iptables::XtBuf::default();
    let mut sets = Vec::new();
    let mut set_cache = std::collections::HashMap::new();
    // Counting compiles each rule twice: not for nft rules, whose sets it would
    // compile twice.
    let count_first = table.backend != Backend::Nftables;
    // The items of rule `ri` appended to `items`; false when the rule is not read.
    let mut compile_rule = |ri: usize, rule: &plumb_ruleset::Rule, items: &mut Vec<Item>| -> bool {
        match &rule.body {
            RuleBody::Xt(_) => {
                // Indexed into one reused buffer: a rule's kept index would cost an
                // allocation per rule (10k in kube-proxy's KUBE-SERVICES) and stay.
                let Some(view) = rule.xt_in(&mut xt_buf) else {
                    return false;
                };
                conds.clear();
                crate::matches::xt::compile_into(&view, conds);
                items.extend(conds.drain(..).map(Item::Cond));
                if let Some(target) = view.target() {
                    items.push(Item::Act(crate::targets::compile_xt(&target, &resolve)));
                }
            }
            // The readers put nft rules in nft tables only; anything else is not
            // guessed at.
            RuleBody::Nft(_) if table.backend != Backend::Nftables => items.push(Item::Act(
                Action::Unknown(format!("{} (an nft rule in an iptables table)", rule.text)),
            )),
            RuleBody::Nft(n) => {
                let mut compiler = Compiler {
                    table_sets: &table.sets,
                    resolve: &resolve,
                    sets: &mut sets,
                    cache: &mut set_cache,
                };
                // Read from the rule's text (not kept in the rule) and dropped here.
                compiler.compile_into(&n.statements(rule.text.as_str()), items);
            }
            RuleBody::Approximate(listed) => {
                conds.clear();
                let place = format!("{} rule {}", chain.name, plumb_ruleset::position_at(ri));
                let action = crate::matches::listed::compile(listed, &place, &resolve, conds);
                items.extend(conds.drain(..).map(Item::Cond));
                items.push(Item::Act(action));
            }
        }
        true
    };
    // A long chain's items are counted first and compiled into a block of that size:
    // grown by doubling, kube-proxy's 10k-rule KUBE-SERVICES held 2 MiB of unused
    // items, and 8 MiB at once while the block was copied.
    let capacity = if count_first && chain.rules.len() >= EXACT_ITEMS_MIN_RULES {
        let mut scratch = Vec::new();
        let mut count = 0;
        for (ri, rule) in chain.rules.iter().enumerate() {
            scratch.clear();
            compile_rule(ri, rule, &mut scratch);
            count += scratch.len();
        }
        count
    } else {
        chain.rules.len() * 4
    };
    let mut items = Vec::with_capacity(capacity);
    let mut rules = Vec::with_capacity(chain.rules.len());
    for (ri, rule) in chain.rules.iter().enumerate() {
        let start = items.len() as u32;
        if !compile_rule(ri, rule, &mut items) {
            continue;
        }
        rules.push(CompiledRule {
            start,
            end: items.len() as u32,
            rule: ri as u32,
        });
    }
    let dispatch = (options.dispatch && rules.len() >= DISPATCH_MIN_RULES)
        .then(|| Box::new(build_dispatch(&items, &rules)));
    sets.shrink_to_fit();
    ChainCode {
        items,
        rules,
        dispatch,
        sets,
    }
}

/// Chains with at least this many rules count their items before compiling them.
const EXACT_ITEMS_MIN_RULES: usize = 64;

/// What a rule's leading conditions (before its first action) require of every
/// packet it matches: one destination, one protocol, one destination port.
/// `None` when the rule must stay on the fallback list.
fn rule_key(items: &[Item]) -> Option<(Option<IpAddr>, Option<u8>, Option<u16>)> {
    let (mut dst, mut proto, mut port) = (None, None, None);
    for item in items {
        let Item::Cond(c) = item else { break };
        match c {
            Cond::Dst(AddrMatch::Net(n), false) if n.is_host() => dst = Some(n.addr),
            Cond::Proto(p, false) | Cond::ModuleProto(p) => {
                if proto.is_some_and(|q| q != *p) {
                    return None;
                }
                proto = Some(*p);
            }
            Cond::Dport(r, false) if r.len() == 1 && r[0].from == r[0].to => port = Some(r[0].from),
            // A skipped rule must have no effect: `recent --set` adds the source to
            // its list even when a later condition fails.
            Cond::Recent { .. } => return None,
            _ => {}
        }
    }
    Some((dst, proto, port))
}

fn build_dispatch(items: &[Item], rules: &[CompiledRule]) -> Dispatch {
    let (mut exact, mut port, mut dst) = (Vec::new(), Vec::new(), Vec::new());
    let mut rest = Vec::new();
    for (i, r) in rules.iter().enumerate() {
        let i = i as u32;
        match rule_key(&items[r.start as usize..r.end as usize]) {
            Some((Some(d), Some(p), Some(n))) => exact.push(((d, p, n), i)),
            Some((_, Some(p), Some(n))) => port.push(((p, n), i)),
            Some((Some(d), _, _)) => dst.push((d, i)),
            _ => rest.push(i),
        }
    }
    Dispatch {
        exact: KeyedRules::build(exact),
        port: KeyedRules::build(port),
        dst: KeyedRules::build(dst),
        rest,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_names_short_long_and_duplicates() {
        let loc = plumb_ruleset::Location::default();
        let names = [
            "KUBE-SVC-ABCDEFGHIJKLMNOP",
            "A",
            "KUBE-SVC-ABCDEFGHIJKLMNOQ",
            "a-chain-name-longer-than-thirty-two-bytes-for-nft",
            "A",
            "ABCDEFGH",
            "ABCDEFGHI",
        ];
        let chains: Vec<Chain> = names.iter().map(|n| Chain::new(n, None, loc)).collect();
        let m = ChainNames::new(&chains, 10);
        assert_eq!(m.get("KUBE-SVC-ABCDEFGHIJKLMNOP"), Some(10));
        assert_eq!(m.get("A"), Some(11), "the first chain of a name wins");
        assert_eq!(m.get("KUBE-SVC-ABCDEFGHIJKLMNOQ"), Some(12));
        assert_eq!(
            m.get("a-chain-name-longer-than-thirty-two-bytes-for-nft"),
            Some(13)
        );
        assert_eq!(m.get("ABCDEFGH"), Some(15));
        assert_eq!(m.get("ABCDEFGHI"), Some(16));
        for missing in [
            "",
            "B",
            "KUBE-SVC-ABCDEFGHIJKLMNO",
            "ABCDEFG",
            "A\0",
            "a-chain",
        ] {
            assert_eq!(m.get(missing), None, "{missing}");
        }
    }

    #[test]
    fn priorities() {
        assert_eq!(nft_priority("dstnat - 10"), -110);
        assert_eq!(nft_priority("srcnat"), 100);
        assert_eq!(nft_priority("-90"), -90);
        assert_eq!(nft_priority("filter + 5"), 5);
    }
}
