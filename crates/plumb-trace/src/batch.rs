//! Many flows through one index: the flow file's format (a CSV with a header) and
//! the one-line summary of each flow's trace.
//!
//! # Flow files
//!
//! One flow per line, comma-separated, after a header line naming the columns (in
//! any order, any subset that includes `dst`):
//!
//! | column | value | when empty or absent |
//! |---|---|---|
//! | `src` | source `IP` or `IP:PORT` (`[v6]:PORT`) | the template's (unknown by default) |
//! | `dst` | destination `IP` or `IP:PORT` | required |
//! | `port` (or `dport`) | destination port | the port in `dst`; required for tcp/udp |
//! | `proto` | `tcp`, `udp`, `icmp` or an IP protocol name/number | the template's |
//! | `in_iface` | interface the packet arrives on | the template's |
//! | `out_iface` | interface the packet leaves on | the template's |
//! | `from` (or `direction`) | `host`, `pod` or `external` | the template's |
//!
//! Fields are trimmed; there is no quoting (no value holds a comma). Blank lines and
//! lines whose first non-blank character is `#` are skipped, before and after the
//! header. The template is the packet the command line describes (`--proto`,
//! `--from`, `--src`, `--in-iface`, `--ct-state`, `--mark`, ...), so a file holding
//! only `dst` is a list of destinations traced the same way.

use crate::index::Index;
use crate::ir::HookId;
use crate::outcome::{Outcome, OutcomeReport, StepKind, Trace, Verdict};
use crate::packet::{Origin, Packet, Proto};
use plumb_ruleset::fasthash::FastMap;
use serde::Serialize;
use std::borrow::Cow;
use std::net::IpAddr;

/// A column of a flow file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Column {
    /// `src`: the source address, `IP` or `IP:PORT`.
    Src,
    /// `dst`: the destination address, `IP` or `IP:PORT` (the only required column).
    Dst,
    /// `port` / `dport`: the destination port.
    Port,
    /// `proto`: tcp, udp, sctp or icmp.
    Proto,
    /// `in_iface`: the interface the packet arrives on.
    InIface,
    /// `out_iface`: the interface it leaves by.
    OutIface,
    /// `from` / `direction`: where the packet starts (pod, host, outside).
    From,
}

impl Column {
    /// The column a header name stands for.
    pub fn parse(name: &str) -> Option<Column> {
        Some(match name.trim().to_ascii_lowercase().as_str() {
            "src" => Column::Src,
            "dst" => Column::Dst,
            "port" | "dport" => Column::Port,
            "proto" => Column::Proto,
            "in_iface" => Column::InIface,
            "out_iface" => Column::OutIface,
            "from" | "direction" => Column::From,
            _ => return None,
        })
    }
}

/// The names a header may use, for messages.
pub const COLUMN_NAMES: &str = "src, dst, port, proto, in_iface, out_iface, from";

/// Why a flow file's line could not be read. Its `Display` is the reason alone; the
/// caller adds the file and line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FlowError(pub String);

/// Whether a line holds no flow (blank or a `#` comment).
pub fn is_skipped(line: &str) -> bool {
    let t = line.trim_start();
    t.is_empty() || t.starts_with('#')
}

/// The columns of a flow file, from its header line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowColumns {
    columns: Vec<Column>,
}

impl FlowColumns {
    /// Reads the header line. Every name must be a known column, none twice, and
    /// `dst` must be among them; a line that looks like a flow (its first field an
    /// address) is refused, so a file without a header is not read one line short.
    pub fn parse_header(line: &str) -> Result<FlowColumns, FlowError> {
        let mut columns = Vec::new();
        for name in line.split(',') {
            let name = name.trim();
            let Some(c) = Column::parse(name) else {
                if name.parse::<IpAddr>().is_ok() || name.contains('.') || name.contains(':') {
                    return Err(FlowError(format!(
                        "expected a header line naming the columns ({COLUMN_NAMES}) before the first flow"
                    )));
                }
                return Err(FlowError(format!(
                    "unknown column {name:?} in the header (columns: {COLUMN_NAMES})"
                )));
            };
            if columns.contains(&c) {
                return Err(FlowError(format!("column {name:?} appears twice")));
            }
            columns.push(c);
        }
        if !columns.contains(&Column::Dst) {
            return Err(FlowError(format!(
                "the header names no dst column (columns: {COLUMN_NAMES})"
            )));
        }
        Ok(FlowColumns { columns })
    }

