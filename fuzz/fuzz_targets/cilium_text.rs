//! Fuzz target: Cilium's listings (`cilium-dbg bpf lb list`, `service list`), the agent's
//! outputs (`status`, `service list -o json`, `endpoint list`), Hubble's flows (JSON
//! lines) and raw LB map entries never panic; every listing row is either read or reported.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = plumb_cilium::lb_list::parse(&text);
    let _ = plumb_cilium::service_list::parse(&text);
    let _ = plumb_cilium::agent::kube_proxy_replacement(&text);
    let _ = plumb_cilium::agent::service_list(&text);
    let _ = plumb_cilium::agent::endpoint_list(&text);
    let _ = plumb_cilium::hubble::summarize(&text);
    // The same bytes as map entries of every size the layouts know.
    let chunks: Vec<(Vec<u8>, Vec<u8>)> = data
        .chunks(24)
        .map(|c| (c.to_vec(), c.iter().rev().copied().collect()))
        .collect();
    let (maps, _) = plumb_cilium::LbMaps::decode(&chunks, &chunks, &chunks);
    let _ = maps.frontends();
});
