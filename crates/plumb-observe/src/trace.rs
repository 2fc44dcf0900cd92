//! nftrace confirmation of an attribution (`plumb observe --confirm-with-trace`): a
//! table of plumb's own sets `meta nftrace set 1` on every packet at the earliest
//! prerouting and output hooks of the watched namespace, `nft monitor trace` reports
//! where each traced packet ended, and the drops it reports ([`TraceDrop`]) are
//! compared with what the counters named ([`Confirmation`]).
//!
//! This writes to the namespace's ruleset (one table, removed when [`Tracer`] is
//! dropped), so the caller allows it only where writing is the user's choice: the lab,
//! or a namespace that is not the host's. The table's name carries the pid of the run
//! that added it ([`table_name`]): runs side by side each trace with their own, and a
//! run killed with SIGKILL (no destructor runs) leaves a table whose process is gone,
//! which the next [`Tracer::start`] in that namespace deletes.
//!
//! [`parse_line`] and [`confirm`] are pure; [`Tracer`] runs `nft`.

use crate::attribution::RuleMatch;
use serde::Serialize;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::IpAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

/// The start of the name of the table plumb adds (family inet: IPv4 and IPv6); the
/// pid of the process that added it follows ([`table_name`]).
pub const TABLE_PREFIX: &str = "plumb-observe-trace-";

/// The name of the trace table process `pid` adds.
pub fn table_name(pid: u32) -> String {
    format!("{TABLE_PREFIX}{pid}")
}

/// The process that added trace table `table`; `None` for any other table.
fn owner_of(table: &str) -> Option<u32> {
    let pid = table.strip_prefix(TABLE_PREFIX)?;
    // Digits only: `u32::from_str` also takes a leading `+`.
    if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

/// The trace tables in `nft list tables inet` output whose process is no longer
/// running (`running` says which are).
fn leftovers(listing: &str, running: impl Fn(u32) -> bool) -> Vec<String> {
    listing
        .lines()
        .filter_map(|l| l.trim().strip_prefix("table inet "))
        .map(str::trim)
        .filter(|t| owner_of(t).is_some_and(|pid| !running(pid)))
        .map(str::to_string)
        .collect()
}

/// Where `nft monitor trace` says a traced packet was dropped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TraceDrop {
    /// `ip`, `ip6`, `inet`.
    pub family: String,
    /// The table.
    pub table: String,
    /// The chain.
    pub chain: String,
    /// The rule as nft prints it (`policy drop` for the chain's policy).
    pub text: String,
    /// The packet's destination, protocol number and destination port, when printed.
    #[serde(skip)]
    pub destination: Option<IpAddr>,
    #[serde(skip)]
    /// Its protocol number.
    pub protocol: Option<u8>,
    #[serde(skip)]
    /// Its destination port.
    pub port: Option<u16>,
}

/// What the trace says about a drop the counters attributed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Confirmation {
    /// The counters' rule is the one the trace saw drop the packet (same family, table
    /// and chain; a policy for a policy, a rule for a rule).
    pub agrees: bool,
    /// What the trace saw (None: no traced drop of this packet was reported).
    pub trace: Option<TraceDrop>,
}

impl TraceDrop {
    /// Whether this is the drop of a packet to `dst` over `protocol` to `port` (what
    /// the trace did not print is not compared).
    pub fn is_of(&self, dst: Option<IpAddr>, protocol: u8, port: Option<u16>) -> bool {
        (self.destination.is_none() || dst.is_none() || self.destination == dst)
            && self.protocol.is_none_or(|p| p == protocol)
            && (self.port.is_none() || port.is_none() || self.port == port)
    }
}

/// What a `packet:` line says: destination, protocol number, destination port.
type PacketFacts = (Option<IpAddr>, Option<u8>, Option<u16>);

/// The packets seen so far, by trace id: what `packet:` lines said.
#[derive(Default)]
pub struct Packets {
    seen: HashMap<String, PacketFacts>,
}

fn word_after<'a>(words: &[&'a str], key: &[&str]) -> Option<&'a str> {
    words
        .windows(key.len() + 1)
        .find(|w| w[..key.len()] == *key)
        .map(|w| w[key.len()])
}

