//! `Lab`: bring a scenario up, look at it, tear it down.
//!
//! `up` records what it makes in the state file before making it, so `down` (idempotent)
//! can remove everything — processes, namespaces, mounts, the lab root — even after a crash
//! or a killed `up`; `down` also scans `/proc` and `/run/netns` for lab leftovers by name.
//! A [`Lab`] value tears the lab down when dropped (panics included) unless
//! [`Lab::detach`]ed, which is what `plumb lab up` does.

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::net::{SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::actors::{self, ActorKind, kubelet};
use crate::error::LabError;
use crate::layout::{self, paths};
use crate::plan::Plan;
use crate::probe::{self, Connect};
use crate::scenario::Scenario;
use crate::state::{API_NETNS, LabState, NODE_NETNS, RUN_DIR, default_root, state_path};
use crate::topology::{self, API_IP, API_PORT, CLUSTER_IP, NODE_IP, TopologySpec};
use crate::{cilium_node, process, tls, ufw};
use plumb_os::netns;

/// Options for [`Lab::up_with`].
#[derive(Debug, Clone, Default)]
pub struct LabOptions {
    /// Service ports kube-proxy programs (default 8); in the kube-proxy-free scenarios,
    /// the frontends programmed into Cilium's maps (default 4, at least 4).
    pub services: Option<usize>,
    /// Overrides the scenario's kube-proxy sync period.
    pub sync_period: Option<Duration>,
    /// The executable to run actors from (the plumb binary or `plumb-lab-actor`); default:
    /// `PLUMB_LAB_ACTOR_EXE`, else the current executable or a `plumb` next to it.
    pub actor_exe: Option<PathBuf>,
    /// Lab root (default `/run/plumb-lab/root`).
    pub root: Option<PathBuf>,
    /// The iptables backend kubelet, kube-proxy and the agent write (default nft).
    pub backend: Backend,
    /// kube-proxy's full syncs send its payload byte for byte on the nft backend too,
    /// without the leading `-S` that keeps iptables-nft's restore linear (docs/lab.md).
    pub exact_restore_payload: bool,
}

/// Which iptables variant the node's actors use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Backend {
    /// `iptables-nft` (Debian 12's default `iptables`).
    #[default]
    Nft,
    /// `iptables-legacy`.
    Legacy,
}

impl Backend {
    /// The iptables program name.
    pub fn program(self) -> &'static str {
        match self {
            Self::Nft => "iptables-nft",
            Self::Legacy => "iptables-legacy",
        }
    }

    /// The other backend.
    pub fn other(self) -> Self {
        match self {
            Self::Nft => Self::Legacy,
            Self::Legacy => Self::Nft,
        }
    }

    /// `nft` or `legacy`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Nft => "nft",
            Self::Legacy => "legacy",
        }
    }
}

impl std::str::FromStr for Backend {
    type Err = LabError;

    fn from_str(s: &str) -> Result<Self, LabError> {
        match s {
            "nft" => Ok(Self::Nft),
            "legacy" => Ok(Self::Legacy),
            other => Err(LabError::Other(format!(
                "unknown backend {other:?}; use nft or legacy"
            ))),
        }
    }
}

