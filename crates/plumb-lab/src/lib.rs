//! `plumb lab`: the founding incidents, reproduced for real in network namespaces.
//!
//! The lab is a node (`plumb-node`), an API endpoint (`plumb-api`) and pods (`plumb-pod-N`)
//! joined by veth links, with real netfilter and real UFW, and emulators for what cannot
//! run here — kube-proxy, kubelet, a reverting security agent, Canal's install-cni — as
//! real processes with the originals' names, logs and file layout (RKE2). It is a demo
//! (`plumb lab up security-agent-revert`) and the test bed of `plumb doctor` and
//! `plumb watch`.
//!
//! ```no_run
//! use std::time::Duration;
//! use plumb_lab::{Lab, Scenario, probe::Connect};
//!
//! let lab = Lab::up(Scenario::SecurityAgentRevert)?;
//! lab.wait_until("the agent's first revert", Duration::from_secs(20), |lab| {
//!     lab.read(plumb_lab::layout::paths::VEN_LOG).contains("reverted")
//! })?;
//! let c = lab.connect_from_node(lab.cluster_ip(), Duration::from_secs(1))?;
//! assert_eq!(c, Connect::TimedOut);
//! // dropping `lab` tears everything down
//! # Ok::<(), plumb_lab::LabError>(())
//! ```
//!
//! Code map: [`scenario`] and [`plan`] (what each incident sets up), [`topology`]
//! (namespaces, links, routes), [`layout`] (the node's files), [`actors`] (the emulators),
//! [`ufw`] (real UFW in a private mount namespace), [`lab`] (up/down/status/exec),
//! [`state`] (the state file), [`process`] and [`plumb_os::netns`] (finding and entering things),
//! [`probe`] (real packets and deadline waits), [`cilium_node`] and [`socket_lb`] (the
//! kube-proxy-free node: Cilium's pinned maps and a socket load balancer in the lab's cgroup).

#![deny(missing_docs)]

pub mod actors;
pub mod backend_mix;
pub mod cilium_node;
pub mod clock;
pub mod error;
pub mod http;
pub mod iptables;
pub mod lab;
pub mod layout;
pub mod logfmt;
pub mod plan;
pub mod preflight;
pub mod probe;
pub mod process;
pub mod scenario;
pub mod socket_lb;
pub mod state;
pub mod tls;
pub mod topology;
pub mod ufw;

pub use error::LabError;
pub use lab::{
    Backend, DownReport, Lab, LabOptions, Leftovers, Status, down, exec, leftovers, status,
};
pub use scenario::Scenario;
pub use state::LabState;
