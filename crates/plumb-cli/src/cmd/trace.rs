//! `plumb trace`: read the ruleset (file, netns or live), check the flags, trace the
//! packet with plumb-trace and print the outcomes.
//!
//! Exit codes: 0 when the trace is complete (whatever the verdicts), 1 when plumb
//! stopped exploring at `--max-paths` or its work bound (the output is valid but
//! incomplete, and says INDETERMINATE), 2 when it could not trace at all (flags,
//! unreadable input). An incomplete trace is a result, not a failure to run: its
//! output is complete JSON or text that scripts can read, so it is not 2; it is
//! not 0 either, so a script that checks the status does not take it for the whole
//! answer.

use super::input::{live_rulesets, load, read_limited, write_read_problems};
use crate::Verdict;
use crate::flags::{InputFlags, TraceArgs};
use crate::output;
use anyhow::{Context, bail};
use plumb_ruleset::InputError;
use plumb_trace::addr::Cidr;
use plumb_trace::ipset::IpSets;
use plumb_trace::{
    CtState, Index, Node, Origin, Packet, Proto, RecentAssumption, TraceOptions, trace_with,
};
use std::io::Write;
use std::net::IpAddr;
use std::path::Path;

/// `IP:PORT`, `[v6]:PORT` or `IP`.
fn addr_port(flag: &str, s: &str) -> anyhow::Result<(IpAddr, Option<u16>)> {
    let bad = || {
        anyhow::anyhow!("{flag} {s:?}: expected IP:PORT (e.g. 10.43.0.1:443), [IPv6]:PORT or IP")
    };
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok((ip, None));
    }
    let sa: std::net::SocketAddr = s.parse().map_err(|_| bad())?;
    Ok((sa.ip(), Some(sa.port())))
}

/// Reads `--ipsets FILE` like every other input: at most `limit` bytes of text; a
/// line plumb cannot read is named as FILE:LINE.
fn read_ipsets(path: &Path, limit: usize) -> anyhow::Result<IpSets> {
    let name = path.display();
    let bytes = read_limited(path, limit).with_context(|| format!("reading --ipsets {name}"))?;
    let line_of = |offset: usize| bytes[..offset].iter().filter(|&&b| b == b'\n').count() + 1;
    let text = match plumb_ruleset::format::as_text(&bytes, limit) {
        Ok(t) => t,
        Err(InputError::NotUtf8 { offset }) => {
            bail!(
                "{name}:{}: not UTF-8 text (expected `ipset save` output)",
                line_of(offset)
            )
        }
        Err(InputError::Binary { offset }) => {
            bail!(
                "{name}:{}: NUL byte: expected `ipset save` text",
                line_of(offset)
            )
        }
        Err(e) => bail!("--ipsets {name}: {e}"),
    };
    IpSets::parse(text).map_err(|e| {
        anyhow::anyhow!(
            "{name}:{}: {}: {:?}",
            e.line,
            e.message,
            plumb_ruleset::diagnostic::excerpt(&e.text)
        )
    })
}

/// The packet the flags describe, with destination `dst` (`IP:PORT` or `IP`).
pub fn packet_and_node(args: &TraceArgs) -> anyhow::Result<(Packet, Node)> {
    let dst_flag = args.dst.as_deref().unwrap_or_default();
    let mut packet = template(args)?;
    let (dst, dport) = addr_port("--dst", dst_flag)?;
    if packet.proto != Proto::Icmp && dport.is_none() {
        bail!(
            "--dst {dst_flag:?}: a {} trace needs a port (IP:PORT)",
            args.proto
        );
    }
    packet.dst = dst;
    packet.dport = dport;
    if let Some(src) = packet.src
        && src.is_ipv4() != dst.is_ipv4()
    {
        bail!(
            "--src {:?} and --dst {dst_flag:?} are of different address families",
            args.src.as_deref().unwrap_or_default()
        );
    }
    Ok((packet, node(args)?))
}

/// The packet the flags describe, destination aside (0.0.0.0, no port): what every
/// flow of `--flows` starts from.
pub fn template(args: &TraceArgs) -> anyhow::Result<Packet> {
    let proto = match args.proto.to_ascii_lowercase().as_str() {
        "tcp" => Proto::Tcp,
        "udp" => Proto::Udp,
        "icmp" => Proto::Icmp,
        other => bail!("--proto {other:?}: expected tcp, udp or icmp"),
    };
    let origin = Origin::parse(&args.from)
        .ok_or_else(|| anyhow::anyhow!("--from {:?}: expected host, pod or external", args.from))?;
    let mut packet = Packet::new(IpAddr::from([0, 0, 0, 0]), 0, proto, origin);
    packet.dport = None;
    if let Some(src) = &args.src {
        let (ip, port) = addr_port("--src", src)?;
        packet.src = Some(ip);
        packet.sport = port;
    }
    packet.in_iface = args.in_iface.clone();
    packet.out_iface = args.out_iface.clone();
    packet.ct_state = CtState::parse(&args.ct_state).ok_or_else(|| {
        anyhow::anyhow!(
            "--ct-state {:?}: expected NEW, ESTABLISHED, RELATED, INVALID or UNTRACKED",
            args.ct_state
        )
    })?;
    if let Some(m) = &args.mark {
        packet.mark = plumb_trace::addr::parse_mark(m)
            .map(|(v, _)| v)
            .ok_or_else(|| anyhow::anyhow!("--mark {m:?}: expected a number such as 0x4000"))?;
    }
    Ok(packet)
}

