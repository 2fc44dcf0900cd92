//! Reading the state watch starts from (and resynchronises to) with little memory.
//!
//! The iptables-nft tables are streamed from `iptables-nft-save` /
//! `ip6tables-nft-save` line by line into [`NftState`] (chain names, policies, rule
//! counts) instead of being parsed into the full model: a 10k-service node's 12 MB
//! dump would otherwise cost ~100 MB at every resync. Native nftables tables (names
//! from a netlink GETTABLE dump, [`crate::nft_events::list_tables`], because `nft list
//! tables` fetches the whole ruleset first: 24 s at 10k services; each read with `nft
//! list table`) are small and parsed with plumb-ruleset. Read-only: only dump requests
//! and dump commands run, each with a deadline.

use crate::state::{NftState, SaveScanner, family_code};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(60);

/// What reading the baseline went through.
#[derive(Debug, Default)]
pub struct Baseline {
    pub state: NftState,
    /// Tools that failed or are missing, with why.
    pub problems: Vec<String>,
}

/// Runs `program args` (in `netns`), feeding each stdout line to `each`; killed at
/// the deadline. Returns whether it succeeded.
fn stream(
    program: &str,
    args: &[&str],
    netns: Option<&str>,
    each: &mut dyn FnMut(String),
) -> Result<(), String> {
    let exe = plumb_collect::runner::which(program).ok_or(format!("{program}: not installed"))?;
    let mut cmd = match netns {
        Some(ns) => {
            let mut c =
                Command::new(plumb_collect::runner::which("ip").ok_or("ip: not installed")?);
            c.args(["netns", "exec", ns]).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    let mut child = cmd
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{program}: {e}"))?;
    let pid = child.id();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let killer = std::thread::spawn(move || {
        if done_rx.recv_timeout(TIMEOUT).is_err() {
            // SAFETY: kill(2) on the pid of our own child, which we have not reaped
            // yet (wait happens after this thread is joined), so it cannot be reused.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
            }
        }
    });
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines() {
            match line {
                Ok(l) => each(l),
                Err(_) => break,
            }
        }
    }
    let _ = done_tx.send(());
    let _ = killer.join();
    let status = child.wait().map_err(|e| format!("{program}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{program}: {status}"))
    }
}

/// Reads the nf_tables state of this machine or of `netns`.
pub fn read(netns: Option<&str>) -> Baseline {
    let mut b = Baseline::default();
    for (tool, family) in [
        ("iptables-nft-save", plumb_ruleset::Family::Ip),
        ("ip6tables-nft-save", plumb_ruleset::Family::Ip6),
    ] {
        let mut scanner = SaveScanner::new(family_code(family));
        let state = &mut b.state;
        let r = stream(tool, &[], netns, &mut |l| scanner.line(state, &l));
        if let Err(e) = r {
            b.problems.push(e);
        }
    }
    let tables = crate::nft_events::list_tables(netns).unwrap_or_else(|e| {
        b.problems.push(format!("listing nf_tables tables: {e}"));
        Vec::new()
    });
    for (code, name) in tables {
        if b.state.has_table(code, &name) {
            continue; // an iptables-nft table, read above
        }
        let fam = crate::nft_events::family_name(code);
        let mut text = String::new();
        match stream("nft", &["list", "table", fam, &name], netns, &mut |l| {
            text.push_str(&l);
            text.push('\n');
        }) {
            Ok(()) => b.state.add_ruleset(&plumb_ruleset::nft::parse_text(&text)),
            Err(e) => b.problems.push(e),
        }
    }
    b
}
