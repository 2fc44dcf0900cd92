//! Raw entries of the three LB maps -> [`Frontend`]s, each with its backends in slot
//! order and the inconsistencies found on the way ([`Problem`]).
//!
//! How Cilium's datapath reads the maps (and so how plumb does): the frontend's slot-0
//! entry gives the number of active backend slots and the rev-NAT id; slot `n` (1..=count)
//! holds a backend id; the backends map turns the id into an address. A slot pointing
//! at an id the backends map lacks is a connection that fails (`backend N not found`
//! in `cilium-dbg bpf lb list`); a frontend whose count is 0 drops or rejects every
//! connection.

use crate::layout::{
    Backend, BackendLayout, BackendState, L4Proto, LayoutError, RevNat, Scope, ServiceKey,
    ServiceValue, decode_backend_id, decode_rev_nat_id,
};
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// What a frontend is, from its flags ([`crate::layout::ServiceFlags::kind`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum FrontendKind {
    /// A Service's ClusterIP.
    ClusterIP,
    /// A NodePort on one node address, or on every address (`0.0.0.0`).
    NodePort,
    /// A Service's externalIPs.
    ExternalIPs,
    /// A LoadBalancer ingress address.
    LoadBalancer,
    /// A pod's hostPort.
    HostPort,
    /// A Local Redirect Policy.
    LocalRedirect,
}

impl FrontendKind {
    /// The name Cilium prints (`ClusterIP`, `NodePort`, ...).
    pub fn name(self) -> &'static str {
        match self {
            FrontendKind::ClusterIP => "ClusterIP",
            FrontendKind::NodePort => "NodePort",
            FrontendKind::ExternalIPs => "ExternalIPs",
            FrontendKind::LoadBalancer => "LoadBalancer",
            FrontendKind::HostPort => "HostPort",
            FrontendKind::LocalRedirect => "LocalRedirect",
        }
    }

    /// The kind Cilium names `name`.
    pub fn from_name(name: &str) -> Option<FrontendKind> {
        [
            FrontendKind::ClusterIP,
            FrontendKind::NodePort,
            FrontendKind::ExternalIPs,
            FrontendKind::LoadBalancer,
            FrontendKind::HostPort,
            FrontendKind::LocalRedirect,
        ]
        .into_iter()
        .find(|k| k.name() == name)
    }
}

/// One backend slot of a frontend.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BackendRef {
    /// The slot (1..).
    pub slot: u16,
    /// The backend id the slot holds (None when read from a listing, which does not
    /// print it).
    pub id: Option<u32>,
    /// The endpoint address.
    pub address: IpAddr,
    /// The endpoint port.
    pub port: u16,
    /// The endpoint protocol.
    pub proto: L4Proto,
    /// Whether it takes new connections.
    pub state: BackendState,
}

/// Something in the maps that a healthy agent does not leave, or that breaks traffic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Problem {
    /// The frontend has no backend slot: every connection to it fails.
    NoBackends,
    /// A slot holds a backend id that the backends map lacks.
    BackendNotFound {
        /// The slot.
        slot: u16,
        /// The missing id.
        id: u32,
    },
    /// The frontend's entry counts a slot that is not in the services map.
    SlotMissing {
        /// The slot.
        slot: u16,
    },
    /// Backend slots exist for a frontend that has no slot-0 entry (the datapath never
    /// finds them).
    NoFrontendEntry,
    /// The frontend's rev-NAT id is not in the reverse-NAT map: replies keep the
    /// backend's address and the client drops them.
    RevNatMissing {
        /// The rev-NAT id.
        id: u16,
    },
}

impl Problem {
    /// The problem in words, for text output and evidence.
    pub fn describe(&self) -> String {
        match self {
            Problem::NoBackends => "no backend".into(),
            Problem::BackendNotFound { slot, id } => {
                format!("slot {slot} names backend {id}, which is not in the backends map")
            }
            Problem::SlotMissing { slot } => format!("slot {slot} is counted but missing"),
            Problem::NoFrontendEntry => "backend slots without a frontend entry".into(),
            Problem::RevNatMissing { id } => format!("reverse-NAT entry {id} is missing"),
        }
    }
}

/// One frontend: an address, port and protocol that Cilium load-balances, and where
/// connections to it go.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Frontend {
    /// The frontend address (`0.0.0.0` / `::`: a NodePort on every node address).
    pub address: IpAddr,
    /// The frontend port.
    pub port: u16,
    /// The frontend protocol ([`L4Proto::ANY`] before Cilium 1.17).
    pub proto: L4Proto,
    /// Which traffic this copy answers.
    pub scope: Scope,
    /// What the frontend is (None: its slot-0 entry is missing).
    pub kind: Option<FrontendKind>,
    /// Options as Cilium names them (`Local`, `non-routable`, `sessionAffinity`, ...).
    pub options: Vec<String>,
    /// The rev-NAT id (None: not known).
    pub rev_nat: Option<u16>,
    /// Backends in slot order: active first, then quarantined ones.
    pub backends: Vec<BackendRef>,
    /// What is wrong with it, if anything.
    pub problems: Vec<Problem>,
    /// The Kubernetes Service it belongs to, when the source names it (the agent's
    /// service list does; the BPF maps do not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceRef>,
}

