//! kubelet emulator, also playing the container runtime: it writes kubelet's own iptables
//! bootstrap (`KUBE-IPTABLES-HINT`, `KUBE-KUBELET-CANARY`, `KUBE-FIREWALL`), then runs the
//! node's "containers" (kube-proxy, Canal's install-cni) as child processes, captures their
//! stdout/stderr into CRI logs at `var/log/pods/<ns>_<pod>_<uid>/<container>/<restarts>.log`,
//! restarts them with kubelet's crash-loop back-off (doubling, capped) and runs HTTP
//! liveness probes (`failureThreshold` consecutive failures kill the container). Its own
//! klog lines go to `var/lib/rancher/rke2/agent/logs/kubelet.log`, as on an RKE2 node. Pod
//! status (running, CrashLoopBackOff, restarts) is kept in a JSON file for `lab status`.

use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{Flags, go_duration, nap, terminating};
use crate::http;
use crate::iptables::Tools;
use crate::logfmt::{LogFile, Stream, cri_line, klog, raw, s};

/// One pod the kubelet runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodSpec {
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Pod UID (part of the log directory name).
    pub uid: String,
    /// Containers, each run independently.
    pub containers: Vec<ContainerSpec>,
}

impl PodSpec {
    /// `var/log/pods/<ns>_<pod>_<uid>` under `root`.
    pub fn log_dir(&self, root: &Path) -> PathBuf {
        root.join("var/log/pods")
            .join(format!("{}_{}_{}", self.namespace, self.name, self.uid))
    }
}

/// When a container is restarted after it exits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Restart {
    /// Always (kube-proxy's static pod).
    Always,
    /// Only after a failure (an init container such as install-cni).
    OnFailure,
}

/// An HTTP liveness probe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probe {
    /// Address to connect to (`127.0.0.1:10256`).
    pub addr: SocketAddr,
    /// Path (`/healthz` or `/livez`).
    pub path: String,
    /// Seconds before the first probe.
    pub initial_delay_ms: u64,
    /// Probe period.
    pub period_ms: u64,
    /// Consecutive failures that kill the container.
    pub failure_threshold: u32,
}

/// One container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerSpec {
    /// Container name (log directory).
    pub name: String,
    /// Executable.
    pub exe: PathBuf,
    /// Arguments.
    pub args: Vec<String>,
    /// Restart policy.
    pub restart: Restart,
    /// Delay after the pods start (scheduling, image pull).
    pub start_delay_ms: u64,
    /// First crash-loop back-off (kubelet: 10 s).
    pub backoff_initial_ms: u64,
    /// Back-off cap (kubelet: 5 min).
    pub backoff_max_ms: u64,
    /// Liveness probe.
    pub liveness: Option<Probe>,
    /// Network namespace of the pod (a pod's own); `None` for host-network pods, which
    /// run in kubelet's (the node's).
    #[serde(default)]
    pub netns: Option<String>,
}

/// What `lab status` shows per container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerStatus {
    /// `namespace/pod`.
    pub pod: String,
    /// Container name.
    pub container: String,
    /// `waiting`, `running` or `terminated`.
    pub state: String,
    /// `CrashLoopBackOff`, `Completed`, `Error`, `ContainerCreating` or empty.
    pub reason: String,
    /// Restart count.
    pub restarts: u32,
    /// Current pid when running.
    pub pid: Option<u32>,
    /// Exit code of the last run.
    pub last_exit_code: Option<i32>,
}

type Statuses = Arc<Mutex<Vec<ContainerStatus>>>;

fn write_status(path: &Path, statuses: &Statuses) {
    let list = statuses.lock().expect("status lock").clone();
    let tmp = path.with_extension("tmp");
    if let Ok(text) = serde_json::to_vec_pretty(&list)
        && std::fs::write(&tmp, text).is_ok()
    {
        let _ = std::fs::rename(tmp, path);
    }
}

struct Kubelet {
    log: Mutex<LogFile>,
    statuses: Statuses,
    status_file: PathBuf,
    root: PathBuf,
}

impl Kubelet {
    fn log(&self, line: String) {
        let _ = self.log.lock().expect("log lock").line(&line);
    }

    fn set(&self, idx: usize, f: impl FnOnce(&mut ContainerStatus)) {
        f(&mut self.statuses.lock().expect("status lock")[idx]);
        write_status(&self.status_file, &self.statuses);
    }
}

