//! Reading the legacy x_tables (iptables-legacy, ip6tables-legacy) of this namespace
//! or another one through their getsockopt interface: `IPT_SO_GET_INFO` then
//! `IPT_SO_GET_ENTRIES` (`IP6T_SO_*` for IPv6), the calls `iptables-legacy-save`
//! makes, handed on as the kernel's bytes (the `ipt_entry` blob, the hook and
//! underflow offsets) for a pure decoder.
//!
//! Read-only, and creating nothing: `IPT_SO_GET_INFO` on a table that does not exist
//! in the namespace *creates* it (the kernel instantiates the table from its template
//! and audits `xt_register`), so only the tables listed in the namespace's
//! `/proc/net/ip_tables_names` (`ip6_tables_names`) are asked for, the list read on the
//! same thread, inside the namespace, just before. A namespace whose list is absent
//! (x_tables not loaded) or empty is read as having no tables, without a socket call.
//! Legacy tables cannot be removed while the namespace lives, so a listed name stays
//! valid. Only GET requests are made; nothing is ever set.
//!
//! Bounded: a table larger than [`MAX_TABLE_BYTES`] is refused with an error, names are
//! checked against the kernel's 32-byte limit, a table that keeps changing size while
//! it is read gives up after three tries, and a deadline is honoured between tables.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Instant;

/// Largest table read (the kernel's `size`): a 10k-service x 5-endpoint kube-proxy
/// `nat` table is about 70 MB.
pub const MAX_TABLE_BYTES: usize = 512 * 1024 * 1024;

/// `XT_TABLE_MAXNAMELEN`: names are at most 31 bytes and a NUL.
const TABLE_NAME_LEN: usize = 32;
/// Tables listed at most (the kernel has five legacy table types per family).
const MAX_TABLES: usize = 64;

/// `IPT_SO_GET_INFO` / `IP6T_SO_GET_INFO` (`IPT_BASE_CTL`, 64).
const SO_GET_INFO: libc::c_int = 64;
/// `IPT_SO_GET_ENTRIES` / `IP6T_SO_GET_ENTRIES`.
const SO_GET_ENTRIES: libc::c_int = 65;
/// `sizeof(struct ipt_getinfo)` (the same for IPv6): name[32], valid_hooks,
/// hook_entry[5], underflow[5], num_entries, size.
const GETINFO_LEN: usize = 84;
/// `sizeof(struct ipt_get_entries)` (the same for IPv6): name[32], size, padding to
/// the 8-byte alignment of the entries that follow.
const GET_ENTRIES_HEADER: usize = 40;

/// Which x_tables: `iptables-legacy` (IPv4) or `ip6tables-legacy` (IPv6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XtFamily {
    /// `ip_tables`: `/proc/net/ip_tables_names`, `SOL_IP`.
    Ipv4,
    /// `ip6_tables`: `/proc/net/ip6_tables_names`, `SOL_IPV6`.
    Ipv6,
}

impl XtFamily {
    /// The namespace's table list, relative to `/proc/thread-self/net/`.
    pub fn names_file(self) -> &'static str {
        match self {
            XtFamily::Ipv4 => "ip_tables_names",
            XtFamily::Ipv6 => "ip6_tables_names",
        }
    }
}

/// One legacy table as the kernel gives it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawTable {
    /// Table name (`filter`, `nat`, `mangle`, `raw`, `security`).
    pub name: String,
    /// Bit `h` set: hook `h` (`NF_INET_PRE_ROUTING` 0 ... `POST_ROUTING` 4) has a
    /// built-in chain.
    pub valid_hooks: u32,
    /// Offset in `entries` of each hook's first entry.
    pub hook_entry: [u32; 5],
    /// Offset in `entries` of each hook's policy entry.
    pub underflow: [u32; 5],
    /// Number of entries the kernel says the blob holds.
    pub num_entries: u32,
    /// The `ipt_entry` (`ip6t_entry`) blob, counters filled in.
    pub entries: Vec<u8>,
}

/// The table names of a `/proc/net/ip_tables_names` text, in its order: one a line,
/// each 1..=31 bytes without NUL or whitespace; anything else is an error (a name the
/// kernel would not list must never be asked for).
pub fn parse_names(text: &[u8]) -> io::Result<Vec<String>> {
    let mut names = Vec::new();
    for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let ok = line.len() < TABLE_NAME_LEN
            && line.iter().all(|&b| b.is_ascii_graphic())
            && !names.iter().any(|n: &String| n.as_bytes() == line);
        if !ok || names.len() >= MAX_TABLES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "unexpected table list entry {:?}",
                    String::from_utf8_lossy(line)
                ),
            ));
        }
        names.push(String::from_utf8_lossy(line).into_owned());
    }
    Ok(names)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u32::from_ne_bytes)
}