/// A running lab.
#[derive(Debug)]
pub struct Lab {
    state: LabState,
    detached: bool,
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

fn check_interrupted() -> Result<(), LabError> {
    if INTERRUPTED.load(Ordering::SeqCst) {
        Err(LabError::Other("interrupted".into()))
    } else {
        Ok(())
    }
}

fn resolve_actor_exe(explicit: Option<PathBuf>) -> Result<PathBuf, LabError> {
    if let Some(p) = explicit.or_else(|| std::env::var_os("PLUMB_LAB_ACTOR_EXE").map(PathBuf::from))
    {
        return Ok(p);
    }
    let me = std::env::current_exe().map_err(|_| LabError::NoActorExe)?;
    let name = me.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name == "plumb" || name == "plumb-lab-actor" {
        return Ok(me);
    }
    for dir in me.ancestors().skip(1).take(2) {
        for cand in ["plumb", "plumb-lab-actor"] {
            let p = dir.join(cand);
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    Err(LabError::NoActorExe)
}

/// Starts actor `kind` in namespace `ns`, in the lab's cgroup when it has one.
fn spawn_actor(
    root: &Path,
    cgroup: Option<&Path>,
    kind: ActorKind,
    ns: &str,
    args: &[String],
) -> Result<u32, LabError> {
    let log_path = root
        .join(paths::ACTOR_LOGS)
        .join(format!("{}.log", kind.name));
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| LabError::io(format!("opening {}", log_path.display()), e))?;
    let log2 = log.try_clone().map_err(|e| LabError::io("dup log", e))?;
    let mut cmd = Command::new(layout::actor_path(root, kind));
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .env("PLUMB_LAB_ROOT", root);
    netns::command_in(&mut cmd, ns, true)
        .map_err(|e| LabError::io(format!("opening namespace {ns}"), e))?;
    if let Some(c) = cgroup {
        cilium_node::join_cgroup(&mut cmd, c);
    }
    let child = cmd
        .spawn()
        .map_err(|e| LabError::io(format!("starting {}", kind.name), e))?;
    Ok(child.id())
}

/// RHEL/CentOS iptables-services' shipped `/etc/sysconfig/iptables`.
const IPTABLES_SERVICES_DEFAULT: &str = "# sample configuration for iptables service
# you can edit this manually or use system-config-firewall
# please do not ask us to add additional ports/services to this default configuration
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -m state --state RELATED,ESTABLISHED -j ACCEPT
-A INPUT -p icmp -j ACCEPT
-A INPUT -i lo -j ACCEPT
-A INPUT -p tcp -m state --state NEW -m tcp --dport 22 -j ACCEPT
-A INPUT -j REJECT --reject-with icmp-host-prohibited
-A FORWARD -j REJECT --reject-with icmp-host-prohibited
COMMIT
";

/// The portmap CNI plugin's rules for one hostPort mapping (host 8080/tcp -> `pod_ip`:80),
/// as containernetworking/plugins `plugins/meta/portmap` writes them (chain names,
/// comments, mark 0x2000).
fn portmap_rules(pod_ip: &str) -> String {
    let dn = "CNI-DN-3e1a2e5c0f4b4b9e7d1a2";
    format!(
        "*nat
:CNI-HOSTPORT-DNAT - [0:0]
:CNI-HOSTPORT-SETMARK - [0:0]
:CNI-HOSTPORT-MASQ - [0:0]
:{dn} - [0:0]
-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
-A OUTPUT -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
-A POSTROUTING -m comment --comment \"CNI portfwd requiring masquerade\" -j CNI-HOSTPORT-MASQ
-A CNI-HOSTPORT-MASQ -m mark --mark 0x2000/0x2000 -j MASQUERADE
-A CNI-HOSTPORT-SETMARK -m comment --comment \"CNI portfwd masquerade mark\" -j MARK --set-xmark 0x2000/0x2000
-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment \"dnat name: \\\"k8s-pod-network\\\" id: \\\"2f9c1d7e5b3a\\\"\" -m multiport --dports 8080 -j {dn}
-A {dn} -s {pod_ip}/32 -p tcp -m tcp --dport 8080 -j CNI-HOSTPORT-SETMARK
-A {dn} -s 127.0.0.1/32 -p tcp -m tcp --dport 8080 -j CNI-HOSTPORT-SETMARK
-A {dn} -p tcp -m tcp --dport 8080 -j DNAT --to-destination {pod_ip}:80
COMMIT
"
    )
}

/// Runs `argv` in the node namespace to completion (30 s at most); an error names it.
fn node_run(root: &Path, argv: &[String]) -> Result<(), LabError> {
    let mut child = ufw::node_command(root, argv)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| LabError::io(format!("running {}", argv[0]), e))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match child.try_wait() {
            Ok(Some(st)) => {
                let out = child
                    .wait_with_output()
                    .map_err(|e| LabError::io(format!("reading {}", argv[0]), e))?;
                return if st.success() {
                    Ok(())
                } else {
                    Err(LabError::Other(format!(
                        "{}: {st}: {}",
                        argv.join(" "),
                        String::from_utf8_lossy(&out.stderr).trim()
                    )))
                };
            }
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(LabError::Other(format!(
                    "{} did not end in 30 s",
                    argv.join(" ")
                )));
            }
        }
    }
}

fn file_contains(path: &Path, needle: &str) -> bool {
    fs::read_to_string(path).is_ok_and(|t| t.contains(needle))
}

/// All log text of `container` across pods and restarts (`var/log/pods/*/<container>/*.log`),
/// in restart order.
pub fn pod_logs(root: &Path, container: &str) -> String {
    let mut out = String::new();
    let Ok(pods) = fs::read_dir(root.join(paths::POD_LOGS)) else {
        return out;
    };
    for pod in pods.flatten() {
        let dir = pod.path().join(container);
        let Ok(files) = fs::read_dir(&dir) else {
            continue;
        };
        let mut logs: Vec<(u32, PathBuf)> = files
            .flatten()
            .filter_map(|f| {
                let n = f.file_name().to_str()?.strip_suffix(".log")?.parse().ok()?;
                Some((n, f.path()))
            })
            .collect();
        logs.sort();
        for (_, p) in logs {
            out.push_str(&fs::read_to_string(p).unwrap_or_default());
        }
    }
    out
}

/// What `down` removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DownReport {
    /// Processes terminated.
    pub processes: Vec<String>,
    /// Namespaces deleted.
    pub namespaces: Vec<String>,
    /// Lab root removed.
    pub root_removed: Option<PathBuf>,
    /// Problems met (down carries on).
    pub errors: Vec<String>,
}

