//! Reading a ruleset file or stdin with the user's format hints.

use crate::flags::{InputFlags, SourceFlags};
use anyhow::{Context, bail};
use plumb_collect::privilege::NEEDS_ROOT;
use plumb_ruleset::Family;
use plumb_ruleset::format::{Format, ParseOptions, Parsed, table_from_file_name};
use plumb_ruleset::format::{parse_bytes, parse_owned};
use std::io::Read;
use std::path::Path;

/// A parsed file and the name to show for it in messages.
pub struct Loaded {
    pub name: String,
    pub parsed: Parsed,
    /// `did you mean --format X?` when the input has errors and another format reads it
    /// cleanly.
    pub hint: Option<String>,
}

pub fn load(path: &Path, flags: &InputFlags) -> anyhow::Result<Loaded> {
    let stdin = path.as_os_str() == "-";
    let name = if stdin {
        "<stdin>".to_string()
    } else {
        path.display().to_string()
    };
    let limit = flags.max_input_size;
    let bytes = read_limited(path, limit).with_context(|| format!("reading {name}"))?;
    if bytes.len() > limit {
        bail!(
            "reading {name}: input is more than {limit} bytes (raise the limit with --max-input-size)"
        );
    }
    let options = parse_options(path, flags)?;
    let parsed = parse_owned(bytes, &options).with_context(|| format!("reading {name}"))?;
    finish_load(name, parsed, path, &options, stdin)
}

/// How to read `path`: the user's `--format`, `--family` and `--table`, else what the
/// file's name says.
pub fn parse_options(path: &Path, flags: &InputFlags) -> anyhow::Result<ParseOptions> {
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
    Ok(ParseOptions {
        format,
        family,
        table,
        backend: None,
        max_size: flags.max_input_size,
    })
}

/// `parsed`, read from `path` as `name`, with a better format to suggest when it has
/// errors; an error when it could not be read as a ruleset at all.
pub fn finish_load(
    name: String,
    parsed: Parsed,
    path: &Path,
    options: &ParseOptions,
    stdin: bool,
) -> anyhow::Result<Loaded> {
    let hint = if parsed.ruleset.error_count() > 0 && !stdin {
        // Only on the error path: the file is read again to try the other formats.
        better_format(path, options, &parsed)
    } else {
        None
    };
    let loaded = Loaded { name, parsed, hint };
    if loaded.parsed.ruleset.is_unreadable() {
        bail!("{}", unreadable_message(&loaded));
    }
    Ok(loaded)
}

/// How many parse errors the reports show before summarising the rest.
pub const ERRORS_SHOWN: usize = 5;

/// `did you mean --format X?` when another format reads the file with no errors and
/// finds chains in it (only called on the error path: it reads the file again).
fn better_format(path: &Path, options: &ParseOptions, parsed: &Parsed) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    Format::ALL
        .iter()
        .map(|(_, f)| *f)
        .filter(|f| *f != parsed.format)
        .find(|f| {
            let options = ParseOptions {
                format: Some(*f),
                ..options.clone()
            };
            parse_bytes(&bytes, &options)
                .is_ok_and(|p| p.ruleset.error_count() == 0 && p.ruleset.chain_count() > 0)
        })
        .map(|f| format!("did you mean --format {}?", f.name()))
}

/// The error for input that could not be read as a ruleset at all.
fn unreadable_message(loaded: &Loaded) -> String {
    let rs = &loaded.parsed.ruleset;
    let mut msg = format!(
        "{}: could not be read as {} ({} error(s), {} chain(s) read)",
        loaded.name,
        loaded.parsed.format.name(),
        rs.error_count(),
        rs.chain_count()
    );
    for line in error_lines(&loaded.name, rs) {
        msg.push_str("\n  ");
        msg.push_str(&line);
    }
    if let Some(hint) = &loaded.hint {
        msg.push('\n');
        msg.push_str(hint);
    }
    msg
}

/// The first [`ERRORS_SHOWN`] error diagnostics as `name:line:col: message: text`,
/// and a line counting the rest.
pub fn error_lines(name: &str, ruleset: &plumb_ruleset::Ruleset) -> Vec<String> {
    let mut lines: Vec<String> = ruleset
        .errors()
        .take(ERRORS_SHOWN)
        .map(|d| format!("{name}:{d}"))
        .collect();
    let errors = ruleset.error_count();
    if errors > ERRORS_SHOWN {
        lines.push(format!("... and {} more", errors - ERRORS_SHOWN));
    }
    lines
}

/// Writes, for a ruleset with parse errors, what could not be read (first few errors
/// and the hint), so that no report judges a damaged input silently. Nothing when the
/// input was read whole.
pub fn write_read_problems(
    out: &mut impl std::io::Write,
    name: &str,
    ruleset: &plumb_ruleset::Ruleset,
    hint: Option<&str>,
) -> std::io::Result<()> {
    let errors = ruleset.error_count();
    if errors == 0 {
        return Ok(());
    }
    writeln!(
        out,
        "warning: {errors} part(s) of {name} could not be read; rules may be missing, so nothing is reported missing:"
    )?;
    for line in error_lines(name, ruleset) {
        writeln!(out, "  {line}")?;
    }
    if let Some(hint) = hint {
        writeln!(out, "  {hint}")?;
    }
    writeln!(out)
}

