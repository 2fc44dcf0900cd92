//! Pure regression tests for netfilter semantics the kernel suite caught or relies on.

use plumb_trace::{Index, Node, Origin, Packet, Proto, StepKind, Verdict, trace};

fn run(text: &str, p: &Packet) -> plumb_trace::Trace {
    let parsed = plumb_ruleset::parse_bytes(text.as_bytes(), &Default::default()).unwrap();
    let index = Index::build(&parsed.ruleset);
    let node = Node {
        local_addrs: vec![plumb_trace::addr::Cidr::parse("192.168.122.10/24").unwrap()],
        ..Node::default()
    };
    trace(&index, p, &node)
}

/// Found by the kernel suite (random#15): a chain reached with `-g` from a base chain
/// ends in the base chain's policy; the base chain's later rules are not evaluated.
#[test]
fn goto_from_base_chain_ends_in_the_policy() {
    let text = "*nat\n:PREROUTING ACCEPT [0:0]\n:U0 - [0:0]\n-A PREROUTING -p tcp -g U0\n-A PREROUTING -j DNAT --to-destination 10.9.9.9\nCOMMIT\n*filter\n:FORWARD DROP [0:0]\n:U - [0:0]\n-A FORWARD -g U\n-A FORWARD -j ACCEPT\nCOMMIT\n";
    let mut p = Packet::new("10.43.7.7".parse().unwrap(), 80, Proto::Tcp, Origin::Pod);
    p.src = Some("10.42.0.50".parse().unwrap());
    let t = run(text, &p);
    assert_eq!(t.outcomes.len(), 1);
    let o = &t.outcomes[0];
    assert_eq!(o.dnat, None, "{o:?}");
    assert_eq!(
        o.verdict,
        Verdict::Drop,
        "FORWARD policy DROP after the goto'd chain: {}",
        o.why
    );
}

/// A jump returns to the next rule of the caller.
#[test]
fn jump_returns_to_the_caller() {
    let text = "*nat\n:OUTPUT ACCEPT [0:0]\n:U - [0:0]\n-A OUTPUT -j U\n-A OUTPUT -j DNAT --to-destination 10.9.9.9:1\n-A U -j RETURN\nCOMMIT\n*filter\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n";
    let t = run(
        text,
        &Packet::new("10.43.7.7".parse().unwrap(), 80, Proto::Tcp, Origin::Host),
    );
    assert_eq!(t.outcomes[0].dnat.as_deref(), Some("10.9.9.9:1"));
}

/// A host's packet to its own address loops back through INPUT (kube-proxy's
/// "has no endpoints" NodePort REJECT lives there).
#[test]
fn host_to_own_nodeport_loops_through_input() {
    let text = "*nat\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n*filter\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A INPUT -m conntrack --ctstate NEW -p tcp -m addrtype --dst-type LOCAL -m tcp --dport 30007 -j REJECT\nCOMMIT\n";
    let t = run(
        text,
        &Packet::new(
            "192.168.122.10".parse().unwrap(),
            30007,
            Proto::Tcp,
            Origin::Host,
        ),
    );
    assert_eq!(t.outcomes[0].verdict, Verdict::Reject);
}

/// NAT chains are not consulted for established connections.
#[test]
fn nat_only_for_new_connections() {
    let text = "*nat\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -j DNAT --to-destination 10.9.9.9:1\nCOMMIT\n*filter\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n";
    let mut p = Packet::new("10.43.7.7".parse().unwrap(), 80, Proto::Tcp, Origin::Host);
    p.ct_state = plumb_trace::CtState::Established;
    let t = run(text, &p);
    assert_eq!(t.outcomes[0].dnat, None);
    assert!(
        t.outcomes[0]
            .steps
            .iter()
            .any(|s| s.kind == StepKind::NatSkipped)
    );
}

/// An unknown source gives two labelled outcomes, not a guess.
#[test]
fn unknown_source_branches_with_conditions() {
    let text = "*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n*filter\n:FORWARD ACCEPT [0:0]\n-A FORWARD -s 10.0.0.0/8 -j DROP\nCOMMIT\n";
    let t = run(
        text,
        &Packet::new(
            "10.43.7.7".parse().unwrap(),
            80,
            Proto::Tcp,
            Origin::External,
        ),
    );
    assert_eq!(t.outcomes.len(), 2);
    assert!(t.outcomes.iter().all(|o| o.conditions.len() == 1));
    assert!((t.total_mass() - 1.0).abs() < 1e-9);
}

/// A ruleset with only the nat table does not pretend filter accepts.
#[test]
fn missing_filter_table_is_reported() {
    let parsed =
        plumb_ruleset::parse_bytes(b"*nat\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n", &Default::default())
            .unwrap();
    let index = Index::build(&parsed.ruleset);
    assert_eq!(index.missing_tables(false), vec!["ip filter".to_string()]);
    assert!(!index.missing_tables(true).is_empty());
}

/// kube-proxy nftables mode: verdict map + numgen over the corpus table.
#[test]
fn nft_kube_proxy_numgen_branches() {
    let dir = std::env::var("PLUMB_CORPUS")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/corpus").into());
    let path = format!(
        "{dir}/kube-proxy-nftables/real-nodes/k3s-like_10.42-10.43_nft-list-table-ip-kube-proxy.nft"
    );
    let Ok(text) = std::fs::read_to_string(&path) else {
        plumb_testkit::skip(&format!("corpus not found at {path}"));
        return;
    };
    let mut p = Packet::new(
        "10.43.195.72".parse().unwrap(),
        8000,
        Proto::Tcp,
        Origin::Pod,
    );
    p.src = Some("10.42.0.9".parse().unwrap());
    let t = run(&text, &p);
    assert_eq!(t.outcomes.len(), 9);
    assert!(
        t.outcomes
            .iter()
            .all(|o| o.verdict == Verdict::Accept && o.dnat.is_some())
    );
    assert!((t.total_mass() - 1.0).abs() < 1e-9);
    // No endpoints: rejected through @no-endpoint-services.
    let t = run(
        &text,
        &Packet::new(
            "10.43.21.102".parse().unwrap(),
            4317,
            Proto::Tcp,
            Origin::Host,
        ),
    );
    assert_eq!(
        t.outcomes[0].verdict,
        Verdict::Reject,
        "{}",
        t.outcomes[0].why
    );
}
