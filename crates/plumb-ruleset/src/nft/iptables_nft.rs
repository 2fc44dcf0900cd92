//! The nft view of iptables-nft tables, read back into the iptables model.
//!
//! On a node whose iptables is iptables-nft, `nft list ruleset` shows kube-proxy's and
//! the CNIs' rules as `table ip nat { chain KUBE-SERVICES { ... } }`: native expressions
//! where iptables-nft wrote them (`ip daddr`, `tcp dport`, `meta mark`), the translation
//! of an xtables extension where nft has one (`dnat to 10.0.0.1:80`, `ct state new`),
//! `xt match "physdev"` / `xt target "DNAT"` where it has none, and `# match-set KUBE-X
//! dst,dst` where an older nft printed the extension's own text. [`translate`] turns each
//! such table into the iptables table it is, as iptables-nft itself does when it lists
//! it (`nft_rule_to_iptables_command`), so that services, checks, `print` and `diff`
//! treat both views of a node alike.
//!
//! # Which tables
//!
//! A table is iptables-nft's when (decision, from how iptables-nft creates them):
//! - its family is `ip` or `ip6` and its name one of iptables' tables (`filter`, `nat`,
//!   `mangle`, `raw`, `security`);
//! - it has no sets or maps (iptables-nft never creates named ones);
//! - every base chain is a built-in chain of that table by its iptables name
//!   (`PREROUTING`, ...), on the hook of that name, of the type iptables-nft gives it
//!   (`nat` in the nat table, `route` for mangle OUTPUT, `filter` otherwise), at the
//!   priority iptables-nft gives that table (`filter`/0, `dstnat`/-100 and `srcnat`/100
//!   for nat, `mangle`/-150, `raw`/-300, `security`/50).
//!
//! A native table that happens to look like this is, for every purpose plumb has, an
//! iptables table too: iptables-nft would list it the same way.
//!
//! # Which rules
//!
//! iptables-nft gives every rule it writes a counter, after the matches and before the
//! target (`nft_rule_new` adds it). A rule without a `counter` statement, or with a
//! statement iptables-nft never writes (a verdict map, a named set, a second verdict),
//! was written by another tool: it stays an nft rule in the table, and
//! [`foreign_rules`] lists it (`check` reports it: iptables tools do not manage it, and
//! the owner's next restore of the chain drops it). Every other rule becomes an
//! xtables rule.
//!
//! # What the nft view does not show
//!
//! nft never prints rule comments of iptables-nft rules (they are an xtables match it
//! translates to nothing), and nft builds without xtables support print an extension
//! only by name (`xt target "DNAT"`). Such an extension becomes `-m NAME` or `-j NAME`
//! with the one option [`NOT_SHOWN`], which no extension has: a match plumb cannot
//! evaluate, a target whose arguments are unknown. The table is marked
//! [`crate::Table::nft_view`] so that `diff` compares its rules without the comments and
//! options the view cannot show.

use crate::diagnostic::Diagnostic;
use crate::iptables::save::{IptablesInput, parse_shared};
use crate::model::nft::{NatKind, Statement, StatementKind, Verdict};
use crate::model::{
    Backend, Chain, Family, Hook, Location, Placed, Rule, RuleBody, Ruleset, Source, Table,
};
use std::fmt::Write;

/// The option an extension gets when the nft view shows only its name: its real
/// options are unknown. No iptables extension has an option of this name.
pub use crate::model::xt::OPTIONS_NOT_SHOWN as NOT_SHOWN;

/// iptables' table names.
const TABLES: &[&str] = &["filter", "nat", "mangle", "raw", "security"];

/// Whether a table of this family and name can be one iptables-nft manages.
pub(crate) fn could_be_iptables_nft(family: Family, name: &str) -> bool {
    matches!(family, Family::Ip | Family::Ip6) && TABLES.contains(&name)
}

/// Whether `table` is a table iptables-nft manages (see the module documentation).
pub fn is_iptables_nft_table(table: &Table) -> bool {
    if !matches!(table.family, Family::Ip | Family::Ip6)
        || !TABLES.contains(&&*table.name)
        || !table.sets.is_empty()
    {
        return false;
    }
    let builtins = crate::iptables::save::builtin_chains(&table.name);
    // iptables chain names: one word, no quotes, unique in the table.
    let mut names = std::collections::HashSet::new();
    if !table.chains.iter().all(|c| {
        !c.name.is_empty()
            && !c
                .name
                .as_str()
                .contains(|ch: char| ch.is_whitespace() || ch == '"' || ch == '\'')
            && !c.name.starts_with('-')
            && names.insert(&*c.name)
    }) {
        return false;
    }
    table.chains.iter().all(|c| match &c.base {
        None => !builtins.contains(&&*c.name),
        Some(b) => {
            builtins.contains(&&*c.name)
                && Hook::from_builtin_chain(&c.name).as_ref() == Some(&b.hook)
                && b.chain_type
                    .as_deref()
                    .is_none_or(|t| t == chain_type(&table.name, &c.name))
                && b.priority
                    .as_deref()
                    .is_none_or(|p| priority_ok(&table.name, &c.name, p))
        }
    })
}

/// The nft chain type iptables-nft gives a built-in chain.
fn chain_type(table: &str, chain: &str) -> &'static str {
    match (table, chain) {
        ("nat", _) => "nat",
        ("mangle", "OUTPUT") => "route",
        _ => "filter",
    }
}

/// Whether a priority, as nft prints it (a number or a standard name), is the one
/// iptables-nft gives this built-in chain.
fn priority_ok(table: &str, chain: &str, written: &str) -> bool {
    let expected: i32 = match (table, chain) {
        ("nat", "PREROUTING" | "OUTPUT") => -100,
        ("nat", _) => 100,
        ("mangle", _) => -150,
        ("raw", _) => -300,
        // The kernel's NF_IP_PRI_SECURITY is 50; iptables-nft (1.8.9) creates the
        // security table's chains at 150. Both are iptables-nft's.
        ("security", _) if matches!(written.trim(), "150" | "security") => 150,
        ("security", _) => 50,
        _ => 0,
    };
    let w = written.replace(' ', "");
    let value = match w.as_str() {
        "filter" => Some(0),
        "dstnat" => Some(-100),
        "srcnat" => Some(100),
        "mangle" => Some(-150),
        "raw" => Some(-300),
        "security" => Some(50),
        n => n.parse::<i32>().ok(),
    };
    value == Some(expected)
}

/// Rules of iptables-nft tables that iptables-nft did not write: (table index, chain
/// name, rule). Only meaningful after [`translate`] (the rules it kept as nft rules).
pub fn foreign_rules(ruleset: &Ruleset) -> impl Iterator<Item = (&Table, &Chain, &Rule)> {
    ruleset
        .tables
        .iter()
        .filter(|t| t.backend == Backend::IptablesNft && t.nft_view)
        .flat_map(|t| {
            t.chains.iter().flat_map(move |c| {
                c.rules
                    .iter()
                    .filter(|r| is_foreign(r))
                    .map(move |r| (t, c, r))
            })
        })
}

/// Whether a rule of an iptables-nft table was written by another tool: an nft rule
/// without a counter (iptables-nft gives every rule one).
fn is_foreign(rule: &Rule) -> bool {
    match &rule.body {
        RuleBody::Nft(n) => !n
            .statements(rule.text.as_str())
            .iter()
            .any(|s| matches!(s.kind, StatementKind::Counter(_))),
        _ => false,
    }
}

/// Turns every iptables-nft table of an nft listing into the iptables table it is (see
/// the module documentation); other tables are left alone. Adds a note per translated
/// table and per rule kept as an nft rule.
pub fn translate(ruleset: &mut Ruleset) {
    translate_with(ruleset, |_, table| translate_table(table));
}

/// Where the rules an iptables-nft table keeps as nft rules are: (line, column, chain,
/// foreign: not written by iptables-nft).
pub(crate) type KeptRules = Vec<(u32, u32, String, bool)>;

