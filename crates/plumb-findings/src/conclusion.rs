//! What a diagnosis concludes from its findings: the root cause, how sure it is, and
//! which other problems the root cause explains.

use serde::Serialize;

/// How sure a conclusion is: by how many independent symptoms support it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Confidence {
    /// The cause explains no other symptom, or is only the worst unexplained problem.
    Low,
    /// One other symptom points at it.
    Medium,
    /// Two or more other symptoms point at it.
    High,
}

impl Confidence {
    /// Lower-case name, as in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Confidence::Low => "low",
            Confidence::Medium => "medium",
            Confidence::High => "high",
        }
    }
}

/// The root cause of a diagnosis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conclusion {
    /// Finding id of the root cause.
    pub root_cause: String,
    /// How sure the diagnosis is.
    pub confidence: Confidence,
    /// Problem finding ids the root cause explains.
    pub supporting: Vec<String>,
}
