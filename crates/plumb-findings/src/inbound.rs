//! What the host firewall does with packets another node sends to one of this node's
//! ports: the verdict plumb-check's INPUT trace reaches, shared with the commands that
//! report on ports the node does not use yet (Cilium's tunnel ports in a migration
//! preflight). One type, so the judge and its readers cannot drift apart.

use crate::Evidence;

/// What the host firewall's INPUT does with packets another node sends to a port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Inbound {
    /// Every outcome is accepted (or nothing filters INPUT).
    Open,
    /// Every outcome is stopped by the host firewall: the stopping rule or policy and the
    /// path to it.
    Blocked {
        /// `INPUT rule 8: -A INPUT -j REJECT ...` / `policy DROP of filter INPUT`.
        rule: String,
        /// The rules on the path.
        evidence: Vec<Evidence>,
    },
    /// Some outcome is stopped, or the stop rests on something plumb cannot see.
    Maybe {
        /// The stopping rule or policy.
        rule: String,
        /// On what it depends.
        why: String,
        /// The rules on the path.
        evidence: Vec<Evidence>,
    },
    /// Not judged: why (a partial input, the trace's bound).
    Unknown(String),
}
