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
    pub line: u32,
    pub column: u32,
    pub severity: Severity,
    pub message: String,
    /// The offending text (truncated to a readable length).
    pub text: String,
}

impl Diagnostic {
    pub fn error(line: u32, column: u32, message: impl Into<String>, text: &str) -> Diagnostic {
        Diagnostic {
            line,
            column,
            severity: Severity::Error,
            message: message.into(),
            text: excerpt(text),
        }
    }

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
    let mut end = EXCERPT_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Input that cannot be parsed at all.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InputError {
    #[error(
        "input is {size} bytes, over the limit of {limit} bytes (raise it with --max-input-size)"
    )]
    TooLarge { size: usize, limit: usize },
    #[error("input looks binary (NUL byte at offset {offset}); expected ruleset text")]
    Binary { offset: usize },
    #[error("input is not valid UTF-8 at byte {offset}")]
    NotUtf8 { offset: usize },
    #[error("could not recognise the format: {reason}; pass --format")]
    UnknownFormat { reason: String },
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
