//! kube-proxy's own signals: `kube-proxy-restore-failures` (its iptables-restore fails —
//! "Chain 'KUBE-SVC-…' does not exist" means something deleted its chains under it),
//! `kube-proxy-unhealthy` (/healthz not 200) and `kube-proxy-probe-semantics` (/healthz 503
//! while /livez 200: the split between dataplane health and liveness, KEP-3836; worth
//! checking, but not a cause on its own). Its logs also show when the node's userspace
//! does not fit: `iptables-userspace-incompatible` (its iptables cannot talk to the
//! kernel's nf_tables, or rejects options it writes), `kube-proxy-nft-unavailable`
//! (nftables mode without a usable `nft`) and `kube-proxy-conntrack-permission` (it may not
//! set the conntrack sysctls). `kubernetes-service-not-translated`: no DNAT for the
//! `kubernetes` ClusterIP:443 in the ruleset right now, on a node where kube-proxy runs —
//! what the node and its pods need to reach the API through the Service; stated however
//! the rules vanished, so a revert that leaves no kube-proxy chain at all still shows in
//! kube-proxy's findings.

use crate::context::{Ctx, entry_evidence, fact_evidence, log_evidence};
use plumb_facts::parse::logs::Signal;
use plumb_facts::timeline::Entry;
use plumb_findings::{Finding, Severity};

/// Finding id: kube-proxy's iptables-restore fails, typically with `Chain 'KUBE-SVC-…'
/// does not exist` (its chains were deleted under it).
pub const ID_RESTORE: &str = "kube-proxy-restore-failures";
/// Finding id: kube-proxy's `/healthz` is not 200, or its container crash-loops.
pub const ID_UNHEALTHY: &str = "kube-proxy-unhealthy";
/// Finding id: kube-proxy's liveness probe asks `/healthz`, which fails while it waits
/// for the node, instead of `/livez`.
pub const ID_PROBES: &str = "kube-proxy-probe-semantics";
/// Finding id: kube-proxy's iptables cannot write to this kernel's nf_tables (generation
/// errors, rejected options).
pub const ID_IPTABLES: &str = "iptables-userspace-incompatible";
/// Finding id: kube-proxy in nftables mode cannot run the `nft` binary.
pub const ID_NFT: &str = "kube-proxy-nft-unavailable";
/// Finding id: kube-proxy may not set `nf_conntrack_max` (unprivileged or containerised).
pub const ID_CONNTRACK_PERM: &str = "kube-proxy-conntrack-permission";
/// Finding id: no DNAT for the `kubernetes` ClusterIP:443 in the ruleset right now, on a
/// node where kube-proxy runs.
pub const ID_NO_DNAT: &str = "kubernetes-service-not-translated";

/// Answers for every kube-proxy id from its health endpoints, its static pod's probe
/// paths and its logs.
pub fn check(ctx: &Ctx) -> Vec<Finding> {
    if let Some(why) = no_kube_proxy_by_design(ctx) {
        return [
            ID_RESTORE,
            ID_UNHEALTHY,
            ID_PROBES,
            ID_IPTABLES,
            ID_NFT,
            ID_CONNTRACK_PERM,
            ID_NO_DNAT,
        ]
        .iter()
        .map(|id| Finding::ok(id, &why))
        .collect();
    }
    vec![
        restore(ctx),
        unhealthy(ctx),
        probes(ctx),
        iptables_incompatible(ctx),
        nft_unavailable(ctx),
        conntrack_permission(ctx),
        kubernetes_dnat(ctx),
    ]
}

