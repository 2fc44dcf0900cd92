//! Who made a change: from a pid (NEWGEN or audit) to a process description and a
//! known identity.
//!
//! [`ProcInfo::read`] reads /proc (comm, exe, ppid, uid, cgroup → systemd unit or
//! container, netns inode, argv). Writers such as `iptables-restore` often exit
//! before plumb looks: then the kernel's own facts (NEWGEN comm, audit exe and ppid)
//! stand in and the actor is marked `gone`. [`identify`] is pure: it matches the
//! writer and its ancestors against `data/actors.json` (first match, nearest process
//! first), so kube-proxy's `iptables-restore` child is recognised as kube-proxy.

use serde::{Deserialize, Serialize};
use std::sync::OnceLock;

/// What /proc says about one process.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ProcInfo {
    /// The process id (in plumb's pid namespace).
    pub pid: u32,
    /// `/proc/PID/comm`: the thread name, at most 15 bytes (`iptables-restor`).
    pub comm: Option<String>,
    /// Where `/proc/PID/exe` points; None when it cannot be read (a kernel thread, an
    /// exiting process, no permission).
    pub exe: Option<String>,
    /// The parent's pid, from `/proc/PID/stat`.
    pub ppid: Option<u32>,
    /// The real user id, from `/proc/PID/status`.
    pub uid: Option<u32>,
    /// The cgroup v2 path (or the first v1 line's path).
    pub cgroup: Option<String>,
    /// The command line, arguments joined by single spaces; None when empty (a kernel
    /// thread, a zombie).
    pub argv: Option<String>,
    /// The inode of the process's network namespace (`/proc/PID/ns/net`).
    pub netns: Option<u64>,
}

impl ProcInfo {
    /// Reads /proc/PID; None when the process no longer exists.
    pub fn read(pid: u32) -> Option<ProcInfo> {
        Self::read_from(std::path::Path::new("/proc"), pid)
    }

    /// Reads `root/PID` (a /proc-shaped tree; tests use a directory).
    pub fn read_from(root: &std::path::Path, pid: u32) -> Option<ProcInfo> {
        let dir = root.join(pid.to_string());
        let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
        let cgroup = std::fs::read_to_string(dir.join("cgroup")).unwrap_or_default();
        let argv = std::fs::read(dir.join("cmdline")).unwrap_or_default();
        use std::os::unix::fs::MetadataExt;
        Some(ProcInfo {
            pid,
            comm: Some(comm.trim_end_matches('\n').to_string()),
            exe: std::fs::read_link(dir.join("exe"))
                .ok()
                .map(|p| p.to_string_lossy().into_owned()),
            ppid: parse_stat_ppid(&stat),
            uid: status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().next()?.parse().ok()),
            cgroup: parse_cgroup(&cgroup),
            argv: (!argv.is_empty()).then(|| {
                String::from_utf8_lossy(&argv)
                    .trim_end_matches('\0')
                    .replace('\0', " ")
            }),
            netns: std::fs::metadata(dir.join("ns/net")).ok().map(|m| m.ino()),
        })
    }
}

/// ppid from /proc/PID/stat: the 2nd field after the `(comm)` (which may hold spaces).
pub fn parse_stat_ppid(stat: &str) -> Option<u32> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// The cgroup path: the v2 line (`0::/path`), else the first line's path.
pub fn parse_cgroup(text: &str) -> Option<String> {
    let line = text
        .lines()
        .find(|l| l.starts_with("0::"))
        .or_else(|| text.lines().next())?;
    let path = line.splitn(3, ':').nth(2)?;
    (!path.is_empty()).then(|| path.to_string())
}

/// The systemd unit (`kubelet.service`, `cri-containerd-ID.scope`) from a cgroup path.
pub fn unit_of_cgroup(cgroup: &str) -> Option<String> {
    cgroup
        .rsplit('/')
        .find(|c| c.ends_with(".service") || c.ends_with(".scope"))
        .map(str::to_string)
}

/// A container id from a cgroup path (cri-containerd-, docker-, crio- scopes, or a
/// 64-hex path component), shortened to 12 characters.
pub fn container_of_cgroup(cgroup: &str) -> Option<String> {
    for comp in cgroup.rsplit('/') {
        let c = comp.trim_end_matches(".scope");
        let id = ["cri-containerd-", "docker-", "crio-", "libpod-"]
            .iter()
            .find_map(|p| c.strip_prefix(p))
            .unwrap_or(c);
        if id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Some(id[..12].to_string());
        }
    }
    None
}

#[derive(Debug, Deserialize)]
struct Catalogue {
    actors: Vec<Entry>,
}

