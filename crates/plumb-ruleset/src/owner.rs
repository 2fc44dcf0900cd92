//! Who owns each table, chain and rule: kube-proxy, kubelet, a CNI, a host firewall.
//!
//! The catalogue lives in `data/owners.json` (names, prefixes, comment tags, nft
//! table names) so a new writer is a data change. Every answer carries its
//! evidence ("chain name prefix KUBE-", "comment tag cali:"), because a wrong
//! owner would make plumb blame the wrong process.
//!
//! Rules: a rule's comment tag wins; else a rule that jumps to an owned chain from
//! a built-in chain is that owner's hook; else the rule belongs to its chain's owner.
//! Built-in chains (INPUT, FORWARD, ...) belong to no one: their owner is `builtin`.

use crate::model::xt::XtBuf;
use crate::model::{Backend, Chain, Rule, Ruleset, Table};
use serde::{Deserialize, Serialize};
use std::sync::OnceLock;

/// A writer of netfilter objects.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Owner(pub String);

impl Owner {
    /// The owner's name: a catalogue entry's `owner` (`kube-proxy`, `flannel`), `builtin` or
    /// `unknown`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
    /// The owner of what no catalogue entry recognises.
    pub fn unknown() -> Owner {
        Owner("unknown".into())
    }
    /// The owner of the built-in chains (INPUT, FORWARD, ...): the kernel's, no writer's.
    pub fn builtin() -> Owner {
        Owner("builtin".into())
    }
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// An owner and why plumb believes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Attribution {
    /// Who wrote the object (or [`Owner::unknown`], [`Owner::builtin`]).
    pub owner: Owner,
    /// Why plumb believes it, quotable in output: "chain name prefix KUBE-", "comment tag cali:".
    pub evidence: String,
}

#[derive(Debug, Deserialize)]
struct Catalogue {
    owners: Vec<Entry>,
}

/// One writer in the catalogue (`data/owners.json`): how its objects are recognised,
/// and, for CNIs, what it is and which chains it writes together.
#[derive(Debug, Deserialize)]
#[non_exhaustive]
pub struct Entry {
    /// Owner name (`flannel`, `kube-proxy`, `ufw`).
    pub owner: String,
    /// Exact chain names.
    #[serde(default)]
    pub chain_names: Vec<String>,
    /// Chain name prefixes.
    #[serde(default)]
    pub chain_prefixes: Vec<String>,
    /// Comment prefixes (`cali:`).
    #[serde(default)]
    pub comment_prefixes: Vec<String>,
    /// Comment substrings (`flanneld `).
    #[serde(default)]
    pub comment_contains: Vec<String>,
    /// Native nft table names.
    #[serde(default)]
    pub nft_tables: Vec<String>,
    /// Interfaces in `-i`/`-o` (a trailing `+` is a prefix, as in iptables).
    #[serde(default)]
    pub interfaces: Vec<String>,
    /// ipset name prefixes (`-m set --match-set NAME`).
    #[serde(default)]
    pub ipsets: Vec<String>,
    /// Rule shapes only this writer writes.
    #[serde(default)]
    pub rules: Vec<RuleShape>,
    /// Set for CNIs and CNI plugins.
    #[serde(default)]
    pub cni: Option<CniInfo>,
    /// Chains written together, each hooked from a built-in chain.
    #[serde(default)]
    pub expects: Vec<ExpectedChain>,
    /// Chains nothing jumps to on a healthy node.
    #[serde(default)]
    pub unreferenced_by_design: Vec<ChainRule>,
    /// Chains that are litter when they are empty although something jumps to them.
    #[serde(default)]
    pub empty_is_stale: Vec<ChainRule>,
}

/// What a CNI is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CniRole {
    /// Gives pods their addresses and routes (Flannel, Weave Net, AWS VPC CNI).
    Network,
    /// A pod network, unless it runs beside a network CNI it is documented to combine
    /// with; then policy only (Calico in Canal, Cilium in chaining mode).
    NetworkOrPolicy,
    /// Network policy only (kube-router's policy controller in k3s).
    Policy,
    /// A plugin the pod network chains (bridge, portmap).
    Plugin,
}

/// The CNI part of a catalogue entry.
#[derive(Debug, Deserialize)]
#[non_exhaustive]
pub struct CniInfo {
    /// Display name (`Weave Net`).
    pub name: String,
    /// Whether it is the pod network, policy only, or a plugin.
    pub role: CniRole,
    /// Owners this CNI is documented to run beside (Canal: Calico with Flannel).
    #[serde(default)]
    pub combines_with: Vec<String>,
}

