//! zip archives (Cilium sysdumps are zip files), crafted byte by byte: members written as
//! Go's archive/zip writes them (deflated, sizes only in the central directory), paths
//! that climb out, a symbolic link member, a member that inflates past its stated size,
//! ZIP64 markers, and the byte and member limits. Nothing may land outside the
//! destination, and every refusal says why.

use plumb_collect::archive::{self, ArchiveError, Limits, SkipKind};
use plumb_testkit::Scratch;
use std::io::Write;

/// One member: name, content, Unix mode (0: none written), deflate or store, and the
/// size the central directory claims (None: the real one).
struct Member<'a> {
    name: &'a str,
    data: &'a [u8],
    mode: u32,
    deflate: bool,
    claimed: Option<u32>,
}

fn file<'a>(name: &'a str, data: &'a [u8]) -> Member<'a> {
    Member {
        name,
        data,
        mode: 0o100644,
        deflate: true,
        claimed: None,
    }
}

/// A zip as a streaming writer makes it: flag bit 3 set, zero sizes and CRC in the
/// local header, a data descriptor after the data, the real values in the central
/// directory. `zip64` writes 0xffff as the member count of the end record.
fn zip(members: &[Member], zip64: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for m in members {
        let offset = out.len() as u32;
        let body = if m.deflate {
            let mut e =
                flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(m.data).unwrap();
            e.finish().unwrap()
        } else {
            m.data.to_vec()
        };
        let mut crc = flate2::Crc::new();
        crc.update(m.data);
        let method: u16 = if m.deflate { 8 } else { 0 };
        let size = m.claimed.unwrap_or(m.data.len() as u32);
        out.extend_from_slice(b"PK\x03\x04");
        out.extend_from_slice(&20u16.to_le_bytes()); // version needed
        out.extend_from_slice(&8u16.to_le_bytes()); // flags: data descriptor
        out.extend_from_slice(&method.to_le_bytes());
        out.extend_from_slice(&[0; 4]); // time, date
        out.extend_from_slice(&[0; 12]); // crc, sizes: in the descriptor
        out.extend_from_slice(&(m.name.len() as u16).to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(m.name.as_bytes());
        out.extend_from_slice(&body);
        out.extend_from_slice(b"PK\x07\x08");
        out.extend_from_slice(&crc.sum().to_le_bytes());
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&size.to_le_bytes());

        central.extend_from_slice(b"PK\x01\x02");
        central.extend_from_slice(&(3u16 << 8 | 20).to_le_bytes()); // made by: Unix
        central.extend_from_slice(&20u16.to_le_bytes());
        central.extend_from_slice(&8u16.to_le_bytes());
        central.extend_from_slice(&method.to_le_bytes());
        central.extend_from_slice(&[0; 4]);
        central.extend_from_slice(&crc.sum().to_le_bytes());
        central.extend_from_slice(&(body.len() as u32).to_le_bytes());
        central.extend_from_slice(&size.to_le_bytes());
        central.extend_from_slice(&(m.name.len() as u16).to_le_bytes());
        central.extend_from_slice(&[0; 8]); // extra, comment, disk, internal attrs
        central.extend_from_slice(&(m.mode << 16).to_le_bytes());
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(m.name.as_bytes());
    }
    let dir_offset = out.len() as u32;
    out.extend_from_slice(&central);
    let count: u16 = if zip64 { 0xffff } else { members.len() as u16 };
    out.extend_from_slice(b"PK\x05\x06");
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&dir_offset.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}

fn extract(
    s: &Scratch,
    bytes: &[u8],
    limits: &Limits,
) -> Result<archive::Extraction, ArchiveError> {
    let path = s.path().join("in.zip");
    std::fs::write(&path, bytes).unwrap();
    let dest = s.path().join("out");
    std::fs::create_dir(&dest).unwrap();
    archive::extract_file(std::fs::File::open(&path).unwrap(), &dest, limits)
}

