//! What runs on the node, read from the ruleset itself: which CNIs left evidence (and
//! whether their hooks are active), and which kube-proxy generation wrote the rules.
//!
//! CNI recognition is data: plumb-ruleset's owner catalogue (`data/owners.json`) lists
//! per CNI its chain names and prefixes, comment tags, interfaces (`-i`/`-o`), ipset
//! names and rule shapes (old Flannel's `POSTROUTING ! -s $pods -d $pods -j MASQUERADE`,
//! GKE/kubenet's `! -d 10.0.0.0/8 -m addrtype ! --dst-type LOCAL -j MASQUERADE`). Every
//! match is kept with the quoted line and the catalogue entry that matched, so a report
//! can say *why* plumb believes Weave Net runs here.
//!
//! The kube-proxy generation is inferred from features each release introduced or
//! dropped (facts-kubernetes.md; kubernetes pkg/proxy/iptables and pkg/kubelet):
//! canary chains (1.17), `KUBE-IPTABLES-HINT` (1.23), `KUBE-EXT-*` chains (1.24, which
//! replaced `KUBE-XLB-*`), `KUBE-PROXY-FIREWALL` (1.25), the `ct_state_invalid_dropped_pkts`
//! nfacct counter (1.29), `--random-fully` masquerade (1.16), the `KUBE-MARK-MASQ` chain
//! (1.2; 1.1 marked `0x4d415351` directly), filter `KUBE-FORWARD` (1.9), nftables mode
//! (1.29). Features that exist prove a lower or upper bound; what a check may call
//! missing depends on those bounds, and the evidence is printed with them.

use crate::facts::CheckInput;
use plumb_findings::{Confidence, Evidence};
use plumb_ruleset::model::listed::{ListedMatch, ListedRule};
use plumb_ruleset::owner::{self, CniRole};
use plumb_ruleset::{Backend, Chain, Rule, RuleBody, Table};
use serde::Serialize;
use std::borrow::Cow;

/// Matches kept per CNI (the count of all is kept too).
const MAX_MATCHES: usize = 4;

/// One piece of evidence for a CNI: what matched, and the quoted line.
#[derive(Clone, Debug, Serialize)]
pub struct CniMatch {
    /// The catalogue entry that matched (`chain name prefix WEAVE-`, `interface eni+`).
    pub why: String,
    /// The line that matched, with its source and line number.
    pub evidence: Evidence,
}

/// A CNI (or CNI plugin) with evidence in the ruleset.
#[derive(Clone, Debug, Serialize)]
pub struct CniFound {
    /// Catalogue owner (`weave`, `aws-vpc-cni`).
    pub owner: &'static str,
    /// Display name (`Weave Net`).
    pub name: &'static str,
    /// The catalogue role (see [`Inventory::effective_role`] for the role on this node).
    pub role: CniRole,
    /// The first few matches.
    pub matches: Vec<CniMatch>,
    /// How many matches in all.
    pub match_count: usize,
    /// Rules in built-in chains that send packets to this CNI's rules (jumps to its
    /// chains, rules on its interfaces or of its shapes), or its own nft base chains.
    pub hooks: Vec<Evidence>,
    /// How many of `hooks` (at the front) are in a FORWARD chain.
    #[serde(skip)]
    forward_hooks: usize,
}

impl CniFound {
    /// True when packets reach this CNI's rules (some built-in chain hooks them).
    pub fn active(&self) -> bool {
        !self.hooks.is_empty()
    }
}

/// The kube-proxy mode the rules show.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProxyMode {
    /// iptables mode: services as `KUBE-SVC-*`/`KUBE-SEP-*` chains with DNAT rules (also
    /// assumed when the rules show kube-proxy and no other mode).
    Iptables,
    /// IPVS mode: nat `KUBE-SERVICES` selects services through kube-proxy's ipsets
    /// (`--match-set KUBE-CLUSTER-IP`); the services are IPVS virtual servers, not rules.
    Ipvs,
    /// nftables mode: a native nft table named `kube-proxy` holds the services.
    Nftables,
}

impl ProxyMode {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            ProxyMode::Iptables => "iptables",
            ProxyMode::Ipvs => "ipvs",
            ProxyMode::Nftables => "nftables",
        }
    }
}

/// A feature of the ruleset that bounds kube-proxy's version.
#[derive(Clone, Debug, Serialize)]
pub struct VersionFeature {
    /// What was seen (`chain KUBE-PROXY-FIREWALL`).
    pub feature: String,
    /// Kubernetes 1.x minor versions it proves: at least / at most.
    pub at_least: Option<u32>,
    /// Highest 1.x minor version it allows, when it bounds from above.
    pub at_most: Option<u32>,
    /// Proven by something present (strong) or by something absent (weak: a deleted
    /// rule looks the same).
    pub by_absence: bool,
}

