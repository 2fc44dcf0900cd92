//! Cilium's own state as input. A sysdump layout is built from the corpus's real
//! outputs (the kube-proxy-free guide's `cilium-dbg status` and `service list`, a real
//! Cilium node's iptables-save) with the file names cilium-cli and bugtool use
//! (`cilium-sysdump-<time>/cilium-bugtool-<pod>-<time>.tar.gz` holding
//! `cilium-bugtool-*/cmd/<command>.md` in bugtool's markdown, `cniconf-<pod>-<file>-<time>.txt`),
//! packed with the real `tar` and `zip`; `plumb doctor --bundle`, `plumb cilium verify
//! --bundle` and `plumb cilium services --bundle` read it as a directory and as a zip.
//! On a live node a fake `cilium-dbg` on PATH (no agent runs here) prints the agent
//! API's JSON for the same Services; doctor reads it, and a hung one is cut off.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const TS: &str = "20260101-120000";
const POD: &str = "cilium-x7k2p";

/// The lines of the code block after the line holding `command` in an .rst file.
fn output_after(text: &str, command: &str) -> String {
    text.lines()
        .skip_while(|l| !l.contains(command))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| format!("{}\n", l.strip_prefix("    ").unwrap_or(l)))
        .collect()
}

/// bugtool's markdown form of a command's output.
fn markdown(command: &str, output: &str) -> String {
    format!("# {command}\n\n```\n{output}\n```\n")
}

struct Corpus {
    endpoints: String,
    status: String,
    service_list: String,
    iptables: String,
}

fn corpus() -> Option<Corpus> {
    let c = plumb_testkit::corpus_dir()?;
    let guide = plumb_testkit::read(&c.join("cilium/docs/kubeproxy-free.rst"));
    let demo = plumb_testkit::read(&c.join("policy/cilium-docs/gsg_sw_demo.rst"));
    Some(Corpus {
        endpoints: output_after(&demo, "exec cilium-5ngzd -- cilium-dbg endpoint list"),
        status: output_after(&guide, "cilium-dbg status | grep KubeProxyReplacement"),
        service_list: output_after(&guide, "-- cilium-dbg service list"),
        iptables: plumb_testkit::read(&c.join(
            "real-world/iptables-save/cce-cilium-kernel-4.19_kube-proxy-ipvs_iptables-save_AUTHOR-ANNOTATED-zh-comments_no-COMMIT.iptables-save",
        )),
    })
}

fn run(dir: &Path, program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Writes the sysdump directory under `scratch` and returns (directory, zip).
fn sysdump(scratch: &plumb_testkit::Scratch, c: &Corpus) -> (PathBuf, PathBuf) {
    let name = format!("cilium-sysdump-{TS}");
    let bugtool = "cilium-bugtool-20260101-120003-612938512";
    for (file, command, output) in [
        (
            "cilium-dbg-status---verbose.md",
            "cilium-dbg status --verbose",
            c.status.as_str(),
        ),
        (
            "cilium-dbg-service-list.md",
            "cilium-dbg service list",
            c.service_list.as_str(),
        ),
        (
            "cilium-dbg-endpoint-list.md",
            "cilium-dbg endpoint list",
            c.endpoints.as_str(),
        ),
        (
            "iptables-save--c.md",
            "iptables-save -c",
            c.iptables.as_str(),
        ),
    ] {
        scratch.write(
            &format!("work/{bugtool}/cmd/{file}"),
            &markdown(command, output),
        );
    }
    scratch.write(&format!("{name}/k8s-version-{TS}.txt"), "v1.31.4\n");
    scratch.write(
        &format!("{name}/cniconf-{POD}-05-cilium.conflist-{TS}.txt"),
        "{\"cniVersion\": \"0.3.1\", \"name\": \"cilium\", \"plugins\": [{\"type\": \"cilium-cni\"}]}\n",
    );
    let tarball = scratch
        .path()
        .join(&name)
        .join(format!("cilium-bugtool-{POD}-{TS}.tar.gz"));
    run(
        &scratch.path().join("work"),
        "tar",
        &["czf", &tarball.to_string_lossy(), bugtool],
    );
    let zip = scratch.path().join(format!("{name}.zip"));
    run(
        scratch.path(),
        "zip",
        &["-qr", &zip.to_string_lossy(), &name],
    );
    (scratch.path().join(name), zip)
}

fn plumb_json(args: &[&str], path: Option<&str>) -> (i32, Value) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_plumb"));
    cmd.args(args);
    if let Some(p) = path {
        cmd.env("PATH", p);
    }
    let out = cmd.output().expect("plumb runs");
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "plumb {args:?}: {e}\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), v)
}

