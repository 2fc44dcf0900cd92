//! Target extensions' options as `iptables-save` prints them (`MARK` as
//! `--set-xmark`, `CONNMARK`, `REJECT`'s default, `DNAT`/`SNAT` ranges, `LOG` levels,
//! `NFQUEUE` ...). Options of a target plumb has no knowledge of print as written.

use super::values::{dscp_class, log_level, nat_range, parse_u32, port, service_port, value_mask};
use super::{Printed, default_option, one, ordered, range_opt, verbatim};
use crate::model::Family;
use crate::model::xt::XtOptionView;

/// The options of target `target` in save order and spelling.
pub(super) fn target_options(
    target: &str,
    opts: &[XtOptionView<'_>],
    family: Family,
) -> Vec<Printed> {
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

/// `--set-mark`, `--and-mark`, `--or-mark`, `--xor-mark` as the `value/mask` pair
/// save prints under `canonical` (`--set-xmark`).
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

/// `-j CONNMARK`: `--save-mark`/`--restore-mark` with both masks, or a mark change.
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
