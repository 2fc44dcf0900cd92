//! The nf_tables ruleset from netlink messages (the answers of
//! [`plumb_os::nftables::dump_ruleset`]), decoded without sockets: pure, fed message
//! by message, never panics on any bytes (cargo-fuzz `nft_netlink`).
//!
//! Tables iptables-nft manages (`filter`, `nat`, `mangle`, `raw`, `security` of
//! families ip and ip6, built-in chains at their standard hooks and priorities) are
//! translated into the text `iptables-nft-save` prints for them, rule for rule, and
//! that text is read by plumb's iptables-save reader: the model from netlink is the
//! model from parsing `iptables-nft-save`, by construction, and the oracle test
//! (`tests/netlink_oracle.rs`) compares the two texts on the corpus loaded into the
//! kernel. The translation covers the native expressions iptables-nft writes
//! (addresses, interfaces, protocol, ports, mark, counters, verdicts) and the xt
//! extensions in `xt`; anything else — an expression, an extension, a revision, a
//! flag not decoded exactly — makes that *table* [`TableRead::Fallback`] with the
//! reason, and the caller reads it with the save tool: a rule is never guessed.
//!
//! Native nf_tables tables (kube-proxy's nftables mode, flannel, firewalld, ...) are
//! decoded by `native` into the text `nft list table` prints for them
//! ([`TableRead::Listing`]), read by plumb-ruleset's nft reader; a native table with
//! anything not decoded exactly is [`TableRead::Native`] with the reason, and the
//! caller reads it with `nft list table`.

pub(crate) mod native;
pub(crate) mod xt;

use plumb_os::netlink::{self, Attr, Message};
use plumb_os::nftables::{SUBSYS_NFTABLES, msg};
use plumb_ruleset::Family;
use plumb_ruleset::fasthash::FastMap;
use std::fmt::Write as _;

/// How one table was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TableRead {
    /// An iptables-nft table, translated: the `*table` ... `COMMIT` section
    /// `iptables-nft-save` prints for it.
    Save(String),
    /// An iptables-nft table with something not decoded exactly: read it with the save
    /// tool; the reason names what.
    Fallback(String),
    /// A native nf_tables table, decoded: the text `nft list table FAMILY NAME`
    /// prints for it.
    Listing(String),
    /// A native nf_tables table with something not decoded exactly: read it with
    /// `nft list table`; the reason names what.
    Native(String),
    /// A table with an iptables name holding what iptables-nft never writes (sets, a
    /// native expression such as `lookup`): read it with `nft list table`, because
    /// `iptables-nft-save` prints such rules without the parts it does not know
    /// (iptables 1.8.9 prints `tcp dport { 22, 80 } accept` as `-p tcp -j ACCEPT`).
    Foreign(String),
}

/// One table of the dump.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodedTable {
    /// Address family (ip, ip6, inet, arp, bridge, netdev); `None` for a family code
    /// plumb does not know (the table is then [`TableRead::Fallback`]).
    pub family: Option<Family>,
    /// Table name.
    pub name: String,
    /// How it was read.
    pub read: TableRead,
}

/// A node's nf_tables ruleset as read over netlink.
#[derive(Clone, Debug)]
pub struct Read {
    /// Where it was read (`nf_tables netlink (netns NAME)`), for evidence.
    pub source: String,
    /// The generation the dumps were taken at.
    pub generation: u32,
    /// Every table.
    pub tables: Vec<DecodedTable>,
}

/// Accumulates one dump's messages; [`Decoder::finish`] gives the tables.
#[derive(Debug, Default)]
pub struct Decoder {
    /// A handful of tables: found by a scan, with no key to allocate per message.
    tables: Vec<TableAcc>,
}

#[derive(Debug)]
struct TableAcc {
    family: u8,
    name: String,
    chains: Vec<ChainAcc>,
    chain_index: FastMap<String, usize>,
    /// Why the table cannot be translated (the first reason found).
    fallback: Option<String>,
    /// A rule expression iptables-nft never writes (the first found).
    foreign: Option<String>,
    /// The table holds sets, objects or flowtables, which iptables-nft never writes.
    /// Said only when no rule names an expression of its own: the dump's workers meet
    /// the sets and the rules in no fixed order, and the rule says more.
    holds_objects: bool,
    /// A native table's comment, sets and reasons not to decode it.
    native: native::NativeTable,
}

#[derive(Debug, Default)]
struct ChainAcc {
    name: String,
    /// (hook number, priority, policy, packets, bytes) of a base chain.
    base: Option<BaseInfo>,
    /// The chain's rule lines, `-A CHAIN ...\n` each (one buffer: a 10k-service
    /// ruleset has 170k rules).
    rules: String,
    /// A native table's chain: its type, comment and raw rules. Boxed: the 60k chains
    /// of an iptables-nft table, in every worker's decoder, would carry its ~100
    /// bytes each (11 MiB more at the peak of a 10k-service read).
    native: Option<Box<native::NativeChain>>,
}

#[derive(Debug, Clone, Copy)]
struct BaseInfo {
    hook: u32,
    priority: i32,
    policy: u32,
    packets: u64,
    bytes: u64,
}

const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;

/// The family of an `nfgen_family` code ([`Family::from_nfproto`]).
pub fn family_of(code: u8) -> Option<Family> {
    Family::from_nfproto(code)
}

