//! Command-line flags (clap derive). No IO here: just the shape of the CLI.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "plumb",
    version,
    about = "Explains a Kubernetes node's network dataplane: rulesets, owners, what changed.",
    long_about = None,
    propagate_version = true
)]
pub struct Cli {
    /// When to colour human output: auto (a terminal, and NO_COLOR unset), always, never.
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto, value_name = "WHEN")]
    pub color: ColorChoice,
    #[command(subcommand)]
    pub command: Command,
}

/// `--color WHEN`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    /// Colour when stdout is a terminal and NO_COLOR is unset or empty.
    Auto,
    /// Always colour.
    Always,
    /// Never colour.
    Never,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Read, summarise, print and diff netfilter rulesets.
    #[command(subcommand)]
    Ruleset(RulesetCommand),
    /// The service map kube-proxy programmed, recovered from the rules (iptables or nftables mode).
    Services {
        #[command(flatten)]
        source: SourceFlags,
        #[command(flatten)]
        input: InputFlags,
        #[command(flatten)]
        output: OutputFlags,
    },
    /// Integrity findings: dangling jumps, broken kube-proxy chains, stale chains, backend
    /// mix, firewall rules shadowing pod traffic, garbled NAT, services without endpoints.
    Check {
        #[command(flatten)]
        source: SourceFlags,
        #[command(flatten)]
        input: InputFlags,
        /// The input is a restore payload (kube-proxy --noflush): chains it references may
        /// live in the kernel, so they are not reported as missing.
        #[arg(long)]
        partial: bool,
        #[command(flatten)]
        output: OutputFlags,
    },
    /// Diagnose this node (or a namespace, the lab, or a support bundle): root cause first,
    /// with evidence, next steps, what not to do, and what was ruled out.
    Doctor {
        #[command(flatten)]
        node: NodeFlags,
        /// Diagnose the running `plumb lab` (its node namespace and file tree).
        #[arg(long, conflicts_with_all = ["netns", "bundle"])]
        lab: bool,
        /// Diagnose a support bundle: sosreport, Rancher log collector or `plumb collect`
        /// output (directory, .tar, .tar.gz or .tar.xz).
        #[arg(long, value_name = "PATH", conflicts_with = "netns")]
        bundle: Option<PathBuf>,
        /// Also print the node's timeline before the diagnosis: every dated signal of the
        /// logs read (container restarts, kubelet's probe failures and back-offs, agents'
        /// reverts, netfilter audit records), oldest first, with per-container counts.
        /// The JSON report always carries it (`timeline`).
        #[arg(long)]
        timeline: bool,
        /// Compare with an earlier `plumb doctor --json` report of the same node or bundle
        /// (after a fix): is the earlier root cause gone, which problems are resolved,
        /// still present or new. Exit 0 when the earlier root cause and the problems it
        /// explained are gone and no other root cause took its place, else 1.
        #[arg(long, value_name = "BEFORE.json")]
        verify: Option<PathBuf>,
        #[command(flatten)]
        output: OutputFlags,
    },
    /// Write a support bundle of this node (raw outputs, secrets redacted) for offline
    /// diagnosis with `plumb doctor --bundle`.
    Collect {
        /// Bundle to create (.tar.gz, readable by you only); never overwritten.
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
        #[command(flatten)]
        node: NodeFlags,
    },
    /// Reproduce the founding incidents for real in network namespaces (root; never touches the host's firewall).
    #[command(subcommand)]
    Lab(LabCommand),
    /// Simulate where a packet goes through the node's netfilter ruleset.
    Trace(TraceArgs),
    /// Report who changes netfilter rules as it happens: foreign changes to kube-proxy/CNI
    /// objects, revert fights, policy changes (nftables events, audit; read-only).
    Watch(WatchFlags),
    /// Print shell completions.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print plumb's man page (roff), e.g. `plumb man > /usr/local/share/man/man1/plumb.1`.
    Man,
    /// What a finding id means and which command reports it; without an id, every id.
    Explain {
        /// A finding id (shell completions know them all).
        #[arg(value_parser = finding_ids())]
        id: Option<String>,
        #[command(flatten)]
        output: OutputFlags,
    },
}

