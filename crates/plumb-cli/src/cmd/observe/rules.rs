//! Attribution's side of `plumb observe`: reading the namespace's rule counters (and
//! Service names) off the main thread, and the windows of NETFILTER_DROPs that wait
//! for a read so each is attributed to the rule whose counter moved.

use super::metrics::{Metrics, label};
use super::queue::Counted;
use super::{NAMES_REFRESH, PENDING, State, WINDOW};
use plumb_observe::attribution::{CounterSnapshot, NetlinkPlan, RuleMatch, read_counted};
use plumb_observe::drops::WallClock;
use plumb_observe::names::ServiceNames;
use std::io::Write;
use std::sync::mpsc::{Receiver, sync_channel};
use std::time::{Duration, Instant};

/// Names and counters from one read of the ruleset, or why it failed.
pub(super) type RulesetRead = Result<(ServiceNames, CounterSnapshot), String>;

/// Reads the namespace's rule counters for attribution, and the Service names.
///
/// The first read is a full one over netlink (plumb's nf_tables reader, as `ruleset
/// show --netns` uses: the rules' text, owners and names), with the counters of the
/// chains that can drop (chains with DROP/REJECT rules, base chains with a DROP
/// policy) read at the same generation; the two make a [`NetlinkPlan`]. Later reads
/// fetch only those chains' counters (GET requests: milliseconds, where a save tool
/// takes tens of seconds on a node with 10k Services) while the ruleset's generation
/// stays the same. A changed ruleset means a new full read; a table netlink cannot
/// read (iptables-legacy) or a netlink error, the dump tools with their counters.
pub(super) struct RulesetReader {
    pub(super) netns: Option<String>,
    pub(super) plan: Option<NetlinkPlan>,
    /// kube-proxy's names from the last full read (Cilium's are re-read each time).
    pub(super) names: ServiceNames,
    pub(super) metrics: Option<Metrics>,
    /// The agent's frontends with their Kubernetes names (`cilium-dbg service list -o
    /// json`) and when they were asked for: at most once per [`NAMES_REFRESH`].
    pub(super) agent: Option<(Instant, Vec<plumb_cilium::lbmap::Frontend>)>,
}

/// How long one netlink counter read may take before the full read is used instead.
pub(super) const NETLINK_DEADLINE: Duration = Duration::from_secs(5);

impl RulesetReader {
    pub(super) fn new(netns: Option<&str>, metrics: Option<Metrics>) -> RulesetReader {
        RulesetReader {
            netns: netns.map(str::to_string),
            plan: None,
            names: ServiceNames::default(),
            metrics,
            agent: None,
        }
    }

    pub(super) fn count(&self, how: &str) {
        if let Some(m) = &self.metrics {
            m.reads.get_or_create(&vec![label("how", how)]).inc();
        }
    }

    pub(super) fn read(&mut self) -> RulesetRead {
        let netns = self.netns.as_deref();
        let deadline = || Some(Instant::now() + NETLINK_DEADLINE);
        if let Some(plan) = &self.plan {
            let (chains, policies) = plan.chains();
            let fast = plumb_os::nftables::read_counters(netns, chains, policies, deadline())
                .map_err(|e| e.to_string())
                .and_then(|c| plan.snapshot(&c));
            match fast {
                Ok(snapshot) => {
                    self.count("netlink");
                    return Ok((self.with_cilium(), snapshot));
                }
                Err(_) => self.plan = None,
            }
        }
        // The full read: over netlink (plumb's nf_tables reader: the rules' text and
        // owners, no rule counters) with the counters of the chains that can drop read
        // at the same generation. On a node with 10k Services this takes about a
        // second where iptables-nft-save takes tens.
        if let Some((names, snapshot, plan)) = self.read_over_netlink() {
            self.count("full");
            self.names = names;
            self.plan = Some(plan);
            return Ok((self.with_cilium(), snapshot));
        }
        // The dump tools with their counters: iptables-legacy tables, or netlink failed.
        let (rs, _problems) = read_counted(&plumb_os::runner::SystemRunner, netns)?;
        self.count("tools");
        self.names = ServiceNames::from_ruleset(&rs);
        Ok((self.with_cilium(), CounterSnapshot::of(&rs)))
    }

    /// The full read over netlink and its plan; None when it cannot serve (a legacy
    /// table, a table not decoded exactly, the ruleset changing meanwhile, an error).
    pub(super) fn read_over_netlink(&self) -> Option<(ServiceNames, CounterSnapshot, NetlinkPlan)> {
        let netns = self.netns.as_deref();
        let deadline = Some(Instant::now() + NETLINK_DEADLINE);
        let before = plumb_os::nftables::generation(netns, deadline).ok()?;
        let collected =
            plumb_collect::rulesets::collect_live_rulesets(&plumb_os::runner::SystemRunner, netns);
        let rs = collected.ruleset;
        let (chains, policies) = NetlinkPlan::chains_to_read(&rs)?;
        let c = plumb_os::nftables::read_counters(netns, &chains, &policies, deadline).ok()?;
        // The same generation before the full read and at the counters' read: both saw
        // the same ruleset.
        if c.generation != before {
            return None;
        }
        let plan = NetlinkPlan::new(&rs, &c).ok()?;
        let snapshot = plan.snapshot(&c).ok()?;
        Some((ServiceNames::from_ruleset(&rs), snapshot, plan))
    }

