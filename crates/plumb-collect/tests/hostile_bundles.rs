//! Crafted bundles: archives and directories made to make plumb read the host, write
//! outside its temporary directory, hang, or fill the disk. Archives are built here with
//! the `tar` crate's raw headers (device nodes, FIFOs, `..` paths, absolute links) or GNU
//! tar (a sparse 5 GiB member with an owner name holding a space).

use plumb_collect::archive::{self, ArchiveError, Limits, SkipKind};
use plumb_collect::node::{NodeCommand, NodeSource, open_bundle, open_bundle_within};
use plumb_testkit::Scratch;
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;
use tar::{EntryType, Header};

/// The tests of this file one at a time: one of them asserts that no temporary
/// directory of this process is left, which another test's open bundle would be.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One member of a crafted archive.
enum M<'a> {
    File(&'a str, &'a [u8]),
    Dir(&'a str),
    Link(&'a str, &'a str),
    Hard(&'a str, &'a str),
    Block(&'a str, u32, u32),
    Fifo(&'a str),
}

/// A GNU header written verbatim: names are not checked, so `..` and `/` go through.
fn header(name: &str, kind: EntryType, size: u64, link: &str) -> Header {
    let mut h = Header::new_gnu();
    h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
    h.as_old_mut().linkname[..link.len()].copy_from_slice(link.as_bytes());
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(0o4755);
    h.set_uid(0);
    h.set_gid(0);
    h.set_username("evil user").unwrap();
    h.set_mtime(1_796_000_000);
    h.set_cksum();
    h
}

fn tar_bytes(members: &[M]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for m in members {
        let (h, data): (Header, &[u8]) = match m {
            M::File(n, d) => (header(n, EntryType::Regular, d.len() as u64, ""), d),
            M::Dir(n) => (header(n, EntryType::Directory, 0, ""), b""),
            M::Link(n, t) => (header(n, EntryType::Symlink, 0, t), b""),
            M::Hard(n, t) => (header(n, EntryType::Link, 0, t), b""),
            M::Block(n, major, minor) => {
                let mut h = header(n, EntryType::Block, 0, "");
                h.set_device_major(*major).unwrap();
                h.set_device_minor(*minor).unwrap();
                h.set_cksum();
                (h, b"")
            }
            M::Fifo(n) => (header(n, EntryType::Fifo, 0, ""), b""),
        };
        b.append(&h, data).unwrap();
    }
    b.into_inner().unwrap()
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// Every entry under `dir` (not following links), relative, with its type.
fn walk(dir: &Path) -> Vec<(PathBuf, std::fs::FileType, u32)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                stack.push(p.clone());
            }
            out.push((
                p.strip_prefix(dir).unwrap().to_path_buf(),
                m.file_type(),
                m.permissions().mode() & 0o7777,
            ));
        }
    }
    out
}

/// A block device of this machine with data on it (the root disk where there is one).
fn host_block_device() -> (u32, u32) {
    let mut devices: Vec<(u64, String)> = std::fs::read_dir("/sys/dev/block")
        .map(|d| {
            d.filter_map(|e| {
                let name = e.ok()?.file_name().to_string_lossy().into_owned();
                let size = std::fs::read_to_string(format!("/sys/dev/block/{name}/size")).ok()?;
                Some((size.trim().parse().ok()?, name))
            })
            .collect()
        })
        .unwrap_or_default();
    devices.sort();
    devices
        .last()
        .and_then(|(_, name)| {
            let (a, b) = name.split_once(':')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        })
        .unwrap_or((7, 0))
}

const TOP: &str = "sosreport-node1-2026-11-30-abcdefg";

fn sos(rel: &str) -> String {
    format!("{TOP}/{rel}")
}

/// The smallest sosreport plumb recognises, plus `extra` members.
fn sosreport_with(s: &Scratch, name: &str, extra: &[M]) -> PathBuf {
    let (dir, version, sysctl) = (
        sos("sos_commands/kernel/"),
        sos("version.txt"),
        sos("sos_commands/kernel/uname_-a"),
    );
    let mut members = vec![
        M::Dir(&dir),
        M::File(&version, b"sos report: 4.12.0\n"),
        M::File(&sysctl, b"Linux node1 6.8.0 #1 SMP x86_64 GNU/Linux\n"),
    ];
    members.extend(extra.iter().map(|m| match m {
        M::File(a, b) => M::File(a, b),
        M::Dir(a) => M::Dir(a),
        M::Link(a, b) => M::Link(a, b),
        M::Hard(a, b) => M::Hard(a, b),
        M::Block(a, x, y) => M::Block(a, *x, *y),
        M::Fifo(a) => M::Fifo(a),
    }));
    let path = s.path().join(name);
    std::fs::write(&path, gzip(&tar_bytes(&members))).unwrap();
    path
}

