//! kube-proxy emulator (iptables mode, 1.28+ behaviour), following kubernetes
//! `pkg/proxy/iptables/proxier.go`, `pkg/proxy/healthcheck/proxy_health.go` and
//! `pkg/util/iptables`:
//!
//! - rules come from `plumb_kubeproxy` (the same printer the generator tests prove against
//!   the kernel): a full sync at start, after a failure and when the canary vanished
//!   (`iptables-restore -w 5 -W 100000 --noflush --counters` of the full payload, after
//!   `EnsureChain`/`EnsureRule(Prepend)` of its hook rules with `iptables -N/-C/-I`); every
//!   `--sync-period` and after each endpoint change a partial sync (top-level chains plus
//!   changed chains only), which fails with "Chain 'KUBE-SVC-…' does not exist" when
//!   someone deleted service chains behind kube-proxy's back;
//! - canary monitor: every sync period (on its own timer, half a period out of phase with
//!   the sync loop) it checks `mangle KUBE-PROXY-CANARY`; when gone it waits up to 5 s for
//!   the nat and filter canaries to go too, then forces a full sync (`monitor` in
//!   `pkg/util/iptables`, messages logged at -v=2);
//! - /healthz and /livez on `--healthz-bind-address` (default 127.0.0.1:10256): both 503
//!   once an update has been queued (a Service/EndpointSlice change) and not applied for
//!   2 x sync period; /healthz also 503 when the node is not eligible
//!   (`--node-eligible=false` models a node being deleted or tainted
//!   ToBeDeletedByClusterAutoscaler). Periodic syncs queue nothing, so a node whose rules
//!   are wiped with no pending change still answers 200, as the real one does;
//! - metrics on `--metrics-bind-address` (127.0.0.1:10249) with kube-proxy's names;
//! - klog lines on stderr (kubelet writes them into the CRI pod log), at -v=2.
//!
//! Services come from `plumb_kubeproxy::generate` (`--services` ports, deterministic); the
//! `kubernetes` Service's endpoint is `--api-endpoint`.
//!
//! One lab deviation from kube-proxy's bytes, on the nft backend only: each table of a
//! full-sync payload starts with a chainless `-S` (a read; see `with_chain_cache_hint`
//! for why: iptables-nft's `--noflush` restore is quadratic in the chains a payload names).
//! `--exact-restore-payload` turns it off.
//!
//! `--model-ufw-lock-contention` is the one modelled (not emergent) behaviour, used by the
//! ufw-active scenario only: after the first successful sync, while UFW's chains exist,
//! each sync waits 5 s and fails with the message kube-proxy logs when iptables-restore
//! cannot take the xtables lock. docs/lab.md explains why. `--endpoint-churn=D` moves one
//! endpoint every D (a pod restart somewhere); `--drop-endpoints=NS/NAME
//! --drop-endpoints-after=D` removes a Service's endpoints (its ports get REJECT rules).

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use plumb_kubeproxy::{Cluster, GeneratorConfig, KubeProxyRules, ProxierOptions, generate};

use super::{Flags, go_duration, nap, terminating};
use crate::clock::{Utc, go_string_of};
use crate::http;
use crate::iptables::Tools;
use crate::logfmt::{KlogValue, klog, raw, s};

/// Full syncs happen at least this often even without failures (`proxyutil.FullSyncPeriod`).
const FULL_SYNC_PERIOD: Duration = Duration::from_secs(3600);

struct Options {
    services: usize,
    sync_period: Duration,
    min_sync_period: Duration,
    healthz: SocketAddr,
    metrics: SocketAddr,
    node_name: String,
    node_ip: Ipv4Addr,
    api_endpoint: SocketAddrV4,
    tools: Tools,
    node_eligible: bool,
    churn: Option<Duration>,
    drop_endpoints: Option<(String, Duration)>,
    version: String,
    model_ufw_lock: bool,
    /// Only ClusterIP Services (`--cluster-ip-only`, a lab flag).
    cluster_ip_only: bool,
    /// Full syncs get [`with_chain_cache_hint`] (nft backend, unless `--exact-restore-payload`).
    chain_cache_hint: bool,
}