/// Table names of the iptables-nft compatibility layer, in the order
/// `iptables-nft-save` prints them (its `enum nft_table_type` order).
const XT_TABLES: &[&str] = &["mangle", "security", "raw", "filter", "nat"];

/// The built-in chains of an iptables table: (name, hook number, priority).
fn builtin_chains(table: &str) -> &'static [(&'static str, u32, i32)] {
    // NF_INET_PRE_ROUTING 0, LOCAL_IN 1, FORWARD 2, LOCAL_OUT 3, POST_ROUTING 4.
    match table {
        "filter" => &[("INPUT", 1, 0), ("FORWARD", 2, 0), ("OUTPUT", 3, 0)],
        "nat" => &[
            ("PREROUTING", 0, -100),
            ("INPUT", 1, 100),
            ("OUTPUT", 3, -100),
            ("POSTROUTING", 4, 100),
        ],
        "mangle" => &[
            ("PREROUTING", 0, -150),
            ("INPUT", 1, -150),
            ("FORWARD", 2, -150),
            ("OUTPUT", 3, -150),
            ("POSTROUTING", 4, -150),
        ],
        "raw" => &[("PREROUTING", 0, -300), ("OUTPUT", 3, -300)],
        // iptables-nft registers security at 150 (the kernel's iptables uses 50).
        "security" => &[("INPUT", 1, 150), ("FORWARD", 2, 150), ("OUTPUT", 3, 150)],
        _ => &[],
    }
}

fn is_xt_table(family: u8, name: &str) -> bool {
    matches!(family, AF_INET | AF_INET6) && XT_TABLES.contains(&name)
}

/// Attributes of a message body by type (the last one of each type up to `N`).
fn by_kind<'a, const N: usize>(body: &'a [u8]) -> [Option<Attr<'a>>; N] {
    let mut a = [None; N];
    for attr in netlink::attrs(body) {
        if let Some(slot) = a.get_mut(attr.kind as usize) {
            *slot = Some(attr);
        }
    }
    a
}

impl Decoder {
    /// A decoder with nothing read.
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Forgets everything (the dump started over).
    pub fn reset(&mut self) {
        *self = Decoder::default();
    }

    /// Reads every netlink message in `buf` (whole datagrams, or captured messages
    /// one after the other).
    pub fn push_bytes(&mut self, buf: &[u8]) {
        for m in netlink::messages(buf) {
            self.push(&m);
        }
    }

    /// Takes in what another decoder read of the same dump: the rules of the chains it
    /// dumped (each chain is dumped by one decoder only, so its rules stay in order)
    /// and why a table cannot be translated.
    pub fn merge(&mut self, other: Decoder) {
        for o in other.tables {
            let t = self.table_mut(o.family, &o.name);
            if t.foreign.is_none() {
                t.foreign = o.foreign;
            }
            t.holds_objects |= o.holds_objects;
            if t.fallback.is_none() {
                t.fallback = o.fallback;
            }
            if t.native.unsupported.is_none() {
                t.native.unsupported = o.native.unsupported;
            }
            let has_rules = |c: &ChainAcc| {
                !c.rules.is_empty() || c.native.as_ref().is_some_and(|n| !n.rules.is_empty())
            };
            for c in o.chains.into_iter().filter(has_rules) {
                match t.chain_index.get(&c.name) {
                    Some(&i) => {
                        let mine = &mut t.chains[i];
                        mine.rules.push_str(&c.rules);
                        if let (Some(m), Some(theirs)) = (mine.native.as_mut(), c.native) {
                            m.rules.extend(theirs.rules);
                            if m.unsupported.is_none() {
                                m.unsupported = theirs.unsupported;
                            }
                        }
                    }
                    None => {
                        t.fallback.get_or_insert_with(|| {
                            format!("rules of chain {} not in the chain dump", c.name)
                        });
                    }
                }
            }
        }
    }

    fn table_mut(&mut self, family: u8, name: &str) -> &mut TableAcc {
        let i = match self
            .tables
            .iter()
            .position(|t| t.family == family && t.name == name)
        {
            Some(i) => i,
            None => {
                self.tables.push(TableAcc {
                    family,
                    name: name.to_string(),
                    chains: Vec::new(),
                    chain_index: FastMap::default(),
                    fallback: None,
                    foreign: None,
                    holds_objects: false,
                    native: native::NativeTable::default(),
                });
                self.tables.len() - 1
            }
        };
        &mut self.tables[i]
    }

    /// Reads one message: `NEWTABLE`, `NEWCHAIN`, `NEWRULE`, `NEWSET`, ... as a dump
    /// answers them; anything else is ignored.
    pub fn push(&mut self, m: &Message<'_>) {
        if m.kind >> 8 != SUBSYS_NFTABLES {
            return;
        }
        let Some((&family, body)) = m.payload.split_first() else {
            return;
        };
        let Some(body) = body.get(3..) else {
            return;
        };
        match m.kind & 0xff {
            msg::NEWTABLE => {
                let a = by_kind::<2>(body);
                if let Some(name) = a[1].map(|x| x.text()) {
                    let t = self.table_mut(family, &name);
                    if !is_xt_table(family, &name) {
                        t.native.push_table(body);
                    }
                }
            }
            msg::NEWCHAIN => self.push_chain(family, body),
            msg::NEWRULE => self.push_rule(family, body),
            // Sets, objects and flowtables are never part of an iptables-nft table.
            msg::NEWSET | msg::NEWSETELEM | msg::NEWOBJ | msg::NEWFLOWTABLE => {
                let a = by_kind::<2>(body);
                if let Some(table) = a[1].map(|x| x.text()) {
                    let t = self.table_mut(family, &table);
                    if is_xt_table(family, &table) {
                        t.holds_objects = true;
                    } else {
                        match m.kind & 0xff {
                            msg::NEWSET => t.native.push_set(body),
                            msg::NEWSETELEM => t.native.push_elements(body),
                            msg::NEWOBJ => {
                                t.native
                                    .unsupported
                                    .get_or_insert_with(|| "stateful objects not decoded".into());
                            }
                            _ => {
                                t.native
                                    .unsupported
                                    .get_or_insert_with(|| "flowtables not decoded".into());
                            }
                        }
                    }
                }
            }
            _ => {}
        }
    }