/// A rule shape: chain, target and address columns. An address is a literal CIDR or a
/// `$name` bound on first use (so `!$pods` and `$pods` must be the same network); a
/// leading `!` is a negation. `addrtype_dst` is the `-m addrtype --dst-type` value.
#[derive(Debug, Deserialize)]
#[non_exhaustive]
pub struct RuleShape {
    /// The chain the rule is in (`POSTROUTING`).
    pub chain: String,
    /// The rule's target (`-j MASQUERADE`).
    pub target: String,
    /// The `-s` column: a CIDR, a `$name` or either negated with `!`; `None` matches any source.
    #[serde(default)]
    pub src: Option<String>,
    /// The `-d` column, written as `src`; `None` matches any destination.
    #[serde(default)]
    pub dst: Option<String>,
    /// `-m addrtype --dst-type` value (`LOCAL`, `!LOCAL`); `None` when the rule has no addrtype
    /// test.
    #[serde(default)]
    pub addrtype_dst: Option<String>,
    /// A platform's deliberate rule: checks report it as intended, never as a problem.
    #[serde(default)]
    pub intended: bool,
    /// What the rule is, for evidence.
    pub why: String,
}

/// A chain a writer always writes, hooked from a built-in chain.
#[derive(Debug, Deserialize)]
#[non_exhaustive]
pub struct ExpectedChain {
    /// The iptables table the chain is in (`nat`, `filter`).
    pub table: String,
    /// The chain's name (`FLANNEL-POSTRTG`, `cali-INPUT`).
    pub chain: String,
    /// The built-in chain of the same table that must jump to it (`FORWARD`); `None`:
    /// where it is hooked from is not checked.
    #[serde(default)]
    pub hook: Option<String>,
    /// The configuration that leaves this chain out (its absence is then no evidence).
    #[serde(default)]
    pub optional: Option<String>,
}

/// A rule about chains by name, with the reason.
#[derive(Debug, Deserialize)]
#[non_exhaustive]
pub struct ChainRule {
    /// Exact chain names the rule applies to.
    #[serde(default)]
    pub names: Vec<String>,
    /// Chain name prefixes the rule applies to.
    #[serde(default)]
    pub prefixes: Vec<String>,
    /// Applies only to chains without rules.
    #[serde(default)]
    pub only_if_empty: bool,
    /// Applies only where kube-proxy runs in IPVS mode (either family, any table).
    #[serde(default)]
    pub only_in_ipvs: bool,
    /// Why, quoted as evidence when a check applies the rule.
    pub why: String,
}

impl ChainRule {
    /// Whether the rule names `chain` (by name or prefix).
    pub fn names_chain(&self, chain: &str) -> bool {
        self.names.iter().any(|n| n == chain)
            || self.prefixes.iter().any(|p| chain.starts_with(p.as_str()))
    }
}

/// Every catalogue entry, in matching order.
pub fn entries() -> &'static [Entry] {
    &catalogue().owners
}

/// The catalogue entry of an owner.
pub fn entry(owner: &str) -> Option<&'static Entry> {
    entries().iter().find(|e| e.owner == owner)
}

/// The first by-design rule (and its owner) that names `chain` as unreferenced on a
/// healthy node.
pub fn unreferenced_by_design(chain: &str) -> Option<(&'static str, &'static ChainRule)> {
    entries().iter().find_map(|e| {
        e.unreferenced_by_design
            .iter()
            .find(|r| r.names_chain(chain))
            .map(|r| (e.owner.as_str(), r))
    })
}

/// The rule (and its owner) that makes `chain` litter when it is empty.
pub fn empty_is_stale(chain: &str) -> Option<(&'static str, &'static ChainRule)> {
    entries().iter().find_map(|e| {
        e.empty_is_stale
            .iter()
            .find(|r| r.names_chain(chain))
            .map(|r| (e.owner.as_str(), r))
    })
}

/// Whether a catalogue interface pattern covers an interface as a rule names it
/// (`eni+` covers `eni+` and `eni3a`; `weave` only `weave`).
pub fn interface_matches(pattern: &str, iface: &str) -> bool {
    match pattern.strip_suffix('+') {
        Some(p) => iface.starts_with(p),
        None => pattern == iface,
    }
}

