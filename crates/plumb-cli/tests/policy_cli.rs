//! `plumb policy check`: the interface scripts rely on (exit 0 allowed, 1 denied, 2
//! error; the JSON shape), on manifests in a directory.

use plumb_testkit::Scratch;
use std::process::Command;

fn plumb(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("running plumb")
}

const PODS: &str = "apiVersion: v1\nkind: List\nitems:\n- kind: Pod\n  metadata: {name: web, namespace: shop, labels: {app: web}}\n  spec: {containers: [{name: c, ports: [{containerPort: 8443, name: https}]}]}\n- kind: Pod\n  metadata: {name: client, namespace: shop, labels: {app: client}}\n- kind: Pod\n  metadata: {name: other, namespace: shop, labels: {app: other}}\n";
const POLICIES: &str = "kind: NetworkPolicy\napiVersion: networking.k8s.io/v1\nmetadata: {name: default-deny, namespace: shop}\nspec: {podSelector: {}}\n---\nkind: NetworkPolicy\napiVersion: networking.k8s.io/v1\nmetadata: {name: web-from-client, namespace: shop}\nspec:\n  podSelector: {matchLabels: {app: web}}\n  ingress:\n  - from: [{podSelector: {matchLabels: {app: client}}}]\n    ports: [{port: https}]\n---\nkind: Service\nmetadata: {name: web, namespace: shop}\n";

#[test]
fn allowed_denied_and_why_in_json() {
    let dir = Scratch::new("policy-cli");
    dir.write("m/pods.yaml", PODS);
    dir.write("m/policies.yaml", POLICIES);
    let m = dir.path().join("m");
    let run = |from: &str, port: &str| {
        plumb(&[
            "policy",
            "check",
            "-f",
            m.to_str().unwrap(),
            "--from",
            from,
            "--to",
            "shop/web",
            "--port",
            port,
            "-o",
            "json",
        ])
    };
    let out = run("shop/client", "8443/tcp");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["allowed"], true);
    assert_eq!(v["egress"]["isolated"], false);
    let ingress = &v["ingress"]["policies"];
    assert_eq!(ingress[0]["policy"], "shop/default-deny");
    assert_eq!(ingress[0]["allowing_rules"].as_array().unwrap().len(), 0);
    assert_eq!(ingress[1]["policy"], "shop/web-from-client");
    assert_eq!(ingress[1]["allowing_rules"][0], 0);
    assert!(
        v["problems"][0]
            .as_str()
            .unwrap()
            .contains("kind Service is not read")
    );

    let out = run("shop/other", "8443/tcp");
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ingress"]["allowed"], false);

    // The named port is the pod's 8443, not another port.
    assert_eq!(run("shop/client", "443/tcp").status.code(), Some(1));

    let out = run("shop/nobody", "8443");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--from shop/nobody: no such pod"));
}

