//! Fuzz target: the `ipvsadm -ln` and `ipset list` readers, and the IPVS service map
//! recovered from what they read, must never panic; every virtual service read keeps
//! a line inside the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plumb_ruleset::{Format, ParseOptions, parse_bytes};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let lines = text.lines().count() as u32;
    let (services, _) = plumb_ruleset::ipvs::parse_ipvsadm(text);
    for vs in &services {
        assert!(vs.location.line >= 1 && vs.location.line <= lines.max(1));
    }
    let mut rs = plumb_ruleset::Ruleset {
        ipvs: services,
        ipsets: plumb_ruleset::ipvs::parse_ipset_list(text),
        ..Default::default()
    };
    let _ = plumb_kubeproxy::recover::recover(&rs);
    // The same text as a whole input and as one command's output in a session.
    let opts = ParseOptions { format: Some(Format::Ipvsadm), ..Default::default() };
    if let Ok(parsed) = parse_bytes(data, &opts) {
        rs = parsed.ruleset;
        let _ = plumb_kubeproxy::recover::recover(&rs);
    }
    let session = format!("$ ipvsadm -ln\n{text}\n$ ipset list\n{text}\n");
    let opts = ParseOptions { format: Some(Format::Session), ..Default::default() };
    if let Ok(parsed) = parse_bytes(session.as_bytes(), &opts) {
        let _ = plumb_kubeproxy::recover::recover(&parsed.ruleset);
    }
});
