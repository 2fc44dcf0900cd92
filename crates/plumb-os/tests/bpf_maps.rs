//! Privileged: real BPF hash maps, pinned on a bpffs this test mounts in a private
//! directory, read back through [`plumb_os::bpf::PinnedMap`]. The map is created and
//! filled here with raw `bpf()` calls (what Cilium's agent does); plumb only reads.
//! The mount and the pin are removed even when an assertion fails.

use plumb_os::bpf::PinnedMap;
use plumb_testkit::bpf::{
    BPF_F_RDONLY, BPF_OBJ_GET, BPF_OBJ_PIN, Bpffs, create, path_call, update,
};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

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

#[test]
fn the_running_kernel_accepts_what_cilium_loads_and_refuses_an_unknown_type() {
    if !plumb_testkit::privileged(&[]) {
        return;
    }
    for (what, accepted) in plumb_os::bpf::probe::all() {
        assert_eq!(accepted, Ok(true), "{what}");
    }
    assert_eq!(
        plumb_os::bpf::probe::program_type(9999, 0).ok(),
        Some(false)
    );
    assert_eq!(
        plumb_os::bpf::probe::map_type(9999, 4, 4, 0).ok(),
        Some(false)
    );
}
