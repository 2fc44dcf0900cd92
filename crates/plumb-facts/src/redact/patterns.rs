//! The pattern pass: secrets found by their shape, in any text, whatever its format.
//!
//! Applied to every file after its structural pass (and alone to text of no known
//! format). Each rule adds the byte ranges of secret *values* to a list; the caller
//! merges and replaces them. Rules:
//! - PEM private key blocks (`-----BEGIN ... PRIVATE KEY-----`), bare over many lines or
//!   inside a quoted string with `\n` escapes; the body is replaced, the BEGIN/END lines
//!   stay; a block without END ends where its base64 ends (nothing after it is lost);
//! - URL credentials `scheme://user:PASS@host` (the password; user and host stay) and Go
//!   SQL DSNs `user:PASS@tcp(host)`;
//! - JWT-shaped strings (three base64url segments, the first starting `eyJ`);
//! - `Bearer TOKEN` (TOKEN of 8 or more characters and not a lower-case word, so prose
//!   such as "bearer token" stays);
//! - `key=value`, `key: value`, `"key": "value"` (also with escaped quotes, as in JSON
//!   inside a JSON string), `Header: Scheme value` and `key = value` for secret-like keys
//!   ([`super::keys::is_secret_key`]); a line that *starts* with `key:` or `key = ` hides
//!   the rest of the line, elsewhere the value ends at white space or its closing quote;
//! - `--secret-flag value` (the next word; also `"--token", "X"` in a flow list);
//! - YAML written line by line, for files whose structure could not be read: a block
//!   scalar (`token: |` and the more-indented lines below it), a plain value continued on
//!   the next lines, and `- --token` followed by the list item `- X`.
//!
//! Every rule works on ASCII delimiters, so ranges always fall on character boundaries.

use super::keys::{REDACTED, has_hint, is_secret_env_name, is_secret_key, is_trivial_value};
use std::ops::Range;

/// Adds the ranges of secret values found anywhere in `text`.
pub(crate) fn scan(text: &str, spans: &mut Vec<Range<usize>>) {
    pem(text, spans);
    urls(text, spans);
    go_dsn(text, spans);
    jwt(text, spans);
    bearer(text, spans);
    yaml_lines(text, spans);
    let mut start = 0;
    for line in text.split_inclusive('\n') {
        let end = start + line.trim_end_matches(['\n', '\r']).len();
        scan_line(text, start..end, spans);
        start += line.len();
    }
}

