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