/// The owner of an interface named in `-i`/`-o`, and the catalogue pattern.
pub fn owner_of_interface(iface: &str) -> Option<(&'static str, &'static str)> {
    entries().iter().find_map(|e| {
        e.interfaces
            .iter()
            .find(|p| interface_matches(p, iface))
            .map(|p| (e.owner.as_str(), p.as_str()))
    })
}

/// The owner of an ipset name, and the catalogue prefix.
pub fn owner_of_ipset(name: &str) -> Option<(&'static str, &'static str)> {
    entries().iter().find_map(|e| {
        e.ipsets
            .iter()
            .find(|p| name.starts_with(p.as_str()))
            .map(|p| (e.owner.as_str(), p.as_str()))
    })
}

/// The owner a rule comment names (tag or substring), and the matched text.
pub fn owner_of_comment(comment: &str) -> Option<(&'static str, &'static str)> {
    match_comment(comment).map(|(o, why)| {
        let text = match why {
            Why::CommentPrefix(p) | Why::CommentContains(p) => p,
            Why::NftTable(p) | Why::ChainName(p) | Why::ChainPrefix(p) => p,
        };
        (o, text)
    })
}

fn catalogue() -> &'static Catalogue {
    static CATALOGUE: OnceLock<Catalogue> = OnceLock::new();
    CATALOGUE.get_or_init(|| {
        serde_json::from_str(include_str!("../data/owners.json"))
            .expect("data/owners.json is valid (checked by a unit test)")
    })
}

