//! Chain names in real `iptables-save` dumps and in kube-proxy's own unit-test payloads must
//! be exactly what `plumb_kubeproxy::chain_name` computes from the rule comments.

use std::path::{Path, PathBuf};

use plumb_kubeproxy::{chain_matches_endpoint, chain_matches_service_port, parse_chain_name};

fn corpus() -> PathBuf {
    Path::new("/work/shared/corpus/kube-proxy-iptables").to_path_buf()
}

/// Splits an iptables rule line into words, honouring double quotes (iptables-restore's own word rules, via plumb-ruleset's tokenizer).
fn words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let _ = plumb_ruleset::iptables::words::split(line, 0, &mut words);
    words.iter().map(|w| w.value(line).into_owned()).collect()
}

fn value_after<'a>(w: &'a [String], flag: &str) -> Option<&'a str> {
    w.iter()
        .position(|x| x == flag)
        .and_then(|i| w.get(i + 1))
        .map(String::as_str)
}

#[derive(Default, Debug)]
struct Checked {
    endpoints: usize,
    services: usize,
}

fn check_file(path: &Path) -> Checked {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let mut checked = Checked::default();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_start_matches(|c: char| {
            c == '[' || c.is_ascii_digit() || c == ':' || c == ']' || c == ' '
        });
        if !line.starts_with("-A ") {
            continue;
        }
        let w = words(line);
        let chain = &w[1];
        let (Some(comment), Some(proto)) = (value_after(&w, "--comment"), value_after(&w, "-p"))
        else {
            continue;
        };
        if chain.starts_with("KUBE-SEP-") {
            if let Some(ep) = value_after(&w, "--to-destination") {
                assert!(
                    chain_matches_endpoint(chain, comment, proto, ep),
                    "{}:{}: {chain} is not the endpoint chain of {comment} {proto} {ep}",
                    path.display(),
                    n + 1
                );
                checked.endpoints += 1;
            }
        } else if chain == "KUBE-SERVICES"
            && let (Some(spn), Some(target)) =
                (comment.strip_suffix(" cluster IP"), value_after(&w, "-j"))
            && parse_chain_name(target).is_some()
        {
            assert!(
                chain_matches_service_port(target, spn, proto),
                "{}:{}: {target} is not the service chain of {spn} {proto}",
                path.display(),
                n + 1
            );
            checked.services += 1;
        }
    }
    checked
}

#[test]
fn real_node_dumps() {
    let dir = corpus().join("real-nodes");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        plumb_testkit::skip(&format!("corpus {} not present", dir.display()));
        return;
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "iptables-save"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    for f in files {
        let c = check_file(&f);
        eprintln!("{}: {c:?}", f.display());
        assert!(
            c.endpoints > 0 && c.services > 0,
            "{}: nothing checked",
            f.display()
        );
    }
}

/// kube-dns chains of the flannel/docker node, computed from their comments.
#[test]
fn kube_dns_chains_of_flannel_node() {
    use plumb_kubeproxy::{ChainPrefix, endpoint_chain_name, service_port_chain_name};
    let path =
        corpus().join("real-nodes/master_flannel_docker_kubeproxy-iptables_3tables.iptables-save");
    let Ok(text) = std::fs::read_to_string(&path) else {
        plumb_testkit::skip(&format!("{} not present", path.display()));
        return;
    };
    for (spn, proto) in [
        ("kube-system/kube-dns:dns", "udp"),
        ("kube-system/kube-dns:dns-tcp", "tcp"),
        ("kube-system/kube-dns:metrics", "tcp"),
    ] {
        let chain = service_port_chain_name(ChainPrefix::Svc, spn, proto);
        assert!(
            text.contains(&format!(":{chain} - [0:0]")),
            "{chain} ({spn}) not declared"
        );
    }
    let sep = endpoint_chain_name("kube-system/kube-dns:metrics", "tcp", "10.244.0.5:9153");
    assert_eq!(sep, "KUBE-SEP-FVQSBIWR5JTECIVC");
}

#[test]
fn kube_proxy_unit_test_payloads() {
    let dir = corpus().join("k8s-proxier-test");
    let path = dir.join("TestOverallIPTablesRules.expected.iptables-restore");
    if !path.exists() {
        plumb_testkit::skip(&format!("{} not present", path.display()));
        return;
    }
    let c = check_file(&path);
    assert!(c.endpoints >= 6 && c.services >= 5, "{c:?}");
}
