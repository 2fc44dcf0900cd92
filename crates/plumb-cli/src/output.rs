//! Writing to stdout: JSON, and detecting a closed pipe (`plumb ... | head` is not an error).

use std::io::Write;

pub fn json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    // Stdout is line-buffered: without a buffer, pretty JSON costs a write(2) per line
    // (a million for `plumb services --json` on 10k services).
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout().lock());
    serde_json::to_writer_pretty(&mut out, value)?;
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
