//! What plumb recognises in the option text after a listed rule's columns
//! (`/* comment */ tcp dpt:443 ctstate NEW ...`): matches and the target's own text,
//! one recogniser per family, the rest kept verbatim as unrecognised runs of words.

use crate::model::listed::{
    ListedMatch, ListedRule, ListedTarget, Negatable, PortDirection, PortRange,
};

/// Words that begin something the reader recognises (used to find where a comment ends).
const HEADS: &[&str] = &[
    "!",
    "[goto]",
    "tcp",
    "udp",
    "sctp",
    "dccp",
    "udplite",
    "multiport",
    "ctstate",
    "state",
    "mark",
    "ADDRTYPE",
    "statistic",
    "recent:",
    "match-set",
    "PHYSDEV",
    "limit:",
    "masq",
    "redir",
    "MARK",
    "reject-with",
    "LOG",
    "random",
    "random-fully",
    "persistent",
    "icmptype",
    "ipv6-icmptype",
    "CT",
    "CONNMARK",
    "TCPMSS",
];

fn is_head(w: &str) -> bool {
    HEADS.contains(&w) || w.starts_with("to:") || w.starts_with("/*")
}

#[derive(Clone, Copy)]
struct Tok<'e> {
    start: usize,
    end: usize,
    text: &'e str,
}

/// Splits the option text into words, keeping `/* ... */` and `"..."` whole.
/// Returns the words and whether a comment or quote is left open.
fn extra_tokens(extra: &str) -> (Vec<Tok<'_>>, bool) {
    let mut out = Vec::new();
    let mut open = false;
    let b = extra.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        let end = if extra[i..].starts_with("/*") {
            match comment_end(extra, i + 2) {
                Some(e) => e,
                None => {
                    open = true;
                    extra.len()
                }
            }
        } else if b[i] == b'"' {
            match quote_end(extra, i + 1) {
                Some(e) => e,
                None => {
                    open = true;
                    extra.len()
                }
            }
        } else {
            let mut e = i;
            while e < b.len() && !b[e].is_ascii_whitespace() {
                e += 1;
            }
            e
        };
        out.push(Tok {
            start,
            end,
            text: &extra[start..end],
        });
        i = end.max(i + 1);
    }
    (out, open)
}

/// End (exclusive) of a comment whose text starts at `from`: the first `*/` that ends
/// the text or is followed by something the reader knows; else the first `*/`
/// followed by a space. A comment may itself contain `*/`: iptables does not escape.
fn comment_end(extra: &str, from: usize) -> Option<usize> {
    let mut candidates = Vec::new();
    let mut at = from;
    while let Some(p) = extra[at..].find("*/") {
        let end = at + p + 2;
        let after = &extra[end..];
        if after.is_empty() || after.starts_with(char::is_whitespace) {
            candidates.push(end);
        }
        at = at + p + 1;
    }
    let strong = candidates.iter().copied().find(|&e| {
        let next = extra[e..].split_whitespace().next();
        next.is_none_or(is_head)
    });
    strong.or_else(|| candidates.first().copied())
}

/// End (exclusive) of a quoted string starting after `"` at `from`: the first `"`
/// followed by a space or the end.
fn quote_end(extra: &str, from: usize) -> Option<usize> {
    let mut at = from;
    while let Some(p) = extra[at..].find('"') {
        let end = at + p + 1;
        if extra[end..].is_empty() || extra[end..].starts_with(char::is_whitespace) {
            return Some(end);
        }
        at = end;
    }
    None
}

fn port_range(s: &str) -> PortRange {
    let (negated, s) = match s.strip_prefix('!') {
        Some(r) => (true, r),
        None => (false, s),
    };
    match s.split_once(':') {
        Some((a, b)) => PortRange {
            negated,
            first: a.to_string(),
            last: Some(b.to_string()),
        },
        None => PortRange {
            negated,
            first: s.to_string(),
            last: None,
        },
    }
}

fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .filter(|x| !x.is_empty())
        .map(str::to_string)
        .collect()
}

/// Recognises what it can in `rule.extra`; returns whether a comment/quote is unclosed.
pub(super) fn read_extra(rule: &mut ListedRule) -> bool {
    let extra = std::mem::take(&mut rule.extra);
    let (toks, open) = extra_tokens(&extra);
    let target = rule.target.clone().unwrap_or_default();
    let mut i = 0;
    let mut run: Option<(usize, usize)> = None;
    let flush = |run: &mut Option<(usize, usize)>, rule: &mut ListedRule| {
        if let Some((s, e)) = run.take() {
            rule.unrecognised.push(extra[s..e].to_string());
        }
    };
    while i < toks.len() {
        let consumed = recognise(rule, &target, &toks, i);
        if consumed == 0 {
            let t = toks[i];
            run = Some(match run {
                Some((s, _)) => (s, t.end),
                None => (t.start, t.end),
            });
            i += 1;
        } else {
            flush(&mut run, rule);
            i += consumed;
        }
    }
    flush(&mut run, rule);
    let first_comment = rule.comments().next().map(str::to_string);
    rule.comment = first_comment;
    rule.extra = extra;
    open
}

