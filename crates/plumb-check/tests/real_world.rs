//! `plumb check` on third-party rulesets from real nodes (`real-world/` in the shared
//! corpus; its README says per file what a correct tool must and must not report).
//!
//! For each file: the exact set of problem findings among the ids these checks own
//! (CNI recognition, version awareness, duplicate and stale-chain semantics, flushed
//! tables, services without endpoints), plus what the inventory must have recognised.
//! Files other readers cannot parse yet are not listed here.

mod common;

use plumb_check::{CheckInput, Origin, run};
use plumb_findings::{Finding, Severity, Status};
use plumb_ruleset::format::{ParseOptions, parse_bytes};

/// The ids whose answers this file pins down.
const IDS: &[&str] = &[
    "cni-chains-missing",
    "multiple-cnis",
    "kube-proxy-canary-missing",
    "duplicate-rule",
    "stale-chain",
    "table-flushed",
    "service-no-endpoints",
];

struct Checked {
    findings: Vec<Finding>,
    cnis: Vec<&'static str>,
    generation: Option<plumb_check::inventory::ProxyGeneration>,
}

fn check(rel: &str) -> Option<Checked> {
    let dir = common::corpus_dir()?;
    let text = common::read(&dir.join("real-world").join(rel));
    let rs = parse_bytes(text.as_bytes(), &ParseOptions::default())
        .unwrap_or_else(|e| panic!("{rel}: {e}"))
        .ruleset;
    let facts = CheckInput::new(&rs, Origin::File(rel.into()), false);
    Some(Checked {
        cnis: facts.inventory.cnis.iter().map(|c| c.owner).collect(),
        generation: facts.inventory.kube_proxy.clone(),
        findings: run(facts),
    })
}

impl Checked {
    /// Problems among [`IDS`], sorted.
    fn problems(&self) -> Vec<&str> {
        let mut p: Vec<&str> = self
            .findings
            .iter()
            .filter(|f| f.is_problem() && IDS.contains(&f.id.as_str()))
            .map(|f| f.id.as_str())
            .collect();
        p.sort();
        p
    }

    fn problem(&self, id: &str) -> &Finding {
        self.findings
            .iter()
            .find(|f| f.id == id && f.is_problem())
            .unwrap_or_else(|| panic!("no {id} problem: {:#?}", self.findings))
    }

    fn status(&self, id: &str) -> Option<Status> {
        self.findings.iter().find(|f| f.id == id).map(|f| f.status)
    }
}

#[test]
fn k3s_flannel_kube_router_portmap_is_one_normal_combination() {
    let Some(c) = check(
        "iptables-save/k3s-1.30-pi_kube-router-netpol_flannel_iptables-nft-1.8.10.iptables-save",
    ) else {
        return;
    };
    assert_eq!(c.problems(), Vec::<&str>::new(), "{:#?}", c.findings);
    assert_eq!(c.cnis, ["kube-router", "flannel", "cni-plugins"]);
    assert_eq!(c.status("multiple-cnis"), Some(Status::Ok));
    // CNI-HOSTPORT-SETMARK without hostPorts and the canaries are unreferenced by design.
    assert_eq!(c.status("stale-chain"), Some(Status::Ok));
    let g = c.generation.expect("kube-proxy");
    assert_eq!(g.at_least, Some(25), "{}", g.describe());
}

#[test]
fn k3s_ipv6_skeleton_has_nothing_to_report() {
    let Some(c) = check(
        "iptables-save/k3s-1.30-pi_kube-router-netpol_flannel_ip6tables-nft-1.8.10.ip6tables-save",
    ) else {
        return;
    };
    // A mangle table of canaries is not flushed; KUBE-MARK-MASQ unreferenced is by design.
    assert_eq!(c.problems(), Vec::<&str>::new(), "{:#?}", c.findings);
}

