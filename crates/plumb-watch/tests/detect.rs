//! Pure detection tests (no kernel): rulesets from plumb-kubeproxy's generator and
//! small hand-written dumps, writers from the actor catalogue, a clock as a number.

use plumb_kubeproxy::{
    GeneratorConfig, IptablesSaveOptions, KubeProxyRules, ProxierOptions, generate,
};
use plumb_ruleset::Ruleset;
use plumb_ruleset::iptables::save::{IptablesInput, parse};
use plumb_watch::actor::{Actor, ProcInfo};
use plumb_watch::changes::{ChangeSet, from_rulesets};
use plumb_watch::detect::{Action, FightTracker, Kind, Source, detect, detect_rulesets};
use plumb_watch::nft_events::{Batch, NftMessage, Op, RuleSummary};
use plumb_watch::state::NftState;

fn actor(comm: &str) -> Actor {
    Actor::from_chain(&[ProcInfo {
        pid: 4211,
        comm: Some(comm.into()),
        exe: Some(format!("/opt/x/{comm}")),
        ppid: Some(1),
        ..ProcInfo::default()
    }])
}

fn kube_proxy_dump(services: usize, seed: u64) -> Ruleset {
    let cluster = generate(&GeneratorConfig {
        services,
        seed,
        ..GeneratorConfig::default()
    })
    .unwrap();
    let text = KubeProxyRules::new(&cluster, &ProxierOptions::default())
        .to_iptables_save(&IptablesSaveOptions::default());
    nft_dump(&text)
}

fn nft_dump(text: &str) -> Ruleset {
    parse(
        text,
        &IptablesInput {
            backend: Some(plumb_ruleset::Backend::IptablesNft),
            ..Default::default()
        },
    )
}

/// The dump with table `name`'s user chains and rules removed (an agent's revert).
fn reverted(rs: &Ruleset, name: &str) -> Ruleset {
    let mut out = rs.clone();
    for t in out.tables.iter_mut().filter(|t| &*t.name == name) {
        t.chains.retain(|c| c.is_builtin());
        for c in &mut t.chains {
            c.rules.clear();
        }
    }
    out
}

#[test]
fn seed_000_agent_revert_is_a_foreign_deletion_with_canary_and_unhooking() {
    let before = kube_proxy_dump(12, 1);
    let after = reverted(&before, "nat");
    let mut fights = FightTracker::default();
    let f = detect_rulesets(&before, &after, &actor("venAgent"), 0, &mut fights);
    let kp = f
        .iter()
        .find(|f| f.owner.as_deref() == Some("kube-proxy"))
        .expect("kube-proxy finding");
    assert_eq!(kp.kind, Kind::ForeignChange);
    assert_eq!(kp.action, Action::Deleted);
    assert_eq!(kp.table, "nat");
    assert!(kp.chains.iter().any(|c| c == "KUBE-SVC-NPX46M4PTMTKRN6Y"));
    assert!(kp.chains.iter().any(|c| c == "KUBE-SERVICES"));
    assert!(
        kp.details
            .iter()
            .any(|d| d.contains("KUBE-PROXY-CANARY vanished"))
    );
    assert!(
        kp.details
            .iter()
            .any(|d| d.contains("PREROUTING -j KUBE-SERVICES"))
    );
    assert!(
        kp.details
            .iter()
            .any(|d| d.contains("whole nat table flushed"))
    );
    assert_eq!(kp.revert, Some(1));
    // kubelet's canary in nat is reported under its own owner.
    assert!(
        f.iter()
            .any(|f| f.owner.as_deref() == Some("kubelet") && f.kind == Kind::ForeignChange)
    );
    assert!(f.iter().all(|f| f.kind != Kind::OwnerChange));
}