#[test]
fn text_names_the_deciding_policies() {
    let dir = Scratch::new("policy-cli-text");
    dir.write("pods.yaml", PODS);
    dir.write("policies.yaml", POLICIES);
    let out = plumb(&[
        "policy",
        "check",
        "-f",
        dir.path().join("pods.yaml").to_str().unwrap(),
        "-f",
        dir.path().join("policies.yaml").to_str().unwrap(),
        "--from",
        "shop/other",
        "--to",
        "shop/web",
        "--port",
        "8443",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("shop/other -> shop/web 8443/TCP: DENIED"),
        "{text}"
    );
    assert!(
        text.contains("shop/web-from-client: selects shop/web, no rule allows this"),
        "{text}"
    );
}

#[test]
fn a_matrix_per_port_in_text_csv_and_json() {
    let dir = Scratch::new("policy-matrix");
    dir.write("pods.yaml", PODS);
    dir.write("policies.yaml", POLICIES);
    let f = dir.path().to_str().unwrap().to_string();
    let out = plumb(&["policy", "matrix", "-f", &f, "-n", "shop"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    // Pods in file order: web, client, other; only the client reaches web, on 8443.
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("shop/")).collect();
    assert_eq!(rows.len(), 3, "{text}");
    assert!(rows[1].starts_with("shop/client"));
    assert!(rows[1].contains(" .  X  X"), "{text}");
    assert!(rows[2].contains(" X  X  X"), "{text}");

    // In colour, allowed cells are green and denied ones red; plain text has no escapes.
    assert!(!text.contains('\x1b'), "{text}");
    let coloured = plumb(&[
        "policy", "matrix", "-f", &f, "-n", "shop", "--color", "always",
    ]);
    let coloured = String::from_utf8_lossy(&coloured.stdout);
    let client = coloured
        .lines()
        .find(|l| l.starts_with("shop/client"))
        .unwrap();
    assert!(
        client.contains("\x1b[32m .\x1b[0m \x1b[31m X\x1b[0m"),
        "{client:?}"
    );

    let csv = plumb(&["policy", "matrix", "-f", &f, "--port", "8443", "--csv"]);
    let csv = String::from_utf8_lossy(&csv.stdout);
    assert_eq!(csv.lines().count(), 1 + 9);
    assert!(
        csv.contains("shop/client,shop/web,8443,TCP,true,true,true"),
        "{csv}"
    );

    let json = plumb(&["policy", "matrix", "-f", &f, "--port", "8443", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let allowed = v["cells"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["allowed"] == true)
        .count();
    assert_eq!(allowed, 1);
}

#[test]
fn diff_lists_the_pairs_that_change_verdict() {
    let dir = Scratch::new("policy-diff");
    dir.write("pods.yaml", PODS);
    dir.write("before/p.yaml", POLICIES);
    // After: the web policy also admits `other`.
    dir.write(
        "after/p.yaml",
        &POLICIES.replace(
            "- from: [{podSelector: {matchLabels: {app: client}}}]",
            "- from: [{podSelector: {matchExpressions: [{key: app, operator: In, values: [client, other]}]}}]",
        ),
    );
    let p = |r: &str| dir.path().join(r).display().to_string();
    let out = plumb(&[
        "policy",
        "diff",
        "-f",
        &p("pods.yaml"),
        "--before",
        &p("before"),
        "--after",
        &p("after"),
        "--port",
        "8443",
        "-o",
        "json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let changes = v["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1, "{v:#}");
    assert_eq!(changes[0]["from"], "shop/other");
    assert_eq!(changes[0]["before"], false);
    assert_eq!(changes[0]["after"], true);

    let same = plumb(&[
        "policy",
        "diff",
        "-f",
        &p("pods.yaml"),
        "--before",
        &p("before"),
        "--after",
        &p("before"),
        "--port",
        "8443",
    ]);
    assert_eq!(same.status.code(), Some(0));
}

#[test]
fn lint_exit_codes_text_and_json() {
    let dir = Scratch::new("policy-cli-lint");
    dir.write("pods.yaml", PODS);
    dir.write("policies.yaml", POLICIES);
    let lint = |args: &[&str]| {
        let mut all = vec!["policy", "lint"];
        all.extend_from_slice(args);
        plumb(&all)
    };
    let pods = dir.path().join("pods.yaml");
    let policies = dir.path().join("policies.yaml");
    // Clean: exit 0.
    let out = lint(&[
        "-f",
        pods.to_str().unwrap(),
        "-f",
        policies.to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("0 finding(s) in 2 policies"));

    // A policy selecting no pod and a shadowed rule: exit 1, file and document named.
    dir.write(
        "bad.yaml",
        "kind: NetworkPolicy\nmetadata: {name: api, namespace: shop}\nspec:\n  podSelector: {matchLabels: {app: api}}\n  ingress:\n  - from: [{podSelector: {}}]\n  - from: [{podSelector: {matchLabels: {app: client}}}]\n    ports: [{port: 80, protocol: UDP}]\n",
    );
    let bad = dir.path().join("bad.yaml");
    let out = lint(&["-f", pods.to_str().unwrap(), "-f", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "{} (document 1): NetworkPolicy shop/api spec.podSelector: selects-nothing: none of the 3 pods of namespace shop in the inputs has labels {{app=api}}",
            bad.display()
        )),
        "{text}"
    );
    assert!(
        text.contains("NetworkPolicy shop/api spec.ingress[1]: shadowed: everything it allows is allowed by spec.ingress[0] of the same policy"),
        "{text}"
    );
    let out = lint(&[
        "-f",
        pods.to_str().unwrap(),
        "-f",
        bad.to_str().unwrap(),
        "-o",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["findings"].as_array().unwrap().len(), 2);
    assert_eq!(v["findings"][0]["kind"], "selects-nothing");
    assert_eq!(v["findings"][0]["part"], "spec.podSelector");
    assert_eq!(v["findings"][1]["kind"], "shadowed");
    assert_eq!(v["policies"], 1);

    // No policy at all, or a missing file: exit 2.
    assert_eq!(lint(&["-f", pods.to_str().unwrap()]).status.code(), Some(2));
    let missing = dir.path().join("missing.yaml");
    assert_eq!(
        lint(&["-f", missing.to_str().unwrap()]).status.code(),
        Some(2)
    );
}

/// A Cilium sysdump holds the cluster's Kubernetes objects as `<name>-<time>.yaml`
/// beside the agents' bugtool archives: `-f` takes the sysdump (unpacked or as the zip
/// the `cilium sysdump` command writes) and reads only its policies, pods, namespaces
/// and nodes; the rest (events here) is not policy input and is not reported as unread.
#[test]
fn a_cilium_sysdump_is_read_for_its_policies_pods_and_namespaces() {
    let dir = Scratch::new("policy-sysdump");
    let top = "cilium-sysdump-20261201-101010";
    let ts = "20261201-101010";
    let nps = POLICIES.rsplit_once("---\nkind: Service").unwrap().0;
    dir.write(&format!("{top}/k8s-pods-{ts}.yaml"), PODS);
    dir.write(&format!("{top}/k8s-networkpolicies-{ts}.yaml"), nps);
    dir.write(
        &format!("{top}/k8s-namespaces-{ts}.yaml"),
        "apiVersion: v1\nkind: List\nitems:\n- kind: Namespace\n  metadata: {name: shop}\n",
    );
    dir.write(
        &format!("{top}/k8s-events-{ts}.yaml"),
        "apiVersion: v1\nkind: List\nitems:\n- kind: Event\n  metadata: {name: e, namespace: shop}\n",
    );
    dir.write(
        &format!("{top}/cilium-bugtool-cilium-abcde-{ts}/cmd/uname--a.md"),
        "Linux node 6.1.0\n",
    );
    let unpacked = dir.path().join(top);
    let zip = dir.path().join(format!("{top}.zip"));
    let zipped = Command::new("zip")
        .current_dir(dir.path())
        .args(["-qr", zip.to_str().unwrap(), top])
        .status();
    if !zipped.is_ok_and(|s| s.success()) {
        plumb_testkit::skip("the zip tool is not installed");
        return;
    }
    for input in [&unpacked, &zip] {
        let check = |from: &str| {
            plumb(&[
                "policy",
                "check",
                "-f",
                input.to_str().unwrap(),
                "--from",
                from,
                "--to",
                "shop/web",
                "--port",
                "8443/tcp",
                "-o",
                "json",
            ])
        };
        let allowed = check("shop/client");
        let stderr = String::from_utf8_lossy(&allowed.stderr);
        assert_eq!(
            allowed.status.code(),
            Some(0),
            "{}: {stderr}",
            input.display()
        );
        let v: serde_json::Value = serde_json::from_slice(&allowed.stdout).unwrap();
        assert_eq!(v["problems"], serde_json::json!([]), "{}", input.display());
        assert_eq!(v["ingress"]["allowed"], true);
        let denied = check("shop/other");
        assert_eq!(denied.status.code(), Some(1), "{}", input.display());
    }
    // A bundle that is not a sysdump is refused with the reason.
    dir.write("not-a-bundle.tar", "x");
    let out = plumb(&[
        "policy",
        "check",
        "-f",
        dir.path().join("not-a-bundle.tar").to_str().unwrap(),
        "--from",
        "shop/client",
        "--to",
        "shop/web",
        "--port",
        "443",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not-a-bundle.tar"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
