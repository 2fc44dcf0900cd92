//! `security-agent-tamper` and `security-agent-present`: a host security agent
//! (Illumio VEN in the write-up) treats kube-proxy's rule writes as tampering and reverts
//! them every few seconds, deleting kube-proxy's chains faster than it restores them.

use crate::context::{Ctx, fact_evidence, log_evidence};
use plumb_facts::agents::catalogue;
use plumb_findings::{Finding, Severity};

pub const ID_TAMPER: &str = "security-agent-tamper";
pub const ID_PRESENT: &str = "security-agent-present";

pub fn check(ctx: &Ctx) -> Vec<Finding> {
    vec![tamper(ctx), present(ctx)]
}

fn display(agent: &str) -> String {
    catalogue()
        .iter()
        .find(|a| a.name == agent)
        .map_or(agent.to_string(), |a| a.display.clone())
}

fn tamper(ctx: &Ctx) -> Finding {
    let lines: Vec<_> = ctx
        .facts
        .agent_logs
        .iter()
        .flat_map(|f| f.signals.iter().map(move |(_, l)| (f, l)))
        .collect();
    let Some((first, _)) = lines.first() else {
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
    let v = &ctx.values;
    Finding::problem(
        ID_TAMPER,
        Severity::Critical,
        format!("{agent} reverted firewall changes {} times (its logs call them tampering)", lines.len()),
    )
    .with_evidence(lines.iter().rev().take(5).map(|(f, l)| log_evidence(f, l)))
    .explain(format!(
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
}
