//! `host-firewall-ufw`, `host-firewall-firewalld` and `host-firewall-reject`: UFW active
//! on an RKE2 node (FORWARD policy DROP, its chains evaluated before kube-proxy's) breaks
//! pod-to-Service traffic and keeps kube-proxy's /healthz failing; firewalld reloads wipe
//! kube-proxy's and the CNI's rules (RKE2's docs say to disable it with Canal); a
//! RHEL/CentOS iptables-services catch-all `REJECT --reject-with icmp-host-prohibited` in
//! FORWARD/INPUT refuses pod traffic ("no route to host") before the CNI's accepts.

use crate::context::{Ctx, fact_evidence};
use plumb_findings::{Evidence, Finding, Severity};
use plumb_ruleset::{Family, Policy};

/// Finding id: UFW is active and its FORWARD policy or rules stop pod traffic.
pub const ID_UFW: &str = "host-firewall-ufw";
/// Finding id: firewalld is active, and its reloads flush and rebuild the tables under
/// kube-proxy and the CNI.
pub const ID_FIREWALLD: &str = "host-firewall-firewalld";
/// Finding id: a catch-all `REJECT --reject-with icmp-host-prohibited` (RHEL/CentOS
/// iptables-services) refuses pod traffic before the CNI's accepts.
pub const ID_REJECT: &str = "host-firewall-reject";

/// Answers for the three host-firewall ids from UFW's and firewalld's status, the units
/// and the ruleset.
pub fn check(ctx: &Ctx) -> Vec<Finding> {
    vec![ufw(ctx), firewalld(ctx), reject(ctx)]
}

/// Chains firewalld's iptables backend creates (`ipXtables.py` `build_default_rules`):
/// distinctive enough that their presence means firewalld wrote this ruleset.
const FIREWALLD_CHAINS: &[&str] = &["INPUT_ZONES", "FORWARD_IN_ZONES", "INPUT_direct"];

/// firewalld's chains in the iptables tables: (backend, count), with the filter table's
/// line of the first one.
fn firewalld_chains(ctx: &Ctx) -> Option<Evidence> {
    let rs = ctx.facts.ruleset.value()?;
    let src = ctx.facts.ruleset.source().unwrap_or("ruleset");
    rs.tables
        .iter()
        .filter(|t| &*t.name == "filter" && t.family == Family::Ip)
        .find_map(|t| {
            let c = t
                .chains
                .iter()
                .find(|c| FIREWALLD_CHAINS.contains(&&*c.name))?;
            let zones = t
                .chains
                .iter()
                .filter(|c| {
                    c.name.starts_with("IN_")
                        && !c.name.contains("_log")
                        && !c.name.contains("_deny")
                        && !c.name.contains("_allow")
                })
                .map(|c| c.name.trim_start_matches("IN_").to_string())
                .collect::<Vec<_>>();
            Some(Evidence {
                source: src.to_string(),
                line: Some(c.location.line),
                text: format!(
                    ":{} (firewalld's iptables backend in {} filter; zones: {})",
                    c.name,
                    t.backend,
                    if zones.is_empty() {
                        "none".to_string()
                    } else {
                        zones.join(", ")
                    }
                ),
            })
        })
}

/// Whether UFW or firewalld wrote the ruleset (their catch-alls are their findings).
fn managed_by_firewall_tool(ctx: &Ctx) -> bool {
    firewalld_chains(ctx).is_some() || !ufw_in_rules(ctx).is_empty()
}

/// The ruleset checks' traced verdicts that end at a REJECT (not a DROP).
fn rejecting<'c>(ctx: &'c Ctx) -> Vec<(&'c Finding, &'c Evidence)> {
    ctx.ruleset_findings
        .iter()
        .filter(|f| {
            matches!(
                f.id.as_str(),
                "forward-drop-blocks-pods" | "input-drop-blocks-node"
            ) && f.status == plumb_findings::Status::Problem
        })
        .flat_map(|f| {
            f.evidence
                .iter()
                .filter(|e| e.text.contains("-j REJECT"))
                .map(move |e| (f, e))
        })
        .collect()
}

