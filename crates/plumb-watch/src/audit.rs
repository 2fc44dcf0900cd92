//! Audit records of netfilter changes, read-only.
//!
//! Every netfilter change (legacy and nf_tables) emits a NETFILTER_CFG record (type
//! 1325: `table=nat:19 family=2 entries=1 op=nft_register_chain pid=9744
//! comm="iptables"`), followed in syscall context by SYSCALL (1300: exe, ppid, uid,
//! auid), PROCTITLE (1327: hex argv) and EOE (1320), all sharing one serial. For
//! nf_tables the `:19` after the table is the generation, which joins the record to
//! the NEWGEN notification. For iptables-legacy (`op=xt_replace`) audit is the only
//! change signal there is.
//!
//! [`parse_record`] and [`Assembler`] are pure (fuzzed). [`AuditListener`] joins the
//! audit multicast group `AUDIT_NLGRP_READLOG` (1) on `NETLINK_AUDIT`: it needs only
//! CAP_AUDIT_READ, works only in the initial network namespace, and never registers
//! as the audit daemon nor changes audit state (no AUDIT_SET is ever sent).

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::time::Duration;

/// `AUDIT_SYSCALL`: the system call that caused the event (pid, ppid, uid, exe, comm).
pub const AUDIT_SYSCALL: u16 = 1300;
/// `AUDIT_EOE`: the end of a multi-record event.
pub const AUDIT_EOE: u16 = 1320;
/// `AUDIT_NETFILTER_CFG`: one netfilter configuration change.
pub const AUDIT_NETFILTER_CFG: u16 = 1325;
/// `AUDIT_PROCTITLE`: the process's command line, hex-encoded.
pub const AUDIT_PROCTITLE: u16 = 1327;
/// `AUDIT_NLGRP_READLOG`: the multicast group of read-only audit listeners.
pub const AUDIT_NLGRP_READLOG: u32 = 1;

/// One audit record: type, time, serial and its `key=value` fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The record type (`AUDIT_*`, e.g. 1325 for NETFILTER_CFG).
    pub kind: u16,
    /// Milliseconds since the epoch, from `audit(SECS.MS:SERIAL)`; 0 when the stamp
    /// is not numeric (`ausearch -i` output).
    pub time_ms: u64,
    /// The event's serial: records of one event share it.
    pub serial: u64,
    /// The `key=value` fields in order, quotes removed and hex-encoded values
    /// (comm, exe, proctitle, cwd, name) decoded.
    pub fields: Vec<(String, String)>,
}

impl Record {
    /// The (decoded) value of `key`; `(null)` and `?` are absent.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty() && *v != "(null)" && *v != "?")
    }
    fn num<T: std::str::FromStr>(&self, key: &str) -> Option<T> {
        self.get(key)?.parse().ok()
    }
}

/// Parses the text of one record as the kernel sends it over netlink
/// (`audit(1726575449.009:1078): table=nat ...`) given its type.
pub fn parse_record(kind: u16, text: &str) -> Option<Record> {
    let rest = text.trim_start().strip_prefix("audit(")?;
    let close = rest.find(')')?;
    let (stamp, body) = (&rest[..close], &rest[close + 1..]);
    let body = body.trim_start_matches([':', ' ']);
    let (time, serial) = stamp.split_once(':')?;
    let serial = serial.parse().ok()?;
    let time_ms = parse_time_ms(time).unwrap_or(0);
    Some(Record {
        kind,
        time_ms,
        serial,
        fields: fields(body, kind == AUDIT_PROCTITLE),
    })
}

/// Parses one audit log line as dmesg, syslog or audit.log print it
/// (`... type=1325 audit(...): ...` or `type=NETFILTER_CFG msg=audit(...): ...`).
/// Interpreted (`ausearch -i`) time stamps keep serial and fields; the time is 0.
pub fn parse_log_line(line: &str) -> Option<Record> {
    let t = line.find("type=")?;
    let after = &line[t + 5..];
    let name = after.split_whitespace().next()?;
    let kind = match name {
        "NETFILTER_CFG" => AUDIT_NETFILTER_CFG,
        "SYSCALL" => AUDIT_SYSCALL,
        "PROCTITLE" => AUDIT_PROCTITLE,
        "EOE" => AUDIT_EOE,
        n => n.parse().ok()?,
    };
    let a = line.find("audit(")?;
    parse_record(kind, &line[a..])
}

