//! Printing rules exactly as `iptables-save` prints them.
//!
//! Input may be in any order iptables accepts (kube-proxy writes
//! `-m comment ... -m tcp -p tcp -d X --dport 80`); output is the canonical save
//! form: generic options first (`-s -d -i -o -p -f`), addresses masked with a
//! prefix length, then each match with its options in the extension's save order
//! and values normalised (`--sport 4:4` -> `--sport 4`, `--or-mark 0x4000` ->
//! `--set-xmark 0x4000/0x4000`), then the target. Text already in save form prints
//! unchanged: a rule from `iptables-save` round-trips byte for byte.
//!
//! Extensions plumb has no knowledge of print their options as written: nothing is
//! dropped. The save orders and defaults below were read from iptables' extension
//! sources (extensions/libxt_*.c `*_save` functions) and checked against the
//! iptables conformance suite (`extensions/*.t`, see tests/iptables_conformance.rs).

use crate::model::Family;
use crate::model::xt::{XtOptionView, XtView};
use std::fmt::Write;
use std::net::{Ipv4Addr, Ipv6Addr};

/// One normalised option ready to print.
struct Printed {
    negated: bool,
    name: String,
    args: Vec<String>,
}

impl Printed {
    fn new(negated: bool, name: &str, args: Vec<String>) -> Printed {
        Printed {
            negated,
            name: name.to_string(),
            args,
        }
    }
}

/// Why a rule could not be put in canonical form (it is then printed as written).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotCanonical(pub String);

/// The canonical `-A CHAIN ...` line for a rule (without counters).
pub fn rule_line(chain: &str, rule: &XtView<'_>, family: Family) -> String {
    let mut out = String::with_capacity(128);
    out.push_str("-A ");
    out.push_str(chain);
    write_spec(&mut out, rule, family);
    out
}

/// Appends the canonical options of `rule` (each preceded by a space) to `out`.
pub fn write_spec(out: &mut String, rule: &XtView<'_>, family: Family) {
    // Generic options in save order.
    for short in ["-s", "-d", "-i", "-o", "-p", "-f"] {
        if let Some(o) = rule.generic_option(short)
            && let Some(p) = generic(short, &o, family)
        {
            emit(out, &p);
        }
    }
    // Options that belong to no match are kept where iptables would have failed.
    for o in rule.generic() {
        if !matches!(
            o.name(),
            "-s" | "--source"
                | "--src"
                | "-d"
                | "--destination"
                | "--dst"
                | "-i"
                | "--in-interface"
                | "-o"
                | "--out-interface"
                | "-p"
                | "--protocol"
                | "-f"
                | "--fragment"
        ) {
            emit(out, &verbatim(&o));
        }
    }
    let protocol = rule
        .generic_option("-p")
        .and_then(|o| o.arg(0))
        .map(|p| protocol_name(&p).to_string());
    for m in rule.matches() {
        let module = if m.implicit() {
            protocol_name(m.module())
        } else {
            m.module()
        };
        out.push_str(" -m ");
        out.push_str(module);
        let opts: Vec<XtOptionView<'_>> = m.options().collect();
        for p in match_options(module, &opts, family, protocol.as_deref()) {
            emit(out, &p);
        }
    }
    if let Some(t) = rule.target() {
        out.push_str(if t.is_goto() { " -g " } else { " -j " });
        out.push_str(t.name());
        let opts: Vec<XtOptionView<'_>> = t.options().collect();
        for p in target_options(t.name(), &opts, family) {
            emit(out, &p);
        }
    }
}

fn emit(out: &mut String, p: &Printed) {
    if p.negated {
        out.push_str(" !");
    }
    out.push(' ');
    out.push_str(&p.name);
    for a in &p.args {
        out.push(' ');
        out.push_str(a);
    }
}

fn verbatim(o: &XtOptionView<'_>) -> Printed {
    Printed {
        negated: o.negated(),
        name: o.name().to_string(),
        args: o.raw_args().map(str::to_string).collect(),
    }
}

fn generic(short: &str, o: &XtOptionView<'_>, family: Family) -> Option<Printed> {
    let raw = o.raw_arg(0).unwrap_or("");
    let value = match short {
        "-s" | "-d" => {
            let a = address(raw, family).unwrap_or_else(|| raw.to_string());
            if !o.negated() && (a == "0.0.0.0/0" || a == "::/0") {
                return None;
            }
            a
        }
        "-i" | "-o" => {
            if raw == "+" && !o.negated() {
                return None;
            }
            raw.to_string()
        }
        "-p" => {
            let p = protocol_name(raw);
            if p == "all" && !o.negated() {
                return None;
            }
            p.to_string()
        }
        "-f" => return Some(Printed::new(o.negated(), "-f", Vec::new())),
        _ => raw.to_string(),
    };
    Some(Printed::new(o.negated(), short, vec![value]))
}

