//! Cilium's service load balancer read from its pinned BPF maps, read-only: on a
//! kube-proxy-free node the Service map lives there, not in iptables.
//!
//! The maps are pinned under `<bpffs>/tc/globals/` (`/sys/fs/bpf`, or
//! `/run/cilium/bpffs` when Cilium mounted its own); BPF maps are not per network
//! namespace, so `--root DIR` looks under `DIR/sys/fs/bpf`. The backends map is the
//! newest one pinned (`_v3` from Cilium 1.13, `_v2` before); its value size tells the
//! layout, and the report says which was used.

use plumb_cilium::layout::BackendLayout;
use plumb_cilium::{Frontend, LbMaps};
use plumb_os::bpf::PinnedMap;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Where Cilium pins its global maps, below a node root.
pub const GLOBALS_DIRS: &[&str] = &["sys/fs/bpf/tc/globals", "run/cilium/bpffs/tc/globals"];

/// What reading Cilium's LB maps gave.
#[derive(Debug, Serialize)]
pub struct CiliumLb {
    /// The directory the maps were read from.
    pub globals: PathBuf,
    /// Each map read: its name and entry count.
    pub maps: Vec<(String, usize)>,
    /// The backends map's layout (None: no backends map, or it was empty).
    pub backend_layout: Option<BackendLayout>,
    /// Every frontend with its backends and problems.
    pub frontends: Vec<Frontend>,
    /// What could not be read or decoded (a map, an entry), with why.
    pub problems: Vec<String>,
}

/// Reads the LB maps below `root`. None when no Cilium services map is pinned there
/// (not a Cilium node, or Cilium without its socket/tc load balancer).
pub fn read_lb_maps(root: &Path) -> Option<CiliumLb> {
    let globals = GLOBALS_DIRS.iter().map(|d| root.join(d)).find(|d| {
        d.join("cilium_lb4_services_v2").exists() || d.join("cilium_lb6_services_v2").exists()
    })?;
    Some(read_lb_maps_in(&globals))
}

/// Reads the LB maps pinned in `globals` (a `tc/globals` directory).
pub fn read_lb_maps_in(globals: &Path) -> CiliumLb {
    let mut out = CiliumLb {
        globals: globals.to_path_buf(),
        maps: Vec::new(),
        backend_layout: None,
        frontends: Vec::new(),
        problems: Vec::new(),
    };
    for family in ["4", "6"] {
        let mut dump = |name: String| -> Vec<(Vec<u8>, Vec<u8>)> {
            let path = globals.join(&name);
            if !path.exists() {
                return Vec::new();
            }
            match PinnedMap::open(&path).and_then(|m| m.dump()) {
                Ok(d) => {
                    if d.truncated {
                        out.problems.push(format!(
                            "{name}: more than {} entries; the rest was not read",
                            plumb_os::bpf::MAX_ENTRIES
                        ));
                    }
                    out.maps.push((name, d.entries.len()));
                    d.entries
                }
                Err(e) => {
                    out.problems.push(format!("{name}: {e}"));
                    Vec::new()
                }
            }
        };
        let services = dump(format!("cilium_lb{family}_services_v2"));
        // The newest backends map pinned: a node upgraded from 1.12 may keep both.
        let v3 = format!("cilium_lb{family}_backends_v3");
        let backends = if globals.join(&v3).exists() {
            dump(v3)
        } else {
            dump(format!("cilium_lb{family}_backends_v2"))
        };
        let rev_nat = dump(format!("cilium_lb{family}_reverse_nat"));
        // Backend and rev-NAT ids are per family: each family is its own set of maps.
        let (maps, errors) = LbMaps::decode(&services, &backends, &rev_nat);
        out.problems.extend(errors.iter().map(|e| e.to_string()));
        out.backend_layout = out.backend_layout.or(maps.backend_layout);
        out.frontends.extend(maps.frontends());
    }
    out
}
