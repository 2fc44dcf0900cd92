//! Privileged differential grammar suite: plumb's readers must accept and reject
//! damaged rules exactly as the kernel tools do.
//!
//! Valid rules from the corpus (iptables-save dumps, kube-proxy payloads, iptables'
//! own extension tests, nftables' own dumps and kube-proxy's nftables transactions)
//! are mutated deterministically (a fixed seed): two words glued, a word split, a word
//! dropped, duplicated or swapped with its neighbour, the line truncated, a quote
//! dropped, a junk word appended, and for nft a set or map reference renamed to one
//! that does not exist. Each case is a whole restore payload or nft file holding one
//! such rule. Its verdict from `iptables-legacy-restore --test`,
//! `iptables-nft-restore` (committed: its `--test` skips the lookup of jumped-to
//! chains; ip6tables for IPv6 rules) and `nft -c -f`, run in
//! private network namespaces, is compared with plumb's: a case is rejected by plumb
//! when reading it gives an error diagnostic.
//!
//! A base rule counts only when every tool accepts it unmutated (a rule the kernel here
//! cannot load, such as an ipset match without its set, tests the kernel, not the
//! grammar). Mutations that leave the text unchanged are dropped, and duplicates are
//! tested once.
//!
//! The kernel tools are slow per process (an nft transaction waits for the kernel about
//! 14 ms) but wait rather than compute, so the cases are spread over several namespaces
//! that run side by side; each namespace runs one shell loop over its case files. The
//! legacy tool takes the xtables lock, so its cases run in one loop of their own.
//!
//! plumb judges an iptables payload as the oracle reads it: as the installed iptables
//! version (`IptablesInput::version`) restoring it whole (`RestoreMode::Full`). The
//! nft oracle runs with an `/etc/hosts` of its own (see [`hosts_file`]).
//!
//! Prints the counts (cases, agreement per tool, each disagreement) and fails when the
//! raw agreement (every disagreement counted) is below [`AGREEMENT_FLOOR`], when a
//! disagreement is not listed, or with fewer than [`MIN_CASES`] mutated cases per tool.
//! Disagreements that remain are listed, with their reason, in
//! `tests/data/grammar-disagreements.tsv`; one that is not listed is printed as
//! unexplained. Skips with a printed reason without root, the tools or the corpus.
//! Run serially (`--test-threads=1`).

use plumb_os::netns::{Netns, can_create};
use plumb_os::runner::which;
use plumb_ruleset::Family;
use plumb_ruleset::iptables::save::{IptablesInput, RestoreMode, parse as parse_iptables};
use plumb_ruleset::model::xt::dialect::IptablesVersion;
use plumb_ruleset::nft::parse_text as parse_nft;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The agreement plumb's readers must keep with each tool, in percent of the cases it
/// judged, every disagreement counted (each must also be listed, with its reason, in
/// `tests/data/grammar-disagreements.tsv`).
const AGREEMENT_FLOOR: f64 = 99.9;
/// Fewest mutated rules per tool.
const MIN_CASES: usize = 5_000;
/// Mutated rules generated per tool family before duplicates and invalid bases go.
fn target_cases(kind: Kind) -> usize {
    match kind {
        Kind::Iptables => 6_000,
        // More nft bases fail to load here (features the kernel lacks).
        Kind::Nft => 9_500,
    }
}
/// Namespaces that run nft-backed tools side by side.
const WORKERS: usize = 6;
/// Longest the whole oracle run may take.
const DEADLINE: Duration = Duration::from_secs(600);
/// The seed of every mutation: the cases are the same on every run.
const SEED: u64 = 0x706c_756d_625f_6772;

/// A small deterministic generator (splitmix64): no dependency, same cases everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Kind {
    Iptables,
    Nft,
}

/// A valid rule from the corpus and the file it is tested in.
struct Base {
    kind: Kind,
    family: Family,
    /// `file:line`, relative to the corpus.
    origin: String,
    /// The file text before and after the rule's line.
    before: String,
    after: String,
    /// For iptables: `-A CHAIN ` (kept); the rest of the line is mutated.
    head: String,
    /// The part of the line that is mutated.
    body: String,
}

