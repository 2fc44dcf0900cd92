//! The crate's module layers, checked from its source: the model never uses a reader,
//! the printer or an analysis; no module uses a layer above its own; and no two units
//! use each other, directly or through others (no module cycles).
//!
//! Layers, lowest first (lib.rs describes them): leaves (`diagnostic`, `fasthash`,
//! `parallel`), the model (`model` and its submodules), readers (`format`, `iptables`,
//! `iptables::save`, `iptables::listing`, `nft`, `nft::text`, `nft::json`), the printer
//! (`iptables::canonical`), analyses (`owner`, `diff`, `summary`). A unit is one of those
//! modules with all its submodules. Edges are `crate::` paths in code (comments and doc
//! comments are skipped); `super::` stays inside a unit by construction.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// (unit, layer): the longest matching prefix of a module path names its unit.
const UNITS: &[(&str, u8)] = &[
    ("diagnostic", 0),
    ("fasthash", 0),
    ("parallel", 0),
    ("model", 1),
    ("format", 2),
    ("iptables", 2),
    ("iptables::save", 2),
    ("iptables::listing", 2),
    ("iptables::tables", 2),
    ("session", 2),
    ("ipvs", 2),
    ("nft", 2),
    ("nft::text", 2),
    ("nft::json", 2),
    ("iptables::canonical", 3),
    ("owner", 4),
    ("diff", 4),
    ("summary", 4),
];

const LAYER_NAMES: [&str; 5] = ["leaves", "model", "readers", "printer", "analyses"];

fn unit_of(module: &str) -> Option<(&'static str, u8)> {
    UNITS
        .iter()
        .filter(|(u, _)| module == *u || module.starts_with(&format!("{u}::")))
        .max_by_key(|(u, _)| u.len())
        .copied()
}

/// The unit a `crate::a::b::C` path points into. Items the crate root re-exports
/// (`crate::Ruleset`) resolve to the module that defines them.
fn target_unit(path: &[&str]) -> Option<(&'static str, u8)> {
    let first = *path.first()?;
    if first.starts_with(|c: char| c.is_ascii_uppercase()) || first == "parse_bytes" {
        let defined_in = match first {
            "Diagnostic" | "InputError" | "Severity" => "diagnostic",
            "Format" | "ParseOptions" | "Parsed" | "parse_bytes" => "format",
            _ => "model",
        };
        return unit_of(defined_in);
    }
    let modules: Vec<&str> = path
        .iter()
        .take_while(|s| s.starts_with(|c: char| c.is_ascii_lowercase()))
        .copied()
        .collect();
    unit_of(&modules.join("::"))
}

fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts.join("::")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every `crate::...` path in the code of `text` (comment lines skipped), with its line.
fn crate_paths(text: &str) -> Vec<(usize, Vec<&str>)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let before = rest[..at].chars().next_back();
            rest = &rest[at + "crate::".len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue; // `plumb_crate::` or similar, not this crate
            }
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(rest.len());
            let segments: Vec<&str> = rest[..end].split("::").filter(|s| !s.is_empty()).collect();
            out.push((n + 1, segments));
        }
    }
    out
}

struct Edge {
    from: &'static str,
    from_layer: u8,
    to: &'static str,
    to_layer: u8,
    at: String,
}

fn edges() -> Vec<Edge> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    assert!(files.len() > 10, "found the sources: {files:?}");
    let mut out = Vec::new();
    for file in files {
        let module = module_of(&src, &file);
        if module.is_empty() {
            continue; // lib.rs declares and re-exports every layer
        }
        let (from, from_layer) =
            unit_of(&module).unwrap_or_else(|| panic!("module {module} has no layer in UNITS"));
        let text = std::fs::read_to_string(&file).expect("read source");
        for (line, path) in crate_paths(&text) {
            let Some((to, to_layer)) = target_unit(&path) else {
                continue;
            };
            if to != from {
                out.push(Edge {
                    from,
                    from_layer,
                    to,
                    to_layer,
                    at: format!("{}:{line}: crate::{}", module, path.join("::")),
                });
            }
        }
    }
    out
}

#[test]
fn the_model_uses_nothing_but_the_leaves() {
    let bad: Vec<String> = edges()
        .into_iter()
        .filter(|e| e.from == "model" && e.to_layer > 0)
        .map(|e| format!("{} ({} uses the {})", e.at, e.from, e.to))
        .collect();
    assert!(
        bad.is_empty(),
        "the model uses upper layers:\n{}",
        bad.join("\n")
    );
}

#[test]
fn no_module_uses_a_layer_above_its_own() {
    let bad: Vec<String> = edges()
        .into_iter()
        .filter(|e| e.to_layer > e.from_layer)
        .map(|e| {
            format!(
                "{} ({} in {} uses {} in {})",
                e.at,
                e.from,
                LAYER_NAMES[e.from_layer as usize],
                e.to,
                LAYER_NAMES[e.to_layer as usize]
            )
        })
        .collect();
    assert!(bad.is_empty(), "back edges:\n{}", bad.join("\n"));
}

#[test]
fn units_have_no_cycles() {
    let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    let mut example: BTreeMap<(&str, &str), String> = BTreeMap::new();
    for e in edges() {
        graph.entry(e.from).or_default().insert(e.to);
        example.entry((e.from, e.to)).or_insert(e.at);
    }
    // Depth-first search with colours; the stack at a grey node is the cycle.
    fn visit<'a>(
        node: &'a str,
        graph: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        colour: &mut BTreeMap<&'a str, u8>,
        stack: &mut Vec<&'a str>,
    ) -> Option<Vec<&'a str>> {
        match colour.get(node) {
            Some(2) => return None,
            Some(1) => {
                let from = stack.iter().position(|n| *n == node).expect("on the stack");
                let mut cycle = stack[from..].to_vec();
                cycle.push(node);
                return Some(cycle);
            }
            _ => {}
        }
        colour.insert(node, 1);
        stack.push(node);
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, colour, stack) {
                return Some(c);
            }
        }
        stack.pop();
        colour.insert(node, 2);
        None
    }
    let mut colour = BTreeMap::new();
    for node in graph.keys() {
        if let Some(cycle) = visit(node, &graph, &mut colour, &mut Vec::new()) {
            let why: Vec<String> = cycle
                .windows(2)
                .map(|w| example[&(w[0], w[1])].clone())
                .collect();
            panic!("module cycle {}:\n{}", cycle.join(" -> "), why.join("\n"));
        }
    }
}

#[test]
fn the_checker_sees_a_back_edge() {
    // The scanner itself: a model file naming a reader is an edge to the readers.
    let paths = crate_paths("use crate::iptables::listing::ListedRule; // crate::nft::x\n");
    assert_eq!(paths.len(), 1, "comments are skipped");
    assert_eq!(target_unit(&paths[0].1), Some(("iptables::listing", 2)));
    assert_eq!(target_unit(&["Ruleset"]), Some(("model", 1)));
    assert_eq!(target_unit(&["Diagnostic"]), Some(("diagnostic", 0)));
    assert_eq!(
        target_unit(&["iptables", "XtView"]),
        Some(("iptables", 2)),
        "a reader's re-export is the reader's"
    );
}
