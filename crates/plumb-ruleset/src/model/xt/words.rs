//! Splitting an iptables rule line into words the way `iptables-restore` does.
//!
//! Words are separated by spaces or tabs; double quotes group a word and may
//! contain `\"` and `\\` escapes (what `iptables-save` prints for comments).
//! A word is stored as a span of the line, so splitting allocates one vector.

use std::borrow::Cow;

/// One word of a rule line: a span of the line's text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Word {
    /// Byte offset of the word's first byte in the line.
    pub start: u32,
    /// Length in bytes, quotes included.
    pub len: u16,
    /// The raw text contains quotes; `value()` removes them and resolves the escapes
    /// inside them.
    pub quoted: bool,
}

impl Word {
    /// The word exactly as written, quotes and escapes kept. `line` must be the line the word was
    /// split from.
    pub fn raw<'a>(&self, line: &'a str) -> &'a str {
        &line[self.start as usize..self.start as usize + self.len as usize]
    }

    /// The word's value with quotes removed and escapes resolved.
    pub fn value<'a>(&self, line: &'a str) -> Cow<'a, str> {
        let raw = self.raw(line);
        if !self.quoted {
            return Cow::Borrowed(raw);
        }
        if let Some(inner) = raw.strip_prefix('"').and_then(|r| r.strip_suffix('"'))
            && !inner.contains(['"', '\\'])
        {
            return Cow::Borrowed(inner);
        }
        let mut out = String::with_capacity(raw.len());
        let mut chars = raw.chars();
        let mut in_quotes = false;
        while let Some(c) = chars.next() {
            match c {
                '"' => in_quotes = !in_quotes,
                '\\' if in_quotes => {
                    if let Some(next) = chars.next() {
                        out.push(next);
                    }
                }
                c => out.push(c),
            }
        }
        Cow::Owned(out)
    }

    /// An unquoted `-x` or `--xyz` word (a negative number is a value, not an option).
    pub fn is_option(&self, line: &str) -> bool {
        if self.quoted {
            return false;
        }
        let b = self.raw(line).as_bytes();
        b.len() >= 2 && b[0] == b'-' && !b[1].is_ascii_digit()
    }

    /// Whether the word is an unquoted `!` (the negation of the option after it).
    pub fn is_bang(&self, line: &str) -> bool {
        !self.quoted && self.raw(line) == "!"
    }
}

/// Why a line could not be split.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SplitError {
    /// A `"` was opened at this byte offset and never closed.
    UnterminatedQuote {
        /// Byte offset of the opening quote in the line.
        offset: usize,
    },
    /// A word longer than 65535 bytes (no real rule has one).
    WordTooLong {
        /// Byte offset of the word's start in the line.
        offset: usize,
    },
}

/// Short options that take a value and may have it attached (`-mstate`, `-iwlan0`),
/// as getopt reads them.
const SHORT_WITH_VALUE: &[u8] = b"sdiopmjgc";

/// Splits `line[from..]` into words the way iptables-restore's tokenizer does: blanks
/// separate words; a `"` opens a quoted part (where `\` escapes the next character)
/// and the closing `"` ends the word; outside quotes a backslash is an ordinary
/// character. A quote left open runs to the end of the line: the words are all
/// pushed, then [`SplitError::UnterminatedQuote`] says so (iptables-restore takes
/// such a line as it is). A short option glued to its value where an option is
/// expected (`-mstate` after a value) is two words, as getopt reads it. Offsets are
/// relative to `line`.
pub fn split(line: &str, from: usize, out: &mut Vec<Word>) -> Result<(), SplitError> {
    let bytes = line.as_bytes();
    let first = out.len();
    let mut i = from;
    let mut unterminated = None;
    while i < bytes.len() {
        while i < bytes.len() && (bytes[i] == b' ' || bytes[i] == b'\t') {
            i += 1;
        }
        if i >= bytes.len() {
            break;
        }
        let start = i;
        let mut quoted = false;
        let mut in_quotes = false;
        let mut quote_start = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if in_quotes {
                match b {
                    b'\\' => i += 1,
                    b'"' => {
                        // The closing quote ends the word.
                        i += 1;
                        in_quotes = false;
                        break;
                    }
                    _ => {}
                }
            } else {
                match b {
                    b' ' | b'\t' => break,
                    b'"' => {
                        in_quotes = true;
                        quoted = true;
                        quote_start = i;
                    }
                    _ => {}
                }
            }
            i += 1;
        }
        if in_quotes {
            unterminated = Some(quote_start);
        }
        let end = i.min(bytes.len());
        let len =
            u16::try_from(end - start).map_err(|_| SplitError::WordTooLong { offset: start })?;
        let word = Word {
            start: start as u32,
            len,
            quoted,
        };
        let raw = word.raw(line).as_bytes();
        let after_value = out.len() == first || !out[out.len() - 1].is_option(line);
        if !quoted
            && after_value
            && raw.len() > 2
            && raw[0] == b'-'
            && SHORT_WITH_VALUE.contains(&raw[1])
        {
            out.push(Word { len: 2, ..word });
            out.push(Word {
                start: word.start + 2,
                len: len - 2,
                quoted: false,
            });
        } else {
            out.push(word);
        }
    }
    match unterminated {
        Some(offset) => Err(SplitError::UnterminatedQuote { offset }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(line: &str) -> Vec<String> {
        let mut w = Vec::new();
        split(line, 0, &mut w).unwrap();
        w.iter().map(|w| w.value(line).into_owned()).collect()
    }

    #[test]
    fn splits_quoted_comment_with_spaces() {
        assert_eq!(
            values(r#"-m comment --comment "kubernetes service portals" -j X"#),
            [
                "-m",
                "comment",
                "--comment",
                "kubernetes service portals",
                "-j",
                "X"
            ]
        );
    }

    #[test]
    fn unescapes_quotes_inside_quotes() {
        assert_eq!(
            values(r#"--comment "a \"b\" c""#),
            ["--comment", r#"a "b" c"#]
        );
    }

    #[test]
    fn tabs_separate_words() {
        assert_eq!(
            values("-s\t1.2.3.4  -j\tDROP"),
            ["-s", "1.2.3.4", "-j", "DROP"]
        );
    }

    #[test]
    fn unterminated_quote_is_reported_with_offset() {
        let mut w = Vec::new();
        assert_eq!(
            split(r#"--comment "abc"#, 0, &mut w),
            Err(SplitError::UnterminatedQuote { offset: 10 })
        );
    }

    #[test]
    fn negative_numbers_are_values() {
        let line = "--x -1 --y";
        let mut w = Vec::new();
        split(line, 0, &mut w).unwrap();
        assert!(w[0].is_option(line));
        assert!(!w[1].is_option(line));
        assert!(w[2].is_option(line));
    }
}
