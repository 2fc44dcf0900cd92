//! The JSON line of one drop, written by hand into a reused buffer: the same bytes
//! serde_json makes of `observe::Line` (a test compares the two on every shape of
//! drop), without its allocations, so a drop costs a few hundred nanoseconds. The
//! nested objects that come from the ruleset (Service, frontend, rule, trace) go
//! through serde_json; the rule's JSON is made once per attribution window.

use plumb_observe::attribution::RuleMatch;
use plumb_observe::drops::{DroppedPacket, WallClock};
use plumb_observe::names::{LbFrontend, ServiceName};
use plumb_observe::trace::Confirmation;
use std::io::Write;
use std::net::IpAddr;

/// What one drop line says besides the packet.
pub(super) struct DropView<'a> {
    /// The kernel's reason name, or its number when this kernel does not name it.
    pub reason: &'a str,
    /// The namespace of the source, when the source is a known endpoint.
    pub src_ns: Option<&'a str>,
    pub service: Option<&'a ServiceName>,
    pub frontend: Option<&'a LbFrontend>,
    /// The rule's JSON (see [`RuleJson`]).
    pub rule: Option<&'a [u8]>,
    pub trace: Option<&'a Confirmation>,
    pub netns: Option<&'a str>,
    /// Identical drops the line stands for (more than 1: aggregated).
    pub count: u64,
}

/// Appends `s` as a JSON string, escaped as serde_json escapes.
pub(super) fn string(buf: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    buf.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let short = match b {
            b'"' => b'"',
            b'\\' => b'\\',
            0x08 => b'b',
            0x0c => b'f',
            b'\n' => b'n',
            b'\r' => b'r',
            b'\t' => b't',
            0..=0x1f => b'u',
            _ => continue,
        };
        buf.extend_from_slice(&bytes[start..i]);
        buf.push(b'\\');
        buf.push(short);
        if short == b'u' {
            buf.extend_from_slice(&[b'0', b'0', HEX[(b >> 4) as usize], HEX[(b & 0xf) as usize]]);
        }
        start = i + 1;
    }
    buf.extend_from_slice(&bytes[start..]);
    buf.push(b'"');
}

/// Appends `n` in decimal.
pub(super) fn number(buf: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.extend_from_slice(&digits[i..]);
}

fn ip(buf: &mut Vec<u8>, a: IpAddr) {
    buf.push(b'"');
    match a {
        IpAddr::V4(v4) => {
            for (k, o) in v4.octets().iter().enumerate() {
                if k > 0 {
                    buf.push(b'.');
                }
                number(buf, u64::from(*o));
            }
        }
        // IPv6's shortest form is Display's; rarer, so not hand-written.
        IpAddr::V6(v6) => {
            let _ = write!(buf, "{v6}");
        }
    }
    buf.push(b'"');
}

/// Appends the JSON line of drop `d` (without the newline). `time` is its RFC 3339
/// time ([`TimeText`]).
pub(super) fn write(buf: &mut Vec<u8>, time: &[u8], d: &DroppedPacket, v: &DropView<'_>) {
    buf.extend_from_slice(b"{\"time\":\"");
    buf.extend_from_slice(time);
    buf.extend_from_slice(b"\",\"verdict\":\"DROPPED\",\"drop_reason\":");
    string(buf, v.reason);
    buf.extend_from_slice(b",\"drop_reason_desc\":");
    string(buf, v.reason);
    buf.extend_from_slice(b",\"drop_reason_code\":");
    number(buf, u64::from(d.reason));
    if let Some((s, t)) = d.addresses {
        buf.extend_from_slice(b",\"IP\":{\"source\":");
        ip(buf, s);
        buf.extend_from_slice(b",\"destination\":");
        ip(buf, t);
        buf.extend_from_slice(if s.is_ipv6() {
            b",\"ipVersion\":\"IPv6\"}"
        } else {
            b",\"ipVersion\":\"IPv4\"}"
        });
        buf.extend_from_slice(b",\"l4\":{");
        let key: &[u8] = match d.protocol {
            6 => b"\"TCP\":{",
            17 => b"\"UDP\":{",
            132 => b"\"SCTP\":{",
            1 => b"\"ICMPv4\":{",
            58 => b"\"ICMPv6\":{",
            _ => b"\"other\":{",
        };
        buf.extend_from_slice(key);
        match d.protocol {
            6 | 17 | 132 => {
                if let Some((sp, dp)) = d.ports {
                    buf.extend_from_slice(b"\"source_port\":");
                    number(buf, u64::from(sp));
                    buf.extend_from_slice(b",\"destination_port\":");
                    number(buf, u64::from(dp));
                }
            }
            1 | 58 => {
                if let Some((ty, code)) = d.icmp {
                    buf.extend_from_slice(b"\"type\":");
                    number(buf, u64::from(ty));
                    buf.extend_from_slice(b",\"code\":");
                    number(buf, u64::from(code));
                }
            }
            n => {
                buf.extend_from_slice(b"\"protocol\":");
                number(buf, u64::from(n));
            }
        }
        buf.extend_from_slice(b"}}");
    }
    if let Some(ns) = v.src_ns {
        buf.extend_from_slice(b",\"source\":{\"namespace\":");
        string(buf, ns);
        buf.push(b'}');
    }
    if let Some(svc) = v.service {
        buf.extend_from_slice(b",\"destination\":{\"namespace\":");
        string(buf, &svc.namespace);
        buf.extend_from_slice(b"},\"destination_service\":");
        let _ = serde_json::to_writer(&mut *buf, svc);
    }
    if let Some(fe) = v.frontend {
        buf.extend_from_slice(b",\"destination_frontend\":");
        let _ = serde_json::to_writer(&mut *buf, fe);
    }
    if let Some(r) = v.rule {
        buf.extend_from_slice(b",\"rule\":");
        buf.extend_from_slice(r);
    }
    if let Some(t) = v.trace {
        buf.extend_from_slice(b",\"trace\":");
        let _ = serde_json::to_writer(&mut *buf, t);
    }
    if d.ifindex != 0 {
        buf.extend_from_slice(b",\"interface\":{\"index\":");
        number(buf, u64::from(d.ifindex));
        buf.push(b'}');
    }
    if let Some(ns) = v.netns {
        buf.extend_from_slice(b",\"netns\":");
        string(buf, ns);
    }
    if v.count > 1 {
        buf.extend_from_slice(b",\"count\":");
        number(buf, v.count);
    }
    buf.push(b'}');
}