fn parse_time_ms(s: &str) -> Option<u64> {
    let (secs, frac) = s.split_once('.').unwrap_or((s, "0"));
    let secs: u64 = secs.parse().ok()?;
    let ms: u64 = frac.get(..3).unwrap_or(frac).parse().ok()?;
    secs.checked_mul(1000)?.checked_add(ms)
}

/// Splits `k=v k="quoted v" k=HEX` into pairs, decoding quotes and hex-encoded values
/// (the kernel hex-encodes comm/exe/proctitle when they contain spaces or quotes).
fn fields(body: &str, proctitle: bool) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = body.trim();
    while !rest.is_empty() {
        let Some(eq) = rest.find('=') else { break };
        let key = rest[..eq].rsplit(' ').next().unwrap_or("").trim();
        let after = &rest[eq + 1..];
        let (value, next) = if let Some(q) = after.strip_prefix('"') {
            match q.find('"') {
                Some(end) => (q[..end].to_string(), &q[end + 1..]),
                None => (q.to_string(), ""),
            }
        } else {
            let end = after.find(' ').unwrap_or(after.len());
            let raw = &after[..end];
            let hexable = matches!(key, "comm" | "exe" | "proctitle" | "cwd" | "name");
            let v = if hexable {
                decode_hex(raw, proctitle).unwrap_or_else(|| raw.to_string())
            } else {
                raw.to_string()
            };
            (v, &after[end..])
        };
        if !key.is_empty() {
            out.push((key.to_string(), value));
        }
        rest = next.trim_start();
    }
    out
}

/// Decodes an even-length hex string; NULs (argv separators) become spaces when
/// `argv`. Returns None unless the whole input is hex.
fn decode_hex(s: &str, argv: bool) -> Option<String> {
    if s.len() < 2 || !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    // Plain decimal-looking words like "1234" are valid hex too; require a letter or
    // an argv context so "comm=1234" stays as written.
    if !argv && s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let bytes: Vec<u8> = (0..s.len())
        .step_by(2)
        .filter_map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .map(|b| if b == 0 && argv { b' ' } else { b })
        .collect();
    Some(String::from_utf8_lossy(&bytes).trim_end().to_string())
}

/// One NETFILTER_CFG record.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct NetfilterCfg {
    /// The table's name (`nat`, `kube-proxy`), without the generation suffix; empty
    /// when the record has no `table=`.
    pub table: String,
    /// nf_tables generation (`table=nat:19`); absent for legacy.
    pub generation: Option<u32>,
    /// `NFPROTO_*` family (2 = ipv4, 10 = ipv6, ...).
    pub family: Option<u32>,
    /// `entries=`: for legacy, the table's rule count after the change; for nf_tables,
    /// the number of objects the operation touched.
    pub entries: Option<u64>,
    /// `xt_replace`, `xt_register`, `nft_register_chain`, `nft_unregister_rule`, ...
    pub op: String,
    /// The writer's pid, when the record carries one (records in syscall context).
    pub pid: Option<u32>,
    /// The writer's comm, when the record carries one.
    pub comm: Option<String>,
}

impl NetfilterCfg {
    /// Reads a NETFILTER_CFG record; None for a record of another type.
    pub fn from_record(r: &Record) -> Option<NetfilterCfg> {
        if r.kind != AUDIT_NETFILTER_CFG {
            return None;
        }
        let (table, generation) = match r.get("table") {
            // nft: "name:gen" or "name:gen;chain:handle".
            Some(t) => {
                let first = t.split(';').next().unwrap_or(t);
                match first.rsplit_once(':') {
                    Some((name, g)) => (name.to_string(), g.parse().ok()),
                    None => (first.to_string(), None),
                }
            }
            None => (String::new(), None),
        };
        let family = r.get("family").and_then(|f| match f {
            "ipv4" => Some(2),
            "ipv6" => Some(10),
            "inet" => Some(1),
            "bridge" => Some(7),
            "arp" => Some(3),
            "netdev" => Some(5),
            n => n.parse().ok(),
        });
        Some(NetfilterCfg {
            table,
            generation,
            family,
            entries: r.num("entries"),
            op: r.get("op").unwrap_or("").to_string(),
            pid: r.num("pid"),
            comm: r.get("comm").map(str::to_string),
        })
    }

