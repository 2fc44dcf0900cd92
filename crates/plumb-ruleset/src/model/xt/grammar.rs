//! What `iptables-restore` accepts in a rule's words, beyond their grouping: how many
//! arguments each option takes, which options each known match and target has, and
//! whether a value can be what the option wants. A rule line that iptables-restore
//! would refuse gets a problem here, with the word that makes it refuse.
//!
//! It reads the words the way iptables' command line does (`getopt_long`): an option
//! that takes an argument takes the next word whatever it is (`--comment -j` comments
//! "-j"); a `!` in the argument's place negates and takes the word after it; a word
//! that no option takes is a "Bad argument"; an option is looked up among the generic
//! options and those of the matches loaded so far and of the target (a unique prefix
//! of a long option is that option, as getopt allows); an option given twice to the
//! same match is refused.
//!
//! Knowledge is data: [`MATCHES`] and [`TARGETS`] list each extension's options with
//! their arity and the kind of value they take. An extension listed without options
//! (`None`) is known to exist, and its options are not checked. Values are checked only
//! where the kind is unambiguous (numbers, ports, marks, conntrack states, addresses).

use super::dialect::{Dialect, IptablesVersion};
use super::words::Word;
use super::{ADDR_TYPES, SpecProblem};

/// The kind of value an option takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum V {
    /// No value.
    Flag,
    /// Any one word.
    Any,
    /// Two words (`--tcp-flags MASK COMP`, `--match-set NAME FLAGS`).
    Two,
    /// A port or `a:b` port range.
    PortRange,
    /// Up to 15 comma-separated ports or ranges.
    PortList,
    /// An unsigned 32-bit number (decimal or 0x hex).
    U32,
    /// A number `a` or range `a:b`.
    Range,
    /// `value[/mask]`, 32-bit.
    Mark,
    /// Conntrack states, comma-separated.
    CtState,
    /// `state` match states, comma-separated.
    State,
    /// An address with optional prefix or mask, or a comma-separated list of them.
    Address,
    /// A probability between 0 and 1.
    Probability,
    /// `random` or `nth`.
    StatisticMode,
    /// A text of at most this many bytes.
    Text(usize),
    /// A log prefix of at most this many bytes, without a newline (an unterminated
    /// quote leaves the line's end in it).
    Prefix(usize),
    /// A TOS value: `value[/mask]` or one of the symbolic names.
    Tos,
    /// One of these words (case-insensitive).
    Choice(&'static [&'static str]),
    /// A comma-separated list of these words, each whole (case-insensitive).
    ChoiceList(&'static [&'static str]),
    /// A comma-separated list of these words or prefixes of them (case-insensitive,
    /// as `strncasecmp` over the length given compares them).
    Choices(&'static [&'static str]),
    /// A NAT range: `[ADDR[-ADDR]][:PORT[-PORT]]`, an IPv6 address in brackets.
    NatRange,
    /// A rate `N[/second|minute|hour|day]`.
    Rate,
    /// An interface name (at most 15 bytes).
    Interface,
    /// `-c PACKETS,BYTES` or `-c PACKETS BYTES`.
    Counters,
}