/// `-p` value as iptables-save prints it: the names iptables knows, lower case.
pub fn protocol_name(p: &str) -> &str {
    const NAMES: &[(&str, &str)] = &[
        ("0", "all"),
        ("1", "icmp"),
        ("6", "tcp"),
        ("17", "udp"),
        ("33", "dccp"),
        ("50", "esp"),
        ("51", "ah"),
        ("58", "ipv6-icmp"),
        ("132", "sctp"),
        ("135", "mh"),
        ("136", "udplite"),
    ];
    for &(num, name) in NAMES {
        if p == num || p.eq_ignore_ascii_case(name) {
            return name;
        }
    }
    if p.eq_ignore_ascii_case("icmpv6") {
        return "ipv6-icmp";
    }
    p
}

/// Address with prefix as iptables prints it: host bits cleared, `/len` (or a dotted
/// mask when the mask is not contiguous). `None` when it is not a literal address.
pub fn address(s: &str, family: Family) -> Option<String> {
    let (addr, mask) = match s.split_once('/') {
        Some((a, m)) => (a, Some(m)),
        None => (s, None),
    };
    match family {
        Family::Ip6 => {
            let a: Ipv6Addr = addr.parse().ok()?;
            let len: u32 = match mask {
                None => 128,
                Some(m) => match m.parse::<u32>() {
                    Ok(l) if l <= 128 => l,
                    _ => {
                        let mm: Ipv6Addr = m.parse().ok()?;
                        let bits = u128::from(mm);
                        if bits.leading_ones() + bits.trailing_zeros() != 128 {
                            return Some(format!(
                                "{}/{}",
                                Ipv6Addr::from(u128::from(a) & bits),
                                mm
                            ));
                        }
                        bits.leading_ones()
                    }
                },
            };
            let m = if len == 0 {
                0
            } else {
                u128::MAX << (128 - len)
            };
            Some(format!("{}/{}", Ipv6Addr::from(u128::from(a) & m), len))
        }
        _ => {
            let a: Ipv4Addr = addr.parse().ok()?;
            let bits = match mask {
                None => u32::MAX,
                Some(m) => match m.parse::<u32>() {
                    Ok(l) if l <= 32 => {
                        if l == 0 {
                            0
                        } else {
                            u32::MAX << (32 - l)
                        }
                    }
                    _ => u32::from(m.parse::<Ipv4Addr>().ok()?),
                },
            };
            let net = Ipv4Addr::from(u32::from(a) & bits);
            if bits.leading_ones() + bits.trailing_zeros() == 32 {
                Some(format!("{}/{}", net, bits.leading_ones()))
            } else {
                Some(format!("{}/{}", net, Ipv4Addr::from(bits)))
            }
        }
    }
}

// ---------------------------------------------------------------- value helpers

/// Well-known service names iptables resolves through /etc/services.
fn service_port(name: &str) -> Option<u16> {
    const SERVICES: &[(&str, u16)] = &[
        ("ftp-data", 20),
        ("ftp", 21),
        ("ssh", 22),
        ("telnet", 23),
        ("smtp", 25),
        ("domain", 53),
        ("http", 80),
        ("www", 80),
        ("pop3", 110),
        ("ntp", 123),
        ("imap2", 143),
        ("snmp", 161),
        ("https", 443),
        ("imaps", 993),
        ("pop3s", 995),
    ];
    SERVICES.iter().find(|(n, _)| *n == name).map(|&(_, p)| p)
}

fn port(s: &str) -> String {
    match service_port(s) {
        Some(p) => p.to_string(),
        None => s.to_string(),
    }
}

/// `a:b` ranges: `4:4` -> `4`, `:4` -> `0:4`, `4:` -> `4:MAX`, `:` -> `0:MAX`.
/// Returns None when the range is the whole space and not negated (iptables omits it).
fn range(s: &str, max: u64, negated: bool, sep: char, names: bool) -> Option<String> {
    let conv = |v: &str| if names { port(v) } else { v.to_string() };
    let Some((lo, hi)) = s.split_once(sep) else {
        return Some(conv(s));
    };
    let lo = if lo.is_empty() {
        "0".to_string()
    } else {
        conv(lo)
    };
    let hi = if hi.is_empty() {
        max.to_string()
    } else {
        conv(hi)
    };
    if lo == hi {
        return Some(lo);
    }
    if lo == "0" && hi == max.to_string() && !negated {
        return None;
    }
    Some(format!("{lo}{sep}{hi}"))
}

