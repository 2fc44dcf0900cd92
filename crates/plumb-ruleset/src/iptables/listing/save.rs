//! A listed rule back in `iptables-save` syntax, when the listing shows all of it.
//!
//! A listing row translates only when nothing about the rule is left to guess: the
//! interface columns are shown (`-v`), addresses and ports are numbers (`-n`), every
//! word of the option text was recognised, and the target's options are all printed.
//! Anything else is refused with the reason, never approximated: a printed rule that
//! differs from the kernel's is worse than a rule left out and said so.
//!
//! The result is the rule's options after `-A CHAIN` in the order the listing shows
//! them; the canonical printer re-reads it with the `iptables-save` grammar and prints
//! it in save order (`crate::iptables::canonical`).

use crate::model::Family;
use crate::model::listed::{
    Fragment, ListedMatch, ListedRule, ListedTarget, Negatable, PortDirection, PortRange,
};
use crate::model::xt::TARGET_EXTENSIONS;
use std::fmt::Write;
use std::net::IpAddr;

/// Why a listed rule has no exact `iptables-save` form.
pub type Refusal = String;

/// The options of `rule` after `-A CHAIN` (each preceded by a space), or why the
/// listing does not show enough to write them exactly.
pub fn save_spec(rule: &ListedRule, family: Family) -> Result<String, Refusal> {
    if !rule.unrecognised.is_empty() {
        return Err(format!(
            "options plumb does not translate: {}",
            rule.unrecognised.join(" ")
        ));
    }
    let mut o = String::with_capacity(128);
    address(&mut o, "-s", &rule.source, family)?;
    address(&mut o, "-d", &rule.destination, family)?;
    if !rule.interfaces_listed {
        return Err("listing made without -v: the in/out interface columns are not shown".into());
    }
    for (flag, iface) in [("-i", &rule.in_interface), ("-o", &rule.out_interface)] {
        if let Some(i) = iface {
            negatable(&mut o, flag, i);
        }
    }
    protocol(&mut o, &rule.protocol)?;
    match rule.fragment {
        Fragment::Any => {}
        Fragment::Fragments => o.push_str(" -f"),
        Fragment::NotFragments => o.push_str(" ! -f"),
        Fragment::NotShown if family == Family::Ip6 => {}
        Fragment::NotShown => return Err("the opt column (fragments) is blank".into()),
    }
    for m in &rule.matches {
        listed_match(&mut o, m)?;
    }
    target(&mut o, rule)?;
    Ok(o)
}

fn negatable(o: &mut String, flag: &str, v: &Negatable) {
    if v.negated {
        o.push_str(" !");
    }
    let _ = write!(o, " {flag} {}", v.value);
}

/// `-s`/`-d`: `0.0.0.0/0` and `anywhere` are no option; a bare address is a host.
fn address(o: &mut String, flag: &str, v: &Negatable, family: Family) -> Result<(), Refusal> {
    let any = matches!(&*v.value, "0.0.0.0/0" | "::/0" | "anywhere");
    if any && !v.negated {
        return Ok(());
    }
    let value = if any {
        if family == Family::Ip6 {
            "::/0"
        } else {
            "0.0.0.0/0"
        }
        .to_string()
    } else {
        let (addr, mask) = match v.value.split_once('/') {
            Some((a, m)) => (a, Some(m)),
            None => (&*v.value, None),
        };
        let parsed: IpAddr = addr.parse().map_err(|_| {
            format!(
                "{flag} {}: not an address (a host name from a listing made without -n, or redacted)",
                v.value
            )
        })?;
        if parsed.is_ipv6() != (family == Family::Ip6) {
            return Err(format!("{flag} {}: not an address of this family", v.value));
        }
        let host = if parsed.is_ipv6() { 128 } else { 32 };
        match mask {
            None => format!("{addr}/{host}"),
            Some(m) if m.parse::<u8>().is_ok_and(|l| l <= host) => format!("{addr}/{m}"),
            Some(m) if m.parse::<IpAddr>().is_ok() => format!("{addr}/{m}"),
            Some(_) => return Err(format!("{flag} {}: unreadable mask", v.value)),
        }
    };
    negatable(
        o,
        flag,
        &Negatable {
            negated: v.negated,
            value: value.into(),
        },
    );
    Ok(())
}

