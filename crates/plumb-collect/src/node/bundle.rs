//! Support bundles: a sosreport, Rancher's rancher2_logs_collector output, or plumb's own
//! bundle — as a directory or an archive (tar, plain or gzip/xz-compressed, told by its
//! first bytes), read in Rust by [`crate::archive`] into a private temporary directory that
//! is removed on drop and on SIGINT/SIGTERM/SIGHUP.
//!
//! Where each tool keeps each command's output is in the tables below; the research with
//! citations is docs/bundles.md. Reads never leave the bundle: every path is resolved and
//! refused when it points outside (a crafted bundle must not make plumb quote the host's
//! files), and only regular files are opened (a FIFO would hang the read, a device node
//! would be the host's device).

use super::live::reason;
use super::{Captured, MAX_READ, NodeCommand, NodeSource, Unavailable};
use crate::archive::{self, Limits};
use crate::tempdir::TempDir;
use plumb_facts::{SourceInfo, SourceKind};
use plumb_ruleset::{Backend, Family};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Which tool made the bundle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BundleKind {
    /// A sosreport (RHEL, SUSE, Ubuntu: `sos report`).
    Sosreport,
    /// Rancher's collector; `rke2` or `k3s` is the distro directory found.
    Rancher,
    /// `plumb collect`.
    Plumb,
    /// A Cilium sysdump (`cilium-sysdump-<time>.zip`, or the directory it unpacks to):
    /// one agent's bugtool archive gives the node's command outputs.
    CiliumSysdump,
}

/// The agent bugtool archive of a sysdump that a [`BundleNode`] reads, unpacked.
struct Bugtool {
    /// Its `cmd/` directory (command outputs, `<command>.md`).
    cmd: PathBuf,
    /// The directory it was unpacked into (paths inside are shown relative to it).
    root: PathBuf,
    /// The archive's name in the sysdump.
    name: String,
    /// The agent pod it came from (`cilium-xxxxx`).
    pod: String,
    /// The node's name, from the bugtool's `uname -a` (its host name) when it holds one.
    node: Option<String>,
    _tmp: Option<TempDir>,
}

/// One Cilium agent (one node) of a sysdump: its bugtool archive, its pod and node.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SysdumpAgent {
    /// The bugtool archive's name in the sysdump.
    pub archive: String,
    /// The agent pod (`cilium-xxxxx`); empty when the archive's name does not say.
    pub pod: String,
    /// The node's host name, from the bugtool's `uname -a`, when it holds one.
    pub node: Option<String>,
}

impl SysdumpAgent {
    /// `node kind-worker (agent pod cilium-x7k2p)`, or the pod or archive alone.
    pub fn describe(&self) -> String {
        let pod = if self.pod.is_empty() {
            &self.archive
        } else {
            &self.pod
        };
        match &self.node {
            Some(n) => format!("node {n} (agent pod {pod})"),
            None => format!("agent pod {pod}"),
        }
    }

    /// Whether `--node NAME` names this agent: its node or its pod.
    fn is(&self, name: &str) -> bool {
        self.node.as_deref() == Some(name) || (!self.pod.is_empty() && self.pod == name)
    }
}

/// The file plumb's own bundle starts with.
pub const PLUMB_MANIFEST: &str = "plumb-manifest.json";

/// A bundle opened for reading (see [`open_bundle`]).
pub struct BundleNode {
    root: PathBuf,
    kind: BundleKind,
    /// `rke2` or `k3s` in Rancher bundles.
    distro: String,
    label: String,
    /// What extraction skipped, for the user.
    notes: Vec<String>,
    /// A sysdump's agent bugtool archive, unpacked: the node read.
    bugtool: Option<Bugtool>,
    /// A sysdump's other agents (nodes), not read.
    other_agents: Vec<SysdumpAgent>,
    _extracted: Option<TempDir>,
}

/// Opens a bundle directory or archive. The path is a local path, whatever it contains
/// (`host:file.tar.gz` is a file name); archives are read within [`Limits::BUNDLE`].
pub fn open_bundle(path: &Path) -> Result<BundleNode, String> {
    open_bundle_within(path, &Limits::BUNDLE)
}

/// [`open_bundle`] with other extraction limits (tests use small ones).
pub fn open_bundle_within(path: &Path, limits: &Limits) -> Result<BundleNode, String> {
    open_bundle_node_within(path, limits, None)
}

