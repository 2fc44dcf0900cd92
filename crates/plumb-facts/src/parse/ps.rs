//! Process lists: `ps -eo pid,comm,args`, `ps aux`, `ps auxfww` (forest prefixes) and
//! `ps auxwwwm` (thread lines). Columns are found from the header, so any of these
//! layouts reads the same; the command is everything from the COMMAND/CMD/ARGS column on.

use serde::Serialize;

/// One running process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Process {
    /// Process id (in the reading's PID namespace).
    pub pid: u32,
    /// The kernel's process name (`comm`: at most 15 bytes, `kube-proxy`, `venAgent`).
    pub comm: String,
    /// Resolved `/proc/PID/exe` on a live node; `None` from `ps` output or a bundle.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exe: Option<String>,
    /// Command line as printed (`ps` args or /proc/PID/cmdline with spaces).
    pub args: String,
}

/// Reads a `ps` listing into processes; empty when no header line is found. Thread
/// lines (PID `-`) and lines without a command are skipped.
pub fn parse(text: &str) -> Vec<Process> {
    let mut lines = text.lines().enumerate();
    let Some((pid_col, cmd_col, comm_col)) = lines.by_ref().find_map(|(_, l)| header(l)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (_, l) in lines {
        let words: Vec<&str> = l.split_whitespace().collect();
        let Some(pid) = words.get(pid_col).and_then(|p| p.parse::<u32>().ok()) else {
            continue; // thread lines of `ps m` have "-" as PID
        };
        let Some(start) = nth_word_offset(l, cmd_col) else {
            continue;
        };
        let args = l[start..]
            .trim_start_matches(['\\', '_', '|', ' '])
            .trim_end()
            .to_string();
        let comm = match comm_col {
            Some(c) if c < cmd_col => words.get(c).map(|s| s.to_string()).unwrap_or_default(),
            _ => comm_of(&args),
        };
        out.push(Process {
            pid,
            comm,
            exe: None,
            args,
        });
    }
    out
}

/// Column indexes of PID, the command line, and COMM when listed separately.
fn header(line: &str) -> Option<(usize, usize, Option<usize>)> {
    let cols: Vec<&str> = line.split_whitespace().collect();
    let pid = cols.iter().position(|c| *c == "PID")?;
    let cmd = cols
        .iter()
        .position(|c| matches!(*c, "COMMAND" | "CMD" | "ARGS"))
        .or_else(|| cols.iter().position(|c| *c == "COMM"))?;
    let comm = cols.iter().position(|c| *c == "COMM");
    // `ps -eo pid,comm,args` prints COMMAND twice: the first is comm, the last args.
    let last_cmd = cols
        .iter()
        .rposition(|c| matches!(*c, "COMMAND" | "CMD" | "ARGS"))?;
    if last_cmd != cmd {
        return Some((pid, last_cmd, Some(cmd)));
    }
    Some((pid, cmd, comm))
}

/// Byte offset of the n-th whitespace-separated word of `line`.
fn nth_word_offset(line: &str, n: usize) -> Option<usize> {
    let mut count = 0;
    let mut in_word = false;
    for (i, c) in line.char_indices() {
        if c.is_whitespace() {
            in_word = false;
        } else if !in_word {
            if count == n {
                return Some(i);
            }
            count += 1;
            in_word = true;
        }
    }
    None
}

/// The kernel's comm for a command line: the executable's file name, cut at 15 bytes;
/// `[kthreadd]` style names lose their brackets.
fn comm_of(args: &str) -> String {
    let first = args.split_whitespace().next().unwrap_or("");
    let first = first.trim_start_matches('[').trim_end_matches(']');
    let name = first.rsplit('/').next().unwrap_or(first);
    let mut end = name.len().min(15);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ps_aux_forest_and_threads() {
        let p = parse(
            "USER         PID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND\n\
             root           1  0.0  0.1 167000 11000 ?        Ss   Nov29   0:03 /sbin/init\n\
             root        4211  1.0  0.5  90000 20000 ?        Sl   10:00   0:10  \\_ /opt/illumio_ven/bin/venAgent --daemon\n\
             root           -  0.0    -      -     - -        Ssl  10:00   0:00 -\n",
        );
        assert_eq!(p.len(), 2);
        assert_eq!(p[1].pid, 4211);
        assert_eq!(p[1].comm, "venAgent");
        assert_eq!(p[1].args, "/opt/illumio_ven/bin/venAgent --daemon");
    }

    #[test]
    fn ps_eo_pid_comm_args() {
        let p = parse(
            "    PID COMMAND         COMMAND\n   2101 kube-proxy      /usr/local/bin/kube-proxy --v=2\n",
        );
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].comm, "kube-proxy");
        assert_eq!(p[0].args, "/usr/local/bin/kube-proxy --v=2");
        assert!(parse("no header here\n1 2 3\n").is_empty());
    }
}
