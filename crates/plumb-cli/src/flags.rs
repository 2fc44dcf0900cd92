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
    /// Simulate where a packet goes through the node's netfilter ruleset.
    Trace(TraceArgs),
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
    #[arg(long)]
    pub json: bool,
}
