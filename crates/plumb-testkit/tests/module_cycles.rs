//! No crate of the workspace has a module cycle: reading any crate from its top-level
//! modules down never leads back up. A unit is one top-level module of a crate (a file
//! `src/x.rs` or a directory `src/x/` with everything below it); an edge is a
//! `crate::x` path in code (a `use`, grouped `use crate::{a, b}` or inline path;
//! comments and `#[cfg(test)] mod` blocks are skipped). Two units that reach each
//! other are a cycle, reported with the lines that make each edge.
//!
//! plumb-ruleset's own layering test (`crates/plumb-ruleset/tests/layering.rs`) is
//! stricter: its units also have layers. This test is the floor for every crate.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn workspace_crates() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("crates/")
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src` belongs to; None for the crate root itself.
fn unit_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let first = rel.iter().next()?.to_string_lossy().into_owned();
    let unit = first.trim_end_matches(".rs");
    (!matches!(unit, "lib" | "main")).then(|| unit.to_string())
}

/// The code of a file with comments blanked and a trailing `#[cfg(test)] mod` cut,
/// as (line number, code) pairs.
fn code_lines(text: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.trim() == "#[cfg(test)]"
            && lines[i + 1..]
                .iter()
                .find(|l| !l.trim().is_empty())
                .is_some_and(|l| l.trim_start().starts_with("mod "))
        {
            break;
        }
        let code = line.split("//").next().unwrap_or("");
        out.push((i + 1, code.to_string()));
    }
    out
}

/// First path segments named after `crate::` in `code`, with the line each starts on.
/// `crate::{a::B, c}` yields `a` and `c`.
fn crate_targets(lines: &[(usize, String)]) -> Vec<(usize, String)> {
    // Join the code so that a grouped `use` spanning lines is one string; remember
    // where each line starts to map positions back.
    let mut joined = String::new();
    let mut starts = Vec::new();
    for (n, code) in lines {
        starts.push((joined.len(), *n));
        joined.push_str(code);
        joined.push('\n');
    }
    let line_at = |pos: usize| {
        let i = starts.partition_point(|(s, _)| *s <= pos);
        starts[i.saturating_sub(1)].1
    };
    let bytes = joined.as_bytes();
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let ident_at = |at: usize| {
        let end = joined[at..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(joined.len(), |e| at + e);
        &joined[at..end]
    };
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(found) = joined[from..].find("crate::") {
        let at = from + found;
        from = at + "crate::".len();
        if at > 0 && is_ident(bytes[at - 1]) {
            continue; // `plumb_crate::`, not this crate
        }
        if bytes.get(from) == Some(&b'{') {
            // Items of the group at depth 1: the first identifier after `{` or `,`.
            let mut depth = 0;
            let mut expect_item = false;
            let mut i = from;
            while i < bytes.len() {
                match bytes[i] {
                    b'{' => {
                        depth += 1;
                        expect_item = depth == 1;
                    }
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    b',' if depth == 1 => expect_item = true,
                    b if expect_item && is_ident(b) => {
                        out.push((line_at(i), ident_at(i).to_string()));
                        expect_item = false;
                    }
                    _ => {}
                }
                i += 1;
            }
        } else {
            out.push((line_at(from), ident_at(from).to_string()));
        }
    }
    out
}

/// Strongly connected components of more than one unit (Tarjan's algorithm).
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    struct Tarjan<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        out: Vec<BTreeSet<String>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            for w in self.edges.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.stack.contains(&w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = BTreeSet::new();
                while let Some(w) = self.stack.pop() {
                    component.insert(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.out.push(component);
                }
            }
        }
    }
    let mut t = Tarjan {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.out
}

/// Every module cycle of the crate at `dir`, as readable lines.
fn cycles_of_crate(dir: &Path) -> Vec<String> {
    let src = dir.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let units: BTreeSet<String> = files.iter().filter_map(|f| unit_of(&src, f)).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut first_seen: BTreeMap<(String, String), String> = BTreeMap::new();
    for file in &files {
        let Some(from) = unit_of(&src, file) else {
            continue;
        };
        let text = std::fs::read_to_string(file).expect("read source");
        for (line, to) in crate_targets(&code_lines(&text)) {
            if to != from && units.contains(&to) {
                edges.entry(from.clone()).or_default().insert(to.clone());
                first_seen.entry((from.clone(), to)).or_insert_with(|| {
                    let rel = file
                        .strip_prefix(dir.parent().unwrap_or(dir))
                        .unwrap_or(file);
                    format!("{}:{line}", rel.display())
                });
            }
        }
    }
    let crate_name = dir.file_name().expect("crate dir").to_string_lossy();
    let mut out = Vec::new();
    for component in cycles(&edges) {
        out.push(format!("{crate_name}: cycle among {component:?}"));
        for ((from, to), at) in &first_seen {
            if component.contains(from) && component.contains(to) {
                out.push(format!("    {from} -> {to}  ({at})"));
            }
        }
    }
    out
}

#[test]
fn no_crate_has_a_module_cycle() {
    let mut crates: Vec<PathBuf> = std::fs::read_dir(workspace_crates())
        .expect("read crates/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.join("src").is_dir())
        .collect();
    crates.sort();
    assert!(
        crates.len() >= 10,
        "expected the workspace's crates, got {crates:?}"
    );
    let report: Vec<String> = crates.iter().flat_map(|c| cycles_of_crate(c)).collect();
    assert!(report.is_empty(), "module cycles:\n{}", report.join("\n"));
}

#[test]
fn the_reader_sees_grouped_uses_and_skips_comments_and_tests() {
    let text = "use crate::{a::B, c,\n    d::{E, F}};\n// crate::commented\nlet x = crate::g::h();\nplumb_crate::i();\n#[cfg(test)]\nmod tests {\n    use crate::j;\n}\n";
    let got: Vec<(usize, String)> = crate_targets(&code_lines(text));
    let names: Vec<&str> = got.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(names, ["a", "c", "d", "g"]);
    assert_eq!(got[2].0, 2, "a group's item is reported on its own line");
}

#[test]
fn a_two_unit_loop_is_a_cycle_and_a_chain_is_not() {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    edges.entry("a".into()).or_default().insert("b".into());
    edges.entry("b".into()).or_default().insert("c".into());
    assert!(cycles(&edges).is_empty());
    edges.entry("c".into()).or_default().insert("a".into());
    let found = cycles(&edges);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].len(), 3);
}