/// [`translate`], with `translate_table(table index, table)` rewriting each
/// iptables-nft table (`None`: the table stays as it was).
pub(crate) fn translate_with(
    ruleset: &mut Ruleset,
    mut translate_table: impl FnMut(usize, &mut Table) -> Option<KeptRules>,
) {
    let mut notes = Vec::new();
    let mut partial = false;
    for (ti, table) in ruleset.tables.iter_mut().enumerate() {
        if table.backend != Backend::Nftables || !is_iptables_nft_table(table) {
            continue;
        }
        let Some(foreign) = translate_table(ti, table) else {
            continue;
        };
        if let Some(missing) = undeclared_target(table) {
            // The kernel holds no jump to a missing chain: this is a listing of some
            // chains (`nft list chain ip nat PREROUTING`), not of the whole table.
            partial = true;
            notes.push(Diagnostic::note(
                table.location.line,
                table.location.column,
                format!(
                    "table {} {} jumps to chain {missing}, which the listing does not hold: a listing of some chains (nft list chain), read as partial",
                    table.family, table.name
                ),
                "",
            ));
        }
        notes.push(Diagnostic::note(
            table.location.line,
            table.location.column,
            format!(
                "table {} {} is managed by iptables-nft: read as iptables rules (rule comments, and options nft shows only by name, are not in an nft listing)",
                table.family, table.name
            ),
            "",
        ));
        for (line, column, chain, foreign) in foreign {
            let why = if foreign {
                "was not written by iptables-nft (it has no counter)"
            } else {
                "has an expression plumb cannot read back into iptables terms"
            };
            notes.push(Diagnostic::note(
                line,
                column,
                format!(
                    "rule in iptables-nft chain {} {} {chain} {why}: kept as an nft rule",
                    table.family, table.name
                ),
                "",
            ));
        }
    }
    if partial && ruleset.completeness == crate::model::Completeness::Full {
        ruleset.completeness = crate::model::Completeness::Partial;
    }
    ruleset.diagnostics.extend(notes);
    ruleset.diagnostics.sort_by_key(|d| (d.line, d.column));
}

/// A chain a rule of `table` jumps or goes to that the table does not declare.
fn undeclared_target(table: &Table) -> Option<String> {
    // A set of the names: `Table::chain` is a linear search, and a kube-proxy table
    // has 60k chains and 170k jumps.
    let declared: std::collections::HashSet<&str> = table.chains.iter().map(|c| &*c.name).collect();
    table.chains.iter().flat_map(|c| &c.rules).find_map(|r| {
        r.chain_references()
            .into_iter()
            .find(|c| !declared.contains(c.chain))
            .map(|c| c.chain.to_string())
    })
}

/// Rewrites one table; returns where the rules it kept as nft rules are (line,
/// column, chain, foreign: not written by iptables-nft), or `None` (the table left as
/// it was) when the iptables reader does not read the translation back rule for rule.
pub(crate) fn translate_table(table: &mut Table) -> Option<KeptRules> {
    // The rules as iptables-save text, read back with the iptables reader: the
    // translated rules are exactly what the iptables side of plumb reads. A rule the
    // reader refuses (an interface name iptables cannot spell, say) stays an nft rule.
    let mut plan: Vec<Vec<bool>> = table
        .chains
        .iter()
        .map(|c| {
            c.rules
                .iter()
                .map(
                    |r| matches!(&r.body, RuleBody::Nft(n) if rule_spec(&n.statements(r.text.as_str()), table.family).is_some()),
                )
                .collect()
        })
        .collect();
    let mut parsed = None;
    for _ in 0..3 {
        let (text, placed, line_of) = iptables_text(table, &plan);
        let rs = read_translated(text, placed, table.family);
        let bad: Vec<(usize, usize)> = rs
            .errors()
            .filter_map(|d| line_of.get(&d.line).copied())
            .collect();
        if rs.error_count() == 0 {
            parsed = Some(rs);
            break;
        }
        if bad.is_empty() {
            break;
        }
        for (ci, ri) in bad {
            plan[ci][ri] = false;
        }
    }
    // Nothing read cleanly: the table stays as nft listed it.
    let mut xt_table = parsed.and_then(|rs| rs.tables.into_iter().next())?;
    // Chains by name on both sides (`Table::chain` is a linear search: quadratic in
    // the 60k chains of a 10k-service kube-proxy table).
    let xt_rules: std::collections::HashMap<&str, usize> = xt_table
        .chains
        .iter()
        .map(|c| (&*c.name, c.rules.len()))
        .collect();
    let counts_agree = table.chains.iter().zip(&plan).all(|(c, row)| {
        let want = row.iter().filter(|t| **t).count();
        xt_rules.get(&*c.name) == Some(&want)
    });
    drop(xt_rules);
    if !counts_agree {
        return None;
    }
    let mut foreign = Vec::new();
    let old_chains = std::mem::take(&mut table.chains);
    let old_index = chain_positions(&old_chains);
    let mut new_chains: Vec<Chain> = Vec::with_capacity(xt_table.chains.len());
    for mut xc in std::mem::take(&mut xt_table.chains) {
        let Some((ci, oc)) = old_index.get(&*xc.name).map(|&i| (i, &old_chains[i])) else {
            // A built-in chain the nft view does not have: located at the table.
            xc.location = table.location;
            new_chains.push(xc);
            continue;
        };
        let mut translated = std::mem::take(&mut xc.rules).into_iter();
        let mut rules = Vec::with_capacity(oc.rules.len());
        for (ri, orule) in oc.rules.iter().enumerate() {
            let rule = if plan[ci][ri] {
                match translated.next() {
                    // Located by the translation's placement (see `iptables_text`).
                    Some(mut r) => {
                        r.set_counters(orule.counters());
                        r
                    }
                    None => orule.clone(),
                }
            } else {
                let at = orule.location();
                foreign.push((at.line, at.column, oc.name.to_string(), is_foreign(orule)));
                orule.clone()
            };
            rules.push(rule);
        }
        xc.rules = rules;
        keep_nft_view(&mut xc, oc);
        new_chains.push(xc);
    }
    install_translated(table, new_chains, &old_index);
    Some(foreign)
}

/// Each chain's position by name.
fn chain_positions(chains: &[Chain]) -> std::collections::HashMap<&str, usize> {
    chains
        .iter()
        .enumerate()
        .map(|(i, c)| (&*c.name, i))
        .collect()
}

/// What the translated chain `xc` keeps of the nft view's chain `oc`: its location and
/// its base chain's counters, type and priority.
fn keep_nft_view(xc: &mut Chain, oc: &Chain) {
    xc.location = oc.location;
    if let (Some(nb), Some(ob)) = (xc.base.as_mut(), oc.base.as_ref()) {
        nb.counters = ob.counters;
        nb.chain_type = ob.chain_type.clone();
        nb.priority = ob.priority.clone();
    }
}

/// Puts the translated chains into `table` in the nft view's order (`old_index`),
/// missing built-ins first as iptables-nft-save prints them, and marks the table as
/// iptables-nft's, read from the nft view.
fn install_translated(
    table: &mut Table,
    mut chains: Vec<Chain>,
    old_index: &std::collections::HashMap<&str, usize>,
) {
    chains.sort_by_key(|c| old_index.get(&*c.name).map_or(0, |p| p + 1));
    table.chains = chains;
    table.backend = Backend::IptablesNft;
    table.nft_view = true;
}

/// The table's chain declarations as iptables-save writes them: name and policy (`-`
/// for a user-defined chain), the built-in chains first. iptables-nft lists every
/// built-in chain, also those it has not created in the kernel yet (policy ACCEPT, no
/// rules): so does the translation.
fn declarations(table: &Table) -> impl Iterator<Item = (&str, &str)> {
    let builtins = crate::iptables::save::builtin_chains(&table.name);
    let builtin = builtins.iter().map(|&b| {
        let policy = table
            .chain(b)
            .and_then(|c| c.policy())
            .map_or("ACCEPT", |p| p.as_iptables());
        (b, policy)
    });
    let user = table
        .chains
        .iter()
        .filter(move |c| !builtins.contains(&&*c.name))
        .map(|c| (&*c.name, "-"));
    builtin.chain(user)
}

/// The start of the table as iptables-save text, through its chain declarations, and
/// how many lines that is.
fn iptables_header(table: &Table) -> (String, u32) {
    let mut text = format!("*{}\n", table.name);
    let mut line = 1u32;
    for (name, policy) in declarations(table) {
        let _ = writeln!(text, ":{name} {policy} [0:0]");
        line += 1;
    }
    (text, line)
}

/// A rule of a table the nft text reader translated as it read (see
/// `crate::nft::text`): in the order of the chain's rules.
#[derive(Clone, Copy, Debug)]
pub(crate) enum StreamedRule {
    /// A rule iptables-nft wrote: its `-A CHAIN ...` line is in the table's rule lines
    /// and its nft form was dropped. What of it the iptables rule does not hold is kept.
    Xt {
        /// Where the nft rule was read.
        location: crate::model::Location,
        /// Its `counter packets N bytes M`.
        counters: Option<crate::model::Counters>,
        /// The chain its `jump` or `goto` names, as a byte span of the input text, and
        /// whether it is a goto.
        transfer: Option<(u32, u32, bool)>,
    },
    /// A rule kept as an nft rule (iptables-nft did not write it): the chain's next
    /// rule.
    Nft,
}