    fn push_chain(&mut self, family: u8, body: &[u8]) {
        // NFTA_CHAIN_TABLE 1, NAME 3, HOOK 4 {HOOK_NUM 1, PRIORITY 2}, POLICY 5,
        // TYPE 7, COUNTERS 8 {BYTES 1, PACKETS 2}.
        let a = by_kind::<13>(body);
        let (Some(table), Some(name)) = (a[1].map(|x| x.text()), a[3].map(|x| x.string())) else {
            return;
        };
        let native_chain =
            (!is_xt_table(family, &table)).then(|| Box::new(native::NativeChain::from_attrs(&a)));
        let t = self.table_mut(family, &table);
        let base = a[4].map(|hook| {
            let h = by_kind::<3>(hook.value);
            let counters = a[8].map(|c| by_kind::<3>(c.value));
            let counter = |k: usize| {
                counters
                    .and_then(|c| c[k])
                    .and_then(|x| x.be_u64())
                    .unwrap_or(0)
            };
            BaseInfo {
                hook: h[1].and_then(|x| x.be_u32()).unwrap_or(u32::MAX),
                priority: h[2].and_then(|x| x.be_u32()).unwrap_or(0) as i32,
                policy: a[5].and_then(|x| x.be_u32()).unwrap_or(1),
                packets: counter(2),
                bytes: counter(1),
            }
        });
        if is_xt_table(family, &t.name) {
            if let Some(b) = base {
                let standard = builtin_chains(&t.name)
                    .iter()
                    .any(|&(n, hook, prio)| n == name && hook == b.hook && prio == b.priority);
                let filter_type = a[7].map(|x| x.text());
                let wanted_type = if t.name == "nat" {
                    "nat"
                } else if t.name == "mangle" && name == "OUTPUT" {
                    "route"
                } else {
                    "filter"
                };
                if !standard || filter_type.as_deref() != Some(wanted_type) {
                    t.fallback.get_or_insert_with(|| {
                        format!("base chain {name} is not an iptables built-in chain")
                    });
                }
                if b.policy > 1 {
                    t.fallback
                        .get_or_insert_with(|| format!("chain {name} has policy {}", b.policy));
                }
            } else if builtin_chains(&t.name).iter().any(|&(n, _, _)| n == name) {
                t.fallback.get_or_insert_with(|| {
                    format!("chain {name} is a built-in name without a hook")
                });
            }
        }
        match t.chain_index.get(&name) {
            Some(&i) => {
                t.chains[i].base = base;
                if t.chains[i].native.is_none() {
                    t.chains[i].native = native_chain;
                }
            }
            None => {
                t.chain_index.insert(name.clone(), t.chains.len());
                t.chains.push(ChainAcc {
                    name,
                    base,
                    rules: String::new(),
                    native: native_chain,
                });
            }
        }
    }

    fn push_rule(&mut self, family: u8, body: &[u8]) {
        // NFTA_RULE_TABLE 1, CHAIN 2, HANDLE 3, EXPRESSIONS 4, COMPAT 5, POSITION 6,
        // USERDATA 7.
        let a = by_kind::<8>(body);
        let (Some(table), Some(chain)) = (a[1].map(|x| x.text()), a[2].map(|x| x.text())) else {
            return;
        };
        let t = self.table_mut(family, &table);
        if !is_xt_table(family, &t.name) {
            // Decoded when the whole dump (with the sets) is read.
            let raw = body.to_vec().into_boxed_slice();
            match t
                .chain_index
                .get(&*chain)
                .and_then(|&i| t.chains[i].native.as_mut())
            {
                Some(c) => c.rules.push(raw),
                None => {
                    t.native.unsupported.get_or_insert_with(|| {
                        format!("a rule of chain {chain} came before the chain")
                    });
                }
            }
            return;
        }
        if t.foreign.is_some() {
            return;
        }
        if let Some(name) = a[4].and_then(foreign_expression) {
            t.foreign = Some(format!(
                "chain {chain}: expression {name}, which iptables-nft does not write"
            ));
            return;
        }
        if t.holds_objects || t.fallback.is_some() {
            return;
        }
        let Some(&ci) = t.chain_index.get(&*chain) else {
            t.fallback = Some(format!("a rule of chain {chain} came before the chain"));
            return;
        };
        // Written straight into the chain's buffer (no line of its own), taken back
        // when the rule is not decoded.
        let c = &mut t.chains[ci];
        if c.rules.capacity() == 0 {
            // Room for a kube-proxy service or endpoint chain's few rules at once,
            // instead of growing through 8, 16, 32, ... bytes.
            c.rules.reserve(256);
        }
        let start = c.rules.len();
        c.rules.push_str("-A ");
        c.rules.push_str(&c.name);
        match rule_line(family, a[4], a[5], a[7], &mut c.rules) {
            Ok(()) => c.rules.push('\n'),
            Err(reason) => {
                c.rules.truncate(start);
                t.fallback = Some(format!("chain {chain}: {reason}"));
            }
        }
    }

