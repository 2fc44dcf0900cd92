//! Running external commands, optionally inside a named network namespace, with a
//! deadline. The one place plumb starts processes for reading state.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What a command printed and how it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandOutput {
    /// The exit code; None when a signal ended the process.
    pub status: Option<i32>,
    /// Everything it wrote to standard output, as bytes (dumps need not be UTF-8).
    pub stdout: Vec<u8>,
    /// Everything it wrote to standard error, lossily decoded.
    pub stderr: String,
}

impl CommandOutput {
    /// Whether it exited with code 0.
    pub fn success(&self) -> bool {
        self.status == Some(0)
    }
}

/// Why a command could not give output.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The program is not on PATH (nor in the sbin directories).
    #[error("{program}: not installed")]
    NotFound {
        /// The program's name as asked for.
        program: String,
    },
    /// The deadline passed; the process was killed.
    #[error("{program}: did not finish within {timeout:?}")]
    Timeout {
        /// The program's name as asked for.
        program: String,
        /// The deadline it was given.
        timeout: Duration,
    },
    /// Starting it, or reading its output, failed.
    #[error("{program}: {source}")]
    Io {
        /// The program's name as asked for.
        program: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}

/// Runs commands; tests may provide canned outputs instead.
pub trait Runner: Sync {
    /// Runs `program args...` (inside `netns` when given) and waits at most `timeout`.
    fn run(
        &self,
        program: &str,
        args: &[&str],
        netns: Option<&str>,
        timeout: Duration,
    ) -> Result<CommandOutput, RunError>;
}

impl<T: Runner + ?Sized> Runner for &T {
    fn run(
        &self,
        program: &str,
        args: &[&str],
        netns: Option<&str>,
        timeout: Duration,
    ) -> Result<CommandOutput, RunError> {
        (**self).run(program, args, netns, timeout)
    }
}

/// Runs real processes; a namespace is entered with `ip netns exec`.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemRunner;

/// Finds `program` on PATH (plus the sbin directories root's PATH usually has).
pub fn which(program: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(Into::into))
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

impl Runner for SystemRunner {
    fn run(
        &self,
        program: &str,
        args: &[&str],
        netns: Option<&str>,
        timeout: Duration,
    ) -> Result<CommandOutput, RunError> {
        run_with_input(program, args, netns, None, timeout)
    }
}

/// Runs `program args...` (inside `netns` when given), writes `stdin` to it, and waits
/// at most `timeout`, killing it then. Pipes are drained on threads so neither a large
/// dump nor a large input can block the child.
pub fn run_with_input(
    program: &str,
    args: &[&str],
    netns: Option<&str>,
    stdin: Option<&[u8]>,
    timeout: Duration,
) -> Result<CommandOutput, RunError> {
    let exe = which(program).ok_or_else(|| RunError::NotFound {
        program: program.into(),
    })?;
    let mut cmd = match netns {
        Some(ns) => {
            let ip = which("ip").ok_or_else(|| RunError::NotFound {
                program: "ip".into(),
            })?;
            let mut c = Command::new(ip);
            c.args(["netns", "exec", ns]).arg(&exe);
            c
        }
        None => Command::new(&exe),
    };
    cmd.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let io = |source| RunError::Io {
        program: program.into(),
        source,
    };
    let mut child = cmd.spawn().map_err(io)?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        let input = input.to_vec();
        // Dropping the pipe at the end of the thread closes the child's stdin.
        std::thread::spawn(move || {
            use std::io::Write;
            let _ = pipe.write_all(&input);
        });
    }
    // Drain pipes on threads so a large dump cannot block the child.
    let mut out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    let out_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = out.read_to_end(&mut b);
        b
    });
    let err_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = err.read_to_end(&mut b);
        b
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(s) = child.try_wait().map_err(io)? {
            break s;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(RunError::Timeout {
                program: program.into(),
                timeout,
            });
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let stdout = out_t.join().unwrap_or_default();
    let stderr = String::from_utf8_lossy(&err_t.join().unwrap_or_default()).into_owned();
    Ok(CommandOutput {
        status: status.code(),
        stdout,
        stderr,
    })
}
