//! `plumb collect -o FILE.tar.gz`: plumb's own support bundle — the raw outputs doctor
//! reads (commands, node files, pod and agent logs, network probe results), secrets
//! redacted, with a manifest of what was collected and what could not be.
//!
//! Layout (read back by [`crate::node::BundleNode`]):
//! `plumb-manifest.json`, `commands/<name>` (names from [`NodeCommand::bundle_name`]),
//! `files/<absolute node path>`, `probes/<name>.json`.
//!
//! Every entry is redacted by its format (RKE2 config, manifests and kubeconfigs as YAML,
//! CNI configs and probe results as JSON, pod and agent logs as log lines, `ps` as argv,
//! everything else by the pattern pass alone: see [`plumb_facts::redact`]) and written
//! straight into the gzip-compressed tar archive, in Rust: nothing is staged on disk.
//! The archive is written as `FILE.partial` (created exclusively, never through a
//! symlink, mode 0600; members 0600) and moved to FILE only when complete, never
//! replacing anything ([`crate::new_file`]); a failed run leaves nothing behind.

use crate::facts::{
    AUDIT_LOG, CNI_DIR, CONFIG_FILES, DISTRIBUTION_LOGS, GatherOptions, KUBE_PROXY_MANIFEST,
    RKE2_CONFIG, agent_log_paths, kubelet_log_paths, manifest_paths, network_probes, pod_log_paths,
};
use crate::new_file::NewFile;
use crate::node::{NodeCommand, NodeSource};
use flate2::Compression;
use flate2::write::GzEncoder;
use plumb_facts::redact::{Format, redact_as};
use plumb_ruleset::{Backend, Family};
use serde::Serialize;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

/// What went into a bundle.
#[derive(Clone, Debug, Serialize)]
pub struct Manifest {
    /// The plumb version that wrote the bundle.
    pub plumb_version: String,
    /// Seconds since the Unix epoch.
    pub created: u64,
    /// What was collected (this machine, a namespace, files under a root).
    pub source: String,
    /// The files in the bundle.
    pub entries: Vec<Entry>,
    /// What could not be collected, and why.
    pub missing: Vec<Missing>,
}

impl Manifest {
    /// Secret values replaced by REDACTED in the whole bundle (entries and the reasons
    /// of what is missing, which quote commands' error output).
    pub fn redactions(&self) -> usize {
        self.entries.iter().map(|e| e.redactions).sum::<usize>()
            + self.missing.iter().map(|m| m.redactions).sum::<usize>()
    }
}

/// One file of the bundle.
#[derive(Clone, Debug, Serialize)]
pub struct Entry {
    /// Path inside the bundle.
    pub path: String,
    /// Command or node file it came from.
    pub source: String,
    /// Size of the entry as written, after redaction, in bytes.
    pub bytes: usize,
    /// Secrets replaced by REDACTED in this entry.
    pub redactions: usize,
}

/// Something that could not be collected.
#[derive(Clone, Debug, Serialize)]
pub struct Missing {
    /// The command or node path.
    pub what: String,
    /// Why, as the node answered (redacted).
    pub reason: String,
    /// Secret values replaced by REDACTED in `reason`.
    #[serde(skip_serializing_if = "is_zero")]
    pub redactions: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
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
        NodeCommand::UnitFiles,
        NodeCommand::Ps,
        NodeCommand::KubeletJournal,
    ]);
    v
}

/// Most bytes kept of each log (its newest lines): every restart's log of every
/// container is kept, so each is bounded.
pub const MAX_LOG_BYTES: usize = 4 * 1024 * 1024;

/// The last `max` bytes of `bytes`, from a line start.
fn tail(bytes: &[u8], max: usize) -> &[u8] {
    if bytes.len() <= max {
        return bytes;
    }
    let cut = &bytes[bytes.len() - max..];
    match cut.iter().position(|b| *b == b'\n') {
        Some(i) => &cut[i + 1..],
        None => cut,
    }
}

/// How a command's output is redacted.
fn command_format(cmd: &NodeCommand) -> Format {
    match cmd {
        NodeCommand::Ps => Format::ProcessList,
        _ => Format::Text,
    }
}

type Archive = tar::Builder<GzEncoder<BufWriter<File>>>;

