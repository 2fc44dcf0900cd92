//! Property tests: decoders never panic on kernel input; detection never panics; an
//! owner's own full sync never yields a foreign-change.

use plumb_kubeproxy::{
    GeneratorConfig, IptablesSaveOptions, KubeProxyRules, ProxierOptions, generate,
};
use plumb_ruleset::iptables::save::{IptablesInput, parse};
use plumb_watch::actor::{Actor, ProcInfo};
use plumb_watch::changes::{ChainDelta, ChangeSet, HookRule, PolicyDelta, TableChanges};
use plumb_watch::detect::{FightTracker, Kind, Source, detect, detect_rulesets};
use plumb_watch::nft_events::{Batcher, decode};
use plumb_watch::state::NftState;
use proptest::prelude::*;

fn actor(comm: &str) -> Actor {
    Actor::from_chain(&[ProcInfo {
        pid: 1,
        comm: Some(comm.into()),
        ..ProcInfo::default()
    }])
}

const CHAINS: &[&str] = &[
    "KUBE-SERVICES",
    "KUBE-SVC-NPX46M4PTMTKRN6Y",
    "KUBE-PROXY-CANARY",
    "KUBE-KUBELET-CANARY",
    "INPUT",
    "PREROUTING",
    "cali-INPUT",
    "ufw-before-input",
    "FLANNEL-FWD",
    "mine",
];
const COMMS: &[&str] = &[
    "kube-proxy",
    "kubelet",
    "venAgent",
    "ufw",
    "calico-node",
    "iptables",
    "",
    "bash",
];

fn name() -> impl Strategy<Value = String> {
    prop::sample::select(CHAINS).prop_map(str::to_string)
}

