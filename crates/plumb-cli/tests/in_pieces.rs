//! `plumb services` and `plumb check` read a dump file in pieces, its rule texts
//! packed as they are read; from stdin, or a pipe named as a file, they read the dump
//! whole. Both print the same map and the same findings, in text and JSON, for a dump
//! of several pieces, and a file the piece reader refuses (a NUL byte, a bad byte) gets
//! the error the whole read gives.

use plumb_kubeproxy::generated_save_text;
use plumb_testkit::Scratch;

/// `plumb ARGS` with `stdin` piped in: exit code, stdout, stderr.
fn plumb(args: &[&str], stdin: &[u8]) -> (i32, String, String) {
    let out = plumb_testkit::run_with_stdin(env!("CARGO_BIN_EXE_plumb"), args, stdin);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_dump_read_in_pieces_gives_the_map_of_the_dump_read_whole() {
    // 1500 service ports of 4 endpoints: about 2.5 MB, three pieces of 1 MiB.
    let dump = generated_save_text(1500, 4).expect("generate");
    assert!(
        dump.len() > 2 << 20,
        "{} bytes: more than two pieces",
        dump.len()
    );
    let dir = Scratch::new("services-pieces");
    dir.write("dump.save", &dump);
    let file = dir.path().join("dump.save");
    let file = file.to_str().unwrap();
    for (command, json) in [
        ("services", true),
        ("services", false),
        ("check", true),
        ("check", false),
    ] {
        let mut args = vec![command];
        if json {
            args.push("--json");
        }
        let (code, from_file, err) = plumb(&[&args[..], &[file]].concat(), b"");
        let (whole_code, from_stdin, _) = plumb(&[&args[..], &["-"]].concat(), dump.as_bytes());
        assert_eq!((code, &err[..]), (whole_code, ""), "{err}");
        // Only the input's name differs.
        assert_eq!(
            from_file.replace(file, "<stdin>"),
            from_stdin,
            "{command}, json: {json}"
        );
        let says = if command == "services" {
            "ns-0/svc-1"
        } else {
            "kube-proxy"
        };
        assert!(from_file.contains(says), "{from_file:.300}");
    }
}

#[test]
fn a_pipe_named_as_a_file_is_read_whole() {
    // `plumb services /dev/stdin < dump` (or `<(iptables-save)`): a pipe cannot be read
    // twice, so it is read whole, and gives the map a file does.
    let dump = generated_save_text(200, 2).expect("generate");
    let (code, out, err) = plumb(&["services", "--json", "/dev/stdin"], dump.as_bytes());
    let (whole_code, whole, _) = plumb(&["services", "--json", "-"], dump.as_bytes());
    assert_eq!((code, &err[..]), (whole_code, ""), "{err}");
    assert_eq!(out.replace("/dev/stdin", "<stdin>"), whole);
    assert!(out.contains("ns-0/svc-1"), "{out:.300}");
}

#[test]
fn a_file_the_piece_reader_refuses_gets_the_whole_reads_error() {
    let dir = Scratch::new("services-pieces-bad");
    let dump = generated_save_text(600, 4).expect("generate");
    let bad_at = dump.len() - 1000;
    for (name, byte) in [("nul", 0u8), ("latin1", 0xe9u8)] {
        let mut bytes = dump.clone().into_bytes();
        bytes[bad_at] = byte;
        let path = dir.path().join(name);
        std::fs::write(&path, &bytes).unwrap();
        let path = path.to_str().unwrap();
        let (code, _, err) = plumb(&["services", path], b"");
        let (whole_code, _, whole_err) = plumb(&["services", "-"], &bytes);
        assert_eq!(code, 2, "{err}");
        assert_eq!(
            (code, err.replace(path, "<stdin>")),
            (whole_code, whole_err)
        );
        assert!(
            err.contains(&bad_at.to_string()),
            "{name}: says where: {err}"
        );
    }
}
