//! The nft text tokenizer: one pass over the text turns it into [`Token`]s (words,
//! braces, `;`, list commas, newlines, `#` comments), each with its line and byte span.
//! No allocation per character; quoted strings stay inside their word.

use crate::diagnostic::Diagnostic;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tok {
    Word,
    LBrace,
    RBrace,
    Semi,
    Comma,
    Newline,
    Comment,
}

/// A token: 16 bytes, since a 16 MB listing has 2.7 million of them (byte offsets
/// fit in `u32`: [`tokenize`] refuses longer texts).
#[derive(Clone, Copy, Debug)]
pub(super) struct Token {
    pub(super) kind: Tok,
    /// Byte span in the text.
    start: u32,
    end: u32,
    /// 1-based line.
    pub(super) line: u32,
}

impl Token {
    fn new(kind: Tok, start: usize, end: usize, line: u32) -> Token {
        // `tokenize` takes texts up to u32::MAX bytes.
        Token {
            kind,
            start: start as u32,
            end: end as u32,
            line,
        }
    }

    /// Byte offset of the token's first byte.
    pub(super) fn start(&self) -> usize {
        self.start as usize
    }

    /// Byte offset after the token's last byte.
    pub(super) fn end(&self) -> usize {
        self.end as usize
    }

    /// Byte offset where the token's line starts (for columns).
    pub(super) fn line_start(&self, text: &str) -> usize {
        text.as_bytes()[..self.start()]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1)
    }
}

/// The longest text [`tokenize`] reads (token offsets are `u32`).
pub(super) const MAX_TEXT: usize = u32::MAX as usize;

/// Words that end an xtables print inside a rule: how the rest of an iptables-nft rule
/// begins.
const PRINT_ENDS_AT: &[&str] = &[
    "counter", "meta", "ip", "ip6", "tcp", "udp", "sctp", "icmp", "icmpv6", "ct", "iifname",
    "oifname", "fib", "pkttype", "limit", "log", "xt", "mark",
];

/// Where an xtables print inside a rule ends, for a `#` comment that is one.
///
/// nft builds without a translation for an iptables-nft match print it as `#` and the
/// extension's `iptables -L` text (`# match-set KUBE-CLUSTER-IP dst,dst`, `# socket
/// --transparent`) and then print the rest of the rule on the same line. Such a comment
/// is recognised by what follows it: a `counter packets N bytes M` statement (iptables-nft
/// gives every rule a counter after its matches). The print ends before the first word
/// that starts what iptables-nft rules hold ([`PRINT_ENDS_AT`]: `counter`, `meta`, `ip`
/// ...; not every nft selector: `dst` is one, and also a match-set direction). `None`
/// for an ordinary comment.
fn xt_print_end(comment: &str) -> Option<usize> {
    let body = comment.strip_prefix('#')?;
    if body.trim_start().starts_with("handle ") || !body.starts_with(' ') {
        return None;
    }
    let mut counter_follows = false;
    let words: Vec<(usize, &str)> = body
        .split(' ')
        .scan(1usize, |off, w| {
            let at = *off;
            *off += w.len() + 1;
            Some((at, w))
        })
        .filter(|(_, w)| !w.is_empty())
        .collect();
    for pair in words.windows(2) {
        if pair[0].1 == "counter" && pair[1].1 == "packets" {
            counter_follows = true;
        }
    }
    if !counter_follows || words.is_empty() {
        return None;
    }
    let end = words
        .iter()
        .skip(1)
        .find(|(_, w)| PRINT_ENDS_AT.contains(w))
        .map(|(at, _)| *at)?;
    Some(comment[..end].trim_end().len())
}

#[cfg(test)]
/// Splits the text into tokens. Quoted strings stay inside their word; a comma
/// is its own token only where it separates list items (followed by a space,
/// newline, `}` or the end), so `established,related` stays one word.
pub(super) fn tokenize(text: &str, diags: &mut Vec<Diagnostic>) -> Vec<Token> {
    let mut lexer = Lexer::new(text, diags);
    let mut toks = Vec::with_capacity(text.len().min(MAX_TEXT) / 6);
    while lexer.step(text, &mut toks, diags) {}
    toks
}

/// The tokenizer as a cursor: [`Lexer::step`] reads the next item of the text (a
/// blank, a brace, a comment, a word that may split into several tokens) and appends
/// its tokens, so that a reader can hold only the tokens it has not read yet. Reading
/// every step gives exactly [`tokenize`]'s tokens and diagnostics, in order.
pub(super) struct Lexer {
    /// Bytes read (the text is read up to `n`).
    i: usize,
    n: usize,
    line: u32,
    line_start: usize,
}

impl Lexer {
    /// A lexer at the start of `text`; a text longer than [`MAX_TEXT`] gets its
    /// diagnostic here (it is read up to there).
    pub(super) fn new(text: &str, diags: &mut Vec<Diagnostic>) -> Lexer {
        // Offsets are u32: a longer text is read up to there, and said to be cut.
        if text.len() > MAX_TEXT {
            diags.push(Diagnostic::error(
                1,
                1,
                format!("the text is longer than {MAX_TEXT} bytes: read up to there"),
                "",
            ));
        }
        let n = text.floor_char_boundary(MAX_TEXT);
        Lexer {
            i: 0,
            n,
            line: 1,
            line_start: 0,
        }
    }