/// The kube-proxy generation inferred from the ruleset's own features.
#[derive(Clone, Debug, Serialize)]
pub struct ProxyGeneration {
    /// Which proxier wrote the rules.
    pub mode: ProxyMode,
    /// Lowest 1.x minor the features prove (by features present, or absent when no
    /// present feature says otherwise).
    pub at_least: Option<u32>,
    /// Highest 1.x minor the features allow.
    pub at_most: Option<u32>,
    /// High: two features present and no bound resting on an absence; medium: one feature,
    /// or a bound from something missing; low: features contradict each other or none is
    /// present.
    pub confidence: Confidence,
    /// The features the bounds come from, as printed in evidence.
    pub features: Vec<VersionFeature>,
}

impl ProxyGeneration {
    /// True when this generation certainly writes what 1.`minor` introduced.
    pub fn writes_since(&self, minor: u32) -> bool {
        self.at_least.is_some_and(|m| m >= minor)
    }

    /// True when this generation certainly writes canary chain `chain`: the canaries
    /// from 1.17, KUBE-IPTABLES-HINT from 1.23. Only the iptables proxier monitors
    /// KUBE-PROXY-CANARY; in IPVS mode kube-proxy never creates it (kubelet's canary
    /// and hint are there either way), as real IPVS-mode dumps show.
    pub fn writes_canary(&self, chain: &str) -> bool {
        let since = if chain == "KUBE-IPTABLES-HINT" {
            23
        } else {
            17
        };
        let proxier_writes = chain != "KUBE-PROXY-CANARY" || self.mode != ProxyMode::Ipvs;
        proxier_writes && self.writes_since(since)
    }

    /// True when this generation certainly predates 1.`minor`.
    pub fn predates(&self, minor: u32) -> bool {
        self.at_most.is_some_and(|m| m < minor) && !self.writes_since(minor)
    }

    /// `1.25 or later`, `1.2 to 1.8`, `1.1 or earlier`, `version unknown`.
    pub fn range(&self) -> String {
        match (self.at_least, self.at_most) {
            (Some(a), Some(b)) if a == b => format!("1.{a}"),
            (Some(a), Some(b)) if a < b => format!("1.{a} to 1.{b}"),
            (Some(a), _) => format!("1.{a} or later"),
            (None, Some(b)) => format!("1.{b} or earlier"),
            (None, None) => "version unknown".into(),
        }
    }

    /// One line for a report header: mode, range, confidence and the features.
    pub fn describe(&self) -> String {
        let feats: Vec<&str> = self.features.iter().map(|f| f.feature.as_str()).collect();
        format!(
            "kube-proxy {} mode, {} (confidence {}: {})",
            self.mode.as_str(),
            self.range(),
            self.confidence.as_str(),
            if feats.is_empty() {
                "no version-specific feature".to_string()
            } else {
                feats.join("; ")
            }
        )
    }
}

/// What the ruleset shows about the node's components.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Inventory {
    /// CNIs and CNI plugins with evidence, in catalogue order.
    pub cnis: Vec<CniFound>,
    /// kube-proxy's generation, when its rules are present.
    pub kube_proxy: Option<ProxyGeneration>,
}

impl Inventory {
    /// The role `cni` plays beside the other *active* CNIs: a network-or-policy CNI is
    /// policy only beside a network CNI it is documented to combine with (Canal).
    pub fn effective_role(&self, cni: &CniFound) -> CniRole {
        match cni.role {
            CniRole::NetworkOrPolicy => {
                let beside_network = self.cnis.iter().any(|o| {
                    o.owner != cni.owner
                        && o.active()
                        && o.role == CniRole::Network
                        && combinable(cni.owner, o.owner)
                });
                if beside_network {
                    CniRole::Policy
                } else {
                    CniRole::Network
                }
            }
            r => r,
        }
    }

    /// Active CNIs that each claim the pod network.
    pub fn active_networks(&self) -> Vec<&CniFound> {
        self.cnis
            .iter()
            .filter(|c| c.active() && self.effective_role(c) == CniRole::Network)
            .collect()
    }

    /// Pairs of active pod-network CNIs not documented to run together.
    pub fn conflicting_networks(&self) -> Vec<(&CniFound, &CniFound)> {
        let nets = self.active_networks();
        let mut out = Vec::new();
        for (i, a) in nets.iter().enumerate() {
            for b in &nets[i + 1..] {
                if !combinable(a.owner, b.owner) {
                    out.push((*a, *b));
                }
            }
        }
        out
    }

