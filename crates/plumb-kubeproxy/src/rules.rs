//! The iptables rules kube-proxy (iptables mode, 1.28+) and kubelet write, and how they print.
//!
//! A [`Rule`] is kept as data and printed two ways:
//! - in kube-proxy's own argument order, as it passes it to `iptables-restore --noflush`
//!   (kubernetes `pkg/proxy/iptables/proxier.go`, `syncProxyRules`: `-m comment` first,
//!   `-m tcp -p tcp -d IP --dport N`, unnormalised values such as `--or-mark 0x00004000`
//!   and `--probability 0.5000000000`);
//! - in the canonical form `iptables-save` prints once the kernel holds it (iptables 1.8.9,
//!   checked on the nft backend by `tests/kernel_roundtrip.rs`): `! -s`, `! -d`, `-p` first,
//!   `/32` on bare addresses, each match with its normalised options, targets such as
//!   `--set-xmark 0x4000/0x4000` and `REJECT --reject-with icmp-port-unreachable`.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddrV4};

use crate::model::{Ipv4Cidr, Protocol};

/// A source or destination address as kube-proxy writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addr {
    /// A bare address (`-d 10.43.0.1`, printed back as `10.43.0.1/32`).
    Ip(Ipv4Addr),
    /// A prefix (`-s 10.42.0.0/16`).
    Cidr(Ipv4Cidr),
}

impl Addr {
    fn write_kube(&self, out: &mut String) {
        let _ = match self {
            Addr::Ip(ip) => write!(out, "{ip}"),
            Addr::Cidr(c) => write!(out, "{c}"),
        };
    }

    fn write_canonical(&self, out: &mut String) {
        let _ = match self {
            Addr::Ip(ip) => write!(out, "{ip}/32"),
            Addr::Cidr(c) => write!(out, "{c}"),
        };
    }
}

/// `[!] -s|-d addr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddrMatch {
    /// `!`
    pub negated: bool,
    /// The address.
    pub addr: Addr,
}

/// A match module with its options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Match {
    /// `-m comment --comment TEXT`.
    Comment(String),
    /// kube-proxy's `-m PROTO -p PROTO [--dport N]`: sets the rule protocol and loads the
    /// protocol match.
    Proto {
        /// Protocol.
        protocol: Protocol,
        /// `--dport`.
        dport: Option<u16>,
    },
    /// `-m conntrack [!] --ctstate STATES`.
    Conntrack {
        /// `!`
        negated: bool,
        /// Comma-separated states, e.g. `RELATED,ESTABLISHED`.
        states: &'static str,
    },
    /// `-m addrtype --src-type LOCAL` or `--dst-type LOCAL`.
    AddrTypeLocal {
        /// `--src-type` when true, `--dst-type` otherwise.
        source: bool,
    },
    /// `-m mark [!] --mark MARK/MARK`.
    Mark {
        /// `!`
        negated: bool,
        /// The masquerade mark, e.g. `0x4000`.
        mark: u32,
    },
    /// `-m statistic --mode random --probability 1/n`.
    RandomOneIn(usize),
    /// `-m recent --name NAME --set`.
    RecentSet(String),
    /// `-m recent --name NAME --rcheck --seconds N --reap`.
    RecentCheck {
        /// List name (the endpoint chain).
        name: String,
        /// `--seconds`.
        seconds: u32,
    },
}

/// What a rule does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// No `-j` (kube-proxy's KUBE-FW tail rule only counts).
    None,
    /// `-j CHAIN`.
    Jump(String),
    /// `-j ACCEPT`
    Accept,
    /// `-j DROP`
    Drop,
    /// `-j RETURN`
    Return,
    /// `-j REJECT` (kernel default `icmp-port-unreachable`).
    Reject,
    /// `-j MARK --or-mark M`.
    MarkOr(u32),
    /// `-j MARK --xor-mark M`.
    MarkXor(u32),
    /// `-j MASQUERADE [--random-fully]`.
    Masquerade {
        /// `--random-fully` (iptables >= 1.6.2, `HasRandomFully`).
        random_fully: bool,
    },
    /// `-j DNAT --to-destination IP:PORT`.
    Dnat(SocketAddrV4),
}