fn is_b64url(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

fn push(text: &str, r: Range<usize>, spans: &mut Vec<Range<usize>>) {
    if r.start < r.end && !is_trivial_value(&text[r.clone()]) {
        spans.push(r);
    }
}

// ---------------------------------------------------------------- PEM

fn is_b64(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=')
}

/// A line break in the text or written as an escape inside a string (`\n`, `\\n`, `\r`):
/// its length at `i`, if there is one.
fn line_break_at(b: &[u8], i: usize) -> Option<usize> {
    match b.get(i)? {
        b'\n' | b'\r' => Some(1),
        b'\\' => {
            let mut k = i;
            while b.get(k) == Some(&b'\\') {
                k += 1;
            }
            matches!(b.get(k), Some(b'n' | b'r')).then_some(k + 1 - i)
        }
        _ => None,
    }
}

/// PEM private key blocks. The body is read segment by segment (segments end at line
/// breaks, real or escaped): base64, a header (`Proc-Type: 4,ENCRYPTED`) or blank, up to
/// the END line; anything else ends the body there, so a block without END (or ending
/// in a closing quote) never swallows what follows.
fn pem(text: &str, spans: &mut Vec<Range<usize>>) {
    let b = text.as_bytes();
    let mut from = 0;
    while let Some(i) = text[from..].find("-----BEGIN ").map(|i| i + from) {
        from = i + 11;
        let Some(close) = text[from..].find("-----").map(|c| c + from) else {
            return;
        };
        let label = &text[from..close];
        if label.len() > 40 || label.contains(['\n', '\\']) || !label.contains("PRIVATE KEY") {
            continue;
        }
        let body_start = close + 5;
        let mut body_end = body_start;
        let mut j = body_start;
        loop {
            // Blanks and line breaks between segments.
            while j < b.len() && matches!(b[j], b' ' | b'\t') {
                j += 1;
            }
            if let Some(n) = line_break_at(b, j) {
                j += n;
                continue;
            }
            if j >= b.len() || text[j..].starts_with("-----END") {
                break;
            }
            let seg_start = j;
            while j < b.len() && is_b64(b[j]) {
                j += 1;
            }
            // A header line: `Name-With-Dashes: value` to the line break.
            if j < b.len() && (b[j] == b':' || b[j] == b'-') && j > seg_start {
                let mut k = j;
                while k < b.len() && (b[k].is_ascii_alphanumeric() || b[k] == b'-') {
                    k += 1;
                }
                if b.get(k) == Some(&b':') {
                    while k < b.len() && line_break_at(b, k).is_none() && b[k] != b'"' {
                        k += 1;
                    }
                    body_end = k;
                    j = k;
                    continue;
                }
            }
            let mut k = j;
            while k < b.len() && matches!(b[k], b' ' | b'\t') {
                k += 1;
            }
            let at_break = k >= b.len() || line_break_at(b, k).is_some();
            // Base64 that ends its line, or the string it is written in.
            if j > seg_start
                && (at_break || matches!(b[j], b'"' | b'\'' | b'`' | b',' | b'}' | b']' | b'<'))
            {
                body_end = j;
            }
            if !at_break {
                break;
            }
            j = k;
        }
        let r = trim_escapes(b, body_start, body_end.max(body_start));
        if r.start < r.end && &text[r.clone()] != REDACTED {
            spans.push(r);
        }
        from = body_end.max(from);
    }
}

/// `start..end` without leading/trailing white space and `\n`, `\r`, `\\n` escapes.
fn trim_escapes(b: &[u8], mut start: usize, mut end: usize) -> Range<usize> {
    loop {
        if start < end && b[start].is_ascii_whitespace() {
            start += 1;
        } else if start < end && b[start] == b'\\' {
            let mut k = start;
            while k < end && b[k] == b'\\' {
                k += 1;
            }
            if k < end && matches!(b[k], b'n' | b'r') {
                start = k + 1;
            } else {
                break;
            }
        } else {
            break;
        }
    }
    loop {
        if end > start && b[end - 1].is_ascii_whitespace() {
            end -= 1;
        } else if end >= start + 2 && matches!(b[end - 1], b'n' | b'r') && b[end - 2] == b'\\' {
            end -= 2;
            while end > start && b[end - 1] == b'\\' {
                end -= 1;
            }
        } else {
            break;
        }
    }
    start..end.max(start)
}

// ---------------------------------------------------------------- URLs and DSNs

fn url_stop(b: u8) -> bool {
    b.is_ascii_whitespace()
        || matches!(
            b,
            b'"' | b'\'' | b'`' | b'<' | b'>' | b'\\' | b'{' | b'}' | b'|' | b'^' | b',' | b';'
        )
}

/// How far after `scheme://` the `@` ending a password is looked for.
const MAX_AUTHORITY: usize = 1024;

fn urls(text: &str, spans: &mut Vec<Range<usize>>) {
    let b = text.as_bytes();
    let mut from = 0;
    while let Some(i) = text[from..].find("://").map(|i| i + from) {
        from = i + 3;
        // A scheme: letters, digits, + . - starting with a letter.
        let mut s = i;
        while s > 0
            && i - s < 32
            && (b[s - 1].is_ascii_alphanumeric() || matches!(b[s - 1], b'+' | b'.' | b'-'))
        {
            s -= 1;
        }
        if s == i || !b[s].is_ascii_alphabetic() {
            continue;
        }
        let start = i + 3;
        let mut end = start;
        // The URL ends at a delimiter or where the next one starts (so a text of many
        // `://` is read once), and userinfo is short.
        while end < b.len()
            && end - start < MAX_AUTHORITY
            && !url_stop(b[end])
            && !b[end..].starts_with(b"://")
        {
            end += 1;
        }
        // The length cap may stop inside a character.
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let token = &text[start..end];
        let before_query = token.find(['?', '#']).unwrap_or(token.len());
        let Some(at) = token[..before_query].rfind('@') else {
            continue;
        };
        let userinfo = &token[..at];
        let Some(colon) = userinfo.find(':') else {
            continue;
        };
        if userinfo[..colon].contains('/') {
            continue;
        }
        let pass = &userinfo[colon + 1..];
        // host:6443/path@x is a port and a path, not a password.
        let digits = pass.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 && pass.as_bytes().get(digits) == Some(&b'/') {
            continue;
        }
        push(text, start + colon + 1..start + at, spans);
        from = start + at;
    }
}

/// go-sql-driver's `user:password@tcp(host:3306)/db` (no scheme).
fn go_dsn(text: &str, spans: &mut Vec<Range<usize>>) {
    let b = text.as_bytes();
    for proto in ["@tcp(", "@tcp6(", "@unix(", "@udp("] {
        let mut from = 0;
        while let Some(at) = text[from..].find(proto).map(|i| i + from) {
            from = at + proto.len();
            let mut s = at;
            while s > 0
                && !(b[s - 1].is_ascii_whitespace()
                    || matches!(
                        b[s - 1],
                        b'"' | b'\'' | b'=' | b'/' | b',' | b';' | b'(' | b'[' | b'{'
                    ))
            {
                s -= 1;
            }
            if let Some(colon) = text[s..at].find(':') {
                push(text, s + colon + 1..at, spans);
            }
        }
    }
}

// ---------------------------------------------------------------- JWT, Bearer

fn jwt(text: &str, spans: &mut Vec<Range<usize>>) {
    let b = text.as_bytes();
    let mut from = 0;
    while let Some(i) = text[from..].find("eyJ").map(|i| i + from) {
        from = i + 3;
        if i > 0 && (is_b64url(b[i - 1]) || b[i - 1] == b'.') {
            continue;
        }
        let seg = |mut k: usize| {
            let s = k;
            while k < b.len() && is_b64url(b[k]) {
                k += 1;
            }
            (k, k - s)
        };
        let (e1, n1) = seg(i);
        if n1 < 10 || b.get(e1) != Some(&b'.') {
            continue;
        }
        let (e2, n2) = seg(e1 + 1);
        if n2 < 2 || b.get(e2) != Some(&b'.') {
            continue;
        }
        let (e3, _) = seg(e2 + 1);
        spans.push(i..e3);
        from = e3;
    }
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'+' | b'/' | b'=' | b'-')
}

