//! Data-driven tests of the native nftables readers over the shared reference
//! corpus (nftables upstream dumps, kube-proxy nftables mode, flannel, a
//! hand-written invalid file) and over our own fixtures in `tests/data/nft`.
//! Corpus tests skip with a printed reason when the corpus is absent.

use plumb_ruleset::nft::{
    NftRule, StatementKind, VerdictMapRef, parse_json, parse_text, table_chain_references,
};
use plumb_ruleset::{Completeness, Family, Hook, Policy, RuleBody, Ruleset, Severity};
use std::path::{Path, PathBuf};

/// Files whose syntax the readers do not cover yet, with the reason.
const ALLOWLIST: &[(&str, &str)] = &[];

fn corpus() -> Option<PathBuf> {
    let p = match std::env::var_os("PLUMB_CORPUS") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus"),
    };
    if p.is_dir() {
        Some(p)
    } else {
        eprintln!(
            "skipping: reference corpus not found at {} (set PLUMB_CORPUS)",
            p.display()
        );
        None
    }
}

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/nft")
        .join(name)
}

fn files_with_ext(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            files_with_ext(&p, ext, out);
        } else if p.extension().is_some_and(|x| x == ext) {
            out.push(p);
        }
    }
}

fn errors(rs: &Ruleset) -> Vec<String> {
    rs.diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| d.to_string())
        .collect()
}

fn nft(rule: &plumb_ruleset::Rule) -> &NftRule {
    match &rule.body {
        RuleBody::Nft(n) => n,
        _ => panic!("not an nft rule"),
    }
}

/// The statements of an nft rule (read from its text when it does not hold them).
fn statements(rule: &plumb_ruleset::Rule) -> Vec<plumb_ruleset::nft::Statement> {
    rule.nft_statements().expect("an nft rule").into_owned()
}

