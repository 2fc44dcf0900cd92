//! `cni-not-initialized`: /etc/cni/net.d has no network config, and install-cni says why
//! ("Unable to create token for CNI kubeconfig ... i/o timeout" because the
//! `kubernetes` ClusterIP was not translated).

use crate::context::{Ctx, fact_evidence, log_evidence};
use plumb_facts::parse::logs::Signal;
use plumb_findings::{Finding, Severity};

pub const ID: &str = "cni-not-initialized";

pub fn check(ctx: &Ctx) -> Vec<Finding> {
    let fatals = ctx.pod_signals(Some("install-cni"), Signal::InstallCniFatal);
    let conf = ctx.facts.cni_conf_files.value();
    let has_conf = conf.is_some_and(|files| {
        files
            .iter()
            .any(|f| f.ends_with(".conflist") || f.ends_with(".conf"))
    });
    if has_conf && fatals.is_empty() {
        return vec![Finding::ok(
            ID,
            format!(
                "CNI config present: {}",
                conf.map(|c| c.join(", ")).unwrap_or_default()
            ),
        )];
    }
    if conf.is_none() && fatals.is_empty() {
        return vec![Finding::unknown(
            ID,
            Severity::High,
            "CNI config directory not readable and no install-cni log",
        )];
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
    vec![f.do_not("hand-edit or copy CNI config files into /etc/cni/net.d")]
}
