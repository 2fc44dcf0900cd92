//! Privileged: plumb watch against real writers in a private network namespace.
//!
//! Writers are real processes with the comm the kernel reports: copies of
//! xtables-nft-multi named `kube-proxy`, `venAgent`, `ufw` (see
//! plumb_watch::impersonate). Run serially (`--test-threads=1`); skipped with a reason
//! when not root. Every wait has a deadline; namespaces and copies are removed on
//! drop; audit state is restored by a guard.

mod common;
use common::*;
use plumb_watch::Kind;
use plumb_watch::detect::Action;
use std::time::Instant;

/// A security agent reverts kube-proxy's nat rules; kube-proxy restores them.
#[test]
fn security_agent_reverts_are_attributed_and_the_third_is_a_fight() {
    if let Some(r) = skip_reason() {
        plumb_testkit::skip(&r);
        return;
    }
    let kp = kube_proxy_state(12);
    let lab = Lab::new(&["kube-proxy", "venAgent"]);
    lab.kube_proxy_sync(&kp);
    let w = Watching::start(lab.ns.name());
    let mut from = 0;
    let mut agent_pids = Vec::new();
    for cycle in 1..=3u32 {
        let ven = lab.agent_revert("venAgent");
        agent_pids.push(ven.pid);
        let i = w.wait_for(from, "foreign-change by venAgent", |e| {
            e.kind == Kind::ForeignChange
                && !e.preliminary
                && e.actor.pid == Some(ven.pid)
                && e.owner.as_deref() == Some("kube-proxy")
        });
        let e = &w.snapshot()[i];
        assert_eq!(e.action, Action::Deleted, "{}", e.human());
        assert_eq!(e.actor.comm.as_deref(), Some("venAgent"));
        assert_eq!(
            e.actor.exe.as_deref(),
            Some(ven.exe.to_str().unwrap()),
            "exe of the writer"
        );
        assert_eq!(
            e.actor.identity.as_ref().map(|i| i.name.as_str()),
            Some("illumio-ven")
        );
        assert_eq!(e.table, "nat");
        assert!(
            e.chains.iter().any(|c| c == "KUBE-SVC-NPX46M4PTMTKRN6Y"),
            "the kubernetes service chain is among the deleted: {:?}\n{}",
            e.chains,
            w.snapshot()
                .iter()
                .map(|e| format!("{} {:?} gen {:?}", e.human(), e.details, e.generation))
                .collect::<Vec<_>>()
                .join("\n")
        );
        assert!(e.chains.iter().any(|c| c == "KUBE-SERVICES"));
        assert_eq!(e.revert, Some(cycle), "{}", e.human());
        assert!(e.latency_ms.is_some_and(|ms| ms >= 0.0));
        if cycle < 3 {
            assert!(e.fight.is_none(), "no fight before the third revert");
        } else {
            let f = e.fight.as_ref().expect("fight on the third revert");
            assert_eq!(f.reverts, 3);
            assert_eq!(f.remover, "illumio-ven");
            assert_eq!(f.restorer, "kube-proxy");
            assert!(e.human().contains("3rd revert in"), "{}", e.human());
            assert!(e.human().contains("fight with kube-proxy"), "{}", e.human());
            w.wait_for(i, "fight", |e| {
                e.kind == Kind::Fight && e.fight.as_ref().is_some_and(|f| f.reverts == 3)
            });
        }
        from = i + 1;
        let kpr = lab.kube_proxy_sync(&kp);
        from = w.wait_for(from, "kube-proxy restore", |e| {
            e.kind == Kind::OwnerChange
                && e.action == Action::Restored
                && e.actor.pid == Some(kpr.pid)
                && e.table == "nat"
        }) + 1;
    }
    let (events, _) = w.finish();
    for e in &events {
        eprintln!("{}", e.human());
    }
    assert!(
        events
            .iter()
            .filter(|e| e.kind == Kind::ForeignChange)
            .all(|e| e.actor.comm.as_deref() == Some("venAgent")),
        "only venAgent made foreign changes"
    );
    assert!(
        events
            .iter()
            .filter(|e| e.actor.comm.as_deref() == Some("kube-proxy"))
            .all(|e| e.kind == Kind::OwnerChange),
        "kube-proxy's writes are owner changes"
    );
}

