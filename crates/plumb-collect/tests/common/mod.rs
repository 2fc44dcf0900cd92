//! What the two live-reader oracles (`netlink_oracle.rs`, `legacy_oracle.rs`) share:
//! which corpus rulesets they load, and loading each into a fresh private namespace
//! with a restore tool (kube-proxy's partial-sync steps on top of the full sync before
//! them), and the generated kube-proxy rulesets, so each oracle is only its comparison.

use plumb_os::netns::Netns;
use std::path::{Path, PathBuf};

/// The corpus rulesets both oracles load, sorted.
pub fn corpus_files(corpus: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in [
        "kube-proxy-iptables/real-nodes",
        "kube-proxy-iptables/k8s-proxier-test",
        "real-world/iptables-save",
        "real-world/host-firewall",
        "general-iptables-save/diekmann-Iptables_Semantics",
        "other-cni/flannel",
        "other-cni/calico",
    ] {
        if let Ok(rd) = std::fs::read_dir(corpus.join(dir)) {
            files.extend(rd.flatten().map(|e| e.path()).filter(|p| p.is_file()));
        }
    }
    files.sort();
    files
}

/// Which restore tools load the rulesets, and how their refusals read.
pub struct Restore {
    /// The IPv4 and IPv6 restore tools (`iptables-nft-restore`, `ip6tables-nft-restore`).
    pub tools: [&'static str; 2],
    /// The namespace name's prefix.
    pub netns: &'static str,
    /// Lines of the tool's stderr that are not the reason (a prefix-only line).
    pub noise: fn(&str) -> bool,
}

/// Loads every corpus ruleset under `corpus` into its own namespace with `restore`,
/// and calls `compare(ns, label)` after each file that loaded (a partial-sync step
/// `NAME.stepN` is loaded with `--noflush` after steps 1..N-1, in the same namespace).
/// Returns the labels loaded and the refusals (`label: the tool's reason`), which
/// stop that file's sequence.
pub fn load_each(
    corpus: &Path,
    restore: &Restore,
    mut compare: impl FnMut(&Netns, &str),
) -> (Vec<String>, Vec<String>) {
    let (mut loaded, mut refused) = (Vec::new(), Vec::new());
    let files = corpus_files(corpus);
    let is_later_step =
        |p: &Path| p.to_string_lossy().contains(".step") && !p.to_string_lossy().contains(".step1");
    for file in files.iter().filter(|f| !is_later_step(f)) {
        let ns = Netns::create(restore.netns).expect("netns");
        let stem = file
            .to_string_lossy()
            .split(".step")
            .next()
            .unwrap_or("")
            .to_string();
        let mut sequence = vec![(file.clone(), false)];
        if file.to_string_lossy().contains(".step1") {
            sequence.extend(
                files
                    .iter()
                    .filter(|f| is_later_step(f) && f.to_string_lossy().starts_with(&stem))
                    .map(|f| (f.clone(), true)),
            );
        }
        for (file, noflush) in sequence {
            let label = file.strip_prefix(corpus).unwrap().display().to_string();
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            let tool = restore.tools[usize::from(label.contains("ip6tables"))];
            let args: &[&str] = if noflush { &["--noflush"] } else { &[] };
            let (ok, _, err) = ns.exec(tool, args, Some(&text)).expect(tool);
            if !ok {
                let why = err
                    .lines()
                    .find(|l| !l.trim().is_empty() && !(restore.noise)(l));
                refused.push(format!("{label}: {}", why.unwrap_or("")));
                break;
            }
            compare(&ns, &label);
            loaded.push(label);
        }
    }
    (loaded, refused)
}

/// Prints the tally and asserts that nothing differed and something was compared.
pub fn report(
    loaded: &[String],
    tables: usize,
    fallbacks: &[String],
    refused: &[String],
    diffs: &[String],
) {
    eprintln!(
        "corpus: {} files loaded, {tables} tables equal, {} fell back, {} refused by the restore tool",
        loaded.len(),
        fallbacks.len(),
        refused.len()
    );
    for f in fallbacks {
        eprintln!("fallback: {f}");
    }
    for r in refused {
        eprintln!("refused: {r}");
    }
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
    assert!(!loaded.is_empty() && tables > 0);
}

/// kube-proxy rulesets from the generator, as iptables-save text with a label: every
/// feature (NodePorts, affinity with `recent`, Local policy, ...) is in one of them.
pub fn generated_kube_proxy_rulesets() -> Vec<(&'static str, String)> {
    let all_features =
        plumb_kubeproxy::generate(&plumb_kubeproxy::GeneratorConfig::all_features(20, 2))
            .expect("generator");
    vec![
        (
            "generated 50x3",
            plumb_kubeproxy::generated_save_text(50, 3).expect("generator"),
        ),
        (
            "generated 20x2 all features",
            plumb_kubeproxy::KubeProxyRules::new(&all_features, &Default::default())
                .to_iptables_save(&Default::default()),
        ),
    ]
}
