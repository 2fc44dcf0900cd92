//! `plumb policy`: one connection judged (`check`), matrices, the pairs that change
//! between two sets (`diff`) and `lint`, over NetworkPolicies and Cilium policies read
//! from files (plumb-policy).

use crate::Verdict;
use crate::flags::PolicyCommand;
use crate::output;
use anyhow::{Context, bail};
use plumb_policy::cilium::Request;
use plumb_policy::eval::{Connection, Direction, Endpoint, Index};
use plumb_policy::model::Cluster;
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;

pub fn run(c: PolicyCommand, style: plumb_findings::Style) -> anyhow::Result<Verdict> {
    match c {
        PolicyCommand::Check {
            files,
            from,
            to,
            port,
            request,
            output,
        } => check_one(&files, &from, &to, &port, request.as_deref(), output.json()),
        PolicyCommand::Matrix {
            files,
            namespace,
            port,
            csv,
            output,
        } => matrix(
            &files,
            namespace.as_deref(),
            &port,
            csv,
            output.json(),
            style.color,
        ),
        PolicyCommand::Diff {
            files,
            before,
            after,
            namespace,
            port,
            output,
        } => diff(
            &files,
            &before,
            &after,
            namespace.as_deref(),
            &port,
            output.json(),
        ),
        PolicyCommand::Lint { files, output } => lint(&files, output.json()),
    }
}

fn lint(files: &[PathBuf], json: bool) -> anyhow::Result<Verdict> {
    let (cluster, problems) = load(files)?;
    if cluster.policies.is_empty() && cluster.cilium.is_empty() && problems.is_empty() {
        bail!(
            "no NetworkPolicy, CiliumNetworkPolicy or CiliumClusterwideNetworkPolicy in the files"
        );
    }
    let findings = plumb_policy::lint::lint(&cluster);
    if json {
        #[derive(Serialize)]
        struct Out<'a> {
            findings: &'a [plumb_policy::lint::Finding],
            /// Policies linted.
            policies: usize,
            /// What in the files was not read (a policy plumb cannot read is not linted).
            problems: &'a [String],
        }
        output::json(&Out {
            findings: &findings,
            policies: cluster.policies.len() + cluster.cilium.len(),
            problems: &problems,
        })?;
    } else {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        for p in &problems {
            writeln!(out, "warning: {p}")?;
        }
        for f in &findings {
            writeln!(out, "{f}")?;
        }
        writeln!(
            out,
            "{} finding(s) in {} polic{}",
            findings.len(),
            cluster.policies.len() + cluster.cilium.len(),
            if cluster.policies.len() + cluster.cilium.len() == 1 {
                "y"
            } else {
                "ies"
            }
        )?;
        out.flush()?;
    }
    Ok(if findings.is_empty() {
        Verdict::Clean
    } else {
        Verdict::Problems
    })
}

/// A pair whose verdict differs between two sets of policies.
#[derive(Serialize)]
struct Change {
    from: String,
    to: String,
    port: u16,
    protocol: String,
    before: bool,
    after: bool,
}

fn diff(
    files: &[PathBuf],
    before: &[PathBuf],
    after: &[PathBuf],
    namespace: Option<&str>,
    ports: &[String],
    json: bool,
) -> anyhow::Result<Verdict> {
    let with = |set: &[PathBuf]| {
        let mut all = files.to_vec();
        all.extend_from_slice(set);
        load(&all)
    };
    let ((b, mut problems), (a, more)) = (with(before)?, with(after)?);
    problems.extend(more);
    problems.sort();
    problems.dedup();
    let was = cells(&b, namespace, ports)?.cells;
    let now = cells(&a, namespace, ports)?.cells;
    let key = |c: &Cell| (c.from.clone(), c.to.clone(), c.port, c.protocol.clone());
    let now: std::collections::BTreeMap<_, bool> =
        now.iter().map(|c| (key(c), c.allowed)).collect();
    let changes: Vec<Change> = was
        .iter()
        .filter_map(|c| {
            let after = *now.get(&key(c))?;
            (after != c.allowed).then(|| Change {
                from: c.from.clone(),
                to: c.to.clone(),
                port: c.port,
                protocol: c.protocol.clone(),
                before: c.allowed,
                after,
            })
        })
        .collect();
    if json {
        #[derive(Serialize)]
        struct Out<'a> {
            changes: &'a [Change],
            problems: &'a [String],
        }
        output::json(&Out {
            changes: &changes,
            problems: &problems,
        })?;
    } else {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        for p in &problems {
            writeln!(out, "warning: {p}")?;
        }
        let word = |b: bool| if b { "allowed" } else { "denied" };
        for c in &changes {
            writeln!(
                out,
                "{} -> {} {}/{}: {} before, {} after",
                c.from,
                c.to,
                c.port,
                c.protocol,
                word(c.before),
                word(c.after)
            )?;
        }
        writeln!(out, "{} pair(s) change verdict", changes.len())?;
        out.flush()?;
    }
    Ok(if changes.is_empty() {
        Verdict::Clean
    } else {
        Verdict::Problems
    })
}

