//! Reading a support-bundle archive into a private directory without the system `tar`.
//!
//! A bundle comes from someone else's machine and plumb reads it as root, so the archive is
//! read here, in Rust, with rules that do not depend on a tar implementation's defaults:
//!
//! - The format is told by magic bytes, never by the file name: a tar stream, plain or
//!   compressed with gzip (`.tar.gz`, `.tgz`) or xz (`.tar.xz`), and zip (stored or
//!   deflated members; Cilium's sysdumps are zip files) when read from a file
//!   ([`extract_file`]: zip keeps its directory at the end). bzip2, zstd, 7-Zip and ZIP64
//!   are recognised and refused with a clear message. The path is a local file:
//!   `host:file` is a file name.
//! - zip members are files and directories only (a zip's symbolic links and special
//!   files are skipped); their paths pass the same checks as tar members, and their
//!   sizes count against the same limits, measured while they are inflated.
//! - Only regular files, directories and symbolic links that stay inside the archive are
//!   created. Device nodes, FIFOs, hard links, links pointing outside, members with an
//!   absolute path or a `..` component, and members under a symbolic link are skipped and
//!   listed in [`Extraction::notes`].
//! - Every file and directory is created below `dest` through directory descriptors opened
//!   with `O_NOFOLLOW` (`openat`, `mkdirat`, `symlinkat`): nothing is ever written through a
//!   symbolic link, so nothing lands outside `dest`. Files are 0600, directories 0700, owned
//!   by the reader; the archive's modes, owners and times are ignored.
//! - Sizes are bounded by [`Limits`]: the member data read (written or skipped, counted
//!   while it is read), the number of members, and the bytes of headers (GNU long names and
//!   pax extensions are read into memory by the tar reader, so each is capped before it can
//!   grow). The xz decoder's memory is capped too.
//!
//! Symbolic links are kept when their target, resolved lexically from the link's own
//! directory, stays inside the archive (sosreports link `lsmod` to
//! `sos_commands/kernel/lsmod` and so on). A chain of links can still resolve elsewhere
//! physically; that is why readers resolve every path again before opening it and refuse
//! what leaves the bundle (`BundleNode` does, and opens regular files only).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::rc::Rc;

/// Most member data plumb extracts from one archive (a sosreport is typically 10–500 MB
/// unpacked); beyond it, unpack the archive by hand and pass the directory.
pub const MAX_EXTRACTED: u64 = 4 * 1024 * 1024 * 1024;

/// Most members (files, directories, links, skipped ones included) plumb reads from one
/// archive. Large sosreports hold tens of thousands of files and Rancher's collector a few
/// thousand; half a million is ten times the largest seen while still bounding the inodes
/// and the time an archive of millions of empty files could cost.
pub const MAX_MEMBERS: u64 = 500_000;

/// Most header bytes (GNU long name, long link or pax extension) one member may carry: the
/// tar reader holds them in memory. Real ones are a few hundred bytes (PATH_MAX is 4096).
pub const MAX_MEMBER_HEADER: u64 = 1024 * 1024;

/// Memory the xz decoder may use. `xz -9` needs a 64 MiB dictionary (sosreport uses 8 MiB);
/// an archive asking for more than twice that is refused rather than allowed to claim
/// gigabytes.
const XZ_MEMORY_LIMIT_KIB: u32 = 128 * 1024;

/// Bounds on one extraction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Member data read from the archive, written or skipped, in bytes.
    pub max_bytes: u64,
    /// Members read, skipped ones included.
    pub max_members: u64,
}

impl Limits {
    /// The limits `plumb doctor --bundle` uses.
    pub const BUNDLE: Limits = Limits {
        max_bytes: MAX_EXTRACTED,
        max_members: MAX_MEMBERS,
    };

    /// All header bytes allowed in one archive: a 512-byte header plus padding for every
    /// member, with room for long names, plus one maximal header.
    fn header_bytes(&self) -> u64 {
        self.max_members
            .saturating_mul(2048)
            .saturating_add(MAX_MEMBER_HEADER)
    }
}

