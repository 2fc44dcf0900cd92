//! `plumb trace --flows` and `plumb trace --all-services` on generated kube-proxy
//! rulesets and the corpus: the JSON each flow and service gets, bad flow lines
//! named as FILE:LINE while the other flows are still traced, and one flow of the
//! batch agreeing with the single-flow `plumb trace --json`.

use plumb_kubeproxy::generated_save_text;
use plumb_testkit::Scratch;
use serde_json::Value;
use std::io::Write;
use std::process::{Command, Stdio};

fn plumb(args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run plumb");
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().expect("plumb output");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json_lines(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// 20 generated service ports, 2 endpoints each; `ns-0/svc-2:p8080`
/// (10.43.0.102, NodePort 30000) has none, so kube-proxy rejects it.
fn generated(dir: &Scratch) -> String {
    dir.write("rules", &generated_save_text(20, 2).unwrap());
    dir.path().join("rules").to_str().unwrap().to_string()
}

const FLOWS: &str = "# which of these flows break?\n\
src,dst,port,proto,in_iface,out_iface,from\n\
\n\
10.42.0.9,10.43.0.1,443,tcp,,,pod\n\
,10.43.0.102,8080,tcp,,,host\n\
  # a comment between flows\n\
,10.43.0.10:53,,udp,,,pod\n";

#[test]
fn flows_give_one_json_line_each_with_verdict_dnat_and_deciding_rule() {
    let dir = Scratch::new("batch-flows");
    let rules = generated(&dir);
    dir.write("flows.csv", FLOWS);
    let flows = dir.path().join("flows.csv");
    let (code, out, err) = plumb(
        &[
            "trace",
            "--ruleset",
            &rules,
            "--flows",
            flows.to_str().unwrap(),
            "--json",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 3, "{out}");

    let api = &lines[0];
    assert_eq!(api["line"], 4);
    assert_eq!(api["flow"]["src"], "10.42.0.9");
    assert_eq!(api["flow"]["dst"], "10.43.0.1");
    assert_eq!(api["flow"]["dport"], 443);
    assert_eq!(api["flow"]["from"], "pod");
    assert_eq!(api["verdict"], "ACCEPT");
    assert_eq!(api["dnat"], serde_json::json!(["192.168.122.10:6443"]));
    assert_eq!(api["service"], "default/kubernetes:https");
    assert_eq!(api["outcomes"][0]["endpoint"], "192.168.122.10:6443");
    assert!(
        api["path"].as_array().unwrap().iter().any(|p| p
            .as_str()
            .unwrap()
            .starts_with("PREROUTING nat KUBE-SERVICES #")),
        "{api}"
    );
    // Steps are the bulk of a trace; a batch line has them only with --verbose.
    assert!(api["outcomes"][0].get("steps").is_none());

    let rejected = &lines[1];
    assert_eq!(rejected["line"], 5);
    assert_eq!(rejected["verdict"], "REJECT");
    assert_eq!(rejected["dnat"], serde_json::json!([]));
    let by = &rejected["decided_by"];
    assert_eq!(by["table"], "filter");
    assert_eq!(by["chain"], "KUBE-SERVICES");
    assert_eq!(by["owner"], "kube-proxy");
    assert!(
        by["text"].as_str().unwrap().contains("has no endpoints"),
        "{by}"
    );

    let dns = &lines[2];
    assert_eq!(dns["line"], 7);
    assert_eq!(dns["flow"]["proto"], "udp");
    assert_eq!(dns["flow"]["dport"], 53);
    assert_eq!(dns["verdict"], "ACCEPT");
    assert_eq!(dns["dnat"].as_array().unwrap().len(), 2, "{dns}");
}

/// A batch line carries the single-flow report's outcomes (same fields, and with
/// --verbose the same steps), so scripts read both the same way.
#[test]
fn a_batch_line_agrees_with_the_single_flow_trace() {
    let dir = Scratch::new("batch-same");
    let rules = generated(&dir);
    let (code, single, err) = plumb(
        &[
            "trace",
            "--ruleset",
            &rules,
            "--dst",
            "10.43.0.10:53",
            "--proto",
            "udp",
            "--from",
            "pod",
            "--json",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let single: Value = serde_json::from_str(&single).unwrap();
    let (code, out, err) = plumb(
        &[
            "trace",
            "--ruleset",
            &rules,
            "--flows",
            "-",
            "--from",
            "pod",
            "--verbose",
            "-o",
            "json",
        ],
        Some("dst,port,proto\n10.43.0.10,53,udp\n"),
    );
    assert_eq!(code, 0, "{err}");
    let line = &json_lines(&out)[0];
    assert_eq!(line["outcomes"], single["outcomes"]);
    assert_eq!(line["truncated"], single["truncated"]);
    assert_eq!(line["incomplete"], single["incomplete"]);
}

/// Bad lines are named FILE:LINE with their text on stderr and skipped; the other
/// flows are traced, and the exit status is 2 so the output is not taken for the
/// whole answer.
#[test]
fn bad_flow_lines_are_reported_with_file_and_line_and_the_rest_traced() {
    let dir = Scratch::new("batch-bad");
    let rules = generated(&dir);
    dir.write(
        "flows.csv",
        "dst,port,proto,from\n\
         10.43.0.1,443,tcp,pod\n\
         10.43.0.300,443,tcp,pod\n\
         10.43.0.1,443,tcp\n\
         10.43.0.1,443,tcp,moon\n\
         10.43.0.10,53,udp,host\n",
    );
    let flows = dir.path().join("flows.csv");
    let flows = flows.to_str().unwrap();
    let (code, out, err) = plumb(
        &["trace", "--ruleset", &rules, "--flows", flows, "--json"],
        None,
    );
    assert_eq!(code, 2, "{err}");
    let lines = json_lines(&out);
    let traced: Vec<u64> = lines.iter().map(|l| l["line"].as_u64().unwrap()).collect();
    assert_eq!(traced, [2, 6]);
    assert!(
        err.contains(&format!("{flows}:3: dst \"10.43.0.300\"")),
        "{err}"
    );
    assert!(
        err.contains(&format!("{flows}:4: 3 fields where the header names 4")),
        "{err}"
    );
    assert!(err.contains(&format!("{flows}:5: from \"moon\"")), "{err}");
    assert!(err.contains("3 lines of"), "{err}");

    // A bad header stops at once: every later line would be misread.
    dir.write("noheader.csv", "10.43.0.1,443,tcp\n10.43.0.10,53,udp\n");
    let noheader = dir.path().join("noheader.csv");
    let (code, out, err) = plumb(
        &[
            "trace",
            "--ruleset",
            &rules,
            "--flows",
            noheader.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(code, 2);
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("noheader.csv:1: expected a header line"),
        "{err}"
    );

    // Not UTF-8: named, skipped.
    let (code, out, err) = plumb(
        &["trace", "--ruleset", &rules, "--flows", "-", "--json"],
        Some("dst,port\n10.43.0.1,443\n10.43.0.\u{1}\n"),
    );
    assert_eq!(code, 2, "{err}");
    assert_eq!(json_lines(&out).len(), 1);
    assert!(err.contains("<stdin>:3:"), "{err}");
}

/// The text mode: one line per flow with its verdict, DNAT and deciding rule.
#[test]
fn flows_text_mode_is_one_line_per_flow() {
    let dir = Scratch::new("batch-text");
    let rules = generated(&dir);
    let (code, out, err) = plumb(&["trace", "--ruleset", &rules, "--flows", "-"], Some(FLOWS));
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines[0].starts_with(
            "4: tcp 10.42.0.9 -> 10.43.0.1:443 from pod: ACCEPT  DNAT 192.168.122.10:6443"
        ),
        "{out}"
    );
    assert!(
        lines[1].contains("REJECT") && lines[1].contains("KUBE-SERVICES #1 (kube-proxy)"),
        "{out}"
    );
}

#[test]
fn all_services_names_the_broken_ones_and_why() {
    let dir = Scratch::new("batch-services");
    let rules = generated(&dir);
    let (code, out, err) = plumb(
        &["trace", "--ruleset", &rules, "--all-services", "--json"],
        None,
    );
    assert_eq!(code, 1, "a broken service is a problem: {err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["summary"]["services"], 20);
    assert_eq!(v["summary"]["broken"], 1);
    assert_eq!(v["summary"]["ok"], 19);
    let services = v["services"].as_array().unwrap();
    let broken: Vec<&Value> = services.iter().filter(|s| s["status"] != "ok").collect();
    assert_eq!(broken.len(), 1);
    let s = broken[0];
    assert_eq!(s["service"], "ns-0/svc-2:p8080");
    assert_eq!(s["status"], "broken");
    assert_eq!(s["endpoints"], 0);
    // ClusterIP and NodePort, each from a pod and from the host.
    let probes = s["probes"].as_array().unwrap();
    assert_eq!(probes.len(), 4, "{s}");
    for p in probes {
        assert_eq!(p["verdict"], "REJECT", "{p}");
        assert!(
            p["reason"]
                .as_str()
                .unwrap()
                .starts_with("no endpoints: kube-proxy rejects it"),
            "{p}"
        );
        assert_eq!(p["decided_by"]["owner"], "kube-proxy");
    }
    let kinds: Vec<&str> = probes.iter().map(|p| p["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["cluster-ip", "cluster-ip", "node-port", "node-port"]
    );
    // A healthy one: every probe DNATed to an endpoint.
    let api = services
        .iter()
        .find(|s| s["service"] == "default/kubernetes:https")
        .unwrap();
    for p in api["probes"].as_array().unwrap() {
        assert_eq!(p["dnat"], serde_json::json!(["192.168.122.10:6443"]), "{p}");
    }

    let (code, text, _) = plumb(&["trace", "--ruleset", &rules, "--all-services"], None);
    assert_eq!(code, 1);
    assert!(
        text.contains(
            "BROKEN        ns-0/svc-2:p8080 tcp 10.43.0.102:8080 nodePort 30000, 0 endpoints"
        ),
        "{text}"
    );
    assert!(
        text.trim_end()
            .lines()
            .last()
            .unwrap()
            .starts_with("1 of 20 services broken"),
        "{text}"
    );
}

/// A service whose chain leads nowhere (kube-proxy's KUBE-SVC chain emptied by
/// someone else) is accepted without DNAT: "nothing answers"; a foreign DROP rule is
/// named with its owner.
#[test]
fn all_services_reports_dnat_to_nothing_and_foreign_drops() {
    let dir = Scratch::new("batch-services-broken");
    let text = generated_save_text(20, 2).unwrap();
    // Empty the kubernetes service's chain: the ClusterIP jumps into a chain that
    // returns, so the packet is accepted to the virtual IP itself.
    let svc_chain = "KUBE-SVC-NPX46M4PTMTKRN6Y";
    let text: String = text
        .lines()
        .filter(|l| !l.starts_with(&format!("-A {svc_chain} ")))
        .map(|l| format!("{l}\n"))
        .collect();
    // A host firewall dropping DNS to a pod endpoint (after DNAT).
    let text = text.replacen(
        "-A FORWARD ",
        "-A FORWARD -p udp -m udp --dport 53 -j DROP\n-A FORWARD ",
        1,
    );
    dir.write("rules", &text);
    let rules = dir.path().join("rules");
    let (code, out, err) = plumb(
        &[
            "trace",
            "--ruleset",
            rules.to_str().unwrap(),
            "--all-services",
            "-o",
            "json-compact",
        ],
        None,
    );
    assert_eq!(code, 1, "{err}");
    assert_eq!(out.lines().count(), 1, "json-compact is one line");
    let v: Value = serde_json::from_str(&out).unwrap();
    let find = |name: &str| {
        v["services"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["service"] == name)
            .unwrap_or_else(|| panic!("{name} in {v}"))
            .clone()
    };
    let api = find("default/kubernetes:https");
    assert_eq!(api["status"], "broken", "{api}");
    assert!(
        api["reasons"][0]
            .as_str()
            .unwrap()
            .contains("accepted without DNAT: nothing answers at 10.43.0.1:443"),
        "{api}"
    );
    let dns = find("kube-system/kube-dns:dns");
    // From a pod the DNAT'd packet is forwarded and dropped; from the host it is not.
    let from_pod = &dns["probes"][0];
    assert_eq!(from_pod["from"], "pod");
    assert_eq!(from_pod["status"], "broken", "{dns}");
    assert_eq!(from_pod["decided_by"]["chain"], "FORWARD");
    assert_eq!(from_pod["decided_by"]["rule"], 1);
    assert!(
        from_pod["reason"]
            .as_str()
            .unwrap()
            .starts_with("dropped by FORWARD filter FORWARD #1"),
        "{from_pod}"
    );
    assert_eq!(dns["probes"][1]["status"], "ok", "{dns}");
    assert_eq!(dns["status"], "broken");
}

/// The corpus' k3s node whose DNS has no endpoints: its four endpoint-less
/// services are broken, and the API server is not.
#[test]
fn all_services_on_a_real_node_with_dns_without_endpoints() {
    let Some(corpus) = plumb_testkit::corpus_dir() else {
        return;
    };
    let file = corpus.join("kube-proxy-iptables/real-nodes/k3s-node_iptables-save-c_with-counters_dns-no-endpoints.iptables-save");
    let (code, out, err) = plumb(
        &[
            "trace",
            "--ruleset",
            file.to_str().unwrap(),
            "--all-services",
            "--json",
        ],
        None,
    );
    assert_eq!(code, 1, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let mut broken: Vec<&str> = v["services"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["status"] == "broken")
        .map(|s| s["service"].as_str().unwrap())
        .collect();
    broken.sort();
    assert_eq!(
        broken,
        [
            "kube-system/kube-dns:dns",
            "kube-system/kube-dns:dns-tcp",
            "kube-system/kube-dns:metrics",
            "kube-system/metrics-server:https"
        ]
    );
    let api = v["services"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["service"] == "default/kubernetes:https")
        .unwrap();
    assert_ne!(api["status"], "broken", "{api}");
    assert_eq!(v["summary"]["broken"], 4);
}

/// Thousands of flows (several chunks, traced on every core) come out one per flow,
/// in file order, each with its own answer.
#[test]
fn many_flows_come_out_in_file_order() {
    let dir = Scratch::new("batch-order");
    let rules = generated(&dir);
    let mut flows = String::from("dst,port,proto,from\n");
    for i in 0..5000 {
        if i % 2 == 0 {
            flows.push_str("10.43.0.1,443,tcp,pod\n");
        } else {
            flows.push_str("10.43.0.102,8080,tcp,host\n");
        }
    }
    let (code, out, err) = plumb(
        &["trace", "--ruleset", &rules, "--flows", "-", "--json"],
        Some(&flows),
    );
    assert_eq!(code, 0, "{err}");
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 5000);
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l["line"], i as u64 + 2);
        let want = if i % 2 == 0 { "ACCEPT" } else { "REJECT" };
        assert_eq!(l["verdict"], want, "line {}", i + 2);
    }
}

/// `-o json-compact` is the `--json` document on one line, for every command that
/// prints one (here `plumb services`, whose pretty JSON is 2.7x a big node's dump).
#[test]
fn json_compact_is_the_same_document_on_one_line() {
    let dir = Scratch::new("batch-compact");
    let rules = generated(&dir);
    let (code, pretty, err) = plumb(&["services", "--ruleset", &rules, "--json"], None);
    assert_eq!(code, 0, "{err}");
    let (code, compact, err) = plumb(
        &["services", "--ruleset", &rules, "-o", "json-compact"],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(compact.lines().count(), 1);
    assert!(
        compact.len() * 3 < pretty.len() * 2,
        "{} vs {}",
        compact.len(),
        pretty.len()
    );
    let a: Value = serde_json::from_str(&pretty).unwrap();
    let b: Value = serde_json::from_str(&compact).unwrap();
    assert_eq!(a, b);
    assert_eq!(b["maps"][0]["services"].as_array().unwrap().len(), 20);
}

/// The ClusterIP service ports (`IP`, `PROTO`, `PORT`) and the endpoint addresses
/// of kube-proxy's rules in an iptables-save text.
fn services_and_endpoints(save: &str) -> (Vec<(String, String, String)>, Vec<String>) {
    let (mut services, mut endpoints) = (Vec::new(), Vec::new());
    for line in save.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let after = |flag: &str| {
            words
                .iter()
                .position(|w| *w == flag)
                .and_then(|i| words.get(i + 1))
                .map(|w| w.trim_end_matches("/32").to_string())
        };
        if line.contains("-A KUBE-SERVICES ") && line.contains(" cluster IP\"") {
            if let (Some(ip), Some(proto), Some(port)) =
                (after("-d"), after("-p"), after("--dport"))
            {
                services.push((ip, proto, port));
            }
        } else if line.contains("-A KUBE-SEP-") && line.contains("-j KUBE-MARK-MASQ") {
            endpoints.extend(after("-s"));
        }
    }
    (services, endpoints)
}

/// More flows than one chunk (so source classes and the memo are used), to every
/// ClusterIP in rounds: from pods of many addresses, from the endpoints themselves
/// (hairpin: kube-proxy masquerades them), from outside with a source port and
/// interface, and from the host with the source unknown.
fn mixed_flows(save: &str) -> String {
    let (services, endpoints) = services_and_endpoints(save);
    assert!(!services.is_empty() && !endpoints.is_empty());
    let mut flows = String::from("src,dst,port,proto,in_iface,out_iface,from\n");
    let mut n = 0usize;
    while n < 3000 {
        for (i, (ip, proto, port)) in services.iter().enumerate() {
            let k = n + i;
            let ep = &endpoints[k % endpoints.len()];
            flows.push_str(&format!(
                "10.42.{}.{},{ip},{port},{proto},,,pod\n\
                 {ep},{ip},{port},{proto},,,pod\n\
                 203.0.113.{}:{},{ip},{port},{proto},eth0,,external\n\
                 ,{ip},{port},{proto},,,host\n",
                k % 7,
                k % 250 + 1,
                k % 200,
                40000 + k % 3,
            ));
            n += 4;
        }
    }
    flows
}

/// Line `line` of a batch as the batch printed it, and as `plumb trace --flows`
/// prints a file holding that flow alone at the same line (comments before it).
fn one_at_a_time(dir: &Scratch, rules: &str, flows: &str, line: usize, args: &[&str]) -> String {
    let lines: Vec<&str> = flows.lines().collect();
    let mut alone = format!("{}\n", lines[0]);
    for _ in 1..line - 1 {
        alone.push_str("#\n");
    }
    alone.push_str(lines[line - 1]);
    alone.push('\n');
    dir.write("alone.csv", &alone);
    let path = dir.path().join("alone.csv");
    let mut all = vec![
        "trace",
        "--ruleset",
        rules,
        "--flows",
        path.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    let (code, out, err) = plumb(&all, None);
    assert!(code == 0 || code == 1, "{err}");
    out
}

/// The batch (traces shared by flows the rules cannot tell apart) prints exactly
/// what tracing each flow alone prints, line for line, on a ruleset.
fn batch_equals_one_flow_at_a_time(dir: &Scratch, rules: &str, save: &str) {
    let flows = mixed_flows(save);
    dir.write("flows.csv", &flows);
    let path = dir.path().join("flows.csv");
    for args in [&["--json"][..], &[][..]] {
        let mut all = vec![
            "trace",
            "--ruleset",
            rules,
            "--flows",
            path.to_str().unwrap(),
        ];
        all.extend_from_slice(args);
        let (code, out, err) = plumb(&all, None);
        assert!(code == 0 || code == 1, "{err}");
        let batch: Vec<&str> = out.lines().collect();
        let total = flows.lines().count() - 1;
        assert_eq!(batch.len(), total);
        // Every 4 flows of a round are the four kinds of source: sample lines of
        // each kind, early (traced) and late (from the memo).
        let mut sample: Vec<usize> = (0..total).step_by(total / 40).collect();
        sample.extend((total - 8..total).chain(1..8));
        for i in sample {
            let alone = one_at_a_time(dir, rules, &flows, i + 2, args);
            assert_eq!(alone.trim_end(), batch[i], "line {} {args:?}", i + 2);
        }
    }
}

#[test]
fn batch_output_equals_one_flow_at_a_time_on_a_generated_ruleset() {
    let dir = Scratch::new("batch-equal-gen");
    let save = generated_save_text(60, 5).unwrap();
    dir.write("rules", &save);
    let rules = dir.path().join("rules");
    batch_equals_one_flow_at_a_time(&dir, rules.to_str().unwrap(), &save);
}

#[test]
fn batch_output_equals_one_flow_at_a_time_on_real_nodes() {
    let Some(corpus) = plumb_testkit::corpus_dir() else {
        return;
    };
    for name in [
        "k3s-node_iptables-save-c_with-counters_dns-no-endpoints.iptables-save",
        "opkhs2026_kubeadm-1.32_flannel_control-plane_iptables-nft-1.8.10.iptables-save",
    ] {
        let file = corpus.join("kube-proxy-iptables/real-nodes").join(name);
        let save = std::fs::read_to_string(&file).unwrap();
        let dir = Scratch::new("batch-equal-real");
        batch_equals_one_flow_at_a_time(&dir, file.to_str().unwrap(), &save);
    }
}

/// kube-proxy's nftables mode serves NodePorts only on the addresses of its set
/// `nodeport-ips` (the node IP): on a generated node (200 service ports, some NodePorts,
/// Local policies, affinity, source ranges) exactly the service ports the model says
/// cannot be reached are broken (or conditional). Regression: NodePorts were traced to a stand-in address
/// outside that set, found no service, and every NodePort service was called broken.
#[test]
fn all_services_on_nftables_mode_breaks_only_the_services_without_endpoints() {
    use plumb_kubeproxy::{GeneratorConfig, ProxierOptions, generate, nft_transaction};
    let cluster = generate(&GeneratorConfig {
        services: 200,
        endpoints_per_service: 3,
        nodeport_fraction: 0.3,
        ..GeneratorConfig::all_features(200, 3)
    })
    .unwrap();
    let dir = Scratch::new("batch-services-nft");
    dir.write(
        "rules.nft",
        &nft_transaction(&cluster, &ProxierOptions::default()),
    );
    let rules = dir.path().join("rules.nft");
    let (code, out, err) = plumb(
        &[
            "trace",
            "--ruleset",
            rules.to_str().unwrap(),
            "--all-services",
            "--json",
        ],
        None,
    );
    assert_eq!(code, 1, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["node_address"], "192.168.122.10");
    let mut broken: Vec<String> = v["services"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["status"] != "ok")
        .map(|s| format!("{} {}", s["service"].as_str().unwrap(), s["status"]))
        .collect();
    broken.sort();
    // Broken: no endpoints (REJECT), or internalTrafficPolicy Local and none on this
    // node (the ClusterIP is dropped). Conditional: externalTrafficPolicy Local and none
    // on this node: the NodePort drops what does not come from a pod or the node.
    let mut want: Vec<String> = cluster
        .services
        .iter()
        .filter_map(|s| {
            let no_local = !s.endpoints.iter().any(|e| e.is_local);
            let status = if s.endpoints.is_empty() || (s.internal_policy_local && no_local) {
                "broken"
            } else if s.external_policy_local() && s.node_port.is_some() && no_local {
                "conditional"
            } else {
                return None;
            };
            Some(format!("{} \"{status}\"", s.name_string()))
        })
        .collect();
    want.sort();
    assert!(
        want.iter().filter(|w| w.ends_with("\"broken\"")).count() >= 10,
        "{want:?}"
    );
    assert!(
        want.iter().any(|w| w.ends_with("\"conditional\"")),
        "{want:?}"
    );
    assert!(
        cluster
            .services
            .iter()
            .filter(|s| !s.endpoints.is_empty() && s.node_port.is_some())
            .count()
            >= 20
    );
    assert_eq!(broken, want);
}

/// A dump without the filter table cannot say whether any service is reachable: the
/// command says which table is missing and writes no service, in text and JSON (the
/// report is written while the services are traced, so this is decided first).
#[test]
fn all_services_without_the_filter_table_writes_nothing_and_says_why() {
    let dir = Scratch::new("batch-services-nofilter");
    let full = generated_save_text(5, 2).unwrap();
    let mut kept = String::new();
    let mut in_filter = false;
    for line in full.lines() {
        if line.starts_with('*') {
            in_filter = line == "*filter";
        }
        if !in_filter {
            kept.push_str(line);
            kept.push('\n');
        }
        if line == "COMMIT" {
            in_filter = false;
        }
    }
    assert!(kept.contains("*nat") && !kept.contains("*filter"));
    dir.write("nat-only", &kept);
    let rules = dir.path().join("nat-only");
    for json in [false, true] {
        let mut args = vec![
            "trace",
            "--ruleset",
            rules.to_str().unwrap(),
            "--all-services",
        ];
        if json {
            args.push("--json");
        }
        let (code, out, err) = plumb(&args, None);
        assert_eq!(code, 2, "{err}");
        assert!(out.is_empty(), "nothing written: {out}");
        assert!(
            err.contains("lacks the table a trace needs: ip filter"),
            "{err}"
        );
    }
}