    /// The names, with the frontends of Cilium's load balancer when its maps are pinned
    /// (a kube-proxy-free node has its Services there, not in rules). The maps hold no
    /// Kubernetes names: on the host's maps, the agent's service list (when `cilium-dbg`
    /// is on PATH and answers) names the frontends.
    pub(super) fn with_cilium(&mut self) -> ServiceNames {
        let mut names = self.names.clone();
        let root = cilium_root(self.netns.as_deref());
        if let Some(lb) = plumb_collect::cilium::read_lb_maps(&root)
            && !lb.frontends.is_empty()
        {
            names.add_cilium(&lb.frontends);
            if root == std::path::Path::new("/") {
                if self
                    .agent
                    .as_ref()
                    .is_none_or(|(at, _)| at.elapsed() >= NAMES_REFRESH)
                {
                    self.agent = Some((Instant::now(), agent_service_list()));
                }
                if let Some((_, listed)) = &self.agent {
                    names.name_cilium(listed);
                }
            }
        }
        names
    }
}

/// The agent's frontends, named (`cilium-dbg service list -o json`); none when the CLI
/// is missing or fails (the maps still give the frontends, by address).
pub(super) fn agent_service_list() -> Vec<plumb_cilium::lbmap::Frontend> {
    use plumb_os::runner::Runner;
    let out = plumb_os::runner::SystemRunner.run(
        "cilium-dbg",
        &["service", "list", "-o", "json"],
        None,
        plumb_collect::cilium::AGENT_TIMEOUT,
    );
    match out {
        Ok(o) if o.success() => {
            plumb_cilium::agent::service_list(&String::from_utf8_lossy(&o.stdout)).0
        }
        _ => Vec::new(),
    }
}

/// Where Cilium's maps are pinned for `netns`: below the lab's root for the lab's node
/// (the lab pins them there, never in the host's bpffs), else below `/`. BPF maps are
/// not per network namespace: any other namespace sees the host's.
pub(super) fn cilium_root(netns: Option<&str>) -> std::path::PathBuf {
    netns
        .filter(|n| *n == plumb_lab::state::NODE_NETNS)
        .and_then(|_| plumb_lab::state::LabState::load().ok().flatten())
        .map_or_else(|| std::path::PathBuf::from("/"), |s| s.root)
}

/// Reads the ruleset on a thread of its own, so events keep flowing meanwhile; the
/// reader comes back with the answer.
pub(super) fn read_in_background(
    mut reader: RulesetReader,
) -> Receiver<(RulesetReader, RulesetRead)> {
    let (tx, rx) = sync_channel(1);
    std::thread::spawn(move || {
        let read = reader.read();
        let _ = tx.send((reader, read));
    });
    rx
}

/// NETFILTER_DROPs waiting for the counters to be read. A drop the kernel made before
/// a read began was counted in it, whenever it reaches this thread: it waits in
/// `pending` for that read. Drops made after the read began wait in `next` for the
/// following one. Both are bounded; beyond, drops are printed unattributed.
#[derive(Default)]
pub(super) struct Windows {
    pub(super) pending: Vec<Counted>,
    pub(super) next: Vec<Counted>,
    /// When the first of `pending` arrived (a read starts [`WINDOW`] later).
    pub(super) since: Option<Instant>,
    /// The read in flight: when it began (CLOCK_MONOTONIC ns) and its answer.
    pub(super) in_flight: Option<(u64, Receiver<(RulesetReader, RulesetRead)>)>,
    /// The reader, while no read is in flight.
    pub(super) reader: Option<RulesetReader>,
}

impl Windows {
    /// Holds `d` for its window; gives it back when both windows are full.
    pub(super) fn hold(&mut self, d: Counted) -> Option<Counted> {
        let after_read = self
            .in_flight
            .as_ref()
            .is_some_and(|(start, _)| d.0.monotonic_ns > *start);
        let w = if after_read {
            &mut self.next
        } else {
            &mut self.pending
        };
        if w.len() >= PENDING {
            return Some(d);
        }
        w.push(d);
        if !after_read {
            self.since.get_or_insert_with(Instant::now);
        }
        None
    }

    /// Starts a read when the pending window is due (or, with nothing pending, when
    /// the names are due for a refresh).
    pub(super) fn maybe_start(&mut self, st: &State<'_>) {
        if self.in_flight.is_some() {
            return;
        }
        let due = self.since.is_some_and(|t| t.elapsed() >= WINDOW)
            || (self.pending.is_empty() && st.names_read.elapsed() >= NAMES_REFRESH);
        if due && let Some(reader) = self.reader.take() {
            self.in_flight = Some((WallClock::monotonic_now_ns(), read_in_background(reader)));
        }
    }

    /// When the read in flight has answered (or, with `wait`, once it does): prints
    /// the pending window attributed, and makes the next one pending.
    pub(super) fn finish(
        &mut self,
        st: &mut State<'_>,
        out: &mut impl Write,
        wait: bool,
    ) -> anyhow::Result<()> {
        let Some((_, rx)) = &self.in_flight else {
            return Ok(());
        };
        let answer = if wait {
            rx.recv().map_err(|_| ())
        } else {
            rx.try_recv().map_err(|_| ())
        };
        let read = match answer {
            Ok((reader, r)) => {
                self.reader = Some(reader);
                r
            }
            Err(()) if wait => Err("the ruleset reader ended without an answer".into()),
            Err(()) => return Ok(()),
        };
        self.in_flight = None;
        let after = st.apply_read(read);
        st.attribute_and_print(out, &mut self.pending, after)?;
        std::mem::swap(&mut self.pending, &mut self.next);
        self.since = (!self.pending.is_empty()).then(Instant::now);
        Ok(())
    }
}

pub(super) fn not_attributed() -> RuleMatch {
    RuleMatch::NotFound {
        why: format!("more than {PENDING} netfilter drops at once: not attributed"),
    }
}
