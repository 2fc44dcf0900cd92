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

/// The option words from a position on: `get(k)` is the `k`-th word from there.
#[derive(Clone, Copy)]
struct Words<'t, 'e> {
    toks: &'t [Tok<'e>],
    at: usize,
}

impl<'e> Words<'_, 'e> {
    fn get(&self, k: usize) -> Option<&'e str> {
        self.toks.get(self.at + k).map(|t| t.text)
    }
}

/// What a match recogniser read: the match and how many words it used (counting a
/// leading `!`), or `None` when the words start like its match but do not complete it
/// (nothing is used, and no target recogniser is tried either).
type Read = Option<(ListedMatch, usize)>;

/// Tries every recogniser at `toks[i]`; returns how many words it used (0: none).
///
/// The match recognisers, by the word they start with (after an optional `!` where the
/// listing prints one), then the target's recogniser for words no match claims.
fn recognise(rule: &mut ListedRule, target: &str, toks: &[Tok<'_>], i: usize) -> usize {
    let w = Words { toks, at: i };
    let (negated, h) = if w.get(0) == Some("!") {
        (true, 1)
    } else {
        (false, 0)
    };
    let Some(head) = w.get(h) else { return 0 };
    let read: Read = match head {
        "[goto]" if !negated => {
            rule.goto = true;
            return 1;
        }
        c if c.starts_with("/*") && !negated => Some((ListedMatch::Comment(comment_text(c)), 1)),
        "tcp" | "udp" | "sctp" | "dccp" | "udplite" if !negated => Some(ports(head, w)),
        "multiport" if !negated => multiport(w),
        "ctstate" | "state" => conn_state(head, w, negated, h),
        "mark" if w.get(h + 1) == Some("match") => mark(w, negated, h),
        "ADDRTYPE" if !negated && w.get(1) == Some("match") => Some(addr_type(w)),
        "statistic" if !negated && w.get(1) == Some("mode") => statistic(w),
        "recent:" => recent(w, negated, h),
        "match-set" => match_set(w, negated, h),
        "PHYSDEV" if !negated && w.get(1) == Some("match") => Some(physdev(w)),
        "limit:" if !negated && w.get(1) == Some("avg") => limit(w),
        _ if negated => return 0,
        _ => return recognise_target(rule, target, toks, i),
    };
    match read {
        Some((m, used)) => {
            rule.matches.push(m);
            used
        }
        None => 0,
    }
}

/// The text of `/* text */` (`-m comment --comment text`), without the markers and
/// the one space inside each.
fn comment_text(word: &str) -> String {
    let inner = word.trim_start_matches("/*");
    let inner = inner.strip_suffix("*/").unwrap_or(inner);
    let inner = inner.strip_prefix(' ').unwrap_or(inner);
    let inner = inner.strip_suffix(' ').unwrap_or(inner);
    inner.to_string()
}

/// `tcp spt:80 dpts:1000:2000 flags:0x06/0x02` (and `udp`, `sctp`, `dccp`, `udplite`
/// without flags).
fn ports(protocol: &str, w: Words<'_, '_>) -> (ListedMatch, usize) {
    let mut source = None;
    let mut destination = None;
    let mut tcp_flags = None;
    let mut k = 1;
    while let Some(word) = w.get(k) {
        if let Some(v) = word
            .strip_prefix("spt:")
            .or_else(|| word.strip_prefix("spts:"))
        {
            source = Some(port_range(v));
        } else if let Some(v) = word
            .strip_prefix("dpt:")
            .or_else(|| word.strip_prefix("dpts:"))
        {
            destination = Some(port_range(v));
        } else if word.starts_with("flags:") && protocol == "tcp" {
            tcp_flags = Some(word["flags:".len()..].to_string());
        } else {
            break;
        }
        k += 1;
    }
    let m = ListedMatch::Ports {
        protocol: protocol.to_string(),
        source,
        destination,
        tcp_flags,
    };
    (m, k)
}

/// `multiport dports 80,443`, `multiport sports ! 22`, `multiport ports !80:90`.
fn multiport(w: Words<'_, '_>) -> Read {
    let direction = match w.get(1) {
        Some("sports") => PortDirection::Source,
        Some("dports") => PortDirection::Destination,
        Some("ports") => PortDirection::Either,
        _ => return None,
    };
    let mut k = 2;
    let mut negated = false;
    if w.get(k) == Some("!") {
        negated = true;
        k += 1;
    }
    let list = w.get(k)?;
    let list = match list.strip_prefix('!') {
        Some(l) => {
            negated = true;
            l
        }
        None => list,
    };
    let m = ListedMatch::Multiport {
        direction,
        negated,
        ports: split_list(list),
    };
    Some((m, k + 1))
}

/// `ctstate NEW,ESTABLISHED` (conntrack) or `state RELATED` (state), `! ctstate X` or
/// `ctstate ! X`.
fn conn_state(keyword: &str, w: Words<'_, '_>, negated: bool, h: usize) -> Read {
    let mut k = h + 1;
    let mut negated = negated;
    if w.get(k) == Some("!") {
        negated = true;
        k += 1;
    }
    let list = w.get(k)?;
    if !list.bytes().all(|b| b.is_ascii_uppercase() || b == b',') {
        return None;
    }
    let m = ListedMatch::ConnState {
        keyword: keyword.to_string(),
        negated,
        states: split_list(list),
    };
    Some((m, k + 1))
}

/// `mark match 0x4000/0x4000`, `mark match ! 0x8000/0x8000`.
fn mark(w: Words<'_, '_>, negated: bool, h: usize) -> Read {
    let mut k = h + 2;
    let mut negated = negated;
    if w.get(k) == Some("!") {
        negated = true;
        k += 1;
    }
    let v = w.get(k)?;
    let (value, mask) = match v.split_once('/') {
        Some((a, b)) => (a.to_string(), Some(b.to_string())),
        None => (v.to_string(), None),
    };
    let m = ListedMatch::Mark {
        negated,
        value,
        mask,
    };
    Some((m, k + 1))
}

/// `ADDRTYPE match src-type LOCAL dst-type !LOCAL limit-in limit-out`.
fn addr_type(w: Words<'_, '_>) -> (ListedMatch, usize) {
    let mut k = 2;
    let (mut source_type, mut destination_type) = (None, None);
    let (mut limit_in, mut limit_out) = (false, false);
    loop {
        match w.get(k) {
            Some("src-type") if w.get(k + 1).is_some() => {
                source_type = w.get(k + 1).map(Negatable::parse);
                k += 2;
            }
            Some("dst-type") if w.get(k + 1).is_some() => {
                destination_type = w.get(k + 1).map(Negatable::parse);
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
    let m = ListedMatch::AddrType {
        source_type,
        destination_type,
        limit_in,
        limit_out,
    };
    (m, k)
}

/// `statistic mode random probability 0.50000000000`, `statistic mode nth every 3
/// packet 1`, with an optional `!` after the mode.
fn statistic(w: Words<'_, '_>) -> Read {
    let mode = w.get(2)?;
    let mut k = 3;
    let mut negated = false;
    if w.get(k) == Some("!") {
        negated = true;
        k += 1;
    }
    let (mut probability, mut every, mut packet) = (None, None, None);
    loop {
        match (w.get(k), w.get(k + 1)) {
            (Some("probability"), Some(v)) => probability = Some(v.to_string()),
            (Some("every"), Some(v)) => every = Some(v.to_string()),
            (Some("packet"), Some(v)) => packet = Some(v.to_string()),
            _ => break,
        }
        k += 2;
    }
    let m = ListedMatch::Statistic {
        mode: mode.to_string(),
        negated,
        probability,
        every,
        packet,
    };
    Some((m, k))
}

/// `recent: CHECK seconds: 10800 reap name: KUBE-SEP-X side: source mask:
/// 255.255.255.255` (`SET`, `CHECK`, `UPDATE` or `REMOVE`, then options in any order).
fn recent(w: Words<'_, '_>, negated: bool, h: usize) -> Read {
    let mut k = h + 1;
    let command = w
        .get(k)
        .filter(|c| matches!(*c, "SET" | "CHECK" | "UPDATE" | "REMOVE"))?;
    k += 1;
    let (mut seconds, mut hit_count, mut name, mut side, mut mask) = (None, None, None, None, None);
    let (mut reap, mut ttl) = (false, false);
    loop {
        let slot = match w.get(k) {
            Some("reap") => {
                reap = true;
                k += 1;
                continue;
            }
            Some("TTL-Match") => {
                ttl = true;
                k += 1;
                continue;
            }
            Some("seconds:") => &mut seconds,
            Some("hit_count:") => &mut hit_count,
            Some("name:") => &mut name,
            Some("side:") => &mut side,
            Some("mask:") => &mut mask,
            _ => break,
        };
        let Some(v) = w.get(k + 1) else { break };
        *slot = Some(v.to_string());
        k += 2;
    }
    let m = ListedMatch::Recent {
        negated,
        command: command.to_string(),
        seconds,
        hit_count,
        reap,
        ttl,
        name,
        side,
        mask,
    };
    Some((m, k))
}

/// `match-set NAME src,dst` (`-m set`); `! match-set ...` when negated.
fn match_set(w: Words<'_, '_>, negated: bool, h: usize) -> Read {
    let (Some(name), Some(flags)) = (w.get(h + 1), w.get(h + 2)) else {
        return None;
    };
    let m = ListedMatch::Set {
        negated,
        name: name.to_string(),
        flags: flags.to_string(),
    };
    Some((m, h + 3))
}

/// `PHYSDEV match --physdev-in veth0 ! --physdev-is-bridged`: each option verbatim.
fn physdev(w: Words<'_, '_>) -> (ListedMatch, usize) {
    let mut k = 2;
    let mut options = Vec::new();
    loop {
        let o = if w.get(k) == Some("!") { k + 1 } else { k };
        let Some(opt) = w.get(o).filter(|word| word.starts_with("--physdev")) else {
            break;
        };
        let takes = matches!(opt, "--physdev-in" | "--physdev-out");
        let end = if takes && w.get(o + 1).is_some() {
            o + 2
        } else {
            o + 1
        };
        let words: Vec<&str> = (k..end).filter_map(|j| w.get(j)).collect();
        options.push(words.join(" "));
        k = end;
    }
    (ListedMatch::Physdev { options }, k)
}

/// `limit: avg 3/hour burst 5`.
fn limit(w: Words<'_, '_>) -> Read {
    let (Some(avg), Some("burst"), Some(burst)) = (w.get(2), w.get(3), w.get(4)) else {
        return None;
    };
    let m = ListedMatch::Limit {
        average: avg.to_string(),
        burst: burst.to_string(),
    };
    Some((m, 5))
}

/// The target's own text at `toks[i]`, by target; returns how many words it used.
/// NAT and MASQUERADE/REDIRECT options come one at a time into one [`ListedTarget`];
/// MARK, REJECT and LOG print theirs in one run.
fn recognise_target(rule: &mut ListedRule, target: &str, toks: &[Tok<'_>], i: usize) -> usize {
    let w = Words { toks, at: i };
    let head = w.get(0).unwrap_or("");
    let read = match target {
        "DNAT" | "SNAT" => return nat_option(rule, head),
        "MASQUERADE" | "REDIRECT" => return masquerade_or_redirect_option(rule, target, w),
        "MARK" if head == "MARK" && rule.target_details.is_none() => mark_target(w),
        "REJECT" if head == "reject-with" && rule.target_details.is_none() => reject_target(w),
        "LOG" if head == "LOG" && rule.target_details.is_none() => Some(log_target(w)),
        _ => None,
    };
    match read {
        Some((details, used)) => {
            rule.target_details = Some(Box::new(details));
            used
        }
        None => 0,
    }
}

/// DNAT / SNAT: `to:10.244.1.5:8080` (one per range), `random`, `random-fully`,
/// `persistent`. The rule's details are a NAT target from the first word tried.
fn nat_option(rule: &mut ListedRule, head: &str) -> usize {
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

/// MASQUERADE: `masq ports: 1024-65535`, `random`, `random-fully`; REDIRECT: `redir ports
/// 80`, `random`. The rule's details are of the target's kind from the first word tried.
fn masquerade_or_redirect_option(rule: &mut ListedRule, target: &str, w: Words<'_, '_>) -> usize {
    let masq = target == "MASQUERADE";
    let details = rule.target_details.get_or_insert_with(|| {
        Box::new(if masq {
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
        })
    });
    match (&mut **details, w.get(0).unwrap_or("")) {
        (ListedTarget::Masquerade { ports, .. }, "masq")
            if w.get(1) == Some("ports:") && w.get(2).is_some() =>
        {
            *ports = w.get(2).map(str::to_string);
            3
        }
        (ListedTarget::Redirect { ports, .. }, "redir")
            if w.get(1) == Some("ports") && w.get(2).is_some() =>
        {
            *ports = w.get(2).map(str::to_string);
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

/// MARK: `MARK or 0x4000`, `MARK xset 0x4000/0x4000`, `MARK and 0xffffbfff`.
fn mark_target(w: Words<'_, '_>) -> Option<(ListedTarget, usize)> {
    let (Some(op), Some(v)) = (w.get(1), w.get(2)) else {
        return None;
    };
    let details = ListedTarget::Mark {
        operation: op.to_string(),
        value: v.to_string(),
    };
    Some((details, 3))
}

/// REJECT: `reject-with icmp-port-unreachable`.
fn reject_target(w: Words<'_, '_>) -> Option<(ListedTarget, usize)> {
    let v = w.get(1)?;
    let details = ListedTarget::Reject {
        with: v.to_string(),
    };
    Some((details, 2))
}

/// LOG: `LOG flags 0 level 4 prefix "..."` (`level warn` in a listing made without `-n`).
fn log_target(w: Words<'_, '_>) -> (ListedTarget, usize) {
    let (mut flags, mut level, mut prefix) = (None, None, None);
    let mut k = 1;
    loop {
        let slot = match w.get(k) {
            Some("flags") => &mut flags,
            Some("level") => &mut level,
            Some("prefix") => &mut prefix,
            _ => break,
        };
        let Some(v) = w.get(k + 1) else { break };
        let v = v
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(v);
        *slot = Some(v.to_string());
        k += 2;
    }
    let details = ListedTarget::Log {
        flags,
        level,
        prefix,
    };
    (details, k)
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
        // Only the notes on the table (inferred: REJECT is filter's) and on the listing
        // showing INPUT only (partial).
        assert_eq!(rs.diagnostics.len(), 2, "{:?}", rs.diagnostics);
        assert!(rs.diagnostics[0].message.contains("which table"));
        assert!(rs.diagnostics[1].message.contains("every built-in chain"));
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