/// One option: its long name and what it takes.
type Opt = (&'static str, V);

/// Known matches: name and options (`None`: the options are not checked).
const MATCHES: &[(&str, Option<&[Opt]>)] = &[
    ("tcp", Some(TCP)),
    ("udp", Some(UDP)),
    ("udplite", Some(UDP)),
    ("comment", Some(&[("--comment", V::Text(255))])),
    (
        "multiport",
        Some(&[
            ("--sports", V::PortList),
            ("--source-ports", V::PortList),
            ("--dports", V::PortList),
            ("--destination-ports", V::PortList),
            ("--ports", V::PortList),
        ]),
    ),
    (
        "conntrack",
        Some(&[
            ("--ctstate", V::CtState),
            ("--ctproto", V::Any),
            ("--ctorigsrc", V::Address),
            ("--ctorigdst", V::Address),
            ("--ctreplsrc", V::Address),
            ("--ctrepldst", V::Address),
            ("--ctorigsrcport", V::PortRange),
            ("--ctorigdstport", V::PortRange),
            ("--ctreplsrcport", V::PortRange),
            ("--ctrepldstport", V::PortRange),
            ("--ctstatus", V::Any),
            ("--ctexpire", V::Range),
            ("--ctdir", V::Any),
        ]),
    ),
    ("state", Some(&[("--state", V::State)])),
    ("mark", Some(&[("--mark", V::Mark)])),
    ("connmark", Some(&[("--mark", V::Mark)])),
    (
        "statistic",
        Some(&[
            ("--mode", V::StatisticMode),
            ("--probability", V::Probability),
            ("--every", V::U32),
            ("--packet", V::U32),
        ]),
    ),
    (
        "addrtype",
        Some(&[
            ("--src-type", V::Choices(ADDR_TYPES)),
            ("--dst-type", V::Choices(ADDR_TYPES)),
            ("--limit-iface-in", V::Flag),
            ("--limit-iface-out", V::Flag),
        ]),
    ),
    (
        "limit",
        Some(&[("--limit", V::Rate), ("--limit-burst", V::U32)]),
    ),
    (
        "recent",
        Some(&[
            ("--set", V::Flag),
            ("--rcheck", V::Flag),
            ("--update", V::Flag),
            ("--remove", V::Flag),
            ("--seconds", V::U32),
            ("--reap", V::Flag),
            ("--hitcount", V::U32),
            ("--rttl", V::Flag),
            ("--name", V::Text(200)),
            ("--mask", V::Address),
            ("--rsource", V::Flag),
            ("--rdest", V::Flag),
        ]),
    ),
    (
        "set",
        Some(&[
            ("--match-set", V::Two),
            ("--set", V::Two),
            ("--return-nomatch", V::Flag),
            ("--update-counters", V::Flag),
            ("--update-subcounters", V::Flag),
            ("--packets-eq", V::U32),
            ("--packets-lt", V::U32),
            ("--packets-gt", V::U32),
            ("--bytes-eq", V::Any),
            ("--bytes-lt", V::Any),
            ("--bytes-gt", V::Any),
        ]),
    ),
    (
        "physdev",
        Some(&[
            ("--physdev-in", V::Interface),
            ("--physdev-out", V::Interface),
            ("--physdev-is-in", V::Flag),
            ("--physdev-is-out", V::Flag),
            ("--physdev-is-bridged", V::Flag),
        ]),
    ),
    ("mac", Some(&[("--mac-source", V::Any)])),
    (
        "iprange",
        Some(&[("--src-range", V::Any), ("--dst-range", V::Any)]),
    ),
    ("length", Some(&[("--length", V::Range)])),
    (
        "owner",
        Some(&[
            ("--uid-owner", V::Any),
            ("--gid-owner", V::Any),
            ("--socket-exists", V::Flag),
            ("--suppl-groups", V::Flag),
        ]),
    ),
    (
        "pkttype",
        Some(&[(
            "--pkt-type",
            V::Choice(&[
                "unicast",
                "broadcast",
                "multicast",
                "host",
                "otherhost",
                "outgoing",
                "loopback",
                "fastroute",
            ]),
        )]),
    ),
    (
        "socket",
        Some(&[
            ("--transparent", V::Flag),
            ("--nowildcard", V::Flag),
            ("--restore-skmark", V::Flag),
        ]),
    ),
    ("nfacct", Some(&[("--nfacct-name", V::Text(31))])),
    (
        "rpfilter",
        Some(&[
            ("--loose", V::Flag),
            ("--validmark", V::Flag),
            ("--accept-local", V::Flag),
            ("--invert", V::Flag),
        ]),
    ),
    ("icmp", Some(&[("--icmp-type", V::Any)])),
    ("icmp6", Some(&[("--icmpv6-type", V::Any)])),
    ("ipv6-icmp", Some(&[("--icmpv6-type", V::Any)])),
    ("icmpv6", Some(&[("--icmpv6-type", V::Any)])),
    ("helper", Some(&[("--helper", V::Any)])),
    ("tcpmss", Some(&[("--mss", V::Range)])),
    (
        "sctp",
        Some(&[
            ("--sport", V::PortRange),
            ("--source-port", V::PortRange),
            ("--dport", V::PortRange),
            ("--destination-port", V::PortRange),
            ("--chunk-types", V::Two),
        ]),
    ),
    (
        "ah",
        Some(&[
            ("--ahspi", V::Range),
            ("--ahlen", V::U32),
            ("--ahres", V::Flag),
        ]),
    ),
    (
        "bpf",
        Some(&[("--bytecode", V::Any), ("--object-pinned", V::Any)]),
    ),
    ("cgroup", Some(&[("--path", V::Any), ("--cgroup", V::U32)])),
    (
        "cluster",
        Some(&[
            ("--cluster-total-nodes", V::U32),
            ("--cluster-local-node", V::U32),
            ("--cluster-local-nodemask", V::U32),
            ("--cluster-hash-seed", V::U32),
        ]),
    ),
    (
        "connbytes",
        Some(&[
            ("--connbytes", V::Range),
            ("--connbytes-dir", V::Choice(&["original", "reply", "both"])),
            (
                "--connbytes-mode",
                V::Choice(&["packets", "bytes", "avgpkt"]),
            ),
        ]),
    ),
    (
        "connlabel",
        Some(&[("--label", V::Any), ("--set", V::Flag)]),
    ),
    (
        "connlimit",
        Some(&[
            ("--connlimit-upto", V::U32),
            ("--connlimit-above", V::U32),
            ("--connlimit-mask", V::U32),
            ("--connlimit-saddr", V::Flag),
            ("--connlimit-daddr", V::Flag),
        ]),
    ),
    ("cpu", Some(&[("--cpu", V::U32)])),
    (
        "dccp",
        Some(&[
            ("--sport", V::PortRange),
            ("--source-port", V::PortRange),
            ("--dport", V::PortRange),
            ("--destination-port", V::PortRange),
            // libxt_dccp.c's dccp_pkt_types, compared with strcasecmp().
            (
                "--dccp-types",
                V::ChoiceList(&[
                    "REQUEST", "RESPONSE", "DATA", "ACK", "DATAACK", "CLOSEREQ", "CLOSE", "RESET",
                    "SYNC", "SYNCACK", "INVALID",
                ]),
            ),
            ("--dccp-option", V::U32),
        ]),
    ),
    (
        "devgroup",
        Some(&[("--src-group", V::Any), ("--dst-group", V::Any)]),
    ),
    (
        "dscp",
        Some(&[("--dscp", V::U32), ("--dscp-class", V::Any)]),
    ),
    (
        "dst",
        Some(&[("--dst-len", V::U32), ("--dst-opts", V::Any)]),
    ),
    (
        "ecn",
        Some(&[
            ("--ecn-tcp-cwr", V::Flag),
            ("--ecn-tcp-ece", V::Flag),
            ("--ecn-ip-ect", V::U32),
        ]),
    ),
    ("esp", Some(&[("--espspi", V::Range)])),
    ("eui64", Some(&[])),
    (
        "frag",
        Some(&[
            ("--fragid", V::Range),
            ("--fraglen", V::U32),
            ("--fragres", V::Flag),
            ("--fragfirst", V::Flag),
            ("--fragmore", V::Flag),
            ("--fraglast", V::Flag),
        ]),
    ),
    (
        "hashlimit",
        Some(&[
            ("--hashlimit", V::Any),
            ("--hashlimit-upto", V::Any),
            ("--hashlimit-above", V::Any),
            ("--hashlimit-burst", V::Any),
            ("--hashlimit-mode", V::Any),
            ("--hashlimit-srcmask", V::U32),
            ("--hashlimit-dstmask", V::U32),
            ("--hashlimit-name", V::Any),
            ("--hashlimit-htable-size", V::U32),
            ("--hashlimit-htable-max", V::U32),
            ("--hashlimit-htable-gcinterval", V::U32),
            ("--hashlimit-htable-expire", V::U32),
            ("--hashlimit-rate-match", V::Flag),
            ("--hashlimit-rate-interval", V::U32),
        ]),
    ),
    (
        "hbh",
        Some(&[("--hbh-len", V::U32), ("--hbh-opts", V::Any)]),
    ),
    (
        "hl",
        Some(&[
            ("--hl-eq", V::U32),
            ("--hl-lt", V::U32),
            ("--hl-gt", V::U32),
        ]),
    ),
    (
        "ipcomp",
        Some(&[("--ipcompspi", V::Range), ("--compres", V::Flag)]),
    ),
    (
        "ipv6header",
        Some(&[("--header", V::Any), ("--soft", V::Flag)]),
    ),
    (
        "ipvs",
        Some(&[
            ("--ipvs", V::Flag),
            ("--vproto", V::Any),
            ("--vaddr", V::Address),
            ("--vport", V::PortRange),
            ("--vdir", V::Any),
            ("--vmethod", V::Any),
            ("--vportctl", V::PortRange),
        ]),
    ),
    (
        "l2tp",
        Some(&[
            ("--tid", V::U32),
            ("--sid", V::U32),
            ("--pversion", V::U32),
            ("--type", V::Any),
        ]),
    ),
    ("mh", Some(&[("--mh-type", V::Any)])),
    (
        "osf",
        Some(&[("--genre", V::Any), ("--ttl", V::U32), ("--log", V::U32)]),
    ),
    (
        "policy",
        Some(&[
            ("--dir", V::Any),
            ("--pol", V::Any),
            ("--strict", V::Flag),
            ("--reqid", V::U32),
            ("--spi", V::U32),
            ("--proto", V::Any),
            ("--mode", V::Any),
            ("--tunnel-src", V::Address),
            ("--tunnel-dst", V::Address),
            ("--next", V::Flag),
        ]),
    ),
    ("quota", Some(&[("--quota", V::Any)])),
    ("rateest", None),
    ("realm", Some(&[("--realm", V::Any)])),
    (
        "rt",
        Some(&[
            ("--rt-type", V::U32),
            ("--rt-segsleft", V::Range),
            ("--rt-len", V::U32),
            ("--rt-0-res", V::Flag),
            ("--rt-0-addrs", V::Any),
            ("--rt-0-not-strict", V::Flag),
        ]),
    ),
    (
        "srh",
        Some(&[
            ("--srh-next-hdr", V::U32),
            ("--srh-hdr-len-eq", V::U32),
            ("--srh-hdr-len-gt", V::U32),
            ("--srh-hdr-len-lt", V::U32),
            ("--srh-segs-left-eq", V::U32),
            ("--srh-segs-left-gt", V::U32),
            ("--srh-segs-left-lt", V::U32),
            ("--srh-last-entry-eq", V::U32),
            ("--srh-last-entry-gt", V::U32),
            ("--srh-last-entry-lt", V::U32),
            ("--srh-tag", V::U32),
            // XTTYPE_HOSTMASK: addr[/mask] (a host name is looked up on the host).
            ("--srh-psid", V::Address),
            ("--srh-nsid", V::Address),
            ("--srh-lsid", V::Address),
        ]),
    ),
    (
        "string",
        Some(&[
            ("--from", V::U32),
            ("--to", V::U32),
            ("--algo", V::Any),
            ("--string", V::Text(128)),
            ("--hex-string", V::Any),
            ("--icase", V::Flag),
        ]),
    ),
    (
        "time",
        Some(&[
            ("--datestart", V::Any),
            ("--datestop", V::Any),
            ("--timestart", V::Any),
            ("--timestop", V::Any),
            ("--monthdays", V::Any),
            ("--weekdays", V::Any),
            // The time match of iptables 1.3 (old dumps).
            ("--days", V::Any),
            ("--localtz", V::Flag),
            ("--utc", V::Flag),
            ("--kerneltz", V::Flag),
            ("--contiguous", V::Flag),
        ]),
    ),
    ("tos", Some(&[("--tos", V::Tos)])),
    (
        "ttl",
        Some(&[
            ("--ttl-eq", V::U32),
            ("--ttl-lt", V::U32),
            ("--ttl-gt", V::U32),
        ]),
    ),
    ("u32", Some(&[("--u32", V::Any)])),
    ("unclean", Some(&[])),
];

const TCP: &[Opt] = &[
    ("--sport", V::PortRange),
    ("--source-port", V::PortRange),
    ("--dport", V::PortRange),
    ("--destination-port", V::PortRange),
    ("--syn", V::Flag),
    ("--tcp-flags", V::Two),
    ("--tcp-option", V::Any),
];

const UDP: &[Opt] = &[
    ("--sport", V::PortRange),
    ("--source-port", V::PortRange),
    ("--dport", V::PortRange),
    ("--destination-port", V::PortRange),
];

const MARK_TARGET: &[Opt] = &[
    ("--set-mark", V::Mark),
    ("--set-xmark", V::Mark),
    ("--and-mark", V::U32),
    ("--or-mark", V::U32),
    ("--xor-mark", V::U32),
];

/// Known targets: name and options (`None`: the options are not checked).
const TARGETS: &[(&str, Option<&[Opt]>)] = &[
    ("ACCEPT", Some(&[])),
    ("DROP", Some(&[])),
    ("RETURN", Some(&[])),
    ("QUEUE", Some(&[])),
    ("NOTRACK", Some(&[])),
    ("TRACE", Some(&[])),
    (
        "DNAT",
        Some(&[
            ("--to-destination", V::NatRange),
            ("--random", V::Flag),
            ("--random-fully", V::Flag),
            ("--persistent", V::Flag),
        ]),
    ),
    (
        "SNAT",
        Some(&[
            ("--to-source", V::NatRange),
            ("--random", V::Flag),
            ("--random-fully", V::Flag),
            ("--persistent", V::Flag),
        ]),
    ),
    (
        "MASQUERADE",
        Some(&[
            ("--to-ports", V::Any),
            ("--random", V::Flag),
            ("--random-fully", V::Flag),
        ]),
    ),
    (
        "REDIRECT",
        Some(&[("--to-ports", V::Any), ("--random", V::Flag)]),
    ),
    ("MARK", Some(MARK_TARGET)),
    (
        "CONNMARK",
        Some(&[
            ("--set-mark", V::Mark),
            ("--set-xmark", V::Mark),
            ("--and-mark", V::U32),
            ("--or-mark", V::U32),
            ("--xor-mark", V::U32),
            ("--save-mark", V::Flag),
            ("--restore-mark", V::Flag),
            ("--nfmask", V::U32),
            ("--ctmask", V::U32),
            ("--mask", V::U32),
        ]),
    ),
    ("REJECT", Some(&[("--reject-with", V::Any)])),
    (
        "LOG",
        Some(&[
            ("--log-level", V::Any),
            ("--log-prefix", V::Prefix(29)),
            ("--log-tcp-sequence", V::Flag),
            ("--log-tcp-options", V::Flag),
            ("--log-ip-options", V::Flag),
            ("--log-uid", V::Flag),
            ("--log-macdecode", V::Flag),
        ]),
    ),
    (
        "TCPMSS",
        Some(&[("--set-mss", V::U32), ("--clamp-mss-to-pmtu", V::Flag)]),
    ),
    (
        "TPROXY",
        Some(&[
            ("--on-port", V::Any),
            ("--on-ip", V::Any),
            ("--tproxy-mark", V::Mark),
        ]),
    ),
    (
        "NFQUEUE",
        Some(&[
            ("--queue-num", V::U32),
            ("--queue-balance", V::Range),
            ("--queue-bypass", V::Flag),
            ("--fail-open", V::Flag),
            ("--queue-cpu-fanout", V::Flag),
        ]),
    ),
    (
        "SET",
        Some(&[
            ("--add-set", V::Two),
            ("--del-set", V::Two),
            ("--map-set", V::Two),
            ("--timeout", V::U32),
            ("--exist", V::Flag),
            ("--map-mark", V::Flag),
            ("--map-prio", V::Flag),
            ("--map-queue", V::Flag),
        ]),
    ),
    (
        "AUDIT",
        Some(&[("--type", V::Choice(&["accept", "drop", "reject"]))]),
    ),
    ("CHECKSUM", Some(&[("--checksum-fill", V::Flag)])),
    ("CLASSIFY", Some(&[("--set-class", V::Any)])),
    (
        "CLUSTERIP",
        Some(&[
            ("--new", V::Flag),
            ("--hashmode", V::Any),
            ("--clustermac", V::Any),
            ("--total-nodes", V::U32),
            ("--local-node", V::U32),
            ("--hash-init", V::U32),
        ]),
    ),
    (
        "CONNSECMARK",
        Some(&[("--save", V::Flag), ("--restore", V::Flag)]),
    ),
    (
        "CT",
        Some(&[
            ("--notrack", V::Flag),
            ("--ctevents", V::Any),
            ("--expevents", V::Any),
            ("--helper", V::Any),
            ("--zone", V::Any),
            ("--zone-orig", V::Any),
            ("--zone-reply", V::Any),
            ("--timeout", V::Any),
        ]),
    ),
    (
        "DNPT",
        Some(&[("--src-pfx", V::Any), ("--dst-pfx", V::Any)]),
    ),
    (
        "DSCP",
        Some(&[("--set-dscp", V::U32), ("--set-dscp-class", V::Any)]),
    ),
    (
        "ECN",
        Some(&[
            ("--ecn-tcp-remove", V::Flag),
            ("--ecn-tcp-cwr", V::U32),
            ("--ecn-tcp-ece", V::U32),
            ("--ecn-ip-ect", V::U32),
        ]),
    ),
    (
        "HL",
        Some(&[
            ("--hl-set", V::U32),
            ("--hl-dec", V::U32),
            ("--hl-inc", V::U32),
        ]),
    ),
    // libxt_HMARK.c's HMARK_opts (iptables 1.8.9); --hmark-mod is XTOPT_MAND.
    (
        "HMARK",
        Some(&[
            ("--hmark-tuple", V::Any),
            ("--hmark-src-prefix", V::Any),
            ("--hmark-dst-prefix", V::Any),
            ("--hmark-sport-mask", V::U32),
            ("--hmark-dport-mask", V::U32),
            ("--hmark-spi-mask", V::U32),
            ("--hmark-sport", V::U32),
            ("--hmark-dport", V::U32),
            ("--hmark-spi", V::U32),
            ("--hmark-proto-mask", V::U32),
            ("--hmark-rnd", V::U32),
            ("--hmark-mod", V::U32),
            ("--hmark-offset", V::U32),
        ]),
    ),
    (
        "IDLETIMER",
        Some(&[
            ("--timeout", V::U32),
            ("--label", V::Any),
            ("--alarm", V::Flag),
        ]),
    ),
    (
        "LED",
        Some(&[
            ("--led-trigger-id", V::Any),
            ("--led-delay", V::Any),
            ("--led-always-blink", V::Flag),
        ]),
    ),
    ("NETMAP", Some(&[("--to", V::Any)])),
    (
        "NFLOG",
        Some(&[
            ("--nflog-group", V::U32),
            ("--nflog-prefix", V::Prefix(usize::MAX)),
            ("--nflog-range", V::U32),
            ("--nflog-size", V::U32),
            ("--nflog-threshold", V::U32),
        ]),
    ),
    // libxt_RATEEST.c's RATEEST_opts (iptables 1.8.9).
    (
        "RATEEST",
        Some(&[
            ("--rateest-name", V::Any),
            ("--rateest-interval", V::Any),
            ("--rateest-ewmalog", V::Any),
        ]),
    ),
    ("SECMARK", Some(&[("--selctx", V::Any)])),
    (
        "SNPT",
        Some(&[("--src-pfx", V::Any), ("--dst-pfx", V::Any)]),
    ),
    (
        "SYNPROXY",
        Some(&[
            ("--sack-perm", V::Flag),
            ("--timestamp", V::Flag),
            ("--ecn", V::Flag),
            ("--wscale", V::U32),
            ("--mss", V::U32),
        ]),
    ),
    ("TCPOPTSTRIP", Some(&[("--strip-options", V::Any)])),
    (
        "TEE",
        Some(&[("--gateway", V::Address), ("--oif", V::Interface)]),
    ),
    (
        "TOS",
        Some(&[
            ("--set-tos", V::Tos),
            ("--and-tos", V::U32),
            ("--or-tos", V::U32),
            ("--xor-tos", V::U32),
        ]),
    ),
    (
        "TTL",
        Some(&[
            ("--ttl-set", V::U32),
            ("--ttl-dec", V::U32),
            ("--ttl-inc", V::U32),
        ]),
    ),
    ("ULOG", None),
];

/// Generic options and whether they take a value.
fn generic(word: &str) -> Option<(&'static str, V)> {
    Some(match word {
        "-s" | "--source" | "--src" => ("-s", V::Address),
        "-d" | "--destination" | "--dst" => ("-d", V::Address),
        "-i" | "--in-interface" => ("-i", V::Interface),
        "-o" | "--out-interface" => ("-o", V::Interface),
        "-p" | "--protocol" => ("-p", V::Any),
        "-f" | "--fragment" => ("-f", V::Flag),
        "-c" | "--set-counters" => ("-c", V::Counters),
        _ => return None,
    })
}

/// The longest chain or target name iptables takes (`XT_EXTENSION_MAXNAMELEN` - 1).
const MAX_NAME: usize = 28;

/// One loaded extension: its options, and which of them were given.
struct Loaded {
    name: &'static str,
    options: Option<&'static [Opt]>,
    seen: Vec<&'static str>,
}

/// Is `value` the rest of the word `option` started (`-s10.0.0.1`, split by the
/// splitter), not a word of its own?
fn glued(option: &Word, value: &Word) -> bool {
    option.len == 2 && !value.quoted && value.start == option.start + 2
}

/// Says what `iptables` `version` does with a value glued to the short option `opt`
/// (`word` is the whole word as written): `Err` with the reason when it refuses the
/// rule. See [`super::dialect`] for the versions.
fn glued_refused(opt: &str, word: &str, version: IptablesVersion) -> Result<(), String> {
    if !version.takes_glued_word_whole() {
        return Ok(());
    }
    let why = match opt {
        // xtables_parse_interface() takes any name shorter than IFNAMSIZ.
        "-i" | "-o" if word.len() < 16 => return Ok(()),
        "-i" | "-o" => "an interface name longer than 15 bytes",
        "-s" | "-d" => "no such host or network",
        "-p" => "an unknown protocol",
        _ => "no such target or chain",
    };
    Err(format!(
        "value glued to {opt}: iptables {version} takes the whole word {word:?} as the value ({why}); \
         write `{opt} {}` (iptables 1.8.8 and 1.8.9 read glued values so; earlier and later versions read the word's rest)",
        &word[2..]
    ))
}

/// A value glued to `opt` as `dialect` reads it: `Err` when the version that reads the
/// rule refuses it, a note when no reading version is named and the writing version
/// (if known) is one that takes the whole word, else nothing.
fn glued_verdict(opt: &str, word: &str, dialect: Dialect) -> Result<Option<String>, String> {
    match dialect.binding() {
        Some(v) => glued_refused(opt, word, v).map(|()| None),
        None => Ok(dialect
            .version
            .is_none_or(IptablesVersion::takes_glued_word_whole)
            .then(|| glued_note(opt, word))),
    }
}

/// The note for a glued value when the version is unknown.
fn glued_note(opt: &str, word: &str) -> String {
    format!(
        "value glued to {opt} ({word:?}): read as `{opt} {}`, as iptables up to 1.8.7 and from 1.8.10 do; \
         iptables 1.8.8 and 1.8.9 take the whole word as the value{}",
        &word[2..],
        match opt {
            "-i" | "-o" if word.len() < 16 => " (an interface of that name)",
            _ => " and refuse the rule",
        }
    )
}

/// Checks `words` of `text` (a rule of `chain`, when known) as iptables-restore of
/// `dialect` reads them; appends what it refuses to `problems`, and to `notes` where
/// iptables versions differ and the version is unknown. The first refusal ends the
/// check, as iptables stops at its first error.
pub(super) fn check(
    text: &str,
    words: &[Word],
    chain: Option<&str>,
    dialect: Dialect,
    problems: &mut Vec<SpecProblem>,
    notes: &mut Vec<SpecProblem>,
) {
    let mut c = RuleCheck {
        text,
        dialect,
        problems,
        notes,
        matches: Vec::new(),
        target: None,
        generic_seen: Vec::new(),
        protocol: None,
        protocol_negated: false,
    };
    let mut bang = false;
    let mut i = 0;
    while i < words.len() {
        let w = &words[i];
        let raw = w.raw(text);
        if w.len >= 1024 {
            c.say(
                w,
                "word longer than 1023 bytes (iptables: Parameter too long!)".into(),
            );
            return;
        }
        if w.is_bang(text) {
            if bang {
                c.say(w, "multiple \"!\" flags are not allowed".into());
                return;
            }
            bang = true;
            i += 1;
            continue;
        }
        if !raw.starts_with('-') || raw == "-" || w.quoted {
            c.say(w, format!("Bad argument {raw:?}: no option takes it"));
            return;
        }
        let negated = std::mem::take(&mut bang);
        let next = words.get(i + 1);
        if raw == "--" {
            // getopt's end of options: any word after it is refused.
            if let Some(n) = next {
                c.say(
                    n,
                    "word after \"--\" (iptables: unknown arguments found on commandline)".into(),
                );
                return;
            }
            break;
        }
        if raw == "--help" {
            // iptables' own --help: it prints the help and reads nothing further.
            return;
        }
        // A value glued to its short option (`-s10.0.0.1`, `-jACCEPT`): the splitter
        // gives it as a word of its own, and the dialect decides (`glued_verdict`).
        let step = match raw {
            "-m" | "--match" => c.load_match(raw, w, next).map(|()| i + 2),
            "-j" | "--jump" | "-g" | "--goto" => c.load_target(raw, w, next).map(|()| i + 2),
            _ => c.option(words, i, raw, negated),
        };
        match step {
            Some(next_i) => i = next_i,
            None => return,
        }
    }
    if bang {
        c.problems.push(SpecProblem {
            offset: text.len(),
            message: "\"!\" at the end of the rule negates nothing".into(),
        });
        return;
    }
    c.whole_rule(words, chain);
}

/// The state of one rule's check: the extensions loaded so far (`-m`, `-j`), the
/// generic options seen, the protocol, and where refusals and notes go.
struct RuleCheck<'a> {
    text: &'a str,
    dialect: Dialect,
    problems: &'a mut Vec<SpecProblem>,
    notes: &'a mut Vec<SpecProblem>,
    matches: Vec<Loaded>,
    target: Option<Loaded>,
    generic_seen: Vec<&'static str>,
    protocol: Option<String>,
    protocol_negated: bool,
}