/// One case: a base with its rule replaced (or not, for the base itself).
struct Case {
    base: usize,
    mutation: &'static str,
    line: String,
}

impl Case {
    fn text(&self, bases: &[Base]) -> String {
        let b = &bases[self.base];
        format!("{}{}{}{}", b.before, b.head, self.line, b.after)
    }
}

/// Splits on blanks, keeping a double-quoted part (with `\"` escapes) inside its word.
fn tokens(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' if quoted => {
                cur.push(c);
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            '"' => {
                quoted = !quoted;
                cur.push(c);
            }
            ' ' | '\t' if !quoted => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

const MUTATIONS: &[&str] = &[
    "glue",
    "split",
    "drop",
    "duplicate",
    "swap",
    "truncate",
    "drop-quote",
    "junk",
    "undefined-set",
];

/// Junk words appended by the `junk` mutation: a value, an option, a lone `!`, a
/// target option without a name.
const JUNK: &[&str] = &[
    "x", "--bogus", "!", "-j", "1", "-m", "}", ";", "accept", "counter",
];

/// Applies mutation `m` to `body`, or `None` when it does not apply.
fn mutate(body: &str, m: &str, kind: Kind, rng: &mut Rng) -> Option<String> {
    let t = tokens(body);
    let n = t.len();
    let join = |v: &[String]| v.join(" ");
    let out = match m {
        "glue" if n >= 2 => {
            let i = rng.below(n - 1);
            let mut v = t.clone();
            let w = v.remove(i + 1);
            v[i].push_str(&w);
            join(&v)
        }
        "split" => {
            let long: Vec<usize> = (0..n).filter(|&i| t[i].chars().count() >= 2).collect();
            let i = *long.get(rng.below(long.len()))?;
            let chars: Vec<char> = t[i].chars().collect();
            let at = 1 + rng.below(chars.len() - 1);
            let mut v = t.clone();
            v[i] = chars[..at].iter().collect();
            v.insert(i + 1, chars[at..].iter().collect());
            join(&v)
        }
        "drop" if n >= 1 => {
            let mut v = t.clone();
            v.remove(rng.below(n));
            join(&v)
        }
        "duplicate" if n >= 1 => {
            let mut v = t.clone();
            let i = rng.below(n);
            v.insert(i, t[i].clone());
            join(&v)
        }
        "swap" if n >= 2 => {
            let mut v = t.clone();
            let i = rng.below(n - 1);
            v.swap(i, i + 1);
            join(&v)
        }
        "truncate" if body.len() >= 2 => {
            let mut at = 1 + rng.below(body.len() - 1);
            while !body.is_char_boundary(at) {
                at -= 1;
            }
            body[..at].trim_end().to_string()
        }
        "drop-quote" => {
            let quotes: Vec<usize> = body.match_indices('"').map(|(i, _)| i).collect();
            let at = *quotes.get(rng.below(quotes.len()))?;
            format!("{}{}", &body[..at], &body[at + 1..])
        }
        "junk" => format!("{body} {}", JUNK[rng.below(JUNK.len())]),
        "undefined-set" if kind == Kind::Nft => {
            let refs: Vec<usize> = body.match_indices('@').map(|(i, _)| i).collect();
            let at = *refs.get(rng.below(refs.len()))?;
            let end = body[at + 1..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.'))
                .map_or(body.len(), |e| at + 1 + e);
            if end == at + 1 {
                return None;
            }
            format!("{}_undefined{}", &body[..end], &body[end..])
        }
        _ => return None,
    };
    (out != body && !out.trim().is_empty()).then_some(out)
}

/// Files under `dir`, recursively, sorted.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn rel(corpus: &Path, p: &Path) -> String {
    p.strip_prefix(corpus).unwrap_or(p).display().to_string()
}

/// Base rules from iptables-save dumps and restore payloads: each `-A` line, in a
/// payload of its own table holding every chain that table declares.
fn iptables_dump_bases(corpus: &Path, out: &mut Vec<Base>) {
    for dir in [
        "kube-proxy-iptables",
        "general-iptables-save",
        "real-world/iptables-save",
    ] {
        for path in files(&corpus.join(dir)) {
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            if !text.lines().any(|l| l.starts_with('*')) {
                continue; // -S output, filtered captures: no table to restore into
            }
            let family = if text.contains("ip6tables") || rel(corpus, &path).contains("ip6") {
                Family::Ip6
            } else {
                Family::Ip
            };
            let mut table = String::new();
            let mut decls: HashMap<String, Vec<String>> = HashMap::new();
            for l in text.lines() {
                if let Some(t) = l.strip_prefix('*') {
                    table = t.trim().to_string();
                } else if l.starts_with(':') {
                    decls.entry(table.clone()).or_default().push(l.to_string());
                }
            }
            for (i, l) in text.lines().enumerate() {
                if let Some(t) = l.strip_prefix('*') {
                    table = t.trim().to_string();
                    continue;
                }
                let l = match l.find("-A ") {
                    Some(at) if l[..at].trim().is_empty() || l.starts_with('[') => &l[at..],
                    _ => continue,
                };
                let mut w = l.splitn(3, ' ');
                let (Some(_), Some(chain), Some(body)) = (w.next(), w.next(), w.next()) else {
                    continue;
                };
                let mut before = format!("*{table}\n");
                for d in decls.get(&table).into_iter().flatten() {
                    let d = match d.rfind(" [") {
                        Some(at) => &d[..at],
                        None => d,
                    };
                    before.push_str(d);
                    before.push('\n');
                }
                out.push(Base {
                    kind: Kind::Iptables,
                    family,
                    origin: format!("{}:{}", rel(corpus, &path), i + 1),
                    before,
                    after: "\nCOMMIT\n".into(),
                    head: format!("-A {chain} "),
                    body: body.trim_end().to_string(),
                });
            }
        }
    }
}

/// Base rules from iptables' extension tests (`extensions/*.t`): the rules the suite
/// expects to load (`OK`), in the first chain the file names.
fn iptables_suite_bases(corpus: &Path, out: &mut Vec<Base>) {
    for path in files(&corpus.join("iptables-upstream")) {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !name.ends_with(".t") || name.starts_with("libarpt_") || name.starts_with("libebt_") {
            continue;
        }
        let text = plumb_testkit::read(&path);
        let mut table = "filter".to_string();
        let mut chain = "INPUT".to_string();
        for (i, l) in text.lines().enumerate() {
            if let Some(t) = l.strip_prefix('*') {
                table = t.trim().to_string();
                continue;
            }
            if let Some(c) = l.strip_prefix(':') {
                chain = c.split(',').next().unwrap_or("INPUT").trim().to_string();
                continue;
            }
            let parts: Vec<&str> = l.rsplitn(3, ';').collect();
            if parts.len() != 3 || parts[0] != "OK" || l.starts_with('#') {
                continue;
            }
            let family = if name.starts_with("libip6t_") || name.starts_with("ip6tables") {
                Family::Ip6
            } else {
                Family::Ip
            };
            out.push(Base {
                kind: Kind::Iptables,
                family,
                origin: format!("{}:{}", rel(corpus, &path), i + 1),
                before: format!("*{table}\n"),
                after: "\nCOMMIT\n".into(),
                head: format!("-A {chain} "),
                body: parts[2].trim().to_string(),
            });
        }
    }
}

/// Base rules from nft rulesets: each rule line inside a `chain` block of a
/// `table { ... }` file, at most `per_file` per file, tested inside its whole file.
fn nft_bases(corpus: &Path, out: &mut Vec<Base>) {
    let per_file = 60;
    for dir in ["nftables-upstream", "kube-proxy-nftables"] {
        for path in files(&corpus.join(dir)) {
            let p = rel(corpus, &path);
            if !(p.ends_with(".nft") || p.contains("nft-transaction")) {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let lines: Vec<&str> = text.lines().collect();
            let mut picked = 0;
            let mut in_chain = false;
            for (i, l) in lines.iter().enumerate() {
                let t = l.trim();
                if t.starts_with("chain ") && t.ends_with('{') {
                    in_chain = true;
                    continue;
                }
                if t == "}" {
                    in_chain = false;
                    continue;
                }
                let script_rule = t.starts_with("add rule ") || t.starts_with("insert rule ");
                let rule = (in_chain
                    && !t.is_empty()
                    && !t.starts_with('#')
                    && !t.starts_with("type ")
                    && !t.starts_with("policy ")
                    && !t.starts_with("comment ")
                    && !t.starts_with("devices ")
                    && !t.contains('{')
                    && !t.contains('}'))
                    || script_rule;
                if !rule || picked >= per_file {
                    continue;
                }
                picked += 1;
                let indent = &l[..l.len() - l.trim_start().len()];
                out.push(Base {
                    kind: Kind::Nft,
                    family: Family::Ip,
                    origin: format!("{p}:{}", i + 1),
                    before: lines[..i].iter().map(|l| format!("{l}\n")).collect(),
                    after: format!(
                        "\n{}",
                        lines[i + 1..]
                            .iter()
                            .map(|l| format!("{l}\n"))
                            .collect::<String>()
                    ),
                    head: indent.to_string(),
                    body: t.to_string(),
                });
            }
        }
    }
}

/// The cases of one family: every base unmutated, then mutations until `target`.
fn cases_for(bases: &[Base], kind: Kind, rng: &mut Rng, target: usize) -> Vec<Case> {
    let ids: Vec<usize> = (0..bases.len())
        .filter(|&i| bases[i].kind == kind)
        .collect();
    let mut out: Vec<Case> = ids
        .iter()
        .map(|&b| Case {
            base: b,
            mutation: "none",
            line: bases[b].body.clone(),
        })
        .collect();
    let mut seen: HashSet<(usize, String)> = out.iter().map(|c| (c.base, c.line.clone())).collect();
    let mut made = 0;
    let mut attempts = 0;
    while made < target && attempts < target * 20 && !ids.is_empty() {
        attempts += 1;
        let b = ids[rng.below(ids.len())];
        let m = MUTATIONS[rng.below(MUTATIONS.len())];
        let Some(line) = mutate(&bases[b].body, m, kind, rng) else {
            continue;
        };
        if !seen.insert((b, line.clone())) {
            continue;
        }
        made += 1;
        out.push(Case {
            base: b,
            mutation: m,
            line,
        });
    }
    out
}

/// A kernel tool: its name in reports, how to run it on a case file, and its family.
struct Tool {
    name: &'static str,
    kind: Kind,
    /// Shell command with `$f` for the case file.
    command: fn(Family) -> &'static str,
    workers: usize,
    /// Runs with the cases' names resolvable (see [`hosts_file`]).
    hosts: bool,
}

const TOOLS: &[Tool] = &[
    Tool {
        name: "iptables-legacy-restore",
        kind: Kind::Iptables,
        command: |f| match f {
            Family::Ip6 => "ip6tables-legacy-restore -w 10 --test < $f",
            _ => "iptables-legacy-restore -w 10 --test < $f",
        },
        workers: 1,
        hosts: false,
    },
    Tool {
        name: "iptables-nft-restore",
        kind: Kind::Iptables,
        command: |f| match f {
            // Committed, not `--test`: the nft backend's test mode never looks up
            // the chains a rule jumps to, which the commit refuses. The namespace is
            // private, and each payload replaces the tables it names.
            Family::Ip6 => "ip6tables-nft-restore < $f",
            _ => "iptables-nft-restore < $f",
        },
        workers: WORKERS / 2,
        hosts: false,
    },
    Tool {
        name: "nft",
        kind: Kind::Nft,
        command: |_| "nft -c -f $f",
        workers: WORKERS - WORKERS / 2,
        hosts: true,
    },
];

/// An `/etc/hosts` in which the names the nft cases give as addresses resolve (to an
/// IPv4 and an IPv6 documentation address). nft resolves a symbol where an address is
/// expected (`ip saddr v`, `dnat t`, `dnat to10.0.0.1`) and refuses the rule when it
/// cannot; plumb reads other machines' rulesets and takes any name there. With those
/// names resolvable, nft judges the grammar rather than this host's resolver. A name
/// is a word after `saddr`, `daddr`, `dnat`, `snat`, `to` or `addr` with a letter in
/// it, up to its `:`, `/`, `-` or `,`; nft's own keywords (`dnat ip`) are no host
/// names on any real host and are left out. The file is mounted only inside the
/// oracle's own mount namespace (`unshare -m`). iptables runs without it: plumb refuses
/// host names in iptables addresses, as iptables does here.
fn hosts_file(cases: &[Case], bases: &[Base]) -> String {
    const ADDRESS_BEFORE: &[&str] = &["saddr", "daddr", "dnat", "snat", "to", "addr"];
    const KEYWORDS: &[&str] = &[
        "ip", "ip6", "inet", "to", "prefix", "addr", "map", "tcp", "udp", "th", "meta", "ct",
        "numgen", "jhash", "symhash", "fib", "rt", "ether", "vlan", "arp", "ipsec", "socket",
    ];
    let mut names: Vec<String> = Vec::new();
    for c in cases.iter().filter(|c| bases[c.base].kind == Kind::Nft) {
        let words: Vec<&str> = c.line.split_whitespace().collect();
        for pair in words.windows(2) {
            if !ADDRESS_BEFORE.contains(&pair[0]) {
                continue;
            }
            let name = pair[1]
                .trim_matches('"')
                .split([':', '/', '-', ','])
                .next()
                .unwrap_or("");
            if name.chars().any(|ch| ch.is_ascii_alphabetic())
                && name
                    .chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || ch == '.' || ch == '_')
                && !KEYWORDS.contains(&name)
            {
                names.push(name.to_string());
            }
        }
    }
    names.sort();
    names.dedup();
    let mut text = String::from("127.0.0.1 localhost\n::1 localhost\n");
    for chunk in names.chunks(8) {
        let line = chunk.join(" ");
        text.push_str(&format!("192.0.2.1 {line}\n2001:db8::1 {line}\n"));
    }
    text
}

/// What the oracle's verdicts depend on: the cases (whole files), the tools, their
/// versions and the environment they run in. A cache written under another key is not
/// read.
fn oracle_key(hosts: &str, cases: &[Case], bases: &[Base]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |s: &str| {
        for b in s.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    };
    feed(hosts);
    for c in cases {
        feed(&c.text(bases));
    }
    for tool in TOOLS {
        feed(tool.name);
        feed((tool.command)(Family::Ip));
        feed((tool.command)(Family::Ip6));
        feed(if tool.hosts { "hosts" } else { "" });
    }
    for version in [
        ["iptables-legacy-restore", "--version"],
        ["nft", "--version"],
    ] {
        if let Ok(out) = Command::new(version[0]).arg(version[1]).output() {
            feed(&String::from_utf8_lossy(&out.stdout));
        }
    }
    format!("{h:016x}")
}

/// The iptables version installed here (what the oracles judge as).
fn installed_iptables() -> IptablesVersion {
    let out = Command::new("iptables-legacy-restore")
        .arg("--version")
        .output()
        .expect("iptables-legacy-restore --version");
    // "iptables-restore v1.8.9 (legacy)"
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .find_map(IptablesVersion::parse)
        .expect("a version in iptables-legacy-restore --version")
}

/// A verdict: accepted, or rejected with the tool's first error line.
type Verdict = Result<(), String>;

/// Runs every tool over its cases (files `dir/c<N>`) in private namespaces; the
/// verdicts per tool, indexed like `cases`.
fn run_tools(
    dir: &Path,
    cases: &[Case],
    bases: &[Base],
    hosts: &Path,
) -> BTreeMap<&'static str, HashMap<usize, Verdict>> {
    struct Job {
        tool: &'static str,
        _ns: Netns,
        child: Child,
        out: PathBuf,
    }
    let mut jobs = Vec::new();
    for tool in TOOLS {
        let mine: Vec<usize> = (0..cases.len())
            .filter(|&i| bases[cases[i].base].kind == tool.kind)
            .collect();
        for w in 0..tool.workers {
            let ns = Netns::create("plumb-grammar").expect("creating a test namespace");
            let mut script = String::from("set +e\n");
            for &i in mine.iter().skip(w).step_by(tool.workers) {
                let cmd = (tool.command)(bases[cases[i].base].family)
                    .replace("$f", &dir.join(format!("c{i}")).display().to_string());
                let err = dir.join(format!("c{i}.{}.err", tool.name));
                script.push_str(&format!(
                    "{cmd} >/dev/null 2>{e}; echo \"{i} $?\"\n",
                    e = err.display()
                ));
            }
            let sh = dir.join(format!("{}-{w}.sh", tool.name));
            std::fs::write(&sh, script).unwrap();
            let out = dir.join(format!("{}-{w}.out", tool.name));
            let mut cmd = Command::new("ip");
            cmd.args(["netns", "exec", ns.name()]);
            if tool.hosts {
                // A private mount namespace: the bind mount never reaches the host.
                cmd.args(["unshare", "-m", "--propagation", "private", "sh", "-c"])
                    .arg(format!(
                        "mount --bind {} /etc/hosts && exec sh {}",
                        hosts.display(),
                        sh.display()
                    ));
            } else {
                cmd.arg("sh").arg(&sh);
            }
            let child = cmd
                .stdout(std::fs::File::create(&out).unwrap())
                .stderr(Stdio::null())
                .stdin(Stdio::null())
                .spawn()
                .expect("ip netns exec");
            jobs.push(Job {
                tool: tool.name,
                _ns: ns,
                child,
                out,
            });
        }
    }
    let start = Instant::now();
    let mut verdicts: BTreeMap<&'static str, HashMap<usize, Verdict>> = BTreeMap::new();
    for mut job in jobs {
        loop {
            if job
                .child
                .try_wait()
                .expect("waiting for a worker")
                .is_some()
            {
                break;
            }
            if start.elapsed() > DEADLINE {
                let _ = job.child.kill();
                let _ = job.child.wait();
                panic!("{} did not finish within {DEADLINE:?}", job.tool);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = std::fs::read_to_string(&job.out).unwrap_or_default();
        let v = verdicts.entry(job.tool).or_default();
        for l in out.lines() {
            let Some((i, rc)) = l.split_once(' ') else {
                continue;
            };
            let i: usize = i.parse().unwrap();
            let verdict = if rc == "0" {
                Ok(())
            } else {
                let err = std::fs::read_to_string(dir.join(format!("c{i}.{}.err", job.tool)))
                    .unwrap_or_default();
                // The tool's reason, without the case file's path (it names the case).
                let first = err
                    .lines()
                    .map(str::trim)
                    .find(|l| {
                        !l.is_empty()
                            && !l.starts_with("Error occurred at line")
                            && !l.starts_with("Try `")
                    })
                    .unwrap_or("")
                    .replace(&format!("{}/c{i}", dir.display()), "");
                Err(format!("rc={rc}: {first}"))
            };
            v.insert(i, verdict);
        }
    }
    verdicts
}

/// Reads verdicts written by [`write_cache`]; `None` when the file is absent,
/// unreadable or written under another oracle key ([`oracle_key`]).
fn read_cache(path: &Path, key: &str) -> Option<BTreeMap<&'static str, HashMap<usize, Verdict>>> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut lines = text.lines();
    if lines.next()? != format!("#oracle {key}") {
        return None;
    }
    let mut out: BTreeMap<&'static str, HashMap<usize, Verdict>> = BTreeMap::new();
    for l in lines {
        let mut f = l.splitn(3, '\t');
        let (tool, i, err) = (f.next()?, f.next()?, f.next());
        let tool = TOOLS.iter().find(|t| t.name == tool)?.name;
        let v = match err {
            None => Ok(()),
            Some(e) => Err(e.to_string()),
        };
        out.entry(tool).or_default().insert(i.parse().ok()?, v);
    }
    Some(out)
}

/// Writes the verdicts under `key`, one `tool<TAB>case[<TAB>error]` line each.
fn write_cache(path: &Path, key: &str, v: &BTreeMap<&'static str, HashMap<usize, Verdict>>) {
    let mut text = format!("#oracle {key}\n");
    for (tool, m) in v {
        for (i, r) in m {
            match r {
                Ok(()) => text.push_str(&format!("{tool}\t{i}\n")),
                Err(e) => {
                    text.push_str(&format!("{tool}\t{i}\t{}\n", e.replace(['\t', '\n'], " ")))
                }
            }
        }
    }
    let _ = std::fs::write(path, text);
}

/// plumb's verdict on a case: rejected when reading it gives an error diagnostic.
/// iptables payloads are judged as the oracle reads them: as its iptables `version`,
/// restored whole (`iptables-restore --test` without `--noflush`).
fn plumb_verdict(text: &str, base: &Base, version: IptablesVersion) -> Verdict {
    let rs = match base.kind {
        Kind::Iptables => parse_iptables(
            text,
            &IptablesInput {
                family: base.family,
                version: Some(version),
                restore: RestoreMode::Full,
                ..IptablesInput::default()
            },
        ),
        Kind::Nft => parse_nft(text),
    };
    match rs.errors().next() {
        None => Ok(()),
        Some(d) => Err(format!("line {}: {}", d.line, d.message)),
    }
}

/// The listed disagreements: (tool, origin, mutated line) -> reason.
fn listed() -> HashMap<(String, String, String), String> {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/grammar-disagreements.tsv");
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let mut f = l.splitn(4, '\t');
            Some((
                (f.next()?.into(), f.next()?.into(), f.next()?.into()),
                f.next()?.into(),
            ))
        })
        .collect()
}

