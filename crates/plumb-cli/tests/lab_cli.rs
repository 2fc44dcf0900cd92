//! `plumb lab` command line: the contract other tools and scripts rely on (exit codes,
//! refusal messages, JSON status). The full lab runs only as root; the end-to-end part is
//! skipped otherwise.

use std::process::Command;

fn plumb(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(args)
        .output()
        .expect("run plumb");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn unknown_scenario_is_a_usage_error_naming_the_known_ones() {
    let (code, _, err) = plumb(&["lab", "up", "nope"]);
    assert_eq!(code, 2);
    assert!(err.contains("invalid value 'nope'"), "{err}");
    assert!(err.contains("security-agent-revert"), "{err}");
}

#[test]
fn actor_subcommand_is_hidden() {
    let (_, out, _) = plumb(&["lab", "--help"]);
    assert!(out.contains("exec") && out.contains("status"));
    assert!(
        !out.lines().any(|l| l.trim_start().starts_with("actor")),
        "{out}"
    );
}

#[test]
fn up_status_exec_down_end_to_end() {
    if !plumb_testkit::privileged(&[]) {
        return;
    }
    let _ = plumb(&["lab", "down"]);
    let (code, out, err) = plumb(&["lab", "up", "healthy", "--services", "20"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("lab healthy ready in"), "{out}");
    let (code, _, err) = plumb(&["lab", "up", "healthy"]);
    assert_eq!(code, 2);
    assert!(err.contains("already running"), "{err}");
    let (code, out, _) = plumb(&["lab", "status", "--json"]);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["state"]["scenario"], "healthy");
    assert_eq!(v["state"]["cluster_ip"], "10.43.0.1:443");
    assert_eq!(v["actors_alive"]["kubelet"], true);
    // exec runs in the node namespace with PLUMB_LAB_ROOT set and passes the exit code.
    let (code, out, _) = plumb(&[
        "lab",
        "exec",
        "--",
        "sh",
        "-c",
        "ip -o addr show eth0; echo $PLUMB_LAB_ROOT; exit 3",
    ]);
    assert_eq!(code, 3);
    assert!(
        out.contains("192.168.100.10/24") && out.contains("/run/plumb-lab/root"),
        "{out}"
    );
    // The actors carry the originals' names.
    let status: serde_json::Value = v;
    let pid = status["state"]["actors"]["kubelet"].as_u64().unwrap();
    assert_eq!(
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .unwrap()
            .trim(),
        "kubelet"
    );
    let (code, out, _) = plumb(&["lab", "down"]);
    assert_eq!(code, 0, "{out}");
    let (code, out, _) = plumb(&["lab", "status"]);
    assert_eq!(code, 1);
    assert!(out.contains("no lab running"), "{out}");
    let (code, out, _) = plumb(&["lab", "down"]);
    assert_eq!(code, 0);
    assert!(out.contains("no lab to remove"), "{out}");
}
