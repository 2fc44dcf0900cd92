//! Problems found while reading input: where (line, column), what was seen, what was expected.
//!
//! Parsers never fail on a whole file because of one bad line: they record a
//! `Diagnostic` and continue. Only input that cannot be text at all (binary, over
//! the size limit) is a hard `InputError`.

use serde::Serialize;
use std::fmt;

/// How bad a diagnostic is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing; the model is still exact (e.g. an unknown extension kept verbatim).
    Note,
    /// Part of the input could not be understood and was kept as raw text or skipped.
    Error,
}

/// One problem in the input, located to the line and column (both 1-based).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// 1-based line of the input.
    pub line: u32,
    /// 1-based column, counted in characters.
    pub column: u32,
    /// Whether the model is still exact ([`Severity::Note`]) or lost something
    /// ([`Severity::Error`]).
    pub severity: Severity,
    /// What was wrong and, where possible, what was expected (`unknown command "-Z"`).
    pub message: String,
    /// The offending text (truncated to a readable length).
    pub text: String,
}

impl Diagnostic {
    /// An [`Severity::Error`] diagnostic at `line`:`column`, quoting `text` (cut by [`excerpt`]).
    pub fn error(line: u32, column: u32, message: impl Into<String>, text: &str) -> Diagnostic {
        Diagnostic {
            line,
            column,
            severity: Severity::Error,
            message: message.into(),
            text: excerpt(text),
        }
    }

    /// A [`Severity::Note`] diagnostic at `line`:`column`, quoting `text` (cut by [`excerpt`]).
    pub fn note(line: u32, column: u32, message: impl Into<String>, text: &str) -> Diagnostic {
        Diagnostic {
            severity: Severity::Note,
            ..Diagnostic::error(line, column, message, text)
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.column, self.message)?;
        if !self.text.is_empty() {
            write!(f, ": {}", self.text)?;
        }
        Ok(())
    }
}

const EXCERPT_MAX: usize = 120;

/// At most `EXCERPT_MAX` bytes of `text`, cut on a char boundary, with "…" when cut.
pub fn excerpt(text: &str) -> String {
    if text.len() <= EXCERPT_MAX {
        return text.to_string();
    }
    let end = text.floor_char_boundary(EXCERPT_MAX);
    format!("{}…", &text[..end])
}

/// Input that cannot be parsed at all.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InputError {
    /// The input is bigger than the configured limit; nothing was parsed.
    #[error(
        "input is {size} bytes, over the limit of {limit} bytes (raise it with --max-input-size)"
    )]
    TooLarge {
        /// Size of the input in bytes.
        size: usize,
        /// The limit in bytes ([`ParseOptions::max_size`](crate::ParseOptions::max_size)).
        limit: usize,
    },
    /// The input holds a NUL byte: not text (a compressed or binary file given by mistake).
    #[error("input looks binary (NUL byte at offset {offset}); expected ruleset text")]
    Binary {
        /// Byte offset of the first NUL.
        offset: usize,
    },
    /// The input is not UTF-8 text.
    #[error("input is not valid UTF-8 at byte {offset}")]
    NotUtf8 {
        /// Byte offset of the first invalid sequence.
        offset: usize,
    },
    /// Format detection found no known ruleset format; the caller must name one.
    #[error("could not recognise the format: {reason}; pass --format")]
    UnknownFormat {
        /// What was looked at and not recognised.
        reason: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpt_cuts_long_text_on_char_boundary() {
        let long = "é".repeat(100);
        let e = excerpt(&long);
        assert!(e.ends_with('…'));
        assert!(e.len() <= EXCERPT_MAX + '…'.len_utf8());
    }

    #[test]
    fn display_has_location_and_text() {
        let d = Diagnostic::error(3, 7, "expected chain name", "-A");
        assert_eq!(d.to_string(), "3:7: expected chain name: -A");
    }
}