/// Why an archive could not be extracted. The messages follow the archive's path.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// A format plumb recognises but does not read.
    #[error(
        "a {0} archive; plumb reads tar archives, plain or compressed with gzip or xz (.tar, .tar.gz, .tgz, .tar.xz), and zip files (not ZIP64): unpack it yourself and pass the directory"
    )]
    Unsupported(&'static str),
    /// More member data than [`Limits::max_bytes`].
    #[error(
        "unpacks to more than {} MiB, more than plumb extracts; unpack it yourself and pass the directory",
        .0 >> 20
    )]
    TooLarge(u64),
    /// More members than [`Limits::max_members`].
    #[error(
        "holds more than {0} members, more than plumb extracts; unpack it yourself and pass the directory"
    )]
    TooManyMembers(u64),
    /// A member's headers (long name, pax extension) are larger than plumb reads.
    #[error(
        "member {index}: its header (long name or pax extension) is larger than {} KiB, or all headers add up to more than plumb reads; not a bundle plumb reads",
        MAX_MEMBER_HEADER >> 10
    )]
    HeaderTooLarge {
        /// 1-based position of the member in the archive.
        index: u64,
    },
    /// Not a tar stream, or truncated or corrupt (decompression included).
    #[error("not a readable tar archive (.tar, .tar.gz, .tgz, .tar.xz): {source}{}", after(.last))]
    Corrupt {
        /// The last member read before the error.
        last: Option<String>,
        /// What the reader said.
        #[source]
        source: io::Error,
    },
    /// The archive holds no member at all.
    #[error("not a readable tar archive (.tar, .tar.gz, .tgz, .tar.xz): it holds no member")]
    Empty,
    /// Writing into the destination failed (disk full, ...).
    #[error("could not write {path} while extracting: {source}")]
    Write {
        /// The member's path inside the archive.
        path: String,
        /// What the filesystem said.
        #[source]
        source: io::Error,
    },
}

fn after(last: &Option<String>) -> String {
    last.as_ref()
        .map(|p| format!(" (after member {p})"))
        .unwrap_or_default()
}

/// Kinds of members that were not extracted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SkipKind {
    /// A symbolic link whose target is absolute or climbs out of the archive.
    LinkOutside,
    /// A hard link (tar's `1` type).
    HardLink,
    /// A block device node.
    BlockDevice,
    /// A character device node.
    CharDevice,
    /// A FIFO (named pipe).
    Fifo,
    /// A member whose path is absolute or has a `..` component.
    UnsafePath,
    /// A member whose parent in the archive is a symbolic link or a file.
    UnderLink,
    /// A member the filesystem refused (name too long, a directory in the way, ...).
    NotCreated,
    /// A member of a type plumb does not know (volume label, socket, ...).
    OtherType,
}

impl SkipKind {
    fn describe(self) -> &'static str {
        match self {
            SkipKind::LinkOutside => "symbolic links pointing outside the bundle",
            SkipKind::HardLink => "hard links",
            SkipKind::BlockDevice => "block devices",
            SkipKind::CharDevice => "character devices",
            SkipKind::Fifo => "FIFOs",
            SkipKind::UnsafePath => "members with an absolute path or a '..' component",
            SkipKind::UnderLink => "members under a symbolic link or a file",
            SkipKind::NotCreated => "members that could not be created",
            SkipKind::OtherType => "members of another type",
        }
    }
}

/// How many examples of each skipped kind are kept for the notes.
const EXAMPLES: usize = 5;

/// What an extraction produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Extraction {
    /// Regular files written.
    pub files: u64,
    /// Directories created (parents included).
    pub dirs: u64,
    /// Symbolic links created (all pointing inside).
    pub links: u64,
    /// Bytes of file data written.
    pub bytes_written: u64,
    /// Members read, skipped ones included.
    pub members: u64,
    /// Members not extracted, by kind: how many, and the first few as `path` or
    /// `path -> target`.
    pub skipped: BTreeMap<SkipKind, (u64, Vec<String>)>,
}

impl Extraction {
    /// One line per kind of skipped member, for the user: `not extracted: 2 block devices
    /// (a/sda, a/sdb)`.
    pub fn notes(&self) -> Vec<String> {
        self.skipped
            .iter()
            .map(|(kind, (n, examples))| {
                let more = if *n as usize > examples.len() {
                    ", ..."
                } else {
                    ""
                };
                format!(
                    "not extracted: {n} {} ({}{more})",
                    kind.describe(),
                    examples.join(", ")
                )
            })
            .collect()
    }