/// The `prot` column: `all`/`0` is no option; a number or a name is `-p`.
fn protocol(o: &mut String, p: &Negatable) -> Result<(), Refusal> {
    if matches!(&*p.value, "all" | "0") && !p.negated {
        return Ok(());
    }
    if p.value.is_empty()
        || !p
            .value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-')
    {
        return Err(format!("unreadable protocol {:?}", p.value));
    }
    negatable(o, "-p", p);
    Ok(())
}

fn numeric_port(p: &str) -> Result<&str, Refusal> {
    p.parse::<u16>()
        .map(|_| p)
        .map_err(|_| format!("port {p:?} is a service name (listing made without -n)"))
}

fn port(o: &mut String, flag: &str, r: &PortRange) -> Result<(), Refusal> {
    if r.negated {
        o.push_str(" !");
    }
    let _ = write!(o, " {flag} {}", numeric_port(&r.first)?);
    if let Some(last) = &r.last {
        let _ = write!(o, ":{}", numeric_port(last)?);
    }
    Ok(())
}

/// `flags:0x17/0x02` as `--tcp-flags FIN,SYN,RST,ACK SYN`.
fn tcp_flags(o: &mut String, printed: &str) -> Result<(), Refusal> {
    const NAMES: [&str; 8] = ["FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"];
    let (negated, v) = match printed.strip_prefix('!') {
        Some(v) => (true, v),
        None => (false, printed),
    };
    let hex = |s: &str| {
        s.strip_prefix("0x")
            .and_then(|h| u8::from_str_radix(h, 16).ok())
    };
    let (Some(mask), Some(comp)) = v
        .split_once('/')
        .map_or((None, None), |(m, c)| (hex(m), hex(c)))
    else {
        return Err(format!("unreadable tcp flags {printed:?}"));
    };
    let names = |bits: u8| {
        let n: Vec<&str> = (0..8)
            .filter(|i| bits & (1 << i) != 0)
            .map(|i| NAMES[i])
            .collect();
        if n.is_empty() {
            "NONE".to_string()
        } else {
            n.join(",")
        }
    };
    if negated {
        o.push_str(" !");
    }
    let _ = write!(o, " --tcp-flags {} {}", names(mask), names(comp));
    Ok(())
}

/// A comment as `iptables-save` quotes it (`"` and `\` escaped).
fn quoted(text: &str) -> String {
    let mut q = String::with_capacity(text.len() + 2);
    q.push('"');
    for c in text.chars() {
        if matches!(c, '"' | '\\') {
            q.push('\\');
        }
        q.push(c);
    }
    q.push('"');
    q
}

fn not(negated: bool) -> &'static str {
    if negated { " !" } else { "" }
}

