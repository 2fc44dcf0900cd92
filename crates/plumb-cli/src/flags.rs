//! Command-line flags (clap derive). No IO here: just the shape of the CLI.

use clap::{Args, Parser, Subcommand};
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
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Read, summarise, print and diff netfilter rulesets.
    #[command(subcommand)]
    Ruleset(RulesetCommand),
    /// Report who changes netfilter rules as it happens: foreign changes to kube-proxy/CNI
    /// objects, revert fights, policy changes (nftables events, audit; read-only).
    Watch(WatchFlags),
    /// Print shell completions.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Subcommand)]
pub enum RulesetCommand {
    /// Read this machine's (or a network namespace's) rulesets with the native tools and summarise them.
    Show {
        /// Look inside this network namespace (as in `ip netns exec NAME`).
        #[arg(long, value_name = "NAME")]
        netns: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Summarise a ruleset file (format auto-detected).
    Parse {
        /// File to read, or - for standard input.
        file: PathBuf,
        #[command(flatten)]
        input: InputFlags,
        #[arg(long)]
        json: bool,
    },
    /// Re-print a ruleset file in canonical iptables-save form.
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
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args, Clone)]
pub struct InputFlags {
    /// Input format: iptables-save, iptables-restore, iptables-list-rules, iptables-listing, nft, nft-json.
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

#[derive(Debug, Args, Clone)]
pub struct WatchFlags {
    /// Watch this network namespace (as in `ip netns exec NAME`, or a path such as
    /// /proc/PID/ns/net) instead of the host's.
    #[arg(long, value_name = "NAME")]
    pub netns: Option<String>,
    /// One JSON object per line instead of human lines.
    #[arg(long)]
    pub json: bool,
    /// Stop after this many seconds and print a summary (default: until SIGINT/SIGTERM).
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// Serve Prometheus metrics on this address (GET /metrics).
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Do not listen to audit (exe/ppid/argv of writers; the legacy-backend trigger).
    #[arg(long)]
    pub no_audit: bool,
}