#[derive(Debug, Deserialize)]
struct Entry {
    identity: String,
    #[serde(default)]
    label: Option<String>,
    kind: String,
    #[serde(default)]
    writes: Vec<String>,
    #[serde(default)]
    comm: Vec<String>,
    #[serde(default)]
    exe_suffix: Vec<String>,
    #[serde(default)]
    exe_prefix: Vec<String>,
    #[serde(default)]
    cgroup_contains: Vec<String>,
    #[serde(default)]
    argv_contains: Vec<String>,
}

fn catalogue() -> &'static Catalogue {
    static C: OnceLock<Catalogue> = OnceLock::new();
    C.get_or_init(|| {
        serde_json::from_str(include_str!("../data/actors.json"))
            .expect("data/actors.json is valid (checked by a unit test)")
    })
}

/// A known writer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Identity {
    /// Catalogue name: `kube-proxy`, `illumio-ven`, `shell`, ...
    pub name: String,
    /// A longer human name from the catalogue (`Illumio VEN`), when it has one.
    pub label: Option<String>,
    /// `kubernetes`, `cni`, `host-firewall`, `security-agent`, `human`, ...
    pub kind: String,
    /// Owners whose objects this writer legitimately changes.
    pub writes: Vec<String>,
    /// Why: "comm venAgent", "ancestor 812 comm kube-proxy", ...
    pub evidence: String,
}

fn matches(e: &Entry, p: &ProcInfo) -> Option<String> {
    if let Some(c) = p.comm.as_deref().filter(|c| e.comm.iter().any(|x| x == c)) {
        return Some(format!("comm {c}"));
    }
    let exe = p.exe.as_deref().unwrap_or("");
    let exe = exe.trim_end_matches(" (deleted)");
    if !exe.is_empty()
        && (e.exe_suffix.iter().any(|s| exe.ends_with(s.as_str()))
            || e.exe_prefix.iter().any(|s| exe.starts_with(s.as_str())))
    {
        return Some(format!("exe {exe}"));
    }
    if let Some(cg) = p
        .cgroup
        .as_deref()
        .filter(|cg| e.cgroup_contains.iter().any(|s| cg.contains(s.as_str())))
    {
        return Some(format!("cgroup {cg}"));
    }
    if let Some(a) = p
        .argv
        .as_deref()
        .filter(|a| e.argv_contains.iter().any(|s| a.contains(s.as_str())))
    {
        return Some(format!("argv {a}"));
    }
    None
}

/// Identifies the writer `chain[0]` given its ancestors `chain[1..]` (nearest first).
/// The shell entry only applies when nothing else matches anywhere in the chain.
pub fn identify(chain: &[ProcInfo]) -> Option<Identity> {
    let make = |e: &Entry, why: String, depth: usize, p: &ProcInfo| Identity {
        name: e.identity.clone(),
        label: e.label.clone(),
        kind: e.kind.clone(),
        writes: e.writes.clone(),
        evidence: if depth == 0 {
            why
        } else {
            format!("ancestor {} {why}", p.pid)
        },
    };
    for (depth, p) in chain.iter().enumerate() {
        for e in catalogue().actors.iter().filter(|e| e.kind != "human") {
            if let Some(why) = matches(e, p) {
                return Some(make(e, why, depth, p));
            }
        }
    }
    for (depth, p) in chain.iter().enumerate() {
        for e in catalogue().actors.iter().filter(|e| e.kind == "human") {
            if let Some(why) = matches(e, p) {
                return Some(make(e, why, depth, p));
            }
        }
    }
    None
}

/// The writer of one change, as reported in events.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Actor {
    /// The writing process's id; None when the writer is unknown (a resync, a poll).
    pub pid: Option<u32>,
    /// Its comm (at most 15 bytes), from /proc or, when it is gone, from the kernel's
    /// NEWGEN or audit record.
    pub comm: Option<String>,
    /// Its executable's path, from /proc or an audit record; None when neither said.
    pub exe: Option<String>,
    /// The systemd unit or scope its cgroup names (`kubelet.service`).
    pub unit: Option<String>,
    /// The container id (12 hex digits) its cgroup names.
    pub container: Option<String>,
    /// Its parent's pid.
    pub ppid: Option<u32>,
    /// Its real user id.
    pub uid: Option<u32>,
    /// Its command line, arguments joined by spaces.
    pub argv: Option<String>,
    /// The inode of its network namespace; None when it was not read (the process is
    /// gone).
    pub netns: Option<u64>,
    /// The catalogue entry it (or an ancestor) matched; None for a writer the
    /// catalogue does not know.
    pub identity: Option<Identity>,
    /// The process had exited before plumb could read /proc: fields come from the
    /// kernel's notification and audit records only.
    pub gone: bool,
}

