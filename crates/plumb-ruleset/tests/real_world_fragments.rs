//! Captures people post from their nodes that are not whole dumps, read as what they
//! are (`../shared/corpus/real-world/`, whose README says what each must yield):
//! `-S` output read without `--table`, `-S` with only `-A` lines, `iptables-save | grep`
//! captures that interleave tables without headers, single-chain listings, listings with
//! markdown/HTML debris or `column -t` squeezing, and session transcripts.
//!
//! Each test names the file and the shape; a missing corpus skips with a reason.

mod common;

use plumb_ruleset::{Completeness, Family, ParseOptions, Ruleset, Severity, parse_bytes};
use std::path::PathBuf;

/// The corpus file `rel` under `real-world/`, or `None` (skipped with a reason).
fn real_world(rel: &str) -> Option<PathBuf> {
    let p = common::corpus_dir()?.join("real-world").join(rel);
    if p.is_file() {
        Some(p)
    } else {
        plumb_testkit::skip(&format!("{} not in the corpus", p.display()));
        None
    }
}

/// Reads a corpus file as the CLI does without flags (no table, format detected).
fn load(rel: &str) -> Option<Ruleset> {
    let path = real_world(rel)?;
    let bytes = std::fs::read(&path).unwrap();
    Some(
        parse_bytes(&bytes, &ParseOptions::default())
            .unwrap()
            .ruleset,
    )
}

fn errors(rs: &Ruleset) -> Vec<String> {
    rs.diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| d.to_string())
        .collect()
}

fn tables(rs: &Ruleset) -> Vec<(String, usize, usize)> {
    rs.tables
        .iter()
        .map(|t| (t.name.to_string(), t.chains.len(), t.rule_count()))
        .collect()
}

fn chain_in(rs: &Ruleset, table: &str, chain: &str) -> bool {
    rs.table(Family::Ip, table)
        .is_some_and(|t| t.chain(chain).is_some())
}

/// `iptables -t nat -S` read without `--table`: the table is nat (SNAT, built-in
/// chains), so kube-proxy's chains land where service recovery looks for them.
#[test]
fn eks_nat_list_rules_without_table_is_read_as_nat() {
    let Some(rs) = load("iptables-list/eks-1.24_aws-vpc-cni-1.11.4_node_iptables-t-nat-S.txt")
    else {
        return;
    };
    assert_eq!(errors(&rs), Vec::<String>::new());
    assert_eq!(tables(&rs), vec![("nat".to_string(), 24, 37)]);
    // Every -P line is there: a whole table.
    assert_eq!(rs.completeness, Completeness::Full);
}

/// `iptables -t nat -S` posted with only its `-A` lines: a fragment, partial, with no
/// "never declares" errors, in table nat.
#[test]
fn podman_list_rules_without_p_and_n_lines_is_a_partial_nat_fragment() {
    let Some(rs) =
        load("iptables-list/podman-cni+docker+libvirt_host_iptables-t-nat-S_no-P-N-lines.txt")
    else {
        return;
    };
    assert_eq!(errors(&rs), Vec::<String>::new());
    assert_eq!(rs.completeness, Completeness::Partial);
    assert_eq!(rs.tables.len(), 1);
    assert_eq!(&*rs.tables[0].name, "nat");
    assert!(chain_in(&rs, "nat", "CNI-HOSTPORT-DNAT"));
}

/// `iptables -t filter -S | grep cali`: partial filter fragment.
#[test]
fn calico_grep_of_list_rules_is_a_partial_filter_fragment() {
    let Some(rs) = load(
        "iptables-list/calico-ipip-kans-2022_k8s-w0_iptables-t-filter-S-grep-cali_FILTERED.txt",
    ) else {
        return;
    };
    assert_eq!(errors(&rs), Vec::<String>::new());
    assert_eq!(rs.completeness, Completeness::Partial);
    assert_eq!(tables(&rs), vec![("filter".to_string(), 14, 28)]);
}

