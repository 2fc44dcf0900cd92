//! Pure detection tests (no kernel): rulesets from plumb-kubeproxy's generator and
//! small hand-written dumps, writers from the actor catalogue, a clock as a number.

use plumb_kubeproxy::{GeneratorConfig, KubeProxyRules, ProxierOptions, SaveOptions, generate};
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
        .to_iptables_save(&SaveOptions::default());
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