/// Tries every recogniser at `toks[i]`; returns how many words it used (0: none).
fn recognise(rule: &mut ListedRule, target: &str, toks: &[Tok<'_>], i: usize) -> usize {
    let t = |k: usize| toks.get(i + k).map(|t| t.text);
    let (negated, h) = if t(0) == Some("!") {
        (true, 1)
    } else {
        (false, 0)
    };
    let Some(head) = t(h) else { return 0 };
    let push = |rule: &mut ListedRule, m: ListedMatch| rule.matches.push(m);
    match head {
        "[goto]" if !negated => {
            rule.goto = true;
            return 1;
        }
        c if c.starts_with("/*") && !negated => {
            let inner = c.trim_start_matches("/*");
            let inner = inner.strip_suffix("*/").unwrap_or(inner);
            let inner = inner.strip_prefix(' ').unwrap_or(inner);
            let inner = inner.strip_suffix(' ').unwrap_or(inner);
            push(rule, ListedMatch::Comment(inner.to_string()));
            return 1;
        }
        "tcp" | "udp" | "sctp" | "dccp" | "udplite" if !negated => {
            let mut source = None;
            let mut destination = None;
            let mut tcp_flags = None;
            let mut k = 1;
            while let Some(w) = t(k) {
                if let Some(v) = w.strip_prefix("spt:").or_else(|| w.strip_prefix("spts:")) {
                    source = Some(port_range(v));
                } else if let Some(v) = w.strip_prefix("dpt:").or_else(|| w.strip_prefix("dpts:")) {
                    destination = Some(port_range(v));
                } else if w.starts_with("flags:") && head == "tcp" {
                    tcp_flags = Some(w["flags:".len()..].to_string());
                } else {
                    break;
                }
                k += 1;
            }
            push(
                rule,
                ListedMatch::Ports {
                    protocol: head.to_string(),
                    source,
                    destination,
                    tcp_flags,
                },
            );
            return k;
        }
        "multiport" if !negated => {
            let direction = match t(1) {
                Some("sports") => PortDirection::Source,
                Some("dports") => PortDirection::Destination,
                Some("ports") => PortDirection::Either,
                _ => return 0,
            };
            let mut k = 2;
            let mut neg = false;
            if t(k) == Some("!") {
                neg = true;
                k += 1;
            }
            let Some(list) = t(k) else { return 0 };
            let list = match list.strip_prefix('!') {
                Some(l) => {
                    neg = true;
                    l
                }
                None => list,
            };
            push(
                rule,
                ListedMatch::Multiport {
                    direction,
                    negated: neg,
                    ports: split_list(list),
                },
            );
            return k + 1;
        }
        "ctstate" | "state" => {
            let mut k = h + 1;
            let mut neg = negated;
            if t(k) == Some("!") {
                neg = true;
                k += 1;
            }
            let Some(list) = t(k) else { return 0 };
            if !list.bytes().all(|b| b.is_ascii_uppercase() || b == b',') {
                return 0;
            }
            push(
                rule,
                ListedMatch::ConnState {
                    keyword: head.to_string(),
                    negated: neg,
                    states: split_list(list),
                },
            );
            return k + 1;
        }
        "mark" if t(h + 1) == Some("match") => {
            let mut k = h + 2;
            let mut neg = negated;
            if t(k) == Some("!") {
                neg = true;
                k += 1;
            }
            let Some(v) = t(k) else { return 0 };
            let (value, mask) = match v.split_once('/') {
                Some((a, b)) => (a.to_string(), Some(b.to_string())),
                None => (v.to_string(), None),
            };
            push(
                rule,
                ListedMatch::Mark {
                    negated: neg,
                    value,
                    mask,
                },
            );
            return k + 1;
        }
        "ADDRTYPE" if !negated && t(1) == Some("match") => {
            let mut k = 2;
            let (mut source_type, mut destination_type) = (None, None);
            let (mut limit_in, mut limit_out) = (false, false);
            loop {
                match t(k) {
                    Some("src-type") if t(k + 1).is_some() => {
                        source_type = t(k + 1).map(Negatable::parse);
                        k += 2;
                    }
                    Some("dst-type") if t(k + 1).is_some() => {
                        destination_type = t(k + 1).map(Negatable::parse);
                        k += 2;
                    }
                    Some("limit-in") => {
                        limit_in = true;
                        k += 1;
                    }
                    Some("limit-out") => {
                        limit_out = true;
                        k += 1;
                    }
                    _ => break,
                }
            }
            push(
                rule,
                ListedMatch::AddrType {
                    source_type,
                    destination_type,
                    limit_in,
                    limit_out,
                },
            );
            return k;
        }
        "statistic" if !negated && t(1) == Some("mode") => {
            let Some(mode) = t(2) else { return 0 };
            let mut k = 3;
            let mut neg = false;
            if t(k) == Some("!") {
                neg = true;
                k += 1;
            }
            let (mut probability, mut every, mut packet) = (None, None, None);
            loop {
                match (t(k), t(k + 1)) {
                    (Some("probability"), Some(v)) => probability = Some(v.to_string()),
                    (Some("every"), Some(v)) => every = Some(v.to_string()),
                    (Some("packet"), Some(v)) => packet = Some(v.to_string()),
                    _ => break,
                }
                k += 2;
            }
            push(
                rule,
                ListedMatch::Statistic {
                    mode: mode.to_string(),
                    negated: neg,
                    probability,
                    every,
                    packet,
                },
            );
            return k;
        }
        "recent:" => {
            let mut k = h + 1;
            let Some(command) =
                t(k).filter(|c| matches!(*c, "SET" | "CHECK" | "UPDATE" | "REMOVE"))
            else {
                return 0;
            };
            k += 1;
            let mut m = ListedMatch::Recent {
                negated,
                command: command.to_string(),
                seconds: None,
                hit_count: None,
                reap: false,
                ttl: false,
                name: None,
                side: None,
                mask: None,
            };
            if let ListedMatch::Recent {
                seconds,
                hit_count,
                reap,
                ttl,
                name,
                side,
                mask,
                ..
            } = &mut m
            {
                loop {
                    let slot = match t(k) {
                        Some("reap") => {
                            *reap = true;
                            k += 1;
                            continue;
                        }
                        Some("TTL-Match") => {
                            *ttl = true;
                            k += 1;
                            continue;
                        }
                        Some("seconds:") => &mut *seconds,
                        Some("hit_count:") => &mut *hit_count,
                        Some("name:") => &mut *name,
                        Some("side:") => &mut *side,
                        Some("mask:") => &mut *mask,
                        _ => break,
                    };
                    let Some(v) = t(k + 1) else { break };
                    *slot = Some(v.to_string());
                    k += 2;
                }
            }
            push(rule, m);
            return k;
        }
        "match-set" => {
            let (Some(name), Some(flags)) = (t(h + 1), t(h + 2)) else {
                return 0;
            };
            push(
                rule,
                ListedMatch::Set {
                    negated,
                    name: name.to_string(),
                    flags: flags.to_string(),
                },
            );
            return h + 3;
        }
        "PHYSDEV" if !negated && t(1) == Some("match") => {
            let mut k = 2;
            let mut options = Vec::new();
            loop {
                let o = if t(k) == Some("!") { k + 1 } else { k };
                let Some(opt) = t(o).filter(|w| w.starts_with("--physdev")) else {
                    break;
                };
                let takes = matches!(opt, "--physdev-in" | "--physdev-out");
                let end = if takes && t(o + 1).is_some() {
                    o + 2
                } else {
                    o + 1
                };
                let words: Vec<&str> = toks[i + k..i + end].iter().map(|t| t.text).collect();
                options.push(words.join(" "));
                k = end;
            }
            push(rule, ListedMatch::Physdev { options });
            return k;
        }
        "limit:" if !negated && t(1) == Some("avg") => {
            let (Some(avg), Some("burst"), Some(burst)) = (t(2), t(3), t(4)) else {
                return 0;
            };
            push(
                rule,
                ListedMatch::Limit {
                    average: avg.to_string(),
                    burst: burst.to_string(),
                },
            );
            return 5;
        }
        _ => {}
    }
    if negated {
        return 0;
    }
    recognise_target(rule, target, toks, i)
}

fn recognise_target(rule: &mut ListedRule, target: &str, toks: &[Tok<'_>], i: usize) -> usize {
    let t = |k: usize| toks.get(i + k).map(|t| t.text);
    let head = t(0).unwrap_or("");
    match target {
        "DNAT" | "SNAT" => {
            let details = rule.target_details.get_or_insert_with(|| {
                Box::new(ListedTarget::Nat {
                    to: Vec::new(),
                    random: false,
                    random_fully: false,
                    persistent: false,
                })
            });
            let ListedTarget::Nat {
                to,
                random,
                random_fully,
                persistent,
            } = &mut **details
            else {
                return 0;
            };
            if let Some(v) = head.strip_prefix("to:") {
                to.push(v.to_string());
            } else {
                match head {
                    "random" => *random = true,
                    "random-fully" => *random_fully = true,
                    "persistent" => *persistent = true,
                    _ => return 0,
                }
            }
            1
        }
        "MASQUERADE" | "REDIRECT" => {
            let masq = target == "MASQUERADE";
            let details = rule.target_details.get_or_insert(Box::new(if masq {
                ListedTarget::Masquerade {
                    ports: None,
                    random: false,
                    random_fully: false,
                }
            } else {
                ListedTarget::Redirect {
                    ports: None,
                    random: false,
                }
            }));
            match (&mut **details, head) {
                (ListedTarget::Masquerade { ports, .. }, "masq")
                    if t(1) == Some("ports:") && t(2).is_some() =>
                {
                    *ports = t(2).map(str::to_string);
                    3
                }
                (ListedTarget::Redirect { ports, .. }, "redir")
                    if t(1) == Some("ports") && t(2).is_some() =>
                {
                    *ports = t(2).map(str::to_string);
                    3
                }
                (
                    ListedTarget::Masquerade { random, .. } | ListedTarget::Redirect { random, .. },
                    "random",
                ) => {
                    *random = true;
                    1
                }
                (ListedTarget::Masquerade { random_fully, .. }, "random-fully") => {
                    *random_fully = true;
                    1
                }
                _ => 0,
            }
        }
        "MARK" if head == "MARK" && rule.target_details.is_none() => {
            let (Some(op), Some(v)) = (t(1), t(2)) else {
                return 0;
            };
            rule.target_details = Some(Box::new(ListedTarget::Mark {
                operation: op.to_string(),
                value: v.to_string(),
            }));
            3
        }
        "REJECT" if head == "reject-with" && rule.target_details.is_none() => {
            let Some(v) = t(1) else { return 0 };
            rule.target_details = Some(Box::new(ListedTarget::Reject {
                with: v.to_string(),
            }));
            2
        }
        "LOG" if head == "LOG" && rule.target_details.is_none() => {
            let (mut flags, mut level, mut prefix) = (None, None, None);
            let mut k = 1;
            loop {
                let slot = match t(k) {
                    Some("flags") => &mut flags,
                    Some("level") => &mut level,
                    Some("prefix") => &mut prefix,
                    _ => break,
                };
                let Some(v) = t(k + 1) else { break };
                let v = v
                    .strip_prefix('"')
                    .and_then(|v| v.strip_suffix('"'))
                    .unwrap_or(v);
                *slot = Some(v.to_string());
                k += 2;
            }
            rule.target_details = Some(Box::new(ListedTarget::Log {
                flags,
                level,
                prefix,
            }));
            k
        }
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::super::tests::listed;
    use super::*;
    use crate::model::Family;
    use crate::model::listed::Fragment;

    #[test]
    fn non_numeric_listing() {
        let text = "Chain INPUT (policy ACCEPT)
target     prot opt source               destination
ACCEPT     tcp  --  anywhere             anywhere             tcp dpt:https /* a b */
           all  --  10.0.0.0/8           anywhere
REJECT     udp  !f  anywhere             anywhere             multiport dports 80,https reject-with icmp-port-unreachable
LOG        all  --  anywhere             anywhere             LOG level warn prefix \"hi there \"
";
        let rs = parse(text, Family::Ip, None);
        let a = listed(&rs, "INPUT", 0);
        assert_eq!(a.comment.as_deref(), Some("a b"));
        assert!(
            matches!(&a.matches[0], ListedMatch::Ports { destination: Some(p), .. } if p.first == "https")
        );
        let r = listed(&rs, "INPUT", 2);
        assert_eq!(r.fragment, Fragment::NotFragments);
        assert_eq!(
            r.target_details.as_deref(),
            Some(&ListedTarget::Reject {
                with: "icmp-port-unreachable".into()
            })
        );
        let l = listed(&rs, "INPUT", 3);
        assert_eq!(
            l.target_details.as_deref(),
            Some(&ListedTarget::Log {
                flags: None,
                level: Some("warn".into()),
                prefix: Some("hi there ".into())
            })
        );
        assert!(l.unrecognised.is_empty(), "{:?}", l.unrecognised);
        // Only the "assumed filter" note.
        assert_eq!(rs.diagnostics.len(), 1, "{:?}", rs.diagnostics);
        assert_eq!(&*rs.tables[0].name, "filter");
    }

    #[test]
    fn comment_containing_end_marker() {
        let (toks, open) = extra_tokens("tcp dpt:443 /* a */ b */ ctstate NEW");
        assert!(!open);
        assert_eq!(toks[2].text, "/* a */ b */");
        let (toks, _) = extra_tokens("/* a */ /* b */");
        assert_eq!(toks.len(), 2);
        let (_, open) = extra_tokens("/* cut mid-comm");
        assert!(open);
    }
}
