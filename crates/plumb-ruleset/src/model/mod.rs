//! The ruleset model: ruleset -> tables -> chains -> rules, for every backend.
//!
//! One model serves iptables-legacy, iptables-nft and native nftables so that
//! ownership, diff, checks and trace are written once. Invariants:
//! - nothing read is dropped: every rule keeps its original text (and through it its
//!   location: [`Rule::location`]),
//!   and parts plumb does not understand stay available verbatim;
//! - rules are kept in kernel order; a rule's 1-based position is its index plus one;
//! - a `Ruleset` never holds IO handles: it is built from text by the parsers.
//!
//! The model owns every type a rule body holds:
//! - [`xt`]: an xtables rule's index over its own text (generic options, matches,
//!   target) and the views over it, built on demand with [`xt::words`], the splitter
//!   `iptables-restore` uses;
//! - [`nft`]: a native nft rule's statements, and sets and maps;
//! - [`listed`]: a rule read from a lossy `iptables -nvL` listing;
//! - [`packed`]: rule lines packed word by word ([`Ruleset::pack_texts`]).
//!
//! Dependencies point one way: the readers (`crate::iptables`, `crate::nft`,
//! `crate::format`), the printer and the analyses use the model; the model uses only
//! the leaves, [`crate::diagnostic`] and [`crate::fasthash`] (tests/layering.rs checks
//! this).

pub mod ipvs;
pub mod listed;
pub mod nft;
pub mod packed;
pub(crate) mod packer;
mod source;
pub mod xt;

use crate::diagnostic::{Diagnostic, Severity};
use listed::ListedRule;
use nft::{NftRule, NftSet};
use serde::Serialize;
pub use source::{Placed, RuleText, Source, SourceText};
use std::fmt;
use xt::{XtBuf, XtCell, XtTargetRef, XtView, XtViewOf};

/// Address family of a table (`ip`/`ip6` for iptables; all nft families).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Family {
    /// IPv4 (`iptables`, nft `ip`).
    Ip,
    /// IPv6 (`ip6tables`, nft `ip6`).
    Ip6,
    /// nft `inet`: one table for IPv4 and IPv6.
    Inet,
    /// ARP (`arptables`, nft `arp`).
    Arp,
    /// Bridged frames (`ebtables`, nft `bridge`).
    Bridge,
    /// nft `netdev`: per-device ingress/egress, before the IP stack.
    Netdev,
}

impl Family {
    /// The family's `NFPROTO_*` code, as nf_tables netlink names tables
    /// (`nfgen_family`); `Inet` 1, `Ip` 2, `Arp` 3, `Netdev` 5, `Bridge` 7, `Ip6` 10.
    pub fn nfproto(self) -> u8 {
        match self {
            Family::Inet => 1,
            Family::Ip => 2,
            Family::Arp => 3,
            Family::Netdev => 5,
            Family::Bridge => 7,
            Family::Ip6 => 10,
        }
    }

    /// The family of an `NFPROTO_*` code; `None` for a code no table family has.
    pub fn from_nfproto(code: u8) -> Option<Family> {
        [
            Family::Inet,
            Family::Ip,
            Family::Arp,
            Family::Netdev,
            Family::Bridge,
            Family::Ip6,
        ]
        .into_iter()
        .find(|f| f.nfproto() == code)
    }

    /// The family's name as nft and the model's JSON spell it (`ip`, `ip6`, `inet`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Family::Ip => "ip",
            Family::Ip6 => "ip6",
            Family::Inet => "inet",
            Family::Arp => "arp",
            Family::Bridge => "bridge",
            Family::Netdev => "netdev",
        }
    }

    /// Reads a family name as nft spells it (`ip`, `ip6`, `inet`, `arp`, `bridge`, `netdev`);
    /// `None` for anything else.
    pub fn parse(s: &str) -> Option<Family> {
        Some(match s {
            "ip" => Family::Ip,
            "ip6" => Family::Ip6,
            "inet" => Family::Inet,
            "arp" => Family::Arp,
            "bridge" => Family::Bridge,
            "netdev" => Family::Netdev,
            _ => return None,
        })
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which kernel interface holds the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// x_tables via setsockopt (`iptables-legacy`).
    IptablesLegacy,
    /// nf_tables through the iptables-nft compatibility layer.
    IptablesNft,
    /// Native nf_tables tables written with `nft` or netlink.
    Nftables,
    /// An iptables dump that does not say which backend produced it.
    #[serde(rename = "iptables")]
    IptablesUnknown,
}