/// A distribution that runs no kube-proxy (MicroShift: OVN-Kubernetes translates Services;
/// openshift/microshift docs) where nothing shows one anyway: kube-proxy's checks have
/// nothing to judge, and say why instead of "no kube-proxy log was readable".
///
/// Likewise a kube-proxy-free node (Cilium's kube-proxy replacement, RKE2's
/// `disable-kube-proxy`, k3s's `--disable-kube-proxy`) that shows no kube-proxy: its
/// absence is the design, not a fault (`cilium-service-dataplane` says what translates
/// Services instead).
fn no_kube_proxy_by_design(ctx: &Ctx) -> Option<String> {
    if kube_proxy_expected(ctx).is_some() {
        return None;
    }
    if ctx.facts.distribution.as_deref() == Some("microshift") {
        return Some("MicroShift runs no kube-proxy (OVN-Kubernetes translates Services): nothing of kube-proxy's to check".into());
    }
    super::cilium::kube_proxy_free(ctx.facts)
        .map(|why| format!("kube-proxy-free node ({why}): nothing of kube-proxy's to check"))
}

/// Signs that kube-proxy runs on this node (its process, logs, static pod manifest, a
/// health reply, or its chains in the ruleset): a node without it (Cilium's kube-proxy
/// replacement, OVN-Kubernetes) translates Services elsewhere.
pub(crate) fn kube_proxy_expected(ctx: &Ctx) -> Option<String> {
    let f = ctx.facts;
    if let Some(p) = f
        .processes
        .value()
        .and_then(|ps| ps.iter().find(|p| p.comm == "kube-proxy"))
    {
        return Some(format!("process kube-proxy[{}]", p.pid));
    }
    // k3s runs kube-proxy inside its own process unless told not to (docs.k3s.io: k3s
    // server --disable-kube-proxy).
    if let Some(p) = f.processes.value().and_then(|ps| {
        ps.iter()
            .find(|p| p.comm == "k3s" && !p.args.contains("--disable-kube-proxy"))
    }) {
        return Some(format!("kube-proxy inside process k3s[{}]", p.pid));
    }
    if let Some(l) = f
        .pod_logs
        .iter()
        .find(|l| l.pod.as_ref().is_some_and(|p| p.container == "kube-proxy"))
    {
        return Some(format!("kube-proxy's log {}", l.path));
    }
    if let Some(src) = f.kube_proxy_probes.source() {
        return Some(format!("kube-proxy's manifest {src}"));
    }
    if f.kube_proxy_healthz.value().is_some() {
        return Some("kube-proxy's /healthz answers".into());
    }
    None
}

/// "no DNAT for 10.43.0.1:443 right now" as evidence, for the diagnoses of whatever
/// deletes kube-proxy's rules (a revert can leave no kube-proxy chain at all, and then no
/// ruleset check has anything of kube-proxy's to report).
pub fn no_dnat_evidence(ctx: &Ctx) -> Option<plumb_findings::Evidence> {
    use crate::context::{KUBERNETES_SERVICE_PORT, KubernetesDnat};
    let KubernetesDnat::Absent { services, source } = &ctx.kubernetes_dnat else {
        return None;
    };
    kube_proxy_expected(ctx)?;
    Some(fact_evidence(
        source,
        format!(
            "no DNAT for the kubernetes Service {}:{KUBERNETES_SERVICE_PORT} right now ({services} kube-proxy service port(s) in the ruleset)",
            ctx.values.kubernetes_clusterip
        ),
    ))
}