fn bearer(text: &str, spans: &mut Vec<Range<usize>>) {
    let b = text.as_bytes();
    let mut i = 0;
    while i + 7 < b.len() {
        if b[i..i + 6].eq_ignore_ascii_case(b"bearer")
            && (i == 0 || !b[i - 1].is_ascii_alphanumeric())
            && matches!(b[i + 6], b' ' | b'\t')
        {
            let mut s = i + 6;
            while s < b.len() && matches!(b[s], b' ' | b'\t') {
                s += 1;
            }
            let mut e = s;
            while e < b.len() && is_token_byte(b[e]) {
                e += 1;
            }
            let tok = &text[s..e];
            if tok.len() >= 8 && !tok.bytes().all(|c| c.is_ascii_lowercase()) {
                push(text, s..e, spans);
            }
            i = e.max(i + 1);
        } else {
            i += 1;
        }
    }
}

// ---------------------------------------------------------------- key = value

/// Authorization schemes kept before a header's credentials.
const AUTH_SCHEMES: &[&str] = &[
    "bearer",
    "basic",
    "token",
    "digest",
    "negotiate",
    "ntlm",
    "apikey",
];

fn is_key_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')
}

/// Secret `key=value`, `key: value`, `"key": "value"` pairs and `--flag value` in one
/// line (`line` is a range of `text` without its line break). A key at the line's start
/// (after indentation and `- `) followed by `:` or ` = ` hides the rest of the line.
pub(crate) fn scan_line(text: &str, line: Range<usize>, spans: &mut Vec<Range<usize>>) {
    let b = text.as_bytes();
    // Every rule here needs a secret-like key, flag or variable name on the line.
    if !has_hint(&b[line.clone()]) {
        return;
    }
    let first = {
        let mut k = line.start;
        loop {
            while k < line.end && matches!(b[k], b' ' | b'\t') {
                k += 1;
            }
            if k + 1 < line.end && b[k] == b'-' && b[k + 1] == b' ' {
                k += 2;
            } else {
                break;
            }
        }
        k
    };
    let mut env_secret = false;
    let mut i = line.start;
    while i < line.end {
        let c = b[i];
        if c == b'}' {
            env_secret = false;
        }
        let next = if c == b'=' || c == b':' {
            separator(text, line.clone(), first, i, &mut env_secret, spans)
        } else if c == b'-' && (i == line.start || !is_key_byte(b[i - 1])) {
            flag(text, line.clone(), i, spans)
        } else {
            None
        };
        i = next.unwrap_or(i + 1).max(i + 1);
    }
}

