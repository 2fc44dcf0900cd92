//! The line shapes of a listing: `Chain NAME (...)` headers, column header lines (which
//! announce the [`Layout`]) and a rule line split into its columns. Columns are padded,
//! not fixed, so a rule line is read as words and each candidate layout is checked
//! against what its columns can hold.

use crate::model::Counters;
use crate::model::listed::{Fragment, ListedRule, Negatable};

/// Which optional columns a chain's rows have (from its header line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Layout {
    pub(super) num: bool,
    pub(super) counters: bool,
    pub(super) via: bool,
    /// Byte offset of the `target` column in the header, to tell a blank target.
    pub(super) target_col: Option<usize>,
}

pub(super) const GUESSES: [Layout; 4] = [
    Layout {
        num: false,
        counters: true,
        via: true,
        target_col: None,
    },
    Layout {
        num: true,
        counters: true,
        via: true,
        target_col: None,
    },
    Layout {
        num: false,
        counters: false,
        via: false,
        target_col: None,
    },
    Layout {
        num: true,
        counters: false,
        via: false,
        target_col: None,
    },
];

#[derive(Clone, Copy)]
pub(super) struct Word<'l> {
    pub(super) start: usize,
    pub(super) text: &'l str,
}

pub(super) fn words(line: &str) -> Vec<Word<'_>> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in line.char_indices() {
        if c.is_whitespace() {
            if let Some(s) = start.take() {
                out.push(Word {
                    start: s,
                    text: &line[s..i],
                });
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        out.push(Word {
            start: s,
            text: &line[s..],
        });
    }
    out
}

/// 1-based column of a byte offset, in characters.
pub(super) fn column_of(line: &str, offset: usize) -> u32 {
    let o = line.floor_char_boundary(offset);
    u32::try_from(line[..o].chars().count())
        .unwrap_or(u32::MAX - 1)
        .saturating_add(1)
}

/// A `Chain` line, split.
pub(super) struct ChainHeader<'l> {
    pub(super) name: &'l str,
    pub(super) policy: Option<&'l str>,
    pub(super) counters: Option<(&'l str, &'l str)>,
    pub(super) references: Option<u32>,
}

/// `NAME (policy ACCEPT 1 packets, 2 bytes)`, `NAME (policy DROP)`, `NAME (3 references)`, `NAME`.
pub(super) fn parse_chain_header(rest: &str) -> Option<ChainHeader<'_>> {
    let rest = rest.trim();
    let (name, paren) = match rest.find(char::is_whitespace) {
        Some(i) => (&rest[..i], rest[i..].trim()),
        None => (rest, ""),
    };
    if name.is_empty() || name.starts_with('(') {
        return None;
    }
    let mut h = ChainHeader {
        name,
        policy: None,
        counters: None,
        references: None,
    };
    if paren.is_empty() {
        return Some(h);
    }
    let inner = paren.strip_prefix('(')?.strip_suffix(')')?;
    let w: Vec<&str> = inner.split_whitespace().collect();
    match w.as_slice() {
        ["policy", p] => h.policy = Some(p),
        ["policy", p, pk, "packets,", b, "bytes"] => {
            h.policy = Some(p);
            h.counters = Some((pk, b));
        }
        [r, "references" | "reference"] => h.references = Some(r.parse().ok()?),
        // iptables-nft may add ", N rules" style details in future; keep the reference.
        [r, "references" | "reference", ..] => h.references = Some(r.parse().ok()?),
        _ => return None,
    }
    Some(h)
}

/// The layout a column header line announces, or `None` if it is not one.
pub(super) fn header_layout(line: &str) -> Option<Layout> {
    let ws = words(line);
    if ws.is_empty() {
        return None;
    }
    let known = [
        "num",
        "pkts",
        "bytes",
        "pcnt",
        "bcnt",
        "target",
        "prot",
        "opt",
        "in",
        "out",
        "source",
        "destination",
    ];
    if !ws.iter().all(|w| known.contains(&w.text)) {
        return None;
    }
    let has = |s: &str| ws.iter().any(|w| w.text == s);
    if !(has("prot") && has("source")) {
        return None;
    }
    Some(Layout {
        num: has("num"),
        counters: has("pkts") || has("pcnt"),
        via: has("in") && has("out"),
        target_col: ws.iter().find(|w| w.text == "target").map(|w| w.start),
    })
}

