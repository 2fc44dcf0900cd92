//! Findings: Kubernetes rules in more than one backend.
//!
//! - `iptables-backend-mix`: iptables-legacy and iptables-nft both hold KUBE-* chains
//!   (`iptables` warns "iptables-legacy tables present"). The kernel evaluates both, so
//!   stale rules in the unused backend still act on packets. The live one is the backend
//!   where kubelet keeps `KUBE-IPTABLES-HINT` (facts-kernel.md); kube-proxy's
//!   iptables-wrapper picks the same one.
//! - `kube-proxy-mode-mix`: a native nftables `kube-proxy` table and iptables-mode
//!   KUBE-SVC chains at once: kube-proxy changed mode and one set is a leftover.
//!
//! Only judged on complete inputs (a live read or a whole bundle).

use super::short_list;
use crate::facts::CheckInput;
use plumb_findings::{Finding, Severity};
use plumb_kubeproxy::chain_name::parse_chain_name;
use plumb_ruleset::{Backend, Table};

/// Finding id: KUBE-* chains in both iptables-legacy and iptables-nft.
pub const ID: &str = "iptables-backend-mix";
/// Finding id: a native nftables `kube-proxy` table beside iptables-mode `KUBE-SVC-*` chains.
pub const ID_MODE: &str = "kube-proxy-mode-mix";

fn kube_chains<'a>(
    facts: &CheckInput<'a>,
    backend: Backend,
) -> Vec<(&'a Table, &'a plumb_ruleset::Chain)> {
    facts
        .ruleset
        .tables_of(backend)
        .flat_map(|t| t.chains.iter().map(move |c| (t, c)))
        .filter(|(_, c)| c.name.starts_with("KUBE-"))
        .collect()
}

fn has_hint(facts: &CheckInput, backend: Backend) -> bool {
    facts
        .ruleset
        .tables_of(backend)
        .any(|t| &*t.name == "mangle" && t.chain("KUBE-IPTABLES-HINT").is_some())
}

/// Reports Kubernetes chains in more than one backend and kube-proxy rules of two modes;
/// `unknown` for both ids when the input is not complete.
pub fn check(facts: &CheckInput) -> Vec<Finding> {
    if !facts.is_full() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let legacy = kube_chains(facts, Backend::IptablesLegacy);
    let nft = kube_chains(facts, Backend::IptablesNft);
    if !legacy.is_empty() && !nft.is_empty() {
        let (lh, nh) = (
            has_hint(facts, Backend::IptablesLegacy),
            has_hint(facts, Backend::IptablesNft),
        );
        let live = match (lh, nh) {
            (true, false) => Some((Backend::IptablesLegacy, Backend::IptablesNft)),
            (false, true) => Some((Backend::IptablesNft, Backend::IptablesLegacy)),
            _ => None,
        };
        let title = match live {
            Some((l, s)) => format!(
                "KUBE rules in both iptables backends: {l} is live (kubelet's KUBE-IPTABLES-HINT), {s} holds {} stale KUBE chain(s)",
                if s == Backend::IptablesLegacy {
                    legacy.len()
                } else {
                    nft.len()
                }
            ),
            None => format!(
                "KUBE rules in both iptables backends ({} legacy, {} nft chains); which one is live cannot be told (KUBE-IPTABLES-HINT in {})",
                legacy.len(),
                nft.len(),
                if lh { "both" } else { "neither" }
            ),
        };
        let ev = legacy
            .iter()
            .take(3)
            .chain(nft.iter().take(3))
            .map(|(t, c)| facts.chain(t, c));
        let f = Finding::problem(ID, Severity::High, title)
            .with_evidence(ev)
            .explain("iptables-legacy (x_tables) and iptables-nft (nf_tables) are separate kernel tables and the kernel runs both on every packet. When kube-proxy or kubelet switched backend (an image or host iptables upgrade, an `update-alternatives` change), the old backend keeps its KUBE rules: they go stale, keep DNATing to old endpoints or dropping, and `iptables` warns \"iptables-legacy tables present\". Tools reading only one backend see half the picture.")
            .fix("Confirm the live backend: `iptables --version` on the host and in the kube-proxy image, and which mangle table has KUBE-IPTABLES-HINT.")
            .fix("Remove the stale backend's KUBE rules in a maintenance window (e.g. `iptables-legacy-save | grep -v KUBE | iptables-legacy-restore` when legacy is stale), then reboot or restart kubelet and kube-proxy.")
            .do_not("pin iptables-legacy as a workaround: it makes the split permanent.");
        out.push(f);
    }
    let nft_mode = facts
        .ruleset
        .tables
        .iter()
        .filter(|t| t.backend == Backend::Nftables && &*t.name == "kube-proxy")
        .collect::<Vec<_>>();
    let ipt_svc: Vec<&str> = legacy
        .iter()
        .chain(&nft)
        .filter(|(_, c)| parse_chain_name(&c.name).is_some())
        .map(|(_, c)| &*c.name)
        .collect();
    if !nft_mode.is_empty() && !ipt_svc.is_empty() {
        out.push(
            Finding::problem(
                ID_MODE,
                Severity::Medium,
                format!(
                    "kube-proxy nftables-mode table and {} iptables-mode service chains both present ({})",
                    ipt_svc.len(),
                    short_list(&ipt_svc, 2)
                ),
            )
            .with_evidence(nft_mode.iter().map(|t| facts.note(format!("table {} kube-proxy", t.family))))
            .explain("kube-proxy changed proxy mode and the previous mode's rules were not cleaned up. Both are evaluated by the kernel: the stale set can still capture ClusterIPs and DNAT to endpoints that no longer exist.")
            .fix("Check kube-proxy's --proxy-mode (or mode: in its config); remove the other mode's rules with `kube-proxy --cleanup` from the cluster's tooling or a reboot."),
        );
    }
    if out.is_empty() {
        out.push(Finding::ok(ID, "Kubernetes rules live in a single backend"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::Origin;
    use plumb_findings::Status;
    use plumb_ruleset::Ruleset;
    use plumb_ruleset::iptables::save::{IptablesInput, parse};

    fn rs(text: &str, backend: Backend) -> Ruleset {
        parse(
            &crate::checks::full_dump(text),
            &IptablesInput {
                backend: Some(backend),
                ..Default::default()
            },
        )
    }

    const KUBE: &str = "*mangle\n:PREROUTING ACCEPT [0:0]\n:KUBE-IPTABLES-HINT - [0:0]\nCOMMIT\n*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]\n-A PREROUTING -j KUBE-SERVICES\n-A KUBE-SERVICES -j KUBE-SVC-NPX46M4PTMTKRN6Y\nCOMMIT\n";
    const STALE: &str = "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n-A PREROUTING -j KUBE-SERVICES\nCOMMIT\n";

    #[test]
    fn both_backends_names_the_live_one() {
        let mut r = rs(KUBE, Backend::IptablesNft);
        r.merge(rs(STALE, Backend::IptablesLegacy));
        let f = check(&CheckInput::new(&r, Origin::Live { netns: None }, false));
        assert!(f[0].is_problem());
        assert!(
            f[0].title.contains("iptables-nft is live"),
            "{}",
            f[0].title
        );
        assert!(
            f[0].evidence
                .iter()
                .any(|e| e.source == "iptables-legacy-save")
        );
    }

    #[test]
    fn one_backend_is_ok() {
        let r = rs(KUBE, Backend::IptablesNft);
        let f = check(&CheckInput::new(&r, Origin::Live { netns: None }, false));
        assert_eq!(f[0].status, Status::Ok);
    }
}
