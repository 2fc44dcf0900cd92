//! Every iptables-format ruleset in the shared corpus parses cleanly, the expected
//! answers in corpus/README.md hold, and dumps print back byte for byte.

mod common;

use plumb_ruleset::iptables::canonical::{PrintOptions, save_text};
use plumb_ruleset::{
    Completeness, Family, Format, ParseOptions, Ruleset, Severity, Table, parse_bytes,
};
use std::path::Path;

fn load(path: &Path, format: Option<Format>, table: Option<&str>) -> Ruleset {
    let opts = ParseOptions {
        format,
        table: table.map(str::to_string),
        ..Default::default()
    };
    parse_bytes(common::read(path).as_bytes(), &opts)
        .unwrap()
        .ruleset
}

fn errors(rs: &Ruleset) -> Vec<String> {
    rs.diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| d.to_string())
        .collect()
}

fn rules(rs: &Ruleset, table: &str) -> usize {
    rs.table(Family::Ip, table)
        .map(Table::rule_count)
        .unwrap_or(0)
}

fn chains_with_prefix(rs: &Ruleset, prefix: &str) -> usize {
    rs.tables
        .iter()
        .flat_map(|t| &t.chains)
        .filter(|c| c.name.starts_with(prefix))
        .count()
}

/// References to chains the table does not have.
fn dangling(rs: &Ruleset) -> Vec<String> {
    let mut out = Vec::new();
    for t in &rs.tables {
        for c in &t.chains {
            for r in &c.rules {
                for reference in r.chain_references() {
                    if t.chain(reference.chain).is_none() {
                        out.push(format!("{} {} -> {}", t.name, c.name, reference.chain));
                    }
                }
            }
        }
    }
    out
}

/// The dump without `#` lines, as iptables-save would print it again.
fn assert_round_trip(path: &Path, rs: &Ruleset) {
    let original: String = common::read(path)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{}\n", l.trim_end()))
        .collect();
    let printed = save_text(rs, PrintOptions { counters: true });
    if printed != original {
        for (i, (a, b)) in original.lines().zip(printed.lines()).enumerate() {
            assert_eq!(
                a,
                b,
                "{}: first difference at line {} (comments removed)",
                path.display(),
                i + 1
            );
        }
        assert_eq!(
            original.lines().count(),
            printed.lines().count(),
            "{}: line count",
            path.display()
        );
    }
}

#[test]
fn kubeadm_flannel_docker_master() {
    let Some(c) = common::corpus_dir() else {
        return;
    };
    let p = c.join("kube-proxy-iptables/real-nodes/master_flannel_docker_kubeproxy-iptables_3tables.iptables-save");
    let rs = load(&p, None, None);
    assert_eq!(errors(&rs), Vec::<String>::new());
    assert_eq!(
        (
            rules(&rs, "mangle"),
            rules(&rs, "filter"),
            rules(&rs, "nat")
        ),
        (0, 29, 70)
    );
    let fwd = rs
        .table(Family::Ip, "filter")
        .unwrap()
        .chain("FORWARD")
        .unwrap();
    assert_eq!(fwd.policy().unwrap().as_iptables(), "DROP");
    assert_eq!(chains_with_prefix(&rs, "KUBE-SVC-"), 6);
    assert_eq!(chains_with_prefix(&rs, "KUBE-SEP-"), 13);
    assert_eq!(dangling(&rs), Vec::<String>::new());
    assert_eq!(rs.completeness, Completeness::Full);
    // Three-endpoint service: probabilities 1/3, 1/2, then unconditional.
    let nat = rs.table(Family::Ip, "nat").unwrap();
    let probs: Vec<String> = nat
        .chains
        .iter()
        .flat_map(|c| &c.rules)
        .filter_map(|r| {
            let x = r.xt()?;
            let p = x
                .match_named("statistic")?
                .option("--probability")?
                .arg(0)?;
            Some(p.into_owned())
        })
        .collect();
    assert!(probs.contains(&"0.33333333349".to_string()), "{probs:?}");
    assert_round_trip(&p, &rs);
}