impl DownReport {
    /// Whether there was nothing to remove.
    pub fn was_clean(&self) -> bool {
        self.processes.is_empty() && self.namespaces.is_empty() && self.root_removed.is_none()
    }
}

/// What remains of the lab on this machine; all empty after `down`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Leftovers {
    /// Lab network namespaces.
    pub namespaces: Vec<String>,
    /// Lab processes (`comm[pid]`).
    pub processes: Vec<String>,
    /// Mounts under the lab root or of lab namespaces.
    pub mounts: Vec<String>,
    /// Whether the state file exists.
    pub state_file: bool,
    /// The lab's cgroup, if it exists (kube-proxy-free scenarios).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<PathBuf>,
}

impl Leftovers {
    /// Nothing left.
    pub fn is_empty(&self) -> bool {
        self.namespaces.is_empty()
            && self.processes.is_empty()
            && self.mounts.is_empty()
            && !self.state_file
            && self.cgroup.is_none()
    }
}

fn lab_netns_inodes() -> HashSet<u64> {
    topology::lab_namespaces()
        .iter()
        .filter_map(|n| netns::inode_of(n).ok())
        .collect()
}

fn lab_mounts(root: &Path) -> Vec<String> {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| {
            Path::new(m).starts_with(root)
                || m.strip_prefix("/run/netns/")
                    .is_some_and(topology::is_lab_namespace)
        })
        .map(String::from)
        .collect()
}

/// The lab's cgroup: the recorded one, else the one of that name below the cgroup2
/// mount (a crashed `up` may have made it before the state recorded it).
fn lab_cgroup(state: Option<&LabState>) -> Option<PathBuf> {
    state
        .and_then(|s| s.cgroup.clone())
        .or_else(cilium_node::lab_cgroup)
}

/// Scans for anything the lab leaves behind (namespaces, processes, mounts, state file).
pub fn leftovers() -> Leftovers {
    let state = LabState::load().ok().flatten();
    let root = state.as_ref().map_or_else(default_root, |s| s.root.clone());
    let procs = process::lab_processes(Some(&root), &lab_netns_inodes());
    let mut roots = vec![root];
    if roots[0] != default_root() {
        roots.push(default_root());
    }
    Leftovers {
        namespaces: topology::lab_namespaces(),
        processes: procs
            .iter()
            .map(|p| format!("{}[{}]", p.comm, p.pid))
            .collect(),
        mounts: roots.iter().flat_map(|r| lab_mounts(r)).collect(),
        state_file: state_path().exists(),
        cgroup: lab_cgroup(state.as_ref()).filter(|c| c.exists()),
    }
}

/// Removes every trace of the lab. Idempotent; safe after a crash.
pub fn down() -> DownReport {
    let mut report = DownReport::default();
    let state = LabState::load().unwrap_or_else(|e| {
        report.errors.push(format!("unreadable state file: {e}"));
        None
    });
    let root = state.as_ref().map_or_else(default_root, |s| s.root.clone());
    // Processes: recorded actors, then anything under the root or inside a lab namespace
    // (iptables children, ufw, a crashed up's actors). Repeat: a supervisor may restart one.
    for _ in 0..3 {
        let found = process::lab_processes(Some(&root), &lab_netns_inodes());
        if found.is_empty() {
            break;
        }
        let pids: Vec<u32> = found.iter().map(|p| p.pid).collect();
        report
            .processes
            .extend(found.iter().map(|p| format!("{}[{}]", p.comm, p.pid)));
        for pid in process::terminate(&pids, Duration::from_secs(3)) {
            report
                .errors
                .push(format!("process {pid} survived SIGKILL"));
        }
    }
    // The socket load balancer: its links' and maps' pins, the bpffs, the cgroup.
    report.errors.extend(cilium_node::teardown(
        &root,
        lab_cgroup(state.as_ref()).as_deref(),
    ));
    for m in lab_mounts(&root) {
        if let Err(e) = topology::run_program("umount", &["-l", &m]) {
            report.errors.push(e.to_string());
        }
    }
    let (deleted, errors) = topology::destroy();
    report.namespaces = deleted;
    report.errors.extend(errors);
    if root.exists() {
        // Only remove a directory that looks like a lab root.
        if root.join(paths::LAB_STATE_DIR).exists() || root == default_root() {
            match fs::remove_dir_all(&root) {
                Ok(()) => report.root_removed = Some(root.clone()),
                Err(e) => report
                    .errors
                    .push(format!("removing {}: {e}", root.display())),
            }
        } else {
            report.errors.push(format!(
                "{} does not look like a lab root; left in place",
                root.display()
            ));
        }
    }
    let _ = fs::remove_file(state_path());
    let _ = fs::remove_file(Path::new(RUN_DIR).join("state.json.tmp"));
    let _ = fs::remove_dir(RUN_DIR);
    report
}

