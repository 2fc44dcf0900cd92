//! The compiled form of rules that the compilers produce (`matches::xt` and
//! `matches::listed` for iptables, [`crate::targets`] for iptables targets,
//! [`crate::nft`] for native nftables) and that [`crate::index`] holds and
//! [`crate::simulate`] runs: conditions ([`Cond`]), actions ([`Action`]), the items of a
//! rule ([`Item`]), compiled nft sets and maps ([`CompiledSet`]) and the hooks
//! ([`HookId`]). Data only, besides set lookups: evaluating a condition against a
//! packet is [`crate::matches`]' job, compiling one the compilers'.

use crate::addr::{AddrRange, Cidr, PortRange};
use crate::packet::AddrType;
use std::net::IpAddr;

/// An address match: prefix or range.
#[derive(Clone, Debug, PartialEq)]
pub enum AddrMatch {
    /// A prefix (`10.0.0.0/8`, `-s 10.0.0.1` as a /32).
    Net(Cidr),
    /// An inclusive range (`-m iprange`, nft `10.0.0.1-10.0.0.9`).
    Range(AddrRange),
    /// Any of several (nft anonymous sets).
    Any(Vec<AddrMatch>),
}

/// The port ranges of a port match: one (no allocation) or several (multiport, nft sets).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ports {
    /// A single port or range (`--dport 80`, `--dport 1000:2000`).
    One(PortRange),
    /// Several ports and ranges (`multiport`, an nft anonymous set).
    Many(Box<[PortRange]>),
}

/// An interface name pattern: `eth0`, `veth+` (iptables), `veth*` (nft).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IfacePattern {
    /// The name, or for a prefix pattern the part before `+`/`*`.
    pub name: String,
    /// A prefix pattern (`veth+`): any interface whose name starts with `name`.
    pub prefix: bool,
}

/// Conntrack state bits as `xt_conntrack` numbers them.
pub mod ct_bits {
    /// A packet conntrack could not classify.
    pub const INVALID: u16 = 1;
    /// A packet of a connection that has seen traffic both ways.
    pub const ESTABLISHED: u16 = 2;
    /// A new connection related to an existing one (an ICMP error, an FTP data channel).
    pub const RELATED: u16 = 4;
    /// The first packet of a connection, or of one not yet seen both ways.
    pub const NEW: u16 = 8;
    /// A packet conntrack does not track (`-j NOTRACK`/`CT --notrack` in `raw`).
    pub const UNTRACKED: u16 = 64;
    /// Virtual state: the connection's source was translated (`--ctstate SNAT`).
    pub const SNAT: u16 = 256;
    /// Virtual state: the connection's destination was translated (`--ctstate DNAT`).
    pub const DNAT: u16 = 512;

    /// Reads a `--ctstate`/`--state` list (`NEW,ESTABLISHED`, any case) into its bits; `None` if a
    /// name is unknown.
    pub fn parse(list: &str) -> Option<u16> {
        let mut bits = 0;
        for s in list.split(',') {
            bits |= match s.trim().to_ascii_uppercase().as_str() {
                "INVALID" => INVALID,
                "ESTABLISHED" => ESTABLISHED,
                "RELATED" => RELATED,
                "NEW" => NEW,
                "UNTRACKED" => UNTRACKED,
                "SNAT" => SNAT,
                "DNAT" => DNAT,
                _ => return None,
            };
        }
        Some(bits)
    }
}

/// How `-m recent` uses its list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecentMode {
    /// `--set`: add the address to the list (always matches).
    Set,
    /// `--rcheck`: match when the address is in the list.
    Check,
    /// `--update`: as `--rcheck`, and refresh the entry's time stamp.
    Update,
    /// `--remove`: match when the address is in the list, and remove it.
    Remove,
}

/// Which packet field a set dimension or an nft key reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    /// Source address.
    Src,
    /// Destination address.
    Dst,
    /// Source port (TCP, UDP, SCTP, DCCP, UDP-Lite).
    Sport,
    /// Destination port.
    Dport,
    /// Layer-4 protocol number.
    Proto,
    /// Input interface name.
    InIface,
    /// Output interface name.
    OutIface,
    /// Packet mark (`meta mark`, `-m mark`).
    Mark,
}