struct Stage {
    archive: Archive,
    mtime: u64,
    manifest: Manifest,
}

impl Stage {
    fn append(&mut self, rel: &str, header: &mut tar::Header, data: &[u8]) -> Result<(), String> {
        header.set_mtime(self.mtime);
        header.set_uid(0);
        header.set_gid(0);
        self.archive
            .append_data(header, rel, data)
            .map_err(|e| format!("writing {rel} into the bundle: {e}"))
    }

    fn put(&mut self, rel: &str, source: &str, bytes: &[u8], format: Format) -> Result<(), String> {
        let (text, redactions) = redact_as(&String::from_utf8_lossy(bytes), format);
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mode(0o600);
        header.set_size(text.len() as u64);
        self.append(rel, &mut header, text.as_bytes())?;
        self.manifest.entries.push(Entry {
            path: rel.to_string(),
            source: source.to_string(),
            bytes: text.len(),
            redactions,
        });
        Ok(())
    }

    fn dir(&mut self, rel: &str) -> Result<(), String> {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Directory);
        header.set_mode(0o700);
        header.set_size(0);
        self.append(&format!("{}/", rel.trim_end_matches('/')), &mut header, &[])
    }

    fn miss(&mut self, what: &str, reason: String) {
        let (reason, redactions) = redact_as(&reason, Format::Text);
        self.manifest.missing.push(Missing {
            what: what.to_string(),
            reason,
            redactions,
        });
    }

    fn file(&mut self, node: &dyn NodeSource, path: &str) -> Result<(), String> {
        self.file_within(node, path, usize::MAX)
    }

    /// A node file, its last `max` bytes only (logs).
    fn file_within(&mut self, node: &dyn NodeSource, path: &str, max: usize) -> Result<(), String> {
        match node.file(path) {
            Ok(c) => self.put(
                &format!("files/{}", path.trim_start_matches('/')),
                &c.source,
                tail(&c.bytes, max),
                Format::of_node_file(path),
            ),
            Err(e) => {
                self.miss(path, e);
                Ok(())
            }
        }
    }
}

/// The native nf_tables tables of a netlink read as the bundle's `nft list ruleset`
/// entry, one after the other: each as decoded over netlink (the text `nft list
/// table` prints), or listed with `nft list table` where the decoder fell back.
fn native_tables(
    node: &dyn NodeSource,
    read: &crate::nft_netlink::Read,
    name: &str,
    stage: &mut Stage,
) -> Result<(), String> {
    let mut text = Vec::new();
    let mut sources = Vec::new();
    use crate::nft_netlink::TableRead;
    for t in &read.tables {
        let family = t.family.map_or("unknown", |f| f.as_str());
        if let TableRead::Listing(listing) = &t.read {
            // Decoded over netlink: the text `nft list table` prints for it.
            text.extend_from_slice(listing.as_bytes());
            sources.push(format!("table {family} {} decoded over netlink", t.name));
            continue;
        }
        if !matches!(t.read, TableRead::Native(_)) {
            continue;
        }
        match node.nft_list_table(family, &t.name) {
            Ok(c) => {
                text.extend_from_slice(&c.bytes);
                sources.push(c.source);
            }
            Err(e) => stage.miss(&format!("nft list table {family} {}", t.name), e),
        }
    }
    let source = if sources.is_empty() {
        format!("{}: no native nf_tables tables", read.source)
    } else {
        format!(
            "{} (each native nf_tables table; iptables-nft tables are in iptables-nft-save)",
            sources.join(", ")
        )
    };
    stage.put(&format!("commands/{name}"), &source, &text, Format::Text)
}

