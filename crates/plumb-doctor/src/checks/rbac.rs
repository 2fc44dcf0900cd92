//! `rbac-transient-denial`: "is forbidden: User system:node:… cannot …" at boot is usually
//! the node authorizer catching up, not a cause (a red herring).

use crate::context::{Ctx, log_evidence};
use plumb_facts::parse::logs::Signal;
use plumb_findings::{Finding, Severity};

/// Finding id: RBAC denials in the logs, usually transient at start-up (severity info:
/// never a root cause on its own).
pub const ID: &str = "rbac-transient-denial";

/// Reports the `is forbidden` lines of the logs read, or `ok` when there are none.
pub fn check(ctx: &Ctx) -> Vec<Finding> {
    let lines = ctx.pod_signals(None, Signal::RbacForbidden);
    if lines.is_empty() {
        return vec![Finding::ok(ID, "no RBAC denials in the logs read")];
    }
    vec![Finding::problem(ID, Severity::Info, format!("{} RBAC denials in logs (usually transient at start-up: a red herring)", lines.len()))
        .with_evidence(lines.iter().take(3).map(|(f, l)| log_evidence(f, l)))
        .explain("Denials right after a node or pod starts are the authorizer catching up with new bindings; they stop on their own and do not explain dataplane failures.")
        .fix("No action if they stopped; if they persist, check the binding with `kubectl auth can-i get nodes --as=system:kube-proxy` (expected: yes).")]
}