/// What the flags say about the node: local addresses, ipsets, affinity.
pub fn node(args: &TraceArgs) -> anyhow::Result<Node> {
    let local_addrs = args
        .local_addr
        .iter()
        .map(|a| {
            Cidr::parse(a)
                .ok_or_else(|| anyhow::anyhow!("--local-addr {a:?}: expected IP or IP/LEN"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let ipsets = match &args.ipsets {
        Some(path) => read_ipsets(path, args.max_input_size)?,
        None => IpSets::default(),
    };
    let recent = match args.affinity.as_str() {
        "branch" => RecentAssumption::Branch,
        "fresh" => RecentAssumption::Fresh,
        other => bail!("--affinity {other:?}: expected branch or fresh"),
    };
    Ok(Node {
        local_addrs,
        ipsets,
        recent,
    })
}

/// Reads the ruleset the flags name (a file, a namespace or this machine) and a name
/// for it in messages. Read problems go to stderr.
pub fn ruleset(args: &TraceArgs) -> anyhow::Result<(String, plumb_ruleset::Ruleset)> {
    Ok(match (&args.ruleset, &args.netns) {
        (Some(path), _) => {
            let flags = InputFlags {
                format: None,
                family: None,
                table: None,
                max_input_size: args.max_input_size,
            };
            let loaded = load(path, &flags)?;
            write_read_problems(
                &mut std::io::stderr().lock(),
                &loaded.name,
                &loaded.parsed.ruleset,
                loaded.hint.as_deref(),
            )?;
            (loaded.name, loaded.parsed.ruleset)
        }
        (None, netns) => {
            let collected = live_rulesets(netns.as_deref())?;
            let name = netns
                .as_ref()
                .map(|n| format!("network namespace {n}"))
                .unwrap_or_else(|| "this machine".into());
            (name, collected.ruleset)
        }
    })
}

/// The message for a ruleset without the tables a trace of this family needs.
pub fn missing_tables_message(source: &str, missing: &[String]) -> String {
    format!(
        "{source} lacks the table{} a trace needs: {} (plumb will not assume they accept everything; pass a full dump such as `iptables-save` output)",
        if missing.len() == 1 { "" } else { "s" },
        missing.join(", ")
    )
}

pub fn run(args: &TraceArgs) -> anyhow::Result<Verdict> {
    if let Some(flows) = &args.flows {
        return super::trace_batch::run_flows(args, flows);
    }
    if args.all_services {
        return super::trace_services::run_all_services(args);
    }
    let (packet, node) = packet_and_node(args)?;
    let (source, ruleset) = ruleset(args)?;
    let index = Index::build(&ruleset);
    let missing = index.missing_tables(packet.is_ipv6());
    if !missing.is_empty() {
        bail!("{}", missing_tables_message(&source, &missing));
    }
    let options = TraceOptions {
        max_paths: usize::try_from(args.max_paths).unwrap_or(usize::MAX),
        ..TraceOptions::default()
    };
    let t = trace_with(&index, &packet, &node, &options);
    if args.output.json() {
        output::json(&t.report(&index))?;
    } else {
        let mut out = std::io::stdout().lock();
        let src = packet.src.map(|s| match packet.sport {
            Some(p) => format!("{s}:{p}"),
            None => s.to_string(),
        });
        writeln!(
            out,
            "{} {} -> {}{} from {:?}, conntrack {}, ruleset: {source}",
            packet.proto.name(),
            src.as_deref().unwrap_or("(source unknown)"),
            packet.dst,
            packet.dport.map(|p| format!(":{p}")).unwrap_or_default(),
            packet.origin,
            packet.ct_state.as_str(),
        )?;
        write!(
            out,
            "{}",
            plumb_trace::explain::explain(&index, &t, args.verbose)
        )?;
        if t.incomplete.is_some() {
            writeln!(
                out,
                "\nThe trace is incomplete: raise --max-paths (now {}) to explore further.",
                args.max_paths
            )?;
        }
    }
    Ok(if t.incomplete.is_some() {
        Verdict::Problems
    } else {
        Verdict::Clean
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(extra: &[&str]) -> TraceArgs {
        let mut v = vec!["plumb", "trace"];
        v.extend_from_slice(extra);
        match crate::flags::Cli::parse_from(v).command {
            crate::flags::Command::Trace(a) => *a,
            _ => unreachable!("trace"),
        }
    }

    #[test]
    fn bad_flags_name_the_flag() {
        let e = packet_and_node(&args(&["--dst", "10.43.0.1"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--dst"), "{e}");
        let e = packet_and_node(&args(&["--dst", "10.43.0.300:443"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--dst"), "{e}");
        let e = packet_and_node(&args(&["--dst", "10.43.0.1:99999"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--dst"), "{e}");
        let e = packet_and_node(&args(&["--dst", "10.43.0.1:443", "--src", "x"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--src"), "{e}");
        let e = packet_and_node(&args(&["--dst", "10.43.0.1:443", "--proto", "gre"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--proto"), "{e}");
        let e = packet_and_node(&args(&["--dst", "10.43.0.1:443", "--local-addr", "1.2.3"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--local-addr"), "{e}");
        assert!(packet_and_node(&args(&["--dst", "10.43.0.1", "--proto", "icmp"])).is_ok());
    }
}