fn parse_u32(s: &str) -> Option<u32> {
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u32::from_str_radix(h, 16).ok()
    } else {
        s.parse().ok()
    }
}

/// `value[/mask]` as two numbers; mask defaults to all ones.
fn value_mask(s: &str) -> Option<(u32, u32)> {
    match s.split_once('/') {
        Some((v, m)) => Some((parse_u32(v)?, parse_u32(m)?)),
        None => Some((parse_u32(s)?, u32::MAX)),
    }
}

/// `--mark` style: `0xV` when the mask is all ones, else `0xV/0xM`.
fn mark_match(s: &str) -> String {
    match value_mask(s) {
        Some((v, u32::MAX)) => format!("{v:#x}"),
        Some((v, m)) => format!("{v:#x}/{m:#x}"),
        None => s.to_string(),
    }
}

fn one(o: &XtOptionView<'_>, name: &str, f: impl Fn(&str) -> String) -> Printed {
    let v = o.raw_arg(0).map(f).unwrap_or_default();
    Printed::new(o.negated(), name, vec![v])
}

/// Appends `name args` unless one of `present` is already there: the defaults
/// iptables-save prints for options the rule left out.
fn default_option(out: &mut Vec<Printed>, present: &[&str], name: &str, args: &[&str]) {
    if !out.iter().any(|p| present.contains(&p.name.as_str())) {
        out.push(Printed::new(
            false,
            name,
            args.iter().map(|a| a.to_string()).collect(),
        ));
    }
}

/// Orders options by the extension's save order; unknown ones keep their place at the end.
fn ordered(opts: Vec<Printed>, order: &[&str]) -> Vec<Printed> {
    let mut opts = opts;
    opts.sort_by_key(|p| {
        order
            .iter()
            .position(|o| *o == p.name)
            .unwrap_or(order.len())
    });
    opts
}

// ---------------------------------------------------------------- matches

