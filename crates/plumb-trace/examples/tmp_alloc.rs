use plumb_kubeproxy::{GeneratorConfig, KubeProxyRules, ProxierOptions, SaveOptions, generate};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
#[path = "../benches/support/workload.rs"]
mod workload;
struct Counting;
static ALLOCS: AtomicUsize = AtomicUsize::new(0);
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 { ALLOCS.fetch_add(1, Relaxed); unsafe { System.alloc(layout) } }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) { unsafe { System.dealloc(ptr, layout) } }
}
#[global_allocator]
static A: Counting = Counting;
fn main() {
    let cluster = generate(&GeneratorConfig { services: 10_000, endpoints_per_service: 3, ..GeneratorConfig::default() }).unwrap();
    let text = KubeProxyRules::new(&cluster, &ProxierOptions::default()).to_iptables_save(&SaveOptions::default());
    let rs = plumb_ruleset::parse_bytes(text.as_bytes(), &Default::default()).unwrap().ruleset;
    let index = plumb_trace::Index::build(&rs);
    let node = workload::node();
    let packets = workload::packets(&cluster);
    for p in &packets { let _ = plumb_trace::trace(&index, p, &node); }
    for (i, p) in packets.iter().enumerate().take(40) {
        let a = ALLOCS.load(Relaxed);
        let t = plumb_trace::trace(&index, p, &node);
        let b = ALLOCS.load(Relaxed);
        println!("{i} allocs {} outcomes {} conds {}", b - a, t.outcomes.len(), t.outcomes.iter().map(|o| o.conditions.len()).sum::<usize>());
    }
}