fn finding<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == id)
        .unwrap_or_else(|| panic!("no {id} in {report:#}"))
}

#[test]
fn a_sysdump_built_from_real_outputs_is_read_as_a_directory_and_as_a_zip() {
    let Some(c) = corpus() else {
        return;
    };
    if which("zip").is_none() || which("tar").is_none() {
        plumb_testkit::skip("the zip or tar tool is not installed");
        return;
    }
    let scratch = plumb_testkit::Scratch::new("sysdump");
    let (dir, zip) = sysdump(&scratch, &c);
    for input in [&dir, &zip] {
        let input = input.to_string_lossy();
        let (_, report) = plumb_json(&["doctor", "--bundle", &input, "--json"], None);
        assert_eq!(report["source"]["kind"], "cilium-sysdump", "{report:#}");
        let dataplane = finding(&report, "cilium-service-dataplane");
        assert_eq!(dataplane["status"], "ok", "{dataplane:#}");
        let title = dataplane["title"].as_str().unwrap();
        assert!(
            title.contains("KubeProxyReplacement True") && title.contains("4 frontends"),
            "{title}"
        );
        // KPR is on, but this real node's dump still holds kube-proxy's (IPVS) chains.
        assert_eq!(
            finding(&report, "kube-proxy-rules-remain")["status"],
            "problem"
        );
        // The agent's view of /etc/cni/net.d.
        assert_eq!(finding(&report, "old-cni-config")["status"], "ok");
        // The guide's endpoints are all ready.
        let endpoints = finding(&report, "cilium-endpoints-not-ready");
        assert_eq!(endpoints["status"], "ok", "{endpoints:#}");
        assert!(
            endpoints["title"]
                .as_str()
                .unwrap()
                .starts_with("8 endpoints"),
            "{endpoints:#}"
        );

        let (code, verify) = plumb_json(&["cilium", "verify", "--bundle", &input, "--json"], None);
        assert_eq!(verify["verdict"], "incomplete", "{verify:#}");
        assert_eq!(code, 1);
        assert_eq!(verify["kube_proxy_replacement"], "True");
        assert_eq!(verify["lb"]["mode"], "cilium-service-list");

        let (code, services) =
            plumb_json(&["cilium", "services", "--bundle", &input, "--json"], None);
        assert_eq!(code, 0, "{services:#}");
        let f = services["frontends"].as_array().unwrap();
        assert_eq!(f.len(), 4, "{services:#}");
        assert!(
            f.iter()
                .all(|f| f["backends"].as_array().unwrap().len() == 2)
        );
        assert!(
            services["source"]
                .as_str()
                .unwrap()
                .contains("cmd/cilium-dbg-service-list.md"),
            "{services:#}"
        );
    }
}

