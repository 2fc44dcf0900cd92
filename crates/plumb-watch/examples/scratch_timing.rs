use plumb_collect::netns::Netns;
use plumb_kubeproxy::{GeneratorConfig, KubeProxyRules, ProxierOptions, generate};
use plumb_watch::impersonate::{Flavor, Impersonator};
use plumb_watch::nft_events::{NftListener, Received};
use std::time::{Duration, Instant};
fn main() {
    let cluster = generate(&GeneratorConfig {
        services: 1000,
        endpoints_per_service: 3,
        ..Default::default()
    })
    .unwrap();
    let rules = KubeProxyRules::new(&cluster, &ProxierOptions::default());
    let ns = Netns::create("plumb-scratch").unwrap();
    let a = Impersonator::new().unwrap();
    a.install("kube-proxy", Flavor::Nft).unwrap();
    let t = Duration::from_secs(60);
    a.run(
        ns.name(),
        "kube-proxy",
        "iptables-nft-restore",
        &["--noflush"],
        Some(&rules.to_bootstrap_payload()),
        t,
    )
    .unwrap();
    let base = plumb_watch::baseline::read(Some(ns.name()));
    let mut state = base.state;
    let mut l = NftListener::open(Some(ns.name()), 64 << 20).unwrap();
    let t0 = Instant::now();
    a.run(
        ns.name(),
        "kube-proxy",
        "iptables-nft-restore",
        &["--noflush"],
        Some(&rules.to_restore_payload()),
        t,
    )
    .unwrap();
    eprintln!("restore took {:?}", t0.elapsed());
    let t1 = Instant::now();
    let mut batches = Vec::new();
    while let Ok(Received::Batches(b)) = l.receive() {
        batches.extend(b);
    }
    eprintln!(
        "receive+decode {:?} batches {}",
        t1.elapsed(),
        batches.len()
    );
    let actor = plumb_watch::Actor::unknown();
    let mut fights = plumb_watch::detect::FightTracker::default();
    for b in &batches {
        let t2 = Instant::now();
        let c = state.apply(b);
        let t3 = Instant::now();
        let f = plumb_watch::detect::detect(
            &c,
            &actor,
            plumb_watch::detect::Source::Write,
            0,
            &mut fights,
        );
        let t4 = Instant::now();
        let evs: Vec<_> = f
            .into_iter()
            .map(|f| {
                plumb_watch::Event::from_finding(
                    f,
                    std::time::SystemTime::now(),
                    None,
                    &actor,
                    None,
                    None,
                )
            })
            .collect();
        let s: Vec<String> = evs
            .iter()
            .map(|e| serde_json::to_string(e).unwrap())
            .collect();
        eprintln!(
            "msgs {} apply {:?} detect {:?} events+json {:?} ({} bytes)",
            b.messages.len(),
            t3 - t2,
            t4 - t3,
            t4.elapsed(),
            s.iter().map(|x| x.len()).sum::<usize>()
        );
    }
}
