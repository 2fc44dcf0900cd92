//! Packets the kernel drops in one network namespace, with the kernel's reason.
//!
//! An eBPF program (`bpf/drops.bpf.c`, built by build.rs with clang through
//! `build-support/bpf_clang.rs`) on `tp_btf/kfree_skb` — tracepoint skb:kfree_skb in
//! its BTF form, so no tracefs is needed — reports each drop to a 4 MiB ring buffer:
//! addresses, ports (or ICMP type and code), protocol, reason, interface, namespace
//! inode. The kernel side filters first, so volume stays bounded by what was asked:
//! frees that are not drops (`NOT_DROPPED_YET`, `CONSUMED`, `NOT_SPECIFIED`, by name
//! from the running kernel's BTF, see [`crate::reasons`]) unless `all_reasons`, and
//! packets of other namespaces. Drops the ring buffer has no room for are counted per
//! CPU and read back ([`DropProbe::counters`]): lost events are said, never hidden.
//!
//! Needs: a kernel with BTF and drop reasons (5.17+), CAP_BPF + CAP_PERFMON (or root),
//! and a build where clang and libbpf's headers were present (else the crate is built
//! with `plumb_no_bpf` and [`DropProbe::attach`] returns [`DropError::NotBuilt`]).
//! Read-only: the program observes; it is detached when the [`DropProbe`] is dropped.

use crate::reasons::DropReasons;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

/// One dropped packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DroppedPacket {
    /// When the kernel dropped it, CLOCK_MONOTONIC nanoseconds.
    pub monotonic_ns: u64,
    /// The kernel function that dropped it (an address; `/proc/kallsyms` names it).
    pub location: u64,
    /// Inode of the packet's network namespace.
    pub netns_inode: u32,
    /// The kernel's reason, as a number of this kernel's `enum skb_drop_reason`.
    pub reason: u32,
    /// Index of the packet's device (0 when it had none yet).
    pub ifindex: u32,
    /// Source and destination, when the packet is IPv4 or IPv6.
    pub addresses: Option<(IpAddr, IpAddr)>,
    /// IP protocol number (0 when not IP).
    pub protocol: u8,
    /// Source and destination port (TCP, UDP, SCTP).
    pub ports: Option<(u16, u16)>,
    /// ICMP or ICMPv6 type and code.
    pub icmp: Option<(u8, u8)>,
}

/// Size of one ring buffer record (`struct drop_event` in drops.bpf.c).
pub const RECORD_SIZE: usize = 72;

const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;

/// Decodes one ring buffer record; None when it is too short.
pub fn decode(raw: &[u8]) -> Option<DroppedPacket> {
    if raw.len() < RECORD_SIZE {
        return None;
    }
    let u64_at = |i: usize| u64::from_ne_bytes(raw[i..i + 8].try_into().unwrap());
    let u32_at = |i: usize| u32::from_ne_bytes(raw[i..i + 4].try_into().unwrap());
    let u16_at = |i: usize| u16::from_ne_bytes(raw[i..i + 2].try_into().unwrap());
    let l3 = u16_at(28);
    let protocol = raw[30];
    let has_ports = raw[31];
    let (s, d) = (&raw[36..52], &raw[52..68]);
    let addresses = match l3 {
        ETH_P_IP => Some((
            IpAddr::V4(Ipv4Addr::new(s[0], s[1], s[2], s[3])),
            IpAddr::V4(Ipv4Addr::new(d[0], d[1], d[2], d[3])),
        )),
        ETH_P_IPV6 => Some((
            IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(s).unwrap())),
            IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(d).unwrap())),
        )),
        _ => None,
    };
    let be = |i: usize| u16::from_be_bytes([raw[i], raw[i + 1]]);
    Some(DroppedPacket {
        monotonic_ns: u64_at(0),
        location: u64_at(8),
        netns_inode: u32_at(16),
        reason: u32_at(20),
        ifindex: u32_at(24),
        addresses,
        protocol: if addresses.is_some() { protocol } else { 0 },
        ports: (has_ports == 1).then(|| (be(32), be(34))),
        icmp: (has_ports == 2).then(|| (raw[32], raw[33])),
    })
}

