//! Privileged: `plumb services --netns` and `plumb check --netns` on a real kernel.
//!
//! Loads a generated kube-proxy ruleset (kubelet bootstrap + kube-proxy full sync, with
//! `iptables-restore --noflush` exactly as kube-proxy does) into a private, empty network
//! namespace, reads it back through the `plumb` binary, then deletes the `kubernetes`
//! service's jump and chain the way a security agent reverting "tampering" does
//! and checks that the finding appears. The namespace is deleted on drop, also on panic.
//! Skips with a printed reason when not root or when `ip`/`iptables-restore` are missing.

use plumb_kubeproxy::{GeneratorConfig, KubeProxyRules, ProxierOptions, generate};
use plumb_os::netns::{Netns, can_create};
use std::process::Command;

fn skip_reason() -> Option<&'static str> {
    if !can_create() {
        return Some("not root or `ip` missing");
    }
    let has = |p: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {p}")])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !has("iptables-restore") || !has("iptables-nft-save") {
        return Some("iptables-restore / iptables-nft-save not installed");
    }
    None
}

fn plumb(args: &[&str]) -> (i32, serde_json::Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(args)
        .output()
        .expect("running plumb");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "plumb {args:?}: not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), json)
}

fn problems<'a>(v: &'a serde_json::Value, id: &str) -> Vec<&'a serde_json::Value> {
    v["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["id"] == id && f["status"] == "problem")
        .collect()
}

#[test]
fn services_and_check_in_a_network_namespace() {
    if let Some(why) = skip_reason() {
        plumb_testkit::skip(why);
        return;
    }
    let cluster = generate(&GeneratorConfig::all_features(40, 3)).expect("config");
    let rules = KubeProxyRules::new(&cluster, &ProxierOptions::default());
    let ns = Netns::create("plumb-t-check").expect("ip netns add");
    for payload in [rules.to_bootstrap_payload(), rules.to_restore_payload()] {
        let (ok, _, err) = ns
            .exec("iptables-restore", &["--noflush"], Some(&payload))
            .expect("iptables-restore");
        assert!(ok, "iptables-restore failed: {err}");
    }

    let (code, services) = plumb(&["services", "--netns", ns.name(), "--json"]);
    assert_eq!(code, 0, "{services:#}");
    let maps = services["maps"].as_array().expect("maps");
    assert_eq!(maps.len(), 1, "{services:#}");
    assert_eq!(maps[0]["backend"], "iptables-nft");
    let got = maps[0]["services"].as_array().unwrap();
    assert_eq!(got.len(), cluster.services.len());
    let k = got
        .iter()
        .find(|s| s["name"] == "default/kubernetes:https")
        .expect("kubernetes service");
    assert_eq!(k["cluster_ip"], "10.43.0.1");
    assert_eq!(k["endpoints"][0]["address"], "192.168.122.10:6443");
    assert_eq!(
        k["evidence"][0]["text"].as_str().unwrap(),
        "-A KUBE-SERVICES -d 10.43.0.1/32 -p tcp -m comment --comment \"default/kubernetes:https cluster IP\" -m tcp --dport 443 -j KUBE-SVC-NPX46M4PTMTKRN6Y"
    );

    let (code, healthy) = plumb(&["check", "--netns", ns.name(), "--json"]);
    for id in [
        "dangling-reference",
        "kube-proxy-rules-missing",
        "kube-proxy-service-unreachable",
        "kube-proxy-canary-missing",
        "kube-proxy-chain-hash-mismatch",
        "stale-chain",
        "duplicate-rule",
        "garbled-nat-target",
        "forward-drop-blocks-pods",
    ] {
        assert!(problems(&healthy, id).is_empty(), "{id}: {healthy:#}");
    }
    // Services without endpoints and "no CNI chains" are real findings on this node.
    assert!(code == 0 || code == 1);

    // The agent: delete the rule that jumps to the kubernetes service chain...
    let (_, listing, _) = ns
        .exec("iptables", &["-t", "nat", "-S", "KUBE-SERVICES"], None)
        .unwrap();
    let rule = listing
        .lines()
        .find(|l| l.contains("KUBE-SVC-NPX46M4PTMTKRN6Y"))
        .expect("capture rule")
        .replacen("-A ", "-D ", 1);
    let args: Vec<String> = shell_words(&rule);
    let mut full = vec!["-t".to_string(), "nat".to_string()];
    full.extend(args);
    let refs: Vec<&str> = full.iter().map(String::as_str).collect();
    let (ok, _, err) = ns.exec("iptables", &refs, None).unwrap();
    assert!(ok, "iptables -D: {err}");
    let (code, broken) = plumb(&["check", "--netns", ns.name(), "--json"]);
    assert_eq!(code, 1);
    let p = problems(&broken, "kube-proxy-service-unreachable");
    assert_eq!(p.len(), 1, "{broken:#}");
    assert_eq!(p[0]["severity"], "critical");
    assert!(
        p[0]["title"]
            .as_str()
            .unwrap()
            .contains("default/kubernetes:https (KUBE-SVC-NPX46M4PTMTKRN6Y)")
    );
    assert!(
        p[0]["evidence"][0]["source"]
            .as_str()
            .unwrap()
            .contains("iptables-nft-save")
    );

    // ...then the chain itself: its endpoint chain is left stale.
    for args in [
        ["-t", "nat", "-F", "KUBE-SVC-NPX46M4PTMTKRN6Y"],
        ["-t", "nat", "-X", "KUBE-SVC-NPX46M4PTMTKRN6Y"],
    ] {
        let (ok, _, err) = ns.exec("iptables", &args, None).unwrap();
        assert!(ok, "{args:?}: {err}");
    }
    let (_, gone) = plumb(&["check", "--netns", ns.name(), "--json"]);
    let stale = problems(&gone, "stale-chain");
    assert!(
        stale
            .iter()
            .any(|f| f["title"].as_str().unwrap().contains("KUBE-SEP-")),
        "{gone:#}"
    );
    let (_, services) = plumb(&["services", "--netns", ns.name(), "--json"]);
    let names: Vec<&str> = services["maps"][0]["services"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert!(!names.contains(&"default/kubernetes:https"));
}

/// Splits `iptables -S` output into words, honouring double quotes (iptables-restore's own word rules, via plumb-ruleset's tokenizer).
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let _ = plumb_ruleset::iptables::words::split(line, 0, &mut words);
    words.iter().map(|w| w.value(line).into_owned()).collect()
}
