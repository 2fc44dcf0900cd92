//! Rules read from an `iptables -nvL` listing, which support bundles keep instead of
//! `iptables-save` output: the columns as printed and what plumb recognised in the
//! trailing option text ([`ListedMatch`], [`ListedTarget`]), the rest verbatim.
//!
//! A listing is lossy (options printed as prose, rounded counters, host names), so a
//! [`ListedRule`] is approximate: it is the body of rules marked
//! [`RuleBody::Approximate`](super::RuleBody::Approximate). The reader that builds it is
//! `crate::iptables::listing`; this module depends only on the rest of the model.

use super::xt::TARGET_EXTENSIONS;
use super::{ChainRef, TransferKind};

/// A value as printed with an optional `!` in front (`!eth0`, `!10.0.0.0/8`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Negatable {
    pub negated: bool,
    pub value: Box<str>,
}

impl Negatable {
    /// Reads a column word: a leading `!` is the negation.
    pub(crate) fn parse(word: &str) -> Negatable {
        match word.strip_prefix('!') {
            Some(v) => Negatable {
                negated: true,
                value: v.into(),
            },
            None => Negatable {
                negated: false,
                value: word.into(),
            },
        }
    }
}

/// The `opt` column: fragment matching (`-f` / `! -f`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fragment {
    /// `--`: no fragment option.
    #[default]
    Any,
    /// `-f`: second and further fragments only.
    Fragments,
    /// `!f`: head fragments and unfragmented packets only.
    NotFragments,
    /// Blank (`ip6tables` before 1.8 prints no flags).
    NotShown,
}

/// A port or port range of the tcp/udp/sctp match: `dpt:443`, `dpts:1000:2000`, `dpt:!22`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortRange {
    pub negated: bool,
    /// Number, or a service name in a listing made without `-n`.
    pub first: String,
    pub last: Option<String>,
}

/// Which ports a `multiport` match tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortDirection {
    Source,
    Destination,
    Either,
}

/// A match plumb recognised in the trailing text of a listed rule.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ListedMatch {
    /// `/* text */` (`-m comment --comment text`).
    Comment(String),
    /// `tcp spt:80 dpts:1000:2000 flags:0x06/0x02` (`-m tcp`, `udp`, `sctp`, `dccp`, `udplite`).
    Ports {
        protocol: String,
        source: Option<PortRange>,
        destination: Option<PortRange>,
        /// `flags:0x17/0x02` verbatim (tcp only), with `!` if negated.
        tcp_flags: Option<String>,
    },
    /// `multiport dports 80,443,8000:8080`; each item as printed (`8000:8080` is a range).
    Multiport {
        direction: PortDirection,
        negated: bool,
        ports: Vec<String>,
    },
    /// `ctstate NEW` (conntrack) or `state RELATED,ESTABLISHED` (state).
    ConnState {
        /// `ctstate` or `state`.
        keyword: String,
        negated: bool,
        states: Vec<String>,
    },
    /// `mark match 0x4000/0x4000`, `mark match ! 0x8000/0x8000`.
    Mark {
        negated: bool,
        value: String,
        mask: Option<String>,
    },
    /// `ADDRTYPE match src-type LOCAL dst-type !LOCAL limit-in`.
    AddrType {
        source_type: Option<Negatable>,
        destination_type: Option<Negatable>,
        limit_in: bool,
        limit_out: bool,
    },
    /// `statistic mode random probability 0.50000000000`, `statistic mode nth every 3 packet 1`.
    Statistic {
        mode: String,
        negated: bool,
        /// As printed (11 decimals), so it compares with `--probability` in iptables-save.
        probability: Option<String>,
        every: Option<String>,
        packet: Option<String>,
    },
    /// `recent: CHECK seconds: 10800 reap name: KUBE-SEP-X side: source mask: 255.255.255.255`.
    Recent {
        negated: bool,
        /// `SET`, `CHECK`, `UPDATE` or `REMOVE`.
        command: String,
        seconds: Option<String>,
        hit_count: Option<String>,
        reap: bool,
        ttl: bool,
        name: Option<String>,
        /// `source` or `dest`.
        side: Option<String>,
        mask: Option<String>,
    },
    /// `match-set NAME src,dst` (`-m set`); `! match-set ...` when negated.
    Set {
        negated: bool,
        name: String,
        flags: String,
    },
    /// `PHYSDEV match --physdev-in veth0 --physdev-is-bridged`: the options verbatim.
    Physdev { options: Vec<String> },
    /// `limit: avg 3/hour burst 5`.
    Limit { average: String, burst: String },
}