/// A key ending just before `sep` (at index `sep`): its start, whether quoted, and its text.
fn key_before<'t>(
    text: &'t str,
    line: &Range<usize>,
    sep: usize,
) -> Option<(usize, &'t str, bool)> {
    let b = text.as_bytes();
    let mut e = sep;
    // `key = value` (sysctl, INI) allows spaces before `=`.
    if b[sep] == b'=' {
        while e > line.start && matches!(b[e - 1], b' ' | b'\t') {
            e -= 1;
        }
    }
    let quote = if e > line.start && matches!(b[e - 1], b'"' | b'\'') {
        e -= 1;
        Some(b[e])
    } else {
        None
    };
    let mut escaped = false;
    if quote.is_some() && e > line.start && b[e - 1] == b'\\' {
        e -= 1;
        escaped = true;
    }
    let mut s = e;
    while s > line.start && is_key_byte(b[s - 1]) && e - s < 80 {
        s -= 1;
    }
    if s == e {
        return None;
    }
    let mut ks = s;
    if let Some(q) = quote {
        if escaped {
            if s >= line.start + 2 && b[s - 1] == q && b[s - 2] == b'\\' {
                ks = s - 2;
            } else {
                return None;
            }
        } else if s > line.start && b[s - 1] == q {
            ks = s - 1;
        } else {
            return None;
        }
    }
    // What comes before the key must end a token (an unquoted key may also open a
    // quoted string: `err="password=X"`).
    if ks > line.start {
        let p = b[ks - 1];
        let boundary = p.is_ascii_whitespace()
            || matches!(p, b'{' | b'[' | b'(' | b',' | b';' | b'&' | b'?' | b'|')
            || (quote.is_none() && matches!(p, b'"' | b'\''));
        if !boundary {
            return None;
        }
    }
    Some((ks, &text[s..e], quote.is_some()))
}