    /// Members of one kind that were skipped (the first few).
    pub fn skipped_of(&self, kind: SkipKind) -> &[String] {
        self.skipped
            .get(&kind)
            .map(|(_, v)| v.as_slice())
            .unwrap_or(&[])
    }

    fn skip(&mut self, kind: SkipKind, what: String) {
        let e = self.skipped.entry(kind).or_default();
        e.0 += 1;
        if e.1.len() < EXAMPLES {
            e.1.push(what);
        }
    }
}

/// The compression an archive's first bytes announce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Compression {
    None,
    Gzip,
    Xz,
}

fn detect(head: &[u8]) -> Result<Compression, ArchiveError> {
    let starts = |magic: &[u8]| head.starts_with(magic);
    if starts(&[0x1f, 0x8b]) {
        Ok(Compression::Gzip)
    } else if starts(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
        Ok(Compression::Xz)
    } else if starts(b"PK\x03\x04") || starts(b"PK\x05\x06") {
        Err(ArchiveError::Unsupported("zip"))
    } else if starts(b"BZh") {
        Err(ArchiveError::Unsupported("bzip2-compressed"))
    } else if starts(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Err(ArchiveError::Unsupported("zstd-compressed"))
    } else if starts(&[b'7', b'z', 0xbc, 0xaf, 0x27, 0x1c]) {
        Err(ArchiveError::Unsupported("7-Zip"))
    } else {
        Ok(Compression::None)
    }
}

/// A reader that lets through only as many bytes as it is allowed, then fails; the
/// extraction loop sets the allowance before each step of the tar reader (a member's data,
/// or the headers up to the next member).
struct Metered<R> {
    inner: R,
    allow: Rc<Cell<u64>>,
    tripped: Rc<Cell<bool>>,
}

impl<R: Read> Read for Metered<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let allow = self.allow.get();
        if allow == 0 && !buf.is_empty() {
            self.tripped.set(true);
            return Err(io::Error::other(
                "more bytes than the member's header and size allow",
            ));
        }
        let want = buf.len().min(usize::try_from(allow).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.allow.set(allow - n as u64);
        Ok(n)
    }
}

/// Most bytes of a zip's central directory plumb reads (46 bytes plus the name per
/// member: 64 MiB is far beyond any sysdump).
const MAX_ZIP_DIRECTORY: u64 = 64 * 1024 * 1024;

/// [`extract`] for an archive in a file: tar streams as [`extract`] reads them, and zip
/// archives, whose member list is at the end of the file.
pub fn extract_file(
    mut file: std::fs::File,
    dest: &Path,
    limits: &Limits,
) -> Result<Extraction, ArchiveError> {
    use std::io::Seek;
    let mut head = [0u8; 4];
    let got = read_full(&mut file, &mut head)
        .map_err(|source| ArchiveError::Corrupt { last: None, source })?;
    file.rewind()
        .map_err(|source| ArchiveError::Corrupt { last: None, source })?;
    if head[..got].starts_with(b"PK\x03\x04") || head[..got].starts_with(b"PK\x05\x06") {
        zip::extract(file, dest, limits)
    } else {
        extract(file, dest, limits)
    }
}

/// Reads until `buf` is full or the input ends; the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

mod zip {
    //! The zip reader: the end-of-central-directory record, then each member's central
    //! header (sizes, method, offset; writers that stream — Go's archive/zip, which
    //! cilium-cli uses — leave the local header's sizes zero), then its data.

    use super::*;
    use std::io::{Seek, SeekFrom};

    fn corrupt(why: impl Into<String>) -> ArchiveError {
        ArchiveError::Corrupt {
            last: None,
            source: io::Error::other(why.into()),
        }
    }