impl RuleCheck<'_> {
    /// Refuses the rule at `w`.
    fn say(&mut self, w: &Word, message: String) {
        self.problems.push(SpecProblem {
            offset: w.start as usize,
            message,
        })
    }

    /// Notes, at `w`, something iptables versions read differently.
    fn note(&mut self, w: &Word, message: String) {
        self.notes.push(SpecProblem {
            offset: w.start as usize,
            message,
        })
    }

    /// `-m NAME`: loads a match (its options become valid). None: refused.
    fn load_match(&mut self, raw: &str, w: &Word, next: Option<&Word>) -> Option<()> {
        let Some(n) = next else {
            self.say(w, format!("{raw} needs a match name"));
            return None;
        };
        let name = n.value(self.text);
        match MATCHES.iter().find(|(m, _)| *m == name) {
            Some((m, options)) => self.matches.push(Loaded {
                name: m,
                options: *options,
                seen: Vec::new(),
            }),
            None => {
                self.say(
                    n,
                    format!("unknown match {name:?} (iptables: Couldn't load match)"),
                );
                return None;
            }
        }
        Some(())
    }

    /// `-j`/`-g NAME`: the target (or chain) of the rule. None: refused.
    fn load_target(&mut self, raw: &str, w: &Word, next: Option<&Word>) -> Option<()> {
        let Some(n) = next else {
            self.say(w, format!("{raw} needs a target or chain name"));
            return None;
        };
        if raw == "-j" && glued(w, n) {
            let word = &self.text[w.start as usize..n.start as usize + n.len as usize];
            match glued_verdict(raw, word, self.dialect) {
                Err(why) => {
                    self.say(w, why);
                    return None;
                }
                Ok(Some(n)) => self.note(w, n),
                Ok(None) => {}
            }
        }
        let name = n.value(self.text);
        if self.target.is_some() {
            self.say(w, "more than one target (-j/-g) in one rule".into());
            return None;
        }
        if name.is_empty() || name.len() > MAX_NAME || name.starts_with('-') {
            self.say(n, format!("invalid target or chain name {name:?}"));
            return None;
        }
        let known = TARGETS.iter().find(|(t, _)| *t == name);
        self.target = Some(Loaded {
            name: known.map_or("", |(t, _)| t),
            // A chain takes no options.
            options: known.map_or(Some(&[][..]), |(_, o)| *o),
            seen: Vec::new(),
        });
        Some(())
    }

    /// The option at `words[i]` (generic, or of a loaded extension) and its values;
    /// the index of the next word, None when the rule is refused.
    fn option(&mut self, words: &[Word], i: usize, raw: &str, negated: bool) -> Option<usize> {
        let mut i = i;
        let w = &words[i];
        // An ordinary option: generic, or of a loaded extension.
        let (name, kind, owner) = if let Some((short, kind)) = generic(raw) {
            if self.generic_seen.contains(&short) {
                self.say(w, format!("multiple {raw} flags are not allowed"));
                return None;
            }
            self.generic_seen.push(short);
            (short, kind, None)
        } else {
            match lookup(
                raw,
                &mut self.matches,
                &mut self.target,
                self.protocol.as_deref(),
            ) {
                Lookup::Found(name, kind, owner) => (name, kind, Some(owner)),
                Lookup::Unchecked => {
                    // An extension whose options are not listed: take the words
                    // up to the next option, as the grouping does.
                    // An extension whose options are not listed: the option takes
                    // the next word unless that is an option (a flag then).
                    let _ = negated;
                    i += 1;
                    if words.get(i).is_some_and(|w| w.is_bang(self.text))
                        && words.get(i + 1).is_some_and(|w| !w.is_option(self.text))
                    {
                        i += 1;
                    }
                    if words
                        .get(i)
                        .is_some_and(|w| !w.is_option(self.text) && !w.is_bang(self.text))
                    {
                        i += 1;
                    }
                    return Some(i);
                }
                Lookup::Unknown => {
                    self.say(w, format!("unknown option {raw:?}"));
                    return None;
                }
            }
        };
        if let Some(owner) = owner {
            let loaded = match owner {
                Owner::Match(m) => &mut self.matches[m],
                Owner::Target => self.target.as_mut().expect("found in it"),
            };
            // policy repeats its element options after each `--next`.
            if loaded.seen.contains(&name) && loaded.name != "policy" {
                self.say(w, format!("multiple {name} flags are not allowed"));
                return None;
            }
            loaded.seen.push(name);
        }
        i += 1;
        let arity = match kind {
            V::Flag => 0,
            V::Two => 2,
            _ => 1,
        };
        if arity == 0 {
            return Some(i);
        }
        // `--opt ! value`: the negation's old place, which iptables-save up to 1.4.2
        // wrote (`-d ! 10.0.0.0/8`) and iptables before 1.4.12 read; later versions
        // take the "!" as the value (and then refuse the word after it).
        if let Some(b) = words.get(i).filter(|w| w.is_bang(self.text))
            && words
                .get(i + 1)
                .is_some_and(|v| !v.is_option(self.text) && !v.is_bang(self.text))
        {
            match self.dialect.binding() {
                Some(v) if v.reads_old_negation() => i += 1,
                Some(v) => {
                    self.say(
                        b,
                        format!(
                            "\"!\" after {raw}: the negation's old place (`{raw} ! VALUE`), which iptables {v} takes as the value \"!\" (only iptables before {} read it; write `! {raw} VALUE`)",
                            IptablesVersion::NO_OLD_NEGATION
                        ),
                    );
                    return None;
                }
                None if self
                    .dialect
                    .version
                    .is_some_and(IptablesVersion::reads_old_negation) =>
                {
                    i += 1;
                }
                None => {
                    self.note(
                        b,
                        format!(
                            "\"!\" after {raw}: the negation's old place (`{raw} ! VALUE`), read as `! {raw} VALUE` as iptables before {} did; later versions refuse the rule",
                            IptablesVersion::NO_OLD_NEGATION
                        ),
                    );
                    i += 1;
                }
            }
        } else if self
            .dialect
            .binding()
            .is_none_or(IptablesVersion::reads_old_negation)
            && words.get(i).is_some_and(|w| w.is_bang(self.text))
        {
            i += 1;
        }
        let Some(arg) = words.get(i) else {
            self.say(w, format!("option {raw} requires an argument"));
            return None;
        };
        if matches!(name, "-s" | "-d" | "-p" | "-i" | "-o") && glued(w, arg) {
            let word = &self.text[w.start as usize..arg.start as usize + arg.len as usize];
            match glued_verdict(raw, word, self.dialect) {
                Err(why) => {
                    self.say(w, why);
                    return None;
                }
                Ok(Some(n)) => self.note(w, n),
                Ok(None) => {}
            }
        }
        let value = arg.value(self.text);
        if arity == 2 {
            let second = words.get(i + 1).filter(|s| {
                let r = s.raw(self.text);
                !r.starts_with('-') && !r.starts_with('!')
            });
            let Some(second) = second else {
                self.say(w, format!("{raw} requires two arguments"));
                return None;
            };
            if name == "--chunk-types"
                && let Some(bad) = unknown_sctp_chunk(&second.value(self.text))
            {
                self.say(
                    second,
                    format!("unknown SCTP chunk {bad:?} for {raw} (iptables: Unknown sctp chunk)"),
                );
                return None;
            }
            i += 2;
            return Some(i);
        }
        if kind == V::Counters
            && !value.contains(',')
            && words.get(i + 1).is_some_and(|w| {
                let r = w.raw(self.text);
                !r.starts_with('-') && !r.starts_with('!')
            })
        {
            i += 1; // `-c PACKETS BYTES`
            let bytes = words[i].value(self.text);
            if bytes.parse::<u64>().is_err() {
                self.say(
                    &words[i],
                    format!("bad value {bytes:?} for -c: byte counter not numeric"),
                );
                return None;
            }
        }
        if matches!(kind, V::Prefix(_)) && unterminated(arg.raw(self.text)) {
            self.say(
                arg,
                format!(
                    "{raw}: an unterminated quote takes the line's end (iptables: Newlines not allowed)"
                ),
            );
            return None;
        }
        if let Err(why) = valid(kind, &value) {
            self.say(arg, format!("bad value {value:?} for {raw}: {why}"));
            return None;
        }
        if kind == V::Address
            && self.dialect.ip6
            && let Some(v4) = value.split(',').find(|a| {
                let a = a.split_once('/').map_or(*a, |(a, _)| a);
                a.parse::<std::net::Ipv4Addr>().is_ok() || inet_aton(a)
            })
        {
            self.say(
                arg,
                format!(
                    "bad value {value:?} for {raw}: {v4:?} is an IPv4 address in an ip6tables rule (ip6tables: Address family for hostname not supported)"
                ),
            );
            return None;
        }
        if name == "-p" {
            self.protocol_negated = negated;
            self.protocol = Some(value.to_ascii_lowercase());
            if !valid_protocol(&value) {
                self.say(arg, format!("unknown protocol {value:?}"));
                return None;
            }
        }
        Some(i + 1)
    }

    /// What holds for the rule as a whole: interfaces the chain never sees, multiport's
    /// protocol, string's --algo, the options an extension requires.
    fn whole_rule(&mut self, words: &[Word], chain: Option<&str>) {
        // Built-in chains that see packets only one way refuse the other interface.
        let wrong_way = match chain {
            Some("PREROUTING" | "INPUT") => Some("-o"),
            Some("POSTROUTING" | "OUTPUT") => Some("-i"),
            _ => None,
        };
        if let Some(opt) = wrong_way
            && self.generic_seen.contains(&opt)
            && let Some(w) = words
                .iter()
                .find(|w| generic(w.raw(self.text)).is_some_and(|(s, _)| s == opt))
        {
            self.problems.push(SpecProblem {
                offset: w.start as usize,
                message: format!(
                    "{opt} in chain {}: iptables refuses it (Can't use {opt} with {})",
                    chain.unwrap_or_default(),
                    chain.unwrap_or_default()
                ),
            });
            return;
        }
        if self.matches.iter().any(|m| m.name == "multiport")
            && (self.protocol_negated
                || !self.protocol.as_deref().is_some_and(|p| {
                    matches!(
                        p,
                        "tcp"
                            | "udp"
                            | "udplite"
                            | "sctp"
                            | "dccp"
                            | "6"
                            | "17"
                            | "136"
                            | "132"
                            | "33"
                    )
                }))
        {
            let at = words.first().map_or(0, |w| w.start as usize);
            self.problems.push(SpecProblem {
                offset: at,
                message: "multiport needs -p tcp, udp, udplite, sctp or dccp".into(),
            });
            return;
        }
        if let Some(m) = self.matches.iter().find(|m| m.name == "string")
            && !m.seen.contains(&"--algo")
            && super::dialect::string_needs_algo(self.dialect.binding())
        {
            let at = words.last().map_or(0, |w| w.start as usize);
            self.problems.push(SpecProblem {
                offset: at,
                message: format!(
                    "string needs --algo (iptables {}: option \"--algo\" must be specified; mandatory since 1.3.4)",
                    self.dialect.binding().expect("known")
                ),
            });
            return;
        }
        for l in self.matches.iter().chain(self.target.as_ref()) {
            for (_, one_of) in REQUIRED.iter().filter(|(n, _)| *n == l.name) {
                if l.seen.iter().any(|s| one_of.contains(s)) {
                    continue;
                }
                let at = words.last().map_or(0, |w| w.start as usize);
                self.problems.push(SpecProblem {
                    offset: at,
                    message: format!("{} needs one of {}", l.name, one_of.join(", ")),
                });
                return;
            }
        }
    }
}

