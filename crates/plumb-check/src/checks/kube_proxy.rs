//! Findings: kube-proxy is present but its dataplane is broken.
//!
//! - `kube-proxy-rules-missing`: nat `KUBE-SERVICES` missing or without service rules while
//!   `KUBE-SVC-*` chains exist (nothing captures ClusterIPs: the API server answers
//!   locally but 10.43.0.1:443 times out), or a hook from PREROUTING/OUTPUT/
//!   POSTROUTING (nat) or FORWARD (filter) is gone. nftables mode: the `services` chain or
//!   the `nat-prerouting`/`nat-output` base chains are missing.
//! - `kube-proxy-service-unreachable`: a `KUBE-SVC-*`/`KUBE-SVL-*` chain nothing jumps to —
//!   the state left when a tool deletes kube-proxy's jump rules (and the next partial sync
//!   then fails with "Chain … does not exist"). In IPVS mode such chains are leftovers and
//!   reported by `stale-chain` instead.
//! - `kube-proxy-canary-missing`: mangle `KUBE-PROXY-CANARY` (kube-proxy polls it every
//!   sync period and resyncs when it vanishes), `KUBE-KUBELET-CANARY` or kubelet's
//!   `KUBE-IPTABLES-HINT` are missing: something flushed or replaced the tables.
//! - `kube-proxy-chain-hash-mismatch`: a KUBE-SVC/SEP/… chain whose hash is not what
//!   kube-proxy computes for the service named in its comments.
//!
//! Only judged on complete dumps; partial inputs get an `unknown` answer. When both
//! iptables backends hold KUBE chains and one is told live (`backends::live_backend`),
//! the stale backend's chains are leftovers reported by `iptables-backend-mix`, not
//! kube-proxy's dataplane: none of these findings is raised about them.

use super::{is_kube_proxy_chain, short_list};
use crate::facts::shapes::{ipvs_mode, is_flushed};
use crate::facts::{CheckInput, group_name};
use plumb_findings::{Evidence, Finding, Severity};
use plumb_kubeproxy::ChainPrefix;
use plumb_kubeproxy::chain_name::parse_chain_name;
use plumb_ruleset::iptables::XtBuf;
use plumb_ruleset::{Backend, Family, Table};

/// Finding id: kube-proxy's service dispatch (`KUBE-SERVICES` or its hooks; nftables
/// mode: `services` and the nat base chains) is missing while its service chains exist.
pub const ID_MISSING: &str = "kube-proxy-rules-missing";
/// Finding id: a `KUBE-SVC-*`/`KUBE-SVL-*` chain that nothing jumps to (iptables mode).
pub const ID_UNREACHABLE: &str = "kube-proxy-service-unreachable";
/// Finding id: a canary chain or `KUBE-IPTABLES-HINT` that this kube-proxy and kubelet
/// generation writes is missing.
pub const ID_CANARY: &str = "kube-proxy-canary-missing";
/// Finding id: a kube-proxy chain whose name hash does not match the service its
/// comments name.
pub const ID_HASH: &str = "kube-proxy-chain-hash-mismatch";

const DO_NOT_FLUSH: &str = "flush iptables or restart kube-proxy in a loop: if something keeps deleting its rules (a security agent's tamper protection, for one), they disappear again; fix the cause.";

fn kube_proxy_present(tables: &[&Table]) -> bool {
    tables
        .iter()
        .any(|t| t.chains.iter().any(|c| is_kube_proxy_chain(&c.name)))
}

/// Does `builtin` of `table` jump to `target`?
fn hooked(table: &Table, builtin: &str, target: &str) -> Option<bool> {
    let c = table.chain(builtin)?;
    Some(
        c.rules
            .iter()
            .any(|r| r.chain_references().iter().any(|x| x.chain == target)),
    )
}

