//! Opens a bundle (directory or archive) as `plumb doctor --bundle` does and prints how long
//! extraction took, what kind of bundle it is and what was not extracted. Used for the
//! extraction figures in docs/benchmarks.md:
//! `cargo run --release -p plumb-collect --example open_bundle -- BUNDLE`.

use std::io::Write;
use std::time::Instant;

fn main() {
    let Some(path) = std::env::args_os().nth(1) else {
        eprintln!("usage: open_bundle BUNDLE");
        std::process::exit(2);
    };
    let start = Instant::now();
    match plumb_collect::node::open_bundle(std::path::Path::new(&path)) {
        Ok(node) => {
            let mut out = std::io::stdout().lock();
            // A closed stdout (`| head`) is not an error worth a panic.
            let _ = writeln!(
                out,
                "{:?} in {:.2} s at {}",
                node.kind(),
                start.elapsed().as_secs_f64(),
                node.root().display()
            );
            for note in node.notes() {
                let _ = writeln!(out, "note: {note}");
            }
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