#[derive(Debug, Subcommand)]
pub enum RulesetCommand {
    /// Read this machine's (or a network namespace's) rulesets with the native tools and summarise them.
    Show {
        /// Look inside this network namespace (as in `ip netns exec NAME`).
        #[arg(long, value_name = "NAME")]
        netns: Option<String>,
        #[command(flatten)]
        output: OutputFlags,
    },
    /// Summarise a ruleset file (format auto-detected).
    Parse {
        /// File to read, or - for standard input.
        file: PathBuf,
        #[command(flatten)]
        input: InputFlags,
        #[command(flatten)]
        output: OutputFlags,
    },
    /// Re-print a ruleset file in canonical iptables-save form.
    ///
    /// Rules read from an `iptables -L` listing print as rules only when the listing
    /// shows all of them: made with -v (interfaces) and -n (addresses, ports), every
    /// option recognised. Any other row is printed as a `# not translated (line N):
    /// REASON: ROW` comment, a warning lists them on stderr, and the exit status is 1:
    /// the output is then not the whole ruleset and must not be restored as if it were.
    Print {
        file: PathBuf,
        #[command(flatten)]
        input: InputFlags,
        /// Print [packets:bytes] counters like iptables-save -c.
        #[arg(long)]
        counters: bool,
    },
    /// Semantic difference between two rulesets (counters ignored).
    Diff {
        old: PathBuf,
        new: PathBuf,
        #[command(flatten)]
        input: InputFlags,
        #[command(flatten)]
        output: OutputFlags,
    },
}

#[derive(Debug, Args, Clone)]
pub struct InputFlags {
    /// Input format: iptables-save, iptables-restore, iptables-list-rules, iptables-listing, nft, nft-json, ipvsadm, session.
    #[arg(long, value_name = "FORMAT")]
    pub format: Option<String>,
    /// Address family when the input does not say: ip or ip6.
    #[arg(long, value_name = "FAMILY")]
    pub family: Option<String>,
    /// Table for inputs without table headers (iptables -S, -nvL).
    #[arg(long, value_name = "TABLE")]
    pub table: Option<String>,
    /// Refuse inputs larger than this many bytes.
    #[arg(long, value_name = "BYTES", default_value_t = plumb_ruleset::format::DEFAULT_MAX_SIZE)]
    pub max_input_size: usize,
}

/// Which node to read: this machine, or a network namespace and a file tree standing for one.
#[derive(Debug, Args, Clone)]
pub struct NodeFlags {
    /// Read network state (rules, sysctls, sockets, probes) inside this network namespace.
    #[arg(long, value_name = "NAME")]
    pub netns: Option<String>,
    /// Read the node's files (RKE2 config, pod logs, CNI config) under this directory.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
}

/// Where to read the ruleset: a file, a network namespace, or (neither) this machine.
#[derive(Debug, Args, Clone)]
pub struct SourceFlags {
    /// Read this ruleset file (any supported format, - for standard input).
    #[arg(long, value_name = "FILE", conflicts_with = "netns")]
    pub ruleset: Option<PathBuf>,
    /// Read the live rulesets of this network namespace (as in `ip netns exec NAME`).
    #[arg(long, value_name = "NAME")]
    pub netns: Option<String>,
    /// The ruleset file, given without `--ruleset` (`plumb check dump.txt`).
    #[arg(value_name = "FILE", conflicts_with_all = ["ruleset", "netns"])]
    pub file: Option<PathBuf>,
}

impl SourceFlags {
    /// The ruleset file to read, given as `--ruleset FILE` or as the positional FILE.
    pub fn ruleset_file(&self) -> Option<&PathBuf> {
        self.ruleset.as_ref().or(self.file.as_ref())
    }
}

