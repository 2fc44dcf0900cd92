//! Readers for `ipvsadm -ln` (the kernel's IPVS table: kube-proxy's service map in
//! IPVS mode) and `ipset list` output, into the model's [`VirtualService`] and
//! [`IpSetListing`].
//!
//! `ipvsadm -ln` prints (ipvsadm 1.2x, `print_service_entry`/`print_title`):
//! ```text
//! IP Virtual Server version 1.2.1 (size=4096)
//! Prot LocalAddress:Port Scheduler Flags
//!   -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
//! TCP  10.96.0.10:53 rr persistent 10800
//!   -> 10.244.0.3:53                Masq    1      0          0
//! FWM  100 rr
//! UDP  [fd00::10]:53 rr
//! ```
//! Like every plumb reader it never fails on a whole text: a line it cannot read is an
//! error diagnostic with its line, and reading goes on. Without `-n` ipvsadm prints host
//! and service names; such a line is an error that says so (no address to match).

use crate::diagnostic::Diagnostic;
use crate::model::Location;
use crate::model::ipvs::{IpSetListing, RealServer, VirtualAddress, VirtualService};
use std::net::IpAddr;

/// True when `text` starts like `ipvsadm -L` output.
pub fn is_ipvsadm(text: &str) -> bool {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .is_some_and(|l| l.starts_with("IP Virtual Server version"))
}

/// True when `text` starts like `ipset list` output (`Name: KUBE-CLUSTER-IP`).
pub fn is_ipset_list(text: &str) -> bool {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    lines.next().is_some_and(|l| l.starts_with("Name: "))
        && lines.next().is_some_and(|l| l.starts_with("Type: "))
}

/// `10.96.0.1:443`, `[fd00::1]:443` as an address and port.
fn address_port(s: &str) -> Option<(IpAddr, u16)> {
    let (a, p) = match s.strip_prefix('[') {
        Some(rest) => {
            let (a, p) = rest.split_once(']')?;
            (a, p.strip_prefix(':')?)
        }
        None => s.rsplit_once(':')?,
    };
    Some((a.parse().ok()?, p.parse().ok()?))
}

/// Reads `ipvsadm -ln` output (line numbers start at 1).
pub fn parse_ipvsadm(text: &str) -> (Vec<VirtualService>, Vec<Diagnostic>) {
    let mut services: Vec<VirtualService> = Vec::new();
    let mut diags = Vec::new();
    // The real-server columns, from their header: `--stats`, `--rate` and
    // `--thresholds` print counters where `-ln` prints forwarding and weight.
    let mut standard_columns = true;
    let mut scheduler_column = true;
    for (i, raw) in text.lines().enumerate() {
        let n = i as u32 + 1;
        let line = raw.trim();
        if let Some(columns) = line.strip_prefix("-> RemoteAddress:Port") {
            let columns: Vec<&str> = columns.split_whitespace().collect();
            standard_columns =
                columns.starts_with(&["Forward", "Weight", "ActiveConn", "InActConn"]);
            if !standard_columns {
                diags.push(Diagnostic::note(
                    n,
                    1,
                    "this ipvsadm output (--stats, --rate or --thresholds) does not show the real servers' weights: endpoint shares are unknown",
                    line,
                ));
            }
            continue;
        }
        if let Some(columns) = line.strip_prefix("Prot LocalAddress:Port") {
            scheduler_column = columns.split_whitespace().next() == Some("Scheduler");
            continue;
        }
        if line.is_empty() || line.starts_with("IP Virtual Server version") {
            continue;
        }
        let loc = Location {
            line: n,
            column: (raw.len() - raw.trim_start().len()) as u32 + 1,
        };
        let words: Vec<&str> = line.split_whitespace().collect();
        if words[0] == "->" {
            let Some(vs) = services.last_mut() else {
                diags.push(Diagnostic::error(
                    n,
                    loc.column,
                    "real server line before any virtual service",
                    line,
                ));
                continue;
            };
            match real_server(&words, loc, line, standard_columns) {
                Ok(rs) => vs.real_servers.push(rs),
                Err(why) => diags.push(Diagnostic::error(n, loc.column, why, line)),
            }
            continue;
        }
        match virtual_service(&words, loc, line, scheduler_column) {
            Ok(vs) => services.push(vs),
            Err(why) => diags.push(Diagnostic::error(n, loc.column, why, line)),
        }
    }
    (services, diags)
}