/// One cell of the matrix.
#[derive(Serialize)]
struct Cell {
    from: String,
    to: String,
    port: u16,
    protocol: String,
    allowed: bool,
    egress: bool,
    ingress: bool,
}

/// A matrix: the ports and pods it covers, and its cells in (port, from, to) order.
struct Matrix {
    ports: Vec<(u16, String)>,
    pods: Vec<String>,
    cells: Vec<Cell>,
}

/// Every (from, to, port) cell over the pods of `namespace` (all pods when None) and
/// `ports` (every declared container port when empty).
fn cells(cluster: &Cluster, namespace: Option<&str>, ports: &[String]) -> anyhow::Result<Matrix> {
    let pods: Vec<&plumb_policy::model::Pod> = cluster
        .pods
        .iter()
        .filter(|p| namespace.is_none_or(|n| p.namespace == n))
        .collect();
    if pods.is_empty() {
        bail!(
            "no pods{} in the files",
            namespace
                .map(|n| format!(" in namespace {n}"))
                .unwrap_or_default()
        );
    }
    let mut wanted: Vec<(u16, String)> = Vec::new();
    for p in ports {
        wanted.push(parse_port(p)?);
    }
    if wanted.is_empty() {
        for p in &pods {
            for cp in &p.ports {
                wanted.push((cp.port, cp.protocol.clone()));
            }
        }
        wanted.sort();
        wanted.dedup();
    }
    if wanted.is_empty() {
        bail!("the pods declare no container ports; pass --port PORT[/PROTO]");
    }
    let index = Index::new(cluster);
    let at: Vec<usize> = pods
        .iter()
        .map(|p| index.pod(&p.id()).expect("every pod is indexed"))
        .collect();
    let mut cells = Vec::new();
    for (port, proto) in &wanted {
        for (from, &f) in pods.iter().zip(&at) {
            for (to, &t) in pods.iter().zip(&at) {
                let (egress, ingress) = index.allows_pods(f, t, *port, proto);
                cells.push(Cell {
                    from: from.id(),
                    to: to.id(),
                    port: *port,
                    protocol: proto.clone(),
                    allowed: egress && ingress,
                    egress,
                    ingress,
                });
            }
        }
    }
    Ok(Matrix {
        ports: wanted,
        pods: pods.iter().map(|p| p.id()).collect(),
        cells,
    })
}

