//! Finding: `garbled-nat-target` — DNAT/SNAT rules without a usable address.
//!
//! When the iptables binary that wrote the rules (inside the kube-proxy or CNI image) and
//! the one that reads them (on the host) disagree about the nf_tables/xt encoding, saved
//! NAT targets come back garbled: `--to-destination` without a value (followed directly by
//! `--random`), `0.0.0.0:0`, or text that is not an address (facts-kubernetes.md, "version
//! skew"). kube-proxy's next restore then rewrites them wrongly or fails, and service
//! traffic goes nowhere. nft `dnat`/`snat` statements without an address are reported too.

use crate::facts::CheckInput;
use plumb_findings::{Finding, Severity};
use plumb_ruleset::RuleBody;
use plumb_ruleset::iptables::XtBuf;
use plumb_ruleset::nft::NatKind;
use std::net::IpAddr;

/// Finding id: a DNAT/SNAT target (or nft `dnat`/`snat` statement) without a usable
/// address.
pub const ID: &str = "garbled-nat-target";

/// `10.0.0.1`, `10.0.0.1:80`, `10.0.0.1-10.0.0.9:80-90`, `[fd00::1]:80`, `fd00::1`.
fn usable_nat_address(s: &str) -> bool {
    let s = s.trim();
    if s.is_empty() {
        return false;
    }
    let addr_part = if let Some(rest) = s.strip_prefix('[') {
        match rest.split_once(']') {
            Some((a, _)) => a,
            None => return false,
        }
    } else if s.matches(':').count() == 1 {
        s.split_once(':').map_or(s, |(a, _)| a)
    } else {
        s
    };
    let first = addr_part.split('-').next().unwrap_or("");
    match first.parse::<IpAddr>() {
        Ok(ip) => !ip.is_unspecified(),
        Err(_) => false,
    }
}

/// Reports NAT rules whose address is missing, `0.0.0.0:0` or not an address, the mark
/// of iptables version skew between the writer and the reader.
pub fn check(facts: &CheckInput) -> Vec<Finding> {
    let mut evidence = Vec::new();
    let mut buf = XtBuf::default();
    for table in &facts.ruleset.tables {
        for c in &table.chains {
            for r in &c.rules {
                let bad = match &r.body {
                    // The target the parser recorded skips every other rule unindexed.
                    RuleBody::Xt(_)
                        if !r
                            .xt_target()
                            .is_some_and(|t| matches!(t.name, "DNAT" | "SNAT")) =>
                    {
                        false
                    }
                    RuleBody::Xt(_) => r.xt_in(&mut buf).is_some_and(|v| {
                        let Some(t) = v.target() else { return false };
                        let opt = match t.name() {
                            "DNAT" => "--to-destination",
                            "SNAT" => "--to-source",
                            _ => return false,
                        };
                        // An nft listing showed the target by name only
                        // (`xt target "DNAT"`): its address is unknown, not garbled.
                        if t.option(plumb_ruleset::nft::iptables_nft::NOT_SHOWN)
                            .is_some()
                        {
                            return false;
                        }
                        match t.option(opt) {
                            // No --to: legal only for DNAT/SNAT in very old kernels; kube-proxy
                            // always writes one.
                            None => true,
                            Some(o) => o.arg(0).is_none_or(|a| !usable_nat_address(&a)),
                        }
                    }),
                    // Its NAT statements only (most rules of a listing are not read
                    // again for them).
                    RuleBody::Nft(n) => n.nat_statements(&r.text).iter().any(|(kind, args)| {
                        if !matches!(kind, NatKind::Dnat | NatKind::Snat) {
                            return false;
                        }
                        let words: Vec<&str> = args.split_whitespace().collect();
                        // `to ADDR` / `ip to ADDR` / `to ip saddr map { ... }`: only flag a
                        // literal address that is missing or unusable.
                        match words.iter().position(|w| *w == "to") {
                            Some(i) => match words.get(i + 1) {
                                None => true,
                                Some(w)
                                    if w.starts_with(|ch: char| {
                                        ch.is_ascii_digit() || ch == '['
                                    }) =>
                                {
                                    !usable_nat_address(w)
                                }
                                Some(_) => false,
                            },
                            None => false,
                        }
                    }),
                    RuleBody::Approximate(_) => false,
                };
                if bad {
                    evidence.push(facts.rule(table, r));
                }
            }
        }
    }
    if evidence.is_empty() {
        return vec![Finding::ok(
            ID,
            "every DNAT/SNAT target has a usable address",
        )];
    }
    vec![
        Finding::problem(
            ID,
            Severity::High,
            format!("{} NAT rule(s) have a garbled or empty target address", evidence.len()),
        )
        .with_evidence(evidence)
        .explain("These DNAT/SNAT targets do not name a usable address. That is how iptables version skew shows up: the iptables inside the kube-proxy (or CNI) image and the host's iptables encode nf_tables NAT expressions differently, so what one writes the other reads back garbled (e.g. `--to-destination  --random`, `0.0.0.0:0`). Service traffic through these rules is not translated correctly, and kube-proxy's partial restores built from such a dump fail.")
        .fix("Compare `iptables --version` on the host with the iptables in the kube-proxy image (`crictl exec <kube-proxy> iptables --version`); align them (upgrade the older side) so both use the same backend and version.")
        .fix("After aligning, restart kube-proxy so it rewrites its rules with a full sync.")
        .do_not("Do not hand-edit the saved rules and restore them: the mismatch garbles them again."),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use plumb_findings::Status;

    fn run(text: &str) -> Vec<Finding> {
        crate::checks::run_on_dump(check, text)
    }

    #[test]
    fn version_skew_garbage_is_found() {
        let f = run(
            "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SEP-A - [0:0]\n:KUBE-SEP-B - [0:0]\n-A PREROUTING -j KUBE-SEP-A\n-A PREROUTING -j KUBE-SEP-B\n-A KUBE-SEP-A -p tcp -m tcp -j DNAT --to-destination  --random\n-A KUBE-SEP-B -p tcp -m tcp -j DNAT --to-destination 0.0.0.0:0\n-A PREROUTING -p tcp -j DNAT --to-destination 10.42.0.5:8443\nCOMMIT\n",
        );
        assert!(f[0].is_problem());
        assert_eq!(f[0].evidence.len(), 2);
        assert_eq!(f[0].evidence[0].line, Some(10));
    }

    #[test]
    fn good_targets_pass() {
        for a in [
            "10.0.0.1",
            "10.0.0.1:80",
            "10.0.0.1-10.0.0.9:80-90",
            "[fd00::1]:80",
            "fd00::1",
        ] {
            assert!(usable_nat_address(a), "{a}");
        }
        for a in ["", "0.0.0.0:0", "--random", "foo:80"] {
            assert!(!usable_nat_address(a), "{a}");
        }
        let f = run(
            "table ip t {\n chain c {\n  dnat to 10.0.0.1:80\n  dnat ip to ip daddr map { 1.2.3.4 : 10.0.0.1 }\n }\n}\n",
        );
        assert_eq!(f[0].status, Status::Ok, "{f:#?}");
    }
}
