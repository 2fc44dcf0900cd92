//! Real UFW inside the node namespace, never touching the host's.
//!
//! The lab root holds private copies of `/etc/ufw`, `/lib/ufw` and `/etc/default/ufw`
//! (`IPT_SYSCTL` pointed at the lab's copy of `sysctl.conf`). Every ufw command runs as
//! `ip netns exec plumb-node unshare -m sh -c 'mount --bind COPY /etc/ufw; ...; exec ufw ...'`:
//! the bind mounts live in a private mount namespace that disappears with the command, so
//! nothing is left mounted, the host's UFW files are never written, and the rules land in
//! the node's network namespace only (facts-kernel.md).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::LabError;
use crate::state::NODE_NETNS;

/// Directories bind-mounted over the host paths while a ufw command runs.
pub const BINDS: &[(&str, &str)] = &[
    ("etc/ufw", "/etc/ufw"),
    ("lib/ufw", "/lib/ufw"),
    ("etc/default/ufw", "/etc/default/ufw"),
];

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let target = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &target)?;
        } else {
            std::fs::copy(e.path(), &target)?;
        }
    }
    Ok(())
}

/// Copies the host's UFW configuration into the lab root, disabled (`ENABLED=no`) and
/// with its sysctl file pointed at the lab copy.
pub fn prepare(root: &Path) -> Result<(), LabError> {
    let io = |what: &str, e| LabError::io(format!("preparing the lab's UFW copy ({what})"), e);
    copy_dir(Path::new("/etc/ufw"), &root.join("etc/ufw")).map_err(|e| io("/etc/ufw", e))?;
    copy_dir(Path::new("/lib/ufw"), &root.join("lib/ufw")).map_err(|e| io("/lib/ufw", e))?;
    let conf = root.join("etc/ufw/ufw.conf");
    std::fs::write(
        &conf,
        "# /etc/ufw/ufw.conf (plumb lab copy)\nENABLED=no\nLOGLEVEL=low\n",
    )
    .map_err(|e| io("ufw.conf", e))?;
    let default =
        std::fs::read_to_string("/etc/default/ufw").map_err(|e| io("/etc/default/ufw", e))?;
    let default: String = default
        .lines()
        .map(|l| {
            if l.starts_with("IPT_SYSCTL=") {
                "IPT_SYSCTL=/etc/ufw/sysctl.conf".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n";
    std::fs::create_dir_all(root.join("etc/default")).map_err(|e| io("etc/default", e))?;
    std::fs::write(root.join("etc/default/ufw"), default).map_err(|e| io("etc/default/ufw", e))
}

/// A command that runs `argv` in the node namespace with the lab's UFW files mounted over
/// the host paths (private mount namespace). `PLUMB_LAB_ROOT` is set.
pub fn node_command(root: &Path, argv: &[String]) -> Command {
    let mut script = String::from("set -e; ");
    for (rel, target) in BINDS {
        let src: PathBuf = root.join(rel);
        script.push_str(&format!(
            "if [ -e '{}' ] && [ -e '{target}' ]; then mount --bind '{}' '{target}'; fi; ",
            src.display(),
            src.display()
        ));
    }
    script.push_str("exec \"$@\"");
    let mut cmd = Command::new("ip");
    cmd.args([
        "netns",
        "exec",
        NODE_NETNS,
        "unshare",
        "-m",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
        "sh",
    ])
    .args(argv)
    .env("PLUMB_LAB_ROOT", root);
    cmd
}

/// `ufw --force enable` in the node namespace (real UFW, its default policies).
pub fn enable(root: &Path) -> Result<String, LabError> {
    let out = node_command(root, &["ufw".into(), "--force".into(), "enable".into()])
        .output()
        .map_err(|e| LabError::io("running ufw", e))?;
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        Ok(text)
    } else {
        Err(LabError::Command {
            command: "ufw --force enable (in plumb-node)".into(),
            status: out.status.to_string(),
            stderr: text,
        })
    }
}
