//! Fuzz target: NetworkPolicy manifests (YAML, multi-document, Lists) never panic the
//! loader, and whatever loads can be evaluated.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plumb_policy::eval::{Connection, check};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut cluster = plumb_policy::model::Cluster::default();
    let _ = plumb_policy::load::load_str(&mut cluster, text, "fuzz");
    if let (Some(a), Some(b)) = (cluster.pods.first(), cluster.pods.last()) {
        let _ = check(&cluster, &Connection { from: a, to: b, port: 80, protocol: "TCP" });
    }
});
