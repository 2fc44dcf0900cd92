//! Findings: foreign DROP/REJECT rules or policies that Kubernetes traffic hits before it is
//! accepted.
//!
//! - `forward-drop-blocks-pods`: in filter FORWARD, a DROP policy (UFW's default "routed"
//!   deny, Docker's FORWARD DROP, firewalld) or a DROP/REJECT rule that matches all traffic
//!   comes before any accept for pod traffic. kube-proxy's `KUBE-FORWARD` only accepts
//!   packets it marked and established connections; new pod-to-pod and pod-to-service
//!   traffic forwarded by the node needs the CNI's accept rules (FLANNEL-FWD, cali-FORWARD,
//!   CILIUM_FORWARD). UFW active on some nodes of a cluster is this situation.
//! - `input-drop-blocks-node`: filter INPUT drops by default and no rule accepts the ports a
//!   node must receive (kubelet 10250/tcp; flannel VXLAN 8472/udp when Flannel/Canal is
//!   present).
//!
//! Matching is conservative: only rules with no address, interface or protocol condition
//! count as "matches all traffic"; jumps into foreign chains are followed the same way.
//! Anything plumb cannot judge is not reported (no false alarms).

use super::{is_broad, is_cni_chain, is_kube_proxy_chain, owner_name, xt_jump};
use crate::facts::Facts;
use plumb_findings::{Evidence, Finding, Severity, Status};
use plumb_ruleset::iptables::{XtBuf, XtView};
use plumb_ruleset::{Chain, Policy, Table};

pub const ID_FORWARD: &str = "forward-drop-blocks-pods";
pub const ID_INPUT: &str = "input-drop-blocks-node";

const DO_NOT_FLUSH: &str =
    "Do not flush iptables to \"open\" the node: it also removes kube-proxy's and the CNI's rules.";

pub fn check(facts: &Facts) -> Vec<Finding> {
    if !facts.is_full() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut judged = false;
    for table in facts.xt_tables().filter(|t| &*t.name == "filter") {
        if !kubernetes_present(facts, table) {
            continue;
        }
        judged = true;
        if let Some(f) = forward(facts, table) {
            out.push(f);
        }
        if let Some(f) = input(facts, table) {
            out.push(f);
        }
    }
    if judged {
        for (id, title) in [
            (
                ID_FORWARD,
                "pod traffic is accepted before any DROP in FORWARD",
            ),
            (ID_INPUT, "INPUT does not drop the ports a node needs"),
        ] {
            if !out.iter().any(|f| f.id == id) {
                out.push(Finding::ok(id, title));
            }
        }
    }
    out
}

fn kubernetes_present(facts: &Facts, filter: &Table) -> bool {
    ["nat", "filter", "mangle"]
        .iter()
        .filter_map(|n| facts.sibling(filter, n))
        .any(|t| {
            t.chains
                .iter()
                .any(|c| is_kube_proxy_chain(&c.name) || is_cni_chain(&c.name))
        })
}

/// Who most likely set a DROP policy, from the chains present.
fn policy_owner(table: &Table) -> &'static str {
    let has = |o: &str| table.chains.iter().any(|c| owner_name(&c.name) == Some(o));
    if has("ufw") {
        "UFW (default routed/incoming policy deny)"
    } else if has("firewalld") {
        "firewalld"
    } else if has("docker") {
        "Docker (it sets FORWARD to DROP when it starts)"
    } else {
        "the host's firewall configuration"
    }
}

/// ACCEPT that lets pod traffic through: matches everything, or only constrains a source
/// or destination network of /16 or wider (a pod CIDR), not negated.
fn accepts_pods(v: &XtView) -> bool {
    if v.target().map(|t| t.name()) != Some("ACCEPT") {
        return false;
    }
    if is_broad(v) {
        return true;
    }
    let generic_ok = v.generic().all(|o| {
        matches!(o.name(), "-s" | "--source" | "-d" | "--destination")
            && !o.negated()
            && o.arg(0).is_some_and(|a| {
                a.split_once('/')
                    .and_then(|(_, l)| l.parse::<u8>().ok())
                    .is_some_and(|l| l <= 16)
            })
    });
    generic_ok && v.generic().next().is_some() && v.matches().all(|m| m.module() == "comment")
}

fn is_drop(v: &XtView) -> bool {
    matches!(v.target().map(|t| t.name()), Some("DROP" | "REJECT"))
}