fn reject(ctx: &Ctx) -> Finding {
    use plumb_facts::parse::logs::Signal;
    let hits = rejecting(ctx);
    if hits.is_empty() {
        return match ctx.facts.ruleset.value() {
            Some(_) => Finding::ok(
                ID_REJECT,
                "no catch-all REJECT stops the traffic a node needs",
            ),
            None => Finding::unknown(
                ID_REJECT,
                Severity::High,
                "no ruleset, so catch-all REJECT rules were not checked",
            ),
        };
    }
    if managed_by_firewall_tool(ctx) {
        return Finding::ok(
            ID_REJECT,
            "the catch-all REJECT belongs to UFW or firewalld (see their findings), not a static iptables file",
        );
    }
    let forward = hits.iter().any(|(f, _)| f.id == "forward-drop-blocks-pods");
    let mut evidence: Vec<Evidence> = Vec::new();
    for (_, e) in &hits {
        if !evidence.iter().any(|x| x.text == e.text) {
            evidence.push((*e).clone());
        }
    }
    if let (Some(units), Some(src)) = (ctx.facts.units.value(), ctx.facts.units.source()) {
        for u in units.iter().filter(|u| {
            matches!(u.name.as_str(), "iptables.service" | "ip6tables.service") && u.is_active()
        }) {
            evidence.push(Evidence {
                source: src.to_string(),
                line: Some(u.line),
                text: format!("{} {} {}", u.name, u.active, u.sub),
            });
        }
    }
    let refused: Vec<_> = ctx
        .timeline
        .entries
        .iter()
        .filter(|e| e.signal == Signal::NoRouteToHost)
        .collect();
    evidence.extend(
        refused
            .iter()
            .rev()
            .take(3)
            .rev()
            .map(|e| crate::context::entry_evidence(e)),
    );
    let v = &ctx.values;
    let rule = hits
        .iter()
        .find(|(f, _)| !forward || f.id == "forward-drop-blocks-pods")
        .map(|(_, e)| e.text.clone())
        .unwrap_or_default();
    let title = if forward {
        format!(
            "a catch-all `{rule}` refuses forwarded pod traffic{}",
            if refused.is_empty() {
                String::new()
            } else {
                format!(": {} \"no route to host\" log lines", refused.len())
            }
        )
    } else {
        "a catch-all REJECT (icmp-host-prohibited) in INPUT refuses ports this node serves"
            .to_string()
    };
    Finding::problem(ID_REJECT, if forward { Severity::High } else { Severity::Medium }, title)
        .with_evidence(evidence)
        .with_evidence(starts_at_boot(ctx, &["iptables.service", "ip6tables.service"]))
        .explain(
            "RHEL/CentOS's iptables-services loads /etc/sysconfig/iptables at boot, whose shipped default ends INPUT and FORWARD with \
             `-j REJECT --reject-with icmp-host-prohibited`. kube-proxy inserts its jumps above it, but they accept only marked or \
             established traffic; a new pod connection (pod -> Service -> API server, pod -> pod on another node) falls through to \
             the REJECT, and the pod gets \"connect: no route to host\" at once. The node's own traffic (OUTPUT) still works, so the \
             node looks fine while CoreDNS stays not ready and the CNI's API calls fail.",
        )
        .fix("Stop the static firewall on Kubernetes nodes: `systemctl disable --now iptables ip6tables` (iptables-services), then restart the node's Kubernetes service (`systemctl restart rke2-server` or `rke2-agent`; k3s: `k3s` / `k3s-agent`) so kube-proxy and the CNI rewrite their rules.")
        .fix(format!(
            "If it must stay, put accepts before the REJECT lines in /etc/sysconfig/iptables for the pod network {} and the service network {} (`-A FORWARD -s {} -j ACCEPT`, `-A FORWARD -d {} -j ACCEPT`), kubelet 10250/tcp and VXLAN {}/udp in INPUT, then `systemctl restart iptables` and the Kubernetes service.",
            v.cluster_cidr, v.service_cidr, v.cluster_cidr, v.cluster_cidr, v.vxlan_port
        ))
        .do_not("flush iptables to open the node: it also removes kube-proxy's and the CNI's rules")
        .do_not("save the running ruleset into /etc/sysconfig/iptables (`service iptables save`): it freezes kube-proxy's rules of today into the boot file")
}

