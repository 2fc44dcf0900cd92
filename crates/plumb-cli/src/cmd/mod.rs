//! Command implementations: each takes parsed flags, does its IO at the edge, and
//! returns a `Verdict` for the exit code.

mod check;
mod collect;
mod doctor;
mod input;
mod lab;
mod ruleset;
mod services;
mod trace;
mod watch;

use crate::Verdict;
use crate::flags::{Cli, Command};

pub fn run(cli: Cli) -> anyhow::Result<Verdict> {
    match cli.command {
        Command::Ruleset(c) => ruleset::run(c),
        Command::Services {
            source,
            input,
            json,
        } => services::run(&source, &input, json),
        Command::Check {
            source,
            input,
            partial,
            json,
        } => check::run(&source, &input, partial, json),
        Command::Collect { output, node } => collect::run(&output, &node),
        Command::Doctor {
            node,
            lab,
            bundle,
            json,
        } => doctor::run(&node, lab, bundle.as_deref(), json),
        Command::Lab(c) => lab::run(c),
        Command::Trace(args) => trace::run(&args),
        Command::Watch(f) => watch::run(f),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            let mut cmd = Cli::command();
            clap_complete::generate(shell, &mut cmd, "plumb", &mut std::io::stdout());
            Ok(Verdict::Clean)
        }
    }
}