/// The JSON of the last rule answer written: a window's drops share one answer, so
/// it is serialized once per window, not once per drop.
#[derive(Default)]
pub(super) struct RuleJson {
    last: Option<(RuleMatch, Vec<u8>)>,
}

impl RuleJson {
    /// `rule` as JSON.
    pub(super) fn of(&mut self, rule: &RuleMatch) -> &[u8] {
        if self.last.as_ref().is_none_or(|(r, _)| r != rule) {
            let json = serde_json::to_vec(rule).unwrap_or_default();
            self.last = Some((rule.clone(), json));
        }
        self.last.as_ref().map_or(&[], |(_, j)| j.as_slice())
    }
}

/// RFC 3339 times (`plumb_watch::event::rfc3339`'s form, milliseconds) of the
/// program's CLOCK_MONOTONIC times: the date and time of day are made once per
/// second, the milliseconds per event.
pub(super) struct TimeText {
    clock: WallClock,
    /// The second of `prefix` (wall-clock seconds since the epoch).
    second: Option<u64>,
    /// `2026-12-01T23:31:46.` for `second`.
    prefix: Vec<u8>,
    text: Vec<u8>,
}

impl TimeText {
    pub(super) fn new(clock: WallClock) -> TimeText {
        TimeText {
            clock,
            second: None,
            prefix: Vec::new(),
            text: Vec::new(),
        }
    }