/// Judges kube-proxy's rules when kube-proxy is present (iptables, IPVS or nftables
/// mode); nothing is reported missing that the inferred generation never wrote, and
/// partial inputs get `unknown`.
pub fn check(facts: &CheckInput) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut judged = false;
    // Whether kube-proxy's iptables chains were judged; else only its nftables table was.
    let mut judged_xt = false;
    let stale = super::backends::live_backend(facts).map(|l| l.stale);
    for group in facts.xt_groups() {
        if stale == Some(group.0) {
            continue;
        }
        let tables: Vec<&Table> = ["nat", "filter", "mangle"]
            .iter()
            .filter_map(|n| facts.xt_table(group, n))
            .collect();
        if !kube_proxy_present(&tables) {
            continue;
        }
        if !facts.is_full() {
            out.push(
                Finding::unknown(
                    ID_MISSING,
                    Severity::Info,
                    format!(
                        "kube-proxy rules in {} not judged: the input is partial or truncated",
                        group_name(group)
                    ),
                )
                .explain("A restore payload or a cut-off dump does not show the whole kernel state, so missing chains and hooks prove nothing."),
            );
            continue;
        }
        judged = true;
        judged_xt = true;
        xt_group(facts, group, &mut out);
    }
    for table in &facts.ruleset.tables {
        if plumb_kubeproxy::recover::nft::is_kube_proxy_table(table) && facts.is_full() {
            judged = true;
            nft_table(facts, table, &mut out);
        }
    }
    hash_mismatches(facts, &mut out);
    if judged {
        for id in [ID_MISSING, ID_UNREACHABLE, ID_CANARY] {
            if !out.iter().any(|f| f.id == id) {
                out.push(Finding::ok(id, ok_title(id, judged_xt)));
            }
        }
    }
    if !out.iter().any(|f| f.id == ID_HASH) && !facts.services.is_empty() {
        out.push(Finding::ok(
            ID_HASH,
            "every kube-proxy chain name matches the hash of its service",
        ));
    }
    out
}

/// The answer when nothing was found: what was judged, in kube-proxy's iptables chains
/// (`iptables`) or only in its nftables table, which has no KUBE-SVC chains and no
/// canaries (the nftables proxier keeps everything in the one table it owns).
fn ok_title(id: &str, iptables: bool) -> &'static str {
    match (id, iptables) {
        (ID_MISSING, _) => "kube-proxy's top chains and hooks are in place",
        (ID_UNREACHABLE, true) => "every KUBE-SVC/KUBE-SVL chain is referenced",
        (ID_UNREACHABLE, false) => {
            "no KUBE-SVC/KUBE-SVL chains to reach: kube-proxy in nftables mode reaches its service chains through its maps"
        }
        (_, true) => "kube-proxy and kubelet canary chains are present",
        (_, false) => {
            "no canary chains expected: kube-proxy in nftables mode keeps its rules in its own nftables table, not in iptables"
        }
    }
}

