//! plumb-collect: the edge that reads a node — this machine, a network namespace with a
//! file tree standing for a node, or a support bundle ([`node`]) — into rulesets
//! ([`rulesets`]) and [`plumb_facts::Facts`] ([`facts`]), and writes plumb's own
//! redacted bundle ([`bundle_writer`]).
//!
//! Everything here is read-only towards the node: plumb only runs dump and status
//! commands (`*-save`, `nft list`, `systemctl`, `ss`) and reads files and /proc. Every
//! external command goes through one [`plumb_os::runner::Runner`] so tests can substitute it, and every
//! command is bounded by a timeout.
//!
//! # Reading a live node's rulesets
//!
//! One netlink read of nf_tables ([`nft_netlink`], through `plumb_os::nftables`) serves
//! every command. Each iptables-nft table is translated into the text
//! `iptables-nft-save` prints for it and read by plumb-ruleset's iptables reader; each
//! native table (kube-proxy's nftables mode, flannel, firewalld) is decoded into the
//! text `nft list table` prints (`nft_netlink::native`: `mod.rs` table assembly and
//! order, `expr.rs` rules, `set.rs` sets and elements, `datatype.rs` values) and read by
//! the nft reader. Legacy tables are read through getsockopt and decoded into
//! `iptables-legacy-save`'s text ([`xt_legacy`], sharing the xt extension printers), and
//! only when `/proc/net/ip*_tables_names` lists tables: asking for a missing legacy
//! table creates it.
//!
//! The rules of the read:
//! - A table a decoder cannot print exactly is read with the node's tool (`iptables-save`,
//!   `nft list table`), never guessed, and the read says which table and why. The
//!   oracles: `tests/netlink_oracle.rs` (the model from netlink equals the model from
//!   `iptables-nft-save` on the corpus loaded into a namespace), `tests/native_oracle.rs`
//!   (native tables byte for byte `nft list table`'s text, but for set elements'
//!   `expires`, compared within the time between the two reads; and one table per rule
//!   of nftables' own rule tests, each equal or fallen back, none different),
//!   `tests/legacy_oracle.rs` (`iptables-legacy-save -c`, counters included).
//! - A netlink read that fails or passes its deadline is reported, and the tools read
//!   instead.
//! - A read that left out tables the node has ([`ToolOutcome::left_out`], decided where
//!   the read is made: it failed, or its tool is missing where the netlink dump or /proc
//!   listed its tables; never a read the tools replaced) makes the ruleset `damaged`, so
//!   nothing is judged absent, on every path; `ruleset show`, the `tools` of
//!   `check`/`services --json` and doctor's `ruleset-read-failed` say so.
//! - A bundle's `nft list ruleset` is read as `plumb check` reads a listing: iptables-nft's
//!   tables translated rule by rule, those its save dumps printed left out with their
//!   notes.
//!
//! # Bundles and roots
//!
//! Bundle archives ([`archive`]: tar, gzip, xz by magic bytes, zip for Cilium sysdumps)
//! are read in Rust, without a `tar` process, into a 0700 temporary directory removed
//! on drop and on SIGINT/SIGTERM/SIGHUP. Extraction creates only files, directories and
//! links that stay inside, never through a link, within 4 GiB and 500,000 members.
//! Bundle reads never leave the bundle (every path resolved, links out refused) and
//! `--root` reads never leave the root (`node::rooted`: resolved component by
//! component, absolute symlinks meaning ROOT/target); both open regular files only.
//! `plumb collect` ([`bundle_writer`]) redacts each entry by its format and writes the
//! archive through [`new_file`]: an exclusive 0600 `X.partial` moved into place without
//! replacing anything. Network probes ([`probe`]) run from inside the namespace on a
//! probe thread, and send no SYN to a ClusterIP unless the node translates it.

#![deny(missing_docs)]

pub mod archive;
pub mod bundle_writer;
pub mod cilium;
pub mod facts;
pub mod new_file;
pub mod nft_netlink;
pub mod node;
pub mod privilege;
pub mod probe;
pub mod rulesets;
mod tempdir;
pub mod xt_legacy;

pub use rulesets::{Collected, ToolOutcome, collect_live_rulesets, collect_rulesets};
