//! The kube-proxy-free node's socket load balancer, for the lab: cgroup connect4 and
//! sendmsg4 programs (`bpf/sock_lb.bpf.c`) that translate a Service address to a
//! backend when a socket connects, reading Cilium's LB maps in Cilium's own layouts.
//! With it, a process in the lab's cgroup reaches a ClusterIP with no KUBE-* rule at
//! all, as on a node where Cilium replaced kube-proxy, and `plumb cilium` reads the
//! very maps that steer the traffic.
//!
//! The maps are pinned by name in a `tc/globals` directory the caller gives (on a bpffs
//! it mounted), so they outlive the loader. The programs are attached through BPF links
//! to a cgroup the caller created for its own processes — never the root cgroup, so no
//! host process sees the lab's Services — and detach when the [`SocketLb`] is dropped
//! or its process dies.

use crate::error::LabError;
use plumb_cilium::layout::{
    Backend, BackendLayout, BackendState, L4Proto, RevNat, Scope, ServiceFlags, ServiceKey,
    ServiceValue,
};
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

/// The names the programs' maps are pinned under (Cilium's): services, backends,
/// reverse NAT.
pub const MAPS: [&str; 3] = [
    "cilium_lb4_services_v2",
    "cilium_lb4_backends_v3",
    "cilium_lb4_reverse_nat",
];

/// The programs, by their section's function name.
pub const PROGRAMS: [&str; 2] = ["sock4_connect", "sock4_sendmsg"];

/// A Service port the lab programs: its ClusterIP, port and protocol, and its backends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LbService {
    /// The ClusterIP.
    pub address: Ipv4Addr,
    /// The service port.
    pub port: u16,
    /// TCP or UDP.
    pub proto: L4Proto,
    /// (address, port) of each endpoint.
    pub backends: Vec<(Ipv4Addr, u16)>,
}

/// The loaded programs and their maps.
pub struct SocketLb {
    #[cfg(not(plumb_no_bpf))]
    ebpf: aya::Ebpf,
    next_backend_id: u32,
    /// Reverse-NAT id of each frontend (address, port) programmed, as Cilium gives one
    /// id per Service port (shared by its protocols).
    rev_nat: Vec<(Ipv4Addr, u16)>,
}

impl std::fmt::Debug for SocketLb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SocketLb")
            .field("next_backend_id", &self.next_backend_id)
            .finish_non_exhaustive()
    }
}

#[cfg(not(plumb_no_bpf))]
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/sock_lb.bpf.o"));

fn bpf_error(what: &str, e: impl std::fmt::Display) -> LabError {
    LabError::Other(format!("socket load balancer: {what}: {e}"))
}

impl SocketLb {
    /// Loads the programs, creating (or reusing) their maps pinned in `globals`.
    #[cfg(not(plumb_no_bpf))]
    pub fn load(globals: &Path) -> Result<SocketLb, LabError> {
        std::fs::create_dir_all(globals)
            .map_err(|e| bpf_error(&format!("creating {}", globals.display()), e))?;
        let paths: Vec<std::path::PathBuf> = MAPS.iter().map(|m| globals.join(m)).collect();
        let mut loader = aya::EbpfLoader::new();
        for (name, path) in MAPS.iter().zip(&paths) {
            loader.map_pin_path(name, path.as_path());
        }
        let mut ebpf = loader.load(OBJECT).map_err(|e| bpf_error("load", e))?;
        for prog in PROGRAMS {
            let p: &mut aya::programs::CgroupSockAddr = ebpf
                .program_mut(prog)
                .ok_or_else(|| bpf_error(prog, "not in the object"))?
                .try_into()
                .map_err(|e| bpf_error(prog, e))?;
            p.load().map_err(|e| bpf_error(prog, e))?;
        }
        Ok(SocketLb {
            ebpf,
            next_backend_id: 1,
            rev_nat: Vec::new(),
        })
    }