/// The first broad DROP/REJECT reached in `chain` (following broad jumps into other
/// foreign chains) before a broad RETURN/ACCEPT ends the walk.
fn broad_drop_in<'a>(
    table: &'a Table,
    chain: &'a Chain,
    depth: usize,
) -> Option<(&'a Chain, &'a plumb_ruleset::Rule)> {
    if depth > 4 {
        return None;
    }
    for r in &chain.rules {
        let Some(v) = r.xt() else { continue };
        if !is_broad(&v) {
            continue;
        }
        match v.target().map(|t| t.name()) {
            Some("DROP" | "REJECT") => return Some((chain, r)),
            Some("RETURN" | "ACCEPT") => return None,
            _ => {}
        }
        if let Some(next) = xt_jump(&v)
            && !is_cni_chain(next)
            && !is_kube_proxy_chain(next)
            && let Some(c) = table.chain(next)
            && let Some(hit) = broad_drop_in(table, c, depth + 1)
        {
            return Some(hit);
        }
    }
    None
}

fn forward(facts: &Facts, table: &Table) -> Option<Finding> {
    let fwd = table.chain("FORWARD")?;
    let mut accepted = false;
    for r in &fwd.rules {
        let Some(v) = r.xt() else { continue };
        if let Some(c) = xt_jump(&v) {
            if is_cni_chain(c) {
                accepted = true;
                continue;
            }
            if is_kube_proxy_chain(c) || !is_broad(&v) {
                continue;
            }
            if let Some(inner) = table.chain(c)
                && let Some((dc, dr)) = broad_drop_in(table, inner, 0)
            {
                let owner = owner_name(&dc.name).unwrap_or("unknown");
                return Some(
                    forward_finding(
                        format!(
                            "{} {}: FORWARD reaches a DROP/REJECT for all traffic in {} ({owner}) before any rule accepts pod traffic",
                            table.backend, table.family, dc.name
                        ),
                    )
                    .with_evidence([facts.rule(table, r), facts.rule(table, dr)]),
                );
            }
            continue;
        }
        if accepts_pods(&v) {
            accepted = true;
        } else if is_drop(&v) && is_broad(&v) && !accepted {
            return Some(
                forward_finding(format!(
                    "{} {}: FORWARD rule {} drops all traffic before any rule accepts pod traffic",
                    table.backend, table.family, r.position
                ))
                .with_evidence([facts.rule(table, r)]),
            );
        }
    }
    if !accepted && fwd.policy() == Some(&Policy::Drop) {
        let owner = policy_owner(table);
        let mut f = forward_finding(
            format!(
                "{} {}: FORWARD policy is DROP (set by {owner}) and no rule accepts pod traffic before it",
                table.backend, table.family
            ),
        )
        .with_evidence([facts.chain(table, fwd)]);
        if owner.starts_with("UFW") {
            f = f
                .fix("UFW: allow routed pod traffic (`ufw default allow routed`, or `ufw route allow from <pod CIDR>` and `ufw route allow to <pod CIDR>`), or disable UFW on Kubernetes nodes (`systemctl disable --now ufw`) and keep it out of the node baseline.");
        }
        return Some(f);
    }
    None
}

fn forward_finding(title: String) -> Finding {
    Finding::problem(ID_FORWARD, Severity::High, title)
        .explain("Traffic between pods on different nodes, and service traffic whose endpoint is on another node, is forwarded by this node through filter FORWARD. kube-proxy's KUBE-FORWARD accepts only packets it marked for masquerade and established connections; new pod connections need the CNI's accept rules (FLANNEL-FWD, cali-FORWARD, CILIUM_FORWARD). Here a DROP is reached first, so new connections through this node time out — often on only some nodes (UFW active on a subset of nodes, for one).")
        .fix("Make the CNI's forward accept rules come first, or allow forwarding for the pod and service CIDRs in the host firewall.")
        .do_not(DO_NOT_FLUSH)
}

/// Ports a node must accept, given what is installed.
fn required_ports(facts: &Facts, table: &Table) -> Vec<(u16, &'static str, &'static str)> {
    let mut ports = vec![(10250u16, "tcp", "kubelet API")];
    let flannel = ["nat", "filter"]
        .iter()
        .filter_map(|n| facts.sibling(table, n))
        .any(|t| {
            t.chains
                .iter()
                .any(|c| matches!(owner_name(&c.name), Some("flannel") | Some("calico")))
        });
    if flannel {
        ports.push((8472, "udp", "flannel/Canal VXLAN"));
    }
    ports
}

/// `--dport 80`, `--dports 80,443`, `--dport 30000:32767` -> ranges.
fn accepted_ranges(v: &XtView) -> Vec<(u16, u16)> {
    let mut out = Vec::new();
    for m in v.matches() {
        for o in m.options() {
            if o.negated()
                || !matches!(
                    o.name(),
                    "--dport" | "--dports" | "--destination-port" | "--destination-ports"
                )
            {
                continue;
            }
            let Some(arg) = o.arg(0) else { continue };
            for part in arg.split(',') {
                let (a, b) = part.split_once(':').unwrap_or((part, part));
                if let (Ok(a), Ok(b)) = (a.parse::<u16>(), b.parse::<u16>()) {
                    out.push((a, b));
                }
            }
        }
    }
    out
}