    fn u16_at(b: &[u8], at: usize) -> u16 {
        u16::from_le_bytes([b[at], b[at + 1]])
    }

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }

    struct Member {
        name: Vec<u8>,
        method: u16,
        compressed: u64,
        size: u64,
        offset: u64,
        /// Unix mode from the external attributes (0 when not written by a Unix zip).
        mode: u32,
    }

    pub(super) fn extract(
        mut file: std::fs::File,
        dest: &Path,
        limits: &Limits,
    ) -> Result<Extraction, ArchiveError> {
        let io_err = |source| ArchiveError::Corrupt { last: None, source };
        let len = file.seek(SeekFrom::End(0)).map_err(io_err)?;
        // The end record is 22 bytes plus a comment of at most 65,535.
        let tail_len = len.min(22 + 65_535);
        file.seek(SeekFrom::Start(len - tail_len)).map_err(io_err)?;
        let mut tail = vec![0u8; tail_len as usize];
        file.read_exact(&mut tail).map_err(io_err)?;
        let eocd = (0..tail.len().saturating_sub(21))
            .rev()
            .find(|&i| tail[i..].starts_with(b"PK\x05\x06"))
            .ok_or_else(|| corrupt("a zip without its end-of-central-directory record"))?;
        let e = &tail[eocd..];
        let count = u64::from(u16_at(e, 10));
        let dir_size = u64::from(u32_at(e, 12));
        let dir_offset = u64::from(u32_at(e, 16));
        if count == 0xffff || dir_size == 0xffff_ffff || dir_offset == 0xffff_ffff {
            return Err(ArchiveError::Unsupported("ZIP64"));
        }
        if count > limits.max_members {
            return Err(ArchiveError::TooManyMembers(limits.max_members));
        }
        if dir_size > MAX_ZIP_DIRECTORY || dir_offset.saturating_add(dir_size) > len {
            return Err(corrupt("the zip's central directory lies outside the file"));
        }
        file.seek(SeekFrom::Start(dir_offset)).map_err(io_err)?;
        let mut dir = vec![0u8; dir_size as usize];
        file.read_exact(&mut dir).map_err(io_err)?;
        let mut members = Vec::new();
        let mut at = 0usize;
        for i in 0..count {
            let h = dir
                .get(at..at + 46)
                .filter(|h| h.starts_with(b"PK\x01\x02"))
                .ok_or_else(|| corrupt(format!("zip member {}: bad central header", i + 1)))?;
            let (n, x, c) = (
                usize::from(u16_at(h, 28)),
                usize::from(u16_at(h, 30)),
                usize::from(u16_at(h, 32)),
            );
            let name = dir
                .get(at + 46..at + 46 + n)
                .ok_or_else(|| corrupt(format!("zip member {}: name past the directory", i + 1)))?
                .to_vec();
            members.push(Member {
                method: u16_at(h, 10),
                compressed: u64::from(u32_at(h, 20)),
                size: u64::from(u32_at(h, 24)),
                mode: u32_at(h, 38) >> 16,
                offset: u64::from(u32_at(h, 42)),
                name,
            });
            at += 46 + n + x + c;
        }
        if members.is_empty() {
            return Err(ArchiveError::Empty);
        }
        let root = open_dir(dest).map_err(|source| ArchiveError::Write {
            path: dest.display().to_string(),
            source,
        })?;
        let mut out = Writer {
            dirs: Dirs { root, cached: None },
            done: Extraction::default(),
            limits: *limits,
        };
        let mut data = 0u64;
        for m in &members {
            out.done.members += 1;
            let shown = String::from_utf8_lossy(&m.name).into_owned();
            let last = Some(shown.clone());
            data = data.saturating_add(m.size);
            if data > limits.max_bytes {
                return Err(ArchiveError::TooLarge(limits.max_bytes));
            }
            let kind = m.mode & 0o170000;
            let is_dir = m.name.ends_with(b"/") || kind == 0o040000;
            if !is_dir && kind != 0 && kind != 0o100000 {
                out.done.skip(SkipKind::OtherType, shown);
                continue;
            }
            let Some(c) = components(&m.name) else {
                out.done.skip(SkipKind::UnsafePath, shown);
                continue;
            };
            if c.is_empty() {
                continue;
            }
            let outcome = if is_dir {
                out.dir(&c, &shown)?
            } else {
                let mut reader = member_data(&mut file, m).map_err(|e| e.with_last(&last))?;
                out.file(&c, &mut reader, &shown)
                    .map_err(|e| e.with_last(&last))?
            };
            if let Outcome::Skip(kind, what) = outcome {
                out.done.skip(kind, what);
            }
        }
        Ok(out.done)
    }

    /// The member's data, inflated, and never more than its stated size (a member
    /// that inflates beyond it is corrupt, not extracted further).
    fn member_data<'a>(
        file: &'a mut std::fs::File,
        m: &Member,
    ) -> Result<Box<dyn Read + 'a>, ArchiveError> {
        let io_err = |source| ArchiveError::Corrupt { last: None, source };
        file.seek(SeekFrom::Start(m.offset)).map_err(io_err)?;
        let mut local = [0u8; 30];
        file.read_exact(&mut local).map_err(io_err)?;
        if !local.starts_with(b"PK\x03\x04") {
            return Err(corrupt("a zip member's local header is missing"));
        }
        let skip = i64::from(u16_at(&local, 26)) + i64::from(u16_at(&local, 28));
        file.seek(SeekFrom::Current(skip)).map_err(io_err)?;
        let raw = Read::take(file, m.compressed);
        let inflated: Box<dyn Read + 'a> = match m.method {
            0 => Box::new(raw),
            8 => Box::new(flate2::read::DeflateDecoder::new(raw)),
            other => {
                return Err(corrupt(format!(
                    "zip compression method {other}; plumb reads stored and deflated members"
                )));
            }
        };
        Ok(Box::new(Exact {
            inner: inflated,
            left: m.size,
        }))
    }

    /// Passes `left` bytes through and fails on any more.
    struct Exact<R> {
        inner: R,
        left: u64,
    }

    impl<R: Read> Read for Exact<R> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if buf.is_empty() {
                return Ok(0);
            }
            if self.left == 0 {
                // One byte more than stated is corruption (or a zip bomb's lie).
                let mut one = [0u8; 1];
                return match self.inner.read(&mut one)? {
                    0 => Ok(0),
                    _ => Err(io::Error::other(
                        "a zip member inflates past its stated size",
                    )),
                };
            }
            let want = buf
                .len()
                .min(usize::try_from(self.left).unwrap_or(usize::MAX));
            let n = self.inner.read(&mut buf[..want])?;
            if n == 0 {
                return Err(io::Error::other("a zip member ends before its stated size"));
            }
            self.left -= n as u64;
            Ok(n)
        }
    }
}

