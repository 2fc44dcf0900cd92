//! One fact about a node: a value with where it came from, or why it is not known.
//!
//! Every probe ends in a `Fact`: a probe that could not run (tool missing, permission
//! denied, not in the bundle) is a fact too ("not readable: permission denied"), so the
//! doctor can say "unknown" instead of guessing and nothing crashes. (Quoted evidence
//! for findings is `plumb_findings::Evidence`; a fact carries only its source.)

use serde::{Deserialize, Serialize};

/// A value, or the reason it is unknown.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum Fact<T> {
    /// The probe ran and its output was understood.
    Known {
        /// What was read.
        value: T,
        /// Command or file the value was read from.
        source: String,
    },
    /// The probe could not run, or its output was not understood: nothing is assumed.
    Unknown {
        /// Why: "not installed", "not in this bundle", "permission denied", "timed out after 2s".
        reason: String,
    },
}

impl<T> Fact<T> {
    /// A value read from `source` (a command line or a file path).
    pub fn known(value: T, source: impl Into<String>) -> Fact<T> {
        Fact::Known {
            value,
            source: source.into(),
        }
    }

    /// A fact that could not be read, with the reason a report shows for it.
    pub fn unknown(reason: impl Into<String>) -> Fact<T> {
        Fact::Unknown {
            reason: reason.into(),
        }
    }

    /// The value, or `None` when the fact is unknown.
    pub fn value(&self) -> Option<&T> {
        match self {
            Fact::Known { value, .. } => Some(value),
            Fact::Unknown { .. } => None,
        }
    }

    /// The command or file the value came from, or `None` when the fact is unknown.
    pub fn source(&self) -> Option<&str> {
        match self {
            Fact::Known { source, .. } => Some(source),
            Fact::Unknown { .. } => None,
        }
    }

    /// Transforms a known value and keeps its source; an unknown fact keeps its reason.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Fact<U> {
        match self {
            Fact::Known { value, source } => Fact::Known {
                value: f(value),
                source,
            },
            Fact::Unknown { reason } => Fact::Unknown { reason },
        }
    }
}

impl<T> Default for Fact<T> {
    fn default() -> Self {
        Fact::unknown("not collected")
    }
}