/// Turns the program's CLOCK_MONOTONIC times into wall-clock times.
#[derive(Clone, Copy, Debug)]
pub struct WallClock {
    /// Realtime minus monotonic, in nanoseconds.
    offset_ns: i128,
}

impl WallClock {
    /// The offset between the two clocks, now.
    #[allow(clippy::new_without_default)]
    pub fn new() -> WallClock {
        let ts = |id| {
            let mut t = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: a valid timespec for clock_gettime to fill.
            unsafe { libc::clock_gettime(id, &mut t) };
            i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec)
        };
        WallClock {
            offset_ns: ts(libc::CLOCK_REALTIME) - ts(libc::CLOCK_MONOTONIC),
        }
    }
    /// CLOCK_MONOTONIC now, in nanoseconds: the clock of [`DroppedPacket::monotonic_ns`].
    pub fn monotonic_now_ns() -> u64 {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid timespec for clock_gettime to fill.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
        (t.tv_sec as u64).saturating_mul(1_000_000_000) + t.tv_nsec as u64
    }

    /// The wall-clock time of a CLOCK_MONOTONIC time.
    pub fn wall(&self, monotonic_ns: u64) -> std::time::SystemTime {
        let ns = (i128::from(monotonic_ns) + self.offset_ns).max(0) as u128;
        std::time::SystemTime::UNIX_EPOCH + Duration::from_nanos(ns.min(u64::MAX as u128) as u64)
    }
}

/// Why the drop probe could not be attached.
#[derive(Debug, thiserror::Error)]
pub enum DropError {
    /// This build has no drop program (clang or libbpf headers were missing).
    #[error(
        "plumb was built without the eBPF drop program (clang or libbpf-dev were missing at build time)"
    )]
    NotBuilt,
    /// The kernel's BTF could not be read or holds no drop reasons; the text says why.
    #[error("no drop reasons from the kernel's BTF ({path}): {0}", path = crate::reasons::KERNEL_BTF)]
    NoReasons(String),
    /// The kernel refused to load or attach the program, or to create its maps.
    #[error(transparent)]
    Kernel(plumb_os::bpf_error::Refusal),
}

impl DropError {
    /// Drops cannot be observed here at all (not built, no BTF, not permitted, a kernel
    /// without tp_btf or the tracepoint): callers report flows only. Other errors are bugs.
    pub fn unavailable(&self) -> bool {
        match self {
            DropError::NotBuilt | DropError::NoReasons(_) => true,
            DropError::Kernel(r) => matches!(
                r.errno,
                Some(
                    libc::EPERM
                        | libc::EACCES
                        | libc::ENOSYS
                        | libc::EOPNOTSUPP
                        | libc::ENOENT
                        | libc::EINVAL
                )
            ),
        }
    }
}

#[cfg(not(plumb_no_bpf))]
fn kernel_error(stage: &'static str, e: &(dyn std::error::Error + 'static)) -> DropError {
    DropError::Kernel(plumb_os::bpf_error::Refusal::from_error(
        stage,
        "kfree_skb",
        e,
    ))
}

/// Counters of the program since it was attached, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DropCounters {
    /// Drops put in the ring buffer.
    pub reported: u64,
    /// Drops the ring buffer had no room for (lost).
    pub lost: u64,
    /// Drops of the watched namespace that [`DropFilter::only`] left out in the kernel.
    pub filtered: u64,
}

/// What the probe watches.
#[derive(Clone, Debug, Default)]
pub struct DropFilter {
    /// Inode of the watched network namespace; 0 watches every namespace.
    pub netns_inode: u64,
    /// Report the frees that are not drops too (`CONSUMED`, `NOT_SPECIFIED`).
    pub all_reasons: bool,
    /// Only the drops that match (`--reason`, `--protocol`, `--port`, `--ip`): applied
    /// in the kernel, so the others never reach user space.
    pub only: DropMatch,
}

