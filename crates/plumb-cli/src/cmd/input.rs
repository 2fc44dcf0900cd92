//! Reading a ruleset file or stdin with the user's format hints.

use crate::flags::{InputFlags, SourceFlags};
use anyhow::{Context, bail};
use plumb_ruleset::Family;
use plumb_ruleset::format::parse_owned;
use plumb_ruleset::format::{Format, ParseOptions, Parsed, table_from_file_name};
use std::io::Read;
use std::path::Path;

/// A parsed file and the name to show for it in messages.
pub struct Loaded {
    pub name: String,
    pub parsed: Parsed,
}

pub fn load(path: &Path, flags: &InputFlags) -> anyhow::Result<Loaded> {
    let name = if path.as_os_str() == "-" {
        "<stdin>".to_string()
    } else {
        path.display().to_string()
    };
    let bytes =
        read_limited(path, flags.max_input_size).with_context(|| format!("reading {name}"))?;
    let format = flags
        .format
        .as_deref()
        .map(str::parse::<Format>)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let file_name = path
        .file_name()
        .map(|f| f.to_string_lossy().to_string())
        .unwrap_or_default();
    let family = match flags.family.as_deref() {
        None if file_name.contains("ip6") => Some(Family::Ip6),
        None => None,
        Some("ip" | "ipv4" | "4") => Some(Family::Ip),
        Some("ip6" | "ipv6" | "6") => Some(Family::Ip6),
        Some(other) => bail!("--family {other:?}: expected ip or ip6"),
    };
    let table = flags
        .table
        .clone()
        .or_else(|| table_from_file_name(&file_name).map(str::to_string));
    let options = ParseOptions {
        format,
        family,
        table,
        backend: None,
        max_size: flags.max_input_size,
    };
    let parsed = parse_owned(bytes, &options).with_context(|| format!("reading {name}"))?;
    Ok(Loaded { name, parsed })
}

/// Reads `path` (`-`: standard input), at most `limit + 1` bytes: one more than
/// allowed, so a size check after reading sees an input over the limit.
pub fn read_limited(path: &Path, limit: usize) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    let limit = limit as u64 + 1;
    if path.as_os_str() == "-" {
        std::io::stdin()
            .lock()
            .take(limit)
            .read_to_end(&mut bytes)?;
    } else {
        let f = std::fs::File::open(path)?;
        // Size the buffer once: read_to_end's doubling would hold up to 2x.
        let size = f.metadata().map(|m| m.len()).unwrap_or(0).min(limit);
        bytes.reserve_exact(usize::try_from(size).unwrap_or(0));
        f.take(limit).read_to_end(&mut bytes)?;
    }
    Ok(bytes)
}

/// A ruleset read from a file or live, with what to call it in messages and evidence.
pub struct Source {
    /// `dump.txt`, `network namespace X`, `this machine`.
    pub name: String,
    /// Format name for files; `live` for collected rulesets.
    pub format: &'static str,
    pub ruleset: plumb_ruleset::Ruleset,
    /// `None` for a file; the netns (or `Some(None)` for this machine) when read live.
    pub live: Option<Option<String>>,
    /// Dump commands that failed or were missing (live only), for the report.
    pub tools: Vec<plumb_collect::ToolOutcome>,
}

/// Reads `--ruleset FILE`, or the live rulesets of `--netns NAME` / this machine.
pub fn load_source(source: &SourceFlags, input: &InputFlags) -> anyhow::Result<Source> {
    if let Some(path) = &source.ruleset {
        let loaded = load(path, input)?;
        return Ok(Source {
            name: loaded.name,
            format: loaded.parsed.format.name(),
            ruleset: loaded.parsed.ruleset,
            live: None,
            tools: Vec::new(),
        });
    }
    let netns = source.netns.clone();
    let collected = plumb_collect::collect_rulesets(&plumb_collect::SystemRunner, netns.as_deref());
    if collected.tools.iter().all(|t| t.status != "ok") {
        let why: Vec<String> = collected
            .tools
            .iter()
            .map(|t| format!("{}: {} {}", t.tool, t.status, t.detail))
            .collect();
        bail!(
            "could not read any ruleset ({}); run as root or pass --ruleset FILE",
            why.join("; ")
        );
    }
    Ok(Source {
        name: match &netns {
            Some(n) => format!("network namespace {n}"),
            None => "this machine".into(),
        },
        format: "live",
        ruleset: collected.ruleset,
        live: Some(netns),
        tools: collected.tools,
    })
}