/// One compiled condition.
///
/// The `bool` of a tuple variant, like `neg` of a struct variant, is a `!` before the
/// test: the condition holds when the test fails.
#[derive(Clone, Debug, PartialEq)]
pub enum Cond {
    /// `-s`: the source address is in the prefix or range.
    Src(AddrMatch, bool),
    /// `-d`: the destination address is in the prefix or range.
    Dst(AddrMatch, bool),
    /// Protocol number (never 0: `-p all` compiles to nothing).
    Proto(u8, bool),
    /// `-i`: the input interface matches (unknown when the trace was not told it).
    InIface(IfacePattern, bool),
    /// `-o`: the output interface matches.
    OutIface(IfacePattern, bool),
    /// nft `iifname`/`oifname`: no match at all when the hook has no such device.
    NftIface {
        /// `oifname` rather than `iifname`.
        out: bool,
        /// The names or patterns; the condition holds when any matches.
        pat: Vec<IfacePattern>,
        /// `!=`: the condition holds when none matches (but still not without a device).
        neg: bool,
    },
    /// Protocol the match module requires (`-m tcp` only matches TCP).
    ModuleProto(u8),
    /// `--sport`: the source port is in the ranges (never for protocols without ports).
    Sport(Ports, bool),
    /// `--dport`: the destination port is in the ranges.
    Dport(Ports, bool),
    /// multiport `--ports`: source or destination.
    EitherPort(Ports, bool),
    /// TCP SYN test (`--syn`, `--tcp-flags ... SYN` on the first packet).
    TcpSyn(bool),
    /// ICMP type and code (`--icmp-type 8/0`, nft `icmp type echo-request`); never for non-ICMP
    /// packets.
    IcmpType {
        /// The type; `None` for any type.
        ty: Option<u8>,
        /// The code; `None` for any code (plumb traces code 0).
        code: Option<u8>,
        /// `!` before the test.
        neg: bool,
    },
    /// `-m mark --mark value/mask`, nft `meta mark`: holds when `mark & mask == value`.
    Mark {
        /// The value the masked mark must equal.
        value: u32,
        /// The mask applied to the packet's mark (`0xffffffff` when none is written).
        mask: u32,
        /// `!` before the test.
        neg: bool,
    },
    /// `-m connmark --mark value/mask`, nft `ct mark`: the connection's mark, as for
    /// [`Cond::Mark`].
    ConnMark {
        /// The value the masked connection mark must equal.
        value: u32,
        /// The mask applied to the connection mark.
        mask: u32,
        /// `!` before the test.
        neg: bool,
    },
    /// `--ctstate`/`--state`: the connection is in any of these [`ct_bits`].
    CtState(u16, bool),
    /// `--ctorigsrc`: the connection's original source address.
    CtOrigSrc(AddrMatch, bool),
    /// `--ctorigdst`: the connection's original destination address (before DNAT).
    CtOrigDst(AddrMatch, bool),
    /// `--ctorigdstport`: the connection's original destination port.
    CtOrigDport(PortRange, bool),
    /// `-m addrtype`: the address is of one of these types on this node.
    AddrType {
        /// `--dst-type` rather than `--src-type`.
        dst: bool,
        /// The types (`LOCAL`, `UNICAST`, ...); the condition holds for any of them.
        types: Vec<AddrType>,
        /// `!` before the types.
        neg: bool,
    },
    /// `-m statistic --mode random --probability p`: holds with probability `p` (as the
    /// kernel rounds it, to 1/2^31), independently of everything else.
    Statistic {
        /// The probability, 0 to 1.
        p: f64,
        /// `!` before the test: holds with probability `1 - p`.
        neg: bool,
    },
    /// `--mode nth --every N`: one packet in N, modelled as probability 1/N.
    Nth {
        /// The cycle length `N`.
        every: u32,
        /// `!` before the test.
        neg: bool,
    },
    /// `-m recent`: whether the address is in a recent list (kube-proxy's `ClientIP`
    /// session affinity: `--rcheck --seconds`).
    Recent {
        /// The list's `--name` (`KUBE-SEP-…` for kube-proxy).
        name: String,
        /// What the match does with the list.
        mode: RecentMode,
        /// `--rsource` (the default): the list holds source addresses; `false` for `--rdest`.
        source: bool,
        /// `!` before the match.
        neg: bool,
    },
    /// `-m set --match-set NAME FLAGS`: the packet is in the ipset (as the trace's [`Node::ipsets`]
    /// says).
    IpSet {
        /// The set's name.
        name: String,
        /// One entry per `FLAGS` item (`src,dst`): `true` compares the set's dimension with the
        /// source, `false` with the destination.
        dims: Vec<bool>,
        /// `!` before the match.
        neg: bool,
    },
    /// `--physdev-in NAME`: the bridge port the frame came in on matches; `None` is
    /// `--physdev-is-in`: it came in through any bridge port.
    PhysdevIn(Option<IfacePattern>, bool),
    /// `--physdev-out NAME`: the bridge port the frame leaves by matches; `None` is
    /// `--physdev-is-out`: it leaves through any bridge port.
    PhysdevOut(Option<IfacePattern>, bool),
    /// `--physdev-is-bridged`: the packet is being bridged.
    PhysdevBridged(bool),
    /// A rate limit: plumb branches on "under the limit" / "over it".
    Limit(String),
    /// `-f`: second and later fragments (plumb traces first fragments).
    Fragment(bool),
    /// nft set of values for a field (`tcp dport { 80, 443 }`, `ip daddr @name`).
    NftSet {
        /// The fields the key is made of, in order (`ip daddr . th dport` is `[Dst, Dport]`).
        fields: Vec<Field>,
        /// The set: a named set of the table or an anonymous one.
        set: SetRef,
        /// `!=`: holds when the key is not in the set.
        neg: bool,
    },
    /// A condition with a fixed result (e.g. `--pol ipsec` for plain packets), and why.
    Const(bool, &'static str),
    /// A match plumb does not evaluate, with its text.
    Unknown(String),
}

/// A NAT rewrite: address (or range) and port (or range), as written.
#[derive(Clone, Debug, PartialEq)]
pub struct NatSpec {
    /// The new address, or the first of a range; `None` when only the port changes (`:8080`).
    pub addr: Option<IpAddr>,
    /// Last address of a range (`10.0.0.1-10.0.0.3`).
    pub addr_to: Option<IpAddr>,
    /// The new port or port range; `None` keeps the port.
    pub ports: Option<PortRange>,
    /// The spec as written (`10.42.1.5:8443`), for the outcome's `dnat`/`snat` text.
    pub text: String,
}

/// How MARK/CONNMARK change a mark: `new = (old & !clear) ^ xor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MarkOp {
    /// Bits of the old mark that are cleared.
    pub clear: u32,
    /// Bits then flipped (set, for bits that were cleared).
    pub xor: u32,
}

