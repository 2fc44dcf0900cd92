//! The byte layouts of Cilium's service load-balancer maps, decoded and encoded.
//!
//! | map (IPv4 / IPv6) | key | value |
//! |---|---|---|
//! | `cilium_lb4_services_v2` / `cilium_lb6_services_v2` | [`ServiceKey`], 12 / 24 bytes | [`ServiceValue`], 12 bytes |
//! | `cilium_lb4_backends_v3` / `cilium_lb6_backends_v3` (`_v2` up to 1.12) | backend id, `u32` host order | [`Backend`], 12 / 24 bytes (`_v2`: 8 / 20) |
//! | `cilium_lb4_reverse_nat` / `cilium_lb6_reverse_nat` | rev-NAT id, `u16` network order | [`RevNat`], 6 / 18 bytes, packed |
//!
//! Byte orders are Cilium's own and mixed on purpose: addresses and ports in network
//! order, backend ids, slots and counts in host order (little-endian on the hosts
//! plumb runs on), the service value's rev-NAT index in network order (the agent
//! writes it with `HostToNetwork16`). Which layout a map uses is told by its value
//! size ([`BackendLayout::from_value_size`]); fields that only some versions give a
//! meaning (the backend's cluster id and zone, the service's quarantine count) decode
//! to 0 on the versions where those bytes are padding, which Cilium zeroes.

use serde::Serialize;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why bytes do not decode as the layout asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayoutError {
    /// What was being decoded (`service key`, `backend value`, ...).
    pub what: &'static str,
    /// The byte count found.
    pub got: usize,
    /// The byte counts this layout accepts.
    pub expected: &'static [usize],
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let expected: Vec<String> = self.expected.iter().map(|n| n.to_string()).collect();
        write!(
            f,
            "{} of {} bytes: Cilium's layouts have {} bytes",
            self.what,
            self.got,
            expected.join(" or ")
        )
    }
}

impl std::error::Error for LayoutError {}

fn wrong(what: &'static str, got: usize, expected: &'static [usize]) -> LayoutError {
    LayoutError {
        what,
        got,
        expected,
    }
}

/// An IP protocol number as the maps store it; 0 means any protocol (every Cilium
/// before 1.17 writes 0 in service keys).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(into = "String")]
pub struct L4Proto(pub u8);

impl L4Proto {
    /// Any protocol (0).
    pub const ANY: L4Proto = L4Proto(0);
    /// TCP (6).
    pub const TCP: L4Proto = L4Proto(6);
    /// UDP (17).
    pub const UDP: L4Proto = L4Proto(17);
    /// SCTP (132).
    pub const SCTP: L4Proto = L4Proto(132);

    /// The protocol named as `cilium-dbg` prints it (`TCP`, `UDP`, `SCTP`, `ANY`), or
    /// its number as text.
    pub fn from_name(name: &str) -> Option<L4Proto> {
        match name {
            "ANY" | "NONE" => Some(L4Proto::ANY),
            "TCP" => Some(L4Proto::TCP),
            "UDP" => Some(L4Proto::UDP),
            "SCTP" => Some(L4Proto::SCTP),
            n => n.parse().ok().map(L4Proto),
        }
    }
}

impl fmt::Display for L4Proto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            0 => f.write_str("ANY"),
            6 => f.write_str("TCP"),
            17 => f.write_str("UDP"),
            132 => f.write_str("SCTP"),
            n => write!(f, "{n}"),
        }
    }
}

impl From<L4Proto> for String {
    fn from(p: L4Proto) -> String {
        p.to_string()
    }
}

/// Which traffic a service entry answers: Cilium writes a second, internal-scope copy
/// of a frontend when its external and internal traffic policies differ ("two scopes").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// `LB_LOOKUP_SCOPE_EXT` (0): traffic from outside the node, and all traffic of a
    /// service with one scope.
    External,
    /// `LB_LOOKUP_SCOPE_INT` (1): traffic from the node and its pods (`/i` in listings).
    Internal,
}