/// The chunk of an sctp `--chunk-types` list that is none of libxt_sctp.c's
/// `sctp_chunk_names` (compared with strcasecmp(), each optionally `:FLAGS`); `ALL`
/// and `NONE` stand alone.
fn unknown_sctp_chunk(list: &str) -> Option<String> {
    const CHUNKS: &[&str] = &[
        "DATA",
        "INIT",
        "INIT_ACK",
        "SACK",
        "HEARTBEAT",
        "HEARTBEAT_ACK",
        "ABORT",
        "SHUTDOWN",
        "SHUTDOWN_ACK",
        "ERROR",
        "COOKIE_ECHO",
        "COOKIE_ACK",
        "ECN_ECNE",
        "ECN_CWR",
        "SHUTDOWN_COMPLETE",
        "I_DATA",
        "RE_CONFIG",
        "PAD",
        "ASCONF",
        "ASCONF_ACK",
        "FORWARD_TSN",
        "I_FORWARD_TSN",
    ];
    if list.eq_ignore_ascii_case("ALL") || list.eq_ignore_ascii_case("NONE") {
        return None;
    }
    list.split(',')
        .map(|c| c.split_once(':').map_or(c, |(n, _)| n))
        .find(|c| !CHUNKS.iter().any(|k| k.eq_ignore_ascii_case(c)))
        .map(str::to_string)
}