/// How [`StreamedTable`] holds a [`StreamedRule`]: 20 bytes (the enum takes 48), as a
/// 10k-service table has 170k of them.
#[derive(Clone, Copy)]
struct Slot {
    line: u32,
    column: u32,
    /// [`NO_COUNTERS`], [`ZERO_COUNTERS`] or an index into [`StreamedTable::counters`].
    counters: u32,
    /// The transfer's span (`from..from + len`), when `kind` names one (nft chain
    /// names are under 256 bytes; a longer one is not streamed).
    from: u32,
    len: u8,
    /// [`SLOT_NFT`], [`SLOT_XT`], [`SLOT_JUMP`] or [`SLOT_GOTO`].
    kind: u8,
}

const SLOT_NFT: u8 = 0;
const SLOT_XT: u8 = 1;
const SLOT_JUMP: u8 = 2;
const SLOT_GOTO: u8 = 3;
const NO_COUNTERS: u32 = u32::MAX;
const ZERO_COUNTERS: u32 = u32::MAX - 1;

/// Slots in one block of [`StreamedTable::slots`]: blocks are allocated at their full
/// size once, so the slots never sit in a vector grown by doubling (up to 2x).
const SLOT_BLOCK: usize = 4096;

/// The translation of a table that the nft text reader makes as it reads the table's
/// rules (chains one after the other, each chain's rules in order).
///
/// Each chunk of `-A` lines is read back with the iptables reader as soon as it is
/// full ([`StreamedTable::check_chunk`]), while the nft text is still there to be read
/// again: so every reason [`translate_streamed_table`] could refuse the table is known
/// when the reading ends, and the nft text can be freed before the table's iptables
/// model is built (see `crate::nft::text::parse_text_translated_owned`).
pub(crate) struct StreamedTable {
    /// The table's name and family (for reading chunks back).
    name: String,
    family: Family,
    /// The translated rules' iptables specs (`-A CHAIN SPEC` without `-A CHAIN `: the
    /// chain is known from the slots, and its name would take 30 bytes a rule), one a
    /// line, in chunks of about [`LINE_CHUNK`] bytes (a chunk is allocated once, and
    /// freed as soon as it is copied into the table's text).
    lines: Vec<String>,
    /// The last chunk's chain runs, not read back yet: (byte offset in the chunk of the
    /// run's first line, end of the chain's name in `run_names`, lines).
    runs: Vec<(u32, u32, u32)>,
    /// The names of the chains of `runs`, one after the other.
    run_names: String,
    /// The chain index of the last run.
    run_chain: usize,
    /// A chunk did not read back rule for rule: the table must be read again as nft.
    pub(crate) failed: bool,
    /// Every rule of the table, chain after chain, in blocks of [`SLOT_BLOCK`].
    slots: Vec<Vec<Slot>>,
    /// How many slots there are.
    len: usize,
    /// Counters other than zero, by [`Slot::counters`].
    counters: Vec<crate::model::Counters>,
    /// By chain index: where the chain's rules start among the slots.
    starts: Vec<u32>,
    /// How many rules were translated (their nft statements dropped).
    pub(crate) translated: usize,
}

/// Bytes of `-A` lines held in one chunk of [`StreamedTable::lines`]. 1 MiB: mimalloc
/// gives a block this big pages of its own, returned when it is freed; 256 KiB chunks
/// shared pages that stayed resident when freed (peak RSS +3 MiB on a 10k-service
/// listing, though the heap's peak was 1 MiB lower).
const LINE_CHUNK: usize = 1 << 20;

impl StreamedTable {
    /// The translation of table `family name`, before any rule.
    pub(crate) fn new(family: Family, name: &str) -> StreamedTable {
        StreamedTable {
            name: name.to_string(),
            family,
            lines: Vec::new(),
            runs: Vec::new(),
            run_names: String::new(),
            run_chain: 0,
            failed: false,
            slots: Vec::new(),
            len: 0,
            counters: Vec::new(),
            starts: Vec::new(),
            translated: 0,
        }
    }

    /// Adds a rule to chain `ci`, the chain being read (no rule of a later chain was
    /// added yet); a translated rule comes with its chain's name and its iptables rule.
    pub(crate) fn push(&mut self, ci: usize, rule: StreamedRule, line: Option<(&str, &str)>) {
        while self.starts.len() <= ci {
            self.starts.push(self.len as u32);
        }
        self.push_slot(rule);
        let Some((chain, spec)) = line else { return };
        if spec.contains(['\n', '\r']) {
            // Not one line: the iptables reader would not read it as one rule.
            self.failed = true;
        }
        let len = spec.len() + 1;
        match self.lines.last() {
            Some(last) if last.capacity() - last.len() >= len => {}
            _ => {
                self.check_chunk();
                self.lines.push(String::with_capacity(LINE_CHUNK.max(len)));
            }
        }
        if let Some(last) = self.lines.last_mut() {
            let at = last.len() as u32;
            match self.runs.last_mut() {
                Some(run) if self.run_chain == ci => run.2 += 1,
                _ => {
                    self.run_names.push_str(chain);
                    self.runs.push((at, self.run_names.len() as u32, 1));
                    self.run_chain = ci;
                }
            }
            last.push_str(spec);
            last.push('\n');
        }
        self.translated += 1;
    }

    fn push_slot(&mut self, rule: StreamedRule) {
        let slot = match rule {
            StreamedRule::Nft => Slot {
                line: 0,
                column: 0,
                counters: NO_COUNTERS,
                from: 0,
                len: 0,
                kind: SLOT_NFT,
            },
            StreamedRule::Xt {
                location,
                counters,
                transfer,
            } => {
                let counters = match counters {
                    None => NO_COUNTERS,
                    Some(c) if c == crate::model::Counters::default() => ZERO_COUNTERS,
                    Some(c) => {
                        self.counters.push(c);
                        (self.counters.len() - 1) as u32
                    }
                };
                let (from, to, kind) = match transfer {
                    None => (0, 0, SLOT_XT),
                    Some((from, to, false)) => (from, to, SLOT_JUMP),
                    Some((from, to, true)) => (from, to, SLOT_GOTO),
                };
                let len = u8::try_from(to.saturating_sub(from)).unwrap_or_else(|_| {
                    // Not held: the table is read the whole way.
                    self.failed = true;
                    0
                });
                Slot {
                    line: location.line,
                    column: location.column,
                    counters,
                    from,
                    len,
                    kind,
                }
            }
        };
        if self.len.is_multiple_of(SLOT_BLOCK) {
            self.slots.push(Vec::with_capacity(SLOT_BLOCK));
        }
        if let Some(block) = self.slots.last_mut() {
            block.push(slot);
        }
        self.len += 1;
    }

    /// The rule in slot `i`.
    fn slot(&self, i: usize) -> StreamedRule {
        let s = self.slots[i / SLOT_BLOCK][i % SLOT_BLOCK];
        if s.kind == SLOT_NFT {
            return StreamedRule::Nft;
        }
        StreamedRule::Xt {
            location: crate::model::Location {
                line: s.line,
                column: s.column,
            },
            counters: match s.counters {
                NO_COUNTERS => None,
                ZERO_COUNTERS => Some(crate::model::Counters::default()),
                i => Some(self.counters[i as usize]),
            },
            transfer: match s.kind {
                SLOT_JUMP => Some((s.from, s.from + u32::from(s.len), false)),
                SLOT_GOTO => Some((s.from, s.from + u32::from(s.len), true)),
                _ => None,
            },
        }
    }

    /// The slots of chain `ci`.
    fn chain_range(&self, ci: usize) -> std::ops::Range<usize> {
        let Some(&from) = self.starts.get(ci) else {
            return 0..0;
        };
        let to = self.starts.get(ci + 1).map_or(self.len, |&t| t as usize);
        from as usize..to
    }