fn separator(
    text: &str,
    line: Range<usize>,
    first: usize,
    sep: usize,
    env_secret: &mut bool,
    spans: &mut Vec<Range<usize>>,
) -> Option<usize> {
    let b = text.as_bytes();
    if sep == line.start {
        return None;
    }
    let (ks, key, quoted) = key_before(text, &line, sep)?;
    // `{name: DB_PASSWORD, value: X}` and `"name":"DB_PASSWORD","value":"X"`.
    let env_value = key == "value" && *env_secret;
    if key == "name" {
        let mut v = sep + 1;
        while v < line.end && matches!(b[v], b' ' | b'\t') {
            v += 1;
        }
        if v < line.end
            && let Some(r) = value_at(text, &line, v, false, quoted, false)
        {
            *env_secret = is_secret_env_name(&text[r.clone()]);
            return Some(r.end);
        }
        return None;
    }
    if !env_value && !is_secret_key(key) {
        return None;
    }
    if env_value {
        *env_secret = false;
    }
    let mut v = sep + 1;
    if b[sep] == b'=' && b.get(v) == Some(&b'=') {
        return None;
    }
    let spaced = v < line.end && matches!(b[v], b' ' | b'\t');
    while v < line.end && matches!(b[v], b' ' | b'\t') {
        v += 1;
    }
    if v >= line.end {
        return None;
    }
    let at_start = ks == first;
    let rest_of_line = at_start && (b[sep] == b':' || (spaced && b[sep - 1].is_ascii_whitespace()));
    let query = ks > line.start && matches!(b[ks - 1], b'?' | b'&');
    // Auth scheme before credentials: keep it.
    let word_end = (v..line.end)
        .find(|&k| !b[k].is_ascii_alphanumeric())
        .unwrap_or(line.end);
    if word_end < line.end
        && b[word_end] == b' '
        && AUTH_SCHEMES
            .iter()
            .any(|s| text[v..word_end].eq_ignore_ascii_case(s))
    {
        v = word_end;
        while v < line.end && b[v] == b' ' {
            v += 1;
        }
        if v >= line.end {
            return None;
        }
    }
    let r = value_at(text, &line, v, rest_of_line, quoted, query)?;
    let end = r.end;
    push(text, r, spans);
    Some(end)
}

/// The value starting at `v`: quoted (to its closing quote), a `[simple list]`, the rest
/// of the line, or one word.
fn value_at(
    text: &str,
    line: &Range<usize>,
    v: usize,
    rest_of_line: bool,
    json_key: bool,
    query: bool,
) -> Option<Range<usize>> {
    let b = text.as_bytes();
    match b[v] {
        b'"' | b'\'' | b'`' => {
            let q = b[v];
            let mut k = v + 1;
            while k < line.end && b[k] != q {
                if b[k] == b'\\' && q == b'"' {
                    // `\"` closes a value whose opening quote was itself escaped.
                    if v > line.start && b[v - 1] == b'\\' && b.get(k + 1) == Some(&q) {
                        break;
                    }
                    k += 1;
                }
                k += 1;
            }
            let end = k.min(line.end);
            Some(v + 1..end)
        }
        b'\\' if b.get(v + 1) == Some(&b'"') => {
            let s = v + 2;
            let e = text[s..line.end].find("\\\"").map_or(line.end, |e| s + e);
            Some(s..e)
        }
        b'{' => None,
        b'[' => {
            let close = text[v..line.end].find(']')? + v;
            let inner = &text[v + 1..close];
            if inner.contains([':', '=', '{', '[', '"']) {
                return None;
            }
            Some(v + 1..close)
        }
        b'|' | b'>' if rest_of_line => None,
        _ if rest_of_line => {
            let mut e = line.end;
            while e > v && b[e - 1].is_ascii_whitespace() {
                e -= 1;
            }
            if json_key && e > v && b[e - 1] == b',' {
                e -= 1;
            }
            Some(v..e)
        }
        _ => {
            // A quote ends the value only where it closes a string (end of line, white
            // space or punctuation after it): a quote inside a word is part of it, or
            // the rest of the word would be found as a value of its own next time.
            let closes = |k: usize| {
                k >= line.end
                    || b[k].is_ascii_whitespace()
                    || matches!(
                        b[k],
                        b',' | b';' | b':' | b')' | b']' | b'}' | b'>' | b'&' | b'|'
                    )
            };
            let ends_value = |e: usize| {
                b[e].is_ascii_whitespace()
                    || (matches!(b[e], b'"' | b'\'' | b'`') && closes(e + 1))
                    || (b[e] == b'\\' && b.get(e + 1) == Some(&b'"') && closes(e + 2))
                    || (query && matches!(b[e], b'&' | b'#'))
            };
            let mut e = v;
            while e < line.end && !ends_value(e) {
                e += 1;
            }
            while e > v && matches!(b[e - 1], b',' | b';' | b')' | b']' | b'}' | b'>') {
                e -= 1;
            }
            Some(v..e)
        }
    }
}