/// The extension `iptables` loads for protocol `p` given to `-p`: iptables'
/// `xtables_chain_protos` names and numbers (libxtables), aliases included. Other
/// numbers are looked up in the host's /etc/protocols and stay as written.
fn protocol_extension(p: &str) -> &str {
    match p {
        "6" => "tcp",
        "17" => "udp",
        "132" => "sctp",
        "136" => "udplite",
        "1" => "icmp",
        "58" | "ipv6-icmp" => "icmpv6",
        "50" => "esp",
        "51" => "ah",
        "135" | "mobility-header" | "ipv6-mh" => "mh",
        other => other,
    }
}

/// Extensions that refuse to load without one of these options.
const REQUIRED: &[(&str, &[&str])] = &[
    ("comment", &["--comment"]),
    ("mark", &["--mark"]),
    ("connmark", &["--mark"]),
    ("state", &["--state"]),
    ("statistic", &["--mode"]),
    ("set", &["--match-set", "--set"]),
    (
        "multiport",
        &[
            "--sports",
            "--source-ports",
            "--dports",
            "--destination-ports",
            "--ports",
        ],
    ),
    ("conntrack", super::CONNTRACK_OPTIONS),
    (
        "physdev",
        &[
            "--physdev-in",
            "--physdev-out",
            "--physdev-is-in",
            "--physdev-is-out",
            "--physdev-is-bridged",
        ],
    ),
    ("length", &["--length"]),
    ("pkttype", &["--pkt-type"]),
    ("helper", &["--helper"]),
    ("tcpmss", &["--mss"]),
    ("nfacct", &["--nfacct-name"]),
    ("mac", &["--mac-source"]),
    ("iprange", &["--src-range", "--dst-range"]),
    ("SNAT", &["--to-source"]),
    (
        "MARK",
        &[
            "--set-mark",
            "--set-xmark",
            "--and-mark",
            "--or-mark",
            "--xor-mark",
        ],
    ),
    (
        "CONNMARK",
        &[
            "--set-mark",
            "--set-xmark",
            "--and-mark",
            "--or-mark",
            "--xor-mark",
            "--save-mark",
            "--restore-mark",
        ],
    ),
    ("TCPMSS", &["--set-mss", "--clamp-mss-to-pmtu"]),
    ("TPROXY", &["--on-port"]),
    ("HMARK", &["--hmark-mod"]),
    // RATEEST needs all three, since the extension was added (2528258d, 2008).
    ("RATEEST", &["--rateest-name"]),
    ("RATEEST", &["--rateest-interval"]),
    ("RATEEST", &["--rateest-ewmalog"]),
    ("SET", &["--add-set", "--del-set", "--map-set"]),
    ("DNAT", &["--to-destination"]),
    ("addrtype", &["--src-type", "--dst-type"]),
    ("icmp", &["--icmp-type"]),
    ("recent", &["--set", "--rcheck", "--update", "--remove"]),
    ("ecn", &["--ecn-tcp-cwr", "--ecn-tcp-ece", "--ecn-ip-ect"]),
    ("connbytes", &["--connbytes"]),
    ("connbytes", &["--connbytes-dir"]),
    ("connbytes", &["--connbytes-mode"]),
    ("cpu", &["--cpu"]),
    ("dscp", &["--dscp", "--dscp-class"]),
    ("hashlimit", &["--hashlimit-name"]),
    (
        "hashlimit",
        &["--hashlimit", "--hashlimit-upto", "--hashlimit-above"],
    ),
    ("ipv6header", &["--header"]),
    ("realm", &["--realm"]),
    ("string", &["--string", "--hex-string"]),
    // `--algo` too from iptables 1.3.4 (`dialect::string_needs_algo`, checked by
    // version); older dumps have string matches without it.
    ("tos", &["--tos"]),
    ("ttl", &["--ttl-eq", "--ttl-lt", "--ttl-gt"]),
    ("u32", &["--u32"]),
    ("AUDIT", &["--type"]),
    ("CHECKSUM", &["--checksum-fill"]),
    ("CLASSIFY", &["--set-class"]),
    ("CONNSECMARK", &["--save", "--restore"]),
    ("DSCP", &["--set-dscp", "--set-dscp-class"]),
    ("HL", &["--hl-set", "--hl-dec", "--hl-inc"]),
    ("IDLETIMER", &["--timeout"]),
    ("NETMAP", &["--to"]),
    ("SECMARK", &["--selctx"]),
    ("TEE", &["--gateway"]),
    ("TOS", &["--set-tos", "--and-tos", "--or-tos", "--xor-tos"]),
    ("TTL", &["--ttl-set", "--ttl-dec", "--ttl-inc"]),
];

