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
    /// `!` was printed in front of the value: the rule matches everything except it.
    pub negated: bool,
    /// The value without the `!`, exactly as the listing printed it.
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
    /// `!` in front (`dpt:!22`): the rule matches any port outside the range.
    pub negated: bool,
    /// Number, or a service name in a listing made without `-n`.
    pub first: String,
    /// Upper end of a `first:last` range (`dpts:`); `None` for a single port.
    pub last: Option<String>,
}

/// Which ports a `multiport` match tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortDirection {
    /// `sports`: the source port.
    Source,
    /// `dports`: the destination port.
    Destination,
    /// `ports`: either the source or the destination port (`--ports`).
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
        /// Protocol the match module is named after (`tcp`, `udp`, `sctp`, `dccp`, `udplite`).
        protocol: String,
        /// `spt:`/`spts:`; `None` when the listing shows no source port test.
        source: Option<PortRange>,
        /// `dpt:`/`dpts:`; `None` when the listing shows no destination port test.
        destination: Option<PortRange>,
        /// `flags:0x17/0x02` verbatim (tcp only), with `!` if negated.
        tcp_flags: Option<String>,
    },
    /// `multiport dports 80,443,8000:8080`; each item as printed (`8000:8080` is a range).
    Multiport {
        /// Which port of the packet is tested.
        direction: PortDirection,
        /// `multiport dports !...`: the rule matches ports outside the list.
        negated: bool,
        /// The listed ports and ranges, in order, verbatim.
        ports: Vec<String>,
    },
    /// `ctstate NEW` (conntrack) or `state RELATED,ESTABLISHED` (state).
    ConnState {
        /// `ctstate` or `state`.
        keyword: String,
        /// `!` before the states: the rule matches connections in none of them.
        negated: bool,
        /// State names as printed (`NEW`, `RELATED`, `ESTABLISHED`, `INVALID`, `UNTRACKED`, `SNAT`,
        /// `DNAT`).
        states: Vec<String>,
    },
    /// `mark match 0x4000/0x4000`, `mark match ! 0x8000/0x8000`.
    Mark {
        /// `mark match !`: the rule matches packets whose masked mark differs.
        negated: bool,
        /// The mark value as printed (`0x4000`).
        value: String,
        /// The mask after `/`; `None` when the listing shows none (the whole 32-bit mark is
        /// compared).
        mask: Option<String>,
    },
    /// `ADDRTYPE match src-type LOCAL dst-type !LOCAL limit-in`.
    AddrType {
        /// `src-type`: the address type the source must (or, negated, must not) have (`LOCAL`,
        /// `UNICAST`, ...).
        source_type: Option<Negatable>,
        /// `dst-type`: the address type the destination must (or must not) have.
        destination_type: Option<Negatable>,
        /// `limit-in`: only the incoming interface is considered when deciding the type.
        limit_in: bool,
        /// `limit-out`: only the outgoing interface is considered when deciding the type.
        limit_out: bool,
    },
    /// `statistic mode random probability 0.50000000000`, `statistic mode nth every 3 packet 1`.
    Statistic {
        /// `random` or `nth`.
        mode: String,
        /// `statistic !`: the rule matches exactly the packets the mode would not pick.
        negated: bool,
        /// As printed (11 decimals), so it compares with `--probability` in iptables-save.
        probability: Option<String>,
        /// `nth` mode: `every N`, the cycle length.
        every: Option<String>,
        /// `nth` mode: `packet P`, the packet in each cycle that matches (counted from 0).
        packet: Option<String>,
    },
    /// `recent: CHECK seconds: 10800 reap name: KUBE-SEP-X side: source mask: 255.255.255.255`.
    Recent {
        /// `recent: !`: the rule matches when the test fails.
        negated: bool,
        /// `SET`, `CHECK`, `UPDATE` or `REMOVE`.
        command: String,
        /// `seconds: N`: the address must have been seen in the last N seconds.
        seconds: Option<String>,
        /// `hit_count: N`: the address must have been seen at least N times.
        hit_count: Option<String>,
        /// `reap`: entries older than `seconds` are purged.
        reap: bool,
        /// `TTL-Match`: the packet's TTL must equal the one recorded.
        ttl: bool,
        /// `name:`, the list the address is kept in, as printed (iptables prints `DEFAULT`
        /// for a rule that names none); `None` when the listing shows no name.
        name: Option<String>,
        /// `source` or `dest`.
        side: Option<String>,
        /// `mask:` applied to the address before the lookup (dotted quad or IPv6).
        mask: Option<String>,
    },
    /// `match-set NAME src,dst` (`-m set`); `! match-set ...` when negated.
    Set {
        /// `! match-set`: the rule matches packets not in the set.
        negated: bool,
        /// Name of the ipset.
        name: String,
        /// Direction flags as printed (`src`, `dst,dst`): which address or port of the packet
        /// each dimension of the set is compared with.
        flags: String,
    },
    /// `PHYSDEV match --physdev-in veth0 --physdev-is-bridged`: the options verbatim.
    Physdev {
        /// One item per option with its `!` and argument, as printed
        /// (`--physdev-in veth0`, `! --physdev-is-bridged`).
        options: Vec<String>,
    },
    /// `limit: avg 3/hour burst 5`.
    Limit {
        /// `avg N/unit`: the sustained rate (`3/hour`), as printed.
        average: String,
        /// `burst N`: how many packets may match at once before the rate applies.
        burst: String,
    },
}