/// `lab status`.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// Whether a lab is recorded.
    pub running: bool,
    /// The recorded state.
    pub state: Option<LabState>,
    /// Actor name -> alive.
    pub actors_alive: BTreeMap<String, bool>,
    /// Pod containers as the kubelet sees them.
    pub containers: Vec<kubelet::ContainerStatus>,
    /// Leftovers (for a lab that is not recorded: what `down` would remove).
    pub leftovers: Leftovers,
}

/// Reads the lab's status without changing anything.
pub fn status() -> Result<Status, LabError> {
    let state = LabState::load().map_err(|e| LabError::io("reading the lab state", e))?;
    let mut actors_alive = BTreeMap::new();
    let mut containers = Vec::new();
    if let Some(s) = &state {
        for (name, pid) in &s.actors {
            actors_alive.insert(name.clone(), process::alive(*pid));
        }
        let path = s.root.join(paths::LAB_STATE_DIR).join("pods-status.json");
        if let Ok(text) = fs::read_to_string(path) {
            containers = serde_json::from_str(&text).unwrap_or_default();
        }
    }
    Ok(Status {
        running: state.is_some(),
        state,
        actors_alive,
        containers,
        leftovers: leftovers(),
    })
}

/// `argv` as a command in the lab's node namespace, as `lab exec` runs it: the lab's UFW
/// files mounted privately, `PLUMB_LAB_ROOT` set, and in the lab's cgroup when it has
/// one (where the kube-proxy-free scenarios' socket load balancer is attached).
pub fn node_command(state: &LabState, argv: &[String]) -> Command {
    let mut cmd = ufw::node_command(&state.root, argv);
    if let Some(c) = &state.cgroup {
        cilium_node::join_cgroup(&mut cmd, c);
    }
    cmd
}

/// Runs `argv` in the node namespace of the running lab (with the lab's UFW files mounted
/// privately and `PLUMB_LAB_ROOT` set, in the lab's cgroup); returns its exit code.
pub fn exec(argv: &[String]) -> Result<i32, LabError> {
    let state = LabState::load()
        .map_err(|e| LabError::io("reading the lab state", e))?
        .ok_or(LabError::NotRunning)?;
    let status = node_command(&state, argv).status().map_err(|e| {
        LabError::io(
            format!("running {}", argv.first().map_or("", String::as_str)),
            e,
        )
    })?;
    Ok(status.code().unwrap_or(128 + 9))
}

impl Lab {
    /// Brings `scenario` up with default options; tears it down on drop.
    pub fn up(scenario: Scenario) -> Result<Lab, LabError> {
        Self::up_with(scenario, LabOptions::default())
    }

    /// Brings `scenario` up. Refuses when a lab (or its leftovers) exists; on any failure
    /// (or SIGINT) removes what it made.
    pub fn up_with(scenario: Scenario, opts: LabOptions) -> Result<Lab, LabError> {
        crate::preflight::check()?;
        if let Some(s) = LabState::load().map_err(|e| LabError::io("reading the lab state", e))? {
            return Err(LabError::AlreadyRunning {
                scenario: s.scenario,
                root: s.root,
            });
        }
        let left = leftovers();
        if !left.is_empty() {
            return Err(LabError::Other(format!(
                "leftovers of an earlier lab exist (namespaces {:?}, processes {:?}, mounts {:?}, cgroup {:?}); run `plumb lab down` first",
                left.namespaces, left.processes, left.mounts, left.cgroup
            )));
        }
        INTERRUPTED.store(false, Ordering::SeqCst);
        // SAFETY: the handler only stores to an atomic.
        let previous = unsafe {
            libc::signal(
                libc::SIGINT,
                on_interrupt as *const () as libc::sighandler_t,
            )
        };
        let result = Self::build(scenario, opts);
        // SAFETY: restores the handler that was installed before.
        unsafe { libc::signal(libc::SIGINT, previous) };
        match result {
            Ok(lab) => Ok(lab),
            Err(e) => {
                let report = down();
                if report.errors.is_empty() {
                    Err(e)
                } else {
                    Err(LabError::Other(format!(
                        "{e} (cleanup also failed: {})",
                        report.errors.join("; ")
                    )))
                }
            }
        }
    }

