fn main() {
    let path = std::env::args().nth(1).unwrap();
    let bytes = std::fs::read(path).unwrap();
    let p = plumb_ruleset::parse_bytes(&bytes, &Default::default()).unwrap();
    for t in &p.ruleset.tables {
        for c in &t.chains {
            println!("chain {} {:?}", c.name, c.base);
            for r in c.rules.iter().take(3) {
                if let plumb_ruleset::RuleBody::Nft(n) = &r.body {
                    for s in &n.statements {
                        println!("   {:?}", s.kind);
                    }
                }
            }
        }
        for s in &t.sets {
            println!("set {} {:?} {:?}", s.name, s.key_type, s.elements.first());
        }
    }
}