/// Writes one warning line per read of a live node that did not work (a table the node
/// has that is not in the model: `nft list table` timed out, a save tool failed);
/// `skipped` reads had nothing to read. Nothing for a file.
pub fn write_failed_reads(
    out: &mut impl std::io::Write,
    tools: &[plumb_collect::ToolOutcome],
) -> std::io::Result<()> {
    for t in tools
        .iter()
        .filter(|t| t.status != "ok" && t.status != "skipped")
    {
        writeln!(out, "warning: {} {}: {}", t.tool, t.status, t.detail)?;
    }
    Ok(())
}

/// Reads at most `limit + 1` bytes (one more than allowed, so that the caller can tell
/// "too large" from "exactly the limit"), so that a stream (stdin, /dev/zero) costs at
/// most the limit in memory.
///
/// A stream's size is unknown, and growing a buffer by doubling keeps the old copies
/// resident under mimalloc (2.5x the limit was measured). So the whole allowance is
/// reserved up front (up to 1 GiB): untouched pages of a large allocation are virtual
/// memory, never resident. If the reservation is refused (overcommit off), the buffer
/// grows by doubling instead, still never past the limit.
fn read_capped(reader: impl Read, size_hint: u64, limit: usize) -> std::io::Result<Vec<u8>> {
    let cap = limit.saturating_add(1);
    let mut reader = reader.take(cap as u64);
    let want = match usize::try_from(size_hint) {
        Ok(0) => cap.min(1 << 30),
        Ok(size) => size.min(cap),
        Err(_) => cap,
    };
    let mut bytes = Vec::new();
    let _ = bytes.try_reserve_exact(want);
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(0) => return Ok(bytes),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if bytes.len() + n > bytes.capacity() {
            // `take` keeps len + n <= cap, so this reserves at least n.
            let grow = bytes.len().max(n).min(cap - bytes.len());
            bytes.reserve_exact(grow);
        }
        bytes.extend_from_slice(&chunk[..n]);
    }
}

/// Reads `path` (`-`: standard input), at most `limit + 1` bytes: one more than
/// allowed, so a size check after reading sees an input over the limit.
pub fn read_limited(path: &Path, limit: usize) -> std::io::Result<Vec<u8>> {
    if path.as_os_str() == "-" {
        read_capped(std::io::stdin().lock(), 0, limit)
    } else {
        let f = std::fs::File::open(path)?;
        // A regular file's size sizes the buffer once; a character device or a pipe
        // says 0 and gets the stream treatment.
        let size = f.metadata().map(|m| m.len()).unwrap_or(0);
        read_capped(f, size, limit)
    }
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
    /// A better `--format`, when the file has errors and another format reads it.
    pub hint: Option<String>,
}

/// Reads `--ruleset FILE`, or the live rulesets of `--netns NAME` / this machine.
pub fn load_source(source: &SourceFlags, input: &InputFlags) -> anyhow::Result<Source> {
    load_source_with(source, input, load)
}

/// [`load_source`], a file read with `load_file` (whole: [`load`]; in pieces:
/// [`super::pieces::load_in_pieces`]).
pub fn load_source_with(
    source: &SourceFlags,
    input: &InputFlags,
    load_file: fn(&Path, &InputFlags) -> anyhow::Result<Loaded>,
) -> anyhow::Result<Source> {
    if let Some(path) = source.ruleset_file() {
        let loaded = load_file(path, input)?;
        return Ok(Source {
            name: loaded.name,
            format: loaded.parsed.format.name(),
            ruleset: loaded.parsed.ruleset,
            live: None,
            tools: Vec::new(),
            hint: loaded.hint,
        });
    }
    let netns = source.netns.clone();
    let collected = live_rulesets(netns.as_deref())?;
    Ok(Source {
        name: match &netns {
            Some(n) => format!("network namespace {n}"),
            None => "this machine".into(),
        },
        format: "live",
        ruleset: collected.ruleset,
        live: Some(netns),
        tools: collected.tools,
        hint: None,
    })
}

/// Fails with [`NEEDS_ROOT`] when this process lacks CAP_NET_ADMIN: every command
/// that reads the live node refuses then rather than report what it could not see as
/// absent. `alternative` says what the user can do instead (e.g. `or pass --ruleset FILE`).
pub fn require_net_admin(alternative: &str) -> anyhow::Result<()> {
    if plumb_collect::privilege::has_net_admin() == Some(false) {
        bail!("{NEEDS_ROOT} (run it with sudo, {alternative})");
    }
    Ok(())
}

/// The live rulesets of this machine or of network namespace `netns`. Fails with
/// [`NEEDS_ROOT`] when this process cannot read netfilter, and when no dump tool
/// worked at all, rather than report an empty firewall.
pub fn live_rulesets(netns: Option<&str>) -> anyhow::Result<plumb_collect::Collected> {
    require_net_admin("or pass --ruleset FILE")?;
    let collected = plumb_collect::collect_live_rulesets(&plumb_os::runner::SystemRunner, netns);
    if collected.tools.iter().all(|t| t.status != "ok") {
        if let Some(os_error) = plumb_collect::privilege::permission_error(&collected.tools) {
            bail!("{NEEDS_ROOT}: {os_error}");
        }
        let why: Vec<String> = collected
            .tools
            .iter()
            .map(|t| format!("{}: {} {}", t.tool, t.status, t.detail))
            .collect();
        bail!(
            "could not read any ruleset ({}); pass --ruleset FILE",
            why.join("; ")
        );
    }
    Ok(collected)
}
