//! `state::Transaction` (the listener's hot path, optimised) against a plain model
//! written for clarity: ordered maps, one rule of the spec per line. Random
//! transactions of table, chain and rule notifications, some abandoned half-way (a
//! gap) or rolled back, must give the same change sets (also half-way:
//! `Transaction::changes_so_far`) and leave the same chains.

use plumb_watch::changes::{ChainDelta, ChangeSet, HookRule, PolicyDelta, TableChanges};
use plumb_watch::changes::{is_builtin_chain, is_owned_chain};
use plumb_watch::nft_events::{Batch, NftMessage, Op, RuleSummary, family_name};
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

/// Hook rules, net: a rule jumping to J removed from chain C and one jumping to J
/// added to C cancel out (the first unmatched of each, in order); a rule appended
/// to C before an owned hook was put back there is ahead of that hook.
fn net_hook_rules(hooks: Vec<HookRule>) -> Vec<HookRule> {
    let mut gone = vec![false; hooks.len()];
    for i in 0..hooks.len() {
        if hooks[i].added || hooks[i].jump.is_none() || gone[i] {
            continue;
        }
        let partner = (0..hooks.len()).find(|&j| {
            !gone[j]
                && hooks[j].added
                && hooks[j].chain == hooks[i].chain
                && hooks[j].jump == hooks[i].jump
        });
        if let Some(j) = partner {
            gone[i] = true;
            gone[j] = true;
        }
    }
    let mut out = Vec::new();
    for (i, h) in hooks.iter().enumerate() {
        if gone[i] {
            continue;
        }
        let mut h = h.clone();
        let owned_hook_put_back_later = (i + 1..hooks.len()).any(|j| {
            gone[j]
                && hooks[j].added
                && hooks[j].chain == h.chain
                && hooks[j].jump.as_deref().is_some_and(is_owned_chain)
        });
        if h.added && h.inserted == Some(false) && owned_hook_put_back_later {
            h.ahead_of_owned_hooks = true;
        }
        out.push(h);
    }
    out
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
            hook_rules: net_hook_rules(tx.hooks),
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
        12 => (table, chain, op, jump, any::<bool>(), any::<bool>(), 0u64..3).prop_map(
            |((family, table), chain, op, jump, appended, accept, fingerprint)| NftMessage::Rule {
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
                // Without handles a removal cannot be placed: never a rewrite here
                // (`rewrites_are_recognised_exactly` covers those).
                fingerprint,
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

/// What a writer does to one chain, as the kernel carries it out.
#[derive(Clone, Debug)]
enum ChainOp {
    /// `-A`: a new rule at the end.
    Append(u64),
    /// `-I`: a new rule at the top.
    Insert(u64),
    /// `-D`: the rule at this index (modulo the chain's length).
    Delete(usize),
    /// `-F`: every rule, in order.
    Flush,
}

fn chain_op() -> impl Strategy<Value = ChainOp> {
    prop_oneof![
        4 => (0u64..3).prop_map(ChainOp::Append),
        1 => (0u64..3).prop_map(ChainOp::Insert),
        2 => (0usize..8).prop_map(ChainOp::Delete),
        1 => Just(ChainOp::Flush),
    ]
}

/// A chain of (handle, fingerprint) in order, as the kernel keeps it.
struct KernelChain {
    rules: Vec<(u64, u64)>,
    next_handle: u64,
}

impl KernelChain {
    /// Carries out `ops`; returns the notifications the kernel sends.
    fn run(&mut self, ops: &[ChainOp]) -> Vec<NftMessage> {
        let msg = |op: Op, handle: u64, fingerprint: u64, appended: bool| NftMessage::Rule {
            op,
            family: 2,
            table: "nat".into(),
            chain: "KUBE-SVC-NPX46M4PTMTKRN6Y".into(),
            handle: Some(handle),
            appended,
            summary: RuleSummary::default(),
            fingerprint,
        };
        let mut out = Vec::new();
        for op in ops {
            match *op {
                ChainOp::Append(fp) | ChainOp::Insert(fp) => {
                    let h = self.next_handle;
                    self.next_handle += 1;
                    let append = matches!(op, ChainOp::Append(_));
                    if append {
                        self.rules.push((h, fp));
                    } else {
                        self.rules.insert(0, (h, fp));
                    }
                    out.push(msg(Op::New, h, fp, append));
                }
                ChainOp::Delete(i) if !self.rules.is_empty() => {
                    let (h, fp) = self.rules.remove(i % self.rules.len());
                    out.push(msg(Op::Del, h, fp, false));
                }
                ChainOp::Delete(_) => {}
                ChainOp::Flush => {
                    for (h, fp) in self.rules.drain(..) {
                        out.push(msg(Op::Del, h, fp, false));
                    }
                }
            }
        }
        out
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// A chain is called rewritten (no net change) only when it is: every rule it
    /// had was removed and it holds the same rules in the same order. And the way
    /// iptables-restore rewrites a chain (flush, then append the same rules) is
    /// always recognised when the chain was built by appends.
    #[test]
    fn rewrites_are_recognised_exactly(
        history in prop::collection::vec(prop::collection::vec(chain_op(), 0..8), 1..4),
        ops in prop::collection::vec(chain_op(), 0..12),
        canonical in any::<bool>(),
    ) {
        let chain = "KUBE-SVC-NPX46M4PTMTKRN6Y";
        let mut state = NftState::default();
        let mut kernel = KernelChain { rules: Vec::new(), next_handle: 1 };
        let mut appends_only = true;
        for txn in &history {
            appends_only &= txn.iter().all(|o| !matches!(o, ChainOp::Insert(_)));
            let msgs = kernel.run(txn);
            state.apply(&Batch { messages: msgs, ..Batch::default() });
        }
        let before = kernel.rules.clone();
        // The canonical rewrite, or anything.
        let ops = if canonical {
            let mut o = vec![ChainOp::Flush];
            o.extend(before.iter().map(|(_, fp)| ChainOp::Append(*fp)));
            o
        } else {
            ops
        };
        let msgs = kernel.run(&ops);
        let c = state.apply(&Batch { messages: msgs, ..Batch::default() });
        let rewritten = c.tables.iter().any(|t| t.rules_rewritten.contains_key(chain));
        let fps = |rules: &[(u64, u64)]| rules.iter().map(|r| r.1).collect::<Vec<_>>();
        if rewritten {
            prop_assert_eq!(fps(&kernel.rules), fps(&before), "called rewritten, but changed");
            prop_assert!(
                kernel.rules.iter().all(|(h, _)| before.iter().all(|(b, _)| b != h)),
                "called rewritten, but some rules were kept"
            );
            let t = c.tables.iter().find(|t| t.rules_rewritten.contains_key(chain)).unwrap();
            prop_assert!(!t.rules_added.contains_key(chain) && !t.rules_removed.contains_key(chain));
        }
        if canonical && appends_only && !before.is_empty() {
            prop_assert!(rewritten, "flush and append the same rules: {:?}", c);
        }
    }
}
