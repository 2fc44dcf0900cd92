//! Real BPF maps for tests: create a hash map, fill it, pin it on a bpffs mounted in a
//! fresh directory ([`Bpffs`], unmounted on drop). This is what Cilium's agent does to
//! a node; plumb itself only reads maps (`plumb_os::bpf`), so the writing half lives
//! here, with the tests.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// `BPF_MAP_CREATE`.
pub const BPF_MAP_CREATE: libc::c_int = 0;
/// `BPF_MAP_UPDATE_ELEM`.
pub const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
/// `BPF_OBJ_PIN`.
pub const BPF_OBJ_PIN: libc::c_int = 6;
/// `BPF_OBJ_GET`.
pub const BPF_OBJ_GET: libc::c_int = 7;
/// `BPF_MAP_TYPE_HASH`.
pub const BPF_MAP_TYPE_HASH: u32 = 1;
/// `BPF_F_RDONLY`: a read-only descriptor.
pub const BPF_F_RDONLY: u32 = 1 << 3;

/// `bpf(cmd, attr)`; panics are the caller's (tests).
pub fn bpf<T>(cmd: libc::c_int, attr: &mut T) -> std::io::Result<i64> {
    // SAFETY: every caller passes the attribute struct of its command, with pointers
    // that outlive the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T,
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

#[repr(C)]
#[derive(Default)]
struct CreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

#[repr(C)]
#[derive(Default)]
struct ElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

#[repr(C)]
#[derive(Default)]
struct PathAttr {
    pathname: u64,
    bpf_fd: u32,
    file_flags: u32,
}

/// Creates a hash map of 64 entries named `name` (at most 15 bytes).
pub fn create(name: &str, key_size: u32, value_size: u32) -> OwnedFd {
    create_sized(name, key_size, value_size, 64)
}

/// Creates a hash map of `max_entries` entries named `name` (at most 15 bytes).
pub fn create_sized(name: &str, key_size: u32, value_size: u32, max_entries: u32) -> OwnedFd {
    let mut map_name = [0u8; 16];
    map_name[..name.len()].copy_from_slice(name.as_bytes());
    let mut attr = CreateAttr {
        map_type: BPF_MAP_TYPE_HASH,
        key_size,
        value_size,
        max_entries,
        map_name,
        ..CreateAttr::default()
    };
    let fd = bpf(BPF_MAP_CREATE, &mut attr).expect("BPF_MAP_CREATE");
    // SAFETY: a new descriptor the kernel just returned.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

/// Inserts or replaces one entry.
pub fn update(fd: &OwnedFd, key: &[u8], value: &[u8]) -> std::io::Result<()> {
    let mut attr = ElemAttr {
        map_fd: fd.as_raw_fd() as u32,
        key: key.as_ptr() as u64,
        value: value.as_ptr() as u64,
        ..ElemAttr::default()
    };
    bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map(|_| ())
}

/// A path command (`BPF_OBJ_PIN`, `BPF_OBJ_GET`) on `path`.
pub fn path_call(cmd: libc::c_int, path: &Path, fd: u32, file_flags: u32) -> std::io::Result<i64> {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let mut attr = PathAttr {
        pathname: c.as_ptr() as u64,
        bpf_fd: fd,
        file_flags,
    };
    bpf(cmd, &mut attr)
}

/// A bpffs mounted on a fresh directory; unmounted and removed on drop, also when a
/// test fails.
pub struct Bpffs(pub PathBuf);

impl Bpffs {
    /// Mounts a bpffs on a fresh directory below the temp dir (None: mount failed).
    pub fn mount() -> Option<Bpffs> {
        let dir = dir_for_mount();
        std::fs::create_dir_all(&dir).ok()?;
        let ok = std::process::Command::new("mount")
            .args(["-t", "bpf", "bpf"])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = std::fs::remove_dir(&dir);
            return None;
        }
        Some(Bpffs(dir))
    }
}

impl Drop for Bpffs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// A directory name of its own per mount (several tests of one process may mount).
fn dir_for_mount() -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!("plumb-bpffs-test-{}-{n}", std::process::id()))
}

/// Creates a map at `dir/name` filled with `entries` and pins it; returns the pin path.
pub fn pinned_map(
    dir: &Path,
    name: &str,
    key_size: u32,
    value_size: u32,
    entries: &[(Vec<u8>, Vec<u8>)],
) -> PathBuf {
    std::fs::create_dir_all(dir).expect("create the pin directory");
    let short: String = name.chars().take(15).collect();
    let capacity = u32::try_from(entries.len()).unwrap_or(u32::MAX).max(64);
    let map = create_sized(&short, key_size, value_size, capacity);
    for (k, v) in entries {
        update(&map, k, v).expect("update");
    }
    let path = dir.join(name);
    path_call(BPF_OBJ_PIN, &path, map.as_raw_fd() as u32, 0).expect("BPF_OBJ_PIN");
    path
}
