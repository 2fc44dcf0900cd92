//! `cni-not-initialized`: /etc/cni/net.d has no network config, and install-cni says why
//! ("Unable to create token for CNI kubeconfig ... i/o timeout" because the
//! `kubernetes` ClusterIP was not translated).
//!
//! `cni-kube-proxy-conflict`: the CNI is set to replace kube-proxy and deletes its chains
//! while kube-proxy still runs — Calico Felix in eBPF mode with kube-proxy cleanup on
//! (`BPF enabled, configuring iptables layer to clean up kube-proxy's rules.`, `Found
//! unexpected chain, marking for cleanup chainName="KUBE-…"`), while kube-proxy's restores
//! fail with `Couldn't load target `KUBE-SVC-…'` / `Chain 'KUBE-SVC-…' does not exist`.
//! The writer is the CNI and it says so in its own log: not a security agent's tampering.

use crate::context::{Ctx, entry_evidence, fact_evidence, log_evidence};
use plumb_facts::parse::logs::Signal;
use plumb_findings::{Finding, Severity};

/// Finding id: the CNI never finished initialising (no config in /etc/cni/net.d,
/// install-cni failing).
pub const ID: &str = "cni-not-initialized";
/// Finding id: the CNI deletes kube-proxy's chains while kube-proxy still runs (Calico's
/// eBPF-mode cleanup).
pub const ID_CONFLICT: &str = "cni-kube-proxy-conflict";

/// Answers for both ids from the CNI config directory and the CNI's and kube-proxy's
/// pod logs.
pub fn check(ctx: &Ctx) -> Vec<Finding> {
    vec![not_initialized(ctx), conflict(ctx)]
}

fn conflict(ctx: &Ctx) -> Finding {
    let entries = |signals: &[Signal]| -> Vec<&plumb_facts::timeline::Entry> {
        ctx.timeline
            .entries
            .iter()
            .filter(|e| signals.contains(&e.signal))
            .collect()
    };
    let cleanup = entries(&[Signal::KubeProxyCleanup]);
    if cleanup.is_empty() {
        return if ctx.facts.pod_logs.is_empty() {
            Finding::unknown(
                ID_CONFLICT,
                Severity::High,
                "no pod logs, so a CNI deleting kube-proxy's chains (Calico eBPF cleanup) was not checked",
            )
        } else {
            Finding::ok(ID_CONFLICT, "no CNI log says it removes kube-proxy's rules")
        };
    }
    let kube_proxy_process = ctx
        .facts
        .processes
        .value()
        .and_then(|ps| ps.iter().find(|p| p.comm == "kube-proxy"));
    let broken = entries(&[
        Signal::ChainDoesNotExist,
        Signal::CanaryDeleted,
        Signal::RestoreFailed,
    ]);
    let kube_proxy_runs =
        kube_proxy_process.is_some() || ctx.facts.container_logs("kube-proxy").count() > 0;
    if !kube_proxy_runs {
        return Finding::ok(
            ID_CONFLICT,
            "the CNI removes kube-proxy's rules and no kube-proxy runs (kube-proxy replacement as intended)",
        );
    }
    let writer = cleanup
        .first()
        .map(|e| e.component.clone())
        .unwrap_or_else(|| "the CNI".into());
    let mut evidence: Vec<_> = cleanup
        .iter()
        .take(1)
        .chain(cleanup.iter().skip(1).rev().take(2).rev())
        .map(|e| entry_evidence(e))
        .collect();
    if let (Some(p), Some(src)) = (kube_proxy_process, ctx.facts.processes.source()) {
        evidence.push(fact_evidence(
            src,
            format!("process {}[{}] still runs", p.comm, p.pid),
        ));
    }
    evidence.extend(broken.iter().rev().take(3).rev().map(|e| entry_evidence(e)));
    evidence.extend(crate::checks::kube_proxy::no_dnat_evidence(ctx));
    let cleaned_chains = cleanup
        .iter()
        .filter(|e| e.text.contains("chainName="))
        .count();
    Finding::problem(
        ID_CONFLICT,
        Severity::High,
        format!(
            "{writer} (Calico eBPF mode) deletes kube-proxy's chains while kube-proxy runs ({} cleanup lines, {} kube-proxy failures)",
            cleaned_chains,
            broken.len()
        ),
    )
    .with_evidence(evidence)
    .explain(
        "In eBPF mode Calico's Felix replaces kube-proxy and, with BPFKubeProxyIptablesCleanupEnabled (the default), treats \
         kube-proxy's chains (KUBE-SERVICES, KUBE-SVC-*, KUBE-SEP-*, KUBE-NODEPORTS, KUBE-FORWARD, ...) and its hook rules as \
         its own leftovers and deletes them at every refresh. kube-proxy keeps running and writing them back: its partial \
         restores fail (\"Couldn't load target `KUBE-SVC-...'\" / \"Chain 'KUBE-SVC-...' does not exist\"), its canary \
         monitor forces full resyncs, and Service traffic works only in the gaps. The writer is the CNI, configured to \
         replace kube-proxy — not a security agent.",
    )
    .fix("Pick one Service implementation. To keep Calico eBPF: stop kube-proxy on the node (RKE2: `disable-kube-proxy: true` in /etc/rancher/rke2/config.yaml, then `systemctl restart rke2-server` or `rke2-agent`; kubeadm: `kubectl -n kube-system patch ds kube-proxy -p '{\"spec\":{\"template\":{\"spec\":{\"nodeSelector\":{\"non-calico\":\"true\"}}}}}'`), and give Felix the API endpoint (the `kubernetes-services-endpoint` ConfigMap) first.")
    .fix("To keep kube-proxy: switch Calico back to the iptables dataplane (`linuxDataplane: Iptables` in the Installation, or FelixConfiguration `bpfEnabled: false`), or at least `bpfKubeProxyIptablesCleanupEnabled: false` while both run.")
    .do_not("treat it as a security agent's tampering or add agent exceptions: the calico-node log names the writer")
    .do_not("flush iptables to make kube-proxy resync: Felix deletes the chains again at its next refresh")
}