    /// Reads the next item of `text` (the text given to [`Lexer::new`]) into `toks`;
    /// false at the end of the text.
    pub(super) fn step(
        &mut self,
        text: &str,
        toks: &mut Vec<Token>,
        diags: &mut Vec<Diagnostic>,
    ) -> bool {
        let b = &text.as_bytes()[..self.n];
        let (mut i, line) = (self.i, self.line);
        if i >= b.len() {
            return false;
        }
        let c = b[i];
        let single = |kind, i: usize| Token::new(kind, i, i + 1, line);
        match c {
            b' ' | b'\t' | b'\r' => i += 1,
            b'\n' => {
                toks.push(single(Tok::Newline, i));
                i += 1;
                self.line += 1;
                self.line_start = i;
            }
            b'{' => {
                toks.push(single(Tok::LBrace, i));
                i += 1;
            }
            b'}' => {
                toks.push(single(Tok::RBrace, i));
                i += 1;
            }
            b';' => {
                toks.push(single(Tok::Semi, i));
                i += 1;
            }
            b',' => {
                toks.push(single(Tok::Comma, i));
                i += 1;
            }
            b'#' => {
                let end = memchr_newline(b, i);
                if let Some(print_end) = xt_print_end(&text[i..end]) {
                    // An iptables-nft match nft printed with the extension's own print
                    // function (`# match-set KUBE-X dst,dst counter ... accept`): the
                    // rule goes on after it. One word for the print, then lex on.
                    toks.push(Token::new(Tok::Word, i, i + print_end, line));
                    i += print_end;
                } else {
                    toks.push(Token::new(Tok::Comment, i, end, line));
                    i = end;
                }
            }
            _ => {
                let start = i;
                while i < b.len() {
                    match b[i] {
                        b' ' | b'\t' | b'\r' | b'\n' | b'{' | b'}' | b';' => break,
                        b',' if matches!(
                            b.get(i + 1),
                            None | Some(b' ' | b'\t' | b'\r' | b'\n' | b'}' | b',')
                        ) =>
                        {
                            break;
                        }
                        b'"' => {
                            let mut j = i + 1;
                            while j < b.len() && b[j] != b'"' && b[j] != b'\n' {
                                j += 1;
                            }
                            if j >= b.len() || b[j] == b'\n' {
                                diags.push(Diagnostic::error(
                                    line,
                                    column(text, self.line_start, i),
                                    "unterminated string: expected a closing '\"' on the same line",
                                    &text[i..j],
                                ));
                                i = j;
                                break;
                            }
                            i = j + 1;
                        }
                        _ => i += 1,
                    }
                }
                let mut from = start;
                while from < i {
                    let to = glued_end(b, from, i);
                    toks.push(Token::new(Tok::Word, from, to, line));
                    from = to;
                }
            }
        }
        self.i = i;
        true
    }
}

/// Words a number glued to them ends at (`0bytes`, `22counter`, `10.0.0.1jump`): nft's
/// scanner ends a number where a letter starts.
const AFTER_NUMBER: &[&str] = &[
    "accept",
    "drop",
    "return",
    "jump",
    "goto",
    "continue",
    "counter",
    "packets",
    "bytes",
    "reject",
    "log",
    "comment",
    "ip",
    "ip6",
    "tcp",
    "udp",
    "meta",
    "ct",
    "iifname",
    "oifname",
    "iif",
    "oif",
    "dnat",
    "snat",
    "masquerade",
    "redirect",
    "limit",
    "queue",
    "mark",
    "tproxy",
];

/// Operators nft's scanner reads as tokens of their own even when glued to a word.
const GLUED_OPS: &[&str] = &["!=", "==", ">>", "<<", "|", "&", "^"];