#[test]
fn kube_proxy_syncs_are_owner_changes() {
    let a = kube_proxy_dump(10, 1);
    let b = kube_proxy_dump(14, 2);
    let mut fights = FightTracker::default();
    let f = detect_rulesets(&a, &b, &actor("kube-proxy"), 0, &mut fights);
    assert!(!f.is_empty());
    assert!(f.iter().all(|f| f.kind == Kind::OwnerChange), "{f:#?}");
    // The same sync by a child of kube-proxy (iptables-restore) is kube-proxy's too.
    let child = Actor::from_chain(&[
        ProcInfo {
            pid: 9001,
            comm: Some("iptables-restor".into()),
            ppid: Some(812),
            ..ProcInfo::default()
        },
        ProcInfo {
            pid: 812,
            comm: Some("kube-proxy".into()),
            ppid: Some(1),
            ..ProcInfo::default()
        },
    ]);
    let f = detect_rulesets(&b, &a, &child, 0, &mut fights);
    assert!(f.iter().all(|f| f.kind == Kind::OwnerChange), "{f:#?}");
    // An identical re-sync changes nothing.
    assert!(detect_rulesets(&a, &a, &actor("kube-proxy"), 0, &mut fights).is_empty());
}

#[test]
fn fight_after_the_third_revert_with_count_and_period() {
    let synced = kube_proxy_dump(5, 1);
    let wiped = reverted(&synced, "nat");
    let mut fights = FightTracker::default();
    let ven = actor("venAgent");
    let kp = actor("kube-proxy");
    let mut t = 0;
    let mut last = Vec::new();
    for cycle in 1..=3u32 {
        last = detect_rulesets(&synced, &wiped, &ven, t, &mut fights);
        let f = last
            .iter()
            .find(|f| f.kind == Kind::ForeignChange && f.owner.as_deref() == Some("kube-proxy"))
            .unwrap();
        assert_eq!(f.revert, Some(cycle));
        assert_eq!(f.fight.is_some(), cycle == 3, "cycle {cycle}");
        t += 3_000;
        let restored = detect_rulesets(&wiped, &synced, &kp, t, &mut fights);
        assert!(
            restored
                .iter()
                .any(|f| f.kind == Kind::OwnerChange && f.action == Action::Restored),
            "{restored:#?}"
        );
        t += 4_000;
    }
    let fight = last
        .iter()
        .find(|f| f.kind == Kind::Fight && f.owner.as_deref() == Some("kube-proxy"))
        .expect("fight event");
    let info = fight.fight.as_ref().unwrap();
    assert_eq!(info.remover, "illumio-ven");
    assert_eq!(info.restorer, "kube-proxy");
    assert_eq!(info.reverts, 3);
    assert_eq!(info.restores, 2);
    assert!((info.span_s - 14.0).abs() < 1e-9, "{info:?}");
    assert!((info.period_s - 7.0).abs() < 1e-9, "{info:?}");
}

#[test]
fn repeated_removals_without_restores_are_not_a_fight_and_old_ones_expire() {
    let synced = kube_proxy_dump(3, 1);
    let wiped = reverted(&synced, "nat");
    let mut fights = FightTracker::new(plumb_watch::detect::FightPolicy {
        window_ms: 60_000,
        min_reverts: 3,
    });
    for i in 0..3 {
        let f = detect_rulesets(&synced, &wiped, &actor("venAgent"), i * 1000, &mut fights);
        assert!(f.iter().all(|f| f.fight.is_none()));
    }
    // Ten minutes later the count starts again.
    let f = detect_rulesets(&synced, &wiped, &actor("venAgent"), 600_000, &mut fights);
    assert!(f.iter().any(|f| f.revert == Some(1)), "{f:#?}");
}

const UFW_BEFORE: &str = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:KUBE-FIREWALL - [0:0]\n-A INPUT -j KUBE-FIREWALL\nCOMMIT\n";
const UFW_AFTER: &str = "*filter\n:INPUT DROP [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n:KUBE-FIREWALL - [0:0]\n:ufw-before-input - [0:0]\n-A INPUT -j ufw-before-input\n-A INPUT -j KUBE-FIREWALL\nCOMMIT\n";

