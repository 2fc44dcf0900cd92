//! Checks before `lab up`: root, and the tools the lab runs (named when missing).

use std::path::Path;

use crate::error::LabError;

/// Tools every scenario needs.
pub const TOOLS: &[&str] = &[
    "ip",
    "sysctl",
    "iptables",
    "iptables-save",
    "iptables-restore",
    "iptables-nft",
    "iptables-nft-save",
    "iptables-nft-restore",
    "iptables-legacy",
    "iptables-legacy-save",
    "iptables-legacy-restore",
    "unshare",
    "mount",
    "ufw",
];

fn on_path(tool: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(Into::into))
        .any(|d| Path::new(&d).join(tool).is_file())
}

/// Fails with [`LabError::NotRoot`] or [`LabError::MissingTools`].
pub fn check() -> Result<(), LabError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(LabError::NotRoot);
    }
    let missing: Vec<String> = TOOLS
        .iter()
        .filter(|t| !on_path(t))
        .map(|t| t.to_string())
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(LabError::MissingTools(missing))
    }
}