impl Backend {
    /// The backend's name in plumb's output and JSON (`iptables-legacy`, `iptables-nft`,
    /// `nftables`, or `iptables` when unknown).
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::IptablesLegacy => "iptables-legacy",
            Backend::IptablesNft => "iptables-nft",
            Backend::Nftables => "nftables",
            Backend::IptablesUnknown => "iptables",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Netfilter hook a base chain is attached to.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Hook {
    /// Before routing, for every packet that arrives (DNAT happens here).
    Prerouting,
    /// After routing, for packets addressed to this host.
    Input,
    /// After routing, for packets this host routes on (pods' traffic on a node).
    Forward,
    /// Packets the host itself sends, before routing is final.
    Output,
    /// Every packet leaving, after routing (SNAT/masquerade happen here).
    Postrouting,
    /// nft `netdev` ingress: as the device receives a frame, before `prerouting`.
    Ingress,
    /// nft `netdev` egress: as the device is about to send a frame.
    Egress,
    /// A hook name plumb does not know, kept verbatim.
    Other(String),
}

impl Hook {
    /// The hook of an iptables built-in chain name (`PREROUTING`, ...).
    pub fn from_builtin_chain(name: &str) -> Option<Hook> {
        Some(match name {
            "PREROUTING" => Hook::Prerouting,
            "INPUT" => Hook::Input,
            "FORWARD" => Hook::Forward,
            "OUTPUT" => Hook::Output,
            "POSTROUTING" => Hook::Postrouting,
            _ => return None,
        })
    }

    /// Reads an nft hook name (`prerouting`, `ingress`, ...); an unknown name is kept as
    /// [`Hook::Other`].
    pub fn parse_nft(s: &str) -> Hook {
        match s {
            "prerouting" => Hook::Prerouting,
            "input" => Hook::Input,
            "forward" => Hook::Forward,
            "output" => Hook::Output,
            "postrouting" => Hook::Postrouting,
            "ingress" => Hook::Ingress,
            "egress" => Hook::Egress,
            other => Hook::Other(other.to_string()),
        }
    }

    /// The hook's nft name, lowercase (`prerouting`, ..., or the [`Hook::Other`] text).
    pub fn as_str(&self) -> &str {
        match self {
            Hook::Prerouting => "prerouting",
            Hook::Input => "input",
            Hook::Forward => "forward",
            Hook::Output => "output",
            Hook::Postrouting => "postrouting",
            Hook::Ingress => "ingress",
            Hook::Egress => "egress",
            Hook::Other(s) => s,
        }
    }
}

/// Default verdict of a base chain.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Policy {
    /// `ACCEPT`/`accept`: packets that reach the end of the chain are accepted.
    Accept,
    /// `DROP`/`drop`: packets that reach the end of the chain are dropped.
    Drop,
    /// Anything else a dump may carry (kept verbatim).
    Other(String),
}

impl Policy {
    /// Reads a policy in iptables (`ACCEPT`) or nft (`accept`) spelling; anything else is kept as
    /// [`Policy::Other`].
    pub fn parse(s: &str) -> Policy {
        match s {
            "ACCEPT" | "accept" => Policy::Accept,
            "DROP" | "drop" => Policy::Drop,
            other => Policy::Other(other.to_string()),
        }
    }

    /// iptables spelling (`ACCEPT`, `DROP`).
    pub fn as_iptables(&self) -> &str {
        match self {
            Policy::Accept => "ACCEPT",
            Policy::Drop => "DROP",
            Policy::Other(s) => s,
        }
    }
}

