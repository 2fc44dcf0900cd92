//! `calico-node`: Calico's Felix in eBPF mode with `BPFKubeProxyIptablesCleanupEnabled`
//! (its default in eBPF mode), running while kube-proxy still runs — the
//! cni-kube-proxy-conflict incident (calico-bpf-cleanup scenario).
//!
//! Modelled on Felix's iptables layer (`felix/iptables/table.go`, `felix/rules`,
//! `felix/dataplane/linux/int_dataplane.go`):
//! - at start it logs `BPF enabled, configuring iptables layer to clean up kube-proxy's
//!   rules.`, which adds kube-proxy's chain prefixes (`KubeProxyChainPrefixes`:
//!   KUBE-FORWARD, KUBE-SERVICES, KUBE-EXTERNAL-SERVICES, KUBE-NODEPORTS, KUBE-SVC-,
//!   KUBE-SEP-, KUBE-FW-, KUBE-XLB-) to the chains it considers its own historic ones, and
//!   kube-proxy's hook rules (`KubeProxyInsertRuleRegex`: jumps to `KUBE-…SERVICES` or
//!   `KUBE-FORWARD`) to the inserts it removes; the utility chains (KUBE-MARK-MASQ,
//!   KUBE-POSTROUTING, KUBE-FIREWALL, the canaries) stay;
//! - every `--refresh-interval` (IptablesRefreshInterval, scaled from 90 s) it reads each
//!   table with `iptables-save -t TABLE`, logs `Found unexpected chain, marking for
//!   cleanup` / `Found unexpected insert, marking for cleanup` with logrus fields, and
//!   writes one `iptables-restore --noflush --verbose --wait 10` per table: the inserts
//!   deleted by full rule (`-D CHAIN <rule>`), the chains flushed (`:CHAIN - [0:0]`) then
//!   deleted (`--delete-chain`), the deletions in a transaction of their own on nft;
//! - a failed restore is logged (`Failed to execute ip(6)tables-restore command`) and
//!   retried 10 times after re-reading the table (back-off from 1 ms, doubling); then
//!   Felix panics (`Failed to program iptables, giving up after retries`) and calico-node
//!   exits, so kubelet restarts it with its back-off. kube-proxy 1.28+ jumps from INPUT to
//!   KUBE-NODEPORTS (health check ports) with a rule Felix's insert pattern does not
//!   match, so Felix can flush KUBE-NODEPORTS but never delete it: on nft the filter
//!   table's second transaction fails every time, which is what ends each run.
//!
//! Lines follow Felix's format (`2006-01-02 15:04:05.000 [LEVEL][pid] felix/file.go line:
//! msg key=value`) on stdout, which kubelet writes into the calico-node container's CRI
//! log. The writes are made by `iptables-restore` children of this process (comm
//! `calico-node`, as Felix runs inside the calico-node binary).

use std::collections::BTreeSet;
use std::time::Duration;

use super::{Flags, nap, terminating};
use crate::clock::Utc;
use crate::iptables::{Tools, split_args};

/// Felix's `KubeProxyChainPrefixes` (felix/rules/rule_defs.go).
pub const KUBE_PROXY_CHAIN_PREFIXES: &[&str] = &[
    "KUBE-FORWARD",
    "KUBE-SERVICES",
    "KUBE-EXTERNAL-SERVICES",
    "KUBE-NODEPORTS",
    "KUBE-SVC-",
    "KUBE-SEP-",
    "KUBE-FW-",
    "KUBE-XLB-",
];

fn say(level: &str, file: &str, msg: &str) {
    println!(
        "{} [{level}][{}] {file}: {msg}",
        Utc::now().calico(),
        std::process::id()
    );
}

fn cleaned_chain(name: &str) -> bool {
    KUBE_PROXY_CHAIN_PREFIXES
        .iter()
        .any(|p| name.starts_with(p))
}

