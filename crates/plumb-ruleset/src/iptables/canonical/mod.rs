//! Printing rules exactly as `iptables-save` prints them.
//!
//! Input may be in any order iptables accepts (kube-proxy writes
//! `-m comment ... -m tcp -p tcp -d X --dport 80`); output is the canonical save
//! form: generic options first (`-s -d -i -o -p -f`), addresses masked with a
//! prefix length, then each match with its options in the extension's save order
//! and values normalised (`--sport 4:4` -> `--sport 4`, `--or-mark 0x4000` ->
//! `--set-xmark 0x4000/0x4000`), then the target. Text already in save form prints
//! unchanged: a rule from `iptables-save` round-trips byte for byte.
//!
//! Extensions plumb has no knowledge of print their options as written: nothing is
//! dropped. The save orders and defaults below were read from iptables' extension
//! sources (extensions/libxt_*.c `*_save` functions) and checked against the
//! iptables conformance suite (`extensions/*.t`, see tests/iptables_conformance.rs).
//!
//! Where things are: this module prints whole rulesets ([`save_text`]) and rules
//! ([`rule_line`], [`write_spec`]) with the generic options; `matches` and `targets`
//! normalise each known extension's options; `values` holds the value spellings they
//! share (addresses, ports, protocol names, marks, icmp types).

mod matches;
mod targets;
mod values;

use crate::diagnostic::Severity;
use crate::iptables::save::IptablesInput;
use crate::model::listed::ListedRule;
use crate::model::xt::{XtOptionView, XtView};
use crate::model::{Backend, Family, RuleBody, Ruleset};
use matches::match_options;
use std::fmt::Write;
use targets::target_options;
use values::range;
pub use values::{address, protocol_name};

/// How [`save_text`] prints a ruleset in `iptables-save` form.
#[derive(Clone, Copy, Debug, Default)]
pub struct PrintOptions {
    /// Keep counters as read: chain counters, and `[packets:bytes]` before rules that
    /// had them (`iptables-save -c`). When false every counter prints as zero/absent,
    /// which is what comparisons want.
    pub counters: bool,
}

/// The xtables tables of `ruleset` printed as `iptables-save` would print them.
/// Native nft tables are skipped (they have no iptables form). Rules read from a
/// listing print as rules when the listing shows all of them, else as a `#` comment
/// (see [`save_text_report`]); a native nft rule inside an iptables-nft table prints
/// as a `#` comment.
pub fn save_text(ruleset: &Ruleset, options: PrintOptions) -> String {
    save_text_report(ruleset, options).text
}

/// What [`save_text_report`] printed and what it could not.
#[derive(Clone, Debug, Default)]
pub struct SaveReport {
    /// The `iptables-save` text.
    pub text: String,
    /// Listed rules printed as `# not translated` comments instead of rules.
    pub refused: Vec<RefusedRule>,
    /// Listed rules printed without their counters because the listing rounded them
    /// (`2657K`); only counted when counters were asked for.
    pub rounded_counters: usize,
}

/// A listed rule with no exact `iptables-save` form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusedRule {
    /// Table of the listed rule (`nat`).
    pub table: String,
    /// Chain of the listed rule.
    pub chain: String,
    /// Line of the row in the input.
    pub line: u32,
    /// Why it was not translated.
    pub reason: String,
}