/// Where the first token of the blank-free word `b[from..end]` ends, as nft's scanner
/// splits it: a quoted string is a token of its own (`comment"x"`), a set reference's
/// `@` starts one (`saddr@s`), an operator glued to a name is one (`iifname!=`,
/// `|urg`), and a number ends where a statement word starts (`22counter`). Everything
/// else stays one word (`10.0.0.1:80`, `established,related`, `1h30m`).
fn glued_end(b: &[u8], from: usize, end: usize) -> usize {
    let word = &b[from..end];
    if word[0] == b'"' {
        // The quoted string and what follows it.
        return match word[1..].iter().position(|&c| c == b'"') {
            Some(p) if from + p + 2 < end => from + p + 2,
            _ => end,
        };
    }
    // Parentheses are tokens of their own in nft's scanner: `(syn`, `rst)`.
    if matches!(word[0], b'(' | b')') {
        return from + 1;
    }
    if let Some(p) = word.iter().position(|&c| matches!(c, b'(' | b')' | b'"'))
        && word[p] != b'"'
        && !GLUED_OPS.iter().any(|op| word.starts_with(op.as_bytes()))
    {
        return from + p;
    }
    // `fe80::/64ip6`: a prefix length ends where a statement word starts.
    if let Some(slash) = word.iter().rposition(|&c| c == b'/')
        && let Some(k) = word[slash + 1..]
            .iter()
            .position(|c| c.is_ascii_alphabetic())
        && k > 0
        && word[slash + 1..slash + 1 + k]
            .iter()
            .all(u8::is_ascii_digit)
        && AFTER_NUMBER.contains(&std::str::from_utf8(&word[slash + 1 + k..]).unwrap_or(""))
    {
        return from + slash + 1 + k;
    }
    if word[0].is_ascii_alphabetic() {
        // `to:20000`: the keyword and a port.
        if word.starts_with(b"to:") {
            return from + 2;
        }
        // `saddr::1`: a keyword and an IPv6 address (`dead::1` is one address).
        if let Some(p) = word.windows(2).position(|w| w == b"::")
            && p > 0
            && !word[..p].iter().all(u8::is_ascii_hexdigit)
        {
            return from + p;
        }
        for (k, &c) in word.iter().enumerate().skip(1) {
            if c == b'"' || c == b'@' {
                return from + k;
            }
        }
        for op in GLUED_OPS {
            if word.len() > op.len() && word.ends_with(op.as_bytes()) {
                let cut = word.len() - op.len();
                if word[cut - 1].is_ascii_alphanumeric() {
                    return from + cut;
                }
            }
        }
        return end;
    }
    for op in GLUED_OPS {
        if word.len() > op.len()
            && word.starts_with(op.as_bytes())
            && (word[op.len()].is_ascii_alphanumeric() || word[op.len()] == b'(')
        {
            return from + op.len();
        }
    }
    // `0a:0b:0c:0d:0e:0fvlan`: an Ethernet address ends after its sixth pair.
    if word.len() > 17
        && word[17].is_ascii_alphabetic()
        && !word[17].is_ascii_hexdigit()
        && word[..17].chunks(3).all(|c| {
            c[0].is_ascii_hexdigit() && c[1].is_ascii_hexdigit() && (c.len() == 2 || c[2] == b':')
        })
    {
        return from + 17;
    }
    // `@nh,32,32@y`: a set reference starts at its `@`.
    if word[0] == b'@'
        && let Some(p) = word[1..].iter().position(|&c| c == b'@')
    {
        return from + 1 + p;
    }
    if word[0].is_ascii_digit()
        && !word.starts_with(b"0x")
        && !word.contains(&b':')
        && let Some(k) = word.iter().position(|c| c.is_ascii_alphabetic())
        && AFTER_NUMBER.contains(&std::str::from_utf8(&word[k..]).unwrap_or(""))
        // A plain number followed by d, h, m or s is a time string to nft's scanner
        // (`0drop` reads `0d` and `rop`): no split there.
        && (word[..k].contains(&b'.') || !matches!(word[k], b'd' | b'h' | b'm' | b's'))
    {
        return from + k;
    }
    end
}

fn memchr_newline(b: &[u8], from: usize) -> usize {
    b[from..]
        .iter()
        .position(|&c| c == b'\n')
        .map_or(b.len(), |p| from + p)
}

/// 1-based column (in characters) of byte `at` on the line starting at `line_start`.
pub(super) fn column(text: &str, line_start: usize, at: usize) -> u32 {
    let seg = text.get(line_start..at).unwrap_or("");
    if seg.is_ascii() {
        seg.len() as u32 + 1
    } else {
        seg.chars().count() as u32 + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds_and_words(text: &str) -> Vec<(Tok, &str)> {
        let mut diags = Vec::new();
        let toks = tokenize(text, &mut diags);
        assert!(diags.is_empty(), "{diags:?}");
        toks.iter()
            .map(|t| (t.kind, &text[t.start()..t.end()]))
            .collect()
    }

    #[test]
    fn commas_separate_list_items_only() {
        assert_eq!(
            kinds_and_words("ct state established,related { 80, 443 }"),
            [
                (Tok::Word, "ct"),
                (Tok::Word, "state"),
                (Tok::Word, "established,related"),
                (Tok::LBrace, "{"),
                (Tok::Word, "80"),
                (Tok::Comma, ","),
                (Tok::Word, "443"),
                (Tok::RBrace, "}"),
            ]
        );
    }

    #[test]
    fn quoted_words_comments_and_lines() {
        let text = "comment \"a b;c\" # handle 4\n\taccept";
        let mut diags = Vec::new();
        let toks = tokenize(text, &mut diags);
        let kinds: Vec<Tok> = toks.iter().map(|t| t.kind).collect();
        assert_eq!(
            kinds,
            [Tok::Word, Tok::Word, Tok::Comment, Tok::Newline, Tok::Word]
        );
        assert_eq!(&text[toks[1].start()..toks[1].end()], "\"a b;c\"");
        assert_eq!(
            (
                toks[4].line,
                column(text, toks[4].line_start(text), toks[4].start())
            ),
            (2, 2)
        );
        tokenize("comment \"open", &mut diags);
        assert_eq!(diags.len(), 1, "an unterminated string is an error");
    }
}