/// A Kubernetes Service, as the agent names a frontend's.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct ServiceRef {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl Frontend {
    /// `10.43.0.1:443/TCP`, `[fd00::1]:53/UDP`, with `/i` for the internal scope: the
    /// form `cilium-dbg` prints.
    pub fn display_address(&self) -> String {
        let host = match self.address {
            IpAddr::V4(a) => a.to_string(),
            IpAddr::V6(a) => format!("[{a}]"),
        };
        let scope = if self.scope == Scope::Internal {
            "/i"
        } else {
            ""
        };
        format!("{host}:{}/{}{scope}", self.port, self.proto)
    }

    /// Backends that take new connections.
    pub fn active_backends(&self) -> impl Iterator<Item = &BackendRef> {
        self.backends
            .iter()
            .filter(|b| b.state == BackendState::Active)
    }
}

/// The raw entries of one family's LB maps (or both families'), as read.
#[derive(Clone, Debug, Default)]
pub struct LbMaps {
    /// Services map entries (key, value).
    pub services: Vec<(ServiceKey, ServiceValue)>,
    /// Backends map entries by id.
    pub backends: BTreeMap<u32, Backend>,
    /// Reverse-NAT map entries by id (empty: the map was not read, and rev-NAT ids are
    /// not checked).
    pub rev_nat: BTreeMap<u16, RevNat>,
    /// The backends map's layout, when read from a map.
    pub backend_layout: Option<BackendLayout>,
}

/// One raw map entry: (key bytes, value bytes), as a map dump gives it.
pub type RawEntry = (Vec<u8>, Vec<u8>);

/// A map entry that did not decode, with where it was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryError {
    /// Which map.
    pub map: &'static str,
    /// The entry's position in the dump (0-based).
    pub index: usize,
    /// Why.
    pub error: LayoutError,
}

impl std::fmt::Display for EntryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} entry {}: {}", self.map, self.index, self.error)
    }
}

impl LbMaps {
    /// Decodes raw (key, value) byte pairs of the services, backends and reverse-NAT
    /// maps. Entries that do not decode are returned as errors, and the rest is kept:
    /// one bad entry does not hide the map.
    pub fn decode(
        services: &[RawEntry],
        backends: &[RawEntry],
        rev_nat: &[RawEntry],
    ) -> (LbMaps, Vec<EntryError>) {
        let mut maps = LbMaps::default();
        let mut errors = Vec::new();
        let mut err = |map, index, error| errors.push(EntryError { map, index, error });
        for (i, (k, v)) in services.iter().enumerate() {
            match ServiceKey::decode(k).and_then(|k| Ok((k, ServiceValue::decode(v)?))) {
                Ok(e) => maps.services.push(e),
                Err(e) => err("services", i, e),
            }
        }
        for (i, (k, v)) in backends.iter().enumerate() {
            match decode_backend_id(k).and_then(|id| Ok((id, Backend::decode(v)?))) {
                Ok((id, (b, layout))) => {
                    maps.backend_layout = Some(layout);
                    maps.backends.insert(id, b);
                }
                Err(e) => err("backends", i, e),
            }
        }
        for (i, (k, v)) in rev_nat.iter().enumerate() {
            match decode_rev_nat_id(k).and_then(|id| Ok((id, RevNat::decode(v)?))) {
                Ok((id, r)) => {
                    maps.rev_nat.insert(id, r);
                }
                Err(e) => err("reverse-NAT", i, e),
            }
        }
        (maps, errors)
    }