/// Key of the services map: one frontend (address, port, protocol, scope) and a slot:
/// slot 0 is the frontend's own ("master") entry, slots 1.. point at its backends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceKey {
    /// The frontend address (ClusterIP, node IP, `0.0.0.0` for "any node address").
    pub address: IpAddr,
    /// The frontend port.
    pub port: u16,
    /// 0 for the frontend itself, 1..=count for its active backends, then its
    /// quarantined ones.
    pub slot: u16,
    /// The frontend's protocol; [`L4Proto::ANY`] before Cilium 1.17.
    pub proto: L4Proto,
    /// Which traffic this copy answers.
    pub scope: Scope,
}

impl ServiceKey {
    /// Bytes of an IPv4 key (`struct lb4_key`).
    pub const V4_SIZE: usize = 12;
    /// Bytes of an IPv6 key (`struct lb6_key`).
    pub const V6_SIZE: usize = 24;

    /// Decodes a key; its size tells the family.
    pub fn decode(b: &[u8]) -> Result<ServiceKey, LayoutError> {
        let (address, rest) = split_address(b, Self::V4_SIZE, Self::V6_SIZE, "service key")?;
        Ok(ServiceKey {
            address,
            port: u16::from_be_bytes([rest[0], rest[1]]),
            slot: u16::from_le_bytes([rest[2], rest[3]]),
            proto: L4Proto(rest[4]),
            scope: if rest[5] == 1 {
                Scope::Internal
            } else {
                Scope::External
            },
        })
    }

    /// The key's bytes, as Cilium writes them.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = address_bytes(self.address);
        b.extend_from_slice(&self.port.to_be_bytes());
        b.extend_from_slice(&self.slot.to_le_bytes());
        b.push(self.proto.0);
        b.push(match self.scope {
            Scope::External => 0,
            Scope::Internal => 1,
        });
        b.extend_from_slice(&[0, 0]);
        b
    }
}

/// Value of the services map (`struct lb4_service` / `lb6_service`, 12 bytes for both
/// families).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServiceValue {
    /// Slot > 0: the backend id to look up in the backends map. Slot 0: the session
    /// affinity timeout (or the L7 proxy port); not a backend.
    pub backend_id: u32,
    /// Slot 0: the number of active backend slots (0: a frontend without backends).
    pub count: u16,
    /// The frontend's reverse-NAT id (key of the reverse-NAT map).
    pub rev_nat: u16,
    /// The frontend's type and options.
    pub flags: ServiceFlags,
    /// Slot 0, Cilium 1.17 and later: quarantined backend slots after the active ones
    /// (0 before: the bytes were padding).
    pub qcount: u16,
}

impl ServiceValue {
    /// Bytes of a service value.
    pub const SIZE: usize = 12;

    /// Decodes a value.
    pub fn decode(b: &[u8]) -> Result<ServiceValue, LayoutError> {
        if b.len() != Self::SIZE {
            return Err(wrong("service value", b.len(), &[Self::SIZE]));
        }
        Ok(ServiceValue {
            backend_id: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            count: u16::from_le_bytes([b[4], b[5]]),
            rev_nat: u16::from_be_bytes([b[6], b[7]]),
            flags: ServiceFlags(u16::from(b[8]) | u16::from(b[9]) << 8),
            qcount: u16::from_le_bytes([b[10], b[11]]),
        })
    }

    /// The value's bytes, as Cilium writes them.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(Self::SIZE);
        b.extend_from_slice(&self.backend_id.to_le_bytes());
        b.extend_from_slice(&self.count.to_le_bytes());
        b.extend_from_slice(&self.rev_nat.to_be_bytes());
        b.extend_from_slice(&self.flags.0.to_le_bytes());
        b.extend_from_slice(&self.qcount.to_le_bytes());
        b
    }
}

/// A service entry's flags: `flags | flags2 << 8`, as Cilium's Go code combines them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ServiceFlags(pub u16);