/// Runs `f` on another thread and fails the test if it takes longer than `limit` (a read
/// that opens a FIFO blocks forever).
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("still running after {limit:?}: blocked"))
}

#[test]
fn a_block_device_member_is_not_created_and_never_read() {
    let _one = one_at_a_time();
    let s = Scratch::new("blockdev");
    let (major, minor) = host_block_device();
    let (cfg, lsmod) = (
        sos("etc/rancher/rke2/config.yaml"),
        sos("sos_commands/kernel/lsmod"),
    );
    let tgz = sosreport_with(
        &s,
        "dev.tar.gz",
        &[M::Block(&cfg, major, minor), M::Block(&lsmod, major, minor)],
    );
    let node = open_bundle(&tgz).expect("the rest of the bundle opens");
    let devices: Vec<_> = walk(node.root())
        .into_iter()
        .filter(|(_, t, _)| t.is_block_device() || t.is_char_device())
        .collect();
    assert!(devices.is_empty(), "device nodes created: {devices:?}");
    let err = node.file("/etc/rancher/rke2/config.yaml").unwrap_err();
    assert!(err.contains("does not exist"), "{err}");
    assert!(node.command(&NodeCommand::Lsmod).is_err());
    let notes = node.info().notes;
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("not extracted: 2 block devices")
                && n.contains("etc/rancher/rke2/config.yaml")),
        "{notes:?}"
    );
}

#[test]
fn a_fifo_member_is_not_created_and_does_not_hang() {
    let _one = one_at_a_time();
    let s = Scratch::new("fifo");
    let sysctl = sos("sos_commands/kernel/sysctl_-a");
    let tgz = sosreport_with(&s, "fifo.tar.gz", &[M::Fifo(&sysctl)]);
    let (root, notes, read) = within(Duration::from_secs(30), move || {
        let node = open_bundle(&tgz).unwrap();
        let read = node.command(&NodeCommand::SysctlAll);
        (node.root().to_path_buf(), node.notes().to_vec(), read)
    });
    assert!(read.is_err());
    assert!(!root.join("sos_commands/kernel/sysctl_-a").exists());
    assert!(notes.iter().any(|n| n.contains("1 FIFOs")), "{notes:?}");
}

/// A bundle directory (not an archive) may hold anything: only regular files are opened.
#[test]
fn a_fifo_or_socket_in_a_bundle_directory_is_refused_without_blocking() {
    let _one = one_at_a_time();
    let s = Scratch::new("fifo-dir");
    s.write(&sos("sos_commands/kernel/uname_-a"), "Linux node1\n");
    let fifo = s.path().join(sos("sos_commands/kernel/sysctl_-a"));
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let sock = s.path().join(sos("sos_commands/kernel/lsmod"));
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let dir = s.path().to_path_buf();
    let (sysctl, lsmod) = within(Duration::from_secs(30), move || {
        let node = open_bundle(&dir).unwrap();
        (
            node.command(&NodeCommand::SysctlAll),
            node.file("/sos_commands/kernel/lsmod"),
        )
    });
    let e = sysctl.unwrap_err();
    assert!(e.contains("not in this sosreport"), "{e}");
    assert!(lsmod.unwrap_err().contains("a socket, not a regular file"));
    // The bundle path itself may be a FIFO: refused, not opened.
    let dir = s.path().to_path_buf();
    let e = within(Duration::from_secs(30), move || {
        open_bundle(&dir.join(sos("sos_commands/kernel/sysctl_-a"))).err()
    })
    .expect("refused");
    assert!(e.contains("a FIFO, not a regular file"), "{e}");
}