fn not_initialized(ctx: &Ctx) -> Finding {
    let fatals = ctx.pod_signals(Some("install-cni"), Signal::InstallCniFatal);
    let conf = ctx.facts.cni_conf_files.value();
    let has_conf = conf.is_some_and(|files| {
        files
            .iter()
            .any(|f| f.ends_with(".conflist") || f.ends_with(".conf"))
    });
    if has_conf && fatals.is_empty() {
        return Finding::ok(
            ID,
            format!(
                "CNI config present: {}",
                conf.map(|c| c.join(", ")).unwrap_or_default()
            ),
        );
    }
    if conf.is_none() && fatals.is_empty() {
        return Finding::unknown(
            ID,
            Severity::High,
            "CNI config directory not readable and no install-cni log",
        );
    }
    let mut evidence: Vec<_> = fatals
        .iter()
        .rev()
        .take(3)
        .map(|(f, l)| log_evidence(f, l))
        .collect();
    if let Some(files) = conf {
        evidence.push(fact_evidence(
            ctx.facts
                .cni_conf_files
                .source()
                .unwrap_or("/etc/cni/net.d"),
            if files.is_empty() {
                "(empty)".to_string()
            } else {
                files.join(", ")
            },
        ));
    }
    let pods: Vec<String> = fatals
        .iter()
        .filter_map(|(f, _)| f.pod.as_ref().map(|p| format!("{}/{}", p.namespace, p.pod)))
        .collect();
    let mut f = Finding::problem(
        ID,
        Severity::High,
        if has_conf {
            "install-cni is failing (its config may be stale)".to_string()
        } else {
            "the CNI is not initialised: no network config in /etc/cni/net.d".to_string()
        },
    )
    .with_evidence(evidence)
    .explain(
        "install-cni writes the CNI config only after it gets a ServiceAccount token through the kubernetes ClusterIP. \
         Until then the node may report Ready but every pod that needs the pod network stays ContainerCreating.",
    );
    f = match pods.first() {
        Some(pod) => f.fix(format!("After fixing the root cause, delete the crash-looping pod {pod} so install-cni runs again.")),
        None => f.fix(format!(
            "Fix what keeps the CNI's installer from reaching the API through the kubernetes Service {} (see the root cause), then delete the CNI pod on this node so it runs again.",
            ctx.values.kubernetes_clusterip
        )),
    };
    f.do_not("hand-edit or copy CNI config files into /etc/cni/net.d")
}