/// A two-node sysdump: agent `cilium-aaaa1` on kind-worker with the Cilium docs' two
/// exported DROPPED flows, agent `cilium-bbbb2` on 10.10.21.166 with TKE's three
/// FORWARDED flows (the corpus's real Hubble exports), each with its own bugtool
/// archive (`uname -a` naming the node). Returns (directory, zip).
fn two_node_sysdump(scratch: &plumb_testkit::Scratch, c: &Corpus) -> (PathBuf, PathBuf) {
    let hubble = plumb_testkit::corpus_dir()
        .unwrap()
        .join("cilium/real-outputs/hubble");
    let name = format!("cilium-sysdump-{TS}");
    for (pod, host, flows, random) in [
        (
            "cilium-aaaa1",
            "kind-worker",
            "cilium-docs_export-example-flows.jsonl",
            "111",
        ),
        (
            "cilium-bbbb2",
            "10.10.21.166",
            "tke-1.19.1_exported-flows.jsonl",
            "222",
        ),
    ] {
        let bugtool = format!("cilium-bugtool-20260101-120003-{random}");
        for (file, command, output) in [
            (
                "cilium-dbg-status---verbose.md",
                "cilium-dbg status --verbose",
                c.status.clone(),
            ),
            (
                "cilium-dbg-service-list.md",
                "cilium-dbg service list",
                c.service_list.clone(),
            ),
            (
                "uname--a.md",
                "uname -a",
                format!("Linux {host} 6.8.0-1015 #16-Ubuntu SMP x86_64 GNU/Linux"),
            ),
        ] {
            scratch.write(
                &format!("work-{pod}/{bugtool}/cmd/{file}"),
                &markdown(command, &output),
            );
        }
        scratch.write(
            &format!("{name}/hubble-flows-{pod}-{TS}.json"),
            &plumb_testkit::read(&hubble.join(flows)),
        );
        let tarball = scratch
            .path()
            .join(&name)
            .join(format!("cilium-bugtool-{pod}-{TS}.tar.gz"));
        run(
            &scratch.path().join(format!("work-{pod}")),
            "tar",
            &["czf", &tarball.to_string_lossy(), &bugtool],
        );
    }
    scratch.write(&format!("{name}/k8s-version-{TS}.txt"), "v1.31.4\n");
    let zip = scratch.path().join(format!("{name}.zip"));
    run(
        scratch.path(),
        "zip",
        &["-qr", &zip.to_string_lossy(), &name],
    );
    (scratch.path().join(name), zip)
}

fn plumb_out(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(args)
        .output()
        .expect("plumb runs")
}