/// A device node in a bundle directory (here /dev/zero's numbers, which would read as
/// 64 MiB of zeros) is never opened.
#[test]
fn a_device_node_in_a_bundle_directory_is_not_opened() {
    let _one = one_at_a_time();
    let s = Scratch::new("dev-dir");
    s.write(&sos("sos_commands/kernel/uname_-a"), "Linux node1\n");
    let node_path = s.path().join(sos("sos_commands/kernel/sysctl_-a"));
    let c = std::ffi::CString::new(node_path.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path that outlives the call.
    let made = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(1, 5)) };
    if made != 0 {
        plumb_testkit::skip(&format!("mknod: {}", std::io::Error::last_os_error()));
        return;
    }
    let node = open_bundle(s.path()).unwrap();
    let e = node.file("/sos_commands/kernel/sysctl_-a").unwrap_err();
    assert!(e.contains("a character device, not a regular file"), "{e}");
}

/// A link in the last component is resolved and checked, then the file it names is opened
/// without following anything: a link to a FIFO inside the bundle does not block either.
#[test]
fn a_link_to_a_fifo_inside_the_bundle_does_not_block() {
    let _one = one_at_a_time();
    let s = Scratch::new("fifo-link");
    s.write(&sos("sos_commands/kernel/uname_-a"), "Linux node1\n");
    let fifo = s.path().join(sos("fifo"));
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    std::os::unix::fs::symlink(
        "../../fifo",
        s.path().join(sos("sos_commands/kernel/sysctl_-a")),
    )
    .unwrap();
    let dir = s.path().to_path_buf();
    let e = within(Duration::from_secs(30), move || {
        open_bundle(&dir)
            .unwrap()
            .file("/sos_commands/kernel/sysctl_-a")
    })
    .unwrap_err();
    assert!(e.contains("a FIFO, not a regular file"), "{e}");
}

/// The size column of `tar -tv` is not the third word when the owner's name has a space;
/// the archive's own header says 5 GiB, and that is what counts.
#[test]
fn an_owner_name_with_a_space_does_not_hide_the_size() {
    let _one = one_at_a_time();
    let s = Scratch::new("owner-space");
    let big = s.path().join("big.img");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(5 << 30)
        .unwrap();
    let tar = s.path().join("owner.tar");
    let ok = std::process::Command::new("tar")
        .args(["--sparse", "--owner=evil user:0", "--group=root:0", "-cf"])
        .arg(&tar)
        .arg("-C")
        .arg(s.path())
        .arg("big.img")
        .status()
        .unwrap()
        .success();
    assert!(ok);
    std::fs::remove_file(&big).unwrap();
    let err = open_bundle(&tar).err().unwrap();
    assert!(err.contains("unpacks to more than 4096 MiB"), "{err}");
}

/// Below a small limit: bytes are counted as they are written, over many members each
/// under the limit, and the member count is capped.
#[test]
fn extraction_stops_at_the_byte_and_member_limits() {
    let _one = one_at_a_time();
    let s = Scratch::new("limits");
    let chunk = vec![b'x'; 10_000];
    let names: Vec<String> = (0..10)
        .map(|i| sos(&format!("sos_commands/f{i}")))
        .collect();
    let files: Vec<M> = names.iter().map(|n| M::File(n, &chunk)).collect();
    let tgz = sosreport_with(&s, "many.tar.gz", &files);
    let small = Limits {
        max_bytes: 64 * 1024,
        max_members: 1000,
    };
    let err = open_bundle_within(&tgz, &small).err().unwrap();
    assert!(
        err.contains("unpacks to more than 0 MiB") && err.contains("unpack it yourself"),
        "{err}"
    );
    let few = Limits {
        max_bytes: 1 << 20,
        max_members: 8,
    };
    let err = open_bundle_within(&tgz, &few).err().unwrap();
    assert!(err.contains("holds more than 8 members"), "{err}");
    // Within both, it opens; nothing is left behind by the refused ones.
    let ok = Limits {
        max_bytes: 1 << 20,
        max_members: 20,
    };
    assert!(open_bundle_within(&tgz, &ok).is_ok());
    let leftovers: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("plumb-bundle-{}-", std::process::id())))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// A long name is read into memory by the tar reader: one declared larger than plumb