    /// A legacy (x_tables) change.
    pub fn is_legacy(&self) -> bool {
        self.op.starts_with("xt_") || self.op == "replace"
    }
}

/// SYSCALL fields that describe the writer.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SyscallInfo {
    /// The writer's pid.
    pub pid: Option<u32>,
    /// Its parent's pid.
    pub ppid: Option<u32>,
    /// Its user id.
    pub uid: Option<u32>,
    /// Its login (audit) user id: who logged in, whatever user it runs as now;
    /// 4294967295 for a process no login started (a daemon).
    pub auid: Option<u32>,
    /// Its executable's path.
    pub exe: Option<String>,
    /// Its comm (at most 15 bytes).
    pub comm: Option<String>,
}

/// All records of one audit event (one serial) that changed netfilter.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct NetfilterAudit {
    /// The audit serial all its records share.
    pub serial: u64,
    /// When the kernel stamped its first record, milliseconds since the epoch.
    pub time_ms: u64,
    /// Its NETFILTER_CFG records in arrival order (one per table or object touched);
    /// never empty in an event the [`Assembler`] yields.
    pub changes: Vec<NetfilterCfg>,
    /// Its SYSCALL record; None outside syscall context or when the record was lost.
    pub syscall: Option<SyscallInfo>,
    /// PROCTITLE: the writer's argv, space-separated.
    pub argv: Option<String>,
}

impl NetfilterAudit {
    /// The writer's pid (SYSCALL, else NETFILTER_CFG).
    pub fn pid(&self) -> Option<u32> {
        self.syscall
            .as_ref()
            .and_then(|s| s.pid)
            .or_else(|| self.changes.iter().find_map(|c| c.pid))
    }
    /// The nf_tables generation this event committed, if any.
    pub fn generation(&self) -> Option<u32> {
        self.changes.iter().find_map(|c| c.generation)
    }
}

/// Groups records by serial and yields complete netfilter events: at EOE, or when a
/// group is older than `max_age` (records outside syscall context have no EOE).
/// Groups without a NETFILTER_CFG record are dropped. Memory is bounded.
#[derive(Debug, Default)]
pub struct Assembler {
    open: BTreeMap<u64, (u64, NetfilterAudit, bool)>,
}

const MAX_OPEN: usize = 4096;

impl Assembler {
    /// Adds a record received at `now_ms`; returns completed events.
    pub fn push(&mut self, r: Record, now_ms: u64) -> Vec<NetfilterAudit> {
        let serial = r.serial;
        let entry = self.open.entry(serial).or_insert_with(|| {
            (
                now_ms,
                NetfilterAudit {
                    serial,
                    time_ms: r.time_ms,
                    ..Default::default()
                },
                false,
            )
        });
        let (_, ev, has_cfg) = entry;
        match r.kind {
            AUDIT_NETFILTER_CFG => {
                if let Some(c) = NetfilterCfg::from_record(&r) {
                    ev.changes.push(c);
                    *has_cfg = true;
                }
            }
            AUDIT_SYSCALL => {
                ev.syscall = Some(SyscallInfo {
                    pid: r.num("pid"),
                    ppid: r.num("ppid"),
                    uid: r.num("uid"),
                    auid: r.num("auid"),
                    exe: r.get("exe").map(str::to_string),
                    comm: r.get("comm").map(str::to_string),
                })
            }
            AUDIT_PROCTITLE => ev.argv = r.get("proctitle").map(str::to_string),
            _ => {}
        }
        let mut out = Vec::new();
        if r.kind == AUDIT_EOE
            && let Some((_, ev, true)) = self.open.remove(&serial)
        {
            out.push(ev);
        }
        while self.open.len() > MAX_OPEN {
            if let Some((_, (_, ev, has))) = self.open.pop_first()
                && has
            {
                out.push(ev);
            }
        }
        out
    }