    fn build(scenario: Scenario, opts: LabOptions) -> Result<Lab, LabError> {
        let plan = Plan::of(scenario);
        let services = opts.services.unwrap_or(8).max(1);
        // The kube-proxy-free scenarios program their Services into Cilium's maps:
        // their own four unless asked for more.
        let cilium_services = match &plan.cilium {
            Some(_) => cilium_node::services_for(
                opts.services
                    .unwrap_or_else(|| cilium_node::services().len()),
            )?,
            None => Vec::new(),
        };
        let sync_period = opts.sync_period.unwrap_or(plan.sync_period);
        let exe = resolve_actor_exe(opts.actor_exe)?;
        let root = opts.root.unwrap_or_else(default_root);
        let mut state = LabState {
            version: 1,
            scenario: scenario.name().into(),
            root: root.clone(),
            services,
            created_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs(),
            phase: "starting".into(),
            namespaces: Vec::new(),
            node_ip: NODE_IP.to_string(),
            api_endpoint: format!("{API_IP}:{API_PORT}"),
            cluster_ip: format!("{CLUSTER_IP}:443"),
            pods: (0..plan.pods)
                .map(|i| (topology::pod_netns(i), topology::pod_ip(i).to_string()))
                .collect(),
            actors: BTreeMap::new(),
            backend: opts.backend.name().into(),
            cgroup: None,
        };
        if plan.cilium.is_some() {
            // Recorded before it is made: `down` removes it after any failure.
            state.cgroup = Some(cilium_node::lab_cgroup().ok_or_else(|| {
                LabError::Other("no cgroup2 hierarchy in /proc/mounts: the kube-proxy-free scenarios attach their socket load balancer to a cgroup of their own".into())
            })?);
            state.services = cilium_services.len();
        }
        let iptables_flag = format!("--iptables={}", opts.backend.program());
        state
            .save()
            .map_err(|e| LabError::io("writing the lab state", e))?;
        fs::create_dir_all(&root)
            .map_err(|e| LabError::io(format!("creating {}", root.display()), e))?;
        fs::create_dir_all(root.join(paths::LAB_STATE_DIR))
            .map_err(|e| LabError::io("creating the lab state dir", e))?;
        let mut optional = Vec::new();
        if plan.agent.is_some() {
            optional.push(actors::VEN_AGENT);
        }
        if plan.firewalld.is_some() {
            optional.push(actors::FIREWALLD);
        }
        if plan.felix.is_some() {
            optional.push(actors::CALICO_NODE);
        }
        layout::install_actors(&root, &exe, &optional)?;
        let pki = tls::generate(&[CLUSTER_IP.into(), API_IP.into(), [127, 0, 0, 1].into()])?;

        let api: SocketAddrV4 = SocketAddrV4::new(API_IP, API_PORT);
        let kp_args: Vec<String> = vec![
            "--cluster-cidr=10.42.0.0/16".into(),
            "--conntrack-max-per-core=0".into(),
            "--healthz-bind-address=127.0.0.1:10256".into(),
            "--metrics-bind-address=127.0.0.1:10249".into(),
            "--hostname-override=plumb-node".into(),
            format!("--bind-address={NODE_IP}"),
            "--kubeconfig=/var/lib/rancher/rke2/agent/kubeproxy.kubeconfig".into(),
            "--proxy-mode=iptables".into(),
            format!("--iptables-sync-period={}s", sync_period.as_secs_f64()),
            format!("--services={services}"),
            format!("--api-endpoint={api}"),
            format!("--node-eligible={}", plan.node_eligible),
            iptables_flag.clone(),
            "--v=2".into(),
        ];
        let mut kp_args = kp_args;
        if let Some(c) = plan.churn {
            kp_args.push(format!("--endpoint-churn={}s", c.as_secs_f64()));
        }
        if plan.model_ufw_lock {
            kp_args.push("--model-ufw-lock-contention".into());
        }
        if opts.exact_restore_payload {
            kp_args.push("--exact-restore-payload".into());
        }
        if plan.kube_proxy_nf_tables_refused {
            kp_args.push("--model-nf-tables-einval".into());
        }
        if plan.felix.is_some() {
            // No NodePort: Felix's chain prefixes do not cover KUBE-EXT-*, whose
            // references would keep it from deleting KUBE-SVC-* (docs/lab.md).
            kp_args.push("--cluster-ip-only".into());
        }
        if let Some(svc) = plan.drop_endpoints {
            kp_args.push(format!("--drop-endpoints={svc}"));
            kp_args.push("--drop-endpoints-after=2s".into());
        }
        layout::write_node_files(
            &root,
            &pki,
            plan.liveness.path,
            plan.cilium.is_none().then_some(kp_args.as_slice()),
        )?;
        if let Some(c) = &plan.cilium {
            cilium_node::write_cni_conf(&root, c.leftovers)?;
        }
        ufw::prepare(&root)?;

        state.namespaces = topology::create(&TopologySpec {
            pods: plan.pods,
            node_ip_forward: plan.ip_forward,
            pod_devices: if plan.cilium.is_some() {
                topology::PodDevices::CILIUM
            } else {
                topology::PodDevices::CANAL
            },
        })?;
        state
            .save()
            .map_err(|e| LabError::io("writing the lab state", e))?;
        check_interrupted()?;
        if let (Some(_), Some(cgroup)) = (&plan.cilium, &state.cgroup) {
            cilium_node::setup(&root, cgroup, plan.pods, &cilium_services)?;
        }

        if plan.ufw {
            ufw::enable(&root)?;
        }
        if plan.iptables_services {
            // iptables.service at boot, before kubelet: `iptables-restore` of
            // /etc/sysconfig/iptables (flush mode), RHEL's shipped default.
            let file = root.join(paths::SYSCONFIG_IPTABLES);
            if let Some(d) = file.parent() {
                fs::create_dir_all(d).map_err(|e| LabError::io("creating etc/sysconfig", e))?;
            }
            fs::write(&file, IPTABLES_SERVICES_DEFAULT)
                .map_err(|e| LabError::io("writing etc/sysconfig/iptables", e))?;
            node_run(
                &root,
                &[
                    format!("{}-restore", opts.backend.program()),
                    file.display().to_string(),
                ],
            )?;
        }
        if let Some(fw) = &plan.firewalld {
            let log = root.join(paths::FIREWALLD_LOG);
            let pid = spawn_actor(
                &root,
                state.cgroup.as_deref(),
                actors::FIREWALLD,
                NODE_NETNS,
                &[
                    "--nofork".into(),
                    "--nopid".into(),
                    "--debug=1".into(),
                    format!("--log-file={}", log.display()),
                    format!("--first-reload={}s", fw.first_reload.as_secs_f64()),
                    format!("--reload-interval={}s", fw.interval.as_secs_f64()),
                    iptables_flag.clone(),
                ],
            )?;
            state.actors.insert(actors::FIREWALLD.name.into(), pid);
            state
                .save()
                .map_err(|e| LabError::io("writing the lab state", e))?;
            Self::wait("firewalld's start", Duration::from_secs(10), || {
                file_contains(&log, "Loading firewalld config")
            })?;
        }

        // The API endpoint.
        let pid = spawn_actor(
            &root,
            state.cgroup.as_deref(),
            actors::API_SERVER,
            API_NETNS,
            &[
                format!(
                    "--tls-cert-file={}",
                    root.join(paths::SERVING_CERT).display()
                ),
                format!(
                    "--tls-private-key-file={}",
                    root.join(paths::SERVING_KEY).display()
                ),
                "--bind-address=0.0.0.0".into(),
                format!("--secure-port={API_PORT}"),
            ],
        )?;
        state.actors.insert(actors::API_SERVER.name.into(), pid);
        state
            .save()
            .map_err(|e| LabError::io("writing the lab state", e))?;
        Self::wait(
            "the API endpoint to listen",
            Duration::from_secs(10),
            || {
                matches!(
                    probe::tcp_connect(NODE_NETNS, SocketAddr::V4(api), Duration::from_millis(300)),
                    Ok(Connect::Connected)
                )
            },
        )?;

        // kubelet with two pods: kube-proxy (static pod) and Canal (install-cni).
        let lab_dir = root.join(paths::LAB_STATE_DIR);
        let pods = vec![
            kubelet::PodSpec {
                namespace: "kube-system".into(),
                name: "kube-proxy-plumb-node".into(),
                uid: layout::uuid(),
                containers: vec![kubelet::ContainerSpec {
                    name: "kube-proxy".into(),
                    exe: layout::actor_path(&root, actors::KUBE_PROXY),
                    args: kp_args,
                    restart: kubelet::Restart::Always,
                    start_delay_ms: 0,
                    backoff_initial_ms: 10_000,
                    backoff_max_ms: 300_000,
                    liveness: Some(kubelet::Probe {
                        addr: "127.0.0.1:10256".parse().expect("address"),
                        path: plan.liveness.path.into(),
                        initial_delay_ms: 2000,
                        period_ms: plan.liveness.period.as_millis() as u64,
                        failure_threshold: plan.liveness.failure_threshold,
                    }),
                    netns: None,
                }],
            },
            kubelet::PodSpec {
                namespace: "kube-system".into(),
                name: format!("rke2-canal-{}", &layout::uuid()[..5]),
                uid: layout::uuid(),
                containers: vec![kubelet::ContainerSpec {
                    name: "install-cni".into(),
                    exe: layout::actor_path(&root, actors::INSTALL_CNI),
                    args: vec![
                        format!("--server={CLUSTER_IP}:443"),
                        format!("--ca={}", root.join(paths::SERVER_CA).display()),
                        format!("--cni-net-dir={}", root.join(paths::CNI_NET_DIR).display()),
                        format!("--dial-timeout={}s", plan.install_cni_timeout.as_secs_f64()),
                        "--service-account=canal".into(),
                    ],
                    restart: kubelet::Restart::OnFailure,
                    start_delay_ms: plan.install_cni_delay.as_millis() as u64,
                    backoff_initial_ms: 10_000,
                    backoff_max_ms: 300_000,
                    liveness: None,
                    netns: None,
                }],
            },
        ];
        let mut pods = pods;
        if plan.cilium.is_some() {
            // kube-proxy-free, and Canal is gone: Cilium's agent is not emulated (what
            // it leaves, the maps and the socket load balancer, is in place).
            pods.clear();
        }
        if let Some(felix) = &plan.felix {
            pods.push(kubelet::PodSpec {
                namespace: "kube-system".into(),
                name: format!("calico-node-{}", &layout::uuid()[..5]),
                uid: layout::uuid(),
                containers: vec![kubelet::ContainerSpec {
                    name: "calico-node".into(),
                    exe: layout::actor_path(&root, actors::CALICO_NODE),
                    args: vec![
                        format!(
                            "--refresh-interval={}s",
                            felix.refresh_interval.as_secs_f64()
                        ),
                        iptables_flag.clone(),
                    ],
                    restart: kubelet::Restart::Always,
                    // Scheduled after kube-proxy's first sync, as a DaemonSet pod of a CNI
                    // switched to eBPF mode on a running node.
                    start_delay_ms: 3000,
                    backoff_initial_ms: 10_000,
                    backoff_max_ms: 300_000,
                    liveness: None,
                    netns: None,
                }],
            });
        }
        if plan.coredns {
            pods.push(kubelet::PodSpec {
                namespace: "kube-system".into(),
                name: format!("rke2-coredns-rke2-coredns-{}", &layout::uuid()[..5]),
                uid: layout::uuid(),
                containers: vec![kubelet::ContainerSpec {
                    name: "coredns".into(),
                    exe: layout::actor_path(&root, actors::COREDNS),
                    args: [
                        format!("--server={CLUSTER_IP}:443"),
                        "--dial-timeout=5s".into(),
                    ]
                    .into_iter()
                    // kube-dns's backend on the kube-proxy-free node.
                    .chain(plan.cilium.is_some().then(|| "--serve".to_string()))
                    .collect(),
                    restart: kubelet::Restart::Always,
                    start_delay_ms: 1000,
                    backoff_initial_ms: 10_000,
                    backoff_max_ms: 300_000,
                    liveness: None,
                    netns: Some(topology::pod_netns(0)),
                }],
            });
        }
        let pods_file = lab_dir.join("pods.json");
        fs::write(
            &pods_file,
            serde_json::to_vec_pretty(&pods).map_err(|e| LabError::Other(e.to_string()))?,
        )
        .map_err(|e| LabError::io("writing pods.json", e))?;
        let start_file = lab_dir.join("start-pods");
        let pid = spawn_actor(
            &root,
            state.cgroup.as_deref(),
            actors::KUBELET,
            NODE_NETNS,
            &[
                format!("--root={}", root.display()),
                format!("--pods-file={}", pods_file.display()),
                format!(
                    "--status-file={}",
                    lab_dir.join("pods-status.json").display()
                ),
                format!("--start-file={}", start_file.display()),
                // kubelet writes its chains with the node's iptables, as kube-proxy does.
                iptables_flag.clone(),
            ],
        )?;
        state.actors.insert(actors::KUBELET.name.into(), pid);
        state
            .save()
            .map_err(|e| LabError::io("writing the lab state", e))?;
        let kubelet_log = root.join(paths::KUBELET_LOG);
        Self::wait(
            "kubelet's iptables bootstrap",
            Duration::from_secs(10),
            || file_contains(&kubelet_log, "iptables rules"),
        )?;

        if plan.stale_legacy {
            let stale = opts.backend.other();
            crate::backend_mix::write_stale(stale.program(), services, api)?;
            state.backend = format!(
                "{} (stale kube-proxy chains in iptables-{})",
                opts.backend.name(),
                stale.name()
            );
        }

        if let Some(c) = &plan.cilium
            && c.leftovers
        {
            cilium_node::write_leftovers(&root, opts.backend.program())?;
        }

        if let Some(agent) = &plan.agent {
            let log = root.join(paths::VEN_LOG);
            let pid = spawn_actor(
                &root,
                state.cgroup.as_deref(),
                actors::VEN_AGENT,
                NODE_NETNS,
                &[
                    format!("--log={}", log.display()),
                    format!("--interval={}s", agent.interval.as_secs_f64()),
                    format!("--arm-delay={}s", agent.arm_delay.as_secs_f64()),
                    // The agent snapshots and reverts the backend the node's rules are in.
                    iptables_flag.clone(),
                ],
            )?;
            state.actors.insert(actors::VEN_AGENT.name.into(), pid);
            state
                .save()
                .map_err(|e| LabError::io("writing the lab state", e))?;
            Self::wait(
                "venAgent's firewall snapshot",
                Duration::from_secs(10),
                || file_contains(&log, "Firewall snapshot taken"),
            )?;
        }

        fs::write(&start_file, b"").map_err(|e| LabError::io("writing start-pods", e))?;
        // kube-proxy's first full sync: 2-3 s for 10k services on the 2-core development
        // machine with either backend (docs/benchmarks.md); far longer on nft with the
        // emulator's `--exact-restore-payload` (iptables-nft's quadratic chain list).
        let per = if opts.exact_restore_payload { 10 } else { 100 };
        let deadline = Duration::from_secs(30 + services as u64 / per);
        // An iptables that cannot write never completes a sync: its first failure is the
        // ready state of that scenario.
        let first_sync = if plan.kube_proxy_nf_tables_refused {
            "Sync failed"
        } else {
            "SyncProxyRules complete"
        };
        if plan.cilium.is_some() {
            // coredns lists the API through the `kubernetes` Service: the socket load
            // balancer works for the node's pods.
            Self::wait(
                "coredns's connection to the API",
                Duration::from_secs(30),
                || pod_logs(&root, "coredns").contains("Kubernetes API connection established"),
            )?;
        } else {
            Self::wait("kube-proxy's first sync", deadline, || {
                pod_logs(&root, "kube-proxy").contains(first_sync)
            })?;
        }
        if plan.host_port {
            // The portmap CNI plugin's hostPort DNAT for pod 0 (containerPort 80 on host
            // port 8080), written once when the sandbox was created.
            let file = root.join(paths::LAB_STATE_DIR).join("portmap.rules");
            fs::write(&file, portmap_rules(&topology::pod_ip(0).to_string()))
                .map_err(|e| LabError::io("writing portmap.rules", e))?;
            node_run(
                &root,
                &[
                    format!("{}-restore", opts.backend.program()),
                    "--noflush".into(),
                    file.display().to_string(),
                ],
            )?;
        }
        state.phase = "ready".into();
        state
            .save()
            .map_err(|e| LabError::io("writing the lab state", e))?;
        Ok(Lab {
            state,
            detached: false,
        })
    }