/// allows is refused before it is read (a gigabyte of zeros is a few kilobytes of xz).
#[test]
fn a_huge_long_name_header_is_refused_before_it_is_read() {
    let _one = one_at_a_time();
    let mut h = Header::new_gnu();
    h.as_old_mut().name[..13].copy_from_slice(b"././@LongLink");
    h.set_entry_type(EntryType::GNULongName);
    h.set_size(1 << 40);
    h.set_cksum();
    let mut bytes = h.as_bytes().to_vec();
    bytes.extend(std::iter::repeat_n(b'a', 4 << 20));
    let s = Scratch::new("longname");
    let dest = s.path().join("dest");
    std::fs::create_dir(&dest).unwrap();
    let err = archive::extract(&bytes[..], &dest, &Limits::BUNDLE).unwrap_err();
    assert!(
        matches!(err, ArchiveError::HeaderTooLarge { index: 1 }),
        "{err}"
    );
}

#[test]
fn path_traversal_and_links_never_write_outside() {
    let _one = one_at_a_time();
    let s = Scratch::new("traversal");
    let outside = s.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let dest = s.path().join("a/b/dest");
    std::fs::create_dir_all(&dest).unwrap();
    let abs = format!("{}/abs", outside.display());
    let bytes = tar_bytes(&[
        M::File("../x", b"1"),
        M::File("../../y", b"2"),
        M::File("ok/../../z", b"3"),
        M::File(&abs, b"4"),
        // A link out, then a file through it.
        M::Link("up", "../../.."),
        M::File("up/outside/through", b"5"),
        M::Link("etc", &outside.display().to_string()),
        M::File("etc/passwd", b"6"),
        // A link inside is kept, but nothing is written through it either.
        M::Dir("sub"),
        M::Link("in", "sub"),
        M::File("in/through", b"7"),
        // A hard link to a host file.
        M::Hard("shadow", "/etc/shadow"),
        M::File("plain/file", b"8"),
    ]);
    let done = archive::extract(&bytes[..], &dest, &Limits::BUNDLE).unwrap();
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "written outside: {:?}",
        walk(&outside)
    );
    let siblings: Vec<_> = walk(s.path())
        .into_iter()
        .map(|(p, _, _)| p)
        .filter(|p| !p.starts_with("a/b/dest") && !p.starts_with("outside"))
        .collect();
    assert!(
        siblings
            .iter()
            .all(|p| p == Path::new("a") || p == Path::new("a/b")),
        "{siblings:?}"
    );
    assert_eq!(
        done.skipped_of(SkipKind::UnsafePath),
        ["../x", "../../y", "ok/../../z", abs.as_str()]
    );
    assert_eq!(done.skipped_of(SkipKind::LinkOutside).len(), 2);
    assert_eq!(done.skipped_of(SkipKind::UnderLink), ["in/through"]);
    assert_eq!(
        done.skipped_of(SkipKind::HardLink),
        ["shadow -> /etc/shadow"]
    );
    // `up/...` and `etc/...` became plain directories inside, the links having been skipped.
    assert_eq!(std::fs::read(dest.join("etc/passwd")).unwrap(), b"6");
    assert_eq!(std::fs::read(dest.join("plain/file")).unwrap(), b"8");
    assert_eq!(
        std::fs::read_link(dest.join("in")).unwrap(),
        Path::new("sub")
    );
    assert!(!dest.join("sub/through").exists());
    // Files 0600, directories 0700, whatever the archive said (0o4755 here).
    for (p, t, mode) in walk(&dest) {
        if t.is_file() {
            assert_eq!(mode, 0o600, "{}", p.display());
        } else if t.is_dir() {
            assert_eq!(mode, 0o700, "{}", p.display());
        } else {
            assert!(t.is_symlink(), "{}", p.display());
        }
    }
}