    /// Completes groups older than `max_age_ms`.
    pub fn flush_older(&mut self, now_ms: u64, max_age_ms: u64) -> Vec<NetfilterAudit> {
        let old: Vec<u64> = self
            .open
            .iter()
            .filter(|(_, (t, _, _))| now_ms.saturating_sub(*t) >= max_age_ms)
            .map(|(s, _)| *s)
            .collect();
        old.into_iter()
            .filter_map(|s| self.open.remove(&s))
            .filter(|(_, _, has)| *has)
            .map(|(_, ev, _)| ev)
            .collect()
    }
}

/// Decodes the audit records in one netlink datagram.
pub fn decode(buf: &[u8]) -> Vec<Record> {
    plumb_os::netlink::messages(buf)
        .filter(|m| (1000..3000).contains(&m.kind))
        .filter_map(|m| parse_record(m.kind, &String::from_utf8_lossy(m.payload)))
        .collect()
}

/// A read-only subscriber to the audit multicast group.
pub struct AuditListener {
    socket: netlink_sys::Socket,
    buf: Vec<u8>,
}

impl AuditListener {
    /// Joins `AUDIT_NLGRP_READLOG` in the current (which must be the initial)
    /// network namespace. Fails without CAP_AUDIT_READ or audit support.
    pub fn open() -> io::Result<AuditListener> {
        let mut s = netlink_sys::Socket::new(netlink_sys::protocols::NETLINK_AUDIT)?;
        s.bind(&netlink_sys::SocketAddr::new(0, 0))?;
        s.add_membership(AUDIT_NLGRP_READLOG)?;
        crate::nft_events::set_receive_buffer(&s, 8 << 20);
        crate::nft_events::set_receive_timeout(&s, Duration::from_millis(200))?;
        Ok(AuditListener {
            socket: s,
            buf: vec![0; 64 * 1024],
        })
    }

