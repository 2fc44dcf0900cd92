//! Pure parsers for the text outputs a node or a support bundle gives. Each takes the
//! whole text and returns what it recognised with line numbers; none panics (fuzzed).

pub mod health;
pub mod logs;
pub mod lsmod;
pub mod ps;
pub mod rke2;
pub mod settings;
pub mod ss;
pub mod sysctl;
pub mod systemd;
pub mod ufw;