    fn wait(
        what: &str,
        deadline: Duration,
        mut check: impl FnMut() -> bool,
    ) -> Result<(), LabError> {
        probe::wait_for(what, deadline, Duration::from_millis(25), || {
            if INTERRUPTED.load(Ordering::SeqCst) {
                return Some(Err(LabError::Other("interrupted".into())));
            }
            check().then_some(Ok(()))
        })?
    }

    /// The running lab, if any (dropping it does not tear it down).
    pub fn attach() -> Result<Option<Lab>, LabError> {
        Ok(LabState::load()
            .map_err(|e| LabError::io("reading the lab state", e))?
            .map(|state| Lab {
                state,
                detached: true,
            }))
    }

    /// Keeps the lab running after this value is dropped.
    pub fn detach(mut self) -> LabState {
        self.detached = true;
        self.state.clone()
    }

    /// Tears the lab down now.
    pub fn down(mut self) -> DownReport {
        self.detached = true;
        down()
    }

    /// The recorded state.
    pub fn state(&self) -> &LabState {
        &self.state
    }

    /// The lab root.
    pub fn root(&self) -> &Path {
        &self.state.root
    }

    /// TCP connect from the node namespace.
    pub fn connect_from_node(
        &self,
        addr: SocketAddr,
        timeout: Duration,
    ) -> Result<Connect, LabError> {
        probe::tcp_connect(NODE_NETNS, addr, timeout)
    }

