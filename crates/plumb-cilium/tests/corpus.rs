//! Real Cilium outputs from the shared corpus, read as the corpus README says a correct
//! tool must read them.

use plumb_cilium::layout::L4Proto;
use plumb_cilium::{FrontendKind, Problem, lb_list, service_list};
use std::path::Path;

/// The lines of the code block that follows the line containing `command` in a
/// markdown or reStructuredText file (the command's output as the author pasted it).
fn output_after(text: &str, command: &str) -> String {
    let mut lines = text.lines().skip_while(|l| !l.contains(command));
    lines.next().expect("the command is quoted in the file");
    lines
        .take_while(|l| {
            !l.trim_start().starts_with("```") && !l.trim().is_empty() || l.trim() == "[...]"
        })
        .map(|l| format!("{}\n", l.strip_prefix("    ").unwrap_or(l)))
        .collect()
}

fn read(corpus: &Path, rel: &str) -> String {
    plumb_testkit::read(&corpus.join(rel))
}

#[test]
fn frontends_without_backends_in_a_real_bpf_listing_are_found() {
    let Some(corpus) = plumb_testkit::corpus_dir() else {
        return;
    };
    let text = read(
        &corpus,
        "cilium/real-outputs/tke-guide/connect-apiserver-operation-not-permitted.md",
    );
    let listing = output_after(&text, "-- cilium bpf lb list");
    let (frontends, errors) = lb_list::parse(&listing);
    assert!(errors.is_empty(), "{errors:?}\n{listing}");
    let seen: Vec<(String, Option<FrontendKind>)> = frontends
        .iter()
        .map(|f| (f.display_address(), f.kind))
        .collect();
    assert_eq!(
        seen,
        [
            (
                "0.0.0.0:30965/TCP".to_string(),
                Some(FrontendKind::NodePort)
            ),
            (
                "10.15.1.8:443/TCP".to_string(),
                Some(FrontendKind::LoadBalancer)
            ),
            (
                "192.168.60.179:443/TCP".to_string(),
                Some(FrontendKind::ClusterIP)
            ),
        ]
    );
    for f in &frontends {
        assert_eq!(f.problems, [Problem::NoBackends], "{}", f.display_address());
    }
    assert_eq!(frontends[2].options, ["non-routable"]);

    // The agent's own view says the same.
    let agent = output_after(&text, "-- cilium service list");
    let (services, errors) = service_list::parse(&agent);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(services.len(), 3);
    assert!(services.iter().all(|f| f.problems == [Problem::NoBackends]));
}

#[test]
fn the_kube_proxy_free_guide_s_service_list_is_four_frontends_of_two_backends() {
    let Some(corpus) = plumb_testkit::corpus_dir() else {
        return;
    };
    let text = read(&corpus, "cilium/docs/kubeproxy-free.rst");
    let listing = output_after(
        &text,
        "$ kubectl -n kube-system exec ds/cilium -- cilium-dbg service list",
    );
    let (frontends, errors) = service_list::parse(&listing);
    assert!(errors.is_empty(), "{errors:?}\n{listing}");
    let addresses: Vec<String> = frontends.iter().map(|f| f.display_address()).collect();
    assert_eq!(
        addresses,
        [
            "10.104.239.135:80/TCP",
            "0.0.0.0:31940/TCP",
            "192.168.178.29:31940/TCP",
            "172.16.0.29:31940/TCP"
        ]
    );
    for f in &frontends {
        let backends: Vec<String> = f
            .backends
            .iter()
            .map(|b| format!("{}:{}", b.address, b.port))
            .collect();
        assert_eq!(backends, ["10.217.0.107:80", "10.217.0.149:80"]);
        assert!(f.backends.iter().all(|b| b.proto == L4Proto::TCP));
        assert!(f.problems.is_empty());
    }
}