fn kubernetes_dnat(ctx: &Ctx) -> Finding {
    use crate::context::{KUBERNETES_SERVICE_PORT, KubernetesDnat};
    let target = format!(
        "{}:{KUBERNETES_SERVICE_PORT}",
        ctx.values.kubernetes_clusterip
    );
    match &ctx.kubernetes_dnat {
        KubernetesDnat::NotJudged(why) => Finding::unknown(
            ID_NO_DNAT,
            Severity::Critical,
            format!("whether the kubernetes Service {target} is translated was not checked: {why}"),
        ),
        KubernetesDnat::Present { endpoints, source } => Finding::ok(
            ID_NO_DNAT,
            format!(
                "the kubernetes Service {target} is translated to {} ({source})",
                endpoints.join(", ")
            ),
        ),
        KubernetesDnat::Absent { services, source } => {
            let Some(sign) = kube_proxy_expected(ctx) else {
                return Finding::ok(
                    ID_NO_DNAT,
                    format!(
                        "no kube-proxy on this node: the kubernetes Service {target} is not translated in netfilter, as expected"
                    ),
                );
            };
            let defaulted = ctx.values.network.kubernetes_clusterip.default;
            Finding::problem(
                ID_NO_DNAT,
                Severity::Critical,
                format!("no DNAT for the kubernetes Service {target} right now"),
            )
            .with_evidence([
                fact_evidence(
                    source,
                    format!(
                        "{services} kube-proxy service port(s) in the ruleset, none for {target} with an endpoint"
                    ),
                ),
                fact_evidence("kube-proxy", format!("kube-proxy runs here: {sign}")),
                fact_evidence(
                    "kubernetes ClusterIP",
                    format!(
                        "{} from {}",
                        ctx.values.network.kubernetes_clusterip.value,
                        ctx.values.network.kubernetes_clusterip.source
                    ),
                ),
            ])
            .explain(format!(
                "Every pod (the CNI installer, CoreDNS, controllers) and the node itself reach the API server through the `kubernetes` Service. kube-proxy writes its DNAT on every full sync; at this moment the ruleset holds none{}, so connections to {target} go nowhere until kube-proxy writes it again. If it comes and goes, something deletes kube-proxy's rules between its syncs.",
                if defaulted { " (the ClusterIP is a default: nothing on the node said which it is)" } else { "" }
            ))
            .fix(format!(
                "Read kube-proxy's log for failed syncs (`iptables-restore` errors, \"Chain ... does not exist\") and re-run `plumb doctor` after its next full sync: if {target} is still not translated, kube-proxy cannot write or something removes its rules."
            ))
            .fix("Find the writer that removes them: `plumb watch` names each process that changes kube-proxy's chains (a security agent's revert, a firewall reload, a CNI cleanup).")
            .do_not("flush iptables or restart kube-proxy in a loop: if something keeps deleting its rules, they disappear again; fix the cause.")
        }
    }
}

/// What kubelet's history says about kube-proxy: liveness kills, probe failures (with
/// their HTTP codes), back-offs.
struct History<'a> {
    kills: Vec<&'a Entry>,
    probe_failures: Vec<&'a Entry>,
    back_offs: Vec<&'a Entry>,
    /// Restarts the timeline counts (log files and kills).
    restarts: u32,
}