#[test]
fn ufw_policy_drop_and_hook_insertion_ahead_of_kubernetes() {
    let mut fights = FightTracker::default();
    let f = detect_rulesets(
        &nft_dump(UFW_BEFORE),
        &nft_dump(UFW_AFTER),
        &actor("ufw"),
        0,
        &mut fights,
    );
    let policies: Vec<&str> = f
        .iter()
        .filter(|f| f.kind == Kind::PolicyChange)
        .flat_map(|f| f.details.iter().map(String::as_str))
        .collect();
    assert_eq!(
        policies,
        [
            "INPUT policy ACCEPT -> DROP",
            "FORWARD policy ACCEPT -> DROP"
        ]
    );
    let ins = f
        .iter()
        .find(|f| f.action == Action::Inserted)
        .expect("insertion");
    assert_eq!(ins.kind, Kind::ForeignChange);
    assert_eq!(ins.chains, ["INPUT"]);
    assert!(
        ins.details[0].contains("-j ufw-before-input"),
        "{:?}",
        ins.details
    );
    // ufw's own chain is an owner change of ufw.
    assert!(
        f.iter()
            .any(|f| f.kind == Kind::OwnerChange && f.owner.as_deref() == Some("ufw"))
    );
    // Calico inserting its hook first is normal.
    let calico = detect_rulesets(
        &nft_dump(UFW_BEFORE),
        &nft_dump(
            "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:KUBE-FIREWALL - [0:0]\n:cali-INPUT - [0:0]\n-A INPUT -j cali-INPUT\n-A INPUT -j KUBE-FIREWALL\nCOMMIT\n",
        ),
        &actor("calico-node"),
        0,
        &mut fights,
    );
    assert!(
        calico.iter().all(|f| f.kind == Kind::OwnerChange),
        "{calico:#?}"
    );
}

#[test]
fn removing_a_hook_rule_by_hand_is_foreign_unhooking() {
    let before = nft_dump(
        "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\nCOMMIT\n",
    );
    let after = nft_dump("*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\nCOMMIT\n");
    let shell = Actor::from_chain(&[
        ProcInfo {
            pid: 10,
            comm: Some("iptables".into()),
            ppid: Some(9),
            ..ProcInfo::default()
        },
        ProcInfo {
            pid: 9,
            comm: Some("bash".into()),
            ppid: Some(1),
            ..ProcInfo::default()
        },
    ]);
    assert_eq!(shell.identity.as_ref().unwrap().name, "shell");
    let f = detect_rulesets(&before, &after, &shell, 0, &mut FightTracker::default());
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].kind, Kind::ForeignChange);
    assert_eq!(f[0].action, Action::Unhooked);
    assert_eq!(f[0].chains, ["PREROUTING -j KUBE-SERVICES"]);
}

#[test]
fn resync_and_poll_sources() {
    let synced = kube_proxy_dump(3, 1);
    let wiped = reverted(&synced, "nat");
    let changes = from_rulesets(&synced, &wiped);
    let mut fights = FightTracker::default();
    let r = detect(&changes, &Actor::unknown(), Source::Resync, 0, &mut fights);
    assert!(!r.is_empty());
    assert!(r.iter().all(|f| f.kind == Kind::Resync));
    // A poll (legacy without audit): removals are still flagged, writer unknown.
    let p = detect(&changes, &Actor::unknown(), Source::Poll, 0, &mut fights);
    assert!(
        p.iter().any(|f| f.kind == Kind::ForeignChange
            && f.details.iter().any(|d| d.contains("writer unknown")))
    );
    // ... additions by an unknown writer are not called tampering.
    let back = from_rulesets(&wiped, &synced);
    let p = detect(&back, &Actor::unknown(), Source::Poll, 0, &mut fights);
    assert!(p.iter().all(|f| f.kind == Kind::OwnerChange), "{p:#?}");
}

fn chain(op: Op, table: &str, name: &str) -> NftMessage {
    NftMessage::Chain {
        op,
        family: 2,
        table: table.into(),
        name: name.into(),
        hook: None,
        policy: None,
    }
}

fn rule(op: Op, table: &str, chain: &str, jump: Option<&str>, appended: bool) -> NftMessage {
    NftMessage::Rule {
        op,
        family: 2,
        table: table.into(),
        chain: chain.into(),
        handle: None,
        appended,
        summary: RuleSummary {
            jump: jump.map(str::to_string),
            verdict: None,
        },
        fingerprint: 0,
    }
}

fn batch(messages: Vec<NftMessage>) -> Batch {
    Batch {
        generation: 1,
        pid: Some(1),
        comm: None,
        messages,
        received: None,
        started: None,
    }
}