fn options(f: &Flags) -> Result<Options, String> {
    let churn = f.duration_or("endpoint-churn", Duration::ZERO)?;
    let mut tools = Tools::new(f.get("iptables").unwrap_or("iptables"));
    if f.bool_or("model-nf-tables-einval", false)? {
        tools = tools.with_nf_tables_refused();
    }
    let drop = match f.get("drop-endpoints") {
        Some(svc) => Some((
            svc.to_string(),
            f.duration_or("drop-endpoints-after", Duration::from_secs(2))?,
        )),
        None => None,
    };
    Ok(Options {
        services: f.parse_or("services", 8)?,
        sync_period: f.duration_or("iptables-sync-period", Duration::from_secs(30))?,
        min_sync_period: f.duration_or("iptables-min-sync-period", Duration::from_secs(1))?,
        healthz: f.parse_or("healthz-bind-address", "127.0.0.1:10256".parse().unwrap())?,
        metrics: f.parse_or("metrics-bind-address", "127.0.0.1:10249".parse().unwrap())?,
        node_name: f
            .get("hostname-override")
            .unwrap_or("plumb-node")
            .to_string(),
        node_ip: f.parse_or("bind-address", Ipv4Addr::new(192, 168, 100, 10))?,
        api_endpoint: f.parse_or("api-endpoint", "192.168.100.11:6443".parse().unwrap())?,
        node_eligible: f.bool_or("node-eligible", true)?,
        churn: (!churn.is_zero()).then_some(churn),
        drop_endpoints: drop,
        version: f.get("version").unwrap_or("v1.31.4+rke2r1").to_string(),
        model_ufw_lock: f.bool_or("model-ufw-lock-contention", false)?,
        cluster_ip_only: f.bool_or("cluster-ip-only", false)?,
        chain_cache_hint: !f.bool_or("exact-restore-payload", false)? && tools.is_nft(),
        tools,
    })
}

/// The cluster kube-proxy programs in the lab: `services` generated ports, no service
/// without endpoints, and `default/kubernetes` pointing at `api`.
pub fn lab_cluster(
    services: usize,
    node_name: &str,
    node_ip: Ipv4Addr,
    api: SocketAddrV4,
) -> Cluster {
    lab_cluster_with(services, node_name, node_ip, api, false)
}

/// [`lab_cluster`], with only ClusterIP Services when `cluster_ip_only` (no NodePort,
/// LoadBalancer or external IP, hence no KUBE-EXT/KUBE-FW chains).
pub fn lab_cluster_with(
    services: usize,
    node_name: &str,
    node_ip: Ipv4Addr,
    api: SocketAddrV4,
    cluster_ip_only: bool,
) -> Cluster {
    let mut config = GeneratorConfig {
        services: services.max(1),
        node_name: node_name.to_string(),
        node_ip,
        no_endpoints_fraction: 0.0,
        endpoints_per_service: 2,
        ..GeneratorConfig::default()
    };
    if cluster_ip_only {
        config.nodeport_fraction = 0.0;
        config.load_balancer_fraction = 0.0;
        config.external_ip_fraction = 0.0;
        config.local_policy_fraction = 0.0;
        config.internal_local_fraction = 0.0;
    }
    let mut cluster = generate(&config).expect("generator config is valid");
    if let Some(k) = cluster
        .services
        .iter_mut()
        .find(|s| s.name.namespace == "default" && s.name.name == "kubernetes")
    {
        for e in &mut k.endpoints {
            e.addr = api;
            e.is_local = false;
        }
    }
    cluster
}

/// kube-proxy's health state (`ProxyHealthServer`), one IP family.
#[derive(Debug)]
struct Health {
    start: Instant,
    timeout: Duration,
    last_updated: Option<Instant>,
    oldest_pending: Option<Instant>,
    node_eligible: bool,
    counters: BTreeMap<String, u64>,
}

impl Health {
    fn queued_update(&mut self) {
        self.oldest_pending.get_or_insert_with(Instant::now);
    }

    fn updated(&mut self) {
        self.oldest_pending = None;
        self.last_updated = Some(Instant::now());
    }

    /// (healthy, lastUpdated) as `isHealthy` computes them.
    fn is_healthy(&self) -> (bool, Option<Instant>) {
        let Some(last) = self.last_updated else {
            return (true, None);
        };
        match self.oldest_pending {
            Some(p) if p.elapsed() >= self.timeout => (false, Some(last)),
            _ => (true, Some(last)),
        }
    }

    fn count(&mut self, key: &str) {
        *self.counters.entry(key.to_string()).or_default() += 1;
    }
}