fn listed_match(o: &mut String, m: &ListedMatch) -> Result<(), Refusal> {
    match m {
        ListedMatch::Comment(c) => {
            let _ = write!(o, " -m comment --comment {}", quoted(c));
        }
        ListedMatch::Ports {
            protocol,
            source,
            destination,
            tcp_flags: flags,
        } => {
            let _ = write!(o, " -m {protocol}");
            if let Some(s) = source {
                port(o, "--sport", s)?;
            }
            if let Some(d) = destination {
                port(o, "--dport", d)?;
            }
            if let Some(f) = flags {
                tcp_flags(o, f)?;
            }
        }
        ListedMatch::Multiport {
            direction,
            negated,
            ports,
        } => {
            let flag = match direction {
                PortDirection::Source => "--sports",
                PortDirection::Destination => "--dports",
                PortDirection::Either => "--ports",
            };
            for p in ports {
                for one in p.split(':') {
                    numeric_port(one)?;
                }
            }
            let _ = write!(
                o,
                " -m multiport{} {flag} {}",
                not(*negated),
                ports.join(",")
            );
        }
        ListedMatch::ConnState {
            keyword,
            negated,
            states,
        } => {
            let (module, flag) = match keyword.as_str() {
                "ctstate" => ("conntrack", "--ctstate"),
                _ => ("state", "--state"),
            };
            let _ = write!(
                o,
                " -m {module}{} {flag} {}",
                not(*negated),
                states.join(",")
            );
        }
        ListedMatch::Mark {
            negated,
            value,
            mask,
        } => {
            let _ = write!(o, " -m mark{} --mark {value}", not(*negated));
            if let Some(m) = mask {
                let _ = write!(o, "/{m}");
            }
        }
        ListedMatch::AddrType {
            source_type,
            destination_type,
            limit_in,
            limit_out,
        } => {
            o.push_str(" -m addrtype");
            if let Some(t) = source_type {
                negatable(o, "--src-type", t);
            }
            if let Some(t) = destination_type {
                negatable(o, "--dst-type", t);
            }
            if *limit_in {
                o.push_str(" --limit-iface-in");
            }
            if *limit_out {
                o.push_str(" --limit-iface-out");
            }
        }
        ListedMatch::Statistic {
            mode,
            negated,
            probability,
            every,
            packet,
        } => match (mode.as_str(), probability, every) {
            ("random", Some(p), None) => {
                let _ = write!(
                    o,
                    " -m statistic --mode random{} --probability {p}",
                    not(*negated)
                );
            }
            ("nth", None, Some(e)) => {
                let _ = write!(o, " -m statistic --mode nth{} --every {e}", not(*negated));
                if let Some(p) = packet {
                    let _ = write!(o, " --packet {p}");
                }
            }
            _ => return Err(format!("statistic mode {mode} with options not shown")),
        },
        ListedMatch::Recent {
            negated,
            command,
            seconds,
            hit_count,
            reap,
            ttl,
            name,
            side,
            mask,
        } => {
            let command = match command.as_str() {
                "SET" => "--set",
                "CHECK" => "--rcheck",
                "UPDATE" => "--update",
                "REMOVE" => "--remove",
                other => return Err(format!("recent command {other}")),
            };
            let _ = write!(o, " -m recent{} {command}", not(*negated));
            if let Some(s) = seconds {
                let _ = write!(o, " --seconds {s}");
            }
            if *reap {
                o.push_str(" --reap");
            }
            if let Some(h) = hit_count {
                let _ = write!(o, " --hitcount {h}");
            }
            if *ttl {
                o.push_str(" --rttl");
            }
            if let Some(n) = name {
                let _ = write!(o, " --name {n}");
            }
            if let Some(m) = mask {
                let _ = write!(o, " --mask {m}");
            }
            match side.as_deref() {
                Some("source") => o.push_str(" --rsource"),
                Some("dest") => o.push_str(" --rdest"),
                None => {}
                Some(other) => return Err(format!("recent side {other}")),
            }
        }
        ListedMatch::Set {
            negated,
            name,
            flags,
        } => {
            let _ = write!(o, " -m set{} --match-set {name} {flags}", not(*negated));
        }
        ListedMatch::Physdev { options } => {
            let _ = write!(o, " -m physdev {}", options.join(" "));
        }
        ListedMatch::Limit { average, burst } => {
            // libxt_limit saves the burst only when it is not the default, 5.
            let _ = write!(o, " -m limit --limit {average}");
            if burst != "5" {
                let _ = write!(o, " --limit-burst {burst}");
            }
        }
    }
    Ok(())
}