/// Reads one line of `nft monitor trace`: remembers a `packet:` line's addresses, and
/// gives the drop a `(verdict drop)` rule or a `policy drop` line reports.
pub fn parse_line(line: &str, packets: &mut Packets) -> Option<TraceDrop> {
    let rest = line.strip_prefix("trace id ")?;
    let mut w = rest.splitn(5, ' ');
    let (id, family, table, chain, what) = (w.next()?, w.next()?, w.next()?, w.next()?, w.next()?);
    if let Some(pkt) = what.strip_prefix("packet: ") {
        let words: Vec<&str> = pkt.split_whitespace().collect();
        let dst = word_after(&words, &["ip", "daddr"])
            .or_else(|| word_after(&words, &["ip6", "daddr"]))
            .and_then(|a| a.parse().ok());
        let (proto, port) = [("tcp", 6u8), ("udp", 17), ("sctp", 132)]
            .iter()
            .find_map(|(name, n)| {
                word_after(&words, &[name, "dport"]).map(|p| (Some(*n), p.parse().ok()))
            })
            .unwrap_or((None, None));
        if packets.seen.len() > 4096 {
            packets.seen.clear();
        }
        packets.seen.insert(id.to_string(), (dst, proto, port));
        return None;
    }
    let what = what.trim_end();
    let text = if what == "policy drop" {
        "policy drop".to_string()
    } else {
        let rule = what.strip_prefix("rule ")?;
        rule.strip_suffix("(verdict drop)")?.trim_end().to_string()
    };
    let (destination, protocol, port) = packets.seen.remove(id).unwrap_or_default();
    Some(TraceDrop {
        family: family.to_string(),
        table: table.to_string(),
        chain: chain.to_string(),
        text,
        destination,
        protocol,
        port,
    })
}

/// Compares the counters' answer with the trace's drop of the same packet.
pub fn confirm(answer: &RuleMatch, trace: &TraceDrop) -> Confirmation {
    let agrees = match answer {
        RuleMatch::Found { rule } => {
            rule.family == trace.family
                && rule.table == trace.table
                && rule.chain == trace.chain
                && (rule.text == "policy DROP") == (trace.text == "policy drop")
        }
        _ => false,
    };
    Confirmation {
        agrees,
        trace: Some(trace.clone()),
    }
}

/// The trace table and `nft monitor trace` in one namespace; removed on drop.
pub struct Tracer {
    netns: String,
    table: String,
    /// Trace tables of killed runs that [`Tracer::start`] deleted.
    pub removed_leftovers: Vec<String>,
    monitor: Child,
    /// Drops the monitor reported, in order (bounded: beyond, the oldest are lost).
    pub drops: Receiver<TraceDrop>,
}