/// Packet and byte counters as printed by `iptables-save -c` or `nft list`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct Counters {
    /// Packets counted (exact, unless the rule came from a listing with `K`/`M`/`G` suffixes).
    pub packets: u64,
    /// Bytes counted, of whole IP packets.
    pub bytes: u64,
}

impl Counters {
    /// Reads `[packets:bytes]` as iptables-save prints it; `None` for anything else.
    pub fn parse_bracketed(s: &str) -> Option<Counters> {
        let inner = s.strip_prefix('[')?.strip_suffix(']')?;
        let (p, b) = inner.split_once(':')?;
        Some(Counters {
            packets: p.parse().ok()?,
            bytes: b.parse().ok()?,
        })
    }
}

/// Where something was read: 1-based line and column in the source text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct Location {
    /// 1-based line in the input text.
    pub line: u32,
    /// 1-based column, counted in characters from the start of the line.
    pub column: u32,
}

/// Whether a parsed text was a complete dump or only part of one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Completeness {
    /// A full dump (`iptables-save`, `nft list ruleset`): absent chains do not exist.
    Full,
    /// An `iptables-restore --noflush` payload (kube-proxy partial sync): chains it
    /// references may exist in the kernel without being declared here.
    Partial,
    /// The input ended early (no COMMIT, unbalanced braces, a literal "...." line).
    Truncated,
    /// Parts of the input could not be read (error diagnostics): rules or chains may be
    /// missing from the model, so absence proves nothing, as for a truncated input.
    Damaged,
}

/// The whole firewall as read from one or more dumps.
#[derive(Clone, Debug, Serialize)]
pub struct Ruleset {
    /// The tables in input order (ip and ip6 tables of merged dumps side by side).
    pub tables: Vec<Table>,
    /// Whether absence in this model means absence on the node; see [`Completeness`].
    pub completeness: Completeness,
    /// Read from a listing that loses detail (`iptables -nvL`): rules are approximate
    /// (independent of completeness: a listing can also be truncated).
    pub approximate: bool,
    /// Problems found while reading, with locations. Empty for clean input.
    pub diagnostics: Vec<Diagnostic>,
    /// IPVS virtual services read from `ipvsadm -ln` (kube-proxy's IPVS mode).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ipvs: Vec<ipvs::VirtualService>,
    /// Sets read from `ipset list` output (in a session next to the rules using them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ipsets: Vec<ipvs::IpSetListing>,
}

impl Default for Ruleset {
    fn default() -> Self {
        Ruleset {
            tables: Vec::new(),
            completeness: Completeness::Full,
            approximate: false,
            diagnostics: Vec::new(),
            ipvs: Vec::new(),
            ipsets: Vec::new(),
        }
    }
}

impl Ruleset {
    /// The table with this family and name (`Family::Ip`, `"nat"`); `None` if the ruleset has none.
    pub fn table(&self, family: Family, name: &str) -> Option<&Table> {
        self.tables
            .iter()
            .find(|t| t.family == family && &*t.name == name)
    }

    /// The tables of a given backend, e.g. to compare legacy and nft.
    pub fn tables_of(&self, backend: Backend) -> impl Iterator<Item = &Table> {
        self.tables.iter().filter(move |t| t.backend == backend)
    }

    /// Rules in every chain of every table.
    pub fn rule_count(&self) -> usize {
        self.tables.iter().map(Table::rule_count).sum()
    }

    /// Chains (built-in and user-defined) in every table.
    pub fn chain_count(&self) -> usize {
        self.tables.iter().map(|t| t.chains.len()).sum()
    }

    /// Number of error diagnostics: parts of the input that could not be read.
    pub fn error_count(&self) -> usize {
        self.errors().count()
    }

