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
    _tmp: Option<TempDir>,
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
    /// A sysdump's agent bugtool archive, unpacked.
    bugtool: Option<Bugtool>,
    _extracted: Option<TempDir>,
}

/// Opens a bundle directory or archive. The path is a local path, whatever it contains
/// (`host:file.tar.gz` is a file name); archives are read within [`Limits::BUNDLE`].
pub fn open_bundle(path: &Path) -> Result<BundleNode, String> {
    open_bundle_within(path, &Limits::BUNDLE)
}

/// [`open_bundle`] with other extraction limits (tests use small ones).
pub fn open_bundle_within(path: &Path, limits: &Limits) -> Result<BundleNode, String> {
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
    let bugtool = if kind == BundleKind::CiliumSysdump {
        Some(open_bugtool(&root, limits, &mut notes).map_err(|e| format!("{label}: {e}"))?)
    } else {
        None
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

/// The sysdump's first agent bugtool archive (by name), unpacked into a private
/// temporary directory (an unpacked one inside the sysdump is read in place). A sysdump
/// holds one per Cilium agent; doctor reads one node, and the note says which.
fn open_bugtool(root: &Path, limits: &Limits, notes: &mut Vec<String>) -> Result<Bugtool, String> {
    let mut names: Vec<String> = std::fs::read_dir(root)
        .map_err(|e| reason(&e))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("cilium-bugtool-"))
        .collect();
    names.sort();
    let name = names
        .first()
        .ok_or("a Cilium sysdump without a cilium-bugtool archive")?
        .clone();
    if names.len() > 1 {
        notes.push(format!(
            "the sysdump holds {} agents' bugtool archives; this reads {name} (one node)",
            names.len()
        ));
    }
    let pod = bugtool_pod(&name).unwrap_or_default();
    let path = root.join(&name);
    let (dir, tmp) = if is_real_dir(&path) {
        (path, None)
    } else {
        let file = open_regular(&path, false).map_err(|e| format!("{name}: {}", reason(&e)))?;
        let tmp = TempDir::create("plumb-bugtool")?;
        let done =
            archive::extract_file(file, tmp.path(), limits).map_err(|e| format!("{name}: {e}"))?;
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
            .ok_or_else(|| format!("{name}: no cmd/ directory of command outputs"))?
    };
    Ok(Bugtool {
        cmd,
        root: dir,
        name,
        pod,
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
            description: format!("{} at {}", self.tool(), self.label),
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
        crate::cilium::sysdump_facts(|files| {
            self.bugtool_command(files)
                .map(|c| (c.source, String::from_utf8_lossy(&c.bytes).into_owned()))
        })
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
