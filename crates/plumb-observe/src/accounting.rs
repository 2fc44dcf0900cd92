//! Conntrack's per-connection byte/packet counters (`net.netfilter.nf_conntrack_acct`)
//! and start/stop timestamps (`net.netfilter.nf_conntrack_timestamp`), per network
//! namespace. They are read, never changed, unless the user asks
//! ([`Accounting::enable`], `plumb observe --enable-accounting`): then the previous
//! values are put back when the returned [`Restore`] is dropped.

use std::io;

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

    /// Turns both on in `netns`; the returned guard puts back what was there.
    pub fn enable(netns: Option<&str>) -> io::Result<Restore> {
        let before = Accounting::read(netns)?;
        write_both(netns, true, true)?;
        Ok(Restore {
            netns: netns.map(str::to_string),
            before,
        })
    }
}

fn write_both(netns: Option<&str>, acct: bool, ts: bool) -> io::Result<()> {
    plumb_os::netns::on_thread(netns, || {
        std::fs::write(ACCT, if acct { "1" } else { "0" })?;
        std::fs::write(TIMESTAMP, if ts { "1" } else { "0" })
    })
}

/// Puts the settings back when dropped.
#[derive(Debug)]
pub struct Restore {
    netns: Option<String>,
    before: Accounting,
}

impl Restore {
    /// What was set before [`Accounting::enable`].
    pub fn before(&self) -> Accounting {
        self.before
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = write_both(
            self.netns.as_deref(),
            self.before.bytes_and_packets,
            self.before.timestamps,
        );
    }
}