    /// One line naming the CNIs and their roles: `Flannel (network), kube-router network
    /// policy (policy)`.
    pub fn describe_cnis(&self) -> String {
        if self.cnis.is_empty() {
            return "no CNI evidence".into();
        }
        let parts: Vec<String> = self
            .cnis
            .iter()
            .map(|c| {
                let role = match self.effective_role(c) {
                    CniRole::Network => "pod network",
                    CniRole::NetworkOrPolicy => "pod network or policy",
                    CniRole::Policy => "policy",
                    CniRole::Plugin => "plugin",
                };
                let why = c.matches.first().map_or("", |m| m.why.as_str());
                format!(
                    "{} ({role}{}; {why})",
                    c.name,
                    if c.active() { "" } else { ", not hooked" }
                )
            })
            .collect();
        parts.join(", ")
    }
}

/// Whether two CNIs are documented to run together (either names the other).
pub fn combinable(a: &str, b: &str) -> bool {
    let names = |x: &str, y: &str| {
        owner::entry(x)
            .and_then(|e| e.cni.as_ref())
            .is_some_and(|c| c.combines_with.iter().any(|p| p == y))
    };
    names(a, b) || names(b, a)
}

/// The catalogue's CNI name and role of an owner, if it is a CNI.
fn cni_of(owner_name: &str) -> Option<(&'static str, &'static str, CniRole)> {
    let e = owner::entry(owner_name)?;
    let c = e.cni.as_ref()?;
    Some((e.owner.as_str(), c.name.as_str(), c.role))
}

/// Collects CNI evidence, one entry per CNI.
struct Collector {
    cnis: Vec<CniFound>,
}

impl Collector {
    fn slot(&mut self, owner_name: &str) -> Option<&mut CniFound> {
        let (owner, name, role) = cni_of(owner_name)?;
        let i = match self.cnis.iter().position(|c| c.owner == owner) {
            Some(i) => i,
            None => {
                self.cnis.push(CniFound {
                    owner,
                    name,
                    role,
                    matches: Vec::new(),
                    match_count: 0,
                    hooks: Vec::new(),
                    forward_hooks: 0,
                });
                self.cnis.len() - 1
            }
        };
        Some(&mut self.cnis[i])
    }

    fn add(
        &mut self,
        owner_name: &str,
        why: impl FnOnce() -> String,
        ev: impl FnOnce() -> Evidence,
    ) {
        if let Some(c) = self.slot(owner_name) {
            c.match_count += 1;
            if c.matches.len() < MAX_MATCHES {
                c.matches.push(CniMatch {
                    why: why(),
                    evidence: ev(),
                });
            }
        }
    }

    /// Records a hook. Forwarding hooks come first: they decide what happens to pod
    /// traffic between nodes, so they are the ones a report quotes.
    fn hook(&mut self, owner_name: &str, forward: bool, ev: impl FnOnce() -> Evidence) {
        if let Some(c) = self.slot(owner_name) {
            let ev = ev();
            // One rule can hook a CNI twice (a jump to its chain with its comment).
            if c.hooks
                .iter()
                .any(|h| h.line == ev.line && h.text == ev.text)
            {
                return;
            }
            if forward && c.forward_hooks < MAX_MATCHES {
                c.hooks.insert(c.forward_hooks, ev);
                c.forward_hooks += 1;
                c.hooks.truncate(MAX_MATCHES);
            } else if c.hooks.len() < MAX_MATCHES {
                c.hooks.push(ev);
            }
        }
    }
}

