//! `security-agent-tamper` and `security-agent-present`: a host security agent
//! (Illumio VEN, for one) treats kube-proxy's rule writes as tampering and reverts
//! them every few seconds, deleting kube-proxy's chains faster than it restores them.

use crate::context::{Ctx, entry_evidence, fact_evidence, log_evidence};
use plumb_facts::LogFile;
use plumb_facts::agents::catalogue;
use plumb_facts::parse::logs::{LogLine, Signal};
use plumb_findings::{Finding, Severity};

/// Finding id: a security agent reverts kube-proxy's or the CNI's rules (its own log
/// says so, or kube-proxy's chains vanish under it while such an agent runs).
pub const ID_TAMPER: &str = "security-agent-tamper";
/// Finding id: a security agent that can rewrite netfilter is installed or running; a
/// cause only together with a symptom it explains.
pub const ID_PRESENT: &str = "security-agent-present";

/// Answers for both ids from the agent sightings, the agents' logs and kube-proxy's
/// restore failures.
pub fn check(ctx: &Ctx) -> Vec<Finding> {
    vec![tamper(ctx), present(ctx)]
}

fn display(agent: &str) -> String {
    catalogue()
        .iter()
        .find(|a| a.name == agent)
        .map_or(agent.to_string(), |a| a.display.clone())
}

/// kube-proxy's own log lines that say its chains were deleted under it.
fn chains_deleted<'a>(ctx: &Ctx<'a>) -> Vec<(&'a LogFile, &'a LogLine)> {
    ctx.pod_signals(Some("kube-proxy"), Signal::ChainDoesNotExist)
}

/// Where to read a present agent's log: its catalogue log directories.
fn where_to_confirm(ctx: &Ctx) -> Option<(String, String)> {
    let sighting = ctx.facts.agents.iter().find(|a| {
        catalogue()
            .iter()
            .any(|c| c.name == a.agent && c.manages_firewall)
    })?;
    let agent = catalogue().iter().find(|c| c.name == sighting.agent)?;
    let dirs = agent.log_dirs.join(" ");
    Some((
        agent.display.clone(),
        format!(
            "read {}'s own log as root: `grep -ri tamper {dirs} | tail -50` (\"tampering detected\" / \"reverted out of band\" lines every few seconds confirm it), or ask its administrators for the host's tamper events",
            agent.display
        ),
    ))
}

/// When the tamper diagnosis stands without the agent's own log: an agent that polices
/// the firewall is present, kube-proxy's log says its chains were deleted under it, and no
/// agent log was read. Returns how to confirm it.
pub fn tamper_inferred(ctx: &Ctx) -> Option<String> {
    let agent_lines = ctx.facts.agent_logs.iter().any(|f| !f.signals.is_empty());
    // A CNI that says in its own log that it removes kube-proxy's chains (Calico eBPF
    // cleanup) is the known writer: nothing is left to infer about an agent.
    let cni_writer = !ctx.pod_signals(None, Signal::KubeProxyCleanup).is_empty();
    if agent_lines || cni_writer || chains_deleted(ctx).is_empty() {
        return None;
    }
    where_to_confirm(ctx).map(|(_, how)| how)
}

fn tamper(ctx: &Ctx) -> Finding {
    let lines: Vec<_> = ctx
        .facts
        .agent_logs
        .iter()
        .flat_map(|f| f.signals.iter().map(move |(s, l)| (f, *s, l)))
        .collect();
    let Some((first, _, _)) = lines.first() else {
        if let Some(f) = inferred(ctx) {
            return f;
        }
        let looked = !ctx.facts.agent_logs.is_empty();
        return if looked {
            Finding::ok(ID_TAMPER, "security agent logs show no firewall reverts")
        } else {
            Finding::unknown(
                ID_TAMPER,
                Severity::Critical,
                "no security agent logs were readable on this node",
            )
        };
    };
    let agent = display(first.agent.as_deref().unwrap_or("a security agent"));
    // Each revert is one "reverted" line; "tampering detected" lines announce them and
    // are not counted again.
    let reverts = lines
        .iter()
        .filter(|(_, s, _)| *s == Signal::AgentRevert)
        .count();
    let detections = lines.len() - reverts;
    let title = match (reverts, detections) {
        (0, d) => format!("{agent} reported firewall tampering {d} times"),
        (r, 0) => format!("{agent} reverted firewall changes {r} times"),
        (r, d) => format!(
            "{agent} reverted firewall changes {r} times (and reported tampering {d} times)"
        ),
    };
    let mut evidence: Vec<_> = lines
        .iter()
        .rev()
        .take(5)
        .map(|(f, _, l)| match ctx.timeline.at(&f.path, l.line) {
            Some(e) => entry_evidence(e),
            None => log_evidence(f, l),
        })
        .collect();
    evidence.extend(
        chains_deleted(ctx)
            .iter()
            .rev()
            .take(2)
            .map(|(f, l)| log_evidence(f, l)),
    );
    with_remedies(
        Finding::problem(ID_TAMPER, Severity::Critical, title).with_evidence(evidence),
        ctx,
        &agent,
    )
}

