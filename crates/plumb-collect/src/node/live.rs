//! This machine, or one of its network namespaces with a file tree standing for a node
//! (`--netns NAME --root DIR`; the lab is both). Commands run with deadlines through a
//! [`Runner`]; network-scoped ones (dumps, sysctls, sockets, /proc/net) inside the
//! namespace, host-scoped ones (units, processes, modules) on the host.
//!
//! Node files are read inside the root: no path or symlink under it leads outside, and
//! only regular files are read ([`super::rooted`]).
//!
//! Read-only: only dump and status commands run. `iptables -nvL` is refused live because
//! listing a legacy table that does not exist creates it (facts-kernel.md).

use super::{Captured, MAX_READ, NodeCommand, NodeSource, Unavailable, rooted};
use plumb_facts::{SourceInfo, SourceKind};
use plumb_os::runner::{RunError, Runner};
use plumb_ruleset::{Backend, Family};
use std::path::{Path, PathBuf};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(10);
const DUMP_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest the nf_tables netlink read may take (a 10k-service x 5-endpoint
/// namespace, 170k rules: about 1 s); past it, the tools are used and the read says so.
pub const NETLINK_TIMEOUT: Duration = Duration::from_secs(20);

/// Longest the legacy getsockopt read of one family may take (a 10k-service x
/// 5-endpoint namespace: well under 1 s); past it, the save tool is used and the read
/// says so.
pub const LEGACY_TIMEOUT: Duration = Duration::from_secs(20);

/// This machine as a [`NodeSource`]: commands run through `R` with deadlines (network-scoped
/// ones in the optional network namespace), node files are read under a root directory.
pub struct LiveNode<R: Runner> {
    runner: R,
    netns: Option<String>,
    root: PathBuf,
    netlink: bool,
}

impl<R: Runner> LiveNode<R> {
    /// `netns`: read network state inside it; `root`: read node files under it ("/" = this machine).
    pub fn new(runner: R, netns: Option<String>, root: impl Into<PathBuf>) -> LiveNode<R> {
        LiveNode {
            runner,
            netns,
            root: root.into(),
            netlink: false,
        }
    }

    /// Reads nf_tables over netlink ([`NodeSource::nft_netlink`]) and the legacy
    /// tables through getsockopt ([`NodeSource::xt_legacy`]), the save tools and `nft`
    /// only for what they cannot translate exactly. Off by default: a node whose
    /// commands a test substitutes would otherwise read this machine's kernel.
    pub fn with_netlink(mut self) -> LiveNode<R> {
        self.netlink = true;
        self
    }

    fn run(
        &self,
        program: &str,
        args: &[&str],
        in_netns: bool,
        timeout: Duration,
        accept_failure: bool,
    ) -> Result<Captured, Unavailable> {
        let netns = if in_netns {
            self.netns.as_deref()
        } else {
            None
        };
        let out = self
            .runner
            .run(program, args, netns, timeout)
            .map_err(|e| match e {
                RunError::NotFound { .. } => format!("{program}: not installed"),
                e => e.to_string(),
            })?;
        let source = match netns {
            Some(ns) => format!("{} (netns {ns})", command_line(program, args)),
            None => command_line(program, args),
        };
        let answered = accept_failure && !out.stdout.is_empty();
        if !out.success() && !answered {
            let err = out.stderr.trim();
            return Err(format!(
                "{source}: exit status {}{}{err}",
                out.status.map_or("killed".into(), |c| c.to_string()),
                if err.is_empty() { "" } else { ": " }
            ));
        }
        Ok(Captured {
            source,
            bytes: out.stdout,
        })
    }

    /// Where a node path is shown to be read from (reads resolve it inside the root:
    /// [`rooted`]).
    fn host_path(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }

    /// /proc/net and /proc/sys/net describe the reading process's namespace: inside a
    /// namespace they must be read from there.
    fn netns_scoped(&self, path: &str) -> bool {
        self.netns.is_some()
            && (path.starts_with("/proc/net/") || path.starts_with("/proc/sys/net/"))
    }
}

fn command_line(program: &str, args: &[&str]) -> String {
    std::iter::once(program)
        .chain(args.iter().copied())
        .collect::<Vec<_>>()
        .join(" ")
}

impl<R: Runner> NodeSource for LiveNode<R> {
    fn cilium(&self) -> plumb_facts::Fact<plumb_facts::CiliumFacts> {
        crate::cilium::live_facts(&self.root, &self.runner)
    }
    fn info(&self) -> SourceInfo {
        let description = match (&self.netns, self.root == Path::new("/")) {
            (None, true) => "this machine".to_string(),
            (Some(ns), true) => format!("network namespace {ns}"),
            (None, false) => format!("files under {}", self.root.display()),
            (Some(ns), false) => format!(
                "network namespace {ns}, files under {}",
                self.root.display()
            ),
        };
        SourceInfo {
            kind: if self.netns.is_none() && self.root == Path::new("/") {
                SourceKind::Live
            } else {
                SourceKind::Namespace
            },
            description,
            notes: Vec::new(),
        }
    }

    fn command(&self, command: &NodeCommand) -> Result<Captured, Unavailable> {
        match command {
            NodeCommand::IptablesSave { family, backend } => {
                let tool = match (family, backend) {
                    (Family::Ip6, Backend::IptablesNft) => "ip6tables-nft-save",
                    (Family::Ip6, Backend::IptablesLegacy) => "ip6tables-legacy-save",
                    (Family::Ip6, _) => "ip6tables-save",
                    (_, Backend::IptablesNft) => "iptables-nft-save",
                    (_, Backend::IptablesLegacy) => "iptables-legacy-save",
                    _ => "iptables-save",
                };
                self.run(tool, &[], true, DUMP_TIMEOUT, false)
            }
            NodeCommand::IptablesListing { .. } => Err(
                "not read live: listing a legacy table that does not exist creates it; plumb reads iptables-save".into(),
            ),
            NodeCommand::NftListRuleset => self.run("nft", &["list", "ruleset"], true, DUMP_TIMEOUT, false),
            NodeCommand::IptablesVersion => self.run("iptables", &["--version"], true, TIMEOUT, false),
            NodeCommand::Uname => self.run("uname", &["-a"], false, TIMEOUT, false),
            NodeCommand::Lsmod => self.file("/proc/modules"),
            NodeCommand::SysctlAll => self.run("sysctl", &["-a"], true, TIMEOUT, true),
            NodeCommand::SsListening => self.run("ss", &["-tulnp"], true, TIMEOUT, false),
            // Firewall managers' status describes the host; inside a namespace the ruleset
            // itself (ufw-* chains, firewalld tables) is the evidence.
            NodeCommand::UfwStatus | NodeCommand::FirewalldState if self.netns.is_some() => Err(format!(
                "describes the host, not network namespace {}; its ruleset is checked instead",
                self.netns.as_deref().unwrap_or_default()
            )),
            NodeCommand::UfwStatus => self.run("ufw", &["status", "verbose"], false, TIMEOUT, false),
            // Exit status 252 with "not running" is an answer, not a failure.
            NodeCommand::FirewalldState => self.run("firewall-cmd", &["--state"], false, TIMEOUT, true),
            NodeCommand::ListUnits => self.run(
                "systemctl",
                &["list-units", "--all", "--no-pager", "--plain"],
                false,
                TIMEOUT,
                false,
            ),
            NodeCommand::UnitFiles => {
                // Named units only: the output stays a few lines (bounded) and says
                // nothing about the rest of the host.
                let names = super::unit_file_names();
                let mut args = vec!["list-unit-files", "--no-pager"];
                args.extend(names.iter().map(String::as_str));
                self.run("systemctl", &args, false, TIMEOUT, true)
            }
            NodeCommand::Ps => self.run("ps", &["-eo", "pid,comm,args"], false, TIMEOUT, false),
            // The journal is the host's: a file tree standing for a node has none of its own.
            NodeCommand::KubeletJournal if self.root != Path::new("/") => Err(format!(
                "the journal describes this machine, not the node under {}",
                self.root.display()
            )),
            NodeCommand::KubeletJournal => self.run(
                "journalctl",
                &[
                    "-u", "kubelet", "-u", "rke2-agent", "-u", "rke2-server", "-u", "k3s", "-u", "k3s-agent", "-u", "microshift",
                    "--no-pager", "-o", "short-iso", "-n", "20000",
                ],
                false,
                DUMP_TIMEOUT,
                false,
            ),
        }
    }

    fn file(&self, path: &str) -> Result<Captured, Unavailable> {
        if self.netns_scoped(path) {
            return self.run("cat", &[path], true, TIMEOUT, false);
        }
        let p = self.host_path(path);
        let bytes = rooted::read_file(&self.root, path, MAX_READ)
            .map_err(|e| format!("{}: {}", p.display(), reason(&e)))?;
        Ok(Captured {
            source: p.display().to_string(),
            bytes,
        })
    }

    fn dir(&self, path: &str) -> Result<Vec<String>, Unavailable> {
        let p = self.host_path(path);
        let mut names = rooted::list_dir(&self.root, path)
            .map_err(|e| format!("{}: {}", p.display(), reason(&e)))?;
        names.sort();
        Ok(names)
    }

    fn exists(&self, path: &str) -> bool {
        rooted::exists(&self.root, path)
    }

    fn is_live(&self) -> bool {
        true
    }

    fn netns(&self) -> Option<&str> {
        self.netns.as_deref()
    }

    fn nft_netlink(&self) -> Option<Result<crate::nft_netlink::Read, Unavailable>> {
        if !self.netlink {
            return None;
        }
        let start = std::time::Instant::now();
        let read = crate::nft_netlink::read(self.netns.as_deref(), Some(start + NETLINK_TIMEOUT));
        let place = match &self.netns {
            Some(ns) => format!("nf_tables netlink (netns {ns})"),
            None => "nf_tables netlink".to_string(),
        };
        Some(match read {
            Ok((generation, tables)) => Ok(crate::nft_netlink::Read {
                source: place,
                generation,
                tables,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => Err(format!(
                "{place}: could not read the nf_tables ruleset within {} s",
                NETLINK_TIMEOUT.as_secs()
            )),
            Err(e) => Err(format!("{place}: {e}")),
        })
    }

    fn xt_legacy(&self, family: Family) -> Option<Result<crate::xt_legacy::Read, Unavailable>> {
        if !self.netlink {
            return None;
        }
        let tool = if family == Family::Ip6 {
            "ip6tables-legacy"
        } else {
            "iptables-legacy"
        };
        let place = match &self.netns {
            Some(ns) => format!("{tool} getsockopt (netns {ns})"),
            None => format!("{tool} getsockopt"),
        };
        let deadline = std::time::Instant::now() + LEGACY_TIMEOUT;
        Some(
            match crate::xt_legacy::read(self.netns.as_deref(), family, Some(deadline), false) {
                Ok(tables) => Ok(crate::xt_legacy::Read {
                    source: place,
                    tables,
                }),
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => Err(format!(
                    "{place}: could not read the legacy tables within {} s",
                    LEGACY_TIMEOUT.as_secs()
                )),
                Err(e) => Err(format!("{place}: {e}")),
            },
        )
    }

    fn nft_list_table(&self, family: &str, name: &str) -> Result<Captured, Unavailable> {
        self.run(
            "nft",
            &["list", "table", family, name],
            true,
            DUMP_TIMEOUT,
            false,
        )
    }
}

/// "not readable: permission denied" rather than "Permission denied (os error 13)".
pub(crate) fn reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "does not exist".into(),
        std::io::ErrorKind::PermissionDenied => "not readable: permission denied".into(),
        _ => e.to_string(),
    }
}