fn virtual_service(
    words: &[&str],
    location: Location,
    line: &str,
    scheduler_column: bool,
) -> Result<VirtualService, String> {
    let (Some(prot), Some(addr)) = (words.first(), words.get(1)) else {
        return Err("not an ipvsadm virtual service line (PROT ADDRESS:PORT SCHEDULER)".into());
    };
    // `--stats`/`--rate` print counters after the address, not the scheduler.
    let scheduler = if scheduler_column {
        Some(
            words
                .get(2)
                .ok_or("virtual service line without its scheduler")?
                .to_string(),
        )
    } else {
        None
    };
    let address = match *prot {
        "TCP" | "UDP" | "SCTP" => {
            let (address, port) = address_port(addr).ok_or_else(|| {
                format!("{addr} is not ADDRESS:PORT (ipvsadm prints names without -n)")
            })?;
            VirtualAddress::Service {
                protocol: prot.to_ascii_lowercase(),
                address,
                port,
            }
        }
        "FWM" => VirtualAddress::FirewallMark {
            mark: addr
                .parse()
                .map_err(|_| format!("firewall mark {addr} is not a number"))?,
        },
        other => return Err(format!("unknown virtual service protocol {other}")),
    };
    let mut persistent_seconds = None;
    let mut flags = Vec::new();
    let mut k = if scheduler_column { 3 } else { words.len() };
    while k < words.len() {
        if words[k] == "persistent" {
            persistent_seconds = words.get(k + 1).and_then(|s| s.parse().ok());
            k += 2;
            continue;
        }
        flags.push(words[k].to_string());
        k += 1;
    }
    Ok(VirtualService {
        address,
        scheduler,
        persistent_seconds,
        flags,
        real_servers: Vec::new(),
        location,
        text: line.into(),
    })
}

fn real_server(
    words: &[&str],
    location: Location,
    line: &str,
    standard_columns: bool,
) -> Result<RealServer, String> {
    let Some(addr) = words.get(1) else {
        return Err("real server line without its address".into());
    };
    let (address, port) = address_port(addr)
        .ok_or_else(|| format!("{addr} is not ADDRESS:PORT (ipvsadm prints names without -n)"))?;
    let mut server = RealServer {
        address,
        port,
        forward: None,
        weight: None,
        active_connections: None,
        inactive_connections: None,
        location,
        text: line.into(),
    };
    if !standard_columns {
        return Ok(server);
    }
    let [_, _, forward, weight, active, inactive, ..] = words else {
        return Err(
            "real server line without its columns (ADDRESS:PORT FORWARD WEIGHT ACTIVE INACTIVE)"
                .into(),
        );
    };
    let num = |s: &str, what: &str| {
        s.parse::<u64>()
            .map_err(|_| format!("{what} {s:?} is not a number"))
    };
    server.forward = Some(forward.to_string());
    server.weight = Some(
        u32::try_from(num(weight, "weight")?)
            .map_err(|_| format!("weight {weight} out of range"))?,
    );
    server.active_connections = Some(num(active, "active connections")?);
    server.inactive_connections = Some(num(inactive, "inactive connections")?);
    Ok(server)
}

/// Reads `ipset list` output: each `Name:` block with its `Type:` and `Members:`.
/// Lines it does not know inside a block (`Header:`, `References:`) are skipped.
pub fn parse_ipset_list(text: &str) -> Vec<IpSetListing> {
    let mut sets: Vec<IpSetListing> = Vec::new();
    let mut in_members = false;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if let Some(name) = line.strip_prefix("Name: ") {
            sets.push(IpSetListing {
                name: name.trim().to_string(),
                kind: String::new(),
                members: Vec::new(),
                location: Location {
                    line: i as u32 + 1,
                    column: 1,
                },
            });
            in_members = false;
            continue;
        }
        let Some(set) = sets.last_mut() else { continue };
        if let Some(kind) = line.strip_prefix("Type: ") {
            set.kind = kind.trim().to_string();
        } else if line == "Members:" {
            in_members = true;
        } else if line.is_empty() {
            in_members = false;
        } else if in_members {
            // `10.96.0.1,tcp:443 timeout 0`: the member is the first word.
            if let Some(m) = line.split_whitespace().next() {
                set.members.push(m.to_string());
            }
        }
    }
    sets
}

