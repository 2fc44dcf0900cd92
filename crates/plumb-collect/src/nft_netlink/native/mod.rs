//! Native nf_tables tables (kube-proxy's nftables mode, flannel, firewalld, ...)
//! decoded from the dump into the text `nft list table FAMILY NAME` prints for them
//! (the local nft, Debian 12's 1.0.6, is the oracle: `tests/native_oracle.rs`), so
//! that plumb-ruleset's nft reader builds the model it builds from nft's own listing.
//!
//! - `mod.rs` (here): what a table, a chain and a rule's raw message are kept as
//!   while the dump is read, and the table's text in nft's printing order: the
//!   table's comment, its named sets and maps in dump order, then its chains in dump
//!   order (each chain's comment, its `type ... hook ... priority ...; policy ...;`
//!   line with priorities by name as nft 1.0.6 names them, its rules), blocks
//!   separated by an empty line.
//! - `expr.rs`: one rule's expressions into its statements.
//! - `set.rs`: set and map declarations and their elements.
//! - `datatype.rs`: how a value of a datatype prints, and nft's element order.
//!
//! Rules are kept as their raw messages until the whole dump is read, because sets
//! (whose key lengths say how a lookup's registers concatenate) come after the rules.
//! Decoded exactly or not at all: the first thing not decoded (an expression, a flag,
//! a datatype, an object, a flowtable, a set feature) is the table's reason to be read
//! with `nft list table`.

pub(crate) mod datatype;
pub(crate) mod expr;
pub(crate) mod set;

use super::by_kind;
use super::{AF_INET, AF_INET6};
use set::SetAcc;
use std::collections::HashMap;
use std::fmt::Write as _;

/// NFPROTO_INET.
const AF_INET_ANY: u8 = 1;

/// What a native table holds beside its chains.
#[derive(Debug, Default)]
pub(crate) struct NativeTable {
    /// `comment "..."` of the table.
    pub comment: Option<String>,
    /// Named and anonymous sets in dump order.
    pub sets: Vec<SetAcc>,
    pub set_index: HashMap<String, usize>,
    /// Why the table is not decoded (the first reason).
    pub unsupported: Option<String>,
}

/// What a native chain holds beside its name.
#[derive(Debug, Default)]
pub(crate) struct NativeChain {
    /// `type filter`, `nat`, `route` of a base chain.
    pub kind: Option<String>,
    pub comment: Option<String>,
    /// Raw `NEWRULE` attributes, in order.
    pub rules: Vec<Box<[u8]>>,
    /// Why the chain is not decoded.
    pub unsupported: Option<String>,
}

/// A user-data comment (`NUL`-terminated, printable, without a quote).
pub(crate) fn udata_comment(v: &[u8]) -> Option<String> {
    let (last, text) = v.split_last()?;
    if *last != 0 {
        return None;
    }
    let s = std::str::from_utf8(text).ok()?;
    (!s.contains(['"', '\0', '\n', '\t'])).then(|| s.to_string())
}

impl NativeTable {
    /// Reads a `NEWTABLE` message's attributes (NAME 1, FLAGS 2, USE 3, HANDLE 4,
    /// PAD 5, USERDATA 6, OWNER 7).
    pub fn push_table(&mut self, body: &[u8]) {
        let a = by_kind::<8>(body);
        if a[2].and_then(|x| x.be_u32()).unwrap_or(0) != 0 {
            self.unsupported
                .get_or_insert_with(|| "table flags (dormant, owner)".into());
        }
        if let Some(u) = a[6] {
            for (kind, value) in set::udata(u.value) {
                match (kind, udata_comment(value)) {
                    (0, Some(c)) => self.comment = Some(c),
                    _ => {
                        self.unsupported
                            .get_or_insert_with(|| "table user data not decoded".into());
                    }
                }
            }
        }
    }

    /// Reads a `NEWSET` message's attributes.
    pub fn push_set(&mut self, body: &[u8]) {
        let Some(s) = SetAcc::from_attrs(body) else {
            return;
        };
        match self.set_index.get(&s.name) {
            Some(&i) => self.sets[i] = s,
            None => {
                self.set_index.insert(s.name.clone(), self.sets.len());
                self.sets.push(s);
            }
        }
    }

    /// Reads a `NEWSETELEM` message's attributes (TABLE 1, SET 2, ELEMENTS 3).
    pub fn push_elements(&mut self, body: &[u8]) {
        let a = by_kind::<4>(body);
        let (Some(name), Some(list)) = (a[2].map(|x| x.string()), a[3]) else {
            return;
        };
        match self.set_index.get(&name) {
            Some(&i) => self.sets[i].push_elements(list),
            None => {
                self.unsupported
                    .get_or_insert_with(|| format!("elements of set {name} before the set"));
            }
        }
    }
}