#[derive(Debug, Subcommand)]
pub enum LabCommand {
    /// Start a scenario (reproduces one incident in network namespaces).
    Up {
        /// Scenario name (shell completions know them).
        #[arg(value_parser = scenario_names())]
        scenario: String,
        /// Service ports kube-proxy programs.
        #[arg(long, value_name = "N", default_value_t = 8)]
        services: usize,
        /// Override kube-proxy's sync period (seconds).
        #[arg(long, value_name = "SECS")]
        sync_period: Option<f64>,
        /// iptables backend of kubelet, kube-proxy and the agent: nft or legacy.
        #[arg(long, value_name = "BACKEND", default_value = "nft")]
        backend: String,
        /// kube-proxy sends its full-sync payload byte for byte on nft too (no leading `-S`;
        /// iptables-nft's restore is then quadratic in the chains: minutes at 10k services).
        #[arg(long)]
        exact_restore_payload: bool,
    },
    /// Show the running lab: scenario, namespaces, actors, pods.
    Status {
        #[command(flatten)]
        output: OutputFlags,
    },
    /// Remove everything the lab made (idempotent; also after a crash).
    Down {
        #[command(flatten)]
        output: OutputFlags,
    },
    /// Run a command inside the lab node's network namespace (PLUMB_LAB_ROOT set, lab UFW files mounted).
    Exec {
        /// The command and its arguments (after --).
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            required = true,
            value_name = "CMD"
        )]
        command: Vec<String>,
    },
    /// Run a lab actor in the foreground (used by the lab itself).
    #[command(hide = true)]
    Actor {
        /// kube-proxy, kubelet, venAgent, install-cni or kube-apiserver.
        name: String,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(Debug, Args, Clone)]
pub struct TraceArgs {
    /// Destination IP:PORT (or just IP for icmp).
    #[arg(long, value_name = "IP:PORT")]
    pub dst: String,
    /// Source IP[:PORT]. Unknown fields give explicit branches when a rule needs them.
    #[arg(long, value_name = "IP[:PORT]")]
    pub src: Option<String>,
    /// Protocol: tcp, udp or icmp.
    #[arg(long, default_value = "tcp", value_name = "PROTO")]
    pub proto: String,
    /// Where the packet comes from: host (a process on the node), pod, external.
    #[arg(long, default_value = "host", value_name = "ORIGIN")]
    pub from: String,
    /// Interface the packet arrives on (pod or external origin).
    #[arg(long, value_name = "IFACE")]
    pub in_iface: Option<String>,
    /// Interface the packet leaves on, when known.
    #[arg(long, value_name = "IFACE")]
    pub out_iface: Option<String>,
    /// The node's local addresses (repeatable; IP or IP/LEN). Decides INPUT vs FORWARD and addrtype LOCAL.
    #[arg(long = "local-addr", value_name = "IP[/LEN]")]
    pub local_addr: Vec<String>,
    /// `ipset save` output for -m set matches.
    #[arg(long, value_name = "FILE")]
    pub ipsets: Option<PathBuf>,
    /// Conntrack state: NEW (default), ESTABLISHED, RELATED, INVALID, UNTRACKED.
    #[arg(long, default_value = "NEW", value_name = "STATE")]
    pub ct_state: String,
    /// Packet mark (e.g. 0x4000).
    #[arg(long, value_name = "MARK")]
    pub mark: Option<String>,
    /// Session affinity (-m recent): branch (both possibilities) or fresh (a first-time client).
    #[arg(long, default_value = "branch", value_name = "MODE")]
    pub affinity: String,
    /// Read the ruleset from this file (any format plumb reads) instead of the live node.
    #[arg(long, value_name = "FILE", conflicts_with = "netns")]
    pub ruleset: Option<PathBuf>,
    /// Read the ruleset of this network namespace.
    #[arg(long, value_name = "NAME")]
    pub netns: Option<String>,
    /// Show every step, including rules that did not match, for every outcome.
    #[arg(long, short)]
    pub verbose: bool,
    #[command(flatten)]
    pub output: OutputFlags,
    /// Stop exploring beyond this many paths: the trace then says INDETERMINATE and
    /// exits 1.
    #[arg(long, value_name = "N", default_value_t = plumb_trace::TraceOptions::default().max_paths as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_paths: u64,
    /// Refuse a --ruleset or --ipsets file larger than this many bytes.
    #[arg(long, value_name = "BYTES", default_value_t = plumb_ruleset::format::DEFAULT_MAX_SIZE)]
    pub max_input_size: usize,
}

