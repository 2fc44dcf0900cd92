//! The structural pass for YAML and JSON (JSON is read as YAML 1.2, of which it is a
//! subset): the parser's events say which scalar is the value of which key, wherever
//! the text puts it — block or flow style, quoted, a block scalar (`token: |`), a plain
//! value over several lines.
//!
//! Hidden: scalar values of secret keys ([`super::keys::is_secret_key`]) and the scalar
//! items of a list under one (`tokens: [a, b]` is not assumed, `token: [a]` is); the
//! `value` of a mapping whose `name` is a secret-like variable
//! (`env: [{name: DB_PASSWORD, value: X}]`, either order); in a list, the item after a
//! secret flag (`- --token` then `- X`) and the part after `=` of `--token=X`.
//!
//! Findings count only once the top-level node they are in is complete: a parse error
//! discards the findings of the unfinished document (an unclosed `{` makes the following
//! lines a flow scalar, which is not what they are), and the pattern pass still reads
//! the whole text, so a file that is not valid YAML is never skipped. A log line's JSON
//! object followed by more text counts, as the object closed before the error.

use super::keys::{is_secret_env_name, is_secret_key, is_trivial_value};
use granit_parser::{Event, Parser, ScalarStyle, StructureStyle};
use std::ops::Range;

enum KeyKind {
    Secret,
    Name,
    Value,
    Other,
}

enum Frame {
    Map {
        /// The key whose value comes next, if a key was read.
        key: Option<KeyKind>,
        env_secret: bool,
        env_value: Option<Range<usize>>,
    },
    Seq {
        /// Items are values of a secret key.
        secret: bool,
        /// The previous item was a secret flag without `=`.
        flag_pending: bool,
    },
}

/// Whether a plain scalar is a JSON number or literal.
fn is_json_plain(v: &str) -> bool {
    matches!(v, "true" | "false" | "null")
        || (v
            .strip_prefix('-')
            .unwrap_or(v)
            .starts_with(|c: char| c.is_ascii_digit())
            && v.parse::<f64>().is_ok())
}

/// Adds the ranges of secret scalar values of the YAML or JSON document(s) in
/// `text[range]`. With `json_only`, a top-level node that is not JSON (block style,
/// plain strings: YAML that happens to parse, as in a log line's text or a broken JSON
/// file) gives nothing: YAML's reading of it would not be what the text means, and
/// would change once its values are redacted.
pub(crate) fn scan(text: &str, range: Range<usize>, json_only: bool, out: &mut Vec<Range<usize>>) {
    let src = &text[range.clone()];
    let base = range.start;
    let mut stack: Vec<Frame> = Vec::new();
    // Findings in the top-level node being read, kept once it is complete.
    let mut pending: Vec<Range<usize>> = Vec::new();
    let mut not_json = false;
    let spans = &mut pending;
    for next in Parser::new_from_str(src) {
        let Ok((event, span)) = next else {
            return;
        };
        let Some(bytes) = span.byte_range() else {
            return;
        };
        if bytes.end > src.len() || bytes.start > bytes.end {
            return;
        }
        let is_node = matches!(
            event,
            Event::Scalar(..)
                | Event::MappingStart(..)
                | Event::SequenceStart(..)
                | Event::Alias(..)
        );
        // The role of this node in its parent: a key, a mapping value, or a list item.
        let mut secret_value = false;
        let mut record_env_value = false;
        let mut name_value = false;
        let mut as_key = false;
        if is_node {
            match stack.last_mut() {
                Some(Frame::Map { key, .. }) => match key.take() {
                    None => as_key = true,
                    Some(KeyKind::Secret) => secret_value = true,
                    Some(KeyKind::Name) => name_value = true,
                    Some(KeyKind::Value) => record_env_value = true,
                    Some(KeyKind::Other) => {}
                },
                Some(Frame::Seq { secret, .. }) => secret_value = *secret,
                None => {}
            }
        }
        match event {
            Event::DocumentStart(..) => stack.clear(),
            Event::Scalar(value, style, ..) => {
                if json_only
                    && (style == ScalarStyle::SingleQuoted
                        || (style != ScalarStyle::DoubleQuoted && !is_json_plain(&value)))
                {
                    not_json = true;
                }
                let r = value_range(src, bytes, style);
                let abs = base + r.start..base + r.end;
                if as_key {
                    let kind = if is_secret_key(&value) {
                        KeyKind::Secret
                    } else if value == "name" {
                        KeyKind::Name
                    } else if value == "value" {
                        KeyKind::Value
                    } else {
                        KeyKind::Other
                    };
                    if let Some(Frame::Map { key, .. }) = stack.last_mut() {
                        *key = Some(kind);
                    }
                    continue;
                }
                let trivial = is_trivial_value(&value);
                if let Some(Frame::Map {
                    env_secret,
                    env_value,
                    ..
                }) = stack.last_mut()
                {
                    if name_value {
                        *env_secret = is_secret_env_name(&value);
                    }
                    if record_env_value && !trivial {
                        *env_value = Some(abs.clone());
                    }
                }
                if let Some(Frame::Seq { flag_pending, .. }) = stack.last_mut() {
                    if *flag_pending && !value.starts_with("--") {
                        secret_value = true;
                    }
                    *flag_pending = false;
                    if let Some(flag) = value.strip_prefix('-') {
                        match flag.split_once('=') {
                            None => *flag_pending = is_secret_key(flag),
                            Some((name, v)) if is_secret_key(name) && !is_trivial_value(v) => {
                                // The raw text holds the same `=` (escapes never precede it).
                                if let Some(eq) = src[r.clone()].find('=') {
                                    spans.push(base + r.start + eq + 1..base + r.end);
                                }
                            }
                            Some(_) => {}
                        }
                    }
                }
                if secret_value && !trivial && !abs.is_empty() {
                    spans.push(abs);
                }
            }
            Event::MappingStart(style, ..) => {
                not_json |= json_only && style != StructureStyle::Flow;
                mark_key_other(&mut stack, as_key);
                clear_flag(&mut stack);
                stack.push(Frame::Map {
                    key: None,
                    env_secret: false,
                    env_value: None,
                });
            }
            Event::SequenceStart(style, ..) => {
                not_json |= json_only && style != StructureStyle::Flow;
                mark_key_other(&mut stack, as_key);
                clear_flag(&mut stack);
                stack.push(Frame::Seq {
                    secret: secret_value,
                    flag_pending: false,
                });
            }
            Event::Alias(..) => mark_key_other(&mut stack, as_key),
            Event::MappingEnd => {
                if let Some(Frame::Map {
                    env_secret: true,
                    env_value: Some(r),
                    ..
                }) = stack.pop()
                {
                    spans.push(r);
                }
            }
            Event::SequenceEnd => {
                stack.pop();
            }
            _ => {}
        }
        if stack.is_empty() {
            if not_json {
                spans.clear();
                not_json = false;
            }
            out.append(spans);
        }
    }
}