impl ServiceFlags {
    /// An external IP frontend.
    pub const EXTERNAL_IP: u16 = 1 << 0;
    /// A NodePort frontend.
    pub const NODEPORT: u16 = 1 << 1;
    /// externalTrafficPolicy=Local: node-local backends only.
    pub const EXT_LOCAL_SCOPE: u16 = 1 << 2;
    /// A hostPort frontend.
    pub const HOSTPORT: u16 = 1 << 3;
    /// sessionAffinity: ClientIP.
    pub const AFFINITY: u16 = 1 << 4;
    /// A LoadBalancer frontend.
    pub const LOADBALANCER: u16 = 1 << 5;
    /// Routable: clear on ClusterIP-only entries that answer only on the node.
    pub const ROUTABLE: u16 = 1 << 6;
    /// loadBalancerSourceRanges are checked.
    pub const SOURCE_RANGE: u16 = 1 << 7;
    /// A Local Redirect Policy frontend.
    pub const LOCALREDIRECT: u16 = 1 << 8;
    /// NAT46/64.
    pub const NAT_46X64: u16 = 1 << 9;
    /// Redirected to an L7 load balancer (Envoy).
    pub const L7LOADBALANCER: u16 = 1 << 10;
    /// A hostPort bound to a loopback address.
    pub const LOOPBACK: u16 = 1 << 11;
    /// internalTrafficPolicy=Local.
    pub const INT_LOCAL_SCOPE: u16 = 1 << 12;
    /// Two copies of the frontend, one per [`Scope`].
    pub const TWO_SCOPES: u16 = 1 << 13;
    /// Direct server return for this service (1.17 and later).
    pub const FWD_MODE_DSR: u16 = 1 << 15;

    fn has(self, bit: u16) -> bool {
        self.0 & bit != 0
    }

    /// The frontend type, in the order Cilium's `SVCType()` tests the bits; none set is
    /// a ClusterIP.
    pub fn kind(self) -> crate::FrontendKind {
        use crate::FrontendKind as K;
        if self.has(Self::EXTERNAL_IP) {
            K::ExternalIPs
        } else if self.has(Self::NODEPORT) {
            K::NodePort
        } else if self.has(Self::LOADBALANCER) {
            K::LoadBalancer
        } else if self.has(Self::HOSTPORT) {
            K::HostPort
        } else if self.has(Self::LOCALREDIRECT) {
            K::LocalRedirect
        } else {
            K::ClusterIP
        }
    }

    /// The options after the type, named as `cilium-dbg bpf lb list` names them.
    pub fn options(self) -> Vec<&'static str> {
        let named: [(bool, &'static str); 10] = [
            (self.has(Self::EXT_LOCAL_SCOPE), "Local"),
            (self.has(Self::INT_LOCAL_SCOPE), "InternalLocal"),
            (self.has(Self::TWO_SCOPES), "two-scopes"),
            (self.has(Self::AFFINITY), "sessionAffinity"),
            (!self.has(Self::ROUTABLE), "non-routable"),
            (self.has(Self::SOURCE_RANGE), "check source-range"),
            (self.has(Self::NAT_46X64), "46x64"),
            (self.has(Self::L7LOADBALANCER), "l7-load-balancer"),
            (self.has(Self::LOOPBACK), "loopback"),
            (self.has(Self::FWD_MODE_DSR), "dsr"),
        ];
        named
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, n)| *n)
            .collect()
    }
}

/// Which backend value layout a backends map holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendLayout {
    /// `cilium_lb{4,6}_backends_v2`, Cilium 1.11 and 1.12: address, port, proto, flags
    /// (8 / 20 bytes).
    V2,
    /// `cilium_lb{4,6}_backends_v3`, Cilium 1.13 and later: V2 plus cluster id (u8 in
    /// 1.13-1.14, u16 from 1.15) and zone (1.16 and later) (12 / 24 bytes).
    V3,
}

