//! `nft list ruleset` of iptables-nft hosts, from the real-world corpus, read as the
//! iptables tables they are (`plumb_ruleset::nft::iptables_nft`). The privileged proof
//! that both views of one namespace agree is plumb-kubeproxy's `tests/nft_view.rs`.

mod common;

use plumb_ruleset::diff::{Change, diff};
use plumb_ruleset::format::{ParseOptions, parse_bytes};
use plumb_ruleset::nft::iptables_nft::foreign_rules;
use plumb_ruleset::{Backend, Completeness, Family, RuleBody, Ruleset};
use std::path::{Path, PathBuf};

fn real_world(rel: &str) -> Option<PathBuf> {
    let dir = common::corpus_dir()?.join("real-world");
    let (sub, prefix) = rel.split_once('/').unwrap();
    let found = std::fs::read_dir(dir.join(sub))
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix));
    if found.is_none() {
        plumb_testkit::skip(&format!("{rel}* not in the corpus"));
    }
    found
}

fn read(path: &Path) -> Ruleset {
    parse_bytes(common::read(path).as_bytes(), &ParseOptions::default())
        .unwrap()
        .ruleset
}

/// The ACK node's nft view prints ipset matches as `# match-set KUBE-X dst,dst` comments:
/// the rules are read with their set match (never as unconditional), and the
/// `masquerade  random-fully` of line 92 is a MASQUERADE --random-fully.
#[test]
fn ack_match_set_prints_are_set_matches_and_random_fully_reads() {
    let Some(path) = real_world("nft/ack-cilium-1.18") else {
        return;
    };
    let rs = read(&path);
    assert_eq!(rs.error_count(), 0, "{:?}", rs.diagnostics);
    assert_eq!(rs.completeness, Completeness::Full);
    assert_eq!(rs.tables.len(), 7);
    assert!(
        rs.tables
            .iter()
            .all(|t| t.backend == Backend::IptablesNft && t.nft_view)
    );
    let nat = rs.table(Family::Ip, "nat").unwrap();
    let svc = nat.chain("KUBE-SERVICES").unwrap();
    let texts: Vec<&str> = svc.rules.iter().map(|r| r.text.as_str()).collect();
    assert_eq!(
        texts,
        [
            "-A KUBE-SERVICES -s 127.0.0.0/8 -j RETURN",
            "-A KUBE-SERVICES ! -s 10.0.0.0/8 -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ",
            "-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT",
            "-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT",
        ]
    );
    // Every `# match-set` line (17 in the file) became a set match.
    let sets = rs
        .tables
        .iter()
        .flat_map(|t| t.chains.iter().flat_map(|c| &c.rules))
        .filter(|r| r.xt().is_some_and(|x| x.match_named("set").is_some()))
        .count();
    assert_eq!(sets, 17);
    let ip6_nat = rs.table(Family::Ip6, "nat").unwrap();
    let post = ip6_nat.chain("KUBE-POSTROUTING").unwrap();
    assert_eq!(
        post.rules.last().unwrap().text.as_str(),
        "-A KUBE-POSTROUTING -j MASQUERADE --random-fully"
    );
    assert_eq!(post.rules.last().unwrap().location().line, 92);
    // Cilium's socket match printed by the extension, then native mark matches.
    let pre = rs
        .table(Family::Ip, "mangle")
        .unwrap()
        .chain("CILIUM_PRE_mangle")
        .unwrap();
    assert_eq!(
        pre.rules[0].text.as_str(),
        "-A CILIUM_PRE_mangle ! -o lo -m socket --transparent -m mark ! --mark 0x00000e00/0x00000f00 -m mark ! --mark 0x00000800/0x00000f00 -j MARK --set-xmark 0x200/0xffffffff"
    );
}

/// The k3s node's `nft list ruleset` (nft without xtables support: `xt target "DNAT"` on
/// a line of its own) against its `iptables-save` taken just after: the only rule and
/// chain differences are kube-router's KUBE-POD-FW-* chains, whose names change on every
/// sync; the nft view also holds the IPv6 tables (a separate ip6tables-save) and
/// NetBird's own tables. The built-in nat INPUT chain, which iptables-nft had not created,
/// is not a difference: iptables-nft lists every built-in chain, and so does plumb.
#[test]
fn k3s_nft_view_differs_from_its_iptables_save_only_by_kube_pod_fw_names() {
    let (Some(save), Some(nft)) = (
        real_world("iptables-save/k3s-1.30-pi_kube-router-netpol_flannel_iptables-nft"),
        real_world("nft/k3s-1.30-pi"),
    ) else {
        return;
    };
    let (a, b) = (read(&save), read(&nft));
    assert_eq!(b.error_count(), 0, "{:?}", b.errors().collect::<Vec<_>>());
    let changes = diff(&a, &b);
    let mut added_tables = Vec::new();
    let mut pod_fw = 0;
    for c in &changes {
        match c {
            Change::TableAdded { table } => added_tables.push(table.clone()),
            Change::ChainAdded { chain, .. } | Change::ChainRemoved { chain, .. }
                if chain.starts_with("KUBE-POD-FW-") =>
            {
                pod_fw += 1
            }
            Change::RuleAdded { rule, .. } | Change::RuleRemoved { rule, .. }
                if rule.contains("KUBE-POD-FW-") =>
            {
                pod_fw += 1
            }
            other => panic!("unexpected difference: {other}"),
        }
    }
    added_tables.sort();
    assert_eq!(
        added_tables,
        [
            "inet netbird_wt0",
            "ip netbird",
            "ip6 filter",
            "ip6 mangle",
            "ip6 nat"
        ]
    );
    // 11 KUBE-POD-FW chains renamed (removed + added) and the rules that jump to them.
    assert!(pod_fw >= 22, "{pod_fw}");
    // The 14 DNAT targets nft showed by name only keep their place as DNAT.
    let dnat = b
        .tables
        .iter()
        .flat_map(|t| t.chains.iter().flat_map(|c| &c.rules))
        .filter(|r| r.xt_target().is_some_and(|t| t.name == "DNAT"))
        .count();
    assert_eq!(dnat, 14);
}