/// `getsockopt(fd, level, name, buf)`, giving the length the kernel wrote.
fn getsockopt(
    fd: &OwnedFd,
    level: libc::c_int,
    name: libc::c_int,
    buf: &mut [u8],
) -> io::Result<usize> {
    let mut len = libc::socklen_t::try_from(buf.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "buffer too large"))?;
    // SAFETY: `buf` is a live, writable buffer of exactly `len` bytes for the call; the
    // kernel writes at most `len` bytes and updates `len`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(len as usize)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A raw socket of the family, in the calling thread's namespace (getsockopt needs
/// `CAP_NET_RAW` to create it and `CAP_NET_ADMIN` to read tables).
fn raw_socket(family: XtFamily) -> io::Result<(OwnedFd, libc::c_int)> {
    let (domain, level) = match family {
        XtFamily::Ipv4 => (libc::AF_INET, libc::SOL_IP),
        XtFamily::Ipv6 => (libc::AF_INET6, libc::SOL_IPV6),
    };
    // SAFETY: a plain syscall; the descriptor it returns is owned right away.
    let fd = unsafe {
        libc::socket(
            domain,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::IPPROTO_RAW,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nothing else owns.
    Ok((unsafe { OwnedFd::from_raw_fd(fd) }, level))
}

fn name_field(name: &str) -> [u8; TABLE_NAME_LEN] {
    let mut f = [0u8; TABLE_NAME_LEN];
    let n = name.len().min(TABLE_NAME_LEN - 1);
    f[..n].copy_from_slice(&name.as_bytes()[..n]);
    f
}

/// `GET_INFO` then `GET_ENTRIES` of one table that the namespace lists (callers
/// guarantee it: see the module's note). Retries when the table changed size between
/// the two calls (`EAGAIN`).
fn read_listed_table(fd: &OwnedFd, level: libc::c_int, name: &str) -> io::Result<RawTable> {
    let context = |e: io::Error| io::Error::new(e.kind(), format!("table {name}: {e}"));
    for _ in 0..3 {
        let mut info = [0u8; GETINFO_LEN];
        info[..TABLE_NAME_LEN].copy_from_slice(&name_field(name));
        let n = getsockopt(fd, level, SO_GET_INFO, &mut info).map_err(context)?;
        if n != GETINFO_LEN {
            return Err(context(io::Error::other(format!(
                "the kernel answered {n} bytes of table information, not {GETINFO_LEN}"
            ))));
        }
        let size = u32_at(&info, 80) as usize;
        if size > MAX_TABLE_BYTES {
            return Err(context(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{size} bytes, more than the {MAX_TABLE_BYTES} plumb reads"),
            )));
        }
        let mut table = RawTable {
            name: name.to_string(),
            valid_hooks: u32_at(&info, 32),
            num_entries: u32_at(&info, 76),
            ..RawTable::default()
        };
        for h in 0..5 {
            table.hook_entry[h] = u32_at(&info, 36 + 4 * h);
            table.underflow[h] = u32_at(&info, 56 + 4 * h);
        }
        let mut buf = vec![0u8; GET_ENTRIES_HEADER + size];
        buf[..TABLE_NAME_LEN].copy_from_slice(&name_field(name));
        buf[32..36].copy_from_slice(&(size as u32).to_ne_bytes());
        match getsockopt(fd, level, SO_GET_ENTRIES, &mut buf) {
            // The table changed size since GET_INFO: ask again.
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => continue,
            Err(e) => return Err(context(e)),
            Ok(n) if n != buf.len() => {
                return Err(context(io::Error::other(format!(
                    "the kernel answered {n} bytes of entries, not {}",
                    buf.len()
                ))));
            }
            Ok(_) => {}
        }
        buf.drain(..GET_ENTRIES_HEADER);
        table.entries = buf;
        return Ok(table);
    }
    Err(context(io::Error::new(
        io::ErrorKind::Interrupted,
        "the table kept changing while it was read",
    )))
}

/// The legacy tables of `family` in this namespace or in `netns`, in the order the
/// namespace lists them (`iptables-legacy-save`'s order). Only listed tables are
/// asked for (see the module's note): none is created and no module is loaded.
/// `deadline` passed: `io::ErrorKind::TimedOut`.
pub fn read_tables(
    netns: Option<&str>,
    family: XtFamily,
    deadline: Option<Instant>,
) -> io::Result<Vec<RawTable>> {
    crate::netns::on_thread(netns, || {
        // thread-self: this thread's namespace (/proc/net is the process's).
        let list = format!("/proc/thread-self/net/{}", family.names_file());
        let names = match std::fs::read(&list) {
            Ok(text) => {
                parse_names(&text).map_err(|e| io::Error::new(e.kind(), format!("{list}: {e}")))?
            }
            // x_tables of this family not loaded: no table, and none to create.
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io::Error::new(e.kind(), format!("{list}: {e}"))),
        };
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let (fd, level) = raw_socket(family)?;
        let mut tables = Vec::with_capacity(names.len());
        for name in &names {
            if deadline.is_some_and(|d| Instant::now() > d) {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the deadline passed before every table was read",
                ));
            }
            tables.push(read_listed_table(&fd, level, name)?);
        }
        Ok(tables)
    })
}