/// Where a verdict map entry or a jump leads.
#[derive(Clone, Debug, PartialEq)]
pub enum Jump {
    /// A chain of the ruleset, as an [`Index`](crate::Index) chain id.
    Chain(u32),
    /// A chain name that the ruleset does not define.
    Missing(String),
}

/// One thing a rule does.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// `ACCEPT`/`accept`: ends the base chain; the packet goes on to the next hook.
    Accept,
    /// `DROP`/`drop`: the packet is discarded.
    Drop,
    /// `REJECT`/`reject`, with its `--reject-with` (`icmp-port-unreachable`) when written.
    Reject(Option<String>),
    /// `RETURN`/`return`: back to the calling chain (the policy at a base chain).
    Return,
    /// nft `continue`: no effect.
    Continue,
    /// `QUEUE`/`NFQUEUE`/`queue`, with its options: handed to userspace, not followed.
    Queue(String),
    /// `-j CHAIN`/`jump`: evaluate the chain, then continue after this rule.
    Jump(Jump),
    /// `-g CHAIN`/`goto`: evaluate the chain; its end returns to this chain's caller.
    Goto(Jump),
    /// `DNAT --to-destination`, nft `dnat to`: rewrites the destination and ends the nat chain.
    Dnat(Box<NatSpec>),
    /// `SNAT --to-source`, nft `snat to`: rewrites the source and ends the nat chain.
    Snat(Box<NatSpec>),
    /// `MASQUERADE` (with `--to-ports`): SNAT to the output interface's address.
    Masquerade(Option<PortRange>),
    /// `REDIRECT` (with `--to-ports`): DNAT to the host itself.
    Redirect(Option<PortRange>),
    /// `MARK`, nft `meta mark set`: changes the packet's mark, then continues.
    Mark(MarkOp),
    /// `CONNMARK --set-xmark`, nft `ct mark set`: changes the connection's mark, then continues.
    ConnMark(MarkOp),
    /// CONNMARK --save-mark: ctmark = (ctmark & !ctmask) | (mark & nfmask & ctmask).
    SaveMark {
        /// Mask applied to the packet mark.
        nfmask: u32,
        /// Mask applied to the connection mark.
        ctmask: u32,
    },
    /// CONNMARK --restore-mark: mark = (mark & !nfmask) | (ctmark & ctmask & nfmask).
    RestoreMark {
        /// Mask applied to the packet mark.
        nfmask: u32,
        /// Mask applied to the connection mark.
        ctmask: u32,
    },
    /// LOG, NFLOG, ULOG, TRACE: the packet continues.
    Log(String),
    /// CT --notrack / NOTRACK (raw table): the packet is untracked.
    NoTrack,
    /// A target that does not change the path (TCPMSS, CHECKSUM, DSCP, CT --zone, ...).
    NoEffect(String),
    /// nft `numgen random mod N [offset O] vmap { ... }`.
    Numgen {
        /// The `mod N`: numbers drawn are `0..N`, each with probability 1/N.
        modulus: u32,
        /// The `offset O` added to each number drawn (0 when none is written).
        offset: u32,
        /// The map's entries as inclusive ranges of drawn numbers `(first, last)` and the verdict
        /// for them.
        entries: Vec<(u32, u32, MapVerdict)>,
    },
    /// nft `KEY vmap @name` / `vmap { ... }`.
    VerdictMap {
        /// The key's fields, in order (`ip daddr . meta l4proto . th dport`).
        fields: Vec<Field>,
        /// The map looked up: a named map of the table or an inline one.
        set: SetRef,
    },
    /// A target or statement plumb does not model, with its text.
    Unknown(String),
}

