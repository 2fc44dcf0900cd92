//! The incidents the lab reproduces, and what each one sets up.
//!
//! Every scenario runs the same node (kubelet, kube-proxy, Canal's install-cni, an API
//! endpoint); each adds the one condition that breaks it. docs/lab.md describes the symptom
//! and the root cause plumb should report for each.

use std::fmt;
use std::str::FromStr;

/// A lab scenario (`plumb lab up SCENARIO`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scenario {
    /// Everything works; the `kubernetes` ClusterIP answers from the node and from a pod.
    Healthy,
    /// A security agent (Illumio-like `venAgent`) reverts kube-proxy's rules.
    SecurityAgentRevert,
    /// Real UFW enabled in the node namespace.
    UfwActive,
    /// kube-proxy's /healthz 503 while /livez 200 (node not eligible), liveness probe on
    /// /healthz; rules intact.
    ProbeSemantics,
    /// kube-proxy rules in both iptables-legacy and iptables-nft; only nft is live.
    BackendMix,
    /// A service whose endpoints vanished (kube-proxy's REJECT rules).
    NoEndpoints,
    /// `net.ipv4.ip_forward=0` in the node namespace.
    SysctlMissing,
    /// firewalld (iptables backend) reloads: every table flushed and rebuilt, kube-proxy's
    /// and the portmap plugin's DNAT rules wiped.
    FirewalldReload,
    /// calico-node (Felix, eBPF mode, kube-proxy cleanup on) deletes kube-proxy's chains
    /// while kube-proxy runs.
    CalicoBpfCleanup,
    /// RHEL/CentOS iptables-services catch-all `REJECT --reject-with icmp-host-prohibited`
    /// in INPUT and FORWARD.
    HostReject,
    /// kube-proxy's iptables cannot write (the kernel refuses its nf_tables requests).
    IptablesIncompatible,
    /// Cilium with kube-proxy replacement: no kube-proxy and no KUBE-* service rule;
    /// Services answer through Cilium's pinned LB maps and a socket load balancer.
    CiliumKpr,
    /// `cilium-kpr` after an unfinished move from Canal: kube-proxy's stale chains,
    /// Canal's CNI configuration ahead of Cilium's, `cali*` and `flannel.1` links.
    CiliumLeftovers,
}

impl Scenario {
    /// All scenarios, in documentation order.
    pub const ALL: [Scenario; 13] = [
        Self::Healthy,
        Self::SecurityAgentRevert,
        Self::UfwActive,
        Self::ProbeSemantics,
        Self::BackendMix,
        Self::NoEndpoints,
        Self::SysctlMissing,
        Self::FirewalldReload,
        Self::CalicoBpfCleanup,
        Self::HostReject,
        Self::IptablesIncompatible,
        Self::CiliumKpr,
        Self::CiliumLeftovers,
    ];

    /// The name used on the command line and in the state file.
    pub fn name(self) -> &'static str {
        match self {
            Self::Healthy => "healthy",
            Self::SecurityAgentRevert => "security-agent-revert",
            Self::UfwActive => "ufw-active",
            Self::ProbeSemantics => "probe-semantics",
            Self::BackendMix => "backend-mix",
            Self::NoEndpoints => "no-endpoints",
            Self::SysctlMissing => "sysctl-missing",
            Self::FirewalldReload => "firewalld-reload",
            Self::CalicoBpfCleanup => "calico-bpf-cleanup",
            Self::HostReject => "host-reject",
            Self::IptablesIncompatible => "iptables-incompatible",
            Self::CiliumKpr => "cilium-kpr",
            Self::CiliumLeftovers => "cilium-leftovers",
        }
    }

    /// The root-cause id `plumb doctor` should report (doctor's check ids), or `None` for
    /// a healthy node.
    pub fn expected_root_cause(self) -> Option<&'static str> {
        match self {
            Self::Healthy => None,
            Self::SecurityAgentRevert => Some("security-agent-tamper"),
            Self::UfwActive => Some("host-firewall-ufw"),
            Self::ProbeSemantics => Some("kube-proxy-probe-semantics"),
            Self::BackendMix => Some("iptables-backend-mix"),
            Self::NoEndpoints => Some("service-no-endpoints"),
            Self::SysctlMissing => Some("sysctl-requirement"),
            Self::FirewalldReload => Some("host-firewall-firewalld"),
            Self::CalicoBpfCleanup => Some("cni-kube-proxy-conflict"),
            Self::HostReject => Some("host-firewall-reject"),
            Self::IptablesIncompatible => Some("iptables-userspace-incompatible"),
            // Services work on both.
            Self::CiliumKpr => None,
            // Canal's configuration sorts ahead of Cilium's: new pods get Canal.
            Self::CiliumLeftovers => Some("old-cni-config"),
        }
    }

    /// One line for `--help` and status.
    pub fn summary(self) -> &'static str {
        match self {
            Self::Healthy => "everything works; ClusterIP reachable from the node and a pod",
            Self::SecurityAgentRevert => {
                "venAgent reverts kube-proxy's rules; ClusterIP times out, install-cni crash-loops"
            }
            Self::UfwActive => {
                "real UFW active; pod->Service dropped in FORWARD, kube-proxy /healthz 503"
            }
            Self::ProbeSemantics => {
                "/healthz 503 while /livez 200 (node not eligible); liveness probe on /healthz"
            }
            Self::BackendMix => {
                "kube-proxy rules in iptables-legacy and iptables-nft; only nft is live"
            }
            Self::NoEndpoints => "kube-dns lost its endpoints; kube-proxy REJECTs its ClusterIP",
            Self::SysctlMissing => {
                "net.ipv4.ip_forward=0 in the node; pod->Service traffic is not forwarded"
            }
            Self::FirewalldReload => {
                "firewalld reloads flush every table; kube-proxy resyncs, hostPort DNAT is gone"
            }
            Self::CalicoBpfCleanup => {
                "calico-node (eBPF mode) keeps deleting kube-proxy's chains while kube-proxy runs"
            }
            Self::HostReject => {
                "iptables-services REJECT icmp-host-prohibited; pods get no route to host"
            }
            Self::IptablesIncompatible => {
                "kube-proxy's iptables cannot write (generation id: Invalid argument)"
            }
            Self::CiliumKpr => {
                "kube-proxy-free: Services through Cilium's LB maps and a socket load balancer"
            }
            Self::CiliumLeftovers => {
                "cilium-kpr plus Canal and kube-proxy leftovers (stale KUBE-* chains, 10-canal.conflist, cali*, flannel.1)"
            }
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown scenario name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown scenario {0:?}; known: healthy, security-agent-revert, ufw-active, probe-semantics, backend-mix, no-endpoints, sysctl-missing, firewalld-reload, calico-bpf-cleanup, host-reject, iptables-incompatible, cilium-kpr, cilium-leftovers"
)]
pub struct UnknownScenario(pub String);

impl FromStr for Scenario {
    type Err = UnknownScenario;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|x| x.name() == s)
            .ok_or_else(|| UnknownScenario(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in Scenario::ALL {
            assert_eq!(s.name().parse::<Scenario>(), Ok(s));
        }
        assert!("nope".parse::<Scenario>().is_err());
    }
}
