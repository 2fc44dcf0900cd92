//! Privileged: `--confirm-with-trace`'s table in a private network namespace. Each run
//! adds a table named after its pid and removes it when done; the table a killed run
//! left (its process is gone) is deleted by the next run, and a running process's table
//! is left alone.

use plumb_observe::trace::{Tracer, table_name};

fn tables(ns: &plumb_os::netns::Netns) -> String {
    let (ok, out, err) = ns.exec("nft", &["list", "tables", "inet"], None).unwrap();
    assert!(ok, "{err}");
    out
}

fn add_trace_table(ns: &plumb_os::netns::Netns, pid: u32) {
    let script = format!(
        "table inet {} {{\n chain output {{\n  type filter hook output priority -350; policy accept;\n  meta nftrace set 1\n }}\n}}\n",
        table_name(pid)
    );
    let (ok, _, err) = ns.exec("nft", &["-f", "-"], Some(&script)).unwrap();
    assert!(ok, "{err}");
}

#[test]
fn a_killed_runs_trace_table_is_deleted_by_the_next_run_and_a_running_ones_kept() {
    if !plumb_testkit::privileged(&["nft"]) {
        return;
    }
    let ns = plumb_os::netns::Netns::create("plumb-trace").expect("a private namespace");
    // A run killed with SIGKILL: its process is gone, its table stays.
    let mut killed = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let killed_pid = killed.id();
    add_trace_table(&ns, killed_pid);
    killed.kill().unwrap();
    killed.wait().unwrap();
    // A run still going, side by side.
    let mut running = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    add_trace_table(&ns, running.id());

    let tracer = Tracer::start(ns.name()).expect("the tracer starts");
    let during = tables(&ns);
    let removed = tracer.removed_leftovers.clone();
    let own = tracer.table().to_string();
    drop(tracer);
    let after = tables(&ns);
    let _ = running.kill();
    let _ = running.wait();

    assert_eq!(removed, [table_name(killed_pid)]);
    assert_eq!(own, table_name(std::process::id()));
    assert!(!during.contains(&table_name(killed_pid)), "{during}");
    assert!(during.contains(&own), "{during}");
    assert!(during.contains(&table_name(running.id())), "{during}");
    assert!(!after.contains(&own), "removed when done: {after}");
    assert!(after.contains(&table_name(running.id())), "kept: {after}");
}
