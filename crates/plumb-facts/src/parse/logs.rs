//! Log lines a node keeps: the CRI container-log wrapper, klog lines (kube-proxy,
//! kubelet) and the few messages doctor's checks look for.
//!
//! - CRI (`/var/log/pods/<ns>_<pod>_<uid>/<container>/N.log`):
//!   `2024-08-27T17:30:29.414588123Z stderr F <message>` (`P` = partial line, continued).
//! - klog: `E0827 17:30:29.414588 2101747 proxier.go:1598] "Failed to execute iptables-restore" err=<`
//!   (severity letter, MMDD, time, pid, file:line, then the message). Structured klog
//!   continues a multi-line value on the following lines until `>`.
//! - calico install-cni: `2024-04-27 18:13:03.606 [FATAL][1] cni-installer/<nil> <nil>: Unable to create token ...`.
//!
//! Matching is deliberately loose where field reports differ (facts-kubernetes.md): what
//! matters is the message, not its exact framing.

use serde::Serialize;

/// One log line with where it was found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LogLine {
    /// 1-based line number in the file.
    pub line: u32,
    /// Timestamp as written (CRI RFC 3339, klog `MMDD hh:mm:ss.us`, or calico's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// The message without the CRI wrapper.
    pub text: String,
}

/// Splits a CRI log file into messages, joining `P` (partial) pieces; plain files
/// (journal exports, agent logs) come back line by line.
pub fn cri_lines(text: &str) -> Vec<LogLine> {
    let mut out: Vec<LogLine> = Vec::new();
    let mut partial: Option<LogLine> = None;
    for (i, raw) in text.lines().enumerate() {
        let n = u32::try_from(i + 1).unwrap_or(u32::MAX);
        match split_cri(raw) {
            Some((time, tag, msg)) => {
                let piece = match partial.take() {
                    Some(mut p) => {
                        p.text.push_str(msg);
                        p
                    }
                    None => LogLine {
                        line: n,
                        time: Some(time.to_string()),
                        text: msg.to_string(),
                    },
                };
                if tag == "P" {
                    partial = Some(piece);
                } else {
                    out.push(piece);
                }
            }
            None => out.push(LogLine {
                line: n,
                time: None,
                text: raw.to_string(),
            }),
        }
    }
    out.extend(partial);
    out
}

/// `TIME STREAM TAG MESSAGE` -> (time, tag, message).
fn split_cri(line: &str) -> Option<(&str, &str, &str)> {
    let mut it = line.splitn(4, ' ');
    let time = it.next()?;
    let stream = it.next()?;
    let tag = it.next()?;
    let msg = it.next().unwrap_or("");
    let looks_like_time = time.len() >= 20 && time.as_bytes()[4] == b'-' && time.contains('T');
    (looks_like_time && matches!(stream, "stdout" | "stderr") && matches!(tag, "F" | "P"))
        .then_some((time, tag, msg))
}

/// A klog header: severity letter and the text after `file.go:NNN] `.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Klog<'a> {
    /// `I`nfo, `W`arning, `E`rror or `F`atal.
    pub severity: char,
    /// `MMDD hh:mm:ss.uuuuuu`.
    pub time: &'a str,
    /// The text after the header (`file.go:340] `): quoted message and key=value pairs.
    pub message: &'a str,
}

/// Reads a klog header (`E0827 17:30:29.414588 2101747 file.go:340] "msg" key="value"`);
/// `None` when the line does not start with one.
pub fn klog(line: &str) -> Option<Klog<'_>> {
    let b = line.as_bytes();
    if b.len() < 22
        || !matches!(b[0], b'I' | b'W' | b'E' | b'F')
        || !b[1..5].iter().all(u8::is_ascii_digit)
    {
        return None;
    }
    let close = line.find("] ")?;
    let time = line.get(1..21)?;
    Some(Klog {
        severity: b[0] as char,
        time,
        message: &line[close + 2..],
    })
}