/// Checks a DNAT/SNAT `to:` range is addresses and ports as iptables prints them:
/// `10.0.0.1`, `10.0.0.1-10.0.0.9:80-90`, `[fd00::1]:53`, `:80` (port only).
fn nat_range(to: &str) -> Result<(), Refusal> {
    let bad = || format!("to:{to} is not an address range (redacted or garbled)");
    let (addrs, ports) = if let Some(rest) = to.strip_prefix('[') {
        let (a, p) = rest.split_once(']').ok_or_else(bad)?;
        (a, p.strip_prefix(':'))
    } else if to.matches(':').count() > 1 {
        (to, None)
    } else {
        match to.split_once(':') {
            Some((a, p)) => (a, Some(p)),
            None => (to, None),
        }
    };
    if !addrs.is_empty() {
        for a in addrs.split('-') {
            a.parse::<IpAddr>().map_err(|_| bad())?;
        }
    }
    if let Some(p) = ports {
        for one in p.split('-') {
            one.parse::<u16>().map_err(|_| bad())?;
        }
    }
    Ok(())
}

/// `LOG level` as a number, from a number or a syslog name (`warn` without `-n`).
fn log_level(level: &str) -> Result<u8, Refusal> {
    const NAMES: [&str; 8] = [
        "emerg", "alert", "crit", "err", "warn", "notice", "info", "debug",
    ];
    if let Ok(n) = level.parse::<u8>() {
        return if n < 8 {
            Ok(n)
        } else {
            Err(format!("LOG level {level}"))
        };
    }
    let l = match level {
        "warning" => "warn",
        "error" => "err",
        "panic" => "emerg",
        l => l,
    };
    NAMES
        .iter()
        .position(|n| *n == l)
        .map(|p| p as u8)
        .ok_or_else(|| format!("LOG level {level}"))
}

