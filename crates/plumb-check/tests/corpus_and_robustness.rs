//! `plumb check` on the shared corpus (expected answers from its README) and on mutated
//! or random rulesets, which must never make a check panic.

mod common;

use plumb_check::{CheckInput, Origin, run};
use plumb_findings::{Finding, Status};
use plumb_kubeproxy::{
    GeneratorConfig, IptablesSaveOptions, KubeProxyRules, ProxierOptions, generate,
};
use plumb_ruleset::format::{Format, ParseOptions, parse_bytes};
use proptest::prelude::*;

fn check_text(text: &str, options: &ParseOptions, partial: bool) -> Vec<Finding> {
    let rs = parse_bytes(text.as_bytes(), options).expect("text").ruleset;
    run(CheckInput::new(&rs, Origin::File("f".into()), partial))
}

fn corpus(rel: &str, options: &ParseOptions, partial: bool) -> Option<Vec<Finding>> {
    let dir = common::corpus_dir()?;
    Some(check_text(&common::read(&dir.join(rel)), options, partial))
}

fn problem<'a>(f: &'a [Finding], id: &str) -> Option<&'a Finding> {
    f.iter().find(|x| x.id == id && x.status == Status::Problem)
}

#[test]
fn master_flannel_docker_node_has_no_structural_problems() {
    let Some(f) = corpus(
        "kube-proxy-iptables/real-nodes/master_flannel_docker_kubeproxy-iptables_3tables.iptables-save",
        &ParseOptions::default(),
        false,
    ) else {
        return;
    };
    // FORWARD DROP (Docker) is fine: FLANNEL-FWD accepts the pod CIDR.
    for id in [
        "dangling-reference",
        "forward-drop-blocks-pods",
        "kube-proxy-rules-missing",
        "kube-proxy-service-unreachable",
        "kube-proxy-chain-hash-mismatch",
        "cni-chains-missing",
        "stale-chain",
        "service-no-endpoints",
    ] {
        assert!(problem(&f, id).is_none(), "{id}: {f:#?}");
    }
}

#[test]
fn k3s_node_without_dns_endpoints_and_without_cni() {
    let Some(f) = corpus(
        "kube-proxy-iptables/real-nodes/k3s-node_iptables-save-c_with-counters_dns-no-endpoints.iptables-save",
        &ParseOptions::default(),
        false,
    ) else {
        return;
    };
    let ne = problem(&f, "service-no-endpoints").expect("no endpoints");
    assert!(ne.title.contains("kube-system/kube-dns:dns"));
    assert!(ne.title.contains("kube-system/metrics-server:https"));
    assert!(problem(&f, "forward-drop-blocks-pods").is_some());
    assert!(
        f.iter()
            .any(|x| x.id == "cni-chains-missing" && x.status == Status::Unknown)
    );
    assert!(problem(&f, "dangling-reference").is_none());
}

#[test]
fn partial_payloads_are_not_judged_as_full_dumps() {
    for step in [
        "TestSyncProxyRulesRepeated.step2-partial-add-svc3",
        "TestSyncProxyRulesRepeated.step3-partial-delete-svc2",
        "TestSyncProxyRulesRepeated.step4-partial-svc4-no-endpoints",
    ] {
        let Some(f) = corpus(
            &format!("kube-proxy-iptables/k8s-proxier-test/{step}.iptables-restore"),
            &ParseOptions::default(),
            true,
        ) else {
            return;
        };
        for id in [
            "dangling-reference",
            "stale-chain",
            "kube-proxy-rules-missing",
        ] {
            assert!(problem(&f, id).is_none(), "{step} {id}: {f:#?}");
        }
    }
}

#[test]
fn aks_calico_list_rules_has_no_dangling_jumps() {
    let options = ParseOptions {
        format: Some(Format::IptablesListRules),
        table: Some("filter".into()),
        ..ParseOptions::default()
    };
    let Some(f) = corpus(
        "other-cni/calico/aks-kubenet+calico_node_filter_iptables-list-rules.S.txt",
        &options,
        false,
    ) else {
        return;
    };
    assert!(problem(&f, "dangling-reference").is_none(), "{f:#?}");
}