/// Which drops are wanted: each list that is not empty must be matched by one of its
/// items (an address or port on either side). Empty lists match everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DropMatch {
    /// Drop reasons (numbers of this kernel's `enum skb_drop_reason`).
    pub reasons: Vec<u32>,
    /// IP protocol numbers.
    pub protocols: Vec<u8>,
    /// Ports, source or destination (TCP, UDP, SCTP).
    pub ports: Vec<u16>,
    /// Addresses, source or destination.
    pub ips: Vec<IpAddr>,
}

/// Slots of each list in the kernel program (`FILTER_*` in drops.bpf.c). A longer list
/// is applied in user space only ([`DropMatch::matches`]).
const KERNEL_REASONS: usize = 8;
const KERNEL_PROTOCOLS: usize = 4;
const KERNEL_PORTS: usize = 8;
const KERNEL_IPS: usize = 4;

impl DropMatch {
    /// Whether `d` passes: the same test the kernel program makes.
    pub fn matches(&self, d: &DroppedPacket) -> bool {
        if !self.reasons.is_empty() && !self.reasons.contains(&d.reason) {
            return false;
        }
        if !self.protocols.is_empty() && !self.protocols.contains(&d.protocol) {
            return false;
        }
        if !self.ports.is_empty()
            && !d
                .ports
                .is_some_and(|(s, t)| self.ports.iter().any(|p| *p == s || *p == t))
        {
            return false;
        }
        if !self.ips.is_empty()
            && !d
                .addresses
                .is_some_and(|(s, t)| self.ips.iter().any(|ip| *ip == s || *ip == t))
        {
            return false;
        }
        true
    }

    /// Whether every drop matches (no list set).
    pub fn is_everything(&self) -> bool {
        *self == DropMatch::default()
    }
}

/// The kernel program's filter globals for `m`: a list longer than its slots is left
/// off (count 0) and applied in user space only.
#[cfg_attr(plumb_no_bpf, allow(dead_code))]
struct KernelMatch {
    n_reasons: u32,
    reasons: [u32; KERNEL_REASONS],
    n_protocols: u32,
    protocols: [u8; KERNEL_PROTOCOLS],
    n_ports: u32,
    ports: [u16; KERNEL_PORTS],
    n_ips: u32,
    ip_l3: [u16; KERNEL_IPS],
    ips: [[u8; 16]; KERNEL_IPS],
}

#[cfg_attr(plumb_no_bpf, allow(dead_code))]
impl KernelMatch {
    fn of(m: &DropMatch) -> KernelMatch {
        fn fill<T: Copy, const N: usize>(items: &[T], zero: T) -> (u32, [T; N]) {
            let mut a = [zero; N];
            if items.len() > N {
                return (0, a);
            }
            a[..items.len()].copy_from_slice(items);
            (items.len() as u32, a)
        }
        let (n_reasons, reasons) = fill(&m.reasons, 0);
        let (n_protocols, protocols) = fill(&m.protocols, 0);
        let (n_ports, ports) = fill(&m.ports, 0);
        let (mut n_ips, mut ip_l3, mut ips) = (0, [0u16; KERNEL_IPS], [[0u8; 16]; KERNEL_IPS]);
        if m.ips.len() <= KERNEL_IPS {
            for (i, ip) in m.ips.iter().enumerate() {
                match ip {
                    IpAddr::V4(v4) => {
                        ip_l3[i] = ETH_P_IP;
                        ips[i][..4].copy_from_slice(&v4.octets());
                    }
                    IpAddr::V6(v6) => {
                        ip_l3[i] = ETH_P_IPV6;
                        ips[i] = v6.octets();
                    }
                }
            }
            n_ips = m.ips.len() as u32;
        }
        KernelMatch {
            n_reasons,
            reasons,
            n_protocols,
            protocols,
            n_ports,
            ports,
            n_ips,
            ip_l3,
            ips,
        }
    }
}

/// The attached drop program. Dropping it detaches the program.
pub struct DropProbe {
    #[cfg(not(plumb_no_bpf))]
    ring: aya::maps::RingBuf<aya::maps::MapData>,
    #[cfg(not(plumb_no_bpf))]
    counters: aya::maps::PerCpuArray<aya::maps::MapData, u64>,
    // Owns the program and its link: dropped last, detaching it.
    #[cfg(not(plumb_no_bpf))]
    _ebpf: aya::Ebpf,
    reasons: DropReasons,
}