#[derive(Clone, Copy)]
enum Owner {
    Match(usize),
    Target,
}

enum Lookup {
    Found(&'static str, V, Owner),
    /// Some loaded extension does not list its options: it may own this one.
    Unchecked,
    Unknown,
}

/// Finds the option among the target's and the loaded matches' (the last loaded
/// first); a unique prefix of a long option name is that option. With `-p` given
/// and no match owning the option, the protocol's match is loaded (as iptables does).
fn lookup(
    raw: &str,
    matches: &mut Vec<Loaded>,
    target: &mut Option<Loaded>,
    protocol: Option<&str>,
) -> Lookup {
    let mut owners: Vec<(Owner, Option<&'static [Opt]>)> = Vec::new();
    if let Some(t) = target.as_ref() {
        owners.push((Owner::Target, t.options));
    }
    for (m, l) in matches.iter().enumerate().rev() {
        owners.push((Owner::Match(m), l.options));
    }
    let find = |owners: &[(Owner, Option<&'static [Opt]>)]| {
        for &(owner, opts) in owners {
            if let Some(&(n, k)) = opts.into_iter().flatten().find(|(n, _)| *n == raw) {
                return Some((n, k, owner));
            }
        }
        if raw.starts_with("--") && raw.len() > 2 {
            let mut found = None;
            let mut count = 0;
            for &(owner, opts) in owners {
                for &(n, k) in opts.into_iter().flatten() {
                    if n.starts_with(raw) {
                        count += 1;
                        found = Some((n, k, owner));
                    }
                }
            }
            if count == 1 {
                return found;
            }
        }
        None
    };
    if let Some((n, k, o)) = find(&owners) {
        return Lookup::Found(n, k, o);
    }
    if owners.iter().any(|(_, o)| o.is_none()) {
        return Lookup::Unchecked;
    }
    let protocol = protocol.map(protocol_extension);
    if target.is_none()
        && let Some(p) = protocol
        && let Some((m, opts)) = MATCHES.iter().find(|(m, _)| *m == p)
    {
        matches.push(Loaded {
            name: m,
            options: *opts,
            seen: Vec::new(),
        });
        return lookup(raw, matches, target, None);
    }
    if target.is_none() && protocol.is_some_and(|p| !MATCHES.iter().any(|(m, _)| *m == p)) {
        // A protocol without a listed match (`-p 47`): iptables would try to load one.
        return Lookup::Unchecked;
    }
    Lookup::Unknown
}

fn valid_protocol(p: &str) -> bool {
    const NAMES: &[&str] = &[
        "all",
        "tcp",
        "udp",
        "udplite",
        "icmp",
        "icmpv6",
        "ipv6-icmp",
        "esp",
        "ah",
        "sctp",
        "mh",
        "dccp",
        "gre",
        "ipv6",
        "igmp",
        "ipip",
        "ipencap",
        "ospf",
        "vrrp",
        "pim",
        "l2tp",
        "ipv6-frag",
        "ipv6-route",
        "ipv6-opts",
        "ipv6-nonxt",
        "hopopt",
        "ipcomp",
        "encap",
        "egp",
        "pup",
        "idp",
        "rdp",
        "xtp",
        "ddp",
        "idpr-cmtp",
        "rsvp",
        "skip",
        "rspf",
        "vmtp",
        "eigrp",
        "ax.25",
        "etherip",
        "isis",
        "fc",
        "mptcp",
        "ggp",
        "st",
        "igp",
        "ipx-in-ip",
        "manet",
        "hip",
        "shim6",
        "wesp",
        "rohc",
        "ethernet",
        "mobility-header",
        "ipv6-mh",
    ];
    let lower = p.to_ascii_lowercase();
    NAMES.contains(&lower.as_str()) || p.parse::<u8>().is_ok()
}

fn number(s: &str) -> Option<u64> {
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        return u64::from_str_radix(h, 16).ok();
    }
    if s.len() > 1 && s.starts_with('0') && s.bytes().all(|b| b.is_ascii_digit()) {
        return u64::from_str_radix(s, 8).ok();
    }
    s.parse().ok()
}

fn port(s: &str) -> bool {
    const NAMES: &[&str] = &[
        "ftp-data",
        "ftp",
        "ssh",
        "telnet",
        "smtp",
        "domain",
        "http",
        "www",
        "pop3",
        "ntp",
        "imap2",
        "snmp",
        "https",
        "imaps",
        "pop3s",
        "bootps",
        "bootpc",
        "tftp",
        "ldap",
        "ldaps",
        "submission",
        "mysql",
        "postgresql",
        "redis",
        "kerberos",
        "syslog",
    ];
    s.parse::<u16>().is_ok() || NAMES.contains(&s)
}

fn valid(kind: V, v: &str) -> Result<(), &'static str> {
    let ok = match kind {
        V::Flag | V::Any | V::Two => true,
        V::PortRange => {
            let parts: Vec<&str> = v.split(':').collect();
            match parts.as_slice() {
                [p] => port(p),
                [a, b] => (a.is_empty() || port(a)) && (b.is_empty() || port(b)),
                _ => false,
            }
        }
        V::PortList => {
            let items: Vec<&str> = v.split(',').collect();
            items.len() <= 15
                && items
                    .iter()
                    .all(|p| valid(V::PortRange, p).is_ok() && !p.is_empty())
        }
        V::U32 => number(v).is_some_and(|n| n <= u32::MAX as u64),
        V::Range => {
            let mut it = v.split(':');
            let ok = |s: Option<&str>| s.is_none_or(|s| s.is_empty() || number(s).is_some());
            let (a, b) = (it.next(), it.next());
            it.next().is_none() && !v.is_empty() && ok(a) && ok(b)
        }
        V::Mark => {
            let (a, m) = v.split_once('/').map_or((v, None), |(a, m)| (a, Some(m)));
            number(a).is_some_and(|n| n <= u32::MAX as u64)
                && m.is_none_or(|m| number(m).is_some_and(|n| n <= u32::MAX as u64))
        }
        // Each state is compared over the length given, case-insensitively
        // (`strncasecmp`): any prefix of a state's name is that state.
        V::CtState => v.split(',').all(|s| {
            state_prefix(
                s,
                &[
                    "INVALID",
                    "NEW",
                    "ESTABLISHED",
                    "RELATED",
                    "UNTRACKED",
                    "SNAT",
                    "DNAT",
                ],
            )
        }),
        V::State => v.split(',').all(|s| {
            state_prefix(
                s,
                &["INVALID", "ESTABLISHED", "NEW", "RELATED", "UNTRACKED"],
            )
        }),
        V::Address => v.split(',').all(address),
        V::Probability => v.parse::<f64>().is_ok_and(|p| (0.0..=1.0).contains(&p)),
        V::StatisticMode => matches!(v, "random" | "nth"),
        V::Text(max) => v.len() <= max,
        V::Choice(names) => names.iter().any(|n| n.eq_ignore_ascii_case(v)),
        V::Choices(names) => v.split(',').all(|w| state_prefix(w, names)),
        V::ChoiceList(names) => v
            .split(',')
            .all(|w| names.iter().any(|n| n.eq_ignore_ascii_case(w))),
        V::NatRange => nat_range(v),
        V::Prefix(max) => v.len() <= max && !v.contains('\n'),
        V::Tos => {
            matches!(
                v,
                "Minimize-Delay"
                    | "Maximize-Throughput"
                    | "Maximize-Reliability"
                    | "Minimize-Cost"
                    | "Normal-Service"
            ) || valid(V::Mark, v).is_ok()
        }
        V::Rate => {
            let (n, unit) = v.split_once('/').map_or((v, None), |(n, u)| (n, Some(u)));
            n.parse::<u32>().is_ok_and(|n| n > 0)
                && unit.is_none_or(|u| {
                    !u.is_empty()
                        && ["second", "minute", "hour", "day"]
                            .iter()
                            .any(|full| full.starts_with(u))
                })
        }
        V::Interface => !v.is_empty() && v.len() <= 15,
        V::Counters => v.split(',').all(|n| n.parse::<u64>().is_ok()),
    };
    if ok {
        Ok(())
    } else {
        Err("not a valid value for this option")
    }
}

/// `[ADDR[-ADDR]][:PORT[-PORT]]` as the NAT targets read it (IPv6 in brackets when a
/// port follows).
fn nat_range(v: &str) -> bool {
    let (addrs, ports) = if let Some(rest) = v.strip_prefix('[') {
        match rest.split_once(']') {
            Some((a, "")) => (a, None),
            Some((a, p)) => match p.strip_prefix(':') {
                Some(p) => (a, Some(p)),
                None => return false,
            },
            None => return false,
        }
    } else if v.matches(':').count() > 1 {
        (v, None) // a bare IPv6 address or range
    } else {
        match v.split_once(':') {
            Some((a, p)) => (a, Some(p)),
            None => (v, None),
        }
    };
    let addr_ok = addrs.is_empty()
        || addrs.split('-').count() <= 2
            && addrs.split('-').all(|a| {
                a.parse::<std::net::Ipv4Addr>().is_ok() || a.parse::<std::net::Ipv6Addr>().is_ok()
            });
    // `PORT[-PORT][/OFFSET]`, ports by number or service name.
    let ports_ok = ports.is_none_or(|p| {
        let (range, offset) = p.split_once('/').map_or((p, None), |(r, o)| (r, Some(o)));
        !range.is_empty()
            && (port(range) || range.split('-').count() <= 2 && range.split('-').all(port))
            && offset.is_none_or(port)
    });
    !(addrs.is_empty() && ports.is_none()) && addr_ok && ports_ok
}

/// Whether a word's quote is left open (iptables-restore then keeps the line's
/// newline in the word).
fn unterminated(raw: &str) -> bool {
    let mut in_quotes = false;
    let mut bytes = raw.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'"' => in_quotes = !in_quotes,
            b'\\' if in_quotes => {
                bytes.next();
            }
            _ => {}
        }
    }
    in_quotes
}