#[test]
fn every_node_of_a_sysdump_is_read_and_hubble_drops_are_information() {
    let Some(c) = corpus() else {
        return;
    };
    if which("zip").is_none() || which("tar").is_none() {
        plumb_testkit::skip("the zip or tar tool is not installed");
        return;
    }
    let scratch = plumb_testkit::Scratch::new("sysdump-two-nodes");
    let (dir, zip) = two_node_sysdump(&scratch, &c);
    for input in [&dir, &zip] {
        let input = input.to_string_lossy();
        // Without --node: the first agent's node, and the other one named.
        let (_, report) = plumb_json(&["doctor", "--bundle", &input, "--json"], None);
        let source = &report["source"];
        assert!(
            source["description"]
                .as_str()
                .unwrap()
                .ends_with("node kind-worker (agent pod cilium-aaaa1)"),
            "{source:#}"
        );
        let notes = serde_json::to_string(&source["notes"]).unwrap();
        assert!(
            notes.contains("the others: node 10.10.21.166 (agent pod cilium-bbbb2)")
                && notes.contains("--node NAME"),
            "{notes}"
        );
        // Hubble's drops: information, grouped by reason and destination, never the
        // root cause.
        let drops = finding(&report, "cilium-hubble-drops");
        assert_eq!(drops["status"], "problem", "{drops:#}");
        assert_eq!(drops["severity"], "info", "{drops:#}");
        let title = drops["title"].as_str().unwrap();
        assert!(
            title.contains("2 of 2 flows dropped on kind-kind/kind-worker"),
            "{title}"
        );
        let evidence = serde_json::to_string(&drops["evidence"]).unwrap();
        for group in [
            "1 x POLICY_DENIED -> default/deathstar-7848d6c4d5-th9v2:80/TCP",
            "1 x INVALID_SOURCE_IP -> ff02::2 ICMPv6 type 133",
            "from default/xwing",
        ] {
            assert!(evidence.contains(group), "{group}: {evidence}");
        }
        assert_ne!(report["root_cause"], "cilium-hubble-drops", "{report:#}");

        // --node by node name, and by agent pod name: the other node, its own flows.
        for name in ["10.10.21.166", "cilium-bbbb2"] {
            let (_, other) = plumb_json(
                &["doctor", "--bundle", &input, "--node", name, "--json"],
                None,
            );
            assert!(
                other["source"]["description"]
                    .as_str()
                    .unwrap()
                    .ends_with("node 10.10.21.166 (agent pod cilium-bbbb2)"),
                "{other:#}"
            );
            let flows = finding(&other, "cilium-hubble-drops");
            assert_eq!(flows["status"], "ok", "{flows:#}");
            // TKE's exporter wrote flows of two nodes into the file; both are named.
            let title = flows["title"].as_str().unwrap();
            assert!(
                title.contains("3 flows on 10.10.21.166, 10.10.21.241, none dropped"),
                "{flows:#}"
            );
        }
        // A name the sysdump does not hold: an error naming what it holds.
        let out = plumb_out(&["doctor", "--bundle", &input, "--node", "nope", "--json"]);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("no node or agent pod named nope")
                && err.contains("node kind-worker (agent pod cilium-aaaa1)")
                && err.contains("node 10.10.21.166 (agent pod cilium-bbbb2)"),
            "{err}"
        );

        // verify: which node, the others, and Hubble as information beside the verdict.
        let (code, verify) = plumb_json(&["cilium", "verify", "--bundle", &input, "--json"], None);
        assert_eq!(
            verify["sysdump"]["read"]["node"], "kind-worker",
            "{verify:#}"
        );
        assert_eq!(verify["sysdump"]["others"][0]["pod"], "cilium-bbbb2");
        assert_eq!(verify["hubble"]["flows"], 2, "{verify:#}");
        assert_eq!(verify["hubble"]["dropped"], 2);
        assert_eq!(verify["hubble"]["groups"][0]["reason"], "INVALID_SOURCE_IP");
        assert!(
            !serde_json::to_string(&verify["findings"])
                .unwrap()
                .contains("hubble"),
            "flows are no finding of verify: {verify:#}"
        );
        // This sysdump holds no iptables dump: verify cannot say kube-proxy is gone.
        assert_eq!(verify["verdict"], "incomplete", "{verify:#}");
        assert_eq!(code, 1);
        let text = plumb_out(&["cilium", "verify", "--bundle", &input]);
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(
            text.contains("sysdump: read node kind-worker (agent pod cilium-aaaa1); the sysdump's other nodes: node 10.10.21.166")
                && text.contains("Hubble flows (information, not part of the verdict): 2 flows")
                && text.contains("1 x POLICY_DENIED -> default/deathstar-7848d6c4d5-th9v2:80/TCP"),
            "{text}"
        );
        let (code, services) = plumb_json(
            &[
                "cilium",
                "services",
                "--bundle",
                &input,
                "--node",
                "10.10.21.166",
                "--json",
            ],
            None,
        );
        assert_eq!(code, 0, "{services:#}");
        assert_eq!(services["sysdump"]["read"]["pod"], "cilium-bbbb2");
        assert_eq!(services["frontends"].as_array().unwrap().len(), 4);
    }
    // --node means a sysdump's node: another bundle holds one node.
    let plain = scratch.path().join("plain");
    std::fs::create_dir_all(plain.join("sos_commands")).unwrap();
    let out = plumb_out(&[
        "doctor",
        "--bundle",
        &plain.to_string_lossy(),
        "--node",
        "a",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("this bundle holds one node"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `cilium verify --bundle SYSDUMP --before DUMP`: kube-proxy's Services from before
/// the migration against the sysdump's `cilium-dbg bpf lb list`, as a directory and a
/// zip; a Service missing from Cilium's listing is named.
#[test]
fn verify_bundle_before_matches_kube_proxy_s_services_against_the_sysdump() {
    use plumb_kubeproxy::{
        GeneratorConfig, IptablesSaveOptions, KubeProxyRules, ProxierOptions, generate,
    };
    let Some(c) = corpus() else {
        return;
    };
    if which("zip").is_none() {
        plumb_testkit::skip("the zip tool is not installed");
        return;
    }
    let cluster = generate(&GeneratorConfig {
        services: 3,
        ..Default::default()
    })
    .unwrap();
    let dump = KubeProxyRules::new(&cluster, &ProxierOptions::default())
        .to_iptables_save(&IptablesSaveOptions::default());
    let rs = plumb_ruleset::format::parse_bytes(dump.as_bytes(), &Default::default())
        .unwrap()
        .ruleset;
    // Cilium's `bpf lb list` of the same Services: each ClusterIP with kube-proxy's
    // endpoints (slot 0 the frontend, then one row per backend).
    let mut rows: Vec<(String, String)> = Vec::new();
    for (i, s) in plumb_kubeproxy::recover::recover(&rs)
        .iter()
        .flat_map(|m| &m.services)
        .filter(|s| s.cluster_ip.is_some())
        .enumerate()
    {
        let front = format!(
            "{}:{}/{}",
            s.cluster_ip.unwrap(),
            s.port.unwrap(),
            s.protocol.as_deref().unwrap_or("tcp").to_uppercase()
        );
        rows.push((
            front.clone(),
            format!("{front} (0)   0.0.0.0:0 ({}) (0) [ClusterIP]\n", i + 1),
        ));
        for (slot, e) in s.endpoints.iter().enumerate() {
            rows.push((
                front.clone(),
                format!(
                    "{front} ({})   {}/TCP ({}) ({})\n",
                    slot + 1,
                    e.address().unwrap(),
                    i + 1,
                    slot + 1
                ),
            ));
        }
    }
    let scratch = plumb_testkit::Scratch::new("sysdump-before");
    scratch.write("before.save", &dump);
    let before = scratch.path().join("before.save").display().to_string();
    let build = |tag: &str, without: Option<&str>| -> [PathBuf; 2] {
        let name = format!("{tag}/cilium-sysdump-{TS}");
        let listing: String = rows
            .iter()
            .filter(|(f, _)| Some(f.as_str()) != without)
            .map(|(_, r)| r.as_str())
            .collect();
        let bugtool = format!("{name}/cilium-bugtool-{POD}-{TS}/cilium-bugtool-20260101-120003-1");
        for (file, command, output) in [
            (
                "cilium-dbg-status---verbose.md",
                "cilium-dbg status --verbose",
                c.status.as_str(),
            ),
            (
                "cilium-dbg-bpf-lb-list.md",
                "cilium-dbg bpf lb list",
                &listing,
            ),
            (
                "iptables-save--c.md",
                "iptables-save -c",
                "*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n",
            ),
        ] {
            scratch.write(&format!("{bugtool}/cmd/{file}"), &markdown(command, output));
        }
        let zip = scratch.path().join(format!("{tag}.zip"));
        run(
            &scratch.path().join(tag),
            "zip",
            &[
                "-qr",
                &zip.to_string_lossy(),
                &format!("cilium-sysdump-{TS}"),
            ],
        );
        [scratch.path().join(&name), zip]
    };
    for input in build("all", None) {
        let input = input.to_string_lossy();
        let (code, v) = plumb_json(
            &[
                "cilium", "verify", "--bundle", &input, "--before", &before, "--json",
            ],
            None,
        );
        assert_eq!(v["lb"]["mode"], "cilium-bpf-lb-list", "{v:#}");
        let missing = finding(&v, "cilium-migration-missing-services");
        assert_eq!(missing["status"], "ok", "{missing:#}");
        assert_eq!(v["verdict"], "migrated", "{v:#}");
        assert_eq!(code, 0);
    }
    let gone = rows[0].0.clone();
    for input in build("fewer", Some(&gone)) {
        let input = input.to_string_lossy();
        let (code, v) = plumb_json(
            &[
                "cilium", "verify", "--bundle", &input, "--before", &before, "--json",
            ],
            None,
        );
        let missing = finding(&v, "cilium-migration-missing-services");
        assert_eq!(missing["status"], "problem", "{missing:#}");
        let ip = gone.split(':').next().unwrap();
        assert!(
            serde_json::to_string(&missing["evidence"])
                .unwrap()
                .contains(ip),
            "{missing:#}"
        );
        assert_eq!(v["verdict"], "incomplete");
        assert_eq!(code, 1);
    }
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(program))
            .find(|p| p.is_file())
    })
}

