//! Node checks, one module each (the ruleset integrity checks come from plumb-check).
//! Every check returns findings for all its ids — `ok` when it ruled its problem out,
//! `unknown` when the facts do not allow a conclusion — so the report can list what was
//! checked and ruled out.

pub mod agents;
pub mod cilium;
pub mod cni;
pub mod connectivity;
pub mod firewall;
pub mod kernel;
pub mod kube_proxy;
pub mod rbac;

use crate::context::Ctx;
use plumb_findings::Finding;

/// Every node check in a fixed order.
pub const ALL: &[fn(&Ctx) -> Vec<Finding>] = &[
    connectivity::check,
    agents::check,
    firewall::check,
    kube_proxy::check,
    cni::check,
    kernel::check,
    rbac::check,
    cilium::check,
];

/// Every finding id the node checks emit, with what it says (for `plumb explain` and
/// shell completions). A test keeps it in step with the checks.
pub const CATALOGUE: &[(&str, &str)] = &[
    (
        connectivity::ID_CLUSTERIP,
        "the `kubernetes` Service ClusterIP does not answer from this node",
    ),
    (
        connectivity::ID_API,
        "the API server behind it is not ready",
    ),
    (
        agents::ID_TAMPER,
        "a security agent reverts kube-proxy's or the CNI's rules (its log, or the chains vanishing under kube-proxy, show it)",
    ),
    (
        agents::ID_PRESENT,
        "a security agent that can rewrite netfilter runs on the node",
    ),
    (
        firewall::ID_UFW,
        "UFW is active and its FORWARD policy or rules stop pod traffic",
    ),
    (
        firewall::ID_FIREWALLD,
        "firewalld is active: a reload flushes and rebuilds the tables under kube-proxy",
    ),
    (
        kube_proxy::ID_RESTORE,
        "kube-proxy's iptables-restore fails (its chains were deleted under it)",
    ),
    (
        kube_proxy::ID_UNHEALTHY,
        "kube-proxy's /healthz is not 200, or it crash-loops",
    ),
    (
        kube_proxy::ID_PROBES,
        "kube-proxy's liveness probe uses /healthz (fails while it waits for the node) instead of /livez",
    ),
    (
        kube_proxy::ID_IPTABLES,
        "kube-proxy's iptables binary cannot write to this kernel (nf_tables generation errors)",
    ),
    (
        kube_proxy::ID_NFT,
        "kube-proxy in nftables mode cannot run the nft binary",
    ),
    (
        kube_proxy::ID_CONNTRACK_PERM,
        "kube-proxy may not set nf_conntrack_max (an unprivileged or containerised kube-proxy)",
    ),
    (
        kube_proxy::ID_NO_DNAT,
        "no DNAT for the `kubernetes` Service ClusterIP:443 in the ruleset right now, on a node where kube-proxy runs",
    ),
    (
        cni::ID,
        "the CNI never finished initialising (no config, install-cni failing)",
    ),
    (
        cni::ID_CONFLICT,
        "another component (Calico's eBPF mode cleanup) deletes kube-proxy's chains while kube-proxy runs",
    ),
    (
        firewall::ID_REJECT,
        "a RHEL/CentOS-style catch-all REJECT (icmp-host-prohibited) stops pod traffic: pods see \"no route to host\"",
    ),
    (
        kernel::ID_SYSCTL,
        "a sysctl Kubernetes networking needs is off (ip_forward, bridge-nf-call-iptables)",
    ),
    (
        kernel::ID_MODULES,
        "a kernel module Kubernetes networking needs is not loaded",
    ),
    (kernel::ID_CONNTRACK, "the conntrack table is nearly full"),
    (
        rbac::ID,
        "RBAC denials that resolve themselves (a component starting before its role binding)",
    ),
    (
        cilium::ID_ENDPOINTS,
        "endpoints Cilium's agent holds not-ready, waiting for identity, invalid or disconnected",
    ),
    (
        cilium::ID_HUBBLE_DROPS,
        "flows Hubble saw dropped on the node, by reason and destination (information: evidence, never a root cause)",
    ),
    (
        cilium::ID_DATAPLANE,
        "what translates the node's Services where Cilium runs: its eBPF load balancer's frontends (kube-proxy replacement or beside kube-proxy)",
    ),
    (
        crate::ID_NOT_A_NODE,
        "what was read is not a Kubernetes node",
    ),
    (
        crate::ID_RULESET_READ_FAILED,
        "a table the node has could not be read (a timeout, a failed save tool), so what it holds was not checked",
    ),
    (
        crate::ID_RULESET_UNREADABLE,
        "no ruleset could be read, so kube-proxy's and the CNI's rules were not checked",
    ),
];