/// `123`, `2657K`, `99G` -> (value, rounded).
pub(super) fn parse_count(s: &str) -> Option<(u64, bool)> {
    let (digits, mult) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 1_000u64),
        b'M' => (&s[..s.len() - 1], 1_000_000),
        b'G' => (&s[..s.len() - 1], 1_000_000_000),
        b'T' => (&s[..s.len() - 1], 1_000_000_000_000),
        b'P' => (&s[..s.len() - 1], 1_000_000_000_000_000),
        _ => (s, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let v: u64 = digits.parse().ok()?;
    Some((v.checked_mul(mult)?, mult > 1))
}

pub(super) struct Columns {
    pub(super) rule: ListedRule,
    pub(super) counters: Option<Counters>,
    pub(super) extra_offset: usize,
}

fn is_opt(w: &str) -> bool {
    matches!(w, "--" | "-f" | "!f" | "!-")
}

fn is_protocol(w: &str) -> bool {
    let w = w.strip_prefix('!').unwrap_or(w);
    !w.is_empty()
        && w.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

fn is_interface(w: &str) -> bool {
    let w = w.strip_prefix('!').unwrap_or(w);
    !w.is_empty() && w.len() <= 16 && !w.contains('/')
}

/// Address as printed: with `-n` always an IP literal with optional `/mask`; without,
/// `anywhere` or a host name. `strict` rejects single-label host names.
fn is_address(w: &str, strict: bool) -> bool {
    let w = w.strip_prefix('!').unwrap_or(w);
    if w.is_empty() {
        return false;
    }
    let host = w.split_once('/').map_or(w, |(h, _)| h);
    if host.parse::<std::net::IpAddr>().is_ok() || w == "anywhere" {
        return true;
    }
    if strict {
        // Host names from reverse DNS: dotted, or with a mask.
        (w.contains('/') || host.contains('.'))
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._:".contains(&b))
    } else {
        !is_opt(w) && w != "*"
    }
}

pub(super) fn parse_columns(
    line: &str,
    ws: &[Word<'_>],
    layout: &Layout,
) -> Result<Columns, (usize, String)> {
    let mut i = 0;
    let missing = |i: usize, what: &str| -> (usize, String) {
        let at = ws.get(i).map_or(line.len(), |w| w.start);
        (at, format!("expected {what}"))
    };
    let mut rule = ListedRule::default();
    if layout.num {
        let w = ws.get(i).ok_or_else(|| missing(i, "a rule number"))?;
        rule.line_number = Some(
            w.text
                .parse()
                .map_err(|_| (w.start, "expected a rule number (num column)".to_string()))?,
        );
        i += 1;
    }
    let mut counters = None;
    if layout.counters {
        let (Some(p), Some(b)) = (ws.get(i), ws.get(i + 1)) else {
            return Err(missing(i, "packet and byte counters"));
        };
        let pc = parse_count(p.text).ok_or_else(|| {
            (
                p.start,
                "expected a packet count (pkts column; digits with an optional K/M/G/T)"
                    .to_string(),
            )
        })?;
        let bc = parse_count(b.text).ok_or_else(|| {
            (
                b.start,
                "expected a byte count (bytes column; digits with an optional K/M/G/T)".to_string(),
            )
        })?;
        counters = Some(Counters {
            packets: pc.0,
            bytes: bc.0,
        });
        rule.counters_rounded = pc.1 || bc.1;
        i += 2;
    }
    let rest = &ws[i..];
    let via = if layout.via { 2 } else { 0 };
    // (target present, opt present); the order settles ambiguity.
    let mut fits: Vec<(bool, bool)> = Vec::new();
    for strict in [true, false] {
        for (has_target, has_opt) in [(false, true), (true, true), (true, false), (false, false)] {
            let t = usize::from(has_target);
            let o = usize::from(has_opt);
            let need = t + 1 + o + via + 2;
            if rest.len() < need {
                continue;
            }
            let proto = rest[t].text;
            let ok = is_protocol(proto)
                && (!has_opt || is_opt(rest[t + 1].text))
                && (has_opt || !is_opt(rest[t + 1].text))
                && (!has_target || !is_opt(rest[0].text))
                && (via == 0
                    || (is_interface(rest[t + 1 + o].text) && is_interface(rest[t + 2 + o].text)))
                && is_address(rest[t + 1 + o + via].text, strict)
                && is_address(rest[t + 2 + o + via].text, strict);
            if ok {
                fits.push((has_target, has_opt));
            }
        }
        if !fits.is_empty() {
            break;
        }
    }
    let Some(&first) = fits.first() else {
        let at = rest.first().map_or(line.len(), |w| w.start);
        let what = if layout.via {
            "columns 'target prot opt in out source destination'"
        } else {
            "columns 'target prot opt source destination'"
        };
        return Err((at, format!("expected {what}")));
    };
    let (has_target, has_opt) = if first.1 {
        first
    } else {
        // No opt column: a blank target and a target named like a protocol both fit.
        // The header's target column decides: a blank target leaves it empty.
        match (layout.target_col, fits.contains(&(false, false))) {
            (Some(col), true) if rest[0].start >= col + 9 => (false, false),
            _ => first,
        }
    };
    let mut k = 0;
    if has_target {
        rule.target = Some(rest[0].text.to_string());
        k = 1;
    }
    rule.protocol = Negatable::parse(rest[k].text);
    k += 1;
    rule.fragment = if has_opt {
        k += 1;
        match rest[k - 1].text {
            "-f" => Fragment::Fragments,
            "!f" => Fragment::NotFragments,
            _ => Fragment::Any,
        }
    } else {
        Fragment::NotShown
    };
    if via > 0 {
        rule.interfaces_listed = true;
        let iface = |w: &str| {
            let n = Negatable::parse(w);
            (!matches!(&*n.value, "*" | "any") || n.negated).then_some(n)
        };
        rule.in_interface = iface(rest[k].text);
        rule.out_interface = iface(rest[k + 1].text);
        k += 2;
    }
    rule.source = Negatable::parse(rest[k].text);
    rule.destination = Negatable::parse(rest[k + 1].text);
    let dst = rest[k + 1];
    let after = dst.start + dst.text.len();
    let tail = &line[after..];
    let extra_offset = after + (tail.len() - tail.trim_start().len());
    rule.extra = tail.trim().into();
    Ok(Columns {
        rule,
        counters,
        extra_offset,
    })
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::super::tests::listed;
    use super::*;
    use crate::model::Family;

    #[test]
    fn counts_with_suffixes() {
        assert_eq!(parse_count("2657K"), Some((2_657_000, true)));
        assert_eq!(parse_count("123"), Some((123, false)));
        assert_eq!(parse_count("12T"), Some((12_000_000_000_000, true)));
        assert_eq!(parse_count("K"), None);
        assert_eq!(parse_count("99999999999999999999G"), None);
    }

    #[test]
    fn blank_target_and_old_ip6_blank_opt() {
        let text = "Chain INPUT (policy ACCEPT 0 packets, 0 bytes)
 pkts bytes target     prot opt in     out     source               destination
    0     0 ACCEPT     all      lo     *       ::/0                 ::/0
    0     0            tcp      *      *       ::/0                 ::/0                 tcp dpt:22
    0     0 tcp        all      *      *       ::/0                 ::/0

Chain tcp (1 references)
 pkts bytes target     prot opt in     out     source               destination
";
        let rs = parse(text, Family::Ip6, Some("filter"));
        // INPUT only: a listing of some chains of filter, partial; nothing else to say.
        assert_eq!(rs.diagnostics.len(), 1, "{:?}", rs.diagnostics);
        assert!(rs.diagnostics[0].message.contains("every built-in chain"));
        let a = listed(&rs, "INPUT", 0);
        assert_eq!(a.target.as_deref(), Some("ACCEPT"));
        assert_eq!(a.fragment, Fragment::NotShown);
        assert_eq!(&*a.in_interface.unwrap().value, "lo");
        let b = listed(&rs, "INPUT", 1);
        assert_eq!(b.target, None);
        assert_eq!(&*b.protocol.value, "tcp");
        let c = listed(&rs, "INPUT", 2);
        assert_eq!(
            c.target.as_deref(),
            Some("tcp"),
            "a chain named like a protocol"
        );
    }
}