/// What a line means to doctor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Signal {
    /// kube-proxy: `Failed to execute iptables-restore` (any era's spelling), outside its
    /// start-up cleanup of another mode's leftovers.
    RestoreFailed,
    /// iptables-restore: `Chain 'KUBE-SVC-…' does not exist` (legacy: `Couldn't load target
    /// `KUBE-SVC-…'`) — its chains were deleted under it.
    ChainDoesNotExist,
    /// kube-proxy: `Sync failed; retrying` / `syncProxyRules` errors.
    SyncFailed,
    /// install-cni: `Unable to create token for CNI kubeconfig` at FATAL level.
    InstallCniFatal,
    /// A connection to a Service ClusterIP timed out (`dial tcp 10.43.0.1:443: i/o timeout`).
    ClusterIpTimeout,
    /// RBAC: `is forbidden: User "system:node:..." cannot ...` (often transient at boot).
    RbacForbidden,
    /// A security agent says it detected tampering (`Repeated FW tampering has been
    /// detected`): a detection, not a revert.
    AgentTamper,
    /// A security agent says it reverted firewall changes (`Successfully reverted out of
    /// band firewall changes`): one line per revert.
    AgentRevert,
    /// kubelet or an event: a probe failed (`Liveness probe failed: HTTP probe failed with
    /// statuscode: 503`, `"Probe failed" probeType="Liveness"`).
    ProbeFailed,
    /// kubelet: `Container kube-proxy failed liveness probe, will be restarted`.
    LivenessRestart,
    /// kubelet or an event: `CrashLoopBackOff` / `Back-off restarting failed container`.
    BackOff,
    /// iptables cannot talk to the kernel's nf_tables at all: `Could not fetch rule set
    /// generation id` / `Failed to ensure that filter chain ... exists` (userspace and
    /// kernel do not match, or no nf_tables in this kernel/container).
    IptablesIncompatible,
    /// iptables-restore rejects an option kube-proxy writes: `invalid option -- '5'`
    /// (iptables older than `-w SECONDS`), `unknown option "--xor-mark"` (the MARK
    /// extension of this iptables and kernel disagree).
    RestoreOptionRejected,
    /// `connect: no route to host`: an ICMP host-prohibited REJECT, or no path.
    NoRouteToHost,
    /// A pod sandbox's network could not be set up because the CNI plugin could not reach
    /// the API (`error getting ClusterInformation: ... i/o timeout`).
    CniSandboxFailed,
    /// kube-proxy may not write conntrack sysctls (`open /proc/sys/net/netfilter/nf_conntrack_max:
    /// permission denied`: an unprivileged or read-only /proc).
    ConntrackPermission,
    /// kube-proxy's nftables mode cannot run `nft` (`failed to run nft: ... No such file or directory`).
    NftUnavailable,
    /// kube-proxy's canary monitor found its canary chain gone (`IPTables canary deleted`,
    /// `Reloading after iptables flush`): something flushed or deleted its chains.
    CanaryDeleted,
    /// Calico Felix in eBPF mode removes kube-proxy's chains (`BPF enabled, configuring
    /// iptables layer to clean up kube-proxy's rules.`, `Found unexpected chain, marking
    /// for cleanup chainName="KUBE-…"`): it is meant to replace kube-proxy, which must not run.
    KubeProxyCleanup,
    /// The first message of a container log file: the container (re)started.
    ContainerStart,
    /// An audit NETFILTER_CFG record: a process changed a netfilter table.
    NetfilterChange,
}

impl Signal {
    /// Whether the line reports something wrong (a start or a netfilter change is neither).
    pub fn is_failure(self) -> bool {
        !matches!(self, Signal::ContainerStart | Signal::NetfilterChange)
    }
}

