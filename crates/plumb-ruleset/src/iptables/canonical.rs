//! Printing rules as `iptables-save` prints them.
//!
//! TODO(issue 2): canonical reordering per extension.