impl BackendLayout {
    /// The layout of a backends map whose values have `size` bytes.
    pub fn from_value_size(size: usize) -> Result<BackendLayout, LayoutError> {
        match size {
            8 | 20 => Ok(BackendLayout::V2),
            12 | 24 => Ok(BackendLayout::V3),
            n => Err(wrong("backend value", n, &[8, 12, 20, 24])),
        }
    }

    /// The map name Cilium pins this layout under, for `family` 4 or 6.
    pub fn map_name(self, ipv6: bool) -> &'static str {
        match (self, ipv6) {
            (BackendLayout::V2, false) => "cilium_lb4_backends_v2",
            (BackendLayout::V2, true) => "cilium_lb6_backends_v2",
            (BackendLayout::V3, false) => "cilium_lb4_backends_v3",
            (BackendLayout::V3, true) => "cilium_lb6_backends_v3",
        }
    }
}

/// A backend's state (`BE_STATE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendState {
    /// Serves new connections.
    Active,
    /// The endpoint is terminating: used only when no active backend is left.
    Terminating,
    /// Failed health checks: not selected.
    Quarantined,
    /// Administratively drained: not selected.
    Maintenance,
    /// A state number this version of plumb does not know.
    Unknown(u8),
}

impl BackendState {
    fn from_byte(b: u8) -> BackendState {
        match b {
            0 => BackendState::Active,
            1 => BackendState::Terminating,
            2 => BackendState::Quarantined,
            3 => BackendState::Maintenance,
            n => BackendState::Unknown(n),
        }
    }

    fn byte(self) -> u8 {
        match self {
            BackendState::Active => 0,
            BackendState::Terminating => 1,
            BackendState::Quarantined => 2,
            BackendState::Maintenance => 3,
            BackendState::Unknown(n) => n,
        }
    }
}

/// Value of the backends map: one endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backend {
    /// The endpoint's address.
    pub address: IpAddr,
    /// The endpoint's port.
    pub port: u16,
    /// The endpoint's protocol (written by the agent; may be 0 = any).
    pub proto: L4Proto,
    /// Whether it takes new connections.
    pub state: BackendState,
    /// The ClusterMesh cluster it belongs to (0: this cluster, or a V2 layout).
    pub cluster_id: u16,
    /// The topology zone index (0: none, or a layout before 1.16).
    pub zone: u8,
}

impl Backend {
    /// Decodes a backend value; its size tells family and layout.
    pub fn decode(b: &[u8]) -> Result<(Backend, BackendLayout), LayoutError> {
        let layout = BackendLayout::from_value_size(b.len())?;
        let addr_len = if matches!(b.len(), 8 | 12) { 4 } else { 16 };
        let address = ip_from(&b[..addr_len]);
        let rest = &b[addr_len..];
        let (cluster_id, zone) = match layout {
            BackendLayout::V2 => (0, 0),
            // 1.13-1.14 wrote a u8 cluster id then padding: read as a little-endian u16
            // it is the same number. Byte 10 is the zone from 1.16, padding before.
            BackendLayout::V3 => (u16::from_le_bytes([rest[4], rest[5]]), rest[6]),
        };
        Ok((
            Backend {
                address,
                port: u16::from_be_bytes([rest[0], rest[1]]),
                proto: L4Proto(rest[2]),
                state: BackendState::from_byte(rest[3]),
                cluster_id,
                zone,
            },
            layout,
        ))
    }

    /// The value's bytes in `layout`, as Cilium 1.16 and later write them.
    pub fn encode(&self, layout: BackendLayout) -> Vec<u8> {
        let mut b = address_bytes(self.address);
        b.extend_from_slice(&self.port.to_be_bytes());
        b.push(self.proto.0);
        b.push(self.state.byte());
        if layout == BackendLayout::V3 {
            b.extend_from_slice(&self.cluster_id.to_le_bytes());
            b.push(self.zone);
            b.push(0);
        }
        b
    }
}