fn matrix(
    files: &[PathBuf],
    namespace: Option<&str>,
    ports: &[String],
    csv: bool,
    json: bool,
    color: bool,
) -> anyhow::Result<Verdict> {
    let (cluster, problems) = load(files)?;
    let Matrix {
        ports: wanted,
        pods: ids,
        cells,
    } = cells(&cluster, namespace, ports)?;
    if json {
        #[derive(Serialize)]
        struct Out<'a> {
            cells: &'a [Cell],
            problems: &'a [String],
        }
        output::json(&Out {
            cells: &cells,
            problems: &problems,
        })?;
        return Ok(Verdict::Clean);
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if csv {
        writeln!(out, "from,to,port,protocol,allowed,egress,ingress")?;
        for c in &cells {
            writeln!(
                out,
                "{},{},{},{},{},{},{}",
                c.from, c.to, c.port, c.protocol, c.allowed, c.egress, c.ingress
            )?;
        }
        out.flush()?;
        return Ok(Verdict::Clean);
    }
    for p in &problems {
        writeln!(out, "warning: {p}")?;
    }
    let width = ids.iter().map(String::len).max().unwrap_or(0);
    // Cells are in (port, from, to) order: one n x n block per port.
    let n = ids.len();
    for (k, (port, proto)) in wanted.iter().enumerate() {
        writeln!(
            out,
            "{port}/{proto}  (rows: from, columns: to; . allowed, X denied)"
        )?;
        write!(out, "{:width$}", "")?;
        for i in 1..=n {
            write!(out, " {i:>2}")?;
        }
        writeln!(out)?;
        for (r, from) in ids.iter().enumerate() {
            write!(out, "{from:width$}")?;
            let row = k * n * n + r * n;
            for c in &cells[row..row + n] {
                // Colour (green allowed, red denied) only adds to the marks, so the
                // plain text reads the same.
                let (mark, paint) = if c.allowed {
                    (".", "\x1b[32m")
                } else {
                    ("X", "\x1b[31m")
                };
                if color {
                    write!(out, " {paint}{mark:>2}\x1b[0m")?;
                } else {
                    write!(out, " {mark:>2}")?;
                }
            }
            writeln!(out, "  {}", r + 1)?;
        }
        writeln!(out)?;
    }
    out.flush()?;
    Ok(Verdict::Clean)
}

/// The files of a Cilium sysdump that policy evaluation reads, by name prefix (the
/// sysdump writes `<name>-<time>.yaml`); the rest of a sysdump (events, Services, Helm
/// values, agent outputs) is not policy input and is not reported as unread.
const SYSDUMP_POLICY_FILES: &[&str] = &[
    "k8s-namespaces-",
    "k8s-pods-",
    "k8s-nodes-",
    "k8s-networkpolicies-",
    "ciliumnetworkpolicies-",
    "ciliumclusterwidenetworkpolicies-",
];

fn is_manifest(f: &std::path::Path) -> bool {
    f.extension()
        .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
}

fn is_sysdump_policy_file(f: &std::path::Path) -> bool {
    let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
    f.extension().is_some_and(|e| e == "yaml")
        && SYSDUMP_POLICY_FILES.iter().any(|p| name.starts_with(p))
}

/// The manifests of one directory, sorted (not recursive). A directory laid out as a
/// Cilium sysdump gives only its policy, pod, namespace and node files.
fn manifests_in(dir: &std::path::Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|f| f.is_file() && is_manifest(f))
        .collect();
    found.sort();
    if found.iter().any(|f| is_sysdump_policy_file(f)) {
        found.retain(|f| is_sysdump_policy_file(f));
    }
    Ok(found)
}

/// Files named on the command line: directories expanded to their manifests, and a
/// Cilium sysdump (zip, or its unpacked directory) opened as a bundle and read for its
/// Kubernetes objects. The opened bundles are returned so their unpacked files live as
/// long as the paths. Each file comes with the name its problems are reported under (a
/// bundle's files as `BUNDLE:MEMBER`).
type Inputs = (Vec<(PathBuf, String)>, Vec<plumb_collect::node::BundleNode>);