fn check_all(ext: &str, parse: fn(&str) -> Ruleset) {
    let Some(c) = corpus() else { return };
    let mut files = Vec::new();
    files_with_ext(&c.join("nftables-upstream/tests/shell"), ext, &mut files);
    files.sort();
    assert!(!files.is_empty(), "no *.{ext} files in the corpus");
    let mut failures = Vec::new();
    let mut allowed = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read corpus file");
        let rs = parse(&text);
        let errs = errors(&rs);
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        // A script (`destroy table t`) is partial by design: it changes unseen state.
        let script = rs
            .diagnostics
            .iter()
            .any(|d| d.message.contains("nft script"));
        let complete = rs.completeness == Completeness::Full
            || (script && rs.completeness == Completeness::Partial);
        if !errs.is_empty() || !complete {
            if ALLOWLIST.iter().any(|(n, _)| *n == name) {
                allowed += 1;
                continue;
            }
            failures.push(format!(
                "{}: {:?} {:?}",
                f.strip_prefix(&c).unwrap_or(f).display(),
                rs.completeness,
                errs
            ));
        }
    }
    eprintln!(
        "*.{ext}: {} of {} parse clean ({} allowlisted)",
        files.len() - failures.len() - allowed,
        files.len(),
        allowed
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn upstream_text_dumps_parse_clean() {
    check_all("nft", parse_text);
}

#[test]
fn upstream_json_dumps_parse_clean() {
    check_all("json-nft", parse_json);
}

/// Every upstream test that has both an `.nft` and a `.json-nft` dump, parsed both ways.
fn upstream_text_json_pairs(corpus: &Path) -> Vec<(PathBuf, Ruleset, Ruleset)> {
    let mut files = Vec::new();
    files_with_ext(
        &corpus.join("nftables-upstream/tests/shell"),
        "json-nft",
        &mut files,
    );
    files.sort();
    files
        .into_iter()
        .filter_map(|j| {
            let text = std::fs::read_to_string(j.with_extension("nft")).ok()?;
            let json = std::fs::read_to_string(&j).unwrap();
            let (a, b) = (parse_text(&text), parse_json(&json));
            Some((j, a, b))
        })
        .collect()
}

/// The JSON and text dumps of the same upstream test describe the same tables
/// and chains with the same rule counts.
#[test]
fn upstream_text_and_json_agree_on_shape() {
    let Some(c) = corpus() else { return };
    let mut compared = 0;
    let mut mismatches = Vec::new();
    for (j, a, b) in upstream_text_json_pairs(&c) {
        compared += 1;
        let shape = |rs: &Ruleset| {
            let mut v: Vec<String> = rs
                .tables
                .iter()
                .flat_map(|t| {
                    t.chains.iter().map(move |c| {
                        format!("{} {} {} {}", t.family, t.name, c.name, c.rules.len())
                    })
                })
                .collect();
            v.sort();
            v
        };
        if shape(&a) != shape(&b) {
            mismatches.push(format!(
                "{}: text {:?} json {:?}",
                j.display(),
                shape(&a),
                shape(&b)
            ));
        }
    }
    eprintln!(
        "{compared} text/json pairs compared, {} mismatches",
        mismatches.len()
    );
    assert!(compared > 100);
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

#[test]
fn kube_proxy_k3s_table() {
    let Some(c) = corpus() else { return };
    let p = c.join(
        "kube-proxy-nftables/real-nodes/k3s-like_10.42-10.43_nft-list-table-ip-kube-proxy.nft",
    );
    let rs = parse_text(&std::fs::read_to_string(p).unwrap());
    assert!(errors(&rs).is_empty(), "{:?}", errors(&rs));
    assert_eq!(rs.completeness, Completeness::Full);
    let t = rs
        .table(Family::Ip, "kube-proxy")
        .expect("table ip kube-proxy");
    assert_eq!(t.chains.len(), 43);
    assert_eq!(&*t.attributes[0], "comment \"rules for kube-proxy\"");

    let pre = t.chain("nat-prerouting").unwrap();
    let base = pre.base.as_ref().unwrap();
    assert_eq!(base.hook, Hook::Prerouting);
    assert_eq!(base.chain_type.as_deref(), Some("nat"));
    assert_eq!(base.priority.as_deref(), Some("dstnat"));
    assert_eq!(base.policy, Some(Policy::Accept));
    assert_eq!(
        t.chain("filter-prerouting")
            .unwrap()
            .base
            .as_ref()
            .unwrap()
            .priority
            .as_deref(),
        Some("dstnat - 10")
    );

    // Every jump/goto target, including named-map elements, is a defined chain.
    let refs = table_chain_references(t);
    assert!(refs.len() > 40, "only {} references", refs.len());
    for r in &refs {
        assert!(t.chain(r.chain).is_some(), "undefined target {}", r.chain);
    }
    let service_ips = t.set("service-ips").unwrap();
    assert_eq!(service_ips.elements.len(), 9);
    assert!(service_ips.is_verdict_map());
    assert_eq!(
        &*service_ips.key_type,
        "ipv4_addr . inet_proto . inet_service"
    );
    assert_eq!(service_ips.verdict_targets().count(), 9);
    assert!(
        service_ips
            .verdict_targets()
            .any(|r| r.chain == "service-2QRHZV4L-default/kubernetes/tcp/https")
    );
    let nep = t.set("no-endpoint-services").unwrap();
    assert_eq!(nep.elements.len(), 2);
    assert_eq!(
        nep.elements[0].comment.as_deref(),
        Some("riset/otelcol-opentelemetry-collector:otlp")
    );
    assert_eq!(&*nep.elements[0].key_text, "10.43.21.102 . tcp . 4317");
    assert_eq!(t.set("cluster-ips").unwrap().elements.len(), 7);
    assert!(
        t.set("service-nodeports")
            .unwrap()
            .verdict_targets()
            .count()
            == 1
    );

    // The numgen vmap of the hellopod service.
    let svc = t
        .chain("service-P6J77WGM-riset/hellopod-np-svc/tcp/")
        .unwrap();
    let found = svc
        .rules
        .iter()
        .flat_map(statements)
        .find_map(|s| match &s.kind {
            StatementKind::VerdictMap {
                key,
                map: VerdictMapRef::Inline(entries),
            } if key == "numgen random mod 9" => Some(entries.len()),
            _ => None,
        });
    assert_eq!(found, Some(9));
    // The services chain looks up the named map.
    let services = t.chain("services").unwrap();
    let names: Vec<_> = services
        .rules
        .iter()
        .flat_map(|r| nft(r).verdict_map_names(&r.text))
        .collect();
    assert_eq!(names, ["service-ips", "service-nodeports"]);
}

#[test]
fn kube_proxy_truncated_by_author() {
    let Some(c) = corpus() else { return };
    let p = c.join(
        "kube-proxy-nftables/real-nodes/kubeadm-flannel_10.244-10.255_nft-a-list-table-kube-proxy_TRUNCATED-by-author.nft",
    );
    let text = std::fs::read_to_string(p).unwrap();
    let dots_line = text
        .lines()
        .position(|l| l.trim() == "....")
        .expect("a .... line") as u32
        + 1;
    let rs = parse_text(&text);
    assert_eq!(rs.completeness, Completeness::Truncated);
    let d = rs
        .diagnostics
        .iter()
        .find(|d| d.line == dots_line)
        .unwrap_or_else(|| panic!("no diagnostic on line {dots_line}: {:?}", rs.diagnostics));
    assert_eq!(d.severity, Severity::Error);
    assert!(d.message.contains("truncated"), "{d}");
    // What came before the cut is still there, with handles from `-a`.
    let t = &rs.tables[0];
    assert!(t.set("service-ips").is_some());
    let with_handles = t
        .chains
        .iter()
        .flat_map(|c| &c.rules)
        .filter(|r| nft(r).handle().is_some())
        .count();
    assert!(with_handles > 0);
}

#[test]
fn flannel_table_parses_clean() {
    let Some(c) = corpus() else { return };
    let p = c.join("other-cni/flannel/flannel-nftables-mode_nft-list-table-flannel-ipv4.nft");
    let rs = parse_text(&std::fs::read_to_string(p).unwrap());
    assert!(errors(&rs).is_empty(), "{:?}", errors(&rs));
    assert_eq!(rs.completeness, Completeness::Full);
    assert!(rs.rule_count() > 0);
}

#[test]
fn hand_written_invalid_table_is_reported() {
    let Some(c) = corpus() else { return };
    let p = c.join("negative-cases/hand-written_invalid_nft_table_mirzaganteng.nft");
    let text = std::fs::read_to_string(p).unwrap();
    let rs = parse_text(&text);
    let errs = errors(&rs);
    let line_of = |needle: &str| text.lines().position(|l| l.contains(needle)).unwrap() as u32 + 1;
    let has = |line: u32, what: &str| {
        rs.diagnostics
            .iter()
            .any(|d| d.severity == Severity::Error && d.line == line && d.message.contains(what))
    };
    assert!(
        has(line_of("hook preroute "), "unknown hook 'preroute'"),
        "{errs:?}"
    );
    assert!(
        has(line_of("ikipaling-np-svc,"), "trailing comma"),
        "{errs:?}"
    );
    assert!(has(line_of("nft add rule"), "shell command"), "{errs:?}");
    assert!(has(line_of("0-49  : dnat"), "not a verdict"), "{errs:?}");
    // Both `table ip mirzaganteng` blocks describe one table, and reading went on.
    assert_eq!(rs.tables.len(), 1);
    assert!(rs.tables[0].chain("woi").is_some());
    assert_eq!(
        rs.tables[0]
            .set("service-nodeports")
            .unwrap()
            .elements
            .len(),
        3
    );
}

fn kind_name(k: &StatementKind) -> &'static str {
    match k {
        StatementKind::Match { .. } => "match",
        StatementKind::Verdict(_) => "verdict",
        StatementKind::VerdictMap { .. } => "vmap",
        StatementKind::Nat { .. } => "nat",
        StatementKind::Counter(_) => "counter",
        StatementKind::Comment(_) => "comment",
        StatementKind::Mangle { .. } => "mangle",
        StatementKind::Log { .. } => "log",
        _ => "other",
    }
}

/// Per rule, the text and JSON readers split the same statements into the same
/// kinds (comments excluded: JSON keeps them on the rule) and find the same
/// chain references.
#[test]
fn upstream_text_and_json_agree_on_statements() {
    let Some(c) = corpus() else { return };
    let mut rules = 0;
    let mut mismatches = Vec::new();
    for (j, a, b) in upstream_text_json_pairs(&c) {
        for (ta, tb) in a.tables.iter().zip(&b.tables) {
            for (ca, cb) in ta.chains.iter().zip(&tb.chains) {
                for (ra, rb) in ca.rules.iter().zip(&cb.rules) {
                    rules += 1;
                    let kinds = |r: &plumb_ruleset::Rule| {
                        statements(r)
                            .iter()
                            .map(|s| kind_name(&s.kind))
                            .filter(|k| *k != "comment")
                            .collect::<Vec<_>>()
                    };
                    if kinds(ra) != kinds(rb) || ra.chain_references() != rb.chain_references() {
                        mismatches.push(format!(
                            "{}: {}\n   text {:?}\n   json {:?} {}",
                            j.display(),
                            ra.text,
                            kinds(ra),
                            kinds(rb),
                            rb.text
                        ));
                    }
                }
            }
        }
    }
    eprintln!("{rules} rules compared, {} mismatches", mismatches.len());
    assert!(rules > 500);
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

/// Our own fixture, generated with nft 1.0.6 in a private network namespace from
/// `tests/data/nft/plumb-fixture.nft.in`: `nft list ruleset`, `nft -a list ruleset`
/// and `nft -j list ruleset` of the same kernel state.
#[test]
fn own_fixture_text_handles_and_json_agree() {
    let read = |n: &str| std::fs::read_to_string(data(n)).unwrap();
    let plain = parse_text(&read("plumb-fixture.nft"));
    let with_handles = parse_text(&read("plumb-fixture-a.nft"));
    let json = parse_json(&read("plumb-fixture.json"));
    for rs in [&plain, &with_handles, &json] {
        assert!(errors(rs).is_empty(), "{:?}", errors(rs));
        assert_eq!(rs.completeness, Completeness::Full);
        let t = rs.table(Family::Inet, "plumb").unwrap();
        assert_eq!(t.chains.len(), 5);
        assert_eq!(rs.rule_count(), 12);
        let input = t.chain("input").unwrap();
        let b = input.base.as_ref().unwrap();
        assert_eq!(b.hook, Hook::Input);
        assert_eq!(b.policy, Some(Policy::Drop));
        let kinds: Vec<Vec<&str>> = input
            .rules
            .iter()
            .map(|r| statements(r).iter().map(|s| kind_name(&s.kind)).collect())
            .collect();
        assert_eq!(kinds[1], ["match", "counter", "verdict", "comment"]);
        assert_eq!(kinds[4], ["match", "mangle"]);
        assert_eq!(kinds[3], ["match", "other", "log"]);
        assert_eq!(kinds[6], ["vmap"]);
        assert_eq!(input.rules[1].comments(), ["allowed services"]);
        let allowed = t.set("allowed").unwrap();
        assert_eq!(allowed.elements.len(), 2);
        assert_eq!(allowed.flags, [Box::from("interval")]);
        let jumps = t.set("jumps").unwrap();
        assert_eq!(
            jumps.verdict_targets().map(|r| r.chain).collect::<Vec<_>>(),
            ["web"]
        );
        let refs = table_chain_references(t);
        assert_eq!(refs.len(), 3);
        for r in refs {
            assert!(t.chain(r.chain).is_some());
        }
    }
    // Same element keys from text and JSON.
    let keys = |rs: &Ruleset| {
        rs.tables[0]
            .set("allowed")
            .unwrap()
            .elements
            .iter()
            .map(|e| e.key().into_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(keys(&plain), keys(&json));
    // Handles only with -a (and in JSON).
    let handles = |rs: &Ruleset| {
        rs.tables[0]
            .chains
            .iter()
            .flat_map(|c| &c.rules)
            .filter(|r| nft(r).handle().is_some())
            .count()
    };
    assert_eq!(handles(&plain), 0);
    assert_eq!(handles(&with_handles), 12);
    assert_eq!(handles(&json), 12);
}

/// A rule read from nft text reads its statements again from its text when asked
/// (it does not hold them): on every `.nft` file of the corpus and of our fixtures,
/// each rule's statements (kinds and texts), chain references, map names, comments
/// and counters are those of the read that keeps every rule's statements as read in
/// context.
#[test]
fn statements_read_again_from_a_rule_text_are_those_read_in_context() {
    let mut files = Vec::new();
    if let Some(c) = corpus() {
        files_with_ext(&c, "nft", &mut files);
    }
    files_with_ext(&data(""), "nft", &mut files);
    files.sort();
    let (mut lazy, mut held) = (0, 0);
    // Rules whose chain references and NAT statements are answered from what was
    // found when they were read (`TextFacts`), without reading them again.
    let (mut known_transfers, mut known_nats) = (0, 0);
    let mut mismatches = Vec::new();
    for f in &files {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        let a = parse_text(&text);
        let b = plumb_ruleset::nft::parse_text_holding(&text);
        assert_eq!(a.rule_count(), b.rule_count(), "{}", f.display());
        // The reader's own checks (jumps to undefined or base chains) answered from
        // those facts say what they say from the statements.
        assert_eq!(
            format!("{:?}", a.diagnostics),
            format!("{:?}", b.diagnostics),
            "{}",
            f.display()
        );
        let rules = |rs: &Ruleset| {
            rs.tables
                .iter()
                .flat_map(|t| &t.chains)
                .flat_map(|c| &c.rules)
                .cloned()
                .collect::<Vec<_>>()
        };
        for (ra, rb) in rules(&a).iter().zip(&rules(&b)) {
            let (RuleBody::Nft(na), RuleBody::Nft(nb)) = (&ra.body, &rb.body) else {
                continue;
            };
            assert!(nb.holds_statements());
            if na.holds_statements() {
                held += 1;
            } else {
                lazy += 1;
            }
            let facts = na.text_facts();
            known_transfers += usize::from(facts.knows_transfers());
            known_nats += usize::from(facts.knows_nats());
            let shown = |r: &plumb_ruleset::Rule, n: &NftRule| {
                let st: Vec<(String, String)> = statements(r)
                    .iter()
                    .map(|s| (s.text.to_string(), format!("{:?}", s.kind)))
                    .collect();
                format!(
                    "{st:?} {:?} {:?} {:?} {:?} {:?} {:?}",
                    r.chain_references(),
                    n.nat_statements(&r.text),
                    n.verdict_map_names(&r.text),
                    r.comments(),
                    r.counters(),
                    n.handle()
                )
            };
            if ra.text.as_str() != rb.text.as_str() || shown(ra, na) != shown(rb, nb) {
                mismatches.push(format!(
                    "{}: {}\n  again   {}\n  context {}",
                    f.display(),
                    ra.text,
                    shown(ra, na),
                    shown(rb, nb)
                ));
            }
        }
    }
    eprintln!(
        "{} files: {lazy} rules read again from their text ({known_transfers} with their chain references known, {known_nats} their NAT), {held} holding their statements, {} mismatches",
        files.len(),
        mismatches.len()
    );
    assert!(lazy > 1000, "{lazy} rules read from their text");
    assert!(
        known_transfers > lazy / 2 && known_nats > lazy / 2,
        "{known_transfers} and {known_nats} of {lazy}"
    );
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}