#[test]
fn k3s_dump_with_counters_and_no_endpoint_rejects() {
    let Some(c) = common::corpus_dir() else {
        return;
    };
    let p = c.join("kube-proxy-iptables/real-nodes/k3s-node_iptables-save-c_with-counters_dns-no-endpoints.iptables-save");
    let rs = load(&p, None, None);
    assert_eq!(errors(&rs), Vec::<String>::new());
    assert_eq!(
        (
            rules(&rs, "raw"),
            rules(&rs, "mangle"),
            rules(&rs, "nat"),
            rules(&rs, "filter")
        ),
        (0, 0, 18, 28)
    );
    let filter = rs.table(Family::Ip, "filter").unwrap();
    let no_endpoints = filter
        .chain("KUBE-SERVICES")
        .unwrap()
        .rules
        .iter()
        .filter(|r| r.comments().iter().any(|c| c.ends_with("has no endpoints")))
        .count();
    assert_eq!(no_endpoints, 4, "kube-dns (3 ports) and metrics-server");
    assert!(
        filter
            .chains
            .iter()
            .flat_map(|c| &c.rules)
            .all(|r| r.counters().is_some())
    );
    assert_eq!(chains_with_prefix(&rs, "FLANNEL-"), 0);
    assert_round_trip(&p, &rs);
}

#[test]
fn iptables_nft_dump_and_its_list_rules_twins_agree() {
    let Some(c) = common::corpus_dir() else {
        return;
    };
    let dir = c.join("kube-proxy-iptables/real-nodes");
    let save = load(
        &dir.join("opkhs2026_kubeadm-1.32_flannel_control-plane_iptables-nft-1.8.10.iptables-save"),
        None,
        None,
    );
    assert_eq!(errors(&save), Vec::<String>::new());
    assert_eq!(save.tables[0].backend, plumb_ruleset::Backend::IptablesNft);
    assert_eq!(
        (
            rules(&save, "mangle"),
            rules(&save, "filter"),
            rules(&save, "nat")
        ),
        (0, 18, 44)
    );
    assert_eq!(chains_with_prefix(&save, "KUBE-SVC-"), 4);
    assert_eq!(chains_with_prefix(&save, "KUBE-SEP-"), 7);
    let dnat: Vec<String> = save
        .tables
        .iter()
        .flat_map(|t| t.chains.iter().flat_map(|c| &c.rules))
        .filter_map(|r| {
            Some(
                r.xt()?
                    .target()?
                    .option("--to-destination")?
                    .arg(0)?
                    .into_owned(),
            )
        })
        .collect();
    assert!(dnat.contains(&"172.31.7.91:6443".to_string()), "{dnat:?}");
    for table in ["filter", "nat"] {
        let name = format!("opkhs2026_kubeadm-1.32_flannel_control-plane_{table}.S.txt");
        // The table comes from the file name, as the CLI does.
        let t = plumb_ruleset::format::table_from_file_name(&name);
        let listed = load(&dir.join(&name), None, t);
        assert_eq!(errors(&listed), Vec::<String>::new(), "{name}");
        let a = save.table(Family::Ip, table).unwrap();
        let b = listed.table(Family::Ip, table).unwrap();
        for chain in &a.chains {
            let other = b
                .chain(&chain.name)
                .unwrap_or_else(|| panic!("{name}: chain {} missing", chain.name));
            let ids = |c: &plumb_ruleset::Chain| {
                c.rules
                    .iter()
                    .map(|r| plumb_ruleset::diff::rule_identity(r, Family::Ip))
                    .collect::<Vec<_>>()
            };
            assert_eq!(ids(chain), ids(other), "{name}: chain {}", chain.name);
        }
    }
}

