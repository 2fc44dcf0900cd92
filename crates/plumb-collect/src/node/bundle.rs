//! Support bundles: a sosreport, Rancher's rancher2_logs_collector output, or plumb's own
//! bundle — as a directory or a `.tar`, `.tar.gz`, `.tar.xz` archive (extracted with the
//! system `tar` into a private temporary directory, removed on drop).
//!
//! Where each tool keeps each command's output is in the tables below; the research with
//! citations is docs/bundles.md. Reads never leave the bundle: a symlink pointing outside
//! it is refused (a crafted bundle must not make plumb quote the host's files).

use super::live::reason;
use super::{Captured, MAX_READ, Node, NodeCommand, Unavailable};
use crate::runner::Runner;
use crate::tempdir::TempDir;
use plumb_facts::{SourceInfo, SourceKind};
use plumb_ruleset::{Backend, Family};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Which tool made the bundle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BundleKind {
    Sosreport,
    /// Rancher's collector; `rke2` or `k3s` is the distro directory found.
    Rancher,
    Plumb,
}

/// The file plumb's own bundle starts with.
pub const PLUMB_MANIFEST: &str = "plumb-manifest.json";

pub struct BundleNode {
    root: PathBuf,
    kind: BundleKind,
    /// `rke2` or `k3s` in Rancher bundles.
    distro: String,
    label: String,
    _extracted: Option<TempDir>,
}

/// Opens a bundle directory or archive.
pub fn open_bundle(path: &Path, runner: &dyn Runner) -> Result<BundleNode, String> {
    let label = path.display().to_string();
    let meta = std::fs::metadata(path).map_err(|e| format!("{label}: {}", reason(&e)))?;
    let (dir, extracted) = if meta.is_dir() {
        (path.to_path_buf(), None)
    } else {
        check_archive_size(path, &label, runner)?;
        let tmp = TempDir::create("plumb-bundle")?;
        let out = runner
            .run(
                "tar",
                &[
                    "-xf",
                    &path.to_string_lossy(),
                    "-C",
                    &tmp.path().to_string_lossy(),
                    "--no-same-owner",
                    "--no-same-permissions",
                ],
                None,
                Duration::from_secs(120),
            )
            .map_err(|e| format!("{label}: could not extract: {e}"))?;
        if !out.success() {
            return Err(format!(
                "{label}: not a readable tar archive (.tar, .tar.gz, .tar.xz): {}",
                out.stderr.trim()
            ));
        }
        (tmp.path().to_path_buf(), Some(tmp))
    };
    let (root, kind) = find_root(&dir).ok_or_else(|| {
        format!("{label}: not a sosreport, Rancher log collector or plumb bundle (no sos_commands/, systeminfo/+networking/ or {PLUMB_MANIFEST} found)")
    })?;
    let distro = ["rke2", "k3s", "rke", "kubeadm"]
        .into_iter()
        .find(|d| root.join(d).is_dir())
        .unwrap_or("rke2")
        .to_string();
    Ok(BundleNode {
        root,
        kind,
        distro,
        label,
        _extracted: extracted,
    })
}

/// Largest total size of an archive's members plumb extracts (a sosreport is typically
/// 10–500 MB unpacked); beyond it, extract by hand and pass the directory.
pub const MAX_EXTRACTED: u64 = 4 * 1024 * 1024 * 1024;

