//! Prints `plumb trace` output (human, verbose and JSON) for many packets over
//! rulesets: to compare two versions of plumb-trace.
use plumb_trace::{Index, Node, Origin, Packet, Proto, trace};
use std::net::IpAddr;

fn dests(rs: &plumb_ruleset::Ruleset) -> Vec<(Proto, IpAddr, u16)> {
    let mut out = Vec::new();
    for t in rs.tables.iter() {
        for c in t.chains.iter().filter(|c| c.name.starts_with("KUBE-")) {
            for r in &c.rules {
                let Some(x) = r.xt() else { continue };
                let d = x
                    .generic_option("-d")
                    .and_then(|o| o.arg(0))
                    .and_then(|s| s.trim_end_matches("/32").parse::<IpAddr>().ok())
                    .unwrap_or("192.168.122.10".parse().unwrap());
                let p = x
                    .generic_option("-p")
                    .and_then(|o| o.arg(0))
                    .map(|s| s.to_string());
                let port = x.matches().find_map(|m| {
                    m.option("--dport")
                        .and_then(|o| o.arg(0))
                        .and_then(|s| s.parse::<u16>().ok())
                });
                if let (Some(p), Some(port)) = (p, port) {
                    let proto = if p == "udp" { Proto::Udp } else { Proto::Tcp };
                    out.push((proto, d, port));
                    out.push((proto, d, port.wrapping_add(1)));
                }
            }
        }
    }
    out.sort_by_key(|(p, d, n)| (p.number(), *d, *n));
    out.dedup();
    out
}

fn main() {
    let mut texts: Vec<(String, String)> = std::env::args()
        .skip(1)
        .map(|p| (p.clone(), std::fs::read_to_string(&p).unwrap()))
        .collect();
    let cluster =
        plumb_kubeproxy::generate(&plumb_kubeproxy::GeneratorConfig::all_features(60, 3)).unwrap();
    texts.push((
        "generated all_features(60,3)".into(),
        plumb_kubeproxy::KubeProxyRules::new(&cluster, &plumb_kubeproxy::ProxierOptions::default())
            .to_iptables_save(&plumb_kubeproxy::IptablesSaveOptions::default()),
    ));
    let node = Node {
        local_addrs: vec![
            plumb_trace::addr::Cidr::parse("192.168.122.10/24").unwrap(),
            plumb_trace::addr::Cidr::parse(&format!("{}/24", cluster.node.ip)).unwrap(),
        ],
        ..Node::default()
    };
    for (name, text) in &texts {
        let Ok(parsed) = plumb_ruleset::parse_bytes(text.as_bytes(), &Default::default()) else {
            continue;
        };
        let index = Index::build(&parsed.ruleset);
        let mut ds = dests(&parsed.ruleset);
        ds.truncate(400);
        println!("=== {name}: {} destinations", ds.len());
        for (proto, dst, port) in ds {
            for origin in [Origin::Host, Origin::Pod, Origin::External] {
                let mut p = Packet::new(dst, port, proto, origin);
                if origin != Origin::Host {
                    p.src = Some("10.42.0.9".parse().unwrap());
                }
                let t = trace(&index, &p, &node);
                println!("--- {proto:?} {dst}:{port} {origin:?}");
                print!("{}", plumb_trace::explain::explain(&index, &t, false));
                print!("{}", plumb_trace::explain::explain(&index, &t, true));
                println!("{}", serde_json::to_string(&t.report(&index)).unwrap());
            }
        }
    }
}
