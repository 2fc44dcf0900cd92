//! A rule's statements: matches (`ip daddr 10.0.0.1`, `tcp dport != { 80, 443 }`),
//! selectors and their expressions (concatenations, bit operations, maps), verdicts and
//! verdict maps, NAT, counters, comments, logs and the statements plumb keeps as text.
//! [`StmtParser`] works on the tokens of one rule, gathered by the block reader.

use super::lexer::{Tok, Token};
use super::{Reader, collapse, value_of_words};
use crate::model::nft::{
    NatKind, Op, Statement, StatementKind, Value, Verdict, VerdictMapRef, unquote,
};
use crate::model::{Counters, RuleText};

/// Protocol headers a selector may start with (`tcp dport`, `ip saddr`).
const PROTOS: &[&str] = &[
    "ip", "ip6", "tcp", "udp", "udplite", "sctp", "dccp", "th", "icmp", "icmpv6", "igmp", "ah",
    "esp", "comp", "ipcomp", "ether", "vlan", "arp", "gre", "gretap", "vxlan", "geneve", "hbh",
    "frag", "dst", "mh", "srh", "rt0", "rt2", "rt4", "ll", "nh", "dhcp",
];
/// `meta` keys nft reads without `meta` (`iifname`, `mark`): its grammar's
/// unqualified keys. The others (`l4proto`, `nfproto`, `protocol`, `length` ...) need
/// `meta` in front; bare, nft reads them as a symbol and refuses the rule.
const META_BARE: &[&str] = &[
    "iifname",
    "oifname",
    "iif",
    "oif",
    "iiftype",
    "oiftype",
    "iifgroup",
    "oifgroup",
    "skuid",
    "skgid",
    "rtclassid",
    "cpu",
    "cgroup",
    "mark",
    "pkttype",
    "ibrname",
    "obrname",
    "ibriport",
    "obriport",
    "ibridgename",
    "obridgename",
    "hour",
    "day",
    "time",
    "nftrace",
];
/// Every key `meta KEY` takes.
const META_KEYS: &[&str] = &[
    "iifname",
    "oifname",
    "iif",
    "oif",
    "iiftype",
    "oiftype",
    "iifgroup",
    "oifgroup",
    "iifkind",
    "oifkind",
    "skuid",
    "skgid",
    "rtclassid",
    "cpu",
    "cgroup",
    "mark",
    "pkttype",
    "ibrname",
    "obrname",
    "ibriport",
    "obriport",
    "ibridgename",
    "obridgename",
    "ibrpvid",
    "ibrvproto",
    "sdif",
    "sdifname",
    "hour",
    "day",
    "time",
    "nftrace",
    "priority",
    "length",
    "protocol",
    "nfproto",
    "l4proto",
    "secpath",
    "ipsec",
    "random",
    "broute",
    "secmark",
];
/// Keys of `ct [original|reply] KEY`.
const CT_KEYS: &[&str] = &[
    "state",
    "direction",
    "status",
    "mark",
    "expiration",
    "helper",
    "label",
    "l3proto",
    "protocol",
    "bytes",
    "packets",
    "avgpkt",
    "zone",
    "event",
    "secmark",
    "id",
    "count",
    "saddr",
    "daddr",
    "proto-src",
    "proto-dst",
    "expectation",
    "timeout",
    "ip",
    "ip6",
];
/// Keywords of nft's scanner that no value may be: a match's right side, a `set`
/// argument or a concatenation's constant (`tcp dport accept`, `meta mark set meta`,
/// `ip saddr counter`). nft: "syntax error, unexpected KEYWORD". Keywords nft does
/// take as values (`tcp`, `ip`, `ether`, `redirect`, `snat`, `reply` ...) are not here.
pub(super) const NOT_VALUES: &[&str] = &[
    "accept",
    "drop",
    "continue",
    "return",
    "jump",
    "goto",
    "queue",
    "reject",
    "counter",
    "comment",
    "log",
    "limit",
    "quota",
    "notrack",
    "masquerade",
    "tproxy",
    "dup",
    "fwd",
    "meter",
    "add",
    "update",
    "delete",
    "set",
    "map",
    "vmap",
    "flow",
    "synproxy",
    "xt",
    "meta",
    "ct",
    "numgen",
    "jhash",
    "symhash",
    "fib",
    "socket",
    "osf",
    "ipsec",
    "rt",
    "exthdr",
    "mark",
    "iif",
    "iifname",
    "oif",
    "oifname",
    "iiftype",
    "oiftype",
    "skuid",
    "skgid",
    "nftrace",
    "rtclassid",
    "pkttype",
    "cpu",
    "iifgroup",
    "oifgroup",
    "cgroup",
    "saddr",
    "daddr",
    "sport",
    "dport",
    "packets",
    "bytes",
    "rate",
    "burst",
    "prefix",
    "level",
    "with",
    "name",
    "option",
    "flags",
    "priority",
    "l4proto",
    "nfproto",
    "state",
    "status",
    "to",
];
/// Statements kept as text ([`StatementKind::Other`]).
const OTHER_STMTS: &[&str] = &[
    "limit",
    "quota",
    "notrack",
    "flow",
    "synproxy",
    "tproxy",
    "dup",
    "fwd",
    "meter",
    "add",
    "update",
    "delete",
    "last",
    "set",
    "secmark",
    "flowtable",
];
/// Expression keywords other than protocols that start a selector.
const SELECTOR_HEADS: &[&str] = &[
    "meta", "ct", "numgen", "jhash", "symhash", "fib", "socket", "osf", "ipsec", "rt", "exthdr",
    "inner",
];
/// The states `ct state` matches.
const CT_STATES: &[&str] = &["invalid", "established", "related", "new", "untracked"];
/// Binary operators of nft's expressions.
const BINOPS: &[&str] = &[
    "&", "|", "^", "<<", ">>", "and", "or", "xor", "lshift", "rshift",
];
/// Option names of `tcp option NAME`.
const TCP_OPTIONS: &[&str] = &[
    "eol",
    "nop",
    "maxseg",
    "window",
    "sack-perm",
    "sack",
    "sack0",
    "sack1",
    "sack2",
    "sack3",
    "timestamp",
    "fastopen",
    "md5sig",
    "mptcp",
];
/// Chunk types of `sctp chunk TYPE`.
const SCTP_CHUNKS: &[&str] = &[
    "data",
    "init",
    "init-ack",
    "sack",
    "heartbeat",
    "heartbeat-ack",
    "abort",
    "shutdown",
    "shutdown-ack",
    "error",
    "cookie-echo",
    "cookie-ack",
    "ecne",
    "cwr",
    "shutdown-complete",
    "asconf-ack",
    "forward-tsn",
    "asconf",
];
/// Fields of `tcp option NAME FIELD`.
const TCP_OPT_FIELDS: &[&str] = &[
    "kind", "length", "size", "count", "left", "right", "tsval", "tsecr", "value", "subtype",
];

/// ICMP type names nft knows.
const ICMP_TYPES: &[&str] = &[
    "echo-reply",
    "destination-unreachable",
    "source-quench",
    "redirect",
    "echo-request",
    "router-advertisement",
    "router-solicitation",
    "time-exceeded",
    "parameter-problem",
    "timestamp-request",
    "timestamp-reply",
    "info-request",
    "info-reply",
    "address-mask-request",
    "address-mask-reply",
];
/// ICMPv6 type names nft knows.
const ICMPV6_TYPES: &[&str] = &[
    "destination-unreachable",
    "packet-too-big",
    "time-exceeded",
    "parameter-problem",
    "echo-request",
    "echo-reply",
    "mld-listener-query",
    "mld-listener-report",
    "mld-listener-done",
    "mld-listener-reduction",
    "nd-router-solicit",
    "nd-router-advert",
    "nd-neighbor-solicit",
    "nd-neighbor-advert",
    "nd-redirect",
    "router-renumbering",
    "ind-neighbor-solicit",
    "ind-neighbor-advert",
    "mld2-listener-report",
];
/// Ethernet protocol names nft knows (`ether type`, `meta protocol`, `vlan type`).
const ETHER_TYPES: &[&str] = &["ip", "arp", "ip6", "vlan", "8021q", "8021ad"];
/// IP protocol names (`meta l4proto`, `ip protocol`, `ip6 nexthdr`): nft's own words and
/// the names of the `/etc/protocols` netbase ships, which nft looks up.
const IP_PROTOCOLS: &[&str] = &[
    "ip",
    "hopopt",
    "icmp",
    "igmp",
    "ggp",
    "ipencap",
    "st",
    "tcp",
    "egp",
    "igp",
    "pup",
    "udp",
    "hmp",
    "xns-idp",
    "rdp",
    "iso-tp4",
    "dccp",
    "xtp",
    "ddp",
    "idpr-cmtp",
    "ipv6",
    "ipv6-route",
    "ipv6-frag",
    "idrp",
    "rsvp",
    "gre",
    "esp",
    "ah",
    "skip",
    "ipv6-icmp",
    "icmpv6",
    "ipv6-nonxt",
    "ipv6-opts",
    "rspf",
    "vmtp",
    "eigrp",
    "ospf",
    "ax.25",
    "ipip",
    "etherip",
    "encap",
    "pim",
    "ipcomp",
    "comp",
    "vrrp",
    "l2tp",
    "isis",
    "sctp",
    "fc",
    "mobility-header",
    "udplite",
    "mpls-in-ip",
    "manet",
    "hip",
    "shim6",
    "wesp",
    "rohc",
    "ethernet",
    "aggfrag",
    "mptcp",
    "ipv4",
    "ospfigp",
    "mh",
];

/// Why a value word is malformed as nft's scanner reads it (a word cut short, an
/// address with too few parts, a raw payload with an unknown base); `None` when fine.
fn malformed_value(w: &str) -> Option<&'static str> {
    if w.starts_with('"') {
        return None;
    }
    if w == "@" {
        return Some("expected a set name after '@'");
    }
    if let Some(raw) = w.strip_prefix('@') {
        if raw.contains(',') {
            let parts: Vec<&str> = raw.split(',').collect();
            if parts.len() != 3 || !matches!(parts[0], "ll" | "nh" | "th" | "ih") {
                return Some("unknown raw payload base (nft: expected @ll, @nh, @th or @ih)");
            }
        }
        return None;
    }
    if w.ends_with('.') || w.ends_with('/') || w.ends_with('-') {
        return Some("the value is cut short (nft: syntax error)");
    }
    if w.ends_with(':') && !w.ends_with("::") {
        return Some("the value is cut short (nft: syntax error)");
    }
    if w.starts_with('.') {
        return Some("a value does not start with '.' (nft: syntax error)");
    }
    if first_is_digit(w)
        && !w.contains(['.', ':', '/'])
        && !w.starts_with("0x")
        && !matches!(w, "8021q" | "8021ad")
    {
        // `1023drop`: digits and letters are one word only as a time (`1h30m`) or a
        // byte count (`10mbytes`); nft reads the rest as a string it cannot place.
        let time = |p: &str| {
            let mut rest = p;
            while !rest.is_empty() {
                let d = rest
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(rest.len());
                if d == 0 {
                    return false;
                }
                rest = &rest[d..];
                let u = ["ms", "d", "h", "m", "s"]
                    .iter()
                    .find(|u| rest.starts_with(**u));
                match u {
                    Some(u) => rest = &rest[u.len()..],
                    None => return rest.is_empty(),
                }
            }
            true
        };
        let bytes = |p: &str| {
            let d = p.find(|c: char| !c.is_ascii_digit()).unwrap_or(p.len());
            matches!(&p[d..], "" | "bytes" | "kbytes" | "mbytes")
        };
        if !w.split('-').all(|p| time(p) || bytes(p)) {
            return Some("digits and letters nft cannot read as one value (nft: syntax error)");
        }
    }
    if w.eq_ignore_ascii_case("0x") {
        return Some("'0x' without digits (nft: syntax error)");
    }
    let first = w.as_bytes()[0];
    if first.is_ascii_digit() && w.contains('.') && !w.contains(':') {
        let addr = w.split_once('/').map_or(w, |(a, _)| a);
        if !addr
            .split('-')
            .all(|p| p.parse::<std::net::Ipv4Addr>().is_ok())
        {
            return Some("no IPv4 address (nft: syntax error)");
        }
    }
    None
}

