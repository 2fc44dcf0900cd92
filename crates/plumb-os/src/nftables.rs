//! Reading nf_tables over netlink: GET dumps of tables, chains, the rules of each
//! chain, sets and (optionally) their elements, and the generation id, from this
//! namespace or another one. Shared by `plumb watch` (its baseline) and the live
//! ruleset reader; both decode the messages themselves.
//!
//! Read-only: only `NFT_MSG_GET*` requests are sent (never a batch, never NEW/DEL).
//!
//! Rule counters ([`read_counters`], [`decode_rule_counter`]): the packets and
//! bytes of each rule's `counter` expression and of each base chain's policy, read
//! chain by chain for the chains asked for, so a caller that knows which chains can
//! drop reads only those.
//!
//! Why one rule dump per chain: a dump of all rules costs the kernel time quadratic
//! in their number (it walks past the rules already sent at each chunk): 5 s for
//! 110k rules, against ~0.6 s chain by chain.

use crate::netlink::{self, Message};
use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// nfnetlink subsystem id of nf_tables (`NFNL_SUBSYS_NFTABLES`).
pub const SUBSYS_NFTABLES: u16 = 10;

/// `NFT_MSG_*` message types (the low byte of `nlmsg_type`).
pub mod msg {
    /// `NFT_MSG_NEWTABLE`.
    pub const NEWTABLE: u16 = 0;
    /// `NFT_MSG_GETTABLE`.
    pub const GETTABLE: u16 = 1;
    /// `NFT_MSG_DELTABLE`.
    pub const DELTABLE: u16 = 2;
    /// `NFT_MSG_NEWCHAIN`.
    pub const NEWCHAIN: u16 = 3;
    /// `NFT_MSG_GETCHAIN`.
    pub const GETCHAIN: u16 = 4;
    /// `NFT_MSG_DELCHAIN`.
    pub const DELCHAIN: u16 = 5;
    /// `NFT_MSG_NEWRULE`.
    pub const NEWRULE: u16 = 6;
    /// `NFT_MSG_GETRULE`.
    pub const GETRULE: u16 = 7;
    /// `NFT_MSG_DELRULE`.
    pub const DELRULE: u16 = 8;
    /// `NFT_MSG_NEWSET`.
    pub const NEWSET: u16 = 9;
    /// `NFT_MSG_GETSET`.
    pub const GETSET: u16 = 10;
    /// `NFT_MSG_NEWSETELEM`.
    pub const NEWSETELEM: u16 = 12;
    /// `NFT_MSG_GETSETELEM`.
    pub const GETSETELEM: u16 = 13;
    /// `NFT_MSG_NEWGEN`.
    pub const NEWGEN: u16 = 15;
    /// `NFT_MSG_GETGEN`.
    pub const GETGEN: u16 = 16;
    /// `NFT_MSG_NEWOBJ`.
    pub const NEWOBJ: u16 = 18;
    /// `NFT_MSG_GETOBJ`.
    pub const GETOBJ: u16 = 19;
    /// `NFT_MSG_NEWFLOWTABLE`.
    pub const NEWFLOWTABLE: u16 = 22;
    /// `NFT_MSG_GETFLOWTABLE`.
    pub const GETFLOWTABLE: u16 = 23;
}

/// `NLM_F_DUMP_INTR`: the ruleset changed while the kernel was dumping it.
const NLM_F_DUMP_INTR: u16 = 0x10;
/// `NFTA_RULE_TABLE`, `NFTA_RULE_CHAIN` (also `NFTA_CHAIN_TABLE` = 1, `NFTA_CHAIN_NAME` = 3).
const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_CHAIN_TABLE: u16 = 1;
const NFTA_CHAIN_NAME: u16 = 3;
/// `NFTA_SET_TABLE`, `NFTA_SET_NAME`; `NFTA_SET_ELEM_LIST_TABLE`, `_SET`.
const NFTA_SET_TABLE: u16 = 1;
const NFTA_SET_NAME: u16 = 2;
const NFTA_SET_ELEM_LIST_TABLE: u16 = 1;
const NFTA_SET_ELEM_LIST_SET: u16 = 2;
/// `NFTA_GEN_ID`.
const NFTA_GEN_ID: u16 = 1;
/// `NFTA_RULE_HANDLE`, `NFTA_RULE_EXPRESSIONS`.
const NFTA_RULE_HANDLE: u16 = 3;
const NFTA_RULE_EXPRESSIONS: u16 = 4;
/// `NFTA_LIST_ELEM`; `NFTA_EXPR_NAME`, `NFTA_EXPR_DATA`.
const NFTA_LIST_ELEM: u16 = 1;
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;
/// `NFTA_COUNTER_BYTES`, `NFTA_COUNTER_PACKETS`.
const NFTA_COUNTER_BYTES: u16 = 1;
const NFTA_COUNTER_PACKETS: u16 = 2;
/// `NFTA_CHAIN_COUNTERS`: a base chain's policy counters (iptables-nft's `[p:b]`).
const NFTA_CHAIN_COUNTERS: u16 = 8;

