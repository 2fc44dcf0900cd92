//! Every check on a healthy kube-proxy node in nftables mode, generated from a model
//! (`plumb_kubeproxy::nft_transaction`, 300 service ports with NodePorts, load
//! balancers with source ranges, Local policies, affinity): the only problem is the
//! service ports the model gives no endpoints. A false problem on a healthy node is the
//! worst answer plumb can give.

use plumb_check::{CheckInput, Origin};
use plumb_findings::Status;
use plumb_kubeproxy::{GeneratorConfig, ProxierOptions, generate, nft_transaction};
use plumb_ruleset::format::{ParseOptions, parse_bytes};

#[test]
fn a_healthy_nftables_mode_node_has_only_its_services_without_endpoints_as_problems() {
    let cluster = generate(&GeneratorConfig::all_features(300, 4)).unwrap();
    let text = nft_transaction(&cluster, &ProxierOptions::default());
    // As kube-proxy's transaction and as a listing would have it: a whole ruleset.
    let rs = parse_bytes(text.as_bytes(), &ParseOptions::default())
        .unwrap()
        .ruleset;
    assert_eq!(rs.error_count(), 0, "{:?}", rs.diagnostics);
    let findings = plumb_check::run(CheckInput::new(&rs, Origin::File("g".into()), false));
    let problems: Vec<&str> = findings
        .iter()
        .filter(|f| f.status == Status::Problem)
        .map(|f| f.id.as_str())
        .collect();
    assert_eq!(problems, ["service-no-endpoints"], "{findings:#?}");
    let f = findings
        .iter()
        .find(|f| f.id == "service-no-endpoints")
        .unwrap();
    let empty: Vec<String> = cluster
        .services
        .iter()
        .filter(|s| s.endpoints.is_empty())
        .map(|s| s.name_string())
        .collect();
    assert!(empty.len() >= 20, "{}", empty.len());
    assert!(
        f.title.starts_with(&format!(
            "{} service port(s) have no endpoints",
            empty.len()
        )),
        "{}",
        f.title
    );
}

/// The answers kube-proxy's checks give when they find nothing claim only what was
/// judged: an nftables-mode node has no canary chains and no KUBE-SVC chains, and an
/// ok answer saying "canary chains are present" there was false.
#[test]
fn ok_answers_on_an_nftables_mode_node_do_not_claim_iptables_chains() {
    let cluster = generate(&GeneratorConfig::all_features(20, 2)).unwrap();
    let text = nft_transaction(&cluster, &ProxierOptions::default());
    let mut rs = parse_bytes(text.as_bytes(), &ParseOptions::default())
        .unwrap()
        .ruleset;
    // A transaction (`add ...`) reads as partial; written into an empty namespace it is
    // the whole ruleset, as a listing of that namespace would show it.
    rs.completeness = plumb_ruleset::Completeness::Full;
    let findings = plumb_check::run(CheckInput::new(&rs, Origin::File("g".into()), false));
    let answer = |id: &str| {
        let f = findings.iter().find(|f| f.id == id).expect(id);
        assert_eq!(f.status, Status::Ok, "{f:#?}");
        f.title.clone()
    };
    let canary = answer("kube-proxy-canary-missing");
    assert!(!canary.contains("present"), "{canary}");
    assert!(canary.contains("nftables mode"), "{canary}");
    let unreachable = answer("kube-proxy-service-unreachable");
    assert!(!unreachable.contains("is referenced"), "{unreachable}");
}