/// `iptables-save | grep -i cilium`: nat, mangle, filter and raw lines one after another
/// without `*table` lines; each run in its own table, the whole partial.
#[test]
fn cilium_grep_of_save_interleaves_four_tables() {
    let Some(rs) = load(
        "iptables-save/ack-cilium-1.18_kube-proxy-ipvs_iptables-save-grep-cilium_FILTERED.txt",
    ) else {
        return;
    };
    assert_eq!(errors(&rs), Vec::<String>::new());
    assert_eq!(rs.completeness, Completeness::Partial);
    let names: Vec<String> = tables(&rs).into_iter().map(|t| t.0).collect();
    assert_eq!(names, ["nat", "mangle", "filter", "raw"]);
    assert!(chain_in(&rs, "nat", "CILIUM_POST_nat"));
    assert!(chain_in(&rs, "mangle", "CILIUM_PRE_mangle"));
    assert!(chain_in(&rs, "filter", "CILIUM_FORWARD"));
    assert!(chain_in(&rs, "raw", "CILIUM_PRE_raw"));
    // 30 rules in all, none lost.
    assert_eq!(tables(&rs).iter().map(|t| t.2).sum::<usize>(), 30);
}

/// `iptables-save | grep KUBE` of an IPVS node: KUBE-FIREWALL is declared in nat and in
/// filter (legal), the nat part first.
#[test]
fn ipvs_grep_of_save_keeps_kube_firewall_in_both_tables() {
    let Some(rs) = load(
        "iptables-save/azure-kubeadm_kube-proxy-IPVS_calico_iptables-save-grep-KUBE_FILTERED.txt",
    ) else {
        return;
    };
    assert_eq!(errors(&rs), Vec::<String>::new());
    assert_eq!(rs.completeness, Completeness::Partial);
    let names: Vec<String> = tables(&rs).into_iter().map(|t| t.0).collect();
    assert_eq!(names, ["nat", "filter"]);
    assert!(chain_in(&rs, "nat", "KUBE-FIREWALL"));
    assert!(chain_in(&rs, "filter", "KUBE-FIREWALL"));
    assert!(chain_in(&rs, "nat", "KUBE-SERVICES"));
    assert!(chain_in(&rs, "filter", "KUBE-FORWARD"));
    assert_eq!(tables(&rs).iter().map(|t| t.2).sum::<usize>(), 19);
}

/// `iptables -t nat -S` from iptables-nft with the legacy-tables warning first: table
/// nat, backend iptables-nft, and a note that the legacy side is not shown.
#[test]
fn nerdctl_list_rules_records_the_legacy_tables_warning() {
    let Some(rs) = load("iptables-list/nerdctl-cni-bridge-portmap_lima-vm_iptables-t-nat-S.txt")
    else {
        return;
    };
    assert_eq!(errors(&rs), Vec::<String>::new());
    assert_eq!(tables(&rs), vec![("nat".to_string(), 18, 38)]);
    assert_eq!(rs.tables[0].backend, plumb_ruleset::Backend::IptablesNft);
    assert!(
        rs.diagnostics.iter().any(|d| d
            .message
            .contains("iptables-legacy tables it does not show")),
        "{:?}",
        rs.diagnostics
    );
    // The stale portmap chain is declared (not undefined), with no rules.
    let t = rs.table(Family::Ip, "nat").unwrap();
    assert!(
        t.chain("CNI-DN-2d72aeb202429907277c5")
            .is_some_and(|c| c.rules.is_empty())
    );
}

/// A 10-line `iptables -L` excerpt starting with a stray markdown `**`: a listing of
/// one chain (partial), no parse errors.
#[test]
fn markdown_starred_single_chain_listing_is_read_as_partial() {
    let Some(rs) = load(
        "iptables-list/calico-v2.x-2017_felix-to-endpoint-chain_iptables-L_pre-cali-prefix.txt",
    ) else {
        return;
    };
    assert_eq!(errors(&rs), Vec::<String>::new());
    assert_eq!(rs.completeness, Completeness::Partial);
    assert_eq!(
        rs.tables[0]
            .chain("felix-to-7b262072819")
            .unwrap()
            .rules
            .len(),
        8
    );
}

/// HTML `<b>`/`</b>` kept from a page: stripped (never a target), no errors, whole table.
#[test]
fn html_emphasis_in_a_listing_is_stripped() {
    let Some(rs) =
        load("iptables-list/antrea_k8s-1.18.8_worker1_iptables-t-nat-L-n_with-HTML-b-tags.txt")
    else {
        return;
    };
    assert_eq!(errors(&rs), Vec::<String>::new());
    assert_eq!(rs.completeness, Completeness::Full);
    let t = &rs.tables[0];
    assert_eq!(&*t.name, "nat");
    assert_eq!(t.chains.len(), 31);
    assert!(t.chain("KUBE-SVC-EKL7ZEFK3VFJKKGJ").is_some());
    assert!(!t.chains.iter().any(|c| c.name.contains("<")));
}

