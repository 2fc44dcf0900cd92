use plumb_trace::*;
fn main() {
    let text = plumb_testkit::conditional_jump_chains(
        std::env::args().nth(1).unwrap().parse().unwrap(),
        |_, _| "-m statistic --mode random --probability 0.5".into(),
    )
    .replace("-j DROP", "-j LOG");
    let rs = plumb_ruleset::parse_bytes(text.as_bytes(), &Default::default())
        .unwrap()
        .ruleset;
    let index = Index::build(&rs);
    let p = Packet::new(
        "10.1.1.1".parse().unwrap(),
        80,
        Proto::Tcp,
        Origin::External,
    );
    let t = trace(&index, &p, &Node::default());
    println!("inc {:?} n {}", t.incomplete, t.outcomes.len());
    for o in &t.outcomes {
        println!(
            "{:?} p={} routes={} why={} steps={}",
            o.verdict,
            o.probability,
            o.routes,
            o.why,
            o.steps.len()
        );
    }
}