/// [`save_text`], also saying which listed rules were left out and why. A listed
/// rule never appears as listing text between `*table` and `COMMIT`: it is either an
/// `-A` rule that `iptables-restore` reads back to the same rule, or a comment line
/// `# not translated (line N): REASON: ROW`.
pub fn save_text_report(ruleset: &Ruleset, options: PrintOptions) -> SaveReport {
    let mut report = SaveReport::default();
    let mut out = String::with_capacity(ruleset.rule_count() * 128);
    for table in ruleset
        .tables
        .iter()
        .filter(|t| t.backend != Backend::Nftables)
    {
        let _ = writeln!(out, "*{}", table.name);
        for chain in &table.chains {
            let (policy, c) = match &chain.base {
                Some(b) => (
                    b.policy
                        .as_ref()
                        .map(|p| p.as_iptables())
                        .unwrap_or("ACCEPT"),
                    b.counters.unwrap_or_default(),
                ),
                None => ("-", Default::default()),
            };
            let c = if options.counters {
                c
            } else {
                Default::default()
            };
            let _ = writeln!(
                out,
                ":{} {} [{}:{}]",
                chain.name, policy, c.packets, c.bytes
            );
        }
        for chain in &table.chains {
            for rule in &chain.rules {
                if let crate::model::RuleBody::Nft(_) = rule.body {
                    // A native nft rule in an iptables-nft table (see
                    // `crate::nft::iptables_nft`): no iptables form, so a comment
                    // that iptables-restore skips.
                    let _ = writeln!(
                        out,
                        "# -A {}: nft rule with no iptables form: {}",
                        chain.name, rule.text
                    );
                    continue;
                }
                if let RuleBody::Approximate(listed) = &rule.body {
                    match listed_rule_line(&table.name, &chain.name, listed, table.family) {
                        Ok(line) => {
                            if options.counters
                                && let Some(c) = rule.counters()
                            {
                                if listed.counters_rounded {
                                    report.rounded_counters += 1;
                                } else {
                                    let _ = write!(out, "[{}:{}] ", c.packets, c.bytes);
                                }
                            }
                            out.push_str(&line);
                        }
                        Err(reason) => {
                            let row = rule.text.as_str().trim().replace('\n', " ");
                            let _ = write!(
                                out,
                                "# not translated (line {}): {reason}: {row}",
                                rule.line()
                            );
                            report.refused.push(RefusedRule {
                                table: table.name.to_string(),
                                chain: chain.name.to_string(),
                                line: rule.line(),
                                reason,
                            });
                        }
                    }
                    out.push('\n');
                    continue;
                }
                if options.counters
                    && let Some(c) = rule.counters()
                {
                    let _ = write!(out, "[{}:{}] ", c.packets, c.bytes);
                }
                match rule.xt() {
                    Some(x) => {
                        out.push_str("-A ");
                        out.push_str(&chain.name);
                        write_spec(&mut out, &x, table.family);
                    }
                    None => out.push_str(&rule.text),
                }
                out.push('\n');
            }
        }
        out.push_str("COMMIT\n");
    }
    report.text = out;
    report
}

/// A listed rule as a canonical `-A CHAIN ...` line: translated
/// ([`listing::save_spec`](crate::iptables::listing::save_spec)), then read back with
/// the `iptables-save` grammar, which must accept it without a diagnostic, and printed
/// in save order.
fn listed_rule_line(
    table: &str,
    chain: &str,
    listed: &ListedRule,
    family: Family,
) -> Result<String, String> {
    let spec = crate::iptables::listing::save_spec(listed, family)?;
    let text = format!("*{table}\n:{chain} - [0:0]\n-A {chain}{spec}\nCOMMIT\n");
    // A payload: the chains the rule jumps to are the listing's, not this text's.
    let input = IptablesInput {
        family,
        restore_payload: true,
        ..Default::default()
    };
    let rs = crate::iptables::save::parse(&text, &input);
    if let Some(d) = rs.diagnostics.iter().find(|d| d.severity != Severity::Note) {
        return Err(format!(
            "its translation `-A {chain}{spec}` is not valid: {}",
            d.message
        ));
    }
    rs.tables
        .iter()
        .flat_map(|t| &t.chains)
        .flat_map(|c| &c.rules)
        .find_map(|r| r.xt())
        .map(|x| rule_line(chain, &x, family))
        .ok_or_else(|| format!("its translation `-A {chain}{spec}` is not an xtables rule"))
}

/// Why a rule could not be put in canonical form (it is then printed as written).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotCanonical(pub String);

/// The canonical `-A CHAIN ...` line for a rule (without counters).
pub fn rule_line(chain: &str, rule: &XtView<'_>, family: Family) -> String {
    let mut out = String::with_capacity(128);
    out.push_str("-A ");
    out.push_str(chain);
    write_spec(&mut out, rule, family);
    out
}