#[test]
fn kube_proxy_restore_payloads_are_partial_not_broken() {
    let Some(c) = common::corpus_dir() else {
        return;
    };
    let dir = c.join("kube-proxy-iptables/k8s-proxier-test");
    let full = load(
        &dir.join("TestOverallIPTablesRules.expected.iptables-restore"),
        None,
        None,
    );
    assert_eq!(errors(&full), Vec::<String>::new());
    assert_eq!((rules(&full, "filter"), rules(&full, "nat")), (10, 55));
    assert_eq!(
        ["KUBE-SVC-", "KUBE-EXT-", "KUBE-FW-", "KUBE-SEP-"].map(|p| chains_with_prefix(&full, p)),
        [5, 4, 1, 6]
    );
    // Payload without built-in chains: a restore payload, hence partial.
    assert_eq!(full.completeness, Completeness::Partial);
    for step in [
        "step2-partial-add-svc3",
        "step3-partial-delete-svc2",
        "step4-partial-svc4-no-endpoints",
    ] {
        let rs = load(
            &dir.join(format!(
                "TestSyncProxyRulesRepeated.{step}.iptables-restore"
            )),
            None,
            None,
        );
        assert_eq!(errors(&rs), Vec::<String>::new(), "{step}");
        assert_eq!(rs.completeness, Completeness::Partial, "{step}");
    }
    let step3 = load(
        &dir.join("TestSyncProxyRulesRepeated.step3-partial-delete-svc2.iptables-restore"),
        None,
        None,
    );
    let nat = step3.table(Family::Ip, "nat").unwrap();
    assert_eq!(
        &*nat.deleted_chains,
        &[
            "KUBE-SEP-UHEGFW77JX3KXTOV".into(),
            "KUBE-SVC-2VJB64SDSIJUP5T6".into()
        ]
    );
    assert!(
        nat.chain("KUBE-SVC-2VJB64SDSIJUP5T6").is_none(),
        "declared then deleted"
    );
    // Jumps to chains that live in the kernel, not in the payload.
    assert!(
        dangling(&step3)
            .iter()
            .any(|d| d.contains("KUBE-SVC-XPGD46QRK7WJZT7O"))
    );
}

#[test]
fn calico_list_rules_with_gotos_and_targetless_rules() {
    let Some(c) = common::corpus_dir() else {
        return;
    };
    let p = c.join("other-cni/calico/aks-kubenet+calico_node_filter_iptables-list-rules.S.txt");
    let rs = load(&p, None, Some("filter"));
    assert_eq!(errors(&rs), Vec::<String>::new());
    let t = rs.table(Family::Ip, "filter").unwrap();
    assert_eq!((t.chains.len(), t.rule_count()), (48, 194));
    assert_eq!(dangling(&rs), Vec::<String>::new());
    let targetless = t
        .chains
        .iter()
        .flat_map(|c| &c.rules)
        .filter(|r| r.xt().unwrap().target().is_none())
        .count();
    assert_eq!(targetless, 8);
    let two_comments = t
        .chains
        .iter()
        .flat_map(|c| &c.rules)
        .filter(|r| r.comments().len() == 2)
        .count();
    assert!(two_comments > 0);
}

/// Non-Kubernetes dumps from many iptables versions (1.4.x prints `-s 1.2.3.4`
/// without `/32`, hand-edited files have stray spaces). They must parse with no
/// errors, and printing must be a fixed point: print(parse(print(x))) == print(x).
/// Whether the printed form is what today's iptables-save prints is proven against
/// the kernel in plumb-collect's privileged round-trip test.
#[test]
fn general_dumps_parse_cleanly_and_print_is_a_fixed_point() {
    let Some(c) = common::corpus_dir() else {
        return;
    };
    let dir = c.join("general-iptables-save/diekmann-Iptables_Semantics");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 20);
    let mut failures = Vec::new();
    for p in &files {
        let family = if p.to_string_lossy().contains("ip6") {
            Some(Family::Ip6)
        } else {
            None
        };
        let opts = ParseOptions {
            family,
            ..Default::default()
        };
        let rs = match parse_bytes(common::read(p).as_bytes(), &opts) {
            Ok(parsed) => parsed.ruleset,
            // A README in the dump collection: prose must be refused, not misread.
            Err(e) if p.ends_with("TUM_Net_Firewall_README_cheating") => {
                assert!(
                    e.to_string().contains("could not recognise the format"),
                    "{e}"
                );
                continue;
            }
            Err(e) => panic!("{}: {e}", p.display()),
        };
        let errs = errors(&rs);
        // The parser-test file of the collection holds one rule iptables-restore
        // refuses (`unknown option "--something-else"`): it must be reported, and
        // only it.
        if p.ends_with("Parser_Test_data_iptables-save") {
            assert_eq!(errs.len(), 1, "{errs:?}");
            assert!(
                errs[0].starts_with("12:") && errs[0].contains("--something-else"),
                "{errs:?}"
            );
        } else if !errs.is_empty() {
            failures.push(format!("{}: {}", p.display(), errs.join("; ")));
            continue;
        }
        let once = save_text(&rs, PrintOptions { counters: true });
        let again = parse_bytes(once.as_bytes(), &opts).unwrap().ruleset;
        let twice = save_text(&again, PrintOptions { counters: true });
        if once != twice {
            failures.push(format!("{}: printing is not a fixed point", p.display()));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