/// Whether `s` is a prefix (case-insensitive) of one of `names`.
fn state_prefix(s: &str, names: &[&str]) -> bool {
    !s.is_empty()
        && names.iter().any(|n| {
            n.len() >= s.len() && n.as_bytes()[..s.len()].eq_ignore_ascii_case(s.as_bytes())
        })
}

/// An IPv4 or IPv6 address with an optional `/prefix` or `/mask`.
fn address(s: &str) -> bool {
    let (a, m) = s.split_once('/').map_or((s, None), |(a, m)| (a, Some(m)));
    let v4 = a.parse::<std::net::Ipv4Addr>().is_ok() || inet_aton(a);
    let v6 = a.parse::<std::net::Ipv6Addr>().is_ok();
    if !v4 && !v6 {
        return false;
    }
    m.is_none_or(|m| {
        let max = if v4 { 32 } else { 128 };
        m.parse::<u8>().is_ok_and(|p| p <= max)
            || (v4 && m.parse::<std::net::Ipv4Addr>().is_ok())
            || (v6 && m.parse::<std::net::Ipv6Addr>().is_ok())
    })
}

/// The shorter IPv4 forms inet_aton takes (`10.80` is 10.0.0.80, `1` is 0.0.0.1),
/// which iptables accepts.
fn inet_aton(s: &str) -> bool {
    let parts: Vec<&str> = s.split('.').collect();
    if parts.is_empty() || parts.len() > 4 || parts.iter().any(|p| p.is_empty()) {
        return false;
    }
    let nums: Vec<Option<u64>> = parts.iter().map(|p| number(p)).collect();
    if nums.iter().any(Option::is_none) {
        return false;
    }
    let nums: Vec<u64> = nums.into_iter().flatten().collect();
    let last_bits = 8 * (5 - nums.len() as u32);
    let (head, last) = nums.split_at(nums.len() - 1);
    head.iter().all(|&n| n <= 255) && last[0] < (1u64 << last_bits.min(32)).max(256)
}