/// The columns of one rule that CNI recognition looks at, from any reader.
#[derive(Default)]
pub(crate) struct Columns<'a> {
    pub target: Option<Cow<'a, str>>,
    pub interfaces: Vec<Cow<'a, str>>,
    /// (negated, address)
    pub src: Option<(bool, Cow<'a, str>)>,
    pub dst: Option<(bool, Cow<'a, str>)>,
    pub sets: Vec<Cow<'a, str>>,
    /// (negated, type) of `-m addrtype --dst-type`.
    pub addrtype_dst: Option<(bool, Cow<'a, str>)>,
    pub comments: Vec<Cow<'a, str>>,
}

/// The columns of `rule`, whose text is `text` (as [`plumb_ruleset::RuleText::read`]
/// gave it: a packed text is not kept read back).
pub(crate) fn columns<'t>(rule: &'t Rule, text: &'t str) -> Columns<'t> {
    let mut c = Columns::default();
    match &rule.body {
        RuleBody::Xt(_) => {
            let mut buf = plumb_ruleset::iptables::XtBuf::default();
            let Some(v) = rule.xt_of(text, &mut buf) else {
                return c;
            };
            c.target = v.target().map(|t| Cow::Borrowed(t.name()));
            for o in v.generic() {
                let Some(arg) = o.arg(0) else { continue };
                match o.name() {
                    "-i" | "--in-interface" | "-o" | "--out-interface" => c.interfaces.push(arg),
                    "-s" | "--source" | "--src" => c.src = Some((o.negated(), arg)),
                    "-d" | "--destination" | "--dst" => c.dst = Some((o.negated(), arg)),
                    _ => {}
                }
            }
            for m in v.matches() {
                match m.module() {
                    "set" => {
                        if let Some(s) = m.option("--match-set").and_then(|o| o.arg(0)) {
                            c.sets.push(s);
                        }
                    }
                    "addrtype" => {
                        if let Some(o) = m.option("--dst-type")
                            && let Some(a) = o.arg(0)
                        {
                            c.addrtype_dst = Some((o.negated(), a));
                        }
                    }
                    _ => {}
                }
            }
            c.comments = v.comments().collect();
        }
        RuleBody::Approximate(l) => listed_columns(l, &mut c),
        RuleBody::Nft(_) => {
            // nft text: interface names only (`iifname "cni0"`), plus comments.
            let t = text;
            for key in ["iifname ", "oifname ", "iif ", "oif "] {
                let mut rest = t;
                while let Some(i) = rest.find(key) {
                    rest = &rest[i + key.len()..];
                    let w = rest.split_whitespace().next().unwrap_or("");
                    let w = w.trim_matches(|ch| ch == '"' || ch == '{' || ch == '}');
                    let w = w
                        .strip_suffix('*')
                        .map_or(Cow::Borrowed(w), |p| Cow::Owned(format!("{p}+")));
                    if !w.is_empty() && w != "!=" {
                        c.interfaces.push(w);
                    }
                }
            }
            c.comments = rule.comments();
        }
    }
    c
}

fn listed_columns<'a>(l: &'a ListedRule, c: &mut Columns<'a>) {
    c.target = l.target.as_deref().map(Cow::Borrowed);
    for i in [&l.in_interface, &l.out_interface].into_iter().flatten() {
        c.interfaces.push(Cow::Borrowed(&i.value));
    }
    let addr = |n: &'a plumb_ruleset::model::listed::Negatable| {
        let v: &str = &n.value;
        (!matches!(v, "0.0.0.0/0" | "::/0" | "anywhere")).then_some((n.negated, Cow::Borrowed(v)))
    };
    c.src = addr(&l.source);
    c.dst = addr(&l.destination);
    for m in &l.matches {
        match m {
            ListedMatch::Set { name, .. } => c.sets.push(Cow::Borrowed(name)),
            ListedMatch::AddrType {
                destination_type: Some(t),
                ..
            } => c.addrtype_dst = Some((t.negated, Cow::Borrowed(&t.value))),
            ListedMatch::Comment(s) => c.comments.push(Cow::Borrowed(s)),
            _ => {}
        }
    }
}

/// Whether an address column matches a catalogue pattern (`!10.0.0.0/8`, `$pods`,
/// `!$pods`), binding `$` names in `bound`.
fn address_matches<'a>(
    pattern: &str,
    actual: Option<&(bool, Cow<'a, str>)>,
    bound: &mut Vec<(String, String)>,
) -> bool {
    let (neg, pat) = match pattern.strip_prefix('!') {
        Some(p) => (true, p),
        None => (false, pattern),
    };
    let Some((aneg, a)) = actual else {
        return false;
    };
    if *aneg != neg {
        return false;
    }
    let a = a.strip_suffix("/32").unwrap_or(a);
    match pat.strip_prefix('$') {
        Some(var) => match bound.iter().find(|(k, _)| k == var) {
            Some((_, v)) => v == a,
            None => {
                bound.push((var.to_string(), a.to_string()));
                true
            }
        },
        None => pat == a,
    }
}

/// Whether a rule is one a platform installs on purpose (catalogue rule shapes marked
/// `intended`, e.g. AKS's DROP of pod traffic to the Azure wireserver): the owner and
/// why. A check that would call such a rule a problem reports it as intended.
pub fn intended(chain: &str, rule: &Rule) -> Option<(&'static str, &'static str)> {
    let text = rule.text.read();
    let c = columns(rule, &text);
    shapes(chain, &c).into_iter().find(|(o, why)| {
        owner::entry(o).is_some_and(|e| e.rules.iter().any(|s| s.intended && s.why == *why))
    })
}

