//! Findings: Kubernetes rules in more than one backend.
//!
//! - `iptables-backend-mix`: iptables-legacy and iptables-nft both hold KUBE-* chains
//!   (`iptables` warns "iptables-legacy tables present"). The kernel evaluates both, so
//!   stale rules in the unused backend still act on packets. The live one is the only
//!   backend whose built-in chains jump to KUBE-* chains (its hook rules: packets enter
//!   kube-proxy's and kubelet's chains only through them); when both or neither have
//!   hook rules, the backend where kubelet keeps `KUBE-IPTABLES-HINT` (facts-kernel.md;
//!   kube-proxy's iptables-wrapper picks the same one). The stale backend's kube-proxy
//!   chains are not judged as kube-proxy's dataplane ([`live_backend`]): no packet
//!   reaches them, so their missing hooks are this finding, not `kube-proxy-rules-missing`.
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

/// The `KUBE-*` chains of `backend`'s tables, with their table.
fn kube_chains<'a>(
    facts: &CheckInput<'a>,
    backend: Backend,
) -> impl Iterator<Item = (&'a Table, &'a plumb_ruleset::Chain)> {
    facts
        .ruleset
        .tables_of(backend)
        .flat_map(|t| t.chains.iter().map(move |c| (t, c)))
        .filter(|(_, c)| c.name.starts_with("KUBE-"))
}

/// Whether the tables of `backend` hold a `KUBE-*` chain (without collecting them: a
/// 10k-service node has 58k).
fn has_kube_chains(facts: &CheckInput, backend: Backend) -> bool {
    kube_chains(facts, backend).next().is_some()
}

fn has_hint(facts: &CheckInput, backend: Backend) -> bool {
    facts
        .ruleset
        .tables_of(backend)
        .any(|t| &*t.name == "mangle" && t.chain("KUBE-IPTABLES-HINT").is_some())
}

/// The hook rules of `backend`: rules of its built-in chains that jump to a KUBE-* chain.
fn hook_rules<'a>(
    facts: &CheckInput<'a>,
    backend: Backend,
) -> Vec<(&'a Table, &'a plumb_ruleset::Chain, &'a plumb_ruleset::Rule)> {
    facts
        .ruleset
        .tables_of(backend)
        .flat_map(|t| {
            t.chains
                .iter()
                .filter(|c| c.is_builtin())
                .flat_map(move |c| c.rules.iter().map(move |r| (t, c, r)))
        })
        .filter(|(_, _, r)| {
            r.chain_references()
                .iter()
                .any(|x| x.chain.starts_with("KUBE-"))
        })
        .collect()
}

/// Which iptables backend is live when both hold KUBE chains, and how that was told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveBackend {
    /// The backend packets go through (or kubelet writes to).
    pub live: Backend,
    /// The backend holding the stale copy.
    pub stale: Backend,
    /// True when told by the hook rules (only the live backend's built-in chains jump to
    /// KUBE chains); false when told by kubelet's KUBE-IPTABLES-HINT.
    pub by_hooks: bool,
}

/// When both iptables backends hold KUBE chains in a full dump: the live one, told by
/// the hook rules when only one backend has them, else by KUBE-IPTABLES-HINT when only
/// one backend has it; `None` when it cannot be told (or there is no mix).
pub fn live_backend(facts: &CheckInput) -> Option<LiveBackend> {
    if !facts.is_full() {
        return None;
    }
    let (l, n) = (Backend::IptablesLegacy, Backend::IptablesNft);
    if !has_kube_chains(facts, l) || !has_kube_chains(facts, n) {
        return None;
    }
    let pick = |a: bool, b: bool| match (a, b) {
        (true, false) => Some((l, n)),
        (false, true) => Some((n, l)),
        _ => None,
    };
    let hooks = pick(
        !hook_rules(facts, l).is_empty(),
        !hook_rules(facts, n).is_empty(),
    );
    if let Some((live, stale)) = hooks {
        return Some(LiveBackend {
            live,
            stale,
            by_hooks: true,
        });
    }
    pick(has_hint(facts, l), has_hint(facts, n)).map(|(live, stale)| LiveBackend {
        live,
        stale,
        by_hooks: false,
    })
}