/// Extracts the archive read from `input` into `dest`, an existing directory that only the
/// caller writes to (a private temporary directory), within `limits`.
///
/// On error, `dest` may hold part of the archive: the caller removes it.
pub fn extract(input: impl Read, dest: &Path, limits: &Limits) -> Result<Extraction, ArchiveError> {
    let mut input = io::BufReader::with_capacity(64 * 1024, input);
    let mut head = [0u8; 8];
    let mut got = 0;
    while got < head.len() {
        match input.read(&mut head[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(source) => return Err(ArchiveError::Corrupt { last: None, source }),
        }
    }
    let head = &head[..got];
    let input = io::Cursor::new(head.to_vec()).chain(input);
    let decoded: Box<dyn Read> = match detect(head)? {
        Compression::None => Box::new(input),
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(input)),
        Compression::Xz => Box::new(lzma_rust2::XzReader::new_mem_limit(
            input,
            true,
            XZ_MEMORY_LIMIT_KIB,
        )),
    };
    let root = open_dir(dest).map_err(|source| ArchiveError::Write {
        path: dest.display().to_string(),
        source,
    })?;
    let allow = Rc::new(Cell::new(0));
    let tripped = Rc::new(Cell::new(false));
    let metered = Metered {
        inner: decoded,
        allow: allow.clone(),
        tripped: tripped.clone(),
    };
    let mut archive = tar::Archive::new(metered);
    let entries = archive
        .entries()
        .map_err(|source| ArchiveError::Corrupt { last: None, source })?;
    let mut out = Writer {
        dirs: Dirs { root, cached: None },
        done: Extraction::default(),
        limits: *limits,
    };
    let mut header_left = limits.header_bytes();
    let mut data = 0u64;
    let mut last: Option<String> = None;
    let mut entries = entries;
    loop {
        // Whatever is left of the previous member's data (the tar reader skips it), plus
        // the headers of the next member.
        let carry = allow.get();
        let chunk = MAX_MEMBER_HEADER.min(header_left);
        allow.set(carry + chunk);
        let next = entries.next();
        header_left -= (carry + chunk - allow.get())
            .saturating_sub(carry)
            .min(header_left);
        let mut entry = match next {
            None => break,
            Some(Ok(entry)) => entry,
            Some(Err(source)) => {
                return Err(if tripped.get() {
                    ArchiveError::HeaderTooLarge {
                        index: out.done.members + 1,
                    }
                } else {
                    ArchiveError::Corrupt { last, source }
                });
            }
        };
        out.done.members += 1;
        if out.done.members > limits.max_members {
            return Err(ArchiveError::TooManyMembers(limits.max_members));
        }
        // Every member's data counts, extracted or not: skipping it means reading it.
        let size = entry.size();
        data = data.saturating_add(size);
        if data > limits.max_bytes {
            return Err(ArchiveError::TooLarge(limits.max_bytes));
        }
        allow.set(size);
        let path = entry.path_bytes().into_owned();
        last = Some(String::from_utf8_lossy(&path).into_owned());
        out.member(&mut entry, &path)
            .map_err(|e| e.with_last(&last))?;
    }
    if out.done.members == 0 {
        return Err(ArchiveError::Empty);
    }
    Ok(out.done)
}