/// Chains handed to a rule-dumping worker at a time while the chain dump goes on.
const CHAIN_BATCH: usize = 64;

/// Size of one receive: the kernel fills dump answers up to this.
const RECEIVE_SLOT: usize = 64 * 1024;

/// What to dump besides tables, chains and rules.
#[derive(Clone, Copy, Debug, Default)]
pub struct DumpOptions {
    /// Also sets (`GETSET`) and stateful objects, flowtables.
    pub sets: bool,
    /// Also the elements of each set (`GETSETELEM`, one dump per set); implies `sets`.
    pub elements: bool,
    /// Give up (`io::ErrorKind::TimedOut`) once this instant has passed.
    pub deadline: Option<Instant>,
}

/// A `NETLINK_NETFILTER` socket bound to a port, created in `netns` (a name under
/// /run/netns or a path) or in this namespace; it stays in the namespace it was made
/// in.
pub fn netfilter_socket(netns: Option<&str>) -> io::Result<netlink_sys::Socket> {
    crate::netns::on_thread(netns, || {
        let mut s = netlink_sys::Socket::new(netlink_sys::protocols::NETLINK_NETFILTER)?;
        s.bind(&netlink_sys::SocketAddr::new(0, 0))?;
        Ok(s)
    })
}

/// Sends an nftables GET request (`NFT_MSG_GET*`) for `family` (`AF_UNSPEC`: all),
/// narrowed by `attrs` (e.g. table and chain names), to the kernel: a read.
fn send_get(
    socket: &netlink_sys::Socket,
    kind: u16,
    extra_flags: u16,
    family: u8,
    attrs: &[Vec<u8>],
) -> io::Result<()> {
    // Only GET requests leave this module.
    debug_assert!(matches!(
        kind,
        msg::GETTABLE
            | msg::GETCHAIN
            | msg::GETRULE
            | msg::GETSET
            | msg::GETSETELEM
            | msg::GETGEN
            | msg::GETOBJ
            | msg::GETFLOWTABLE
    ));
    let mut payload = vec![family, 0, 0, 0]; // nfgenmsg
    for a in attrs {
        payload.extend_from_slice(a);
    }
    let m = netlink::build::message(
        (SUBSYS_NFTABLES << 8) | kind,
        libc::NLM_F_REQUEST as u16 | extra_flags,
        &payload,
    );
    let kernel = netlink_sys::SocketAddr::new(0, 0);
    socket.send_to(&m, &kernel, 0).map(|_| ())
}

/// The family byte (`nfgenmsg.nfgen_family`) of an nftables message, and its
/// attributes' bytes.
pub fn split<'a>(m: &Message<'a>) -> Option<(u8, &'a [u8])> {
    Some((*m.payload.first()?, m.payload.get(4..)?))
}

/// The first attribute of type `kind` in `attrs`, as a string.
fn attr_str(attrs: &[u8], kind: u16) -> Option<String> {
    netlink::attrs(attrs)
        .find(|a| a.kind == kind)
        .map(|a| a.string())
}

/// Whether the first attribute of type `kind` in `attrs` is the string `want` (no
/// allocation: this runs for each of a big dump's rules).
fn attr_is(attrs: &[u8], kind: u16, want: &str) -> bool {
    netlink::attrs(attrs)
        .find(|a| a.kind == kind)
        .is_some_and(|a| a.is_text(want))
}

/// A netfilter socket for GET requests (reads only), with its receive buffer.
pub struct Requester {
    socket: netlink_sys::Socket,
    buf: Vec<u8>,
    deadline: Option<Instant>,
}