/// Appends the canonical options of `rule` (each preceded by a space) to `out`.
pub fn write_spec(out: &mut String, rule: &XtView<'_>, family: Family) {
    // Generic options in save order.
    for short in ["-s", "-d", "-i", "-o", "-p", "-f"] {
        if let Some(o) = rule.generic_option(short)
            && let Some(p) = generic(short, &o, family)
        {
            emit(out, &p);
        }
    }
    // Options that belong to no match are kept where iptables would have failed.
    for o in rule.generic() {
        if !matches!(
            o.name(),
            "-s" | "--source"
                | "--src"
                | "-d"
                | "--destination"
                | "--dst"
                | "-i"
                | "--in-interface"
                | "-o"
                | "--out-interface"
                | "-p"
                | "--protocol"
                | "-f"
                | "--fragment"
        ) {
            emit(out, &verbatim(&o));
        }
    }
    let protocol = rule
        .generic_option("-p")
        .and_then(|o| o.arg(0))
        .map(|p| protocol_name(&p).to_string());
    for m in rule.matches() {
        let module = if m.implicit() {
            protocol_name(m.module())
        } else {
            m.module()
        };
        out.push_str(" -m ");
        out.push_str(module);
        let opts: Vec<XtOptionView<'_>> = m.options().collect();
        for p in match_options(module, &opts, family, protocol.as_deref()) {
            emit(out, &p);
        }
    }
    if let Some(t) = rule.target() {
        out.push_str(if t.is_goto() { " -g " } else { " -j " });
        out.push_str(t.name());
        let opts: Vec<XtOptionView<'_>> = t.options().collect();
        for p in target_options(t.name(), &opts, family) {
            emit(out, &p);
        }
    }
}

/// A generic option (`-s -d -i -o -p -f`) as save prints it; `None` when save omits
/// it (`-s 0.0.0.0/0`, `-p all`, `-i +`).
fn generic(short: &str, o: &XtOptionView<'_>, family: Family) -> Option<Printed> {
    let raw = o.raw_arg(0).unwrap_or("");
    let value = match short {
        "-s" | "-d" => {
            let a = address(raw, family).unwrap_or_else(|| raw.to_string());
            if !o.negated() && (a == "0.0.0.0/0" || a == "::/0") {
                return None;
            }
            a
        }
        "-i" | "-o" => {
            if raw == "+" && !o.negated() {
                return None;
            }
            raw.to_string()
        }
        "-p" => {
            let p = protocol_name(raw);
            if p == "all" && !o.negated() {
                return None;
            }
            p.to_string()
        }
        "-f" => return Some(Printed::new(o.negated(), "-f", Vec::new())),
        _ => raw.to_string(),
    };
    Some(Printed::new(o.negated(), short, vec![value]))
}

// ---------------------------------------------------------------- building printed options

/// One normalised option ready to print.
struct Printed {
    negated: bool,
    name: String,
    args: Vec<String>,
}

impl Printed {
    fn new(negated: bool, name: &str, args: Vec<String>) -> Printed {
        Printed {
            negated,
            name: name.to_string(),
            args,
        }
    }
}

/// Appends ` [!] NAME ARGS...`.
fn emit(out: &mut String, p: &Printed) {
    if p.negated {
        out.push_str(" !");
    }
    out.push(' ');
    out.push_str(&p.name);
    for a in &p.args {
        out.push(' ');
        out.push_str(a);
    }
}

/// An option printed as written.
fn verbatim(o: &XtOptionView<'_>) -> Printed {
    Printed {
        negated: o.negated(),
        name: o.name().to_string(),
        args: o.raw_args().map(str::to_string).collect(),
    }
}

/// A one-value option renamed to `name`, its value through `f`.
fn one(o: &XtOptionView<'_>, name: &str, f: impl Fn(&str) -> String) -> Printed {
    let v = o.raw_arg(0).map(f).unwrap_or_default();
    Printed::new(o.negated(), name, vec![v])
}

