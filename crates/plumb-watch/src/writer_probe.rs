//! The writer of an nftables change, named when it *sends* its batch.
//!
//! NEWGEN, which names the writer in [`crate::nft_events`], comes after every
//! notification of a transaction: ~130 ms late for a 10k-service revert. This probe
//! reports the send itself. An eBPF program (`bpf/writer.bpf.c`, built by build.rs
//! with clang) on `tp_btf/sys_enter` looks at every `sendmsg` (the syscall
//! iptables-nft and nft send their nfnetlink batch with; dumps such as
//! iptables-save use `sendto`/`recvmsg`) and reports those on an AF_NETLINK /
//! NETLINK_NETFILTER socket of the watched network namespace (the socket's
//! namespace, which is where the kernel applies the batch, whatever namespace the
//! sending thread is in), with the type of the first netlink message, to a ring
//! buffer. For every other syscall the program is one compare, on top of what an
//! attached sys_enter tracepoint costs the kernel (together ~60 ns here, below).
//!
//! Needs: a kernel with BTF (`/sys/kernel/btf/vmlinux`) and tp_btf (5.5+),
//! CAP_BPF + CAP_PERFMON (or root), and a build where clang and libbpf's headers were
//! present (else the crate is built with `plumb_no_bpf` and [`WriterProbe::attach`]
//! returns [`ProbeError::NotBuilt`]). Read-only: the probe observes, it changes
//! nothing. Detached when the [`WriterProbe`] is dropped.
//!
//! Observed (Linux 6.18, iptables 1.8.9, nftables 1.0.6): iptables-nft and nft send
//! every batch with one `sendmsg` whose first message is NFNL_MSG_BATCH_BEGIN, and
//! their requests and dumps (iptables-nft-save, `nft list`) with `sendto`, so dumps
//! are not reported at all. Cost (examples/bpf_overhead.rs, minimum of 21 rounds on
//! a shared 2-core VM): +56..60 ns per syscall of any kind (the sys_enter
//! tracepoint being on plus the compare), +204..213 ns per unrelated `sendmsg`.
//!
//! TODO: a writer that sends its batch with `sendto`, `sendmmsg` or `write` is not
//! seen (libmnl's `mnl_socket_sendto` can send a batch; the NEWGEN path still names
//! it, later). Reports that do not fit in the ring buffer (256 KiB, ~5000 reports)
//! are dropped without a count. aarch64 compiles but is untested.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

/// `NFNL_MSG_BATCH_BEGIN`: the first message of an nfnetlink batch.
pub const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;

/// Where the running kernel's BTF is read from.
pub const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";

/// One `sendmsg` on a netfilter netlink socket of the watched namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchSend {
    /// Process id (tgid) of the sender.
    pub pid: u32,
    /// Thread id of the sender.
    pub tid: u32,
    /// The sender's comm (thread name, at most 15 bytes).
    pub comm: String,
    /// When the send began, CLOCK_MONOTONIC nanoseconds (`bpf_ktime_get_ns`).
    pub monotonic_ns: u64,
    /// The first message is NFNL_MSG_BATCH_BEGIN: a transaction (a change), not a
    /// request such as a dump or a lookup.
    pub batch: bool,
    /// Type of the first netlink message of the first iovec, when it could be read.
    pub first_nlmsg_type: Option<u16>,
    /// Reports the ring buffer dropped (it was full) since the probe was loaded,
    /// before this one; wraps at 2^32.
    pub dropped_before: u32,
}

/// Why the probe could not be attached or read.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(
        "plumb was built without the eBPF writer probe (clang or libbpf-dev were missing at build time)"
    )]
    /// This build has no probe program (clang or libbpf headers were missing).
    NotBuilt,
    /// The kernel's BTF (`/sys/kernel/btf/vmlinux`) could not be read; the text says why.
    #[error("no kernel BTF at {KERNEL_BTF} (the kernel needs CONFIG_DEBUG_INFO_BTF): {0}")]
    NoBtf(String),
    /// The program reads syscall arguments by this architecture's register layout,
    /// which it does not know (the architecture's name).
    #[error("the eBPF writer probe is not supported on {0}")]
    UnsupportedArch(&'static str),
    /// The helper process that loads the program ([`crate::probe_handoff`]) failed.
    #[error("the eBPF writer probe's loader process: {0}")]
    Helper(String),
    /// The kernel refused to load or attach the program, or to create its map.
    #[error(transparent)]
    Kernel(plumb_os::bpf_error::Refusal),
}

