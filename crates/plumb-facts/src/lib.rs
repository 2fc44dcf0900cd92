//! What plumb knows about a node, and how to read it from text. Pure: no IO.
//!
//! - [`model`]: the [`Facts`] contract: every probe's result as a [`Fact`] (value and
//!   source, or why it is unknown), filled by plumb-collect from a live node, a
//!   namespace (the lab) or a support bundle, and read by doctor.
//! - [`parse`]: parsers for `sysctl -a`, `lsmod`, `ss -tlnp`, `ufw status verbose`,
//!   `systemctl list-units`, CRI/klog logs, kube-proxy's health JSON, RKE2's config.
//! - [`agents`]: the catalogue of host security agents (data/agents.json).
//! - [`cluster`]: the node's network settings (Service and pod CIDRs, the `kubernetes`
//!   ClusterIP, the API endpoint) from its own state, defaults only as a last resort.
//! - [`timeline`]: the node's history from every log read, in time order.

#![deny(missing_docs)]

pub mod agents;
pub mod cluster;
pub mod fact;
pub mod model;
pub mod parse;
pub mod redact;
pub mod timeline;

pub use fact::Fact;
pub use model::*;
