//! Running the node's iptables tools the way the actors' originals do: `iptables-restore`
//! fed on stdin (kube-proxy passes `-w 5 -W 100000 --noflush --counters`), `iptables-save`,
//! and single `iptables` commands from an argument line.

use std::io::Write;
use std::process::{Command, Stdio};

/// Which iptables variant (`iptables` = the system's alternative, nft on Debian 12).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tools {
    /// `iptables` or `iptables-legacy` / `iptables-nft`.
    pub iptables: String,
    /// The kernel refuses this iptables' nf_tables requests with EINVAL (see
    /// [`Tools::with_nf_tables_refused`]).
    pub nf_tables_refused: bool,
}

/// What a command printed and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// Exit code (-1 when killed by a signal).
    pub code: i32,
    /// stdout + stderr, as Go's CombinedOutput would collect them (stdout first).
    pub combined: String,
    /// stdout alone.
    pub stdout: String,
}

impl Output {
    /// Exit status 0.
    pub fn ok(&self) -> bool {
        self.code == 0
    }
}

impl Tools {
    /// The tools for `iptables` (`iptables`, `iptables-legacy`, `iptables-nft`).
    pub fn new(iptables: &str) -> Self {
        Self {
            iptables: iptables.to_string(),
            nf_tables_refused: false,
        }
    }

    /// These tools as an iptables whose nf_tables requests the kernel refuses with EINVAL:
    /// the iptables-userspace-incompatible incident (an iptables-nft in the kube-proxy image
    /// that the node's kernel does not understand). Every child gets a seccomp filter that
    /// fails `sendto`/`sendmsg` with EINVAL, so the real iptables-nft prints its own
    /// `Could not fetch rule set generation id: Invalid argument` (its first netlink request
    /// is the generation id) and exits 4. Only these children are affected; nothing else in
    /// the namespace or on the host.
    pub fn with_nf_tables_refused(mut self) -> Self {
        self.nf_tables_refused = true;
        self
    }

    /// The restore program (`iptables-restore`, `iptables-legacy-restore`, ...).
    pub fn restore_program(&self) -> String {
        format!("{}-restore", self.iptables)
    }

    /// The save program.
    pub fn save_program(&self) -> String {
        format!("{}-save", self.iptables)
    }

    /// Runs the restore program with `args`, `input` on stdin.
    pub fn restore(&self, args: &[&str], input: &str) -> std::io::Result<Output> {
        run_with_input(&self.restore_program(), args, input, self.nf_tables_refused)
    }

    /// Whether the variant writes through nf_tables (`iptables-nft`, or a system
    /// `iptables` whose `--version` says `(nf_tables)`, as Debian 12's does).
    pub fn is_nft(&self) -> bool {
        match self.iptables.as_str() {
            "iptables-nft" => true,
            "iptables-legacy" => false,
            other => run_with_input(other, &["--version"], "", false)
                .map(|o| o.stdout.contains("nf_tables"))
                .unwrap_or(false),
        }
    }

    /// `iptables-save` (all tables).
    pub fn save(&self) -> std::io::Result<Output> {
        run_with_input(&self.save_program(), &[], "", self.nf_tables_refused)
    }

    /// `iptables-save ARGS` (e.g. `-t nat`).
    pub fn save_args(&self, args: &[&str]) -> std::io::Result<Output> {
        run_with_input(&self.save_program(), args, "", self.nf_tables_refused)
    }

    /// `iptables ARGS` with kube-proxy's wait flags.
    pub fn run(&self, args: &[String]) -> std::io::Result<Output> {
        let mut full: Vec<&str> = vec!["-w", "5", "-W", "100000"];
        full.extend(args.iter().map(String::as_str));
        run_with_input(&self.iptables, &full, "", self.nf_tables_refused)
    }
}

fn run_with_input(
    program: &str,
    args: &[&str],
    input: &str,
    nf_tables_refused: bool,
) -> std::io::Result<Output> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if nf_tables_refused {
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure only makes two prctl calls (async-signal-safe) on data that
        // lives in the child's copy of this stack frame.
        unsafe { cmd.pre_exec(refuse_netlink_sends) };
    }
    let mut child = cmd.spawn()?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    let input = input.to_string();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
    });
    let out = child.wait_with_output()?;
    let _ = writer.join();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut combined = stdout.clone();
    combined.push_str(&String::from_utf8_lossy(&out.stderr));
    Ok(Output {
        code: out.status.code().unwrap_or(-1),
        combined,
        stdout,
    })
}

