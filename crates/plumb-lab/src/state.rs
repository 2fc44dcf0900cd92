//! The running lab's state file (`/run/plumb-lab/state.json`): what `up` made, so that
//! `status`, `down`, `exec` and other plumb commands (`doctor --lab`, `watch --lab`) can
//! find it. `down` does not trust it alone: it also scans for leftovers by name.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The lab's run directory.
pub const RUN_DIR: &str = "/run/plumb-lab";
/// Prefix of every network namespace the lab creates.
pub const NETNS_PREFIX: &str = "plumb-";
/// The node's network namespace.
pub const NODE_NETNS: &str = "plumb-node";
/// The API endpoint's network namespace.
pub const API_NETNS: &str = "plumb-api";

/// Path of the state file.
pub fn state_path() -> PathBuf {
    Path::new(RUN_DIR).join("state.json")
}

/// Default lab root (the node's file view).
pub fn default_root() -> PathBuf {
    Path::new(RUN_DIR).join("root")
}

/// What a running lab is made of. Field names are a contract (`plumb lab status --json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabState {
    /// State format version.
    pub version: u32,
    /// Scenario name.
    pub scenario: String,
    /// Lab root directory (the node's file view, RKE2 layout).
    pub root: PathBuf,
    /// Number of service ports kube-proxy programs.
    pub services: usize,
    /// Unix time `up` started.
    pub created_unix: u64,
    /// `ready` once `up` finished, `starting` before.
    pub phase: String,
    /// Network namespaces, node first.
    pub namespaces: Vec<String>,
    /// The node's IP on its link to the API endpoint.
    pub node_ip: String,
    /// The API endpoint, `IP:6443`.
    pub api_endpoint: String,
    /// The `kubernetes` Service, `10.43.0.1:443`.
    pub cluster_ip: String,
    /// Pod namespaces and their IPs.
    pub pods: BTreeMap<String, String>,
    /// Long-running actors: name -> pid.
    pub actors: BTreeMap<String, u32>,
    /// Which iptables backend kube-proxy writes (`nft` or `legacy`).
    pub backend: String,
    /// The cgroup (v2) the lab's processes run in, on kube-proxy-free scenarios: the
    /// socket load balancer is attached there and nowhere else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<PathBuf>,
}

impl LabState {
    /// Reads the state file; `Ok(None)` when no lab is recorded.
    pub fn load() -> io::Result<Option<Self>> {
        match fs::read_to_string(state_path()) {
            Ok(text) => serde_json::from_str(&text).map(Some).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: {e}", state_path().display()),
                )
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Writes the state file atomically.
    pub fn save(&self) -> io::Result<()> {
        fs::create_dir_all(RUN_DIR)?;
        let tmp = Path::new(RUN_DIR).join("state.json.tmp");
        fs::write(
            &tmp,
            serde_json::to_vec_pretty(self).map_err(io::Error::other)?,
        )?;
        fs::rename(tmp, state_path())
    }
}