/// `--secret-flag value` (or `-flag value`): the next word; also `"--token", "X"` and
/// `--token, X` in a flow list.
fn flag(text: &str, line: Range<usize>, i: usize, spans: &mut Vec<Range<usize>>) -> Option<usize> {
    let b = text.as_bytes();
    let mut s = i;
    while s < line.end && b[s] == b'-' && s - i < 2 {
        s += 1;
    }
    let mut e = s;
    while e < line.end && is_key_byte(b[e]) {
        e += 1;
    }
    if e == s || !b[s].is_ascii_alphabetic() || !is_secret_key(&text[s..e]) {
        return Some(e);
    }
    let mut v = e;
    // Closing quote and comma of a flow list element.
    if v < line.end && matches!(b[v], b'"' | b'\'') {
        v += 1;
        while v < line.end && b[v] == b' ' {
            v += 1;
        }
        if v < line.end && b[v] == b',' {
            v += 1;
        } else {
            return Some(e);
        }
    } else if v < line.end && b[v] == b',' {
        v += 1;
    } else if !(v < line.end && matches!(b[v], b' ' | b'\t')) {
        return Some(e);
    }
    while v < line.end && matches!(b[v], b' ' | b'\t') {
        v += 1;
    }
    if v >= line.end || text[v..].starts_with("--") {
        return Some(e);
    }
    let r = if matches!(b[v], b'"' | b'\'') {
        let q = b[v];
        let close = text[v + 1..line.end]
            .find(q as char)
            .map_or(line.end, |c| v + 1 + c);
        v + 1..close
    } else {
        let mut k = v;
        while k < line.end
            && !b[k].is_ascii_whitespace()
            && !matches!(b[k], b'"' | b'\'' | b',' | b']')
        {
            k += 1;
        }
        v..k
    };
    let end = r.end;
    push(text, r, spans);
    Some(end)
}

// ---------------------------------------------------------------- YAML by lines

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start_matches([' ', '\t']).len()
}

/// The key of a `key:` line (after indentation and `- `), and what follows the colon.
fn yaml_key(line: &str) -> Option<(&str, &str)> {
    let mut t = line.trim_start_matches([' ', '\t']);
    while let Some(r) = t.strip_prefix("- ") {
        t = r.trim_start_matches(' ');
    }
    let colon = t.find(':')?;
    let key = t[..colon].trim_matches(['"', '\'']);
    if key.is_empty() || !key.bytes().all(is_key_byte) {
        return None;
    }
    let rest = &t[colon + 1..];
    if !(rest.is_empty() || rest.starts_with([' ', '\t', '\r'])) {
        return None;
    }
    Some((key, rest.trim()))
}

fn is_block_indicator(v: &str) -> bool {
    let v = v.split(" #").next().unwrap_or("").trim();
    !v.is_empty()
        && (v.starts_with('|') || v.starts_with('>'))
        && v[1..]
            .bytes()
            .all(|c| matches!(c, b'+' | b'-' | b'1'..=b'9'))
}