#[test]
fn streamed_deflated_members_are_extracted_from_the_central_directory_sizes() {
    let s = Scratch::new("zip-ok");
    let big = "cilium-dbg service list\n".repeat(10_000);
    let bytes = zip(
        &[
            Member {
                name: "cilium-sysdump-20260101-120000/",
                data: b"",
                mode: 0o040755,
                deflate: false,
                claimed: None,
            },
            file(
                "cilium-sysdump-20260101-120000/k8s-version.txt",
                b"v1.31.4\n",
            ),
            Member {
                deflate: false,
                ..file("cilium-sysdump-20260101-120000/stored.txt", b"as is")
            },
            file("cilium-sysdump-20260101-120000/big.md", big.as_bytes()),
        ],
        false,
    );
    let done = extract(&s, &bytes, &Limits::BUNDLE).unwrap();
    assert_eq!(done.files, 3);
    let root = s.path().join("out/cilium-sysdump-20260101-120000");
    assert_eq!(
        std::fs::read_to_string(root.join("k8s-version.txt")).unwrap(),
        "v1.31.4\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("stored.txt")).unwrap(),
        "as is"
    );
    assert_eq!(std::fs::read_to_string(root.join("big.md")).unwrap(), big);
}

#[test]
fn climbing_paths_and_links_are_skipped_and_nothing_lands_outside() {
    let s = Scratch::new("zip-evil");
    let bytes = zip(
        &[
            file("../escaped", b"x"),
            file("/etc/plumb-zip-test", b"x"),
            file("a/../../escaped2", b"x"),
            Member {
                mode: 0o120777,
                ..file("link", b"/etc/passwd")
            },
            Member {
                mode: 0o010644,
                ..file("fifo", b"")
            },
            file("kept", b"ok"),
        ],
        false,
    );
    let done = extract(&s, &bytes, &Limits::BUNDLE).unwrap();
    assert_eq!(done.files, 1);
    assert_eq!(done.skipped_of(SkipKind::UnsafePath).len(), 3, "{done:?}");
    assert_eq!(done.skipped_of(SkipKind::OtherType).len(), 2, "{done:?}");
    assert!(!s.path().join("escaped").exists());
    assert!(!std::path::Path::new("/etc/plumb-zip-test").exists());
    assert!(!s.path().join("out/link").exists());
    assert_eq!(
        std::fs::read_to_string(s.path().join("out/kept")).unwrap(),
        "ok"
    );
}

#[test]
fn a_member_that_inflates_past_its_stated_size_is_corrupt() {
    let s = Scratch::new("zip-bomb");
    let data = vec![0u8; 1 << 20];
    let bytes = zip(
        &[Member {
            claimed: Some(1024),
            ..file("bomb", &data)
        }],
        false,
    );
    let e = extract(&s, &bytes, &Limits::BUNDLE).unwrap_err();
    assert!(
        e.to_string().contains("inflates past its stated size"),
        "{e}"
    );
}

#[test]
fn zip64_truncation_and_limits_are_refused_with_a_reason() {
    let s = Scratch::new("zip-refused");
    let bytes = zip(&[file("a", b"x")], true);
    let e = extract(&s, &bytes, &Limits::BUNDLE).unwrap_err();
    assert!(matches!(e, ArchiveError::Unsupported("ZIP64")), "{e}");

    let s = Scratch::new("zip-truncated");
    let bytes = zip(&[file("a", b"x")], false);
    let e = extract(&s, &bytes[..bytes.len() - 10], &Limits::BUNDLE).unwrap_err();
    assert!(e.to_string().contains("end-of-central-directory"), "{e}");

    let s = Scratch::new("zip-limits");
    let bytes = zip(&[file("a", b"0123456789"), file("b", b"0123456789")], false);
    let small = Limits {
        max_bytes: 15,
        max_members: 10,
    };
    assert!(matches!(
        extract(&s, &bytes, &small).unwrap_err(),
        ArchiveError::TooLarge(15)
    ));
    let s = Scratch::new("zip-members");
    let few = Limits {
        max_bytes: 1 << 20,
        max_members: 1,
    };
    assert!(matches!(
        extract(&s, &bytes, &few).unwrap_err(),
        ArchiveError::TooManyMembers(1)
    ));
}