    /// The tables read, in `iptables-nft-save`'s order for iptables tables (per
    /// family: mangle, security, raw, filter, nat), native tables after them in dump
    /// order.
    pub fn finish(self) -> Vec<DecodedTable> {
        let mut tables = self.tables;
        // iptables tables per family in save order; native tables after, as dumped
        // (the sort is stable).
        let rank = |t: &TableAcc| match (t.family, XT_TABLES.iter().position(|n| *n == t.name)) {
            (AF_INET, Some(p)) => (0, p),
            (AF_INET6, Some(p)) => (1, p),
            _ => (2, 0),
        };
        tables.sort_by_key(rank);
        tables
            .into_iter()
            .map(|mut t| {
                let family = family_of(t.family);
                let foreign = t.foreign.take().or_else(|| {
                    t.holds_objects
                        .then(|| "it holds sets, objects or flowtables".to_string())
                });
                let read = if !is_xt_table(t.family, &t.name) {
                    match native::table_text(&t) {
                        Ok(text) => TableRead::Listing(text),
                        Err(why) => TableRead::Native(why),
                    }
                } else if let Some(reason) = foreign {
                    TableRead::Foreign(reason)
                } else if let Some(reason) = t.fallback {
                    TableRead::Fallback(reason)
                } else {
                    TableRead::Save(save_text(&t))
                };
                DecodedTable {
                    family,
                    name: t.name,
                    read,
                }
            })
            .collect()
    }
}

/// The `*table` ... `COMMIT` section of a translated table: built-in chains first in
/// hook order, then the others by name, as iptables-nft-save lists them.
fn save_text(t: &TableAcc) -> String {
    let mut order: Vec<&ChainAcc> = t.chains.iter().collect();
    order.sort_by(|a, b| match (a.base, b.base) {
        (Some(x), Some(y)) => x.hook.cmp(&y.hook),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.name.cmp(&b.name),
    });
    // Sized once: the text of a big table is tens of megabytes.
    let size: usize = t
        .chains
        .iter()
        .map(|c| c.rules.len() + c.name.len() + 32)
        .sum::<usize>()
        + 256;
    let mut out = String::with_capacity(size);
    let _ = writeln!(out, "*{}", t.name);
    // iptables-nft creates a built-in chain when a rule first needs it; the save tool
    // lists the absent ones too, with policy ACCEPT and no counters.
    for &(name, hook, _) in builtin_chains(&t.name) {
        if !t.chain_index.contains_key(name) {
            let _ = writeln!(out, ":{name} ACCEPT [0:0]");
        }
        for c in order
            .iter()
            .filter(|c| c.base.is_some_and(|b| b.hook == hook))
        {
            if let Some(b) = c.base {
                let policy = if b.policy == 0 { "DROP" } else { "ACCEPT" };
                let _ = writeln!(out, ":{} {policy} [{}:{}]", c.name, b.packets, b.bytes);
            }
        }
    }
    for c in order.iter().filter(|c| c.base.is_none()) {
        let _ = writeln!(out, ":{} - [0:0]", c.name);
    }
    for c in &order {
        out.push_str(&c.rules);
    }
    out.push_str("COMMIT\n");
    out
}

/// The expressions iptables-nft writes (1.8.x: xt `match`/`target`, and the native
/// forms of addresses, interfaces, protocol, ports, mark, limit, NFLOG, verdicts).
const IPTABLES_NFT_EXPRESSIONS: &[&str] = &[
    "payload",
    "meta",
    "cmp",
    "bitwise",
    "range",
    "immediate",
    "counter",
    "match",
    "target",
    "limit",
    "log",
];

/// The first expression of a rule iptables-nft never writes.
fn foreign_expression(list: Attr<'_>) -> Option<&str> {
    expr_iter(list)
        .map(|e| e.name)
        .find(|n| !IPTABLES_NFT_EXPRESSIONS.contains(n))
}

/// What a register holds while a rule's expressions are read.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Reg {
    Payload { base: u32, offset: u32, len: u32 },
    Meta(u32),
    Masked { inner: Box<Reg>, mask: Vec<u8> },
}

/// One expression: its name and its data's attributes.
struct Expr<'a> {
    name: &'a str,
    data: &'a [u8],
}