/// [`open_bundle`] reading one node of a Cilium sysdump: `node` is a node name (the
/// host name in its bugtool's `uname -a`) or an agent pod name; None reads the first
/// agent's (by archive name), and [`BundleNode::other_agents`] lists the rest. Any other
/// bundle holds one node: naming one is an error.
pub fn open_bundle_node(path: &Path, node: Option<&str>) -> Result<BundleNode, String> {
    open_bundle_node_within(path, &Limits::BUNDLE, node)
}

/// [`open_bundle_node`] with other extraction limits.
pub fn open_bundle_node_within(
    path: &Path,
    limits: &Limits,
    node: Option<&str>,
) -> Result<BundleNode, String> {
    let label = path.display().to_string();
    let meta = std::fs::metadata(path).map_err(|e| format!("{label}: {}", reason(&e)))?;
    let (dir, extracted, notes) = if meta.is_dir() {
        (path.to_path_buf(), None, Vec::new())
    } else {
        // The user's own path may be a symbolic link; what it names must be a file.
        let file = open_regular(path, true).map_err(|e| format!("{label}: {}", reason(&e)))?;
        let tmp = TempDir::create("plumb-bundle")?;
        let done =
            archive::extract_file(file, tmp.path(), limits).map_err(|e| format!("{label}: {e}"))?;
        (tmp.path().to_path_buf(), Some(tmp), done.notes())
    };
    let (root, kind) = find_root(&dir).ok_or_else(|| {
        format!("{label}: not a sosreport, Rancher log collector, Cilium sysdump or plumb bundle (no sos_commands/, systeminfo/+networking/, cilium-bugtool-* or {PLUMB_MANIFEST} found)")
    })?;
    let mut notes = notes;
    let (bugtool, other_agents) = if kind == BundleKind::CiliumSysdump {
        let (b, others) =
            open_bugtool(&root, limits, &mut notes, node).map_err(|e| format!("{label}: {e}"))?;
        (Some(b), others)
    } else {
        if let Some(n) = node {
            return Err(format!(
                "{label}: --node {n} selects a node of a Cilium sysdump; this bundle holds one node"
            ));
        }
        (None, Vec::new())
    };
    let distro = ["rke2", "k3s", "rke", "kubeadm"]
        .into_iter()
        .find(|d| is_real_dir(&root.join(d)))
        .unwrap_or("rke2")
        .to_string();
    Ok(BundleNode {
        root,
        kind,
        distro,
        label,
        notes,
        bugtool,
        other_agents,
        _extracted: extracted,
    })
}

/// `cilium-bugtool-<pod>-<YYYYMMDD-HHMMSS>[.tar.gz]` -> `<pod>`.
fn bugtool_pod(name: &str) -> Option<String> {
    let rest = name.strip_prefix("cilium-bugtool-")?;
    let rest = rest.strip_suffix(".tar.gz").unwrap_or(rest);
    // The time is 15 characters (20060102-150405) after a dash.
    let cut = rest.len().checked_sub(16)?;
    let (pod, ts) = rest.split_at(cut);
    let ts = ts.strip_prefix('-')?;
    (ts.len() == 15
        && ts.as_bytes()[8] == b'-'
        && ts.bytes().filter(u8::is_ascii_digit).count() == 14)
        .then(|| pod.to_string())
        .filter(|p| !p.is_empty())
}