fn table() -> impl Strategy<Value = TableChanges> {
    (
        prop::sample::select(&["nat", "filter", "kube-proxy", "calico", "x"][..]),
        prop::sample::select(&["ip", "ip6", "inet"][..]),
        prop::collection::vec((name(), 0usize..5), 0..5),
        prop::collection::vec((name(), 0usize..5), 0..5),
        prop::collection::btree_map(name(), 0usize..5, 0..4),
        prop::collection::btree_map(name(), 0usize..5, 0..4),
        prop::collection::vec(
            (
                name(),
                any::<bool>(),
                prop::option::of(name()),
                any::<bool>(),
            ),
            0..4,
        ),
        any::<(bool, bool, bool)>(),
        prop::collection::btree_map(name(), 1usize..5, 0..3),
    )
        .prop_map(
            |(t, fam, add, rm, ra, rr, hooks, (ta, tr, flush), rewritten)| TableChanges {
                family: fam.into(),
                table: t.into(),
                table_added: ta,
                table_removed: tr,
                chains_added: add
                    .into_iter()
                    .map(|(name, rules)| ChainDelta { name, rules })
                    .collect(),
                chains_removed: rm
                    .into_iter()
                    .map(|(name, rules)| ChainDelta { name, rules })
                    .collect(),
                rules_after: ra.clone(),
                rules_added: ra,
                rules_removed: rr,
                rules_rewritten: rewritten,
                policies: vec![PolicyDelta {
                    chain: "FORWARD".into(),
                    from: None,
                    to: "DROP".into(),
                }],
                hook_rules: hooks
                    .into_iter()
                    .map(|(chain, added, jump, ahead)| HookRule {
                        chain,
                        added,
                        jump,
                        verdict: None,
                        inserted: Some(ahead),
                        ahead_of_owned_hooks: ahead,
                        text: None,
                    })
                    .collect(),
                whole_table_flushed: flush,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn netlink_decoder_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let msgs = decode(&bytes);
        let _ = Batcher::default().push(msgs, std::time::SystemTime::UNIX_EPOCH);
    }

    #[test]
    fn netlink_decoder_never_panics_on_framed_garbage(
        kind in 0u16..40, flags in any::<u16>(), body in prop::collection::vec(any::<u8>(), 0..256)
    ) {
        let msg = plumb_os::netlink::build::message((10 << 8) | kind, flags, &body);
        let _ = decode(&msg);
    }

    #[test]
    fn audit_parser_never_panics(kind in 1000u16..1400, text in ".{0,200}") {
        let _ = plumb_watch::audit::parse_record(kind, &text);
        let _ = plumb_watch::audit::parse_log_line(&text);
        let mut asm = plumb_watch::audit::Assembler::default();
        if let Some(r) = plumb_watch::audit::parse_record(kind, &format!("audit(1.2:3): {text}")) {
            let _ = asm.push(r, 0);
        }
        let _ = asm.flush_older(1000, 1);
    }

    #[test]
    fn detection_never_panics(
        tables in prop::collection::vec(table(), 0..4),
        comm in prop::sample::select(COMMS),
        now in 0u64..1_000_000,
        source in prop::sample::select(&[Source::Write, Source::Resync, Source::Poll][..]),
    ) {
        let mut fights = FightTracker::default();
        let set = ChangeSet { tables };
        for t in [now, now + 1000, now + 5000] {
            let findings = detect(&set, &actor(comm), source, t, &mut fights);
            for f in findings {
                let e = plumb_watch::Event::from_finding(f, std::time::SystemTime::UNIX_EPOCH, None, &actor(comm), None, None);
                let _ = e.human();
                let _ = serde_json::to_string(&e).unwrap();
            }
        }
    }

    /// Chains rewritten with the same rules, and nothing else: whoever the writer,
    /// never a foreign change (a rewrite, or the owner's own change).
    #[test]
    fn a_rewrite_alone_is_never_a_foreign_change(
        rewritten in prop::collection::btree_map(name(), 1usize..5, 1..6),
        t in prop::sample::select(&["nat", "filter", "kube-proxy", "calico", "x"][..]),
        fam in prop::sample::select(&["ip", "ip6", "inet"][..]),
        comm in prop::sample::select(COMMS),
        source in prop::sample::select(&[Source::Write, Source::Poll][..]),
    ) {
        let set = ChangeSet {
            tables: vec![TableChanges {
                family: fam.into(),
                table: t.into(),
                rules_rewritten: rewritten,
                ..TableChanges::default()
            }],
        };
        for f in detect(&set, &actor(comm), source, 0, &mut FightTracker::default()) {
            prop_assert!(matches!(f.kind, Kind::Rewrite | Kind::OwnerChange), "{:?}", f);
            prop_assert_eq!(f.action, plumb_watch::detect::Action::Rewritten);
        }
    }

    #[test]
    fn an_owners_own_full_sync_never_yields_foreign_change(
        s1 in 0usize..25, s2 in 0usize..25, seed1 in 0u64..50, seed2 in 0u64..50,
        eps in 0usize..4, writer in prop::sample::select(&["kube-proxy", "kubelet"][..]),
    ) {
        let dump = |services, seed| {
            let c = generate(&GeneratorConfig { services, seed, endpoints_per_service: eps, ..GeneratorConfig::default() }).unwrap();
            let text = KubeProxyRules::new(&c, &ProxierOptions::default()).to_iptables_save(&IptablesSaveOptions::default());
            parse(&text, &IptablesInput { backend: Some(plumb_ruleset::Backend::IptablesNft), ..Default::default() })
        };
        let (a, b) = (dump(s1, seed1), dump(s2, seed2));
        let mut fights = FightTracker::default();
        for f in detect_rulesets(&a, &b, &actor(writer), 0, &mut fights) {
            prop_assert_eq!(f.kind, Kind::OwnerChange, "{:?}", f);
        }
        // The same through the notification path: seeding state never panics and a
        // no-op diff is empty.
        let st = NftState::from_ruleset(&a);
        prop_assert!(st.diff_to(&st).is_empty());
    }
}