/// A complex key (mapping, list or alias as a key) makes the next node an ordinary value.
fn mark_key_other(stack: &mut [Frame], as_key: bool) {
    if as_key && let Some(Frame::Map { key, .. }) = stack.last_mut() {
        *key = Some(KeyKind::Other);
    }
}

fn clear_flag(stack: &mut [Frame]) {
    if let Some(Frame::Seq { flag_pending, .. }) = stack.last_mut() {
        *flag_pending = false;
    }
}

/// The scalar's content in the source: without its quotes; a block scalar from its
/// first content character to the end of its last line.
fn value_range(src: &str, r: Range<usize>, style: ScalarStyle) -> Range<usize> {
    let raw = &src[r.clone()];
    match style {
        ScalarStyle::SingleQuoted | ScalarStyle::DoubleQuoted
            if raw.len() >= 2 && (raw.starts_with(['"', '\'']) && raw.ends_with(['"', '\''])) =>
        {
            r.start + 1..r.end - 1
        }
        ScalarStyle::Literal | ScalarStyle::Folded => {
            let trimmed = raw.trim_end();
            r.start..r.start + trimmed.len()
        }
        _ => r,
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Format, redact_as};

    /// Found by cargo-fuzz: in a log line, `{token: X":true},...` is a YAML flow mapping
    /// whose plain value swallows quotes; redacting it revealed the next one, round after
    /// round. A log line's object counts only if it is JSON.
    #[test]
    fn a_log_lines_object_counts_only_if_it_is_json() {
        let text = "private-registry-auth: {token: PLAings\":true},\"k8s_auth_token\":\"PLANTED02compacrtMappings\":true},\"k8s_auth_token\":\"PLANTED02compact\"},\n";
        let (once, _) = redact_as(text, Format::Log);
        assert!(!once.contains("PLANTED"), "{once}");
        assert_eq!(redact_as(&once, Format::Log), (once.clone(), 0));
    }

    /// Found by cargo-fuzz: an unclosed flow mapping made the YAML parser read the
    /// following lines as one flow scalar, which became one REDACTED (lines lost), and a
    /// second redaction found more.
    #[test]
    fn an_unfinished_document_gives_no_structural_findings() {
        let text = " low: {a: b, token: PLANTED02unclosed\npassword: |\n  PLANTED03block\nargs:\n- --token-\n PLANTED04next\nenv:\n- name: \u{fffd}ASSWORD\n  value: PLANTED05e\n- name:: KEEP01\n";
        let (once, _) = redact_as(text, Format::Yaml);
        assert_eq!(once.lines().count(), text.lines().count(), "{once}");
        assert!(
            once.contains("args:\n") && once.contains("KEEP01"),
            "{once}"
        );
        assert!(
            !once.contains("PLANTED02") && !once.contains("PLANTED03"),
            "{once}"
        );
        assert_eq!(redact_as(&once, Format::Yaml), (once.clone(), 0));
    }

    #[test]
    fn a_json_object_in_a_log_line_counts_though_text_follows() {
        let (r, n) = redact_as(
            "2024-08-27T17:30:29.1Z stdout F {\"env\":[{\"name\":\"DB_PASSWORD\",\"value\":\"s3cr3t-v\"}]} trailing\n",
            Format::Log,
        );
        assert_eq!(n, 1, "{r}");
        assert!(!r.contains("s3cr3t-v"), "{r}");
    }
}
