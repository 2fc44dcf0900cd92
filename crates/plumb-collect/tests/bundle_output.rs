//! `plumb collect`'s output file: the archive and its members are private (0600), every
//! entry is redacted by its format and the manifest counts exactly what was replaced,
//! an existing `X.partial` (file or symlink) is never written through, an existing
//! output is never replaced (also when it appears while the bundle is written), and a
//! failed run leaves nothing behind. The source is a plumb bundle directory (a real
//! [`NodeSource`]; no privileges needed).

use plumb_collect::bundle_writer::write_bundle;
use plumb_collect::facts::GatherOptions;
use plumb_collect::new_file::{NewFile, partial_path};
use plumb_collect::node::{BundleKind, NodeSource, open_bundle};
use plumb_testkit::Scratch;
use std::io::Read;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

/// A plumb bundle directory holding secrets in the shapes collect reads.
fn source_bundle(scratch: &Scratch) -> std::path::PathBuf {
    let dir = scratch.path().join("source");
    let w = |rel: &str, text: &str| {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    w("plumb-manifest.json", "{}");
    w(
        "files/etc/rancher/rke2/config.yaml",
        "token: K10PLANTED01::server:ab\ndatastore-endpoint: \"postgres://u:PLANTED02@db/k\"\ncni: canal\n",
    );
    w(
        "files/var/lib/rancher/rke2/agent/pod-manifests/kube-proxy.yaml",
        "spec:\n  containers:\n  - name: kube-proxy\n    env: [{name: DB_PASSWORD, value: PLANTED03}]\n    command:\n    - kube-proxy\n    - --token\n    - PLANTED04\n",
    );
    w(
        "files/etc/cni/net.d/10-calico.conflist",
        "{\"plugins\":[{\"type\":\"calico\",\"policy\":{\"k8s_auth_token\":\"PLANTED05\"}}]}",
    );
    w(
        "files/var/log/pods/kube-system_kube-proxy-n1_u1/kube-proxy/0.log",
        "2026-11-30T08:00:00.000000001Z stdout F {\"password\":\"PLANTED06\"}\n2026-11-30T08:00:00.000000002Z stderr F E1130 08:00:00.000001 1 proxier.go:1598] \"Failed to execute iptables-restore\" err=\"Chain 'KUBE-SVC-NPX46M4PTMTKRN6Y' does not exist\"\n",
    );
    w(
        "commands/ps_-eo_pid_comm_args",
        "    PID COMMAND COMMAND\n   12 rke2 rke2 agent --token PLANTED07 --client-key=PLANTED08\n",
    );
    w(
        "commands/iptables-nft-save",
        "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\nCOMMIT\n",
    );
    w("commands/sysctl_-a", "net.ipv4.ip_forward = 1\n");
    dir
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

/// Members of a .tar.gz as (path, mode, text).
fn members(p: &Path) -> Vec<(String, u32, String)> {
    let f = std::fs::File::open(p).unwrap();
    let mut a = tar::Archive::new(flate2::read::GzDecoder::new(f));
    a.entries()
        .unwrap()
        .map(|e| {
            let mut e = e.unwrap();
            let path = e.path().unwrap().to_string_lossy().into_owned();
            let mode = e.header().mode().unwrap();
            let mut text = String::new();
            e.read_to_string(&mut text).unwrap();
            (path, mode, text)
        })
        .collect()
}

#[test]
fn archive_and_members_are_private_and_every_entry_redacted() {
    let scratch = Scratch::new("bundle-out");
    let source = open_bundle(&source_bundle(&scratch)).unwrap();
    let out = scratch.path().join("bundle.tar.gz");
    let manifest = write_bundle(&source, &out, &GatherOptions::default()).expect("writing");
    assert_eq!(mode(&out), 0o600);
    assert!(!partial_path(&out).exists());
    let members = members(&out);
    for (path, m, text) in &members {
        assert!(!text.contains("PLANTED"), "{path}: {text}");
        let want = if path.ends_with('/') { 0o700 } else { 0o600 };
        assert_eq!(*m, want, "{path}");
    }
    // Eight planted values, each counted once; nothing else.
    assert_eq!(manifest.redactions(), 8, "{manifest:#?}");
    let paths: Vec<&str> = members.iter().map(|(p, ..)| p.as_str()).collect();
    for want in [
        "plumb-manifest.json",
        "commands/ps_-eo_pid_comm_args",
        "files/etc/rancher/rke2/config.yaml",
        "files/etc/cni/net.d/10-calico.conflist",
        "files/var/log/pods/kube-system_kube-proxy-n1_u1/kube-proxy/0.log",
    ] {
        assert!(paths.contains(&want), "{want} not in {paths:?}");
    }
    let text = |p: &str| members.iter().find(|(q, ..)| q == p).unwrap().2.clone();
    assert_eq!(
        text("commands/iptables-nft-save"),
        "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\nCOMMIT\n"
    );
    assert!(text("files/etc/rancher/rke2/config.yaml").contains("postgres://u:REDACTED@db/k"));
    // What collect wrote reads back as a plumb bundle (with the system tar).
    let back = open_bundle(&out).expect("reading back");
    assert_eq!(back.kind(), BundleKind::Plumb);
    assert!(
        back.file("/etc/rancher/rke2/config.yaml")
            .unwrap()
            .text()
            .contains("cni: canal")
    );
}

#[test]
fn never_writes_through_an_existing_partial_file_or_symlink() {
    let scratch = Scratch::new("bundle-partial");
    let source = open_bundle(&source_bundle(&scratch)).unwrap();
    let out = scratch.path().join("bundle.tar.gz");
    let victim = scratch.path().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    symlink(&victim, partial_path(&out)).unwrap();
    let err = write_bundle(&source, &out, &GatherOptions::default()).unwrap_err();
    assert!(
        err.contains("bundle.tar.gz.partial: already exists"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert_eq!(std::fs::read_link(partial_path(&out)).unwrap(), victim);
    assert!(out.symlink_metadata().is_err());

    // A dangling symlink: the file it names is not created either.
    let out2 = scratch.path().join("b2.tar.gz");
    let target = scratch.path().join("created-through-link");
    symlink(&target, partial_path(&out2)).unwrap();
    assert!(write_bundle(&source, &out2, &GatherOptions::default()).is_err());
    assert!(target.symlink_metadata().is_err());

    // A leftover regular file is not truncated.
    let out3 = scratch.path().join("b3.tar.gz");
    std::fs::write(partial_path(&out3), "leftover").unwrap();
    assert!(write_bundle(&source, &out3, &GatherOptions::default()).is_err());
    assert_eq!(
        std::fs::read_to_string(partial_path(&out3)).unwrap(),
        "leftover"
    );
}

#[test]
fn never_replaces_an_existing_output() {
    let scratch = Scratch::new("bundle-exists");
    let source = open_bundle(&source_bundle(&scratch)).unwrap();
    let out = scratch.path().join("bundle.tar.gz");
    std::fs::write(&out, "precious\n").unwrap();
    let err = write_bundle(&source, &out, &GatherOptions::default()).unwrap_err();
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "precious\n");
    assert!(partial_path(&out).symlink_metadata().is_err());

    // A dangling symlink at the output's name is not followed.
    let out2 = scratch.path().join("b2.tar.gz");
    let target = scratch.path().join("elsewhere");
    symlink(&target, &out2).unwrap();
    assert!(write_bundle(&source, &out2, &GatherOptions::default()).is_err());
    assert!(target.symlink_metadata().is_err());

    // The output appears while the archive is written: the move refuses to replace it
    // and the partial file is removed.
    let out3 = scratch.path().join("b3.tar.gz");
    let (file, mut handle) = NewFile::create(&out3).unwrap();
    std::io::Write::write_all(&mut handle, b"new").unwrap();
    std::fs::write(&out3, "arrived meanwhile\n").unwrap();
    let err = file.persist().unwrap_err();
    assert!(err.contains("not overwritten"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&out3).unwrap(),
        "arrived meanwhile\n"
    );
    assert!(partial_path(&out3).symlink_metadata().is_err());
}

#[test]
fn a_failed_run_leaves_nothing_behind() {
    let scratch = Scratch::new("bundle-fail");
    let source = open_bundle(&source_bundle(&scratch)).unwrap();
    let out = scratch.path().join("no-such-dir/bundle.tar.gz");
    let err = write_bundle(&source, &out, &GatherOptions::default()).unwrap_err();
    assert!(err.contains("cannot create"), "{err}");
    // Dropped before persist: the partial file goes.
    let out2 = scratch.path().join("b2.tar.gz");
    let (file, _handle) = NewFile::create(&out2).unwrap();
    assert_eq!(mode(&partial_path(&out2)), 0o600);
    drop(file);
    assert!(partial_path(&out2).symlink_metadata().is_err());
    assert!(out2.symlink_metadata().is_err());
}