/// kube-proxy's own full syncs (and kubelet-owned chains in them) never yield a
/// foreign-change.
#[test]
fn owner_syncs_are_not_foreign() {
    if let Some(r) = skip_reason() {
        plumb_testkit::skip(&r);
        return;
    }
    let kp = kube_proxy_state(30);
    let lab = Lab::new(&["kube-proxy"]);
    let w = Watching::start(lab.ns.name());
    let mut last = 0;
    for _ in 0..4 {
        lab.kube_proxy_sync(&kp);
        last = lab
            .run(
                "kube-proxy",
                "iptables-nft-restore",
                &["--noflush"],
                Some(&kp.sync),
            )
            .pid;
    }
    // The last sync re-adds the same rules: an owner change with rules removed and added.
    w.wait_for(0, "last sync", |e| e.actor.pid == Some(last));
    let (events, summary) = w.finish();
    assert!(summary.batches >= 8, "{summary:?}");
    let foreign: Vec<String> = events
        .iter()
        .filter(|e| e.kind != Kind::OwnerChange)
        .map(|e| e.human())
        .collect();
    assert!(foreign.is_empty(), "unexpected: {foreign:#?}");
}

/// ufw (by name) drops FORWARD and inserts a rule ahead of kube-proxy's INPUT hooks.
#[test]
fn host_firewall_policy_and_insertions_are_reported_appends_are_not() {
    if let Some(r) = skip_reason() {
        plumb_testkit::skip(&r);
        return;
    }
    let kp = kube_proxy_state(3);
    let lab = Lab::new(&["kube-proxy", "ufw"]);
    lab.kube_proxy_sync(&kp);
    let w = Watching::start(lab.ns.name());
    let p = lab.run("ufw", "iptables-nft", &["-P", "FORWARD", "DROP"], None);
    let i = w.wait_for(0, "policy-change", |e| e.kind == Kind::PolicyChange);
    let e = &w.snapshot()[i];
    assert_eq!(e.actor.pid, Some(p.pid));
    assert_eq!(e.actor.comm.as_deref(), Some("ufw"));
    assert_eq!(e.chains, ["FORWARD"]);
    assert_eq!(e.details, ["FORWARD policy ACCEPT -> DROP"]);
    let a = lab.run(
        "ufw",
        "iptables-nft",
        &["-A", "INPUT", "-j", "ACCEPT"],
        None,
    );
    let n = lab.run("ufw", "iptables-nft", &["-I", "INPUT", "-j", "DROP"], None);
    let j = w.wait_for(i + 1, "insertion", |e| e.action == Action::Inserted);
    let e = &w.snapshot()[j];
    assert_eq!(e.kind, Kind::ForeignChange);
    assert_eq!(e.actor.pid, Some(n.pid));
    assert_eq!(e.chains, ["INPUT"]);
    let (events, _) = w.finish();
    assert!(
        !events
            .iter()
            .any(|e| e.actor.pid == Some(a.pid) && e.kind != Kind::OwnerChange),
        "an appended rule runs after kube-proxy's hooks: not reported"
    );
}

/// A receive buffer too small for a sync, not read while the sync runs: the kernel
/// drops notifications and the listener reports a gap (the watcher then resyncs from
/// a full dump, see `state::tests::resync_diff`).
#[test]
fn lost_notifications_are_reported_as_a_gap() {
    if let Some(r) = skip_reason() {
        plumb_testkit::skip(&r);
        return;
    }
    let kp = kube_proxy_state(300);
    let lab = Lab::new(&["kube-proxy"]);
    let mut listener =
        plumb_watch::nft_events::NftListener::open(Some(lab.ns.name()), 4096).expect("subscribe");
    lab.kube_proxy_sync(&kp);
    let deadline = Instant::now() + DEADLINE;
    loop {
        match listener.receive().expect("receive") {
            plumb_watch::nft_events::Received::Gap => break,
            plumb_watch::nft_events::Received::Idle => {
                panic!("all notifications fit in 4 KiB? the test needs a bigger sync")
            }
            plumb_watch::nft_events::Received::Batches(_)
            | plumb_watch::nft_events::Received::Data { .. } => {}
        }
        assert!(Instant::now() < deadline, "no gap");
    }
}