#[test]
fn state_turns_notifications_into_net_changes() {
    let mut s = NftState::from_ruleset(&nft_dump(
        "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-A - [0:0]\n-A PREROUTING -j KUBE-SERVICES\n-A KUBE-SERVICES -j KUBE-SVC-A\n-A KUBE-SVC-A -j ACCEPT\nCOMMIT\n",
    ));
    // kube-proxy's restore: flush and refill KUBE-SERVICES, chain re-declared.
    let c = s.apply(&batch(vec![
        chain(Op::New, "nat", "KUBE-SERVICES"),
        rule(Op::Del, "nat", "KUBE-SERVICES", Some("KUBE-SVC-A"), false),
        rule(Op::New, "nat", "KUBE-SERVICES", Some("KUBE-SVC-A"), true),
    ]));
    let t = &c.tables[0];
    assert!(t.chains_added.is_empty() && t.chains_removed.is_empty());
    assert_eq!(t.rules_added["KUBE-SERVICES"], 1);
    assert_eq!(t.rules_removed["KUBE-SERVICES"], 1);
    let f = detect(
        &c,
        &actor("kube-proxy"),
        Source::Write,
        0,
        &mut FightTracker::default(),
    );
    assert!(f.iter().all(|f| f.kind == Kind::OwnerChange));
    // An agent flushes and deletes KUBE-SVC-A after unhooking it.
    let c = s.apply(&batch(vec![
        rule(Op::Del, "nat", "KUBE-SERVICES", Some("KUBE-SVC-A"), false),
        rule(Op::Del, "nat", "KUBE-SVC-A", None, false),
        chain(Op::Del, "nat", "KUBE-SVC-A"),
    ]));
    let t = &c.tables[0];
    assert_eq!(t.chains_removed.len(), 1);
    assert_eq!(t.chains_removed[0].name, "KUBE-SVC-A");
    assert_eq!(
        t.chains_removed[0].rules, 1,
        "rules it held before the batch"
    );
    let f = detect(
        &c,
        &actor("venAgent"),
        Source::Write,
        0,
        &mut FightTracker::default(),
    );
    assert_eq!(f[0].kind, Kind::ForeignChange);
    assert_eq!(f[0].action, Action::Deleted);
    assert!(f[0].details.iter().any(|d| d.contains("also flushed")));
    // A rule inserted (not appended) into PREROUTING ahead of kube-proxy's hook.
    let c = s.apply(&batch(vec![rule(
        Op::New,
        "nat",
        "PREROUTING",
        None,
        false,
    )]));
    assert!(c.tables[0].hook_rules[0].ahead_of_owned_hooks);
    let c = s.apply(&batch(vec![rule(Op::New, "nat", "PREROUTING", None, true)]));
    assert!(!c.tables[0].hook_rules[0].ahead_of_owned_hooks);
    // Policy through NEWCHAIN on a base chain.
    let c = s.apply(&batch(vec![NftMessage::Chain {
        op: Op::New,
        family: 2,
        table: "nat".into(),
        name: "PREROUTING".into(),
        hook: Some(0),
        policy: Some(0),
    }]));
    assert_eq!(c.tables[0].policies[0].to, "DROP");
    assert_eq!(c.tables[0].policies[0].from.as_deref(), Some("ACCEPT"));
    // Whole table deleted.
    let c = s.apply(&batch(vec![
        rule(Op::Del, "nat", "PREROUTING", Some("KUBE-SERVICES"), false),
        rule(Op::Del, "nat", "PREROUTING", None, false),
        rule(Op::Del, "nat", "PREROUTING", None, true),
        chain(Op::Del, "nat", "KUBE-SERVICES"),
        chain(Op::Del, "nat", "PREROUTING"),
        NftMessage::Table {
            op: Op::Del,
            family: 2,
            name: "nat".into(),
        },
    ]));
    assert!(c.tables[0].table_removed);
    assert!(c.tables[0].whole_table_flushed);
    assert_eq!(s.chain_count(2, "nat"), 0);
}

#[test]
fn resync_diff_between_believed_and_dumped_state() {
    let before = NftState::from_ruleset(&kube_proxy_dump(4, 1));
    let after = NftState::from_ruleset(&reverted(&kube_proxy_dump(4, 1), "nat"));
    let c: ChangeSet = before.diff_to(&after);
    let nat = c.tables.iter().find(|t| t.table == "nat").unwrap();
    assert!(nat.chains_removed.iter().any(|c| c.name == "KUBE-SERVICES"));
    assert!(before.diff_to(&before).is_empty());
}