/// One `-A CHAIN …` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Chain the rule is appended to.
    pub chain: String,
    /// `-s`.
    pub src: Option<AddrMatch>,
    /// `-d`.
    pub dst: Option<AddrMatch>,
    /// Matches in the order kube-proxy gives them.
    pub matches: Vec<Match>,
    /// Target.
    pub target: Target,
    /// In rules without a protocol match: how many matches kube-proxy writes before the
    /// `-d`/`-s` arguments (1 = after the comment; 2 for the nodeports tail rule's `! -d`).
    pub addrs_after: u8,
}

impl Rule {
    /// A rule with no addresses.
    pub fn new(chain: impl Into<String>, matches: Vec<Match>, target: Target) -> Self {
        Self {
            chain: chain.into(),
            src: None,
            dst: None,
            matches,
            target,
            addrs_after: 1,
        }
    }

    /// Sets `-s`.
    pub fn src(mut self, negated: bool, addr: Addr) -> Self {
        self.src = Some(AddrMatch { negated, addr });
        self
    }

    /// Sets `-d`.
    pub fn dst(mut self, negated: bool, addr: Addr) -> Self {
        self.dst = Some(AddrMatch { negated, addr });
        self
    }

    fn protocol(&self) -> Option<Protocol> {
        self.matches.iter().find_map(|m| match m {
            Match::Proto { protocol, .. } => Some(*protocol),
            _ => None,
        })
    }

    fn write_kube_addrs(&self, out: &mut String, dst_first: bool) {
        let one = |out: &mut String, flag: &str, m: &Option<AddrMatch>| {
            if let Some(m) = m {
                out.push_str(if m.negated { " ! " } else { " " });
                out.push_str(flag);
                out.push(' ');
                m.addr.write_kube(out);
            }
        };
        if dst_first {
            one(out, "-d", &self.dst);
            one(out, "-s", &self.src);
        } else {
            one(out, "-s", &self.src);
            one(out, "-d", &self.dst);
        }
    }

    /// Appends the line as kube-proxy writes it (`-A CHAIN …`, no newline).
    pub fn write_kube(&self, out: &mut String, mark_text: &str) {
        out.push_str("-A ");
        out.push_str(&self.chain);
        let has_proto = self.protocol().is_some();
        if !has_proto && self.addrs_after == 0 {
            self.write_kube_addrs(out, true);
        }
        for (i, m) in self.matches.iter().enumerate() {
            match m {
                Match::Comment(text) => {
                    out.push_str(" -m comment --comment ");
                    // kube-proxy quotes comments with spaces itself and passes bare names unquoted.
                    if text.contains(' ') {
                        out.push('"');
                        out.push_str(text);
                        out.push('"');
                    } else {
                        out.push_str(text);
                    }
                }
                Match::Proto { protocol, dport } => {
                    let p = protocol.as_str();
                    let _ = write!(out, " -m {p} -p {p}");
                    // `-d IP --dport N ! -s CIDR` (proxier.go cluster IP and masquerade rules).
                    if let Some(d) = &self.dst {
                        out.push_str(if d.negated { " ! -d " } else { " -d " });
                        d.addr.write_kube(out);
                    }
                    if let Some(port) = dport {
                        let _ = write!(out, " --dport {port}");
                    }
                    if let Some(s) = &self.src {
                        out.push_str(if s.negated { " ! -s " } else { " -s " });
                        s.addr.write_kube(out);
                    }
                }
                Match::Conntrack { negated, states } => {
                    let _ = write!(
                        out,
                        " -m conntrack{} --ctstate {states}",
                        if *negated { " !" } else { "" }
                    );
                }
                Match::AddrTypeLocal { source } => {
                    let _ = write!(
                        out,
                        " -m addrtype --{}-type LOCAL",
                        if *source { "src" } else { "dst" }
                    );
                }
                Match::Mark { negated, .. } => {
                    let _ = write!(
                        out,
                        " -m mark{} --mark {mark_text}/{mark_text}",
                        if *negated { " !" } else { "" }
                    );
                }
                Match::RandomOneIn(n) => {
                    out.push_str(" -m statistic --mode random --probability ");
                    push_probability(out, *n, false);
                }
                Match::RecentSet(name) => {
                    let _ = write!(out, " -m recent --name {name} --set");
                }
                Match::RecentCheck { name, seconds } => {
                    let _ = write!(
                        out,
                        " -m recent --name {name} --rcheck --seconds {seconds} --reap"
                    );
                }
            }
            if !has_proto && self.addrs_after as usize == i + 1 {
                self.write_kube_addrs(out, true);
            }
        }
        if !has_proto && self.addrs_after as usize > self.matches.len() {
            self.write_kube_addrs(out, true);
        }
        self.write_target(out, Some(mark_text));
    }