/// `KubeProxyInsertRuleRegex`: `-j KUBE-[a-zA-Z0-9-]*SERVICES|-j KUBE-FORWARD`.
fn kube_proxy_insert(rule: &str) -> bool {
    let words = split_args(rule);
    words.windows(2).any(|w| {
        w[0] == "-j"
            && w[1].starts_with("KUBE-")
            && (w[1].ends_with("SERVICES") || w[1] == "KUBE-FORWARD")
    })
}

/// What Felix's cleanup does to one table's `iptables-save -t TABLE` text: the restore
/// payload (None when there is nothing to clean) and the log lines it writes first.
/// `nft`: Felix's nftables mode ends the transaction after the flushes and deletes of
/// inserts and deletes the chains in a second one (iptables-nft-restore checks references
/// at the start of a transaction); legacy mode writes one transaction.
pub fn cleanup(table: &str, save: &str, nft: bool) -> Option<(String, Vec<String>)> {
    let mut chains = BTreeSet::new();
    let mut inserts = Vec::new();
    for line in save.lines() {
        if let Some(decl) = line.strip_prefix(':') {
            let name = decl.split(' ').next().unwrap_or_default();
            if cleaned_chain(name) {
                chains.insert(name.to_string());
            }
        } else if let Some(rule) = line.strip_prefix("-A ") {
            let chain = rule.split(' ').next().unwrap_or_default();
            if !cleaned_chain(chain) && kube_proxy_insert(rule) {
                inserts.push((chain.to_string(), rule.to_string()));
            }
        }
    }
    if chains.is_empty() && inserts.is_empty() {
        return None;
    }
    let mut logs = Vec::new();
    let mut payload = format!("*{table}\n");
    for (chain, rule) in &inserts {
        logs.push(format!(
            "Found unexpected insert, marking for cleanup chainName=\"{chain}\" ipVersion=0x4 table=\"{table}\""
        ));
        payload.push_str(&format!("-D {rule}\n"));
    }
    for c in &chains {
        logs.push(format!(
            "Found unexpected chain, marking for cleanup chainName=\"{c}\" ipVersion=0x4 table=\"{table}\""
        ));
        payload.push_str(&format!(":{c} - [0:0]\n"));
    }
    if nft {
        payload.push_str(&format!("COMMIT\n*{table}\n"));
        for c in &chains {
            payload.push_str(&format!(":{c} - [0:0]\n"));
        }
    }
    for c in &chains {
        payload.push_str(&format!("--delete-chain {c}\n"));
    }
    payload.push_str("COMMIT\n");
    Some((payload, logs))
}

/// Runs Felix's cleanup loop until SIGTERM.
pub fn main(f: &Flags) -> Result<i32, String> {
    let refresh = f.duration_or("refresh-interval", Duration::from_secs(90))?;
    let tools = Tools::new(f.get("iptables").unwrap_or("iptables"));
    say(
        "INFO",
        "felix/daemon.go 379",
        "Felix starting up GOMAXPROCS=2 builddate=\"2024-07-01T10:11:12+0000\" gitcommit=\"5b8ac7a0b1f3\" version=\"v3.28.1\"",
    );
    say(
        "INFO",
        "felix/int_dataplane.go 542",
        "BPF enabled, configuring iptables layer to clean up kube-proxy's rules.",
    );
    say(
        "INFO",
        "felix/int_dataplane.go 973",
        "BPF enabled, starting BPF endpoint manager and map manager.",
    );
    let nft = tools.is_nft();
    while !terminating() {
        for table in ["nat", "filter"] {
            if !apply(&tools, table, nft) {
                // Table.Apply: "Failed to program iptables, giving up after retries" is a
                // Panic; calico-node exits and kubelet restarts it.
                return Ok(2);
            }
        }
        if !nap(refresh) {
            break;
        }
    }
    Ok(0)
}

