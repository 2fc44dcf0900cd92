//! Kubernetes NetworkPolicy, evaluated exactly: can pod A reach pod B on port P, and
//! which policies decide — for the source's egress and the destination's ingress
//! separately, as the API defines them.
//!
//! - [`model`]: pods, namespaces, policies and label selectors;
//! - [`load`]: YAML manifests (multi-document files, `kubectl get -o yaml` Lists) into
//!   the model, with every object plumb does not read reported, never dropped silently;
//! - [`eval`]: the answer for one connection, with the policies and rules behind it;
//! - [`lint`]: what in the policies cannot do what it seems written to do.
//!
//! The semantics the evaluator follows (each one exercised by the tests on the shared
//! corpus's truth tables): a pod is isolated in a direction only when some policy that
//! selects it has that policy type; policies add up; in one peer a `namespaceSelector`
//! and a `podSelector` must both match, separate peers are alternatives; a peer's
//! `podSelector` alone means the policy's own namespace; an empty rule (`{}`) allows
//! everything; ports are the destination pod's (after DNAT), named ports resolve against
//! its container ports, `endPort` makes a range. Pure: no IO.

#![deny(missing_docs)]

pub mod cilium;
pub mod eval;
pub mod lint;
pub mod load;
pub mod model;