/// Legacy tables have no netlink events: audit's xt_replace record is the trigger and
/// names the writer. Needs audit; enabled for the test and restored after.
#[test]
fn legacy_changes_are_attributed_through_audit() {
    if let Some(r) = skip_reason() {
        plumb_testkit::skip(&r);
        return;
    }
    if plumb_os::runner::which("xtables-legacy-multi").is_none() {
        plumb_testkit::skip("xtables-legacy-multi not found");
        return;
    }
    let _audit = match AuditEnabled::new() {
        Ok(g) => g,
        Err(why) => {
            plumb_testkit::skip(&format!("audit unavailable: {why}"));
            return;
        }
    };
    let kp = kube_proxy_state(3);
    let lab = Lab::new(&[]);
    lab.actors
        .install("kube-proxy", plumb_watch::impersonate::Flavor::Legacy)
        .unwrap();
    lab.actors
        .install("venAgent", plumb_watch::impersonate::Flavor::Legacy)
        .unwrap();
    lab.run(
        "kube-proxy",
        "iptables-legacy-restore",
        &["--noflush"],
        Some(&kp.bootstrap),
    );
    lab.run(
        "kube-proxy",
        "iptables-legacy-restore",
        &["--noflush"],
        Some(&kp.sync),
    );
    let w = Watching::start(lab.ns.name());
    let ven = lab.run(
        "venAgent",
        "iptables-legacy-restore",
        &[],
        Some(&plumb_watch::impersonate::pre_kubernetes_payload(&["nat"])),
    );
    let i = w.wait_for(0, "legacy foreign-change", |e| {
        e.kind == Kind::ForeignChange && e.owner.as_deref() == Some("kube-proxy")
    });
    let e = &w.snapshot()[i];
    assert_eq!(e.actor.pid, Some(ven.pid), "{}", e.human());
    assert_eq!(e.actor.comm.as_deref(), Some("venAgent"));
    assert_eq!(e.actor.exe.as_deref(), Some(ven.exe.to_str().unwrap()));
    assert!(e.chains.iter().any(|c| c == "KUBE-SVC-NPX46M4PTMTKRN6Y"));
    let (_, summary) = w.finish();
    assert_eq!(summary.legacy, "audit", "{summary:?}");
}

/// A big revert is reported while the kernel still sends it: with the eBPF writer
/// probe, a preliminary foreign-change by the agent (what the transaction had done
/// when the listener had read `BIG_TRANSACTION` notifications and the probe named the
/// writer), then the complete event of the same generation. Without the probe the
/// writer is known only at NEWGEN, and there is only the complete event.
#[test]
fn a_big_revert_is_reported_preliminarily_then_completely() {
    if let Some(r) = skip_reason() {
        plumb_testkit::skip(&r);
        return;
    }
    let kp = kube_proxy_state(1000);
    let lab = Lab::new(&["kube-proxy", "venAgent"]);
    lab.run("kube-proxy", "iptables-nft-restore", &[], Some(&kp.saved));
    let w = Watching::start(lab.ns.name());
    let ven = lab.agent_revert("venAgent");
    let by_agent = |e: &plumb_watch::Event| {
        e.kind == Kind::ForeignChange
            && e.actor.pid == Some(ven.pid)
            && e.owner.as_deref() == Some("kube-proxy")
    };
    let c = w.wait_for(0, "complete foreign-change", |e| {
        by_agent(e) && !e.preliminary
    });
    let (events, summary) = w.finish();
    let p = events.iter().position(|e| by_agent(e) && e.preliminary);
    let c = &events[c];
    assert!(c.chain_count > 1000, "{}", c.human());
    if summary.probe != "attached" {
        assert_eq!(p, None, "a preliminary event needs the probe");
        eprintln!(
            "eBPF writer probe {}: checked the NEWGEN path only",
            summary.probe
        );
        return;
    }
    let p = &events[p.expect("a preliminary foreign-change by the agent")];
    assert!(p.generation.is_some());
    assert_eq!(p.generation, c.generation, "{} / {}", p.human(), c.human());
    assert_eq!(p.actor.comm.as_deref(), Some("venAgent"));
    assert!(p.human().contains("preliminary"), "{}", p.human());
    assert!(
        p.details.iter().any(|d| d.contains("eBPF writer probe")),
        "{:?}",
        p.details
    );
    // What it had done so far: no more than in the end.
    assert!(
        p.chain_count <= c.chain_count,
        "{} / {}",
        p.human(),
        c.human()
    );
    assert!(
        summary.notes.iter().any(|n| n.contains("0 contradicted")),
        "{:?}",
        summary.notes
    );
}

