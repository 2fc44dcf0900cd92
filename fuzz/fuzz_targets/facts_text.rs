//! Fuzz target: every node-output parser of plumb-facts (sysctl, lsmod, ss, ufw, systemctl,
//! ps, CRI/klog logs, kube-proxy health JSON, RKE2 config and manifest) and redaction must
//! never panic, and redaction must be idempotent.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    plumb_facts::run_every_parser(&text);
    let (once, _) = plumb_facts::redact::redact(&text);
    let (twice, n) = plumb_facts::redact::redact(&once);
    assert_eq!(once, twice, "redaction is not idempotent ({n} more replacements)");
});