impl Actor {
    /// An actor nothing is known about (changes found by a resync or a poll).
    pub fn unknown() -> Actor {
        Actor::default()
    }

    /// Display name: the comm, else the identity's name, else `unknown`; then `[pid]`
    /// when the pid is known (`kube-proxy[812]`).
    pub fn display(&self) -> String {
        let name = self
            .comm
            .clone()
            .or_else(|| self.identity.as_ref().map(|i| i.name.clone()))
            .unwrap_or_else(|| "unknown".into());
        match self.pid {
            Some(p) => format!("{name}[{p}]"),
            None => name,
        }
    }

    /// Bounded label for metrics: the identity, else the comm (15 chars at most).
    pub fn metric_label(&self) -> String {
        self.identity
            .as_ref()
            .map(|i| i.name.clone())
            .or_else(|| self.comm.clone())
            .unwrap_or_else(|| "unknown".into())
    }

    /// Whether this writer legitimately changes objects of `owner`.
    pub fn writes(&self, owner: &str) -> bool {
        self.identity
            .as_ref()
            .is_some_and(|i| i.writes.iter().any(|w| w == owner))
    }

    /// Builds an actor from the process and its ancestors (nearest first).
    pub fn from_chain(chain: &[ProcInfo]) -> Actor {
        let Some(p) = chain.first() else {
            return Actor::unknown();
        };
        let cgroup = p.cgroup.as_deref().unwrap_or("");
        Actor {
            pid: Some(p.pid),
            comm: p.comm.clone(),
            exe: p.exe.clone(),
            unit: unit_of_cgroup(cgroup),
            container: container_of_cgroup(cgroup),
            ppid: p.ppid,
            uid: p.uid,
            argv: p.argv.clone(),
            netns: p.netns,
            identity: identify(chain),
            gone: false,
        }
    }
}

/// Hints from the kernel about a writer, used when its process is gone.
#[derive(Clone, Debug, Default)]
pub struct Hints {
    /// The comm the kernel reported (NEWGEN's `NFTA_GEN_PROC_NAME`, audit's `comm=`);
    /// when set, a /proc entry with another comm is taken for a reused pid.
    pub comm: Option<String>,
    /// The executable's path (audit's `exe=`).
    pub exe: Option<String>,
    /// The parent's pid (audit's `ppid=`).
    pub ppid: Option<u32>,
    /// The user id (audit's `uid=`).
    pub uid: Option<u32>,
    /// The command line (audit's PROCTITLE, arguments joined by spaces).
    pub argv: Option<String>,
}

/// How far up the process tree to look for a known writer.
pub(crate) const MAX_ANCESTORS: usize = 6;

/// Resolves `pid` now (call as soon as the notification arrives: writers are
/// short-lived). Falls back to `hints` when the process is gone or the pid was
/// reused by another program (its comm no longer matches).
pub fn resolve(pid: u32, hints: &Hints) -> Actor {
    resolve_with(pid, hints, &|p| ProcInfo::read(p))
}

