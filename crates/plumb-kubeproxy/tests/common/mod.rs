//! Shared helpers for integration tests: see plumb-testkit.
#![allow(unused_imports)]

pub use plumb_testkit::{corpus_dir, read};