#[test]
fn plumb_accepts_and_rejects_mutated_rules_as_the_kernel_tools_do() {
    let Some(corpus) = plumb_testkit::corpus_dir() else {
        return;
    };
    if !can_create() {
        plumb_testkit::skip("needs root and iproute2 to create network namespaces");
        return;
    }
    for t in [
        "iptables-legacy-restore",
        "iptables-nft-restore",
        "ip6tables-legacy-restore",
        "ip6tables-nft-restore",
        "nft",
        "unshare",
        "mount",
    ] {
        if which(t).is_none() {
            plumb_testkit::skip(&format!("{t} not installed"));
            return;
        }
    }
    let started = Instant::now();
    let mut bases = Vec::new();
    iptables_dump_bases(&corpus, &mut bases);
    iptables_suite_bases(&corpus, &mut bases);
    nft_bases(&corpus, &mut bases);
    let mut rng = Rng(SEED);
    let mut cases = cases_for(
        &bases,
        Kind::Iptables,
        &mut rng,
        target_cases(Kind::Iptables),
    );
    cases.extend(cases_for(
        &bases,
        Kind::Nft,
        &mut rng,
        target_cases(Kind::Nft),
    ));

    let scratch = plumb_testkit::Scratch::new("grammar");
    for (i, c) in cases.iter().enumerate() {
        std::fs::write(scratch.path().join(format!("c{i}")), c.text(&bases)).unwrap();
    }
    // PLUMB_GRAMMAR_ORACLE_CACHE=FILE keeps the tools' verdicts between runs while the
    // grammar is worked on: read when FILE holds verdicts of the same oracle key (the
    // cases, the tools and their environment), written otherwise.
    let hosts = hosts_file(&cases, &bases);
    let hosts_path = scratch.path().join("hosts");
    std::fs::write(&hosts_path, &hosts).unwrap();
    let key = oracle_key(&hosts, &cases, &bases);
    let version = installed_iptables();
    let cache = std::env::var_os("PLUMB_GRAMMAR_ORACLE_CACHE").map(PathBuf::from);
    let verdicts = match cache.as_deref().map(|p| read_cache(p, &key)) {
        Some(Some(v)) => v,
        _ => {
            let v = run_tools(scratch.path(), &cases, &bases, &hosts_path);
            if let Some(path) = &cache {
                write_cache(path, &key, &v);
            }
            v
        }
    };
    let oracle_time = started.elapsed();

    // A base counts when every tool of its family accepts it unmutated.
    let mut valid_base = vec![true; bases.len()];
    let mut invalid_bases: BTreeMap<String, usize> = BTreeMap::new();
    for (i, c) in cases
        .iter()
        .enumerate()
        .filter(|(_, c)| c.mutation == "none")
    {
        for tool in TOOLS.iter().filter(|t| t.kind == bases[c.base].kind) {
            if let Some(Err(e)) = verdicts[tool.name].get(&i) {
                valid_base[c.base] = false;
                *invalid_bases
                    .entry(format!(
                        "{}: {}",
                        tool.name,
                        e.chars().take(90).collect::<String>()
                    ))
                    .or_default() += 1;
            }
        }
    }

    let listed = listed();
    let mut failed = Vec::new();
    println!("differential grammar suite (seed {SEED:#x}), oracles took {oracle_time:?}");
    for (reason, n) in &invalid_bases {
        println!("  base rules left out ({n}): {reason}");
    }
    for tool in TOOLS {
        let v = &verdicts[tool.name];
        let (mut total, mut agree, mut mutated, mut rejected) = (0, 0, 0, 0);
        let mut unexplained = 0;
        for (i, c) in cases.iter().enumerate() {
            let b = &bases[c.base];
            if b.kind != tool.kind || !valid_base[c.base] {
                continue;
            }
            let Some(theirs) = v.get(&i) else { continue };
            total += 1;
            if c.mutation != "none" {
                mutated += 1;
            }
            rejected += usize::from(theirs.is_err());
            let ours = plumb_verdict(&c.text(&bases), b, version);
            if ours.is_err() == theirs.is_err() {
                agree += 1;
                continue;
            }
            let key = (tool.name.to_string(), b.origin.clone(), c.line.clone());
            let reason = listed.get(&key);
            unexplained += usize::from(reason.is_none());
            println!(
                "  DISAGREE {}\t{}\t{}\t{}\n      {}: {:?}\n      plumb: {:?}",
                tool.name,
                b.origin,
                c.line,
                reason.map_or("UNEXPLAINED", |r| r.as_str()),
                c.mutation,
                theirs,
                ours
            );
        }
        let rate = 100.0 * agree as f64 / total.max(1) as f64;
        let explained = total - agree - unexplained;
        let with_listed = 100.0 * (agree + explained) as f64 / total.max(1) as f64;
        println!(
            "{}: {total} cases ({mutated} mutated, {rejected} rejected by the tool), {agree} agree ({rate:.2} %), {} disagree ({explained} listed, {unexplained} unexplained): {with_listed:.2} % with the listed exceptions",
            tool.name,
            total - agree
        );
        if mutated < MIN_CASES {
            failed.push(format!("{}: only {mutated} mutated cases", tool.name));
        }
        if rate < AGREEMENT_FLOOR {
            failed.push(format!(
                "{}: agreement {rate:.2} % < {AGREEMENT_FLOOR} %",
                tool.name,
            ));
        }
        if unexplained > 0 {
            failed.push(format!(
                "{}: {unexplained} disagreement(s) not listed in tests/data/grammar-disagreements.tsv",
                tool.name,
            ));
        }
    }
    println!("total time {:?}", started.elapsed());
    assert!(failed.is_empty(), "{failed:#?}");
}