    /// Appends the line as `iptables-save` prints it (`-A CHAIN …`, no newline).
    pub fn write_canonical(&self, out: &mut String) {
        out.push_str("-A ");
        out.push_str(&self.chain);
        for (flag, m) in [("-s", &self.src), ("-d", &self.dst)] {
            if let Some(m) = m {
                out.push_str(if m.negated { " ! " } else { " " });
                out.push_str(flag);
                out.push(' ');
                m.addr.write_canonical(out);
            }
        }
        if let Some(p) = self.protocol() {
            out.push_str(" -p ");
            out.push_str(p.as_str());
        }
        for m in &self.matches {
            match m {
                Match::Comment(text) => {
                    // libxt_comment always quotes (xtables_save_string).
                    out.push_str(" -m comment --comment \"");
                    out.push_str(text);
                    out.push('"');
                }
                Match::Proto { protocol, dport } => {
                    let _ = write!(out, " -m {}", protocol.as_str());
                    if let Some(port) = dport {
                        let _ = write!(out, " --dport {port}");
                    }
                }
                Match::Conntrack { negated, states } => {
                    let _ = write!(
                        out,
                        " -m conntrack{} --ctstate {states}",
                        if *negated { " !" } else { "" }
                    );
                }
                Match::AddrTypeLocal { source } => {
                    let _ = write!(
                        out,
                        " -m addrtype --{}-type LOCAL",
                        if *source { "src" } else { "dst" }
                    );
                }
                Match::Mark { negated, mark } => {
                    let _ = write!(
                        out,
                        " -m mark{} --mark {mark:#x}/{mark:#x}",
                        if *negated { " !" } else { "" }
                    );
                }
                Match::RandomOneIn(n) => {
                    out.push_str(" -m statistic --mode random --probability ");
                    push_probability(out, *n, true);
                }
                Match::RecentSet(name) => {
                    let _ = write!(
                        out,
                        " -m recent --set --name {name} --mask 255.255.255.255 --rsource"
                    );
                }
                Match::RecentCheck { name, seconds } => {
                    let _ = write!(
                        out,
                        " -m recent --rcheck --seconds {seconds} --reap --name {name} --mask 255.255.255.255 --rsource"
                    );
                }
            }
        }
        self.write_target(out, None);
    }

    /// ` -j TARGET …` as kube-proxy writes it (`mark_text` given: its own mark spelling,
    /// bare REJECT) or, with `None`, as `iptables-save` prints it back (REJECT's default
    /// `--reject-with`, and libxt_MARK's `--set-xmark value/mask` for both mark forms).
    fn write_target(&self, out: &mut String, kube_mark: Option<&str>) {
        match (&self.target, kube_mark) {
            (Target::None, _) => {}
            (Target::Jump(chain), _) => {
                out.push_str(" -j ");
                out.push_str(chain);
            }
            (Target::Accept, _) => out.push_str(" -j ACCEPT"),
            (Target::Drop, _) => out.push_str(" -j DROP"),
            (Target::Return, _) => out.push_str(" -j RETURN"),
            (Target::Reject, Some(_)) => out.push_str(" -j REJECT"),
            (Target::Reject, None) => {
                out.push_str(" -j REJECT --reject-with icmp-port-unreachable")
            }
            (Target::MarkOr(_), Some(mark)) => {
                let _ = write!(out, " -j MARK --or-mark {mark}");
            }
            (Target::MarkXor(_), Some(mark)) => {
                let _ = write!(out, " -j MARK --xor-mark {mark}");
            }
            (Target::MarkOr(m), None) => {
                let _ = write!(out, " -j MARK --set-xmark {m:#x}/{m:#x}");
            }
            (Target::MarkXor(m), None) => {
                let _ = write!(out, " -j MARK --set-xmark {m:#x}/0x0");
            }
            (Target::Masquerade { random_fully }, _) => {
                out.push_str(" -j MASQUERADE");
                if *random_fully {
                    out.push_str(" --random-fully");
                }
            }
            (Target::Dnat(to), _) => {
                let _ = write!(out, " -j DNAT --to-destination {to}");
            }
        }
    }
}