    /// The columns, in file order.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// Reads one flow line into a packet: `template` with the line's fields set.
    pub fn parse_flow(&self, line: &str, template: &Packet) -> Result<Packet, FlowError> {
        let mut fields = [None::<&str>; 7];
        let mut n = 0;
        for (i, field) in line.split(',').enumerate() {
            n = i + 1;
            let Some(&c) = self.columns.get(i) else {
                continue;
            };
            let f = field.trim();
            if f.contains('"') {
                return Err(FlowError(format!(
                    "field {f:?}: quotes are not supported (no value holds a comma)"
                )));
            }
            if !f.is_empty() {
                fields[c as usize] = Some(f);
            }
        }
        if n != self.columns.len() {
            return Err(FlowError(format!(
                "{n} field{} where the header names {}",
                if n == 1 { "" } else { "s" },
                self.columns.len()
            )));
        }
        let get = |c: Column| fields[c as usize];
        let mut p = template.clone();
        let dst = get(Column::Dst).ok_or_else(|| FlowError("dst is empty".into()))?;
        let (dst, dst_port) = addr_port("dst", dst)?;
        p.dst = dst;
        if let Some(s) = get(Column::Proto) {
            p.proto = Proto::parse(&s.to_ascii_lowercase()).ok_or_else(|| {
                FlowError(format!(
                    "proto {s:?}: expected tcp, udp, icmp or an IP protocol"
                ))
            })?;
        }
        let port = match get(Column::Port) {
            Some(s) => Some(
                s.parse::<u16>()
                    .map_err(|_| FlowError(format!("port {s:?}: expected 0-65535")))?,
            ),
            None => None,
        };
        if let (Some(a), Some(b)) = (port, dst_port)
            && a != b
        {
            return Err(FlowError(format!(
                "port {a} and the port in dst ({b}) disagree"
            )));
        }
        p.dport = port.or(dst_port);
        if p.proto.has_ports() && p.dport.is_none() {
            return Err(FlowError(format!(
                "a {} flow needs a destination port (port column or IP:PORT)",
                p.proto.name()
            )));
        }
        if let Some(s) = get(Column::Src) {
            let (ip, port) = addr_port("src", s)?;
            p.src = Some(ip);
            p.sport = port;
        }
        if let Some(src) = p.src
            && src.is_ipv4() != p.dst.is_ipv4()
        {
            return Err(FlowError(format!(
                "src {src} and dst {} are of different address families",
                p.dst
            )));
        }
        if let Some(s) = get(Column::InIface) {
            p.in_iface = Some(s.to_string());
        }
        if let Some(s) = get(Column::OutIface) {
            p.out_iface = Some(s.to_string());
        }
        if let Some(s) = get(Column::From) {
            p.origin = Origin::parse(&s.to_ascii_lowercase())
                .ok_or_else(|| FlowError(format!("from {s:?}: expected host, pod or external")))?;
        }
        Ok(p)
    }
}

/// `IP`, `IP:PORT` or `[v6]:PORT`.
fn addr_port(what: &str, s: &str) -> Result<(IpAddr, Option<u16>), FlowError> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok((ip, None));
    }
    s.parse::<std::net::SocketAddr>()
        .map(|sa| (sa.ip(), Some(sa.port())))
        .map_err(|_| FlowError(format!("{what} {s:?}: expected IP, IP:PORT or [IPv6]:PORT")))
}

/// The flow as traced, in a flow report.
#[derive(Clone, Debug, Serialize)]
pub struct FlowFields {
    /// Source address (None: the trace chose or left it unknown).
    pub src: Option<IpAddr>,
    /// Source port.
    pub sport: Option<u16>,
    /// Destination address.
    pub dst: IpAddr,
    /// Destination port.
    pub dport: Option<u16>,
    /// Protocol name.
    pub proto: String,
    /// Where the packet starts.
    pub from: Origin,
    /// Input interface.
    pub in_iface: Option<String>,
    /// Output interface.
    pub out_iface: Option<String>,
}

impl FlowFields {
    /// The fields of `p` a flow file can set.
    pub fn of(p: &Packet) -> FlowFields {
        FlowFields {
            src: p.src,
            sport: p.sport,
            dst: p.dst,
            dport: p.dport,
            proto: p.proto.name(),
            from: p.origin,
            in_iface: p.in_iface.clone(),
            out_iface: p.out_iface.clone(),
        }
    }
}

