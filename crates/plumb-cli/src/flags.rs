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
    /// The service map kube-proxy programmed, recovered from the rules (iptables or nftables mode);
    /// on a live node whose Services Cilium serves, Cilium's map from its BPF maps.
    Services {
        #[command(flatten)]
        source: SourceFlags,
        /// The running `plumb lab`'s node: its namespace's rules and its Cilium maps.
        #[arg(long, conflicts_with_all = ["ruleset", "netns", "file"])]
        lab: bool,
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
        /// Which node of a Cilium sysdump to read (its node or agent pod name); without
        /// it the first agent's, and the output names the others.
        #[arg(long = "node", value_name = "NAME", requires = "bundle")]
        sysdump_node: Option<String>,
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
    /// Kubernetes NetworkPolicy, evaluated exactly: can one pod reach another on a
    /// port, and which policies decide (egress of the source, ingress of the
    /// destination).
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Cilium's kube-proxy replacement: the Services its BPF load balancer holds, and
    /// whether a node moved off kube-proxy and its old CNI completely.
    #[command(subcommand)]
    Cilium(CiliumCommand),
    /// Reproduce the founding incidents for real in network namespaces (root; never touches the host's firewall).
    #[command(subcommand)]
    Lab(LabCommand),
    /// Simulate where a packet (or each flow of a file, or every Service) goes through the
    /// node's netfilter ruleset.
    Trace(Box<TraceArgs>),
    /// Report who changes netfilter rules as it happens: foreign changes to kube-proxy/CNI
    /// objects, revert fights, policy changes (nftables events, audit; read-only).
    Watch(WatchFlags),
    /// The connections netfilter lets through, as they start and end (conntrack events,
    /// read-only), with the endpoint each ClusterIP connection was translated to.
    /// Drops and the rules behind them are not reported yet.
    Observe(ObserveFlags),
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
    /// Read this machine's (or a network namespace's) rulesets (nf_tables over netlink, legacy tables through getsockopt, the save tools for what those cannot decode exactly) and summarise them.
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

impl Default for InputFlags {
    /// What the flags say when none is given: the format detected, the default size limit.
    fn default() -> InputFlags {
        InputFlags {
            format: None,
            family: None,
            table: None,
            max_input_size: plumb_ruleset::format::DEFAULT_MAX_SIZE,
        }
    }
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
pub enum PolicyCommand {
    /// Whether `--from` can reach `--to` on `--port`: allowed or denied for the
    /// source's egress and the destination's ingress, with the policies and rules that
    /// decide. Exit 0 allowed, 1 denied, 2 error.
    Check {
        /// A YAML/JSON file or a directory of them holding NetworkPolicies, Pods and
        /// Namespaces (multi-document files and Lists), or a Cilium sysdump (zip or
        /// directory: its policies, pods, namespaces and nodes); repeat for more.
        #[arg(short = 'f', long = "file", value_name = "PATH", required = true)]
        files: Vec<PathBuf>,
        /// The client: a pod `NAMESPACE/POD`, an outside address `world:IP[@NAME]` (the
        /// name it was looked up as, for toFQDNs rules), or a Cilium entity (`host[:NODE]`,
        /// `remote-node[:NODE]`, `kube-apiserver`, `health`, `init`, `unmanaged`, `ingress`).
        #[arg(long, value_name = "NS/POD")]
        from: String,
        /// The server, written as for `--from`.
        #[arg(long, value_name = "NS/POD")]
        to: String,
        /// The destination port on the server pod (after any Service DNAT), `PORT/PROTO`
        /// (`443/tcp`; the protocol defaults to TCP; `8/icmp` for an ICMP type).
        #[arg(long, value_name = "PORT[/PROTO]")]
        port: String,
        /// An HTTP request (`"GET /path"`) or DNS query (`dns:NAME`) to judge against
        /// the L7 rules that apply.
        #[arg(long, value_name = "REQUEST")]
        request: Option<String>,
        #[command(flatten)]
        output: OutputFlags,
    },
    /// Every pod against every pod on each port: `.` allowed, `X` denied (rows are
    /// clients, columns servers), one table per port. Exit 0 whatever the answers.
    Matrix {
        /// As for `check`.
        #[arg(short = 'f', long = "file", value_name = "PATH", required = true)]
        files: Vec<PathBuf>,
        /// Only pods of this namespace (default: every pod).
        #[arg(short = 'n', long, value_name = "NS")]
        namespace: Option<String>,
        /// The ports, `PORT[/PROTO]`; repeat for more (default: every container port
        /// the pods declare).
        #[arg(long, value_name = "PORT[/PROTO]")]
        port: Vec<String>,
        /// Print CSV (`from,to,port,protocol,allowed,egress,ingress`) instead of tables.
        #[arg(long, conflicts_with = "json")]
        csv: bool,
        #[command(flatten)]
        output: OutputFlags,
    },
    /// The pairs whose verdict changes between two sets of policies (the migration
    /// check: the policies a cluster enforces now against the ones that replace them).
    /// Exit 0 when nothing changes, 1 when something does.
    Diff {
        /// Pods and namespaces (and policies both sets share).
        #[arg(short = 'f', long = "file", value_name = "PATH")]
        files: Vec<PathBuf>,
        /// The policies before (files or directories; repeat for more).
        #[arg(long, value_name = "PATH", required = true)]
        before: Vec<PathBuf>,
        /// The policies after.
        #[arg(long, value_name = "PATH", required = true)]
        after: Vec<PathBuf>,
        /// Only pods of this namespace (default: every pod).
        #[arg(short = 'n', long, value_name = "NS")]
        namespace: Option<String>,
        /// The ports, `PORT[/PROTO]`; repeat (default: every declared container port).
        #[arg(long, value_name = "PORT[/PROTO]")]
        port: Vec<String>,
        #[command(flatten)]
        output: OutputFlags,
    },
    /// What in the policies cannot do what it seems written to do: policies selecting
    /// no pod of the inputs, rules that can never match, rules shadowed by another
    /// allow, L7 rules on ports whose protocol cannot carry them. Each finding names
    /// the file, document and part. Exit 0 clean, 1 findings, 2 error.
    Lint {
        /// As for `check` (pods and namespaces, when given, let lint say what a
        /// selector selects).
        #[arg(short = 'f', long = "file", value_name = "PATH", required = true)]
        files: Vec<PathBuf>,
        #[command(flatten)]
        output: OutputFlags,
    },
}

#[derive(Debug, Subcommand)]
pub enum CiliumCommand {
    /// Before installing Cilium with kube-proxy replacement: can this node's kernel run
    /// it? Kernel release and configuration, BTF, the BPF program and map types the
    /// running kernel accepts (probed, nothing attached), bpffs and cgroup v2 mounts.
    /// Verdict `go` (exit 0) or `no-go` (exit 1). Also prints the RKE2 configuration and
    /// Cilium Helm values this node needs, from its own API endpoint and pod CIDR.
    Preflight {
        /// The node's file tree (for /boot/config-RELEASE when /proc/config.gz is absent).
        #[arg(long, value_name = "DIR", default_value = "/")]
        root: PathBuf,
        /// The running `plumb lab`: its node namespace and file tree.
        #[arg(long, conflicts_with_all = ["root", "netns"])]
        lab: bool,
        /// The Cilium release to check against (`1.16`, `v1.18.2`); default: the newest
        /// plumb knows.
        #[arg(long, value_name = "VERSION")]
        cilium_version: Option<String>,
        /// Read the node's rules in this network namespace (for the API endpoint and
        /// pod CIDR of the generated configuration).
        #[arg(long, value_name = "NAME")]
        netns: Option<String>,
        #[command(flatten)]
        output: OutputFlags,
    },
    /// The Services Cilium's load balancer holds, read from its pinned BPF maps (or from
    /// a saved `cilium-dbg bpf lb list` / `service list`), with the frontends that have
    /// no backend or name a missing one. Exit 1 when the maps contradict themselves.
    Services {
        #[command(flatten)]
        node: CiliumNodeFlags,
        #[command(flatten)]
        output: OutputFlags,
    },
    /// After moving to Cilium's kube-proxy replacement: are kube-proxy's rules and
    /// static pod gone, is the old CNI's configuration gone, do Cilium's maps hold
    /// consistent Services? Verdict `migrated` (exit 0) or `incomplete` (exit 1).
    Verify {
        #[command(flatten)]
        node: CiliumNodeFlags,
        /// Judge the rules in this file instead of the live ones (any supported format).
        #[arg(long, value_name = "FILE", conflicts_with = "netns")]
        ruleset: Option<PathBuf>,
        /// Read the live rules of this network namespace.
        #[arg(long, value_name = "NAME")]
        netns: Option<String>,
        /// A dump of the node's rules from before the migration: every Service address
        /// kube-proxy served must be in Cilium's maps, or with --bundle in the sysdump's
        /// Cilium listing (endpoints are compared too).
        #[arg(long, value_name = "FILE")]
        before: Option<PathBuf>,
        #[command(flatten)]
        output: OutputFlags,
    },
}

/// Where `plumb cilium` reads the node.
#[derive(Debug, Args, Clone)]
pub struct CiliumNodeFlags {
    /// The node's file tree: CNI configuration (ROOT/etc/cni/net.d), static pod
    /// manifests and Cilium's pinned maps (ROOT/sys/fs/bpf/tc/globals).
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// The running `plumb lab`: its file tree (and its bpffs with Cilium's maps) and
    /// its node namespace.
    #[arg(long, conflicts_with_all = ["root", "lb_list"])]
    pub lab: bool,
    /// A support bundle instead of a live node: a Cilium sysdump (`cilium-sysdump-*.zip`
    /// or its directory; its agent bugtool's outputs), or any bundle `doctor --bundle`
    /// reads.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["root", "lab", "lb_list"])]
    pub bundle: Option<PathBuf>,
    /// Which node of a Cilium sysdump to read (its node or agent pod name); without it
    /// the first agent's, and the output names the others.
    #[arg(long = "node", value_name = "NAME", requires = "bundle")]
    pub sysdump_node: Option<String>,
    /// Read the Services from a saved `cilium-dbg bpf lb list` or `cilium-dbg service
    /// list` output instead of the maps.
    #[arg(long, value_name = "FILE")]
    pub lb_list: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum LabCommand {
    /// Start a scenario (reproduces one incident in network namespaces).
    Up {
        /// Scenario name (shell completions know them).
        #[arg(value_parser = scenario_names())]
        scenario: String,
        /// Service ports kube-proxy programs (default 8); in cilium-kpr and
        /// cilium-leftovers, the frontends programmed into Cilium's maps (default 4, from 4
        /// to 10000).
        #[arg(long, value_name = "N")]
        services: Option<usize>,
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
    #[arg(long, value_name = "IP:PORT", required_unless_present_any = ["flows", "all_services"],
          conflicts_with_all = ["flows", "all_services"])]
    pub dst: Option<String>,
    /// Trace every flow of this file (- for standard input) through one reading of the
    /// ruleset: a CSV whose header names its columns (src, dst, port, proto, in_iface,
    /// out_iface, from; only dst is required), `#` comments and blank lines skipped.
    /// Empty or absent fields take the other flags' values. Prints one line per flow
    /// (a JSON object per line with --json). A line plumb cannot read is reported on
    /// stderr as FILE:LINE and skipped; the exit status is then 2.
    #[arg(long, value_name = "FILE", conflicts_with = "all_services")]
    pub flows: Option<PathBuf>,
    /// Trace every ClusterIP and NodePort of kube-proxy's service map, from a pod and
    /// from the host, and report which services are broken and why. Exit status 1
    /// when some are.
    #[arg(long)]
    pub all_services: bool,
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
    /// Show every step, including rules that did not match, for every outcome (with
    /// --flows and --json: every outcome's steps, as a single trace's JSON has them).
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

/// `plumb observe`'s flags: Hubble's names where the concepts match.
#[derive(Debug, Args, Clone)]
pub struct ObserveFlags {
    /// Observe this network namespace (as in `ip netns exec NAME`) instead of the host's.
    #[arg(long, value_name = "NAME")]
    pub netns: Option<String>,
    /// Observe the running `plumb lab`'s node namespace.
    #[arg(long, conflicts_with = "netns")]
    pub lab: bool,
    /// Stream events until interrupted (the default unless --last or --duration).
    #[arg(long, conflicts_with = "last")]
    pub follow: bool,
    /// Watch for --duration (default 10 s), then print only the last N events.
    #[arg(long, value_name = "N")]
    pub last: Option<usize>,
    /// Stop after this many seconds.
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// Only connections let through (forwarded) or only drops (dropped).
    #[arg(long, value_enum)]
    pub verdict: Option<ObserveVerdict>,
    /// Only events with this source or destination address (repeatable).
    #[arg(long, value_name = "IP")]
    pub ip: Vec<std::net::IpAddr>,
    /// Only events with this source or destination port (repeatable).
    #[arg(long, value_name = "PORT")]
    pub port: Vec<u16>,
    /// Only this protocol: tcp, udp, sctp, icmp (ICMP and ICMPv6) or a number.
    #[arg(long, value_name = "PROTO")]
    pub protocol: Option<String>,
    /// Only events to or from this Service (NAMESPACE/NAME), named from kube-proxy's rules.
    #[arg(long, value_name = "NS/NAME")]
    pub service: Option<String>,
    /// Only drops with this kernel reason (NETFILTER_DROP, ...; repeatable).
    #[arg(long, value_name = "NAME")]
    pub reason: Vec<String>,
    /// Also report the kernel's frees that are not drops (NOT_SPECIFIED, CONSUMED).
    #[arg(long)]
    pub all_reasons: bool,
    /// Turn on nf_conntrack_acct and nf_conntrack_timestamp in the namespace for byte,
    /// packet and duration counts (restored on exit); without it they are only read.
    #[arg(long)]
    pub enable_accounting: bool,
    /// Confirm each attributed NETFILTER_DROP with nftrace: adds a table of plumb's own
    /// that traces every packet (removed on exit). Only with --lab or --netns NAME of a
    /// namespace that is not the host's, since it writes to that namespace's ruleset.
    #[arg(long)]
    pub confirm_with_trace: bool,
    /// Serve Prometheus metrics on this address (GET /metrics, /healthz, /readyz).
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Output: compact (one line per event) or json (one object per line).
    #[arg(short = 'o', long = "output", value_enum, default_value = "compact")]
    pub output: ObserveFormat,
}

/// `plumb observe --verdict`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ObserveVerdict {
    /// Connections netfilter let through.
    Forwarded,
    /// Packets the kernel dropped.
    Dropped,
}

/// `plumb observe -o`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ObserveFormat {
    /// One line per event.
    Compact,
    /// One JSON object per line.
    Json,
}

/// Every finding id, as clap's possible values (help and completions list them).
fn finding_ids() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(crate::catalogue::catalogue().map(|e| e.id))
}

