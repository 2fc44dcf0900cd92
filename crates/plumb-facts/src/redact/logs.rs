//! The structural pass for log lines: CRI pod logs (`<time> stdout|stderr F|P <message>`)
//! and klog (`E0827 17:30:29.414588 2101747 file.go:340] "msg" key="value"`) prefixes are
//! read past, so the message is judged as a line of its own (`token: X` at its start
//! hides the rest of it), and a JSON object in the message (`{"password":"X"}`, a
//! structured logger's line, Docker's json-file line) goes through the JSON pass.

use super::keys::has_hint;
use super::{patterns, structured};
use std::ops::Range;

/// Adds the ranges of secret values in every log line of `text`.
pub(crate) fn scan(text: &str, spans: &mut Vec<Range<usize>>) {
    let mut start = 0;
    for line in text.split_inclusive('\n') {
        let end = start + line.trim_end_matches(['\n', '\r']).len();
        let msg = start + message_start(&text[start..end]);
        patterns::scan_line(text, msg..end, spans);
        // The JSON pass only hides values of secret-like keys: a line without one
        // needs no parse.
        if let Some(brace) = text[msg..end].find('{')
            && has_hint(&text.as_bytes()[msg + brace..end])
        {
            structured::scan(text, msg + brace..end, true, spans);
        }
        start += line.len();
    }
}

/// Where the message starts after a CRI prefix and a klog header, if present.
fn message_start(line: &str) -> usize {
    let mut at = 0;
    // CRI: RFC 3339 time, stream, tag.
    let mut words = line.splitn(4, ' ');
    if let (Some(time), Some(stream), Some(tag), Some(_)) =
        (words.next(), words.next(), words.next(), words.next())
        && time.len() >= 20
        && time.as_bytes()[..4].iter().all(u8::is_ascii_digit)
        && time.contains('T')
        && matches!(stream, "stdout" | "stderr")
        && matches!(tag, "F" | "P")
    {
        at = time.len() + stream.len() + tag.len() + 3;
    }
    // klog: `Lmmdd hh:mm:ss.uuuuuu threadid file:line] `.
    let rest = &line[at..];
    let rb = rest.as_bytes();
    if rb.len() > 22
        && matches!(rb[0], b'I' | b'W' | b'E' | b'F')
        && rb[1..5].iter().all(u8::is_ascii_digit)
        && rb[5] == b' '
        && let Some(close) = rest.find("] ")
        && close < 120
    {
        at += close + 2;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::message_start;

    #[test]
    fn cri_and_klog_prefixes() {
        let l = "2024-08-27T17:30:29.414588Z stderr F E0827 17:30:29.414588 2101747 file.go:340] token: x";
        assert_eq!(&l[message_start(l)..], "token: x");
        let l = "2024-08-27T17:30:29.414588Z stdout F {\"a\":1}";
        assert_eq!(&l[message_start(l)..], "{\"a\":1}");
        assert_eq!(message_start("token: x"), 0);
    }
}
