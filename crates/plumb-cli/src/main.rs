//! `plumb`: the command-line entry point. Parses flags (flags.rs, no IO), runs the
//! chosen command (cmd/), and maps the outcome to the exit-code contract:
//! 0 clean, 1 the input or node has problems, 2 usage or IO error.

#![deny(missing_docs)]

mod alloc;
mod catalogue;
mod cmd;
mod flags;
mod output;

use clap::Parser;
use std::process::ExitCode;

/// Outcome of a command that ran: did it find problems?
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing wrong found: exit code 0.
    Clean,
    /// The input or node has problems (doctor: a root cause): exit code 1.
    Problems,
}

#[global_allocator]
static ALLOCATOR: alloc::Switching = alloc::Switching;

fn main() -> ExitCode {
    // `plumb watch` loads its eBPF probe in a helper process: this executable again.
    if let Some(code) = plumb_watch::probe_handoff::serve_if_asked() {
        return ExitCode::from(code.clamp(0, 255) as u8);
    }
    // Lab actors are this executable under another name (kube-proxy, venAgent, ...).
    if let Some(code) = plumb_lab::actors::dispatch_by_name() {
        return ExitCode::from(code.clamp(0, 255) as u8);
    }
    let cli = flags::Cli::parse();
    // One-shot commands run faster on mimalloc; the long-running ones stay on glibc,
    // which keeps less resident (alloc.rs).
    if !matches!(
        cli.command,
        flags::Command::Watch(_) | flags::Command::Lab(_)
    ) {
        alloc::use_mimalloc();
    }
    match cmd::run(cli) {
        Ok(Verdict::Clean) => ExitCode::from(0),
        Ok(Verdict::Problems) => ExitCode::from(1),
        Err(e) => {
            if output::is_broken_pipe(&e) {
                return ExitCode::from(0);
            }
            eprintln!("plumb: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
