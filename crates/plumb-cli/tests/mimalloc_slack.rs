//! Under mimalloc (what one-shot commands allocate with, `src/alloc.rs`), the model's
//! and the service map's vectors are held in blocks of about their size. mimalloc
//! leaves a block in place when it shrinks to half its size or more, so
//! `shrink_to_fit` is no way to give slack back there. Its own binary: the global
//! allocator is mimalloc for the whole test process.

use plumb_kubeproxy::{GeneratorConfig, IptablesSaveOptions, KubeProxyRules, ProxierOptions};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Bytes mimalloc holds for the block of `v` (nothing for an empty vector).
fn held<T>(v: &[T]) -> usize {
    if v.is_empty() {
        return 0;
    }
    // SAFETY: a read-only query on a live block allocated by mimalloc.
    unsafe { libmimalloc_sys::mi_usable_size(v.as_ptr().cast()) }
}

/// Under mimalloc, a kube-proxy dump's chains hold their rules in blocks of about
/// their size, and so do the recovered services' endpoints: `shrink_to_fit` of a
/// block filled half or more frees nothing there, and chains grown to 4 or 8 rules
/// then held twice what they used.
#[test]
fn rules_and_endpoints_hold_no_slack_under_mimalloc() {
    let cluster = plumb_kubeproxy::generate(&GeneratorConfig {
        services: 300,
        endpoints_per_service: 5,
        ..Default::default()
    })
    .expect("valid generator config");
    let text = KubeProxyRules::new(&cluster, &ProxierOptions::default())
        .to_iptables_save(&IptablesSaveOptions::default());
    let rs = plumb_ruleset::iptables::save::parse(&text, &Default::default());
    assert_eq!(rs.error_count(), 0);
    let (mut used, mut kept) = (0, 0);
    for c in rs.tables.iter().flat_map(|t| &t.chains) {
        used += std::mem::size_of_val(&c.rules[..]);
        kept += held(&c.rules);
    }
    let ratio = kept as f64 / used as f64;
    assert!(
        ratio < 1.2,
        "rules: {kept} bytes held for {used} used ({ratio:.2}x)"
    );
    let maps = plumb_kubeproxy::recover::recover(&rs);
    let (mut used, mut kept) = (0, 0);
    for s in maps.iter().flat_map(|m| &m.services) {
        used += std::mem::size_of_val(&s.endpoints[..]);
        kept += held(&s.endpoints);
    }
    let ratio = kept as f64 / used as f64;
    assert!(
        ratio < 1.2,
        "endpoints: {kept} bytes held for {used} used ({ratio:.2}x)"
    );
}
