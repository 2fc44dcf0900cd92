//! A node to read: this machine (optionally a network namespace and a file tree standing
//! for a node, as in the lab), or a support bundle of one (sosreport, Rancher's log
//! collector, plumb's own bundle).
//!
//! Facts gathering asks a [`NodeSource`] for *what* it wants — "the iptables-nft dump", "the
//! sysctls", "the file /etc/rancher/rke2/config.yaml" — and each source answers from where
//! it keeps that: a command run with a deadline, a bundle file at its tool's path, or a
//! clear reason it cannot ("sosreport does not collect iptables-save"). That keeps the
//! per-bundle knowledge (docs/bundles.md) in one table per source instead of in every check.

mod bundle;
mod live;
mod rooted;

pub use bundle::{
    BundleKind, BundleNode, PLUMB_MANIFEST, SysdumpAgent, open_bundle, open_bundle_node,
    open_bundle_node_within, open_bundle_within,
};
pub use live::LiveNode;

use plumb_facts::SourceInfo;
use plumb_ruleset::{Backend, Family};

/// Something plumb asks a node for by meaning, not by command line.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum NodeCommand {
    /// `iptables-save` of one family and backend (`IptablesUnknown` = whatever
    /// `iptables-save` is on the node, as bundles record it).
    IptablesSave {
        /// IPv4 (`iptables-save`) or IPv6 (`ip6tables-save`).
        family: Family,
        /// `IptablesNft` or `IptablesLegacy` for the `-nft-`/`-legacy-` variants.
        backend: Backend,
    },
    /// `iptables -t TABLE -nvL` (bundles that only keep listings).
    IptablesListing {
        /// IPv4 (`iptables`) or IPv6 (`ip6tables`).
        family: Family,
        /// The table listed (`filter`, `nat`, `mangle`, `raw`).
        table: String,
    },
    /// `nft list ruleset`.
    NftListRuleset,
    /// `iptables --version`.
    IptablesVersion,
    /// `uname -a`.
    Uname,
    /// `lsmod`.
    Lsmod,
    /// `sysctl -a` (network settings are per namespace).
    SysctlAll,
    /// Listening TCP/UDP sockets with processes (`ss -tulnp`).
    SsListening,
    /// `ufw status verbose`.
    UfwStatus,
    /// `firewall-cmd --state`.
    FirewalldState,
    /// `systemctl list-units --all`.
    ListUnits,
    /// `systemctl list-unit-files` of the firewall managers' and known agents' units
    /// ([`unit_file_names`]): which start at boot.
    UnitFiles,
    /// Process list with command lines.
    Ps,
    /// The journal of kubelet and the distribution's services (kubelet, rke2-agent,
    /// rke2-server, k3s, k3s-agent, microshift), the newest lines.
    KubeletJournal,
}

impl NodeCommand {
    /// File name used for this command in plumb's own bundle.
    pub fn bundle_name(&self) -> String {
        match self {
            NodeCommand::IptablesSave { family, backend } => {
                let tool = if *family == Family::Ip6 {
                    "ip6tables"
                } else {
                    "iptables"
                };
                match backend {
                    Backend::IptablesLegacy => format!("{tool}-legacy-save"),
                    Backend::IptablesNft => format!("{tool}-nft-save"),
                    _ => format!("{tool}-save"),
                }
            }
            NodeCommand::IptablesListing { family, table } => {
                let tool = if *family == Family::Ip6 {
                    "ip6tables"
                } else {
                    "iptables"
                };
                format!("{tool}_-t_{table}_-nvL")
            }
            NodeCommand::NftListRuleset => "nft_list_ruleset".into(),
            NodeCommand::IptablesVersion => "iptables_--version".into(),
            NodeCommand::Uname => "uname_-a".into(),
            NodeCommand::Lsmod => "lsmod".into(),
            NodeCommand::SysctlAll => "sysctl_-a".into(),
            NodeCommand::SsListening => "ss_-tulnp".into(),
            NodeCommand::UfwStatus => "ufw_status_verbose".into(),
            NodeCommand::FirewalldState => "firewall-cmd_--state".into(),
            NodeCommand::ListUnits => "systemctl_list-units_--all".into(),
            NodeCommand::UnitFiles => "systemctl_list-unit-files".into(),
            NodeCommand::Ps => "ps_-eo_pid_comm_args".into(),
            NodeCommand::KubeletJournal => "journalctl_kubelet_rke2_k3s".into(),
        }
    }
}