/// The rule (or chain policy) that took an outcome's verdict, and who wrote it.
#[derive(Clone, Debug, Serialize)]
pub struct DecidingRule {
    /// The hook the rule's chain runs in.
    pub hook: HookId,
    /// Its table.
    pub table: String,
    /// Its chain.
    pub chain: String,
    /// 1-based rule number; `null` for a chain policy.
    pub rule: Option<u32>,
    /// The rule as read, or `policy ACCEPT`.
    pub text: String,
    /// Who wrote the rule (plumb's owner catalogue: comments, chain names, table).
    pub owner: String,
}

/// One flow's trace, summarised: one JSON line of `plumb trace --flows`.
#[derive(Clone, Debug, Serialize)]
pub struct FlowReport {
    /// Line of the flow file.
    pub line: u64,
    /// The flow as traced.
    pub flow: FlowFields,
    /// The verdict of every outcome when they agree; `MIXED` when they do not.
    pub verdict: &'static str,
    /// Distinct DNAT results over the outcomes, most probable first (empty: none).
    pub dnat: Vec<String>,
    /// The kube-proxy service on the most probable outcome's path.
    pub service: Option<String>,
    /// The rule that took the most probable outcome's verdict.
    pub decided_by: Option<DecidingRule>,
    /// The most probable outcome's path: the rules that matched and the policies
    /// that applied, as `HOOK TABLE CHAIN #N` / `HOOK TABLE CHAIN policy P`.
    pub path: Vec<String>,
    /// Every outcome, most probable first.
    pub outcomes: Vec<OutcomeReport>,
    /// As in `plumb trace --json`: more outcomes existed than were kept.
    pub truncated: bool,
    /// As in `plumb trace --json`: why the trace stopped before exploring every path.
    pub incomplete: Option<String>,
}

/// The verdict of every outcome when they agree, else `MIXED`.
pub fn common_verdict(t: &Trace) -> &'static str {
    let mut it = t.outcomes.iter().map(|o| o.verdict);
    match it.next() {
        None => "INDETERMINATE",
        Some(first) if it.all(|v| v == first) => first.as_str(),
        Some(_) => "MIXED",
    }
}

fn table_label(index: &Index<'_>, chain: u32) -> String {
    let table = index.table_of(chain);
    if table.backend == plumb_ruleset::Backend::Nftables {
        format!("{} {}", table.family, table.name)
    } else {
        table.name.to_string()
    }
}

/// The step that took the outcome's verdict: the last rule that matched or policy
/// that applied. For an accepted packet, NAT, mangle and raw chains decide nothing
/// (their policies accept everything), so the last such step of a filtering chain.
fn deciding_step(index: &Index<'_>, o: &Outcome) -> Option<usize> {
    let filtering = |chain: u32| {
        let table = index.table_of(chain);
        if table.backend == plumb_ruleset::Backend::Nftables {
            // An nft base chain of type nat or route decides no verdict either.
            index
                .chain(chain)
                .chain
                .base
                .as_ref()
                .is_none_or(|b| b.chain_type.as_deref().is_none_or(|t| t == "filter"))
        } else {
            !matches!(&*table.name, "nat" | "mangle" | "raw" | "security")
        }
    };
    let decides = |s: &crate::outcome::Step| matches!(s.kind, StepKind::Matched | StepKind::Policy);
    let last = o.steps.iter().rposition(decides)?;
    if o.verdict != Verdict::Accept {
        return Some(last);
    }
    o.steps
        .iter()
        .rposition(|s| decides(s) && filtering(s.chain))
        .or(Some(last))
}

/// What a flow report needs to know about each rule on a path, computed once per
/// rule for a whole batch: the owner of a deciding rule, the kube-proxy service and
/// endpoint a rule's comments name (reading comments means splitting the rule's
/// words: done per outcome per matched rule, it cost as much as the trace itself).
#[derive(Debug, Default)]
pub struct ReportCache {
    owners: FastMap<(u32, u32), String>,
    names: FastMap<(u32, u32), (Option<String>, Option<String>)>,
}

impl ReportCache {
    fn owner(&mut self, index: &Index<'_>, chain: u32, rule: u32) -> Option<String> {
        if let Some(o) = self.owners.get(&(chain, rule)) {
            return Some(o.clone());
        }
        let c = index.chain(chain);
        let r = c.chain.rules.get(rule as usize)?;
        let owner = plumb_ruleset::owner::rule_owner(index.table_of(chain), c.chain, r)
            .owner
            .0;
        self.owners.insert((chain, rule), owner.clone());
        Some(owner)
    }

