//! Predicates on tables and chain names that the facts and the checks both use: a
//! table wiped by a flush, kube-proxy's IPVS mode, whose a chain is, whether a family
//! has a host filter and Kubernetes' rules.

use crate::facts::CheckInput;
use plumb_ruleset::iptables::XtBuf;
use plumb_ruleset::owner::chain_name_owner;
use plumb_ruleset::{Backend, Family, Hook, Table, owner};

/// User chains a table must declare before "all empty" means flushed.
const MIN_USER_CHAINS: usize = 3;

/// True when every chain of `table` is empty and it declares at least a few user chains
/// that hold rules on a healthy node (canaries, hints and other chains the catalogue
/// calls unreferenced by design are empty anyway: a mangle table of canaries is not
/// flushed).
pub fn is_flushed(table: &Table) -> bool {
    // The first rule ends it: a live table answers at once.
    table.chains.iter().all(|c| c.rules.is_empty())
        && table
            .chains
            .iter()
            .filter(|c| !c.is_builtin() && owner::unreferenced_by_design(&c.name).is_none())
            .count()
            >= MIN_USER_CHAINS
}

/// True when nat `KUBE-SERVICES` selects services through ipsets (IPVS mode).
pub fn ipvs_mode(nat: &Table) -> bool {
    let mut buf = XtBuf::default();
    nat.chain("KUBE-SERVICES").is_some_and(|c| {
        // `-m set` needs the word "set": rules without it are not indexed.
        c.rules.iter().filter(|r| r.text.contains("set")).any(|r| {
            r.xt_in(&mut buf).is_some_and(|v| {
                v.match_named("set").is_some_and(|m| {
                    m.option("--match-set")
                        .and_then(|o| o.arg(0))
                        .is_some_and(|s| s.starts_with("KUBE-"))
                })
            })
        })
    })
}

/// True for chains of a CNI (Calico, Flannel, Cilium).
pub(crate) fn is_cni_chain(chain: &str) -> bool {
    !chain.starts_with("KUBE-")
        && matches!(
            chain_name_owner(chain),
            Some("calico" | "flannel" | "cilium")
        )
}

/// True for kube-proxy's own chains (not kubelet's KUBE-FIREWALL and canaries).
pub(crate) fn is_kube_proxy_chain(chain: &str) -> bool {
    chain_name_owner(chain) == Some("kube-proxy")
}

/// The tables of `family` a packet of that family meets: its iptables tables and
/// nft tables of the family or `inet`.
pub(crate) fn tables_of<'a>(
    facts: &CheckInput<'a>,
    family: Family,
) -> impl Iterator<Item = &'a Table> {
    facts.ruleset.tables.iter().filter(move |t| {
        t.family == family || (t.backend == Backend::Nftables && t.family == Family::Inet)
    })
}

/// The input has something that filters INPUT or FORWARD for `family`: the iptables
/// filter table, or an nft base chain of type filter on those hooks (nftables.conf's
/// `table inet filter`, firewalld's nft backend, kube-proxy's nftables mode).
pub(crate) fn filters(facts: &CheckInput, family: Family) -> bool {
    tables_of(facts, family).any(|t| {
        if t.backend != Backend::Nftables {
            return &*t.name == "filter";
        }
        t.chains.iter().any(|c| {
            c.base.as_ref().is_some_and(|b| {
                matches!(b.hook, Hook::Input | Hook::Forward)
                    && b.chain_type.as_deref().is_none_or(|t| t == "filter")
            })
        })
    })
}

/// Kubernetes components or a CNI wrote rules of this family.
pub(crate) fn kubernetes_present(facts: &CheckInput, family: Family) -> bool {
    tables_of(facts, family).any(|t| {
        owned_table(t)
            || t.chains.iter().any(|c| {
                is_kube_proxy_chain(&c.name)
                    || is_cni_chain(&c.name)
                    || c.name.starts_with("KUBE-")
                    || policy_owned(&c.name)
            })
    })
}

/// nft tables of Kubernetes components and CNIs (kube-proxy's nftables mode, Calico's
/// and Cilium's nft tables): every rule in them is theirs.
pub(crate) fn owned_table(t: &Table) -> bool {
    t.backend == Backend::Nftables
        && (&*t.name == "kube-proxy"
            || ["cali", "cilium", "antrea", "kube-router"]
                .iter()
                .any(|p| t.name.starts_with(p)))
}

/// Chains of Kubernetes components and CNIs, whose DROP/REJECT rules are intended
/// (network policy, Services without endpoints, invalid packets).
pub(crate) fn policy_owned(chain: &str) -> bool {
    [
        "KUBE-",
        "cali-",
        "felix-",
        "CILIUM",
        "cilium",
        "WEAVE",
        "ANTREA",
        "antrea",
        "OVN-KUBE",
        "FLANNEL",
        "AWS-",
        "CNI-",
        "KUBE-ROUTER",
        "OPENSHIFT-",
    ]
    .iter()
    .any(|p| chain.starts_with(p))
}