/// A verdict stored in an nft verdict map.
#[derive(Clone, Debug, PartialEq)]
pub enum MapVerdict {
    /// Accept the packet (ends the base chain).
    Accept,
    /// Drop the packet.
    Drop,
    /// Reject the packet.
    Reject,
    /// Return to the calling chain.
    Return,
    /// Go on with the next statement.
    Continue,
    /// Evaluate the chain, then come back.
    Jump(Jump),
    /// Evaluate the chain without coming back.
    Goto(Jump),
    /// Hand the packet to userspace.
    Queue,
}

/// Index of a compiled set in the `sets` of its rule's chain ([`crate::index::ChainCode`]).
pub type SetRef = u32;

/// One value of a lookup key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Atom {
    /// An address (`ip daddr`, `ip saddr`).
    Addr(IpAddr),
    /// A number: a port, a protocol, a mark.
    Num(u64),
    /// An interface name (`iifname`, `oifname`).
    Name(String),
}

const TAG_V4: u8 = 4;
const TAG_V6: u8 = 6;
const TAG_NUM: u8 = b'n';
const TAG_NAME: u8 = b's';

/// Appends the encoding of `atoms` to `out`, as a set's exact keys are held
/// ([`crate::set_keys`]). Injective: each atom starts with a tag that fixes how long it
/// is (an IPv4 or IPv6 address, a LEB128 number, a length-prefixed name), so two atom
/// sequences are equal exactly when their encodings are.
pub(crate) fn encode_key(atoms: &[Atom], out: &mut Vec<u8>) {
    for atom in atoms {
        encode_atom(atom, out);
    }
}