fn match_options(
    module: &str,
    opts: &[XtOptionView<'_>],
    family: Family,
    proto: Option<&str>,
) -> Vec<Printed> {
    let _ = proto;
    match module {
        "tcp" | "udp" | "sctp" | "dccp" | "udplite" => l4_ports(module, opts),
        "multiport" => opts
            .iter()
            .map(|o| {
                let name = match o.name() {
                    "--source-ports" => "--sports",
                    "--destination-ports" => "--dports",
                    n => n,
                };
                one(o, name, |v| {
                    v.split(',')
                        .map(|p| p.split(':').map(port).collect::<Vec<_>>().join(":"))
                        .collect::<Vec<_>>()
                        .join(",")
                })
            })
            .collect(),
        "mark" | "connmark" => opts
            .iter()
            .map(|o| match o.name() {
                "--mark" => one(o, "--mark", mark_match),
                _ => verbatim(o),
            })
            .collect(),
        "conntrack" => conntrack(opts),
        "state" => opts.iter().map(|o| one(o, o.name(), ct_states)).collect(),
        "statistic" => ordered(
            opts.iter()
                .map(|o| match o.name() {
                    "--probability" => one(o, "--probability", |v| {
                        v.parse::<f64>()
                            .map(|p| format!("{p:.11}"))
                            .unwrap_or_else(|_| v.to_string())
                    }),
                    _ => verbatim(o),
                })
                .collect(),
            &["--mode", "--probability", "--every", "--packet"],
        ),
        "recent" => recent(opts, family),
        "ah" | "esp" | "ipcomp" | "frag" | "rt" | "mh" | "tcpmss" => opts
            .iter()
            .filter_map(|o| {
                let (max, omit_full) = match (module, o.name()) {
                    ("ah", "--ahspi")
                    | ("esp", "--espspi")
                    | ("ipcomp", "--ipcompspi")
                    | ("frag", "--fragid")
                    | ("rt", "--rt-segsleft") => (u32::MAX as u64, true),
                    ("mh", "--mh-type") => (255, true),
                    ("tcpmss", "--mss") => (65535, false),
                    _ => return Some(verbatim(o)),
                };
                range_opt(o, max, omit_full, false)
            })
            .collect(),
        "connbytes" => opts
            .iter()
            .map(|o| match o.name() {
                "--connbytes" => one(o, "--connbytes", |v| {
                    let (lo, hi) = v.split_once(':').unwrap_or((v, v));
                    let lo = if lo.is_empty() { "0" } else { lo };
                    if hi.is_empty() || hi == lo {
                        lo.to_string()
                    } else {
                        format!("{lo}:{hi}")
                    }
                }),
                _ => verbatim(o),
            })
            .collect(),
        "connlimit" => {
            let mut out: Vec<Printed> = opts.iter().map(verbatim).collect();
            let bits = if family == Family::Ip6 { "128" } else { "32" };
            default_option(&mut out, &["--connlimit-mask"], "--connlimit-mask", &[bits]);
            default_option(
                &mut out,
                &["--connlimit-saddr", "--connlimit-daddr"],
                "--connlimit-saddr",
                &[],
            );
            ordered(
                out,
                &[
                    "--connlimit-upto",
                    "--connlimit-above",
                    "--connlimit-mask",
                    "--connlimit-saddr",
                    "--connlimit-daddr",
                ],
            )
        }
        "icmp6" => opts
            .iter()
            .map(|o| match o.name() {
                "--icmpv6-type" => one(o, "--icmpv6-type", icmp6_type),
                _ => verbatim(o),
            })
            .collect(),
        "dscp" => opts
            .iter()
            .map(|o| match o.name() {
                "--dscp-class" => one(o, "--dscp", dscp_class),
                _ => verbatim(o),
            })
            .collect(),
        "icmp" => opts
            .iter()
            .map(|o| match o.name() {
                "--icmp-type" => one(o, "--icmp-type", icmp_type),
                _ => verbatim(o),
            })
            .collect(),
        "limit" => ordered(
            opts.iter().map(verbatim).collect(),
            &["--limit", "--limit-burst"],
        ),
        "length" => opts
            .iter()
            .map(
                |o| match range(o.raw_arg(0).unwrap_or(""), 65535, true, ':', false) {
                    Some(v) => Printed::new(o.negated(), o.name(), vec![v]),
                    None => verbatim(o),
                },
            )
            .collect(),
        "owner" => opts
            .iter()
            .map(|o| match o.name() {
                "--uid-owner" | "--gid-owner" => one(o, o.name(), |v| {
                    if v == "root" {
                        "0".into()
                    } else {
                        v.to_string()
                    }
                }),
                _ => verbatim(o),
            })
            .collect(),
        "addrtype" => ordered(
            opts.iter().map(verbatim).collect(),
            &[
                "--src-type",
                "--dst-type",
                "--limit-iface-in",
                "--limit-iface-out",
            ],
        ),
        "iprange" => ordered(
            opts.iter().map(verbatim).collect(),
            &["--src-range", "--dst-range"],
        ),
        _ => {
            let _ = family;
            opts.iter().map(verbatim).collect()
        }
    }
}

fn l4_ports(module: &str, opts: &[XtOptionView<'_>]) -> Vec<Printed> {
    let mut out = Vec::new();
    for o in opts {
        let name = match o.name() {
            "--source-port" | "--sport" => "--sport",
            "--destination-port" | "--dport" => "--dport",
            "--syn" if module == "tcp" => {
                out.push(Printed::new(
                    o.negated(),
                    "--tcp-flags",
                    vec!["FIN,SYN,RST,ACK".into(), "SYN".into()],
                ));
                continue;
            }
            "--tcp-flags" => {
                let mask = o.raw_arg(0).map(tcp_flags).unwrap_or_default();
                let comp = o.raw_arg(1).map(tcp_flags).unwrap_or_default();
                out.push(Printed::new(o.negated(), "--tcp-flags", vec![mask, comp]));
                continue;
            }
            _ => {
                out.push(verbatim(o));
                continue;
            }
        };
        // tcp and udp drop a full range; dccp prints it.
        let keep_full = o.negated() || module == "dccp";
        if let Some(v) = range(o.raw_arg(0).unwrap_or(""), 65535, keep_full, ':', true) {
            out.push(Printed::new(o.negated(), name, vec![v]));
        }
    }
    ordered(out, &["--sport", "--dport", "--tcp-flags", "--tcp-option"])
}

/// A numeric `lo:hi` option; `None` when it covers everything and iptables omits it.
fn range_opt(o: &XtOptionView<'_>, max: u64, omit_full: bool, names: bool) -> Option<Printed> {
    let keep_full = o.negated() || !omit_full;
    range(o.raw_arg(0).unwrap_or(""), max, keep_full, ':', names)
        .map(|v| Printed::new(o.negated(), o.name(), vec![v]))
}

fn icmp6_type(s: &str) -> String {
    const TYPES: &[(&str, &str)] = &[
        ("destination-unreachable", "1"),
        ("packet-too-big", "2"),
        ("time-exceeded", "3"),
        ("parameter-problem", "4"),
        ("echo-request", "128"),
        ("echo-reply", "129"),
        ("mld-listener-query", "130"),
        ("mld-listener-report", "131"),
        ("mld-listener-done", "132"),
        ("mld-listener-reduction", "132"),
        ("router-solicitation", "133"),
        ("router-advertisement", "134"),
        ("neighbour-solicitation", "135"),
        ("neighbor-solicitation", "135"),
        ("neighbour-advertisement", "136"),
        ("neighbor-advertisement", "136"),
        ("redirect", "137"),
    ];
    TYPES
        .iter()
        .find(|(n, _)| *n == s)
        .map(|(_, v)| v.to_string())
        .unwrap_or_else(|| s.to_string())
}

/// DSCP class names (RFC 2474/2597/3246) as the `0x%02x` value iptables prints.
fn dscp_class(s: &str) -> String {
    let v = match s.to_ascii_uppercase().as_str() {
        "BE" => Some(0),
        "EF" => Some(46),
        c if c.starts_with("CS") => c[2..]
            .parse::<u32>()
            .ok()
            .filter(|&n| n <= 7)
            .map(|n| n * 8),
        c if c.starts_with("AF") && c.len() == 4 => {
            let x = c[2..3].parse::<u32>().ok();
            let y = c[3..4].parse::<u32>().ok();
            x.zip(y).map(|(x, y)| x * 8 + y * 2)
        }
        _ => None,
    };
    v.map(|v| format!("{v:#04x}"))
        .unwrap_or_else(|| s.to_string())
}

fn tcp_flags(s: &str) -> String {
    const ORDER: &[&str] = &["FIN", "SYN", "RST", "PSH", "ACK", "URG"];
    match s {
        "ALL" => return ORDER.join(","),
        "NONE" => return "NONE".into(),
        _ => {}
    }
    let set: Vec<&str> = s.split(',').collect();
    if set.iter().any(|f| !ORDER.contains(f)) {
        return s.to_string();
    }
    ORDER
        .iter()
        .filter(|f| set.contains(f))
        .copied()
        .collect::<Vec<_>>()
        .join(",")
}

fn ct_states(s: &str) -> String {
    const ORDER: &[&str] = &[
        "INVALID",
        "NEW",
        "RELATED",
        "ESTABLISHED",
        "UNTRACKED",
        "SNAT",
        "DNAT",
    ];
    let set: Vec<&str> = s.split(',').collect();
    if set.iter().any(|f| !ORDER.contains(f)) {
        return s.to_string();
    }
    ORDER
        .iter()
        .filter(|f| set.contains(f))
        .copied()
        .collect::<Vec<_>>()
        .join(",")
}

fn conntrack(opts: &[XtOptionView<'_>]) -> Vec<Printed> {
    let mut out = Vec::new();
    for o in opts {
        let raw = o.raw_arg(0).unwrap_or("");
        match o.name() {
            "--ctstate" => out.push(one(o, "--ctstate", ct_states)),
            "--ctproto" => out.push(one(o, "--ctproto", |v| match protocol_name(v) {
                "tcp" => "6".into(),
                "udp" => "17".into(),
                "icmp" => "1".into(),
                "sctp" => "132".into(),
                _ => v.to_string(),
            })),
            n @ ("--ctorigsrcport" | "--ctorigdstport" | "--ctreplsrcport" | "--ctrepldstport") => {
                if let Some(v) = range(raw, 65535, true, ':', true) {
                    out.push(Printed::new(o.negated(), n, vec![v]));
                }
            }
            "--ctexpire" => {
                if let Some(v) = range(raw, u32::MAX as u64, true, ':', false) {
                    out.push(Printed::new(o.negated(), "--ctexpire", vec![v]));
                }
            }
            _ => out.push(verbatim(o)),
        }
    }
    ordered(
        out,
        &[
            "--ctstate",
            "--ctproto",
            "--ctorigsrc",
            "--ctorigdst",
            "--ctreplsrc",
            "--ctrepldst",
            "--ctorigsrcport",
            "--ctorigdstport",
            "--ctreplsrcport",
            "--ctrepldstport",
            "--ctstatus",
            "--ctexpire",
            "--ctdir",
        ],
    )
}

fn recent(opts: &[XtOptionView<'_>], family: Family) -> Vec<Printed> {
    let mut out: Vec<Printed> = opts.iter().map(verbatim).collect();
    // kube-proxy writes "--name X --rcheck --seconds N --reap"; save prints the
    // command first and adds the defaults for mask and side.
    let all_ones = if family == Family::Ip6 {
        "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
    } else {
        "255.255.255.255"
    };
    default_option(&mut out, &["--name"], "--name", &["DEFAULT"]);
    default_option(&mut out, &["--mask"], "--mask", &[all_ones]);
    default_option(&mut out, &["--rsource", "--rdest"], "--rsource", &[]);
    ordered(
        out,
        &[
            "--set",
            "--rcheck",
            "--update",
            "--remove",
            "--seconds",
            "--reap",
            "--hitcount",
            "--rttl",
            "--name",
            "--mask",
            "--rsource",
            "--rdest",
        ],
    )
}

fn icmp_type(s: &str) -> String {
    const TYPES: &[(&str, &str)] = &[
        ("echo-reply", "0"),
        ("pong", "0"),
        ("destination-unreachable", "3"),
        ("source-quench", "4"),
        ("redirect", "5"),
        ("echo-request", "8"),
        ("ping", "8"),
        ("time-exceeded", "11"),
        ("ttl-exceeded", "11"),
        ("parameter-problem", "12"),
        ("timestamp-request", "13"),
        ("timestamp-reply", "14"),
    ];
    if s == "255/0:255" {
        return "any".into();
    }
    TYPES
        .iter()
        .find(|(n, _)| *n == s)
        .map(|(_, v)| v.to_string())
        .unwrap_or_else(|| s.to_string())
}

// ---------------------------------------------------------------- targets

fn target_options(target: &str, opts: &[XtOptionView<'_>], family: Family) -> Vec<Printed> {
    match target {
        "MARK" => mark_target(opts, "--set-xmark"),
        "CONNMARK" => connmark_target(opts),
        "REJECT" => {
            if opts.is_empty() {
                let default = if family == Family::Ip6 {
                    "icmp6-port-unreachable"
                } else {
                    "icmp-port-unreachable"
                };
                vec![Printed::new(false, "--reject-with", vec![default.into()])]
            } else {
                opts.iter().map(verbatim).collect()
            }
        }
        "DNAT" | "SNAT" => opts
            .iter()
            .map(|o| match o.name() {
                n @ ("--to-destination" | "--to-source") => one(o, n, nat_range),
                _ => verbatim(o),
            })
            .collect(),
        "MASQUERADE" | "REDIRECT" => opts
            .iter()
            .map(|o| match o.name() {
                "--to-ports" => one(o, "--to-ports", |v| {
                    if service_port(v).is_some() {
                        return port(v);
                    }
                    let v = v.split('-').map(port).collect::<Vec<_>>();
                    if v.len() == 2 && v[0] == v[1] {
                        v[0].clone()
                    } else {
                        v.join("-")
                    }
                }),
                _ => verbatim(o),
            })
            .collect(),
        "LOG" => ordered(
            opts.iter()
                .filter_map(|o| match o.name() {
                    "--log-level" => {
                        let level = log_level(o.raw_arg(0).unwrap_or(""));
                        (level != "4").then(|| Printed::new(false, "--log-level", vec![level]))
                    }
                    _ => Some(verbatim(o)),
                })
                .collect(),
            &[
                "--log-prefix",
                "--log-level",
                "--log-tcp-sequence",
                "--log-tcp-options",
                "--log-ip-options",
                "--log-uid",
            ],
        ),
        "NFQUEUE" => {
            let mut out: Vec<Printed> = opts
                .iter()
                .filter_map(|o| match o.name() {
                    "--queue-balance" => range_opt(o, 65534, false, false),
                    _ => Some(verbatim(o)),
                })
                .collect();
            default_option(
                &mut out,
                &["--queue-num", "--queue-balance"],
                "--queue-num",
                &["0"],
            );
            ordered(
                out,
                &[
                    "--queue-num",
                    "--queue-balance",
                    "--queue-bypass",
                    "--queue-cpu-fanout",
                ],
            )
        }
        "DSCP" => opts
            .iter()
            .map(|o| match o.name() {
                "--set-dscp-class" => one(o, "--set-dscp", dscp_class),
                _ => verbatim(o),
            })
            .collect(),
        "NFLOG" => opts
            .iter()
            .filter(|o| !(o.name() == "--nflog-group" && o.raw_arg(0) == Some("0")))
            .map(verbatim)
            .collect(),
        _ => opts.iter().map(verbatim).collect(),
    }
}

fn mark_target(opts: &[XtOptionView<'_>], canonical: &str) -> Vec<Printed> {
    opts.iter()
        .map(|o| {
            let raw = o.raw_arg(0).unwrap_or("");
            let vm = match o.name() {
                "--set-xmark" => value_mask(raw),
                "--set-mark" => value_mask(raw).map(|(v, m)| (v, v | m)),
                "--and-mark" => parse_u32(raw).map(|v| (0, !v)),
                "--or-mark" => parse_u32(raw).map(|v| (v, v)),
                "--xor-mark" => parse_u32(raw).map(|v| (v, 0)),
                _ => None,
            };
            match vm {
                Some((v, m)) => Printed::new(false, canonical, vec![format!("{v:#x}/{m:#x}")]),
                None => verbatim(o),
            }
        })
        .collect()
}

fn connmark_target(opts: &[XtOptionView<'_>]) -> Vec<Printed> {
    let is_save_restore = opts
        .iter()
        .any(|o| matches!(o.name(), "--save-mark" | "--restore-mark"));
    if !is_save_restore {
        return mark_target(opts, "--set-xmark");
    }
    let mut out: Vec<Printed> = opts
        .iter()
        .map(|o| match o.name() {
            "--mask" => Printed::new(
                false,
                "--nfmask",
                vec![o.raw_arg(0).unwrap_or("").to_string()],
            ),
            _ => verbatim(o),
        })
        .collect();
    if let Some(i) = out.iter().position(|p| p.name == "--nfmask") {
        // --mask sets both masks.
        if opts.iter().any(|o| o.name() == "--mask") {
            let v = out[i].args.clone();
            out.push(Printed::new(false, "--ctmask", v));
        }
    }
    for name in ["--nfmask", "--ctmask"] {
        default_option(&mut out, &[name], name, &["0xffffffff"]);
    }
    ordered(
        out,
        &["--save-mark", "--restore-mark", "--nfmask", "--ctmask"],
    )
}

/// `1.1.1.1:ssh` -> `1.1.1.1:22`; ranges `a-b` and `/base` keep their shape.
fn nat_range(s: &str) -> String {
    // IPv6 with port: [addr]:port
    if let Some(rest) = s.strip_prefix('[')
        && let Some((addr, port_part)) = rest.split_once("]:")
    {
        return format!("[{addr}]:{}", nat_ports(port_part));
    }
    match s.rsplit_once(':') {
        Some((addr, ports)) if !addr.contains(':') => format!("{addr}:{}", nat_ports(ports)),
        _ => s.to_string(),
    }
}

fn nat_ports(s: &str) -> String {
    let (range_part, base) = match s.split_once('/') {
        Some((r, b)) => (r, Some(b)),
        None => (s, None),
    };
    let mut out = if service_port(range_part).is_some() {
        port(range_part)
    } else {
        range_part
            .split('-')
            .map(port)
            .collect::<Vec<_>>()
            .join("-")
    };
    if let Some(b) = base {
        let _ = write!(out, "/{}", port(b));
    }
    out
}

fn log_level(s: &str) -> String {
    const LEVELS: &[&str] = &[
        "emerg", "alert", "crit", "error", "warning", "notice", "info", "debug",
    ];
    if let Some(i) = LEVELS.iter().position(|l| *l == s) {
        return i.to_string();
    }
    match s {
        "panic" => "0".into(),
        "err" => "3".into(),
        "warn" => "4".into(),
        _ => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::xt::XtRule;
    use crate::model::xt::words::split;

    fn canon(spec: &str) -> String {
        let mut w = Vec::new();
        split(spec, 0, &mut w).unwrap();
        let (r, _) = XtRule::build(spec, w);
        let mut out = String::new();
        write_spec(&mut out, &r.view(spec), Family::Ip);
        out.trim_start().to_string()
    }

    #[test]
    fn kube_proxy_restore_order_becomes_save_order() {
        assert_eq!(
            canon(
                r#"-m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O"#
            ),
            r#"-d 172.30.0.41/32 -p tcp -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O"#
        );
    }

    #[test]
    fn mark_targets_become_set_xmark() {
        assert_eq!(
            canon("-j MARK --or-mark 0x4000"),
            "-j MARK --set-xmark 0x4000/0x4000"
        );
        assert_eq!(
            canon("-j MARK --xor-mark 0x4000"),
            "-j MARK --set-xmark 0x4000/0x0"
        );
        assert_eq!(
            canon("-j MARK --set-xmark 4294967295"),
            "-j MARK --set-xmark 0xffffffff/0xffffffff"
        );
    }

    #[test]
    fn addresses_are_masked_and_suffixed() {
        assert_eq!(canon("-s 10.1.2.3/8 -j DROP"), "-s 10.0.0.0/8 -j DROP");
        assert_eq!(canon("-d 10.0.0.0/255.255.255.0"), "-d 10.0.0.0/24");
        assert_eq!(canon("-s 0.0.0.0/0 -j DROP"), "-j DROP");
    }

    #[test]
    fn ports_and_flags() {
        assert_eq!(canon("-p tcp --dport 4:4"), "-p tcp -m tcp --dport 4");
        assert_eq!(canon("-p 6 -m tcp --sport :"), "-p tcp -m tcp");
        assert_eq!(
            canon("-p tcp -m tcp --syn"),
            "-p tcp -m tcp --tcp-flags FIN,SYN,RST,ACK SYN"
        );
        assert_eq!(
            canon("-p tcp -m tcp --dport 22 --sport ssh"),
            "-p tcp -m tcp --sport 22 --dport 22"
        );
    }

    #[test]
    fn statistic_probability_has_eleven_decimals() {
        assert_eq!(
            canon("-m statistic --mode random --probability 0.5"),
            "-m statistic --mode random --probability 0.50000000000"
        );
    }

    #[test]
    fn save_form_is_a_fixed_point() {
        for s in [
            r#"-s 10.244.1.5/32 -m comment --comment "default/service1:fileserver" -j KUBE-MARK-MASQ"#,
            "! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment \"block incoming localnet connections\" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP",
            "-p tcp -m comment --comment \"default/service1:fileserver\" -m tcp -j DNAT --to-destination 10.244.1.5:8080",
        ] {
            assert_eq!(canon(s), s);
        }
    }
}

/// Options for printing a ruleset in `iptables-save` form.
#[derive(Clone, Copy, Debug, Default)]
pub struct SaveOptions {
    /// Keep counters as read: chain counters, and `[packets:bytes]` before rules that
    /// had them (`iptables-save -c`). When false every counter prints as zero/absent,
    /// which is what comparisons want.
    pub counters: bool,
}

/// The xtables tables of `ruleset` printed as `iptables-save` would print them.
/// Native nft tables are skipped (they have no iptables form). Rules that are not
/// xtables rules (listings) are printed as read.
pub fn save_text(ruleset: &crate::Ruleset, options: SaveOptions) -> String {
    use crate::model::Backend;
    let mut out = String::with_capacity(ruleset.rule_count() * 128);
    for table in ruleset
        .tables
        .iter()
        .filter(|t| t.backend != Backend::Nftables)
    {
        let _ = writeln!(out, "*{}", table.name);
        for chain in &table.chains {
            let (policy, c) = match &chain.base {
                Some(b) => (
                    b.policy
                        .as_ref()
                        .map(|p| p.as_iptables())
                        .unwrap_or("ACCEPT"),
                    b.counters.unwrap_or_default(),
                ),
                None => ("-", Default::default()),
            };
            let c = if options.counters {
                c
            } else {
                Default::default()
            };
            let _ = writeln!(
                out,
                ":{} {} [{}:{}]",
                chain.name, policy, c.packets, c.bytes
            );
        }
        for chain in &table.chains {
            for rule in &chain.rules {
                if options.counters
                    && let Some(c) = rule.counters
                {
                    let _ = write!(out, "[{}:{}] ", c.packets, c.bytes);
                }
                match rule.xt() {
                    Some(x) => {
                        out.push_str("-A ");
                        out.push_str(&chain.name);
                        write_spec(&mut out, &x, table.family);
                    }
                    None => out.push_str(&rule.text),
                }
                out.push('\n');
            }
        }
        out.push_str("COMMIT\n");
    }
    out
}