/// Bytes read from a node and where they came from (for evidence).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Captured {
    /// `iptables-nft-save (netns plumb-node)`, `sos_commands/kernel/lsmod`, `/etc/...`.
    pub source: String,
    /// The output or file content, unchanged (possibly not UTF-8).
    pub bytes: Vec<u8>,
}

impl Captured {
    /// The bytes as text; invalid UTF-8 sequences become U+FFFD.
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.bytes)
    }
}

/// Why something could not be read: shown to the user as the fact's reason.
pub type Unavailable = String;

/// A node, live or in a bundle.
pub trait NodeSource: Sync {
    /// What this node is (live, namespace, which bundle) and how reports describe it.
    fn info(&self) -> SourceInfo;
    /// The output of a command (exit status 0 only; failures become the reason).
    fn command(&self, command: &NodeCommand) -> Result<Captured, Unavailable>;
    /// A file by its absolute path on the node.
    fn file(&self, path: &str) -> Result<Captured, Unavailable>;
    /// Entry names of a directory on the node, sorted.
    fn dir(&self, path: &str) -> Result<Vec<String>, Unavailable>;
    /// Whether a path exists on the node (install directories of agents).
    fn exists(&self, path: &str) -> bool;
    /// True for a running node: network probes (HTTP, TCP connect) make sense.
    fn is_live(&self) -> bool;
    /// The network namespace probes must run in (`None` = plumb's own).
    fn netns(&self) -> Option<&str> {
        None
    }
    /// True when iptables dumps are kept per backend (`iptables-nft-save`,
    /// `iptables-legacy-save`) as on a live node; false for bundles that keep one
    /// `iptables-save` or only listings.
    fn dumps_by_backend(&self) -> bool {
        self.is_live()
    }
    /// The nf_tables ruleset read over netlink ([`crate::nft_netlink::read`]), for a
    /// live node that reads it so (`None`: this node does not; read with the tools).
    fn nft_netlink(&self) -> Option<Result<crate::nft_netlink::Read, Unavailable>> {
        None
    }
    /// The legacy iptables tables of `family` read through getsockopt
    /// ([`crate::xt_legacy::read`]), for a live node that reads them so (`None`: this
    /// node does not; read them with the save tool).
    fn xt_legacy(&self, _family: Family) -> Option<Result<crate::xt_legacy::Read, Unavailable>> {
        None
    }
    /// `nft list table FAMILY NAME` (one native table; a live node only).
    fn nft_list_table(&self, family: &str, name: &str) -> Result<Captured, Unavailable> {
        Err(format!(
            "nft list table {family} {name}: not read from this source"
        ))
    }
    /// A network probe's result recorded in a plumb bundle (`kube-proxy-healthz`, ...).
    fn recorded_probe(&self, _name: &str) -> Option<Captured> {
        None
    }
    /// Cilium's service dataplane as this source shows it: pinned LB maps and the
    /// agent's CLI on a live node, the agent's outputs in a sysdump.
    fn cilium(&self) -> plumb_facts::Fact<plumb_facts::CiliumFacts> {
        plumb_facts::Fact::unknown("this source holds no Cilium state")
    }
}

/// Largest file or command output read (pod logs are tails of this size).
pub const MAX_READ: usize = 64 * 1024 * 1024;

/// Units of host firewall managers whose boot-time state collect and doctor read
/// (`systemctl list-unit-files`): a firewall that is enabled comes back at boot even
/// after it was stopped.
pub const FIREWALL_UNITS: &[&str] = &[
    "firewalld.service",
    "ufw.service",
    "nftables.service",
    "iptables.service",
    "ip6tables.service",
    "netfilter-persistent.service",
];

/// The firewall managers' units and every unit of the agents catalogue.
pub fn unit_file_names() -> Vec<String> {
    let mut v: Vec<String> = FIREWALL_UNITS.iter().map(|u| u.to_string()).collect();
    for a in plumb_facts::agents::catalogue() {
        v.extend(a.units.iter().cloned());
    }
    v.dedup();
    v
}