    /// The error diagnostics, in input order.
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
    }

    /// Marks a ruleset read as a full dump [`Completeness::Damaged`] when parts of it
    /// could not be read: a model with holes is never judged as the whole ruleset.
    /// Every reader that builds a ruleset from text ends with this.
    pub fn settle_completeness(&mut self) {
        if self.completeness == Completeness::Full && self.error_count() > 0 {
            self.completeness = Completeness::Damaged;
        }
    }

    /// True when so little of the input was read that it is not a ruleset in the format
    /// it was read as: errors and nothing read, or more errors than chains and rules
    /// read (a file given with the wrong `--format`, a dump cut in its first line).
    /// Commands refuse such input instead of judging an empty model.
    pub fn is_unreadable(&self) -> bool {
        let errors = self.error_count();
        errors > 0 && (self.tables.is_empty() || errors > self.rule_count() + self.chain_count())
    }

    /// Packs the texts of the xtables rules read from an input word by word, into one
    /// source shared by the ruleset ([`packed`]), with the chains' names among its
    /// words: about 2x less memory than the input's lines on a kube-proxy dump, and
    /// the input is no longer held when nothing else points into it. A rule reads and
    /// is located as before. Rules of other kinds, and texts that do not start their
    /// line (their column could not be found again), stay as they are. Returns how
    /// many were packed.
    ///
    /// Nothing reads rules packed yet but tests: the passes that read every rule must
    /// first read texts with [`RuleText::read`], not as `&str`s, which keep their
    /// stride read back (ARCHITECTURE.md, "The ruleset model").
    pub fn pack_texts(&mut self) -> usize {
        let mut chains: Vec<&mut Chain> = self
            .tables
            .iter_mut()
            .flat_map(|t| t.chains.iter_mut())
            .collect();
        packer::pack_chains(&mut chains, None, &mut packer::Packer::default())
    }

    /// Adds the tables and diagnostics of another ruleset (e.g. ip and ip6 dumps).
    pub fn merge(&mut self, other: Ruleset) {
        self.tables.extend(other.tables);
        self.diagnostics.extend(other.diagnostics);
        self.ipvs.extend(other.ipvs);
        self.ipsets.extend(other.ipsets);
        self.approximate |= other.approximate;
        if other.completeness != Completeness::Full {
            self.completeness = other.completeness;
        }
    }
}

/// One table: `*nat` in iptables-save, `table ip kube-proxy { ... }` in nft.
#[derive(Clone, Debug, Serialize)]
pub struct Table {
    /// Address family: `ip`/`ip6` for iptables tables, any for nft.
    pub family: Family,
    /// Which kernel interface holds the table (legacy, nft, native nft, unknown).
    pub backend: Backend,
    /// Table name as the dump spells it (`nat`, `filter`, `kube-proxy`).
    pub name: Box<str>,
    /// The chains in input order, built-in chains included.
    pub chains: Vec<Chain>,
    /// nft sets and maps (empty for iptables tables).
    pub sets: Vec<NftSet>,
    /// Chains deleted by the dump itself (`-X NAME` in a restore payload).
    pub deleted_chains: Vec<Box<str>>,
    /// nft table comment or flags kept verbatim (`comment "rules for kube-proxy"`).
    pub attributes: Vec<Box<str>>,
    /// Where the table header (`*nat`, `table ip nat {`) was read.
    pub location: Location,
    /// An iptables-nft table read from an nft listing (`nft list ruleset`): rule
    /// comments, and the options of extensions nft shows only by name, are not in it
    /// (see `crate::nft::iptables_nft`).
    pub nft_view: bool,
}

impl Table {
    /// An empty table with no chains, sets or attributes.
    pub fn new(family: Family, backend: Backend, name: &str, location: Location) -> Table {
        Table {
            family,
            backend,
            name: name.into(),
            chains: Vec::new(),
            sets: Vec::new(),
            deleted_chains: Vec::new(),
            attributes: Vec::new(),
            location,
            nft_view: false,
        }
    }

    /// The chain with this name; `None` when the table does not declare it.
    pub fn chain(&self, name: &str) -> Option<&Chain> {
        self.chains.iter().find(|c| &*c.name == name)
    }

    /// The nft set or map with this name; `None` when the table has none.
    pub fn set(&self, name: &str) -> Option<&NftSet> {
        self.sets.iter().find(|s| &*s.name == name)
    }

    /// Rules in all chains of this table.
    pub fn rule_count(&self) -> usize {
        self.chains.iter().map(|c| c.rules.len()).sum()
    }
}

