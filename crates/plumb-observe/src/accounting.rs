//! Conntrack's per-connection byte/packet counters (`net.netfilter.nf_conntrack_acct`)
//! and start/stop timestamps (`net.netfilter.nf_conntrack_timestamp`), per network
//! namespace. They are read, never changed, unless the user asks
//! ([`Accounting::enable`], `plumb observe --enable-accounting`): then the previous
//! values are put back when the returned [`Restore`] is dropped.
//!
//! A process killed with SIGKILL runs no destructor: before changing anything,
//! [`Accounting::enable`] writes a marker file ([`MARKER_DIR`], one per namespace)
//! recording the old values and its pid; [`Restore`] removes it after putting them back.
//! [`restore_leftovers`], at the next start, finds the markers whose process is gone,
//! puts their values back in their namespace when it still exists (the same one: its
//! inode is recorded), and removes them.

use std::io;
use std::path::{Path, PathBuf};

/// Where the markers of settings to put back live (one file per namespace).
pub const MARKER_DIR: &str = "/run/plumb/observe-accounting";

const ACCT: &str = "/proc/sys/net/netfilter/nf_conntrack_acct";
const TIMESTAMP: &str = "/proc/sys/net/netfilter/nf_conntrack_timestamp";

/// Whether conntrack counts bytes and packets and keeps timestamps in a namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accounting {
    /// `nf_conntrack_acct` is on: flows carry byte and packet counts.
    pub bytes_and_packets: bool,
    /// `nf_conntrack_timestamp` is on: flows carry their start and stop times.
    pub timestamps: bool,
}

fn read_flag(path: &str) -> io::Result<bool> {
    Ok(std::fs::read_to_string(path)?.trim() != "0")
}

impl Accounting {
    /// Reads both settings in `netns` (this machine's when None). /proc/sys/net shows
    /// the namespace of the thread that opens it: read on a thread inside `netns`.
    pub fn read(netns: Option<&str>) -> io::Result<Accounting> {
        plumb_os::netns::on_thread(netns, || {
            Ok(Accounting {
                bytes_and_packets: read_flag(ACCT)?,
                timestamps: read_flag(TIMESTAMP)?,
            })
        })
    }

    /// Turns both on in `netns`; the returned guard puts back what was there. A
    /// marker in `marker_dir` ([`MARKER_DIR`]) records the old values first, so a killed
    /// process's change is undone by the next start ([`restore_leftovers`]). Refused
    /// while another live process holds the namespace's marker (its exit restores).
    pub fn enable(netns: Option<&str>, marker_dir: &Path) -> io::Result<Restore> {
        let inode = namespace_inode(netns)?;
        let path = marker_path(marker_dir, netns, inode);
        if let Some(m) = Marker::load(&path)
            && m.pid != std::process::id()
            && plumb_os::process::running(m.pid)
        {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "process {} turned them on there and puts them back when it exits ({})",
                    m.pid,
                    path.display()
                ),
            ));
        }
        let before = Accounting::read(netns)?;
        Marker {
            netns: netns.map(str::to_string),
            inode,
            pid: std::process::id(),
            before,
        }
        .store(&path)?;
        write_both(netns, true, true)?;
        Ok(Restore {
            netns: netns.map(str::to_string),
            before,
            marker: Some(path),
        })
    }
}

/// What a marker file holds: `netns=NAME` (empty: the host's), `inode=N`, `pid=N`,
/// `acct=0|1`, `timestamp=0|1`, one per line.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Marker {
    netns: Option<String>,
    inode: u64,
    pid: u32,
    before: Accounting,
}

impl Marker {
    fn to_text(&self) -> String {
        format!(
            "netns={}\ninode={}\npid={}\nacct={}\ntimestamp={}\n",
            self.netns.as_deref().unwrap_or(""),
            self.inode,
            self.pid,
            u8::from(self.before.bytes_and_packets),
            u8::from(self.before.timestamps)
        )
    }