impl ArchiveError {
    fn with_last(self, last: &Option<String>) -> ArchiveError {
        match self {
            ArchiveError::Corrupt { last: None, source } => ArchiveError::Corrupt {
                last: last.clone(),
                source,
            },
            e => e,
        }
    }
}

/// A member's path split into safe components, or why it is unsafe.
fn components(path: &[u8]) -> Option<Vec<&[u8]>> {
    if path.first() == Some(&b'/') {
        return None;
    }
    let mut out = Vec::new();
    for c in path.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

/// Whether a link at `parent_depth` components below the root, pointing at `target`,
/// stays inside the root when resolved lexically.
fn link_stays_inside(parent_depth: usize, target: &[u8]) -> bool {
    if target.is_empty() || target[0] == b'/' {
        return false;
    }
    let mut depth = parent_depth;
    for c in target.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return false,
            },
            _ => depth += 1,
        }
    }
    true
}

struct Writer {
    dirs: Dirs,
    done: Extraction,
    limits: Limits,
}

/// What happened to one member.
enum Outcome {
    Done,
    Skip(SkipKind, String),
}

impl Writer {
    fn member<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        raw_path: &[u8],
    ) -> Result<(), ArchiveError> {
        let shown = String::from_utf8_lossy(raw_path).into_owned();
        let kind = entry.header().entry_type();
        use tar::EntryType as T;
        let outcome = match kind {
            // Headers the tar reader hands through carry nothing to extract.
            T::XGlobalHeader | T::XHeader | T::GNULongName | T::GNULongLink => Outcome::Done,
            T::Link => Outcome::Skip(SkipKind::HardLink, link_shown(&shown, entry)),
            T::Block => Outcome::Skip(SkipKind::BlockDevice, shown.clone()),
            T::Char => Outcome::Skip(SkipKind::CharDevice, shown.clone()),
            T::Fifo => Outcome::Skip(SkipKind::Fifo, shown.clone()),
            T::Regular | T::Continuous | T::GNUSparse | T::Directory | T::Symlink => {
                match components(raw_path) {
                    None => Outcome::Skip(SkipKind::UnsafePath, shown.clone()),
                    // `./` and the like: the root itself.
                    Some(c) if c.is_empty() => Outcome::Done,
                    Some(c) => {
                        // Old tar writers mark directories with a trailing slash only.
                        let dir = kind == T::Directory
                            || (kind == T::Regular && raw_path.ends_with(b"/"));
                        if dir {
                            self.dir(&c, &shown)?
                        } else if kind == T::Symlink {
                            self.symlink(&c, entry, &shown)?
                        } else {
                            self.file(&c, entry, &shown)?
                        }
                    }
                }
            }
            _ => Outcome::Skip(SkipKind::OtherType, shown.clone()),
        };
        if let Outcome::Skip(kind, what) = outcome {
            self.done.skip(kind, what);
        }
        Ok(())
    }

    fn dir(&mut self, c: &[&[u8]], shown: &str) -> Result<Outcome, ArchiveError> {
        match self.dirs.open(c, &mut self.done.dirs) {
            Ok(_) => Ok(Outcome::Done),
            Err(e) => not_created(e, shown),
        }
    }

    fn symlink<R: Read>(
        &mut self,
        c: &[&[u8]],
        entry: &tar::Entry<'_, R>,
        shown: &str,
    ) -> Result<Outcome, ArchiveError> {
        let target = entry.link_name_bytes().unwrap_or_default().into_owned();
        let (name, parent) = c.split_last().expect("non-empty");
        let with_target = format!("{shown} -> {}", String::from_utf8_lossy(&target));
        if !link_stays_inside(parent.len(), &target) {
            return Ok(Outcome::Skip(SkipKind::LinkOutside, with_target));
        }
        let (Ok(name), Ok(target)) = (CString::new(*name), CString::new(target)) else {
            return Ok(Outcome::Skip(SkipKind::NotCreated, with_target));
        };
        let dir = match self.dirs.open(parent, &mut self.done.dirs) {
            Ok(d) => d,
            Err(e) => return not_created(e, shown),
        };
        let made = replacing(dir, &name, || {
            // SAFETY: both strings are NUL-terminated CStrings that outlive the call; `dir`
            // is an open directory descriptor.
            cvt(unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) })
        });
        match made {
            Ok(()) => {
                self.done.links += 1;
                Ok(Outcome::Done)
            }
            Err(e) => not_created(e, shown),
        }
    }

    fn file(
        &mut self,
        c: &[&[u8]],
        entry: &mut impl Read,
        shown: &str,
    ) -> Result<Outcome, ArchiveError> {
        let (name, parent) = c.split_last().expect("non-empty");
        let Ok(name) = CString::new(*name) else {
            return Ok(Outcome::Skip(SkipKind::NotCreated, shown.to_string()));
        };
        let dir = match self.dirs.open(parent, &mut self.done.dirs) {
            Ok(d) => d,
            Err(e) => return not_created(e, shown),
        };
        let mut fd = None;
        let made = replacing(dir, &name, || {
            // SAFETY: `name` is a NUL-terminated CString that outlives the call; `dir` is an
            // open directory descriptor. O_EXCL|O_NOFOLLOW: a new file, never through a link.
            let r = unsafe {
                libc::openat(
                    dir.as_raw_fd(),
                    name.as_ptr(),
                    libc::O_WRONLY
                        | libc::O_CREAT
                        | libc::O_EXCL
                        | libc::O_NOFOLLOW
                        | libc::O_CLOEXEC,
                    0o600 as libc::c_uint,
                )
            };
            cvt(r).map(|()| {
                // SAFETY: `r` is a descriptor openat just returned, owned by nobody else.
                fd = Some(unsafe { OwnedFd::from_raw_fd(r) })
            })
        });
        let mut file = match (made, fd) {
            (Ok(()), Some(fd)) => std::fs::File::from(fd),
            (Err(e), _) => return not_created(e, shown),
            (Ok(()), None) => unreachable!("openat succeeded without a descriptor"),
        };
        // Count what is written, whatever the header said, and stop at the limit.
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match entry.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => return Err(ArchiveError::Corrupt { last: None, source }),
            };
            if self.done.bytes_written + n as u64 > self.limits.max_bytes {
                return Err(ArchiveError::TooLarge(self.limits.max_bytes));
            }
            file.write_all(&buf[..n])
                .map_err(|source| ArchiveError::Write {
                    path: shown.to_string(),
                    source,
                })?;
            self.done.bytes_written += n as u64;
        }
        self.done.files += 1;
        Ok(Outcome::Done)
    }
}