fn exprs(list: Attr<'_>) -> Vec<Expr<'_>> {
    expr_iter(list).collect()
}

/// The expressions of a rule's `NFTA_RULE_EXPRESSIONS` list, in order.
fn expr_iter(list: Attr<'_>) -> impl Iterator<Item = Expr<'_>> {
    netlink::attrs(list.value)
        .filter(|e| e.kind == 1) // NFTA_LIST_ELEM
        .map(|e| {
            let a = by_kind::<3>(e.value);
            Expr {
                name: a[1].map(|x| x.str()).unwrap_or(""),
                data: a[2].map(|x| x.value).unwrap_or(&[]),
            }
        })
}

/// `NFTA_DATA_VALUE` of a nested `nft_data`.
fn data_value(a: Option<Attr<'_>>) -> Option<&[u8]> {
    a?.nested().find(|x| x.kind == 1).map(|x| x.value)
}

fn be32(a: Option<Attr<'_>>) -> Option<u32> {
    a.and_then(|x| x.be_u32())
}

/// A rule in iptables-save's words: the generic options, the matches, the target.
#[derive(Default)]
struct RuleWords {
    family: u8,
    src: Option<(bool, Vec<u8>, Vec<u8>)>,
    dst: Option<(bool, Vec<u8>, Vec<u8>)>,
    iif: Option<(bool, String)>,
    oif: Option<(bool, String)>,
    proto: Option<(bool, u8)>,
    /// `-f` (false: `! -f`).
    frag: Option<bool>,
    /// `-m name ...` pieces in expression order (each starting with a space).
    matches: Vec<String>,
    /// The native tcp/udp match being built.
    ports: Option<PortMatch>,
    target: Option<String>,
}

struct PortMatch {
    index: usize,
    /// 6 (tcp) or 17 (udp).
    proto: u8,
    sport: Option<(u16, u16, bool)>,
    dport: Option<(u16, u16, bool)>,
    /// `--tcp-flags MASK COMPARE`, inverted.
    flags: Option<(u8, u8, bool)>,
}

/// Writes a rule's words as `iptables-nft-save` prints them after `-A CHAIN` into
/// `out`, or says why the rule is not decoded (part of the words may then be written).
fn rule_line(
    family: u8,
    expressions: Option<Attr<'_>>,
    compat: Option<Attr<'_>>,
    userdata: Option<Attr<'_>>,
    out: &mut String,
) -> Result<(), String> {
    if let Some(u) = userdata
        && !u.value.is_empty()
    {
        return Err("rule user data (a comment written by nft) is not decoded".into());
    }
    // NFTA_RULE_COMPAT {PROTO 1, FLAGS 2}: the protocol and inversion an xt match was
    // loaded with; iptables-nft writes it only beside the `-p` expressions it decodes
    // from (an `! -p` with matches sets NFT_RULE_COMPAT_F_INV), so it adds nothing.
    let _ = compat;
    let mut w = RuleWords {
        family,
        ..RuleWords::default()
    };
    let mut regs: FastMap<u32, Reg> = FastMap::default();
    let list = match expressions {
        Some(l) => exprs(l),
        None => Vec::new(),
    };
    let mut i = 0;
    while i < list.len() {
        let e = &list[i];
        if w.target.is_some() {
            return Err(format!("expression {} after the verdict", e.name));
        }
        match e.name {
            "counter" => {}
            "payload" => {
                // DREG 1, BASE 2, OFFSET 3, LEN 4, SREG 5 (a write).
                let a = by_kind::<6>(e.data);
                if a[5].is_some() {
                    return Err("payload write".into());
                }
                let dreg = be32(a[1]).ok_or("payload without register")?;
                regs.insert(
                    dreg,
                    Reg::Payload {
                        base: be32(a[2]).ok_or("payload without base")?,
                        offset: be32(a[3]).ok_or("payload without offset")?,
                        len: be32(a[4]).ok_or("payload without length")?,
                    },
                );
            }
            "meta" => {
                // DREG 1, KEY 2, SREG 3 (a write).
                let a = by_kind::<4>(e.data);
                let (Some(dreg), Some(key), None) = (be32(a[1]), be32(a[2]), a[3]) else {
                    return Err("meta statement".into());
                };
                regs.insert(dreg, Reg::Meta(key));
            }
            "bitwise" => {
                // SREG 1, DREG 2, LEN 3, MASK 4, XOR 5, OP 6.
                let a = by_kind::<7>(e.data);
                let op = be32(a[6]).unwrap_or(0);
                let xor = data_value(a[5]).ok_or("bitwise without xor")?;
                let mask = data_value(a[4]).ok_or("bitwise without mask")?;
                if op != 0 || xor.iter().any(|&b| b != 0) {
                    return Err("bitwise other than a mask".into());
                }
                let src = regs
                    .get(&be32(a[1]).ok_or("bitwise without source")?)
                    .cloned()
                    .ok_or("bitwise of an empty register")?;
                if matches!(src, Reg::Masked { .. }) {
                    return Err("bitwise twice".into());
                }
                regs.insert(
                    be32(a[2]).ok_or("bitwise without destination")?,
                    Reg::Masked {
                        inner: Box::new(src),
                        mask: mask.to_vec(),
                    },
                );
            }
            "cmp" => {
                // SREG 1, OP 2, DATA 3.
                let a = by_kind::<4>(e.data);
                let reg = regs
                    .get(&be32(a[1]).ok_or("cmp without register")?)
                    .cloned()
                    .ok_or("cmp of an empty register")?;
                let op = be32(a[2]).ok_or("cmp without op")?;
                let value = data_value(a[3]).ok_or("cmp without data")?;
                // A port range as two cmps (>= then <=) on one register.
                if op == 5
                    && let Some(next) = list.get(i + 1)
                    && next.name == "cmp"
                {
                    let b = by_kind::<4>(next.data);
                    if be32(b[1]) == be32(a[1]) && be32(b[2]) == Some(3) {
                        let hi = data_value(b[3]).ok_or("cmp without data")?;
                        w.port_range(&reg, value, hi, false)?;
                        i += 2;
                        continue;
                    }
                }
                w.cmp(&reg, op, value)?;
            }
            "range" => {
                // SREG 1, OP 2, FROM 3, TO 4.
                let a = by_kind::<5>(e.data);
                let reg = regs
                    .get(&be32(a[1]).ok_or("range without register")?)
                    .cloned()
                    .ok_or("range of an empty register")?;
                let invert = match be32(a[2]) {
                    Some(0) => false,
                    Some(1) => true,
                    _ => return Err("range op".into()),
                };
                let lo = data_value(a[3]).ok_or("range without data")?;
                let hi = data_value(a[4]).ok_or("range without data")?;
                w.port_range(&reg, lo, hi, invert)?;
            }
            "immediate" => {
                // DREG 1, DATA 2 {VALUE 1, VERDICT 2 {CODE 1, CHAIN 2}}.
                let a = by_kind::<3>(e.data);
                if be32(a[1]) != Some(0) {
                    return Err("immediate into a data register".into());
                }
                let v = a[2]
                    .and_then(|d| d.nested().find(|x| x.kind == 2))
                    .ok_or("immediate without verdict")?;
                let va = by_kind::<3>(v.value);
                let code = be32(va[1]).ok_or("verdict without code")? as i32;
                let chain = va[2].map(|x| x.text());
                w.target = Some(match (code, chain) {
                    (1, None) => " -j ACCEPT".into(),
                    (0, None) => " -j DROP".into(),
                    (-5, None) => " -j RETURN".into(),
                    (-3, Some(c)) => format!(" -j {c}"),
                    (-4, Some(c)) => format!(" -g {c}"),
                    (code, _) => return Err(format!("verdict {code}")),
                });
            }
            "limit" => {
                // RATE 1 (be64), UNIT 2 (be64 seconds), BURST 3, TYPE 4 (0: packets),
                // FLAGS 5 (1: inverted).
                let a = by_kind::<6>(e.data);
                let (Some(rate), Some(unit)) =
                    (a[1].and_then(|x| x.be_u64()), a[2].and_then(|x| x.be_u64()))
                else {
                    return Err("limit without rate".into());
                };
                if be32(a[4]).unwrap_or(0) != 0 || be32(a[5]).unwrap_or(0) != 0 {
                    return Err("limit of bytes or inverted".into());
                }
                let text = xt::limit(rate, unit, be32(a[3]).unwrap_or(0))
                    .ok_or("limit rate not decoded")?;
                w.matches.push(text);
            }
            "log" => {
                // GROUP 1 (be16), PREFIX 2, SNAPLEN 3 (be32), QTHRESHOLD 4 (be16),
                // LEVEL 5, FLAGS 6. iptables-nft writes NFLOG so (LOG stays xt).
                let a = by_kind::<7>(e.data);
                let be16 = |x: Option<Attr<'_>>| {
                    x.and_then(|x| Some(u16::from_be_bytes(x.value.get(..2)?.try_into().ok()?)))
                };
                let Some(group) = be16(a[1]) else {
                    return Err("log without a group (not NFLOG)".into());
                };
                if a[5].is_some() || a[6].is_some() {
                    return Err("log with a level or flags".into());
                }
                let prefix = a[2].map(|x| x.string());
                w.target = Some(xt::nflog(
                    prefix.as_deref(),
                    group,
                    be32(a[3]).unwrap_or(0),
                    be16(a[4]).unwrap_or(0),
                ));
            }
            "match" | "target" => {
                // NAME 1, REV 2, INFO 3.
                let a = by_kind::<4>(e.data);
                let name = a[1].map(|x| x.text()).ok_or("xt without name")?;
                let rev = be32(a[2]).ok_or("xt without revision")?;
                let info = a[3].map(|x| x.value).unwrap_or(&[]);
                let ctx = xt::Ctx { family };
                if e.name == "match" && name == "set" {
                    // xt_set names its ipset by the kernel's index: the name needs an
                    // ipset query, not this decoder.
                    return Err("match set (ipset index) not decoded".into());
                }
                if e.name == "match" {
                    let text = xt::save_match(&name, rev, info, &ctx)
                        .ok_or_else(|| format!("match {name} revision {rev} not decoded"))?;
                    w.matches.push(text);
                } else {
                    let text = xt::save_target(&name, rev, info, &ctx)
                        .ok_or_else(|| format!("target {name} revision {rev} not decoded"))?;
                    w.target = Some(format!(" -j {name}{text}"));
                }
            }
            other => return Err(format!("expression {other} not decoded")),
        }
        i += 1;
    }
    w.write_line(out)
}

/// The source and destination ports' loads.
const PORT_AT_0: Reg = Reg::Payload {
    base: 2,
    offset: 0,
    len: 2,
};
const PORT_AT_2: Reg = Reg::Payload {
    base: 2,
    offset: 2,
    len: 2,
};

/// Network header offsets of the source and destination addresses.
fn addr_offsets(family: u8) -> (u32, u32, u32) {
    if family == AF_INET6 {
        (8, 24, 16)
    } else {
        (12, 16, 4)
    }
}

impl RuleWords {
    fn cmp(&mut self, reg: &Reg, op: u32, value: &[u8]) -> Result<(), String> {
        // A port range from 0 (`<=`) or to 65535 (`>=`): one compare.
        if let (
            Reg::Payload {
                base: 2, len: 2, ..
            },
            3 | 5,
        ) = (reg, op)
        {
            let (lo, hi) = if op == 3 {
                (&[0u8, 0][..], value)
            } else {
                (value, &[0xffu8, 0xff][..])
            };
            return self.port_range(reg, lo, hi, false);
        }
        let invert = match op {
            0 => false,
            1 => true,
            _ => return Err(format!("cmp op {op}")),
        };
        let (src_off, dst_off, alen) = addr_offsets(self.family);
        let (inner, mask) = match reg {
            Reg::Masked { inner, mask } => (inner.as_ref(), Some(mask.as_slice())),
            r => (r, None),
        };
        match inner {
            Reg::Payload {
                base: 1,
                offset,
                len,
            } if (*offset == src_off || *offset == dst_off) && *len <= alen => {
                let len = *len as usize;
                if value.len() != len || mask.is_some_and(|m| m.len() != len) {
                    return Err("address compare of another length".into());
                }
                // A prefix on a byte boundary is a shorter load; the rest is zeros.
                let mut addr = value.to_vec();
                let mut full_mask = mask.map_or_else(|| vec![0xff; len], <[u8]>::to_vec);
                addr.resize(alen as usize, 0);
                full_mask.resize(alen as usize, 0);
                let slot = if *offset == src_off {
                    &mut self.src
                } else {
                    &mut self.dst
                };
                if slot.is_some() {
                    return Err("two address matches".into());
                }
                *slot = Some((invert, addr, full_mask));
            }
            Reg::Payload {
                base: 1,
                offset: 9,
                len: 1,
            } if self.family == AF_INET && mask.is_none() => self.set_proto(invert, value)?,
            Reg::Payload {
                base: 1,
                offset: 6,
                len: 2,
            } if self.family == AF_INET
                && mask == Some(&[0x1f, 0xff][..])
                && value == [0, 0]
                && self.frag.is_none() =>
            {
                // -f: the fragment offset is not 0 (a compare "!= 0"); `! -f`: "== 0".
                self.frag = Some(invert);
            }
            Reg::Meta(16) if mask.is_none() => self.set_proto(invert, value)?,
            Reg::Meta(k @ (6 | 7)) if mask.is_none() => {
                // iifname / oifname: the name with its NUL for an exact name, without
                // it for a `name+` prefix.
                let (name, exact) = match value.iter().position(|&b| b == 0) {
                    Some(end) if value[end..].iter().all(|&b| b == 0) => (&value[..end], true),
                    Some(_) => return Err("interface name with bytes after its end".into()),
                    None => (value, false),
                };
                let name = std::str::from_utf8(name).map_err(|_| "interface name not UTF-8")?;
                let name = if exact {
                    name.to_string()
                } else {
                    format!("{name}+")
                };
                let slot = if *k == 6 {
                    &mut self.iif
                } else {
                    &mut self.oif
                };
                if slot.is_some() {
                    return Err("two interface matches".into());
                }
                *slot = Some((invert, name));
            }
            Reg::Meta(3) => {
                // -m mark --mark VALUE[/MASK] (host byte order).
                let v = u32_ne(value).ok_or("mark of another length")?;
                let m = match mask {
                    Some(m) => u32_ne(m).ok_or("mark mask of another length")?,
                    None => u32::MAX,
                };
                let mut s = String::from(" -m mark");
                if invert {
                    s.push_str(" !");
                }
                if m == u32::MAX {
                    let _ = write!(s, " --mark 0x{v:x}");
                } else {
                    let _ = write!(s, " --mark 0x{v:x}/0x{m:x}");
                }
                self.matches.push(s);
            }
            Reg::Payload {
                base: 2,
                offset: 13,
                len: 1,
            } if self.proto == Some((false, 6)) => {
                // --tcp-flags MASK COMPARE: the flags byte masked, compared.
                let ([m], [v]) = (mask.ok_or("tcp flags without a mask")?, value) else {
                    return Err("tcp flags of another length".into());
                };
                let (m, v) = (*m, *v);
                let pm = self.port_match()?;
                if pm.flags.is_some() || m & !0x3f != 0 || v & !m != 0 {
                    return Err("tcp flags not decoded".into());
                }
                pm.flags = Some((m, v, invert));
                self.render_ports();
            }
            Reg::Payload {
                base: 2,
                offset: 0,
                len: 4,
            } if mask.is_none() && !invert => {
                // --sport S --dport D in one load.
                let [a, b, c, d] = value else {
                    return Err("ports of another length".into());
                };
                self.port_range(&PORT_AT_0, &[*a, *b], &[*a, *b], false)?;
                self.port_range(&PORT_AT_2, &[*c, *d], &[*c, *d], false)?;
            }
            Reg::Payload {
                base: 2,
                offset,
                len: 2,
            } if mask.is_none() && (*offset == 0 || *offset == 2) => {
                let p = u16::from_be_bytes(value.try_into().map_err(|_| "port of another length")?);
                self.port_range(inner, &p.to_be_bytes(), &p.to_be_bytes(), invert)?;
            }
            other => return Err(format!("compare of {other:?}")),
        }
        Ok(())
    }

    fn set_proto(&mut self, invert: bool, value: &[u8]) -> Result<(), String> {
        let [p] = value else {
            return Err("protocol of another length".into());
        };
        if self.proto.is_some() {
            return Err("two protocol matches".into());
        }
        self.proto = Some((invert, *p));
        Ok(())
    }

    /// The native tcp/udp match being built (`-m tcp --dport 80`), in the place of its
    /// first expression among the matches.
    fn port_match(&mut self) -> Result<&mut PortMatch, String> {
        let Some((false, proto @ (6 | 17))) = self.proto else {
            return Err("port match without -p tcp or -p udp".into());
        };
        if self.ports.is_none() {
            self.matches.push(String::new());
            self.ports = Some(PortMatch {
                index: self.matches.len() - 1,
                proto,
                sport: None,
                dport: None,
                flags: None,
            });
        }
        self.ports.as_mut().ok_or_else(|| "no port match".into())
    }

    /// A native port match or range (`--dport A:B`).
    fn port_range(&mut self, reg: &Reg, lo: &[u8], hi: &[u8], invert: bool) -> Result<(), String> {
        let Reg::Payload {
            base: 2,
            offset: off @ (0 | 2),
            len: 2,
        } = reg
        else {
            return Err(format!("range of {reg:?}"));
        };
        let lo = u16::from_be_bytes(lo.try_into().map_err(|_| "port of another length")?);
        let hi = u16::from_be_bytes(hi.try_into().map_err(|_| "port of another length")?);
        let pm = self.port_match()?;
        let slot = if *off == 0 {
            &mut pm.sport
        } else {
            &mut pm.dport
        };
        if slot.is_some() {
            return Err("two port matches".into());
        }
        *slot = Some((lo, hi, invert));
        self.render_ports();
        Ok(())
    }

    /// Writes the tcp/udp match's text: `--sport`, `--dport`, `--tcp-flags`, as
    /// libxt_tcp and libxt_udp print them.
    fn render_ports(&mut self) {
        let Some(pm) = &self.ports else { return };
        let mut s = format!(" -m {}", if pm.proto == 6 { "tcp" } else { "udp" });
        for (name, p) in [("sport", pm.sport), ("dport", pm.dport)] {
            if let Some((lo, hi, inv)) = p {
                if inv {
                    s.push_str(" !");
                }
                if lo == hi {
                    let _ = write!(s, " --{name} {lo}");
                } else {
                    let _ = write!(s, " --{name} {lo}:{hi}");
                }
            }
        }
        if let Some((mask, cmp, inv)) = pm.flags {
            if inv {
                s.push_str(" !");
            }
            let _ = write!(
                s,
                " --tcp-flags {} {}",
                xt::tcp_flags(mask),
                xt::tcp_flags(cmp)
            );
        }
        let index = pm.index;
        self.matches[index] = s;
    }

    /// Writes the rule's words after `-A CHAIN` into `s` (on an error, part of them may
    /// be written: the caller takes them back).
    fn write_line(self, s: &mut String) -> Result<(), String> {
        for (flag, a) in [('s', &self.src), ('d', &self.dst)] {
            if let Some((invert, addr, mask)) = a {
                if *invert {
                    s.push_str(" !");
                }
                let _ = write!(s, " -{flag} ");
                xt::push_addr_mask(s, self.family, addr, mask)?;
            }
        }
        for (flag, i) in [('i', &self.iif), ('o', &self.oif)] {
            if let Some((invert, name)) = i {
                if *invert {
                    s.push_str(" !");
                }
                let _ = write!(s, " -{flag} {name}");
            }
        }
        if let Some((invert, p)) = self.proto {
            if invert {
                s.push_str(" !");
            }
            let _ = write!(
                s,
                " -p {}",
                xt::proto_name(p).ok_or(format!("protocol {p}"))?
            );
        }
        match self.frag {
            Some(true) => s.push_str(" -f"),
            Some(false) => s.push_str(" ! -f"),
            None => {}
        }
        for m in &self.matches {
            s.push_str(m);
        }
        if let Some(t) = &self.target {
            s.push_str(t);
        }
        Ok(())
    }
}

fn u32_ne(b: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(b.try_into().ok()?))
}