impl<'a> History<'a> {
    fn of(ctx: &'a Ctx) -> History<'a> {
        let t = &ctx.timeline;
        History {
            kills: t
                .about(Some("kube-proxy"), Signal::LivenessRestart)
                .collect(),
            probe_failures: t
                .about(Some("kube-proxy"), Signal::ProbeFailed)
                .filter(|e| e.probe != Some("readiness"))
                .collect(),
            back_offs: t.about(Some("kube-proxy"), Signal::BackOff).collect(),
            restarts: t.container("kube-proxy").map_or(0, |c| c.restarts),
        }
    }

    fn crash_looping(&self) -> bool {
        self.kills.len() >= 2 || !self.back_offs.is_empty()
    }

    /// `HTTP 503 x4`.
    fn codes(&self) -> String {
        let mut codes: std::collections::BTreeMap<u16, usize> = Default::default();
        for c in self
            .probe_failures
            .iter()
            .chain(&self.kills)
            .filter_map(|e| e.code)
        {
            *codes.entry(c).or_default() += 1;
        }
        codes
            .iter()
            .map(|(c, n)| format!("HTTP {c} x{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn summary(&self) -> String {
        let mut parts = Vec::new();
        if !self.kills.is_empty() {
            parts.push(format!(
                "kubelet killed it {} times after failed liveness probes",
                self.kills.len()
            ));
        }
        if !self.probe_failures.is_empty() {
            let codes = self.codes();
            parts.push(format!(
                "{} failed probes{}",
                self.probe_failures.len(),
                if codes.is_empty() {
                    String::new()
                } else {
                    format!(" ({codes})")
                }
            ));
        }
        if !self.back_offs.is_empty() {
            parts.push(format!(
                "{} CrashLoopBackOff back-offs",
                self.back_offs.len()
            ));
        }
        if self.restarts > 0 {
            parts.push(format!("{} restarts in its logs", self.restarts));
        }
        parts.join(", ")
    }

    fn evidence(&self) -> Vec<plumb_findings::Evidence> {
        let mut all: Vec<&Entry> = self
            .kills
            .iter()
            .chain(&self.probe_failures)
            .chain(&self.back_offs)
            .copied()
            .collect();
        all.sort_by_key(|e| e.n);
        all.iter()
            .rev()
            .take(6)
            .rev()
            .map(|e| entry_evidence(e))
            .collect()
    }
}

/// The liveness and startup probe paths of kube-proxy's static pod, with the manifest.
fn probes_healthz<'a>(ctx: &Ctx<'a>) -> Option<&'a str> {
    let p = ctx.facts.kube_proxy_probes.value()?;
    (p.liveness.as_deref() == Some("/healthz") || p.startup.as_deref() == Some("/healthz")).then(
        || {
            ctx.facts
                .kube_proxy_probes
                .source()
                .unwrap_or("the kube-proxy manifest")
        },
    )
}

fn restore(ctx: &Ctx) -> Finding {
    let missing = ctx.pod_signals(Some("kube-proxy"), Signal::ChainDoesNotExist);
    let failed = ctx.pod_signals(Some("kube-proxy"), Signal::RestoreFailed);
    let logs_read = ctx.facts.container_logs("kube-proxy").count();
    if missing.is_empty() && failed.is_empty() {
        return if logs_read > 0 {
            Finding::ok(
                ID_RESTORE,
                "kube-proxy's log shows no iptables-restore failures",
            )
        } else {
            Finding::unknown(ID_RESTORE, Severity::High, "no kube-proxy log was readable")
        };
    }
    let title = if missing.is_empty() {
        format!(
            "kube-proxy's iptables-restore failed {} times",
            failed.len()
        )
    } else {
        format!(
            "kube-proxy's iptables-restore failed {} times because its own chains had been deleted (\"Chain ... does not exist\")",
            missing.len().max(failed.len())
        )
    };
    Finding::problem(ID_RESTORE, Severity::High, title)
        .with_evidence(missing.iter().chain(failed.iter()).rev().take(6).map(|(f, l)| log_evidence(f, l)))
        .explain(
            "kube-proxy applies changes with partial `iptables-restore --noflush` payloads that jump to chains it created \
             earlier. \"Chain 'KUBE-SVC-…' does not exist\" means another process deleted those chains between syncs; \
             every partial sync then fails until the next full resync, and services flap.",
        )
        .fix("Find the process that deletes kube-proxy's chains (`plumb watch` names it) and stop it from doing so.")
}

fn unhealthy(ctx: &Ctx) -> Finding {
    let f = ctx.facts;
    if f.rke2_config.value().and_then(|c| c.disable_kube_proxy) == Some(true) {
        return Finding::ok(
            ID_UNHEALTHY,
            "kube-proxy is disabled in RKE2's config (disable-kube-proxy: true): another dataplane replaces it",
        );
    }
    let history = History::of(ctx);
    let Some(h) = f.kube_proxy_healthz.value() else {
        if history.crash_looping() {
            return crash_loop(ctx, &history, None);
        }
        return not_answering(ctx);
    };
    let src = ctx.facts.kube_proxy_healthz.source().unwrap_or("");
    if h.status == 200 {
        if history.crash_looping() {
            return crash_loop(
                ctx,
                &history,
                Some(format!("/healthz answers 200 right now ({src})")),
            );
        }
        return Finding::ok(
            ID_UNHEALTHY,
            format!("kube-proxy /healthz answers 200 ({src})"),
        );
    }
    let eligible = h.proxy_health().and_then(|p| p.node_eligible);
    Finding::problem(ID_UNHEALTHY, Severity::High, format!("kube-proxy /healthz answers {}", h.status))
        .with_evidence([fact_evidence(src, format!("HTTP {} {}", h.status, h.body.trim()))])
        .explain(match eligible {
            Some(false) => "nodeEligible is false: the node is being deleted or drained; /healthz fails by design.",
            _ => "kube-proxy reports that its last sync is too old: its rules could not be applied recently (restore failures, a firewall manager rewriting rules, or a stuck sync).",
        })
        .fix("Find why kube-proxy cannot keep its rules applied (see the root cause: a host firewall, an agent, iptables errors in its log), then let it resync.")
        .fix("Read its log, including the previous start: `crictl logs --previous $(crictl ps -a --name kube-proxy -q | head -1)`.")
}

/// kube-proxy restarted again and again by kubelet: told from the history, whether or not
/// it happens to be up now.
fn crash_loop(ctx: &Ctx, history: &History, now: Option<String>) -> Finding {
    let mut f = Finding::problem(
        ID_UNHEALTHY,
        Severity::High,
        format!("kube-proxy is crash-looping: {}", history.summary()),
    )
    .with_evidence(history.evidence())
    .explain(
        "kubelet kills kube-proxy each time its liveness probe fails and backs off between restarts; between kills \
         kube-proxy may answer normally, so a single look at it proves nothing. While it is down, Service rules are not \
         maintained.",
    )
    .fix("Find why the probe fails: if it probes /healthz, see kube-proxy-probe-semantics; otherwise the dataplane cannot be synced (see the root cause).")
    .fix("Read its log, including the previous start: `crictl logs --previous $(crictl ps -a --name kube-proxy -q | head -1)`.");
    if let Some(n) = now {
        f.evidence.push(fact_evidence(
            ctx.facts.kube_proxy_healthz.source().unwrap_or("/healthz"),
            n,
        ));
    }
    f
}

/// /healthz gave no reply. Live, on a Kubernetes node, a refused connection means
/// kube-proxy is not running; otherwise nothing can be concluded.
fn not_answering(ctx: &Ctx) -> Finding {
    let f = ctx.facts;
    let refused = matches!(&f.kube_proxy_healthz, plumb_facts::Fact::Unknown { reason } if reason.contains("refused"));
    let kube_node = f.rke2_config.value().is_some()
        || f.ruleset
            .value()
            .is_some_and(|rs| rs.tables.iter().any(|t| t.chain("KUBE-SERVICES").is_some()));
    if !(refused && kube_node) {
        return Finding::unknown(
            ID_UNHEALTHY,
            Severity::High,
            "kube-proxy's /healthz was not probed (not a live node, or nothing listens on 10256)",
        );
    }
    let mut ev = vec![fact_evidence(
        "http://127.0.0.1:10256/healthz",
        "connection refused",
    )];
    if let (Some(l), Some(src)) = (f.listeners.value(), f.listeners.source())
        && !l.iter().any(|l| l.port == 10256)
    {
        ev.push(fact_evidence(src, "no socket listens on port 10256"));
    }
    Finding::problem(ID_UNHEALTHY, Severity::High, "kube-proxy is not running: nothing answers on 127.0.0.1:10256")
        .with_evidence(ev)
        .explain(
            "kube-proxy serves /healthz and /livez on 127.0.0.1:10256 while it runs. Without it, Service rules are not \
             maintained: new Services and endpoint changes never reach the node.",
        )
        .fix("Check the kube-proxy static pod (`crictl ps -a --name kube-proxy`) and its log under /var/log/pods/kube-system_kube-proxy-*.")
}

/// The manifest change that stops kubelet from killing a live kube-proxy on /healthz.
/// The first RKE2 release of each line whose kube-proxy static pod probes /livez.
///
/// Verified in rancher/rke2: commit 51a90815dbc592ac9b82287d87dea0fe9c4f7cd1 (master,
/// 2025-07-23, "Consolidate pod template handling in pkg/podtemplate") makes
/// `createProbe` (pkg/podtemplate/podtemplate.go) default an empty path to "/livez" where
/// pkg/staticpod/staticpod.go defaulted it to "/healthz", and `Config.KubeProxy`
/// (pkg/podtemplate/spec.go) sets no HealthPath, so kube-proxy's liveness probe becomes
/// /livez on port 10256. Backports: 01893d975f2b (first release v1.31.12+rke2r1),
/// 9ebee8a41402 (v1.32.8+rke2r1), 9450eda982e9 (v1.33.4+rke2r1); master's first release
/// is v1.34.1+rke2r1. The tags just before (v1.31.11, v1.32.7, v1.33.3, and v1.30.14,
/// the last 1.30) still default to /healthz.
pub const RKE2_LIVEZ_RELEASES: &str =
    "v1.31.12+rke2r1, v1.32.8+rke2r1, v1.33.4+rke2r1, v1.34.1+rke2r1";

fn probe_remedies(f: Finding, manifest: Option<&str>) -> Finding {
    let file = manifest.unwrap_or("the kube-proxy static pod manifest (RKE2: /var/lib/rancher/rke2/agent/pod-manifests/kube-proxy.yaml)");
    f.fix(format!(
        "In {file}, change `livenessProbe.httpGet.path: /healthz` (and `startupProbe.httpGet.path`, if set) to `/livez`, same port 10256; \
         kubelet restarts the static pod when the file changes. kube-proxy serves /livez since Kubernetes 1.28 (KEP-3836): \
         it fails only when kube-proxy itself is stuck, not when the node is being deleted or the dataplane lags."
    ))
    .fix("Where kube-proxy is a DaemonSet (kubeadm, EKS): `kubectl -n kube-system patch ds kube-proxy --type=json -p '[{\"op\":\"replace\",\"path\":\"/spec/template/spec/containers/0/livenessProbe/httpGet/path\",\"value\":\"/livez\"}]'`.")
    .fix(format!(
        "RKE2 rewrites its static pod manifests when rke2 starts: the edit lasts until then. Make it durable by upgrading to an RKE2 release whose kube-proxy manifest probes /livez: {RKE2_LIVEZ_RELEASES} and later in each line (Kubernetes 1.31.12, 1.32.8, 1.33.4, 1.34.1); 1.30 and older lines keep /healthz. Check with `grep -A6 livenessProbe` on the manifest after the upgrade."
    ))
    .do_not("stop after pointing the probe at /livez: find why the dataplane is unhealthy (often a host firewall)")
}

fn probes(ctx: &Ctx) -> Finding {
    let history = History::of(ctx);
    let manifest = probes_healthz(ctx);
    let live = (
        ctx.facts.kube_proxy_healthz.value(),
        ctx.facts.kube_proxy_livez.value(),
    );
    if let (Some(h), Some(l)) = live
        && h.status != 200
        && l.status == 200
    {
        let mut f = Finding::problem(
            ID_PROBES,
            Severity::Medium,
            format!("kube-proxy /healthz answers {} while /livez answers 200{}", h.status, if manifest.is_some() { "; its liveness probe uses /healthz" } else { "" }),
        )
        .with_evidence([
            fact_evidence(&h.url, format!("HTTP {}", h.status)),
            fact_evidence(&l.url, format!("HTTP {}", l.status)),
        ])
        .explain(
            "Since Kubernetes 1.28, /healthz reports dataplane health (and node eligibility) while /livez reports only \
             that kube-proxy is alive. A liveness probe on /healthz restarts a healthy process whose dataplane is failing.",
        );
        if let Some(src) = manifest {
            f.evidence.push(fact_evidence(
                src,
                "livenessProbe/startupProbe httpGet.path: /healthz",
            ));
        }
        f.evidence.extend(history.evidence());
        return probe_remedies(f, manifest);
    }
    // From the history: kubelet killed kube-proxy on a failing /healthz probe, whether or
    // not it is up at this moment.
    let failed_503 = history
        .probe_failures
        .iter()
        .chain(&history.kills)
        .any(|e| e.code == Some(503));
    let killed = !history.kills.is_empty() || !history.probe_failures.is_empty();
    if killed && (manifest.is_some() || failed_503) {
        let mut f = Finding::problem(
            ID_PROBES,
            Severity::Medium,
            format!(
                "kubelet kills kube-proxy on its /healthz liveness probe: {}{}",
                history.summary(),
                if manifest.is_some() { "; the static pod probes /healthz" } else { "" }
            ),
        )
        .with_evidence(history.evidence())
        .explain(
            "Since Kubernetes 1.28, /healthz answers 503 when kube-proxy's last sync is older than twice its sync period \
             or the node is not eligible (being deleted), while /livez answers 503 only when kube-proxy itself is stuck. \
             A liveness probe on /healthz therefore kills a live kube-proxy whenever the dataplane lags, and the restarts \
             make it lag more: CrashLoopBackOff.",
        );
        if let Some(src) = manifest {
            f.evidence.push(fact_evidence(
                src,
                "livenessProbe/startupProbe httpGet.path: /healthz",
            ));
        }
        return probe_remedies(f, manifest);
    }
    match live {
        (Some(h), Some(l)) if h.status == 200 && l.status == 200 => Finding::ok(
            ID_PROBES,
            "kube-proxy /healthz and /livez both answer 200: probe paths are not the problem (red herring)",
        ),
        (Some(h), Some(l)) => Finding::ok(
            ID_PROBES,
            format!(
                "kube-proxy /healthz {} and /livez {} agree",
                h.status, l.status
            ),
        ),
        _ if ctx
            .facts
            .node_logs
            .iter()
            .any(|f| f.component.as_deref() == Some("kubelet")) =>
        {
            Finding::ok(
                ID_PROBES,
                "kubelet's log shows no failed liveness probe of kube-proxy",
            )
        }
        _ => Finding::unknown(
            ID_PROBES,
            Severity::Low,
            "kube-proxy's /healthz and /livez were not both probed and no kubelet log was read",
        ),
    }
}

/// Lines with one of `signals`, from every log read.
fn entries<'a>(ctx: &'a Ctx, signals: &[Signal]) -> Vec<&'a Entry> {
    ctx.timeline
        .entries
        .iter()
        .filter(|e| signals.contains(&e.signal))
        .collect()
}