/// Whether the word starts with a digit.
fn first_is_digit(w: &str) -> bool {
    w.as_bytes().first().is_some_and(u8::is_ascii_digit)
}

/// The symbol of `right` a match on `left` cannot take, and what it should be
/// (`ct state estab`, `icmp type echo`, `meta mark set1`).
fn wrong_symbol(left: &str, right: &Value) -> Option<(String, &'static str)> {
    let integer = |v: &str| {
        v.split('-').all(|p| {
            let p = p.trim();
            (p.len() > 2
                && (p.starts_with("0x") || p.starts_with("0X"))
                && p[2..].chars().all(|c| c.is_ascii_hexdigit()))
                || (!p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
        })
    };
    let check: (&dyn Fn(&str) -> bool, &'static str) = match left {
        "ct state" => (&|v| CT_STATES.contains(&v), "conntrack state"),
        "icmp type" => (&|v| ICMP_TYPES.contains(&v) || integer(v), "ICMP type"),
        "icmpv6 type" => (&|v| ICMPV6_TYPES.contains(&v) || integer(v), "ICMPv6 type"),
        "meta mark" | "mark" | "ct mark" => (&integer, "packet mark"),
        "meta nftrace" | "nftrace" | "tcp option maxseg size" => (&integer, "integer"),
        "meta time" => (
            &|v: &str| {
                integer(v) || {
                    let b = v.as_bytes();
                    let digits = |r: std::ops::Range<usize>| {
                        b.get(r).is_some_and(|x| x.iter().all(u8::is_ascii_digit))
                    };
                    digits(0..4)
                        && b.get(4) == Some(&b'-')
                        && digits(5..7)
                        && b.get(7) == Some(&b'-')
                        && digits(8..10)
                        && (b.len() == 10
                            || (b.get(10) == Some(&b' ')
                                && digits(11..13)
                                && b.get(13) == Some(&b':')
                                && digits(14..16)
                                && (b.len() == 16
                                    || (b.get(16) == Some(&b':')
                                        && digits(17..19)
                                        && b.len() == 19))))
                }
            },
            "date",
        ),
        "ether saddr" | "ether daddr" => (
            &|v: &str| {
                !v.contains(':') || {
                    let parts: Vec<&str> = v.split(':').collect();
                    // Two parts nft's scanner reads otherwise (it takes `0a:0b`); three
                    // to five are an address cut short.
                    (parts.len() == 6 || parts.len() <= 2)
                        && parts.iter().all(|p| {
                            (1..=2).contains(&p.len()) && p.chars().all(|c| c.is_ascii_hexdigit())
                        })
                }
            },
            "Ethernet address",
        ),
        "ct direction" => (
            &|v| matches!(v, "original" | "reply"),
            "conntrack direction",
        ),
        "meta nfproto" => (
            &|v| matches!(v, "ipv4" | "ipv6") || integer(v),
            "netfilter protocol",
        ),
        "meta protocol" | "ether type" | "vlan type" => (
            &|v| ETHER_TYPES.contains(&v) || integer(v),
            "Ethernet protocol",
        ),
        "meta l4proto" | "ip protocol" | "ip6 nexthdr" => (
            &|v| IP_PROTOCOLS.contains(&v.to_ascii_lowercase().as_str()) || integer(v),
            "protocol name",
        ),
        _ => return None,
    };
    let singles: Vec<&str> = match right {
        Value::Single(v) => v.split(',').collect(),
        Value::Set(items) => items
            .iter()
            .filter_map(|i| match i {
                Value::Single(v) => Some(v.as_str()),
                _ => None,
            })
            .collect(),
        _ => return None,
    };
    singles
        .into_iter()
        .find(|v| !v.is_empty() && !v.starts_with('$') && !(check.0)(v))
        .map(|v| (v.to_string(), check.1))
}

/// The value of an `iif`/`oif` match no interface can be named (the kernel's
/// `dev_valid_name()`: not empty, at most 15 bytes, not `.` or `..`, no `/`, `:` or
/// blank). nft turns the name into an index when the rule is added, so the interface
/// must exist, and no interface has such a name on any host. `iifname`/`oifname`
/// compare names and take any string.
fn impossible_device(left: &str, right: &Value) -> Option<String> {
    if !matches!(left, "iif" | "oif" | "meta iif" | "meta oif") {
        return None;
    }
    let Value::Single(v) = right else {
        return None;
    };
    let name = v
        .strip_prefix('"')
        .and_then(|n| n.strip_suffix('"'))
        .unwrap_or(v);
    if v.starts_with('$') || (!name.is_empty() && name.bytes().all(|b| b.is_ascii_digit())) {
        return None; // a variable, or an interface index
    }
    let valid = !name.is_empty()
        && name.len() < 16
        && name != "."
        && name != ".."
        && !name
            .bytes()
            .any(|b| b == b'/' || b == b':' || b.is_ascii_whitespace());
    (!valid).then(|| v.clone())
}

/// Whether a match on `left` fixes the network protocol in nft's protocol context: a
/// field of the IPv4 or IPv6 header (or of ICMP/ICMPv6, whose dependency does), or
/// `meta nfproto`.
fn fixes_network(left: &str) -> bool {
    ["ip ", "ip6 ", "icmp ", "icmpv6 ", "meta nfproto", "nfproto"]
        .iter()
        .any(|p| left.starts_with(p))
}

/// Whether `field` can follow protocol `proto` in a selector (`ip saddr`, `tcp dport`),
/// for the protocols whose fields are listed here (others take any word).
fn proto_field(proto: &str, field: &str) -> bool {
    let fields: &[&str] = match proto {
        "ip" => &[
            "version",
            "hdrlength",
            "dscp",
            "ecn",
            "length",
            "id",
            "frag-off",
            "ttl",
            "protocol",
            "checksum",
            "saddr",
            "daddr",
        ],
        "ip6" => &[
            "version",
            "dscp",
            "ecn",
            "flowlabel",
            "length",
            "nexthdr",
            "hoplimit",
            "saddr",
            "daddr",
        ],
        "tcp" => &[
            "sport", "dport", "sequence", "ackseq", "doff", "reserved", "flags", "window",
            "checksum", "urgptr",
        ],
        "udp" => &["sport", "dport", "length", "checksum"],
        "udplite" => &["sport", "dport", "csumcov", "checksum"],
        "th" => &["sport", "dport"],
        "icmp" => &[
            "type", "code", "checksum", "id", "sequence", "gateway", "mtu",
        ],
        "icmpv6" => &[
            "type",
            "code",
            "checksum",
            "parameter-problem",
            "packet-too-big",
            "id",
            "sequence",
            "max-delay",
            "taddr",
            "daddr",
        ],
        "ether" => &["saddr", "daddr", "type"],
        "vlan" => &["id", "dei", "cfi", "pcp", "type"],
        _ => return true,
    };
    fields.contains(&field)
}

/// Whether a word starts a selector expression.
fn is_selector_start(w: &str) -> bool {
    PROTOS.contains(&w)
        || META_BARE.contains(&w)
        || SELECTOR_HEADS.contains(&w)
        || (w.starts_with('@') && w.contains(','))
}

/// Whether a word starts a statement (where skipped arguments end).
fn is_stmt_start(w: &str) -> bool {
    is_selector_start(w)
        || OTHER_STMTS.contains(&w)
        || matches!(
            w,
            "accept"
                | "drop"
                | "continue"
                | "return"
                | "jump"
                | "goto"
                | "queue"
                | "reject"
                | "counter"
                | "comment"
                | "log"
                | "dnat"
                | "snat"
                | "masquerade"
                | "redirect"
                | "xt"
                | "reset"
        )
}

/// Parses the statements of one rule from its tokens (no newlines/comments).
pub(super) struct StmtParser<'r, 'a> {
    pub(super) r: &'r mut Reader<'a>,
    /// The rule's tokens, without newlines and comments.
    pub(super) toks: &'r [Token],
    /// The next token to read.
    pub(super) i: usize,
    /// How deep parentheses and anonymous chains nest here (bounded: hostile input
    /// must not exhaust the stack).
    pub(super) depth: u32,
    /// The rule is in an `inet` table: a NAT address needs its family (`dnat ip to`)
    /// unless an earlier match fixed the rule's network protocol.
    pub(super) inet: bool,
    /// An earlier statement of the rule matched an IPv4 or IPv6 header field (or
    /// `meta nfproto`): nft's protocol context knows the rule's network protocol.
    pub(super) network_known: bool,
}

/// The deepest nesting of `( )` and `jump { }` read; deeper is an error.
const MAX_DEPTH: u32 = 64;

impl<'a> StmtParser<'_, 'a> {
    /// The text of token `i` of the rule.
    fn w(&self, i: usize) -> Option<&'a str> {
        self.toks.get(i).map(|t| self.r.s(t))
    }

    /// The text of the current token.
    fn cur(&self) -> Option<&'a str> {
        self.w(self.i)
    }

    /// Whether the current token is a word (not a brace or a comma).
    fn cur_is_word(&self) -> bool {
        self.toks.get(self.i).is_some_and(|t| t.kind == Tok::Word)
    }

    /// Consumes a word, or reports that the expression starting at `after` needs one.
    fn bump_word(&mut self, after: usize) -> bool {
        if self.cur_is_word() {
            self.i += 1;
            true
        } else {
            let t = self.toks[after.min(self.toks.len() - 1)];
            let text = self.span_text(after, self.i.max(after + 1));
            self.r.error(
                &t,
                format!("expected a word after '{}'", self.r.s(&t)),
                &text,
            );
            false
        }
    }

    /// The text of tokens `from..to`, whitespace collapsed.
    fn span_text(&self, from: usize, to: usize) -> String {
        if from >= to || from >= self.toks.len() {
            return String::new();
        }
        let to = to.min(self.toks.len());
        collapse(&self.r.text[self.toks[from].start()..self.toks[to - 1].end()])
    }

    /// [`Self::span_text`] as a span of the input when it has nothing to collapse.
    fn span_rule_text(&self, from: usize, to: usize) -> RuleText {
        if from >= to || from >= self.toks.len() {
            return RuleText::from("");
        }
        let to = to.min(self.toks.len());
        self.r
            .text_of(&self.r.text[self.toks[from].start()..self.toks[to - 1].end()])
    }

    /// Every statement of the rule, each with its text; always makes progress.
    pub(super) fn statements(&mut self) -> Vec<Statement> {
        let mut out = Vec::new();
        // nft refuses any statement after a terminal one (a verdict other than
        // `continue`, `reject`, `queue`, NAT): "Statement after terminal statement
        // has no effect". A comment is no statement.
        let mut terminal = false;
        // nft reads a comment only at the end of a rule.
        let mut commented = false;
        let diagnostics_before = self.r.ruleset.diagnostics.len();
        while self.i < self.toks.len() {
            let start = self.i;
            let kind = self.statement();
            if self.i == start {
                self.i += 1; // always make progress
            }
            if commented && self.r.ruleset.diagnostics.len() == diagnostics_before {
                let t = self.toks[start];
                let text = self.span_text(start, self.i);
                self.r.error(
                    &t,
                    "statement after the rule's comment (nft: syntax error, expecting newline or semicolon)",
                    &text,
                );
            }
            commented |= matches!(kind, StatementKind::Comment(_));
            if terminal
                && !matches!(kind, StatementKind::Comment(_))
                && self.r.ruleset.diagnostics.len() == diagnostics_before
            {
                let t = self.toks[start];
                let text = self.span_text(start, self.i);
                self.r.error(
                    &t,
                    "statement after a terminal statement (nft: Statement after terminal statement has no effect)",
                    &text,
                );
            }
            if let StatementKind::Match {
                ref left,
                ref right,
                ..
            } = kind
                && self.r.ruleset.diagnostics.len() == diagnostics_before
                && let Some((bad, what)) = wrong_symbol(left, right)
            {
                let t = self.toks[start];
                self.r.error(
                    &t,
                    format!("'{bad}' is no {what} (nft: Could not parse {what})"),
                    &bad,
                );
            } else if let StatementKind::Match { ref left, .. } = kind
                && self.r.ruleset.diagnostics.len() == diagnostics_before
                && matches!(left.as_str(), "meta nftrace" | "nftrace")
            {
                // The kernel's nft_meta_get_init() has no NFT_META_NFTRACE: the key can
                // be set (`meta nftrace set 1`), not read.
                let t = self.toks[start];
                self.r.error(
                    &t,
                    format!("a match on {left}: the kernel can set the trace flag, not read it (nft: Could not process rule: Operation not supported)"),
                    left,
                );
            } else if let StatementKind::Match {
                ref left,
                ref right,
                ..
            } = kind
                && self.r.ruleset.diagnostics.len() == diagnostics_before
                && let Some(bad) = impossible_device(left, right)
            {
                let t = self.toks[start];
                self.r.error(
                    &t,
                    format!(
                        "{left} \"{bad}\": no interface can have this name (a blank, '/' or ':', empty or longer than 15 bytes), and {left} needs one that exists (nft: Interface does not exist)"
                    ),
                    &bad,
                );
            }
            if let StatementKind::Match { ref left, .. } = kind
                && fixes_network(left)
            {
                self.network_known = true;
            }
            terminal |= matches!(
                kind,
                StatementKind::Verdict(ref v) if *v != Verdict::Continue
            ) || matches!(kind, StatementKind::Nat { .. });
            out.push(Statement {
                text: self.span_rule_text(start, self.i),
                kind,
            });
        }
        // A Vec grows to 4 statements at its first push; most rules have 1 to 3, and a
        // ruleset keeps every rule's list (121k rules, 24 MiB of empty slots, on a
        // 10k-service nftables-mode node).
        out.shrink_to_fit();
        out
    }

    /// Skips a balanced `{ ... }` starting at the current `{`.
    fn skip_braces(&mut self) {
        let mut depth = 0usize;
        while let Some(t) = self.toks.get(self.i) {
            self.i += 1;
            match t.kind {
                Tok::LBrace => depth += 1,
                Tok::RBrace => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        return;
                    }
                }
                _ => {}
            }
        }
    }

    /// Consumes words until the next statement start (braces balanced).
    fn skip_args(&mut self) {
        while let Some(t) = self.toks.get(self.i) {
            match t.kind {
                Tok::LBrace => self.skip_braces(),
                Tok::Word if is_stmt_start(self.r.s(t)) => return,
                _ => self.i += 1,
            }
        }
    }

    /// One statement at the current token, by its first word.
    fn statement(&mut self) -> StatementKind {
        let t = self.toks[self.i];
        let w = self.r.s(&t);
        if t.kind != Tok::Word {
            self.i += 1;
            self.r.error(
                &t,
                format!("unexpected '{w}': expected a match, a statement or a verdict"),
                w,
            );
            return StatementKind::Other(w.to_string());
        }
        match w {
            "accept" | "drop" | "continue" | "return" => {
                self.i += 1;
                StatementKind::Verdict(Verdict::parse(&[w]).expect("verdict word"))
            }
            "jump" | "goto" => self.chain_verdict(t, w),
            "queue" => self.queue(),
            "reject" => self.reject(),
            "counter" => self.counter(t),
            "comment" => self.comment(t, w),
            "log" => self.log(),
            "dnat" | "snat" | "masquerade" | "redirect" => self.nat(w),
            "reset" => {
                // `reset tcp option fastopen`
                self.i += 1;
                if self.cur() == Some("tcp") && self.w(self.i + 1) == Some("option") {
                    self.selector();
                } else {
                    self.fail_here(t, "expected 'tcp option NAME' after 'reset' (nft: syntax error, expecting tcp)");
                }
                StatementKind::Other(w.to_string())
            }
            "xt" => self.compat_xt(t),
            _ if w.starts_with('#') => {
                // An xtables match as its extension prints it (see the lexer).
                self.i += 1;
                StatementKind::Other("xt".into())
            }
            "flow" => self.flow(w),
            "limit" => self.limit(t),
            "quota" => self.quota(t),
            "tproxy" => self.tproxy(t),
            _ if OTHER_STMTS.contains(&w) => self.other_statement(w),
            _ if is_selector_start(w) => self.matchlike(),
            _ => self.unknown_statement(t, w),
        }
    }

    /// `jump CHAIN`, `goto CHAIN`, or an anonymous chain `jump { ... }` (kept as text).
    fn chain_verdict(&mut self, t: Token, w: &str) -> StatementKind {
        self.i += 1;
        match self.toks.get(self.i) {
            Some(n) if n.kind == Tok::LBrace => {
                self.anonymous_chain();
                StatementKind::Other(format!("{w} {{ anonymous chain }}"))
            }
            Some(n) if n.kind == Tok::Word => {
                self.i += 1;
                let target = RuleText::within(self.r.source, unquote(self.r.s(n)));
                StatementKind::Verdict(if w == "jump" {
                    Verdict::Jump(target)
                } else {
                    Verdict::Goto(target)
                })
            }
            _ => {
                self.r
                    .error(&t, format!("expected a chain name after '{w}'"), w);
                StatementKind::Other(w.to_string())
            }
        }
    }

    /// Reports `msg` at the current token (or at `fallback` when the rule ended).
    fn fail_here(&mut self, fallback: Token, msg: &str) {
        let (t, w) = match self.toks.get(self.i) {
            Some(t) => (*t, self.r.s(t).to_string()),
            None => (fallback, "end of rule".to_string()),
        };
        self.r.error(&t, format!("unexpected {w}: {msg}"), &w);
    }

    /// Consumes the current word when `ok` accepts it; otherwise reports `msg`.
    fn expect_word(&mut self, fallback: Token, ok: impl Fn(&str) -> bool, msg: &str) -> bool {
        match self.cur() {
            Some(w) if self.cur_is_word() && ok(w) => {
                self.i += 1;
                true
            }
            _ => {
                self.fail_here(fallback, msg);
                false
            }
        }
    }

    /// `name EXPR`: a quoted name, or a selector looked up in a map (`name ip saddr map @m`).
    fn object_name(&mut self, t: Token) {
        self.i += 1;
        if self.cur().is_some_and(is_selector_start) && self.cur_is_word() {
            self.selector_expr();
            if self.cur() == Some("map") {
                self.i += 1;
                self.value();
            } else {
                self.fail_here(t, "expected 'map' after the object name's selector (nft: datatype mismatch, expected string)");
            }
        } else if self.cur_is_word() && !self.cur().is_some_and(|w| NOT_VALUES.contains(&w)) {
            self.i += 1;
        } else {
            self.fail_here(t, "expected an object name (nft: syntax error)");
        }
    }

    /// `limit rate [over|until] N/UNIT [burst N packets]`, `limit rate [over] N BYTES/UNIT
    /// [burst N BYTES]` or `limit name NAME`.
    fn limit(&mut self, t: Token) -> StatementKind {
        self.i += 1;
        const UNITS: &[&str] = &["second", "minute", "hour", "day", "week"];
        const BYTES: &[&str] = &["bytes", "kbytes", "mbytes"];
        let per = |w: &str| {
            w.split_once('/').is_some_and(|(n, u)| {
                !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()) && UNITS.contains(&u)
            })
        };
        let num = |w: &str| !w.is_empty() && w.chars().all(|c| c.is_ascii_digit());
        match self.cur() {
            Some("name") => self.object_name(t),
            Some("rate") => {
                self.i += 1;
                if matches!(self.cur(), Some("over" | "until")) {
                    self.i += 1;
                }
                let joined = self.joined_slash();
                let bytes = match self.cur() {
                    Some(_) if per(&joined.0) => {
                        self.i += joined.1;
                        false
                    }
                    Some(w) if num(w) => {
                        self.i += 1;
                        let (unit, n) = self.joined_slash();
                        if unit
                            .split_once('/')
                            .is_some_and(|(b, u)| BYTES.contains(&b) && UNITS.contains(&u))
                        {
                            self.i += n;
                        } else {
                            self.fail_here(
                                t,
                                "expected BYTES/UNIT after the rate (nft: syntax error)",
                            );
                        }
                        true
                    }
                    _ => {
                        self.fail_here(t, "expected N/second, N/minute ... after 'limit rate' (nft: syntax error, expecting number)");
                        return StatementKind::Other("limit".into());
                    }
                };
                if self.cur() == Some("burst") {
                    self.i += 1;
                    if self.expect_word(
                        t,
                        num,
                        "expected a number after 'burst' (nft: syntax error)",
                    ) {
                        if bytes {
                            self.expect_word(t, |u| BYTES.contains(&u), "expected bytes, kbytes or mbytes after the burst (nft: syntax error)");
                        } else {
                            self.expect_word(t, |u| u == "packets", "expected 'packets' after the burst (nft: syntax error, expecting packets)");
                        }
                    }
                }
            }
            _ => self.fail_here(
                t,
                "expected 'rate' or 'name' after 'limit' (nft: syntax error)",
            ),
        }
        StatementKind::Other("limit".into())
    }

    /// The current word joined with the next ones when a `/` joins them (`5/ second`,
    /// `5 /second`: nft's scanner reads `/` as a token of its own), and how many words.
    fn joined_slash(&self) -> (String, usize) {
        let mut s = String::new();
        let mut n = 0;
        while let Some(w) = self.w(self.i + n) {
            if self.toks[self.i + n].kind != Tok::Word {
                break;
            }
            if n > 0 && !(s.ends_with('/') || w.starts_with('/')) {
                break;
            }
            s.push_str(w);
            n += 1;
        }
        (s, n)
    }

    /// The current word joined with the next ones where a colon joins them
    /// (`10.0.0.1: 80`, `10.0.0.1 :80`, `: 5300`), and how many words.
    fn joined_colon(&self) -> (String, usize) {
        let mut s = String::new();
        let mut n = 0;
        while let Some(w) = self.w(self.i + n) {
            if self.toks[self.i + n].kind != Tok::Word {
                break;
            }
            // Stop once a port follows the colon (`:5300 :5300` is two words to nft).
            let has_port = s.rsplit_once(':').is_some_and(|(_, p)| {
                !p.is_empty() && p.chars().all(|c| c.is_ascii_digit() || c == '-')
            });
            if n > 0 && (has_port || !(s.ends_with(':') || w.starts_with(':'))) {
                break;
            }
            s.push_str(w);
            n += 1;
        }
        (s, n)
    }

    /// `quota [over|until] N UNIT [used N UNIT]` or `quota name NAME`.
    fn quota(&mut self, t: Token) -> StatementKind {
        self.i += 1;
        const UNITS: &[&str] = &["bytes", "kbytes", "mbytes"];
        let num = |w: &str| !w.is_empty() && w.chars().all(|c| c.is_ascii_digit());
        if self.cur() == Some("name") {
            self.object_name(t);
            return StatementKind::Other("quota".into());
        }
        if matches!(self.cur(), Some("over" | "until")) {
            self.i += 1;
        }
        if self.expect_word(
            t,
            num,
            "expected a number after 'quota' (nft: syntax error, expecting number)",
        ) {
            self.expect_word(
                t,
                |u| UNITS.contains(&u),
                "expected bytes, kbytes or mbytes (nft: syntax error)",
            );
            if self.cur() == Some("used") {
                self.i += 1;
                if self.expect_word(t, num, "expected a number after 'used' (nft: syntax error)") {
                    self.expect_word(
                        t,
                        |u| UNITS.contains(&u),
                        "expected bytes, kbytes or mbytes (nft: syntax error)",
                    );
                }
            }
        }
        StatementKind::Other("quota".into())
    }

    /// `tproxy [ip|ip6] to ADDR[:PORT]` or `tproxy [ip|ip6] to :PORT`.
    fn tproxy(&mut self, t: Token) -> StatementKind {
        self.i += 1;
        if matches!(self.cur(), Some("ip" | "ip6")) {
            self.i += 1;
        }
        if self.expect_word(
            t,
            |w| w == "to",
            "expected 'to' after 'tproxy' (nft: syntax error, expecting to or ip or ip6)",
        ) {
            self.value_expr();
        }
        StatementKind::Other("tproxy".into())
    }

    /// `jump { RULE; RULE ... }`: the rules of an anonymous chain are read (and checked)
    /// like a chain's, one per line or `;`, and kept as text in the outer rule.
    fn anonymous_chain(&mut self) {
        let open = self.i;
        self.skip_braces();
        if self.depth >= MAX_DEPTH {
            let t = self.toks[open];
            self.r.error(
                &t,
                format!("anonymous chains nest deeper than {MAX_DEPTH}"),
                "{",
            );
            return;
        }
        let closed = self.i > open + 1 && self.toks[self.i - 1].kind == Tok::RBrace;
        let end = if closed { self.i - 1 } else { self.i };
        let toks = self.toks;
        let mut from = open + 1;
        let mut depth = 0usize;
        for k in open + 1..=end {
            let split = k == end
                || (depth == 0
                    && (toks[k].kind == Tok::Semi || toks[k].line != toks[k - 1].line)
                    && k > from);
            if k < end {
                match toks[k].kind {
                    Tok::LBrace => depth += 1,
                    Tok::RBrace => depth = depth.saturating_sub(1),
                    _ => {}
                }
            }
            if split && k > from {
                let rule: Vec<Token> = toks[from..k]
                    .iter()
                    .copied()
                    .filter(|t| t.kind != Tok::Semi)
                    .collect();
                if !rule.is_empty() {
                    let mut sp = StmtParser {
                        r: &mut *self.r,
                        toks: &rule,
                        i: 0,
                        depth: self.depth + 1,
                        inet: self.inet,
                        network_known: false,
                    };
                    sp.statements();
                }
                from = k;
            }
        }
    }

    /// `queue [num N | to EXPR] [flags F] [bypass] [fanout]`.
    fn queue(&mut self) -> StatementKind {
        self.i += 1;
        let from = self.i;
        while let Some(o) = self.cur() {
            match o {
                "num" | "to" => {
                    self.i += 1;
                    self.value_expr();
                }
                "flags" => self.i = (self.i + 2).min(self.toks.len()),
                "bypass" | "fanout" | "bypass,fanout" | "fanout,bypass" => self.i += 1,
                _ => break,
            }
        }
        StatementKind::Verdict(Verdict::Queue(self.span_text(from, self.i)))
    }

    /// `reject [with PROTO type T | with tcp reset | with PROTO T]`.
    fn reject(&mut self) -> StatementKind {
        self.i += 1;
        let from = self.i;
        if self.cur() == Some("with") {
            let t = self.toks[self.i];
            self.i += 1;
            let proto = self.cur();
            if self.expect_word(
                t,
                |p| matches!(p, "icmp" | "icmpv6" | "icmpx" | "tcp"),
                "expected icmp, icmpv6, icmpx or tcp after 'reject with' (nft: syntax error)",
            ) {
                if proto == Some("tcp") {
                    self.expect_word(t, |w| w == "reset", "expected 'reset' after 'reject with tcp' (nft: syntax error, expecting reset)");
                } else {
                    if self.cur() == Some("type") {
                        self.i += 1;
                    }
                    self.expect_word(
                        t,
                        |w| !NOT_VALUES.contains(&w) && malformed_value(w).is_none(),
                        "expected an ICMP code after 'reject with' (nft: syntax error)",
                    );
                }
            }
            self.i = self.i.min(self.toks.len());
        }
        let with = (self.i > from).then(|| self.span_text(from + 1, self.i));
        StatementKind::Verdict(Verdict::Reject(with))
    }

    /// `counter`, `counter packets N bytes M`, or a named counter `counter name ...`.
    fn counter(&mut self, t: Token) -> StatementKind {
        self.i += 1;
        if self.cur() == Some("packets") && self.w(self.i + 2) == Some("bytes") {
            let p = self.w(self.i + 1).and_then(|s| s.parse().ok());
            let b = self.w(self.i + 3).and_then(|s| s.parse().ok());
            self.i = (self.i + 4).min(self.toks.len());
            match (p, b) {
                (Some(packets), Some(bytes)) => {
                    StatementKind::Counter(Some(Counters { packets, bytes }))
                }
                _ => {
                    self.r.error(
                        &t,
                        "expected 'counter packets N bytes N' with numbers",
                        &self.span_text(self.i - 4, self.i),
                    );
                    StatementKind::Counter(None)
                }
            }
        } else if self.cur() == Some("packets")
            && self.w(self.i + 1).is_some_and(|n| n.parse::<u64>().is_ok())
        {
            // `counter packets N` alone: nft takes the bytes as optional.
            self.i += 2;
            StatementKind::Counter(None)
        } else if self.cur() == Some("name") {
            // `counter name "c"` or `counter name ip saddr map { ... }`
            self.object_name(t);
            StatementKind::Other("counter".into())
        } else {
            StatementKind::Counter(None)
        }
    }

    /// `comment "TEXT"`.
    fn comment(&mut self, t: Token, w: &str) -> StatementKind {
        self.i += 1;
        match self.cur() {
            Some(c) if self.cur_is_word() && !NOT_VALUES.contains(&c) => {
                self.i += 1;
                StatementKind::Comment(unquote(c).to_string())
            }
            _ => {
                self.r.error(&t, "expected a string after 'comment'", w);
                StatementKind::Other(w.into())
            }
        }
    }

    /// `log [prefix P] [level L] [group G] [snaplen N] [queue-threshold N] [flags F]`.
    fn log(&mut self) -> StatementKind {
        self.i += 1;
        let from = self.i;
        let t = self.toks[self.i - 1];
        const LEVELS: &[&str] = &[
            "emerg", "alert", "crit", "err", "warn", "notice", "info", "debug", "audit",
        ];
        let num = |w: &str| !w.is_empty() && w.chars().all(|c| c.is_ascii_digit());
        while let Some(o) = self.cur() {
            match o {
                "prefix" => {
                    self.i += 1;
                    self.expect_word(
                        t,
                        |w| !NOT_VALUES.contains(&w),
                        "expected a string after 'log prefix' (nft: syntax error, expecting string)",
                    );
                }
                "level" => {
                    self.i += 1;
                    self.expect_word(
                        t,
                        |w| LEVELS.contains(&unquote(w)),
                        "expected a log level (emerg ... debug, audit)",
                    );
                }
                "group" | "snaplen" | "queue-threshold" => {
                    self.i += 1;
                    self.expect_word(
                        t,
                        num,
                        "expected a number (nft: syntax error, expecting number)",
                    );
                }
                "flags" => {
                    self.i += 1;
                    match self.cur() {
                        Some("tcp") => {
                            self.i += 1;
                            self.expect_word(
                                t,
                                |w| w.split(',').all(|f| matches!(f, "sequence" | "options")),
                                "expected sequence or options after 'log flags tcp' (nft: syntax error)",
                            );
                        }
                        Some("ip") => {
                            self.i += 1;
                            self.expect_word(t, |w| w == "options", "expected 'options' after 'log flags ip' (nft: syntax error, expecting options)");
                        }
                        _ => {
                            self.expect_word(
                                t,
                                |w| w.split(',').all(|f| matches!(f, "skuid" | "ether" | "all")),
                                "expected tcp, ip, skuid, ether or all after 'log flags' (nft: syntax error)",
                            );
                        }
                    }
                }
                _ => break,
            }
        }
        StatementKind::Log {
            args: self.span_text(from, self.i),
        }
    }

    /// `xt match|target NAME`: an iptables-nft compat expression, noted and kept as text.
    fn compat_xt(&mut self, t: Token) -> StatementKind {
        // `xt` may end the rule early (`xt` or `xt match` alone): never read past it.
        let start = self.i;
        self.i = (self.i + 3).min(self.toks.len());
        self.r.note(
            &t,
            "iptables-nft compat expression (xt): its match/target options are opaque to nft and to plumb",
            &self.span_text(start, self.i),
        );
        StatementKind::Other("xt".into())
    }

    /// `flow add @ft` / `flow offload @ft`.
    fn flow(&mut self, w: &str) -> StatementKind {
        self.i += 1;
        if matches!(self.cur(), Some("add" | "offload")) {
            self.i += 1;
        }
        self.skip_args();
        StatementKind::Other(w.to_string())
    }

    /// A statement plumb keeps as text (`limit`, `quota`, `notrack`, `meter`, set
    /// updates ...): its arguments are skipped up to the next statement.
    fn other_statement(&mut self, w: &str) -> StatementKind {
        self.i += 1;
        if self.cur() == Some("name") {
            // Object reference: `limit name "x"`, `quota name ip saddr map @m`.
            self.i += 1;
            self.value_expr();
        }
        if matches!(self.cur(), Some("ip" | "ip6")) && matches!(self.w(self.i + 1), Some("to")) {
            self.i += 1;
        }
        if self.cur() == Some("to") && self.w(self.i + 1).is_some_and(is_selector_start) {
            self.i += 1;
            self.value_expr();
        }
        self.skip_args();
        StatementKind::Other(w.to_string())
    }

    /// A word no statement starts with: an error, and its arguments are skipped.
    fn unknown_statement(&mut self, t: Token, w: &str) -> StatementKind {
        self.i += 1;
        let from = self.i - 1;
        self.skip_args();
        let text = self.span_text(from, self.i);
        self.r.error(
            &t,
            format!("unknown statement '{w}': expected a match (ip, tcp, meta, ct ...), a statement (counter, log, dnat ...) or a verdict"),
            &text,
        );
        StatementKind::Other(w.to_string())
    }

    /// `dnat|snat [ip|ip6] [to EXPR] [FLAGS]`, `masquerade`, `redirect [to :PORT]`.
    fn nat(&mut self, w: &str) -> StatementKind {
        let kind = NatKind::parse(w).expect("nat word");
        self.i += 1;
        let from = self.i;
        let mut family_given = false;
        if matches!(self.cur(), Some("ip" | "ip6"))
            && matches!(self.w(self.i + 1), Some("to" | "prefix" | "addr"))
        {
            self.i += 1;
            family_given = true;
        }
        if self.cur() == Some("prefix") {
            self.i += 1;
        }
        if self.cur() == Some("addr") && self.w(self.i + 1) == Some(".") {
            self.i = (self.i + 3).min(self.toks.len());
        }
        // nft takes `dnat ADDR` without `to` too, and the port apart from its colon
        // (`10.0.0.1: 80`, `10.0.0.1 :80`, `to : 5300`): `:` is a token of its own.
        let has_to = self.cur() == Some("to");
        if has_to {
            self.i += 1;
        }
        let address = has_to
            || (matches!(kind, NatKind::Dnat | NatKind::Snat)
                && self.cur_is_word()
                && self
                    .cur()
                    .is_some_and(|w| !is_stmt_start(w) || is_selector_start(w)));
        if address {
            let (joined, n) = self.joined_colon();
            let first_ok = self
                .cur()
                .is_some_and(|w| !NOT_VALUES.contains(&w) && !is_stmt_start(w));
            let e = if n > 1 && first_ok {
                self.i += n;
                joined
            } else {
                self.value_expr()
            };
            // nft's nat_evaluate_family(): in an inet table an address needs the
            // family, from the statement or from the rule's protocol context.
            if self.inet
                && !family_given
                && !self.network_known
                && matches!(kind, NatKind::Dnat | NatKind::Snat)
                && !e.starts_with(':')
            {
                let t = self.toks[from - 1];
                self.r.error(
                    &t,
                    format!(
                        "{} with an address in an inet table needs its family ('{} ip to' or '{} ip6 to') or an earlier ip/ip6 match (nft: ip or ip6 must be specified with address for inet tables)",
                        w, w, w
                    ),
                    &e,
                );
            }
            if e.contains(" . ") && !e.contains(" map ") {
                let t = self.toks[from];
                self.r.error(
                    &t,
                    "a concatenation as NAT address needs a map (nft: datatype mismatch)",
                    &e,
                );
            }
        } else if matches!(kind, NatKind::Dnat | NatKind::Snat) {
            let t = self.toks[from - 1];
            self.fail_here(
                t,
                "expected 'to ADDRESS' after dnat/snat (nft: syntax error)",
            );
        }
        let mut seen: Vec<&str> = Vec::new();
        while let Some(f) = self.cur() {
            for x in f.split(',') {
                if seen.contains(&x) {
                    let t = self.toks[self.i];
                    self.r.error(
                        &t,
                        format!("NAT flag '{x}' given twice (nft: syntax error)"),
                        f,
                    );
                }
                seen.push(x);
            }
            if !f.is_empty()
                && f.split(',')
                    // `random-fully`: iptables' own spelling, which the MASQUERADE
                    // translation of some iptables versions printed for nft.
                    .all(|x| {
                        matches!(
                            x,
                            "random" | "fully-random" | "random-fully" | "persistent" | "netmap"
                        )
                    })
            {
                self.i += 1;
            } else {
                break;
            }
        }
        StatementKind::Nat {
            kind,
            args: self.span_text(from, self.i),
        }
    }

    /// A selector, possibly concatenated (`a . b . c`) and with bit operations.
    fn selector_expr(&mut self) -> bool {
        if !self.selector() {
            return false;
        }
        // `ip saddr . "lo" @s`: constants may be concatenated too, but no symbol nft
        // cannot type there (`. vlanid`, `. protocol`) and no set reference.
        while self.cur() == Some(".") && self.i + 1 < self.toks.len() {
            self.i += 1;
            if !self.selector() {
                if let Some(w) = self.cur()
                    && self.cur_is_word()
                    && !(w.starts_with('"')
                        || w.as_bytes()[0].is_ascii_digit()
                        || w.contains(':')
                        || w == "(")
                {
                    let t = self.toks[self.i];
                    self.r.error(
                        &t,
                        format!("'{w}' cannot be typed inside a concatenation (nft: Can't parse symbolic invalid expressions)"),
                        w,
                    );
                }
                self.value_atom();
            }
        }
        self.bitops();
        true
    }

    /// `& 0xff | meta mark >> 2 ...`: operands are selectors or values.
    fn bitops(&mut self) {
        // nft accepts the operator words too (`mark and 0x4000`, kube-proxy's scripts).
        while matches!(
            self.cur(),
            Some("&" | "|" | "^" | "<<" | ">>" | "and" | "or" | "xor" | "lshift" | "rshift")
        ) && self.i + 1 < self.toks.len()
        {
            self.i += 1;
            if !self.selector() {
                self.value_atom();
            }
        }
    }

    /// One selector (`ip daddr`, `meta l4proto`, `ct original ip saddr`, `numgen random
    /// mod 2` ...); false, consuming nothing, when the current word starts none.
    fn selector(&mut self) -> bool {
        let Some(w) = self.cur() else { return false };
        if !self.cur_is_word() {
            return false;
        }
        let at = self.i;
        match w {
            "meta" => {
                self.i += 1;
                if let Some(k) = self.cur()
                    && self.cur_is_word()
                    && !META_KEYS.contains(&k)
                {
                    let t = self.toks[self.i];
                    self.r.error(
                        &t,
                        format!("'{k}' is no meta key (nft: syntax error, unexpected {k})"),
                        k,
                    );
                }
                self.bump_word(at);
            }
            "ct" => {
                self.i += 1;
                if matches!(self.cur(), Some("original" | "reply")) {
                    self.i += 1;
                }
                let key = self.cur();
                if key == Some("expectation") && self.w(self.i + 1) != Some("set") {
                    let t = self.toks[self.i];
                    self.r.error(
                        &t,
                        "'ct expectation' is only set (nft: syntax error, expecting set)",
                        "expectation",
                    );
                }
                if let Some(k) = key
                    && self.cur_is_word()
                    && !CT_KEYS.contains(&k)
                {
                    let t = self.toks[self.i];
                    self.r.error(
                        &t,
                        format!("'{k}' is no conntrack key (nft: syntax error, unexpected {k})"),
                        k,
                    );
                }
                if self.bump_word(at) && matches!(key, Some("ip" | "ip6")) {
                    self.bump_word(at);
                }
            }
            "numgen" | "symhash" | "jhash" => {
                self.i += 1;
                if w == "numgen" {
                    let t = self.toks[at];
                    if !self.expect_word(t, |m| matches!(m, "inc" | "random"), "expected inc or random after 'numgen' (nft: syntax error, expecting random or inc)") {
                        return true;
                    }
                    if self.cur() != Some("mod") {
                        self.fail_here(t, "expected 'mod N' (nft: syntax error, expecting mod)");
                        return true;
                    }
                } else if w == "jhash" {
                    self.selector_expr();
                }
                while matches!(self.cur(), Some("mod" | "seed" | "offset")) {
                    self.i += 1;
                    self.bump_word(at);
                }
            }
            "fib" => {
                let t = self.toks[self.i];
                self.i += 1;
                let flag = |f: &str| matches!(f, "saddr" | "daddr" | "mark" | "iif" | "oif");
                if !self.expect_word(
                    t,
                    flag,
                    "expected saddr, daddr, mark, iif or oif after 'fib' (nft: syntax error)",
                ) {
                    return true;
                }
                while self.cur() == Some(".") {
                    self.i += 1;
                    if !self.expect_word(
                        t,
                        flag,
                        "expected saddr, daddr, mark, iif or oif (nft: syntax error)",
                    ) {
                        return true;
                    }
                }
                self.expect_word(t, |r| matches!(r, "oif" | "oifname" | "type" | "check"), "expected oif, oifname, type or check (nft: syntax error, expecting type or oif or oifname)");
            }
            "socket" => {
                self.i += 1;
                let key = self.cur();
                self.bump_word(at);
                if key == Some("cgroupv2") && self.cur() == Some("level") {
                    self.i += 1;
                    self.bump_word(at);
                }
            }
            "osf" => {
                self.i += 1;
                if self.cur() == Some("ttl") {
                    self.i += 2;
                }
                self.bump_word(at);
            }
            "ipsec" => {
                let t = self.toks[self.i];
                self.i += 1;
                if !self.expect_word(
                    t,
                    |d| matches!(d, "in" | "out"),
                    "expected in or out after 'ipsec' (nft: syntax error)",
                ) {
                    return true;
                }
                if self.cur() == Some("spnum") {
                    self.i += 2;
                }
                let key = self.cur();
                if self.expect_word(t, |k| matches!(k, "reqid" | "spi" | "ip" | "ip6"), "expected reqid, spi, ip or ip6 (nft: syntax error, expecting ip or ip6 or spi or reqid)")
                    && matches!(key, Some("ip" | "ip6"))
                {
                    self.expect_word(t, |k| matches!(k, "saddr" | "daddr"), "expected saddr or daddr (nft: syntax error)");
                }
            }
            "rt" => {
                self.i += 1;
                let key = self.cur();
                if self.bump_word(at) && matches!(key, Some("ip" | "ip6")) {
                    self.bump_word(at);
                }
            }
            "exthdr" | "inner" => {
                self.i += 1;
                self.bump_word(at);
                self.bump_word(at);
            }
            _ if META_BARE.contains(&w) => self.i += 1,
            _ if w.starts_with('@') && w.contains(',') => {
                let t = self.toks[self.i];
                self.i += 1;
                // `@nh,32 ,32`: nft's scanner takes a blank before a comma here.
                let mut raw = w.to_string();
                while raw.matches(',').count() < 2
                    && self.toks.get(self.i).is_some_and(|c| c.kind == Tok::Comma)
                    && let Some(n) = self.toks.get(self.i + 1)
                    && n.kind == Tok::Word
                {
                    raw.push(',');
                    raw.push_str(self.r.s(n));
                    self.i += 2;
                }
                if let Some(why) = malformed_value(&raw) {
                    self.r.error(&t, format!("'{raw}': {why}"), &raw);
                }
            }
            _ if PROTOS.contains(&w) => {
                self.i += 1;
                match self.cur() {
                    Some("option") if matches!(w, "tcp" | "ip") => {
                        let t = self.toks[self.i];
                        self.i += 1;
                        if w == "ip" {
                            if self.expect_word(t, |o| matches!(o, "lsrr" | "rr" | "ssrr" | "ra"), "expected lsrr, rr, ssrr or ra (nft: syntax error, expecting lsrr or rr or ssrr or ra)") {
                                self.expect_word(t, |f| matches!(f, "type" | "length" | "value" | "ptr" | "addr"), "expected type, length, value, ptr or addr (nft: syntax error)");
                            }
                        } else if self.expect_word(
                            t,
                            |o| {
                                TCP_OPTIONS.contains(&o)
                                    || o.chars().all(|c| c.is_ascii_digit())
                                    || o.starts_with('@')
                            },
                            "no TCP option (nft: syntax error)",
                        ) && self.cur().is_some_and(|f| TCP_OPT_FIELDS.contains(&f))
                        {
                            self.i += 1;
                        }
                    }
                    Some("chunk") if w == "sctp" => {
                        let t = self.toks[self.i];
                        self.i += 1;
                        self.expect_word(
                            t,
                            |c| SCTP_CHUNKS.contains(&c),
                            "no SCTP chunk type (nft: syntax error)",
                        );
                        if self
                            .cur()
                            .is_some_and(|f| !is_stmt_start(f) && f.contains('-'))
                        {
                            self.i += 1;
                        }
                    }
                    Some(f)
                        if PROTOS.contains(&f)
                            && matches!(w, "vxlan" | "geneve" | "gre" | "gretap") =>
                    {
                        self.selector();
                    }
                    Some(f) if self.cur_is_word() && !proto_field(w, f) => {
                        let t = self.toks[self.i];
                        self.i += 1;
                        self.r.error(
                            &t,
                            format!("'{f}' is no field of '{w}' (nft: syntax error)"),
                            f,
                        );
                    }
                    _ => {
                        self.bump_word(at);
                    }
                }
            }
            _ => return false,
        }
        self.i = self.i.min(self.toks.len());
        true
    }

    /// One value: a word, `{ set }`, `@name`, `( expr )`; then `. value` and `/ mask`.
    fn value(&mut self) -> Value {
        let v = self.value_atom();
        let mut parts = vec![v];
        while self.cur() == Some(".") {
            self.i += 1;
            parts.push(self.value_atom());
        }
        let mut v = if parts.len() == 1 {
            parts.pop().expect("one")
        } else {
            Value::Concat(parts)
        };
        // `established | related`, `ack | urg`: flag combinations.
        if matches!(self.cur(), Some("|" | "&" | "^")) && self.i + 1 < self.toks.len() {
            let from = self.i - 1;
            while matches!(self.cur(), Some("|" | "&" | "^")) && self.i + 1 < self.toks.len() {
                self.i += 1;
                self.value_atom();
            }
            v = Value::Expr(self.span_text(from, self.i));
        }
        if self.cur() == Some("/") {
            let from = self.i - 1;
            self.i = (self.i + 2).min(self.toks.len());
            v = Value::Expr(self.span_text(from, self.i));
        }
        v
    }

    /// One value without concatenation: a word, a set literal or a parenthesised
    /// expression.
    fn value_atom(&mut self) -> Value {
        let Some(t) = self.toks.get(self.i).copied() else {
            let last = self.toks[self.toks.len() - 1];
            self.r.error(
                &last,
                "expected a value at the end of the rule",
                self.r.s(&last),
            );
            return Value::Single(String::new());
        };
        match t.kind {
            Tok::LBrace => self.set_literal(),
            Tok::Word => {
                let w = self.r.s(&t);
                self.i += 1;
                if w == "(" {
                    let from = self.i - 1;
                    self.paren_expr(t);
                    return Value::Expr(self.span_text(from, self.i));
                }
                if w == ")" {
                    self.r
                        .error(&t, "unexpected ')' (nft: syntax error, unexpected ')')", w);
                    return Value::Single(String::new());
                }
                // `@ name`: nft's scanner takes the blank between.
                if w == "@"
                    && let Some(n) = self.toks.get(self.i)
                    && n.kind == Tok::Word
                {
                    let name = self.r.s(n);
                    if !NOT_VALUES.contains(&name) && malformed_value(name).is_none() {
                        self.i += 1;
                        return Value::Named(unquote(name).to_string());
                    }
                }
                if let Some(why) = malformed_value(w) {
                    self.r.error(&t, format!("'{w}': {why}"), w);
                    return Value::Single(w.to_string());
                }
                if NOT_VALUES.contains(&w) {
                    self.r.error(
                        &t,
                        format!(
                            "'{w}' is a keyword, not a value (nft: syntax error, unexpected {w})"
                        ),
                        w,
                    );
                    return Value::Single(w.to_string());
                }
                if w == "over" || w == "until" {
                    if self.cur_is_word() {
                        self.i += 1;
                    }
                    return Value::Single(self.span_text(self.i - 2, self.i));
                }
                Value::atom(w)
            }
            _ => {
                self.i += 1;
                let w = self.r.s(&t);
                self.r
                    .error(&t, format!("unexpected '{w}': expected a value"), w);
                Value::Single(String::new())
            }
        }
    }

    /// After `(`: `OPERAND (OP OPERAND)* )`, operands selectors or values, operators
    /// the bit operations nft takes there (`(syn | rst)`, `(meta mark | 0x10)`).
    fn paren_expr(&mut self, open: Token) {
        if self.depth >= MAX_DEPTH {
            self.r.error(
                &open,
                format!("parentheses nest deeper than {MAX_DEPTH}"),
                "(",
            );
            self.i = self.toks.len();
            return;
        }
        self.depth += 1;
        self.paren_body(open);
        self.depth -= 1;
    }

    /// The inside of `( ... )` after its `(`.
    fn paren_body(&mut self, open: Token) {
        loop {
            if !self.selector_expr() {
                match self.cur() {
                    Some("(") => {
                        let t = self.toks[self.i];
                        self.i += 1;
                        self.paren_expr(t);
                    }
                    Some(w) if self.cur_is_word() && !BINOPS.contains(&w) && w != ")" => {
                        self.value_atom();
                    }
                    _ => {
                        let (t, w) = match self.toks.get(self.i) {
                            Some(t) => (*t, self.r.s(t)),
                            None => (open, "end of rule"),
                        };
                        self.r.error(
                            &t,
                            format!("unexpected {w} in '( ... )': expected a value or a selector (nft: syntax error)"),
                            w,
                        );
                        self.i = self.toks.len();
                        return;
                    }
                }
            }
            match self.cur() {
                Some(")") => {
                    self.i += 1;
                    return;
                }
                Some(op) if BINOPS.contains(&op) => self.i += 1,
                other => {
                    let t = self.toks.get(self.i).copied().unwrap_or(open);
                    let w = other.unwrap_or("end of rule").to_string();
                    self.r.error(
                        &t,
                        format!("unexpected {w}: expected ')' or an operator (nft: syntax error, expecting ')')"),
                        &w,
                    );
                    self.i = self.toks.len();
                    return;
                }
            }
        }
    }

    /// `{ a, b . c, 1-2 }` (anonymous set or map; map entries kept as expressions).
    fn set_literal(&mut self) -> Value {
        let open = self.i;
        self.i += 1;
        let mut items = Vec::new();
        let mut el_start = self.i;
        let mut depth = 0usize;
        while let Some(t) = self.toks.get(self.i).copied() {
            match t.kind {
                Tok::LBrace => depth += 1,
                Tok::RBrace if depth > 0 => depth -= 1,
                Tok::RBrace | Tok::Comma if depth == 0 => {
                    if self.i > el_start {
                        self.check_element(el_start, self.i);
                        let words: Vec<&str> = self.toks[el_start..self.i]
                            .iter()
                            .map(|t| self.r.s(t))
                            .filter(|w| *w != "\\")
                            .collect();
                        items.push(value_of_words(&words));
                    }
                    self.i += 1;
                    if t.kind == Tok::RBrace {
                        return Value::Set(items);
                    }
                    el_start = self.i;
                    continue;
                }
                _ => {}
            }
            self.i += 1;
        }
        let t = self.toks[open];
        self.r.error(
            &t,
            "expected '}' to close the set",
            &self.span_text(open, self.i),
        );
        Value::Set(items)
    }

    /// Checks one element of a set literal, tokens `from..to`: a `\\` only at a line's
    /// end (nft's line continuation), `:` once and between a key and a value, and no
    /// two values side by side (`69 "tftp-69"` lacks its `:`).
    fn check_element(&mut self, from: usize, to: usize) {
        const OPTS: &[&str] = &[
            "timeout", "expires", "comment", "counter", "packets", "bytes", "kbytes", "mbytes",
            "quota", "over", "until", "used", "limit", "rate", "burst", "last", "never",
        ];
        let mut words: Vec<(Token, &'a str)> = Vec::new();
        let mut depth = 0usize;
        for k in from..to {
            let t = self.toks[k];
            match t.kind {
                Tok::LBrace => depth += 1,
                Tok::RBrace => depth = depth.saturating_sub(1),
                Tok::Word if depth == 0 => {
                    let w = self.r.s(&t);
                    if w == "\\" {
                        let at_line_end = self.toks.get(k + 1).is_none_or(|n| n.line != t.line);
                        if !at_line_end {
                            self.r.error(&t, "a '\\' inside a set is a line continuation and must end its line (nft: syntax error, unexpected junk)", w);
                        }
                        continue;
                    }
                    words.push((t, w));
                }
                _ => {}
            }
        }
        let colons: Vec<usize> = (0..words.len()).filter(|&k| words[k].1 == ":").collect();
        if colons.len() > 1 || colons.iter().any(|&c| c == 0 || c + 1 == words.len()) {
            let t = words[colons[0]].0;
            self.r.error(&t, "a set element takes one ':' between its key and its value (nft: syntax error, unexpected colon)", ":");
            return;
        }
        let plain = |w: &str| {
            !OPTS.contains(&w)
                && !NOT_VALUES.contains(&w)
                && !BINOPS.contains(&w)
                && !matches!(w, ":" | "." | "-" | "/" | "!=" | "==")
                && !w.starts_with(['.', '/', '-'])
                && !w.ends_with(['.', '/', '-'])
        };
        for pair in words.windows(2) {
            if plain(pair[0].1) && plain(pair[1].1) {
                let t = pair[1].0;
                self.r.error(
                    &t,
                    format!("'{}' follows a value without ',', ':' or '.' (nft: syntax error, expecting comma or '}}')", pair[1].1),
                    pair[1].1,
                );
                return;
            }
        }
    }

    /// After `set`, `to` or `map`: a selector expression (optionally `map`ped) or a value.
    fn value_expr(&mut self) -> String {
        let from = self.i;
        if self.cur().is_some_and(is_selector_start) && self.cur_is_word() {
            self.selector_expr();
        } else if let Some(rest) = self.cur().and_then(|w| w.strip_prefix(':'))
            && is_selector_start(rest)
        {
            // `redirect to :tcp dport map { ... }`
            self.i += 1;
            if PROTOS.contains(&rest) || rest == "meta" {
                self.bump_word(from);
            }
            self.bitops();
        } else {
            self.value();
            self.bitops();
            if self.cur() == Some("map")
                && self.i == from + 1
                && let Some(w) = self.w(from)
                && w.as_bytes()[0].is_ascii_alphabetic()
            {
                let t = self.toks[from];
                self.r.error(
                    &t,
                    format!(
                        "'{w}' is no selector to look up in a map (nft: No symbol type information)"
                    ),
                    w,
                );
            }
        }
        if self.cur() == Some("map") {
            self.i += 1;
            self.value();
        }
        self.span_text(from, self.i)
    }

    /// A statement that starts with a selector: a match (`SELECTOR [OP] VALUE`), a
    /// verdict map (`SELECTOR vmap ...`), a mangle (`SELECTOR set VALUE`) or a map lookup.
    fn matchlike(&mut self) -> StatementKind {
        let start = self.i;
        self.selector_expr();
        let left = self.span_text(start, self.i);
        let Some(next) = self.cur() else {
            let t = self.toks[start];
            self.r.error(
                &t,
                format!("expected a value, 'set' or 'vmap' after '{left}'"),
                &left,
            );
            return StatementKind::Other(left);
        };
        match next {
            "vmap" => {
                let vt = self.toks[self.i];
                self.i += 1;
                match self.toks.get(self.i).copied() {
                    Some(t) if t.kind == Tok::LBrace => {
                        let entries = self.vmap_entries();
                        StatementKind::VerdictMap {
                            key: left,
                            map: VerdictMapRef::Inline(entries),
                        }
                    }
                    Some(t) if t.kind == Tok::Word && self.r.s(&t).starts_with('@') => {
                        self.i += 1;
                        if self.r.s(&t) == "@" {
                            if self.cur_is_word() {
                                // `vmap @ name`
                                self.i += 1;
                            } else {
                                self.r.error(&t, "expected a map name after '@' (nft: syntax error, expecting string)", "@");
                            }
                        }
                        StatementKind::VerdictMap {
                            key: left,
                            map: VerdictMapRef::Named(self.r.s(&t)[1..].to_string()),
                        }
                    }
                    _ => {
                        self.r.error(
                            &vt,
                            "expected '@map' or '{ key : verdict, ... }' after 'vmap'",
                            &left,
                        );
                        StatementKind::Other(left)
                    }
                }
            }
            "set" => {
                self.i += 1;
                let vfrom = self.i;
                let value = self.value_expr();
                if self.i == vfrom + 1
                    && let Some((bad, what)) = wrong_symbol(&left, &Value::atom(&value))
                {
                    let t = self.toks[vfrom];
                    self.r.error(
                        &t,
                        format!("'{bad}' is no {what} (nft: Could not parse {what})"),
                        &bad,
                    );
                }
                StatementKind::Mangle { key: left, value }
            }
            "map" => {
                let t = self.toks[self.i];
                self.i += 1;
                self.value();
                self.r.error(
                    &t,
                    "a map lookup is no statement: it belongs after 'set', 'to' or in a match (nft: syntax error)",
                    &left,
                );
                StatementKind::Other("map".into())
            }
            _ => {
                // `tcp flags ! fin,syn`: nft's "none of these flags" (printed for
                // iptables' `--tcp-flags ... NONE`), read as a negated match.
                let op = if next == "!" {
                    Some(Op::Ne)
                } else {
                    Op::parse(next).filter(|o| *o != Op::Implicit)
                };
                if op.is_some() {
                    self.i += 1;
                }
                if self.i >= self.toks.len() {
                    let t = self.toks[self.toks.len() - 1];
                    self.r.error(
                        &t,
                        format!("expected a value after '{}'", self.span_text(start, self.i)),
                        &left,
                    );
                    return StatementKind::Other(left);
                }
                let vt = self.toks.get(self.i).copied();
                let right = self.value();
                // A concatenated key compares with a concatenation, a set or a map,
                // never with one symbol (`iifname . th dport vma`).
                // (`fib saddr . iif` and hashes over `a . b` give one value.)
                if left.contains(" . ")
                    && !left.starts_with("fib ")
                    && !left.starts_with("jhash ")
                    && !left.starts_with("symhash")
                    && let (Value::Single(v), Some(vt)) = (&right, vt)
                    && v.as_bytes().first().is_some_and(u8::is_ascii_alphabetic)
                    && !self.r.s(&vt).starts_with('"')
                {
                    self.r.error(
                        &vt,
                        format!("'{v}' is no value for the concatenation '{left}' (nft: invalid data type, expected concatenation)"),
                        v,
                    );
                }
                StatementKind::Match {
                    left,
                    op: op.unwrap_or(Op::Implicit),
                    right,
                }
            }
        }
    }

    /// `{ k : verdict, ... }` of an inline verdict map.
    fn vmap_entries(&mut self) -> Vec<(String, Verdict)> {
        let open = self.i;
        self.i += 1;
        let mut entries = Vec::new();
        let mut el_start = self.i;
        while let Some(t) = self.toks.get(self.i).copied() {
            if matches!(t.kind, Tok::Comma | Tok::RBrace) {
                if self.i > el_start {
                    let words: Vec<&str> = self.toks[el_start..self.i]
                        .iter()
                        .map(|t| self.r.s(t))
                        .collect();
                    let text = self.span_text(el_start, self.i);
                    match words.iter().position(|w| *w == ":") {
                        Some(c) => match Verdict::parse(&words[c + 1..]) {
                            Some(v) => entries.push((self.span_text(el_start, el_start + c), v)),
                            None => {
                                let vt = self.toks[el_start + (c + 1).min(words.len() - 1)];
                                self.r.error(
                                    &vt,
                                    "verdict map value is not a verdict: expected accept, drop, return, continue, jump CHAIN or goto CHAIN",
                                    &text,
                                );
                            }
                        },
                        None => {
                            let et = self.toks[el_start];
                            self.r
                                .error(&et, "expected 'key : verdict' in verdict map", &text);
                        }
                    }
                } else if t.kind == Tok::RBrace && !entries.is_empty() {
                    self.r.error(
                        &t,
                        "trailing comma before '}': `nft -f` accepts it but `nft list` never prints one, so this text was edited by hand",
                        "}",
                    );
                }
                self.i += 1;
                if t.kind == Tok::RBrace {
                    return entries;
                }
                el_start = self.i;
                continue;
            }
            if t.kind == Tok::LBrace {
                self.skip_braces();
                continue;
            }
            self.i += 1;
        }
        let t = self.toks[open];
        self.r.error(
            &t,
            "expected '}' to close the verdict map",
            &self.span_text(open, self.i),
        );
        entries
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse_text;
    use super::super::tests::errors;
    use super::*;
    use crate::model::{Counters, Rule, RuleBody};

    /// The statements of `rule` read in a little table.
    fn nft(rule: &str) -> Vec<Statement> {
        let r = parsed(rule);
        r.nft_statements().unwrap().into_owned()
    }

    /// `rule` read in a little table.
    fn parsed(rule: &str) -> Rule {
        let rs = parse_text(&format!(
            "table ip t {{\n\tchain c {{\n\t\t{rule}\n\t}}\n}}\n"
        ));
        // The rules here name sets the little table does not define: only that may fail.
        let errs: Vec<_> = errors(&rs)
            .into_iter()
            .filter(|e| !format!("{e:?}").contains("does not define"))
            .collect();
        assert!(errs.is_empty(), "{errs:?}");
        let r = &rs.tables[0].chains[0].rules[0];
        assert!(matches!(r.body, RuleBody::Nft(_)));
        r.clone()
    }

    /// A rule on one line holds no statements: they are read again from its text (a
    /// 10k-service listing's 300k statements held 23 MiB). One the input spreads over
    /// lines holds them.
    #[test]
    fn rules_on_one_line_hold_no_statements() {
        let rs = parse_text(
            "table ip t {\n\tchain c {\n\t\tip saddr 10.0.0.1 jump d\n\t\tmeta l4proto tcp dnat to 10.0.0.1:80\n\t\treject\n\t\tip saddr {\n\t\t\t10.0.0.1, 10.0.0.2 } accept\n\t}\n\tchain d {\n\t}\n}\n",
        );
        assert!(errors(&rs).is_empty(), "{:?}", errors(&rs));
        let rules = &rs.tables[0].chains[0].rules;
        assert_eq!(rules.len(), 4);
        for (i, r) in rules.iter().enumerate() {
            let RuleBody::Nft(n) = &r.body else {
                unreachable!()
            };
            assert_eq!(n.holds_statements(), i == 3, "{}", r.text);
            assert!(!n.statements(&r.text).is_empty());
        }
    }

    #[test]
    fn match_with_verdict_and_handle() {
        let rs = parse_text(
            "table ip t { # handle 3\n\tchain c { # handle 1\n\t\tip daddr 10.0.0.0/8 tcp dport != { 80, 443 } counter packets 3 bytes 180 jump x # handle 7\n\t}\n\tchain x {\n\t}\n}\n",
        );
        assert!(errors(&rs).is_empty(), "{:?}", errors(&rs));
        let r = &rs.tables[0].chains[0].rules[0];
        assert_eq!(r.location().line, 3);
        assert_eq!(r.location().column, 3);
        assert_eq!(
            r.counters(),
            Some(Counters {
                packets: 3,
                bytes: 180
            })
        );
        let RuleBody::Nft(rule) = &r.body else {
            unreachable!()
        };
        assert_eq!(rule.handle(), Some(7));
        let n = rule.statements(&r.text);
        assert_eq!(n.len(), 4);
        assert_eq!(
            n[0].kind,
            StatementKind::Match {
                left: "ip daddr".into(),
                op: Op::Implicit,
                right: Value::Prefix("10.0.0.0".into(), 8)
            }
        );
        assert_eq!(
            n[1].kind,
            StatementKind::Match {
                left: "tcp dport".into(),
                op: Op::Ne,
                right: Value::Set(vec![Value::atom("80"), Value::atom("443")])
            }
        );
        assert_eq!(n[1].text, "tcp dport != { 80, 443 }");
        assert_eq!(rule.chain_references(&r.text)[0].chain, "x");
    }

    #[test]
    fn concat_vmap_and_set_lookup() {
        let n = nft("ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports");
        assert_eq!(
            n[0].kind,
            StatementKind::Match {
                left: "ip daddr".into(),
                op: Op::Implicit,
                right: Value::Named("nodeport-ips".into())
            }
        );
        assert_eq!(
            n[1].kind,
            StatementKind::VerdictMap {
                key: "meta l4proto . th dport".into(),
                map: VerdictMapRef::Named("service-nodeports".into())
            }
        );
    }

    #[test]
    fn nat_mangle_log_reject() {
        let n = nft(
            "meta mark set meta mark | 0x4000 ct state established,related log prefix \"x y\" level info dnat to 10.0.0.1:80",
        );
        // A rule ends at its first terminal statement (nft refuses more after it).
        let reject = nft("reject with icmp type host-unreachable");
        let kinds: Vec<_> = n.iter().chain(&reject).map(|s| s.kind.clone()).collect();
        assert_eq!(
            kinds[0],
            StatementKind::Mangle {
                key: "meta mark".into(),
                value: "meta mark | 0x4000".into()
            }
        );
        assert_eq!(
            kinds[1],
            StatementKind::Match {
                left: "ct state".into(),
                op: Op::Implicit,
                right: Value::Single("established,related".into())
            }
        );
        assert_eq!(
            kinds[2],
            StatementKind::Log {
                args: "prefix \"x y\" level info".into()
            }
        );
        assert_eq!(
            kinds[3],
            StatementKind::Nat {
                kind: NatKind::Dnat,
                args: "to 10.0.0.1:80".into()
            }
        );
        assert_eq!(
            kinds[4],
            StatementKind::Verdict(Verdict::Reject(Some("icmp type host-unreachable".into())))
        );
    }

    /// Regression (fuzz): a rule that ends right after `xt` made the note's text span
    /// start before the rule (subtract overflow).
    #[test]
    fn a_rule_ending_in_xt_is_read_without_panicking() {
        for rule in ["xt", "xt match", "counter xt"] {
            let r = nft(rule);
            assert!(
                r.iter()
                    .any(|s| s.kind == StatementKind::Other("xt".into()))
            );
        }
    }

    #[test]
    fn numgen_inline_vmap() {
        let n = nft("numgen random mod 2 vmap { 0 : goto a, 1 : jump b }");
        assert_eq!(
            n[0].kind,
            StatementKind::VerdictMap {
                key: "numgen random mod 2".into(),
                map: VerdictMapRef::Inline(vec![
                    ("0".into(), Verdict::Goto("a".into())),
                    ("1".into(), Verdict::Jump("b".into()))
                ])
            }
        );
        let r = parsed("numgen random mod 2 vmap { 0 : goto a, 1 : jump b }");
        let refs: Vec<_> = r.chain_references().iter().map(|c| c.chain).collect();
        assert_eq!(refs, ["a", "b"]);
    }

    #[test]
    fn operator_words_are_bit_operations() {
        // kube-proxy's scripts write `mark and 0x4000`, the kernel lists `meta mark & 0x4000`.
        let rs = parse_text(
            "add rule ip t c mark and 0x4000 == 0 return\nadd rule ip t c mark set mark or 0x4000\n",
        );
        let c = &rs.tables[0].chains[0];
        let kinds = |i: usize| match &c.rules[i].body {
            RuleBody::Nft(n) => n
                .statements(&c.rules[i].text)
                .iter()
                .map(|s| s.kind.clone())
                .collect::<Vec<_>>(),
            _ => unreachable!(),
        };
        assert!(
            matches!(
                &kinds(0)[..],
                [StatementKind::Match { left, op: Op::Eq, .. }, StatementKind::Verdict(Verdict::Return)]
                    if left == "mark and 0x4000"
            ),
            "{:?}",
            kinds(0)
        );
        assert!(
            matches!(
                &kinds(1)[..],
                [StatementKind::Mangle { key, value }] if key == "mark" && value == "mark or 0x4000"
            ),
            "{:?}",
            kinds(1)
        );
    }

    /// The errors reading `rule` alone in a chain gives.
    fn rule_errors(rule: &str) -> Vec<String> {
        errors(&parse_text(&format!(
            "table ip t {{\n\tchain c {{\n\t\t{rule}\n\t}}\n}}\n"
        )))
    }

    /// Asserts nft's verdict on each rule: `true` accepted, `false` refused.
    fn verdicts(cases: &[(&str, bool)]) {
        for (rule, ok) in cases {
            let e = rule_errors(rule);
            assert_eq!(e.is_empty(), *ok, "{rule}: {e:?}");
        }
    }

    #[test]
    fn keywords_are_no_values_and_keys_are_checked() {
        verdicts(&[
            ("tcp dport accept", false),
            ("udp dport dport 161 accept", false),
            ("ip saddr counter packets 0 bytes 0 drop", false),
            ("meta mark set meta", false),
            (
                "iif \"lo\" ct mark & 0xff == meta mark set ct mark >> 8",
                false,
            ),
            ("l4proto tcp accept", false),
            ("protocol ip udp dport 67", false),
            ("meta l4proto tcp accept", true),
            ("meta markset 0x1", false),
            ("meta nft race set 1", false),
            ("meta nftrace set 1", true),
            ("ct new state accept", false),
            ("ct state new accept", true),
            ("ct original ip saddr 10.0.0.1 accept", true),
            ("ct status snat,dnat accept", true),
            ("icmp type redirect accept", true),
            (
                "meta l4proto { tcp, udp } th dport 53 jump {\n\t\t\tudp dport 161 accept accept\n\t\t}",
                false,
            ),
            (
                "meta l4proto { tcp, udp } th dport 53 jump {\n\t\t\tip saddr 10.0.0.1 accept\n\t\t\taccept\n\t\t}",
                true,
            ),
            ("tcp flags &(syn | rst) == syn accept", true),
            ("ip6 saddr::1 accept", true),
        ]);
    }

    #[test]
    fn values_are_checked_by_their_field() {
        verdicts(&[
            ("tcp flags & (syn | rst | ack |urg) == ack | urg", true),
            ("tcp flags & (syn | rst ack | urg) == ack | urg", false),
            ("tcp flags & (syn | | urg) == ack | urg", false),
            ("ct mark set (meta mark | 0x10) << 8", true),
            ("ct mark set (meta mark mark | 0x10) << 8", false),
            ("ip saddr 10.1.", false),
            ("ip saddr 10.1.1", false),
            ("ip saddr 127.0.0.1-192.168.7.1 accept", true),
            ("ip saddr @", false),
            ("@th,160,32 0x2736c00 drop", true),
            ("@th_x,160,32 0x2736c00 drop", false),
            ("meta mark set 0x", false),
            ("icmp type echo-request accept", true),
            ("icmp type echo-requestaccept", false),
            ("icmp type { echo-request, 8 } accept", true),
            ("icmpv6 type echo accept", false),
            ("meta mark set1", false),
            ("meta mark 0x10-0x20 accept", true),
            ("meta l4proto ipv6-icmp accept", true),
            ("meta l4proto icmpaccept", false),
            ("meta nfproto ipv", false),
            ("ether type i", false),
            ("ether type 0x8100 accept", true),
        ]);
    }

    #[test]
    fn statement_arguments_are_checked() {
        verdicts(&[
            ("limit rate 5/second burst 10 packets drop", true),
            ("limit rate over 5/ minute burst 10 packets drop", true),
            ("limit rate 10 mbytes/second accept", true),
            ("limit rate burst 5/second 10 packets drop", false),
            ("limit rate 5/second burst 10 drop", false),
            ("limit 5/minute rate drop", false),
            ("quota over 100 mbytes drop", true),
            ("quota ip saddr map @test drop", false),
            ("quota name ip saddr map @test drop", true),
            ("counter name meta mark", false),
            ("counter name \"c\" accept", true),
            ("tcp dport 80 tproxy to:20000 accept", true),
            ("tcp dport 80 tproxy :20000 to accept", false),
            ("log prefix \"x \" flags ip options flags ether drop", true),
            ("log prefix \"x \" flags ip flags ether drop", false),
            ("log prefix", false),
            ("reject with icmpv6 port-unreachable", true),
            ("reject with icmpx type host-unreachable", true),
            ("reject with type host-unreachable", false),
            ("reject with tcp", false),
            ("reject with", false),
            ("dnat", false),
            ("dnat to 10.0.0.1:80", true),
            (
                "dnat to ip saddr . tcp dport map { 10.0.0.1 . 80 : 10.0.0.2 . 8080 }",
                true,
            ),
            ("dnat to ip saddr . tcp dport", false),
            ("masquerade", true),
            ("masquerade fully-random fully-random", false),
            ("ip saddr 10.0.0.1 counter comment \"x\"", true),
            ("ip saddr 10.0.0.1 comment \"x\" counter", false),
            ("comment accept \"x\"", false),
        ]);
    }

    #[test]
    fn selectors_are_checked() {
        verdicts(&[
            ("ipsec in reqid 23 accept", true),
            ("ipsec in 23 reqid", false),
            ("ipsec reqid in 23", false),
            ("fib saddr . iif oif 0 drop", true),
            ("fib saddr . iif check missing drop", true),
            ("fib saddr iif . oif 0 drop", false),
            ("ip option ra value 255", true),
            ("ip option ra val", false),
            ("tcp option maxseg size 1-500 drop", true),
            ("tcp option maxsegsize set rt mtu", false),
            ("sctp chunk init exists accept", true),
            ("sctp chunk 0 init", false),
            ("reset tcp option fastopen", true),
            ("reset reset tcp option fastopen", false),
            ("meta mark set numgen inc mod 2", true),
            ("meta mark set numgen in", false),
            ("ct expectation set \"e\"", true),
            ("ct expectation \"e\"", false),
            ("iifname . ip protocol . th dport vmap @m4", true),
            ("iifname . protocol . th dport vmap @m4", false),
            ("ip saddr . \"lo\" @s", true),
            ("meta mark set id map @m2", false),
            ("meta mark set i", false),
            ("meta mark set 0x10", true),
            ("meta l4proto map @test", false),
            ("ip saddr vmap @", false),
            ("ether saddr 0a:0b:0c:0d:0e:0f accept", true),
            ("ether saddr 0a:0b:0c:0", false),
        ]);
    }

    #[test]
    fn a_jump_to_a_base_chain_is_refused() {
        let text = |target: &str| {
            format!(
                "table ip t {{\n\tchain c1 {{\n\t\ttype filter hook input priority filter; policy accept;\n\t\tjump c2\n\t}}\n\tchain c2 {{\n\t\tjump {target}\n\t}}\n\tchain c3 {{\n\t}}\n}}\n"
            )
        };
        assert!(errors(&parse_text(&text("c3"))).is_empty());
        let e = errors(&parse_text(&text("c1")));
        assert!(e.len() == 1 && e[0].contains("base chain 'c1'"), "{e:?}");
        let vmap = text("c1").replace("jump c1", "tcp dport vmap { 22 : goto c1 }");
        assert_eq!(errors(&parse_text(&vmap)).len(), 1);
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let parens = format!(
            "meta mark set {}1{}",
            "( ".repeat(200_000),
            " )".repeat(200_000)
        );
        assert!(!rule_errors(&parens).is_empty());
        let chains = format!("{}accept{}", "jump { ".repeat(50_000), " }".repeat(50_000));
        assert!(!rule_errors(&chains).is_empty());
        let ok = format!("meta mark set {}1{}", "( ".repeat(10), " )".repeat(10));
        assert!(rule_errors(&ok).is_empty(), "{:?}", rule_errors(&ok));
    }

    #[test]
    fn nft_scanner_forms_are_read() {
        verdicts(&[
            ("ip saddr @ s drop", true),
            ("ip saddr vmap @ m", true),
            ("ip daddr . @nh,32,32@y accept", true),
            ("meta l4proto tcp dnat 10.42.4.201:8080", true),
            ("meta l4proto tcp dnat to 10.42.4.202: 8080", true),
            ("meta l4proto tcp dnat to 10.42.4.207 :8080", true),
            ("meta l4proto udp redirect to : 5300", true),
            ("meta l4proto udp redirect to :5300 :5300", false),
            ("meta l4proto udp redirect to to :5300", false),
            (
                "dnat numgen inc mod 2 map { 0 : 10.0.0.1, 1 : 10.0.0.2 }",
                true,
            ),
            ("tcp dport 80tproxy to :20000 accept", true),
            ("meta mark set meta mark^ 0x4000", true),
            ("ether saddr 0a:0b:0c:0d:0e:0fvlan id 42 accept", true),
            ("udp length . @nh,32 ,32 vmap @m1", true),
            ("udp length . @nh,32 vmap @m1", false),
            (
                "udp dport 547 ip6 saddr fe80::/64ip6 daddr ff02::1:2 accept",
                true,
            ),
            ("tcp sport 0 counter packets 0 bytes 0drop", false),
            ("tcp sport 1-1023drop", false),
            ("meta time \"1970-05-23 21:07:14\" accept", true),
            ("meta time \"1970-05 -23 21:07:14\" accept", false),
            (
                "ct helper set udp dport map {\n\t\t\t69 : \"tftp-69\", \\\n\t\t\t5060 : \"sip-5060\" }",
                true,
            ),
            (
                "ct helper set udp dport map {\n\t\t\t69 : \"tftp-69\", \\ x\n\t\t\t5060 : \"sip-5060\" }",
                false,
            ),
            (
                "ct helper set udp dport map {\n\t\t\t69 \"tftp-69\", \\\n\t\t\t5060 : \"sip-5060\" }",
                false,
            ),
            ("ct helper set udp dport map { 69 : : \"tftp-69\" }", false),
            ("iifname . ip protocol . th dport vma", false),
            ("iifname . th dport \"lo\" . 80 accept", true),
        ]);
    }
}
