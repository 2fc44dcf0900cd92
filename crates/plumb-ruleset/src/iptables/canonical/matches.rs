//! Match extensions' options in their save order, with values normalised (`-m tcp`,
//! `multiport`, `mark`, `conntrack`, `statistic`, `recent`, `connlimit` ...). Options of
//! a match plumb has no knowledge of print as written.

use super::values::{
    ct_states, dscp_class, icmp_type, icmp6_type, mark_match, port, protocol_name, range, tcp_flags,
};
use super::{Printed, default_option, one, ordered, range_opt, verbatim};
use crate::model::Family;
use crate::model::xt::{CONNTRACK_OPTIONS, XtOptionView};

/// The options of match `module` in save order and spelling.
pub(super) fn match_options(
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

/// `-m tcp|udp|sctp|dccp|udplite`: ports as numbers, `--syn` as `--tcp-flags`.
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

/// `-m conntrack`: states in order, protocols as numbers, port ranges.
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
    ordered(out, CONNTRACK_OPTIONS)
}

/// `-m recent`: the command first, defaults for name, mask and side added.
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