    fn service_and_endpoint(
        &mut self,
        index: &Index<'_>,
        o: &Outcome,
    ) -> (Option<String>, Option<String>) {
        for s in &o.steps {
            if s.kind == StepKind::Matched {
                self.names.entry((s.chain, s.rule)).or_insert_with(|| {
                    index
                        .chain(s.chain)
                        .chain
                        .rules
                        .get(s.rule as usize)
                        .map(crate::outcome::rule_service_and_endpoint)
                        .unwrap_or_default()
                });
            }
        }
        let names = &self.names;
        crate::outcome::service_and_endpoint_with(index, o, |chain, rule| {
            names.get(&(chain, rule)).map_or((None, None), |(s, e)| {
                (
                    s.as_deref().map(Cow::Borrowed),
                    e.as_deref().map(Cow::Borrowed),
                )
            })
        })
    }
}

/// The deciding rule of an outcome, with its owner.
pub fn deciding_rule(index: &Index<'_>, o: &Outcome) -> Option<DecidingRule> {
    deciding_rule_cached(index, o, &mut ReportCache::default())
}

fn deciding_rule_cached(
    index: &Index<'_>,
    o: &Outcome,
    cache: &mut ReportCache,
) -> Option<DecidingRule> {
    let step = &o.steps[deciding_step(index, o)?];
    let c = index.chain(step.chain);
    let table = index.table_of(step.chain);
    let (rule, text, owner) = match step.kind {
        StepKind::Matched => {
            let r = c.chain.rules.get(step.rule as usize)?;
            (
                Some(plumb_ruleset::position_at(step.rule as usize)),
                r.text.to_string(),
                cache.owner(index, step.chain, step.rule)?,
            )
        }
        _ => {
            let p = index
                .policy(step.chain)
                .map(|p| p.as_iptables().to_string())
                .unwrap_or_else(|| "RETURN".into());
            (
                None,
                format!("policy {p}"),
                plumb_ruleset::owner::chain_owner(table, c.chain).owner.0,
            )
        }
    };
    Some(DecidingRule {
        hook: step.hook,
        table: table_label(index, step.chain),
        chain: c.chain.name.to_string(),
        rule,
        text,
        owner,
    })
}

/// The matched rules and applied policies of an outcome's path.
pub fn path_summary(index: &Index<'_>, o: &Outcome) -> Vec<String> {
    let mut path = Vec::new();
    for s in &o.steps {
        let c = index.chain(s.chain);
        match s.kind {
            StepKind::Matched => {
                let n = c
                    .chain
                    .rules
                    .get(s.rule as usize)
                    .map_or(0, |_| plumb_ruleset::position_at(s.rule as usize));
                path.push(format!(
                    "{} {} {} #{n}",
                    s.hook.name(),
                    table_label(index, s.chain),
                    c.chain.name
                ));
            }
            StepKind::Policy => {
                let p = index
                    .policy(s.chain)
                    .map(|p| p.as_iptables().to_string())
                    .unwrap_or_else(|| "RETURN".into());
                path.push(format!(
                    "{} {} {} policy {p}",
                    s.hook.name(),
                    table_label(index, s.chain),
                    c.chain.name
                ));
            }
            _ => {}
        }
    }
    path
}

/// The report of one flow's trace. `steps`: also give every outcome's steps, as
/// `plumb trace --json` does.
pub fn flow_report(
    index: &Index<'_>,
    line: u64,
    packet: &Packet,
    t: &Trace,
    steps: bool,
) -> FlowReport {
    flow_report_cached(index, line, packet, t, steps, &mut ReportCache::default())
}