    /// Without clang at build time there is no program to load.
    #[cfg(plumb_no_bpf)]
    pub fn load(_globals: &Path) -> Result<SocketLb, LabError> {
        Err(LabError::Other(
            "socket load balancer: plumb-lab was built without clang and libbpf-dev".into(),
        ))
    }

    /// Attaches both programs to the cgroup v2 directory `cgroup` (a cgroup the lab
    /// created; never the root).
    #[cfg(not(plumb_no_bpf))]
    pub fn attach(&mut self, cgroup: &Path) -> Result<(), LabError> {
        let dir = std::fs::File::open(cgroup)
            .map_err(|e| bpf_error(&format!("opening {}", cgroup.display()), e))?;
        for prog in PROGRAMS {
            let p: &mut aya::programs::CgroupSockAddr = self
                .ebpf
                .program_mut(prog)
                .ok_or_else(|| bpf_error(prog, "not in the object"))?
                .try_into()
                .map_err(|e| bpf_error(prog, e))?;
            p.attach(&dir, aya::programs::CgroupAttachMode::Single)
                .map_err(|e| bpf_error(&format!("attaching {prog}"), e))?;
        }
        Ok(())
    }

    /// Attaches both programs to `cgroup` through BPF links pinned as
    /// `links/<program>`, so the attachment outlives this value and its process (what
    /// `plumb lab up` needs to return); removing the pins (and the cgroup) detaches them.
    #[cfg(not(plumb_no_bpf))]
    pub fn attach_pinned(&mut self, cgroup: &Path, links: &Path) -> Result<(), LabError> {
        std::fs::create_dir_all(links)
            .map_err(|e| bpf_error(&format!("creating {}", links.display()), e))?;
        let dir = std::fs::File::open(cgroup)
            .map_err(|e| bpf_error(&format!("opening {}", cgroup.display()), e))?;
        for prog in PROGRAMS {
            let p: &mut aya::programs::CgroupSockAddr = self
                .ebpf
                .program_mut(prog)
                .ok_or_else(|| bpf_error(prog, "not in the object"))?
                .try_into()
                .map_err(|e| bpf_error(prog, e))?;
            let id = p
                .attach(&dir, aya::programs::CgroupAttachMode::Single)
                .map_err(|e| bpf_error(&format!("attaching {prog}"), e))?;
            let link = p.take_link(id).map_err(|e| bpf_error(prog, e))?;
            let link = aya::programs::links::FdLink::try_from(link)
                .map_err(|e| bpf_error(&format!("{prog} (a kernel without BPF links)"), e))?;
            link.pin(links.join(prog))
                .map_err(|e| bpf_error(&format!("pinning {prog}'s link"), e))?;
        }
        Ok(())
    }

    /// Never reached: [`SocketLb::load`] fails first.
    #[cfg(plumb_no_bpf)]
    pub fn attach_pinned(&mut self, _cgroup: &Path, _links: &Path) -> Result<(), LabError> {
        Err(LabError::Other("socket load balancer not built".into()))
    }

    /// Never reached: [`SocketLb::load`] fails first.
    #[cfg(plumb_no_bpf)]
    pub fn attach(&mut self, _cgroup: &Path) -> Result<(), LabError> {
        Err(LabError::Other("socket load balancer not built".into()))
    }

