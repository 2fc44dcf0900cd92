//! Command implementations: each takes parsed flags, does its IO at the edge, and
//! returns a `Verdict` for the exit code.

mod input;
mod ruleset;
mod watch;

use crate::Verdict;
use crate::flags::{Cli, Command};

pub fn run(cli: Cli) -> anyhow::Result<Verdict> {
    match cli.command {
        Command::Ruleset(c) => ruleset::run(c),
        Command::Watch(f) => watch::run(f),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            let mut cmd = Cli::command();
            clap_complete::generate(shell, &mut cmd, "plumb", &mut std::io::stdout());
            Ok(Verdict::Clean)
        }
    }
}
