//! The lab's error type: what was attempted, what failed, and what the user can do.

use std::io;
use std::path::PathBuf;

/// Everything that can stop the lab.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// Not root.
    #[error(
        "plumb lab needs root (it creates network namespaces and runs iptables in them); run it with sudo"
    )]
    NotRoot,
    /// Required tools are missing.
    #[error("plumb lab needs these tools, which are not installed: {}; on Debian: apt-get install iptables iproute2 ufw util-linux", .0.join(", "))]
    MissingTools(Vec<String>),
    /// A lab already runs.
    #[error("a lab is already running (scenario {scenario}, root {}); run `plumb lab down` first", root.display())]
    AlreadyRunning {
        /// Its scenario.
        scenario: String,
        /// Its root.
        root: PathBuf,
    },
    /// No lab runs.
    #[error("no lab is running; start one with `plumb lab up SCENARIO`")]
    NotRunning,
    /// A command failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// Exit status.
        status: String,
        /// Its stderr.
        stderr: String,
    },
    /// An IO error with context.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The lab did not reach a state in time.
    #[error("timed out after {seconds:.1} s waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long.
        seconds: f64,
    },
    /// No actor executable could be found.
    #[error(
        "cannot find the actor executable (the plumb binary); set PLUMB_LAB_ACTOR_EXE to its path"
    )]
    NoActorExe,
    /// Something else.
    #[error("{0}")]
    Other(String),
}

impl LabError {
    /// An IO error with context.
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}