#[test]
fn kubernetes_1_1_with_old_flannel_is_recognised_and_not_asked_for_canaries() {
    let Some(c) = check(
        "iptables-save/k8s-1.1-era_coreos_flannel-old-FLANNEL-chain_MARK-0x4d415351.iptables-save",
    ) else {
        return;
    };
    assert_eq!(c.problems(), Vec::<&str>::new(), "{:#?}", c.findings);
    assert_eq!(c.cnis, ["flannel"]);
    assert_eq!(c.status("cni-chains-missing"), Some(Status::Ok));
    assert_eq!(c.status("kube-proxy-canary-missing"), Some(Status::Ok));
    let g = c.generation.expect("kube-proxy");
    assert_eq!(g.at_most, Some(1), "{}", g.describe());
    assert!(g.describe().contains("0x4d415351"));
}

#[test]
fn gke_2016_kubenet_nodes_are_recognised_and_not_asked_for_canaries() {
    for f in ["before", "after"] {
        let Some(c) = check(&format!(
            "iptables-save/gke-2016-k8s-1.2_kubenet-cbr0_{f}-pods.iptables-save"
        )) else {
            return;
        };
        assert_eq!(c.problems(), Vec::<&str>::new(), "{f}: {:#?}", c.findings);
        assert_eq!(c.cnis, ["kubenet"], "{f}");
        assert_eq!(c.status("cni-chains-missing"), Some(Status::Ok), "{f}");
        assert_eq!(
            c.status("kube-proxy-canary-missing"),
            Some(Status::Ok),
            "{f}"
        );
        let g = c.generation.expect("kube-proxy");
        assert!(g.predates(17), "{}", g.describe());
    }
}

#[test]
fn vagrant_backslash_wrapped_fragments_are_not_duplicates() {
    let Some(c) = check(
        "iptables-save/vagrant-k8s-1.2_flannel-old_worker_AUTHOR-EDITED-backslash-wrapped.iptables-save",
    ) else {
        return;
    };
    assert_eq!(c.problems(), Vec::<&str>::new(), "{:#?}", c.findings);
    assert!(c.cnis.contains(&"flannel"));
}

#[test]
fn cce_cilium_doubled_masquerade_is_one_low_duplicate() {
    let Some(c) = check(
        "iptables-save/cce-cilium-kernel-4.19_kube-proxy-ipvs_iptables-save_AUTHOR-ANNOTATED-zh-comments_no-COMMIT.iptables-save",
    ) else {
        return;
    };
    assert_eq!(c.problems(), ["duplicate-rule"], "{:#?}", c.findings);
    let d = c.problem("duplicate-rule");
    assert_eq!(d.severity, Severity::Low);
    assert_eq!(d.evidence.len(), 1);
    assert_eq!(d.evidence[0].line, Some(134));
    assert_eq!(
        d.evidence[0].text,
        "-A POSTROUTING -m mark --mark 0x21 -j MASQUERADE"
    );
    assert!(c.cnis.contains(&"cilium"));
}

#[test]
fn calico_and_flannel_listings_are_clean() {
    for (rel, cni) in [
        (
            "iptables-list/calico-kubeadm_worker1_iptables-t-nat-L-v-n--line-numbers.txt",
            "calico",
        ),
        (
            "iptables-list/calico-ipip-kans-2022_k8s-w0_iptables-t-filter-S-grep-cali_FILTERED.txt",
            "calico",
        ),
        (
            "iptables-list/kubeadm-flannel_k8s-cp_iptables-t-nat-L_names-resolved.txt",
            "flannel",
        ),
        (
            "iptables-list/kubeadm-flannel_k8s-cp_iptables-L_filter_names-resolved.txt",
            "flannel",
        ),
    ] {
        let Some(c) = check(rel) else { return };
        assert_eq!(c.problems(), Vec::<&str>::new(), "{rel}: {:#?}", c.findings);
        assert!(c.cnis.contains(&cni), "{rel}: {:?}", c.cnis);
    }
}