/// Appends `name args` unless one of `present` is already there: the defaults
/// iptables-save prints for options the rule left out.
fn default_option(out: &mut Vec<Printed>, present: &[&str], name: &str, args: &[&str]) {
    if !out.iter().any(|p| present.contains(&p.name.as_str())) {
        out.push(Printed::new(
            false,
            name,
            args.iter().map(|a| a.to_string()).collect(),
        ));
    }
}

/// Orders options by the extension's save order; unknown ones keep their place at the end.
fn ordered(opts: Vec<Printed>, order: &[&str]) -> Vec<Printed> {
    let mut opts = opts;
    opts.sort_by_key(|p| {
        order
            .iter()
            .position(|o| *o == p.name)
            .unwrap_or(order.len())
    });
    opts
}

/// A numeric `lo:hi` option; `None` when it covers everything and iptables omits it.
fn range_opt(o: &XtOptionView<'_>, max: u64, omit_full: bool, names: bool) -> Option<Printed> {
    let keep_full = o.negated() || !omit_full;
    range(o.raw_arg(0).unwrap_or(""), max, keep_full, ':', names)
        .map(|v| Printed::new(o.negated(), o.name(), vec![v]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::xt::XtRule;
    use crate::model::xt::words::split;

    fn canon(spec: &str) -> String {
        let mut w = Vec::new();
        split(spec, 0, &mut w).unwrap();
        let (r, _) = XtRule::build(spec, w);
        let mut out = String::new();
        write_spec(&mut out, &r.view(spec), Family::Ip);
        out.trim_start().to_string()
    }

    #[test]
    fn kube_proxy_restore_order_becomes_save_order() {
        assert_eq!(
            canon(
                r#"-m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O"#
            ),
            r#"-d 172.30.0.41/32 -p tcp -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O"#
        );
    }

    #[test]
    fn mark_targets_become_set_xmark() {
        assert_eq!(
            canon("-j MARK --or-mark 0x4000"),
            "-j MARK --set-xmark 0x4000/0x4000"
        );
        assert_eq!(
            canon("-j MARK --xor-mark 0x4000"),
            "-j MARK --set-xmark 0x4000/0x0"
        );
        assert_eq!(
            canon("-j MARK --set-xmark 4294967295"),
            "-j MARK --set-xmark 0xffffffff/0xffffffff"
        );
    }

    #[test]
    fn addresses_are_masked_and_suffixed() {
        assert_eq!(canon("-s 10.1.2.3/8 -j DROP"), "-s 10.0.0.0/8 -j DROP");
        assert_eq!(canon("-d 10.0.0.0/255.255.255.0"), "-d 10.0.0.0/24");
        assert_eq!(canon("-s 0.0.0.0/0 -j DROP"), "-j DROP");
    }

    #[test]
    fn ports_and_flags() {
        assert_eq!(canon("-p tcp --dport 4:4"), "-p tcp -m tcp --dport 4");
        assert_eq!(canon("-p 6 -m tcp --sport :"), "-p tcp -m tcp");
        assert_eq!(
            canon("-p tcp -m tcp --syn"),
            "-p tcp -m tcp --tcp-flags FIN,SYN,RST,ACK SYN"
        );
        assert_eq!(
            canon("-p tcp -m tcp --dport 22 --sport ssh"),
            "-p tcp -m tcp --sport 22 --dport 22"
        );
    }

    #[test]
    fn statistic_probability_has_eleven_decimals() {
        assert_eq!(
            canon("-m statistic --mode random --probability 0.5"),
            "-m statistic --mode random --probability 0.50000000000"
        );
    }

    #[test]
    fn save_form_is_a_fixed_point() {
        for s in [
            r#"-s 10.244.1.5/32 -m comment --comment "default/service1:fileserver" -j KUBE-MARK-MASQ"#,
            "! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment \"block incoming localnet connections\" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP",
            "-p tcp -m comment --comment \"default/service1:fileserver\" -m tcp -j DNAT --to-destination 10.244.1.5:8080",
        ] {
            assert_eq!(canon(s), s);
        }
    }
}
