//! Command implementations: each takes parsed flags, does its IO at the edge, and
//! returns a `Verdict` for the exit code.

mod check;
mod cilium;
mod collect;
mod doctor;
pub(crate) mod explain;
mod input;
mod lab;
mod observe;
mod pieces;
mod policy;
mod ruleset;
mod services;
mod trace;
mod trace_batch;
mod trace_services;
mod watch;

use crate::Verdict;
use crate::flags::{Cli, Command, LabCommand, OutputFlags, RulesetCommand};

/// The command's `--json` / `-o` flags, if it has them.
fn output_flags(command: &Command) -> Option<&OutputFlags> {
    match command {
        Command::Ruleset(
            RulesetCommand::Show { output, .. }
            | RulesetCommand::Parse { output, .. }
            | RulesetCommand::Diff { output, .. },
        )
        | Command::Services { output, .. }
        | Command::Check { output, .. }
        | Command::Doctor { output, .. }
        | Command::Lab(LabCommand::Status { output } | LabCommand::Down { output })
        | Command::Explain { output, .. } => Some(output),
        Command::Trace(args) => Some(&args.output),
        Command::Watch(f) => Some(&f.output),
        _ => None,
    }
}

pub fn run(cli: Cli) -> anyhow::Result<Verdict> {
    let style = crate::output::style(cli.color);
    crate::output::set_compact(output_flags(&cli.command).is_some_and(|o| o.compact()));
    match cli.command {
        Command::Ruleset(c) => ruleset::run(c),
        Command::Services {
            source,
            lab,
            input,
            output,
        } => services::run(&source, lab, &input, output.json()),
        Command::Check {
            source,
            input,
            partial,
            output,
        } => check::run(&source, &input, partial, output.json(), style),
        Command::Collect { output, node } => collect::run(&output, &node),
        Command::Doctor {
            node,
            lab,
            bundle,
            sysdump_node,
            timeline,
            verify,
            output,
        } => doctor::run(
            &node,
            lab,
            bundle.as_deref().map(|b| (b, sysdump_node.as_deref())),
            timeline,
            verify.as_deref(),
            output.json(),
            style,
        ),
        Command::Lab(c) => lab::run(c),
        Command::Cilium(c) => cilium::run(c, style),
        Command::Policy(c) => policy::run(c, style),
        Command::Trace(args) => trace::run(&args),
        Command::Watch(f) => watch::run(f),
        Command::Observe(f) => observe::run(&f),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            let mut cmd = Cli::command();
            // clap_complete panics when its writer fails; write to memory, then to
            // stdout with the error returned (a closed pipe is exit 0, as everywhere).
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cmd, "plumb", &mut script);
            std::io::Write::write_all(&mut std::io::stdout().lock(), &script)?;
            Ok(Verdict::Clean)
        }
        Command::Explain { id, output } => explain::run(id.as_deref(), output.json()),
        Command::Man => {
            use clap::CommandFactory;
            // Generated from the same definition as --help, so the two never disagree.
            // The page lists the subcommands; `plumb SUBCOMMAND --help` has their flags.
            let mut page = Vec::new();
            clap_mangen::Man::new(Cli::command()).render(&mut page)?;
            std::io::Write::write_all(&mut std::io::stdout().lock(), &page)?;
            Ok(Verdict::Clean)
        }
    }
}

/// Gives up `value` without running its destructor: for the big structures of a
/// command (a 100k-rule model, 10k recovered services) that live until the process
/// exits anyway. Freeing them one allocation at a time costs about a tenth of
/// `plumb services`' CPU time on a 10k-service dump; the OS reclaims the memory at
/// exit all at once. Only for values a command holds until it returns to `main`.
pub(crate) fn leak_at_exit<T>(value: T) {
    std::mem::forget(value);
}