/// The catalogue rule shapes this rule has: (owner, why).
fn shapes(chain: &str, c: &Columns) -> Vec<(&'static str, &'static str)> {
    let mut out = Vec::new();
    let Some(target) = c.target.as_deref() else {
        return out;
    };
    for e in owner::entries() {
        for s in &e.rules {
            if s.chain != chain || s.target != target {
                continue;
            }
            let mut bound = Vec::new();
            let ok = s
                .src
                .as_deref()
                .is_none_or(|p| address_matches(p, c.src.as_ref(), &mut bound))
                && s.dst
                    .as_deref()
                    .is_none_or(|p| address_matches(p, c.dst.as_ref(), &mut bound))
                && s.addrtype_dst.as_deref().is_none_or(|p| {
                    let (neg, v) = match p.strip_prefix('!') {
                        Some(v) => (true, v),
                        None => (false, p),
                    };
                    c.addrtype_dst
                        .as_ref()
                        .is_some_and(|(n, a)| *n == neg && a == v)
                });
            if ok {
                out.push((e.owner.as_str(), s.why.as_str()));
            }
        }
    }
    out
}

/// The owner of a chain: the native nft table's owner, else by its name.
fn chain_owner(table_owner: Option<&'static str>, chain: &Chain) -> Option<&'static str> {
    table_owner.or_else(|| owner::chain_name_owner(&chain.name))
}

fn table_owner_name(table: &Table) -> Option<&'static str> {
    if table.backend != Backend::Nftables {
        return None;
    }
    let a = owner::table_owner(table)?;
    owner::entries()
        .iter()
        .find(|e| e.owner == a.owner.0)
        .map(|e| e.owner.as_str())
}

/// Reads the inventory of a ruleset.
pub fn infer(facts: &CheckInput) -> Inventory {
    Inventory {
        cnis: cnis(facts),
        kube_proxy: generation(facts),
    }
}

fn cnis(facts: &CheckInput) -> Vec<CniFound> {
    let mut col = Collector { cnis: Vec::new() };
    for table in &facts.ruleset.tables {
        let towner = table_owner_name(table);
        if let Some(o) = towner
            && cni_of(o).is_some()
        {
            col.add(
                o,
                || format!("nft table {} {}", table.family, table.name),
                || facts.note(format!("table {} {}", table.family, table.name)),
            );
            if let Some(base) = table.chains.iter().find(|c| c.base.is_some()) {
                col.hook(o, base.name.contains("forward"), || {
                    facts.chain(table, base)
                });
            }
            continue;
        }
        for chain in &table.chains {
            let cowner = chain_owner(towner, chain);
            if let Some(o) = cowner
                && cni_of(o).is_some()
            {
                col.add(
                    o,
                    || {
                        owner::owner_of_chain_name(&chain.name)
                            .map_or_else(|| format!("chain {}", chain.name), |a| a.evidence)
                    },
                    || facts.chain(table, chain),
                );
            }
            // kube-proxy's and kubelet's chains hold most rules of a big node and
            // never carry CNI evidence.
            if matches!(cowner, Some("kube-proxy" | "kubelet")) {
                continue;
            }
            let builtin = chain.is_builtin();
            for rule in &chain.rules {
                scan_rule(facts, &mut col, table, chain, builtin, rule);
            }
        }
    }
    let order = |o: &str| owner::entries().iter().position(|e| e.owner == o);
    col.cnis.sort_by_key(|c| order(c.owner));
    col.cnis
}

