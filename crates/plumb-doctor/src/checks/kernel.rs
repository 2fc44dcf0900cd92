//! Kernel prerequisites: `sysctl-requirement` (ip_forward, bridge-nf-call-iptables),
//! `kernel-module-missing` (br_netfilter, overlay, nf_conntrack, vxlan) and
//! `conntrack-pressure` (table nearly full). When they are fine the `ok` findings say so,
//! which rules the kernel out.

use crate::context::{Ctx, fact_evidence};
use plumb_findings::{Finding, Severity};

/// Finding id: a sysctl Kubernetes networking needs is off (`net.ipv4.ip_forward`,
/// `net.bridge.bridge-nf-call-iptables`).
pub const ID_SYSCTL: &str = "sysctl-requirement";
/// Finding id: a kernel module Kubernetes networking needs is not loaded (br_netfilter,
/// overlay, nf_conntrack, vxlan); a cause only together with a symptom.
pub const ID_MODULES: &str = "kernel-module-missing";
/// Finding id: the conntrack table is at least 90 % full (`nf_conntrack_count` against
/// `nf_conntrack_max`).
pub const ID_CONNTRACK: &str = "conntrack-pressure";

/// Answers for the three kernel ids from the sysctls and the loaded modules.
pub fn check(ctx: &Ctx) -> Vec<Finding> {
    vec![sysctls(ctx), modules(ctx), conntrack(ctx)]
}

fn sysctls(ctx: &Ctx) -> Finding {
    let f = ctx.facts;
    let Some(src) = f.sysctls.source() else {
        return Finding::unknown(ID_SYSCTL, Severity::Critical, "sysctls not readable");
    };
    let br_loaded = f
        .modules
        .value()
        .is_some_and(|m| m.contains_key("br_netfilter"));
    let mut bad = Vec::new();
    for (key, want, needed) in [
        ("net.ipv4.ip_forward", "1", true),
        ("net.bridge.bridge-nf-call-iptables", "1", br_loaded),
        ("net.bridge.bridge-nf-call-ip6tables", "1", false),
    ] {
        // An absent key proves nothing (truncated output, module built differently).
        if let Some(v) = f.sysctl(key)
            && v != want
            && needed
        {
            bad.push((key, v.to_string()));
        }
    }
    if bad.is_empty() {
        return Finding::ok(
            ID_SYSCTL,
            "net.ipv4.ip_forward=1 and bridge netfilter settings as Kubernetes needs",
        );
    }
    let forwarding_off = bad.iter().any(|(k, _)| *k == "net.ipv4.ip_forward");
    Finding::problem(
        ID_SYSCTL,
        if forwarding_off { Severity::Critical } else { Severity::High },
        format!("kernel settings Kubernetes needs are off: {}", bad.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ")),
    )
    .with_evidence(bad.iter().map(|(k, v)| fact_evidence(src, format!("{k} = {v}"))))
    .explain(
        "With ip_forward=0 the node does not route pod and Service traffic at all; without bridge-nf-call-iptables, \
         bridged pod traffic skips kube-proxy's rules.",
    )
    .fix("Set net.ipv4.ip_forward=1 (and net.bridge.bridge-nf-call-iptables=1) in /etc/sysctl.d/ and apply with `sysctl --system`.")
}

fn modules(ctx: &Ctx) -> Finding {
    let Some(m) = ctx.facts.modules.value() else {
        return Finding::unknown(ID_MODULES, Severity::Medium, "loaded modules not readable");
    };
    let src = ctx.facts.modules.source().unwrap_or("lsmod");
    let wanted = ["br_netfilter", "overlay", "nf_conntrack"];
    let missing: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|w| !m.contains_key(*w))
        .collect();
    if missing.is_empty() {
        return Finding::ok(ID_MODULES, format!("{} loaded", wanted.join(", ")));
    }
    Finding::problem(ID_MODULES, Severity::Medium, format!("kernel modules not loaded: {}", missing.join(", ")))
        .with_evidence([fact_evidence(src, format!("{} not listed", missing.join(", ")))])
        .explain("Modules built into the kernel do not appear in lsmod; if they are not built in, bridged pod traffic and overlay filesystems fail.")
        .fix(format!("Load them (`modprobe {}`) and persist in /etc/modules-load.d/.", missing.join(" ")))
}

fn conntrack(ctx: &Ctx) -> Finding {
    let f = ctx.facts;
    let (Some(count), Some(max)) = (
        f.sysctl("net.netfilter.nf_conntrack_count")
            .and_then(|v| v.parse::<u64>().ok()),
        f.sysctl("net.netfilter.nf_conntrack_max")
            .and_then(|v| v.parse::<u64>().ok()),
    ) else {
        return Finding::unknown(
            ID_CONNTRACK,
            Severity::Medium,
            "conntrack count/max not readable",
        );
    };
    let src = f.sysctls.source().unwrap_or("sysctl");
    let used = if max == 0 {
        0.0
    } else {
        count as f64 / max as f64
    };
    if used < 0.9 {
        return Finding::ok(
            ID_CONNTRACK,
            format!(
                "conntrack table {count}/{max} ({:.0}% used): low, reduced suspicion",
                used * 100.0
            ),
        );
    }
    Finding::problem(ID_CONNTRACK, Severity::High, format!("conntrack table {count}/{max} ({:.0}% full)", used * 100.0))
        .with_evidence([fact_evidence(src, format!("nf_conntrack_count = {count}, nf_conntrack_max = {max}"))])
        .explain("When the table is full the kernel drops new connections (\"nf_conntrack: table full, dropping packet\").")
        .fix("Raise net.netfilter.nf_conntrack_max or find the connection leak.")
}
