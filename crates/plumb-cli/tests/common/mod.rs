//! `plumb watch` as a child process of the integration tests (`watch_cli.rs`,
//! `watch_lab.rs`): killed on drop, its JSON lines collected as they come, its metrics
//! address read from its first stderr line, every wait bounded by [`T`].

// Each test crate that includes this module uses only part of it.
#![allow(dead_code)]

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{ChildStderr, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Bound of every wait.
pub const T: Duration = Duration::from_secs(60);

/// Polling interval of the waits.
const POLL: Duration = Duration::from_millis(20);

/// A child process killed and reaped on drop (a failing assertion must not leave it
/// running).
pub struct Child(pub std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The body of `GET path` from `addr`.
pub fn http_get(addr: &str, path: &str) -> std::io::Result<String> {
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default())
}

/// A running `plumb watch ARGS --metrics-addr 127.0.0.1:0`, ready (subscribed, baseline
/// read: `/readyz`).
pub struct Watch {
    pub child: Child,
    /// host:port of its metrics server.
    pub addr: String,
    /// The rest of its stderr (the summary comes last).
    pub stderr: BufReader<ChildStderr>,
    lines: Arc<Mutex<Vec<String>>>,
    out_thread: Option<JoinHandle<()>>,
}

impl Watch {
    pub fn start(args: &[&str]) -> Watch {
        let mut child = Child(
            Command::new(env!("CARGO_BIN_EXE_plumb"))
                .arg("watch")
                .args(args)
                .args(["--metrics-addr", "127.0.0.1:0"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn plumb"),
        );
        let stdout = child.0.stdout.take().unwrap();
        let lines: Arc<Mutex<Vec<String>>> = Arc::default();
        let l2 = lines.clone();
        let out_thread = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                l2.lock().unwrap().push(line);
            }
        });
        // The metrics address is the first stderr line.
        let mut stderr = BufReader::new(child.0.stderr.take().unwrap());
        let mut first = String::new();
        stderr.read_line(&mut first).unwrap();
        let addr = first
            .split("http://")
            .nth(1)
            .and_then(|s| s.split('/').next())
            .unwrap_or_else(|| panic!("no metrics address in {first:?}"))
            .to_string();
        let deadline = Instant::now() + T;
        while http_get(&addr, "/readyz").ok().as_deref() != Some("ready\n") {
            assert!(Instant::now() < deadline, "plumb watch not ready");
            std::thread::park_timeout(POLL);
        }
        Watch {
            child,
            addr,
            stderr,
            lines,
            out_thread: Some(out_thread),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.0.id()
    }

    /// The first JSON line (event) `pred` accepts, waiting for it up to [`T`].
    pub fn wait_event(&self, pred: &dyn Fn(&Value) -> bool, what: &str) -> Value {
        let deadline = Instant::now() + T;
        loop {
            if let Some(v) = self
                .lines
                .lock()
                .unwrap()
                .iter()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find(|v| pred(v))
            {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "no {what} within {T:?}: {:#?}",
                self.lines.lock().unwrap()
            );
            std::thread::park_timeout(POLL);
        }
    }

    /// Waits up to [`T`] for watch to exit (`what` names why it should), then for its
    /// stdout to be read to the end; returns its status and the rest of its stderr.
    pub fn wait_exit(&mut self, what: &str) -> (ExitStatus, String) {
        let deadline = Instant::now() + T;
        let status = loop {
            if let Some(s) = self.child.0.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < deadline, "{what}");
            std::thread::park_timeout(POLL);
        };
        if let Some(t) = self.out_thread.take() {
            t.join().unwrap();
        }
        let mut rest = String::new();
        self.stderr.read_to_string(&mut rest).unwrap();
        (status, rest)
    }
}