#[test]
fn eks_aws_vpc_cni_is_a_cni() {
    let Some(c) = check("iptables-list/eks-1.24_aws-vpc-cni-1.11.4_node_iptables-t-nat-S.txt")
    else {
        return;
    };
    assert_eq!(c.problems(), Vec::<&str>::new(), "{:#?}", c.findings);
    assert_eq!(c.cnis, ["aws-vpc-cni"]);
    assert_eq!(c.status("cni-chains-missing"), Some(Status::Ok));
}

#[test]
fn nerdctl_empty_portmap_dnat_chain_is_a_low_stale_chain() {
    let Some(c) = check("iptables-list/nerdctl-cni-bridge-portmap_lima-vm_iptables-t-nat-S.txt")
    else {
        return;
    };
    assert_eq!(c.problems(), ["stale-chain"], "{:#?}", c.findings);
    let s = c.problem("stale-chain");
    assert_eq!(s.severity, Severity::Low);
    assert!(
        s.title
            .contains("empty cni-plugins chain(s) still jumped to: CNI-DN-2d72aeb202429907277c5"),
        "{}",
        s.title
    );
    assert!(
        s.evidence
            .iter()
            .any(|e| e.text.contains("-j CNI-DN-2d72aeb202429907277c5")),
        "{:#?}",
        s.evidence
    );
    assert!(
        !c.findings
            .iter()
            .any(|f| f.id == "dangling-reference" && f.is_problem())
    );
    assert_eq!(c.cnis, ["cni-plugins"]);
}

#[test]
fn openshift_listings_without_interfaces_have_no_duplicates() {
    for node in ["master", "node"] {
        let Some(c) = check(&format!(
            "iptables-list/openshift3-origin_{node}_iptables-nL_icmp-host-prohibited.txt"
        )) else {
            return;
        };
        assert_eq!(
            c.problems(),
            Vec::<&str>::new(),
            "{node}: {:#?}",
            c.findings
        );
        assert_eq!(c.cnis, ["openshift-sdn"], "{node}");
    }
}

#[test]
fn podman_fragment_reports_nothing_missing() {
    let Some(c) =
        check("iptables-list/podman-cni+docker+libvirt_host_iptables-t-nat-S_no-P-N-lines.txt")
    else {
        return;
    };
    assert_eq!(c.problems(), Vec::<&str>::new(), "{:#?}", c.findings);
    assert!(c.status("cni-chains-missing").is_none());
}

#[test]
fn weave_and_flannel_both_hooked_are_multiple_cnis() {
    let Some(c) = check(
        "iptables-list/weave+flannel-both-installed_k8s-1.28_iptables-list_argocd-no-endpoints.txt",
    ) else {
        return;
    };
    assert_eq!(
        c.problems(),
        ["multiple-cnis", "service-no-endpoints"],
        "{:#?}",
        c.findings
    );
    let m = c.problem("multiple-cnis");
    assert!(m.title.contains("Flannel, Weave Net"), "{}", m.title);
    // Both hooks in FORWARD are quoted (Weave's carry its "must go before" note).
    assert!(
        m.evidence
            .iter()
            .any(|e| e.text.starts_with("WEAVE-NPC") && e.text.contains("must go before")),
        "{:#?}",
        m.evidence
    );
    assert!(m.evidence.iter().any(|e| e.text.starts_with("FLANNEL-FWD")));
    let lines: Vec<_> = m.evidence.iter().map(|e| e.line).collect();
    let mut unique = lines.clone();
    unique.dedup();
    assert_eq!(lines, unique, "each hook quoted once");
    let n = c.problem("service-no-endpoints");
    assert!(
        n.title
            .contains("argocd/argocd-redis-ha-announce-2:tcp-sentinel, argocd/argocd-redis-ha-announce-2:tcp-server"),
        "{}",
        n.title
    );
}