const GO_ZERO_TIME: &str = "0001-01-01 00:00:00 +0000 UTC";

fn serve_health(listener: TcpListener, health: Arc<Mutex<Health>>) {
    for stream in listener.incoming().flatten() {
        let health = Arc::clone(&health);
        std::thread::spawn(move || {
            let Ok(req) = http::read_request(&stream) else {
                return;
            };
            let now = Instant::now();
            let mut h = health.lock().expect("health lock");
            let (healthy, last) = h.is_healthy();
            let fmt = |t: Option<Instant>| {
                t.map_or(GO_ZERO_TIME.to_string(), |t| go_string_of(t, h.start))
            };
            let current = go_string_of(now, h.start);
            let (status, body) = match req.path() {
                "/healthz" => {
                    let ok = healthy && h.node_eligible;
                    let last = if ok { current.clone() } else { fmt(last) };
                    let body = format!(
                        r#"{{"lastUpdated": {},"currentTime": {}, "nodeEligible": {}}}"#,
                        crate::logfmt::quote(&last),
                        crate::logfmt::quote(&current),
                        h.node_eligible
                    );
                    let code = if ok { 200 } else { 503 };
                    h.count(&format!("kubeproxy_proxy_healthz_total{{code=\"{code}\"}}"));
                    (code, body)
                }
                "/livez" => {
                    let last = if healthy { current.clone() } else { fmt(last) };
                    let body = format!(
                        r#"{{"lastUpdated": {},"currentTime": {}}}"#,
                        crate::logfmt::quote(&last),
                        crate::logfmt::quote(&current)
                    );
                    let code = if healthy { 200 } else { 503 };
                    h.count(&format!("kubeproxy_proxy_livez_total{{code=\"{code}\"}}"));
                    (code, body)
                }
                _ => (404, "404 page not found\n".to_string()),
            };
            drop(h);
            let ct = if status == 404 {
                "text/plain; charset=utf-8"
            } else {
                "application/json"
            };
            let _ = http::write_response(
                &stream,
                status,
                ct,
                &[("X-Content-Type-Options", "nosniff")],
                body.as_bytes(),
            );
        });
    }
}

fn serve_metrics(listener: TcpListener, health: Arc<Mutex<Health>>) {
    for stream in listener.incoming().flatten() {
        if http::read_request(&stream).is_err() {
            continue;
        }
        let h = health.lock().expect("health lock");
        let mut body = String::new();
        for (k, v) in &h.counters {
            let name = k.split('{').next().unwrap_or(k);
            if k.ends_with("_seconds") {
                body.push_str(&format!("# TYPE {name} gauge\n{k} {v}\n"));
            } else {
                body.push_str(&format!("# TYPE {name} counter\n{k} {v}\n"));
            }
        }
        drop(h);
        let _ = http::write_response(
            &stream,
            200,
            "text/plain; version=0.0.4",
            &[],
            body.as_bytes(),
        );
    }
}

fn log(line: String) {
    eprintln!("{line}");
}

fn info(file: &str, msg: &str, kvs: &[(&str, KlogValue)]) {
    log(klog('I', file, msg, kvs));
}

struct Proxier {
    opts: Options,
    cluster: Cluster,
    applied: Option<KubeProxyRules>,
    need_full_sync: bool,
    last_full_sync: Option<Instant>,
    health: Arc<Mutex<Health>>,
}

impl Proxier {
    /// `EnsureChain` + `EnsureRule(Prepend)` for kube-proxy's part of the bootstrap.
    fn ensure_jumps(&self, rules: &KubeProxyRules) -> Result<(), ()> {
        crate::iptables::ensure(&self.opts.tools, &rules.proxy_bootstrap(), &rules.mark_text)
            .map_err(|e| {
                let msg = if e.what == "chain" {
                    "Failed to ensure chain exists"
                } else {
                    "Failed to ensure chain jumps"
                };
                log(klog(
                    'E',
                    "proxier.go:767",
                    msg,
                    &[("err", s(e.output.trim())), ("table", s(e.table))],
                ));
            })
    }

    fn ufw_active(&self) -> bool {
        let args = ["-t", "filter", "-S", "ufw-user-input"].map(String::from);
        // UFW writes with the system's iptables, whatever backend kube-proxy uses.
        Tools::new("iptables")
            .run(&args)
            .map(|o| o.ok())
            .unwrap_or(false)
    }