fn target(o: &mut String, rule: &ListedRule) -> Result<(), Refusal> {
    let Some(t) = rule.target.as_deref() else {
        return Ok(());
    };
    let flag = if rule.goto { "-g" } else { "-j" };
    let details = rule.target_details.as_deref();
    if rule.goto || !TARGET_EXTENSIONS.contains(&t) {
        if details.is_some() {
            return Err(format!("chain {t} with target options"));
        }
        let _ = write!(o, " {flag} {t}");
        return Ok(());
    }
    let _ = write!(o, " -j {t}");
    match (t, details) {
        ("ACCEPT" | "DROP" | "RETURN" | "QUEUE" | "MASQUERADE" | "REDIRECT", None) => {}
        (
            "DNAT" | "SNAT",
            Some(ListedTarget::Nat {
                to,
                random,
                random_fully,
                persistent,
            }),
        ) if !to.is_empty() => {
            let flag = if t == "DNAT" {
                "--to-destination"
            } else {
                "--to-source"
            };
            for x in to {
                nat_range(x)?;
                let _ = write!(o, " {flag} {x}");
            }
            for (on, f) in [
                (*random, " --random"),
                (*random_fully, " --random-fully"),
                (*persistent, " --persistent"),
            ] {
                if on {
                    o.push_str(f);
                }
            }
        }
        (
            "MASQUERADE",
            Some(ListedTarget::Masquerade {
                ports,
                random,
                random_fully,
            }),
        ) => {
            if let Some(p) = ports {
                let _ = write!(o, " --to-ports {p}");
            }
            if *random {
                o.push_str(" --random");
            }
            if *random_fully {
                o.push_str(" --random-fully");
            }
        }
        ("REDIRECT", Some(ListedTarget::Redirect { ports, random })) => {
            if let Some(p) = ports {
                let _ = write!(o, " --to-ports {p}");
            }
            if *random {
                o.push_str(" --random");
            }
        }
        ("MARK", Some(m @ ListedTarget::Mark { .. })) => {
            let (v, mask) = m
                .mark_xset()
                .ok_or_else(|| "MARK operation not readable".to_string())?;
            let _ = write!(o, " --set-xmark {v:#x}/{mask:#x}");
        }
        ("REJECT", Some(ListedTarget::Reject { with })) => {
            let _ = write!(o, " --reject-with {with}");
        }
        (
            "LOG",
            Some(ListedTarget::Log {
                flags,
                level,
                prefix,
            }),
        ) => {
            if let Some(p) = prefix {
                let _ = write!(o, " --log-prefix {}", quoted(p));
            }
            if let Some(l) = level {
                let _ = write!(o, " --log-level {}", log_level(l)?);
            }
            let bits = match flags.as_deref() {
                None => 0,
                Some(f) => f.parse::<u32>().map_err(|_| format!("LOG flags {f}"))?,
            };
            for (bit, f) in [
                (0x01, " --log-tcp-sequence"),
                (0x02, " --log-tcp-options"),
                (0x04, " --log-ip-options"),
                (0x08, " --log-uid"),
                (0x20, " --log-macdecode"),
            ] {
                if bits & bit != 0 {
                    o.push_str(f);
                }
            }
            if bits & !0x2f != 0 {
                return Err(format!("LOG flags {bits}"));
            }
        }
        _ => {
            return Err(format!(
                "the listing does not show all options of target {t}"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iptables::listing::parse;
    use crate::model::RuleBody;

    fn specs(text: &str, family: Family) -> Vec<Result<String, Refusal>> {
        let rs = parse(text, family, Some("filter"));
        rs.tables
            .iter()
            .flat_map(|t| &t.chains)
            .flat_map(|c| &c.rules)
            .map(|r| match &r.body {
                RuleBody::Approximate(l) => save_spec(l, family),
                _ => panic!("a listed rule"),
            })
            .collect()
    }

    const V: &str = "Chain INPUT (policy ACCEPT 0 packets, 0 bytes)\n pkts bytes target     prot opt in     out     source               destination\n";

    #[test]
    fn verbose_numeric_rows_translate() {
        let text = format!(
            "{V}    0     0 ACCEPT     6    --  eth0   *       10.0.0.0/8           10.96.0.1            /* default/kubernetes:https */ tcp dpt:443 ctstate NEW\n\
             \x20   0     0 MARK       all  --  *      !lo     0.0.0.0/0            0.0.0.0/0            MARK or 0x4000\n\
             \x20   0     0 REJECT     udp  --  *      *       1.2.3.4              0.0.0.0/0            udp dpts:1000:2000 reject-with icmp-port-unreachable\n"
        );
        let s = specs(&text, Family::Ip);
        assert_eq!(
            s[0].as_deref(),
            Ok(
                " -s 10.0.0.0/8 -d 10.96.0.1/32 -i eth0 -p 6 -m comment --comment \"default/kubernetes:https\" -m tcp --dport 443 -m conntrack --ctstate NEW -j ACCEPT"
            )
        );
        assert_eq!(
            s[1].as_deref(),
            Ok(" ! -o lo -j MARK --set-xmark 0x4000/0x4000")
        );
        assert_eq!(
            s[2].as_deref(),
            Ok(
                " -s 1.2.3.4/32 -p udp -m udp --dport 1000:2000 -j REJECT --reject-with icmp-port-unreachable"
            )
        );
    }

    #[test]
    fn rows_missing_columns_or_names_are_refused() {
        let plain = "Chain INPUT (policy ACCEPT)\ntarget     prot opt source               destination\nACCEPT     all  --  0.0.0.0/0            0.0.0.0/0\n";
        let e = specs(plain, Family::Ip).remove(0).unwrap_err();
        assert!(e.contains("without -v"), "{e}");
        let names = format!(
            "{V}    0     0 ACCEPT     tcp  --  *      *       anywhere             node1.example        tcp dpt:https\n"
        );
        let e = specs(&names, Family::Ip).remove(0).unwrap_err();
        assert!(e.contains("host name"), "{e}");
        let redacted = format!(
            "{V}    0     0 DNAT       tcp  --  *      *       0.0.0.0/0            10.96.0.1            tcp dpt:443 to:<node-ip>:6443\n"
        );
        let e = specs(&redacted, Family::Ip).remove(0).unwrap_err();
        assert!(e.contains("to:<node-ip>:6443 is not an address"), "{e}");
        let odd = format!(
            "{V}    0     0 CT         all  --  *      *       0.0.0.0/0            0.0.0.0/0            CT notrack\n"
        );
        let e = specs(&odd, Family::Ip).remove(0).unwrap_err();
        assert!(e.contains("CT"), "{e}");
    }
}