/// The baseline comes from netlink dumps (not `iptables-nft-save` and `nft list`, ~15
/// and 24 s on a 10k-service node): it must agree with what those tools print, for
/// iptables-nft tables of both families and native nftables tables, owned hooks
/// included.
#[test]
fn the_netlink_baseline_agrees_with_the_save_tools() {
    if let Some(r) = skip_reason() {
        plumb_testkit::skip(&r);
        return;
    }
    if plumb_os::runner::which("nft").is_none() {
        plumb_testkit::skip("nft not installed");
        return;
    }
    let lab = Lab::new(&["kube-proxy"]);
    let kp = kube_proxy_state(40);
    lab.kube_proxy_sync(&kp);
    lab.run(
        "kube-proxy",
        "ip6tables-nft",
        &["-t", "filter", "-N", "KUBE-FIREWALL"],
        None,
    );
    lab.run(
        "kube-proxy",
        "ip6tables-nft",
        &["-t", "filter", "-A", "INPUT", "-j", "KUBE-FIREWALL"],
        None,
    );
    let in_ns = |program: &str, args: &[&str]| -> String {
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", lab.ns.name(), program])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{program} {args:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    in_ns("nft", &["add", "table", "inet", "plumbt"]);
    in_ns(
        "nft",
        &[
            "add",
            "chain",
            "inet",
            "plumbt",
            "input",
            "{ type filter hook input priority 0; policy drop; }",
        ],
    );
    in_ns("nft", &["add", "chain", "inet", "plumbt", "mine"]);
    in_ns(
        "nft",
        &["add", "rule", "inet", "plumbt", "input", "jump", "mine"],
    );
    in_ns("nft", &["add", "rule", "inet", "plumbt", "mine", "accept"]);

    let b = plumb_watch::baseline::read(Some(lab.ns.name()));
    assert!(b.problems.is_empty(), "{:?}", b.problems);
    assert!(b.generation.is_some());
    let save = |tool: &str, family| {
        let input = plumb_ruleset::iptables::save::IptablesInput {
            backend: Some(plumb_ruleset::Backend::IptablesNft),
            family,
            ..Default::default()
        };
        plumb_ruleset::iptables::save::parse(&in_ns(tool, &[]), &input)
    };
    let mut expected = save("iptables-nft-save", plumb_ruleset::Family::Ip);
    expected
        .tables
        .extend(save("ip6tables-nft-save", plumb_ruleset::Family::Ip6).tables);
    let native =
        plumb_ruleset::nft::parse_text(&in_ns("nft", &["list", "table", "inet", "plumbt"]));
    expected.tables.extend(native.tables);
    let expected = plumb_watch::state::NftState::from_ruleset(&expected);
    // The save tools also print the built-in chains of a table that the kernel does
    // not have (iptables-nft creates them on first use), empty, policy ACCEPT: the
    // only difference allowed.
    let mut diff = expected.diff_to(&b.state);
    for t in &mut diff.tables {
        t.chains_removed
            .retain(|c| !(plumb_watch::changes::is_builtin_chain(&c.name) && c.rules == 0));
    }
    diff.tables.retain(|t| !t.is_empty());
    assert!(diff.is_empty(), "{diff:#?}");
    assert!(b.state.chain_count(2, "nat") > 100);
    assert!(b.state.has_table(10, "filter") && b.state.has_table(1, "plumbt"));
    // Owned hooks are counted too: a rule inserted at the top of nat PREROUTING now
    // runs ahead of kube-proxy's jump.
    let mut s = b.state;
    let c = s.apply(&plumb_watch::nft_events::Batch {
        messages: vec![plumb_watch::nft_events::NftMessage::Rule {
            op: plumb_watch::nft_events::Op::New,
            family: 2,
            table: "nat".into(),
            chain: "PREROUTING".into(),
            handle: None,
            appended: false,
            summary: Default::default(),
            fingerprint: 0,
        }],
        ..Default::default()
    });
    assert!(c.tables[0].hook_rules[0].ahead_of_owned_hooks, "{c:#?}");
}

/// Watch subscribes, then dumps its baseline: notifications queued meanwhile belong to
/// transactions up to the dump's generation (already in the baseline: watch undoes
/// them instead of applying them twice) or after it. Checked on the kernel's numbers.
#[test]
fn notifications_queued_during_the_baseline_carry_its_generation() {
    if let Some(r) = skip_reason() {
        plumb_testkit::skip(&r);
        return;
    }
    let lab = Lab::new(&["kube-proxy"]);
    let mut listener =
        plumb_watch::nft_events::NftListener::open(Some(lab.ns.name()), 1 << 20).unwrap();
    let queued_gens = |listener: &mut plumb_watch::nft_events::NftListener| {
        let mut gens = Vec::new();
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while gens.is_empty() && Instant::now() < deadline {
            listener
                .receive_each(&mut |e| {
                    if let plumb_watch::nft_events::NftEvent::Gen { id, .. } = e {
                        gens.push(id);
                    }
                })
                .unwrap();
        }
        gens
    };
    lab.run(
        "kube-proxy",
        "iptables-nft",
        &["-t", "nat", "-N", "KUBE-SERVICES"],
        None,
    );
    let b = plumb_watch::baseline::read(Some(lab.ns.name()));
    let dumped = b.generation.expect("generation of the dump");
    assert!(b.state.chain_names().any(|c| c == "KUBE-SERVICES"));
    let before = queued_gens(&mut listener);
    assert_eq!(
        before.last(),
        Some(&dumped),
        "queued before the dump: {before:?}"
    );
    lab.run(
        "kube-proxy",
        "iptables-nft",
        &["-t", "nat", "-N", "KUBE-NODEPORTS"],
        None,
    );
    let after = queued_gens(&mut listener);
    assert!(
        after.iter().all(|g| (g.wrapping_sub(dumped) as i32) > 0),
        "after the dump {dumped}: {after:?}"
    );
}

/// Lost notifications (a receive buffer far too small for a sync) give a gap event
/// and a resync from a fresh dump; afterwards the state is right again: an agent
/// flushing one kube-proxy chain is reported as exactly that. (A socket filter that
/// trims datagrams on another subscription makes the kernel hand the trimmed buffer
/// to this one: this test is how that shows.)
#[test]
fn after_a_gap_the_resync_dump_makes_the_state_right_again() {
    if let Some(r) = skip_reason() {
        plumb_testkit::skip(&r);
        return;
    }
    let kp = kube_proxy_state(300);
    let lab = Lab::new(&["kube-proxy", "venAgent"]);
    let w = Watching::start_with(plumb_watch::WatchOptions {
        netns: Some(lab.ns.name().to_string()),
        receive_buffer: 16 << 10,
        debounce: std::time::Duration::from_millis(100),
        ..plumb_watch::WatchOptions::default()
    });
    lab.kube_proxy_sync(&kp);
    let gap = w.wait_for(0, "a gap", |e| e.kind == Kind::Gap);
    let resync = w.wait_for(gap, "the resync", |e| e.kind == Kind::Resync);
    // The resync's dump has every chain of the sync with its rules: a flush of one is
    // seen as a flush (none left), by its writer.
    let ven = lab.run(
        "venAgent",
        "iptables-nft",
        &["-t", "nat", "-F", "KUBE-SVC-NPX46M4PTMTKRN6Y"],
        None,
    );
    let i = w.wait_for(resync, "the agent's flush", |e| {
        e.kind == Kind::ForeignChange && e.actor.pid == Some(ven.pid)
    });
    let e = &w.snapshot()[i];
    assert_eq!(e.action, Action::Flushed, "{}", e.human());
    assert_eq!(e.chains, vec!["KUBE-SVC-NPX46M4PTMTKRN6Y".to_string()]);
    let (_, summary) = w.finish();
    assert!(summary.gaps >= 1, "{summary:?}");
}

/// The listener's peek (`queue_is_empty`, asked before it drops a pending send as
/// refused): empty when everything is read, not empty while notifications wait, and a
/// peek that takes the kernel's ENOBUFS report keeps it, so the next receive is a gap
/// (the kernel reports a socket's ENOBUFS once, to whoever reads first).
#[test]
fn a_peek_at_the_queue_never_swallows_a_gap() {
    use plumb_watch::nft_events::{NftListener, RECEIVE_BUFFER, Received};
    if let Some(r) = skip_reason() {
        plumb_testkit::skip(&r);
        return;
    }
    let kp = kube_proxy_state(300);
    let lab = Lab::new(&["kube-proxy"]);
    let mut roomy = NftListener::open(Some(lab.ns.name()), RECEIVE_BUFFER).unwrap();
    let mut small = NftListener::open(Some(lab.ns.name()), 16 << 10).unwrap();
    assert!(roomy.queue_is_empty() && small.queue_is_empty());
    lab.kube_proxy_sync(&kp);
    assert!(!roomy.queue_is_empty(), "the sync's notifications wait");
    // The small socket overflowed: its peek takes the ENOBUFS report ...
    assert!(!small.queue_is_empty());
    // ... and its next receive still says so.
    let r = small.receive_each(&mut |_| {});
    assert!(matches!(r, Ok(Received::Gap)), "{r:?}");
    // Read everything: empty again.
    let deadline = Instant::now() + DEADLINE;
    while !roomy.queue_is_empty() {
        assert!(Instant::now() < deadline, "the queue never emptied");
        let r = roomy.receive_each(&mut |_| {});
        assert!(!matches!(r, Ok(Received::Gap)), "{r:?}");
    }
}

/// The rules of a dump (comment lines, counters and the raw table, which holds the
/// test's markers, aside): what must be the same after a restore of the same rules.
fn rules_of(save: &str) -> Vec<String> {
    let mut raw = false;
    let mut out = Vec::new();
    for l in save.lines().filter(|l| !l.starts_with('#')) {
        if l.starts_with('*') {
            raw = l == "*raw";
        }
        if !raw {
            out.push(l.strip_suffix(" [0:0]").unwrap_or(l).to_string());
        }
    }
    out
}

/// A restore of the ruleset that is already there, by a process that is not
/// kube-proxy (a backup tool, a security agent re-applying its snapshot), is no
/// foreign change: iptables-nft-restore, full and `--noflush`, of `iptables-nft-save`'s
/// dump and of kube-proxy's own payload, rewrites kube-proxy's chains and hook rules
/// with new handles and the same rules. Watch reports it as a `rewrite` (no net
/// change), never as chains modified or hook rules removed ("unhooked"); kube-proxy's
/// own identical sync is an owner change. Controls: the same dump with one rule
/// changed, two rules swapped, or a hook rule left out is still a foreign change.
#[test]
fn a_restore_of_the_same_rules_by_another_writer_is_no_foreign_change() {
    if let Some(r) = skip_reason() {
        plumb_testkit::skip(&r);
        return;
    }
    let kp = kube_proxy_state(12);
    let lab = Lab::new(&["kube-proxy", "netbackup"]);
    lab.kube_proxy_sync(&kp);
    let saved = lab.run("netbackup", "iptables-nft-save", &[], None).stdout;
    assert!(
        saved.contains("-m statistic"),
        "a service with several endpoints"
    );
    let w = Watching::start(lab.ns.name());
    let mut from = 0;
    let mut marks = 0;
    // Runs a writer, then a marker write (kube-proxy creates a chain in the raw
    // table, which no dump here holds) and waits for the marker's event: every event
    // of the writer's transactions is out by then. Returns the writer's events.
    let mut write = |who: &str, args: &[&str], payload: &str| {
        let r = lab.run(who, "iptables-nft-restore", args, Some(payload));
        marks += 1;
        let mark = format!("KUBE-PLUMB-MARK-{marks}");
        lab.run(
            "kube-proxy",
            "iptables-nft",
            &["-t", "raw", "-N", &mark],
            None,
        );
        let to = w.wait_for(from, &format!("marker {mark}"), |e| {
            e.chains.contains(&mark)
        });
        let events: Vec<plumb_watch::Event> = w.snapshot()[from..to]
            .iter()
            .filter(|e| e.actor.pid == Some(r.pid) && !e.preliminary)
            .cloned()
            .collect();
        from = to + 1;
        let human: Vec<String> = events.iter().map(|e| e.human()).collect();
        (events, human)
    };
    let no_foreign = |events: &[plumb_watch::Event], human: &[String], what: &str| {
        assert!(
            events.iter().all(|e| e.kind == Kind::Rewrite),
            "{what}: {human:#?}"
        );
        let nat = events
            .iter()
            .find(|e| e.table == "nat")
            .unwrap_or_else(|| panic!("{what}: no event for nat: {human:#?}"));
        assert_eq!(nat.action, Action::Rewritten, "{what}");
        assert_eq!(nat.owner.as_deref(), Some("kube-proxy"), "{what}");
        assert!(
            nat.chains.iter().any(|c| c == "KUBE-SERVICES")
                && nat.chains.iter().any(|c| c.starts_with("KUBE-SVC-")),
            "{what}: {human:#?}"
        );
    };

    // The same rules, full restore: every owned chain and hook rule is rewritten.
    let (events, human) = write("netbackup", &[], &saved);
    no_foreign(&events, &human, "full restore of the same dump");
    let now = lab.run("netbackup", "iptables-nft-save", &[], None).stdout;
    let (now, before) = (rules_of(&now), rules_of(&saved));
    let first = now.iter().zip(&before).find(|(a, b)| a != b);
    assert!(
        now.len() == before.len() && first.is_none(),
        "the restore changed the rules: {} lines, {} before; first difference {first:?}",
        now.len(),
        before.len()
    );
    // kube-proxy's own payload, by someone else.
    let (events, human) = write("netbackup", &["--noflush"], &kp.sync);
    no_foreign(
        &events,
        &human,
        "kube-proxy's payload restored by another writer",
    );
    // kube-proxy itself: its own write.
    let (events, human) = write("kube-proxy", &["--noflush"], &kp.sync);
    assert!(
        events
            .iter()
            .any(|e| e.kind == Kind::OwnerChange && e.action == Action::Rewritten),
        "{human:#?}"
    );
    assert!(
        events.iter().all(|e| e.kind == Kind::OwnerChange),
        "{human:#?}"
    );

    // Controls. One rule changed: the others are rewritten, that chain is modified.
    let sep = saved
        .lines()
        .find(|l| l.starts_with("-A KUBE-SEP-") && l.contains("--to-destination"))
        .expect("a DNAT rule");
    let chain = sep.split_whitespace().nth(1).unwrap().to_string();
    // Another port on the same endpoint.
    let (head, _port) = sep.rsplit_once(':').unwrap();
    let changed = saved.replacen(sep, &format!("{head}:1"), 1);
    let (events, human) = write("netbackup", &[], &changed);
    let e = events
        .iter()
        .find(|e| e.kind == Kind::ForeignChange)
        .unwrap_or_else(|| panic!("one rule changed: {human:#?}"));
    assert_eq!(e.action, Action::Modified, "{human:#?}");
    assert_eq!(e.chains, [chain], "{human:#?}");
    assert!(
        e.details.iter().any(|d| d.contains("also rewrote")),
        "{human:#?}"
    );
    // Back to the saved rules (a change again: that chain), then two rules swapped.
    write("netbackup", &[], &saved);
    let services: Vec<&str> = saved
        .lines()
        .filter(|l| l.starts_with("-A KUBE-SERVICES ") && l.contains("-j KUBE-SVC-"))
        .take(2)
        .collect();
    let swapped = saved
        .replacen(services[0], "\u{1}", 1)
        .replacen(services[1], services[0], 1)
        .replacen('\u{1}', services[1], 1);
    assert_ne!(swapped, saved);
    let (events, human) = write("netbackup", &[], &swapped);
    assert!(
        events.iter().any(|e| e.kind == Kind::ForeignChange
            && e.action == Action::Modified
            && e.chains.iter().any(|c| c == "KUBE-SERVICES")),
        "two rules swapped: {human:#?}"
    );
    // A hook rule left out: unhooked.
    write("netbackup", &[], &saved);
    let hook = saved
        .lines()
        .find(|l| l.starts_with("-A PREROUTING ") && l.ends_with("-j KUBE-SERVICES"))
        .expect("nat PREROUTING's hook");
    let unhooked = saved.replacen(&format!("{hook}\n"), "", 1);
    let (events, human) = write("netbackup", &[], &unhooked);
    assert!(
        events.iter().any(|e| e.kind == Kind::ForeignChange
            && e.action == Action::Unhooked
            && e.chains == ["PREROUTING -j KUBE-SERVICES"]),
        "hook rule left out: {human:#?}"
    );
    // The same rules again with --noflush (the user chains it names are flushed and
    // refilled; built-in chains get their rules appended once more, as iptables-restore
    // does): no foreign change either.
    write("netbackup", &[], &saved);
    let (events, human) = write("netbackup", &["--noflush"], &saved);
    no_foreign(&events, &human, "--noflush restore of the same dump");
}