    /// The monitor's set-up: `EnsureChain` of the canary in mangle, nat and filter; false
    /// (logged as kube-proxy does) when iptables cannot create them.
    fn setup_canaries(&self) -> bool {
        for table in ["mangle", "nat", "filter"] {
            let args = ["-t", table, "-N", "KUBE-PROXY-CANARY"].map(String::from);
            match self.opts.tools.run(&args) {
                // Exit 1 with "Chain already exists" is success for EnsureChain.
                Ok(o) if o.ok() || o.combined.contains("already exists") => {}
                Ok(o) => {
                    log(klog(
                        'E',
                        "iptables.go:733",
                        "Could not set up iptables canary",
                        &[
                            (
                                "err",
                                s(format!(
                                    "error creating chain \"KUBE-PROXY-CANARY\": exit status {}: {}",
                                    o.code,
                                    o.combined.trim()
                                )),
                            ),
                            ("table", s(table)),
                            ("chain", s("KUBE-PROXY-CANARY")),
                        ],
                    ));
                    return false;
                }
                Err(_) => return false,
            }
        }
        true
    }

    fn canary_present(&self, table: &str) -> bool {
        let args = ["-t", table, "-S", "KUBE-PROXY-CANARY"].map(String::from);
        self.opts.tools.run(&args).map(|o| o.ok()).unwrap_or(true)
    }

    fn sync(&mut self) -> bool {
        let start = Instant::now();
        let full = self.need_full_sync
            || self.applied.is_none()
            || self
                .last_full_sync
                .is_none_or(|t| t.elapsed() > FULL_SYNC_PERIOD);
        info("proxier.go:805", "Syncing iptables rules", &[]);
        let rules = KubeProxyRules::new(&self.cluster, &ProxierOptions::default());
        if full && self.ensure_jumps(&rules).is_err() {
            return self.failed(full);
        }
        if self.opts.model_ufw_lock && self.applied.is_some() && self.ufw_active() {
            // MODEL (ufw-active scenario, docs/lab.md): after kube-proxy's first sync, UFW's
            // reloads keep the xtables lock busy and the restore gives up after its -w 5.
            if !nap(Duration::from_secs(5)) {
                return false;
            }
            log(klog(
                'E',
                "proxier.go:1551",
                "Failed to execute iptables-restore",
                &[(
                    "err",
                    s(
                        "exit status 4 (Another app is currently holding the xtables lock. Stopped waiting after 5s.\n)",
                    ),
                )],
            ));
            self.health
                .lock()
                .expect("health lock")
                .count("kubeproxy_sync_proxy_rules_iptables_restore_failures_total");
            return self.failed(full);
        }
        let payload = match (&self.applied, full) {
            (Some(prev), false) => rules.to_partial_restore_payload(prev),
            _ if self.opts.chain_cache_hint => with_chain_cache_hint(&rules.to_restore_payload()),
            _ => rules.to_restore_payload(),
        };
        let (mut fc, mut fr, mut nc, mut nr) = (0, 0, 0, 0);
        let mut table = "";
        for line in payload.lines() {
            if let Some(t) = line.strip_prefix('*') {
                table = if t == "filter" { "filter" } else { "nat" };
            } else if line.starts_with(':') {
                if table == "filter" { fc += 1 } else { nc += 1 }
            } else if line.starts_with("-A") {
                if table == "filter" { fr += 1 } else { nr += 1 }
            }
        }
        info(
            "proxier.go:1519",
            "Reloading service iptables data",
            &[
                ("numServices", raw(self.cluster.services.len())),
                ("numEndpoints", raw(self.cluster.total_endpoints())),
                ("numFilterChains", raw(fc)),
                ("numFilterRules", raw(fr)),
                ("numNATChains", raw(nc)),
                ("numNATRules", raw(nr)),
            ],
        );
        let out = self.opts.tools.restore(
            &["-w", "5", "-W", "100000", "--noflush", "--counters"],
            &payload,
        );
        match out {
            Ok(o) if o.ok() => {
                self.applied = Some(rules);
                self.need_full_sync = false;
                if full {
                    self.last_full_sync = Some(Instant::now());
                }
                let mut h = self.health.lock().expect("health lock");
                h.updated();
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_secs();
                h.counters.insert(
                    "kubeproxy_sync_proxy_rules_last_timestamp_seconds".into(),
                    now,
                );
                drop(h);
                info(
                    "proxier.go:799",
                    "SyncProxyRules complete",
                    &[("elapsed", s(go_duration(start.elapsed())))],
                );
                true
            }
            Ok(o) => {
                // pkg/util/iptables restoreInternal: fmt.Errorf("%w (%s)", err, output).
                // kube-proxy's own payload prints nothing on stdout; the hint's `-S`
                // listing does, and is not part of what kube-proxy would report.
                let output = if full && self.opts.chain_cache_hint {
                    &o.combined[o.stdout.len()..]
                } else {
                    o.combined.as_str()
                };
                let err = format!("exit status {} ({output})", o.code);
                let mut kvs = vec![("err", s(err))];
                if let Some(line) = error_line(output) {
                    kvs.push(("rules", s(extract_lines(&payload, line, 3))));
                }
                log(klog(
                    'E',
                    "proxier.go:1551",
                    "Failed to execute iptables-restore",
                    &kvs,
                ));
                self.health
                    .lock()
                    .expect("health lock")
                    .count("kubeproxy_sync_proxy_rules_iptables_restore_failures_total");
                self.failed(full)
            }
            Err(e) => {
                log(klog(
                    'E',
                    "proxier.go:1551",
                    "Failed to execute iptables-restore",
                    &[("err", s(e.to_string()))],
                ));
                self.failed(full)
            }
        }
    }