/// Appends the encoding of one atom of a key (see [`encode_key`]).
pub(crate) fn encode_atom(atom: &Atom, out: &mut Vec<u8>) {
    match atom {
        Atom::Addr(IpAddr::V4(a)) => {
            out.push(TAG_V4);
            out.extend_from_slice(&a.octets());
        }
        Atom::Addr(IpAddr::V6(a)) => {
            out.push(TAG_V6);
            out.extend_from_slice(&a.octets());
        }
        Atom::Num(n) => {
            out.push(TAG_NUM);
            let mut n = *n;
            loop {
                let low = (n & 0x7f) as u8;
                n >>= 7;
                if n == 0 {
                    out.push(low);
                    break;
                }
                out.push(low | 0x80);
            }
        }
        Atom::Name(s) => {
            out.push(TAG_NAME);
            out.extend_from_slice(&(s.len() as u64).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
    }
}

/// One element of a set, as a lookup compares it: an exact key part or a range.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Pattern {
    Exact(Atom),
    Net(Cidr),
    AddrRange(IpAddr, IpAddr),
    NumRange(u64, u64),
    NamePrefix(String),
}

impl Pattern {
    pub(crate) fn matches(&self, a: &Atom) -> bool {
        match (self, a) {
            (Pattern::Exact(x), a) => x == a,
            (Pattern::Net(c), Atom::Addr(ip)) => c.contains(*ip),
            (Pattern::AddrRange(f, t), Atom::Addr(ip)) => {
                crate::addr::AddrRange { from: *f, to: *t }.contains(*ip)
            }
            (Pattern::NumRange(f, t), Atom::Num(n)) => f <= n && n <= t,
            (Pattern::NamePrefix(p), Atom::Name(n)) => n.starts_with(p.as_str()),
            _ => false,
        }
    }
}

/// A set or map (named or anonymous) ready for lookups.
#[derive(Clone, Debug, Default)]
pub struct CompiledSet {
    /// The set's name without `@`, or `{...}` for an anonymous set.
    pub name: String,
    pub(crate) exact: crate::set_keys::ExactKeys,
    pub(crate) patterns: Vec<(Vec<Pattern>, usize)>,
    /// Verdicts of a verdict map by element, up to the last element that has one
    /// (empty for a set).
    pub(crate) verdicts: Vec<Option<MapVerdict>>,
    /// Element comments (kube-proxy writes service names there) by element, up to the
    /// last element that has one: spans of the ruleset's text, not copies.
    pub(crate) comments: Vec<Option<plumb_ruleset::RuleText>>,
    /// Some element could not be read: a miss is not conclusive.
    pub(crate) partial: bool,
}

impl CompiledSet {
    /// The verdict of element `i` of a verdict map.
    pub fn verdict(&self, i: usize) -> Option<&MapVerdict> {
        self.verdicts.get(i)?.as_ref()
    }

    /// The comment of element `i`.
    pub fn comment(&self, i: usize) -> Option<&str> {
        self.comments.get(i)?.as_deref()
    }
}

/// `Some(Some(element))` hit, `Some(None)` miss, `None` cannot tell.
pub fn lookup(sets: &[CompiledSet], set: &SetRef, key: &[Atom]) -> Option<Option<usize>> {
    let s = sets.get(*set as usize)?;
    if let Some(i) = s.exact.get(|out| encode_key(key, out)) {
        return Some(Some(i));
    }
    for (p, i) in &s.patterns {
        if p.len() == key.len() && p.iter().zip(key).all(|(p, a)| p.matches(a)) {
            return Some(Some(*i));
        }
    }
    if s.partial { None } else { Some(None) }
}

/// A compiled condition or action of a rule, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    /// A match: the rule goes on only if it holds.
    Cond(Cond),
    /// A target or statement: what the rule does once its conditions before it held.
    Act(Action),
}

/// The hooks plumb traces, in an array-friendly order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum HookId {
    /// Before routing (conntrack, DNAT).
    Prerouting = 0,
    /// After routing, to a local process.
    Input = 1,
    /// After routing, through the node.
    Forward = 2,
    /// Sent by a local process.
    Output = 3,
    /// Leaving the node (SNAT, MASQUERADE).
    Postrouting = 4,
}
