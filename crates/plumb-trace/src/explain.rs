//! Human explanations of a trace: what an expert would say about the path, naming
//! kube-proxy services and endpoints from the rules' comments.

use crate::index::Index;
use crate::outcome::{Outcome, StepKind, Trace, Verdict};
use std::fmt::Write;

/// Service (`ns/name:port`) and endpoint (`ip:port`) of an outcome, from kube-proxy
/// comments (`"ns/svc:p cluster IP"`, `"ns/svc:p -> 10.42.1.5:8443"`) and nft chain names.
pub fn service_and_endpoint(index: &Index<'_>, o: &Outcome) -> (Option<String>, Option<String>) {
    service_and_endpoint_with(index, o, |chain, rule| {
        let c = index.chain(chain);
        c.chain
            .rules
            .get(rule as usize)
            .map(rule_service_and_endpoint)
            .unwrap_or_default()
    })
}

/// The service (the first named) and endpoint (the last named) a rule's kube-proxy
/// comments give.
pub fn rule_service_and_endpoint(rule: &plumb_ruleset::Rule) -> (Option<String>, Option<String>) {
    let (mut service, mut endpoint) = (None, None);
    for comment in rule.comments() {
        if let Some((svc, ep)) = comment.split_once(" -> ") {
            service.get_or_insert_with(|| svc.to_string());
            endpoint = Some(ep.to_string());
        } else if let Some(svc) = [
            "cluster IP",
            "loadbalancer IP",
            "external IP",
            "has no endpoints",
        ]
        .iter()
        .find_map(|suffix| comment.strip_suffix(suffix))
        {
            service.get_or_insert_with(|| svc.trim().to_string());
        }
    }
    (service, endpoint)
}

/// [`service_and_endpoint`] with each matched rule's contribution from `rule_names`
/// (chain, rule index): a batch of traces computes it once per rule.
pub fn service_and_endpoint_with(
    index: &Index<'_>,
    o: &Outcome,
    mut rule_names: impl FnMut(u32, u32) -> (Option<String>, Option<String>),
) -> (Option<String>, Option<String>) {
    let (mut service, mut endpoint) = (None, None);
    for s in &o.steps {
        if s.kind != StepKind::Matched {
            continue;
        }
        let c = index.chain(s.chain);
        let (svc, ep) = rule_names(s.chain, s.rule);
        if service.is_none() {
            service = svc;
        }
        if ep.is_some() {
            endpoint = ep;
        }
        // nftables mode: service-HASH-ns/name/proto/port, endpoint-HASH-ns/name/proto/port__ip/port.
        let name = &*c.chain.name;
        if let Some(rest) = name
            .strip_prefix("service-")
            .and_then(|r| r.split_once('-'))
            .map(|(_, r)| r)
        {
            service.get_or_insert_with(|| rest.to_string());
        }
        if let Some((_, ep)) = name
            .strip_prefix("endpoint-")
            .and_then(|r| r.split_once("__"))
        {
            endpoint = Some(ep.replacen('/', ":", 1));
        }
    }
    if service.is_none() {
        endpoint = None;
    }
    (service, endpoint)
}

/// A multi-line explanation of the trace.
pub fn explain(index: &Index<'_>, trace: &Trace, verbose: bool) -> String {
    let mut out = String::new();
    if let Some(why) = &trace.incomplete {
        let _ = writeln!(
            out,
            "INDETERMINATE: {why}: plumb stopped exploring; the outcomes below are incomplete"
        );
    }
    let n = trace.outcomes.len();
    let _ = writeln!(out, "{n} outcome{}:", if n == 1 { "" } else { "s" });
    for (i, o) in trace.outcomes.iter().enumerate() {
        let (svc, ep) = service_and_endpoint(index, o);
        let _ = write!(
            out,
            "  [{}] {:<13} p={}",
            i + 1,
            o.verdict.as_str(),
            crate::simulate::fmt_p(o.probability)
        );
        if let Some(d) = &o.dnat {
            let _ = write!(out, "  DNAT -> {d}");
        }
        if let Some(s) = &o.snat {
            let _ = write!(out, "  SNAT {s}");
        }
        let _ = writeln!(out);
        match (&svc, &ep, o.verdict) {
            (Some(s), Some(e), Verdict::Accept) => {
                let _ = writeln!(out, "      Service {s} -> endpoint {e}; {}", o.why);
            }
            (Some(s), _, _) => {
                let _ = writeln!(out, "      Service {s}; {}", o.why);
            }
            _ => {
                let _ = writeln!(out, "      {}", o.why);
            }
        }
        for c in &o.conditions {
            let _ = writeln!(out, "      if: {c}");
        }
        // The outcome for the unexplored part says how many paths it stands for.
        let cut = trace
            .incomplete
            .as_ref()
            .is_some_and(|w| o.why.starts_with(w.as_str()));
        if o.routes > 1.0 && !cut {
            let n = if o.routes < 1e9 {
                format!("{}", o.routes)
            } else {
                format!("about {:.1e}", o.routes)
            };
            let _ = writeln!(
                out,
                "      ({n} routes lead here; the path shown is the most probable)"
            );
        }
    }
    for (i, o) in trace.outcomes.iter().enumerate() {
        if !verbose && i > 0 {
            if i == 1 && n > 1 {
                let _ = writeln!(out, "\n(paths of the other outcomes: --verbose or --json)");
            }
            break;
        }
        let _ = writeln!(out, "\nPath of outcome [{}]:", i + 1);
        let mut not_matched = 0usize;
        for s in &o.steps {
            let r = s.report(index);
            match s.kind {
                StepKind::NotMatched(_) if !verbose => {
                    not_matched += 1;
                    continue;
                }
                StepKind::Skipped(_) if !verbose => continue,
                _ => {}
            }
            if not_matched > 0 {
                let _ = writeln!(
                    out,
                    "      ({not_matched} rule{} did not match)",
                    if not_matched == 1 { "" } else { "s" }
                );
                not_matched = 0;
            }
            let place = match r.rule {
                Some(n) => format!("{} {} {} #{n}", r.hook.name(), r.table, r.chain),
                None => format!("{} {} {}", r.hook.name(), r.table, r.chain),
            };
            let mark = if r.matched { "->" } else { "  " };
            let _ = writeln!(out, "  {mark} {place}: {}", r.text);
            if let Some(w) = &r.why {
                let _ = writeln!(out, "       {w}");
            }
        }
    }
    out
}
