//! The structural pass for process lists (`ps -eo pid,comm,args`): each line's words
//! are argv elements, so a value runs to the next white space whatever it holds
//! (quotes, `&`, `,`), and the element after a secret flag is its value.
//!
//! Hidden: `--secret-flag=VALUE`, `-secret-flag=VALUE` (Go flags), `--secret-flag VALUE`
//! (unless VALUE is itself a `--flag`), `secret_key=VALUE` (environment-style and RKE2
//! `kube-apiserver-arg` style arguments). DSN and URL passwords are the pattern pass's.

use super::keys::{is_secret_key, is_trivial_value};
use std::ops::Range;

/// Adds the ranges of secret argument values in every line of `text`.
pub(crate) fn scan(text: &str, spans: &mut Vec<Range<usize>>) {
    let b = text.as_bytes();
    let mut i = 0;
    let mut flag_pending = false;
    while i < b.len() {
        if b[i] == b'\n' {
            flag_pending = false;
        }
        if b[i].is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !b[i].is_ascii_whitespace() {
            i += 1;
        }
        let word = &text[start..i];
        if flag_pending {
            flag_pending = false;
            if !word.starts_with("--") && !is_trivial_value(word) {
                spans.push(start..i);
                continue;
            }
        }
        let name_and_value = word.split_once('=');
        match name_and_value {
            Some((name, value)) if is_secret_key(name) && !is_trivial_value(value) => {
                spans.push(start + name.len() + 1..i);
            }
            None if word.starts_with('-') && is_secret_key(word) => flag_pending = true,
            _ => {}
        }
    }
}
