//! `cilium-dbg service list` (the agent's view of its services, older `cilium service
//! list`) read into [`Frontend`]s, to compare with what the BPF maps hold.
//!
//! ```text
//! ID   Frontend                 Service Type   Backend
//! 4    10.104.239.135:80/TCP    ClusterIP      1 => 10.217.0.107:80/TCP (active)
//!                                              2 => 10.217.0.149:80/TCP (active)
//! 6    0.0.0.0:30965/TCP        NodePort
//! ```
//!
//! A row starting with an id opens a frontend (type, then its first backend if any);
//! indented rows add backends. Older versions print no `/PROTO` and no `(state)`.

use crate::layout::{BackendState, L4Proto, Scope};
use crate::lb_list::RowError;
use crate::lbmap::{BackendRef, Frontend, FrontendKind, Problem};
use std::net::IpAddr;

/// Reads a listing into frontends (in listing order) and the rows it could not read.
pub fn parse(text: &str) -> (Vec<Frontend>, Vec<RowError>) {
    let mut out: Vec<Frontend> = Vec::new();
    let mut errors = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty()
            || trimmed.starts_with("ID ")
            || trimmed == "[...]"
            || trimmed.starts_with("```")
        {
            continue;
        }
        let error = |why: &str| RowError {
            line: i + 1,
            text: line.to_string(),
            why: why.to_string(),
        };
        let words: Vec<&str> = trimmed.split_whitespace().collect();
        let opens = words.first().is_some_and(|w| w.parse::<u32>().is_ok())
            && words
                .get(1)
                .is_some_and(|w| w.contains(':') && !w.starts_with("=>"))
            && words.get(1) != Some(&"=>");
        let backend_words = if opens {
            let Some(f) = frontend(&words) else {
                errors.push(error("expected `ID FRONTEND TYPE [BACKENDS]`"));
                continue;
            };
            out.push(f);
            &words[3..]
        } else {
            &words[..]
        };
        if backend_words.is_empty() {
            continue;
        }
        let Some(f) = out.last_mut() else {
            errors.push(error("a backend row before any frontend"));
            continue;
        };
        match backend(backend_words) {
            Some(b) => f.backends.push(b),
            None => errors.push(error("expected `N => IP:PORT[/PROTO] [(state)]`")),
        }
    }
    for f in &mut out {
        if f.backends.is_empty() {
            f.problems.push(Problem::NoBackends);
        }
    }
    (out, errors)
}

fn frontend(words: &[&str]) -> Option<Frontend> {
    let (address, port, proto) = endpoint(words.get(1)?)?;
    let kind = FrontendKind::from_name(words.get(2)?)?;
    Some(Frontend {
        address,
        port,
        proto: proto.unwrap_or(L4Proto::ANY),
        scope: Scope::External,
        kind: Some(kind),
        options: Vec::new(),
        rev_nat: None,
        backends: Vec::new(),
        problems: Vec::new(),
        service: None,
    })
}

/// `1 => 10.217.0.107:80/TCP (active)`.
fn backend(words: &[&str]) -> Option<BackendRef> {
    let [slot, arrow, addr, rest @ ..] = words else {
        return None;
    };
    if *arrow != "=>" {
        return None;
    }
    let (address, port, proto) = endpoint(addr)?;
    let state = match rest
        .first()
        .map(|s| s.trim_matches(|c| c == '(' || c == ')'))
    {
        None | Some("active") => BackendState::Active,
        Some("terminating") => BackendState::Terminating,
        Some("quarantined") => BackendState::Quarantined,
        Some("maintenance") => BackendState::Maintenance,
        Some(_) => BackendState::Unknown(u8::MAX),
    };
    Some(BackendRef {
        slot: slot.parse().ok()?,
        id: None,
        address,
        port,
        proto: proto.unwrap_or(L4Proto::ANY),
        state,
    })
}

/// `IP:PORT[/PROTO]`, as `bpf lb list` writes it but never with its `/i` scope mark.
fn endpoint(s: &str) -> Option<(IpAddr, u16, Option<L4Proto>)> {
    match crate::lb_list::endpoint(s)? {
        (_, _, _, true) => None,
        (address, port, proto, false) => Some((address, port, proto)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frontends_gather_their_indented_backends() {
        let text = "ID   Frontend               Service Type   Backend\n\
4    10.104.239.135:80/TCP      ClusterIP      1 => 10.217.0.107:80/TCP (active)\n\
                                               2 => 10.217.0.149:80/TCP (terminating)\n\
6    0.0.0.0:30965/TCP         NodePort\n\
5    192.168.178.29:8080    HostPort       1 => 10.29.207.199:80\n";
        let (f, errors) = parse(text);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(f.len(), 3);
        assert_eq!(f[0].backends.len(), 2);
        assert_eq!(f[0].backends[1].state, BackendState::Terminating);
        assert_eq!(f[1].kind, Some(FrontendKind::NodePort));
        assert_eq!(f[1].problems, [Problem::NoBackends]);
        assert_eq!(f[2].proto, L4Proto::ANY, "old listings print no protocol");
        assert_eq!(f[2].backends[0].port, 80);
    }

    #[test]
    fn an_unreadable_row_is_reported_with_its_line() {
        let (_, errors) = parse("4    10.0.0.1:80/TCP  ClusterIP   1 -> 10.0.0.2:80\n");
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].line, 1);
    }
}