#[cfg(test)]
mod tests {
    use super::*;

    const AZURE: &str = "IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  10.96.0.1:443 rr
  -> 172.16.0.4:6443              Masq    1      4          0         
TCP  10.96.0.10:53 rr persistent 10800
  -> 192.168.0.17:53              Masq    1      0          0         
  -> 192.168.0.18:53              Masq    0      0          0         
UDP  [fd00::10]:53 rr
FWM  100 wrr
";

    #[test]
    fn virtual_services_and_real_servers() {
        assert!(is_ipvsadm(AZURE));
        let (vs, d) = parse_ipvsadm(AZURE);
        assert_eq!(d, vec![]);
        assert_eq!(vs.len(), 4);
        assert_eq!(
            vs[0].address,
            VirtualAddress::Service {
                protocol: "tcp".into(),
                address: "10.96.0.1".parse().unwrap(),
                port: 443
            }
        );
        assert_eq!(vs[0].real_servers.len(), 1);
        assert_eq!(vs[0].real_servers[0].active_connections, Some(4));
        assert_eq!(vs[0].location.line, 4);
        assert_eq!(vs[1].persistent_seconds, Some(10800));
        assert_eq!(vs[1].real_servers[1].weight, Some(0));
        assert_eq!(vs[1].real_servers[1].location.line, 8);
        assert!(matches!(
            vs[2].address,
            VirtualAddress::Service { port: 53, .. }
        ));
        assert_eq!(vs[3].address, VirtualAddress::FirewallMark { mark: 100 });
        assert_eq!(vs[3].scheduler.as_deref(), Some("wrr"));
    }

    #[test]
    fn names_and_garbage_are_errors_with_their_line() {
        let text = "IP Virtual Server version 1.2.1 (size=4096)\n  -> 1.2.3.4:80 Masq 1 0 0\nTCP  kubernetes:https rr\nTCP  10.0.0.1:80 rr\n  -> 10.0.0.2:80 Masq x 0 0\n";
        let (vs, d) = parse_ipvsadm(text);
        assert_eq!(vs.len(), 1);
        let lines: Vec<u32> = d.iter().map(|d| d.line).collect();
        assert_eq!(lines, [2, 3, 5]);
        assert!(d[1].message.contains("without -n"), "{}", d[1].message);
    }

    #[test]
    fn stats_output_has_no_weights() {
        let text = "IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port               Conns   InPkts  OutPkts  InBytes OutBytes
  -> RemoteAddress:Port
TCP  10.96.0.1:443                      12      340      310    40120    51230
  -> 172.16.0.4:6443                    12      340      310    40120    51230
";
        let (vs, d) = parse_ipvsadm(text);
        assert_eq!(vs[0].real_servers[0].weight, None, "Conns is not a weight");
        assert_eq!(vs[0].scheduler, None, "12 is a connection count");
        assert!(vs[0].flags.is_empty());
        assert_eq!(vs[0].real_servers[0].port, 6443);
        assert_eq!(d.len(), 1);
        assert!(
            d[0].message
                .contains("does not show the real servers' weights")
        );
    }

    #[test]
    fn ipset_members() {
        let text = "Name: KUBE-CLUSTER-IP\nType: hash:ip,port\nRevision: 5\nMembers:\n10.96.0.10,udp:53\n10.96.0.1,tcp:443\n\nName: KUBE-NODE-PORT-TCP\nType: bitmap:port\nMembers:\n31730\n";
        assert!(is_ipset_list(text));
        let sets = parse_ipset_list(text);
        assert_eq!(sets.len(), 2);
        assert!(sets[0].has_ip_port("10.96.0.10".parse().unwrap(), "udp", 53));
        assert!(!sets[0].has_ip_port("10.96.0.10".parse().unwrap(), "tcp", 53));
        assert!(sets[1].has_port(31730));
        assert_eq!(sets[1].kind, "bitmap:port");
    }
}