    /// The rules of chain `ci`, in order.
    pub(crate) fn chain_rules(&self, ci: usize) -> impl Iterator<Item = StreamedRule> + '_ {
        self.chain_range(ci).map(|i| self.slot(i))
    }

    /// Whether chain `ci` has no rules yet.
    pub(crate) fn chain_is_empty(&self, ci: usize) -> bool {
        self.chain_range(ci).is_empty()
    }

    /// Reads the last chunk of `-A` lines back with the iptables reader, as
    /// [`translate_streamed_table`] reads the whole table: `failed` when it refuses a
    /// line or does not make one rule of each line in the chain the line names.
    pub(crate) fn check_chunk(&mut self) {
        let runs = std::mem::take(&mut self.runs);
        let run_names = std::mem::take(&mut self.run_names);
        let Some(chunk) = self.lines.last() else {
            return;
        };
        if runs.is_empty() || self.failed {
            return;
        }
        let builtins = crate::iptables::save::builtin_chains(&self.name);
        let name = |i: usize| {
            let from = i.checked_sub(1).map_or(0, |p| runs[p].1 as usize);
            &run_names[from..runs[i].1 as usize]
        };
        let prefixes = runs
            .iter()
            .enumerate()
            .map(|(i, r)| (name(i).len() + 4) * r.2 as usize)
            .sum::<usize>();
        let mut text =
            String::with_capacity(chunk.len() + prefixes + run_names.len() + runs.len() * 12 + 64);
        let _ = writeln!(text, "*{}", self.name);
        for i in 0..runs.len() {
            let n = name(i);
            let policy = if builtins.contains(&n) { "ACCEPT" } else { "-" };
            let _ = writeln!(text, ":{n} {policy} [0:0]");
        }
        let mut specs = chunk.split_terminator('\n');
        for (i, run) in runs.iter().enumerate() {
            let n = name(i);
            for spec in specs.by_ref().take(run.2 as usize) {
                text.push_str("-A ");
                text.push_str(n);
                text.push(' ');
                text.push_str(spec);
                text.push('\n');
            }
        }
        text.push_str("COMMIT\n");
        let rs = read_translated(text, Placed::Nowhere, self.family);
        let ok = rs.error_count() == 0
            && rs.tables.len() == 1
            && rs.tables.first().is_some_and(|t| {
                let lines: usize = runs.iter().map(|r| r.2 as usize).sum();
                let counts: std::collections::HashMap<&str, usize> =
                    t.chains.iter().map(|c| (&*c.name, c.rules.len())).collect();
                t.chains.iter().map(|c| c.rules.len()).sum::<usize>() == lines
                    && runs
                        .iter()
                        .enumerate()
                        .all(|(i, r)| counts.get(name(i)) == Some(&(r.2 as usize)))
            });
        if !ok {
            self.failed = true;
        }
    }
}

/// Reads iptables text made from an iptables-nft table back with the iptables reader,
/// as a restore payload: whether jump targets exist is the listing's business (a chain
/// listing is partial), not the translation's.
fn read_translated(text: String, placed: Placed, family: Family) -> Ruleset {
    parse_shared(
        Source::written(text, placed),
        &IptablesInput {
            family,
            backend: Some(Backend::IptablesNft),
            restore_payload: true,
            ..IptablesInput::default()
        },
    )
}

/// Whether the iptables reader reads `table`'s chain declarations, as
/// [`iptables_header`] writes them, without an error (a policy nft printed that
/// iptables cannot spell, a name it refuses, makes one). With every chunk of the
/// table's rules read back ([`StreamedTable::check_chunk`]), this is what the table's
/// iptables text is. Read in slices of [`HEADER_SLICE`] declarations: a 10k-service
/// table declares 58k chains, and this runs while the nft text is still held.
pub(crate) fn header_reads_back(table: &Table) -> bool {
    let read = |mut text: String| {
        text.push_str("COMMIT\n");
        read_translated(text, Placed::Nowhere, table.family).error_count() == 0
    };
    let builtins = crate::iptables::save::builtin_chains(&table.name).len();
    let mut text = format!("*{}\n", table.name);
    for (i, (name, policy)) in declarations(table).enumerate() {
        // The first slice also holds the built-in chains.
        let user = i.saturating_sub(builtins);
        if user > 0
            && user.is_multiple_of(HEADER_SLICE)
            && !read(std::mem::replace(&mut text, format!("*{}\n", table.name)))
        {
            return false;
        }
        let _ = writeln!(text, ":{name} {policy} [0:0]");
    }
    read(text)
}

/// Chain declarations read back at once by [`header_reads_back`].
const HEADER_SLICE: usize = 4096;

/// [`translate_table`] for a table whose rules the nft text reader turned into
/// iptables specs as it read them (`streamed`: the specs, chains in the table's order,
/// and what each rule keeps of its nft form). `Err` when the result would differ from
/// [`translate_table`] on the table as nft rules (an iptables rule the iptables reader
/// refuses, rule counts that do not agree); [`StreamedTable::check_chunk`] has ruled
/// both out while the nft text could still be read again.
pub(crate) fn translate_streamed_table(
    table: &mut Table,
    mut streamed: StreamedTable,
) -> Result<KeptRules, ()> {
    let lines = std::mem::take(&mut streamed.lines);
    let chain_rules = |ci: usize| streamed.chain_rules(ci);
    let (header, header_lines) = iptables_header(table);
    // Each chain's specs, in order, become its `-A CHAIN SPEC` lines; a chunk of specs
    // is freed as soon as it is copied.
    let xt_counts: Vec<usize> = (0..table.chains.len())
        .map(|ci| {
            chain_rules(ci)
                .filter(|r| matches!(r, StreamedRule::Xt { .. }))
                .count()
        })
        .collect();
    let size = lines.iter().map(String::len).sum::<usize>()
        + table
            .chains
            .iter()
            .zip(&xt_counts)
            .map(|(c, n)| (c.name.len() + 4) * n)
            .sum::<usize>();
    let mut text = String::with_capacity(header.len() + size + "COMMIT\n".len());
    text.push_str(&header);
    drop(header);
    // The rule lines follow the header, one a rule, each read where its slot says.
    let first = header_lines + 1;
    let mut placed: Vec<Location> = Vec::with_capacity(xt_counts.iter().sum());
    let mut chunks = lines.into_iter();
    let mut chunk = String::new();
    let mut at = 0;
    for (ci, (c, &n)) in table.chains.iter().zip(&xt_counts).enumerate() {
        placed.extend(chain_rules(ci).filter_map(|r| match r {
            StreamedRule::Xt { location, .. } => Some(location),
            StreamedRule::Nft => None,
        }));
        for _ in 0..n {
            while at >= chunk.len() {
                chunk = chunks.next().ok_or(())?;
                at = 0;
            }
            let end = chunk[at..].find('\n').map_or(chunk.len(), |e| at + e);
            text.push_str("-A ");
            text.push_str(&c.name);
            text.push(' ');
            text.push_str(&chunk[at..end]);
            text.push('\n');
            at = end + 1;
        }
    }
    drop(chunk);
    text.push_str("COMMIT\n");
    let placed = Placed::Lines {
        first,
        at: placed.into_boxed_slice(),
    };
    let rs = read_translated(text, placed, table.family);
    // `translate_table` would take the refused rules back as nft rules: their
    // statements were not kept.
    if rs.error_count() != 0 {
        return Err(());
    }
    let mut xt_table = rs.tables.into_iter().next().ok_or(())?;
    // Which nft chain each iptables chain is; the rule counts must agree.
    let origin = chain_origins(table, &xt_table.chains);
    if origin.iter().flatten().count() != table.chains.len()
        || !xt_table
            .chains
            .iter()
            .zip(&origin)
            .all(|(xc, o)| o.is_none_or(|ci| xt_counts.get(ci as usize) == Some(&xc.rules.len())))
    {
        return Err(());
    }
    drop(xt_counts);
    // The iptables chains take the nft chains' locations, counters and kept nft rules
    // in place: no second vector of chains, nor of rules where every rule was
    // translated.
    let mut foreign = Vec::new();
    let mut old_chains = std::mem::take(&mut table.chains);
    for (xc, o) in xt_table.chains.iter_mut().zip(&origin) {
        let Some(ci) = o.map(|ci| ci as usize) else {
            // A built-in chain the nft view does not have: located at the table.
            xc.location = table.location;
            continue;
        };
        let oc = &mut old_chains[ci];
        let slots = streamed.chain_range(ci);
        if slots.len() == xc.rules.len() {
            for (r, slot) in xc.rules.iter_mut().zip(chain_rules(ci)) {
                // Located by the translation's placement (see above).
                let StreamedRule::Xt { counters, .. } = slot else {
                    return Err(());
                };
                r.set_counters(counters);
            }
        } else {
            let mut translated = std::mem::take(&mut xc.rules).into_iter();
            let mut kept = std::mem::take(&mut oc.rules).into_iter();
            let mut out = Vec::with_capacity(slots.len());
            for slot in chain_rules(ci) {
                let rule = match slot {
                    StreamedRule::Xt { counters, .. } => {
                        let mut r = translated.next().ok_or(())?;
                        r.set_counters(counters);
                        r
                    }
                    StreamedRule::Nft => {
                        let r = kept.next().ok_or(())?;
                        let at = r.location();
                        foreign.push((at.line, at.column, oc.name.to_string(), is_foreign(&r)));
                        r
                    }
                };
                out.push(rule);
            }
            xc.rules = out;
        }
        keep_nft_view(xc, oc);
    }
    drop(old_chains);
    // The nft view's order, missing built-ins first (as `install_translated` sorts).
    let mut order: Vec<u32> = (0..xt_table.chains.len() as u32).collect();
    order.sort_by_key(|&j| origin[j as usize].map_or(0, |p| p as u64 + 1));
    permute(&mut xt_table.chains, &mut order);
    table.chains = std::mem::take(&mut xt_table.chains);
    table.backend = Backend::IptablesNft;
    table.nft_view = true;
    Ok(foreign)
}