/// A chain: built-in/base (attached to a hook, with a policy) or user-defined.
#[derive(Clone, Debug, Serialize)]
pub struct Chain {
    /// Chain name as written (`KUBE-SERVICES`, `PREROUTING`, `nat-prerouting`): a span
    /// of the input it was read from when the reader has one (no allocation of its own:
    /// a 10k-service dump declares 60k chains), else a text of its own.
    pub name: RuleText,
    /// Boxed: most chains are user-defined, and a 10k-service dump has 40k of them.
    pub base: Option<Box<BaseChain>>,
    /// The rules in kernel order (first match first); a rule's position is its index
    /// plus one ([`Chain::positioned`], [`position_at`]).
    #[serde(serialize_with = "serialize_rules")]
    pub rules: Vec<Rule>,
    /// Where the chain was declared (`:NAME` line, `chain NAME {`), or the first rule
    /// appended to it when the input never declares it.
    pub location: Location,
}

impl Chain {
    /// A chain with no rules; `base` makes it a built-in/base chain.
    pub fn new(name: &str, base: Option<BaseChain>, location: Location) -> Chain {
        Chain::named(name.into(), base, location)
    }

    /// [`Chain::new`] with a name read already (a span of the input: see
    /// [`RuleText::within`]).
    pub fn named(name: RuleText, base: Option<BaseChain>, location: Location) -> Chain {
        Chain {
            name,
            base: base.map(Box::new),
            rules: Vec::new(),
            location,
        }
    }

    /// The rules with their 1-based positions.
    pub fn positioned(&self) -> impl Iterator<Item = (u32, &Rule)> {
        self.rules
            .iter()
            .enumerate()
            .map(|(i, r)| (position_at(i), r))
    }

    /// Whether the chain is attached to a hook (an iptables built-in chain or an nft base
    /// chain): packets enter it from the kernel, not by a jump.
    pub fn is_builtin(&self) -> bool {
        self.base.is_some()
    }

    /// The verdict for packets that reach the end of a base chain; `None` for
    /// user-defined chains (they return to the caller) and for base chains whose input
    /// shows no policy (a built-in chain a restore payload only appends to).
    pub fn policy(&self) -> Option<&Policy> {
        self.base.as_ref().and_then(|b| b.policy.as_ref())
    }
}

/// What makes a chain a base chain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BaseChain {
    /// The netfilter hook packets enter the chain from.
    pub hook: Hook,
    /// Default verdict; `None` when the input does not show one (nft's default is accept).
    pub policy: Option<Policy>,
    /// The chain's counters (`[packets:bytes]` of an iptables-save `:CHAIN` line); `None`
    /// when not printed.
    pub counters: Option<Counters>,
    /// nft only: `type filter|nat|route`.
    pub chain_type: Option<Box<str>>,
    /// nft only: priority as written (`dstnat`, `-100`, `filter + 10`).
    pub priority: Option<Box<str>>,
}

/// One rule, in chain order. 32 bytes: a 10k-service dump holds 170k of them, and
/// what a rule can read again from its text (counters, the index of its words, where
/// it was read: [`Rule::location`]) or from its place (its position:
/// [`Chain::positioned`]) is not kept beside it.
#[derive(Clone)]
pub struct Rule {
    /// The rule exactly as read (one line of the dump).
    pub text: RuleText,
    /// What was understood of the rule, by backend; not serialised (the JSON carries
    /// `text`). Also holds the rule's counters ([`Rule::counters`]).
    pub body: RuleBody,
}

/// Where the command word (`-A`, `-I`) of an iptables-save line starts: after its
/// indent and a `[packets:bytes]` prefix, as the reader finds it.
fn xt_command_at(line: &str) -> usize {
    let words = line.trim_start();
    if words.starts_with('[')
        && let Some(close) = words.find(']')
    {
        return line.len() - words[close + 1..].trim_start().len();
    }
    line.len() - words.len()
}

impl fmt::Debug for Rule {
    /// As a derived `Debug` would with the location kept beside the rule.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rule")
            .field("location", &self.location())
            .field("text", &self.text)
            .field("body", &self.body)
            .finish()
    }
}