/// Decodes a backends map key: a `u32` id in host order (a `u16` in the first map
/// version, `cilium_lb4_backends`).
pub fn decode_backend_id(b: &[u8]) -> Result<u32, LayoutError> {
    match b {
        [a, b2, c, d] => Ok(u32::from_le_bytes([*a, *b2, *c, *d])),
        [a, b2] => Ok(u32::from(u16::from_le_bytes([*a, *b2]))),
        _ => Err(wrong("backend id", b.len(), &[2, 4])),
    }
}

/// Value of the reverse-NAT map: the frontend a reply's source is rewritten back to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RevNat {
    /// The frontend address.
    pub address: IpAddr,
    /// The frontend port.
    pub port: u16,
}

impl RevNat {
    /// Decodes a value (6 bytes IPv4, 18 bytes IPv6, packed).
    pub fn decode(b: &[u8]) -> Result<RevNat, LayoutError> {
        let (address, rest) = split_address(b, 6, 18, "reverse-NAT value")?;
        Ok(RevNat {
            address,
            port: u16::from_be_bytes([rest[0], rest[1]]),
        })
    }

    /// The value's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = address_bytes(self.address);
        b.extend_from_slice(&self.port.to_be_bytes());
        b
    }
}

/// Decodes a reverse-NAT map key: a `u16` in network order.
pub fn decode_rev_nat_id(b: &[u8]) -> Result<u16, LayoutError> {
    match b {
        [a, b2] => Ok(u16::from_be_bytes([*a, *b2])),
        _ => Err(wrong("reverse-NAT id", b.len(), &[2])),
    }
}

fn split_address<'a>(
    b: &'a [u8],
    v4: usize,
    v6: usize,
    what: &'static str,
) -> Result<(IpAddr, &'a [u8]), LayoutError> {
    let expected: &'static [usize] = match (v4, v6) {
        (12, 24) => &[12, 24],
        _ => &[6, 18],
    };
    if b.len() == v4 {
        Ok((ip_from(&b[..4]), &b[4..]))
    } else if b.len() == v6 {
        Ok((ip_from(&b[..16]), &b[16..]))
    } else {
        Err(wrong(what, b.len(), expected))
    }
}

fn ip_from(b: &[u8]) -> IpAddr {
    match b.len() {
        4 => IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3])),
        _ => {
            let mut a = [0u8; 16];
            a.copy_from_slice(&b[..16]);
            IpAddr::V6(Ipv6Addr::from(a))
        }
    }
}