/// Test support: `GET_INFO` on any name, listed or not — exactly what
/// [`read_tables`] never does. Used by the test that shows the kernel creates an
/// unlisted table when asked, so that the guard is known to matter.
#[doc(hidden)]
pub fn unguarded_info_for_tests(netns: &str, family: XtFamily, name: &str) -> io::Result<()> {
    crate::netns::on_thread(Some(netns), || {
        let (fd, level) = raw_socket(family)?;
        let mut info = [0u8; GETINFO_LEN];
        info[..TABLE_NAME_LEN].copy_from_slice(&name_field(name));
        getsockopt(&fd, level, SO_GET_INFO, &mut info).map(|_| ())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netns::Netns;
    use proptest::prelude::*;

    #[test]
    fn table_lists_are_read_strictly() {
        assert_eq!(
            parse_names(b"filter\nnat\n").unwrap(),
            ["filter", "nat"].map(String::from)
        );
        assert!(parse_names(b"").unwrap().is_empty());
        for bad in [
            &b"fil ter\n"[..],
            b"filter\nfilter\n",
            b"a\0b\n",
            &[b'x'; 32][..],
        ] {
            assert!(parse_names(bad).is_err(), "{bad:?}");
        }
    }

    proptest! {
        /// Any bytes: a list or an error, never a panic, never a name the kernel
        /// could not have listed.
        #[test]
        fn any_table_list_is_safe(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(names) = parse_names(&bytes) {
                for n in names {
                    prop_assert!(!n.is_empty() && n.len() < TABLE_NAME_LEN);
                    prop_assert!(n.bytes().all(|b| b.is_ascii_graphic()));
                }
            }
        }
    }

    fn names_in(ns: &Netns, file: &str) -> String {
        let (_, out, _) = ns
            .exec("cat", &[&format!("/proc/net/{file}")], None)
            .expect("cat");
        out
    }

    /// Privileged: a namespace holding only the legacy `filter` table is read (its
    /// three built-in chains, the rule), and afterwards it still lists `filter` alone
    /// for IPv4 and nothing for IPv6: reading created no table. The control: the
    /// unguarded `GET_INFO` on `nat` in another namespace does create `nat`, so the
    /// kernel here has the trap the guard avoids.
    #[test]
    fn reading_creates_no_table() {
        if !plumb_testkit::privileged(&["iptables-legacy-restore", "ip"]) {
            return;
        }
        let ns = Netns::create("plumb-legacy-os").expect("netns");
        let (ok, _, err) = ns
            .exec(
                "iptables-legacy-restore",
                &[],
                Some("*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A INPUT -p tcp -j ACCEPT\nCOMMIT\n"),
            )
            .expect("restore");
        assert!(ok, "{err}");
        let before = (
            names_in(&ns, "ip_tables_names"),
            names_in(&ns, "ip6_tables_names"),
        );
        assert_eq!(before.0, "filter\n");
        let v4 = read_tables(Some(ns.name()), XtFamily::Ipv4, None).expect("read");
        let v6 = read_tables(Some(ns.name()), XtFamily::Ipv6, None).expect("read v6");
        assert_eq!(v4.len(), 1);
        assert!(v6.is_empty(), "{v6:?}");
        let t = &v4[0];
        assert_eq!(t.name, "filter");
        // LOCAL_IN, FORWARD, LOCAL_OUT.
        assert_eq!(t.valid_hooks, 0b01110);
        // The rule, three policies, the closing ERROR entry.
        assert_eq!(t.num_entries, 5);
        assert!(t.entries.len() >= 5 * 112);
        let after = (
            names_in(&ns, "ip_tables_names"),
            names_in(&ns, "ip6_tables_names"),
        );
        assert_eq!(before, after, "reading created a table");

        // Control: the call the guard avoids creates the table.
        let other = Netns::create("plumb-legacy-os").expect("netns");
        let (ok, _, err) = other
            .exec("iptables-legacy-restore", &[], Some("*filter\nCOMMIT\n"))
            .expect("restore");
        assert!(ok, "{err}");
        assert!(!names_in(&other, "ip_tables_names").contains("nat"));
        unguarded_info_for_tests(other.name(), XtFamily::Ipv4, "nat").expect("info");
        assert!(
            names_in(&other, "ip_tables_names").contains("nat"),
            "GET_INFO did not create nat here: the guard cannot be shown to matter"
        );
    }

    #[test]
    fn a_passed_deadline_is_a_timeout() {
        if !plumb_testkit::privileged(&["iptables-legacy-restore", "ip"]) {
            return;
        }
        let ns = Netns::create("plumb-legacy-os").expect("netns");
        let (ok, _, err) = ns
            .exec("iptables-legacy-restore", &[], Some("*filter\nCOMMIT\n"))
            .expect("restore");
        assert!(ok, "{err}");
        let past = Instant::now() - std::time::Duration::from_secs(1);
        let e = read_tables(Some(ns.name()), XtFamily::Ipv4, Some(past)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    }
}