/// Reports Kubernetes chains in more than one backend and kube-proxy rules of two modes;
/// `unknown` for both ids when the input is not complete.
pub fn check(facts: &CheckInput) -> Vec<Finding> {
    if !facts.is_full() {
        return Vec::new();
    }
    let mut out = Vec::new();
    if has_kube_chains(facts, Backend::IptablesLegacy)
        && has_kube_chains(facts, Backend::IptablesNft)
    {
        let legacy: Vec<_> = kube_chains(facts, Backend::IptablesLegacy).collect();
        let nft: Vec<_> = kube_chains(facts, Backend::IptablesNft).collect();
        let (lh, nh) = (
            has_hint(facts, Backend::IptablesLegacy),
            has_hint(facts, Backend::IptablesNft),
        );
        let live = live_backend(facts);
        let stale_count = |b: Backend| {
            if b == Backend::IptablesLegacy {
                legacy.len()
            } else {
                nft.len()
            }
        };
        let title = match live {
            Some(LiveBackend {
                live,
                stale,
                by_hooks: true,
            }) => format!(
                "KUBE rules in both iptables backends: {live} is live (only its built-in chains jump to KUBE chains), {stale} holds {} stale KUBE chain(s) no packet reaches",
                stale_count(stale)
            ),
            Some(LiveBackend { live, stale, .. }) => format!(
                "KUBE rules in both iptables backends: {live} is live (kubelet's KUBE-IPTABLES-HINT), {stale} holds {} stale KUBE chain(s)",
                stale_count(stale)
            ),
            None => format!(
                "KUBE rules in both iptables backends ({} legacy, {} nft chains); which one is live cannot be told (hook rules from the built-in chains in both or neither, KUBE-IPTABLES-HINT in {})",
                legacy.len(),
                nft.len(),
                if lh && nh { "both" } else { "neither" }
            ),
        };
        // The live backend's hook rules first (what makes it live), then chains of each.
        let hooks: Vec<_> = live
            .filter(|l| l.by_hooks)
            .map(|l| hook_rules(facts, l.live))
            .unwrap_or_default();
        let ev: Vec<_> = hooks
            .iter()
            .take(2)
            .map(|(t, _, r)| facts.rule(t, r))
            .chain(
                legacy
                    .iter()
                    .take(3)
                    .chain(nft.iter().take(3))
                    .map(|(t, c)| facts.chain(t, c)),
            )
            .collect();
        let confirm = match live {
            Some(l) => format!(
                "Confirm {} is the backend kube-proxy and kubelet use: `iptables --version` on the host and in the kube-proxy image say `({})`.",
                l.live,
                if l.live == Backend::IptablesNft { "nf_tables" } else { "legacy" }
            ),
            None => "Confirm the live backend: `iptables --version` on the host and in the kube-proxy image, and which mangle table has KUBE-IPTABLES-HINT.".to_string(),
        };
        let remove = match live.map(|l| l.stale) {
            Some(Backend::IptablesLegacy) => "Remove the stale iptables-legacy KUBE rules in a maintenance window: `iptables-legacy-save | grep -v KUBE | iptables-legacy-restore` (and the same with ip6tables-legacy), then restart kubelet and kube-proxy so they re-check their own rules.".to_string(),
            Some(_) => "Remove the stale iptables-nft KUBE rules in a maintenance window: `iptables-nft-save | grep -v KUBE | iptables-nft-restore` (and the same with ip6tables-nft), then restart kubelet and kube-proxy so they re-check their own rules.".to_string(),
            None => "Remove the stale backend's KUBE rules in a maintenance window (e.g. `iptables-legacy-save | grep -v KUBE | iptables-legacy-restore` when legacy is stale), then reboot or restart kubelet and kube-proxy.".to_string(),
        };
        let stale_note = match live {
            Some(l) => format!(
                " Here {} is live; {}'s kube-proxy chains are judged as leftovers, not as kube-proxy's dataplane (their missing hooks are why no packet reaches them, not a broken kube-proxy).",
                l.live, l.stale
            ),
            None => String::new(),
        };
        let f = Finding::problem(ID, Severity::High, title)
            .with_evidence(ev)
            .explain(format!("iptables-legacy (x_tables) and iptables-nft (nf_tables) are separate kernel tables and the kernel runs both on every packet. When kube-proxy or kubelet switched backend (an image or host iptables upgrade, an `update-alternatives` change), the old backend keeps its KUBE rules: they go stale, keep DNATing to old endpoints or dropping when their hooks remain, and `iptables` warns \"iptables-legacy tables present\". Tools reading only one backend see half the picture.{stale_note}"))
            .fix(confirm)
            .fix(remove)
            .do_not("pin iptables-legacy as a workaround: it makes the split permanent.");
        out.push(f);
    }
    let nft_mode = facts
        .ruleset
        .tables
        .iter()
        .filter(|t| plumb_kubeproxy::recover::nft::is_kube_proxy_table(t))
        .collect::<Vec<_>>();
    // The iptables-mode service chains, listed only beside an nftables-mode table.
    let ipt_svc: Vec<&str> = if nft_mode.is_empty() {
        Vec::new()
    } else {
        [Backend::IptablesLegacy, Backend::IptablesNft]
            .into_iter()
            .flat_map(|b| kube_chains(facts, b))
            .filter(|(_, c)| parse_chain_name(&c.name).is_some())
            .map(|(_, c)| &*c.name)
            .collect()
    };
    if !ipt_svc.is_empty() {
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

    /// The lab's and a switched node's state: the same kube-proxy chains in both backends,
    /// KUBE-IPTABLES-HINT in both, hook rules only in nft.
    const STALE_UNHOOKED: &str = "*mangle\n:PREROUTING ACCEPT [0:0]\n:KUBE-IPTABLES-HINT - [0:0]\nCOMMIT\n*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]\n-A KUBE-SERVICES -j KUBE-SVC-NPX46M4PTMTKRN6Y\nCOMMIT\n";

    #[test]
    fn hook_rules_in_one_backend_name_it_live() {
        let mut r = rs(KUBE, Backend::IptablesNft);
        r.merge(rs(STALE_UNHOOKED, Backend::IptablesLegacy));
        let facts = CheckInput::new(&r, Origin::Live { netns: None }, false);
        assert_eq!(
            live_backend(&facts),
            Some(LiveBackend {
                live: Backend::IptablesNft,
                stale: Backend::IptablesLegacy,
                by_hooks: true
            })
        );
        let f = check(&facts);
        assert!(
            f[0].title
                .contains("iptables-nft is live (only its built-in chains jump")
                && !f[0].title.contains("cannot be told"),
            "{}",
            f[0].title
        );
        assert!(
            f[0].evidence
                .iter()
                .any(|e| e.text == "-A PREROUTING -j KUBE-SERVICES"),
            "{:?}",
            f[0].evidence
        );
        assert!(
            f[0].remediation
                .iter()
                .any(|s| s.contains("iptables-legacy-save | grep -v KUBE"))
        );
    }

    #[test]
    fn hooks_in_both_and_hint_in_both_cannot_be_told() {
        let mut r = rs(KUBE, Backend::IptablesNft);
        r.merge(rs(KUBE, Backend::IptablesLegacy));
        let facts = CheckInput::new(&r, Origin::Live { netns: None }, false);
        assert_eq!(live_backend(&facts), None);
        assert!(check(&facts)[0].title.contains("cannot be told"));
    }

    /// kube-proxy's nftables-mode table beside iptables-mode service chains (of either
    /// backend) is a mode mix naming the service chains; without the table it is not.
    #[test]
    fn an_nftables_mode_table_beside_iptables_service_chains_is_a_mode_mix() {
        let mut r = rs(KUBE, Backend::IptablesLegacy);
        r.merge(plumb_ruleset::nft::parse_text(
            "table ip kube-proxy {\n\tchain services {\n\t}\n}\n",
        ));
        let f = check(&CheckInput::new(&r, Origin::Live { netns: None }, false));
        let mix = f
            .iter()
            .find(|f| f.id == ID_MODE)
            .unwrap_or_else(|| panic!("{f:#?}"));
        assert!(mix.is_problem());
        assert!(
            mix.title.contains(
                "1 iptables-mode service chains both present (KUBE-SVC-NPX46M4PTMTKRN6Y)"
            ),
            "{}",
            mix.title
        );
        let alone = rs(KUBE, Backend::IptablesLegacy);
        let f = check(&CheckInput::new(
            &alone,
            Origin::Live { netns: None },
            false,
        ));
        assert!(f.iter().all(|f| f.id != ID_MODE), "{f:#?}");
    }

    #[test]
    fn one_backend_is_ok() {
        let r = rs(KUBE, Backend::IptablesNft);
        let f = check(&CheckInput::new(&r, Origin::Live { netns: None }, false));
        assert_eq!(f[0].status, Status::Ok);
    }
}
