//! Whether this process may read netfilter, and how to say so when it may not.
//!
//! Reading rulesets (the `*-save` tools, `nft list`, netlink dumps) needs CAP_NET_ADMIN
//! in the network namespace read, which in practice means root. Without it every dump
//! tool fails with its own wording; plumb says once what is missing instead of
//! reporting an empty firewall.

use crate::rulesets::ToolOutcome;

/// Linux capability number of CAP_NET_ADMIN (linux/capability.h).
const CAP_NET_ADMIN: u32 = 12;

/// What plumb says when it cannot read netfilter for lack of privilege.
pub const NEEDS_ROOT: &str = "needs root (or CAP_NET_ADMIN) to read netfilter";

/// Whether this process holds CAP_NET_ADMIN in its effective set, from
/// `/proc/self/status`; `None` when that cannot be read or parsed.
pub fn has_net_admin() -> Option<bool> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    effective_has(&status, CAP_NET_ADMIN)
}

/// Whether the `CapEff:` line of a `/proc/<pid>/status` text has capability `cap`.
fn effective_has(status: &str, cap: u32) -> Option<bool> {
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))?
        .trim();
    let mask = u64::from_str_radix(hex, 16).ok()?;
    Some(mask & (1 << cap) != 0)
}

/// The first operating-system permission error among failed dump tools (one line,
/// e.g. `iptables-nft-save: Permission denied (you must be root)`), if any.
pub fn permission_error(tools: &[ToolOutcome]) -> Option<String> {
    const SIGNS: &[&str] = &[
        "Permission denied",
        "Operation not permitted",
        "permission denied",
        "you must be root",
    ];
    tools.iter().find_map(|t| {
        let line = t
            .detail
            .lines()
            .find(|l| SIGNS.iter().any(|s| l.contains(s)))?;
        // Keep from the OS wording on: tools prefix it with their name and version.
        let from = SIGNS.iter().filter_map(|s| line.find(s)).min().unwrap_or(0);
        Some(format!("{}: {}", t.tool, line[from..].trim()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_eff_is_read_bit_by_bit() {
        let root = "Name:\tplumb\nCapInh:\t0\nCapEff:\t000001ffffffffff\n";
        assert_eq!(effective_has(root, CAP_NET_ADMIN), Some(true));
        let user = "Name:\tplumb\nCapEff:\t0000000000000000\n";
        assert_eq!(effective_has(user, CAP_NET_ADMIN), Some(false));
        // Only CAP_NET_ADMIN (bit 12).
        assert_eq!(effective_has("CapEff:\t0000000000001000\n", 12), Some(true));
        assert_eq!(
            effective_has("CapEff:\t0000000000000800\n", 12),
            Some(false)
        );
        assert_eq!(effective_has("Name:\tx\n", 12), None);
        assert_eq!(effective_has("CapEff:\tzz\n", 12), None);
    }

    #[test]
    fn the_os_error_is_quoted_once_without_tool_noise() {
        let tool = |tool: &str, status: &str, detail: &str| ToolOutcome {
            tool: tool.into(),
            status: status.into(),
            detail: detail.into(),
            tables: 0,
            left_out: status == "failed",
        };
        let tools = [
            tool(
                "iptables-legacy-save",
                "skipped",
                "/proc/net/ip_tables_names lists no tables",
            ),
            tool(
                "iptables-nft-save",
                "failed",
                "iptables-nft-save: exit status 4: iptables-nft-save v1.8.9 (nf_tables): Could not fetch rule set generation id: Permission denied (you must be root)",
            ),
            tool(
                "nft",
                "failed",
                "nft list ruleset: exit status 1: Operation not permitted (you must be root)\nnetlink: Error: cache initialization failed: Operation not permitted",
            ),
        ];
        assert_eq!(
            permission_error(&tools).as_deref(),
            Some("iptables-nft-save: Permission denied (you must be root)")
        );
        assert_eq!(permission_error(&tools[..1]), None);
    }
}