/// Reads the nf_tables ruleset of this namespace or of `netns` over netlink (GET dumps
/// only: read-only) and decodes it; gives the generation it was read at and the
/// tables. Errors: the dump failed, or `deadline` passed (`io::ErrorKind::TimedOut`).
pub fn read(
    netns: Option<&str>,
    deadline: Option<std::time::Instant>,
) -> std::io::Result<(u32, Vec<DecodedTable>)> {
    // The rule dumps (and their decoding) shared by up to 4 threads: most of the
    // time is the kernel filling 170k rule messages, which runs on the dumping thread.
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
    let decoders: Vec<std::sync::Mutex<Decoder>> = (0..workers)
        .map(|_| std::sync::Mutex::new(Decoder::new()))
        .collect();
    let opts = plumb_os::nftables::DumpOptions {
        sets: true,
        elements: true,
        deadline,
    };
    // Each worker locks its own decoder, except for set elements: those go to the
    // decoder that has the sets (worker 0's), whichever worker dumped them (the
    // kernel's time finding each set dwarfs the lock's).
    let generation = plumb_os::nftables::dump_ruleset_split(netns, &opts, workers, &|w, m| {
        let element = m
            .as_ref()
            .is_some_and(|m| m.kind == (SUBSYS_NFTABLES << 8) | msg::NEWSETELEM);
        let Some(d) = decoders.get(if element { 0 } else { w }) else {
            return;
        };
        let mut d = d.lock().unwrap_or_else(|p| p.into_inner());
        match m {
            Some(m) => d.push(&m),
            None => d.reset(),
        }
    })?;
    let mut all = decoders
        .into_iter()
        .map(|d| d.into_inner().unwrap_or_else(|p| p.into_inner()));
    let mut decoder = all.next().unwrap_or_default();
    for other in all {
        decoder.merge(other);
    }
    Ok((generation, decoder.finish()))
}

#[cfg(test)]
mod tests;