/// Whether any kube-proxy log was read (so the absence of a line means something).
fn kube_proxy_logs_read(ctx: &Ctx) -> bool {
    ctx.facts.container_logs("kube-proxy").count() > 0
}

fn absent(ctx: &Ctx, id: &str, what: &str) -> Finding {
    if kube_proxy_logs_read(ctx) {
        Finding::ok(id, format!("kube-proxy's log shows no {what}"))
    } else {
        Finding::unknown(id, Severity::High, "no kube-proxy log was readable")
    }
}

fn iptables_incompatible(ctx: &Ctx) -> Finding {
    let generation = entries(ctx, &[Signal::IptablesIncompatible]);
    let options = entries(ctx, &[Signal::RestoreOptionRejected]);
    if generation.is_empty() && options.is_empty() {
        return absent(
            ctx,
            ID_IPTABLES,
            "iptables incompatibility (generation id, rejected options)",
        );
    }
    let evidence = generation
        .iter()
        .chain(&options)
        .rev()
        .take(6)
        .map(|e| entry_evidence(e));
    let mut f = if !generation.is_empty() {
        Finding::problem(
            ID_IPTABLES,
            Severity::Critical,
            format!("iptables cannot write to this kernel's nf_tables at all ({} \"Could not fetch rule set generation id\" / \"Failed to ensure ... chain\" lines)", generation.len()),
        )
        .explain(
            "iptables-nft asks the kernel for the ruleset's generation before every change; \"Could not fetch rule set \
             generation id\" means the kernel's nf_tables does not answer it (a kernel without nf_tables, a container \
             without the needed privileges, or an iptables userspace newer than the kernel understands). kube-proxy then \
             cannot create a single chain: no Service works.",
        )
        .fix("Run kube-proxy (and the host) with an iptables whose backend this kernel supports: check `iptables --version` on the host and inside the kube-proxy image; if nf_tables is unusable here, use the legacy backend on every component consistently (`update-alternatives --set iptables /usr/sbin/iptables-legacy`) or upgrade the kernel.")
        .fix("In a container, give it the privileges nf_tables needs (CAP_NET_ADMIN in the host network namespace).")
    } else {
        Finding::problem(
            ID_IPTABLES,
            Severity::Critical,
            format!("iptables-restore rejects options kube-proxy writes ({} lines: \"invalid option\" / \"unknown option\")", options.len()),
        )
        .explain(
            "kube-proxy writes its rules with the iptables it ships or finds; \"invalid option -- '5'\" means an iptables \
             older than `-w SECONDS`, \"unknown option \"--xor-mark\"\" means this iptables and the kernel's MARK \
             extension disagree (a known kernel regression). Every sync fails, so Service rules are never updated.",
        )
        .fix("Use an iptables that matches kube-proxy's version and the kernel: upgrade the host's iptables (`iptables --version` >= 1.6.2 for `-w SECONDS`), or, for the --xor-mark case, a kernel with the xt_mark fix (or the previous kernel).")
    };
    f.evidence.extend(evidence);
    f
}