/// Runs `nft ARGS` in `netns`, `stdin` written to its input; its output when it succeeds.
fn nft(netns: &str, args: &[&str], stdin: Option<&str>) -> std::io::Result<String> {
    use std::io::Write;
    let mut cmd = Command::new("nft");
    cmd.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    plumb_os::netns::command_in(&mut cmd, netns, false)?;
    let mut child = cmd.spawn()?;
    if let (Some(text), Some(mut input)) = (stdin, child.stdin.take()) {
        input.write_all(text.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(std::io::Error::other(format!(
            "nft {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

impl Tracer {
    /// Deletes the trace tables killed runs left in `netns`, starts `nft monitor trace`
    /// there, then adds this process's trace table.
    pub fn start(netns: &str) -> std::io::Result<Tracer> {
        let removed_leftovers = remove_leftovers(netns)?;
        let mut cmd = Command::new("nft");
        cmd.args(["monitor", "trace"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        plumb_os::netns::command_in(&mut cmd, netns, true)?;
        let mut monitor = cmd.spawn()?;
        let out = monitor.stdout.take().expect("piped");
        let (tx, rx): (SyncSender<TraceDrop>, _) = sync_channel(1024);
        std::thread::spawn(move || {
            let mut packets = Packets::default();
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Some(d) = parse_line(&line, &mut packets)
                    && let Err(TrySendError::Disconnected(_)) = tx.try_send(d)
                {
                    return;
                }
            }
        });
        let table = table_name(std::process::id());
        let script = format!(
            "table inet {table} {{\n chain prerouting {{\n  type filter hook prerouting priority -350; policy accept;\n  meta nftrace set 1\n }}\n chain output {{\n  type filter hook output priority -350; policy accept;\n  meta nftrace set 1\n }}\n}}\n"
        );
        let tracer = Tracer {
            netns: netns.to_string(),
            table,
            removed_leftovers,
            monitor,
            drops: rx,
        };
        nft(netns, &["-f", "-"], Some(&script))?;
        Ok(tracer)
    }

    /// The name of this run's trace table.
    pub fn table(&self) -> &str {
        &self.table
    }
}

/// Deletes the trace tables in `netns` whose process no longer runs (a run killed with
/// SIGKILL); returns their names. Tables of running processes are left alone.
pub fn remove_leftovers(netns: &str) -> std::io::Result<Vec<String>> {
    let listing = nft(netns, &["list", "tables", "inet"], None)?;
    let gone = leftovers(&listing, plumb_os::process::running);
    for t in &gone {
        nft(netns, &["delete", "table", "inet", t], None)?;
    }
    Ok(gone)
}

impl Drop for Tracer {
    fn drop(&mut self) {
        let _ = nft(&self.netns, &["delete", "table", "inet", &self.table], None);
        let _ = self.monitor.kill();
        let _ = self.monitor.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_trace_tables_of_processes_gone_are_leftovers() {
        let listing = "table inet filter\ntable inet plumb-observe-trace-100\ntable inet plumb-observe-trace-200\ntable inet plumb-observe-trace-+7\ntable inet plumb-observe-trace-\ntable inet plumb-observe-tracer-9\ntable inet plumb-observe-trace-12x\n";
        let gone = leftovers(listing, |pid| pid == 200);
        assert_eq!(gone, ["plumb-observe-trace-100"]);
        assert_eq!(owner_of(&table_name(4242)), Some(4242));
    }

    /// Lines `nft monitor trace` printed for an iptables-nft DROP in a user chain and
    /// a REJECT (nft 1.0.6).
    const TRACE: &str = "trace id e57b937e ip filter OUTPUT packet: oif \"lo\" ip saddr 0.0.0.0 ip daddr 10.43.0.7 ip dscp cs0 ip ecn not-ect ip ttl 64 ip id 8146 ip length 29 udp sport 38133 udp dport 53 udp length 9 @th,64,8 0x78 
trace id e57b937e ip filter OUTPUT rule ip daddr 10.43.0.7 counter packets 0 bytes 0 jump BLK (verdict jump BLK)
trace id e57b937e ip filter BLK rule udp dport 53  counter packets 0 bytes 0 drop (verdict drop)
trace id e5d1a249 inet plumb-observe-trace output rule meta nftrace set 1 (verdict continue)
trace id e5d1a249 inet plumb-observe-trace output policy accept 
trace id 1f00 ip filter FORWARD policy drop 
";

    #[test]
    fn drops_are_read_with_their_packet() {
        let mut p = Packets::default();
        let drops: Vec<TraceDrop> = TRACE
            .lines()
            .filter_map(|l| parse_line(l, &mut p))
            .collect();
        assert_eq!(drops.len(), 2, "{drops:?}");
        assert_eq!(
            (drops[0].table.as_str(), drops[0].chain.as_str()),
            ("filter", "BLK")
        );
        assert_eq!(
            drops[0].text,
            "udp dport 53  counter packets 0 bytes 0 drop"
        );
        assert_eq!(drops[0].destination, Some("10.43.0.7".parse().unwrap()));
        assert_eq!((drops[0].protocol, drops[0].port), (Some(17), Some(53)));
        assert_eq!(drops[1].text, "policy drop");
        assert_eq!(drops[1].destination, None);
    }

    #[test]
    fn a_trace_agrees_only_with_the_same_chain_and_kind() {
        let mut p = Packets::default();
        let drops: Vec<TraceDrop> = TRACE
            .lines()
            .filter_map(|l| parse_line(l, &mut p))
            .collect();
        let rule = |chain: &str, text: &str| RuleMatch::Found {
            rule: crate::attribution::DropRule {
                family: "ip".into(),
                table: "filter".into(),
                chain: chain.into(),
                text: text.into(),
                owner: "x".into(),
                owner_evidence: String::new(),
                packets: 1,
            },
        };
        assert!(confirm(&rule("BLK", "-A BLK -p udp -j DROP"), &drops[0]).agrees);
        assert!(!confirm(&rule("OUTPUT", "-A OUTPUT -j DROP"), &drops[0]).agrees);
        assert!(confirm(&rule("FORWARD", "policy DROP"), &drops[1]).agrees);
        assert!(!confirm(&rule("FORWARD", "-A FORWARD -j DROP"), &drops[1]).agrees);
        let none = RuleMatch::NotFound { why: "x".into() };
        assert!(!confirm(&none, &drops[0]).agrees);
    }
}