impl ProbeError {
    /// The probe cannot run here at all (not built, no BTF, no permission, a kernel
    /// without tp_btf): callers fall back to NEWGEN. Other errors are bugs.
    pub fn unavailable(&self) -> bool {
        match self {
            ProbeError::NotBuilt | ProbeError::NoBtf(_) | ProbeError::UnsupportedArch(_) => true,
            ProbeError::Helper(_) => false,
            ProbeError::Kernel(r) => matches!(
                r.errno,
                Some(libc::EPERM | libc::EACCES | libc::ENOSYS | libc::EOPNOTSUPP)
            ),
        }
    }
}

#[cfg(not(plumb_no_bpf))]
fn kernel_error(stage: &'static str, e: &(dyn std::error::Error + 'static)) -> ProbeError {
    ProbeError::Kernel(plumb_os::bpf_error::Refusal::from_error(
        stage,
        "sys_enter",
        e,
    ))
}

/// Inode of the network namespace `/run/netns/NAME` (or a path): what
/// [`WriterProbe::attach`] takes.
pub fn netns_inode_by_name(name: &str) -> io::Result<u64> {
    plumb_os::netns::inode_of(name)
}

/// Inode of this process's network namespace (`/proc/self/ns/net`).
pub fn current_netns_inode() -> io::Result<u64> {
    plumb_os::netns::inode(std::path::Path::new("/proc/self/ns/net"))
}

#[cfg_attr(plumb_no_bpf, allow(dead_code))]
/// Decodes one ring buffer record (`struct batch_send` in writer.bpf.c: u64 ktime,
/// u32 tgid, u32 tid, char comm[16], u16 type, u16 type_valid, u32 dropped).
fn decode(raw: &[u8]) -> Option<BatchSend> {
    if raw.len() < 40 {
        return None;
    }
    let u64_at = |i: usize| u64::from_ne_bytes(raw[i..i + 8].try_into().unwrap());
    let u32_at = |i: usize| u32::from_ne_bytes(raw[i..i + 4].try_into().unwrap());
    let u16_at = |i: usize| u16::from_ne_bytes(raw[i..i + 2].try_into().unwrap());
    let comm = &raw[16..32];
    let comm = &comm[..comm.iter().position(|&b| b == 0).unwrap_or(comm.len())];
    let first_nlmsg_type = (u16_at(34) != 0).then(|| u16_at(32));
    Some(BatchSend {
        monotonic_ns: u64_at(0),
        pid: u32_at(8),
        tid: u32_at(12),
        comm: String::from_utf8_lossy(comm).into_owned(),
        batch: first_nlmsg_type == Some(NFNL_MSG_BATCH_BEGIN),
        first_nlmsg_type,
        dropped_before: u32_at(36),
    })
}

/// The attached probe for one network namespace. Dropping it detaches the program.
pub struct WriterProbe {
    #[cfg(not(plumb_no_bpf))]
    ring: aya::maps::RingBuf<aya::maps::MapData>,
    // Owns the program's attachment: dropped after `ring`, detaching it.
    #[cfg(not(plumb_no_bpf))]
    _attached: Attached,
    netns_inode: u64,
}

/// What keeps the program attached.
#[cfg(not(plumb_no_bpf))]
enum Attached {
    /// Loaded and attached in this process (aya owns program and link).
    Here(#[allow(dead_code)] aya::Ebpf),
    /// Loaded by a helper process ([`crate::probe_handoff`]), attached here: the
    /// raw tracepoint link.
    Link(#[allow(dead_code)] std::os::fd::OwnedFd),
}

impl std::fmt::Debug for WriterProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriterProbe")
            .field("netns_inode", &self.netns_inode)
            .finish_non_exhaustive()
    }
}

#[cfg(not(plumb_no_bpf))]
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/writer.bpf.o"));

impl WriterProbe {
    /// Loads and attaches, in this process, the probe for sends on netfilter netlink
    /// sockets of the network namespace with inode `netns_inode` (see
    /// [`netns_inode_by_name`], [`current_netns_inode`]). Loading parses the kernel's
    /// BTF: ~40 MB of memory for a moment ([`crate::probe_handoff`] keeps that out of
    /// a long-running process).
    #[cfg(not(plumb_no_bpf))]
    pub fn attach(netns_inode: u64) -> Result<WriterProbe, ProbeError> {
        let mut ebpf = load(netns_inode)?;
        program_of(&mut ebpf)?
            .attach()
            .map_err(|e| kernel_error("attach", &e))?;
        let map = ebpf.take_map("events").ok_or_else(no_ring)?;
        let ring = aya::maps::RingBuf::try_from(map).map_err(|e| kernel_error("map", &e))?;
        Ok(WriterProbe {
            ring,
            _attached: Attached::Here(ebpf),
            netns_inode,
        })
    }