    /// Every frontend, sorted by address, port, protocol and scope, with its backends
    /// and problems.
    pub fn frontends(&self) -> Vec<Frontend> {
        type Id = (IpAddr, u16, L4Proto, Scope);
        let mut slots: BTreeMap<Id, BTreeMap<u16, &ServiceValue>> = BTreeMap::new();
        for (k, v) in &self.services {
            slots
                .entry((k.address, k.port, k.proto, k.scope))
                .or_default()
                .insert(k.slot, v);
        }
        slots
            .into_iter()
            .map(|((address, port, proto, scope), by_slot)| {
                let master = by_slot.get(&0).copied();
                let mut problems = Vec::new();
                let mut backends = Vec::new();
                // Slots the datapath can pick: 1..=count, then the quarantined ones.
                let wanted = master.map_or(0, |m| m.count + m.qcount);
                for (&slot, v) in by_slot.range(1..) {
                    match self.backends.get(&v.backend_id) {
                        Some(b) => backends.push(BackendRef {
                            slot,
                            id: Some(v.backend_id),
                            address: b.address,
                            port: b.port,
                            proto: b.proto,
                            state: if master.is_some_and(|m| slot > m.count) {
                                BackendState::Quarantined
                            } else {
                                b.state
                            },
                        }),
                        None => problems.push(Problem::BackendNotFound {
                            slot,
                            id: v.backend_id,
                        }),
                    }
                }
                match master {
                    None => problems.push(Problem::NoFrontendEntry),
                    Some(m) => {
                        for slot in 1..=wanted {
                            if !by_slot.contains_key(&slot) {
                                problems.push(Problem::SlotMissing { slot });
                            }
                        }
                        if m.count == 0 {
                            problems.push(Problem::NoBackends);
                        }
                        if !self.rev_nat.is_empty() && !self.rev_nat.contains_key(&m.rev_nat) {
                            problems.push(Problem::RevNatMissing { id: m.rev_nat });
                        }
                    }
                }
                Frontend {
                    address,
                    port,
                    proto,
                    scope,
                    kind: master.map(|m| m.flags.kind()),
                    options: master
                        .map(|m| m.flags.options().into_iter().map(String::from).collect())
                        .unwrap_or_default(),
                    rev_nat: master.map(|m| m.rev_nat),
                    backends,
                    problems,
                    service: None,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::ServiceFlags;

    fn key(addr: &str, port: u16, slot: u16) -> ServiceKey {
        ServiceKey {
            address: addr.parse().unwrap(),
            port,
            slot,
            proto: L4Proto::TCP,
            scope: Scope::External,
        }
    }

    fn value(backend_id: u32, count: u16, rev_nat: u16, flags: u16) -> ServiceValue {
        ServiceValue {
            backend_id,
            count,
            rev_nat,
            flags: ServiceFlags(flags),
            qcount: 0,
        }
    }

    fn backend(addr: &str, port: u16) -> Backend {
        Backend {
            address: addr.parse().unwrap(),
            port,
            proto: L4Proto::TCP,
            state: BackendState::Active,
            cluster_id: 0,
            zone: 0,
        }
    }

    /// The raw bytes of a ClusterIP with two backends, one slot of which points at a
    /// missing backend, and a frontend without backends.
    fn raw() -> [Vec<RawEntry>; 3] {
        let routable = ServiceFlags::ROUTABLE;
        let services = [
            (key("10.43.0.10", 53, 0), value(0, 2, 3, routable)),
            (key("10.43.0.10", 53, 1), value(7, 0, 3, routable)),
            (key("10.43.0.10", 53, 2), value(9, 0, 3, routable)),
            (key("10.43.0.20", 80, 0), value(0, 0, 4, 0)),
        ];
        let backends = [(7u32, backend("10.42.0.5", 53))];
        let rev_nat = [(
            3u16,
            RevNat {
                address: "10.43.0.10".parse().unwrap(),
                port: 53,
            },
        )];
        [
            services
                .iter()
                .map(|(k, v)| (k.encode(), v.encode()))
                .collect(),
            backends
                .iter()
                .map(|(id, b)| (id.to_le_bytes().to_vec(), b.encode(BackendLayout::V3)))
                .collect(),
            rev_nat
                .iter()
                .map(|(id, r)| (id.to_be_bytes().to_vec(), r.encode()))
                .collect(),
        ]
    }

    #[test]
    fn frontends_carry_their_backends_and_problems() {
        let [s, b, r] = raw();
        let (maps, errors) = LbMaps::decode(&s, &b, &r);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(maps.backend_layout, Some(BackendLayout::V3));
        let f = maps.frontends();
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].display_address(), "10.43.0.10:53/TCP");
        assert_eq!(f[0].kind, Some(FrontendKind::ClusterIP));
        assert_eq!(f[0].backends.len(), 1);
        assert_eq!(f[0].backends[0].address.to_string(), "10.42.0.5");
        assert_eq!(
            f[0].problems,
            [Problem::BackendNotFound { slot: 2, id: 9 }],
            "slot 2 names backend 9, which the backends map lacks"
        );
        assert_eq!(f[1].display_address(), "10.43.0.20:80/TCP");
        assert_eq!(f[1].options, ["non-routable"]);
        assert_eq!(
            f[1].problems,
            [Problem::NoBackends, Problem::RevNatMissing { id: 4 }]
        );
    }

    #[test]
    fn a_bad_entry_is_reported_and_the_rest_kept() {
        let [mut s, b, r] = raw();
        s.push((vec![1, 2, 3], vec![0; 12]));
        let (maps, errors) = LbMaps::decode(&s, &b, &r);
        assert_eq!(maps.services.len(), 4);
        assert_eq!(errors.len(), 1);
        assert_eq!(
            errors[0].to_string(),
            "services entry 4: service key of 3 bytes: Cilium's layouts have 12 or 24 bytes"
        );
    }

    #[test]
    fn slots_beyond_the_count_are_quarantined_and_counted_slots_must_exist() {
        let mut master = value(0, 1, 1, ServiceFlags::ROUTABLE);
        master.qcount = 1;
        let maps = LbMaps {
            services: vec![
                (key("10.43.0.30", 80, 0), master),
                (key("10.43.0.30", 80, 2), value(1, 0, 1, 0)),
            ],
            backends: [(1, backend("10.42.0.9", 8080))].into(),
            ..LbMaps::default()
        };
        let f = maps.frontends();
        assert_eq!(f[0].backends[0].state, BackendState::Quarantined);
        assert_eq!(f[0].problems, [Problem::SlotMissing { slot: 1 }]);
        assert_eq!(f[0].active_backends().count(), 0);
    }
}
