//! `ufw status verbose`:
//! ```text
//! Status: active
//! Logging: on (low)
//! Default: deny (incoming), allow (outgoing), disabled (routed)
//! ```
//! "disabled (routed)" still means FORWARD policy DROP in UFW's ruleset
//! (facts-kubernetes.md): routed traffic is simply not managed by rules.

use serde::Serialize;

/// What `ufw status verbose` says.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct UfwStatus {
    /// `Status: active`: UFW's chains are installed and evaluated.
    pub active: bool,
    /// `deny`, `allow`, `reject`, `disabled` per direction, when printed (verbose).
    pub incoming: Option<String>,
    /// Default policy for outgoing traffic, when printed.
    pub outgoing: Option<String>,
    /// Default policy for routed (forwarded) traffic, when printed: pod and NodePort traffic
    /// crosses FORWARD, and `deny`/`disabled` leave its policy at DROP.
    pub routed: Option<String>,
    /// Line of `Status:`.
    pub line: u32,
}

/// Reads `ufw status [verbose]`; `None` when there is no `Status:` line.
pub fn parse(text: &str) -> Option<UfwStatus> {
    let mut st: Option<UfwStatus> = None;
    for (i, l) in text.lines().enumerate() {
        let l = l.trim();
        if let Some(v) = l.strip_prefix("Status:") {
            st = Some(UfwStatus {
                active: v.trim() == "active",
                line: u32::try_from(i + 1).unwrap_or(u32::MAX),
                ..UfwStatus::default()
            });
        } else if let (Some(d), Some(s)) = (l.strip_prefix("Default:"), st.as_mut()) {
            for part in d.split(',') {
                let part = part.trim();
                let Some((policy, dir)) = part.split_once(' ') else {
                    continue;
                };
                let dir = dir.trim_matches(|c| c == '(' || c == ')');
                let policy = Some(policy.to_string());
                match dir {
                    "incoming" => s.incoming = policy,
                    "outgoing" => s.outgoing = policy,
                    "routed" => s.routed = policy,
                    _ => {}
                }
            }
        }
    }
    st
}

#[cfg(test)]
mod tests {
    #[test]
    fn active_with_defaults_and_inactive() {
        let s = super::parse("Status: active\nLogging: on (low)\nDefault: deny (incoming), allow (outgoing), disabled (routed)\nNew profiles: skip\n").unwrap();
        assert!(s.active);
        assert_eq!(s.incoming.as_deref(), Some("deny"));
        assert_eq!(s.routed.as_deref(), Some("disabled"));
        let s = super::parse("Status: inactive\n").unwrap();
        assert!(!s.active);
        assert!(super::parse("ERROR: You need to be root to run this script").is_none());
    }
}
