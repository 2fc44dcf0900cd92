//! What each scenario sets up, as numbers: kube-proxy's sync period, the agent's timing,
//! install-cni's start and timeout, kubelet's probe, and the one broken condition.
//!
//! Timings are scaled down from the real defaults so symptoms show in seconds (kube-proxy
//! syncPeriod 30 s -> 5 s where the fight matters; kubelet probe period 10 s -> 2 s); the
//! behaviour at each step is the original's.

use std::time::Duration;

use crate::scenario::Scenario;

/// The security agent's timing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentPlan {
    /// Time between two comparisons with the snapshot.
    pub interval: Duration,
    /// Time from start (snapshot) to the first comparison.
    pub arm_delay: Duration,
}

/// kubelet's liveness probe on kube-proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LivenessPlan {
    /// `/healthz` (RKE2 manifests before the seed's mitigation) or `/livez`.
    pub path: &'static str,
    /// Probe period.
    pub period: Duration,
    /// Consecutive failures that restart kube-proxy.
    pub failure_threshold: u32,
}

/// firewalld's reloads (`firewall-cmd --reload`, as a configuration tool runs it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirewalldPlan {
    /// Time from kube-proxy's first sync to the first reload.
    pub first_reload: Duration,
    /// Time between reloads.
    pub interval: Duration,
}

/// calico-node's Felix (eBPF mode, kube-proxy cleanup on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FelixPlan {
    /// `IptablesRefreshInterval` (scaled from 90 s).
    pub refresh_interval: Duration,
}

/// Everything a scenario changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// kube-proxy `--iptables-sync-period`.
    pub sync_period: Duration,
    /// The security agent, if any.
    pub agent: Option<AgentPlan>,
    /// install-cni starts this long after the pods.
    pub install_cni_delay: Duration,
    /// install-cni's dial timeout.
    pub install_cni_timeout: Duration,
    /// Real UFW enabled in the node.
    pub ufw: bool,
    /// kube-proxy's node eligibility (false: being deleted / autoscaler taint).
    pub node_eligible: bool,
    /// `net.ipv4.ip_forward` in the node.
    pub ip_forward: bool,
    /// Stale kube-proxy chains left in iptables-legacy.
    pub stale_legacy: bool,
    /// A Service whose endpoints vanish shortly after start.
    pub drop_endpoints: Option<&'static str>,
    /// Endpoint churn period (queues updates, as a busy cluster does).
    pub churn: Option<Duration>,
    /// kubelet's liveness probe on kube-proxy.
    pub liveness: LivenessPlan,
    /// Pod namespaces.
    pub pods: usize,
    /// kube-proxy's modelled xtables-lock contention with UFW (ufw-active only).
    pub model_ufw_lock: bool,
    /// firewalld with the iptables backend, reloading.
    pub firewalld: Option<FirewalldPlan>,
    /// calico-node in eBPF mode cleaning up kube-proxy's chains.
    pub felix: Option<FelixPlan>,
    /// RHEL/CentOS iptables-services' default rules (`/etc/sysconfig/iptables`) loaded
    /// at boot, before kubelet.
    pub iptables_services: bool,
    /// The kernel refuses kube-proxy's iptables nf_tables requests (EINVAL).
    pub kube_proxy_nf_tables_refused: bool,
    /// A coredns pod (in pod namespace 0) watching the API through the `kubernetes` Service.
    pub coredns: bool,
    /// A hostPort pod: the portmap plugin's DNAT rules (written once, at sandbox creation).
    pub host_port: bool,
    /// Cilium with kube-proxy replacement instead of kube-proxy and Canal.
    pub cilium: Option<CiliumPlan>,
}

/// The kube-proxy-free node (`crate::cilium_node`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CiliumPlan {
    /// Canal's and kube-proxy's leftovers are on the node too.
    pub leftovers: bool,
}

impl Plan {
    /// The plan of `scenario`.
    pub fn of(scenario: Scenario) -> Self {
        let mut p = Plan {
            sync_period: Duration::from_secs(30),
            agent: None,
            install_cni_delay: Duration::from_millis(500),
            install_cni_timeout: Duration::from_secs(5),
            ufw: false,
            node_eligible: true,
            ip_forward: true,
            stale_legacy: false,
            drop_endpoints: None,
            churn: None,
            liveness: LivenessPlan {
                path: "/healthz",
                period: Duration::from_secs(2),
                failure_threshold: 3,
            },
            pods: 1,
            model_ufw_lock: false,
            firewalld: None,
            felix: None,
            iptables_services: false,
            kube_proxy_nf_tables_refused: false,
            coredns: false,
            host_port: false,
            cilium: None,
        };
        match scenario {
            Scenario::Healthy => {}
            Scenario::SecurityAgentRevert => {
                p.sync_period = Duration::from_secs(5);
                p.agent = Some(AgentPlan {
                    interval: Duration::from_millis(500),
                    arm_delay: Duration::from_secs(3),
                });
                // install-cni is scheduled after the node settled: after the first revert.
                p.install_cni_delay = Duration::from_millis(4500);
            }
            Scenario::UfwActive => {
                p.sync_period = Duration::from_secs(5);
                p.ufw = true;
                p.churn = Some(Duration::from_secs(2));
                p.model_ufw_lock = true;
            }
            Scenario::ProbeSemantics => {
                p.node_eligible = false;
            }
            Scenario::BackendMix => {
                p.stale_legacy = true;
            }
            Scenario::NoEndpoints => {
                p.drop_endpoints = Some("kube-system/kube-dns");
            }
            Scenario::SysctlMissing => {
                p.ip_forward = false;
            }
            Scenario::FirewalldReload => {
                p.sync_period = Duration::from_secs(5);
                p.host_port = true;
                p.firewalld = Some(FirewalldPlan {
                    first_reload: Duration::from_secs(6),
                    interval: Duration::from_secs(8),
                });
            }
            Scenario::CalicoBpfCleanup => {
                p.sync_period = Duration::from_secs(5);
                p.felix = Some(FelixPlan {
                    refresh_interval: Duration::from_secs(3),
                });
                p.install_cni_delay = Duration::from_millis(4500);
            }
            Scenario::HostReject => {
                p.iptables_services = true;
                p.coredns = true;
            }
            Scenario::IptablesIncompatible => {
                p.sync_period = Duration::from_secs(5);
                p.kube_proxy_nf_tables_refused = true;
            }
            Scenario::CiliumKpr | Scenario::CiliumLeftovers => {
                // coredns serves kube-dns's backends in pod 0 and lists the API through
                // the `kubernetes` Service (the socket load balancer's).
                p.coredns = true;
                p.cilium = Some(CiliumPlan {
                    leftovers: scenario == Scenario::CiliumLeftovers,
                });
            }
        }
        p
    }
}