fn inputs(paths: &[PathBuf]) -> anyhow::Result<Inputs> {
    use plumb_collect::node::{BundleKind, open_bundle};
    let mut out = Vec::new();
    let mut bundles = Vec::new();
    for p in paths {
        let named = |f: PathBuf| {
            let label = f.display().to_string();
            (f, label)
        };
        if p.is_dir() {
            out.extend(manifests_in(p)?.into_iter().map(named));
        } else if p.is_file() && !is_manifest(p) {
            let bundle = open_bundle(p).map_err(|e| anyhow::anyhow!("{e}"))?;
            if bundle.kind() != BundleKind::CiliumSysdump {
                bail!(
                    "{}: a bundle without Kubernetes objects; plumb policy reads YAML/JSON manifests, directories of them, or a Cilium sysdump",
                    p.display()
                );
            }
            let found = manifests_in(bundle.root())?;
            if found.is_empty() {
                bail!(
                    "{}: the sysdump holds none of {}",
                    p.display(),
                    SYSDUMP_POLICY_FILES
                        .iter()
                        .map(|f| format!("{f}*.yaml"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            out.extend(found.into_iter().map(|f| {
                let member = f.strip_prefix(bundle.root()).unwrap_or(&f).display();
                let label = format!("{}:{member}", p.display());
                (f, label)
            }));
            bundles.push(bundle);
        } else {
            out.push(named(p.clone()));
        }
    }
    Ok((out, bundles))
}

fn load(paths: &[PathBuf]) -> anyhow::Result<(Cluster, Vec<String>)> {
    let mut cluster = Cluster::default();
    let mut problems = Vec::new();
    let (files, _bundles) = inputs(paths)?;
    for (f, label) in files {
        let bytes = super::input::read_limited(&f, plumb_ruleset::format::DEFAULT_MAX_SIZE)
            .with_context(|| format!("reading {label}"))?;
        let text =
            String::from_utf8(bytes).map_err(|_| anyhow::anyhow!("{label}: not UTF-8 text"))?;
        problems.extend(
            plumb_policy::load::load_str(&mut cluster, &text, &label)
                .iter()
                .map(|p| p.to_string()),
        );
    }
    Ok((cluster, problems))
}

fn parse_port(s: &str) -> anyhow::Result<(u16, String)> {
    let (port, proto) = s.split_once('/').unwrap_or((s, "tcp"));
    let port: u16 = port
        .parse()
        .map_err(|_| anyhow::anyhow!("--port {s}: expected PORT[/PROTO], such as 443/tcp"))?;
    let proto = proto.to_ascii_uppercase();
    if !matches!(proto.as_str(), "TCP" | "UDP" | "SCTP" | "ICMP" | "ICMPV6") {
        bail!("--port {s}: the protocol is tcp, udp, sctp, icmp or icmpv6");
    }
    Ok((port, proto))
}

/// An endpoint as `--from`/`--to` write it.
fn endpoint<'c>(cluster: &'c Cluster, id: &'c str, flag: &str) -> anyhow::Result<Endpoint<'c>> {
    if let Some(rest) = id.strip_prefix("world:") {
        let (ip, name) = match rest.split_once('@') {
            Some((ip, name)) => (ip, Some(name)),
            None => (rest, None),
        };
        let ip = ip
            .parse()
            .map_err(|_| anyhow::anyhow!("--{flag} {id}: expected world:IP[@NAME]"))?;
        return Ok(Endpoint::World { ip, name });
    }
    let (entity, node) = id.split_once(':').unwrap_or((id, ""));
    if let Some(e) = plumb_policy::eval::RESERVED.iter().find(|e| **e == entity) {
        let node = if node.is_empty() {
            None
        } else {
            Some(
                cluster
                    .nodes
                    .iter()
                    .find(|n| n.name == node)
                    .ok_or_else(|| anyhow::anyhow!("--{flag} {id}: no Node {node} in the files"))?,
            )
        };
        return Ok(Endpoint::Reserved { entity: e, node });
    }
    cluster.pod(id).map(Endpoint::Pod).ok_or_else(|| {
        anyhow::anyhow!(
            "--{flag} {id}: no such pod in the files ({} pods read{})",
            cluster.pods.len(),
            if id.contains('/') {
                ""
            } else {
                "; write NAMESPACE/POD, world:IP or an entity such as host"
            }
        )
    })
}

fn check_one(
    files: &[PathBuf],
    from: &str,
    to: &str,
    port: &str,
    request: Option<&str>,
    json: bool,
) -> anyhow::Result<Verdict> {
    let (port, proto) = parse_port(port)?;
    let request = request
        .map(|r| match r.strip_prefix("dns:") {
            Some(name) => Ok(Request::Dns { name: name.into() }),
            None => match r.split_once(' ') {
                Some((m, p)) if p.starts_with('/') => Ok(Request::Http {
                    method: m.into(),
                    path: p.into(),
                }),
                _ => Err(anyhow::anyhow!(
                    "--request {r}: expected \"METHOD /PATH\" or dns:NAME"
                )),
            },
        })
        .transpose()?;
    let (cluster, problems) = load(files)?;
    let (src, dst) = (
        endpoint(&cluster, from, "from")?,
        endpoint(&cluster, to, "to")?,
    );
    let v = Index::new(&cluster).check(&Connection {
        from: src,
        to: dst,
        port,
        protocol: &proto,
        request: request.as_ref(),
    });
    let undecided = v.depends_on_dns();
    if json {
        #[derive(Serialize)]
        struct Out<'a> {
            allowed: bool,
            /// False when the answer depends on DNS (toFQDNs) and is not known offline.
            decided: bool,
            egress: &'a Direction,
            ingress: &'a Direction,
            /// L7 rules the connection is subject to (both directions).
            l7: Vec<&'a plumb_policy::eval::L7Match>,
            /// What in the files was not read.
            problems: &'a [String],
        }
        output::json(&Out {
            allowed: v.allowed,
            decided: !undecided,
            egress: &v.egress,
            ingress: &v.ingress,
            l7: v.egress.l7.iter().chain(&v.ingress.l7).collect(),
            problems: &problems,
        })?;
    } else {
        let mut out = std::io::stdout().lock();
        for p in &problems {
            writeln!(out, "warning: {p}")?;
        }
        let word = if v.allowed {
            "ALLOWED"
        } else if undecided {
            "UNDECIDED (depends on DNS)"
        } else {
            "DENIED"
        };
        writeln!(out, "{from} -> {to} {port}/{proto}: {word}")?;
        for (name, d, pod) in [("egress", &v.egress, from), ("ingress", &v.ingress, to)] {
            write_direction(&mut out, name, d, pod)?;
        }
    }
    Ok(if v.allowed {
        Verdict::Clean
    } else {
        Verdict::Problems
    })
}

fn write_direction(
    out: &mut impl Write,
    name: &str,
    d: &Direction,
    pod: &str,
) -> std::io::Result<()> {
    for p in &d.denied_by {
        let rules: Vec<String> = p.allowing_rules.iter().map(|r| format!("#{r}")).collect();
        writeln!(
            out,
            "  {name}: denied by {} {} {name}Deny rule {} (deny wins over any allow)",
            p.kind,
            p.policy,
            rules.join(", ")
        )?;
    }
    if !d.isolated && d.denied_by.is_empty() {
        writeln!(
            out,
            "  {name}: allowed ({pod} is not in default deny for {name})"
        )?;
        return write_l7(out, d);
    }
    writeln!(
        out,
        "  {name}: {}",
        if d.allowed { "allowed" } else { "denied" }
    )?;
    for p in &d.policies {
        if p.allowing_rules.is_empty() {
            writeln!(out, "    {}: selects {pod}, no rule allows this", p.policy)?;
        } else {
            let rules: Vec<String> = p.allowing_rules.iter().map(|r| format!("#{r}")).collect();
            writeln!(
                out,
                "    {}: allowed by {name} rule {}",
                p.policy,
                rules.join(", ")
            )?;
        }
    }
    write_l7(out, d)
}

fn write_l7(out: &mut impl Write, d: &Direction) -> std::io::Result<()> {
    for m in &d.l7 {
        writeln!(
            out,
            "    L7: redirected to the proxy by {} {} rule #{}: only {}",
            m.policy,
            m.direction,
            m.rule,
            m.rules.join(" | ")
        )?;
    }
    if let Some(ok) = d.request_allowed {
        writeln!(
            out,
            "    request: {}",
            if ok {
                "allowed by the L7 rules"
            } else {
                "refused by the proxy (HTTP 403 / DNS REFUSED)"
            }
        )?;
    }
    for f in &d.depends_on_dns {
        writeln!(
            out,
            "    depends on DNS: {f} allows it if the address was looked up by such a name"
        )?;
    }
    Ok(())
}