/// A rule with its 1-based position in its chain, serialised as the model has always
/// written a rule: `position`, `location`, `counters` (`null` when none) and `text`.
struct PositionedRule<'a>(u32, &'a Rule);

impl Serialize for PositionedRule<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let PositionedRule(position, rule) = *self;
        let mut st = s.serialize_struct("Rule", 4)?;
        st.serialize_field("position", &position)?;
        st.serialize_field("location", &rule.location())?;
        st.serialize_field("counters", &rule.counters())?;
        st.serialize_field("text", &rule.text)?;
        st.end()
    }
}

/// A chain's rules, each serialised with its position ([`PositionedRule`]).
fn serialize_rules<S: serde::Serializer>(rules: &[Rule], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(
        rules
            .iter()
            .enumerate()
            .map(|(i, r)| PositionedRule(position_at(i), r)),
    )
}

/// The 1-based position of the rule at index `i` of its chain (saturating: a chain
/// cannot hold `u32::MAX` rules read from a file the parsers accept).
pub fn position_at(i: usize) -> u32 {
    u32::try_from(i + 1).unwrap_or(u32::MAX)
}

/// Backend-specific structure of a rule.
#[derive(Clone, Debug)]
pub enum RuleBody {
    /// An xtables rule: generic options, matches, target (indexed on first use).
    Xt(XtCell),
    /// A native nftables rule: a statement sequence.
    Nft(NftRule),
    /// Read from a lossy listing (`-nvL`); only the text and what was recognised.
    Approximate(Box<ListedRule>),
}

impl Rule {
    /// Where the rule was read: its line, and the column of its first word (`-A` after
    /// an iptables-save `[packets:bytes]`, an nft rule's first statement, a listing's row). Found from
    /// where its text starts in its source ([`RuleText::location`]), not kept.
    pub fn location(&self) -> Location {
        match &self.body {
            RuleBody::Xt(_) => self.text.location_of(xt_command_at(&self.text.read())),
            // A listing's row is its whole line: it is located at its first word.
            RuleBody::Approximate(_) => {
                let indent = self.text.len() - self.text.trim_start().len();
                self.text.location_of(indent)
            }
            RuleBody::Nft(_) => self.text.location(),
        }
    }

    /// The line of [`Rule::location`], without counting its column: what evidence
    /// quotes, for 100k rules at a time.
    pub fn line(&self) -> u32 {
        self.text.line()
    }

    /// The rule's counters (`[p:b]` or `-c p b` in iptables-save, the `pkts`/`bytes`
    /// columns of a listing, nft's `counter` statement); `None` when the input shows
    /// none. Read from the rule's text or body when asked, not kept beside the rule.
    pub fn counters(&self) -> Option<Counters> {
        match &self.body {
            RuleBody::Xt(x) => x.counters(&self.text.read()),
            RuleBody::Nft(n) => n.counters(self.text.as_str()),
            RuleBody::Approximate(l) => l.counters,
        }
    }

    /// Replaces the rule's counters (a translated rule takes those of the nft rule it
    /// came from). An nft rule's counters are its `counter` statement's and do not change.
    pub fn set_counters(&mut self, counters: Option<Counters>) {
        match &mut self.body {
            RuleBody::Xt(x) => x.set_counters(counters),
            RuleBody::Nft(_) => {}
            RuleBody::Approximate(l) => l.counters = counters,
        }
    }