/// A link to /etc/passwd in place of a file plumb reads is not created, and the user is
/// told; links between the bundle's own files are kept and read.
#[test]
fn links_out_are_skipped_and_links_inside_are_kept() {
    let _one = one_at_a_time();
    let s = Scratch::new("links");
    let (cfg, lsmod_link) = (sos("etc/rancher/rke2/config.yaml"), sos("lsmod"));
    let (lsmod, lsmod_text) = (
        sos("sos_commands/kernel/lsmod"),
        b"Module Size Used by\nbr_netfilter 32768 0\n",
    );
    let tgz = sosreport_with(
        &s,
        "links.tar.gz",
        &[
            M::Link(&cfg, "/etc/passwd"),
            M::File(&lsmod, lsmod_text),
            M::Link(&lsmod_link, "sos_commands/kernel/lsmod"),
        ],
    );
    let node = open_bundle(&tgz).unwrap();
    assert!(std::fs::symlink_metadata(node.root().join("etc/rancher/rke2/config.yaml")).is_err());
    assert!(node.file("/etc/rancher/rke2/config.yaml").is_err());
    let notes = node.info().notes;
    assert!(
        notes
            .iter()
            .any(|n| n.contains("symbolic links pointing outside the bundle")
                && n.contains("etc/rancher/rke2/config.yaml -> /etc/passwd")),
        "{notes:?}"
    );
    assert_eq!(node.file("/lsmod").unwrap().bytes, lsmod_text);
}

/// Links that stay inside lexically but leave physically (`s -> .`, then
/// `etc -> s/s/.../../../etc`: each `s` is one level down on paper and none on disk) are
/// created; reading through them is refused because every read resolves the path first.
#[test]
fn a_chain_of_inside_links_that_leaves_physically_is_not_read() {
    let _one = one_at_a_time();
    let s = Scratch::new("chain");
    let target = format!("{}{}etc", "s/".repeat(15), "../".repeat(16));
    let (dot, etc) = (sos("s"), sos("etc"));
    let tgz = sosreport_with(
        &s,
        "chain.tar.gz",
        &[M::Link(&dot, "."), M::Link(&etc, &target)],
    );
    let node = open_bundle(&tgz).unwrap();
    assert_eq!(
        std::fs::canonicalize(node.root().join("etc/passwd")).unwrap(),
        Path::new("/etc/passwd"),
        "the link was created and leads to the host's file"
    );
    let err = node.file("/etc/passwd").unwrap_err();
    assert!(err.contains("outside the bundle"), "{err}");
    assert!(!node.exists("/etc/passwd"));
    assert!(node.dir("/etc").is_err());
}

/// A bundle directory whose only entry is a link to a directory elsewhere: that directory
/// is not the bundle (it could be any directory on the host).
#[test]
fn a_link_to_a_directory_elsewhere_is_not_taken_for_the_bundle() {
    let _one = one_at_a_time();
    let s = Scratch::new("elsewhere");
    s.write(
        "host/sos_commands/kernel/sysctl_-a",
        "net.ipv4.ip_forward = 1\n",
    );
    let bundle = s.path().join("bundle");
    std::fs::create_dir(&bundle).unwrap();
    std::os::unix::fs::symlink(s.path().join("host"), bundle.join("sosreport-x")).unwrap();
    let err = open_bundle(&bundle).err().expect("refused");
    assert!(err.contains("not a sosreport"), "{err}");
}

/// Formats are recognised by their bytes, whatever the file is called: a zip named
/// .tar.gz is read as a zip (this one is damaged, and the error says how), bzip2 is
/// refused clearly; a .tar.gz name on a plain tar is read as the tar it is.
#[test]
fn formats_are_told_by_their_bytes_not_their_names() {
    let _one = one_at_a_time();
    let s = Scratch::new("magic");
    let zip = s.path().join("bundle.tar.gz");
    std::fs::write(&zip, b"PK\x03\x04rest of a zip").unwrap();
    let err = open_bundle(&zip).err().unwrap();
    assert!(
        err.contains("a zip without its end-of-central-directory record"),
        "{err}"
    );
    let bz = s.path().join("bundle.zip");
    std::fs::write(&bz, b"BZh91AY&SY").unwrap();
    let err = open_bundle(&bz).err().unwrap();
    assert!(
        err.contains("a bzip2-compressed archive") && err.contains("unpack it yourself"),
        "{err}"
    );
    let version = sos("version.txt");
    let dir = sos("sos_commands/kernel/");
    let plain = s.path().join("really-plain.tar.gz");
    std::fs::write(
        &plain,
        tar_bytes(&[M::Dir(&dir), M::File(&version, b"sos\n")]),
    )
    .unwrap();
    assert!(open_bundle(&plain).is_ok());
    let tgz = s.path().join("bundle.tgz");
    std::fs::write(&tgz, gzip(&tar_bytes(&[M::Dir(&dir)]))).unwrap();
    assert!(open_bundle(&tgz).is_ok());
}
