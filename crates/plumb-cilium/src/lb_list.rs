//! `cilium-dbg bpf lb list` (and the older `cilium bpf lb list`) read back into
//! [`Frontend`]s, so a sysdump, a bugtool archive or a pasted support ticket is judged
//! like the maps themselves.
//!
//! The listing has one row per services-map entry, grouped by frontend:
//!
//! ```text
//! SERVICE ADDRESS               BACKEND ADDRESS (REVNAT_ID) (SLOT)
//! 10.96.0.10:53/UDP (0)         0.0.0.0:0 (2) (0) [ClusterIP, non-routable]
//! 10.96.0.10:53/UDP (1)         10.244.0.5:53/UDP (2) (1)
//! ```
//!
//! Slot-0 rows carry the frontend's type and options in brackets; slot-n rows the
//! backend, or `backend N not found`. Cilium up to 1.16 printed frontends without
//! `/PROTO`, and some versions print a frontend's key once and leave the column blank
//! on its following rows: both are read. `/i` marks the internal scope, IPv6 addresses
//! are bracketed. A row that is none of these is reported with its line number and
//! text, and the other rows are still read.

use crate::layout::{BackendState, L4Proto, Scope};
use crate::lbmap::{BackendRef, Frontend, FrontendKind, Problem};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// A row that could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowError {
    /// 1-based line number.
    pub line: usize,
    /// The row as given.
    pub text: String,
    /// What was expected.
    pub why: String,
}

impl std::fmt::Display for RowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}: `{}`", self.line, self.why, self.text)
    }
}

/// One frontend as the listing's first column names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    address: IpAddr,
    port: u16,
    proto: L4Proto,
    scope: Scope,
}

/// What one row says.
enum Row {
    Master {
        rev_nat: u16,
        kind: Option<FrontendKind>,
        options: Vec<String>,
    },
    Backend(BackendRef),
    NotFound {
        slot: u16,
        id: u32,
    },
}

/// Reads a listing. Returns the frontends (sorted like [`crate::LbMaps::frontends`])
/// and the rows that could not be read.
pub fn parse(text: &str) -> (Vec<Frontend>, Vec<RowError>) {
    let mut rows: BTreeMap<Key, Vec<Row>> = BTreeMap::new();
    let mut errors = Vec::new();
    let mut current: Option<Key> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty()
            || trimmed.starts_with("SERVICE ADDRESS")
            || trimmed.starts_with("```")
            || trimmed == "[...]"
        {
            continue;
        }
        let error = |why: &str| RowError {
            line: i + 1,
            text: line.to_string(),
            why: why.to_string(),
        };
        let continuation = line.starts_with([' ', '\t']);
        let (key, rest) = if continuation {
            match current {
                Some(k) => (k, trimmed),
                None => {
                    errors.push(error("a backend row before any frontend"));
                    continue;
                }
            }
        } else {
            let Some((first, rest)) = split_column(trimmed) else {
                errors.push(error("expected a frontend and a backend column"));
                continue;
            };
            match frontend_key(first) {
                Some(k) => (k, rest),
                None => {
                    errors.push(error(
                        "the first column is not a frontend (`IP:PORT[/PROTO] (SLOT)`)",
                    ));
                    continue;
                }
            }
        };
        current = Some(key);
        match row(rest) {
            Ok(r) => rows.entry(key).or_default().push(r),
            Err(why) => errors.push(error(&why)),
        }
    }
    let frontends = rows
        .into_iter()
        .map(|(k, rows)| frontend(k, rows))
        .collect();
    (frontends, errors)
}

/// The first column and the rest: columns are separated by two or more spaces or a tab.
fn split_column(line: &str) -> Option<(&str, &str)> {
    let at = line.find("  ").into_iter().chain(line.find('\t')).min()?;
    Some((&line[..at], line[at..].trim()))
}