    /// The xtables structure of the rule (generic options, matches, target), indexed on
    /// first call and kept in the rule (see [`XtCell`]); `None` for nft and listing
    /// rules. For passes over every rule use [`Rule::xt_in`].
    pub fn xt(&self) -> Option<XtView<'_>> {
        match &self.body {
            RuleBody::Xt(x) => Some(x.get(&self.text).view(&self.text)),
            _ => None,
        }
    }

    /// The xtables structure like [`Rule::xt`], but without keeping it: built into
    /// `buf` (no allocation once `buf` has grown) unless the rule holds an index
    /// already, over the rule's text read into `buf` when it is packed (nothing kept:
    /// see [`Ruleset::pack_texts`]). For passes over every rule of a ruleset; see
    /// [`XtBuf`]. A pass that keeps strings of the view past the next rule uses
    /// [`Rule::xt_of`].
    pub fn xt_in<'b>(&'b self, buf: &'b mut XtBuf) -> Option<XtViewOf<'b, 'b>> {
        let RuleBody::Xt(x) = &self.body else {
            return None;
        };
        let XtBuf { text, index } = buf;
        let text = self.text.read_in(text);
        Some(x.build_in(text, index).view_of(text))
    }

    /// [`Rule::xt_in`] over the rule's text as the caller read it (`rule.text.read()`,
    /// which keeps nothing of a packed text: see [`Ruleset::pack_texts`]). `text` must be
    /// this rule's text; the view's strings borrow it.
    pub fn xt_of<'b, 't: 'b>(
        &'b self,
        text: &'t str,
        buf: &'b mut XtBuf,
    ) -> Option<XtViewOf<'b, 't>> {
        match &self.body {
            RuleBody::Xt(x) => Some(x.build_in(text, &mut buf.index).view_of(text)),
            _ => None,
        }
    }

    /// The target of an xtables rule (`-j NAME`, `-g NAME`) as the parser recorded it:
    /// no indexing, no allocation. `None` for rules without a target and for nft and
    /// listing rules (see [`Rule::chain_references`] for those).
    pub fn xt_target(&self) -> Option<XtTargetRef<'_>> {
        // A recorded target is a word of the text: a packed text gives it without
        // being read back.
        // (A target that is not a whole word, quoted say, is read from the text.)
        if let RuleBody::Xt(x) = &self.body
            && let Some(recorded) = x.recorded_target()
        {
            let (range, goto, has_options) = recorded?;
            if let Some(name) = self.text.word(range) {
                return Some(XtTargetRef {
                    name,
                    goto,
                    has_options,
                });
            }
        }
        // A packed text read back: the name lasts when it is a whole word; only a
        // name that is not (quoted, say) keeps the text read back.
        if let std::borrow::Cow::Owned(read) = self.text.read() {
            let t = self.xt_target_of(&read)?;
            if let Some(name) = self.text.lasting(&read, t.name) {
                return Some(XtTargetRef {
                    name,
                    goto: t.goto,
                    has_options: t.has_options,
                });
            }
        }
        self.xt_target_of(&self.text)
    }

    /// [`Rule::xt_target`] over the rule's text as the caller read it (see
    /// [`Rule::xt_of`]).
    pub fn xt_target_of<'t>(&self, text: &'t str) -> Option<XtTargetRef<'t>> {
        match &self.body {
            RuleBody::Xt(x) => x.target(text),
            _ => None,
        }
    }

    /// Every chain this rule can transfer control to (jump, goto, verdict map entries).
    pub fn chain_references(&self) -> Vec<ChainRef<'_>> {
        match &self.body {
            // From the recorded target: asking for references does not index the rule.
            RuleBody::Xt(_) => self
                .xt_target()
                .and_then(|t| t.chain_reference())
                .into_iter()
                .collect(),
            RuleBody::Nft(n) => n.chain_references(self.text.as_str()),
            RuleBody::Approximate(l) => l.chain_reference().into_iter().collect(),
        }
    }

    /// The statements of a native nft rule (`None` for other rules): read from the
    /// rule's text when the rule does not hold them (see [`NftRule`]), for the caller
    /// to drop.
    pub fn nft_statements(&self) -> Option<std::borrow::Cow<'_, [nft::Statement]>> {
        match &self.body {
            RuleBody::Nft(n) => Some(n.statements(self.text.as_str())),
            _ => None,
        }
    }

    /// Comments attached to the rule (`-m comment --comment`, nft `comment "..."`).
    /// Does not make an xtables rule keep its index (see [`XtCell`]).
    pub fn comments(&self) -> Vec<std::borrow::Cow<'_, str>> {
        use std::borrow::Cow;
        match &self.body {
            RuleBody::Xt(cell) => {
                // Read, not borrowed as a `&str`: a packed text is not kept read back.
                let text = self.text.read();
                let built;
                let x = match cell.built() {
                    Some(x) => x,
                    None => {
                        built = cell.build(&text);
                        &built
                    }
                };
                match text {
                    Cow::Borrowed(t) => x.view_of(t).comments().collect(),
                    Cow::Owned(t) => x
                        .view_of(&t)
                        .comments()
                        .map(|c| Cow::Owned(c.into_owned()))
                        .collect(),
                }
            }
            RuleBody::Nft(n) => n
                .comments(self.text.as_str())
                .into_iter()
                .map(Cow::Borrowed)
                .collect(),
            RuleBody::Approximate(l) => l.comments().map(Cow::Borrowed).collect(),
        }
    }
}