    /// Loads the program without attaching it, for another process: the program's
    /// and the ring buffer's file descriptors (duplicates that outlive aya's handles).
    #[cfg(not(plumb_no_bpf))]
    pub fn load_detached(
        netns_inode: u64,
    ) -> Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd), ProbeError> {
        let mut ebpf = load(netns_inode)?;
        let program = program_of(&mut ebpf)?;
        let dup = |fd: BorrowedFd<'_>| {
            fd.try_clone_to_owned().map_err(|e| {
                ProbeError::Kernel(plumb_os::bpf_error::Refusal {
                    stage: "load",
                    errno: e.raw_os_error(),
                    meaning: "could not duplicate a file descriptor".into(),
                    detail: e.to_string(),
                })
            })
        };
        let prog = dup(program.fd().map_err(|e| kernel_error("load", &e))?.as_fd())?;
        let ring = match ebpf.map("events").ok_or_else(no_ring)? {
            aya::maps::Map::RingBuf(m) => dup(m.fd().as_fd())?,
            _ => return Err(no_ring()),
        };
        Ok((prog, ring))
    }

    /// Attaches a program loaded by [`WriterProbe::load_detached`] (in another
    /// process) and reads its ring buffer.
    #[cfg(not(plumb_no_bpf))]
    pub fn attach_loaded(
        prog: std::os::fd::OwnedFd,
        ring: std::os::fd::OwnedFd,
        netns_inode: u64,
    ) -> Result<WriterProbe, ProbeError> {
        let link = raw_tracepoint_open(prog.as_fd()).map_err(|e| kernel_error("attach", &e))?;
        let data = aya::maps::MapData::from_fd(ring).map_err(|e| kernel_error("map", &e))?;
        let ring = aya::maps::RingBuf::try_from(aya::maps::Map::RingBuf(data))
            .map_err(|e| kernel_error("map", &e))?;
        Ok(WriterProbe {
            ring,
            _attached: Attached::Link(link),
            netns_inode,
        })
    }

    /// Always [`ProbeError::NotBuilt`]: this build has no probe program.
    #[cfg(plumb_no_bpf)]
    pub fn attach(netns_inode: u64) -> Result<WriterProbe, ProbeError> {
        let _ = netns_inode;
        Err(ProbeError::NotBuilt)
    }

    /// The namespace inode this probe watches.
    pub fn netns_inode(&self) -> u64 {
        self.netns_inode
    }

    /// Every report already in the ring buffer, without waiting.
    pub fn drain(&mut self) -> Vec<BatchSend> {
        #[cfg(not(plumb_no_bpf))]
        {
            let mut out = Vec::new();
            while let Some(item) = self.ring.next() {
                out.extend(decode(&item));
            }
            out
        }
        #[cfg(plumb_no_bpf)]
        Vec::new()
    }

    /// The reports in the ring buffer; when there are none, waits up to `timeout`
    /// for some. Returns an empty vector on timeout (or on a signal).
    pub fn poll(&mut self, timeout: Duration) -> Vec<BatchSend> {
        let deadline = Instant::now() + timeout;
        loop {
            let got = self.drain();
            let left = deadline.saturating_duration_since(Instant::now());
            if !got.is_empty() || left.is_zero() {
                return got;
            }
            let mut pfd = libc::pollfd {
                fd: self.as_fd().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // Round up so a sub-millisecond remainder still waits.
            let ms = left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
            // SAFETY: one valid pollfd; the fd is owned by self and open.
            let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
            if rc < 0 {
                // EINTR (or ENOMEM): report what there is, the caller polls again.
                return self.drain();
            }
        }
    }
}

/// The ring buffer's fd: readable when reports are waiting, for an event loop.
/// Opens the object, loads its maps with the watched namespace and the architecture's
/// `sendmsg` number set, and loads the program for `sys_enter` (not attached yet). The
/// kernel's BTF, parsed for this, is dropped before returning.
#[cfg(not(plumb_no_bpf))]
fn load(netns_inode: u64) -> Result<aya::Ebpf, ProbeError> {
    if !cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
        return Err(ProbeError::UnsupportedArch(std::env::consts::ARCH));
    }
    let btf = aya::Btf::from_sys_fs().map_err(|e| ProbeError::NoBtf(e.to_string()))?;
    // The architecture's number, so one C source serves x86_64 (46) and aarch64 (211).
    let sendmsg_nr: i64 = libc::SYS_sendmsg;
    let mut ebpf = aya::EbpfLoader::new()
        .btf(Some(&btf))
        .override_global("watched_netns_inum", &netns_inode, true)
        .override_global("sendmsg_nr", &sendmsg_nr, true)
        .load(OBJECT)
        .map_err(|e| kernel_error("load", &e))?;
    program_of(&mut ebpf)?
        .load("sys_enter", &btf)
        .map_err(|e| kernel_error("load", &e))?;
    Ok(ebpf)
}

