//! Log line formats the lab's actors write, so that plumb's log readers meet real shapes:
//! klog structured lines (kube-proxy, kubelet), CRI container log lines (what the
//! container runtime writes under `/var/log/pods`), and the security agent's lines.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

use crate::clock::Utc;

/// A value in a klog structured line.
#[derive(Debug, Clone)]
pub enum KlogValue {
    /// Printed quoted (`key="value"`), or as a `<`…`>` block when it has newlines.
    Str(String),
    /// Printed as is (`key=5`, `key=true`, `key=["a"]`).
    Raw(String),
}

/// `I1130 08:03:01.123456    4242 proxier.go:1552] "msg" key="value"` (klog text format,
/// `k8s.io/klog/v2` `InfoS`/`ErrorS`). Multi-line string values are printed the way klog
/// prints them: `key=<` newline, each line indented by a tab, then ` >`.
pub fn klog(severity: char, file_line: &str, msg: &str, kvs: &[(&str, KlogValue)]) -> String {
    let mut out = format!(
        "{severity}{} {:>7} {file_line}] {}",
        Utc::now().klog(),
        std::process::id(),
        quote(msg)
    );
    for (k, v) in kvs {
        out.push(' ');
        out.push_str(k);
        out.push('=');
        match v {
            KlogValue::Raw(r) => out.push_str(r),
            KlogValue::Str(s) if s.contains('\n') => {
                out.push_str("<\n");
                for line in s.trim_end_matches('\n').lines() {
                    out.push('\t');
                    out.push_str(line);
                    out.push('\n');
                }
                out.push_str(" >");
            }
            KlogValue::Str(s) => out.push_str(&quote(s)),
        }
    }
    out
}

/// Shorthand for a quoted string value.
pub fn s(v: impl Into<String>) -> KlogValue {
    KlogValue::Str(v.into())
}

/// Shorthand for an unquoted value.
pub fn raw(v: impl ToString) -> KlogValue {
    KlogValue::Raw(v.to_string())
}

/// Go `%q`-style quoting (enough for log text: backslash, quote, control characters).
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Which stream a container line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// stdout
    Stdout,
    /// stderr
    Stderr,
}

/// `2026-11-30T08:03:01.123456789Z stderr F <line>`: one full line of a CRI log
/// (kubernetes `pkg/kubelet/kuberuntime/logs`; `P` marks partial lines, never written here).
pub fn cri_line(stream: Stream, line: &str) -> String {
    let s = match stream {
        Stream::Stdout => "stdout",
        Stream::Stderr => "stderr",
    };
    format!("{} {s} F {line}", Utc::now().rfc3339_nanos())
}

/// An append-only log file, one line per write.
pub struct LogFile {
    file: File,
}

impl LogFile {
    /// Opens (creating parents) `path` for appending.
    pub fn open(path: &Path) -> io::Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self { file })
    }

    /// Appends `line` and a newline in one write.
    pub fn line(&mut self, line: &str) -> io::Result<()> {
        let mut buf = String::with_capacity(line.len() + 1);
        buf.push_str(line);
        buf.push('\n');
        self.file.write_all(buf.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn klog_multiline_values_use_klog_blocks() {
        let line = klog(
            'E',
            "proxier.go:1552",
            "Failed to execute iptables-restore",
            &[("err", s("exit status 2: a\nb\n")), ("n", raw(3))],
        );
        assert!(line.starts_with('E'));
        assert!(line.contains(" proxier.go:1552] \"Failed to execute iptables-restore\" err=<\n\texit status 2: a\n\tb\n > n=3"));
    }

    #[test]
    fn cri_lines_have_timestamp_stream_and_tag() {
        let l = cri_line(Stream::Stderr, "hello");
        let parts: Vec<_> = l.splitn(4, ' ').collect();
        assert!(parts[0].ends_with('Z'));
        assert_eq!(&parts[1..], ["stderr", "F", "hello"]);
    }
}