/// MicroShift's `nft -a list chain ip nat PREROUTING`: the hand-inserted drop (no counter)
/// stays an nft rule and is listed as foreign; the OVN jumps are iptables rules; the
/// chain listing is partial (its jump targets are not in it).
#[test]
fn microshift_hand_written_drop_is_a_foreign_rule_in_a_partial_listing() {
    let Some(path) = real_world("nft/microshift-ovn-kubernetes") else {
        return;
    };
    let rs = read(&path);
    assert_eq!(rs.error_count(), 0);
    assert_eq!(rs.completeness, Completeness::Partial);
    let foreign: Vec<_> = foreign_rules(&rs).collect();
    assert_eq!(foreign.len(), 1);
    let (t, c, r) = foreign[0];
    assert_eq!(
        (&*t.name, &*c.name, r.location().line),
        ("nat", "PREROUTING", 4)
    );
    let pre = rs
        .table(Family::Ip, "nat")
        .unwrap()
        .chain("PREROUTING")
        .unwrap();
    assert!(matches!(pre.rules[0].body, RuleBody::Nft(_)));
    let rest: Vec<&str> = pre.rules[1..].iter().map(|r| r.text.as_str()).collect();
    assert_eq!(
        rest,
        [
            "-A PREROUTING -j OVN-KUBE-ETP",
            "-A PREROUTING -j OVN-KUBE-EXTERNALIP",
            "-A PREROUTING -j OVN-KUBE-NODEPORT"
        ]
    );
}

/// An iptables-nft table of `chains` user chains, each jumping to the next, as `nft
/// list ruleset` prints it.
fn chained_listing(chains: usize) -> String {
    let mut s = String::from(
        "# Warning: table ip nat is managed by iptables-nft, do not touch!\ntable ip nat {\n\tchain PREROUTING {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t\tcounter packets 0 bytes 0 jump KUBE-C0\n\t}\n",
    );
    for i in 0..chains {
        s.push_str(&format!("\n\tchain KUBE-C{i} {{\n"));
        if i + 1 < chains {
            s.push_str(&format!(
                "\t\tip daddr 10.{}.{}.1 counter packets 0 bytes 0 jump KUBE-C{}\n",
                i / 256 % 256,
                i % 256,
                i + 1
            ));
        }
        s.push_str("\t}\n");
    }
    s.push_str("}\n");
    s
}

/// Reading an iptables-nft listing back as iptables rules looked chains up by a
/// linear search (three times per chain, and once per jump): a 10k-service node's
/// 16 MB listing (60k chains) took 28 s of CPU. Eight times the chains must cost
/// about eight times the time, not sixty-four.
#[test]
fn iptables_nft_translation_is_linear_in_the_chains() {
    let cost = |chains: usize| {
        let text = chained_listing(chains);
        (0..3)
            .map(|_| {
                let started = std::time::Instant::now();
                let rs = parse_bytes(text.as_bytes(), &ParseOptions::default())
                    .unwrap()
                    .ruleset;
                let elapsed = started.elapsed();
                let nat = rs.table(Family::Ip, "nat").unwrap();
                assert_eq!(nat.backend, Backend::IptablesNft, "translated");
                // Its chains, PREROUTING, and the three built-ins iptables-nft-save prints.
                assert_eq!(nat.chains.len(), chains + 4);
                assert_eq!(
                    nat.chain("KUBE-C0").unwrap().rules[0].text.as_str(),
                    "-A KUBE-C0 -d 10.0.0.1/32 -j KUBE-C1"
                );
                elapsed
            })
            .min()
            .unwrap()
    };
    let small = cost(1_500);
    let large = cost(12_000);
    let ratio = large.as_secs_f64() / small.as_secs_f64();
    assert!(
        ratio < 24.0,
        "8x the chains took {ratio:.1}x the time ({small:?} -> {large:?})"
    );
}