fn xt_group(facts: &CheckInput, group: (Backend, Family), out: &mut Vec<Finding>) {
    let gname = group_name(group);
    let nat = facts.xt_table(group, "nat");
    let filter = facts.xt_table(group, "filter");
    let mangle = facts.xt_table(group, "mangle");
    if let Some(nat) = nat.filter(|t| !is_flushed(t)) {
        let svc_chains: Vec<&str> = nat
            .chains
            .iter()
            .filter(|c| {
                matches!(
                    parse_chain_name(&c.name),
                    Some((ChainPrefix::Svc | ChainPrefix::Svl, _))
                )
            })
            .map(|c| &*c.name)
            .collect();
        let services = nat.chain("KUBE-SERVICES");
        // KUBE-SERVICES holds 10k rules on a big cluster: jumps come from the targets the
        // parser recorded; only rules that can name `-m set` are indexed (one buffer).
        let mut buf = XtBuf::default();
        let captures = services.map_or(0, |c| {
            c.rules
                .iter()
                .filter(|r| {
                    r.chain_references().iter().any(|x| {
                        parse_chain_name(x.chain).is_some()
                            || x.chain == "KUBE-NODEPORTS"
                            || x.chain.starts_with("KUBE-")
                    }) || (r.text.contains("set")
                        && r.xt_in(&mut buf)
                            .is_some_and(|v| v.match_named("set").is_some()))
                })
                .count()
        });
        // kube-proxy's userspace proxier (before 1.2's iptables mode, removed in 1.26)
        // captures services in KUBE-PORTALS-*: KUBE-SVC chains beside it are another
        // mode's leftovers, not a broken iptables proxier.
        let userspace = nat.chain("KUBE-PORTALS-CONTAINER").is_some()
            || nat.chain("KUBE-PORTALS-HOST").is_some();
        if !svc_chains.is_empty() && captures == 0 && !userspace {
            let (title, ev): (String, Vec<Evidence>) = match services {
                None => (
                    format!(
                        "{gname}: nat KUBE-SERVICES is missing while {} KUBE-SVC/KUBE-SVL chains exist",
                        svc_chains.len()
                    ),
                    nat.chains
                        .iter()
                        .filter(|c| svc_chains.contains(&&*c.name))
                        .take(5)
                        .map(|c| facts.chain(nat, c))
                        .collect(),
                ),
                Some(c) => (
                    format!(
                        "{gname}: nat KUBE-SERVICES has no service rules while {} KUBE-SVC/KUBE-SVL chains exist",
                        svc_chains.len()
                    ),
                    vec![facts.chain(nat, c)],
                ),
            };
            out.push(
                Finding::problem(ID_MISSING, Severity::Critical, title)
                    .with_evidence(ev)
                    .explain("Packets to a ClusterIP are only redirected to a pod because PREROUTING/OUTPUT jump to KUBE-SERVICES, which matches the ClusterIP and jumps to the service's KUBE-SVC chain. With KUBE-SERVICES gone or emptied, every ClusterIP (including the `kubernetes` service the CNI installer uses) times out while the endpoints themselves still answer.")
                    .fix("Check kube-proxy's log for `iptables-restore` failures and whether the rules come back after its next full sync (syncPeriod, 30 s by default).")
                    .fix("If they keep disappearing, find the writer: a host security agent's tamper protection or a firewall manager reload (`plumb watch`, the agent's logs).")
                    .do_not(DO_NOT_FLUSH),
            );
        }
        for (builtin, target) in [
            ("PREROUTING", "KUBE-SERVICES"),
            ("OUTPUT", "KUBE-SERVICES"),
            ("POSTROUTING", "KUBE-POSTROUTING"),
        ] {
            if nat.chain(target).is_some() && hooked(nat, builtin, target) == Some(false) {
                let c = nat.chain(builtin).expect("hooked() found it");
                out.push(hook_missing(facts, nat, &gname, builtin, target, c));
            }
        }
        if !ipvs_mode(nat) {
            let refs = facts.refs_of(nat);
            let orphans: Vec<&str> = svc_chains
                .iter()
                .copied()
                .filter(|c| !refs.is_referenced(c))
                .collect();
            if !orphans.is_empty() {
                let names: Vec<String> = orphans
                    .iter()
                    .map(|c| {
                        facts
                            .services
                            .iter()
                            .flat_map(|m| &m.services)
                            .find(|s| s.chains.contains(c))
                            .and_then(|s| s.name.clone())
                            .map_or_else(|| c.to_string(), |n| format!("{n} ({c})"))
                    })
                    .collect();
                let critical = names.iter().any(|n| n.starts_with("default/kubernetes"));
                out.push(
                    Finding::problem(
                        ID_UNREACHABLE,
                        if critical { Severity::Critical } else { Severity::High },
                        format!(
                            "{gname}: {} service chain(s) nothing jumps to: {}",
                            orphans.len(),
                            short_list(&names, 3)
                        ),
                    )
                    .with_evidence(
                        nat.chains
                            .iter()
                            .filter(|c| orphans.contains(&&*c.name))
                            .map(|c| facts.chain(nat, c)),
                    )
                    .explain("kube-proxy writes a KUBE-SERVICES (or KUBE-EXT/KUBE-NODEPORTS) rule for every service chain it creates. A service chain without one is never reached: its ClusterIP is not redirected. This is the state a tool leaves when it deletes kube-proxy's jump rules; kube-proxy's next partial sync then fails with `Chain 'KUBE-SVC-…' does not exist` until a full sync rebuilds everything.")
                    .fix("Look for `iptables-restore` failures in kube-proxy's log and for a process rewriting the nat table (security agent, firewall manager).")
                    .do_not(DO_NOT_FLUSH),
                );
            }
        }
    }
    if let Some(filter) = filter
        && !is_flushed(filter)
        && filter.chain("KUBE-FORWARD").is_some()
        && hooked(filter, "FORWARD", "KUBE-FORWARD") == Some(false)
    {
        let c = filter.chain("FORWARD").expect("hooked() found it");
        out.push(hook_missing(
            facts,
            filter,
            &gname,
            "FORWARD",
            "KUBE-FORWARD",
            c,
        ));
    }
    // Canaries and the backend hint live in mangle (kubelet and kube-proxy create them).
    let mut missing = Vec::new();
    match mangle {
        Some(m) => {
            for c in [
                "KUBE-PROXY-CANARY",
                "KUBE-KUBELET-CANARY",
                "KUBE-IPTABLES-HINT",
            ] {
                if m.chain(c).is_none() {
                    missing.push(c);
                }
            }
        }
        None if nat.is_some() && filter.is_some() => missing.extend([
            "KUBE-PROXY-CANARY",
            "KUBE-KUBELET-CANARY",
            "KUBE-IPTABLES-HINT",
        ]),
        None => {}
    }
    if !missing.is_empty() {
        canary_missing(facts, group, mangle, &missing, out);
    }
}