/// The target's own text, when plumb recognised it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ListedTarget {
    /// DNAT / SNAT: `to:10.244.1.5:8080 random persistent` (one `to:` per range).
    Nat {
        /// `to:` ranges, one per DNAT/SNAT `--to-destination`/`--to-source`, verbatim
        /// (`10.244.1.5:8080`, `[fd00::2]:53`).
        to: Vec<String>,
        /// `random`: the port is chosen at random within the range.
        random: bool,
        /// `random-fully`: full port randomisation (also for the first connection of a tuple).
        random_fully: bool,
        /// `persistent`: the same client gets the same address of the range on every connection.
        persistent: bool,
    },
    /// MASQUERADE: `masq ports: 1024-65535 random-fully`.
    Masquerade {
        /// `masq ports:` range the source port is mapped into (`1024-65535`); `None` keeps the
        /// original port where possible.
        ports: Option<String>,
        /// `random`: source port chosen at random.
        random: bool,
        /// `random-fully`: full source port randomisation.
        random_fully: bool,
    },
    /// REDIRECT: `redir ports 80`.
    Redirect {
        /// `redir ports` the destination port is rewritten to; `None` keeps it.
        ports: Option<String>,
        /// `random`: the port is chosen at random within the range.
        random: bool,
    },
    /// MARK: `MARK or 0x4000`, `MARK xset 0x4000/0x4000`, `MARK and 0xffffbfff`.
    Mark {
        /// `set`, `xset`, `or`, `and` or `xor`, as printed (see [`ListedTarget::mark_xset`]).
        operation: String,
        /// The operand as printed: `0x4000` or `0x4000/0x4000`.
        value: String,
    },
    /// REJECT: `reject-with icmp-port-unreachable`.
    Reject {
        /// The ICMP (or TCP reset) reply as printed (`icmp-port-unreachable`, `tcp-reset`).
        with: String,
    },
    /// LOG: `LOG flags 0 level 4 prefix "..."` (`level warn` without `-n`).
    Log {
        /// `flags N`: the LOG options bitmask (tcp sequence, tcp/ip options, uid, mac) as printed.
        flags: Option<String>,
        /// `level N`: the syslog level, a number with `-n` (`4`) or a name without (`warn`).
        level: Option<String>,
        /// `prefix "..."`: the text prepended to each log line, without the quotes.
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
    /// The `opt` column: whether the rule tests fragments.
    pub fragment: Fragment,
    /// Whether the listing has the `in`/`out` columns (`-v`).
    pub interfaces_listed: bool,
    /// `None` when any (`*`, `any`) or not listed.
    pub in_interface: Option<Negatable>,
    /// `out` column; `None` when any (`*`, `any`) or not listed.
    pub out_interface: Option<Negatable>,
    /// As printed: `0.0.0.0/0`, `10.244.1.5` (no `/32`), `anywhere` or a host name without `-n`.
    pub source: Negatable,
    /// The `destination` column, as printed (same forms as `source`).
    pub destination: Negatable,
    /// Everything after the destination column, verbatim (trimmed).
    pub extra: Box<str>,
    /// The matches recognised in `extra`, in the order printed.
    pub matches: Vec<ListedMatch>,
    /// Boxed: most rules have none, and it keeps [`RuleBody`](super::RuleBody) small.
    pub target_details: Option<Box<ListedTarget>>,
    /// Parts of `extra` plumb did not recognise, each a verbatim run of words.
    pub unrecognised: Vec<String>,
    /// The first `/* comment */`.
    pub comment: Option<String>,
    /// The counters carry a K/M/G/T suffix: rounded to the unit, so off by up to half of it.
    pub counters_rounded: bool,
    /// The `pkts`/`bytes` columns; `None` when the listing has none (without `-v`).
    pub counters: Option<super::Counters>,
}

impl ListedRule {
    /// The chain this rule transfers to: `[goto]` rules always, `-j` rules when the target is not a
    /// target extension (ACCEPT, DNAT, MARK, ...); `None` for no target or an extension.
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
