//! Writing to stdout: JSON, the text style (`--color`), and detecting a closed pipe
//! (`plumb ... | head` is not an error).

use crate::flags::ColorChoice;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// The style of human output for `--color WHEN`: `auto` colours a terminal unless
/// NO_COLOR is set to a non-empty value (no-color.org).
pub fn style(choice: ColorChoice) -> plumb_findings::Style {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    plumb_findings::Style {
        color: match choice {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => !no_color && std::io::stdout().is_terminal(),
        },
    }
}

/// Set once, before the command runs, for `-o json-compact` (cmd::run): every
/// command's JSON document then goes out on one line. One switch here rather than a
/// parameter through every command, so each command's JSON has one code path.
static COMPACT: AtomicBool = AtomicBool::new(false);

/// Makes [`json`] print compact JSON (`-o json-compact`).
pub fn set_compact(compact: bool) {
    COMPACT.store(compact, Ordering::Relaxed);
}

/// Whether `-o json-compact` was asked for.
pub fn compact() -> bool {
    COMPACT.load(Ordering::Relaxed)
}

/// Prints `value` as one JSON document: indented, or on one line for
/// `-o json-compact`.
pub fn json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    // Stdout is line-buffered: without a buffer, pretty JSON costs a write(2) per line
    // (a million for `plumb services --json` on 10k services).
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout().lock());
    if compact() {
        serde_json::to_writer(&mut out, value)?;
    } else {
        serde_json::to_writer_pretty(&mut out, value)?;
    }
    writeln!(out)?;
    out.flush()?;
    Ok(())
}

pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || c.downcast_ref::<serde_json::Error>()
                .and_then(|j| j.io_error_kind())
                .is_some_and(|k| k == std::io::ErrorKind::BrokenPipe)
    })
}