impl Requester {
    /// A socket in `netns` (or this namespace); each receive waits at most 5 s, and
    /// none goes past `deadline`.
    pub fn open(netns: Option<&str>, deadline: Option<Instant>) -> io::Result<Requester> {
        let socket = netfilter_socket(netns)?;
        set_receive_timeout(&socket, Duration::from_secs(5))?;
        Ok(Requester {
            socket,
            buf: vec![0u8; RECEIVE_SLOT],
            deadline,
        })
    }

    fn check_deadline(&self) -> io::Result<()> {
        match self.deadline {
            Some(d) if Instant::now() > d => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the deadline passed before the dump ended",
            )),
            _ => Ok(()),
        }
    }

    /// Sends GET request `kind` (a dump when `dump`) and hands each nftables message
    /// of the answer to `on`, until `NLMSG_DONE` (a dump) or the first answer. An
    /// error message becomes its errno; a dump the kernel marks interrupted,
    /// `Interrupted`.
    pub fn request(
        &mut self,
        kind: u16,
        dump: bool,
        family: u8,
        attrs: &[Vec<u8>],
        on: &mut dyn FnMut(Message<'_>),
    ) -> io::Result<()> {
        self.check_deadline()?;
        let flags = if dump { libc::NLM_F_DUMP as u16 } else { 0 };
        send_get(&self.socket, kind, flags, family, attrs)?;
        loop {
            let n = self.socket.recv(&mut &mut self.buf[..], 0)?;
            for m in netlink::messages(&self.buf[..n.min(self.buf.len())]) {
                if m.flags & NLM_F_DUMP_INTR != 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::Interrupted,
                        "the ruleset changed during the dump",
                    ));
                }
                // NLMSG_ERROR carries an errno; so does NLMSG_DONE, for a dump the
                // kernel ended with an error (0: complete).
                match m.kind {
                    netlink::NLMSG_DONE if m.errno() < 0 => {
                        return Err(io::Error::from_raw_os_error(-m.errno()));
                    }
                    netlink::NLMSG_DONE => return Ok(()),
                    netlink::NLMSG_ERROR if m.errno() != 0 => {
                        return Err(io::Error::from_raw_os_error(-m.errno()));
                    }
                    netlink::NLMSG_ERROR => {}
                    k if k >> 8 == SUBSYS_NFTABLES => {
                        on(m);
                        if !dump {
                            return Ok(());
                        }
                    }
                    _ => {}
                }
            }
            self.check_deadline()?;
        }
    }

    /// The current nf_tables generation (`NFT_MSG_GETGEN`).
    pub fn generation(&mut self) -> io::Result<u32> {
        let mut id = None;
        self.request(msg::GETGEN, false, libc::AF_UNSPEC as u8, &[], &mut |m| {
            if m.kind & 0xff == msg::NEWGEN
                && let Some((_, attrs)) = split(&m)
            {
                id = netlink::attrs(attrs)
                    .find(|a| a.kind == NFTA_GEN_ID)
                    .and_then(|a| a.be_u32());
            }
        })?;
        id.ok_or_else(|| io::Error::other("no generation in the GETGEN answer"))
    }

    /// Tables, chains, then the rules of each chain (only the rules of the chain asked
    /// for are handed on, should a kernel not apply the filter); with `opts.sets`,
    /// then sets (and their elements), objects and flowtables.
    pub fn dump_all(
        &mut self,
        opts: &DumpOptions,
        on: &mut dyn FnMut(Message<'_>),
    ) -> io::Result<()> {
        let chains = self.tables_and_chains(on)?;
        self.rules_of(&chains, on)?;
        self.sets(opts, on)
    }

    /// Tables, then chains; gives every chain as (family, table, name).
    pub fn tables_and_chains(
        &mut self,
        on: &mut dyn FnMut(Message<'_>),
    ) -> io::Result<Vec<(u8, String, String)>> {
        let all = libc::AF_UNSPEC as u8;
        self.request(msg::GETTABLE, true, all, &[], on)?;
        self.named_dump(msg::GETCHAIN, NFTA_CHAIN_TABLE, NFTA_CHAIN_NAME, on)
    }

    /// One dump of `kind` for every family, each message handed to `on`; gives each
    /// object it names as (family, table, name), read from its `table_attr` and
    /// `name_attr` attributes.
    fn named_dump(
        &mut self,
        kind: u16,
        table_attr: u16,
        name_attr: u16,
        on: &mut dyn FnMut(Message<'_>),
    ) -> io::Result<Vec<(u8, String, String)>> {
        let mut names = Vec::new();
        self.named_dump_each(kind, table_attr, name_attr, on, &mut |n| names.push(n))?;
        Ok(names)
    }

    /// [`Requester::named_dump`], each name handed to `named` as it comes, right after
    /// its message went to `on`.
    fn named_dump_each(
        &mut self,
        kind: u16,
        table_attr: u16,
        name_attr: u16,
        on: &mut dyn FnMut(Message<'_>),
        named: &mut dyn FnMut((u8, String, String)),
    ) -> io::Result<()> {
        self.request(kind, true, libc::AF_UNSPEC as u8, &[], &mut |m| {
            on(m);
            if let Some((family, attrs)) = split(&m)
                && let (Some(t), Some(n)) =
                    (attr_str(attrs, table_attr), attr_str(attrs, name_attr))
            {
                named((family, t, n));
            }
        })
    }

    /// The rules of each chain, one dump per chain, in order.
    pub fn rules_of(
        &mut self,
        chains: &[(u8, String, String)],
        on: &mut dyn FnMut(Message<'_>),
    ) -> io::Result<()> {
        for (family, table, chain) in chains {
            let filter = [
                netlink::build::str_attr(NFTA_RULE_TABLE, table),
                netlink::build::str_attr(NFTA_RULE_CHAIN, chain),
            ]
            .concat();
            let mut of_chain = |m: Message<'_>| {
                let ours = split(&m).is_some_and(|(f, attrs)| {
                    f == *family
                        && attr_is(attrs, NFTA_RULE_TABLE, table)
                        && attr_is(attrs, NFTA_RULE_CHAIN, chain)
                });
                if ours {
                    on(m);
                }
            };
            match self.request(msg::GETRULE, true, *family, &[filter], &mut of_chain) {
                // Deleted since the chain dump: the generation moved, the caller retries.
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                r => r?,
            }
        }
        Ok(())
    }

    /// With `opts.sets` (or `elements`): sets, their elements, objects, flowtables.
    pub fn sets(&mut self, opts: &DumpOptions, on: &mut dyn FnMut(Message<'_>)) -> io::Result<()> {
        if opts.sets || opts.elements {
            let sets = self.set_list(on)?;
            if opts.elements {
                let all: Vec<&SetId> = sets.iter().collect();
                self.elements_of(&all, on)?;
            }
            self.objects(on)?;
        }
        Ok(())
    }

    /// Every set; gives each as (family, table, name).
    pub fn set_list(&mut self, on: &mut dyn FnMut(Message<'_>)) -> io::Result<Vec<SetId>> {
        self.named_dump(msg::GETSET, NFTA_SET_TABLE, NFTA_SET_NAME, on)
    }

    /// The elements of each set, one dump per set (a set gone meanwhile: none).
    pub fn elements_of(
        &mut self,
        sets: &[&SetId],
        on: &mut dyn FnMut(Message<'_>),
    ) -> io::Result<()> {
        for (family, table, set) in sets {
            let filter = [
                netlink::build::str_attr(NFTA_SET_ELEM_LIST_TABLE, table),
                netlink::build::str_attr(NFTA_SET_ELEM_LIST_SET, set),
            ]
            .concat();
            match self.request(msg::GETSETELEM, true, *family, &[filter], on) {
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                r => r?,
            }
        }
        Ok(())
    }

    /// Stateful objects and flowtables.
    pub fn objects(&mut self, on: &mut dyn FnMut(Message<'_>)) -> io::Result<()> {
        let all = libc::AF_UNSPEC as u8;
        for kind in [msg::GETOBJ, msg::GETFLOWTABLE] {
            match self.request(kind, true, all, &[], on) {
                // Kernels without objects or flowtables: nothing to read.
                Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {}
                r => r?,
            }
        }
        Ok(())
    }
}

/// A set: (family, table, name).
pub type SetId = (u8, String, String);

/// Packets and bytes of a `counter` expression or of a chain's policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Count {
    /// Packets counted.
    pub packets: u64,
    /// Bytes counted.
    pub bytes: u64,
}

/// A chain, as the kernel names it: family (`NFPROTO_*`), table, chain.
pub type ChainId = (u8, String, String);

/// One rule's identity and counter, from a `NEWRULE` message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleCounter {
    /// The chain it is in.
    pub chain: ChainId,
    /// Its handle (stable while the rule exists).
    pub handle: u64,
    /// Its first `counter` expression's values (None: the rule has no counter).
    pub count: Option<Count>,
}

/// The `NFTA_COUNTER_*` values of a counter's nested attributes.
fn decode_count(data: &[u8]) -> Option<Count> {
    let mut c = Count::default();
    let (mut p, mut b) = (false, false);
    for a in netlink::attrs(data) {
        match a.kind {
            NFTA_COUNTER_PACKETS => {
                c.packets = a.be_u64()?;
                p = true;
            }
            NFTA_COUNTER_BYTES => {
                c.bytes = a.be_u64()?;
                b = true;
            }
            _ => {}
        }
    }
    (p && b).then_some(c)
}

/// A `NEWRULE` message's chain, handle and counter; None when it is not a rule message
/// or lacks its table, chain or handle. Pure.
pub fn decode_rule_counter(m: &Message<'_>) -> Option<RuleCounter> {
    if m.kind & 0xff != msg::NEWRULE {
        return None;
    }
    let (family, attrs) = split(m)?;
    let mut table = None;
    let mut chain = None;
    let mut handle = None;
    let mut count = None;
    for a in netlink::attrs(attrs) {
        match a.kind {
            NFTA_RULE_TABLE => table = Some(a.string()),
            NFTA_RULE_CHAIN => chain = Some(a.string()),
            NFTA_RULE_HANDLE => handle = a.be_u64(),
            NFTA_RULE_EXPRESSIONS if count.is_none() => {
                count = a
                    .nested()
                    .filter(|e| e.kind == NFTA_LIST_ELEM)
                    .find_map(|e| {
                        let mut name = None;
                        let mut data = None;
                        for x in e.nested() {
                            match x.kind {
                                NFTA_EXPR_NAME => name = Some(x.str()),
                                NFTA_EXPR_DATA => data = Some(x.value),
                                _ => {}
                            }
                        }
                        (name? == "counter").then(|| decode_count(data?))?
                    });
            }
            _ => {}
        }
    }
    Some(RuleCounter {
        chain: (family, table?, chain?),
        handle: handle?,
        count,
    })
}

/// A `NEWCHAIN` message's chain and its policy counters (None: a chain without them,
/// e.g. a user chain). Pure.
pub fn decode_chain_counter(m: &Message<'_>) -> Option<(ChainId, Option<Count>)> {
    if m.kind & 0xff != msg::NEWCHAIN {
        return None;
    }
    let (family, attrs) = split(m)?;
    let count = netlink::attrs(attrs)
        .find(|a| a.kind == NFTA_CHAIN_COUNTERS)
        .and_then(|a| decode_count(a.value));
    Some((
        (
            family,
            attr_str(attrs, NFTA_CHAIN_TABLE)?,
            attr_str(attrs, NFTA_CHAIN_NAME)?,
        ),
        count,
    ))
}

/// The counters of some chains, read at one generation.
#[derive(Clone, Debug, Default)]
pub struct Counters {
    /// The generation they were read at.
    pub generation: u32,
    /// Each chain's rules, in order (an absent chain: not in the map).
    pub rules: std::collections::HashMap<ChainId, Vec<RuleCounter>>,
    /// Each base chain's policy counters asked for.
    pub policies: std::collections::HashMap<ChainId, Option<Count>>,
}

/// The rule counters of `chains` (one dump each) and the policy counters of `policies`
/// (one GETCHAIN each) in `netns`, at one generation: when it moved meanwhile or a dump
/// was interrupted, the read starts over on a fresh socket, at most three times.
/// Read-only.
pub fn read_counters(
    netns: Option<&str>,
    chains: &[ChainId],
    policies: &[ChainId],
    deadline: Option<Instant>,
) -> io::Result<Counters> {
    let mut last = None;
    for _ in 0..3 {
        // A fresh socket each time: an interrupted dump leaves the rest of its answer
        // queued on the old one.
        let mut r = Requester::open(netns, deadline)?;
        let before = r.generation()?;
        let mut out = Counters {
            generation: before,
            ..Counters::default()
        };
        for c in chains {
            out.rules.insert(c.clone(), Vec::new());
        }
        let read = (|| -> io::Result<()> {
            r.rules_of(chains, &mut |m| {
                if let Some(rc) = decode_rule_counter(&m)
                    && let Some(v) = out.rules.get_mut(&rc.chain)
                {
                    v.push(rc);
                }
            })?;
            for (family, table, chain) in policies {
                let filter = [
                    netlink::build::str_attr(NFTA_CHAIN_TABLE, table),
                    netlink::build::str_attr(NFTA_CHAIN_NAME, chain),
                ];
                let mut got = None;
                match r.request(msg::GETCHAIN, false, *family, &filter, &mut |m| {
                    got = decode_chain_counter(&m);
                }) {
                    Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                    res => res?,
                }
                if let Some((id, count)) = got {
                    out.policies.insert(id, count);
                }
            }
            Ok(())
        })();
        match read {
            Ok(()) if r.generation()? == before => return Ok(out),
            Ok(()) => last = Some(io::Error::other("the ruleset changed during the read")),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("counter read failed")))
}

/// The current nf_tables generation of `netns` (one GETGEN). Read-only.
pub fn generation(netns: Option<&str>, deadline: Option<Instant>) -> io::Result<u32> {
    Requester::open(netns, deadline)?.generation()
}

/// Like [`dump_ruleset`] with the rule dumps shared by `workers` threads, each with
/// its own socket, taking the chains in batches as the chain dump gives them (each
/// chain's rules come in order from one worker; the rules dumped while the chains
/// still come). `on(worker, message)` is called from that worker's thread;
/// tables and chains (and restarts, as `None`) go to every worker; sets, objects and
/// flowtables to worker 0; set elements to the worker that dumped them (the sets are
/// shared among the workers too). Read-only.
pub fn dump_ruleset_split(
    netns: Option<&str>,
    opts: &DumpOptions,
    workers: usize,
    on: &(dyn Fn(usize, Option<Message<'_>>) + Sync),
) -> io::Result<u32> {
    let workers = workers.max(1);
    let mut last_error = None;
    for attempt in 0..3 {
        if attempt > 0 {
            (0..workers).for_each(|w| on(w, None));
        }
        let mut main = Requester::open(netns, opts.deadline)?;
        let before = main.generation()?;
        let attempt_result = (|| -> io::Result<()> {
            let mut others: Vec<Requester> = (1..workers)
                .map(|_| Requester::open(netns, opts.deadline))
                .collect::<io::Result<_>>()?;
            main.request(msg::GETTABLE, true, libc::AF_UNSPEC as u8, &[], &mut |m| {
                (0..workers).for_each(|w| on(w, Some(m)))
            })?;
            // The chain dump walks the kernel's chain list from its start for each
            // batch it sends (60k chains: a few hundred ms on one core), so the rules
            // of the chains it gave are dumped meanwhile: chains go out in batches to
            // whichever worker is free, each chain's message handed to every worker
            // before its rules can be asked for. Each chain is dumped by one worker,
            // so its rules come in order.
            let (tx, rx) = std::sync::mpsc::channel::<Vec<ChainId>>();
            let rx = std::sync::Mutex::new(rx);
            // Dumps the rules of the queued chains until the queue ends.
            let dump_queued = |r: &mut Requester, w: usize| -> io::Result<()> {
                loop {
                    let next = rx
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .recv();
                    let Ok(batch) = next else { return Ok(()) };
                    r.rules_of(&batch, &mut |m| on(w, Some(m)))?;
                }
            };
            std::thread::scope(|s| {
                let handles: Vec<_> = others
                    .iter_mut()
                    .enumerate()
                    .map(|(i, r)| s.spawn(move || dump_queued(r, i + 1)))
                    .collect();
                let mut batch = Vec::with_capacity(CHAIN_BATCH);
                // Each chain's message reaches every worker before the chain is queued.
                let chains = main.named_dump_each(
                    msg::GETCHAIN,
                    NFTA_CHAIN_TABLE,
                    NFTA_CHAIN_NAME,
                    &mut |m| (0..workers).for_each(|w| on(w, Some(m))),
                    &mut |chain| {
                        batch.push(chain);
                        if batch.len() == CHAIN_BATCH {
                            // The workers outlive the dump: a send cannot fail.
                            let _ = tx.send(std::mem::replace(
                                &mut batch,
                                Vec::with_capacity(CHAIN_BATCH),
                            ));
                        }
                    },
                );
                if !batch.is_empty() {
                    let _ = tx.send(batch);
                }
                // The queue ends here, whether the chain dump worked or not: the
                // workers stop when it is empty.
                drop(tx);
                let mine = chains.and_then(|()| dump_queued(&mut main, 0));
                let theirs = handles.into_iter().try_for_each(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(io::Error::other("dump thread panicked")))
                });
                mine.and(theirs)
            })?;
            if !(opts.sets || opts.elements) {
                return Ok(());
            }
            let sets = main.set_list(&mut |m| on(0, Some(m)))?;
            if opts.elements {
                // One dump per set, and the kernel finds each set by walking the
                // table's list of sets: with 10k anonymous maps that walk is most of
                // the time, shared here by the workers (sets dealt in turn, so each
                // gets early and late ones alike).
                let n = others.len() + 1;
                let shares: Vec<Vec<&SetId>> = (0..n)
                    .map(|w| sets.iter().skip(w).step_by(n).collect())
                    .collect();
                std::thread::scope(|s| {
                    let handles: Vec<_> = others
                        .iter_mut()
                        .zip(shares.iter().skip(1))
                        .enumerate()
                        .map(|(i, (r, part))| {
                            s.spawn(move || r.elements_of(part, &mut |m| on(i + 1, Some(m))))
                        })
                        .collect();
                    let first = shares.first().map_or(&[][..], Vec::as_slice);
                    let mine = main.elements_of(first, &mut |m| on(0, Some(m)));
                    let theirs = handles.into_iter().try_for_each(|h| {
                        h.join()
                            .unwrap_or_else(|_| Err(io::Error::other("dump thread panicked")))
                    });
                    mine.and(theirs)
                })?;
            }
            main.objects(&mut |m| on(0, Some(m)))
        })();
        match attempt_result {
            Ok(()) if main.generation()? == before => return Ok(before),
            Ok(()) => last_error = Some(io::Error::other("the ruleset changed during the dump")),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => last_error = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last_error.unwrap_or_else(|| io::Error::other("dump failed")))
}

/// Every nf_tables table, chain and rule (all families: iptables-nft's tables and
/// native ones) of this namespace or of `netns`, handed to `on` as the kernel's
/// `NEW*` messages in that order (and sets, elements, objects, flowtables as `opts`
/// asks), from GET dumps; returns the generation they were read at. Dumps are not
/// atomic together: when the generation changed meanwhile, or the kernel marks a dump
/// interrupted, the read starts over (`on` gets `None`: forget what came before), at
/// most three times. Read-only.
pub fn dump_ruleset(
    netns: Option<&str>,
    opts: &DumpOptions,
    on: &mut dyn FnMut(Option<Message<'_>>),
) -> io::Result<u32> {
    let mut last_error = None;
    for attempt in 0..3 {
        if attempt > 0 {
            on(None);
        }
        // A fresh socket each time: an interrupted dump leaves the rest of its answer
        // queued on the old one.
        let mut r = Requester::open(netns, opts.deadline)?;
        let before = r.generation()?;
        match r.dump_all(opts, &mut |m| on(Some(m))) {
            Ok(()) if r.generation()? == before => return Ok(before),
            Ok(()) => last_error = Some(io::Error::other("the ruleset changed during the dump")),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => last_error = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last_error.unwrap_or_else(|| io::Error::other("dump failed")))
}

/// `setsockopt(fd, SOL_SOCKET, name, value)` for a plain-old-data `value` (an int, a
/// timeval).
pub fn set_socket_option<T: Copy>(
    fd: std::os::fd::RawFd,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` is a live, initialised T for the call and the size passed is its
    // exact size; the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sets the socket's receive buffer (`SO_RCVBUFFORCE`, else `SO_RCVBUF`); best effort.
pub fn set_receive_buffer(socket: &netlink_sys::Socket, bytes: usize) {
    let size: libc::c_int = bytes.min(i32::MAX as usize) as libc::c_int;
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        if set_socket_option(socket.as_raw_fd(), opt, &size).is_ok() {
            return;
        }
    }
}

/// Bounds each receive on `socket` to `t` (`SO_RCVTIMEO`).
pub fn set_receive_timeout(socket: &netlink_sys::Socket, t: Duration) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: t.as_secs() as libc::time_t,
        tv_usec: t.subsec_micros() as libc::suseconds_t,
    };
    set_socket_option(socket.as_raw_fd(), libc::SO_RCVTIMEO, &tv)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::build;
    use crate::netns::Netns;

    /// A NEWRULE message of `ip filter BLK`, handle 7, with a `payload` expression and a
    /// `counter` of 3 packets and 87 bytes, as the kernel encodes them.
    fn rule_message() -> Vec<u8> {
        let expr = |name: &str, data: Vec<Vec<u8>>| {
            build::nested(
                NFTA_LIST_ELEM,
                &[
                    build::str_attr(NFTA_EXPR_NAME, name),
                    build::nested(NFTA_EXPR_DATA, &data),
                ],
            )
        };
        let payload = [
            vec![2u8, 0, 0, 0],
            build::str_attr(NFTA_RULE_TABLE, "filter"),
            build::str_attr(NFTA_RULE_CHAIN, "BLK"),
            build::attr(NFTA_RULE_HANDLE, &7u64.to_be_bytes()),
            build::nested(
                NFTA_RULE_EXPRESSIONS,
                &[
                    expr("payload", vec![build::attr(1, &1u32.to_be_bytes())]),
                    expr(
                        "counter",
                        vec![
                            build::attr(NFTA_COUNTER_BYTES, &87u64.to_be_bytes()),
                            build::attr(NFTA_COUNTER_PACKETS, &3u64.to_be_bytes()),
                        ],
                    ),
                ],
            ),
        ]
        .concat();
        build::message((SUBSYS_NFTABLES << 8) | msg::NEWRULE, 0, &payload)
    }

    #[test]
    fn a_rules_counter_is_decoded() {
        let bytes = rule_message();
        let m = crate::netlink::messages(&bytes).next().unwrap();
        assert_eq!(
            decode_rule_counter(&m),
            Some(RuleCounter {
                chain: (2, "filter".into(), "BLK".into()),
                handle: 7,
                count: Some(Count {
                    packets: 3,
                    bytes: 87
                }),
            })
        );
    }

    proptest::proptest! {
        /// Cut or changed anywhere, a rule message decodes to something or nothing,
        /// never a panic.
        #[test]
        fn damaged_rule_messages_never_panic(cut in 0usize..200, at in 0usize..200, byte: u8) {
            let mut bytes = rule_message();
            if at < bytes.len() {
                bytes[at] = byte;
            }
            bytes.truncate(cut.max(16));
            for m in crate::netlink::messages(&bytes) {
                let _ = decode_rule_counter(&m);
                let _ = decode_chain_counter(&m);
            }
        }
    }

    /// Privileged: the dumps read a private namespace's table, chain and rule, and a
    /// deadline that has passed ends the read with `TimedOut` (reported by callers as
    /// "could not read ... within N s"), never a hang.
    #[test]
    fn dumps_a_namespace_and_honours_the_deadline() {
        if !plumb_testkit::privileged(&["nft"]) {
            return;
        }
        let ns = Netns::create("plumb-netlink-os").expect("netns");
        let (ok, _, err) = ns
            .exec(
                "nft",
                &["-f", "-"],
                Some("table ip t {\n chain c {\n  tcp dport 22 accept\n }\n}\n"),
            )
            .expect("nft");
        assert!(ok, "{err}");
        let mut kinds = Vec::new();
        let opts = DumpOptions {
            sets: true,
            ..DumpOptions::default()
        };
        dump_ruleset(Some(ns.name()), &opts, &mut |m| {
            if let Some(m) = m {
                kinds.push(m.kind & 0xff);
            }
        })
        .expect("dump");
        assert_eq!(kinds, [msg::NEWTABLE, msg::NEWCHAIN, msg::NEWRULE]);
        let past = DumpOptions {
            deadline: Some(Instant::now() - Duration::from_secs(1)),
            ..DumpOptions::default()
        };
        let e = dump_ruleset(Some(ns.name()), &past, &mut |_| {}).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    }
}