/// Felix's `Table.Apply` for one table: read the table, clean up, retry up to 10 times
/// with a back-off from 1 ms doubling, re-reading the table before each retry. False when
/// it gave up (Felix panics).
fn apply(tools: &Tools, table: &str, nft: bool) -> bool {
    let mut backoff = Duration::from_millis(1);
    let mut failed_once = false;
    let succeeded = |failed_once: bool| {
        if failed_once {
            say(
                "WARNING",
                "felix/table.go 1247",
                &format!("Succeeded after retry. ipVersion=0x4 table=\"{table}\""),
            );
        }
        true
    };
    for retry in (0..=10).rev() {
        let Ok(save) = tools.save_args(&["-t", table]) else {
            return true;
        };
        let Some((payload, logs)) = cleanup(table, &save.stdout, nft) else {
            return succeeded(failed_once);
        };
        for l in &logs {
            say("INFO", "felix/table.go 889", l);
        }
        let args = [
            "--noflush",
            "--verbose",
            "--wait",
            "10",
            "--wait-interval",
            "50000",
        ];
        let err = match tools.restore(&args, &payload) {
            Ok(o) if o.ok() => return succeeded(failed_once),
            Ok(o) => {
                let stderr = &o.combined[o.stdout.len()..];
                say(
                    "WARNING",
                    "felix/table.go 1477",
                    &format!(
                        "Failed to execute ip(6)tables-restore command error=exit status {} errorOutput=\"{}\" input=\"{}\" ipVersion=0x4 output=\"{}\" table=\"{table}\"",
                        o.code,
                        stderr.trim().replace('\n', "\\n"),
                        payload.replace('\n', "\\n"),
                        o.stdout.trim().replace('\n', "\\n"),
                    ),
                );
                format!("writing out buffer: exit status {}", o.code)
            }
            Err(e) => format!("writing out buffer: {e}"),
        };
        if retry == 0 {
            say(
                "ERROR",
                "felix/table.go 1238",
                &format!(
                    "Failed to program iptables, loading diags before panic. error={err} ipVersion=0x4 table=\"{table}\""
                ),
            );
            say(
                "PANIC",
                "felix/table.go 1248",
                &format!(
                    "Failed to program iptables, giving up after retries error={err} ipVersion=0x4 table=\"{table}\""
                ),
            );
            return false;
        }
        say(
            "WARNING",
            "felix/table.go 1227",
            &format!(
                "Failed to program iptables, will retry error={err} ipVersion=0x4 table=\"{table}\""
            ),
        );
        std::thread::sleep(backoff);
        backoff *= 2;
        failed_once = true;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleans_kube_proxy_chains_and_hooks_but_not_utility_chains() {
        let save = "*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]\n:KUBE-MARK-MASQ - [0:0]\n:KUBE-POSTROUTING - [0:0]\n:KUBE-PROXY-CANARY - [0:0]\n\
-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING\n\
-A KUBE-SERVICES -d 10.43.0.1/32 -p tcp -j KUBE-SVC-NPX46M4PTMTKRN6Y\nCOMMIT\n";
        let (payload, logs) = cleanup("nat", save, false).unwrap();
        assert_eq!(
            payload,
            "*nat\n-D PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
:KUBE-SERVICES - [0:0]\n:KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]\n--delete-chain KUBE-SERVICES\n--delete-chain KUBE-SVC-NPX46M4PTMTKRN6Y\nCOMMIT\n"
        );
        let (nft, _) = cleanup("nat", save, true).unwrap();
        assert!(nft.contains("-j KUBE-SERVICES\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]\nCOMMIT\n*nat\n:KUBE-SERVICES - [0:0]\n"), "{nft}");
        assert_eq!(logs.len(), 3);
        assert!(logs[1].starts_with(
            "Found unexpected chain, marking for cleanup chainName=\"KUBE-SERVICES\""
        ));
        assert!(cleanup("nat", "*nat\n:KUBE-MARK-MASQ - [0:0]\nCOMMIT\n", true).is_none());
    }
}
