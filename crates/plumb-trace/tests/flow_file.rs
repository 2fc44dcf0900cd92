//! Property tests of the flow-file reader (`plumb trace --flows`): no header or line
//! makes it panic; a header it accepts names `dst` and no column twice; and a flow it
//! reads, written back as a line of the same columns, reads as the same packet.

use plumb_trace::batch::{Column, FlowColumns};
use plumb_trace::{Origin, Packet, Proto};
use proptest::prelude::*;

const NAMES: [&str; 7] = [
    "src",
    "dst",
    "port",
    "proto",
    "in_iface",
    "out_iface",
    "from",
];

fn template() -> Packet {
    Packet::new("192.0.2.1".parse().unwrap(), 80, Proto::Tcp, Origin::Host)
}

/// Header names: the known ones (in any case, some padded), aliases and junk.
fn header() -> impl Strategy<Value = String> {
    let name = prop_oneof![
        4 => proptest::sample::select(NAMES.to_vec()).prop_map(str::to_string),
        1 => Just(" DST ".to_string()),
        1 => Just("dport".to_string()),
        1 => Just("direction".to_string()),
        1 => Just("10.0.0.1".to_string()),
        1 => "[ -~]{0,8}",
    ];
    proptest::collection::vec(name, 0..9).prop_map(|v| v.join(","))
}

/// A value for column `name`: mostly one it takes, sometimes one of another column's,
/// sometimes junk.
fn field(name: &'static str) -> BoxedStrategy<String> {
    let good: Vec<&'static str> = match name {
        "src" => vec![
            "",
            "10.42.1.5",
            "10.42.1.5:40000",
            "fd00::5",
            "[fd00::5]:40000",
        ],
        "dst" => vec![
            "10.43.0.10",
            "10.43.0.10:53",
            " 10.43.0.1 ",
            "fd00::10",
            "[fd00::10]:443",
        ],
        "port" => vec!["", "443", "53", "0", "65535"],
        "proto" => vec!["", "tcp", "UDP", "icmp", "sctp", "47", "6"],
        "in_iface" | "out_iface" => vec!["", "eth0", " cali12345 ", "lo"],
        _ => vec!["", "pod", "Host", "external", "local", "remote"],
    };
    let other = [
        "65536",
        "[fd00::10]",
        "\"quoted\"",
        "10.0.0.1/8",
        "tcp6",
        "x:y",
    ];
    prop_oneof![
        8 => proptest::sample::select(good).prop_map(str::to_string),
        1 => proptest::sample::select(other.to_vec()).prop_map(str::to_string),
        1 => "[ -~]{0,12}",
    ]
    .boxed()
}

/// A header of `keep` known columns in the order given (`dst` always among them), and
/// a line of values for them; now and then a field too many or too few.
fn flow(
    order: Vec<&'static str>,
    keep: usize,
) -> impl Strategy<Value = (Vec<&'static str>, Vec<String>)> {
    let mut names: Vec<&'static str> = order.into_iter().take(keep).collect();
    if !names.contains(&"dst") {
        names.push("dst");
    }
    let fields: Vec<BoxedStrategy<String>> = names.iter().map(|n| field(n)).collect();
    (fields, 0..10u8).prop_map(move |(mut f, odd)| {
        match odd {
            0 => f.push("extra".into()),
            1 => {
                f.pop();
            }
            _ => {}
        }
        (names.clone(), f)
    })
}

fn line(fields: &[String]) -> String {
    fields.join(",")
}

/// `p`'s value in column `c`, as a flow file writes it (empty: the template's).
fn value(p: &Packet, c: Column, has_port: bool) -> String {
    let with_port = |ip: std::net::IpAddr, port: Option<u16>| match port {
        Some(port) => std::net::SocketAddr::new(ip, port).to_string(),
        None => ip.to_string(),
    };
    match c {
        Column::Src => p.src.map(|ip| with_port(ip, p.sport)).unwrap_or_default(),
        Column::Dst if has_port => p.dst.to_string(),
        Column::Dst => with_port(p.dst, p.dport),
        Column::Port => p.dport.map(|d| d.to_string()).unwrap_or_default(),
        Column::Proto => p.proto.name(),
        Column::InIface => p.in_iface.clone().unwrap_or_default(),
        Column::OutIface => p.out_iface.clone().unwrap_or_default(),
        Column::From => match p.origin {
            Origin::Host => "host",
            Origin::Pod => "pod",
            Origin::External => "external",
        }
        .to_string(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 5000, ..ProptestConfig::default() })]

    #[test]
    fn any_header_reads_or_is_refused(h in header()) {
        if let Ok(cols) = FlowColumns::parse_header(&h) {
            let c = cols.columns();
            prop_assert!(c.contains(&Column::Dst), "{h:?}");
            for (i, a) in c.iter().enumerate() {
                prop_assert!(!c[i + 1..].contains(a), "{h:?} names {a:?} twice");
            }
        }
    }

    #[test]
    fn a_flow_read_reads_again_the_same(
        (names, fields) in (Just(NAMES.to_vec()).prop_shuffle(), 1usize..=7)
            .prop_flat_map(|(order, keep)| flow(order, keep)),
    ) {
        let cols = FlowColumns::parse_header(&names.join(",")).unwrap();
        let t = template();
        let text = line(&fields);
        let Ok(p) = cols.parse_flow(&text, &t) else {
            return Ok(());
        };
        let has_port = cols.columns().contains(&Column::Port);
        let again: Vec<String> = cols.columns().iter().map(|&c| value(&p, c, has_port)).collect();
        let again_text = line(&again);
        let q = cols.parse_flow(&again_text, &t);
        prop_assert_eq!(q.as_ref().ok(), Some(&p), "{:?} -> {:?} -> {:?}", text, again_text, q);
    }
}