/// Canaries exist from Kubernetes 1.17 (KUBE-IPTABLES-HINT from 1.23): their absence is a
/// problem only when the ruleset's own features show a generation that writes them.
fn canary_missing(
    facts: &CheckInput,
    group: (Backend, Family),
    mangle: Option<&Table>,
    missing: &[&str],
    out: &mut Vec<Finding>,
) {
    let gname = group_name(group);
    let generation = facts.inventory.kube_proxy.as_ref();
    let expected: Vec<&str> = missing
        .iter()
        .copied()
        .filter(|c| generation.is_some_and(|g| g.writes_canary(c)))
        .collect();
    let described = generation.map_or_else(|| "kube-proxy".to_string(), |g| g.describe());
    if expected.is_empty() {
        if generation.is_some_and(|g| g.predates(17)) {
            out.push(Finding::ok(
                ID_CANARY,
                format!("no canary chains, as expected: {described}; canaries exist from 1.17"),
            ));
        } else if generation.is_some_and(|g| {
            g.mode == crate::facts::inventory::ProxyMode::Ipvs
                && g.writes_since(17)
                && missing.contains(&"KUBE-PROXY-CANARY")
        }) {
            // The IPVS proxier never creates KUBE-PROXY-CANARY (the iptables proxier
            // watches it); kubelet's canary is expected there, and present (else
            // `expected` would hold it).
            out.push(Finding::ok(
                ID_CANARY,
                format!("{} absent, as expected: kube-proxy in IPVS mode does not write KUBE-PROXY-CANARY; {described}", missing.join(", ")),
            ));
        } else if missing == ["KUBE-IPTABLES-HINT"] {
            out.push(Finding::ok(
                ID_CANARY,
                format!("canaries present; KUBE-IPTABLES-HINT exists from 1.23 and nothing shows a later version: {described}"),
            ));
        } else {
            out.push(
                Finding::unknown(
                    ID_CANARY,
                    Severity::Info,
                    format!(
                        "{gname}: mangle {} absent, but nothing in this ruleset shows a kube-proxy that writes them",
                        missing.join(", ")
                    ),
                )
                .with_evidence([facts.note(described)])
                .explain("kube-proxy and kubelet write the canary chains from Kubernetes 1.17 (KUBE-IPTABLES-HINT from 1.23). This ruleset has none of the features that prove such a version (the hint, KUBE-EXT-* chains, KUBE-PROXY-FIREWALL, the ct_state_invalid_dropped_pkts counter, --random-fully masquerade), so the canaries may never have existed here — or the tables were rewritten together with them."),
            );
        }
        return;
    }
    let proxy_canary = expected.contains(&"KUBE-PROXY-CANARY");
    let ev = match mangle {
        Some(_) => facts.note(format!(
            "mangle table ({}) declares no {}",
            group_name(group),
            expected.join(", ")
        )),
        None => facts.note(format!("no mangle table in {}", group_name(group))),
    };
    out.push(
        Finding::problem(
            ID_CANARY,
            if proxy_canary { Severity::Medium } else { Severity::Low },
            format!("{gname}: mangle {} missing", expected.join(", ")),
        )
        .with_evidence([ev, facts.note(described)])
        .explain("kube-proxy creates KUBE-PROXY-CANARY in mangle and checks it every sync period; kubelet keeps KUBE-KUBELET-CANARY and marks its backend with KUBE-IPTABLES-HINT. The ruleset's own features show a kube-proxy that writes them. When they vanish, something flushed or replaced the tables (a firewall reload, an agent restoring its own snapshot). kube-proxy resyncs when it notices, so a missing canary on a node where the services work points at a writer that fights kube-proxy — or at an agent whose snapshot happens to keep the canary while dropping the rules.")
        .fix("Find who rewrote the mangle table (firewalld reload with FlushAllOnReload, `ufw reload`, a security agent) and exempt Kubernetes' chains.")
        .do_not(DO_NOT_FLUSH),
    );
}