/// For each chain of `xt` (the iptables reading of `table`'s translation, its chains
/// declared as [`iptables_header`] writes them), the index of the nft chain it is in
/// `table`, or `None` for a built-in chain the nft view does not have.
fn chain_origins(table: &Table, xt: &[Chain]) -> Vec<Option<u32>> {
    let builtins = crate::iptables::save::builtin_chains(&table.name);
    let mut origin = Vec::with_capacity(xt.len());
    for b in builtins {
        origin.push(
            table
                .chains
                .iter()
                .position(|c| &*c.name == *b)
                .map(|p| p as u32),
        );
    }
    for (ci, c) in table.chains.iter().enumerate() {
        if !builtins.contains(&&*c.name) {
            origin.push(Some(ci as u32));
        }
    }
    // The iptables reader keeps the declarations' order: checked, not assumed.
    let in_order = origin.len() == xt.len()
        && xt
            .iter()
            .zip(&origin)
            .enumerate()
            .all(|(j, (x, o))| match o {
                Some(ci) => table
                    .chains
                    .get(*ci as usize)
                    .is_some_and(|c| c.name == x.name),
                None => builtins.get(j) == Some(&&*x.name),
            });
    if in_order {
        return origin;
    }
    let index = chain_positions(&table.chains);
    xt.iter()
        .map(|x| index.get(&*x.name).map(|&p| p as u32))
        .collect()
}

/// Reorders `items` so that position `k` holds what was at `order[k]` (`order` is a
/// permutation, used up), in place.
fn permute<T>(items: &mut [T], order: &mut [u32]) {
    const DONE: u32 = u32::MAX;
    for i in 0..order.len() {
        if order[i] == DONE {
            continue;
        }
        let mut cur = i;
        loop {
            let next = order[cur] as usize;
            order[cur] = DONE;
            if next == i {
                break;
            }
            items.swap(cur, next);
            cur = next;
        }
    }
}

/// The table as iptables-save text, with the rules `plan` marks, and for each rule line
/// (1-based) the chain and rule it was written for.
fn iptables_text(
    table: &Table,
    plan: &[Vec<bool>],
) -> (
    String,
    Placed,
    std::collections::HashMap<u32, (usize, usize)>,
) {
    let (mut text, mut line) = iptables_header(table);
    let first = line + 1;
    let mut at = Vec::new();
    let mut line_of = std::collections::HashMap::new();
    for (ci, c) in table.chains.iter().enumerate() {
        for (ri, r) in c.rules.iter().enumerate() {
            if !plan[ci][ri] {
                continue;
            }
            if let RuleBody::Nft(n) = &r.body
                && let Some(spec) = rule_spec(&n.statements(r.text.as_str()), table.family)
            {
                let _ = writeln!(text, "-A {} {spec}", c.name);
                line += 1;
                line_of.insert(line, (ci, ri));
                at.push(r.location());
            }
        }
    }
    text.push_str("COMMIT\n");
    let at = at.into_boxed_slice();
    (text, Placed::Lines { first, at }, line_of)
}

/// The iptables rule (the words after `-A CHAIN`) that iptables-nft lists for an nft
/// rule, or `None` when iptables-nft did not write it.
pub fn rule_spec(statements: &[Statement], family: Family) -> Option<String> {
    let mut s = Spec::default();
    let mut counter = false;
    for st in statements {
        let words = words(&st.text);
        let w: Vec<&str> = words.iter().map(String::as_str).collect();
        if s.target.is_some() {
            // Nothing iptables-nft writes follows the target.
            return None;
        }
        match &st.kind {
            StatementKind::Counter(_) => {
                if counter {
                    return None;
                }
                counter = true;
            }
            StatementKind::Comment(c) => s.push(format!("-m comment --comment {}", quote(c))),
            StatementKind::Match { .. } => {
                if s.matched(&w, family).is_none() {
                    let module = opaque_match(&w)?;
                    // A transport header match implies its protocol (nft hides the
                    // `meta l4proto` dependency it adds).
                    let implied: Option<&str> = match w.first().copied() {
                        Some(p @ ("tcp" | "udp" | "sctp" | "icmp")) => Some(p),
                        Some("icmpv6") => Some("ipv6-icmp"),
                        _ => None,
                    };
                    if let (None, Some(p)) = (&s.proto, implied) {
                        s.proto(p, false);
                    }
                    s.push(format!("-m {module} {NOT_SHOWN}"));
                }
            }
            StatementKind::Other(k) if k == "limit" && !counter => {
                if s.limit(&w).is_none() {
                    s.push(format!("-m limit {NOT_SHOWN}"));
                }
            }
            StatementKind::Other(k) if k == "notrack" && counter => {
                s.target = Some("-j CT --notrack".into())
            }
            StatementKind::Other(k) if k == "meter" && !counter => {
                s.push(format!("-m hashlimit {NOT_SHOWN}"))
            }
            StatementKind::Other(k) if k == "xt" => s.xt(&w, &st.text, counter)?,
            StatementKind::Verdict(v) => s.target = Some(verdict(v, family)?),
            StatementKind::Nat { kind, args } => s.target = Some(nat(*kind, args)?),
            StatementKind::Mangle { .. } => {
                let guess = match w.as_slice() {
                    ["ct", "mark", ..] | ["meta", "mark", "set", "ct", ..] => Some("CONNMARK"),
                    ["meta", "mark", ..] => Some("MARK"),
                    ["tcp", "option", "maxseg", ..] => Some("TCPMSS"),
                    ["ip" | "ip6", "dscp", ..] => Some("DSCP"),
                    ["meta", "priority", ..] => Some("CLASSIFY"),
                    _ => None,
                };
                s.target = Some(match mangle(&w) {
                    Some(t) => t,
                    None => format!("-j {} {NOT_SHOWN}", guess?),
                })
            }
            StatementKind::Log { args } => {
                s.target = Some(log(args).unwrap_or_else(|| format!("-j LOG {NOT_SHOWN}")))
            }
            _ => return None,
        }
    }
    if !counter {
        return None;
    }
    let mut out = s.parts.join(" ");
    if let Some(t) = s.target {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&t);
    }
    Some(out)
}

#[derive(Default)]
struct Spec {
    parts: Vec<String>,
    /// `-p` was given (a port match needs it).
    proto: Option<String>,
    target: Option<String>,
}

impl Spec {
    /// Adds a match. Consecutive options of one protocol match (`udp sport 67 udp
    /// dport 67`) or of conntrack are one xtables match, as iptables-nft lists them.
    fn push(&mut self, s: String) {
        for module in ["-m tcp ", "-m udp ", "-m sctp ", "-m conntrack "] {
            if let Some(opts) = s.strip_prefix(module)
                && let Some(last) = self.parts.last_mut()
                && let Some(prev) = last.strip_prefix(module)
            {
                *last = if opts == NOT_SHOWN || prev == NOT_SHOWN {
                    format!("{module}{NOT_SHOWN}")
                } else {
                    // iptables lists a protocol match's options in this order.
                    let rank = |o: &str| match o.trim_start_matches("! ") {
                        o if o.starts_with("--sport") => 0,
                        o if o.starts_with("--dport") => 1,
                        o if o.starts_with("--tcp-flags") => 2,
                        _ => 3,
                    };
                    if rank(opts) < rank(prev) {
                        format!("{module}{opts} {prev}")
                    } else {
                        format!("{module}{prev} {opts}")
                    }
                };
                return;
            }
        }
        self.parts.push(s);
    }