#[test]
fn native_nft_tables_are_owned_by_table_name() {
    let mut s = NftState::default();
    let msgs = vec![
        NftMessage::Table {
            op: Op::New,
            family: 2,
            name: "kube-proxy".into(),
        },
        chain(Op::New, "kube-proxy", "services"),
    ];
    let mut msgs: Vec<NftMessage> = msgs
        .into_iter()
        .map(|m| match m {
            NftMessage::Chain { op, name, .. } => NftMessage::Chain {
                op,
                family: 2,
                table: "kube-proxy".into(),
                name,
                hook: None,
                policy: None,
            },
            m => m,
        })
        .collect();
    s.apply(&batch(std::mem::take(&mut msgs)));
    let c = s.apply(&batch(vec![NftMessage::Chain {
        op: Op::Del,
        family: 2,
        table: "kube-proxy".into(),
        name: "services".into(),
        hook: None,
        policy: None,
    }]));
    let f = detect(
        &c,
        &actor("venAgent"),
        Source::Write,
        0,
        &mut FightTracker::default(),
    );
    assert_eq!(f[0].owner.as_deref(), Some("kube-proxy"));
    assert_eq!(f[0].kind, Kind::ForeignChange);
}

/// iptables-nft creates built-in chains on first use: ufw creating `FORWARD` with
/// policy DROP in an existing filter table is a policy change from none.
#[test]
fn a_new_base_chain_that_drops_is_a_policy_change() {
    let mut s = NftState::from_ruleset(&nft_dump("*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n"));
    let c = s.apply(&batch(vec![NftMessage::Chain {
        op: Op::New,
        family: 2,
        table: "filter".into(),
        name: "FORWARD".into(),
        hook: Some(2),
        policy: Some(0),
    }]));
    let p = &c.tables[0].policies;
    assert_eq!(p.len(), 1, "{c:#?}");
    assert_eq!(
        (p[0].chain.as_str(), p[0].from.as_deref()),
        ("FORWARD", None)
    );
    let f = detect(
        &c,
        &actor("ufw"),
        Source::Write,
        0,
        &mut FightTracker::default(),
    );
    let f = f
        .iter()
        .find(|f| f.kind == Kind::PolicyChange)
        .expect("policy change");
    assert!(
        f.details
            .iter()
            .any(|d| d == "FORWARD policy none (new chain) -> DROP"),
        "{:?}",
        f.details
    );
    // An accepting one is not.
    let c = s.apply(&batch(vec![NftMessage::Chain {
        op: Op::New,
        family: 2,
        table: "filter".into(),
        name: "OUTPUT".into(),
        hook: Some(3),
        policy: Some(1),
    }]));
    assert!(c.tables[0].policies.is_empty());
}

/// A rule notification as the kernel sends it: with its handle and fingerprint.
fn krule(op: Op, chain: &str, jump: Option<&str>, handle: u64, fingerprint: u64) -> NftMessage {
    NftMessage::Rule {
        op,
        family: 2,
        table: "nat".into(),
        chain: chain.into(),
        handle: Some(handle),
        appended: op == Op::New,
        summary: RuleSummary {
            jump: jump.map(str::to_string),
            verdict: None,
        },
        fingerprint,
    }
}

/// nat with PREROUTING -> KUBE-SERVICES -> KUBE-SVC-A (three rules), all appended;
/// returns the state and the next handle.
fn hooked_nat() -> (NftState, u64) {
    let mut s = NftState::default();
    s.apply(&batch(vec![
        NftMessage::Chain {
            op: Op::New,
            family: 2,
            table: "nat".into(),
            name: "PREROUTING".into(),
            hook: Some(0),
            policy: Some(1),
        },
        chain(Op::New, "nat", "KUBE-SERVICES"),
        chain(Op::New, "nat", "KUBE-SVC-A"),
        krule(Op::New, "PREROUTING", Some("KUBE-SERVICES"), 1, 100),
        krule(Op::New, "KUBE-SERVICES", Some("KUBE-SVC-A"), 2, 200),
        krule(Op::New, "KUBE-SVC-A", None, 3, 301),
        krule(Op::New, "KUBE-SVC-A", None, 4, 302),
        krule(Op::New, "KUBE-SVC-A", None, 5, 303),
    ]));
    (s, 6)
}