fn scan_rule(
    facts: &CheckInput,
    col: &mut Collector,
    table: &Table,
    chain: &Chain,
    builtin: bool,
    rule: &Rule,
) {
    // Jumps from built-in chains to a CNI's chain are its hooks.
    if builtin {
        for r in rule.chain_references() {
            if let Some(o) = owner::chain_name_owner(r.chain)
                && cni_of(o).is_some()
            {
                col.add(
                    o,
                    || format!("jump to {}", r.chain),
                    || facts.rule(table, rule),
                );
                col.hook(o, &*chain.name == "FORWARD", || facts.rule(table, rule));
            }
        }
    }
    let text = rule.text.read();
    let c = columns(rule, &text);
    let mut owners: Vec<(&'static str, String)> = Vec::new();
    for i in &c.interfaces {
        if let Some((o, p)) = owner::owner_of_interface(i) {
            owners.push((o, format!("interface {p}")));
        }
    }
    for s in &c.sets {
        if let Some((o, p)) = owner::owner_of_ipset(s) {
            owners.push((o, format!("ipset {p}*")));
        }
    }
    for m in &c.comments {
        if let Some((o, p)) = owner::owner_of_comment(m) {
            owners.push((o, format!("comment \"{p}\"")));
        }
    }
    for (o, why) in shapes(&chain.name, &c) {
        owners.push((o, why.to_string()));
    }
    for (o, why) in owners {
        if cni_of(o).is_none() {
            continue;
        }
        col.add(o, || why, || facts.rule(table, rule));
        if builtin {
            col.hook(o, &*chain.name == "FORWARD", || facts.rule(table, rule));
        }
    }
}

/// A feature present: (what, at least, at most).
fn present(what: impl Into<String>, at_least: Option<u32>, at_most: Option<u32>) -> VersionFeature {
    VersionFeature {
        feature: what.into(),
        at_least,
        at_most,
        by_absence: false,
    }
}

fn generation(facts: &CheckInput) -> Option<ProxyGeneration> {
    let mut features = Vec::new();
    let mut mode = None;
    let mut kube = false;
    let saw = |name: &str| facts.ruleset.tables.iter().any(|t| t.chain(name).is_some());
    if facts
        .ruleset
        .tables
        .iter()
        .any(plumb_kubeproxy::recover::nft::is_kube_proxy_table)
    {
        mode = Some(ProxyMode::Nftables);
        kube = true;
        features.push(present(
            "nft table kube-proxy (nftables mode)",
            Some(29),
            None,
        ));
    }
    for name in ["KUBE-PROXY-CANARY", "KUBE-KUBELET-CANARY"] {
        if saw(name) {
            features.push(present(format!("chain {name}"), Some(17), None));
            break;
        }
    }
    if saw("KUBE-IPTABLES-HINT") {
        features.push(present("chain KUBE-IPTABLES-HINT", Some(23), None));
    }
    if saw("KUBE-PROXY-FIREWALL") {
        features.push(present("chain KUBE-PROXY-FIREWALL", Some(25), None));
    }
    let mut ext = false;
    let mut xlb = false;
    let mut random_fully = false;
    let mut nfacct = false;
    let mut old_mark = false;
    let mut mark_masq = false;
    let mut filter_services_without_forward = false;
    for t in facts.xt_tables() {
        for c in &t.chains {
            let n = &*c.name;
            if !n.starts_with("KUBE-") && !c.is_builtin() {
                continue;
            }
            if owner::chain_name_owner(n) == Some("kube-proxy") {
                kube = true;
            }
            ext |= n.starts_with("KUBE-EXT-");
            xlb |= n.starts_with("KUBE-XLB-");
            mark_masq |= n == "KUBE-MARK-MASQ";
            match (&*t.name, n) {
                ("nat", "KUBE-POSTROUTING") => {
                    random_fully |= c.rules.iter().any(|r| r.text.contains("random-fully"));
                }
                ("nat", "POSTROUTING") => {
                    old_mark |= c.rules.iter().any(|r| r.text.contains("0x4d415351"));
                }
                ("filter", "KUBE-FORWARD") => {
                    nfacct |= c
                        .rules
                        .iter()
                        .any(|r| r.text.contains("ct_state_invalid_dropped_pkts"));
                }
                ("nat", "KUBE-SERVICES") if mode.is_none() && super_ipvs(t) => {
                    mode = Some(ProxyMode::Ipvs);
                }
                _ => {}
            }
        }
        // A filter table by its chains too (a nat `-S` read without its table name is
        // called filter).
        if &*t.name == "filter"
            && t.chain("FORWARD").is_some()
            && t.chain("PREROUTING").is_none()
            && t.chain("POSTROUTING").is_none()
            && t.chain("KUBE-SERVICES").is_some()
            && t.chain("KUBE-FORWARD").is_none()
            && !super::shapes::is_flushed(t)
        {
            filter_services_without_forward = true;
        }
    }
    if !kube {
        return None;
    }
    if ext {
        features.push(present("KUBE-EXT-* chains", Some(24), None));
    }
    if xlb {
        features.push(present(
            "KUBE-XLB-* chains (replaced by KUBE-EXT-* in 1.24)",
            None,
            Some(23),
        ));
    }
    if nfacct {
        features.push(present(
            "nfacct counter ct_state_invalid_dropped_pkts",
            Some(29),
            None,
        ));
    }
    if random_fully {
        features.push(present(
            "MASQUERADE --random-fully in KUBE-POSTROUTING",
            Some(16),
            None,
        ));
    }
    if mark_masq {
        features.push(present("chain KUBE-MARK-MASQ", Some(2), None));
    } else if old_mark {
        features.push(present(
            "masquerade mark 0x4d415351 set directly, no KUBE-MARK-MASQ chain",
            None,
            Some(1),
        ));
    }
    if filter_services_without_forward {
        features.push(VersionFeature {
            feature: "filter KUBE-SERVICES without KUBE-FORWARD (added in 1.9)".into(),
            at_least: None,
            at_most: Some(8),
            by_absence: true,
        });
    }
    let at_least = features.iter().filter_map(|f| f.at_least).max();
    // Upper bounds that contradict a present feature's lower bound are dropped.
    let uppers: Vec<&VersionFeature> = features
        .iter()
        .filter(|f| f.at_most.is_some_and(|m| at_least.is_none_or(|l| m >= l)))
        .collect();
    let at_most = uppers.iter().filter_map(|f| f.at_most).min();
    let contradicted = features
        .iter()
        .any(|f| f.at_most.is_some_and(|m| at_least.is_some_and(|l| m < l)));
    // High: two features present and no bound resting on an absence; medium: one
    // feature, or a bound from something missing (a deleted rule looks the same); low:
    // features that contradict each other, or none present.
    let strong = features.iter().filter(|f| !f.by_absence).count();
    let weak_bound = uppers.iter().any(|f| f.by_absence && f.at_most == at_most);
    let confidence = if contradicted || strong == 0 {
        Confidence::Low
    } else if strong >= 2 && !weak_bound {
        Confidence::High
    } else {
        Confidence::Medium
    };
    Some(ProxyGeneration {
        mode: mode.unwrap_or(ProxyMode::Iptables),
        at_least,
        at_most,
        confidence,
        features,
    })
}

fn super_ipvs(nat: &Table) -> bool {
    super::shapes::ipvs_mode(nat)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::Origin;
    use plumb_ruleset::format::{ParseOptions, parse_bytes};

    fn inventory(text: &str) -> Inventory {
        let text = crate::checks::full_dump(text);
        let rs = parse_bytes(text.as_bytes(), &ParseOptions::default())
            .unwrap()
            .ruleset;
        CheckInput::new(&rs, Origin::File("dump".into()), false).inventory
    }

    fn owners(i: &Inventory) -> Vec<&str> {
        i.cnis.iter().map(|c| c.owner).collect()
    }

    #[test]
    fn old_flannel_is_recognised_by_its_masquerade_rule() {
        let i = inventory(
            "*nat\n:POSTROUTING ACCEPT [0:0]\n-A POSTROUTING ! -s 10.2.0.0/16 -d 10.2.0.0/16 -j MASQUERADE\nCOMMIT\n",
        );
        assert_eq!(owners(&i), ["flannel"]);
        assert!(
            i.cnis[0].matches[0].why.contains("--ip-masq"),
            "{:?}",
            i.cnis[0].matches
        );
        assert!(i.cnis[0].active());
        // A different network on each side is not Flannel's rule.
        let i = inventory(
            "*nat\n:POSTROUTING ACCEPT [0:0]\n-A POSTROUTING ! -s 10.2.0.0/16 -d 10.3.0.0/16 -j MASQUERADE\nCOMMIT\n",
        );
        assert!(i.cnis.is_empty());
    }

    #[test]
    fn gke_masquerade_interfaces_and_ipsets_name_their_cni() {
        let i = inventory(
            "*nat\n:POSTROUTING ACCEPT [0:0]\n-A POSTROUTING ! -d 10.0.0.0/8 -m addrtype ! --dst-type LOCAL -j MASQUERADE\nCOMMIT\n",
        );
        assert_eq!(owners(&i), ["kubenet"]);
        let i = inventory(
            "*filter\n:FORWARD ACCEPT [0:0]\n-A FORWARD -i antrea-gw0 -j ACCEPT\n-A FORWARD -m set --match-set weave-local-pods dst -j ACCEPT\nCOMMIT\n",
        );
        assert_eq!(owners(&i), ["weave", "antrea"]);
        assert_eq!(i.cnis[1].matches[0].why, "interface antrea-gw0");
        assert_eq!(i.cnis[0].matches[0].why, "ipset weave-*");
    }

    #[test]
    fn aks_wireserver_drop_is_intended() {
        use plumb_ruleset::format::{ParseOptions, parse_bytes};
        let rs = parse_bytes(
            b"*filter\n:FORWARD ACCEPT [0:0]\n-A FORWARD -d 168.63.129.16/32 -p tcp -m tcp --dport 32526 -j DROP\n-A FORWARD -d 10.0.0.1/32 -j DROP\nCOMMIT\n",
            &ParseOptions::default(),
        )
        .unwrap()
        .ruleset;
        let fwd = rs.tables[0].chain("FORWARD").unwrap();
        let (owner, why) = intended("FORWARD", &fwd.rules[0]).expect("intended");
        assert_eq!(owner, "aks");
        assert!(why.contains("wireserver"));
        assert!(intended("FORWARD", &fwd.rules[1]).is_none());
        // The same shape as a listing row (`iptables -vnL`).
        let rs = parse_bytes(
            b"Chain FORWARD (policy ACCEPT 0 packets, 0 bytes)\n pkts bytes target     prot opt in     out     source               destination         \n    0     0 DROP       tcp  --  *      *       0.0.0.0/0            168.63.129.16        tcp dpt:80\n",
            &ParseOptions::default(),
        )
        .unwrap()
        .ruleset;
        let fwd = rs.tables[0].chain("FORWARD").unwrap();
        assert_eq!(intended("FORWARD", &fwd.rules[0]).map(|x| x.0), Some("aks"));
    }

    #[test]
    fn calico_in_nft_mode_and_cilium_interfaces_in_nft_rules() {
        use plumb_ruleset::format::{ParseOptions, parse_bytes};
        let inv = |t: &str| {
            let rs = parse_bytes(t.as_bytes(), &ParseOptions::default())
                .unwrap()
                .ruleset;
            CheckInput::new(&rs, Origin::File("n".into()), false).inventory
        };
        let i = inv(
            "table ip calico {\n\tchain filter-FORWARD {\n\t\ttype filter hook forward priority filter; policy accept;\n\t\tcounter accept\n\t}\n}\n",
        );
        assert_eq!(owners(&i), ["calico"]);
        assert!(i.cnis[0].active());
        assert_eq!(i.cnis[0].matches[0].why, "nft table ip calico");
        let i = inv(
            "table inet host {\n\tchain fwd {\n\t\ttype filter hook forward priority filter; policy accept;\n\t\toifname \"lxc*\" accept\n\t\tiifname \"cilium_host\" accept\n\t}\n}\n",
        );
        assert_eq!(owners(&i), ["cilium"]);
        assert_eq!(i.cnis[0].match_count, 2);
    }

    #[test]
    fn roles_decide_which_combinations_conflict() {
        // k3s: flannel + kube-router policy + portmap plugin is one normal combination.
        let k3s = inventory(
            "*filter\n:FORWARD ACCEPT [0:0]\n:FLANNEL-FWD - [0:0]\n:KUBE-ROUTER-FORWARD - [0:0]\n-A FORWARD -j KUBE-ROUTER-FORWARD\n-A FORWARD -j FLANNEL-FWD\nCOMMIT\n*nat\n:PREROUTING ACCEPT [0:0]\n:CNI-HOSTPORT-DNAT - [0:0]\n-A PREROUTING -j CNI-HOSTPORT-DNAT\nCOMMIT\n",
        );
        assert_eq!(owners(&k3s).len(), 3);
        assert!(k3s.conflicting_networks().is_empty());
        // Canal: Calico beside Flannel is policy only.
        let canal = inventory(
            "*filter\n:FORWARD ACCEPT [0:0]\n:FLANNEL-FWD - [0:0]\n:cali-FORWARD - [0:0]\n-A FORWARD -j cali-FORWARD\n-A FORWARD -j FLANNEL-FWD\nCOMMIT\n",
        );
        assert!(canal.conflicting_networks().is_empty());
        let calico = canal.cnis.iter().find(|c| c.owner == "calico").unwrap();
        assert_eq!(canal.effective_role(calico), CniRole::Policy);
        // Weave and Flannel both hooked: two pod networks.
        let both = inventory(
            "*filter\n:FORWARD ACCEPT [0:0]\n:FLANNEL-FWD - [0:0]\n:WEAVE-NPC - [0:0]\n-A FORWARD -j WEAVE-NPC\n-A FORWARD -j FLANNEL-FWD\nCOMMIT\n",
        );
        assert_eq!(both.conflicting_networks().len(), 1);
        // Weave's chains without a hook are leftovers, not a second CNI.
        let leftover = inventory(
            "*filter\n:FORWARD ACCEPT [0:0]\n:FLANNEL-FWD - [0:0]\n:WEAVE-NPC - [0:0]\n-A FORWARD -j FLANNEL-FWD\nCOMMIT\n",
        );
        assert!(leftover.conflicting_networks().is_empty());
    }

    #[test]
    fn generation_from_features() {
        let g = |t: &str| inventory(t).kube_proxy.expect("kube-proxy");
        let modern = g(&crate::checks::kube_proxy_dump(2));
        assert!(modern.writes_since(17), "{}", modern.describe());
        let old = g(
            "*nat\n:POSTROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n-A POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -m mark --mark 0x4d415351 -j MASQUERADE\nCOMMIT\n",
        );
        assert_eq!(old.at_most, Some(1));
        assert!(old.predates(17), "{}", old.describe());
        assert!(old.describe().contains("0x4d415351"));
        let unknown = g("*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-MARK-MASQ - [0:0]\nCOMMIT\n");
        assert!(!unknown.predates(17) && !unknown.writes_since(17));
        assert_eq!(unknown.range(), "1.2 or later");
    }
}
