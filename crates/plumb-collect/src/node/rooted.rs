//! Reading a node's files under a root directory (`--root DIR`) as if DIR were `/`.
//!
//! Paths are resolved one component at a time from a descriptor of DIR (`openat` with
//! `O_NOFOLLOW`, symlinks read with `readlinkat` and resolved by this code): `..` at the
//! root stays at the root, and a symlink to `/x` means `DIR/x`, so no path or symlink
//! under DIR reaches a file outside it. (openat2's RESOLVE_IN_ROOT does the same but
//! needs Linux 5.6; RHEL 8 nodes run 4.18.) Resolution holds a descriptor of every
//! directory it went through, so renaming a directory meanwhile cannot redirect it.
//!
//! Only regular files are read: a FIFO, socket or device is refused after `fstatat`,
//! before anything opens it (opening a FIFO blocks until a writer comes; opening a device
//! can have side effects), and the file is opened with `O_NONBLOCK | O_NOFOLLOW` and
//! checked again, in case it was swapped between the two.

use std::collections::VecDeque;
use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

/// Symlinks followed while resolving one path (Linux's own limit).
const MAX_LINKS: usize = 40;

/// What a path resolved to.
enum Resolved {
    Dir(OwnedFd),
    File(File),
    /// A FIFO, socket or device: it exists, but is never opened.
    Special(&'static str),
}

fn cstr(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn open_at(dir: RawFd, name: &OsStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    let c = cstr(name)?;
    // SAFETY: `c` is NUL-terminated; the returned descriptor is owned by the OwnedFd.
    let fd = check(unsafe { libc::openat(dir, c.as_ptr(), flags | libc::O_CLOEXEC) })?;
    // SAFETY: `fd` was just returned by openat and is not owned elsewhere.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn stat_at(dir: RawFd, name: &OsStr) -> io::Result<libc::stat> {
    let c = cstr(name)?;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `c` is NUL-terminated and `st` points to writable memory for a stat.
    check(unsafe { libc::fstatat(dir, c.as_ptr(), st.as_mut_ptr(), libc::AT_SYMLINK_NOFOLLOW) })?;
    // SAFETY: fstatat succeeded, so it filled `st`.
    Ok(unsafe { st.assume_init() })
}

fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` points to writable memory for a stat.
    check(unsafe { libc::fstat(fd, st.as_mut_ptr()) })?;
    // SAFETY: fstat succeeded, so it filled `st`.
    Ok(unsafe { st.assume_init() })
}

fn read_link_at(dir: RawFd, name: &OsStr) -> io::Result<OsString> {
    let c = cstr(name)?;
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: `c` is NUL-terminated and `buf` is writable for `buf.len()` bytes.
        let n = unsafe { libc::readlinkat(dir, c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        if n < buf.len() {
            buf.truncate(n);
            return Ok(OsString::from_vec(buf));
        }
        buf.resize(buf.len() * 2, 0);
    }
}

fn kind(mode: libc::mode_t) -> libc::mode_t {
    mode & libc::S_IFMT
}

fn special_name(mode: libc::mode_t) -> &'static str {
    match kind(mode) {
        libc::S_IFIFO => "a FIFO",
        libc::S_IFSOCK => "a socket",
        libc::S_IFCHR => "a character device",
        libc::S_IFBLK => "a block device",
        _ => "not a regular file",
    }
}

fn components(path: &OsStr) -> impl Iterator<Item = OsString> + '_ {
    path.as_bytes()
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .map(|c| OsString::from_vec(c.to_vec()))
}

/// Resolves `path` (absolute or not: always from the root) inside `root`.
fn resolve(root: &Path, path: &str) -> io::Result<Resolved> {
    let root_fd = {
        let c = cstr(root.as_os_str())?;
        // SAFETY: `c` is NUL-terminated; the descriptor is owned below.
        let fd = check(unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        })?;
        // SAFETY: `fd` was just returned by open.
        unsafe { OwnedFd::from_raw_fd(fd) }
    };
    // The directories walked through, root first; the last is the current one.
    let mut dirs: Vec<OwnedFd> = vec![root_fd];
    let mut todo: VecDeque<OsString> = components(OsStr::new(path)).collect();
    let mut links = 0;
    while let Some(name) = todo.pop_front() {
        if name == ".." {
            if dirs.len() > 1 {
                dirs.pop();
            }
            continue;
        }
        let dir = dirs.last().map_or(-1, AsRawFd::as_raw_fd);
        let st = stat_at(dir, &name)?;
        match kind(st.st_mode) {
            libc::S_IFLNK => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(io::Error::from_raw_os_error(libc::ELOOP));
                }
                let target = read_link_at(dir, &name)?;
                if target.as_bytes().starts_with(b"/") {
                    dirs.truncate(1);
                }
                for c in components(&target).collect::<Vec<_>>().into_iter().rev() {
                    todo.push_front(c);
                }
            }
            libc::S_IFDIR => {
                let fd = open_at(
                    dir,
                    &name,
                    libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                )?;
                dirs.push(fd);
            }
            libc::S_IFREG => {
                if !todo.is_empty() {
                    return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
                }
                let fd = open_at(
                    dir,
                    &name,
                    libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
                )?;
                let now = fstat(fd.as_raw_fd())?;
                if kind(now.st_mode) != libc::S_IFREG
                    || (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino)
                {
                    return Err(io::Error::other("changed while being opened"));
                }
                return Ok(Resolved::File(File::from(fd)));
            }
            _ => {
                if !todo.is_empty() {
                    return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
                }
                return Ok(Resolved::Special(special_name(st.st_mode)));
            }
        }
    }
    Ok(Resolved::Dir(dirs.pop().expect("the root is always there")))
}

/// Reads at most `max` bytes of the regular file at `path` under `root`.
pub(crate) fn read_file(root: &Path, path: &str, max: usize) -> io::Result<Vec<u8>> {
    match resolve(root, path)? {
        Resolved::File(f) => {
            let mut bytes = Vec::new();
            f.take(max as u64).read_to_end(&mut bytes)?;
            Ok(bytes)
        }
        Resolved::Dir(_) => Err(io::Error::from_raw_os_error(libc::EISDIR)),
        Resolved::Special(what) => Err(io::Error::other(format!(
            "not read: {what}, not a regular file"
        ))),
    }
}

/// Entry names of the directory at `path` under `root` (unsorted).
pub(crate) fn list_dir(root: &Path, path: &str) -> io::Result<Vec<String>> {
    let Resolved::Dir(fd) = resolve(root, path)? else {
        return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
    };
    let dir = open_at(
        fd.as_raw_fd(),
        OsStr::new("."),
        libc::O_RDONLY | libc::O_DIRECTORY,
    )?;
    // The descriptor's own directory, whatever its path is now.
    std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect()
}

/// Whether `path` exists under `root` (symlinks resolved inside it).
pub(crate) fn exists(root: &Path, path: &str) -> bool {
    resolve(root, path).is_ok()
}
