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

/// What `plumb cilium preflight` needs to know about the running kernel. The kernel is
/// the host's whatever `root` is (a lab's root shares it); `root` only serves the
/// `/boot/config-RELEASE` fallback.
pub fn read_kernel(root: &Path) -> plumb_cilium::preflight::KernelView {
    use std::io::Read;
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|s| s.trim().to_string());
    let config = {
        let gz = Path::new("/proc/config.gz");
        let from_proc = std::fs::File::open(gz).ok().and_then(|f| {
            let mut text = String::new();
            // A kernel configuration is ~200 KiB; the bound keeps a hostile file small.
            flate2::read::GzDecoder::new(f)
                .take(8 << 20)
                .read_to_string(&mut text)
                .ok()
                .map(|_| (gz.display().to_string(), text))
        });
        let from_boot = || {
            let r = release.as_deref()?;
            let path = root.join(format!("boot/config-{r}"));
            std::fs::read_to_string(&path)
                .ok()
                .map(|t| (path.display().to_string(), t))
        };
        match from_proc.or_else(from_boot) {
            Some((source, text)) => Ok(plumb_cilium::preflight::KernelConfig {
                source,
                options: config_options(&text),
            }),
            None => Err("neither /proc/config.gz nor /boot/config-$(uname -r) is readable".into()),
        }
    };
    let mounts = std::fs::read_to_string("/proc/mounts").ok().map(|t| {
        t.lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                let (_, point, fstype) = (w.next()?, w.next()?, w.next()?);
                Some((fstype.to_string(), point.to_string()))
            })
            .collect()
    });
    plumb_cilium::preflight::KernelView {
        release,
        config,
        btf: Some(Path::new("/sys/kernel/btf/vmlinux").exists()),
        mounts,
        bpf_probes: plumb_os::bpf::probe::all(),
    }
}

/// `CONFIG_X=value` lines of a kernel configuration (comments and blanks skipped).
fn config_options(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once('=')?;
            k.starts_with("CONFIG_")
                .then(|| (k.to_string(), v.trim_matches('"').to_string()))
        })
        .collect()
}

/// Deadline of each `cilium-dbg` command: the agent answers from memory in
/// milliseconds; a hung agent must not hold doctor up.
pub const AGENT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Cilium's state on a live node: the LB maps pinned below `root`, and — when `root`
/// is this machine's (`/`) and the `cilium-dbg` CLI is on PATH — the agent's own
/// status and service list (`-o json`, each within [`AGENT_TIMEOUT`]). The maps are
/// what the datapath uses, so they give the frontends when readable; the agent's list
/// serves when they are not. Unknown when neither shows Cilium.
pub fn live_facts(
    root: &Path,
    runner: &dyn plumb_os::runner::Runner,
) -> plumb_facts::Fact<plumb_facts::CiliumFacts> {
    let mut facts = plumb_facts::CiliumFacts::default();
    let mut found = false;
    if let Some(lb) = read_lb_maps(root) {
        found = true;
        facts.lb_source = Some(lb.globals.display().to_string());
        facts.lb_mode = Some("cilium-bpf".into());
        facts.frontends = Some(lb.frontends);
        facts.problems.extend(lb.problems);
    }
    if root == Path::new("/") {
        let mut agent = |args: &[&str]| -> Option<String> {
            let out = runner.run("cilium-dbg", args, None, AGENT_TIMEOUT);
            let what = format!("cilium-dbg {}", args.join(" "));
            match out {
                Ok(o) if o.success() => Some(String::from_utf8_lossy(&o.stdout).into_owned()),
                Ok(o) => {
                    facts.problems.push(format!("{what}: {}", o.stderr.trim()));
                    None
                }
                // Not installed: not a problem, nothing to say.
                Err(plumb_os::runner::RunError::NotFound { .. }) => None,
                Err(e) => {
                    facts.problems.push(format!("{what}: {e}"));
                    None
                }
            }
        };
        let status = agent(&["status", "-o", "json"]);
        if let Some(text) = status {
            found = true;
            facts.kube_proxy_replacement = plumb_cilium::agent::kube_proxy_replacement(&text);
            facts.status_source = Some("cilium-dbg status -o json".into());
        }
        if found && let Some(text) = agent(&["endpoint", "list", "-o", "json"]) {
            facts.endpoints = Some((
                plumb_cilium::agent::endpoint_list(&text),
                "cilium-dbg endpoint list -o json".into(),
            ));
        }
        if facts.frontends.is_none()
            && let Some(text) = agent(&["service", "list", "-o", "json"])
        {
            found = true;
            let (frontends, errors) = plumb_cilium::agent::service_list(&text);
            facts.lb_source = Some("cilium-dbg service list -o json".into());
            facts.lb_mode = Some("cilium-dbg-service-list".into());
            facts.frontends = Some(frontends);
            facts.problems.extend(
                errors
                    .into_iter()
                    .map(|e| format!("cilium-dbg service list: {e}")),
            );
        }
    }
    // A cilium-dbg that is there but fails (a hung or stopped agent) says Cilium runs
    // here too; its errors are the facts' problems.
    found |= !facts.problems.is_empty();
    if !found {
        return plumb_facts::Fact::unknown(format!(
            "no Cilium here: no cilium_lb4_services_v2 under {} ({}), no cilium-dbg on PATH",
            root.display(),
            GLOBALS_DIRS.join(", ")
        ));
    }
    let source = facts
        .lb_source
        .clone()
        .or_else(|| facts.status_source.clone())
        .unwrap_or_else(|| "cilium-dbg".into());
    plumb_facts::Fact::known(facts, source)
}