/// `10.96.0.10:53/UDP/i (0)`, `10.96.0.10:53 (0)`, `[fd00::a]:53/UDP (1)`.
fn frontend_key(col: &str) -> Option<Key> {
    let address_part = col.split_whitespace().next()?;
    let (address, port, proto, internal) = endpoint(address_part)?;
    Some(Key {
        address,
        port,
        proto: proto.unwrap_or(L4Proto::ANY),
        scope: if internal {
            Scope::Internal
        } else {
            Scope::External
        },
    })
}

/// `IP:PORT[/PROTO][/i]` with IPv6 in brackets: (address, port, protocol when printed,
/// internal scope). `cilium-dbg service list` prints the same form without `/i`.
pub(crate) fn endpoint(s: &str) -> Option<(IpAddr, u16, Option<L4Proto>, bool)> {
    let mut parts = s.split('/');
    let hostport = parts.next()?;
    let mut proto = None;
    let mut internal = false;
    for p in parts {
        match p {
            "i" => internal = true,
            p => proto = Some(L4Proto::from_name(p)?),
        }
    }
    let (host, port) = hostport.rsplit_once(':')?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Some((host.parse().ok()?, port.parse().ok()?, proto, internal))
}

/// The backend column of one row.
fn row(col: &str) -> Result<Row, String> {
    if let Some(rest) = col.strip_prefix("backend ") {
        // `backend 9 not found` (the slot is not printed on such rows).
        let id = rest
            .strip_suffix(" not found")
            .and_then(|n| n.trim().parse().ok())
            .ok_or("expected `backend N not found`")?;
        return Ok(Row::NotFound { slot: 0, id });
    }
    let mut words = col.splitn(2, ' ');
    let addr = words.next().unwrap_or("");
    let rest = words.next().unwrap_or("").trim();
    let (address, port, proto, _) =
        endpoint(addr).ok_or_else(|| format!("`{addr}` is not a backend address"))?;
    // `(REVNAT) (SLOT)` then an optional `[FLAGS]`.
    let (numbers, flags) = match rest.find('[') {
        Some(at) => (&rest[..at], Some(rest[at..].trim())),
        None => (rest, None),
    };
    let nums: Vec<u32> = numbers
        .split_whitespace()
        .map(|w| {
            w.strip_prefix('(')
                .and_then(|w| w.strip_suffix(')'))
                .and_then(|n| n.parse().ok())
        })
        .collect::<Option<_>>()
        .ok_or("expected `(REVNAT_ID) (SLOT)` after the backend address")?;
    let [rev_nat, slot] = nums[..] else {
        return Err("expected `(REVNAT_ID) (SLOT)` after the backend address".into());
    };
    let slot = u16::try_from(slot).map_err(|_| format!("slot {slot} is out of range"))?;
    let flag_words: Vec<String> = flags
        .map(|f| {
            f.trim_start_matches('[')
                .split(']')
                .next()
                .unwrap_or("")
                .split(", ")
                .map(|w| w.trim().to_string())
                .filter(|w| !w.is_empty())
                .collect()
        })
        .unwrap_or_default();
    if slot == 0 {
        let kind = flag_words.first().and_then(|w| FrontendKind::from_name(w));
        let options = flag_words.iter().skip(usize::from(kind.is_some()));
        return Ok(Row::Master {
            rev_nat: u16::try_from(rev_nat)
                .map_err(|_| format!("rev-NAT id {rev_nat} is out of range"))?,
            kind,
            options: options.cloned().collect(),
        });
    }
    let state = if flag_words.iter().any(|w| w == "quarantined") {
        BackendState::Quarantined
    } else if flag_words.iter().any(|w| w == "maintenance") {
        BackendState::Maintenance
    } else {
        BackendState::Active
    };
    Ok(Row::Backend(BackendRef {
        slot,
        id: None,
        address,
        port,
        proto: proto.unwrap_or(L4Proto::ANY),
        state,
    }))
}