    fn failed(&mut self, full: bool) -> bool {
        info(
            "proxier.go:795",
            "Sync failed",
            &[("retryingTime", s(go_duration(self.opts.sync_period)))],
        );
        if !full {
            self.health
                .lock()
                .expect("health lock")
                .count("kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total");
        }
        self.need_full_sync = true;
        false
    }

    fn churn(&mut self, step: u64) {
        let n = self.cluster.services.len();
        let candidates: Vec<usize> = (0..n)
            .filter(|&i| {
                let s = &self.cluster.services[i];
                s.name.namespace != "default" && !s.endpoints.is_empty()
            })
            .collect();
        if candidates.is_empty() {
            return;
        }
        let i = candidates[(step as usize) % candidates.len()];
        let svc = &mut self.cluster.services[i];
        let e = &mut svc.endpoints[0];
        let ip = e.addr.ip().octets();
        e.addr = SocketAddrV4::new(
            Ipv4Addr::new(ip[0], ip[1], ip[2], ip[3].wrapping_add(1).max(2)),
            e.addr.port(),
        );
        svc.endpoints.sort_by_key(|e| e.endpoint_string());
        self.health.lock().expect("health lock").queued_update();
    }

    fn drop_endpoints(&mut self, service: &str) {
        let (ns, name) = service.split_once('/').unwrap_or(("default", service));
        for s in &mut self.cluster.services {
            if s.name.namespace == ns && s.name.name == name {
                s.endpoints.clear();
            }
        }
        self.health.lock().expect("health lock").queued_update();
    }
}

/// LAB DEVIATION (nft backend, full syncs): `payload` with a chainless `-S` as the first
/// command of each table, so iptables-nft fetches the table's whole chain cache instead of
/// building a per-chain request list. Same kernel result, same single transaction per
/// table, same process and command line; the `-S` only reads (it lists the table as it
/// was before the payload, on stdout, which the emulator drops).
///
/// Why: iptables-nft (since 1.8.5, commit f806ee67 "nft: cache: Fetch cache for specific
/// chains"; unchanged in 1.8.9 and 1.8.11) calls `nft_cache_level_set()` for every command
/// it parses (iptables/nft-cmd.c), which unless a command names no chain (`req->all_chains`)
/// inserts the command's chain and jump target into `h->cache_req.chain_list`, a linked
/// list sorted by name, by walking it from the head with `strcmp` (`cache_chain_list_insert`
/// in iptables/nft-cache.c). A `--noflush` restore of kube-proxy's 10k-service payload
/// (31,364 nat chains, 85,470 rules, chains declared in service order, i.e. hash order)
/// walks ~2.3e9 list nodes scattered over the heap: `perf` puts 83 % of the time at that
/// loop and 14 % in `strcmp`; it did not finish in 400 s (docs/benchmarks.md). Real
/// kube-proxy sends the same payload shape (its chain lines follow Go map order) and pays
/// the same cost on such a node; the lab cannot wait minutes, so it sends this one extra
/// read. A flush-mode restore would also avoid the list (its table flush names no chain)
/// but deletes the other owners' rules; kubelet's would go.
fn with_chain_cache_hint(payload: &str) -> String {
    let mut out = String::with_capacity(payload.len() + 16);
    for line in payload.split_inclusive('\n') {
        out.push_str(line);
        if line.starts_with('*') {
            out.push_str("-S\n");
        }
    }
    out
}