    fn parse(text: &str) -> Option<Marker> {
        let get = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
        };
        let flag = |k: &str| match get(k)? {
            "0" => Some(false),
            "1" => Some(true),
            _ => None,
        };
        Some(Marker {
            netns: get("netns").filter(|n| !n.is_empty()).map(str::to_string),
            inode: get("inode")?.parse().ok()?,
            pid: get("pid")?.parse().ok()?,
            before: Accounting {
                bytes_and_packets: flag("acct")?,
                timestamps: flag("timestamp")?,
            },
        })
    }

    fn load(path: &Path) -> Option<Marker> {
        // A marker is a few dozen bytes; anything bigger is not one.
        let meta = std::fs::symlink_metadata(path).ok()?;
        if !meta.is_file() || meta.len() > 4096 {
            return None;
        }
        Marker::parse(&std::fs::read_to_string(path).ok()?)
    }

    /// Written to a temporary name and renamed: a marker is whole or absent.
    fn store(&self, path: &Path) -> io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(self.to_text().as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    }
}

fn namespace_inode(netns: Option<&str>) -> io::Result<u64> {
    match netns {
        Some(n) => plumb_os::netns::inode_of(n),
        None => plumb_os::netns::current_inode(),
    }
}

/// `DIR/host` or `DIR/netns-NAME-INODE` (a name is a /run/netns entry: no `/`).
fn marker_path(dir: &Path, netns: Option<&str>, inode: u64) -> PathBuf {
    match netns {
        None => dir.join("host"),
        Some(n) => {
            let safe: String = n
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            dir.join(format!("netns-{safe}-{inode}"))
        }
    }
}

/// What [`restore_leftovers`] did with one marker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leftover {
    /// The namespace (None: the host's).
    pub netns: Option<String>,
    /// The values put back.
    pub restored: Accounting,
    /// The process that had changed them.
    pub pid: u32,
    /// None: put back; Some: why not (the namespace is gone, a write failed).
    pub problem: Option<String>,
}

/// Puts back the settings of every marker in `marker_dir` whose process is gone (a
/// `plumb observe --enable-accounting` killed before it could), in its namespace if
/// that still exists with the recorded inode, and removes those markers. Markers of
/// running processes are left alone. A missing directory is nothing to do.
pub fn restore_leftovers(marker_dir: &Path) -> Vec<Leftover> {
    let Ok(entries) = std::fs::read_dir(marker_dir) else {
        return Vec::new();
    };
    let mut done = Vec::new();
    for e in entries.flatten() {
        let path = e.path();
        let Some(m) = Marker::load(&path) else {
            continue;
        };
        if plumb_os::process::running(m.pid) {
            continue;
        }
        let problem = match namespace_inode(m.netns.as_deref()) {
            Ok(i) if i == m.inode => write_both(
                m.netns.as_deref(),
                m.before.bytes_and_packets,
                m.before.timestamps,
            )
            .err()
            .map(|e| format!("writing the settings back: {e}")),
            Ok(_) => Some("the namespace of that name is another one now".into()),
            Err(_) => Some("the namespace no longer exists".into()),
        };
        let _ = std::fs::remove_file(&path);
        done.push(Leftover {
            netns: m.netns,
            restored: m.before,
            pid: m.pid,
            problem,
        });
    }
    done
}

fn write_both(netns: Option<&str>, acct: bool, ts: bool) -> io::Result<()> {
    plumb_os::netns::on_thread(netns, || {
        std::fs::write(ACCT, if acct { "1" } else { "0" })?;
        std::fs::write(TIMESTAMP, if ts { "1" } else { "0" })
    })
}

/// Puts the settings back when dropped, then removes the marker.
#[derive(Debug)]
pub struct Restore {
    netns: Option<String>,
    before: Accounting,
    marker: Option<PathBuf>,
}

impl Restore {
    /// What was set before [`Accounting::enable`].
    pub fn before(&self) -> Accounting {
        self.before
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        let put_back = write_both(
            self.netns.as_deref(),
            self.before.bytes_and_packets,
            self.before.timestamps,
        );
        // Kept when the write failed: the next start tries again.
        if put_back.is_ok()
            && let Some(m) = &self.marker
        {
            let _ = std::fs::remove_file(m);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_reads_back_and_refuses_garbage() {
        let m = Marker {
            netns: Some("plumb-x".into()),
            inode: 4026532000,
            pid: 42,
            before: Accounting {
                bytes_and_packets: false,
                timestamps: true,
            },
        };
        assert_eq!(Marker::parse(&m.to_text()), Some(m));
        assert_eq!(
            Marker::parse("netns=\ninode=1\npid=2\nacct=2\ntimestamp=0\n"),
            None
        );
        assert_eq!(Marker::parse(""), None);
        assert_eq!(
            marker_path(Path::new("/d"), Some("../x y"), 7),
            PathBuf::from("/d/netns-.._x_y-7")
        );
    }
}
