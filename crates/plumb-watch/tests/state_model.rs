//! `state::Transaction` (the listener's hot path, optimised) against a plain model
//! written for clarity: ordered maps, one rule of the spec per line. Random
//! transactions of table, chain and rule notifications, some abandoned half-way (a
//! gap) or rolled back, must give the same change sets (also half-way:
//! `Transaction::changes_so_far`) and leave the same chains.

use plumb_watch::changes::{ChainDelta, ChangeSet, HookRule, PolicyDelta, TableChanges};
use plumb_watch::changes::{is_builtin_chain, is_owned_chain};
use plumb_watch::nft_events::{NftMessage, Op, RuleSummary, family_name};
use plumb_watch::state::{NftState, Transaction};
use proptest::prelude::*;
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Chain {
    rules: usize,
    base: bool,
    policy: Option<u32>,
    owned_hooks: usize,
}

type Tables = BTreeMap<(u8, String), BTreeMap<String, Chain>>;

#[derive(Default)]
struct TableTxn {
    existed: bool,
    exists: bool,
    rules_before: usize,
    /// chain -> (state before, rules added, rules removed)
    touched: BTreeMap<String, (Option<Chain>, usize, usize)>,
    hooks: Vec<HookRule>,
}

fn policy_name(p: u32) -> String {
    match p {
        0 => "DROP",
        1 => "ACCEPT",
        _ => "OTHER",
    }
    .to_string()
}

/// Applies one transaction to `tables`; returns its net effect.
fn model(tables: &mut Tables, msgs: &[NftMessage]) -> ChangeSet {
    let mut txn: BTreeMap<(u8, String), TableTxn> = BTreeMap::new();
    for m in msgs {
        let (family, table) = match m {
            NftMessage::Table { family, name, .. } => (*family, name.clone()),
            NftMessage::Chain { family, table, .. } | NftMessage::Rule { family, table, .. } => {
                (*family, table.clone())
            }
            _ => continue,
        };
        let key = (family, table);
        let tx = txn.entry(key.clone()).or_insert_with(|| {
            let t = tables.get(&key);
            TableTxn {
                existed: t.is_some(),
                exists: t.is_some(),
                rules_before: t.map_or(0, |t| t.values().map(|c| c.rules).sum()),
                ..TableTxn::default()
            }
        });
        if let NftMessage::Table { op: Op::Del, .. } = m {
            for (name, c) in tables.remove(&key).unwrap_or_default() {
                tx.touched.entry(name).or_insert((Some(c), 0, 0));
            }
            tx.exists = false;
            continue;
        }
        tx.exists = true;
        let t = tables.entry(key).or_default();
        let chain = match m {
            NftMessage::Chain { name, .. } => name,
            NftMessage::Rule { chain, .. } => chain,
            _ => continue,
        };
        let before = t.get(chain).copied();
        let touched = tx.touched.entry(chain.clone()).or_insert((before, 0, 0));
        match m {
            NftMessage::Chain {
                op: Op::New,
                hook,
                policy,
                ..
            } => {
                let c = t.entry(chain.clone()).or_default();
                c.base |= hook.is_some();
                c.policy = policy.or(c.policy);
            }
            NftMessage::Chain { op: Op::Del, .. } => {
                t.remove(chain);
            }
            NftMessage::Rule {
                op,
                appended,
                summary,
                ..
            } => {
                let c = t.entry(chain.clone()).or_default();
                let hook_chain = c.base || is_builtin_chain(chain);
                let owned_jump = hook_chain && summary.jump.as_deref().is_some_and(is_owned_chain);
                let hooks_before = c.owned_hooks;
                let added = *op == Op::New;
                if added {
                    c.rules += 1;
                    touched.1 += 1;
                    c.owned_hooks += usize::from(owned_jump);
                } else {
                    c.rules = c.rules.saturating_sub(1);
                    touched.2 += 1;
                    if owned_jump {
                        c.owned_hooks = c.owned_hooks.saturating_sub(1);
                    }
                }
                if hook_chain {
                    tx.hooks.push(HookRule {
                        chain: chain.clone(),
                        added,
                        jump: summary.jump.clone(),
                        verdict: summary.verdict.clone(),
                        inserted: added.then_some(!appended),
                        ahead_of_owned_hooks: added && !appended && hooks_before > 0,
                        text: None,
                    });
                }
            }
            _ => {}
        }
    }
    let mut out = ChangeSet::default();
    for ((family, table), tx) in txn {
        let now = tables.get(&(family, table.clone()));
        let mut tc = TableChanges {
            family: family_name(family).to_string(),
            table_added: !tx.existed && tx.exists,
            table_removed: tx.existed && !tx.exists,
            hook_rules: tx.hooks,
            table,
            ..TableChanges::default()
        };
        for (name, (before, added, removed)) in tx.touched {
            let delta = |c: &Chain| ChainDelta {
                name: name.clone(),
                rules: c.rules,
            };
            match (before, now.and_then(|t| t.get(&name))) {
                (None, Some(c)) => {
                    tc.chains_added.push(delta(c));
                    // A new base chain that drops by default is a policy change.
                    if c.base && c.policy == Some(0) {
                        tc.policies.push(PolicyDelta {
                            chain: name.clone(),
                            from: None,
                            to: policy_name(0),
                        });
                    }
                }
                (Some(b), None) => tc.chains_removed.push(delta(&b)),
                (Some(b), Some(c)) => {
                    if let Some(to) = c.policy.filter(|p| Some(*p) != b.policy) {
                        tc.policies.push(PolicyDelta {
                            chain: name.clone(),
                            from: b.policy.map(policy_name),
                            to: policy_name(to),
                        });
                    }
                    if added > 0 {
                        tc.rules_added.insert(name.clone(), added);
                    }
                    if removed > 0 {
                        tc.rules_removed.insert(name.clone(), removed);
                        if added == 0 {
                            tc.rules_after.insert(name.clone(), c.rules);
                        }
                    }
                }
                (None, None) => {}
            }
        }
        let rules_now: usize = now.map_or(0, |t| t.values().map(|c| c.rules).sum());
        tc.whole_table_flushed = tx.rules_before > 0 && rules_now == 0;
        if !tc.is_empty() {
            out.tables.push(tc);
        }
    }
    out
}