const PRECOMPUTED_PROBABILITIES: usize = 1024;

/// Appends `text(n)`, from a table for the common small `n` (kube-proxy keeps the same kind
/// of cache, `precomputedProbabilities`).
fn push_probability(out: &mut String, n: usize, canonical: bool) {
    use std::sync::OnceLock;
    static KUBE: OnceLock<Vec<String>> = OnceLock::new();
    static CANONICAL: OnceLock<Vec<String>> = OnceLock::new();
    type Table = OnceLock<Vec<String>>;
    let (table, text): (&Table, fn(usize) -> String) = if canonical {
        (&CANONICAL, canonical_probability)
    } else {
        (&KUBE, kube_probability)
    };
    if n < PRECOMPUTED_PROBABILITIES {
        out.push_str(
            &table.get_or_init(|| {
                (0..PRECOMPUTED_PROBABILITIES)
                    .map(|i| text(i.max(1)))
                    .collect()
            })[n],
        );
    } else {
        out.push_str(&text(n));
    }
}

/// kube-proxy's probability text for `1/n`: `fmt.Sprintf("%0.10f", 1.0/float64(n))`
/// (kubernetes `pkg/proxy/iptables/proxier.go`, `computeProbability`).
pub fn kube_probability(n: usize) -> String {
    format!("{:.10}", 1.0 / n as f64)
}

/// What `iptables-save` prints for kube-proxy's `1/n`: libxt_statistic stores
/// `lround(0x80000000 * strtod(text))` and prints `%.11f` of `stored / 0x80000000`.
pub fn canonical_probability(n: usize) -> String {
    let parsed: f64 = kube_probability(n).parse().unwrap_or(0.0);
    let stored = (parsed * 2_147_483_648.0).round() as u32;
    format!("{:.11}", f64::from(stored) / 2_147_483_648.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probabilities_match_kernel_round_trip() {
        assert_eq!(kube_probability(2), "0.5000000000");
        assert_eq!(canonical_probability(2), "0.50000000000");
        // Observed with iptables 1.8.9 (nf_tables) on this project's lab machine.
        assert_eq!(canonical_probability(3), "0.33333333349");
        assert_eq!(canonical_probability(10), "0.10000000009");
    }

    #[test]
    fn both_renderings_of_a_cluster_ip_rule() {
        let rule = Rule::new(
            "KUBE-SERVICES",
            vec![
                Match::Comment("ns1/svc1:p80 cluster IP".into()),
                Match::Proto {
                    protocol: Protocol::Tcp,
                    dport: Some(80),
                },
            ],
            Target::Jump("KUBE-SVC-XPGD46QRK7WJZT7O".into()),
        )
        .dst(false, Addr::Ip(Ipv4Addr::new(172, 30, 0, 41)));
        let mut kube = String::new();
        rule.write_kube(&mut kube, "0x4000");
        assert_eq!(
            kube,
            "-A KUBE-SERVICES -m comment --comment \"ns1/svc1:p80 cluster IP\" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O"
        );
        let mut canonical = String::new();
        rule.write_canonical(&mut canonical);
        assert_eq!(
            canonical,
            "-A KUBE-SERVICES -d 172.30.0.41/32 -p tcp -m comment --comment \"ns1/svc1:p80 cluster IP\" -m tcp --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O"
        );
    }
}