/// [`resolve`] with a /proc reader (tests substitute one).
pub fn resolve_with(pid: u32, hints: &Hints, read: &dyn Fn(u32) -> Option<ProcInfo>) -> Actor {
    let mut first = read(pid).filter(|p| match (&hints.comm, &p.comm) {
        (Some(h), Some(c)) => h == c,
        _ => true,
    });
    // A writer that is exiting still has a comm but no exe: treat it as gone.
    let gone = first.as_ref().is_none_or(|p| p.exe.is_none());
    let p = first.get_or_insert_with(|| ProcInfo {
        pid,
        comm: hints.comm.clone(),
        exe: hints.exe.clone(),
        ppid: hints.ppid,
        uid: hints.uid,
        argv: hints.argv.clone(),
        ..ProcInfo::default()
    });
    // Fill gaps /proc could not give (e.g. exe of a kernel thread) from hints.
    if p.exe.is_none() {
        p.exe = hints.exe.clone();
    }
    let mut chain = vec![p.clone()];
    let mut next = p.ppid;
    while let Some(pp) = next.filter(|&pp| pp > 1 && chain.len() <= MAX_ANCESTORS) {
        match read(pp) {
            Some(info) => {
                next = info.ppid;
                chain.push(info);
            }
            None => break,
        }
    }
    let mut a = Actor::from_chain(&chain);
    a.gone = gone;
    if a.argv.is_none() {
        a.argv = hints.argv.clone();
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc(pid: u32, comm: &str, exe: &str, ppid: u32) -> ProcInfo {
        ProcInfo {
            pid,
            comm: Some(comm.into()),
            exe: Some(exe.into()),
            ppid: Some(ppid),
            ..ProcInfo::default()
        }
    }

    #[test]
    fn catalogue_is_valid_and_covers_the_issue() {
        let names: Vec<&str> = catalogue()
            .actors
            .iter()
            .map(|e| e.identity.as_str())
            .collect();
        for n in [
            "kube-proxy",
            "kubelet",
            "calico-node",
            "flanneld",
            "cilium-agent",
            "ufw",
            "firewalld",
            "illumio-ven",
            "tanium",
            "trellix",
            "shell",
        ] {
            assert!(names.contains(&n), "{n} missing");
        }
    }

    #[test]
    fn kube_proxy_child_is_kube_proxy() {
        let chain = [
            proc(9001, "iptables-restor", "/usr/sbin/xtables-nft-multi", 812),
            proc(812, "kube-proxy", "/usr/local/bin/kube-proxy", 700),
        ];
        let id = identify(&chain).unwrap();
        assert_eq!(id.name, "kube-proxy");
        assert_eq!(id.evidence, "ancestor 812 comm kube-proxy");
        assert!(Actor::from_chain(&chain).writes("kube-proxy"));
    }

    #[test]
    fn security_agents_by_comm_or_exe_and_shell_last() {
        let ven = identify(&[proc(4211, "venAgent", "/opt/illumio_ven/bin/venAgent", 1)]).unwrap();
        assert_eq!(ven.name, "illumio-ven");
        assert!(ven.writes.is_empty());
        let tan = identify(&[proc(5, "x", "/opt/Tanium/TaniumClient/x", 1)]).unwrap();
        assert_eq!(tan.name, "tanium");
        // iptables from a shell under sshd: the shell entry, not sshd's.
        let by_hand = identify(&[
            proc(10, "iptables", "/usr/sbin/xtables-nft-multi", 9),
            proc(9, "bash", "/usr/bin/bash", 8),
        ])
        .unwrap();
        assert_eq!(by_hand.name, "shell");
        // ... but a shell script run by kube-proxy is kube-proxy.
        let scripted = identify(&[
            proc(10, "iptables", "/usr/sbin/xtables-nft-multi", 9),
            proc(9, "sh", "/bin/sh", 8),
            proc(8, "kube-proxy", "/kube-proxy", 1),
        ])
        .unwrap();
        assert_eq!(scripted.name, "kube-proxy");
        assert!(identify(&[proc(3, "nft", "/usr/sbin/nft", 1)]).is_none());
    }

    #[test]
    fn cgroup_gives_unit_and_container() {
        let cg = "/kubepods.slice/kubepods-besteffort.slice/cri-containerd-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope";
        assert_eq!(
            unit_of_cgroup(cg).unwrap(),
            "cri-containerd-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope"
        );
        assert_eq!(container_of_cgroup(cg).unwrap(), "0123456789ab");
        assert_eq!(
            unit_of_cgroup("/system.slice/kubelet.service").unwrap(),
            "kubelet.service"
        );
        assert_eq!(container_of_cgroup("/system.slice/kubelet.service"), None);
        assert_eq!(
            parse_cgroup("12:pids:/x\n0::/system.slice/a.service\n").unwrap(),
            "/system.slice/a.service"
        );
        assert_eq!(parse_stat_ppid("42 (a b) c) S 812 1 2"), Some(812));
    }

    #[test]
    fn gone_process_falls_back_to_hints_and_reused_pid_is_not_trusted() {
        let hints = Hints {
            comm: Some("venAgent".into()),
            exe: Some("/opt/illumio/bin/venAgent".into()),
            ppid: Some(1),
            ..Hints::default()
        };
        let a = resolve_with(4211, &hints, &|_| None);
        assert!(a.gone);
        assert_eq!(a.exe.as_deref(), Some("/opt/illumio/bin/venAgent"));
        assert_eq!(a.identity.unwrap().name, "illumio-ven");
        // The pid now belongs to another program: use the hints, not /proc.
        let a = resolve_with(4211, &hints, &|p| Some(proc(p, "sleep", "/bin/sleep", 1)));
        assert!(a.gone);
        assert_eq!(a.comm.as_deref(), Some("venAgent"));
    }

    #[test]
    fn reads_this_process() {
        let me = ProcInfo::read(std::process::id()).unwrap();
        assert!(me.comm.is_some());
        assert!(me.ppid.is_some());
        assert!(me.netns.is_some() || !std::path::Path::new("/proc/self/ns/net").exists());
    }
}