    /// Writes `service` into the maps as Cilium's agent does: one slot-0 entry with the
    /// backend count, one slot per backend, one backends-map entry per backend.
    #[cfg(not(plumb_no_bpf))]
    pub fn program(&mut self, service: &LbService) -> Result<(), LabError> {
        let key = |slot: u16| -> [u8; 12] {
            to_array(
                &ServiceKey {
                    address: IpAddr::V4(service.address),
                    port: service.port,
                    slot,
                    proto: service.proto,
                    scope: Scope::External,
                }
                .encode(),
            )
        };
        let frontend = (service.address, service.port);
        let rev_nat = match self.rev_nat.iter().position(|f| *f == frontend) {
            Some(i) => i + 1,
            None => {
                self.rev_nat.push(frontend);
                self.rev_nat.len()
            }
        };
        let rev_nat = u16::try_from(rev_nat)
            .map_err(|_| bpf_error("program", "more than 65,535 frontends"))?;
        let value = |backend_id: u32, count: u16| -> [u8; 12] {
            to_array(
                &ServiceValue {
                    backend_id,
                    count,
                    rev_nat,
                    flags: ServiceFlags(ServiceFlags::ROUTABLE),
                    qcount: 0,
                }
                .encode(),
            )
        };
        let count = u16::try_from(service.backends.len())
            .map_err(|_| bpf_error("program", "more than 65,535 backends"))?;
        for (i, (addr, port)) in service.backends.iter().enumerate() {
            let id = self.next_backend_id;
            self.next_backend_id += 1;
            let backend = Backend {
                address: IpAddr::V4(*addr),
                port: *port,
                proto: service.proto,
                state: BackendState::Active,
                cluster_id: 0,
                zone: 0,
            };
            self.backends()?
                .insert(id, to_array(&backend.encode(BackendLayout::V3)), 0)
                .map_err(|e| bpf_error("backends map", e))?;
            let slot = u16::try_from(i + 1).expect("count fits");
            self.services()?
                .insert(key(slot), value(id, 0), 0)
                .map_err(|e| bpf_error("services map", e))?;
        }
        let mut rev = [0u8; 6];
        rev.copy_from_slice(
            &RevNat {
                address: IpAddr::V4(service.address),
                port: service.port,
            }
            .encode(),
        );
        self.reverse_nat()?
            .insert(rev_nat.to_be(), rev, 0)
            .map_err(|e| bpf_error("reverse NAT map", e))?;
        self.services()?
            .insert(key(0), value(0, count), 0)
            .map_err(|e| bpf_error("services map", e))
    }

    /// Removes `service`'s frontend entry: connections to it are no longer translated,
    /// as when Cilium's agent deletes a Service.
    #[cfg(not(plumb_no_bpf))]
    pub fn remove(&mut self, service: &LbService) -> Result<(), LabError> {
        let key = to_array(
            &ServiceKey {
                address: IpAddr::V4(service.address),
                port: service.port,
                slot: 0,
                proto: service.proto,
                scope: Scope::External,
            }
            .encode(),
        );
        self.services()?
            .remove(&key)
            .map_err(|e| bpf_error("services map", e))
    }

    #[cfg(not(plumb_no_bpf))]
    fn services(
        &mut self,
    ) -> Result<aya::maps::HashMap<&mut aya::maps::MapData, [u8; 12], [u8; 12]>, LabError> {
        aya::maps::HashMap::try_from(
            self.ebpf
                .map_mut(MAPS[0])
                .ok_or_else(|| bpf_error(MAPS[0], "not in the object"))?,
        )
        .map_err(|e| bpf_error(MAPS[0], e))
    }

    #[cfg(not(plumb_no_bpf))]
    fn backends(
        &mut self,
    ) -> Result<aya::maps::HashMap<&mut aya::maps::MapData, u32, [u8; 12]>, LabError> {
        aya::maps::HashMap::try_from(
            self.ebpf
                .map_mut(MAPS[1])
                .ok_or_else(|| bpf_error(MAPS[1], "not in the object"))?,
        )
        .map_err(|e| bpf_error(MAPS[1], e))
    }
}

#[cfg(not(plumb_no_bpf))]
impl SocketLb {
    /// The reverse-NAT map: key the id in network order (stored as the u16 whose
    /// memory holds those bytes), value address + port.
    fn reverse_nat(
        &mut self,
    ) -> Result<aya::maps::HashMap<&mut aya::maps::MapData, u16, [u8; 6]>, LabError> {
        aya::maps::HashMap::try_from(
            self.ebpf
                .map_mut(MAPS[2])
                .ok_or_else(|| bpf_error(MAPS[2], "not in the object"))?,
        )
        .map_err(|e| bpf_error(MAPS[2], e))
    }
}

fn to_array(b: &[u8]) -> [u8; 12] {
    let mut a = [0u8; 12];
    a.copy_from_slice(&b[..12]);
    a
}
