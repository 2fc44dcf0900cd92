//! The integrity checks, one module each. [`ALL`] lists them with their ids.

pub mod backends;
pub mod cni;
pub mod dangling;
pub mod duplicates;
pub mod flushed;
pub mod garbled_nat;
pub mod kube_proxy;
pub mod nft_in_iptables;
pub mod no_endpoints;
pub mod shadow;
pub mod stale;

use crate::facts::Facts;
use plumb_findings::Finding;
use plumb_ruleset::Rule;
use plumb_ruleset::owner::chain_name_owner;

/// A check: its finding ids and the function that runs it.
pub struct Check {
    /// Ids of the findings it can emit.
    pub ids: &'static [&'static str],
    pub summary: &'static str,
    pub check: fn(&Facts) -> Vec<Finding>,
}

/// Every check `plumb check` runs, in a fixed order.
pub const ALL: &[Check] = &[
    Check {
        ids: &[dangling::ID],
        summary: "rules that jump or go to chains that do not exist",
        check: dangling::check,
    },
    Check {
        ids: &[
            kube_proxy::ID_MISSING,
            kube_proxy::ID_UNREACHABLE,
            kube_proxy::ID_CANARY,
            kube_proxy::ID_HASH,
        ],
        summary: "kube-proxy present but its top chains, hooks, canaries or chain names are broken",
        check: kube_proxy::check,
    },
    Check {
        ids: &[stale::ID],
        summary: "chains declared but never referenced",
        check: stale::check,
    },
    Check {
        ids: &[backends::ID, backends::ID_MODE],
        summary: "iptables-legacy and iptables-nft (or nftables mode) both hold Kubernetes rules",
        check: backends::check,
    },
    Check {
        ids: &[shadow::ID_FORWARD, shadow::ID_INPUT, shadow::ID_DOCKER_UFW],
        summary: "host firewall rules or policies that stop traffic a node needs (traced), and published Docker ports that bypass UFW",
        check: shadow::check,
    },
    Check {
        ids: &[garbled_nat::ID],
        summary: "DNAT/SNAT targets without a usable address (iptables version skew)",
        check: garbled_nat::check,
    },
    Check {
        ids: &[no_endpoints::ID],
        summary: "services kube-proxy rejects because they have no endpoints",
        check: no_endpoints::check,
    },
    Check {
        ids: &[duplicates::ID],
        summary: "identical rules repeated in one chain",
        check: duplicates::check,
    },
    Check {
        ids: &[nft_in_iptables::ID],
        summary: "native nft rules inside tables iptables-nft manages",
        check: nft_in_iptables::check,
    },
    Check {
        ids: &[cni::ID, cni::ID_MULTIPLE],
        summary: "CNI chains missing although the CNI is evidently present, or two pod networks active at once",
        check: cni::check,
    },
    Check {
        ids: &[flushed::ID],
        summary: "tables whose chains are all declared and all empty (flushed)",
        check: flushed::check,
    },
];

/// Owner name of a chain by its name (`kube-proxy`, `flannel`, `ufw`, ...), if catalogued.
pub(crate) fn owner_name(chain: &str) -> Option<&'static str> {
    chain_name_owner(chain)
}

/// True for chains of a CNI (Calico, Flannel, Cilium).
pub(crate) fn is_cni_chain(chain: &str) -> bool {
    !chain.starts_with("KUBE-")
        && matches!(owner_name(chain), Some("calico" | "flannel" | "cilium"))
}

/// True for kube-proxy's own chains (not kubelet's KUBE-FIREWALL and canaries).
pub(crate) fn is_kube_proxy_chain(chain: &str) -> bool {
    owner_name(chain) == Some("kube-proxy")
}

/// Rule text without an `iptables-save -c` counter prefix (`[12:345] `) or nft handle.
pub(crate) fn rule_body_text(rule: &Rule) -> &str {
    let t = rule.text.trim();
    let t = match t.strip_prefix('[').and_then(|r| r.split_once("] ")) {
        Some((_, rest)) => rest,
        None => t,
    };
    match t.rfind(" # handle ") {
        Some(i) => &t[..i],
        None => t,
    }
}

/// Short list of names for titles: `a, b, c and 5 more`.
pub(crate) fn short_list<S: AsRef<str>>(names: &[S], max: usize) -> String {
    let shown: Vec<&str> = names.iter().take(max).map(|s| s.as_ref()).collect();
    let mut s = shown.join(", ");
    if names.len() > max {
        s.push_str(&format!(" and {} more", names.len() - max));
    }
    s
}

/// Test helper: runs one check over `text` read as a complete dump (see [`full_dump`]).
#[cfg(test)]
pub(crate) fn run_on_dump(check: fn(&Facts) -> Vec<Finding>, text: &str) -> Vec<Finding> {
    use plumb_ruleset::format::{ParseOptions, parse_bytes};
    let text = full_dump(text);
    let rs = parse_bytes(text.as_bytes(), &ParseOptions::default())
        .unwrap()
        .ruleset;
    check(&Facts::new(
        &rs,
        crate::facts::Origin::File("dump".into()),
        false,
    ))
}

/// kube-proxy's exact iptables-save output for a generated cluster of `services` ports.
#[cfg(test)]
pub(crate) fn kube_proxy_dump(services: usize) -> String {
    use plumb_kubeproxy::{
        GeneratorConfig, IptablesSaveOptions, KubeProxyRules, ProxierOptions, generate,
    };
    let c = generate(&GeneratorConfig {
        services,
        ..Default::default()
    })
    .unwrap();
    KubeProxyRules::new(&c, &ProxierOptions::default())
        .to_iptables_save(&IptablesSaveOptions::default())
}

/// Test helper: declares every built-in chain a hand-written dump leaves out, so the
/// parser reads it as a complete `iptables-save` dump (a dump without them is a restore
/// payload, i.e. partial).
#[cfg(test)]
pub(crate) fn full_dump(text: &str) -> String {
    let mut out = String::new();
    let mut table: Option<&str> = None;
    for line in text.lines() {
        if let Some(t) = line.strip_prefix('*') {
            table = Some(t);
            out.push_str(line);
            out.push('\n');
            for b in plumb_ruleset::iptables::save::builtin_chains(t) {
                if !text.contains(&format!("*{t}\n:{b} ")) && !declared_in(text, t, b) {
                    out.push_str(&format!(":{b} ACCEPT [0:0]\n"));
                }
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    let _ = table;
    out
}

#[cfg(test)]
fn declared_in(text: &str, table: &str, chain: &str) -> bool {
    let Some(start) = text.find(&format!("*{table}\n")) else {
        return false;
    };
    let body = &text[start..];
    let end = body.find("COMMIT").unwrap_or(body.len());
    body[..end]
        .lines()
        .any(|l| l.starts_with(&format!(":{chain} ")))
}