#[test]
fn weave_node_after_iptables_flush_is_one_table_flushed_finding() {
    let Some(c) = check(
        "iptables-list/weave-k8s-1.19_after-iptables-F_all-chains-0-references_iptables-L-n.txt",
    ) else {
        return;
    };
    let all: Vec<&str> = c
        .findings
        .iter()
        .filter(|f| f.is_problem())
        .map(|f| f.id.as_str())
        .collect();
    assert_eq!(all, ["table-flushed"], "{:#?}", c.findings);
    let t = c.problem("table-flushed");
    assert_eq!(t.severity, Severity::High);
    assert!(t.title.contains("filter table flushed"), "{}", t.title);
    for owner in ["kube-proxy", "Weave Net", "Docker"] {
        assert!(t.title.contains(owner), "{owner}: {}", t.title);
    }
}

#[test]
fn host_firewall_chains_unreferenced_by_design_are_not_stale() {
    for rel in [
        "host-firewall/docker-portainer+ufw_ubuntu_iptables-S_FORWARD-DROP_docker-bypasses-ufw.txt",
        "host-firewall/centos7-firewalld-iptables-backend_iptables-save-v1.4.21_no-k8s_REJECT-catch-alls.iptables-save",
    ] {
        let Some(c) = check(rel) else { return };
        assert_eq!(c.problems(), Vec::<&str>::new(), "{rel}: {:#?}", c.findings);
        assert_eq!(c.status("stale-chain"), Some(Status::Ok), "{rel}");
    }
}

#[test]
fn nft_views_name_their_cnis_and_hide_no_duplicates() {
    let Some(c) = check("nft/k3s-1.30-pi_kube-router-netpol_flannel_nft-list-ruleset.nft") else {
        return;
    };
    // `xt target "MASQUERADE"` hides the matches: equal texts prove nothing.
    assert_eq!(c.problems(), Vec::<&str>::new(), "{:#?}", c.findings);
    assert_eq!(c.cnis, ["kube-router", "flannel", "cni-plugins"]);
    for (rel, cni) in [
        (
            "nft/ack-cilium-1.18_kube-proxy-ipvs_iptables-nft_nft-list-ruleset_match-set-comments.nft",
            "cilium",
        ),
        (
            "nft/microshift-ovn-kubernetes_nft-a-list-chain-ip-nat-PREROUTING_user-rule-in-iptables-nft-table.nft",
            "ovn-kubernetes",
        ),
    ] {
        let Some(c) = check(rel) else { return };
        assert!(c.cnis.contains(&cni), "{rel}: {:?}", c.cnis);
        assert!(
            !c.findings
                .iter()
                .any(|f| f.id == "cni-chains-missing" && f.status != Status::Ok),
            "{rel}"
        );
        // One chain as `nft list chain` prints it: its jump targets are not listed.
        assert!(
            !c.findings
                .iter()
                .any(|f| f.id == "dangling-reference" && f.is_problem()),
            "{rel}: {:#?}",
            c.findings
        );
    }
}

#[test]
fn antrea_listing_is_recognised_by_comment_and_ipset() {
    let Some(c) =
        check("iptables-list/antrea_k8s-1.18.8_worker1_iptables-t-nat-L-n_with-HTML-b-tags.txt")
    else {
        return;
    };
    assert_eq!(c.cnis, ["antrea"]);
    assert_eq!(c.problems(), Vec::<&str>::new(), "{:#?}", c.findings);
}

#[test]
fn ipvs_mode_writes_no_proxy_canary() {
    let Some(c) = check(
        "nft/ack-cilium-1.18_kube-proxy-ipvs_iptables-nft_nft-list-ruleset_match-set-comments.nft",
    ) else {
        return;
    };
    let canary: Vec<&Finding> = c
        .findings
        .iter()
        .filter(|f| f.id == "kube-proxy-canary-missing")
        .collect();
    assert!(!canary.is_empty(), "{:#?}", c.findings);
    for f in canary {
        assert_eq!(f.status, Status::Ok, "{f:#?}");
        assert!(f.title.contains("IPVS mode"), "{}", f.title);
    }
}
