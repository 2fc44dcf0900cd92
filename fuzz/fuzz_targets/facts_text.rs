//! Fuzz target: every node-output parser of plumb-facts (sysctl, lsmod, ss, ufw, systemctl,
//! ps, CRI/klog logs, kube-proxy health JSON, RKE2 config and manifest) and redaction must
//! never panic, and redaction must be idempotent.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plumb_facts::parse::{health, logs, lsmod, ps, rke2, ss, sysctl, systemd, ufw};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = sysctl::parse(&text);
    let _ = lsmod::parse(&text);
    let _ = ss::parse(&text);
    let _ = ufw::parse(&text);
    let _ = systemd::list_units(&text);
    let _ = ps::parse(&text);
    for l in logs::cri_lines(&text) {
        let _ = logs::signal(&l.text);
        let _ = logs::klog(&l.text);
        let _ = logs::dial_target(&l.text);
    }
    let _ = health::parse(&text);
    let _ = rke2::parse_config(&text);
    let _ = rke2::parse_probe_paths(&text);
    let (once, _) = plumb_facts::redact::redact(&text);
    let (twice, n) = plumb_facts::redact::redact(&once);
    assert_eq!(once, twice, "redaction is not idempotent ({n} more replacements)");
});