fn link_shown<R: Read>(shown: &str, entry: &tar::Entry<'_, R>) -> String {
    match entry.link_name_bytes() {
        Some(t) => format!("{shown} -> {}", String::from_utf8_lossy(&t)),
        None => shown.to_string(),
    }
}

/// A filesystem error on one member: skipped when it is about that member, fatal when
/// the destination itself is failing (full, read-only, out of descriptors).
fn not_created(e: io::Error, shown: &str) -> Result<Outcome, ArchiveError> {
    match e.raw_os_error() {
        Some(
            libc::ENOSPC | libc::EDQUOT | libc::EIO | libc::EROFS | libc::EMFILE | libc::ENFILE,
        ) => Err(ArchiveError::Write {
            path: shown.to_string(),
            source: e,
        }),
        Some(libc::ELOOP | libc::ENOTDIR) => {
            Ok(Outcome::Skip(SkipKind::UnderLink, shown.to_string()))
        }
        _ => Ok(Outcome::Skip(SkipKind::NotCreated, format!("{shown}: {e}"))),
    }
}

fn cvt(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Runs `create`; when the name is taken by anything but a directory (a later member
/// replaces an earlier one, as tar does), removes that entry — never following it — and
/// tries once more.
fn replacing(
    dir: BorrowedFd<'_>,
    name: &CString,
    mut create: impl FnMut() -> io::Result<()>,
) -> io::Result<()> {
    match create() {
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
            // SAFETY: `name` is NUL-terminated and outlives the call; `dir` is open.
            // unlinkat without AT_REMOVEDIR fails on a directory (EISDIR), which is kept.
            cvt(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) })?;
            create()
        }
        r => r,
    }
}

fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    Ok(std::fs::File::open(path)?.into())
}

/// Directories below the destination, opened one component at a time with `O_NOFOLLOW`;
/// the last one opened is kept (archive members come grouped by directory).
struct Dirs {
    root: OwnedFd,
    cached: Option<(Vec<Vec<u8>>, OwnedFd)>,
}

impl Dirs {
    /// The directory at `path` below the root, created (0700) where missing.
    fn open(&mut self, path: &[&[u8]], created: &mut u64) -> io::Result<BorrowedFd<'_>> {
        if path.is_empty() {
            return Ok(self.root.as_fd());
        }
        let hit = self
            .cached
            .as_ref()
            .is_some_and(|(p, _)| p.len() == path.len() && p.iter().zip(path).all(|(a, b)| a == b));
        if !hit {
            let mut cur: Option<OwnedFd> = None;
            for c in path {
                let name =
                    CString::new(*c).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
                let parent = cur.as_ref().map(|f| f.as_fd()).unwrap_or(self.root.as_fd());
                // SAFETY: `name` is NUL-terminated and outlives the call; `parent` is open.
                match cvt(unsafe { libc::mkdirat(parent.as_raw_fd(), name.as_ptr(), 0o700) }) {
                    Ok(()) => *created += 1,
                    Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                    Err(e) => return Err(e),
                }
                // SAFETY: as above. O_NOFOLLOW|O_DIRECTORY: fails on a symbolic link or a
                // file standing where the directory should be.
                let fd = unsafe {
                    libc::openat(
                        parent.as_raw_fd(),
                        name.as_ptr(),
                        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                    )
                };
                cvt(fd)?;
                // SAFETY: `fd` was just returned by openat and is owned by nobody else.
                cur = Some(unsafe { OwnedFd::from_raw_fd(fd) });
            }
            let fd = cur.expect("path is not empty");
            self.cached = Some((path.iter().map(|c| c.to_vec()).collect(), fd));
        }
        Ok(self.cached.as_ref().expect("just cached").1.as_fd())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_with_dotdot_or_a_leading_slash_are_unsafe() {
        assert_eq!(components(b"a/./b//c"), Some(vec![&b"a"[..], b"b", b"c"]));
        assert_eq!(components(b"./"), Some(vec![]));
        assert_eq!(components(b"../x"), None);
        assert_eq!(components(b"a/../../x"), None);
        assert_eq!(components(b"a/.."), None);
        assert_eq!(components(b"/etc/x"), None);
    }

    #[test]
    fn links_are_kept_only_when_they_stay_inside_lexically() {
        assert!(link_stays_inside(0, b"sos_commands/kernel/lsmod"));
        assert!(link_stays_inside(2, b"../../x"));
        assert!(link_stays_inside(1, b"./../y"));
        assert!(!link_stays_inside(2, b"../../../x"));
        assert!(!link_stays_inside(0, b".."));
        assert!(!link_stays_inside(3, b"/etc/passwd"));
        assert!(!link_stays_inside(0, b""));
    }

    #[test]
    fn formats_are_told_by_magic_bytes() {
        assert_eq!(detect(&[0x1f, 0x8b, 8]).unwrap(), Compression::Gzip);
        assert_eq!(detect(b"\xfd7zXZ\0").unwrap(), Compression::Xz);
        assert_eq!(detect(b"anything").unwrap(), Compression::None);
        assert!(matches!(
            detect(b"PK\x03\x04"),
            Err(ArchiveError::Unsupported("zip"))
        ));
        assert!(matches!(
            detect(b"BZh91AY"),
            Err(ArchiveError::Unsupported(_))
        ));
    }
}