#[derive(Debug, Args, Clone)]
pub struct WatchFlags {
    /// Watch this network namespace (as in `ip netns exec NAME`, or a path such as
    /// /proc/PID/ns/net) instead of the host's.
    #[arg(long, value_name = "NAME")]
    pub netns: Option<String>,
    /// Watch the running `plumb lab`'s node namespace.
    #[arg(long, conflicts_with = "netns")]
    pub lab: bool,
    /// `--json` / `-o json`: one JSON object per line instead of human lines.
    #[command(flatten)]
    pub output: OutputFlags,
    /// Stop after this many seconds and print a summary (default: until SIGINT/SIGTERM).
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// Serve Prometheus metrics on this address (GET /metrics, /healthz, /readyz) once
    /// watch is ready (subscribed, baseline read).
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Do not listen to audit (exe/ppid/argv of writers; the legacy-backend trigger).
    #[arg(long)]
    pub no_audit: bool,
    /// Do not attach the eBPF writer probe, which names the writer of a big change while
    /// the kernel commits it instead of at its end (~60 ns on every syscall of the
    /// machine while watch runs; needs CAP_BPF and CAP_PERFMON).
    #[arg(long)]
    pub no_bpf: bool,
}

/// The lab's scenario names, as clap's possible values (help and completions list them).
fn finding_ids() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(crate::cmd::explain::catalogue().map(|e| e.id))
}

fn scenario_names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(plumb_lab::Scenario::ALL.map(|s| s.name()))
}

/// `--json`, or kubectl's `-o json` / `-o text`.
#[derive(Debug, Args, Clone, Default)]
pub struct OutputFlags {
    /// Print JSON (the shapes documented in the README) instead of text.
    #[arg(long)]
    json: bool,
    /// Output format: text or json (`-o json` is `--json`).
    #[arg(
        short = 'o',
        long = "output",
        id = "output_format",
        value_enum,
        value_name = "FORMAT",
        conflicts_with = "json"
    )]
    output_format: Option<OutputFormat>,
}

impl OutputFlags {
    /// True when JSON was asked for.
    pub fn json(&self) -> bool {
        self.json || self.output_format == Some(OutputFormat::Json)
    }
}

/// `-o FORMAT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Human-readable text.
    Text,
    /// JSON.
    Json,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// clap's own consistency checks (unique ids, valid conflicts) for every
    /// subcommand: they otherwise fire only when that subcommand is run.
    #[test]
    fn the_cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn completions_know_the_lab_scenarios() {
        let mut script = Vec::new();
        clap_complete::generate(
            clap_complete::Shell::Bash,
            &mut Cli::command(),
            "plumb",
            &mut script,
        );
        let script = String::from_utf8(script).expect("UTF-8");
        for s in plumb_lab::Scenario::ALL {
            assert!(script.contains(s.name()), "{} not completed", s.name());
        }
        assert!(Cli::try_parse_from(["plumb", "lab", "up", "no-such-scenario"]).is_err());
    }

    #[test]
    fn dash_o_json_is_json() {
        let parse = |args: &[&str]| match Cli::parse_from(args).command {
            Command::Check { output, .. } => output.json(),
            _ => unreachable!("check"),
        };
        assert!(parse(&["plumb", "check", "-o", "json"]));
        assert!(parse(&["plumb", "check", "--json"]));
        assert!(!parse(&["plumb", "check", "-o", "text"]));
        assert!(!parse(&["plumb", "check"]));
        assert!(Cli::try_parse_from(["plumb", "check", "-o", "json", "--json"]).is_err());
    }
}
