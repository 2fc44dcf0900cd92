//! Flows a trace cannot tell apart, so a batch traces each class once.
//!
//! A flow file sets the fields [`FlowKey`] holds, plus the source address; every
//! other field of every flow comes from one template packet. Two flows with equal
//! keys and the same source have equal traces (a trace is a function of its
//! packet, index and node). The source is the field that varies most (every
//! client of a Service) and that rules test least: a trace notes the tests of the
//! source it made ([`crate::trace_noting_sources`]), and a flow whose source
//! gives the same answer to each of them has the same trace too. [`TraceMemo`]
//! keeps a value (a rendered report, say) per key and per such class of sources.

use crate::packet::{Node, Origin, Packet, Proto};
use crate::simulate::SourceTests;
use plumb_ruleset::fasthash::FastMap;
use std::hash::{Hash, Hasher};
use std::net::IpAddr;

/// The fields of a flow other than its source address, when every flow starts
/// from one template packet and sets only the fields of a flow file
/// ([`crate::batch::FlowColumns::parse_flow`]).
///
/// Its hash is computed once, in [`FlowKey::of`]: a batch looks each key up
/// several times.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowKey {
    /// The hash of the fields below (first, so unequal keys differ fast).
    hash: u64,
    src_known: bool,
    sport: Option<u16>,
    dst: IpAddr,
    dport: Option<u16>,
    proto: Proto,
    origin: Origin,
    in_iface: Option<String>,
    out_iface: Option<String>,
}

impl FlowKey {
    /// The key of `p`.
    pub fn of(p: &Packet) -> FlowKey {
        let mut h = plumb_ruleset::fasthash::FxHasher::default();
        (
            p.src.is_some(),
            p.sport,
            p.dst,
            p.dport,
            p.proto,
            p.origin,
            &p.in_iface,
            &p.out_iface,
        )
            .hash(&mut h);
        FlowKey {
            hash: h.finish(),
            src_known: p.src.is_some(),
            sport: p.sport,
            dst: p.dst,
            dport: p.dport,
            proto: p.proto,
            origin: p.origin,
            in_iface: p.in_iface.clone(),
            out_iface: p.out_iface.clone(),
        }
    }
}

impl Hash for FlowKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// A value computed from one flow's trace, and the sources it stands for.
#[derive(Debug)]
struct Entry<T> {
    src: Option<IpAddr>,
    tests: SourceTests,
    value: T,
}

/// Values of traced flows, found again for flows with the same trace: the same
/// [`FlowKey`], and a source that agrees with the traced one on every test its
/// trace made ([`SourceTests::agree`]). Flows must come from one template packet
/// and one index and node.
#[derive(Debug)]
pub struct TraceMemo<T> {
    entries: FastMap<FlowKey, Vec<Entry<T>>>,
    len: usize,
}

impl<T> Default for TraceMemo<T> {
    fn default() -> Self {
        TraceMemo {
            entries: FastMap::default(),
            len: 0,
        }
    }
}

impl<T> TraceMemo<T> {
    /// The value of a flow with the same trace as `p` (whose key is `key`).
    pub fn get(&self, key: &FlowKey, p: &Packet, node: &Node) -> Option<&T> {
        let entries = self.entries.get(key)?;
        let found = match p.src {
            None => entries.first(),
            Some(src) => entries
                .iter()
                .find(|e| e.src.is_some_and(|s| e.tests.agree(s, src, node))),
        };
        found.map(|e| &e.value)
    }

    /// Keeps `value`, computed from the trace of `p` that made `tests`.
    pub fn insert(&mut self, key: FlowKey, p: &Packet, tests: SourceTests, value: T) {
        self.len += 1;
        self.entries.entry(key).or_default().push(Entry {
            src: p.src,
            tests,
            value,
        });
    }

    /// How many values are kept.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no value is kept.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets every value.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Index, TraceOptions, trace_noting_sources, trace_with};

    fn ruleset(text: &str) -> plumb_ruleset::Ruleset {
        plumb_ruleset::parse_bytes(text.as_bytes(), &Default::default())
            .unwrap()
            .ruleset
    }

    const RULES: &str = "*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n\
        -A PREROUTING -s 10.42.0.7/32 -j DNAT --to-destination 10.42.9.9:80\n\
        -A PREROUTING -m addrtype --src-type LOCAL -j DNAT --to-destination 10.42.9.8:80\n\
        -A PREROUTING -m iprange --src-range 192.168.0.10-192.168.0.20 -j DNAT --to-destination 10.42.9.7:80\n\
        COMMIT\n*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n\
        -A FORWARD ! -s 10.42.0.0/16 -j DROP\nCOMMIT\n";

    fn packet(src: &str) -> Packet {
        let mut p = Packet::new("10.43.0.1".parse().unwrap(), 80, Proto::Tcp, Origin::Pod);
        p.src = Some(src.parse().unwrap());
        p
    }

    /// Sources the memo puts together have equal traces, and the ones it keeps apart
    /// are told apart by a test the trace made.
    #[test]
    fn a_flow_is_found_again_only_with_a_source_that_agrees_on_every_test() {
        let rs = ruleset(RULES);
        let index = Index::build(&rs);
        let node = Node {
            local_addrs: vec![crate::addr::Cidr::parse("192.168.1.10/24").unwrap()],
            ..Node::default()
        };
        let options = TraceOptions::default();
        let mut memo = TraceMemo::default();
        let first = packet("10.42.1.1");
        let (t, tests) = trace_noting_sources(&index, &first, &node, &options);
        assert!(!tests.opaque(), "{tests:?}");
        let key = FlowKey::of(&first);
        memo.insert(key.clone(), &first, tests, format!("{:?}", t.outcomes));
        for (src, same) in [
            ("10.42.200.3", true),
            ("10.42.0.7", false),
            ("192.168.1.10", false),
            ("192.168.0.15", false),
            ("10.43.0.9", false),
        ] {
            let p = packet(src);
            let found = memo.get(&key, &p, &node);
            assert_eq!(found.is_some(), same, "{src}");
            let own = format!("{:?}", trace_with(&index, &p, &node, &options).outcomes);
            if let Some(v) = found {
                assert_eq!(v, &own, "{src}");
            } else {
                assert_ne!(memo.get(&key, &first, &node).unwrap(), &own, "{src}");
            }
        }
        // Another destination is another key.
        let mut p = packet("10.42.1.1");
        p.dst = "10.43.0.2".parse().unwrap();
        assert!(memo.get(&FlowKey::of(&p), &p, &node).is_none());
    }

    /// An ipset keyed on the source is a lookup of its value: only the same address
    /// is the same flow.
    #[test]
    fn a_set_of_sources_makes_the_source_exact() {
        let rs = ruleset(&RULES.replace(
            "-j DROP\nCOMMIT",
            "-j DROP\n-A FORWARD -m set --match-set clients src -j DROP\nCOMMIT",
        ));
        let index = Index::build(&rs);
        let node = Node::default();
        let mut memo = TraceMemo::default();
        let p = packet("10.42.1.1");
        let (_, tests) = trace_noting_sources(&index, &p, &node, &TraceOptions::default());
        assert!(tests.opaque(), "{tests:?}");
        memo.insert(FlowKey::of(&p), &p, tests, ());
        assert!(memo.get(&FlowKey::of(&p), &p, &node).is_some());
        let q = packet("10.42.1.2");
        assert!(memo.get(&FlowKey::of(&q), &q, &node).is_none());
    }
}