fn address_bytes(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_v4_key_is_address_port_big_endian_slot_little_endian() {
        let k = ServiceKey {
            address: "10.43.0.1".parse().unwrap(),
            port: 443,
            slot: 2,
            proto: L4Proto::TCP,
            scope: Scope::Internal,
        };
        assert_eq!(
            k.encode(),
            [10, 43, 0, 1, 0x01, 0xbb, 2, 0, 6, 1, 0, 0],
            "port 443 = 0x01bb in network order; slot 2 in host order"
        );
        assert_eq!(ServiceKey::decode(&k.encode()).unwrap(), k);
    }

    #[test]
    fn the_rev_nat_index_of_a_service_value_is_in_network_order() {
        let v = ServiceValue::decode(&[0, 0, 0, 0, 2, 0, 0, 14, 0x40, 0, 0, 0]).unwrap();
        assert_eq!(v.count, 2);
        assert_eq!(v.rev_nat, 14);
        assert_eq!(v.flags.kind(), crate::FrontendKind::ClusterIP);
        assert!(
            v.flags.options().is_empty(),
            "ROUTABLE set: no `non-routable`"
        );
    }

    #[test]
    fn backend_layouts_are_told_by_size_and_wrong_sizes_say_so() {
        let b = Backend {
            address: "10.42.1.7".parse().unwrap(),
            port: 8080,
            proto: L4Proto::TCP,
            state: BackendState::Terminating,
            cluster_id: 3,
            zone: 2,
        };
        let v3 = b.encode(BackendLayout::V3);
        assert_eq!(v3.len(), 12);
        assert_eq!(Backend::decode(&v3).unwrap(), (b, BackendLayout::V3));
        let v2 = b.encode(BackendLayout::V2);
        assert_eq!(v2.len(), 8);
        let (d, layout) = Backend::decode(&v2).unwrap();
        assert_eq!(layout, BackendLayout::V2);
        assert_eq!((d.cluster_id, d.zone), (0, 0), "V2 has no cluster or zone");
        let err = Backend::decode(&[0; 10]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "backend value of 10 bytes: Cilium's layouts have 8 or 12 or 20 or 24 bytes"
        );
    }

    #[test]
    fn a_1_13_cluster_id_byte_reads_the_same_as_a_1_15_u16() {
        // 1.13: cluster_id u8 @8, pad[3]; 1.15: cluster_id u16 @8, pad[2].
        let bytes = [10, 0, 0, 5, 0, 80, 6, 0, 7, 0, 0, 0];
        let (b, _) = Backend::decode(&bytes).unwrap();
        assert_eq!(b.cluster_id, 7);
        assert_eq!(b.zone, 0);
    }

    #[test]
    fn flags_name_the_type_and_options_as_cilium_does() {
        let f = ServiceFlags(ServiceFlags::NODEPORT | ServiceFlags::EXT_LOCAL_SCOPE);
        assert_eq!(f.kind(), crate::FrontendKind::NodePort);
        assert_eq!(f.options(), ["Local", "non-routable"]);
        let lb = ServiceFlags(ServiceFlags::LOADBALANCER | ServiceFlags::ROUTABLE);
        assert_eq!(lb.kind(), crate::FrontendKind::LoadBalancer);
        assert!(lb.options().is_empty());
    }

    fn ip() -> impl Strategy<Value = IpAddr> {
        prop_oneof![
            any::<[u8; 4]>().prop_map(IpAddr::from),
            any::<[u8; 16]>().prop_map(IpAddr::from),
        ]
    }

    proptest! {
        #[test]
        fn service_entries_round_trip(address in ip(), port: u16, slot: u16, proto: u8,
            internal: bool, backend_id: u32, count: u16, rev_nat: u16, flags: u16, qcount: u16) {
            let k = ServiceKey { address, port, slot, proto: L4Proto(proto),
                scope: if internal { Scope::Internal } else { Scope::External } };
            prop_assert_eq!(ServiceKey::decode(&k.encode()).unwrap(), k);
            let v = ServiceValue { backend_id, count, rev_nat, flags: ServiceFlags(flags), qcount };
            prop_assert_eq!(ServiceValue::decode(&v.encode()).unwrap(), v);
        }

        #[test]
        fn backends_round_trip_in_both_layouts(address in ip(), port: u16, proto: u8,
            state in 0u8..=3, cluster_id: u16, zone: u8) {
            let b = Backend { address, port, proto: L4Proto(proto),
                state: BackendState::from_byte(state), cluster_id, zone };
            prop_assert_eq!(Backend::decode(&b.encode(BackendLayout::V3)).unwrap(), (b, BackendLayout::V3));
            let (v2, layout) = Backend::decode(&b.encode(BackendLayout::V2)).unwrap();
            prop_assert_eq!(layout, BackendLayout::V2);
            prop_assert_eq!((v2.address, v2.port, v2.proto, v2.state), (address, port, L4Proto(proto), b.state));
            let r = RevNat { address, port };
            prop_assert_eq!(RevNat::decode(&r.encode()).unwrap(), r);
        }

        #[test]
        fn any_bytes_decode_or_fail_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = ServiceKey::decode(&bytes);
            let _ = ServiceValue::decode(&bytes);
            let _ = Backend::decode(&bytes);
            let _ = RevNat::decode(&bytes);
            let _ = decode_backend_id(&bytes);
            let _ = decode_rev_nat_id(&bytes);
        }
    }
}