/// Every agent bugtool archive of the sysdump (one per Cilium agent, so per node) is
/// opened — unpacked into a private temporary directory, or read in place when the
/// sysdump holds it unpacked — to learn its node's name; `node` selects which one is
/// read (by node or pod name), else the first by archive name. Only the one read stays
/// unpacked: each other one is removed once its node's name is known. Returns the one read and
/// the others; the notes say which was read and name the others. An archive that cannot
/// be opened is a note, unless it is the one asked for.
fn open_bugtool(
    root: &Path,
    limits: &Limits,
    notes: &mut Vec<String>,
    node: Option<&str>,
) -> Result<(Bugtool, Vec<SysdumpAgent>), String> {
    let mut names: Vec<String> = std::fs::read_dir(root)
        .map_err(|e| reason(&e))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("cilium-bugtool-"))
        .collect();
    names.sort();
    if names.is_empty() {
        return Err("a Cilium sysdump without a cilium-bugtool archive".into());
    }
    // One archive unpacked at a time besides the one kept: the others are removed as
    // soon as their node's name is read.
    let mut chosen: Option<Bugtool> = None;
    let mut others: Vec<SysdumpAgent> = Vec::new();
    let mut unreadable: Vec<SysdumpAgent> = Vec::new();
    let mut errors: Vec<String> = Vec::new();
    for name in &names {
        match open_one_bugtool(root, name, limits, notes) {
            Ok(b) => {
                let a = SysdumpAgent {
                    archive: b.name.clone(),
                    pod: b.pod.clone(),
                    node: b.node.clone(),
                };
                if chosen.is_none() && node.is_none_or(|n| a.is(n)) {
                    chosen = Some(b);
                } else {
                    others.push(a);
                }
            }
            Err(e) => {
                errors.push(format!("{name}: {e}"));
                unreadable.push(SysdumpAgent {
                    archive: name.clone(),
                    pod: bugtool_pod(name).unwrap_or_default(),
                    node: None,
                });
            }
        }
    }
    let Some(chosen) = chosen else {
        return Err(match node {
            Some(n) if let Some(i) = unreadable.iter().position(|a| a.is(n)) => {
                format!("{n}: {}", errors[i])
            }
            Some(n) => {
                let known: Vec<String> = others
                    .iter()
                    .map(SysdumpAgent::describe)
                    .chain(
                        unreadable
                            .iter()
                            .map(|a| format!("{} (unreadable)", a.describe())),
                    )
                    .collect();
                format!(
                    "no node or agent pod named {n} in this sysdump; it holds: {}",
                    known.join(", ")
                )
            }
            None => errors.join("; "),
        });
    };
    notes.extend(errors.iter().map(|e| format!("not read: {e}")));
    others.extend(unreadable);
    if !others.is_empty() {
        let read = SysdumpAgent {
            archive: chosen.name.clone(),
            pod: chosen.pod.clone(),
            node: chosen.node.clone(),
        };
        let list: Vec<String> = others.iter().map(SysdumpAgent::describe).collect();
        notes.push(format!(
            "the sysdump holds {} agents' bugtool archives; this reads {} ({}); the others: {} (choose one with --node NAME)",
            others.len() + 1,
            read.describe(),
            chosen.name,
            list.join(", ")
        ));
    }
    Ok((chosen, others))
}

/// Opens one bugtool archive of the sysdump.
fn open_one_bugtool(
    root: &Path,
    name: &str,
    limits: &Limits,
    notes: &mut Vec<String>,
) -> Result<Bugtool, String> {
    let pod = bugtool_pod(name).unwrap_or_default();
    let path = root.join(name);
    let (dir, tmp) = if is_real_dir(&path) {
        (path, None)
    } else {
        let file = open_regular(&path, false).map_err(|e| reason(&e))?;
        let tmp = TempDir::create("plumb-bugtool")?;
        let done = archive::extract_file(file, tmp.path(), limits).map_err(|e| e.to_string())?;
        notes.extend(done.notes().into_iter().map(|n| format!("{name}: {n}")));
        (tmp.path().to_path_buf(), Some(tmp))
    };
    // Inside: `cilium-bugtool-<time>-<random>/cmd/`.
    let cmd = if is_real_dir(&dir.join("cmd")) {
        dir.join("cmd")
    } else {
        std::fs::read_dir(&dir)
            .map_err(|e| reason(&e))?
            .filter_map(|e| e.ok())
            .map(|e| e.path().join("cmd"))
            .find(|p| is_real_dir(p))
            .ok_or("no cmd/ directory of command outputs")?
    };
    // `uname -a`: `Linux <host name> <release> ...`.
    let node = ["uname--a.md", "uname.md"].iter().find_map(|f| {
        let file = open_regular(&cmd.join(f), false).ok()?;
        let mut text = String::new();
        file.take(64 * 1024).read_to_string(&mut text).ok()?;
        let host = bugtool_output(&text).split_whitespace().nth(1)?.to_string();
        (host.len() <= 253).then_some(host)
    });
    Ok(Bugtool {
        cmd,
        root: dir,
        name: name.to_string(),
        pod,
        node,
        _tmp: tmp,
    })
}

/// A bugtool `.md` file's command output: with markdown on, bugtool writes
/// `# <command>`, a blank line, and the output in a ``` fence; without, the output as is.
fn bugtool_output(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("# ") else {
        return text;
    };
    let Some(open) = rest.find("\n```\n") else {
        return text;
    };
    let body = &rest[open + 5..];
    match body.rfind("\n```") {
        Some(close) => &body[..close + 1],
        None => body,
    }
}