fn nft_unavailable(ctx: &Ctx) -> Finding {
    let lines = entries(ctx, &[Signal::NftUnavailable]);
    if lines.is_empty() {
        return absent(ctx, ID_NFT, "nftables-mode failure to run nft");
    }
    Finding::problem(
        ID_NFT,
        Severity::Critical,
        format!("kube-proxy's nftables mode cannot run `nft` ({} \"failed to run nft: ... No such file or directory\" lines)", lines.len()),
    )
    .with_evidence(lines.iter().rev().take(4).map(|e| entry_evidence(e)))
    .explain(
        "In nftables mode kube-proxy drives the `nft` command. \"No such file or directory\" here is the missing `nft` \
         binary (or its library), not a missing table: kube-proxy cannot list or write its `kube-proxy` tables, so no \
         Service works. Any CHAIN_DEL \"busy\" lines of its start-up cleanup are leftovers of iptables mode, not the cause.",
    )
    .fix("Install the nftables package where kube-proxy runs (the host, for a kube-proxy that uses the host's binaries), or use a kube-proxy image that ships `nft`; then restart kube-proxy.")
    .fix("Or switch kube-proxy back to iptables mode (`mode: iptables` in its configuration) until nft is available.")
}

fn conntrack_permission(ctx: &Ctx) -> Finding {
    let lines = entries(ctx, &[Signal::ConntrackPermission]);
    if lines.is_empty() {
        return absent(
            ctx,
            ID_CONNTRACK_PERM,
            "permission error on conntrack sysctls",
        );
    }
    Finding::problem(
        ID_CONNTRACK_PERM,
        Severity::Critical,
        "kube-proxy may not set nf_conntrack_max and exits (\"permission denied\")",
    )
    .with_evidence(lines.iter().rev().take(3).map(|e| entry_evidence(e)))
    .explain(
        "At start kube-proxy raises net.netfilter.nf_conntrack_max to its computed minimum. Where /proc/sys is read-only \
         (kube-proxy in an unprivileged container, a nested or embedded setup) the write fails and kube-proxy stops with a \
         fatal error, so it never programs Service rules.",
    )
    .fix("Tell kube-proxy not to touch the sysctl: `--conntrack-max-per-core=0` (configuration: `conntrack.maxPerCore: 0`), and set nf_conntrack_max on the host instead (`sysctl -w net.netfilter.nf_conntrack_max=131072`, persisted in /etc/sysctl.d/).")
}