/// The tamper diagnosis without the agent's log (see [`tamper_inferred`]).
fn inferred(ctx: &Ctx) -> Option<Finding> {
    let how = tamper_inferred(ctx)?;
    let (agent, _) = where_to_confirm(ctx)?;
    let deleted = chains_deleted(ctx);
    let mut evidence: Vec<_> = deleted
        .iter()
        .rev()
        .take(4)
        .map(|(f, l)| log_evidence(f, l))
        .collect();
    evidence.extend(
        ctx.facts
            .agents
            .iter()
            .take(2)
            .map(|a| fact_evidence(&a.source, a.how.clone())),
    );
    let f = Finding::problem(
        ID_TAMPER,
        Severity::High,
        format!(
            "{agent} is the likely cause: kube-proxy's chains were deleted under it {} times while {agent} polices this host's firewall (its own log was not readable)",
            deleted.len()
        ),
    )
    .with_evidence(evidence);
    Some(with_remedies(f, ctx, &agent).fix(format!("To confirm first: {how}.")))
}

fn with_remedies(f: Finding, ctx: &Ctx, agent: &str) -> Finding {
    let v = &ctx.values;
    let f = f.with_evidence(crate::checks::kube_proxy::no_dnat_evidence(ctx));
    f.explain(format!(
        "{agent} snapshots the host firewall and reverts anything it did not write. kube-proxy's chains \
         (KUBE-SERVICES, KUBE-SVC-*, KUBE-SEP-*) are exactly such writes, so the agent deletes them; kube-proxy's next \
         partial restore then fails with \"Chain ... does not exist\" and the ClusterIP {} stops answering until the \
         next full sync — in a loop.",
        v.kubernetes_clusterip
    ))
    .fix(format!(
        "Ask the agent's administrators (console/PCE side, not only this host) for a firewall-coexistence / tamper-protection \
         exception covering the pod network {}, the service network {} (including the kubernetes ClusterIP {}), and the CNI \
         overlay (VXLAN UDP {}); exempt kube-proxy's chains KUBE-SERVICES, KUBE-SVC-*, KUBE-SEP-* from revert.",
        v.cluster_cidr, v.service_cidr, v.kubernetes_clusterip, v.vxlan_port
    ))
    .fix("Once the exception is in place, delete the crash-looping CNI pod so install-cni runs again (no reinstall needed).")
    .do_not("disable or uninstall the security agent on your own — get the exception from its owners")
    .do_not("pin iptables-legacy or switch backends: the agent reverts either backend")
    .do_not("hand-edit files in /etc/cni/net.d")
    .do_not("flush iptables: it removes what kube-proxy and the CNI need and fixes nothing")
}

fn present(ctx: &Ctx) -> Finding {
    let s = &ctx.facts.agents;
    if s.is_empty() {
        return Finding::ok(
            ID_PRESENT,
            "no known host security agent (units, processes, install paths)",
        );
    }
    let mut names: Vec<String> = s.iter().map(|a| display(&a.agent)).collect();
    names.dedup();
    let manages = s.iter().any(|a| {
        catalogue()
            .iter()
            .any(|c| c.name == a.agent && c.manages_firewall)
    });
    Finding::problem(
        ID_PRESENT,
        if manages { Severity::Medium } else { Severity::Low },
        format!("host security agent present: {}", names.join(", ")),
    )
    .with_evidence(s.iter().map(|a| fact_evidence(&a.source, a.how.clone())))
    .explain(
        "Agents that enforce their own view of the host firewall can remove kube-proxy's and the CNI's rules. \
         Presence alone is not a fault; it becomes the root cause when rules go missing or its logs show reverts.",
    )
    .fix("No change needed for presence alone; if kube-proxy's or the CNI's rules go missing, ask the agent's administrators for a firewall-coexistence exception for the pod and service networks.")
}
