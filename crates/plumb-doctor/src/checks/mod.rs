//! Node checks, one module each (the ruleset integrity checks come from plumb-check).
//! Every check returns findings for all its ids — `ok` when it ruled its problem out,
//! `unknown` when the facts do not allow a conclusion — so the report can list what was
//! checked and ruled out.

pub mod agents;
pub mod cni;
pub mod connectivity;
pub mod firewall;
pub mod kernel;
pub mod kube_proxy;
pub mod rbac;

use crate::context::Ctx;
use plumb_findings::Finding;

/// Every node check in a fixed order.
pub const ALL: &[fn(&Ctx) -> Vec<Finding>] = &[
    connectivity::check,
    agents::check,
    firewall::check,
    kube_proxy::check,
    cni::check,
    kernel::check,
    rbac::check,
];