const TABLES: &[(u8, &str)] = &[(2, "nat"), (2, "filter"), (10, "nat"), (1, "kube-proxy")];
const CHAINS: &[&str] = &[
    "PREROUTING",
    "INPUT",
    "KUBE-SERVICES",
    "KUBE-SVC-NPX46M4PTMTKRN6Y",
    "KUBE-SEP-AAAAAAAAAAAAAAAA",
    "cali-INPUT",
    "mine",
];

fn message() -> impl Strategy<Value = NftMessage> {
    let table = prop::sample::select(TABLES);
    let chain = prop::sample::select(CHAINS);
    let op = prop_oneof![Just(Op::New), Just(Op::Del)];
    let jump = prop::option::of(prop::sample::select(CHAINS));
    prop_oneof![
        1 => (table.clone(), op.clone()).prop_map(|((family, name), op)| NftMessage::Table {
            op,
            family,
            name: name.into(),
        }),
        4 => (
            table.clone(),
            chain.clone(),
            op.clone(),
            prop::option::of(0u32..5),
            prop::option::of(0u32..2)
        )
            .prop_map(|((family, table), name, op, hook, policy)| NftMessage::Chain {
                op,
                family,
                table: table.into(),
                name: name.into(),
                hook,
                policy,
            }),
        12 => (table, chain, op, jump, any::<bool>(), any::<bool>()).prop_map(
            |((family, table), chain, op, jump, appended, accept)| NftMessage::Rule {
                op,
                family,
                table: table.into(),
                chain: chain.into(),
                handle: None,
                appended,
                summary: RuleSummary {
                    jump: jump.map(str::to_string),
                    verdict: Some(if accept { "accept" } else { "jump" }.into()),
                },
            }
        ),
    ]
}

fn chains_of(tables: &Tables) -> Vec<String> {
    let mut v: Vec<String> = tables.values().flat_map(|t| t.keys().cloned()).collect();
    v.sort();
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn transactions_agree_with_the_model(
        txns in prop::collection::vec(
            (prop::collection::vec(message(), 0..40), 0u8..3),
            1..8,
        ),
    ) {
        let mut tables = Tables::new();
        let mut state = NftState::default();
        for (i, (msgs, end)) in txns.iter().enumerate() {
            let mut t = Transaction::default();
            // Half-way, what it has done so far (a preliminary event) is the model's
            // net effect of the first half.
            let half = msgs.len() / 2;
            for m in &msgs[..half] {
                t.push(&mut state, &m.as_event());
            }
            prop_assert_eq!(
                t.changes_so_far(&state),
                model(&mut tables.clone(), &msgs[..half]),
                "transaction {} half-way", i
            );
            for m in &msgs[half..] {
                t.push(&mut state, &m.as_event());
            }
            prop_assert_eq!(t.len(), msgs.len());
            match end {
                // A gap: the listener drops the transaction, state keeps its effects.
                0 => {
                    model(&mut tables, msgs);
                    drop(t);
                }
                // Already in the dump: undone, the model does not apply it.
                1 => t.roll_back(&mut state),
                _ => {
                    let expected = model(&mut tables, msgs);
                    let got = t.finish(&mut state);
                    prop_assert_eq!(got, expected, "transaction {}", i);
                }
            }
            let mut names: Vec<String> = state.chain_names().map(str::to_string).collect();
            names.sort();
            prop_assert_eq!(names, chains_of(&tables), "chains after transaction {}", i);
            for (family, table) in TABLES {
                let n = tables.get(&(*family, table.to_string())).map_or(0, |t| t.len());
                prop_assert_eq!(state.chain_count(*family, table), n);
                prop_assert_eq!(
                    state.has_table(*family, table),
                    tables.contains_key(&(*family, table.to_string()))
                );
            }
        }
    }
}