/// Classifies one message (CRI wrapper already removed).
pub fn signal(text: &str) -> Option<Signal> {
    let lower = text.to_ascii_lowercase();
    // kube-proxy's start-up cleanup of another mode's chains (`cleanup.go`): "CHAIN_DEL
    // failed (Device or resource busy)" there is a leftover warning, not a failing sync.
    if lower.contains("] ") && lower.contains(" cleanup.go:") {
        return None;
    }
    // iptables-nft: `Chain 'KUBE-SVC-…' does not exist`; iptables-legacy says the same
    // as `Couldn't load target `KUBE-SVC-…':No such file or directory`.
    if (lower.contains("chain '") && lower.contains("does not exist"))
        || (lower.contains("couldn't load target") && lower.contains("no such file"))
    {
        return Some(Signal::ChainDoesNotExist);
    }
    if lower.contains("could not fetch rule set generation id")
        || lower.contains("failed to ensure that filter chain")
        || lower.contains("failed to ensure that nat chain")
    {
        return Some(Signal::IptablesIncompatible);
    }
    if lower.contains("tables-restore")
        && (lower.contains("invalid option") || lower.contains("unknown option"))
    {
        return Some(Signal::RestoreOptionRejected);
    }
    if lower.contains("failed to run nft") && lower.contains("no such file or directory") {
        return Some(Signal::NftUnavailable);
    }
    if lower.contains("nf_conntrack") && lower.contains("permission denied") {
        return Some(Signal::ConntrackPermission);
    }
    if lower.contains("failed to execute iptables-restore") {
        return Some(Signal::RestoreFailed);
    }
    if lower.contains("sync failed") {
        return Some(Signal::SyncFailed);
    }
    if lower.contains("failed liveness probe, will be restarted") {
        return Some(Signal::LivenessRestart);
    }
    if lower.contains("crashloopbackoff") || lower.contains("back-off restarting failed container")
    {
        return Some(Signal::BackOff);
    }
    if lower.contains("probe failed") {
        return Some(Signal::ProbeFailed);
    }
    if lower.contains("unable to create token for cni kubeconfig") && lower.contains("fatal") {
        return Some(Signal::InstallCniFatal);
    }
    if lower.contains("clusterinformation")
        && (lower.contains("sandbox") || lower.contains("plugin type="))
    {
        return Some(Signal::CniSandboxFailed);
    }
    if lower.contains("configuring iptables layer to clean up kube-proxy's rules")
        || lower.contains("configuring iptables/nftables layer to clean up kube-proxy's rules")
        || (lower.contains("marking for cleanup") && lower.contains("chainname=\"kube-"))
    {
        return Some(Signal::KubeProxyCleanup);
    }
    if lower.contains("iptables canary deleted") || lower.contains("reloading after iptables flush")
    {
        return Some(Signal::CanaryDeleted);
    }
    if lower.contains("no route to host") {
        return Some(Signal::NoRouteToHost);
    }
    if lower.contains("dial tcp") && lower.contains("i/o timeout") {
        return Some(Signal::ClusterIpTimeout);
    }
    if lower.contains("is forbidden") && lower.contains("cannot") {
        return Some(Signal::RbacForbidden);
    }
    if lower.contains("reverted out of band") || lower.contains("successfully reverted") {
        return Some(Signal::AgentRevert);
    }
    if lower.contains("tamper") {
        return Some(Signal::AgentTamper);
    }
    None
}

/// The HTTP status a failed probe line quotes (`statuscode: 503`).
pub fn probe_status(text: &str) -> Option<u16> {
    let lower = text.to_ascii_lowercase();
    let at = lower.find("statuscode: ")? + "statuscode: ".len();
    lower.get(at..at + 3)?.parse().ok()
}

/// Which probe a failed-probe line is about (`liveness`, `readiness`, `startup`).
pub fn probe_kind(text: &str) -> Option<&'static str> {
    let lower = text.to_ascii_lowercase();
    ["liveness", "readiness", "startup"]
        .into_iter()
        .find(|k| lower.contains(k))
}