/// Rules as a chain holds them: (jump, fingerprint).
type Rules = Vec<(Option<&'static str>, u64)>;
/// The rules a writer puts in each chain.
type Refill<'a> = &'a dyn Fn(&str) -> Rules;
/// Rules of `hooked_nat` as the kernel has them: (jump, handle, fingerprint).
type Held = Vec<(Option<&'static str>, u64, u64)>;

/// What iptables-nft-restore sends to rewrite `chains` of `hooked_nat` (each
/// flushed in order, then refilled by appends) with the fingerprints `refill` gives.
fn rewrite(refill: Refill<'_>) -> Vec<NftMessage> {
    let before: [(&str, Held); 3] = [
        ("PREROUTING", vec![(Some("KUBE-SERVICES"), 1, 100)]),
        ("KUBE-SERVICES", vec![(Some("KUBE-SVC-A"), 2, 200)]),
        (
            "KUBE-SVC-A",
            vec![(None, 3, 301), (None, 4, 302), (None, 5, 303)],
        ),
    ];
    let mut msgs = Vec::new();
    let mut handle = 6;
    for (chain, rules) in &before {
        for (jump, h, fp) in rules {
            msgs.push(krule(Op::Del, chain, *jump, *h, *fp));
        }
    }
    for (chain, _) in &before {
        for (jump, fp) in refill(chain) {
            msgs.push(krule(Op::New, chain, jump, handle, fp));
            handle += 1;
        }
    }
    msgs
}

fn same_rules(chain: &str) -> Rules {
    match chain {
        "PREROUTING" => vec![(Some("KUBE-SERVICES"), 100)],
        "KUBE-SERVICES" => vec![(Some("KUBE-SVC-A"), 200)],
        _ => vec![(None, 301), (None, 302), (None, 303)],
    }
}

/// Regression (a backup tool's iptables-nft-restore of what was there was reported
/// as kube-proxy's hooks removed, "unhooked"): chains flushed and refilled with the
/// same rules in the same order are rewritten with no net change, their hook rules
/// cancel out, and a writer that is not the owner makes a `rewrite`, not a
/// foreign change; the owner's own rewrite is an owner change.
#[test]
fn a_flush_and_refill_with_the_same_rules_is_a_rewrite_not_a_foreign_change() {
    let (mut s, _) = hooked_nat();
    let c = s.apply(&batch(rewrite(&same_rules)));
    let t = &c.tables[0];
    assert!(
        t.rules_added.is_empty() && t.rules_removed.is_empty(),
        "{t:#?}"
    );
    assert!(t.hook_rules.is_empty(), "{t:#?}");
    assert_eq!(
        t.rules_rewritten
            .iter()
            .map(|(c, n)| (c.as_str(), *n))
            .collect::<Vec<_>>(),
        [("KUBE-SERVICES", 1), ("KUBE-SVC-A", 3), ("PREROUTING", 1)]
    );
    let f = detect(
        &c,
        &actor("netbackup"),
        Source::Write,
        0,
        &mut FightTracker::default(),
    );
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!((f[0].kind, f[0].action), (Kind::Rewrite, Action::Rewritten));
    assert_eq!(f[0].owner.as_deref(), Some("kube-proxy"));
    assert_eq!(f[0].chains, ["KUBE-SERVICES", "KUBE-SVC-A"]);
    let f = detect(
        &c,
        &actor("kube-proxy"),
        Source::Write,
        0,
        &mut FightTracker::default(),
    );
    assert!(
        f.iter()
            .all(|f| f.kind == Kind::OwnerChange && f.action == Action::Rewritten),
        "{f:#?}"
    );
    // Rewritten again: the new handles count, and it is again no change.
    let mut msgs = Vec::new();
    for (chain, first, n, fps) in [
        ("PREROUTING", 6, 1, vec![100]),
        ("KUBE-SERVICES", 7, 1, vec![200]),
        ("KUBE-SVC-A", 8, 3, vec![301, 302, 303]),
    ] {
        for i in 0..n {
            msgs.push(krule(Op::Del, chain, None, first + i, fps[i as usize]));
        }
    }
    let c = s.apply(&batch(msgs));
    let t = &c.tables[0];
    assert!(
        t.rules_rewritten.is_empty() && t.rules_removed.len() == 3,
        "flushed: {t:#?}"
    );
}

/// The same flush and refill, but not the same rules: a rule changed, two swapped,
/// one fewer, the hook left out. Each is still a change (and a foreign one).
#[test]
fn a_refill_with_other_rules_is_still_a_change() {
    let cases: [(&str, Refill<'_>, Action); 4] = [
        (
            "a rule changed",
            &|c| match c {
                "KUBE-SVC-A" => vec![(None, 301), (None, 999), (None, 303)],
                c => same_rules(c),
            },
            Action::Modified,
        ),
        (
            "two rules swapped",
            &|c| match c {
                "KUBE-SVC-A" => vec![(None, 302), (None, 301), (None, 303)],
                c => same_rules(c),
            },
            Action::Modified,
        ),
        (
            "one rule fewer",
            &|c| match c {
                "KUBE-SVC-A" => vec![(None, 301), (None, 302)],
                c => same_rules(c),
            },
            Action::Modified,
        ),
        (
            "the hook left out",
            &|c| match c {
                "PREROUTING" => vec![],
                c => same_rules(c),
            },
            Action::Unhooked,
        ),
    ];
    for (what, refill, action) in cases {
        let (mut s, _) = hooked_nat();
        let c = s.apply(&batch(rewrite(refill)));
        let f = detect(
            &c,
            &actor("netbackup"),
            Source::Write,
            0,
            &mut FightTracker::default(),
        );
        let foreign = f
            .iter()
            .find(|f| f.kind == Kind::ForeignChange)
            .unwrap_or_else(|| panic!("{what}: {f:#?}"));
        assert_eq!(foreign.action, action, "{what}: {f:#?}");
        if action == Action::Modified {
            assert_eq!(foreign.chains, ["KUBE-SVC-A"], "{what}");
            assert!(
                foreign
                    .details
                    .iter()
                    .any(|d| d.contains("also rewrote 1 kube-proxy")),
                "{what}: {:?}",
                foreign.details
            );
        } else {
            assert_eq!(foreign.chains, ["PREROUTING -j KUBE-SERVICES"], "{what}");
        }
    }
}

/// A rewrite is recognised only when the removals are provably the chain's rules in
/// its order: removed out of handle order, after an addition, or in a chain whose
/// order is not its handles' (a rule was inserted), the same fingerprints are still
/// reported as rules removed and added.
#[test]
fn a_rewrite_is_recognised_only_when_the_order_is_known() {
    // Removed out of handle order (3, 5, 4) and put back as 301, 303, 302: the
    // chain was 301 302 303 and is now 301 303 302.
    let (mut s, _) = hooked_nat();
    let c = s.apply(&batch(vec![
        krule(Op::Del, "KUBE-SVC-A", None, 3, 301),
        krule(Op::Del, "KUBE-SVC-A", None, 5, 303),
        krule(Op::Del, "KUBE-SVC-A", None, 4, 302),
        krule(Op::New, "KUBE-SVC-A", None, 6, 301),
        krule(Op::New, "KUBE-SVC-A", None, 7, 303),
        krule(Op::New, "KUBE-SVC-A", None, 8, 302),
    ]));
    assert!(c.tables[0].rules_rewritten.is_empty(), "{c:#?}");
    assert_eq!(c.tables[0].rules_added["KUBE-SVC-A"], 3);
    // A removal after an addition.
    let (mut s, _) = hooked_nat();
    let c = s.apply(&batch(vec![
        krule(Op::Del, "KUBE-SERVICES", None, 2, 200),
        krule(Op::New, "KUBE-SERVICES", None, 6, 200),
        krule(Op::Del, "KUBE-SERVICES", None, 6, 200),
        krule(Op::New, "KUBE-SERVICES", None, 7, 200),
    ]));
    assert!(c.tables[0].rules_rewritten.is_empty(), "{c:#?}");
    // A chain with an inserted rule: its order is not its handles'. Inserted 304 at
    // the top (handle 6): 304 301 302 303. Removed by handle order (3, 4, 5, 6) and
    // put back as 301 302 303 304, it changed; it is not called a rewrite.
    let (mut s, _) = hooked_nat();
    let mut insert = krule(Op::New, "KUBE-SVC-A", None, 6, 304);
    if let NftMessage::Rule { appended, .. } = &mut insert {
        *appended = false;
    }
    s.apply(&batch(vec![insert]));
    let c = s.apply(&batch(vec![
        krule(Op::Del, "KUBE-SVC-A", None, 3, 301),
        krule(Op::Del, "KUBE-SVC-A", None, 4, 302),
        krule(Op::Del, "KUBE-SVC-A", None, 5, 303),
        krule(Op::Del, "KUBE-SVC-A", None, 6, 304),
        krule(Op::New, "KUBE-SVC-A", None, 7, 301),
        krule(Op::New, "KUBE-SVC-A", None, 8, 302),
        krule(Op::New, "KUBE-SVC-A", None, 9, 303),
        krule(Op::New, "KUBE-SVC-A", None, 10, 304),
    ]));
    assert!(c.tables[0].rules_rewritten.is_empty(), "{c:#?}");
    // Once rewritten by appends the chain is in handle order again: the next
    // identical rewrite is recognised.
    let c = s.apply(&batch(vec![
        krule(Op::Del, "KUBE-SVC-A", None, 7, 301),
        krule(Op::Del, "KUBE-SVC-A", None, 8, 302),
        krule(Op::Del, "KUBE-SVC-A", None, 9, 303),
        krule(Op::Del, "KUBE-SVC-A", None, 10, 304),
        krule(Op::New, "KUBE-SVC-A", None, 11, 301),
        krule(Op::New, "KUBE-SVC-A", None, 12, 302),
        krule(Op::New, "KUBE-SVC-A", None, 13, 303),
        krule(Op::New, "KUBE-SVC-A", None, 14, 304),
    ]));
    assert_eq!(c.tables[0].rules_rewritten["KUBE-SVC-A"], 4, "{c:#?}");
}

/// A hook rule removed and put back in one transaction is not "unhooked", even when
/// the chain changed otherwise; a duplicate removed is one hook fewer, not none; a
/// rule appended before the hook was put back now runs ahead of it: an insertion.
#[test]
fn hook_rules_removed_and_put_back_cancel_out() {
    use plumb_watch::changes::{HookRule, net_hook_rules};
    let hook = |added: bool, jump: &str| HookRule {
        chain: "PREROUTING".into(),
        added,
        jump: Some(jump.into()),
        verdict: None,
        inserted: added.then_some(false),
        ahead_of_owned_hooks: false,
        text: None,
    };
    let mut hooks = vec![
        hook(false, "KUBE-SERVICES"),
        hook(false, "KUBE-SERVICES"),
        hook(false, "CNI-HOSTPORT-DNAT"),
        hook(true, "KUBE-SERVICES"),
    ];
    net_hook_rules(&mut hooks);
    assert_eq!(
        hooks,
        [
            hook(false, "KUBE-SERVICES"),
            hook(false, "CNI-HOSTPORT-DNAT")
        ]
    );
    // Through the state: PREROUTING rebuilt with a new rule ahead of the hook.
    let (mut s, _) = hooked_nat();
    let c = s.apply(&batch(vec![
        krule(Op::Del, "PREROUTING", Some("KUBE-SERVICES"), 1, 100),
        krule(Op::New, "PREROUTING", None, 6, 555),
        krule(Op::New, "PREROUTING", Some("KUBE-SERVICES"), 7, 100),
    ]));
    let t = &c.tables[0];
    assert_eq!(t.hook_rules.len(), 1, "{t:#?}");
    assert!(t.hook_rules[0].jump.is_none() && t.hook_rules[0].ahead_of_owned_hooks);
    let f = detect(
        &c,
        &actor("netbackup"),
        Source::Write,
        0,
        &mut FightTracker::default(),
    );
    assert!(f.iter().all(|f| f.action != Action::Unhooked), "{f:#?}");
    assert!(
        f.iter()
            .any(|f| f.kind == Kind::ForeignChange && f.action == Action::Inserted),
        "{f:#?}"
    );
    // Appended after the hook was put back: behind it, nothing to report.
    let (mut s, _) = hooked_nat();
    let c = s.apply(&batch(vec![
        krule(Op::Del, "PREROUTING", Some("KUBE-SERVICES"), 1, 100),
        krule(Op::New, "PREROUTING", Some("KUBE-SERVICES"), 6, 100),
        krule(Op::New, "PREROUTING", None, 7, 555),
    ]));
    let f = detect(
        &c,
        &actor("netbackup"),
        Source::Write,
        0,
        &mut FightTracker::default(),
    );
    assert!(f.is_empty(), "{f:#?}");
}