    /// The time of CLOCK_MONOTONIC `ns`.
    pub(super) fn of(&mut self, ns: u64) -> &[u8] {
        let wall = self.clock.wall(ns);
        let since = wall
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        if self.second != Some(since.as_secs()) {
            let full = plumb_watch::event::rfc3339(wall);
            // `...:SS.mmmZ`: the prefix ends with the dot.
            self.prefix.clear();
            self.prefix
                .extend_from_slice(&full.as_bytes()[..full.len() - 4]);
            self.second = Some(since.as_secs());
        }
        let ms = since.subsec_millis();
        self.text.clear();
        self.text.extend_from_slice(&self.prefix);
        self.text.extend_from_slice(&[
            b'0' + (ms / 100) as u8,
            b'0' + (ms / 10 % 10) as u8,
            b'0' + (ms % 10) as u8,
            b'Z',
        ]);
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::super::line::{Endpoint, Interface, Ip, Line, l4_of};
    use super::*;
    use plumb_observe::attribution::DropRule;
    use plumb_observe::trace::TraceDrop;

    fn packet(addresses: Option<(&str, &str)>, protocol: u8, ifindex: u32) -> DroppedPacket {
        DroppedPacket {
            monotonic_ns: 1,
            location: 2,
            netns_inode: 3,
            reason: 77,
            ifindex,
            addresses: addresses.map(|(s, d)| (s.parse().unwrap(), d.parse().unwrap())),
            protocol,
            ports: matches!(protocol, 6 | 17 | 132).then_some((40000, 53)),
            icmp: matches!(protocol, 1 | 58).then_some((3, 1)),
        }
    }

    /// The line serde_json makes of `Line`, the reference.
    fn reference(
        time: &str,
        d: &DroppedPacket,
        v: &DropView<'_>,
        rule: Option<&RuleMatch>,
    ) -> String {
        let line = Line {
            time: time.to_string(),
            verdict: "DROPPED",
            drop_reason: Some(v.reason),
            drop_reason_desc: Some(v.reason),
            drop_reason_code: Some(d.reason),
            conntrack: None,
            ip: d.addresses.map(|(s, t)| Ip {
                source: s,
                destination: t,
                ip_version: if s.is_ipv6() { "IPv6" } else { "IPv4" },
            }),
            l4: d.addresses.map(|_| l4_of(d.protocol, d.ports, d.icmp)),
            source: v.src_ns.map(|n| Endpoint {
                namespace: n.to_string(),
            }),
            destination: v.service.map(|s| Endpoint {
                namespace: s.namespace.clone(),
            }),
            destination_service: v.service.cloned(),
            destination_frontend: v.frontend.cloned(),
            translated_destination: None,
            traffic: None,
            rule,
            trace: v.trace.cloned(),
            interface: (d.ifindex != 0).then_some(Interface { index: d.ifindex }),
            netns: v.netns,
            count: (v.count > 1).then_some(v.count),
        };
        serde_json::to_string(&line).unwrap()
    }

    /// Every shape of drop line (address families, each l4 kind, with and without
    /// ports, names, rule answers, trace, interface and netns, strings needing escapes)
    /// is byte for byte what serde_json makes of `Line`.
    #[test]
    fn hand_written_drop_lines_equal_serde_json() {
        let packets = [
            packet(Some(("10.42.0.9", "10.43.0.1")), 6, 3),
            packet(Some(("10.42.0.9", "255.255.255.0")), 17, 0),
            packet(Some(("0.0.0.0", "10.43.0.1")), 132, 1),
            packet(Some(("10.42.0.9", "10.43.0.1")), 1, 0),
            packet(Some(("fd00::1", "2001:db8::ffff:1")), 58, 7),
            packet(Some(("::ffff:10.0.0.1", "fe80::1")), 6, 0),
            packet(Some(("10.42.0.9", "10.43.0.1")), 47, 0),
            packet(None, 0, 2),
            DroppedPacket {
                ports: None,
                ..packet(Some(("10.1.2.3", "10.4.5.6")), 6, 0)
            },
            DroppedPacket {
                icmp: None,
                reason: u32::MAX,
                ..packet(Some(("10.1.2.3", "10.4.5.6")), 1, 0)
            },
        ];
        let rule = |text: &str, owner: &str| DropRule {
            family: "ip".into(),
            table: "filter".into(),
            chain: "FORWARD".into(),
            text: text.into(),
            owner: owner.into(),
            owner_evidence: "the chain's \"name\"".into(),
            packets: 12,
        };
        let rules = [
            None,
            Some(RuleMatch::Found {
                rule: rule("-A FORWARD -m comment --comment \"x\\y\n\" -j DROP", "ufw"),
            }),
            Some(RuleMatch::Ambiguous {
                candidates: vec![rule("a", "kube-proxy"), rule("b", "builtin")],
            }),
            Some(RuleMatch::NotFound {
                why: "more than 4096 \u{1} drops".into(),
            }),
        ];
        let service = ServiceName {
            namespace: "kube-\"system\"".into(),
            name: "kube-dns\t".into(),
        };
        let frontend = LbFrontend {
            address: "10.43.0.1:443/TCP".into(),
            kind: Some("ClusterIP"),
            service: None,
        };
        let trace = Confirmation {
            agrees: true,
            trace: Some(TraceDrop {
                family: "ip".into(),
                table: "filter".into(),
                chain: "FORWARD".into(),
                text: "policy drop".into(),
                destination: None,
                protocol: None,
                port: None,
            }),
        };
        let mut rule_json = RuleJson::default();
        let mut checked = 0;
        for d in &packets {
            for r in &rules {
                for named in [false, true] {
                    let json = r.as_ref().map(|r| rule_json.of(r).to_vec());
                    let v = DropView {
                        reason: if named {
                            "NETFILTER_DROP"
                        } else {
                            "4294967295"
                        },
                        src_ns: named.then_some("team-a\u{7f}\r\u{8}\u{c}\n\t\u{1}\u{1f}\\/"),
                        service: named.then_some(&service),
                        frontend: named.then_some(&frontend),
                        rule: json.as_deref(),
                        trace: named.then_some(&trace),
                        netns: (!named).then_some("plumb-node \"é\""),
                        count: if named { 1 } else { 1234567 },
                    };
                    let time = "2026-12-01T23:31:46.007Z";
                    let mut buf = Vec::new();
                    write(&mut buf, time.as_bytes(), d, &v);
                    assert_eq!(
                        String::from_utf8(buf).unwrap(),
                        reference(time, d, &v, r.as_ref()),
                        "{d:?}"
                    );
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, packets.len() * rules.len() * 2);
    }

    /// The cached time text equals `rfc3339` of the wall-clock time, across second,
    /// minute and day boundaries and in any order.
    #[test]
    fn time_text_equals_rfc3339() {
        let clock = WallClock::new();
        let mut t = TimeText::new(clock);
        let base = WallClock::monotonic_now_ns();
        let steps = [
            0u64,
            1,
            999_999,
            1_000_000,
            999_999_999,
            1_000_000_000,
            59_999_000_000,
            86_399_999_999_999,
            3,
            86_400_000_000_123,
        ];
        for s in steps {
            let ns = base + s;
            assert_eq!(
                String::from_utf8(t.of(ns).to_vec()).unwrap(),
                plumb_watch::event::rfc3339(clock.wall(ns)),
                "{s}"
            );
        }
    }
}
