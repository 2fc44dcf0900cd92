//! kube-proxy's own signals: `kube-proxy-restore-failures` (its iptables-restore fails —
//! "Chain 'KUBE-SVC-…' does not exist" means something deleted its chains under it),
//! `kube-proxy-unhealthy` (/healthz not 200) and `kube-proxy-probe-semantics` (/healthz 503
//! while /livez 200: the 1.31 split between dataplane health and liveness; the UFW incident's runbook warns
//! it is worth checking but not where to stop).

use crate::context::{Ctx, fact_evidence, log_evidence};
use plumb_facts::parse::logs::Signal;
use plumb_findings::{Finding, Severity};

pub const ID_RESTORE: &str = "kube-proxy-restore-failures";
pub const ID_UNHEALTHY: &str = "kube-proxy-unhealthy";
pub const ID_PROBES: &str = "kube-proxy-probe-semantics";

pub fn check(ctx: &Ctx) -> Vec<Finding> {
    vec![restore(ctx), unhealthy(ctx), probes(ctx)]
}

fn restore(ctx: &Ctx) -> Finding {
    let missing = ctx.pod_signals(Some("kube-proxy"), Signal::ChainDoesNotExist);
    let failed = ctx.pod_signals(Some("kube-proxy"), Signal::RestoreFailed);
    let logs_read = ctx.facts.container_logs("kube-proxy").count();
    if missing.is_empty() && failed.is_empty() {
        return if logs_read > 0 {
            Finding::ok(
                ID_RESTORE,
                "kube-proxy's log shows no iptables-restore failures",
            )
        } else {
            Finding::unknown(ID_RESTORE, Severity::High, "no kube-proxy log was readable")
        };
    }
    let title = if missing.is_empty() {
        format!(
            "kube-proxy's iptables-restore failed {} times",
            failed.len()
        )
    } else {
        format!(
            "kube-proxy's iptables-restore failed {} times because its own chains had been deleted (\"Chain ... does not exist\")",
            missing.len().max(failed.len())
        )
    };
    Finding::problem(ID_RESTORE, Severity::High, title)
        .with_evidence(missing.iter().chain(failed.iter()).rev().take(6).map(|(f, l)| log_evidence(f, l)))
        .explain(
            "kube-proxy applies changes with partial `iptables-restore --noflush` payloads that jump to chains it created \
             earlier. \"Chain 'KUBE-SVC-…' does not exist\" means another process deleted those chains between syncs; \
             every partial sync then fails until the next full resync, and services flap.",
        )
        .fix("Find the process that deletes kube-proxy's chains (`plumb watch` names it) and stop it from doing so.")
}

fn unhealthy(ctx: &Ctx) -> Finding {
    let f = ctx.facts;
    if f.rke2_config.value().and_then(|c| c.disable_kube_proxy) == Some(true) {
        return Finding::ok(
            ID_UNHEALTHY,
            "kube-proxy is disabled in RKE2's config (disable-kube-proxy: true): another dataplane replaces it",
        );
    }
    let Some(h) = f.kube_proxy_healthz.value() else {
        return not_answering(ctx);
    };
    let src = ctx.facts.kube_proxy_healthz.source().unwrap_or("");
    if h.status == 200 {
        return Finding::ok(
            ID_UNHEALTHY,
            format!("kube-proxy /healthz answers 200 ({src})"),
        );
    }
    let eligible = h.proxy_health().and_then(|p| p.node_eligible);
    Finding::problem(ID_UNHEALTHY, Severity::High, format!("kube-proxy /healthz answers {}", h.status))
        .with_evidence([fact_evidence(src, format!("HTTP {} {}", h.status, h.body.trim()))])
        .explain(match eligible {
            Some(false) => "nodeEligible is false: the node is being deleted or drained; /healthz fails by design.",
            _ => "kube-proxy reports that its last sync is too old: its rules could not be applied recently (restore failures, a firewall manager rewriting rules, or a stuck sync).",
        })
}

/// /healthz gave no reply. Live, on a Kubernetes node, a refused connection means
/// kube-proxy is not running; otherwise nothing can be concluded.
fn not_answering(ctx: &Ctx) -> Finding {
    let f = ctx.facts;
    let refused = matches!(&f.kube_proxy_healthz, plumb_facts::Fact::Unknown { reason } if reason.contains("refused"));
    let kube_node = f.rke2_config.value().is_some()
        || f.ruleset
            .value()
            .is_some_and(|rs| rs.tables.iter().any(|t| t.chain("KUBE-SERVICES").is_some()));
    if !(refused && kube_node) {
        return Finding::unknown(
            ID_UNHEALTHY,
            Severity::High,
            "kube-proxy's /healthz was not probed (not a live node, or nothing listens on 10256)",
        );
    }
    let mut ev = vec![fact_evidence(
        "http://127.0.0.1:10256/healthz",
        "connection refused",
    )];
    if let (Some(l), Some(src)) = (f.listeners.value(), f.listeners.source())
        && !l.iter().any(|l| l.port == 10256)
    {
        ev.push(fact_evidence(src, "no socket listens on port 10256"));
    }
    Finding::problem(ID_UNHEALTHY, Severity::High, "kube-proxy is not running: nothing answers on 127.0.0.1:10256")
        .with_evidence(ev)
        .explain(
            "kube-proxy serves /healthz and /livez on 127.0.0.1:10256 while it runs. Without it, Service rules are not \
             maintained: new Services and endpoint changes never reach the node.",
        )
        .fix("Check the kube-proxy static pod (`crictl ps -a --name kube-proxy`) and its log under /var/log/pods/kube-system_kube-proxy-*.")
}

fn probes(ctx: &Ctx) -> Finding {
    let (Some(h), Some(l)) = (
        ctx.facts.kube_proxy_healthz.value(),
        ctx.facts.kube_proxy_livez.value(),
    ) else {
        return Finding::unknown(
            ID_PROBES,
            Severity::Low,
            "kube-proxy's /healthz and /livez were not both probed",
        );
    };
    let uses_healthz = ctx.facts.kube_proxy_probes.value().is_some_and(|p| {
        p.liveness.as_deref() == Some("/healthz") || p.startup.as_deref() == Some("/healthz")
    });
    if h.status == 200 && l.status == 200 {
        return Finding::ok(
            ID_PROBES,
            "kube-proxy /healthz and /livez both answer 200: probe paths are not the problem (red herring)",
        );
    }
    if h.status != 200 && l.status == 200 {
        let mut f = Finding::problem(
            ID_PROBES,
            Severity::Medium,
            format!("kube-proxy /healthz answers {} while /livez answers 200{}", h.status, if uses_healthz { "; its liveness probe uses /healthz" } else { "" }),
        )
        .with_evidence([
            fact_evidence(&h.url, format!("HTTP {}", h.status)),
            fact_evidence(&l.url, format!("HTTP {}", l.status)),
        ])
        .explain(
            "Since Kubernetes 1.31, /healthz reports dataplane health (and node eligibility) while /livez reports only \
             that kube-proxy is alive. A liveness probe on /healthz restarts a healthy process whose dataplane is failing.",
        )
        .do_not("stop after pointing the probe at /livez: find why the dataplane is unhealthy (often a host firewall)");
        if let Some(src) = ctx.facts.kube_proxy_probes.source() {
            f.evidence.push(fact_evidence(
                src,
                "livenessProbe/startupProbe httpGet.path: /healthz",
            ));
        }
        return f;
    }
    Finding::ok(
        ID_PROBES,
        format!(
            "kube-proxy /healthz {} and /livez {} agree",
            h.status, l.status
        ),
    )
}