/// Which catalogue entry matched, and on what (the evidence, before it is worded).
#[derive(Clone, Copy)]
enum Why {
    NftTable(&'static str),
    ChainName(&'static str),
    ChainPrefix(&'static str),
    CommentPrefix(&'static str),
    CommentContains(&'static str),
}

impl Why {
    fn evidence(self) -> String {
        match self {
            Why::NftTable(t) => format!("nft table named '{t}'"),
            Why::ChainName(n) => format!("chain named {n}"),
            Why::ChainPrefix(p) => format!("chain name prefix {p}"),
            Why::CommentPrefix(p) => format!("comment tag {p}"),
            Why::CommentContains(p) => format!("comment \"{p}\""),
        }
    }
}

/// An owner name from the catalogue and why it matched. Matching allocates nothing, so
/// whole-ruleset counts ([`count`]) word no evidence they do not print.
type Matched = (&'static str, Why);

fn attribution((owner, why): Matched) -> Attribution {
    Attribution {
        owner: Owner(owner.to_string()),
        evidence: why.evidence(),
    }
}

fn match_table(table: &Table) -> Option<Matched> {
    if table.backend != Backend::Nftables {
        return None;
    }
    catalogue().owners.iter().find_map(|e| {
        e.nft_tables
            .iter()
            .find(|t| **t == *table.name)
            .map(|t| (e.owner.as_str(), Why::NftTable(t.as_str())))
    })
}

fn match_chain_name(name: &str) -> Option<Matched> {
    for e in &catalogue().owners {
        if let Some(n) = e.chain_names.iter().find(|n| **n == *name) {
            return Some((e.owner.as_str(), Why::ChainName(n.as_str())));
        }
        if let Some(p) = e
            .chain_prefixes
            .iter()
            .find(|p| name.starts_with(p.as_str()))
        {
            return Some((e.owner.as_str(), Why::ChainPrefix(p.as_str())));
        }
    }
    None
}

fn match_comment(comment: &str) -> Option<Matched> {
    for e in &catalogue().owners {
        if let Some(p) = e
            .comment_prefixes
            .iter()
            .find(|p| comment.starts_with(p.as_str()))
        {
            return Some((e.owner.as_str(), Why::CommentPrefix(p.as_str())));
        }
        if let Some(p) = e
            .comment_contains
            .iter()
            .find(|p| comment.contains(p.as_str()))
        {
            return Some((e.owner.as_str(), Why::CommentContains(p.as_str())));
        }
    }
    None
}

/// Owner of a table: native nft tables by name; iptables tables are shared.
pub fn table_owner(table: &Table) -> Option<Attribution> {
    match_table(table).map(attribution)
}

/// Owner of a chain by its name (or its table, for native nft tables).
pub fn chain_owner(table: &Table, chain: &Chain) -> Attribution {
    if let Some(t) = table_owner(table) {
        return t;
    }
    if let Some(a) = owner_of_chain_name(&chain.name) {
        return a;
    }
    if chain.is_builtin() {
        return Attribution {
            owner: Owner::builtin(),
            evidence: "built-in chain".into(),
        };
    }
    Attribution {
        owner: Owner::unknown(),
        evidence: "no catalogue entry matches the chain name".into(),
    }
}

/// The owner name implied by a chain name alone, without building evidence (no
/// allocation): for hot paths such as plumb watch classifying 100k notifications.
pub fn owner_name_of_chain(name: &str) -> Option<&'static str> {
    catalogue()
        .owners
        .iter()
        .find(|e| {
            e.chain_names.iter().any(|n| n == name)
                || e.chain_prefixes
                    .iter()
                    .any(|p| name.starts_with(p.as_str()))
        })
        .map(|e| e.owner.as_str())
}

/// Owner implied by a chain name alone.
pub fn owner_of_chain_name(name: &str) -> Option<Attribution> {
    match_chain_name(name).map(attribution)
}

/// The owner [`owner_of_chain_name`] names, without evidence and without allocating:
/// for passes that classify every chain of a ruleset.
pub fn chain_name_owner(name: &str) -> Option<&'static str> {
    match_chain_name(name).map(|(owner, _)| owner)
}

/// Owner of a rule within its chain.
pub fn rule_owner(table: &Table, chain: &Chain, rule: &Rule) -> Attribution {
    if let Some(t) = table_owner(table) {
        return t;
    }
    for c in rule.comments() {
        if let Some(m) = match_comment(&c) {
            return attribution(m);
        }
    }
    let chain_attr = chain_owner(table, chain);
    if chain.is_builtin() || chain_attr.owner == Owner::unknown() {
        for r in rule.chain_references() {
            if let Some(a) = owner_of_chain_name(r.chain) {
                return Attribution {
                    owner: a.owner,
                    evidence: format!("jumps to {} ({})", r.chain, a.evidence),
                };
            }
        }
    }
    chain_attr
}

/// Counts of chains and rules per owner over a whole ruleset.
#[derive(Clone, Debug, Default, Serialize)]
pub struct OwnerCounts {
    /// Chains per owner name.
    pub chains: std::collections::BTreeMap<String, usize>,
    /// Rules per owner name (a rule's own owner, which can differ from its chain's).
    pub rules: std::collections::BTreeMap<String, usize>,
}

/// [`chain_owner`]'s owner name, without evidence.
fn chain_owner_name(table_owner: Option<&'static str>, chain: &Chain) -> &'static str {
    if let Some(t) = table_owner {
        return t;
    }
    match match_chain_name(&chain.name) {
        Some((owner, _)) => owner,
        None if chain.is_builtin() => "builtin",
        None => "unknown",
    }
}

/// [`rule_owner`]'s owner name, without evidence. xtables rules are indexed in `buf`
/// (not kept, see [`XtBuf`]): the summary reads every rule's comments once.
fn rule_owner_name(
    table_owner: Option<&'static str>,
    chain: &Chain,
    chain_owner: &'static str,
    rule: &Rule,
    buf: &mut XtBuf,
) -> &'static str {
    if let Some(t) = table_owner {
        return t;
    }
    let may_follow_jump = chain.is_builtin() || chain_owner == "unknown";
    if let Some(v) = rule.xt_in(buf) {
        for c in v.comments() {
            if let Some((owner, _)) = match_comment(&c) {
                return owner;
            }
        }
        if may_follow_jump
            && let Some(r) = v.chain_reference()
            && let Some((owner, _)) = match_chain_name(r.chain)
        {
            return owner;
        }
        return chain_owner;
    }
    for c in rule.comments() {
        if let Some((owner, _)) = match_comment(&c) {
            return owner;
        }
    }
    if may_follow_jump {
        for r in rule.chain_references() {
            if let Some((owner, _)) = match_chain_name(r.chain) {
                return owner;
            }
        }
    }
    chain_owner
}

/// Chains and rules per owner (what [`chain_owner`] and [`rule_owner`] say, counted).
pub fn count(ruleset: &Ruleset) -> OwnerCounts {
    // Owner names are the catalogue's own strings: count by reference, own at the end.
    let mut chains: Vec<(&'static str, usize)> = Vec::new();
    let mut rules: Vec<(&'static str, usize)> = Vec::new();
    fn bump(counts: &mut Vec<(&'static str, usize)>, owner: &'static str) {
        match counts.iter_mut().find(|(o, _)| *o == owner) {
            Some((_, n)) => *n += 1,
            None => counts.push((owner, 1)),
        }
    }
    let mut buf = XtBuf::default();
    for t in &ruleset.tables {
        let table_owner = match_table(t).map(|(owner, _)| owner);
        for c in &t.chains {
            let chain_owner = chain_owner_name(table_owner, c);
            bump(&mut chains, chain_owner);
            for r in &c.rules {
                bump(
                    &mut rules,
                    rule_owner_name(table_owner, c, chain_owner, r, &mut buf),
                );
            }
        }
    }
    let own =
        |v: Vec<(&'static str, usize)>| v.into_iter().map(|(o, n)| (o.to_string(), n)).collect();
    OwnerCounts {
        chains: own(chains),
        rules: own(rules),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iptables::save::{IptablesInput, parse};

    #[test]
    fn owner_name_of_chain_agrees_with_owner_of_chain_name() {
        for n in [
            "KUBE-KUBELET-CANARY",
            "KUBE-SVC-X",
            "cali-INPUT",
            "DOCKER",
            "DOCKER-ISOLATION-STAGE-1",
            "INPUT_direct",
            "INPUT",
            "x",
        ] {
            assert_eq!(
                owner_name_of_chain(n),
                owner_of_chain_name(n).map(|a| a.owner.0).as_deref(),
                "{n}"
            );
        }
    }

    #[test]
    fn catalogue_parses() {
        assert!(catalogue().owners.len() >= 8);
    }

    #[test]
    fn cni_chains_are_not_kube_proxys() {
        // KUBE-* chains of kube-router and openshift-sdn come before kube-proxy's prefix.
        for (chain, owner) in [
            ("KUBE-ROUTER-FORWARD", "kube-router"),
            ("KUBE-NWPLCY-DEFAULT", "kube-router"),
            ("KUBE-POD-FW-7RUQJ3EMIQQ6FX3B", "kube-router"),
            ("KUBE-NODEPORT-NON-LOCAL", "openshift-sdn"),
            ("KUBE-SVC-NPX46M4PTMTKRN6Y", "kube-proxy"),
            ("KUBE-FIREWALL", "kubelet"),
            ("WEAVE", "weave"),
            ("WEAVE-NPC-EGRESS", "weave"),
            ("AWS-SNAT-CHAIN-0", "aws-vpc-cni"),
            ("CNI-DN-2d72aeb202429907277c5", "cni-plugins"),
            ("CNI-5033e3bad9f1265a2b04037f", "cni-plugins"),
            ("FLANNEL", "flannel"),
            ("FLANNEL-FWD", "flannel"),
            ("felix-to-7b262072819", "calico"),
            ("ANTREA-POSTROUTING", "antrea"),
            ("OVN-KUBE-NODEPORT", "ovn-kubernetes"),
        ] {
            assert_eq!(chain_name_owner(chain), Some(owner), "{chain}");
        }
    }

    #[test]
    fn every_cni_names_a_role_and_known_partners() {
        let cnis: Vec<&Entry> = entries().iter().filter(|e| e.cni.is_some()).collect();
        assert!(cnis.len() >= 11, "{}", cnis.len());
        for e in &cnis {
            for partner in &e.cni.as_ref().unwrap().combines_with {
                assert!(
                    entry(partner).is_some_and(|p| p.cni.is_some()),
                    "{} combines with unknown CNI {partner}",
                    e.owner
                );
            }
        }
        assert_eq!(
            entry("cni-plugins").unwrap().cni.as_ref().unwrap().role,
            CniRole::Plugin
        );
        assert_eq!(
            entry("kube-router").unwrap().cni.as_ref().unwrap().role,
            CniRole::Policy
        );
    }

    #[test]
    fn interfaces_ipsets_and_comments_name_their_cni() {
        assert_eq!(owner_of_interface("eni+"), Some(("aws-vpc-cni", "eni+")));
        assert_eq!(owner_of_interface("eni3a7f"), Some(("aws-vpc-cni", "eni+")));
        assert_eq!(owner_of_interface("weave"), Some(("weave", "weave")));
        assert_eq!(owner_of_interface("weave0"), None);
        assert_eq!(owner_of_interface("cbr0"), Some(("kubenet", "cbr0")));
        assert_eq!(
            owner_of_interface("antrea-gw0").map(|x| x.0),
            Some("antrea")
        );
        assert_eq!(
            owner_of_interface("ovn-k8s-mp0").map(|x| x.0),
            Some("ovn-kubernetes")
        );
        assert_eq!(
            owner_of_interface("cilium_host").map(|x| x.0),
            Some("cilium")
        );
        assert_eq!(owner_of_interface("eth0"), None);
        assert_eq!(owner_of_ipset("ANTREA-POD-IP").map(|x| x.0), Some("antrea"));
        assert_eq!(owner_of_ipset("KUBE-CLUSTER-IP"), None);
        assert_eq!(
            owner_of_comment("flanneld forward").map(|x| x.0),
            Some("flannel")
        );
        assert_eq!(
            owner_of_comment("AWS SNAT CHAIN").map(|x| x.0),
            Some("aws-vpc-cni")
        );
    }

    #[test]
    fn by_design_rules_say_why() {
        for chain in [
            "ufw-logging-allow",
            "ufw-skip-to-policy-output",
            "ufw-user-limit",
            "ufw-user-limit-accept",
            "ufw-user-logging-input",
            "KUBE-PROXY-CANARY",
            "KUBE-KUBELET-CANARY",
            "KUBE-IPTABLES-HINT",
            "WEAVE-CANARY",
            "CNI-HOSTPORT-SETMARK",
            "DOCKER",
        ] {
            let (_, r) = unreferenced_by_design(chain).unwrap_or_else(|| panic!("{chain}"));
            assert!(!r.why.is_empty());
        }
        assert!(unreferenced_by_design("DOCKER").unwrap().1.only_if_empty);
        assert!(
            unreferenced_by_design("KUBE-LOAD-BALANCER")
                .unwrap()
                .1
                .only_in_ipvs
        );
        assert!(unreferenced_by_design("ufw-before-input").is_none());
        assert!(unreferenced_by_design("KUBE-SEP-SXIVWICOYRO3J4NJ").is_none());
        assert_eq!(
            empty_is_stale("CNI-DN-2d72aeb202429907277c5").map(|x| x.0),
            Some("cni-plugins")
        );
        assert!(empty_is_stale("CNI-HOSTPORT-DNAT").is_none());
    }

    #[test]
    fn chains_and_rules_get_owners_with_evidence() {
        let text = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:KUBE-FIREWALL - [0:0]\n:KUBE-SERVICES - [0:0]\n:cali-FORWARD - [0:0]\n:my-chain - [0:0]\n\
-A INPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
-A INPUT -j KUBE-FIREWALL\n\
-A FORWARD -m comment --comment \"cali:wUHhoiAYhphO9Mso\" -j cali-FORWARD\n\
-A FORWARD -j ACCEPT\n\
-A my-chain -j KUBE-SERVICES\nCOMMIT\n";
        let rs = parse(text, &IptablesInput::default());
        let t = &rs.tables[0];
        let owner = |c: &str| chain_owner(t, t.chain(c).unwrap()).owner.0;
        assert_eq!(owner("KUBE-FIREWALL"), "kubelet");
        assert_eq!(owner("KUBE-SERVICES"), "kube-proxy");
        assert_eq!(owner("cali-FORWARD"), "calico");
        assert_eq!(owner("INPUT"), "builtin");
        assert_eq!(owner("my-chain"), "unknown");
        let input = t.chain("INPUT").unwrap();
        let r0 = rule_owner(t, input, &input.rules[0]);
        assert_eq!(r0.owner.0, "kube-proxy");
        assert!(
            r0.evidence.contains("kubernetes service"),
            "{}",
            r0.evidence
        );
        let r1 = rule_owner(t, input, &input.rules[1]);
        assert_eq!(r1.owner.0, "kubelet");
        assert!(r1.evidence.contains("jumps to KUBE-FIREWALL"));
        let fwd = t.chain("FORWARD").unwrap();
        assert_eq!(
            rule_owner(t, fwd, &fwd.rules[0]).evidence,
            "comment tag cali:"
        );
        assert_eq!(rule_owner(t, fwd, &fwd.rules[1]).owner.0, "builtin");
        let mine = t.chain("my-chain").unwrap();
        assert_eq!(rule_owner(t, mine, &mine.rules[0]).owner.0, "kube-proxy");
    }
}