/// Installs a seccomp filter in this (child) process: `sendto` and `sendmsg` fail with
/// EINVAL, everything else is allowed. For a process of another architecture than the
/// one built for, nothing is filtered.
fn refuse_netlink_sends() -> std::io::Result<()> {
    #[cfg(target_arch = "x86_64")]
    const ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
    #[cfg(target_arch = "aarch64")]
    const ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    const ARCH: u32 = 0;
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const ALLOW: u32 = 0x7fff_0000; // SECCOMP_RET_ALLOW
    const ERRNO: u32 = 0x0005_0000; // SECCOMP_RET_ERRNO
    let f = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let filter = [
        f(LD_W_ABS, 0, 0, 4), // seccomp_data.arch
        f(JEQ_K, 0, 3, ARCH), // another architecture: allow
        f(LD_W_ABS, 0, 0, 0), // seccomp_data.nr
        f(JEQ_K, 2, 0, libc::SYS_sendto as u32),
        f(JEQ_K, 1, 0, libc::SYS_sendmsg as u32),
        f(RET_K, 0, 0, ALLOW),
        f(RET_K, 0, 0, ERRNO | libc::EINVAL as u32),
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: plain prctl calls; `prog` outlives them.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
            || libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog,
            ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// What `EnsureChain` / `EnsureRule` failed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnsureError {
    /// `chain` or `rule`.
    pub what: &'static str,
    /// Table.
    pub table: &'static str,
    /// The iptables output.
    pub output: String,
}

/// kubernetes `pkg/util/iptables` `EnsureChain` for every chain and `EnsureRule` for every
/// rule of `tables`: `iptables -N` (an existing chain is fine), then `-C` and, when
/// missing, `-I` for rules in built-in chains (kubelet and kube-proxy prepend their hook
/// rules; inserted in reverse so the final order is the listed one) or `-A` otherwise.
pub fn ensure(
    tools: &Tools,
    tables: &[plumb_kubeproxy::TablePayload],
    mark_text: &str,
) -> Result<(), EnsureError> {
    const BUILTIN: [&str; 5] = ["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"];
    for t in tables {
        let fail = |what, output: String| EnsureError {
            what,
            table: t.table,
            output,
        };
        for c in &t.chains {
            let out = tools
                .run(&["-t".into(), t.table.into(), "-N".into(), c.clone()])
                .map_err(|e| fail("chain", e.to_string()))?;
            if !out.ok() && !out.combined.contains("exists") {
                return Err(fail("chain", out.combined));
            }
        }
        let lines: Vec<(bool, Vec<String>)> = t
            .rules
            .iter()
            .map(|r| {
                let mut line = String::new();
                r.write_kube(&mut line, mark_text);
                let mut args = vec!["-t".to_string(), t.table.to_string()];
                args.extend(split_args(&line));
                (BUILTIN.contains(&r.chain.as_str()), args)
            })
            .collect();
        let prepends = lines.iter().filter(|(b, _)| *b).rev();
        let appends = lines.iter().filter(|(b, _)| !*b);
        for (builtin, args) in prepends.chain(appends) {
            let mut args = args.clone();
            args[2] = "-C".into();
            if tools
                .run(&args)
                .map_err(|e| fail("rule", e.to_string()))?
                .ok()
            {
                continue;
            }
            args[2] = if *builtin { "-I".into() } else { "-A".into() };
            let out = tools.run(&args).map_err(|e| fail("rule", e.to_string()))?;
            if !out.ok() {
                return Err(fail("rule", out.combined));
            }
        }
    }
    Ok(())
}

/// Splits a rule line into arguments, honouring double quotes (comments with spaces).
pub fn split_args(line: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut cur = String::new();
    let mut in_quotes = false;
    let mut has = false;
    for c in line.chars() {
        match c {
            '"' => {
                in_quotes = !in_quotes;
                has = true;
            }
            c if c.is_whitespace() && !in_quotes => {
                if has {
                    args.push(std::mem::take(&mut cur));
                    has = false;
                }
            }
            c => {
                cur.push(c);
                has = true;
            }
        }
    }
    if has {
        args.push(cur);
    }
    args
}

/// Removes `[packets:bytes]` counters from chain lines and the `#` comment lines, so two
/// saves of the same ruleset compare equal however much traffic passed in between.
pub fn normalize_save(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        if line.starts_with(':')
            && let Some(i) = line.rfind(" [")
        {
            out.push_str(&line[..i]);
            out.push('\n');
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_quoted_comments() {
        assert_eq!(
            split_args(
                r#"-A INPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES"#
            ),
            [
                "-A",
                "INPUT",
                "-m",
                "comment",
                "--comment",
                "kubernetes service portals",
                "-j",
                "KUBE-SERVICES"
            ]
        );
        assert_eq!(split_args(r#"--comment """#), ["--comment", ""]);
    }

    #[test]
    fn normalizes_counters_and_comments() {
        let a = "# Generated by x\n*nat\n:PREROUTING ACCEPT [12:720]\n:KUBE-SVC-X - [0:0]\n-A X -j Y\nCOMMIT\n";
        assert_eq!(
            normalize_save(a),
            "*nat\n:PREROUTING ACCEPT\n:KUBE-SVC-X -\n-A X -j Y\nCOMMIT\n"
        );
    }
}
