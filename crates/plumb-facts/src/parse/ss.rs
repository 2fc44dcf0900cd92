//! Listening sockets from `ss -tlnp` / `ss -tulnp` / `ss -anput` (old and new iproute2
//! layouts: with or without the `Netid` column, `*:*` or `0.0.0.0:*` peers).
//!
//! Only listening (`LISTEN`, and `UNCONN` for UDP) sockets are kept; lines that are
//! not socket lines (headers, shell prompts, comments) are skipped.

use serde::Serialize;

/// One listening socket.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Listener {
    /// `tcp` or `udp` when the output says (Netid column), else `tcp` for LISTEN.
    pub proto: String,
    /// Address as printed, without brackets (`0.0.0.0`, `::`, `*`, `127.0.0.1`).
    pub addr: String,
    /// Local port.
    pub port: u16,
    /// Process names from `users:(("kube-proxy",pid=1538,fd=18))`.
    pub processes: Vec<String>,
    /// Process ids from the same `users:(...)` field, in the same order; empty when `ss`
    /// was run without `-p` or without the right to see them.
    pub pids: Vec<u32>,
    /// Line number in the output (1-based), for evidence.
    pub line: u32,
}

/// Reads the listening sockets of an `ss` listing; other lines are skipped.
pub fn parse(text: &str) -> Vec<Listener> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(state_at) = words.iter().position(|w| *w == "LISTEN" || *w == "UNCONN") else {
            continue;
        };
        let proto = match state_at.checked_sub(1).map(|p| words[p]) {
            Some(p @ ("tcp" | "udp" | "sctp" | "raw")) => p.to_string(),
            _ if words[state_at] == "UNCONN" => "udp".to_string(),
            _ => "tcp".to_string(),
        };
        let Some(local) = words.get(state_at + 3) else {
            continue;
        };
        let Some((addr, port)) = split_addr_port(local) else {
            continue;
        };
        let users = words[state_at + 4..]
            .iter()
            .find(|w| w.starts_with("users:"))
            .copied()
            .unwrap_or("");
        let (processes, pids) = parse_users(users);
        out.push(Listener {
            proto,
            addr,
            port,
            processes,
            pids,
            line: u32::try_from(i + 1).unwrap_or(u32::MAX),
        });
    }
    out
}

/// `[::]:22`, `:::30001`, `*:9090`, `127.0.0.53%lo:53`, `0.0.0.0:22`.
fn split_addr_port(s: &str) -> Option<(String, u16)> {
    let (addr, port) = s.rsplit_once(':')?;
    let port = port.parse().ok()?;
    let addr = addr.trim_start_matches('[').trim_end_matches(']');
    let addr = addr.split('%').next().unwrap_or(addr);
    let addr = if addr.is_empty() || addr == "::" {
        "::"
    } else {
        addr
    };
    Some((addr.to_string(), port))
}

/// `users:(("sshd",pid=998,fd=7),("sshd",pid=999,fd=7))`.
fn parse_users(s: &str) -> (Vec<String>, Vec<u32>) {
    let mut names = Vec::new();
    let mut pids = Vec::new();
    for (i, _) in s.match_indices("(\"") {
        if let Some(name) = s[i + 2..].split('"').next()
            && !names.iter().any(|n| n == name)
        {
            names.push(name.to_string());
        }
    }
    for p in s.split("pid=").skip(1) {
        if let Ok(pid) = p.split([',', ')']).next().unwrap_or("").parse() {
            pids.push(pid);
        }
    }
    (names, pids)
}

impl Listener {
    /// Whether this socket would accept a connection to `ip` (wildcards included).
    pub fn listens_on(&self, ip: &str) -> bool {
        matches!(self.addr.as_str(), "*" | "0.0.0.0" | "::") || self.addr == ip
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_layout_with_process() {
        let l = parse(
            "State  Recv-Q Send-Q Local Address:Port Peer Address:PortProcess\n\
             LISTEN 0      4096       127.0.0.1:10249      0.0.0.0:*    users:((\"kube-proxy\",pid=27904,fd=11))\n\
             LISTEN 0      128             [::]:22           [::]:*    users:((\"sshd\",pid=998,fd=8))\n",
        );
        assert_eq!(l.len(), 2);
        assert_eq!((l[0].addr.as_str(), l[0].port), ("127.0.0.1", 10249));
        assert_eq!(l[0].processes, vec!["kube-proxy"]);
        assert_eq!(l[0].pids, vec![27904]);
        assert_eq!(l[0].line, 2);
        assert_eq!((l[1].addr.as_str(), l[1].port), ("::", 22));
        assert!(l[1].listens_on("10.0.0.1"));
    }

    #[test]
    fn old_layout_with_netid_and_prompt_lines() {
        let l = parse(
            "[root@w ~]# ss -anput | grep :30001\n\
             tcp    LISTEN     0      128      :::30001                :::*                   users:((\"kube-proxy\",pid=5826,fd=9))\n\
             udp    UNCONN     0      0      127.0.0.53%lo:53   0.0.0.0:*\n",
        );
        assert_eq!(l.len(), 2);
        assert_eq!(
            (l[0].proto.as_str(), l[0].addr.as_str(), l[0].port),
            ("tcp", "::", 30001)
        );
        assert_eq!(
            (l[1].proto.as_str(), l[1].addr.as_str(), l[1].port),
            ("udp", "127.0.0.53", 53)
        );
        assert!(l[1].processes.is_empty());
    }
}
