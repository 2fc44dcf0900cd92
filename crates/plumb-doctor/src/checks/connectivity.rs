//! `clusterip-unreachable` and `api-server-unhealthy`: the decisive symptom of a security agent reverting kube-proxy's rules — the
//! API server answers on its own address but the `kubernetes` Service ClusterIP times out,
//! so the NAT path kube-proxy writes is broken (not the API server).

use crate::context::{Ctx, entry_evidence, fact_evidence};
use plumb_facts::parse::logs::{Signal, dial_target};
use plumb_facts::{ConnectOutcome, Fact};
use plumb_findings::{Finding, Severity};

/// Finding id: a TCP connect to the `kubernetes` Service ClusterIP does not complete from
/// this node.
pub const ID_CLUSTERIP: &str = "clusterip-unreachable";
/// Finding id: the API server behind the ClusterIP does not answer or is not ready.
pub const ID_API: &str = "api-server-unhealthy";

/// Answers for both ids from the network probes and the logs' ClusterIP timeouts; a
/// ClusterIP that fails while the API server answers directly points at the NAT path.
pub fn check(ctx: &Ctx) -> Vec<Finding> {
    vec![clusterip(ctx), api(ctx)]
}

fn clusterip(ctx: &Ctx) -> Finding {
    let vip = &ctx.values.kubernetes_clusterip;
    // Said whenever the address is a default rather than the node's own.
    let assumed = if ctx.values.defaults.contains(&"kubernetes ClusterIP") {
        format!(" ({})", ctx.values.network.kubernetes_clusterip.source)
    } else {
        String::new()
    };
    // Lines of any log read (pods, kubelet's sandbox errors) that dialled the node's own
    // kubernetes ClusterIP and timed out or were refused a route.
    let timeouts: Vec<_> = ctx
        .timeline
        .entries
        .iter()
        .filter(|e| {
            matches!(
                e.signal,
                Signal::ClusterIpTimeout
                    | Signal::InstallCniFatal
                    | Signal::CniSandboxFailed
                    | Signal::NoRouteToHost
            )
        })
        .filter(|e| dial_target(&e.text).is_some_and(|t| t.starts_with(&format!("{vip}:"))))
        .collect();
    let no_route = timeouts.iter().any(|e| e.signal == Signal::NoRouteToHost);
    let probe = ctx.facts.clusterip_connect.value();
    let local_ok = ctx
        .facts
        .api_local_connect
        .value()
        .is_some_and(|c| c.outcome == ConnectOutcome::Connected);
    let probe_failed = probe.is_some_and(|c| c.outcome != ConnectOutcome::Connected);
    if !probe_failed && timeouts.is_empty() {
        return match probe {
            Some(c) => Finding::ok(
                ID_CLUSTERIP,
                format!(
                    "the kubernetes Service {} answers ({} ms)",
                    c.target, c.millis
                ),
            ),
            None => Finding::unknown(
                ID_CLUSTERIP,
                Severity::Critical,
                format!(
                    "the kubernetes Service {vip}:443{assumed} was not probed and no log shows it timing out"
                ),
            ),
        };
    }
    let mut evidence = Vec::new();
    if let (Some(c), Fact::Known { source, .. }) = (probe, &ctx.facts.clusterip_connect) {
        evidence.push(fact_evidence(
            source,
            format!("{}: {:?} after {} ms", c.target, c.outcome, c.millis),
        ));
    }
    if let (Some(c), Fact::Known { source, .. }) = (
        ctx.facts.api_local_connect.value(),
        &ctx.facts.api_local_connect,
    ) {
        evidence.push(fact_evidence(
            source,
            format!("{}: {:?} after {} ms", c.target, c.outcome, c.millis),
        ));
    }
    evidence.extend(
        timeouts
            .iter()
            .rev()
            .take(6)
            .rev()
            .map(|e| entry_evidence(e)),
    );
    let title = if no_route {
        format!(
            "the kubernetes Service {vip}:443 is refused with \"no route to host\" (an ICMP host-prohibited REJECT)"
        )
    } else if local_ok {
        format!(
            "the kubernetes Service {vip}:443 times out while the API server answers on its own address"
        )
    } else {
        format!("the kubernetes Service {vip}:443 is unreachable")
    };
    Finding::problem(ID_CLUSTERIP, Severity::Critical, title)
        .with_evidence(evidence)
        .explain(format!(
            "{vip} is not a real listener: it works only because kube-proxy's NAT rules (KUBE-SERVICES -> KUBE-SVC-* -> KUBE-SEP-*) \
             rewrite it to the API server's address. When the API server answers directly but the ClusterIP does not, those rules \
             are missing or bypassed. Anything that uses the in-cluster API address fails — install-cni first, so the CNI never \
             initialises and pods stay ContainerCreating."
        ))
        .fix("Find out what removes or shadows kube-proxy's rules (see the root cause), then let kube-proxy resync (it rewrites its rules every sync period).")
}

fn api(ctx: &Ctx) -> Finding {
    let f = ctx.facts;
    match (f.api_readyz.value(), &f.api_readyz) {
        (Some(r), Fact::Known { source, .. }) if r.status == 200 => {
            Finding::ok(ID_API, format!("the API server is ready ({source})"))
        }
        (Some(r), Fact::Known { source, .. }) => {
            let failing: Vec<String> = r
                .body
                .lines()
                .filter(|l| l.contains("failed"))
                .map(str::to_string)
                .collect();
            Finding::problem(ID_API, Severity::High, format!("the API server's /readyz answered {}", r.status))
                .with_evidence(std::iter::once(fact_evidence(source, format!("HTTP {}", r.status))).chain(
                    failing.iter().map(|l| fact_evidence(source, l.clone())),
                ))
                .explain("The local API server reports itself not ready; clients fail independently of kube-proxy's rules.")
                .fix("Check the failing readiness checks listed by /readyz?verbose and the kube-apiserver pod log.")
        }
        _ => match f.api_local_connect.value() {
            Some(c) if c.outcome == ConnectOutcome::Connected => {
                Finding::ok(ID_API, format!("the API server accepts connections on {}", c.target))
            }
            Some(c) => Finding::problem(ID_API, Severity::High, format!("the API server endpoint {} does not accept connections", c.target))
                .with_evidence([fact_evidence(f.api_local_connect.source().unwrap_or(""), format!("{:?}", c.outcome))])
                .explain("Neither the Service nor the API endpoint itself answers: the problem is the API server (or this node's path to it), not only kube-proxy's NAT.")
                .fix("Check the API server itself first: its pod or service log (`crictl logs $(crictl ps -a --name kube-apiserver -q | head -1)`), and from this node `curl -k https://API:6443/readyz?verbose`."),
            None => Finding::unknown(ID_API, Severity::High, "the API server was not probed (not a live node)"),
        },
    }
}
