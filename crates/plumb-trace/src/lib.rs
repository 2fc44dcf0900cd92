//! plumb-trace: where does a packet go? A packet-path simulator over a node's
//! netfilter ruleset (iptables-legacy, iptables-nft and native nftables), in kernel
//! hook order, kube-proxy aware, proven against the real kernel in privileged tests.
//!
//! Pure crate: no IO, no clock, no randomness. Build an [`Index`] once per ruleset
//! ([`Index::build`]), then [`trace`] packets through it. Each trace returns every
//! possible [`Outcome`] with its probability (random endpoint choice) and the
//! conditions it depends on (facts plumb was not told, as [`Constraints`]: a set of
//! values per unknown field, so a path that needs contradictory facts is not
//! reported), with the steps of each path. A trace is bounded ([`TraceOptions`]):
//! beyond its path or work bound it stops, says so in [`Trace::incomplete`], and
//! reports the unexplored part as one INDETERMINATE outcome.
//!
//! ```
//! use plumb_trace::{Index, Node, Origin, Packet, Proto, trace};
//! let text = "*nat\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -d 10.43.0.1/32 -p tcp -m tcp --dport 443 -j DNAT --to-destination 10.42.0.5:6443\nCOMMIT\n*filter\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n";
//! let parsed = plumb_ruleset::parse_bytes(text.as_bytes(), &Default::default()).unwrap();
//! let index = Index::build(&parsed.ruleset);
//! let packet = Packet::new("10.43.0.1".parse().unwrap(), 443, Proto::Tcp, Origin::Host);
//! let t = trace(&index, &packet, &Node::default());
//! assert_eq!(t.outcomes[0].dnat.as_deref(), Some("10.42.0.5:6443"));
//! ```

#![deny(missing_docs)]

pub mod addr;
pub mod batch;
pub mod classes;
pub mod constraint;
pub mod explain;
pub mod index;
pub mod ipset;
pub mod ir;
pub mod matches;
pub mod nft;
pub mod outcome;
pub mod packet;
mod set_keys;
pub mod simulate;
pub mod targets;

pub use constraint::Constraints;
pub use index::{Index, IndexOptions};
pub use outcome::{Delivery, Outcome, Step, StepKind, Trace, TraceReport, Verdict};
pub use packet::{CtState, Node, Origin, Packet, Proto, RecentAssumption};
pub use simulate::{SourceTests, TraceOptions, trace, trace_noting_sources, trace_with};