/// Collects a bundle of `node` into `out` (a new `.tar.gz`, never an existing file).
pub fn write_bundle(
    node: &dyn NodeSource,
    out: &Path,
    options: &GatherOptions,
) -> Result<Manifest, String> {
    let (new_file, file) = NewFile::create(out)?;
    let mtime = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let archive = tar::Builder::new(GzEncoder::new(BufWriter::new(file), Compression::default()));
    let mut stage = Stage {
        archive,
        mtime,
        manifest: Manifest {
            plumb_version: env!("CARGO_PKG_VERSION").to_string(),
            created: mtime,
            source: node.info().description,
            entries: Vec::new(),
            missing: Vec::new(),
        },
    };
    collect(node, options, &mut stage)?;
    let manifest_json = serde_json::to_string_pretty(&stage.manifest).map_err(|e| e.to_string())?;
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mode(0o600);
    header.set_size(manifest_json.len() as u64);
    stage.append(
        crate::node::PLUMB_MANIFEST,
        &mut header,
        manifest_json.as_bytes(),
    )?;
    let Stage {
        archive, manifest, ..
    } = stage;
    let finish = |archive: Archive| -> std::io::Result<()> {
        let mut buf = archive.into_inner()?.finish()?;
        buf.flush()?;
        let file = buf.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()
    };
    finish(archive).map_err(|e| format!("{}: could not write the bundle: {e}", out.display()))?;
    new_file.persist()?;
    Ok(manifest)
}

/// Everything doctor reads, in the order it reads it.
fn collect(
    node: &dyn NodeSource,
    options: &GatherOptions,
    stage: &mut Stage,
) -> Result<(), String> {
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
    // A node read over netlink lists its native nf_tables tables one by one: `nft list
    // ruleset` renders the iptables-nft tables too (47-56 s for 170k rules), which the
    // bundle has from iptables-nft-save, and which plumb reads from there.
    let netlink = node.nft_netlink();
    if let Some(Err(why)) = &netlink {
        stage.miss("nf_tables netlink", why.clone());
    }
    for cmd in commands() {
        let name = cmd.bundle_name();
        if cmd == NodeCommand::NftListRuleset
            && let Some(Ok(read)) = &netlink
        {
            native_tables(node, read, &name, stage)?;
            continue;
        }
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
            Ok(c) => stage.put(
                &format!("commands/{name}"),
                &c.source,
                tail(&c.bytes, MAX_LOG_BYTES),
                command_format(&cmd),
            )?,
            Err(e) => stage.miss(&name, e),
        }
    }
    stage.file(node, RKE2_CONFIG)?;
    // Every static pod manifest (kube-proxy's probes, kube-apiserver's Service CIDR).
    let manifests = manifest_paths(node);
    if !manifests.iter().any(|m| m == KUBE_PROXY_MANIFEST) {
        stage.file(node, KUBE_PROXY_MANIFEST)?;
    }
    for path in manifests
        .iter()
        .map(String::as_str)
        .chain(CONFIG_FILES.iter().copied())
    {
        if node.exists(path) {
            stage.file(node, path)?;
        }
    }
    match node.dir(CNI_DIR) {
        Ok(names) => {
            for n in names.iter().filter(|n| !n.ends_with("kubeconfig")) {
                stage.file(node, &format!("{CNI_DIR}/{n}"))?;
            }
            if names.is_empty() {
                // An empty directory is itself evidence (install-cni never wrote its config).
                stage.dir(&format!("files/{}", CNI_DIR.trim_start_matches('/')))?;
            }
        }
        Err(e) => stage.miss(CNI_DIR, e),
    }
    for p in pod_log_paths(node, options)
        .into_iter()
        .chain(kubelet_log_paths(node))
        .chain(DISTRIBUTION_LOGS.iter().map(|(p, _)| p.to_string()))
    {
        stage.file_within(node, &p, MAX_LOG_BYTES)?;
    }
    // Only the audit log's netfilter records: the rest is not the dataplane's business.
    if let Ok(c) = node.file(AUDIT_LOG) {
        let kept: String = String::from_utf8_lossy(&c.bytes)
            .lines()
            .filter(|l| l.contains("type=NETFILTER_CFG") || l.contains("type=1325 "))
            .flat_map(|l| [l, "\n"])
            .collect();
        stage.put(
            &format!("files/{}", AUDIT_LOG.trim_start_matches('/')),
            &c.source,
            tail(kept.as_bytes(), MAX_LOG_BYTES),
            Format::Text,
        )?;
    }
    for (_, p) in agent_log_paths(node) {
        stage.file(node, &p)?;
    }
    if node.is_live() {
        for (name, json) in network_probes(node, options, None, None, None).to_json() {
            stage.put(
                &format!("probes/{name}.json"),
                name,
                json.as_bytes(),
                Format::Json,
            )?;
        }
    }
    Ok(())
}