/// The agent API's JSON for the guide's Services (`cilium-dbg service list -o json`).
fn service_list_json(listing: &str) -> String {
    let (frontends, errors) = plumb_cilium::service_list::parse(listing);
    assert!(errors.is_empty(), "{errors:?}");
    let services: Vec<Value> = frontends
        .iter()
        .enumerate()
        .map(|(i, f)| {
            serde_json::json!({
                "spec": {
                    "id": i + 4,
                    "frontend-address": {"ip": f.address.to_string(), "port": f.port, "protocol": f.proto.to_string(), "scope": "external"},
                    "backend-addresses": f.backends.iter().map(|b| serde_json::json!({
                        "ip": b.address.to_string(), "port": b.port, "protocol": b.proto.to_string(), "state": "active", "weight": 100
                    })).collect::<Vec<_>>(),
                    "flags": {"type": f.kind.map_or("ClusterIP", |k| k.name()), "trafficPolicy": "Cluster", "name": "echo", "namespace": "default"}
                },
                "status": {"realized": {}}
            })
        })
        .collect();
    serde_json::to_string(&services).unwrap()
}

/// A directory with an executable `cilium-dbg` running `script`, and PATH with it first.
fn fake_cilium_dbg(scratch: &plumb_testkit::Scratch, script: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let bin = scratch.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let exe = bin.join("cilium-dbg");
    std::fs::write(&exe, format!("#!/bin/sh\n{script}")).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

#[test]
fn doctor_reads_the_agents_json_through_cilium_dbg_on_a_live_node() {
    let Some(c) = corpus() else {
        return;
    };
    if !plumb_testkit::privileged(&["iptables-save"]) {
        return;
    }
    let scratch = plumb_testkit::Scratch::new("cilium-dbg");
    scratch.write("status.json", r#"{"cilium":{"state":"Ok","msg":"1.19.1"},"kube-proxy-replacement":{"mode":"True","devices":[{"name":"eth0","ips":["192.168.178.29"]}]}}"#);
    scratch.write("services.json", &service_list_json(&c.service_list));
    scratch.write(
        "endpoints.json",
        r#"[{"id":232,"status":{"state":"ready","external-identifiers":{"k8s-namespace":"default","k8s-pod-name":"deathstar-1"}}},
           {"id":1673,"status":{"state":"waiting-for-identity","external-identifiers":{"k8s-namespace":"default","k8s-pod-name":"tiefighter"}}}]"#,
    );
    let dir = scratch.path().display();
    let path = fake_cilium_dbg(
        &scratch,
        &format!(
            "case \"$1 $2\" in\n  'status -o') cat {dir}/status.json ;;\n  'service list') cat {dir}/services.json ;;\n  'endpoint list') cat {dir}/endpoints.json ;;\n  *) echo \"unexpected: $*\" >&2; exit 2 ;;\nesac\n"
        ),
    );
    let (_, report) = plumb_json(&["doctor", "--json"], Some(&path));
    let dataplane = finding(&report, "cilium-service-dataplane");
    let title = dataplane["title"].as_str().unwrap();
    assert!(
        title.contains("cilium-dbg status -o json")
            && title.contains("4 frontends in cilium-dbg service list -o json"),
        "{title}"
    );
    assert_eq!(dataplane["status"], "ok");
    let endpoints = finding(&report, "cilium-endpoints-not-ready");
    assert_eq!(endpoints["status"], "problem", "{endpoints:#}");
    assert!(
        endpoints["title"]
            .as_str()
            .unwrap()
            .contains("1673 default/tiefighter (waiting-for-identity)"),
        "{endpoints:#}"
    );
}

#[test]
fn a_hung_cilium_dbg_is_cut_off_at_its_deadline() {
    if !plumb_testkit::privileged(&["iptables-save", "sleep"]) {
        return;
    }
    let scratch = plumb_testkit::Scratch::new("cilium-dbg-hung");
    let path = fake_cilium_dbg(&scratch, "exec sleep 60\n");
    let start = std::time::Instant::now();
    let (_, report) = plumb_json(&["doctor", "--json"], Some(&path));
    let took = start.elapsed();
    // Two agent commands at most, each cut at 5 s.
    assert!(took < std::time::Duration::from_secs(20), "{took:?}");
    let text = serde_json::to_string(&report).unwrap();
    assert!(
        text.contains("did not finish"),
        "the timeout is said: {report:#}"
    );
}