    /// TCP connect from pod namespace `i`.
    pub fn connect_from_pod(
        &self,
        i: usize,
        addr: SocketAddr,
        timeout: Duration,
    ) -> Result<Connect, LabError> {
        probe::tcp_connect(&topology::pod_netns(i), addr, timeout)
    }

    /// The `kubernetes` Service address.
    pub fn cluster_ip(&self) -> SocketAddr {
        SocketAddr::from((CLUSTER_IP, 443))
    }

    /// The API endpoint address.
    pub fn api_endpoint(&self) -> SocketAddr {
        SocketAddr::from((API_IP, API_PORT))
    }

    /// GET `path` on kube-proxy's health port (127.0.0.1:10256 in the node).
    pub fn kube_proxy_health(&self, path: &str) -> Result<crate::http::Response, LabError> {
        probe::http_get(
            NODE_NETNS,
            "127.0.0.1:10256".parse().expect("address"),
            path,
        )
    }

    /// All log text of a container (all restarts).
    pub fn pod_logs(&self, container: &str) -> String {
        pod_logs(self.root(), container)
    }

    /// Text of a file under the lab root ("" when absent).
    pub fn read(&self, rel: &str) -> String {
        fs::read_to_string(self.root().join(rel)).unwrap_or_default()
    }

    /// `iptables-save` (or another dump program) in the node namespace.
    pub fn node_output(&self, argv: &[&str]) -> Result<String, LabError> {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let out = ufw::node_command(self.root(), &argv)
            .output()
            .map_err(|e| LabError::io(format!("running {}", argv[0]), e))?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Waits (polling every 100 ms) until `check` holds, at most `deadline`.
    pub fn wait_until(
        &self,
        what: &str,
        deadline: Duration,
        mut check: impl FnMut(&Lab) -> bool,
    ) -> Result<Duration, LabError> {
        let start = Instant::now();
        probe::wait_for(what, deadline, Duration::from_millis(100), || {
            check(self).then_some(())
        })?;
        Ok(start.elapsed())
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if !self.detached {
            let _ = down();
        }
    }
}