/// [`flow_report`] with per-rule facts kept in `cache` across the flows of a batch
/// (one cache per index).
pub fn flow_report_cached(
    index: &Index<'_>,
    line: u64,
    packet: &Packet,
    t: &Trace,
    steps: bool,
    cache: &mut ReportCache,
) -> FlowReport {
    let mut dnat: Vec<String> = Vec::new();
    let outcomes: Vec<OutcomeReport> = t
        .outcomes
        .iter()
        .map(|o| {
            if let Some(d) = &o.dnat
                && !dnat.contains(d)
            {
                dnat.push(d.clone());
            }
            let (service, endpoint) = cache.service_and_endpoint(index, o);
            OutcomeReport {
                verdict: o.verdict,
                probability: o.probability,
                dnat: o.dnat.clone(),
                snat: o.snat.clone(),
                conditions: o.conditions.clone(),
                routes: o.routes,
                delivery: o.delivery,
                why: o.why.clone(),
                service,
                endpoint,
                // Steps are most of a report's size: only when asked for.
                steps: if steps {
                    o.steps.iter().map(|s| s.report(index)).collect()
                } else {
                    Vec::new()
                },
            }
        })
        .collect();
    let first = t.outcomes.first();
    FlowReport {
        line,
        flow: FlowFields::of(packet),
        verdict: common_verdict(t),
        dnat,
        service: outcomes.first().and_then(|o| o.service.clone()),
        decided_by: first.and_then(|o| deciding_rule_cached(index, o, cache)),
        path: first.map(|o| path_summary(index, o)).unwrap_or_default(),
        outcomes,
        truncated: t.truncated,
        incomplete: t.incomplete.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template() -> Packet {
        Packet::new("0.0.0.0".parse().unwrap(), 0, Proto::Tcp, Origin::Host)
    }

    #[test]
    fn header_columns_in_any_order() {
        let c = FlowColumns::parse_header("proto, dst ,from,port").unwrap();
        assert_eq!(
            c.columns(),
            [Column::Proto, Column::Dst, Column::From, Column::Port]
        );
        let p = c.parse_flow("udp,10.43.0.10,pod,53", &template()).unwrap();
        assert_eq!(p.proto, Proto::Udp);
        assert_eq!(p.dst, "10.43.0.10".parse::<IpAddr>().unwrap());
        assert_eq!(p.dport, Some(53));
        assert_eq!(p.origin, Origin::Pod);
    }

    #[test]
    fn empty_fields_take_the_template() {
        let c = FlowColumns::parse_header("src,dst,port,proto,in_iface,out_iface,from").unwrap();
        let mut t = template();
        t.origin = Origin::External;
        t.in_iface = Some("eth0".into());
        let p = c.parse_flow(",10.43.0.1:443,,,,,", &t).unwrap();
        assert_eq!(p.dport, Some(443));
        assert_eq!(p.origin, Origin::External);
        assert_eq!(p.in_iface.as_deref(), Some("eth0"));
        assert_eq!(p.src, None);
        let p = c
            .parse_flow("10.42.0.9:40000,[fd00::1]:80,,,cni0,,pod", &t)
            .unwrap_err();
        assert!(p.0.contains("different address families"), "{p}");
    }

    #[test]
    fn bad_headers_and_lines_say_why() {
        let e = FlowColumns::parse_header("10.42.0.9,10.43.0.1,443").unwrap_err();
        assert!(e.0.contains("header line"), "{e}");
        let e = FlowColumns::parse_header("src,dest").unwrap_err();
        assert!(e.0.contains("\"dest\""), "{e}");
        let e = FlowColumns::parse_header("src,port").unwrap_err();
        assert!(e.0.contains("no dst"), "{e}");
        let e = FlowColumns::parse_header("dst,dst").unwrap_err();
        assert!(e.0.contains("twice"), "{e}");
        let c = FlowColumns::parse_header("dst,port,proto").unwrap();
        for (line, want) in [
            ("10.43.0.1,443", "2 fields"),
            ("10.43.0.1,443,tcp,x", "4 fields"),
            ("10.43.0.300,443,tcp", "dst"),
            ("10.43.0.1,70000,tcp", "port"),
            ("10.43.0.1,,tcp", "needs a destination port"),
            ("10.43.0.1:80,443,tcp", "disagree"),
            ("10.43.0.1,443,gre2", "proto"),
            ("\"10.43.0.1\",443,tcp", "quotes"),
        ] {
            let e = c.parse_flow(line, &template()).unwrap_err();
            assert!(e.0.contains(want), "{line}: {e}");
        }
        assert!(c.parse_flow("10.43.0.1,,icmp", &template()).is_ok());
    }

    #[test]
    fn comments_and_blank_lines_are_skipped() {
        assert!(is_skipped(""));
        assert!(is_skipped("   "));
        assert!(is_skipped("  # a note"));
        assert!(!is_skipped("10.0.0.1,80"));
    }
}
