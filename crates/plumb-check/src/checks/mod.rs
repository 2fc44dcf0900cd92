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

use crate::facts::CheckInput;
use plumb_findings::Finding;
use plumb_ruleset::owner::chain_name_owner;

/// A check: its finding ids and the function that runs it.
pub struct Check {
    /// The findings it can emit: (id, what a problem with that id says).
    pub ids: &'static [(&'static str, &'static str)],
    /// What the check looks for, as a whole.
    pub summary: &'static str,
    /// Runs the check over one ruleset's facts: one finding per id it answers for (`ok`,
    /// `unknown` or a problem), or several problems of one id when several places are wrong.
    pub check: fn(&CheckInput) -> Vec<Finding>,
    /// It reads [`CheckInput::services`] (kube-proxy's service maps): [`crate::run`]
    /// runs it before it releases them. A check without this flag must not read them.
    pub reads_service_maps: bool,
}

/// Every check `plumb check` runs, in a fixed order.
pub const ALL: &[Check] = &[
    Check {
        ids: &[(
            dangling::ID,
            "a rule jumps or goes to a chain, or a verdict map names a chain, that does not exist",
        )],
        summary: "rules that jump or go to chains that do not exist",
        check: dangling::check,
        reads_service_maps: false,
    },
    Check {
        ids: &[
            (
                kube_proxy::ID_MISSING,
                "kube-proxy's top chains or their hooks from the built-in chains are missing",
            ),
            (
                kube_proxy::ID_UNREACHABLE,
                "service chains exist that nothing jumps to: those services get no DNAT",
            ),
            (
                kube_proxy::ID_CANARY,
                "the canary chains the kube-proxy generation writes are gone: something flushed or replaced the tables",
            ),
            (
                kube_proxy::ID_HASH,
                "a kube-proxy chain name is not the hash of the service its comment names (edited or foreign rules)",
            ),
        ],
        summary: "kube-proxy present but its top chains, hooks, canaries or chain names are broken",
        check: kube_proxy::check,
        reads_service_maps: true,
    },
    Check {
        ids: &[(
            stale::ID,
            "chains nothing references (by-design ones excepted), or empty portmap DNAT chains",
        )],
        summary: "chains declared but never referenced",
        check: stale::check,
        reads_service_maps: false,
    },
    Check {
        ids: &[
            (
                backends::ID,
                "iptables-legacy and iptables-nft both hold Kubernetes rules: only one is in effect",
            ),
            (
                backends::ID_MODE,
                "kube-proxy rules of two modes (iptables and nftables) exist at once",
            ),
        ],
        summary: "iptables-legacy and iptables-nft (or nftables mode) both hold Kubernetes rules",
        check: backends::check,
        reads_service_maps: false,
    },
    Check {
        ids: &[
            (
                shadow::ID_FORWARD,
                "a host-firewall rule or policy in FORWARD stops pod traffic the node must forward",
            ),
            (
                shadow::ID_INPUT,
                "a host-firewall rule or policy in INPUT stops traffic the node must accept (kubelet, API, tunnels)",
            ),
            (
                shadow::ID_DOCKER_UFW,
                "Docker's FORWARD chains come before UFW's: published container ports bypass UFW",
            ),
        ],
        summary: "host firewall rules or policies that stop traffic a node needs (traced), and published Docker ports that bypass UFW",
        check: shadow::check,
        reads_service_maps: false,
    },
    Check {
        ids: &[(
            garbled_nat::ID,
            "a DNAT/SNAT target without a usable address (iptables version skew)",
        )],
        summary: "DNAT/SNAT targets without a usable address (iptables version skew)",
        check: garbled_nat::check,
        reads_service_maps: false,
    },
    Check {
        ids: &[(
            no_endpoints::ID,
            "kube-proxy rejects a service because it has no ready endpoints",
        )],
        summary: "services kube-proxy rejects because they have no endpoints",
        check: no_endpoints::check,
        reads_service_maps: true,
    },
    Check {
        ids: &[(
            duplicates::ID,
            "a rule repeated in one chain whose later copy can never match (an appending writer)",
        )],
        summary: "identical rules repeated in one chain",
        check: duplicates::check,
        reads_service_maps: false,
    },
    Check {
        ids: &[(
            nft_in_iptables::ID,
            "a native nft rule inside a table iptables-nft manages: lost on the owner's next restore",
        )],
        summary: "native nft rules inside tables iptables-nft manages",
        check: nft_in_iptables::check,
        reads_service_maps: false,
    },
    Check {
        ids: &[
            (
                cni::ID,
                "kube-proxy programs services but no CNI left any trace in netfilter",
            ),
            (cni::ID_MULTIPLE, "two pod-network CNIs are hooked at once"),
        ],
        summary: "CNI chains missing although the CNI is evidently present, or two pod networks active at once",
        check: cni::check,
        reads_service_maps: false,
    },
    Check {
        ids: &[(
            flushed::ID,
            "a table was flushed: its chains are declared and all empty",
        )],
        summary: "tables whose chains are all declared and all empty (flushed)",
        check: flushed::check,
        reads_service_maps: false,
    },
];

/// Owner name of a chain by its name (`kube-proxy`, `flannel`, `ufw`, ...), if catalogued.
pub(crate) fn owner_name(chain: &str) -> Option<&'static str> {
    chain_name_owner(chain)
}

pub(crate) use crate::facts::shapes::is_kube_proxy_chain;

/// A rule's text (as [`plumb_ruleset::RuleText::read`] gives it) without an
/// `iptables-save -c` counter prefix (`[12:345] `) or nft handle.
pub(crate) fn rule_body_text(text: &str) -> &str {
    let t = text.trim();
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
pub(crate) fn run_on_dump(check: fn(&CheckInput) -> Vec<Finding>, text: &str) -> Vec<Finding> {
    use plumb_ruleset::format::{ParseOptions, parse_bytes};
    let text = full_dump(text);
    let rs = parse_bytes(text.as_bytes(), &ParseOptions::default())
        .unwrap()
        .ruleset;
    check(&CheckInput::new(
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