/// How a rule reaches another chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TransferKind {
    /// Call: the chain returns to the next rule.
    Jump,
    /// Tail call: the chain's RETURN goes to the caller's caller.
    Goto,
}

/// A reference from a rule to a chain by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainRef<'a> {
    /// Jump (`-j`, nft `jump`) or goto (`-g`, nft `goto`).
    pub kind: TransferKind,
    /// The name of the chain referred to, as written in the rule.
    pub chain: &'a str,
}
#[cfg(test)]
mod tests {
    use super::*;

    /// A 10k-service dump holds ~110k rules and ~40k chains: these sizes are the
    /// model's memory budget (docs/benchmarks.md). Grow them only on purpose.
    #[test]
    fn rule_and_chain_stay_small() {
        // 32: text span 16, body 16 (the xtables cell: spec, target, counters' place
        // and the variant's tag in 8 bytes, the rare part behind 8). Counters and
        // location are read from the text, the position from the rule's index.
        assert!(
            std::mem::size_of::<Rule>() <= 32,
            "{}",
            std::mem::size_of::<Rule>()
        );
        assert!(
            std::mem::size_of::<Chain>() <= 56,
            "{}",
            std::mem::size_of::<Chain>()
        );
        // An nft rule is a body of its own, not a box (see `NftRule`).
        assert_eq!(std::mem::size_of::<NftRule>(), 8);
    }
}

#[cfg(test)]
mod completeness_tests {
    use super::*;

    /// One table with `chains` empty chains and `errors` error diagnostics, built
    /// directly: the model's tests use no reader.
    fn with_errors(errors: usize, chains: usize) -> Ruleset {
        let mut table = Table::new(
            Family::Ip,
            Backend::IptablesUnknown,
            "filter",
            Location::default(),
        );
        for i in 0..chains {
            table
                .chains
                .push(Chain::new(&format!("C{i}"), None, Location::default()));
        }
        let mut rs = Ruleset {
            tables: vec![table],
            ..Ruleset::default()
        };
        for i in 0..errors {
            rs.diagnostics
                .push(Diagnostic::error(i as u32 + 1, 1, "unreadable", "x"));
        }
        rs
    }

    #[test]
    fn errors_make_a_full_dump_damaged_and_nothing_else() {
        let mut rs = with_errors(1, 3);
        rs.settle_completeness();
        assert_eq!(rs.completeness, Completeness::Damaged);
        let mut clean = with_errors(0, 3);
        clean.settle_completeness();
        assert_eq!(clean.completeness, Completeness::Full);
        // A restore payload stays partial: it was never judged as a whole.
        let mut partial = with_errors(1, 3);
        partial.completeness = Completeness::Partial;
        partial.settle_completeness();
        assert_eq!(partial.completeness, Completeness::Partial);
    }

    #[test]
    fn unreadable_means_more_errors_than_what_was_read() {
        assert!(!with_errors(0, 0).is_unreadable(), "empty but clean");
        assert!(with_errors(1, 0).is_unreadable());
        assert!(!with_errors(1, 3).is_unreadable());
        assert!(!with_errors(3, 3).is_unreadable());
        assert!(with_errors(4, 3).is_unreadable());
        assert!(
            Ruleset {
                diagnostics: vec![Diagnostic::error(1, 1, "x", "")],
                ..Ruleset::default()
            }
            .is_unreadable()
        );
    }
}