/// The line number in "Error occurred at line: N" (iptables-restore's report).
fn error_line(output: &str) -> Option<usize> {
    output
        .lines()
        .find_map(|l| l.strip_prefix("Error occurred at line: "))
        .and_then(|n| n.trim().parse().ok())
}

/// `utiliptables.ExtractLines`: `count` lines of context either side of `line` (1-based).
fn extract_lines(payload: &str, line: usize, count: usize) -> String {
    let lines: Vec<&str> = payload.lines().collect();
    let lo = line.saturating_sub(count).max(1);
    let hi = (line + count).min(lines.len());
    (lo..=hi)
        .map(|n| format!("{n}: {}", lines[n - 1]))
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// Runs the emulator until SIGTERM.
pub fn main(f: &Flags) -> Result<i32, String> {
    let opts = options(f)?;
    let start = Instant::now();
    let health = Arc::new(Mutex::new(Health {
        start,
        timeout: 2 * opts.sync_period,
        last_updated: None,
        oldest_pending: None,
        node_eligible: opts.node_eligible,
        counters: BTreeMap::new(),
    }));
    info("server_linux.go:66", "Using iptables proxy", &[]);
    info(
        "server.go:677",
        "Successfully retrieved node IP(s)",
        &[("IPs", raw(format!("[\"{}\"]", opts.node_ip)))],
    );
    info(
        "server.go:694",
        "kube-proxy running in single-stack mode",
        &[("ipFamily", s("IPv4"))],
    );
    info("server_linux.go:169", "Using iptables Proxier", &[]);
    info(
        "server.go:483",
        "Version info",
        &[
            ("version", s(opts.version.as_str())),
            ("now", s(Utc::now().rfc3339_nanos())),
        ],
    );
    let listener = TcpListener::bind(opts.healthz)
        .map_err(|e| format!("failed to start proxy healthz on {}: {e}", opts.healthz))?;
    let h = Arc::clone(&health);
    std::thread::spawn(move || serve_health(listener, h));
    if let Ok(listener) = TcpListener::bind(opts.metrics) {
        let h = Arc::clone(&health);
        std::thread::spawn(move || serve_metrics(listener, h));
    }
    info("config.go:199", "Starting service config controller", &[]);
    info(
        "config.go:105",
        "Starting endpoint slice config controller",
        &[],
    );
    info("config.go:328", "Starting node config controller", &[]);
    log(klog(
        'I',
        "shared_informer.go:320",
        "Caches are synced for service config",
        &[],
    )
    .replace(
        "\"Caches are synced for service config\"",
        "Caches are synced for service config",
    ));
    let cluster = lab_cluster_with(
        opts.services,
        &opts.node_name,
        opts.node_ip,
        opts.api_endpoint,
        opts.cluster_ip_only,
    );
    let mut p = Proxier {
        cluster,
        applied: None,
        need_full_sync: true,
        last_full_sync: None,
        health: Arc::clone(&health),
        opts,
    };
    // The informers' initial events queue the first sync (Proxier.Sync -> QueuedUpdate).
    health.lock().expect("health lock").queued_update();
    let period = p.opts.sync_period;
    let mut next_sync = Instant::now();
    // pkg/util/iptables Monitor: it first creates the canary chains; when that fails it
    // logs "Could not set up iptables canary" and returns, so no monitor runs.
    let monitor = p.setup_canaries();
    // The canary monitor runs on its own timer (its own goroutine in kube-proxy), out of
    // phase with the sync loop; the lab starts it half a period later.
    let mut next_canary = Instant::now() + period + period / 2;
    let mut next_churn = p.opts.churn.map(|c| Instant::now() + c);
    let mut drop_at = p
        .opts
        .drop_endpoints
        .as_ref()
        .map(|(s, d)| (s.clone(), Instant::now() + *d));
    let mut last_sync = Instant::now() - p.opts.min_sync_period;
    let mut churn_step = 0;
    while !terminating() {
        let now = Instant::now();
        if let Some((svc, at)) = drop_at.clone()
            && now >= at
        {
            p.drop_endpoints(&svc);
            drop_at = None;
            next_sync = next_sync.min(last_sync + p.opts.min_sync_period);
        }
        if let (Some(at), Some(c)) = (next_churn, p.opts.churn)
            && now >= at
        {
            churn_step += 1;
            p.churn(churn_step);
            next_churn = Some(now + c);
            next_sync = next_sync.min(last_sync + p.opts.min_sync_period);
        }
        if monitor && now >= next_canary {
            if !p.canary_present("mangle") {
                // pkg/util/iptables/monitor.go: log, wait (100 ms polls, up to 5 s) for the
                // other tables' canaries to go too, then reload with a full sync.
                info(
                    "iptables.go:751",
                    "IPTables canary deleted",
                    &[("table", s("mangle")), ("chain", s("KUBE-PROXY-CANARY"))],
                );
                let until = Instant::now() + Duration::from_secs(5);
                while ["nat", "filter"].iter().any(|t| p.canary_present(t)) {
                    if Instant::now() >= until {
                        info(
                            "iptables.go:762",
                            "Inconsistent iptables state detected",
                            &[],
                        );
                        break;
                    }
                    if !nap(Duration::from_millis(100)) {
                        return Ok(0);
                    }
                }
                info("iptables.go:770", "Reloading after iptables flush", &[]);
                p.need_full_sync = true;
                next_sync = Instant::now();
            }
            next_canary = now + period;
        }
        if now >= next_sync {
            p.sync();
            last_sync = Instant::now();
            next_sync = last_sync + period;
            continue;
        }
        let mut wake = if monitor {
            next_sync.min(next_canary)
        } else {
            next_sync
        };
        if let Some(c) = next_churn {
            wake = wake.min(c);
        }
        if let Some((_, d)) = &drop_at {
            wake = wake.min(*d);
        }
        if !nap(wake.saturating_duration_since(Instant::now())) {
            break;
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_follows_kube_proxy_semantics() {
        let mut h = Health {
            start: Instant::now(),
            timeout: Duration::from_millis(20),
            last_updated: None,
            oldest_pending: None,
            node_eligible: true,
            counters: BTreeMap::new(),
        };
        assert!(h.is_healthy().0, "healthy while starting up");
        h.queued_update();
        assert!(h.is_healthy().0, "no sync yet: still starting up");
        h.updated();
        h.queued_update();
        assert!(h.is_healthy().0, "pending but not late");
        std::thread::sleep(Duration::from_millis(30));
        assert!(!h.is_healthy().0, "pending for longer than the timeout");
        h.updated();
        assert!(h.is_healthy().0);
    }

    #[test]
    fn chain_cache_hint_lists_each_table_first() {
        let p = "*filter\n:KUBE-SERVICES - [0:0]\nCOMMIT\n*nat\n:KUBE-SVC-X - [0:0]\n-A KUBE-SVC-X -j KUBE-SEP-Y\nCOMMIT\n";
        assert_eq!(
            with_chain_cache_hint(p),
            "*filter\n-S\n:KUBE-SERVICES - [0:0]\nCOMMIT\n*nat\n-S\n:KUBE-SVC-X - [0:0]\n-A KUBE-SVC-X -j KUBE-SEP-Y\nCOMMIT\n"
        );
    }

    #[test]
    fn extracts_context_lines() {
        let p = "a\nb\nc\nd\ne\n";
        assert_eq!(extract_lines(p, 3, 1), "2: b\n3: c\n4: d\n");
        assert_eq!(error_line("x\nError occurred at line: 12\nTry"), Some(12));
    }

    #[test]
    fn lab_cluster_points_kubernetes_at_the_api_endpoint() {
        let api: SocketAddrV4 = "192.168.100.11:6443".parse().unwrap();
        let c = lab_cluster(5, "n", Ipv4Addr::new(192, 168, 100, 10), api);
        let k = c
            .services
            .iter()
            .find(|s| s.name.name == "kubernetes")
            .unwrap();
        assert_eq!(k.cluster_ip, Ipv4Addr::new(10, 43, 0, 1));
        assert_eq!(k.endpoints[0].addr, api);
        assert!(c.services.iter().all(|s| !s.endpoints.is_empty()));
    }
}