/// Opens `path` for reading only if it is a regular file, and never opens anything else:
/// opening a FIFO blocks until a writer comes, and a device's open can act on the device
/// (a tape rewinds, a watchdog starts). The path is opened with `O_PATH` (which does not
/// call the file's own open), checked with fstat, and only then reopened for reading
/// through `/proc/self/fd`, so the checked file is the one read. `follow` = false refuses
/// a symbolic link in the last component.
pub(crate) fn open_regular(path: &Path, follow: bool) -> io::Result<File> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let nofollow = if follow { 0 } else { libc::O_NOFOLLOW };
    // SAFETY: `c` is NUL-terminated and outlives the call.
    let raw = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC | nofollow) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` was just returned by open and is owned by nobody else.
    let handle = File::from(unsafe { OwnedFd::from_raw_fd(raw) });
    let checked = handle.metadata()?;
    not_regular(&checked)?;
    let reopen = format!("/proc/self/fd/{}", handle.as_raw_fd());
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(&reopen)
    {
        Ok(f) => f,
        // No /proc (a minimal container): open the path itself, still non-blocking.
        Err(e) if e.kind() == io::ErrorKind::NotFound => std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | nofollow)
            .open(path)?,
        Err(e) => return Err(e),
    };
    let opened = file.metadata()?;
    not_regular(&opened)?;
    if (opened.dev(), opened.ino()) != (checked.dev(), checked.ino()) {
        return Err(io::Error::other("changed while being opened; not read"));
    }
    Ok(file)
}

fn not_regular(m: &std::fs::Metadata) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let t = m.file_type();
    let what = if t.is_file() {
        return Ok(());
    } else if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_char_device() {
        "a character device"
    } else {
        "not a file"
    };
    Err(io::Error::other(format!(
        "{what}, not a regular file; not read"
    )))
}

/// A directory itself, not a symbolic link to one.
fn is_real_dir(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir())
}

/// A regular file itself, not a symbolic link to one.
fn is_real_file(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file())
}

fn kind_of(dir: &Path) -> Option<BundleKind> {
    if is_real_file(&dir.join(PLUMB_MANIFEST)) {
        Some(BundleKind::Plumb)
    } else if std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .any(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("cilium-bugtool-"))
        })
    {
        Some(BundleKind::CiliumSysdump)
    } else if is_real_dir(&dir.join("sos_commands")) {
        Some(BundleKind::Sosreport)
    } else if is_real_dir(&dir.join("systeminfo")) && is_real_dir(&dir.join("networking")) {
        Some(BundleKind::Rancher)
    } else {
        None
    }
}

/// The bundle's top directory: the given one, or its single subdirectory (tarballs hold
/// one top-level directory; Rancher's before 2023-09 held none). Symbolic links are not
/// followed here: a link to a directory elsewhere is not the bundle.
fn find_root(dir: &Path) -> Option<(PathBuf, BundleKind)> {
    if let Some(k) = kind_of(dir) {
        return Some((dir.to_path_buf(), k));
    }
    let subdirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    match subdirs.as_slice() {
        [one] => kind_of(one).map(|k| (one.clone(), k)),
        _ => None,
    }
}

impl BundleNode {
    /// Which tool made the bundle.
    pub fn kind(&self) -> BundleKind {
        self.kind
    }

    /// The bundle's top directory (inside the temporary directory for an archive).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A Cilium sysdump's agent (node) that is read; None for other bundles.
    pub fn sysdump_agent(&self) -> Option<SysdumpAgent> {
        self.bugtool.as_ref().map(|b| SysdumpAgent {
            archive: b.name.clone(),
            pod: b.pod.clone(),
            node: b.node.clone(),
        })
    }

    /// A Cilium sysdump's other agents (nodes), not read.
    pub fn other_agents(&self) -> &[SysdumpAgent] {
        &self.other_agents
    }

    /// What extraction did not extract, one line per kind (also in [`NodeSource::info`]).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Where the bundle keeps a command's output, most recent tool version first.
    fn command_paths(&self, command: &NodeCommand) -> Result<Vec<String>, Unavailable> {
        let ip6 = |f: &Family| *f == Family::Ip6;
        Ok(match self.kind {
            BundleKind::Plumb => vec![format!("commands/{}", command.bundle_name())],
            BundleKind::CiliumSysdump => {
                let files: &[&str] = match command {
                    NodeCommand::IptablesSave { family, backend } => match (ip6(family), backend) {
                        (false, Backend::IptablesLegacy) => &["iptables-legacy-save--c.md"],
                        (false, _) => &["iptables-nft-save--c.md", "iptables-save--c.md"],
                        (true, Backend::IptablesLegacy) => &["ip6tables-legacy-save--c.md"],
                        (true, _) => &["ip6tables-nft-save--c.md", "ip6tables-save--c.md"],
                    },
                    NodeCommand::NftListRuleset => &["nft-list-ruleset.md"],
                    NodeCommand::Uname => &["uname--a.md"],
                    NodeCommand::Lsmod => &["lsmod.md"],
                    NodeCommand::SysctlAll => &["sysctl--a.md"],
                    NodeCommand::SsListening => {
                        &["ss--H--l--n--t--u--p.md", "ss--t--u--l--n--p.md"]
                    }
                    _ => {
                        return Err(format!(
                            "a Cilium sysdump's bugtool does not run {}",
                            command.bundle_name()
                        ));
                    }
                };
                let cmd = &self
                    .bugtool
                    .as_ref()
                    .expect("a sysdump has its bugtool")
                    .cmd;
                files
                    .iter()
                    .map(|f| cmd.join(f).display().to_string())
                    .collect()
            }
            BundleKind::Sosreport => match command {
                NodeCommand::IptablesSave { .. } => {
                    return Err("sosreport does not run iptables-save in the host namespace; using its -nvL listings".into());
                }
                NodeCommand::IptablesListing { family, table } => {
                    let tool = if ip6(family) { "ip6tables" } else { "iptables" };
                    let mut v: Vec<String> = ["firewall_tables", "networking"]
                        .iter()
                        .map(|d| format!("sos_commands/{d}/{tool}_-t_{table}_-nvL"))
                        .collect();
                    if table == "filter" {
                        v.push(format!("sos_commands/firewall_tables/{tool}_-vnxL"));
                    }
                    v
                }
                NodeCommand::NftListRuleset => vec![
                    "sos_commands/firewall_tables/nft_-a_list_ruleset".into(),
                    "sos_commands/firewall_tables/nft_list_ruleset".into(),
                    "sos_commands/firewalld/nft_list_ruleset".into(),
                    "sos_commands/networking/nft_list_ruleset".into(),
                ],
                NodeCommand::IptablesVersion => {
                    return Err("sosreport does not record iptables --version".into());
                }
                NodeCommand::Uname => vec!["sos_commands/kernel/uname_-a".into(), "uname".into()],
                NodeCommand::Lsmod => vec![
                    "sos_commands/kernel/lsmod".into(),
                    "lsmod".into(),
                    "proc/modules".into(),
                ],
                NodeCommand::SysctlAll => vec!["sos_commands/kernel/sysctl_-a".into()],
                NodeCommand::SsListening => vec!["sos_commands/networking/ss_-peaonmi".into()],
                NodeCommand::UfwStatus => vec!["sos_commands/ufw/ufw_status_numbered".into()],
                NodeCommand::FirewalldState => {
                    vec!["sos_commands/firewalld/firewall-cmd_--state".into()]
                }
                NodeCommand::ListUnits => vec![
                    "sos_commands/systemd/systemctl_list-units_--all".into(),
                    "sos_commands/systemd/systemctl_list-units".into(),
                ],
                // sos's `add_journal(units=...)` writes `journalctl --no-pager --unit U`
                // as `journalctl_--no-pager_--unit_U` under the plugin's directory: the
                // kubernetes and openshift plugins for kubelet, rke2's for its services,
                // microshift's for its unit (sosreport/sos sos/report/plugins/*.py). Each
                // one found is read (they are separate units).
                // sos's systemd plugin: `systemctl list-unit-files`.
                NodeCommand::UnitFiles => {
                    vec!["sos_commands/systemd/systemctl_list-unit-files".into()]
                }
                NodeCommand::KubeletJournal => [
                    ("kubernetes", "kubelet"),
                    ("openshift", "kubelet"),
                    ("rke2", "rke2-server"),
                    ("rke2", "rke2-agent"),
                    ("k3s", "k3s"),
                    ("microshift", "microshift"),
                ]
                .iter()
                .map(|(plugin, unit)| {
                    format!("sos_commands/{plugin}/journalctl_--no-pager_--unit_{unit}")
                })
                .collect(),
                NodeCommand::Ps => vec![
                    "sos_commands/process/ps_auxwwwm".into(),
                    "ps".into(),
                    "sos_commands/process/ps_auxfwww".into(),
                ],
            },
            BundleKind::Rancher => match command {
                NodeCommand::IptablesSave { family, backend } => {
                    if matches!(backend, Backend::IptablesLegacy) {
                        return Err("Rancher's collector runs only the host's iptables-save (its header names the backend)".into());
                    }
                    vec![
                        if ip6(family) {
                            "networking/ip6tablessave"
                        } else {
                            "networking/iptablessave"
                        }
                        .into(),
                    ]
                }
                NodeCommand::IptablesListing { family, table } => {
                    let tool = if ip6(family) { "ip6tables" } else { "iptables" };
                    match table.as_str() {
                        "filter" => vec![format!("networking/{tool}")],
                        "nat" | "mangle" => vec![format!("networking/{tool}{table}")],
                        _ => {
                            return Err(format!(
                                "Rancher's collector does not list the {table} table"
                            ));
                        }
                    }
                }
                NodeCommand::NftListRuleset => vec!["networking/nft_ruleset".into()],
                NodeCommand::IptablesVersion => {
                    return Err("Rancher's collector loses iptables --version (see the iptablessave header)".into());
                }
                NodeCommand::Uname => vec!["systeminfo/uname".into()],
                NodeCommand::Lsmod => vec!["systeminfo/lsmod".into()],
                NodeCommand::SysctlAll => vec!["systeminfo/sysctla".into()],
                NodeCommand::SsListening => {
                    vec!["networking/sstunlp4".into(), "networking/sstunlp6".into()]
                }
                NodeCommand::UfwStatus => vec!["systeminfo/ubuntu-ufw".into()],
                NodeCommand::FirewalldState => vec!["systeminfo/rhel-statusfirewalld".into()],
                NodeCommand::ListUnits => vec!["systeminfo/systemd-units".into()],
                // `systemctl list-unit-files` (docs/bundles.md, Rancher collector l.260).
                NodeCommand::UnitFiles => vec!["systeminfo/systemd-unit-files".into()],
                NodeCommand::Ps => vec!["systeminfo/ps".into(), "systeminfo/psaux".into()],
                NodeCommand::KubeletJournal => {
                    ["kubelet", "rke2-agent", "rke2-server", "k3s", "k3s-agent"]
                        .iter()
                        .map(|u| format!("journald/{u}"))
                        .collect()
                }
            },
        })
    }

    /// Where the bundle keeps a node path (None: this tool does not collect it).
    fn map_path(&self, path: &str) -> Option<PathBuf> {
        let rel = path.trim_start_matches('/');
        match self.kind {
            BundleKind::Sosreport => Some(self.root.join(rel)),
            BundleKind::Plumb => Some(self.root.join("files").join(rel)),
            // The agent's view of /etc/cni/net.d: `cniconf-<pod>-<file>-<time>.txt`.
            BundleKind::CiliumSysdump => {
                let file = rel.strip_prefix("etc/cni/net.d/")?;
                let prefix = format!("cniconf-{}-{file}-", self.bugtool.as_ref()?.pod);
                self.sysdump_names()
                    .into_iter()
                    .find(|n| {
                        n.starts_with(&prefix)
                            && n.ends_with(".txt")
                            && n.len() == prefix.len() + 19
                    })
                    .map(|n| self.root.join(n))
            }
            BundleKind::Rancher => {
                let d = &self.distro;
                let table: [(String, String); 7] = [
                    ("var/log/messages".into(), "systemlogs/messages".into()),
                    ("var/log/syslog".into(), "systemlogs/syslog".into()),
                    (
                        format!("etc/rancher/{d}/config.yaml"),
                        format!("{d}/config.yaml"),
                    ),
                    (
                        format!("var/lib/rancher/{d}/agent/pod-manifests"),
                        format!("{d}/pod-manifests"),
                    ),
                    ("etc/cni/net.d".into(), "networking/cni".into()),
                    ("var/log/pods".into(), format!("{d}/podlogs")),
                    (
                        format!("var/lib/rancher/{d}/agent/logs"),
                        format!("{d}/agent-logs"),
                    ),
                ];
                table.iter().find_map(|(node, bundle)| {
                    let rest = rel.strip_prefix(node.as_str())?;
                    (rest.is_empty() || rest.starts_with('/'))
                        .then(|| self.root.join(format!("{bundle}{rest}")))
                })
            }
        }
    }

    /// `p` resolved, if it stays inside the bundle.
    fn inside(&self, p: &Path) -> Result<PathBuf, Unavailable> {
        let real = p
            .canonicalize()
            .map_err(|e| format!("{}: {}", self.rel(p), reason(&e)))?;
        let root = self.root.canonicalize().map_err(|e| reason(&e))?;
        let bugtool = self
            .bugtool
            .as_ref()
            .and_then(|b| b.root.canonicalize().ok());
        if real.starts_with(&root) || bugtool.is_some_and(|b| real.starts_with(b)) {
            Ok(real)
        } else {
            Err(format!(
                "{}: points outside the bundle; not read",
                self.rel(p)
            ))
        }
    }

    fn rel(&self, p: &Path) -> String {
        if let Some(b) = &self.bugtool
            && let Ok(inner) = p.strip_prefix(&b.root)
        {
            return format!("{}:{}", b.name, inner.display());
        }
        p.strip_prefix(&self.root)
            .unwrap_or(p)
            .display()
            .to_string()
    }

    /// The Hubble flows the sysdump holds for the agent read
    /// (`hubble-flows-<pod>-<time>.json`), summed up, with the file's name.
    fn hubble_flows(&self) -> Option<(plumb_cilium::hubble::FlowSummary, String)> {
        let pod = &self.bugtool.as_ref()?.pod;
        if pod.is_empty() {
            return None;
        }
        let prefix = format!("hubble-flows-{pod}-");
        let name = self
            .sysdump_names()
            .into_iter()
            .find(|n| n.starts_with(&prefix) && n.ends_with(".json"))?;
        let c = self.read(&self.root.join(&name)).ok()?;
        let mut summary = plumb_cilium::hubble::summarize(&String::from_utf8_lossy(&c.bytes));
        if c.bytes.len() >= MAX_READ {
            summary.first_unreadable.get_or_insert_with(|| {
                format!("the file is longer than {MAX_READ} bytes; the rest was not read")
            });
        }
        Some((summary, c.source))
    }

    /// Names of the sysdump's top-level files.
    fn sysdump_names(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.root)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// A bugtool command output (`cilium-dbg-status---verbose.md`), unwrapped; the first
    /// of `files` that the archive holds.
    fn bugtool_command(&self, files: &[&str]) -> Option<Captured> {
        let b = self.bugtool.as_ref()?;
        files.iter().find_map(|f| {
            let c = self.read(&b.cmd.join(f)).ok()?;
            let text = String::from_utf8_lossy(&c.bytes);
            Some(Captured {
                bytes: bugtool_output(&text).as_bytes().to_vec(),
                source: c.source,
            })
        })
    }

    fn read(&self, p: &Path) -> Result<Captured, Unavailable> {
        let real = self.inside(p)?;
        let mut bytes = Vec::new();
        open_regular(&real, false)
            .and_then(|f| f.take(MAX_READ as u64).read_to_end(&mut bytes))
            .map_err(|e| format!("{}: {}", self.rel(p), reason(&e)))?;
        Ok(Captured {
            source: self.rel(p),
            bytes,
        })
    }

    fn tool(&self) -> &'static str {
        match self.kind {
            BundleKind::Sosreport => "sosreport",
            BundleKind::Rancher => "Rancher log collector bundle",
            BundleKind::Plumb => "plumb bundle",
            BundleKind::CiliumSysdump => "Cilium sysdump",
        }
    }
}

impl NodeSource for BundleNode {
    fn info(&self) -> SourceInfo {
        SourceInfo {
            kind: match self.kind {
                BundleKind::Sosreport => SourceKind::Sosreport,
                BundleKind::Rancher => SourceKind::RancherCollector,
                BundleKind::Plumb => SourceKind::PlumbBundle,
                BundleKind::CiliumSysdump => SourceKind::CiliumSysdump,
            },
            description: match self.sysdump_agent() {
                Some(a) => format!("{} at {}, {}", self.tool(), self.label, a.describe()),
                None => format!("{} at {}", self.tool(), self.label),
            },
            notes: self.notes.clone(),
        }
    }

    fn command(&self, command: &NodeCommand) -> Result<Captured, Unavailable> {
        if self.kind == BundleKind::CiliumSysdump {
            let paths = self.command_paths(command)?;
            let names: Vec<&str> = paths
                .iter()
                .filter_map(|p| Path::new(p).file_name()?.to_str())
                .collect();
            return self.bugtool_command(&names).ok_or_else(|| {
                format!(
                    "not in this Cilium sysdump's bugtool (looked for {})",
                    names.join(", ")
                )
            });
        }
        let paths = self.command_paths(command)?;
        let mut found: Vec<Captured> = paths
            .iter()
            .filter_map(|p| self.read(&self.root.join(p)).ok())
            .collect();
        match found.len() {
            0 => Err(format!(
                "not in this {} (looked for {})",
                self.tool(),
                paths.join(", ")
            )),
            // ss for IPv4 and IPv6 are two files in Rancher bundles, and its journal one
            // file per unit: read them all.
            _ if matches!(
                command,
                NodeCommand::SsListening | NodeCommand::KubeletJournal
            ) =>
            {
                let source = found
                    .iter()
                    .map(|c| c.source.clone())
                    .collect::<Vec<_>>()
                    .join(" + ");
                let bytes = found
                    .iter()
                    .flat_map(|c| c.bytes.iter().copied().chain([b'\n']))
                    .collect();
                Ok(Captured { source, bytes })
            }
            _ => Ok(found.swap_remove(0)),
        }
    }

    fn file(&self, path: &str) -> Result<Captured, Unavailable> {
        let p = self
            .map_path(path)
            .ok_or_else(|| format!("{path}: not collected by a {}", self.tool()))?;
        self.read(&p)
            .map_err(|e| format!("{path}: not in this {} ({e})", self.tool()))
    }

    fn dir(&self, path: &str) -> Result<Vec<String>, Unavailable> {
        if self.kind == BundleKind::CiliumSysdump {
            let pod = self.bugtool.as_ref().map_or("", |b| b.pod.as_str());
            if path.trim_matches('/') != "etc/cni/net.d" || pod.is_empty() {
                return Err(format!("{path}: not collected by a {}", self.tool()));
            }
            let prefix = format!("cniconf-{pod}-");
            // `cniconf-<pod>-<file>-<YYYYMMDD-HHMMSS>.txt`
            return Ok(self
                .sysdump_names()
                .iter()
                .filter_map(|n| {
                    let inner = n.strip_prefix(&prefix)?.strip_suffix(".txt")?;
                    let cut = inner.len().checked_sub(16)?;
                    Some(inner[..cut].to_string())
                })
                .filter(|f| !f.is_empty())
                .collect());
        }
        let p = self
            .map_path(path)
            .ok_or_else(|| format!("{path}: not collected by a {}", self.tool()))?;
        let real = self.inside(&p)?;
        let mut names: Vec<String> = std::fs::read_dir(&real)
            .map_err(|e| format!("{}: {}", self.rel(&p), reason(&e)))?
            .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect();
        names.sort();
        Ok(names)
    }

    fn exists(&self, path: &str) -> bool {
        self.map_path(path).is_some_and(|p| self.inside(&p).is_ok())
    }

    fn is_live(&self) -> bool {
        false
    }

    fn dumps_by_backend(&self) -> bool {
        self.kind == BundleKind::Plumb
    }

    fn cilium(&self) -> plumb_facts::Fact<plumb_facts::CiliumFacts> {
        if self.kind != BundleKind::CiliumSysdump {
            return plumb_facts::Fact::unknown(format!("a {} holds no Cilium state", self.tool()));
        }
        let mut fact = crate::cilium::sysdump_facts(|files| {
            self.bugtool_command(files)
                .map(|c| (c.source, String::from_utf8_lossy(&c.bytes).into_owned()))
        });
        if let Some(hubble) = self.hubble_flows() {
            match &mut fact {
                plumb_facts::Fact::Known { value, .. } => value.hubble = Some(hubble),
                plumb_facts::Fact::Unknown { .. } => {
                    let source = hubble.1.clone();
                    let facts = plumb_facts::CiliumFacts {
                        hubble: Some(hubble),
                        ..Default::default()
                    };
                    fact = plumb_facts::Fact::known(facts, source);
                }
            }
        }
        fact
    }

    fn recorded_probe(&self, name: &str) -> Option<Captured> {
        (self.kind == BundleKind::Plumb)
            .then(|| {
                self.read(&self.root.join("probes").join(format!("{name}.json")))
                    .ok()
            })
            .flatten()
    }
}