fn hook_missing(
    facts: &CheckInput,
    table: &Table,
    gname: &str,
    builtin: &str,
    target: &str,
    chain: &plumb_ruleset::Chain,
) -> Finding {
    let sev = if target == "KUBE-FORWARD" {
        Severity::High
    } else {
        Severity::Critical
    };
    Finding::problem(
        ID_MISSING,
        sev,
        format!(
            "{gname}: {} {builtin} does not jump to {target}",
            table.name
        ),
    )
    .with_evidence([facts.chain(table, chain)])
    .explain(format!(
        "kube-proxy inserts `-A {builtin} -j {target}` at the top of {builtin}; without it {target} exists but no packet ever reaches it ({}).",
        match target {
            "KUBE-SERVICES" => "ClusterIPs and NodePorts are not translated",
            "KUBE-POSTROUTING" => "service traffic that needs SNAT is not masqueraded, so replies go astray",
            _ => "forwarded service traffic is not accepted by kube-proxy's rules and falls to FORWARD's other rules and policy",
        }
    ))
    .fix("kube-proxy re-adds its hooks on its next sync; if they stay missing, something removes them (firewall manager reload, security agent).")
    .do_not(DO_NOT_FLUSH)
}

fn nft_table(facts: &CheckInput, table: &Table, out: &mut Vec<Finding>) {
    let service_chains = table
        .chains
        .iter()
        .filter(|c| c.name.starts_with("service-"))
        .count();
    let services = table.chain("services");
    let has_rules = services.is_some_and(|c| !c.rules.is_empty());
    if service_chains > 0 && !has_rules {
        out.push(
            Finding::problem(
                ID_MISSING,
                Severity::Critical,
                format!(
                    "table {} kube-proxy: chain `services` is missing or empty while {service_chains} service chains exist",
                    table.family
                ),
            )
            .with_evidence(services.map(|c| facts.chain(table, c)))
            .explain("In nftables mode, `services` looks packets up in the service-ips and service-nodeports maps; without it no ClusterIP or NodePort is translated.")
            .do_not(DO_NOT_FLUSH),
        );
    }
    for base in ["nat-prerouting", "nat-output"] {
        if service_chains > 0 && table.chain(base).is_none() {
            out.push(
                Finding::problem(
                    ID_MISSING,
                    Severity::Critical,
                    format!("table {} kube-proxy: base chain {base} is missing", table.family),
                )
                .with_evidence([facts.note(format!("table {} kube-proxy has no chain {base}", table.family))])
                .explain("kube-proxy hooks `services` into prerouting and output through these base chains; without them service traffic is never translated.")
                .do_not(DO_NOT_FLUSH),
            );
        }
    }
}

