//! Reading pinned BPF maps, read-only: open a map pinned on a bpffs
//! (`BPF_OBJ_GET` with `BPF_F_RDONLY`), ask its key and value sizes
//! (`BPF_OBJ_GET_INFO_BY_FD`) and dump every entry (`BPF_MAP_GET_NEXT_KEY` +
//! `BPF_MAP_LOOKUP_ELEM`). This is how plumb reads Cilium's load-balancer maps on a
//! kube-proxy-free node without a Cilium CLI.
//!
//! Reading issues only those four commands: it never creates, updates, deletes or pins.
//! A map that changes during the dump is read as the kernel answers each call (an
//! entry deleted meanwhile is skipped), as `bpftool map dump` does. [`probe`] asks
//! which program and map types the kernel accepts by loading a trivial program (or
//! creating a one-entry map) and closing it at once, as `bpftool feature probe` does.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

const BPF_MAP_LOOKUP_ELEM: libc::c_int = 1;
const BPF_MAP_GET_NEXT_KEY: libc::c_int = 4;
const BPF_OBJ_GET: libc::c_int = 7;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_int = 15;
/// `file_flags` of `BPF_OBJ_GET`: a descriptor that can only read the map.
const BPF_F_RDONLY: u32 = 1 << 3;

/// Entries dumped at most from one map: Cilium's LB maps hold 65,536 by default; a
/// map that keeps growing while it is read cannot keep plumb busy forever.
pub const MAX_ENTRIES: usize = 1 << 20;

/// Every entry of a map as (key bytes, value bytes), in the kernel's iteration order.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Dump {
    /// The entries read.
    pub entries: Vec<(Vec<u8>, Vec<u8>)>,
    /// The dump stopped at [`MAX_ENTRIES`]: there may be more.
    pub truncated: bool,
}

/// A pinned map opened read-only.
#[derive(Debug)]
pub struct PinnedMap {
    fd: OwnedFd,
    /// The map's type (`BPF_MAP_TYPE_*`).
    pub map_type: u32,
    /// Bytes of a key.
    pub key_size: u32,
    /// Bytes of a value.
    pub value_size: u32,
    /// Capacity.
    pub max_entries: u32,
    /// The map's name as the kernel keeps it (at most 15 bytes).
    pub name: String,
}

/// The leading fields of `struct bpf_map_info` (uapi/linux/bpf.h); the kernel fills
/// as much as the given length allows.
#[repr(C)]
#[derive(Default)]
struct MapInfo {
    map_type: u32,
    id: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    name: [u8; 16],
}

#[repr(C)]
#[derive(Default)]
struct ObjGetAttr {
    pathname: u64,
    bpf_fd: u32,
    file_flags: u32,
}

#[repr(C)]
#[derive(Default)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

#[repr(C)]
#[derive(Default)]
struct ElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value_or_next_key: u64,
    flags: u64,
}

/// `bpf(cmd, attr)`.
///
/// # Safety
/// `attr` must be the attribute struct the kernel expects for `cmd`, and every pointer
/// in it must be valid for the access the command makes.
unsafe fn bpf<T>(cmd: libc::c_int, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: forwarded from the caller; the size passed is the struct's own.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T,
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

impl PinnedMap {
    /// Opens the map pinned at `path` read-only.
    pub fn open(path: &Path) -> io::Result<PinnedMap> {
        let c_path = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
        let mut attr = ObjGetAttr {
            pathname: c_path.as_ptr() as u64,
            bpf_fd: 0,
            file_flags: BPF_F_RDONLY,
        };
        // SAFETY: BPF_OBJ_GET reads a NUL-terminated path that outlives the call.
        let fd = unsafe { bpf(BPF_OBJ_GET, &mut attr) }
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        // SAFETY: a non-negative result of BPF_OBJ_GET is a new descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let mut info = MapInfo::default();
        let mut attr = InfoAttr {
            bpf_fd: fd.as_raw_fd() as u32,
            info_len: std::mem::size_of::<MapInfo>() as u32,
            info: &raw mut info as u64,
        };
        // SAFETY: the kernel writes at most info_len bytes into `info`, which lives
        // through the call.
        unsafe { bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr) }.map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("{}: not a BPF map? ({e})", path.display()),
            )
        })?;
        let name_len = info.name.iter().position(|&b| b == 0).unwrap_or(16);
        Ok(PinnedMap {
            fd,
            map_type: info.map_type,
            key_size: info.key_size,
            value_size: info.value_size,
            max_entries: info.max_entries,
            name: String::from_utf8_lossy(&info.name[..name_len]).into_owned(),
        })
    }

    /// Every entry, at most [`MAX_ENTRIES`].
    pub fn dump(&self) -> io::Result<Dump> {
        let mut out = Vec::new();
        let mut key: Option<Vec<u8>> = None;
        let mut next = vec![0u8; self.key_size as usize];
        loop {
            if out.len() >= MAX_ENTRIES {
                return Ok(Dump {
                    entries: out,
                    truncated: true,
                });
            }
            let mut attr = ElemAttr {
                map_fd: self.fd.as_raw_fd() as u32,
                key: key.as_ref().map_or(0, |k| k.as_ptr() as u64),
                value_or_next_key: next.as_mut_ptr() as u64,
                ..ElemAttr::default()
            };
            // SAFETY: key (or NULL for the first) has key_size bytes; the kernel writes
            // key_size bytes into `next`.
            match unsafe { bpf(BPF_MAP_GET_NEXT_KEY, &mut attr) } {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    return Ok(Dump {
                        entries: out,
                        truncated: false,
                    });
                }
                Err(e) => return Err(e),
            }
            let mut value = vec![0u8; self.value_size as usize];
            let mut attr = ElemAttr {
                map_fd: self.fd.as_raw_fd() as u32,
                key: next.as_ptr() as u64,
                value_or_next_key: value.as_mut_ptr() as u64,
                ..ElemAttr::default()
            };
            // SAFETY: `next` has key_size bytes; the kernel writes value_size bytes
            // into `value` (hash maps: not per-CPU, which would need more).
            match unsafe { bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) } {
                Ok(_) => out.push((next.clone(), value)),
                // Deleted between the two calls: go on from it all the same.
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => return Err(e),
            }
            key = Some(next.clone());
        }
    }
}