/// The container a kubelet line or event is about: `containerName="kube-proxy"`,
/// `container=kube-proxy`, `Container kube-proxy failed ...`, `failed container kube-proxy`,
/// `"StartContainer" for "kube-proxy"`.
pub fn subject_container(text: &str) -> Option<&str> {
    let name_end = |s: &str| {
        s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
            .unwrap_or(s.len())
    };
    let after = |key: &str| -> Option<&str> {
        let rest = &text[text.find(key)? + key.len()..];
        let rest = rest.trim_start_matches(['"', '\\']);
        let n = name_end(rest);
        (n > 0).then(|| &rest[..n])
    };
    after("containerName=")
        .or_else(|| after("container="))
        .or_else(|| after("failed container "))
        .or_else(|| after(r#"StartContainer\" for \""#))
        .or_else(|| after("StartContainer\" for \""))
        .or_else(|| after("Container "))
}

/// The `ip:port` a `dial tcp IP:PORT: i/o timeout` line was dialling.
pub fn dial_target(text: &str) -> Option<&str> {
    let rest = &text[text.find("dial tcp ")? + 9..];
    let end = rest.find(": ")?;
    Some(&rest[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cri_wrapper_and_partials() {
        let lines = cri_lines(
            "2024-08-27T17:30:29.414588123Z stderr F E0827 17:30:29.414588 1 proxier.go:1598] \"Failed to execute iptables-restore\" err=<\n\
             2024-08-27T17:30:29.414588124Z stderr P first half \n\
             2024-08-27T17:30:29.414588125Z stderr F second half\n\
             not a cri line\n",
        );
        assert_eq!(lines.len(), 3);
        assert_eq!(
            lines[0].time.as_deref(),
            Some("2024-08-27T17:30:29.414588123Z")
        );
        assert_eq!(signal(&lines[0].text), Some(Signal::RestoreFailed));
        assert_eq!(lines[1].text, "first half second half");
        assert_eq!(lines[1].line, 2);
        assert_eq!(
            lines[2],
            LogLine {
                line: 4,
                time: None,
                text: "not a cri line".into()
            }
        );
    }

    #[test]
    fn klog_header() {
        let k = klog("E0627 09:28:54.054930 1 proxier.go:1598] Failed to execute iptables-restore: exit status 1").unwrap();
        assert_eq!(k.severity, 'E');
        assert_eq!(k.time, "0627 09:28:54.054930");
        assert!(k.message.starts_with("Failed to execute"));
        assert!(klog("2024-04-27 18:12:33.296 [INFO][1] x").is_none());
        assert!(klog("Ex").is_none());
    }

    #[test]
    fn signals_of_the_founding_incidents() {
        let fatal = "2024-04-27 18:13:03.606 [FATAL][1] cni-installer/<nil> <nil>: Unable to create token for CNI kubeconfig error=Post \"https://10.43.0.1:443/api/v1/namespaces/kube-system/serviceaccounts/canal/token\": dial tcp 10.43.0.1:443: i/o timeout";
        assert_eq!(signal(fatal), Some(Signal::InstallCniFatal));
        assert_eq!(dial_target(fatal), Some("10.43.0.1:443"));
        assert_eq!(
            signal(
                "iptables-restore: line 12 failed: Chain 'KUBE-SVC-NPX46M4PTMTKRN6Y' does not exist"
            ),
            Some(Signal::ChainDoesNotExist)
        );
        assert_eq!(
            signal(
                "iptables-restore v1.8.9 (legacy): Couldn't load target `KUBE-SVC-NPX46M4PTMTKRN6Y':No such file or directory"
            ),
            Some(Signal::ChainDoesNotExist)
        );
        assert_eq!(
            signal("Repeated FW tampering has been detected"),
            Some(Signal::AgentTamper)
        );
        assert_eq!(
            signal("Successfully reverted out of band firewall changes entries"),
            Some(Signal::AgentRevert)
        );
        assert_eq!(signal("I0827 Syncing iptables rules"), None);
    }
}