fn hash_mismatches(facts: &CheckInput, out: &mut Vec<Finding>) {
    for map in &facts.services {
        if map.name_mismatches.is_empty() {
            continue;
        }
        let source = facts.source_of(map.backend, map.family, map.table_name());
        let names: Vec<String> = map
            .name_mismatches
            .iter()
            .map(|m| format!("{} (expected {})", m.chain, m.expected))
            .collect();
        out.push(
            Finding::problem(
                ID_HASH,
                Severity::High,
                format!(
                    "{} kube-proxy chain name(s) do not match their service: {}",
                    names.len(),
                    short_list(&names, 2)
                ),
            )
            .with_evidence(map.name_mismatches.iter().map(|m| Evidence {
                source: source.clone(),
                line: Some(m.evidence.line()).filter(|&l| l > 0),
                text: m.evidence.text().to_string(),
            }))
            .explain("kube-proxy names each chain after a hash of the service port (and endpoint) it serves. A chain whose name does not match the service in its own comments was not written by this kube-proxy for that service: hand edits, a snapshot restored from another node or cluster, or a tool that renames chains. kube-proxy will not clean it up and may fail to update it.")
            .fix("Compare with a fresh dump after kube-proxy's next full sync; find the writer of the mismatching rules."),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::Origin;
    use plumb_findings::Status;
    use plumb_kubeproxy::{GeneratorConfig, KubeProxyRules, ProxierOptions, generate};
    use plumb_ruleset::format::{ParseOptions, parse_bytes};

    fn dump() -> String {
        crate::checks::kube_proxy_dump(8)
    }

    fn run(text: &str) -> Vec<Finding> {
        crate::checks::run_on_dump(check, text)
    }

    fn problems<'a>(f: &'a [Finding], id: &str) -> Vec<&'a Finding> {
        f.iter().filter(|x| x.id == id && x.is_problem()).collect()
    }

    /// kube-proxy's dump in `backend`, without its built-in chains' rules when `unhooked`.
    fn in_backend(backend: Backend, unhooked: bool) -> plumb_ruleset::Ruleset {
        use plumb_ruleset::iptables::save::{IptablesInput, parse};
        let text: String = dump()
            .lines()
            .filter(|l| {
                !unhooked
                    || ![
                        "-A PREROUTING ",
                        "-A OUTPUT ",
                        "-A POSTROUTING ",
                        "-A INPUT ",
                        "-A FORWARD ",
                    ]
                    .iter()
                    .any(|p| l.starts_with(p))
            })
            .map(|l| format!("{l}\n"))
            .collect();
        parse(
            &crate::checks::full_dump(&text),
            &IptablesInput {
                backend: Some(backend),
                ..Default::default()
            },
        )
    }

    /// A stale copy of kube-proxy's chains in iptables-legacy without hook rules, beside
    /// the live rules in iptables-nft (the backend-mix state): nothing about the stale
    /// copy is `kube-proxy-rules-missing` (it was CRITICAL "nat PREROUTING does not jump
    /// to KUBE-SERVICES" about iptables-legacy); the same unhooked rules alone still are.
    #[test]
    fn the_stale_backends_unhooked_chains_are_not_rules_missing() {
        let mut r = in_backend(Backend::IptablesNft, false);
        r.merge(in_backend(Backend::IptablesLegacy, true));
        let f = check(&CheckInput::new(&r, Origin::Live { netns: None }, false));
        for id in [ID_MISSING, ID_UNREACHABLE, ID_CANARY] {
            assert!(problems(&f, id).is_empty(), "{id}: {f:#?}");
            assert!(
                f.iter().any(|x| x.id == id && x.status == Status::Ok),
                "{id}"
            );
        }
        let alone = in_backend(Backend::IptablesLegacy, true);
        let f = check(&CheckInput::new(
            &alone,
            Origin::Live { netns: None },
            false,
        ));
        assert!(
            problems(&f, ID_MISSING)
                .iter()
                .any(|x| x.severity == Severity::Critical
                    && x.title
                        .contains("PREROUTING does not jump to KUBE-SERVICES")),
            "{f:#?}"
        );
    }

    #[test]
    fn healthy_generated_node_is_ok() {
        let f = run(&dump());
        assert!(f.iter().all(|x| x.status == Status::Ok), "{f:#?}");
    }

    #[test]
    fn emptied_kube_services_is_critical() {
        // What an agent restoring a pre-Kubernetes snapshot of the nat table leaves.
        let text: String = dump()
            .lines()
            .filter(|l| !l.starts_with("-A KUBE-SERVICES"))
            .map(|l| format!("{l}\n"))
            .collect();
        let f = run(&text);
        let p = problems(&f, ID_MISSING);
        assert_eq!(p.len(), 1, "{f:#?}");
        assert_eq!(p[0].severity, Severity::Critical);
        assert!(p[0].title.contains("KUBE-SERVICES has no service rules"));
        // Every service chain is now unreachable too.
        assert!(!problems(&f, ID_UNREACHABLE).is_empty());
    }

    #[test]
    fn deleted_jump_leaves_unreachable_service_chain() {
        let text: String = dump()
            .lines()
            .filter(|l| {
                !(l.starts_with("-A KUBE-SERVICES") && l.contains("KUBE-SVC-NPX46M4PTMTKRN6Y"))
            })
            .map(|l| format!("{l}\n"))
            .collect();
        let f = run(&text);
        let p = problems(&f, ID_UNREACHABLE);
        assert_eq!(p.len(), 1, "{f:#?}");
        assert_eq!(p[0].severity, Severity::Critical);
        assert!(
            p[0].title
                .contains("default/kubernetes:https (KUBE-SVC-NPX46M4PTMTKRN6Y)")
        );
        assert!(
            p[0].evidence[0]
                .text
                .starts_with(":KUBE-SVC-NPX46M4PTMTKRN6Y")
        );
    }

    #[test]
    fn missing_hook_and_canary() {
        let text: String = dump()
            .lines()
            .filter(|l| !l.starts_with("-A PREROUTING") && !l.starts_with(":KUBE-PROXY-CANARY"))
            .map(|l| format!("{l}\n"))
            .collect();
        let f = run(&text);
        let p = problems(&f, ID_MISSING);
        assert!(
            p.iter().any(|x| x
                .title
                .contains("PREROUTING does not jump to KUBE-SERVICES")),
            "{f:#?}"
        );
        let c = problems(&f, ID_CANARY);
        assert_eq!(c.len(), 1);
        assert!(c[0].title.contains("KUBE-PROXY-CANARY"));
    }

    #[test]
    fn canaries_are_asked_only_of_generations_that_write_them() {
        // kube-proxy 1.1: no KUBE-MARK-MASQ chain, the mark set directly.
        let old = "*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-6N4SJQIF3IX3FORG - [0:0]\n-A PREROUTING -j KUBE-SERVICES\n-A OUTPUT -j KUBE-SERVICES\n-A POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -m mark --mark 0x4d415351 -j MASQUERADE\n-A KUBE-SERVICES -d 11.1.2.1/32 -p tcp -m tcp --dport 443 -j KUBE-SVC-6N4SJQIF3IX3FORG\n-A KUBE-SVC-6N4SJQIF3IX3FORG -j MARK --set-xmark 0x4d415351/0xffffffff\nCOMMIT\n*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n";
        let f = run(old);
        let c = f.iter().find(|x| x.id == ID_CANARY).expect("answered");
        assert_eq!(c.status, Status::Ok, "{f:#?}");
        assert!(c.title.contains("0x4d415351"), "{}", c.title);
        // Nothing shows the version: not a claim either way.
        let unknown = old.replace(
            "-A POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -m mark --mark 0x4d415351 -j MASQUERADE\n",
            "",
        ).replace("-A KUBE-SVC-6N4SJQIF3IX3FORG -j MARK --set-xmark 0x4d415351/0xffffffff\n", "");
        let f = run(&unknown);
        let c = f.iter().find(|x| x.id == ID_CANARY).expect("answered");
        assert_eq!(c.status, Status::Unknown, "{f:#?}");
        // KUBE-PROXY-FIREWALL proves 1.25: the canaries must be there.
        let modern = unknown.replace(
            ":OUTPUT ACCEPT [0:0]\nCOMMIT\n",
            ":OUTPUT ACCEPT [0:0]\n:KUBE-PROXY-FIREWALL - [0:0]\n-A INPUT -j KUBE-PROXY-FIREWALL\nCOMMIT\n",
        );
        let f = run(&modern);
        let c = problems(&f, ID_CANARY);
        assert_eq!(c.len(), 1, "{f:#?}");
        assert!(
            c[0].title
                .contains("KUBE-PROXY-CANARY, KUBE-KUBELET-CANARY, KUBE-IPTABLES-HINT")
        );
    }

    #[test]
    fn flushed_filter_is_not_reported_hook_by_hook() {
        let mut text = dump();
        let start = text.find("*filter").unwrap();
        let end = start + text[start..].find("COMMIT").unwrap();
        let filter: String = text[start..end]
            .lines()
            .filter(|l| !l.starts_with("-A"))
            .map(|l| format!("{l}\n"))
            .collect();
        text.replace_range(start..end, &filter);
        let f = run(&text);
        assert!(problems(&f, ID_MISSING).is_empty(), "{f:#?}");
    }

    #[test]
    fn partial_payload_is_unknown_not_broken() {
        let c = generate(&GeneratorConfig {
            services: 8,
            ..Default::default()
        })
        .unwrap();
        let payload = KubeProxyRules::new(&c, &ProxierOptions::default()).to_restore_payload();
        let rs = parse_bytes(payload.as_bytes(), &ParseOptions::default())
            .unwrap()
            .ruleset;
        let f = check(&CheckInput::new(&rs, Origin::File("payload".into()), false));
        assert!(f.iter().all(|x| !x.is_problem()), "{f:#?}");
        assert!(f.iter().any(|x| x.status == Status::Unknown));
    }

    #[test]
    fn cilium_node_without_kube_proxy_is_not_judged() {
        let f = run(
            "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:CILIUM_FORWARD - [0:0]\n:KUBE-FIREWALL - [0:0]\n-A FORWARD -j CILIUM_FORWARD\n-A INPUT -j KUBE-FIREWALL\nCOMMIT\n",
        );
        assert!(f.is_empty(), "{f:#?}");
    }

    #[test]
    fn the_userspace_proxier_is_not_a_broken_iptables_proxier() {
        let text = "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n:KUBE-PORTALS-CONTAINER - [0:0]\n:KUBE-PORTALS-HOST - [0:0]\n:KUBE-SVC-2222222222222222 - [0:0]\n-A PREROUTING -m comment --comment \"handle ClusterIPs; NOTE: this must be before the NodePort rules\" -j KUBE-PORTALS-CONTAINER\n-A OUTPUT -j KUBE-PORTALS-HOST\nCOMMIT\n";
        let f = run(text);
        assert!(
            !f.iter().any(|f| f.id == ID_MISSING && f.is_problem()),
            "{f:#?}"
        );
    }
}