/// The named units that start at boot (`systemctl list-unit-files`): stopping the
/// firewall now does not keep it off after a reboot unless it is disabled too.
fn starts_at_boot(ctx: &Ctx, units: &[&str]) -> Vec<Evidence> {
    let (Some(files), Some(src)) = (ctx.facts.unit_files.value(), ctx.facts.unit_files.source())
    else {
        return Vec::new();
    };
    files
        .iter()
        .filter(|u| units.contains(&u.name.as_str()) && u.is_enabled())
        .map(|u| Evidence {
            source: src.to_string(),
            line: Some(u.line),
            text: format!("{} {}: it starts again at every boot", u.name, u.state),
        })
        .collect()
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
        .with_evidence(starts_at_boot(ctx, &["ufw.service"]))
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
    let chains = firewalld_chains(ctx);
    let process = ctx
        .facts
        .processes
        .value()
        .and_then(|ps| ps.iter().find(|p| p.comm == "firewalld"));
    // firewall-cmd's or systemd's answer is authoritative where there is one (a stopped
    // firewalld may leave its chains); a namespace or a bundle without them has the
    // ruleset's zone chains and the process list.
    let running = state == Some("running")
        || unit_active.is_some()
        || (state.is_none() && (chains.is_some() || process.is_some()));
    if !running {
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
    if let (Some(p), Some(src)) = (process, ctx.facts.processes.source()) {
        ev.push(fact_evidence(
            src,
            format!("process {}[{}] {}", p.comm, p.pid, p.args),
        ));
    }
    let iptables_backend = chains.is_some();
    ev.extend(chains);
    // Its reloads flush every iptables table: kube-proxy's canary monitor or failed
    // restores are what a wipe leaves in kube-proxy's log.
    let wipes = ctx
        .timeline
        .entries
        .iter()
        .filter(|e| e.signal == plumb_facts::parse::logs::Signal::CanaryDeleted)
        .count();
    let severity = if iptables_backend && wipes > 0 {
        Severity::High
    } else {
        Severity::Medium
    };
    let title = if iptables_backend {
        format!(
            "firewalld (iptables backend) runs on this Kubernetes node: its reloads flush every table{}",
            if wipes > 0 {
                format!("; kube-proxy saw its rules wiped ({wipes} log lines)")
            } else {
                String::new()
            }
        )
    } else {
        "firewalld is running on this Kubernetes node".to_string()
    };
    Finding::problem(ID_FIREWALLD, severity, title)
        .with_evidence(ev)
        .with_evidence(starts_at_boot(ctx, &["firewalld.service"]))
        .explain(
            "A firewalld reload (FlushAllOnReload=yes) wipes kube-proxy's and the CNI portmap rules until their next sync; \
             firewalld older than 1.2.5 also flushed iptables-nft tables it did not own. RKE2's docs say to disable firewalld with Canal.",
        )
        .fix("Disable firewalld (`systemctl disable --now firewalld`) on RKE2 nodes using Canal, or trust the pod and service networks in it.")
        .fix("Then restart the node's Kubernetes service (`systemctl restart rke2-server` or `rke2-agent`; k3s: `k3s` / `k3s-agent`): kube-proxy resyncs on its own, but the portmap plugin's hostPort DNAT (CNI-HOSTPORT-*) and kubelet's chains come back only when their pods' sandboxes and kubelet are restarted.")
        .fix("If firewalld must stay: set `FlushAllOnReload=no` in /etc/firewalld/firewalld.conf and use the nftables backend (`FirewallBackend=nftables`, firewalld >= 1.2.5 leaves other tables alone), and avoid `firewall-cmd --reload` on running nodes.")
        .do_not("flush iptables or restart firewalld to \"reset\" the node: each reload wipes kube-proxy's and the CNI's rules again")
}