/// Lists the archive (`tar -tvf`) and refuses it when its members add up to more than
/// [`MAX_EXTRACTED`], before anything is written.
fn check_archive_size(path: &Path, label: &str, runner: &dyn Runner) -> Result<(), String> {
    let out = runner
        .run(
            "tar",
            &["-tvf", &path.to_string_lossy()],
            None,
            Duration::from_secs(120),
        )
        .map_err(|e| format!("{label}: could not list: {e}"))?;
    if !out.success() {
        return Err(format!(
            "{label}: not a readable tar archive (.tar, .tar.gz, .tar.xz): {}",
            out.stderr.trim()
        ));
    }
    // `-rw-r--r-- root/root 1234 2026-11-30 08:00 path`: the size is the third column.
    let total: u64 = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2)?.parse::<u64>().ok())
        .sum();
    if total > MAX_EXTRACTED {
        return Err(format!(
            "{label}: unpacks to {} MiB, more than plumb extracts ({} MiB); unpack it yourself and pass the directory",
            total >> 20,
            MAX_EXTRACTED >> 20
        ));
    }
    Ok(())
}

fn kind_of(dir: &Path) -> Option<BundleKind> {
    if dir.join(PLUMB_MANIFEST).is_file() {
        Some(BundleKind::Plumb)
    } else if dir.join("sos_commands").is_dir() {
        Some(BundleKind::Sosreport)
    } else if dir.join("systeminfo").is_dir() && dir.join("networking").is_dir() {
        Some(BundleKind::Rancher)
    } else {
        None
    }
}

/// The bundle's top directory: the given one, or its single subdirectory (tarballs hold
/// one top-level directory; Rancher's before 2023-09 held none).
fn find_root(dir: &Path) -> Option<(PathBuf, BundleKind)> {
    if let Some(k) = kind_of(dir) {
        return Some((dir.to_path_buf(), k));
    }
    let subdirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    match subdirs.as_slice() {
        [one] => kind_of(one).map(|k| (one.clone(), k)),
        _ => None,
    }
}

impl BundleNode {
    pub fn kind(&self) -> BundleKind {
        self.kind
    }

    /// Where the bundle keeps a command's output, most recent tool version first.
    fn command_paths(&self, command: &NodeCommand) -> Result<Vec<String>, Unavailable> {
        let ip6 = |f: &Family| *f == Family::Ip6;
        Ok(match self.kind {
            BundleKind::Plumb => vec![format!("commands/{}", command.bundle_name())],
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
                NodeCommand::Ps => vec!["systeminfo/ps".into(), "systeminfo/psaux".into()],
            },
        })
    }

    /// Where the bundle keeps a node path (None: this tool does not collect it).
    fn map_path(&self, path: &str) -> Option<PathBuf> {
        let rel = path.trim_start_matches('/');
        match self.kind {
            BundleKind::Sosreport => Some(self.root.join(rel)),
            BundleKind::Plumb => Some(self.root.join("files").join(rel)),
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
        if real.starts_with(&root) {
            Ok(real)
        } else {
            Err(format!(
                "{}: points outside the bundle; not read",
                self.rel(p)
            ))
        }
    }

    fn rel(&self, p: &Path) -> String {
        p.strip_prefix(&self.root)
            .unwrap_or(p)
            .display()
            .to_string()
    }

    fn read(&self, p: &Path) -> Result<Captured, Unavailable> {
        let real = self.inside(p)?;
        let mut bytes = Vec::new();
        std::fs::File::open(&real)
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
        }
    }
}

impl Node for BundleNode {
    fn info(&self) -> SourceInfo {
        SourceInfo {
            kind: match self.kind {
                BundleKind::Sosreport => SourceKind::Sosreport,
                BundleKind::Rancher => SourceKind::RancherCollector,
                BundleKind::Plumb => SourceKind::PlumbBundle,
            },
            description: format!("{} at {}", self.tool(), self.label),
        }
    }

    fn command(&self, command: &NodeCommand) -> Result<Captured, Unavailable> {
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
            // ss for IPv4 and IPv6 are two files in Rancher bundles: read both.
            _ if *command == NodeCommand::SsListening => {
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

    fn recorded_probe(&self, name: &str) -> Option<Captured> {
        (self.kind == BundleKind::Plumb)
            .then(|| {
                self.read(&self.root.join("probes").join(format!("{name}.json")))
                    .ok()
            })
            .flatten()
    }
}
