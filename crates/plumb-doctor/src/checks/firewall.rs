//! `host-firewall-ufw` and `host-firewall-firewalld`: UFW active on an RKE2 node
//! (FORWARD policy DROP, its chains evaluated before kube-proxy's) breaks pod-to-Service
//! traffic and keeps kube-proxy's /healthz failing; firewalld reloads wipe kube-proxy's
//! and the CNI's rules (RKE2's docs say to disable it with Canal).

use crate::context::{Ctx, fact_evidence};
use plumb_findings::{Evidence, Finding, Severity};
use plumb_ruleset::{Family, Policy};

pub const ID_UFW: &str = "host-firewall-ufw";
pub const ID_FIREWALLD: &str = "host-firewall-firewalld";

pub fn check(ctx: &Ctx) -> Vec<Finding> {
    vec![ufw(ctx), firewalld(ctx)]
}

/// UFW's chains in the ruleset and the FORWARD policy, with evidence.
fn ufw_in_rules(ctx: &Ctx) -> Vec<Evidence> {
    let Some(rs) = ctx.facts.ruleset.value() else {
        return Vec::new();
    };
    let src = ctx.facts.ruleset.source().unwrap_or("ruleset");
    let mut out = Vec::new();
    for t in rs
        .tables
        .iter()
        .filter(|t| &*t.name == "filter" && t.family == Family::Ip)
    {
        let ufw_chains = t
            .chains
            .iter()
            .filter(|c| c.name.starts_with("ufw-"))
            .count();
        if ufw_chains == 0 {
            continue;
        }
        out.push(fact_evidence(
            src,
            format!("{ufw_chains} ufw-* chains in {} filter", t.backend),
        ));
        if let Some(fwd) = t.chain("FORWARD")
            && fwd.policy() == Some(&Policy::Drop)
        {
            out.push(Evidence {
                source: src.to_string(),
                line: Some(fwd.location.line),
                text: format!(":FORWARD DROP ({})", t.backend),
            });
        }
    }
    out
}

fn ufw(ctx: &Ctx) -> Finding {
    let status = ctx.facts.ufw.value();
    let rules = ufw_in_rules(ctx);
    let active = status.is_some_and(|s| s.active) || !rules.is_empty();
    if !active {
        return match status {
            Some(_) => Finding::ok(ID_UFW, "UFW is inactive"),
            None if ctx.facts.ruleset.value().is_some() => {
                Finding::ok(ID_UFW, "no UFW chains in the ruleset")
            }
            None => Finding::unknown(
                ID_UFW,
                Severity::High,
                "UFW state unknown (no status, no ruleset)",
            ),
        };
    }
    let mut evidence = Vec::new();
    if let (Some(s), Some(src)) = (status, ctx.facts.ufw.source()) {
        evidence.push(Evidence {
            source: src.to_string(),
            line: Some(s.line),
            text: format!(
                "Status: {}{}",
                if s.active { "active" } else { "inactive" },
                s.routed
                    .as_deref()
                    .map(|r| format!(", routed: {r}"))
                    .unwrap_or_default()
            ),
        });
    }
    evidence.extend(rules);
    let v = &ctx.values;
    Finding::problem(ID_UFW, Severity::High, "UFW is active on this Kubernetes node")
        .with_evidence(evidence)
        .explain(
            "UFW sets the FORWARD policy to DROP (\"disabled (routed)\" still drops) and hooks its chains in front of \
             kube-proxy's and the CNI's accept rules, so pod-to-Service and NodePort traffic is dropped in FORWARD. \
             kube-proxy's /healthz then reports its dataplane as not working and kubelet restarts it.",
        )
        .fix("Disable UFW durably on this node: `systemctl stop ufw && systemctl disable ufw && ufw disable` (a stopped but enabled unit comes back at boot).")
        .fix("Then restart the node's Kubernetes service so kube-proxy and the CNI rewrite their rules: `systemctl restart rke2-server` on a server, `systemctl restart rke2-agent` on an agent (k3s: `k3s` / `k3s-agent`); or delete only the kube-proxy pod. Check `curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:10256/healthz` answers 200.")
        .fix("Add it to the node baseline (image build, cloud-init, configuration management) so new and rebuilt nodes come up without UFW; across a fleet, go one node class at a time (etcd, then control plane, then workers).")
        .fix(format!(
            "If a host firewall is mandatory, allow routed traffic for the pod network {} and the service network {} and UDP {} (VXLAN) before re-enabling it.",
            v.cluster_cidr, v.service_cidr, v.vxlan_port
        ))
        .do_not("stop at the /healthz vs /livez probe change: it hides the failing dataplane instead of fixing it")
}

fn firewalld(ctx: &Ctx) -> Finding {
    let state = ctx.facts.firewalld.value().map(String::as_str);
    let unit_active = ctx
        .facts
        .units
        .value()
        .and_then(|u| u.iter().find(|u| u.name == "firewalld.service"))
        .filter(|u| u.is_active());
    let tables = ctx
        .facts
        .ruleset
        .value()
        .map(|rs| rs.tables.iter().filter(|t| &*t.name == "firewalld").count())
        .unwrap_or(0);
    if state != Some("running") && unit_active.is_none() {
        return match state {
            Some(s) => Finding::ok(ID_FIREWALLD, format!("firewalld is {s}")),
            None if tables == 0 && ctx.facts.ruleset.value().is_some() => {
                Finding::ok(ID_FIREWALLD, "no firewalld tables in the ruleset")
            }
            None => Finding::unknown(ID_FIREWALLD, Severity::Medium, "firewalld state unknown"),
        };
    }
    let mut ev = Vec::new();
    if let (Some(s), Some(src)) = (state, ctx.facts.firewalld.source()) {
        ev.push(fact_evidence(src, s.to_string()));
    }
    if let (Some(u), Some(src)) = (unit_active, ctx.facts.units.source()) {
        ev.push(Evidence {
            source: src.to_string(),
            line: Some(u.line),
            text: format!("{} {} {}", u.name, u.active, u.sub),
        });
    }
    if tables > 0 {
        ev.push(fact_evidence(
            ctx.facts.ruleset.source().unwrap_or("ruleset"),
            format!("{tables} firewalld nft table(s)"),
        ));
    }
    Finding::problem(ID_FIREWALLD, Severity::Medium, "firewalld is running on this Kubernetes node")
        .with_evidence(ev)
        .explain(
            "A firewalld reload (FlushAllOnReload=yes) wipes kube-proxy's and the CNI portmap rules until their next sync; \
             firewalld older than 1.2.5 also flushed iptables-nft tables it did not own. RKE2's docs say to disable firewalld with Canal.",
        )
        .fix("Disable firewalld (`systemctl disable --now firewalld`) on RKE2 nodes using Canal, or trust the pod and service networks in it.")
}