    /// Waits up to the receive timeout; returns the records received (empty when
    /// idle). `Err(ENOBUFS)` means records were lost.
    pub fn receive(&mut self) -> io::Result<Vec<Record>> {
        match self.socket.recv(&mut &mut self.buf[..], 0) {
            Ok(n) => Ok(decode(&self.buf[..n.min(self.buf.len())])),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Ok(Vec::new())
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }
}

/// Inode of the initial network namespace (`PROC_NET_INIT_INO`, fixed since Linux 3.8).
const PROC_NET_INIT_INO: u64 = 0xEFFF_FFF9;

/// True when this process is in the initial network namespace (where audit
/// multicast is delivered): its inode is `PROC_NET_INIT_INO`, or pid 1's.
pub fn in_initial_netns() -> bool {
    if plumb_os::netns::inode(Path::new("/proc/self/ns/net")).ok() == Some(PROC_NET_INIT_INO) {
        return true;
    }
    match (
        plumb_os::netns::inode(Path::new("/proc/self/ns/net")),
        plumb_os::netns::inode(Path::new("/proc/1/ns/net")),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AKS: &str = "type=1325 audit(1726575449.009:1078): table=nat family=2 entries=90 op=xt_replace pid=7226 subj=cri-containerd.apparmor.d (enforce) comm=\"iptables-restor\"";
    const AKS_SYSCALL: &str = "type=1300 audit(1726575449.009:1078): arch=c000003e syscall=54 success=yes exit=0 a0=4 a1=0 a2=40 a3=5699e8c84f50 items=0 ppid=3641 pid=7226 auid=4294967295 uid=0 gid=0 euid=0 suid=0 fsuid=0 egid=0 sgid=0 fsgid=0 tty=(none) ses=4294967295 comm=\"iptables-restor\" exe=\"/usr/sbin/xtables-legacy-multi\" subj=cri-containerd.apparmor.d (enforce) key=(null)";

    #[test]
    fn parses_legacy_record_and_syscall() {
        let r = parse_log_line(AKS).unwrap();
        assert_eq!((r.kind, r.serial, r.time_ms), (1325, 1078, 1726575449009));
        let c = NetfilterCfg::from_record(&r).unwrap();
        assert_eq!(c.table, "nat");
        assert_eq!(c.generation, None);
        assert_eq!(c.op, "xt_replace");
        assert_eq!(c.pid, Some(7226));
        assert_eq!(c.comm.as_deref(), Some("iptables-restor"));
        assert!(c.is_legacy());
        let mut a = Assembler::default();
        assert!(a.push(r, 0).is_empty());
        assert!(a.push(parse_log_line(AKS_SYSCALL).unwrap(), 0).is_empty());
        let done = a.push(
            parse_record(AUDIT_EOE, "audit(1726575449.009:1078): ").unwrap(),
            1,
        );
        assert_eq!(done.len(), 1);
        let s = done[0].syscall.as_ref().unwrap();
        assert_eq!(s.ppid, Some(3641));
        assert_eq!(s.exe.as_deref(), Some("/usr/sbin/xtables-legacy-multi"));
        assert_eq!(done[0].pid(), Some(7226));
    }

    #[test]
    fn nft_table_carries_generation_and_chain() {
        let r = parse_record(
            1325,
            "audit(1590680801.911:163): table=firewalld:1;filter_FORWARD:85 family=inet entries=8 op=nft_register_chain pid=396 subj=system_u:system_r:firewalld_t:s0 comm=firewalld",
        )
        .unwrap();
        let c = NetfilterCfg::from_record(&r).unwrap();
        assert_eq!(
            (c.table.as_str(), c.generation, c.family),
            ("firewalld", Some(1), Some(1))
        );
        let r = parse_record(1325, "audit(1.2:3): table=nat:19 family=2 entries=1 op=nft_register_chain pid=9744 comm=\"iptables\"").unwrap();
        let c = NetfilterCfg::from_record(&r).unwrap();
        assert_eq!((c.table.as_str(), c.generation), ("nat", Some(19)));
        assert!(!c.is_legacy());
    }

    #[test]
    fn proctitle_hex_is_decoded() {
        let r = parse_log_line("[  130.215022] audit: type=1327 audit(1726645842.844:18): proctitle=69707461626C6573002D74006E6174002D4100504F5354524F5554494E47002D6F0065746830002D6A004D415351554552414445").unwrap();
        assert_eq!(
            r.get("proctitle"),
            Some("iptables -t nat -A POSTROUTING -o eth0 -j MASQUERADE")
        );
        // Hex-encoded comm (it contained a space).
        let r = parse_record(
            1325,
            "audit(1.0:1): table=nat op=xt_replace comm=6B7562652070726F7879",
        )
        .unwrap();
        assert_eq!(r.get("comm"), Some("kube proxy"));
    }

    #[test]
    fn groups_without_eoe_complete_by_age_and_others_are_dropped() {
        let mut a = Assembler::default();
        a.push(parse_record(1325, "audit(1.0:48): table=nat family=2 entries=0 op=xt_register pid=881 comm=\"modprobe\"").unwrap(), 0);
        a.push(parse_record(1300, "audit(1.0:49): pid=1").unwrap(), 0);
        assert!(a.flush_older(10, 50).is_empty());
        let done = a.flush_older(100, 50);
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].changes[0].op, "xt_register");
    }

    #[test]
    fn corpus_audit_lines_parse() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/corpus/logs/audit-netfilter-cfg");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            plumb_testkit::skip(&format!("corpus not found at {}", dir.display()));
            return;
        };
        let mut cfgs = 0;
        for e in entries.flatten() {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            for line in text.lines().filter(|l| !l.starts_with('#')) {
                if let Some(r) = parse_log_line(line)
                    && let Some(c) = NetfilterCfg::from_record(&r)
                {
                    assert!(!c.table.is_empty() || line.contains("family=7"), "{line}");
                    cfgs += 1;
                }
            }
        }
        assert!(cfgs >= 10, "only {cfgs} NETFILTER_CFG lines parsed");
    }
}