impl NativeChain {
    /// Reads the native parts of a `NEWCHAIN` message's attributes (TYPE 7, FLAGS 10,
    /// USERDATA 12, HOOK 4 {DEV 3, DEVS 4}).
    pub fn from_attrs(a: &[Option<plumb_os::netlink::Attr<'_>>; 13]) -> NativeChain {
        let mut c = NativeChain {
            kind: a[7].map(|x| x.string()),
            ..NativeChain::default()
        };
        if a[10].and_then(|x| x.be_u32()).unwrap_or(0) & !1 != 0 {
            c.unsupported = Some("chain flags (offload, binding)".into());
        }
        if let Some(h) = a[4] {
            let h = by_kind::<5>(h.value);
            if h[3].is_some() || h[4].is_some() {
                c.unsupported = Some("a chain hooked to devices".into());
            }
        }
        if let Some(u) = a[12] {
            for (kind, value) in set::udata(u.value) {
                match (kind, udata_comment(value)) {
                    (0, Some(cm)) => c.comment = Some(cm),
                    _ => c.unsupported = Some("chain user data not decoded".into()),
                }
            }
        }
        c
    }
}

/// Family name in `table FAMILY NAME` (the families decoded).
fn family_name(family: u8) -> Option<&'static str> {
    match family {
        AF_INET => Some("ip"),
        AF_INET6 => Some("ip6"),
        AF_INET_ANY => Some("inet"),
        _ => None,
    }
}

/// A base chain's priority as nft 1.0.6 prints it: a standard priority's name within
/// 10 of it (`dstnat - 10`, `filter + 5`), the NAT ones only at their hook
/// (`dstnat` at prerouting, `srcnat` at postrouting), else the number.
fn priority_text(hook: u32, prio: i32) -> String {
    let names: [(&str, i32, Option<u32>); 6] = [
        ("raw", -300, None),
        ("mangle", -150, None),
        ("dstnat", -100, Some(0)),
        ("filter", 0, None),
        ("security", 50, None),
        ("srcnat", 100, Some(4)),
    ];
    for (name, value, only_hook) in names {
        if only_hook.is_some_and(|h| h != hook) {
            continue;
        }
        let offset = i64::from(prio) - i64::from(value);
        if offset.abs() <= 10 {
            return match offset {
                0 => name.to_string(),
                o if o > 0 => format!("{name} + {o}"),
                o => format!("{name} - {}", -o),
            };
        }
    }
    prio.to_string()
}

/// The text `nft list table` prints for a native table, or why it is not decoded.
pub(super) fn table_text(t: &super::TableAcc) -> Result<String, String> {
    let n = &t.native;
    if let Some(why) = &n.unsupported {
        return Err(why.clone());
    }
    let family = family_name(t.family).ok_or("a family not decoded")?;
    let sets = |name: &str| n.set_index.get(name).and_then(|&i| n.sets.get(i));
    let mut blocks: Vec<String> = Vec::new();
    for s in n.sets.iter().filter(|s| !s.anonymous()) {
        blocks.push(s.declaration()?);
    }
    for c in &t.chains {
        let Some(nc) = &c.native else {
            return Err(format!("chain {} not read", c.name));
        };
        if let Some(why) = &nc.unsupported {
            return Err(format!("chain {}: {why}", c.name));
        }
        let mut s = String::with_capacity(64 + nc.rules.iter().map(|r| r.len() / 2).sum::<usize>());
        let _ = writeln!(s, "\tchain {} {{", c.name);
        if let Some(cm) = &nc.comment {
            let _ = writeln!(s, "\t\tcomment \"{cm}\"");
        }
        if let Some(b) = c.base {
            let hook = match b.hook {
                0 => "prerouting",
                1 => "input",
                2 => "forward",
                3 => "output",
                4 => "postrouting",
                h => return Err(format!("chain {}: hook {h}", c.name)),
            };
            let kind = match nc.kind.as_deref() {
                Some(k @ ("filter" | "nat" | "route")) => k,
                _ => return Err(format!("chain {}: chain type not decoded", c.name)),
            };
            let policy = match b.policy {
                0 => "drop",
                1 => "accept",
                p => return Err(format!("chain {}: policy {p}", c.name)),
            };
            let _ = writeln!(
                s,
                "\t\ttype {kind} hook {hook} priority {}; policy {policy};",
                priority_text(b.hook, b.priority)
            );
        }
        for raw in &nc.rules {
            // NFTA_RULE_EXPRESSIONS 4, USERDATA 7.
            let a = by_kind::<8>(raw);
            let text = expr::rule_text(t.family, a[4], a[7], &sets)
                .map_err(|e| format!("chain {}: {e}", c.name))?;
            s.push_str("\t\t");
            s.push_str(&text);
            s.push('\n');
        }
        s.push_str("\t}\n");
        blocks.push(s);
    }
    let mut out = String::with_capacity(blocks.iter().map(|b| b.len() + 1).sum::<usize>() + 64);
    let _ = writeln!(out, "table {family} {} {{", t.name);
    if let Some(c) = &n.comment {
        let _ = writeln!(out, "\tcomment \"{c}\"");
    }
    for (i, b) in blocks.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(b);
    }
    out.push_str("}\n");
    Ok(out)
}

#[cfg(test)]
mod priority_tests {
    use super::*;

    #[test]
    fn priorities_are_named_as_nft_1_0_6_names_them() {
        assert_eq!(priority_text(0, -110), "dstnat - 10");
        assert_eq!(priority_text(1, -110), "-110");
        assert_eq!(priority_text(3, -100), "-100");
        assert_eq!(priority_text(0, -89), "-89");
        assert_eq!(priority_text(4, 100), "srcnat");
        assert_eq!(priority_text(1, 100), "100");
        assert_eq!(priority_text(2, 40), "security - 10");
        assert_eq!(priority_text(2, -160), "mangle - 10");
    }
}

#[cfg(test)]
mod tests;
