//! Fuzz target: redaction of arbitrary text in every format never panics, is idempotent
//! (`redact(redact(x)) == redact(x)`, and the second pass counts nothing), and planted
//! secrets never survive: the input is also embedded as noise around fixed secret shapes
//! whose marker must be gone from the output.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plumb_facts::redact::{Format, redact_as};

const FORMATS: [Format; 5] = [
    Format::Yaml,
    Format::Json,
    Format::Log,
    Format::ProcessList,
    Format::Text,
];

/// A secret shape per format, holding the marker `Zq9PLANTEDx7`.
fn planted(format: Format) -> &'static str {
    match format {
        Format::Yaml => "\ntoken: Zq9PLANTEDx7\n",
        Format::Json => "\n\"password\": \"Zq9PLANTEDx7\"\n",
        Format::Log => "\n2024-08-27T17:30:29.4Z stdout F X-Auth-Token: Zq9PLANTEDx7\n",
        Format::ProcessList => "\n 12 rke2 rke2 agent --token Zq9PLANTEDx7\n",
        _ => "\nurl=postgres://u:Zq9PLANTEDx7@db/x\n",
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let format = FORMATS[selector as usize % FORMATS.len()];
    let (once, _) = redact_as(&text, format);
    let (twice, n) = redact_as(&once, format);
    assert_eq!(once, twice, "not idempotent ({n} more replacements)");
    assert_eq!(n, 0);
    // The planted secret on a line of its own, after the fuzzer's text (which must not
    // hold the marker itself: the fuzzer learns it from the comparison below).
    if text.contains("Zq9PLANTEDx7") {
        return;
    }
    let with_secret = format!("{text}{}", planted(format));
    let (out, n) = redact_as(&with_secret, format);
    assert!(n >= 1);
    assert!(!out.contains("Zq9PLANTEDx7"), "planted secret survived:\n{out}");
});
