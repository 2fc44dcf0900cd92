//! A read-only subscription to conntrack's events in one network namespace: a
//! `NETLINK_NETFILTER` socket created inside the namespace (on a short-lived thread,
//! [`plumb_os::netns::on_thread`]) and bound to the NEW and DESTROY multicast groups.
//! Nothing is ever sent to the kernel. Events need conntrack in the namespace (any NAT
//! or state rule loads it) and `net.netfilter.nf_conntrack_events` not 0 (the default
//! turns events on for listeners).

use crate::conntrack::{Flow, decode};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// Bitmask groups of the legacy `nl_groups` field: NFNLGRP_CONNTRACK_NEW (1) and
/// NFNLGRP_CONNTRACK_DESTROY (3).
const GROUPS: u32 = (1 << 0) | (1 << 2);
/// NFNLGRP_CONNTRACK_UPDATE (2).
const UPDATE_GROUP: u32 = 1 << 1;

/// A conntrack event subscription.
#[derive(Debug)]
pub struct ConntrackListener {
    fd: OwnedFd,
    buf: Vec<u8>,
}

/// What one receive gave.
#[derive(Debug, Default)]
pub struct Received {
    /// The flows decoded.
    pub flows: Vec<Flow>,
    /// The kernel dropped events because this socket's queue was full (ENOBUFS):
    /// some flows are missing.
    pub lost: bool,
}

impl ConntrackListener {
    /// Subscribes to NEW and DESTROY events in `netns` (this machine's namespace when
    /// None). Needs CAP_NET_ADMIN.
    pub fn open(netns: Option<&str>) -> io::Result<ConntrackListener> {
        ConntrackListener::open_with(netns, false)
    }

    /// Like [`ConntrackListener::open`]; with `updates`, UPDATE events too (state
    /// changes of known connections: many more events).
    pub fn open_with(netns: Option<&str>, updates: bool) -> io::Result<ConntrackListener> {
        let fd = plumb_os::netns::on_thread(netns, || {
            // SAFETY: socket() has no memory preconditions; a non-negative result is a
            // new descriptor that OwnedFd then owns.
            let raw = unsafe {
                libc::socket(
                    libc::AF_NETLINK,
                    libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                    libc::NETLINK_NETFILTER,
                )
            };
            if raw < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: as above.
            Ok(unsafe { OwnedFd::from_raw_fd(raw) })
        })?;
        // SAFETY: sockaddr_nl is plain data; zeroed is a valid value to fill in.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        addr.nl_groups = if updates {
            GROUPS | UPDATE_GROUP
        } else {
            GROUPS
        };
        // SAFETY: a valid sockaddr_nl of the size given, for an open socket.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&raw const addr).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        let l = ConntrackListener {
            fd,
            buf: vec![0; 64 * 1024],
        };
        // A bigger queue in the kernel (4 MiB, as allowed by rmem_max or, with
        // CAP_NET_ADMIN, beyond it): bursts of events wait there instead of being lost.
        let size: libc::c_int = 4 << 20;
        for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
            // SAFETY: a valid int for a socket option on an open socket.
            let rc = unsafe {
                libc::setsockopt(
                    l.fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    opt,
                    (&raw const size).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if rc == 0 {
                break;
            }
        }
        l.set_timeout(Duration::from_millis(200))?;
        Ok(l)
    }

    fn set_timeout(&self, t: Duration) -> io::Result<()> {
        let tv = libc::timeval {
            tv_sec: t.as_secs() as libc::time_t,
            tv_usec: t.subsec_micros() as libc::suseconds_t,
        };
        // SAFETY: a valid timeval for SO_RCVTIMEO on an open socket.
        let rc = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&raw const tv).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits up to 200 ms for one datagram and decodes its events.
    pub fn receive(&mut self) -> io::Result<Received> {
        self.receive_batch(1)
    }

    /// Waits up to 200 ms for a datagram, then takes up to `max` datagrams in all
    /// without waiting more, and decodes their events. Under load, a caller that
    /// pauses a few milliseconds between batches pays one wakeup per batch instead of
    /// one per event (the kernel queue holds thousands of events meanwhile).
    pub fn receive_batch(&mut self, max: usize) -> io::Result<Received> {
        let mut r = Received::default();
        for i in 0..max.max(1) {
            let flags = if i == 0 { 0 } else { libc::MSG_DONTWAIT };
            // SAFETY: the buffer is valid for its length.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    flags,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EAGAIN) | Some(libc::EINTR) => break,
                    // The queue overflowed: events are missing; what is queued now is
                    // still readable.
                    Some(libc::ENOBUFS) => {
                        r.lost = true;
                        continue;
                    }
                    _ if i > 0 => break,
                    _ => return Err(e),
                }
            }
            let data = &self.buf[..n as usize];
            r.flows
                .extend(plumb_os::netlink::messages(data).filter_map(|m| decode(&m)));
        }
        Ok(r)
    }
}