/// A session of `iptables -t nat -L CHAIN -n | column -t` commands: one partial nat
/// table of the five chains shown, no "listed twice" error.
#[test]
fn column_t_session_of_single_chains_is_one_partial_nat_table() {
    let Some(rs) = load(
        "iptables-list/aks-kubenet_kube-proxy-iptables_nat-L-n-column-t_REPOST-EDITED-comment-hash-mismatch.txt",
    ) else {
        return;
    };
    assert_eq!(errors(&rs), Vec::<String>::new());
    assert_eq!(rs.completeness, Completeness::Partial);
    assert_eq!(tables(&rs), vec![("nat".to_string(), 5, 24)]);
}

/// A session mixing `iptables -vnL`, kubectl output and `iptables-save | grep nginx`:
/// the filter listing, the nat fragment, kubectl skipped with a note.
#[test]
fn mixed_session_reads_the_listing_and_the_grep_and_skips_kubectl() {
    let Some(rs) = load(
        "iptables-list/aks_k8s-1.26plus_node_iptables-vnL_wireserver-168.63.129.16-DROP_empty-services+grep-nginx.txt",
    ) else {
        return;
    };
    assert_eq!(errors(&rs), Vec::<String>::new());
    assert_eq!(rs.completeness, Completeness::Partial);
    assert_eq!(
        tables(&rs),
        vec![("filter".to_string(), 11, 17), ("nat".to_string(), 3, 5)]
    );
    assert!(
        rs.diagnostics
            .iter()
            .any(|d| d.message.contains("skipped") && d.text.starts_with("kubectl"))
    );
}

/// A session with shell aliases (`ipt CHAIN`) and ipset/ipvsadm output: the listings are
/// read, the rest skipped, nothing is an error.
#[test]
fn session_with_aliases_reads_the_listings() {
    let Some(rs) =
        load("iptables-list/kind-ipvs_k8s-guide-worker_iptables-nvL+ipset+ipvsadm_session.txt")
    else {
        return;
    };
    assert_eq!(errors(&rs), Vec::<String>::new());
    assert_eq!(rs.completeness, Completeness::Partial);
    assert!(chain_in(&rs, "nat", "KUBE-SERVICES"));
    assert!(chain_in(&rs, "nat", "KUBE-POSTROUTING"));
}

/// The kind session lists with shell aliases (`ipt X` for `iptables -t nat -nvL X`,
/// `ips`, `ipv`): every `ipt` listing is of one table, nat, inferred from all of them
/// (`ipt OUTPUT` alone could be filter); `ipset list` and `ipvsadm -ln` outputs are read
/// as the session's sets and IPVS services.
#[test]
fn alias_session_is_one_nat_table_with_its_ipsets_and_ipvs_services() {
    let Some(rs) =
        load("iptables-list/kind-ipvs_k8s-guide-worker_iptables-nvL+ipset+ipvsadm_session.txt")
    else {
        return;
    };
    assert_eq!(errors(&rs), Vec::<String>::new());
    let names: Vec<&str> = rs.tables.iter().map(|t| &*t.name).collect();
    assert_eq!(names, ["nat"], "no filter table guessed for `ipt OUTPUT`");
    assert!(chain_in(&rs, "nat", "OUTPUT"));
    assert!(chain_in(&rs, "nat", "KUBE-POSTROUTING"));
    let sets: Vec<(&str, usize)> = rs
        .ipsets
        .iter()
        .map(|s| (s.name.as_str(), s.members.len()))
        .collect();
    assert_eq!(sets, [("KUBE-CLUSTER-IP", 9), ("KUBE-LOOP-BACK", 2)]);
    assert_eq!(rs.ipvs.len(), 12);
    assert_eq!(rs.ipvs[0].location.line, 45, "session line numbers");
    assert!(
        !rs.diagnostics
            .iter()
            .any(|d| d.text.starts_with("ipv") || d.text.starts_with("ips")),
        "ipset and ipvsadm outputs are read, not skipped: {:?}",
        rs.diagnostics
    );
}