/// What the running kernel accepts, asked the way `bpftool feature probe` asks: load a
/// two-instruction program of each type (or create a one-entry map), and close it at
/// once. Nothing is attached or pinned; the kernel keeps nothing.
pub mod probe {
    use super::bpf;
    use std::io;
    use std::os::fd::{FromRawFd, OwnedFd};

    const BPF_MAP_CREATE: libc::c_int = 0;
    const BPF_PROG_LOAD: libc::c_int = 5;

    /// A program type worth probing: its name, `BPF_PROG_TYPE_*` and the attach type
    /// the verifier needs to know at load time (0 when none).
    pub const PROGRAM_TYPES: &[(&str, u32, u32)] = &[
        ("sched_cls", 3, 0),
        ("xdp", 6, 0),
        ("cgroup_sock", 9, 0),
        // BPF_CGROUP_INET4_CONNECT (10): the socket load balancer's hook.
        ("cgroup_sock_addr (connect4)", 18, 10),
    ];

    /// A map type worth probing: its name, `BPF_MAP_TYPE_*`, key and value sizes, and
    /// map flags (an LPM trie needs BPF_F_NO_PREALLOC).
    pub const MAP_TYPES: &[(&str, u32, u32, u32, u32)] = &[
        ("hash", 1, 4, 4, 0),
        ("array", 2, 4, 4, 0),
        ("perf_event_array", 4, 4, 4, 0),
        ("percpu_hash", 5, 4, 4, 0),
        ("lru_hash", 9, 4, 4, 0),
        ("lpm_trie", 11, 8, 4, 1),
    ];

    #[repr(C)]
    #[derive(Default)]
    struct ProgLoadAttr {
        prog_type: u32,
        insn_cnt: u32,
        insns: u64,
        license: u64,
        log_level: u32,
        log_size: u32,
        log_buf: u64,
        kern_version: u32,
        prog_flags: u32,
        prog_name: [u8; 16],
        prog_ifindex: u32,
        expected_attach_type: u32,
    }

    #[repr(C)]
    #[derive(Default)]
    struct MapCreateAttr {
        map_type: u32,
        key_size: u32,
        value_size: u32,
        max_entries: u32,
        map_flags: u32,
    }

    /// Reads a probe's result: accepted (a descriptor, closed now), refused (EINVAL:
    /// the kernel does not know the type) or not decidable (EPERM and the rest).
    fn verdict(r: io::Result<libc::c_long>) -> io::Result<bool> {
        match r {
            // SAFETY: a new descriptor this process owns; dropping it closes it.
            Ok(fd) => {
                drop(unsafe { OwnedFd::from_raw_fd(fd as i32) });
                Ok(true)
            }
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Whether the kernel loads a program of `prog_type` (`r0 = 0; exit`).
    pub fn program_type(prog_type: u32, expected_attach_type: u32) -> io::Result<bool> {
        // mov64 r0, 0 ; exit
        let insns: [u64; 2] = [0x0000_0000_0000_00b7, 0x0000_0000_0000_0095];
        let license = c"GPL";
        let mut attr = ProgLoadAttr {
            prog_type,
            insn_cnt: 2,
            insns: insns.as_ptr() as u64,
            license: license.as_ptr() as u64,
            expected_attach_type,
            ..ProgLoadAttr::default()
        };
        // SAFETY: the instructions and the license outlive the call; no log buffer.
        verdict(unsafe { bpf(BPF_PROG_LOAD, &mut attr) })
    }

    /// Whether the kernel creates a one-entry map of `map_type`.
    pub fn map_type(map_type: u32, key_size: u32, value_size: u32, flags: u32) -> io::Result<bool> {
        let mut attr = MapCreateAttr {
            map_type,
            key_size,
            value_size,
            max_entries: 1,
            map_flags: flags,
        };
        // SAFETY: the attribute holds no pointers.
        verdict(unsafe { bpf(BPF_MAP_CREATE, &mut attr) })
    }

    /// Every type in [`PROGRAM_TYPES`] and [`MAP_TYPES`], probed: ("program type X" or
    /// "map type X", accepted or why the probe could not tell).
    pub fn all() -> Vec<(String, Result<bool, String>)> {
        let programs = PROGRAM_TYPES.iter().map(|(name, t, attach)| {
            (
                format!("program type {name}"),
                program_type(*t, *attach).map_err(|e| e.to_string()),
            )
        });
        let maps = MAP_TYPES.iter().map(|(name, t, k, v, f)| {
            (
                format!("map type {name}"),
                map_type(*t, *k, *v, *f).map_err(|e| e.to_string()),
            )
        });
        programs.chain(maps).collect()
    }
}