/// A listing's reader: the frontends and the rows it could not read.
type ListingParser<'a> = dyn Fn(&str) -> (Vec<plumb_cilium::Frontend>, Vec<String>) + 'a;

/// Cilium's state from a sysdump's agent bugtool: `read(files)` gives the first of
/// those command outputs the archive holds, with its name. The BPF listing (`cilium-dbg
/// bpf lb list`, the maps as the datapath holds them) is preferred over the agent's
/// service list (JSON, then text); older bugtools name the commands `cilium ...`.
pub fn sysdump_facts(
    read: impl Fn(&[&str]) -> Option<(String, String)>,
) -> plumb_facts::Fact<plumb_facts::CiliumFacts> {
    let mut facts = plumb_facts::CiliumFacts::default();
    if let Some((source, text)) = read(&[
        "cilium-dbg-status---verbose.md",
        "cilium-status---verbose.md",
        "cilium-dbg-status.md",
        "cilium-status.md",
    ]) {
        facts.kube_proxy_replacement = plumb_cilium::agent::kube_proxy_replacement(&text);
        facts.status_source = Some(source);
    }
    if let Some((source, text)) = read(&["cilium-dbg-endpoint-list.md", "cilium-endpoint-list.md"])
    {
        facts.endpoints = Some((plumb_cilium::agent::endpoint_list(&text), source));
    }
    let listing = |files: &[&str], mode: &str, parse: &ListingParser<'_>| {
        read(files).map(|(source, text)| {
            let (frontends, errors) = parse(&text);
            (source, mode.to_string(), frontends, errors)
        })
    };
    let rows = |r: Vec<plumb_cilium::lb_list::RowError>| r.iter().map(|e| e.to_string()).collect();
    let found = listing(
        &["cilium-dbg-bpf-lb-list.md", "cilium-bpf-lb-list.md"],
        "cilium-bpf-lb-list",
        &|t| {
            let (f, e) = plumb_cilium::lb_list::parse(t);
            (f, rows(e))
        },
    )
    .or_else(|| {
        listing(
            &[
                "cilium-dbg-service-list--o-json.md",
                "cilium-service-list--o-json.md",
            ],
            "cilium-dbg-service-list",
            &plumb_cilium::agent::service_list,
        )
    })
    .or_else(|| {
        listing(
            &["cilium-dbg-service-list.md", "cilium-service-list.md"],
            "cilium-service-list",
            &|t| {
                let (f, e) = plumb_cilium::service_list::parse(t);
                (f, rows(e))
            },
        )
    });
    if let Some((source, mode, frontends, errors)) = found {
        facts
            .problems
            .extend(errors.into_iter().map(|e| format!("{source}: {e}")));
        facts.lb_source = Some(source);
        facts.lb_mode = Some(mode);
        facts.frontends = Some(frontends);
    }
    match facts
        .lb_source
        .clone()
        .or_else(|| facts.status_source.clone())
    {
        Some(source) => plumb_facts::Fact::known(facts, source),
        None => plumb_facts::Fact::unknown(
            "the sysdump's bugtool holds neither cilium-dbg status nor a service listing",
        ),
    }
}