impl std::fmt::Debug for DropProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DropProbe").finish_non_exhaustive()
    }
}

#[cfg(not(plumb_no_bpf))]
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/drops.bpf.o"));

/// The compiled program (empty in a build without it): for the reproducibility test.
pub fn object() -> &'static [u8] {
    #[cfg(not(plumb_no_bpf))]
    {
        OBJECT
    }
    #[cfg(plumb_no_bpf)]
    {
        &[]
    }
}

/// The running kernel's drop reasons, from its BTF.
pub fn kernel_reasons() -> Result<DropReasons, DropError> {
    let btf = std::fs::read(crate::reasons::KERNEL_BTF)
        .map_err(|e| DropError::NoReasons(e.to_string()))?;
    DropReasons::from_btf(&btf).map_err(|e| DropError::NoReasons(e.to_string()))
}

impl DropProbe {
    /// Loads and attaches the program for `filter`. Loading parses the kernel's BTF.
    #[cfg(not(plumb_no_bpf))]
    pub fn attach(filter: &DropFilter) -> Result<DropProbe, DropError> {
        let reasons = kernel_reasons()?;
        let skip: Vec<u32> = if filter.all_reasons {
            Vec::new()
        } else {
            reasons.not_drops()
        };
        let skip_at = |i: usize| skip.get(i).copied().unwrap_or(u32::MAX);
        let btf = aya::Btf::from_sys_fs().map_err(|e| DropError::NoReasons(e.to_string()))?;
        let (s1, s2, s3) = (skip_at(0), skip_at(1), skip_at(2));
        let k = KernelMatch::of(&filter.only);
        let mut ebpf = aya::EbpfLoader::new()
            .btf(Some(&btf))
            .override_global("watched_netns_inum", &filter.netns_inode, true)
            .override_global("skip_reason_1", &s1, true)
            .override_global("skip_reason_2", &s2, true)
            .override_global("skip_reason_3", &s3, true)
            .override_global("n_filter_reasons", &k.n_reasons, true)
            .override_global("filter_reasons", &k.reasons, true)
            .override_global("n_filter_protocols", &k.n_protocols, true)
            .override_global("filter_protocols", &k.protocols, true)
            .override_global("n_filter_ports", &k.n_ports, true)
            .override_global("filter_ports", &k.ports, true)
            .override_global("n_filter_ips", &k.n_ips, true)
            .override_global("filter_ip_l3", &k.ip_l3, true)
            .override_global("filter_ips", &k.ips, true)
            .load(OBJECT)
            .map_err(|e| kernel_error("load", &e))?;
        let program: &mut aya::programs::BtfTracePoint = ebpf
            .program_mut("plumb_kfree_skb")
            .ok_or_else(|| {
                DropError::Kernel(plumb_os::bpf_error::Refusal::missing(
                    "load",
                    "program plumb_kfree_skb",
                ))
            })?
            .try_into()
            .map_err(|e| kernel_error("load", &e))?;
        program
            .load("kfree_skb", &btf)
            .map_err(|e| kernel_error("load", &e))?;
        program.attach().map_err(|e| kernel_error("attach", &e))?;
        let missing =
            |what: &str| DropError::Kernel(plumb_os::bpf_error::Refusal::missing("map", what));
        let ring = ebpf
            .take_map("events")
            .ok_or_else(|| missing("ring buffer `events`"))?;
        let ring = aya::maps::RingBuf::try_from(ring).map_err(|e| kernel_error("map", &e))?;
        let counters = ebpf
            .take_map("counters")
            .ok_or_else(|| missing("map `counters`"))?;
        let counters =
            aya::maps::PerCpuArray::try_from(counters).map_err(|e| kernel_error("map", &e))?;
        Ok(DropProbe {
            ring,
            counters,
            _ebpf: ebpf,
            reasons,
        })
    }

