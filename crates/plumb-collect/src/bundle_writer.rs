//! `plumb collect -o FILE.tar.gz`: plumb's own support bundle — the raw outputs doctor
//! reads (commands, node files, pod and agent logs, network probe results), secrets
//! redacted, with a manifest of what was collected and what could not be.
//!
//! Layout (read back by [`crate::node::BundleNode`]):
//! `plumb-manifest.json`, `commands/<name>` (names from [`NodeCommand::bundle_name`]),
//! `files/<absolute node path>`, `probes/<name>.json`. Staged in a private temporary
//! directory, archived with the system `tar`, then renamed into place: an existing file
//! is never overwritten and a failed run leaves nothing behind.

use crate::facts::{
    CNI_DIR, GatherOptions, KUBE_PROXY_MANIFEST, RKE2_CONFIG, agent_log_paths, network_probes,
    pod_log_paths,
};
use crate::node::{Node, NodeCommand};
use crate::runner::Runner;
use crate::tempdir::TempDir;
use plumb_facts::redact::redact;
use plumb_ruleset::{Backend, Family};
use serde::Serialize;
use std::path::Path;
use std::time::Duration;

/// What went into a bundle.
#[derive(Clone, Debug, Serialize)]
pub struct Manifest {
    pub plumb_version: String,
    /// Seconds since the Unix epoch.
    pub created: u64,
    pub source: String,
    pub entries: Vec<Entry>,
    /// What could not be collected, and why.
    pub missing: Vec<Missing>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Entry {
    /// Path inside the bundle.
    pub path: String,
    /// Command or node file it came from.
    pub source: String,
    pub bytes: usize,
    /// Secrets replaced by REDACTED in this entry.
    pub redactions: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct Missing {
    pub what: String,
    pub reason: String,
}

fn commands() -> Vec<NodeCommand> {
    let mut v = Vec::new();
    for family in [Family::Ip, Family::Ip6] {
        for backend in [Backend::IptablesNft, Backend::IptablesLegacy] {
            v.push(NodeCommand::IptablesSave { family, backend });
        }
    }
    v.extend([
        NodeCommand::NftListRuleset,
        NodeCommand::IptablesVersion,
        NodeCommand::Uname,
        NodeCommand::Lsmod,
        NodeCommand::SysctlAll,
        NodeCommand::SsListening,
        NodeCommand::UfwStatus,
        NodeCommand::FirewalldState,
        NodeCommand::ListUnits,
        NodeCommand::Ps,
    ]);
    v
}

struct Stage<'a> {
    dir: &'a Path,
    manifest: Manifest,
}

impl Stage<'_> {
    fn put(&mut self, rel: &str, source: &str, bytes: &[u8]) -> Result<(), String> {
        let (text, redactions) = redact(&String::from_utf8_lossy(bytes));
        let p = self.dir.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        std::fs::write(&p, text.as_bytes()).map_err(|e| format!("{}: {e}", p.display()))?;
        self.manifest.entries.push(Entry {
            path: rel.to_string(),
            source: source.to_string(),
            bytes: text.len(),
            redactions,
        });
        Ok(())
    }

    fn miss(&mut self, what: &str, reason: String) {
        self.manifest.missing.push(Missing {
            what: what.to_string(),
            reason,
        });
    }

    fn file(&mut self, node: &dyn Node, path: &str) -> Result<(), String> {
        match node.file(path) {
            Ok(c) => self.put(
                &format!("files/{}", path.trim_start_matches('/')),
                &c.source,
                &c.bytes,
            ),
            Err(e) => {
                self.miss(path, e);
                Ok(())
            }
        }
    }
}

/// Collects a bundle of `node` into `out` (a new `.tar.gz`).
pub fn write_bundle(
    node: &dyn Node,
    out: &Path,
    options: &GatherOptions,
    runner: &dyn Runner,
) -> Result<Manifest, String> {
    if out.exists() {
        return Err(format!(
            "{}: already exists; not overwritten",
            out.display()
        ));
    }
    let staging = TempDir::create("plumb-collect")?;
    let mut stage = Stage {
        dir: staging.path(),
        manifest: Manifest {
            plumb_version: env!("CARGO_PKG_VERSION").to_string(),
            created: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            source: node.info().description,
            entries: Vec::new(),
            missing: Vec::new(),
        },
    };
    for path in ["/proc/net/ip_tables_names", "/proc/net/ip6_tables_names"] {
        stage.file(node, path)?;
    }
    let has_legacy = |f: Family| {
        let gate = if f == Family::Ip6 {
            "/proc/net/ip6_tables_names"
        } else {
            "/proc/net/ip_tables_names"
        };
        node.file(gate)
            .is_ok_and(|c| !c.bytes.iter().all(u8::is_ascii_whitespace))
    };
    for cmd in commands() {
        let name = cmd.bundle_name();
        if let NodeCommand::IptablesSave {
            family,
            backend: Backend::IptablesLegacy,
        } = cmd
            && !has_legacy(family)
        {
            // Dumping a legacy table that does not exist would create it (facts-kernel.md).
            stage.miss(&name, "no legacy tables (ip*_tables_names is empty)".into());
            continue;
        }
        match node.command(&cmd) {
            Ok(c) => stage.put(&format!("commands/{name}"), &c.source, &c.bytes)?,
            Err(e) => stage.miss(&name, e),
        }
    }
    for path in [RKE2_CONFIG, KUBE_PROXY_MANIFEST] {
        stage.file(node, path)?;
    }
    match node.dir(CNI_DIR) {
        Ok(names) => {
            for n in names.iter().filter(|n| !n.ends_with("kubeconfig")) {
                stage.file(node, &format!("{CNI_DIR}/{n}"))?;
            }
            if names.is_empty() {
                // An empty directory is itself evidence (install-cni never wrote its config).
                std::fs::create_dir_all(
                    stage
                        .dir
                        .join("files")
                        .join(CNI_DIR.trim_start_matches('/')),
                )
                .map_err(|e| e.to_string())?;
            }
        }
        Err(e) => stage.miss(CNI_DIR, e),
    }
    for p in pod_log_paths(node, options) {
        stage.file(node, &p)?;
    }
    for (_, p) in agent_log_paths(node) {
        stage.file(node, &p)?;
    }
    if node.is_live() {
        for (name, json) in network_probes(node, options, None).to_json() {
            stage.put(&format!("probes/{name}.json"), name, json.as_bytes())?;
        }
    }
    let manifest_json = serde_json::to_string_pretty(&stage.manifest).map_err(|e| e.to_string())?;
    std::fs::write(stage.dir.join(crate::node::PLUMB_MANIFEST), manifest_json)
        .map_err(|e| e.to_string())?;

    let partial = out.with_extension("partial");
    let result = runner
        .run(
            "tar",
            &[
                "-czf",
                &partial.to_string_lossy(),
                "-C",
                &stage.dir.to_string_lossy(),
                ".",
            ],
            None,
            Duration::from_secs(300),
        )
        .map_err(|e| e.to_string())
        .and_then(|o| if o.success() { Ok(()) } else { Err(o.stderr) })
        .and_then(|()| std::fs::rename(&partial, out).map_err(|e| e.to_string()));
    if let Err(e) = result {
        let _ = std::fs::remove_file(&partial);
        return Err(format!(
            "{}: could not write the bundle: {e}",
            out.display()
        ));
    }
    Ok(stage.manifest)
}