/// The target's own text, when plumb recognised it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ListedTarget {
    /// DNAT / SNAT: `to:10.244.1.5:8080 random persistent` (one `to:` per range).
    Nat {
        to: Vec<String>,
        random: bool,
        random_fully: bool,
        persistent: bool,
    },
    /// MASQUERADE: `masq ports: 1024-65535 random-fully`.
    Masquerade {
        ports: Option<String>,
        random: bool,
        random_fully: bool,
    },
    /// REDIRECT: `redir ports 80`.
    Redirect { ports: Option<String>, random: bool },
    /// MARK: `MARK or 0x4000`, `MARK xset 0x4000/0x4000`, `MARK and 0xffffbfff`.
    Mark { operation: String, value: String },
    /// REJECT: `reject-with icmp-port-unreachable`.
    Reject { with: String },
    /// LOG: `LOG flags 0 level 4 prefix "..."` (`level warn` without `-n`).
    Log {
        flags: Option<String>,
        level: Option<String>,
        prefix: Option<String>,
    },
}

impl ListedTarget {
    /// A MARK target as the kernel's `(value, mask)` pair, which is how iptables-save
    /// prints it (`--set-xmark value/mask`): `or X` is `X/X`, `and X` is `0/!X`,
    /// `set X` is `X/0xffffffff`, `xor X` is `X/0`.
    pub fn mark_xset(&self) -> Option<(u32, u32)> {
        let ListedTarget::Mark { operation, value } = self else {
            return None;
        };
        let hex = |s: &str| {
            let s = s.trim();
            match s.strip_prefix("0x") {
                Some(h) => u32::from_str_radix(h, 16).ok(),
                None => s.parse().ok(),
            }
        };
        let (v, m) = match value.split_once('/') {
            Some((v, m)) => (hex(v)?, Some(hex(m)?)),
            None => (hex(value)?, None),
        };
        Some(match (operation.as_str(), m) {
            ("xset", Some(m)) => (v, m),
            ("set", Some(m)) => (v, m),
            ("set", None) => (v, u32::MAX),
            ("or", None) => (v, v),
            ("and", None) => (0, !v),
            ("xor", None) => (v, 0),
            _ => return None,
        })
    }
}

/// A rule read from a listing: its columns plus what was recognised in the trailing
/// option text. Approximate: the listing does not say everything iptables-save says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListedRule {
    /// The `num` column (`--line-numbers`).
    pub line_number: Option<u32>,
    /// `None` for a rule without target (blank column).
    pub target: Option<String>,
    /// `[goto]` in the option text: `-g` instead of `-j`.
    pub goto: bool,
    /// The `prot` column as printed: a number (`6`, iptables >= 1.8.9 with `-n`) or a
    /// name (`tcp`, `all`).
    pub protocol: Negatable,
    pub fragment: Fragment,
    /// Whether the listing has the `in`/`out` columns (`-v`).
    pub interfaces_listed: bool,
    /// `None` when any (`*`, `any`) or not listed.
    pub in_interface: Option<Negatable>,
    pub out_interface: Option<Negatable>,
    /// As printed: `0.0.0.0/0`, `10.244.1.5` (no `/32`), `anywhere` or a host name without `-n`.
    pub source: Negatable,
    pub destination: Negatable,
    /// Everything after the destination column, verbatim (trimmed).
    pub extra: Box<str>,
    pub matches: Vec<ListedMatch>,
    /// Boxed: most rules have none, and it keeps [`RuleBody`](super::RuleBody) small.
    pub target_details: Option<Box<ListedTarget>>,
    /// Parts of `extra` plumb did not recognise, each a verbatim run of words.
    pub unrecognised: Vec<String>,
    /// The first `/* comment */`.
    pub comment: Option<String>,
    /// The counters carry a K/M/G/T suffix: rounded to the unit, so off by up to half of it.
    pub counters_rounded: bool,
}

impl ListedRule {
    pub fn chain_reference(&self) -> Option<ChainRef<'_>> {
        let t = self.target.as_deref()?;
        if self.goto {
            return Some(ChainRef {
                kind: TransferKind::Goto,
                chain: t,
            });
        }
        (!TARGET_EXTENSIONS.contains(&t)).then_some(ChainRef {
            kind: TransferKind::Jump,
            chain: t,
        })
    }

    /// Every `/* comment */`, in order.
    pub fn comments(&self) -> impl Iterator<Item = &str> {
        self.matches.iter().filter_map(|m| match m {
            ListedMatch::Comment(c) => Some(c.as_str()),
            _ => None,
        })
    }

    /// DNAT/SNAT `to:` ranges (`10.244.1.5:8080`, `[fd00::2]:53`).
    pub fn nat_to(&self) -> &[String] {
        match self.target_details.as_deref() {
            Some(ListedTarget::Nat { to, .. }) => to,
            _ => &[],
        }
    }

    /// `statistic mode random probability P`, as printed.
    pub fn probability(&self) -> Option<&str> {
        self.matches.iter().find_map(|m| match m {
            ListedMatch::Statistic { probability, .. } => probability.as_deref(),
            _ => None,
        })
    }
}