fn frontend(k: Key, rows: Vec<Row>) -> Frontend {
    let mut f = Frontend {
        address: k.address,
        port: k.port,
        proto: k.proto,
        scope: k.scope,
        kind: None,
        options: Vec::new(),
        rev_nat: None,
        backends: Vec::new(),
        problems: Vec::new(),
        service: None,
    };
    let mut has_master = false;
    for r in rows {
        match r {
            Row::Master {
                rev_nat,
                kind,
                options,
            } => {
                has_master = true;
                f.rev_nat = Some(rev_nat);
                f.kind = kind;
                f.options = options;
            }
            Row::Backend(b) => f.backends.push(b),
            Row::NotFound { slot, id } => f.problems.push(Problem::BackendNotFound { slot, id }),
        }
    }
    f.backends.sort_by_key(|b| b.slot);
    if !has_master {
        f.problems.push(Problem::NoFrontendEntry);
    } else if f.backends.is_empty()
        && !f
            .problems
            .iter()
            .any(|p| matches!(p, Problem::BackendNotFound { .. }))
    {
        f.problems.push(Problem::NoBackends);
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_group_into_frontends_with_backends_in_slot_order() {
        let text = "SERVICE ADDRESS               BACKEND ADDRESS (REVNAT_ID) (SLOT)\n\
10.96.0.10:53/UDP (2)         10.244.1.9:53/UDP (2) (2)\n\
10.96.0.10:53/UDP (0)         0.0.0.0:0 (2) (0) [ClusterIP, non-routable]\n\
10.96.0.10:53/UDP (1)         10.244.0.5:53/UDP (2) (1)\n\
[fd00::a]:443/TCP/i (0)       [::]:0 (7) (0) [ClusterIP, InternalLocal, two-scopes]\n";
        let (f, errors) = parse(text);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].display_address(), "10.96.0.10:53/UDP");
        assert_eq!(f[0].kind, Some(FrontendKind::ClusterIP));
        assert_eq!(f[0].options, ["non-routable"]);
        let slots: Vec<u16> = f[0].backends.iter().map(|b| b.slot).collect();
        assert_eq!(slots, [1, 2]);
        assert!(f[0].problems.is_empty());
        assert_eq!(f[1].display_address(), "[fd00::a]:443/TCP/i");
        assert_eq!(f[1].rev_nat, Some(7));
        assert_eq!(f[1].problems, [Problem::NoBackends]);
    }

    #[test]
    fn old_listings_without_protocol_and_with_blank_continuations_are_read() {
        let text = concat!(
            "10.96.0.10:53 (0)    0.0.0.0:0 (2) (0) [ClusterIP]\n",
            "                     10.244.0.5:53 (2) (1)\n",
        );
        let (f, errors) = parse(text);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].proto, L4Proto::ANY);
        assert_eq!(f[0].backends.len(), 1);
    }

    #[test]
    fn a_row_that_is_not_a_listing_row_is_reported_with_its_line() {
        let text = "10.96.0.10:53/UDP (0)   0.0.0.0:0 (2) (0) [ClusterIP]\nError: cannot open map\n10.96.0.10:53/UDP (1)   10.244.0.5:53/UDP (2) x\n";
        let (f, errors) = parse(text);
        assert_eq!(f.len(), 1);
        assert_eq!(errors.len(), 2);
        assert_eq!(errors[0].line, 2);
        assert_eq!(
            errors[1].to_string(),
            "line 3: expected `(REVNAT_ID) (SLOT)` after the backend address: `10.96.0.10:53/UDP (1)   10.244.0.5:53/UDP (2) x`"
        );
    }

    #[test]
    fn a_missing_backend_is_a_problem_not_an_error() {
        let text = "10.96.0.1:443/TCP (0)   0.0.0.0:0 (1) (0) [ClusterIP]\n10.96.0.1:443/TCP (1)   backend 12 not found\n";
        let (f, errors) = parse(text);
        assert!(errors.is_empty());
        assert_eq!(
            f[0].problems,
            [Problem::BackendNotFound { slot: 0, id: 12 }]
        );
    }
}