    fn proto(&mut self, p: &str, neg: bool) {
        self.proto = Some(p.to_string());
        self.push(format!("{}-p {p}", bang(neg)));
    }

    /// A native match or the nft translation of an xtables match.
    fn matched(&mut self, w: &[&str], family: Family) -> Option<()> {
        let (w, neg) = split_op(w);
        match w.as_slice() {
            [dir @ ("iifname" | "oifname"), name]
            | ["meta", dir @ ("iifname" | "oifname"), name] => {
                let opt = if *dir == "iifname" { "-i" } else { "-o" };
                let name = unquote(name);
                let name = name
                    .strip_suffix('*')
                    .map_or(name.to_string(), |n| format!("{n}+"));
                self.push(format!("{}{opt} {name}", bang(neg)));
            }
            [l3 @ ("ip" | "ip6"), dir @ ("saddr" | "daddr"), addr] => {
                if (*l3 == "ip") != (family == Family::Ip) {
                    return None;
                }
                let src = *dir == "saddr";
                if let Some((a, b)) = addr.split_once('-') {
                    let opt = if src { "--src-range" } else { "--dst-range" };
                    self.push(format!("-m iprange {}{opt} {a}-{b}", bang(neg)));
                } else {
                    let opt = if src { "-s" } else { "-d" };
                    let full = if family == Family::Ip { 32 } else { 128 };
                    let a = if addr.contains('/') {
                        addr.to_string()
                    } else {
                        format!("{addr}/{full}")
                    };
                    self.push(format!("{}{opt} {a}", bang(neg)));
                }
            }
            ["ip", "protocol", p] | ["meta", "l4proto", p] | ["ip6", "nexthdr", p] => {
                self.proto(p, neg)
            }
            [
                proto @ ("tcp" | "udp" | "sctp"),
                dir @ ("dport" | "sport"),
                values @ ..,
            ] => {
                if self.proto.is_none() {
                    self.proto(proto, false);
                }
                let ports = port_list(values)?;
                if ports.contains(',') {
                    let opt = if *dir == "dport" {
                        "--dports"
                    } else {
                        "--sports"
                    };
                    self.push(format!("-m multiport {}{opt} {ports}", bang(neg)));
                } else {
                    let opt = if *dir == "dport" {
                        "--dport"
                    } else {
                        "--sport"
                    };
                    self.push(format!("-m {proto} {}{opt} {ports}", bang(neg)));
                }
            }
            ["tcp", "flags", set, "/", mask] => {
                if self.proto.is_none() {
                    self.proto("tcp", false);
                }
                self.push(format!(
                    "-m tcp {}--tcp-flags {} {}",
                    bang(neg),
                    mask.to_ascii_uppercase(),
                    set.to_ascii_uppercase()
                ));
            }
            [icmp @ ("icmp" | "icmpv6"), "type", ty] => {
                let (module, proto, code) = if *icmp == "icmp" {
                    ("icmp", "icmp", icmp_type(ty)?)
                } else {
                    ("icmp6", "ipv6-icmp", icmpv6_type(ty)?)
                };
                if self.proto.is_none() {
                    self.proto(proto, false);
                }
                let opt = if module == "icmp" {
                    "--icmp-type"
                } else {
                    "--icmpv6-type"
                };
                self.push(format!("-m {module} {}{opt} {code}", bang(neg)));
            }
            ["ct", "state", states] => self.push(format!(
                "-m conntrack {}--ctstate {}",
                bang(neg),
                states.to_ascii_uppercase()
            )),
            // iptables-nft never writes `ct status` natively, and the conntrack
            // extension's translation of `--ctstate` with DNAT/SNAT prints only this
            // (dropping the negation and the other states): what the rule matches is
            // not shown.
            ["ct", "status", ..] => self.push(format!("-m conntrack {NOT_SHOWN}")),
            ["meta", "mark", "&", mask, value] => {
                self.push(format!("-m mark {}--mark {value}/{mask}", bang(neg)))
            }
            ["meta", "mark", value] => self.push(format!("-m mark {}--mark {value}", bang(neg))),
            ["ct", "mark", "&", mask, value] => {
                self.push(format!("-m connmark {}--mark {value}/{mask}", bang(neg)))
            }
            ["ct", "mark", value] => self.push(format!("-m connmark {}--mark {value}", bang(neg))),
            ["fib", dir @ ("daddr" | "saddr"), rest @ ..] => {
                let (iface, ty) = match rest {
                    ["type", ty] => (false, ty),
                    [".", "iif", "type", ty] => (true, ty),
                    _ => return None,
                };
                let opt = if *dir == "daddr" {
                    "--dst-type"
                } else {
                    "--src-type"
                };
                let mut m = format!("-m addrtype {}{opt} {}", bang(neg), ty.to_ascii_uppercase());
                if iface {
                    m.push_str(" --limit-iface-in");
                }
                self.push(m);
            }
            ["meta", "random", "&", "2147483647", "<", n] if !neg => {
                let n: u64 = n.parse().ok()?;
                self.push(format!(
                    "-m statistic --mode random --probability {:.11}",
                    n as f64 / 2147483648.0
                ));
            }
            // `-f`: a second or later fragment.
            ["ip", "frag-off", "&", "8191", "0"] => self.push(format!("{}-f", bang(!neg))),
            ["tcp", "flags", "!", flags] if !neg => {
                if self.proto.is_none() {
                    self.proto("tcp", false);
                }
                self.push(format!(
                    "-m tcp --tcp-flags {} NONE",
                    flags.to_ascii_uppercase()
                ));
            }
            ["pkttype", ty] | ["meta", "pkttype", ty] => {
                self.push(format!("-m pkttype {}--pkt-type {ty}", bang(neg)))
            }
            _ => return None,
        }
        Some(())
    }

    /// `limit rate 10/minute burst 10 packets`.
    fn limit(&mut self, w: &[&str]) -> Option<()> {
        let ["limit", "rate", rate, rest @ ..] = w else {
            return None;
        };
        let (n, unit) = rate.split_once('/')?;
        let unit = match unit {
            "second" => "sec",
            "minute" => "min",
            "hour" => "hour",
            "day" => "day",
            _ => return None,
        };
        let mut m = format!("-m limit --limit {n}/{unit}");
        match rest {
            [] => {}
            ["burst", b, "packets"] => {
                let _ = write!(m, " --limit-burst {b}");
            }
            _ => return None,
        }
        self.push(m);
        Some(())
    }

    /// `xt match "NAME"`, `xt target "NAME"`, or an extension's own print
    /// (`# match-set KUBE-X dst,dst`).
    fn xt(&mut self, w: &[&str], text: &str, after_counter: bool) -> Option<()> {
        match w {
            ["xt", "match", name] if !after_counter => {
                self.push(format!("-m {} {NOT_SHOWN}", unquote(name)))
            }
            ["xt", "target", name] if after_counter => {
                self.target = Some(format!("-j {} {NOT_SHOWN}", unquote(name)))
            }
            _ if text.starts_with('#') && !after_counter => {
                let print: Vec<&str> = text.trim_start_matches('#').split_whitespace().collect();
                match print.as_slice() {
                    ["match-set", set, dirs] => {
                        self.push(format!("-m set --match-set {set} {dirs}"))
                    }
                    ["!", "match-set", set, dirs] => {
                        self.push(format!("-m set ! --match-set {set} {dirs}"))
                    }
                    ["socket", opts @ ..] if opts.iter().all(|o| o.starts_with("--")) => {
                        let mut m = "-m socket".to_string();
                        for o in opts {
                            m.push(' ');
                            m.push_str(o);
                        }
                        self.push(m)
                    }
                    [name, ..] => {
                        let name: String = name
                            .chars()
                            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                            .collect();
                        if name.is_empty() {
                            return None;
                        }
                        self.push(format!("-m {name} {NOT_SHOWN}"))
                    }
                    [] => return None,
                }
            }
            _ => return None,
        }
        Some(())
    }
}