#[cfg(not(plumb_no_bpf))]
fn program_of(ebpf: &mut aya::Ebpf) -> Result<&mut aya::programs::BtfTracePoint, ProbeError> {
    ebpf.program_mut("writer_sys_enter")
        .ok_or_else(|| {
            ProbeError::Kernel(plumb_os::bpf_error::Refusal::missing(
                "load",
                "program writer_sys_enter",
            ))
        })?
        .try_into()
        .map_err(|e| kernel_error("load", &e))
}

#[cfg(not(plumb_no_bpf))]
fn no_ring() -> ProbeError {
    ProbeError::Kernel(plumb_os::bpf_error::Refusal::missing(
        "map",
        "ring buffer `events`",
    ))
}

/// `bpf(BPF_RAW_TRACEPOINT_OPEN)` for a tp_btf program (its tracepoint was fixed at
/// load): the returned link keeps it attached until closed.
#[cfg(not(plumb_no_bpf))]
fn raw_tracepoint_open(prog: BorrowedFd<'_>) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    const BPF_RAW_TRACEPOINT_OPEN: libc::c_long = 17;
    // union bpf_attr's raw_tracepoint member: { u64 name; u32 prog_fd; u32 pad; u64 cookie }.
    #[repr(C)]
    struct RawTracepointAttr {
        name: u64,
        prog_fd: u32,
        pad: u32,
        cookie: u64,
    }
    let attr = RawTracepointAttr {
        name: 0,
        prog_fd: prog.as_raw_fd() as u32,
        pad: 0,
        cookie: 0,
    };
    // SAFETY: bpf() reads `size` bytes of `attr`, a live, initialised repr(C) value.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_RAW_TRACEPOINT_OPEN,
            &attr as *const RawTracepointAttr,
            std::mem::size_of::<RawTracepointAttr>() as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new file descriptor that nothing else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

impl AsFd for WriterProbe {
    fn as_fd(&self) -> BorrowedFd<'_> {
        #[cfg(not(plumb_no_bpf))]
        {
            self.ring.as_fd()
        }
        #[cfg(plumb_no_bpf)]
        {
            unreachable!("a WriterProbe cannot exist without BPF")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(tgid: u32, comm: &[u8], ty: u16, valid: u16) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend(123_456_789u64.to_ne_bytes());
        v.extend(tgid.to_ne_bytes());
        v.extend((tgid + 1).to_ne_bytes());
        let mut c = [0u8; 16];
        c[..comm.len()].copy_from_slice(comm);
        v.extend(c);
        v.extend(ty.to_ne_bytes());
        v.extend(valid.to_ne_bytes());
        v.extend(7u32.to_ne_bytes());
        v
    }

    #[test]
    fn decodes_a_batch_begin() {
        let b = decode(&raw(42, b"nft", 0x10, 1)).unwrap();
        assert_eq!(
            b,
            BatchSend {
                pid: 42,
                tid: 43,
                comm: "nft".into(),
                monotonic_ns: 123_456_789,
                batch: true,
                first_nlmsg_type: Some(0x10),
                dropped_before: 7,
            }
        );
    }

    #[test]
    fn other_or_unreadable_types_are_not_batches() {
        let b = decode(&raw(1, b"iptables-nft-sa", 0x0a01, 1)).unwrap();
        assert!(!b.batch);
        assert_eq!(b.comm, "iptables-nft-sa");
        let b = decode(&raw(1, b"x", 0x10, 0)).unwrap();
        assert_eq!((b.batch, b.first_nlmsg_type), (false, None));
        assert!(decode(&[0; 39]).is_none());
    }

    #[test]
    fn the_probe_can_move_to_another_thread() {
        fn send<T: Send>() {}
        send::<WriterProbe>();
    }

    #[test]
    fn a_full_comm_has_no_nul() {
        let b = decode(&raw(1, b"0123456789abcdef", 0, 0)).unwrap();
        assert_eq!(b.comm, "0123456789abcdef");
    }

    #[test]
    fn errors_say_what_the_errno_means() {
        let e = ProbeError::Kernel(plumb_os::bpf_error::Refusal::from_error(
            "load",
            "sys_enter",
            &io::Error::from_raw_os_error(libc::EPERM),
        ));
        assert!(e.unavailable());
        assert!(e.to_string().contains("CAP_BPF"), "{e}");
        assert!(ProbeError::NotBuilt.unavailable());
    }
}