/// Block scalars and continued plain values under secret keys, and `- --flag` then
/// `- value` list items, read line by line (for YAML the parser could not read).
fn yaml_lines(text: &str, spans: &mut Vec<Range<usize>>) {
    let mut lines: Vec<(usize, &str)> = Vec::new();
    let mut off = 0;
    for l in text.split_inclusive('\n') {
        lines.push((off, l.trim_end_matches(['\n', '\r'])));
        off += l.len();
    }
    let mut i = 0;
    while i < lines.len() {
        let (_, line) = lines[i];
        let ind = indent_of(line);
        if let Some((key, rest)) = yaml_key(line)
            && is_secret_key(key)
            && (rest.is_empty() || is_block_indicator(rest))
        {
            // The value: following lines more indented than the key (or blank).
            let mut j = i + 1;
            let mut last = None;
            while j < lines.len() {
                let (_, l) = lines[j];
                if l.trim().is_empty() {
                    j += 1;
                    continue;
                }
                if indent_of(l) <= ind {
                    break;
                }
                // A plain value continued on the next line, not a nested mapping or list.
                if rest.is_empty() && last.is_none() {
                    let t = l.trim_start();
                    if t.starts_with("- ")
                        || t == "-"
                        || yaml_key(l).is_some()
                        || t.starts_with('#')
                    {
                        break;
                    }
                }
                last = Some(j);
                j += 1;
            }
            if let Some(last) = last {
                let (o1, l1) = lines[i + 1..=last]
                    .iter()
                    .find(|(_, l)| !l.trim().is_empty())
                    .copied()
                    .unwrap_or(lines[last]);
                let start = o1 + indent_of(l1);
                let (ol, ll) = lines[last];
                let end = ol + ll.trim_end().len();
                push(text, start..end, spans);
                i = last + 1;
                continue;
            }
        }
        // `- name: DB_PASSWORD` then `  value: X` in the same mapping.
        if let Some(("name", name)) = yaml_key(line)
            && is_secret_env_name(name.trim_matches(['"', '\'']))
        {
            let key_col = line.len() - line.trim_start_matches([' ', '\t', '-']).len();
            // The mapping's other keys are near (a bound keeps nested texts linear).
            for &(o2, l2) in lines[i + 1..].iter().take(64) {
                if l2.trim().is_empty() {
                    continue;
                }
                let ind2 = indent_of(l2);
                if ind2 > key_col {
                    continue;
                }
                if ind2 < key_col || l2.trim_start().starts_with('-') {
                    break;
                }
                if let Some(("value", v)) = yaml_key(l2) {
                    let v_off = o2 + (v.as_ptr() as usize - l2.as_ptr() as usize);
                    push(text, unquote(text, v_off..v_off + v.len()), spans);
                    break;
                }
            }
        }
        // `- --token` then `- VALUE` at the same indentation.
        let t = line.trim_start();
        if let Some(item) = t.strip_prefix("- ") {
            let item = item.trim().trim_matches(['"', '\'']);
            if item.starts_with('-')
                && !item.contains('=')
                && is_secret_key(item)
                && let Some(&(o2, l2)) = lines.get(i + 1)
                && indent_of(l2) == ind
                && let Some(v) = l2.trim_start().strip_prefix("- ")
            {
                let v_off = o2 + (l2.len() - v.len());
                let vt = v.trim_end();
                if !vt.starts_with("--") {
                    push(text, unquote(text, v_off..v_off + vt.len()), spans);
                }
            }
        }
        i += 1;
    }
}

/// `r` without the quotes around it, if it is quoted.
fn unquote(text: &str, r: Range<usize>) -> Range<usize> {
    let v = &text[r.clone()];
    if v.len() >= 2
        && (v.starts_with('"') && v.ends_with('"') || v.starts_with('\'') && v.ends_with('\''))
    {
        r.start + 1..r.end - 1
    } else {
        r
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Format, redact_as};

    /// Found by cargo-fuzz: a URL longer than the look-ahead cut a character in two.
    #[test]
    fn a_long_url_is_cut_on_a_character_boundary() {
        let text = format!("x://a{}@h", "é".repeat(600));
        let (r, n) = redact_as(&text, Format::Text);
        assert_eq!((r, n), (text.clone(), 0));
    }

    /// Found by cargo-fuzz: the value stopped at a quote inside a word, so each
    /// redaction found the rest of the word as a new value (not idempotent).
    #[test]
    fn a_quote_inside_a_word_does_not_end_the_value() {
        let text = "    cl\u{0}ee{\"k8s_auth_token\":t_to{\"k8s_aken}NTE_to{\"k8s_aken}NTED01\n- name: x\n";
        let (once, n) = redact_as(text, Format::Log);
        assert_eq!(n, 1, "{once}");
        assert!(!once.contains("NTED01"), "{once}");
        assert_eq!(redact_as(&once, Format::Log), (once.clone(), 0));
        // A closing quote still ends it.
        let (r, _) = redact_as("err=\"token=abc123 failed\" code=1\n", Format::Log);
        assert_eq!(r, "err=\"token=REDACTED failed\" code=1\n");
        let (r, _) = redact_as("msg=\"password=abc123\" code=1\n", Format::Log);
        assert_eq!(r, "msg=\"password=REDACTED\" code=1\n");
    }
}