fn pump(
    reader: impl Read + Send + 'static,
    stream: Stream,
    log: Arc<Mutex<LogFile>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(reader).lines() {
            let Ok(line) = line else { break };
            let _ = log.lock().expect("cri log").line(&cri_line(stream, &line));
        }
    })
}

fn probe_ok(p: &Probe) -> Result<(), String> {
    let stream = TcpStream::connect_timeout(&p.addr, Duration::from_secs(1)).map_err(|e| {
        format!(
            "Get \"http://{}{}\": dial tcp {}: {e}",
            p.addr, p.path, p.addr
        )
    })?;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let resp = http::exchange(&stream, "GET", &p.addr.to_string(), &p.path, b"")
        .map_err(|e| e.to_string())?;
    if (200..400).contains(&resp.status) {
        Ok(())
    } else {
        Err(format!(
            "HTTP probe failed with statuscode: {}",
            resp.status
        ))
    }
}

fn kill(child: &mut Child, grace: Duration) {
    let pid = child.id();
    crate::process::signal(pid, libc::SIGTERM);
    let end = Instant::now() + grace;
    while Instant::now() < end {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn run_container(k: &Kubelet, idx: usize, pod: &PodSpec, c: &ContainerSpec) {
    let podref = format!("{}/{}", pod.namespace, pod.name);
    if !nap(Duration::from_millis(c.start_delay_ms)) {
        return;
    }
    let mut restarts = 0u32;
    loop {
        let path = pod
            .log_dir(&k.root)
            .join(&c.name)
            .join(format!("{restarts}.log"));
        let log = match LogFile::open(&path) {
            Ok(l) => Arc::new(Mutex::new(l)),
            Err(e) => {
                k.log(klog(
                    'E',
                    "kuberuntime_container.go:117",
                    "Failed to create container log",
                    &[("err", s(e.to_string()))],
                ));
                return;
            }
        };
        let mut cmd = Command::new(&c.exe);
        cmd.args(&c.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = match &c.netns {
            Some(ns) => plumb_os::netns::command_in(&mut cmd, ns, false).and_then(|()| cmd.spawn()),
            None => cmd.spawn(),
        };
        let mut child = match child {
            Ok(ch) => ch,
            Err(e) => {
                k.log(klog(
                    'E',
                    "kuberuntime_manager.go:1256",
                    "Failed to start container",
                    &[
                        ("containerName", s(c.name.as_str())),
                        ("err", s(e.to_string())),
                    ],
                ));
                return;
            }
        };
        let pumps = [
            pump(
                child.stdout.take().expect("stdout"),
                Stream::Stdout,
                Arc::clone(&log),
            ),
            pump(
                child.stderr.take().expect("stderr"),
                Stream::Stderr,
                Arc::clone(&log),
            ),
        ];
        let pid = child.id();
        k.set(idx, |st| {
            st.state = "running".into();
            st.reason.clear();
            st.pid = Some(pid);
            st.restarts = restarts;
        });
        let started = Instant::now();
        let mut failures = 0;
        let mut next_probe = c
            .liveness
            .as_ref()
            .map(|p| started + Duration::from_millis(p.initial_delay_ms));
        let code = loop {
            if terminating() {
                kill(&mut child, Duration::from_secs(2));
                return;
            }
            if let Ok(Some(status)) = child.try_wait() {
                break status.code().unwrap_or(137);
            }
            if let (Some(p), Some(at)) = (&c.liveness, next_probe)
                && Instant::now() >= at
            {
                next_probe = Some(at + Duration::from_millis(p.period_ms));
                match probe_ok(p) {
                    Ok(()) => failures = 0,
                    Err(output) => {
                        failures += 1;
                        k.log(klog(
                            'I',
                            "prober.go:107",
                            "Probe failed",
                            &[
                                ("probeType", s("Liveness")),
                                ("pod", s(podref.as_str())),
                                ("podUID", s(pod.uid.as_str())),
                                ("containerName", s(c.name.as_str())),
                                ("probeResult", s("failure")),
                                ("output", s(output)),
                            ],
                        ));
                        if failures >= p.failure_threshold {
                            k.log(klog(
                                'I',
                                "kuberuntime_manager.go:1057",
                                "Message for Container of pod",
                                &[
                                    ("containerName", s(c.name.as_str())),
                                    ("pod", s(podref.as_str())),
                                    (
                                        "containerMessage",
                                        s(format!(
                                            "Container {} failed liveness probe, will be restarted",
                                            c.name
                                        )),
                                    ),
                                ],
                            ));
                            kill(&mut child, Duration::from_secs(2));
                            break 137;
                        }
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        for p in pumps {
            let _ = p.join();
        }
        let restart = match c.restart {
            Restart::Always => true,
            Restart::OnFailure => code != 0,
        };
        k.set(idx, |st| {
            st.pid = None;
            st.last_exit_code = Some(code);
            if restart {
                st.state = "waiting".into();
                st.reason = "CrashLoopBackOff".into();
            } else {
                st.state = "terminated".into();
                st.reason = "Completed".into();
            }
        });
        if !restart {
            return;
        }
        let backoff = Duration::from_millis(
            c.backoff_initial_ms
                .saturating_mul(1u64 << restarts.min(16))
                .min(c.backoff_max_ms),
        );
        k.log(klog('E', "pod_workers.go:1301", "Error syncing pod, skipping", &[
            ("err", s(format!(
                "failed to \"StartContainer\" for \"{}\" with CrashLoopBackOff: \"back-off {} restarting failed container={} pod={}_{}({})\"",
                c.name, go_duration(backoff), c.name, pod.name, pod.namespace, pod.uid
            ))),
            ("pod", s(podref.as_str())),
            ("podUID", s(pod.uid.as_str())),
        ]));
        if !nap(backoff) {
            return;
        }
        restarts += 1;
    }
}

/// Runs the kubelet until SIGTERM.
pub fn main(f: &Flags) -> Result<i32, String> {
    let root = PathBuf::from(f.req("root")?);
    let pods: Vec<PodSpec> = serde_json::from_str(
        &std::fs::read_to_string(f.req("pods-file")?).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    let log_path = root.join("var/lib/rancher/rke2/agent/logs/kubelet.log");
    let log = LogFile::open(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
    let tools = Tools::new(f.get("iptables").unwrap_or("iptables"));
    let mut statuses = Vec::new();
    for p in &pods {
        for c in &p.containers {
            statuses.push(ContainerStatus {
                pod: format!("{}/{}", p.namespace, p.name),
                container: c.name.clone(),
                state: "waiting".into(),
                reason: "ContainerCreating".into(),
                restarts: 0,
                pid: None,
                last_exit_code: None,
            });
        }
    }
    let k = Arc::new(Kubelet {
        log: Mutex::new(log),
        statuses: Arc::new(Mutex::new(statuses)),
        status_file: PathBuf::from(f.req("status-file")?),
        root,
    });
    write_status(&k.status_file, &k.statuses);
    k.log(klog(
        'I',
        "server.go:484",
        "Kubelet version",
        &[("kubeletVersion", s("v1.31.4+rke2r1"))],
    ));

    // kubelet_network_linux.go: the iptables chains kubelet owns.
    let cluster = super::kube_proxy::lab_cluster(
        1,
        "plumb-node",
        crate::topology::NODE_IP,
        "192.168.100.11:6443".parse().unwrap(),
    );
    let rules =
        plumb_kubeproxy::KubeProxyRules::new(&cluster, &plumb_kubeproxy::ProxierOptions::default());
    match crate::iptables::ensure(&tools, &rules.kubelet_bootstrap(), &rules.mark_text) {
        Ok(()) => k.log(klog(
            'I',
            "kubelet_network_linux.go:50",
            "Initialized iptables rules.",
            &[("protocol", s("IPv4"))],
        )),
        Err(e) => k.log(klog(
            'E',
            "kubelet_network_linux.go:53",
            "Failed to initialize iptables rules; some functionality may be missing.",
            &[("protocol", s("IPv4")), ("err", s(e.output))],
        )),
    }

    // Pods start when the lab says the node is ready (after the agent took its snapshot).
    if let Some(start_file) = f.get("start-file") {
        while !Path::new(start_file).exists() {
            if !nap(Duration::from_millis(20)) {
                return Ok(0);
            }
        }
    }
    let mut threads = Vec::new();
    let mut idx = 0;
    for p in pods {
        for c in p.containers.clone() {
            let k = Arc::clone(&k);
            let p = p.clone();
            let i = idx;
            idx += 1;
            k.log(klog(
                'I',
                "kubelet.go:2459",
                "SyncLoop ADD",
                &[
                    ("source", s("file")),
                    ("pods", raw(format!("[\"{}/{}\"]", p.namespace, p.name))),
                ],
            ));
            threads.push(std::thread::spawn(move || run_container(&k, i, &p, &c)));
        }
    }
    for t in threads {
        let _ = t.join();
    }
    while nap(Duration::from_millis(200)) {}
    Ok(0)
}