/// The xtables match an nft match statement plumb cannot read back most likely
/// translates (`ct original ...` is conntrack's), for an opaque `-m NAME`; `None` when
/// there is no good guess (the rule then stays an nft rule).
fn opaque_match(w: &[&str]) -> Option<&'static str> {
    Some(match w {
        ["ct", "state", ..] => "conntrack",
        ["ct", "mark", ..] => "connmark",
        ["ct", "helper", ..] => "helper",
        ["ct", ..] => "conntrack",
        ["meta", "skuid" | "skgid", ..] | ["skuid" | "skgid", ..] => "owner",
        ["tcp" | "udp" | "sctp", "sport" | "dport", ".", ..] => "multiport",
        ["meta", "mark", ..] => "mark",
        ["meta", "pkttype", ..] | ["pkttype", ..] => "pkttype",
        ["fib", rest @ ..] if rest.contains(&"oif") => "rpfilter",
        ["fib", ..] => "addrtype",
        ["tcp", "flags", ..] => "tcp",
        ["tcp", "option", "maxseg", ..] => "tcpmss",
        ["ip" | "ip6", "dscp", ..] => "dscp",
        ["ip", "ttl", ..] => "ttl",
        ["ip6", "hoplimit", ..] => "hl",
        ["ip" | "ip6", "length", ..] | ["meta", "length", ..] => "length",
        ["icmp", ..] => "icmp",
        ["icmpv6", ..] => "icmp6",
        ["tcp", ..] => "tcp",
        ["udp", ..] => "udp",
        ["ip" | "ip6", "saddr" | "daddr", ..] => "iprange",
        ["meta", "random", ..] => "statistic",
        _ => return None,
    })
}

/// A verdict as an iptables target.
fn verdict(v: &Verdict, family: Family) -> Option<String> {
    Some(match v {
        Verdict::Accept => "-j ACCEPT".into(),
        Verdict::Drop => "-j DROP".into(),
        Verdict::Return => "-j RETURN".into(),
        Verdict::Jump(c) => format!("-j {c}"),
        Verdict::Goto(c) => format!("-g {c}"),
        Verdict::Reject(with) => {
            let with = match with.as_deref().map(str::trim) {
                None | Some("") => {
                    if family == Family::Ip {
                        "icmp-port-unreachable".to_string()
                    } else {
                        "icmp6-port-unreachable".to_string()
                    }
                }
                Some(w) => reject_with(w, family)?,
            };
            format!("-j REJECT --reject-with {with}")
        }
        Verdict::Queue(_) | Verdict::Continue => return None,
    })
}

/// `with icmp type host-prohibited` -> `icmp-host-prohibited`.
fn reject_with(w: &str, family: Family) -> Option<String> {
    let words: Vec<&str> = w.split_whitespace().collect();
    let words = match words.as_slice() {
        ["with", rest @ ..] => rest,
        rest => rest,
    };
    Some(match (family, words) {
        (_, ["tcp", "reset"]) => "tcp-reset".into(),
        (Family::Ip, ["icmp", "type", ty]) | (Family::Ip, ["icmp", ty]) => match *ty {
            "admin-prohibited" => "icmp-admin-prohibited".into(),
            "prot-unreachable" => "icmp-proto-unreachable".into(),
            t => format!("icmp-{t}"),
        },
        (Family::Ip6, ["icmpv6", "type", ty]) | (Family::Ip6, ["icmpv6", ty]) => match *ty {
            "admin-prohibited" => "icmp6-adm-prohibited".into(),
            "no-route" => "icmp6-no-route".into(),
            "addr-unreachable" => "icmp6-addr-unreachable".into(),
            "port-unreachable" => "icmp6-port-unreachable".into(),
            _ => return None,
        },
        _ => return None,
    })
}

/// A NAT statement as an iptables target.
fn nat(kind: NatKind, args: &str) -> Option<String> {
    let w: Vec<&str> = args.split_whitespace().collect();
    let mut to = None;
    let mut flags = Vec::new();
    let mut i = 0;
    while i < w.len() {
        match w[i] {
            "to" => {
                to = Some(w.get(i + 1)?.to_string());
                i += 2;
            }
            f => {
                for x in f.split(',') {
                    flags.push(match x {
                        "random" => "--random",
                        "fully-random" | "random-fully" => "--random-fully",
                        "persistent" => "--persistent",
                        _ => return None,
                    });
                }
                i += 1;
            }
        }
    }
    let mut out = match (kind, &to) {
        (NatKind::Dnat, Some(t)) => format!("-j DNAT --to-destination {t}"),
        (NatKind::Snat, Some(t)) => format!("-j SNAT --to-source {t}"),
        (NatKind::Masquerade, None) => "-j MASQUERADE".into(),
        (NatKind::Masquerade, Some(t)) => {
            format!("-j MASQUERADE --to-ports {}", t.strip_prefix(':')?)
        }
        (NatKind::Redirect, Some(t)) => format!("-j REDIRECT --to-ports {}", t.strip_prefix(':')?),
        (NatKind::Redirect, None) => "-j REDIRECT".into(),
        _ => return None,
    };
    for f in flags {
        out.push(' ');
        out.push_str(f);
    }
    Some(out)
}

/// `meta mark set mark or 0x4000` and kin as `-j MARK` / `-j CONNMARK`.
fn mangle(w: &[&str]) -> Option<String> {
    let (target, rest) = match w {
        ["meta", "mark", "set", rest @ ..] => ("MARK", rest),
        ["ct", "mark", "set", rest @ ..] => ("CONNMARK", rest),
        _ => return None,
    };
    let own = if target == "MARK" { "mark" } else { "ct mark" };
    let parse = |s: &str| -> Option<u32> {
        let s = s.strip_prefix("0x")?;
        u32::from_str_radix(s, 16).ok()
    };
    let (value, mask) = match rest {
        [v] => (parse(v)?, 0xffff_ffff),
        [m, op, v] if *m == own || (*m == "mark" && target == "MARK") => {
            let v = parse(v)?;
            match *op {
                "or" => (v, v),
                "and" => (0, !v),
                "xor" => (v, 0),
                _ => return None,
            }
        }
        ["ct", "mark", op, v] if target == "CONNMARK" => {
            let v = parse(v)?;
            match *op {
                "or" => (v, v),
                "and" => (0, !v),
                "xor" => (v, 0),
                _ => return None,
            }
        }
        _ => return None,
    };
    Some(format!("-j {target} --set-xmark {value:#x}/{mask:#x}"))
}

/// `log prefix "X" level info` -> `-j LOG ...`; `log group N` -> `-j NFLOG ...`.
fn log(args: &str) -> Option<String> {
    let w = words(args);
    let w: Vec<&str> = w.iter().map(String::as_str).collect();
    let mut out = String::new();
    let mut nflog = false;
    let mut i = 0;
    while i < w.len() {
        match (w[i], w.get(i + 1)) {
            ("prefix", Some(p)) => {
                let _ = write!(out, " --PREFIX {}", quote(unquote(p)));
            }
            ("level", Some(l)) => {
                let n = match *l {
                    "emerg" => 0,
                    "alert" => 1,
                    "crit" => 2,
                    "err" => 3,
                    "warn" => 4,
                    "notice" => 5,
                    "info" => 6,
                    "debug" => 7,
                    _ => return None,
                };
                let _ = write!(out, " --log-level {n}");
            }
            ("group", Some(g)) => {
                nflog = true;
                let _ = write!(out, " --nflog-group {g}");
            }
            _ => return None,
        }
        i += 2;
    }
    let prefix = if nflog {
        "--nflog-prefix"
    } else {
        "--log-prefix"
    };
    let out = out.replace("--PREFIX", prefix);
    Some(format!("-j {}{out}", if nflog { "NFLOG" } else { "LOG" }))
}

/// `80`, `1024-65535`, `{ 80, 443 }` as an iptables port list (`80`, `1024:65535`,
/// `80,443`).
fn port_list(values: &[&str]) -> Option<String> {
    let items: Vec<&str> = values
        .iter()
        .map(|v| v.trim_matches(','))
        .filter(|v| !matches!(*v, "{" | "}" | ""))
        .collect();
    if items.is_empty() || (items.len() > 1 && values.first() != Some(&"{")) {
        return None;
    }
    let mut out = Vec::new();
    for i in items {
        let p = i.replace('-', ":");
        if !p.split(':').all(|n| n.parse::<u16>().is_ok()) {
            return None;
        }
        out.push(p);
    }
    Some(out.join(","))
}

fn icmp_type(t: &str) -> Option<&'static str> {
    Some(match t {
        "echo-reply" => "0",
        "destination-unreachable" => "3",
        "source-quench" => "4",
        "redirect" => "5",
        "echo-request" => "8",
        "router-advertisement" => "9",
        "router-solicitation" => "10",
        "time-exceeded" => "11",
        "parameter-problem" => "12",
        "timestamp-request" => "13",
        "timestamp-reply" => "14",
        _ => return None,
    })
}