fn input(facts: &Facts, table: &Table) -> Option<Finding> {
    let inp = table.chain("INPUT")?;
    if inp.policy() != Some(&Policy::Drop) {
        return None;
    }
    // Any ACCEPT in the table counts (UFW keeps user rules in ufw-user-input).
    let mut ranges: Vec<(u16, u16, String)> = Vec::new();
    let mut source_accept: Option<Evidence> = None;
    let mut buf = XtBuf::default();
    for c in &table.chains {
        for r in &c.rules {
            let Some(v) = r.xt_in(&mut buf) else { continue };
            if v.target().map(|t| t.name()) != Some("ACCEPT") {
                continue;
            }
            if c.name.as_ref() == "INPUT" && is_broad(&v) {
                return None; // INPUT accepts everything before the policy.
            }
            let proto = v
                .generic_option("-p")
                .and_then(|o| o.arg(0))
                .map(|p| p.to_ascii_lowercase())
                .unwrap_or_default();
            let r_ranges = accepted_ranges(&v);
            if r_ranges.is_empty() {
                let from_lo = v
                    .generic_option("-i")
                    .and_then(|o| o.arg(0))
                    .is_some_and(|i| i == "lo");
                let stateful = v
                    .matches()
                    .any(|m| matches!(m.module(), "conntrack" | "state"));
                if !from_lo
                    && !stateful
                    && v.generic()
                        .any(|o| matches!(o.name(), "-s" | "--source" | "-i" | "--in-interface"))
                {
                    source_accept.get_or_insert_with(|| facts.rule(table, r));
                }
            }
            for (a, b) in r_ranges {
                ranges.push((a, b, proto.clone()));
            }
        }
    }
    let missing: Vec<(u16, &str, &str)> = required_ports(facts, table)
        .into_iter()
        .filter(|(p, proto, _)| {
            !ranges
                .iter()
                .any(|(a, b, rp)| a <= p && p <= b && (rp.is_empty() || rp == proto))
        })
        .collect();
    if missing.is_empty() {
        return None;
    }
    let list: Vec<String> = missing
        .iter()
        .map(|(p, proto, what)| format!("{p}/{proto} ({what})"))
        .collect();
    let owner = policy_owner(table);
    let title = format!(
        "{} {}: INPUT policy is DROP (set by {owner}) and nothing accepts {}",
        table.backend,
        table.family,
        list.join(", ")
    );
    let mut f = Finding::problem(ID_INPUT, Severity::Medium, title)
        .with_evidence([facts.chain(table, inp)])
        .explain("With INPUT dropping by default, a node only receives what rules accept. The API server reaches kubelet on 10250/tcp (logs, exec, metrics) and Flannel/Canal nodes exchange pod traffic as VXLAN on 8472/udp; dropping them breaks `kubectl logs/exec` and cross-node pod traffic while the node may still look Ready.")
        .fix("Accept those ports from the node network in the host firewall (UFW: `ufw allow 10250/tcp`, `ufw allow 8472/udp`), or disable the host firewall on Kubernetes nodes.")
        .do_not(DO_NOT_FLUSH);
    if let Some(ev) = source_accept {
        // A source- or interface-restricted ACCEPT may already cover the node network.
        f.status = Status::Unknown;
        f.severity = Severity::Low;
        f.title
            .push_str(" by port (a source/interface ACCEPT may cover it)");
        f = f.with_evidence([ev]);
    }
    Some(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kube_dump() -> String {
        crate::checks::kube_proxy_dump(5)
    }

    fn run(text: &str) -> Vec<Finding> {
        crate::checks::run_on_dump(check, text)
    }

    /// UFW's real filter layout (from /usr/share/ufw/iptables/before.rules and ufw-init,
    /// `ufw --force enable` with defaults: deny incoming, deny routed) added to a
    /// kube-proxy node, as nodes with UFW active have it.
    fn with_ufw(dump: &str) -> String {
        let ufw_chains = [
            "ufw-before-logging-input",
            "ufw-before-input",
            "ufw-after-input",
            "ufw-after-logging-input",
            "ufw-reject-input",
            "ufw-track-input",
            "ufw-before-logging-forward",
            "ufw-before-forward",
            "ufw-after-forward",
            "ufw-after-logging-forward",
            "ufw-reject-forward",
            "ufw-track-forward",
            "ufw-user-input",
            "ufw-user-forward",
        ];
        let mut out = String::new();
        for line in dump.lines() {
            match line {
                ":INPUT ACCEPT [0:0]" if out.contains("*filter") => {
                    out.push_str(":INPUT DROP [0:0]\n")
                }
                ":FORWARD ACCEPT [0:0]" if out.contains("*filter") => {
                    out.push_str(":FORWARD DROP [0:0]\n")
                }
                "COMMIT" if out.contains("*filter") && !out.contains("ufw-") => {
                    for c in ufw_chains {
                        out.push_str(&format!(":{c} - [0:0]\n"));
                    }
                    for (b, c) in [("INPUT", "input"), ("FORWARD", "forward")] {
                        for s in [
                            "before-logging",
                            "before",
                            "after",
                            "after-logging",
                            "reject",
                            "track",
                        ] {
                            out.push_str(&format!("-A {b} -j ufw-{s}-{c}\n"));
                        }
                    }
                    out.push_str("-A ufw-before-input -i lo -j ACCEPT\n");
                    out.push_str("-A ufw-before-input -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n");
                    out.push_str("-A ufw-before-input -m conntrack --ctstate INVALID -j DROP\n");
                    out.push_str(
                        "-A ufw-before-input -p udp -m udp --sport 67 --dport 68 -j ACCEPT\n",
                    );
                    out.push_str("-A ufw-before-input -j ufw-user-input\n");
                    out.push_str("-A ufw-before-forward -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n");
                    out.push_str("-A ufw-before-forward -p icmp -m icmp --icmp-type 8 -j ACCEPT\n");
                    out.push_str("-A ufw-before-forward -j ufw-user-forward\n");
                    out.push_str("-A ufw-user-input -p tcp -m tcp --dport 22 -j ACCEPT\n");
                    out.push_str("COMMIT\n");
                }
                l => {
                    out.push_str(l);
                    out.push('\n');
                }
            }
        }
        out
    }

    #[test]
    fn ufw_on_a_kube_proxy_node_blocks_forwarding_and_kubelet() {
        let f = run(&with_ufw(&kube_dump()));
        let fwd = f.iter().find(|x| x.id == ID_FORWARD).unwrap();
        assert!(fwd.is_problem(), "{f:#?}");
        assert!(
            fwd.title.contains("FORWARD policy is DROP (set by UFW"),
            "{}",
            fwd.title
        );
        assert!(fwd.remediation.iter().any(|r| r.contains("ufw")));
        let inp = f.iter().find(|x| x.id == ID_INPUT).unwrap();
        assert!(inp.is_problem(), "{inp:#?}");
        assert!(inp.title.contains("10250/tcp"));
    }

    #[test]
    fn healthy_kube_proxy_node_is_ok() {
        let f = run(&kube_dump());
        assert!(f.iter().all(|x| x.status == Status::Ok), "{f:#?}");
    }

    #[test]
    fn docker_drop_policy_with_flannel_accepts_is_ok_and_without_is_not() {
        let base = "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\nCOMMIT\n*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n:DOCKER-USER - [0:0]\n:KUBE-FORWARD - [0:0]\n:FLANNEL-FWD - [0:0]\n-A FORWARD -j KUBE-FORWARD\n-A FORWARD -j DOCKER-USER\n-A FORWARD -j FLANNEL-FWD\n-A DOCKER-USER -j RETURN\n-A FLANNEL-FWD -s 10.244.0.0/16 -j ACCEPT\nCOMMIT\n";
        let f = run(base);
        assert_eq!(
            f.iter().find(|x| x.id == ID_FORWARD).unwrap().status,
            Status::Ok
        );
        let without = base.replace("-A FORWARD -j FLANNEL-FWD\n", "");
        let f = run(&without);
        let fwd = f.iter().find(|x| x.id == ID_FORWARD).unwrap();
        assert!(fwd.is_problem());
        assert!(fwd.title.contains("Docker"));
    }

    #[test]
    fn explicit_drop_in_a_foreign_chain_before_cni_is_reported() {
        let text = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:AGENT-FWD - [0:0]\n:KUBE-FORWARD - [0:0]\n:cali-FORWARD - [0:0]\n-A FORWARD -j KUBE-FORWARD\n-A FORWARD -j AGENT-FWD\n-A FORWARD -j cali-FORWARD\n-A AGENT-FWD -m conntrack --ctstate INVALID -j DROP\n-A AGENT-FWD -j DROP\nCOMMIT\n";
        let f = run(text);
        let fwd = f.iter().find(|x| x.id == ID_FORWARD).unwrap();
        assert!(fwd.is_problem(), "{f:#?}");
        assert_eq!(fwd.evidence.len(), 2);
        assert_eq!(fwd.evidence[1].text, "-A AGENT-FWD -j DROP");
        // A narrower DROP (one interface) is not "all traffic": no finding.
        let narrow = text.replace("-A AGENT-FWD -j DROP", "-A AGENT-FWD -i eth9 -j DROP");
        let f = run(&narrow);
        assert_eq!(
            f.iter().find(|x| x.id == ID_FORWARD).unwrap().status,
            Status::Ok
        );
    }
}