#[test]
fn nft_kube_proxy_table_is_consistent() {
    let Some(f) = corpus(
        "kube-proxy-nftables/real-nodes/k3s-like_10.42-10.43_nft-list-table-ip-kube-proxy.nft",
        &ParseOptions::default(),
        false,
    ) else {
        return;
    };
    assert!(problem(&f, "kube-proxy-rules-missing").is_none(), "{f:#?}");
    assert!(
        problem(&f, "kube-proxy-chain-hash-mismatch").is_none(),
        "{f:#?}"
    );
    let ne = problem(&f, "service-no-endpoints").expect("otel collector");
    assert!(
        ne.title
            .contains("riset/otelcol-opentelemetry-collector:otlp")
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Mutated kube-proxy dumps (lines dropped, swapped, replaced with noise) and random
    /// text never make any check panic, as full dumps or as partial payloads.
    #[test]
    fn checks_never_panic(
        seed in any::<u64>(),
        edits in proptest::collection::vec((any::<usize>(), any::<usize>()), 0..10),
        noise in "[ -~\n]{0,160}",
        partial in any::<bool>(),
    ) {
        let cluster = generate(&GeneratorConfig { seed, ..GeneratorConfig::all_features(10, 2) }).unwrap();
        let text = KubeProxyRules::new(&cluster, &ProxierOptions::default())
            .to_iptables_save(&IptablesSaveOptions::default());
        let mut lines: Vec<&str> = text.lines().collect();
        for (a, b) in edits {
            if lines.is_empty() { break; }
            let i = a % lines.len();
            match b % 3 {
                0 => { lines.remove(i); }
                1 => { let j = b % lines.len(); lines.swap(i, j); }
                _ => lines[i] = noise.as_str(),
            }
        }
        let mutated = lines.join("\n");
        for t in [mutated.as_str(), noise.as_str()] {
            if let Ok(p) = parse_bytes(t.as_bytes(), &ParseOptions::default()) {
                let _ = run(CheckInput::new(&p.ruleset, Origin::Live { netns: None }, partial));
            }
        }
    }
}

/// nftables.conf's usual host firewall (policy drop on input and forward, ssh only).
const NFT_HOST_FIREWALL: &str = "table inet filter {\n\tchain input {\n\t\ttype filter hook input priority filter; policy drop;\n\t\tct state established,related accept\n\t\tiif \"lo\" accept\n\t\ttcp dport 22 accept\n\t}\n\tchain forward {\n\t\ttype filter hook forward priority filter; policy drop;\n\t}\n\tchain output {\n\t\ttype filter hook output priority filter; policy accept;\n\t}\n}\n";

#[test]
fn nft_host_firewall_on_a_kube_proxy_nftables_node_is_traced() {
    // A real kube-proxy nftables-mode table and no iptables at all: the host firewall is
    // an nft table too, and its policy drop stops what the node needs.
    let Some(dir) = common::corpus_dir() else {
        return;
    };
    let kube_proxy = common::read(&dir.join(
        "kube-proxy-nftables/real-nodes/k3s-like_10.42-10.43_nft-list-table-ip-kube-proxy.nft",
    ));
    // Alone, kube-proxy's own drops and rejects (no endpoints, unallocated ClusterIPs)
    // are intended: nothing is blocked.
    let f = check_text(&kube_proxy, &ParseOptions::default(), false);
    for id in ["input-drop-blocks-node", "forward-drop-blocks-pods"] {
        let x = f
            .iter()
            .find(|x| x.id == id)
            .unwrap_or_else(|| panic!("{id}: {f:#?}"));
        assert_eq!(x.status, Status::Ok, "{x:#?}");
    }
    let f = check_text(
        &format!("{kube_proxy}{NFT_HOST_FIREWALL}"),
        &ParseOptions::default(),
        false,
    );
    let inp = problem(&f, "input-drop-blocks-node").unwrap_or_else(|| panic!("{f:#?}"));
    assert!(inp.title.contains("10250/tcp"), "{}", inp.title);
    assert!(
        inp.title.contains("policy drop of inet filter input"),
        "{}",
        inp.title
    );
    let fwd = problem(&f, "forward-drop-blocks-pods").unwrap_or_else(|| panic!("{f:#?}"));
    // kube-proxy's `ip saddr != 10.42.0.0/16` names the pod network; pods reach the API
    // server through the ClusterIP, which the forward policy stops.
    assert!(fwd.title.contains("10.43.0.1:443"), "{}", fwd.title);
    // Accepting the pod network and the kubelet port before the policy opens both.
    let open = NFT_HOST_FIREWALL
        .replace(
            "tcp dport 22 accept\n",
            "tcp dport { 22, 10250, 6443, 9345 } accept\n",
        )
        .replace(
            "policy drop;\n\t}\n\tchain output",
            "policy drop;\n\t\tip saddr 10.42.0.0/16 accept\n\t\tip daddr 10.42.0.0/16 accept\n\t}\n\tchain output",
        );
    let f = check_text(
        &format!("{kube_proxy}{open}"),
        &ParseOptions::default(),
        false,
    );
    for id in ["input-drop-blocks-node", "forward-drop-blocks-pods"] {
        assert!(problem(&f, id).is_none(), "{id}: {f:#?}");
    }
}