fn icmpv6_type(t: &str) -> Option<&'static str> {
    Some(match t {
        "destination-unreachable" => "1",
        "packet-too-big" => "2",
        "time-exceeded" => "3",
        "parameter-problem" => "4",
        "echo-request" => "128",
        "echo-reply" => "129",
        "nd-router-solicit" => "133",
        "nd-router-advert" => "134",
        "nd-neighbor-solicit" => "135",
        "nd-neighbor-advert" => "136",
        "nd-redirect" => "137",
        _ => return None,
    })
}

/// Splits off a comparison operator: `(words without it, negated)`. `None`-free:
/// `==` and `eq` are dropped, `!=`/`ne` negate, others are kept (and then match no
/// pattern).
fn split_op<'w>(w: &[&'w str]) -> (Vec<&'w str>, bool) {
    let mut neg = false;
    let mut out = Vec::with_capacity(w.len());
    for (i, x) in w.iter().enumerate() {
        match *x {
            "!=" | "ne" => neg = true,
            "==" | "eq" => {}
            // `meta mark & 0x4000 == 0x4000` keeps its `&`; a leading `!` is not nft.
            _ => out.push(*x),
        }
        let _ = i;
    }
    (out, neg)
}

fn bang(neg: bool) -> &'static str {
    if neg { "! " } else { "" }
}

fn unquote(s: &str) -> &str {
    s.strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(s)
}

/// A string in iptables-save quoting.
fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The words of a statement text, quoted strings kept whole.
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in text.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                cur.push(c);
            }
            c if c.is_whitespace() && !quoted => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Ruleset {
        let mut rs = crate::nft::parse_text(text);
        translate(&mut rs);
        rs
    }

    fn nat(rules: &str) -> String {
        format!(
            "table ip nat {{\n\tchain PREROUTING {{\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t}}\n\tchain X {{\n{rules}\n\t}}\n}}\n"
        )
    }

    fn specs(rules: &str) -> Vec<String> {
        let rs = read(&nat(rules));
        let t = rs.table(Family::Ip, "nat").unwrap();
        assert!(t.nft_view);
        t.chain("X")
            .unwrap()
            .rules
            .iter()
            .map(|r| r.text.to_string())
            .collect()
    }

    #[test]
    fn native_and_translated_statements_read_back_as_iptables_lists_them() {
        assert_eq!(
            specs(
                "ip saddr != 10.42.0.0/16 ip daddr 10.43.0.10 ip protocol tcp  tcp dport 53 counter packets 0 bytes 0 jump KUBE-MARK-MASQ\n\
                 meta l4proto tcp counter packets 0 bytes 0 dnat to 10.42.0.7:53\n\
                 meta random & 2147483647 < 1073741824 counter packets 0 bytes 0 jump KUBE-SEP-A\n\
                 counter packets 0 bytes 0 meta mark set mark xor 0x4000\n\
                 meta mark & 0x00004000 != 0x00004000 counter packets 0 bytes 0 return\n\
                 iifname \"lxc*\" udp sport 67-68 udp dport 67-68 counter packets 0 bytes 0 accept\n\
                 fib daddr type local counter packets 1 bytes 2 jump KUBE-NODEPORTS\n\
                 ct state related,established counter packets 0 bytes 0 accept\n\
                 meta l4proto tcp counter packets 0 bytes 0 reject with tcp reset\n\
                 counter packets 0 bytes 0 masquerade fully-random"
            ),
            [
                "-A X ! -s 10.42.0.0/16 -d 10.43.0.10/32 -p tcp -m tcp --dport 53 -j KUBE-MARK-MASQ",
                "-A X -p tcp -j DNAT --to-destination 10.42.0.7:53",
                "-A X -m statistic --mode random --probability 0.50000000000 -j KUBE-SEP-A",
                "-A X -j MARK --set-xmark 0x4000/0x0",
                "-A X -m mark ! --mark 0x00004000/0x00004000 -j RETURN",
                "-A X -i lxc+ -p udp -m udp --sport 67:68 --dport 67:68 -j ACCEPT",
                "-A X -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS",
                "-A X -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
                "-A X -p tcp -j REJECT --reject-with tcp-reset",
                "-A X -j MASQUERADE --random-fully",
            ]
        );
    }

    #[test]
    fn extensions_shown_by_name_only_have_unknown_options() {
        assert_eq!(
            specs(
                "ip daddr 10.42.0.31 xt match \"physdev\" counter packets 0 bytes 0 jump KUBE-POD-FW-A\n\
                 ip protocol tcp   counter packets 0 bytes 0 # Warning: XT target DNAT not found\n\
                 xt target \"DNAT\"\n\
                 ip saddr != 127.0.0.0/8 ip daddr 127.0.0.0/8  ct status dnat counter packets 0 bytes 0 drop"
            ),
            [
                format!("-A X -d 10.42.0.31/32 -m physdev {NOT_SHOWN} -j KUBE-POD-FW-A"),
                format!("-A X -p tcp -j DNAT {NOT_SHOWN}"),
                format!("-A X ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m conntrack {NOT_SHOWN} -j DROP"),
            ]
        );
    }

    #[test]
    fn rules_iptables_nft_did_not_write_stay_nft_rules() {
        let rs = read(&nat("tcp dport 30700 ip daddr 192.168.150.33 drop\n\
             counter packets 0 bytes 0 jump KUBE-SERVICES\n\
             ip daddr . tcp dport vmap @svc"));
        let x = rs.table(Family::Ip, "nat").unwrap().chain("X").unwrap();
        assert!(matches!(x.rules[0].body, RuleBody::Nft(_)));
        assert!(matches!(x.rules[1].body, RuleBody::Xt(_)));
        assert!(matches!(x.rules[2].body, RuleBody::Nft(_)));
        assert_eq!(
            x.positioned().map(|(p, _)| p).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        // Only the counter-less rule is foreign: the vmap one has no counter either.
        assert_eq!(foreign_rules(&rs).count(), 2);
    }

    #[test]
    fn a_streamed_rule_takes_20_bytes() {
        assert!(std::mem::size_of::<Slot>() <= 20);
    }

    #[test]
    fn permute_puts_each_item_where_the_order_says() {
        for order in [
            vec![0u32, 1, 2, 3, 4],
            vec![4, 3, 2, 1, 0],
            vec![1, 2, 3, 4, 0],
            vec![2, 0, 1, 4, 3],
        ] {
            let mut items: Vec<char> = "abcde".chars().collect();
            let want: Vec<char> = order.iter().map(|&i| items[i as usize]).collect();
            permute(&mut items, &mut order.clone());
            assert_eq!(items, want, "{order:?}");
        }
    }

    #[test]
    fn only_tables_shaped_as_iptables_nft_creates_them_are_translated() {
        for (text, translated) in [
            // Lowercase base chain: a native nft table named filter.
            (
                "table ip filter {\n chain input {\n  type filter hook input priority 0; policy accept;\n }\n}\n",
                false,
            ),
            // Wrong priority for iptables' INPUT.
            (
                "table ip filter {\n chain INPUT {\n  type filter hook input priority 10; policy accept;\n }\n}\n",
                false,
            ),
            // Not an iptables table name, or an inet table.
            ("table ip kube-proxy {\n chain X {\n }\n}\n", false),
            (
                "table inet filter {\n chain INPUT {\n  type filter hook input priority 0; policy accept;\n }\n}\n",
                false,
            ),
            // A named set: iptables-nft never creates one.
            (
                "table ip filter {\n set s {\n  type ipv4_addr\n }\n}\n",
                false,
            ),
            (
                "table ip filter {\n chain INPUT {\n  type filter hook input priority filter; policy drop;\n }\n}\n",
                true,
            ),
            (
                "table ip6 mangle {\n chain KUBE-PROXY-CANARY {\n }\n}\n",
                true,
            ),
        ] {
            let rs = read(text);
            let t = &rs.tables[0];
            assert_eq!(t.nft_view, translated, "{text}");
            assert_eq!(t.backend == Backend::IptablesNft, translated, "{text}");
        }
        // A translated table lists every built-in chain, the policy kept.
        let rs = read(
            "table ip filter {\n chain INPUT {\n  type filter hook input priority filter; policy drop;\n }\n}\n",
        );
        let names: Vec<&str> = rs.tables[0].chains.iter().map(|c| &*c.name).collect();
        assert_eq!(names, ["FORWARD", "OUTPUT", "INPUT"]);
        assert_eq!(
            rs.tables[0].chain("INPUT").unwrap().policy(),
            Some(&crate::model::Policy::Drop)
        );
    }
}