    /// Always [`DropError::NotBuilt`]: this build has no drop program.
    #[cfg(plumb_no_bpf)]
    pub fn attach(filter: &DropFilter) -> Result<DropProbe, DropError> {
        let _ = filter;
        Err(DropError::NotBuilt)
    }

    /// The running kernel's reason names.
    pub fn reasons(&self) -> &DropReasons {
        &self.reasons
    }

    /// Calls `on` for every drop already in the ring buffer, without waiting; returns
    /// how many there were. Records that do not decode are skipped.
    pub fn drain(&mut self, on: &mut dyn FnMut(DroppedPacket)) -> usize {
        #[cfg(not(plumb_no_bpf))]
        {
            let mut n = 0;
            while let Some(item) = self.ring.next() {
                n += 1;
                if let Some(d) = decode(&item) {
                    on(d);
                }
            }
            n
        }
        #[cfg(plumb_no_bpf)]
        {
            let _ = on;
            0
        }
    }

    /// Waits up to `timeout` for the ring buffer to have records (the program wakes
    /// readers in batches, so a few drops may wait for the timeout).
    pub fn wait(&self, timeout: Duration) {
        #[cfg(not(plumb_no_bpf))]
        {
            use std::os::fd::{AsFd, AsRawFd};
            let mut pfd = libc::pollfd {
                fd: self.ring.as_fd().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
            // SAFETY: one valid pollfd on a descriptor self owns.
            unsafe { libc::poll(&mut pfd, 1, ms) };
        }
        #[cfg(plumb_no_bpf)]
        std::thread::sleep(timeout);
    }

    /// The program's counters, summed over CPUs.
    pub fn counters(&self) -> DropCounters {
        #[cfg(not(plumb_no_bpf))]
        {
            let sum = |i: u32| {
                self.counters
                    .get(&i, 0)
                    .map(|v| v.iter().sum::<u64>())
                    .unwrap_or(0)
            };
            DropCounters {
                reported: sum(0),
                lost: sum(1),
                filtered: sum(2),
            }
        }
        #[cfg(plumb_no_bpf)]
        DropCounters::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(l3: u16, proto: u8, has_ports: u8) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend(5u64.to_ne_bytes());
        v.extend(0xffff_ffff_8100_0000u64.to_ne_bytes());
        v.extend(4026531840u32.to_ne_bytes());
        v.extend(77u32.to_ne_bytes());
        v.extend(3u32.to_ne_bytes());
        v.extend(l3.to_ne_bytes());
        v.push(proto);
        v.push(has_ports);
        v.extend(40000u16.to_be_bytes());
        v.extend(443u16.to_be_bytes());
        let mut s = [0u8; 16];
        s[..4].copy_from_slice(&[10, 42, 0, 9]);
        let mut d = [0u8; 16];
        d[..4].copy_from_slice(&[10, 43, 0, 1]);
        v.extend(s);
        v.extend(d);
        v.extend([0u8; 4]); // padding to 8
        assert_eq!(v.len(), RECORD_SIZE);
        v
    }

    #[test]
    fn decodes_an_ipv4_tcp_drop() {
        let d = decode(&record(ETH_P_IP, 6, 1)).unwrap();
        assert_eq!(d.reason, 77);
        assert_eq!(d.netns_inode, 4026531840);
        assert_eq!(d.ifindex, 3);
        assert_eq!(
            d.addresses,
            Some(("10.42.0.9".parse().unwrap(), "10.43.0.1".parse().unwrap()))
        );
        assert_eq!(d.ports, Some((40000, 443)));
        assert_eq!(d.icmp, None);
    }

    #[test]
    fn icmp_has_type_and_code_and_non_ip_has_no_addresses() {
        let d = decode(&record(ETH_P_IP, 1, 2)).unwrap();
        assert_eq!(d.ports, None);
        assert_eq!(d.icmp, Some((0x9c, 0x40))); // 40000's bytes
        let d = decode(&record(0x0806, 0, 0)).unwrap();
        assert_eq!((d.addresses, d.protocol), (None, 0));
        assert!(decode(&[0; RECORD_SIZE - 1]).is_none());
    }
}
