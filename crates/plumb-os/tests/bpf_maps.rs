//! Privileged: real BPF hash maps, pinned on a bpffs this test mounts in a private
//! directory, read back through [`plumb_os::bpf::PinnedMap`]. The map is created and
//! filled here with raw `bpf()` calls (what Cilium's agent does); plumb only reads.
//! The mount and the pin are removed even when an assertion fails.

use plumb_os::bpf::PinnedMap;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
const BPF_OBJ_PIN: libc::c_int = 6;
const BPF_OBJ_GET: libc::c_int = 7;
const BPF_MAP_TYPE_HASH: u32 = 1;
const BPF_F_RDONLY: u32 = 1 << 3;

fn bpf<T>(cmd: libc::c_int, attr: &mut T) -> std::io::Result<i64> {
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

fn create(name: &str, key_size: u32, value_size: u32) -> OwnedFd {
    let mut map_name = [0u8; 16];
    map_name[..name.len()].copy_from_slice(name.as_bytes());
    let mut attr = CreateAttr {
        map_type: BPF_MAP_TYPE_HASH,
        key_size,
        value_size,
        max_entries: 64,
        map_name,
        ..CreateAttr::default()
    };
    let fd = bpf(BPF_MAP_CREATE, &mut attr).expect("BPF_MAP_CREATE");
    // SAFETY: a new descriptor the kernel just returned.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

fn update(fd: &OwnedFd, key: &[u8], value: &[u8]) -> std::io::Result<()> {
    let mut attr = ElemAttr {
        map_fd: fd.as_raw_fd() as u32,
        key: key.as_ptr() as u64,
        value: value.as_ptr() as u64,
        ..ElemAttr::default()
    };
    bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map(|_| ())
}

fn path_call(cmd: libc::c_int, path: &Path, fd: u32, file_flags: u32) -> std::io::Result<i64> {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let mut attr = PathAttr {
        pathname: c.as_ptr() as u64,
        bpf_fd: fd,
        file_flags,
    };
    bpf(cmd, &mut attr)
}

/// A bpffs mounted on a fresh directory; unmounted and removed on drop.
struct Bpffs(PathBuf);

impl Bpffs {
    fn mount() -> Option<Bpffs> {
        let dir = std::env::temp_dir().join(format!("plumb-bpffs-test-{}", std::process::id()));
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

#[test]
fn a_pinned_map_is_read_whole_and_only_read() {
    if !plumb_testkit::privileged(&["mount", "umount"]) {
        return;
    }
    let Some(fs) = Bpffs::mount() else {
        plumb_testkit::skip("cannot mount a bpffs (mount -t bpf)");
        return;
    };
    let map = create("plumb_test_map", 12, 12);
    let mut written = Vec::new();
    for i in 0u8..40 {
        let key = [10, 43, 0, i, 0, 80, 0, 0, 6, 0, 0, 0];
        let value = [i, 0, 0, 0, 1, 0, 0, i, 0x40, 0, 0, 0];
        update(&map, &key, &value).expect("update");
        written.push((key.to_vec(), value.to_vec()));
    }
    let path = fs.0.join("cilium_lb4_services_v2");
    path_call(BPF_OBJ_PIN, &path, map.as_raw_fd() as u32, 0).expect("BPF_OBJ_PIN");

    let pinned = PinnedMap::open(&path).expect("open the pinned map");
    assert_eq!((pinned.key_size, pinned.value_size), (12, 12));
    assert_eq!(pinned.max_entries, 64);
    assert_eq!(pinned.name, "plumb_test_map");
    let dump = pinned.dump().expect("dump");
    assert!(!dump.truncated);
    let mut read = dump.entries;
    read.sort();
    written.sort();
    assert_eq!(read, written, "every entry, byte for byte");

    // A descriptor opened as PinnedMap opens it cannot write: the kernel refuses.
    let fd = path_call(BPF_OBJ_GET, &path, 0, BPF_F_RDONLY).expect("BPF_OBJ_GET");
    // SAFETY: a new descriptor.
    let ro = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let err = update(&ro, &[0; 12], &[0; 12]).expect_err("a read-only descriptor");
    assert_eq!(err.raw_os_error(), Some(libc::EPERM), "{err}");

    let missing = PinnedMap::open(&fs.0.join("nothing")).expect_err("no such pin");
    assert!(missing.to_string().contains("nothing"), "{missing}");
}