/// The lab's scenario names, as clap's possible values (help and completions list them).
fn scenario_names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(plumb_lab::Scenario::ALL.map(|s| s.name()))
}

/// `--json`, or kubectl's `-o json` / `-o text`.
#[derive(Debug, Args, Clone, Default)]
pub struct OutputFlags {
    /// Print JSON (the shapes documented in the README) instead of text.
    #[arg(long)]
    json: bool,
    /// Output format: text, json (`-o json` is `--json`) or json-compact (the same JSON
    /// on one line).
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
    /// True when JSON was asked for (pretty or compact).
    pub fn json(&self) -> bool {
        self.json
            || matches!(
                self.output_format,
                Some(OutputFormat::Json | OutputFormat::JsonCompact)
            )
    }

    /// True for `-o json-compact`: JSON on one line, without indentation.
    pub fn compact(&self) -> bool {
        self.output_format == Some(OutputFormat::JsonCompact)
    }
}

/// `-o FORMAT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Human-readable text.
    Text,
    /// JSON, indented.
    Json,
    /// JSON without indentation or line breaks (the same document, about half the
    /// size for large outputs such as `plumb services` on a big node).
    JsonCompact,
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
        assert!(parse(&["plumb", "check", "-o", "json-compact"]));
    }

    #[test]
    fn trace_needs_a_dst_unless_it_reads_flows_or_services() {
        assert!(Cli::try_parse_from(["plumb", "trace"]).is_err());
        assert!(Cli::try_parse_from(["plumb", "trace", "--flows", "-"]).is_ok());
        assert!(Cli::try_parse_from(["plumb", "trace", "--all-services"]).is_ok());
        assert!(
            Cli::try_parse_from(["plumb", "trace", "--dst", "10.0.0.1:80", "--flows", "f"])
                .is_err()
        );
        assert!(Cli::try_parse_from(["plumb", "trace", "--flows", "f", "--all-services"]).is_err());
    }
}
