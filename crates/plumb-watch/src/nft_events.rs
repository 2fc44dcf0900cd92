//! nftables change notifications (`NFNLGRP_NFTABLES` on `NETLINK_NETFILTER`).
//!
//! The kernel multicasts every committed change of an nf_tables-backed ruleset —
//! iptables-nft and native nft alike — as NEWTABLE/NEWCHAIN/NEWRULE/DEL* messages,
//! closed by a NEWGEN message that carries the new generation id and the pid and
//! process name of the writer (see facts-kernel.md). [`decode`] is the pure decoder
//! (fuzzed: never panics) and [`decode_each`] its borrowing form, which the listener
//! uses; [`Batcher`] groups owned messages until NEWGEN (for tests and tools);
//! [`NftListener`] owns the socket, opened *inside* the watched network namespace
//! (subscriptions are per namespace) with a large receive buffer. A receive error
//! `ENOBUFS` means the kernel dropped notifications: the listener reports a gap and
//! the watcher resynchronises from a full dump — never silent blindness.

use plumb_os::netlink::{self, Attr, NLM_F_APPEND};
use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant, SystemTime};

/// `NFNL_SUBSYS_NFTABLES`.
const SUBSYS_NFTABLES: u16 = 10;
/// `NFNLGRP_NFTABLES`.
pub const NFNLGRP_NFTABLES: u32 = 7;

// NFT_MSG_* (low byte of the message type).
const NEWTABLE: u16 = 0;
const DELTABLE: u16 = 2;
const NEWCHAIN: u16 = 3;
const DELCHAIN: u16 = 5;
const NEWRULE: u16 = 6;
const DELRULE: u16 = 8;
const NEWGEN: u16 = 15;
const DESTROYTABLE: u16 = 26;
const DESTROYCHAIN: u16 = 27;
const DESTROYRULE: u16 = 28;

/// Whether an object appeared or went away.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// Created (NEW*; for a rule, added).
    New,
    /// Deleted (DEL* or DESTROY*).
    Del,
}

/// What a rule does at its end, as far as plumb needs it: where it jumps.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct RuleSummary {
    /// Chain named by a jump/goto verdict.
    pub jump: Option<String>,
    /// An xtables target extension (`DNAT`, `MARK`, ...) or a plain verdict (`accept`, `drop`).
    pub verdict: Option<String>,
}

/// One decoded nftables notification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NftMessage {
    /// A table created or deleted.
    Table {
        /// Created or deleted.
        op: Op,
        /// `NFPROTO_*` family: 2 ip, 10 ip6, 1 inet, 3 arp, 7 bridge, 5 netdev.
        family: u8,
        /// The table's name.
        name: String,
    },
    /// A chain created (or its policy changed: NEWCHAIN again) or deleted.
    Chain {
        /// Created (or updated) or deleted.
        op: Op,
        /// `NFPROTO_*` family: 2 ip, 10 ip6, 1 inet, 3 arp, 7 bridge, 5 netdev.
        family: u8,
        /// Its table's name.
        table: String,
        /// The chain's name.
        name: String,
        /// `NF_INET_*` hook number for base chains.
        hook: Option<u32>,
        /// `NF_ACCEPT` (1) or `NF_DROP` (0) for base chains.
        policy: Option<u32>,
    },
    /// A rule added or deleted.
    Rule {
        /// Added or deleted.
        op: Op,
        /// `NFPROTO_*` family: 2 ip, 10 ip6, 1 inet, 3 arp, 7 bridge, 5 netdev.
        family: u8,
        /// Its table's name.
        table: String,
        /// Its chain's name.
        chain: String,
        /// The rule's handle (unique within its table, assigned by the kernel).
        handle: Option<u64>,
        /// `NLM_F_APPEND` was set: appended (`-A`), not inserted (`-I`).
        appended: bool,
        /// Where it jumps and its verdict, when decoded.
        summary: RuleSummary,
        /// What the rule matches and does ([`rule_fingerprint`]): the same for the
        /// same rule written again, whatever its handle and counters.
        fingerprint: u64,
    },
    /// End of a transaction: generation id and the writer.
    Gen {
        /// The generation the transaction committed (the kernel skips 0 when it wraps).
        id: u32,
        /// The id of the thread that sent the batch (`NFTA_GEN_PROC_PID`).
        pid: Option<u32>,
        /// That thread's comm, at most 15 bytes (`NFTA_GEN_PROC_NAME`).
        comm: Option<String>,
    },
    /// Sets, elements, objects, flowtables: counted, not interpreted.
    Other {
        /// The `NFT_MSG_*` number (the message type's low byte).
        kind: u16,
    },
}

/// One nftables notification, borrowed from the receive buffer (no allocation): the
/// hot path decodes ~150k of these per 10k-service kube-proxy sync.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NftEvent<'a> {
    /// [`NftMessage::Table`], borrowed.
    Table {
        /// Created or deleted.
        op: Op,
        /// `NFPROTO_*` family.
        family: u8,
        /// The table's name.
        name: &'a str,
    },
    /// [`NftMessage::Chain`], borrowed.
    Chain {
        /// Created (or updated) or deleted.
        op: Op,
        /// `NFPROTO_*` family.
        family: u8,
        /// Its table's name.
        table: &'a str,
        /// The chain's name.
        name: &'a str,
        /// `NF_INET_*` hook number for base chains.
        hook: Option<u32>,
        /// `NF_ACCEPT` (1) or `NF_DROP` (0) for base chains.
        policy: Option<u32>,
    },
    /// [`NftMessage::Rule`], borrowed.
    Rule {
        /// Added or deleted.
        op: Op,
        /// `NFPROTO_*` family.
        family: u8,
        /// Its table's name.
        table: &'a str,
        /// Its chain's name.
        chain: &'a str,
        /// The rule's handle.
        handle: Option<u64>,
        /// Appended (`-A`), not inserted (`-I`).
        appended: bool,
        /// The chain a jump/goto verdict names. Decoded only where it matters:
        /// built-in chain names and native nft tables.
        jump: Option<&'a str>,
        /// Its target extension or plain verdict, decoded where `jump` is.
        verdict: Option<&'a str>,
        /// [`rule_fingerprint`] of the rule.
        fingerprint: u64,
    },
    /// [`NftMessage::Gen`], borrowed: the end of a transaction.
    Gen {
        /// The generation the transaction committed.
        id: u32,
        /// The id of the thread that sent the batch.
        pid: Option<u32>,
        /// That thread's comm.
        comm: Option<&'a str>,
    },
    /// [`NftMessage::Other`].
    Other {
        /// The `NFT_MSG_*` number.
        kind: u16,
    },
}

impl NftEvent<'_> {
    /// An owned copy.
    pub fn to_message(&self) -> NftMessage {
        match *self {
            NftEvent::Table { op, family, name } => NftMessage::Table {
                op,
                family,
                name: name.into(),
            },
            NftEvent::Chain {
                op,
                family,
                table,
                name,
                hook,
                policy,
            } => NftMessage::Chain {
                op,
                family,
                table: table.into(),
                name: name.into(),
                hook,
                policy,
            },
            NftEvent::Rule {
                op,
                family,
                table,
                chain,
                handle,
                appended,
                jump,
                verdict,
                fingerprint,
            } => NftMessage::Rule {
                op,
                family,
                table: table.into(),
                chain: chain.into(),
                handle,
                appended,
                summary: RuleSummary {
                    jump: jump.map(str::to_string),
                    verdict: verdict.map(str::to_string),
                },
                fingerprint,
            },
            NftEvent::Gen { id, pid, comm } => NftMessage::Gen {
                id,
                pid,
                comm: comm.map(str::to_string),
            },
            NftEvent::Other { kind } => NftMessage::Other { kind },
        }
    }
}

impl NftMessage {
    /// A borrowed view.
    pub fn as_event(&self) -> NftEvent<'_> {
        match self {
            NftMessage::Table { op, family, name } => NftEvent::Table {
                op: *op,
                family: *family,
                name,
            },
            NftMessage::Chain {
                op,
                family,
                table,
                name,
                hook,
                policy,
            } => NftEvent::Chain {
                op: *op,
                family: *family,
                table,
                name,
                hook: *hook,
                policy: *policy,
            },
            NftMessage::Rule {
                op,
                family,
                table,
                chain,
                handle,
                appended,
                summary,
                fingerprint,
            } => NftEvent::Rule {
                op: *op,
                family: *family,
                table,
                chain,
                handle: *handle,
                appended: *appended,
                jump: summary.jump.as_deref(),
                verdict: summary.verdict.as_deref(),
                fingerprint: *fingerprint,
            },
            NftMessage::Gen { id, pid, comm } => NftEvent::Gen {
                id: *id,
                pid: *pid,
                comm: comm.as_deref(),
            },
            NftMessage::Other { kind } => NftEvent::Other { kind: *kind },
        }
    }
}

/// Decodes every nftables message in one datagram. Never panics; unknown or
/// malformed messages become [`NftMessage::Other`] or are skipped.
pub fn decode(buf: &[u8]) -> Vec<NftMessage> {
    let mut out = Vec::new();
    decode_each(buf, &mut |e| out.push(e.to_message()));
    out
}

/// Decodes every nftables message in one datagram into borrowed events, in order.
/// Returns false when the datagram ends in a cut message (it was trimmed: the rest of
/// that message and any after it are lost).
pub fn decode_each<'a>(buf: &'a [u8], on: &mut dyn FnMut(NftEvent<'a>)) -> bool {
    for (m, cut) in netlink::messages_up_to_cut(buf) {
        if cut {
            return false;
        }
        if let Some(e) = decode_one(m) {
            on(e);
        }
    }
    true
}

/// Table names of the iptables-nft compatibility layer.
fn is_xtables_table(name: &str) -> bool {
    matches!(name, "filter" | "nat" | "mangle" | "raw" | "security")
}

fn decode_one(m: netlink::Message<'_>) -> Option<NftEvent<'_>> {
    if m.kind >> 8 != SUBSYS_NFTABLES {
        return None;
    }
    // nfgenmsg: family, version, res_id.
    let family = *m.payload.first()?;
    let body = m.payload.get(4..)?;
    let op = |new: bool| if new { Op::New } else { Op::Del };
    // One pass over the top-level attributes.
    let mut a: [Option<Attr<'_>>; 8] = [None; 8];
    for attr in netlink::attrs(body) {
        if let Some(slot) = a.get_mut(attr.kind as usize) {
            *slot = Some(attr);
        }
    }
    let s = |k: usize| a[k].map(|x| x.str()).unwrap_or("");
    Some(match m.kind & 0xff {
        k @ (NEWTABLE | DELTABLE | DESTROYTABLE) => NftEvent::Table {
            op: op(k == NEWTABLE),
            family,
            name: s(1),
        },
        k @ (NEWCHAIN | DELCHAIN | DESTROYCHAIN) => NftEvent::Chain {
            op: op(k == NEWCHAIN),
            family,
            table: s(1),
            name: s(3),
            hook: a[4].and_then(|h| h.nested().find(|x| x.kind == 1)?.be_u32()),
            policy: a[5].and_then(|x| x.be_u32()),
        },
        k @ (NEWRULE | DELRULE | DESTROYRULE) => {
            let (table, chain) = (s(1), s(2));
            // Expressions matter only for hook rules: built-in chains of iptables
            // tables, and any chain of a native nft table (base chains have any name).
            let wanted = !is_xtables_table(table) || crate::changes::is_builtin_chain(chain);
            let (jump, verdict) = match a[4] {
                Some(exprs) if wanted => rule_summary(exprs),
                _ => (None, None),
            };
            NftEvent::Rule {
                op: op(k == NEWRULE),
                family,
                table,
                chain,
                handle: a[3].and_then(|x| x.be_u64()),
                appended: m.flags & NLM_F_APPEND != 0,
                jump,
                verdict,
                fingerprint: rule_fingerprint(family, a[4], a[5], a[7]),
            }
        }
        NEWGEN => NftEvent::Gen {
            id: a[1].and_then(|x| x.be_u32()).unwrap_or(0),
            pid: a[2].and_then(|x| x.be_u32()),
            comm: a[3].map(|x| x.str()),
        },
        kind => NftEvent::Other { kind },
    })
}

/// Key of [`rule_fingerprint`], random per process: a writer cannot choose a rule
/// whose fingerprint equals another's.
static FINGERPRINT_KEY: std::sync::LazyLock<foldhash::fast::RandomState> =
    std::sync::LazyLock::new(foldhash::fast::RandomState::default);

/// A 64-bit fingerprint of what a rule matches and does, from a NEWRULE or DELRULE
/// message (the kernel sends a deleted rule's expressions too): its expressions
/// (`NFTA_RULE_EXPRESSIONS`) in order, its xtables compatibility data
/// (`NFTA_RULE_COMPAT`: protocol and inversion) and its user data (`NFTA_RULE_USERDATA`:
/// the comment). Counters are left out (a rule restored with `[0:0]` is the same
/// rule), and so are the handle and position. xtables matches and targets are
/// dumped by the kernel without their private state, so a rule written twice has
/// the same fingerprint (checked against the kernel: `tests/kernel_watch.rs`).
///
/// Bytes the kernel ignores ([`IGNORED_INFO_BYTES`]) are left out too.
///
/// Keyed with a random key (foldhash): not cryptographic, but a writer cannot aim
/// for a collision it cannot see. A collision could only make a changed chain look
/// rewritten with the same rules (an informational event naming the writer).
///
/// Cost: ~35 ns for a kube-proxy rule (~700 bytes in 9 expressions: about half
/// walking the expressions, half hashing), on the replay of recorded notifications;
/// decoding the rule without it takes ~21 ns.
pub fn rule_fingerprint(
    family: u8,
    expressions: Option<Attr<'_>>,
    compat: Option<Attr<'_>>,
    userdata: Option<Attr<'_>>,
) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = FINGERPRINT_KEY.build_hasher();
    if let Some(exprs) = expressions {
        // The expressions are hashed as one run of bytes with holes: a counter's data
        // and ignored match bytes. This runs for every rule notification (the
        // listener's hot path, ~10 expressions a rule): the expressions are walked by
        // their headers, each name compared as 8 bytes, no per-expression hashing.
        let v = exprs.value;
        let u16_at = |b: &[u8], i: usize| {
            b.get(i..i + 2)
                .map(|x| u16::from_ne_bytes([x[0], x[1]]) as usize)
        };
        let mut from = 0;
        let mut off = 0;
        while let Some(len) = u16_at(v, off) {
            let Some(elem) = v.get(off..off + len).filter(|_| len >= 4) else {
                break;
            };
            // NFTA_EXPR_NAME at 4 (its value at 8), then NFTA_EXPR_DATA.
            let data = || {
                let at = 4 + ((u16_at(elem, 4)? + 3) & !3);
                let value = elem.get(at + 4..at + u16_at(elem, at)?)?;
                Some(Attr { kind: 2, value })
            };
            let hole = match elem.get(8..16) {
                Some(b"counter\0") => data().map(|d| d.value),
                Some(n) if n.starts_with(b"match\0") => ignored_info_bytes(family, data()),
                _ => None,
            };
            if let Some(hole) = hole {
                let start = (hole.as_ptr() as usize).wrapping_sub(v.as_ptr() as usize);
                if from <= start && start + hole.len() <= v.len() {
                    h.write(&v[from..start]);
                    from = start + hole.len();
                }
            }
            off += (len + 3) & !3;
        }
        h.write(&v[from..]);
    }
    for (tag, a) in [(3u8, compat), (4, userdata)] {
        if let Some(a) = a {
            h.write_u8(tag);
            h.write(a.value);
        }
    }
    h.finish()
}

/// Bytes of an xtables match's info (`NFTA_MATCH_INFO`) that the kernel ignores and
/// iptables fills in two ways for the same rule: (family, match, revision, bytes of
/// the info). `recent` v1 in IPv4: its mask is a 16-byte address of which IPv4 reads
/// 4; iptables sets all 16 to 0xff when `--mask` is not given (kube-proxy's rules)
/// and only those 4 for `--mask 255.255.255.255` (what iptables-save prints of them).
/// Between kube-proxy's payload with every feature and the restore of its save, rule
/// by rule, this is the only difference in the kernel's bytes.
pub const IGNORED_INFO_BYTES: &[(u8, &str, u32, std::ops::Range<usize>)] =
    &[(2, "recent", 1, 216..228)];

/// The bytes of a `match` expression (its `NFTA_EXPR_DATA` is `data`) to leave out
/// of its fingerprint, if any ([`IGNORED_INFO_BYTES`]).
fn ignored_info_bytes<'a>(family: u8, data: Option<Attr<'a>>) -> Option<&'a [u8]> {
    let data = data.filter(|d| d.kind == 2)?;
    let mut attrs = data.nested();
    // NFTA_MATCH_NAME comes first: most matches are not in the table, and this runs
    // for every match of every rule notification.
    let name = attrs.next().filter(|a| a.kind == 1)?.value;
    let name = name.split(|&b| b == 0).next()?;
    let mut known = IGNORED_INFO_BYTES
        .iter()
        .filter(|(f, n, _, _)| *f == family && n.as_bytes() == name)
        .peekable();
    known.peek()?;
    let (mut rev, mut info) = (None, None);
    for a in attrs {
        match a.kind {
            2 => rev = a.be_u32(),
            3 => info = Some(a.value),
            _ => {}
        }
    }
    let (rev, info) = (rev?, info?);
    let (_, _, _, range) = known.find(|(_, _, r, _)| *r == rev)?;
    info.get(range.clone())
}

/// Reads the last verdict of a rule's expression list (`NFTA_RULE_EXPRESSIONS`):
/// (jump/goto target, verdict or target extension name).
fn rule_summary(exprs: Attr<'_>) -> (Option<&str>, Option<&str>) {
    let (mut jump, mut verdict) = (None, None);
    for elem in exprs.nested().filter(|a| a.kind == 1) {
        let name = elem.nested().find(|a| a.kind == 1).map(|a| a.str());
        let Some(data) = elem.nested().find(|a| a.kind == 2) else {
            continue;
        };
        match name {
            Some("immediate") => {
                // NFTA_IMMEDIATE_DATA -> NFTA_DATA_VERDICT -> code, chain.
                let v = data
                    .nested()
                    .find(|a| a.kind == 2)
                    .and_then(|d| d.nested().find(|a| a.kind == 2));
                if let Some(v) = v {
                    let code = v
                        .nested()
                        .find(|a| a.kind == 1)
                        .and_then(|a| a.be_u32())
                        .map(|c| c as i32);
                    let chain = v.nested().find(|a| a.kind == 2).map(|a| a.str());
                    verdict = code.map(verdict_name);
                    jump = match code {
                        Some(-3) | Some(-4) => chain,
                        _ => None,
                    };
                }
            }
            Some("target") => {
                verdict = data.nested().find(|a| a.kind == 1).map(|a| a.str());
            }
            _ => {}
        }
    }
    (jump, verdict)
}

fn verdict_name(code: i32) -> &'static str {
    match code {
        0 => "drop",
        1 => "accept",
        2 => "stolen",
        3 => "queue",
        -1 => "continue",
        -2 => "break",
        -3 => "jump",
        -4 => "goto",
        -5 => "return",
        _ => "verdict",
    }
}

/// The netfilter family name of an `NFPROTO_*` code.
pub fn family_name(code: u8) -> &'static str {
    match code {
        1 => "inet",
        2 => "ip",
        3 => "arp",
        5 => "netdev",
        7 => "bridge",
        10 => "ip6",
        _ => "unknown",
    }
}

/// Messages of one committed transaction, closed by its NEWGEN.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    /// The generation its NEWGEN announced.
    pub generation: u32,
    /// The id of the thread that sent it, from NEWGEN.
    pub pid: Option<u32>,
    /// That thread's comm, from NEWGEN.
    pub comm: Option<String>,
    /// Its notifications in arrival order, NEWGEN excluded; the first
    /// `max_messages` of the [`Batcher`] only.
    pub messages: Vec<NftMessage>,
    /// When the NEWGEN was received.
    pub received: Option<SystemTime>,
    /// When the first notification of this transaction was received: the kernel
    /// sends them all at commit, so this is the closest we get to the commit time.
    pub started: Option<SystemTime>,
}

/// Groups messages until each NEWGEN. Memory is bounded: a transaction larger than
/// `max_messages` keeps only the first ones and counts the rest.
#[derive(Debug)]
pub struct Batcher {
    pending: Vec<NftMessage>,
    dropped: usize,
    max_messages: usize,
    started: Option<SystemTime>,
}

impl Default for Batcher {
    fn default() -> Self {
        Batcher::new(2_000_000)
    }
}

impl Batcher {
    /// A batcher that keeps at most `max_messages` messages of one transaction.
    pub fn new(max_messages: usize) -> Batcher {
        Batcher {
            pending: Vec::new(),
            dropped: 0,
            max_messages,
            started: None,
        }
    }

    /// Feeds decoded messages; returns the batches they complete.
    pub fn push(&mut self, msgs: Vec<NftMessage>, now: SystemTime) -> Vec<Batch> {
        let mut out = Vec::new();
        for m in msgs {
            if self.started.is_none() {
                self.started = Some(now);
            }
            match m {
                NftMessage::Gen { id, pid, comm } => out.push(Batch {
                    generation: id,
                    pid,
                    comm,
                    messages: std::mem::take(&mut self.pending),
                    received: Some(now),
                    started: self.started.take(),
                }),
                m if self.pending.len() < self.max_messages => self.pending.push(m),
                _ => self.dropped += 1,
            }
        }
        out
    }

    /// Forgets a partial transaction (after a gap: its start was lost).
    pub fn reset(&mut self) {
        self.pending.clear();
        self.started = None;
        self.dropped = 0;
    }
}

/// What the listener saw.
#[derive(Debug)]
pub enum Received {
    /// Transactions completed by what was read ([`NftListener::receive`] only).
    Batches(Vec<Batch>),
    /// Datagrams were decoded and handed over message by message.
    Data {
        /// How many datagrams were read.
        datagrams: usize,
    },
    /// The kernel dropped notifications (ENOBUFS): resynchronise.
    Gap,
    /// Nothing within the receive timeout.
    Idle,
}

/// A `NETLINK_NETFILTER` socket subscribed to nftables notifications of one netns.
pub struct NftListener {
    socket: netlink_sys::Socket,
    buf: Vec<u8>,
    batcher: Batcher,
    /// A peek ([`NftListener::queue_is_empty`]) took the socket's ENOBUFS report:
    /// the next receive reports the gap.
    gap_seen: bool,
}

/// Receive buffer asked for (SO_RCVBUFFORCE, falling back to SO_RCVBUF): replacing a
/// 10k-service ruleset produces 150k–300k notifications at once, ~90 MB of socket
/// buffers if watch is starved of CPU meanwhile (charged only while queued).
pub const RECEIVE_BUFFER: usize = 128 << 20;

/// Bytes a listener keeps for each datagram: the kernel fills notification datagrams to
/// about a page (NLMSG_GOODSIZE); a dump reply of one big object may be longer.
pub const LISTENER_SLOT: usize = 64 * 1024;
/// Datagrams a listener takes per system call (its buffer is this many slots; pages
/// are touched only as far as datagrams fill them).
pub const LISTENER_BATCH: usize = 16;
impl NftListener {
    /// Subscribes in the current network namespace, or in `netns` (a name under
    /// /run/netns or a path such as /proc/PID/ns/net). Needs CAP_NET_ADMIN (and
    /// CAP_SYS_ADMIN to enter another namespace).
    pub fn open(netns: Option<&str>, receive_buffer: usize) -> io::Result<NftListener> {
        let socket = netfilter_socket(netns)?;
        socket.add_membership(NFNLGRP_NFTABLES)?;
        set_receive_buffer(&socket, receive_buffer);
        set_receive_timeout(&socket, Duration::from_millis(500))?;
        Ok(NftListener {
            socket,
            buf: vec![0; LISTENER_SLOT * LISTENER_BATCH],
            batcher: Batcher::default(),
            gap_seen: false,
        })
    }

    /// Waits up to the receive timeout for datagrams and hands their messages to `on`
    /// as borrowed events, in order (no allocation per message). One `recvmmsg` takes
    /// up to [`LISTENER_BATCH`] datagrams. A datagram longer than its slot (never seen:
    /// the kernel fills datagrams to about a page) or holding a cut message is
    /// reported as a gap.
    pub fn receive_each(&mut self, on: &mut dyn FnMut(NftEvent<'_>)) -> io::Result<Received> {
        self.receive_whole(&mut |d| decode_each(d, on))
    }

    /// Waits up to the receive timeout and hands each datagram received, whole and
    /// undecoded, to `on`: for recording notifications to replay (benches/apply.rs).
    /// A datagram longer than its slot or holding a cut message is reported as a gap.
    pub fn receive_datagrams(&mut self, on: &mut dyn FnMut(&[u8])) -> io::Result<Received> {
        self.receive_whole(&mut |d| {
            on(d);
            !netlink::messages_up_to_cut(d).any(|(_, cut)| cut)
        })
    }

    /// Whether nothing is queued on the socket now: a peek, without waiting. The
    /// kernel hands a pending ENOBUFS to whoever reads first, peeks included, so a peek
    /// that gets it keeps it for the next receive (a gap) and says "not empty".
    pub fn queue_is_empty(&mut self) -> bool {
        let mut byte = [0u8; 1];
        // SAFETY: a valid one-byte buffer for a one-byte peek on an open socket.
        let rc = unsafe {
            libc::recv(
                self.socket.as_raw_fd(),
                byte.as_mut_ptr().cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        if rc >= 0 {
            return false;
        }
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::EAGAIN) => true,
            Some(libc::ENOBUFS) => {
                self.gap_seen = true;
                false
            }
            _ => false,
        }
    }

    /// Discards every queued datagram, without waiting (for at most `limit`), and
    /// returns how many. Before a resync's dump: what is queued is in the dump, and
    /// only an emptied queue clears the socket's congestion: until then the kernel
    /// drops further notifications without reporting ENOBUFS again.
    pub fn discard_queued(&mut self, limit: Duration) -> io::Result<usize> {
        self.gap_seen = false;
        let deadline = Instant::now() + limit;
        let mut n = 0;
        while Instant::now() < deadline {
            match self.socket.recv(&mut &mut self.buf[..], libc::MSG_DONTWAIT) {
                Ok(_) => n += 1,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(n),
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }

    /// One `recvmmsg` into the listener's slots: blocks up to the receive timeout for
    /// the first datagram only, then hands each datagram received to `on`, which says
    /// whether it held whole messages only. A datagram longer than its slot (not
    /// handed over) or holding a cut message means notifications were lost: the rest
    /// of the batch is not handed over, and the call reports a gap.
    fn receive_whole(&mut self, on: &mut dyn FnMut(&[u8]) -> bool) -> io::Result<Received> {
        if std::mem::take(&mut self.gap_seen) {
            return Ok(Received::Gap);
        }
        const SLOTS: usize = LISTENER_BATCH;
        let slot = self.buf.len() / SLOTS;
        let base = self.buf.as_mut_ptr();
        // SAFETY: plain-old-data C structs; all-zero is a valid (empty) value.
        let mut iovs: [libc::iovec; SLOTS] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut hdrs: [libc::mmsghdr; SLOTS] = unsafe { std::mem::zeroed() };
        for i in 0..SLOTS {
            iovs[i] = libc::iovec {
                // SAFETY: slot i lies within `buf` (SLOTS * slot <= buf.len()).
                iov_base: unsafe { base.add(i * slot) }.cast(),
                iov_len: slot,
            };
            hdrs[i].msg_hdr.msg_iov = &mut iovs[i];
            hdrs[i].msg_hdr.msg_iovlen = 1;
        }
        let n = loop {
            // SAFETY: `hdrs` point at live iovecs into `buf`, which outlive the
            // call; the kernel writes at most `slot` bytes per slot, msg_len and flags.
            // MSG_WAITFORONE: block (up to SO_RCVTIMEO) for the first datagram only.
            let rc = unsafe {
                libc::recvmmsg(
                    self.socket.as_raw_fd(),
                    hdrs.as_mut_ptr(),
                    SLOTS as libc::c_uint,
                    libc::MSG_WAITFORONE,
                    std::ptr::null_mut(),
                )
            };
            if rc >= 0 {
                break rc as usize;
            }
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::ENOBUFS) => Ok(Received::Gap),
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => Ok(Received::Idle),
                _ => Err(e),
            };
        };
        for (i, h) in hdrs.iter().enumerate().take(n.min(SLOTS)) {
            let len = (h.msg_len as usize).min(slot);
            let start = i * slot;
            if h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 || !on(&self.buf[start..start + len]) {
                return Ok(Received::Gap);
            }
        }
        Ok(if n == 0 {
            Received::Idle
        } else {
            Received::Data { datagrams: n }
        })
    }

    /// Waits up to the receive timeout for notifications, grouped into transactions.
    pub fn receive(&mut self) -> io::Result<Received> {
        if std::mem::take(&mut self.gap_seen) {
            self.batcher.reset();
            return Ok(Received::Gap);
        }
        let mut batches = Vec::new();
        loop {
            let n = match self.socket.recv(&mut &mut self.buf[..], 0) {
                Ok(n) => n,
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    self.batcher.reset();
                    return Ok(Received::Gap);
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            let n = n.min(self.buf.len());
            batches.extend(self.batcher.push(decode(&self.buf[..n]), SystemTime::now()));
            if !batches.is_empty() {
                // A transaction is complete: report it now (latency), the rest of a
                // burst is read on the next call.
                break;
            }
        }
        Ok(if batches.is_empty() {
            Received::Idle
        } else {
            Received::Batches(batches)
        })
    }
}

use plumb_os::nftables::netfilter_socket;
pub(crate) use plumb_os::nftables::set_receive_buffer;
pub(crate) use plumb_os::nftables::set_receive_timeout;

/// Every nf_tables table, chain and rule (all families: iptables-nft's tables and
/// native ones) of this namespace or of `netns`, handed to `on` as "new" events in
/// that order, from GET dumps ([`plumb_os::nftables::dump_ruleset`]); returns the
/// generation they were read at. When the dump starts over (the generation moved,
/// or the kernel marked a dump interrupted) `on` gets `None`: forget what came
/// before. Read-only.
///
/// A dump lists a chain's rules in order: each is marked appended when its handle is
/// above the one before (as when it was appended), so the state knows whether the
/// chain's order is its handles' order (`state`: a rewrite with the same rules is
/// recognised only then).
pub fn dump_ruleset(
    netns: Option<&str>,
    on: &mut dyn FnMut(Option<NftEvent<'_>>),
) -> io::Result<u32> {
    // (family, table, chain) of the rule before and its handle.
    let mut previous: Option<(u8, String, String, Option<u64>)> = None;
    let opts = plumb_os::nftables::DumpOptions::default();
    plumb_os::nftables::dump_ruleset(netns, &opts, &mut |m| {
        let Some(m) = m else {
            previous = None;
            on(None);
            return;
        };
        match decode_one(m) {
            Some(NftEvent::Rule {
                op,
                family,
                table,
                chain,
                handle,
                jump,
                verdict,
                fingerprint,
                ..
            }) => {
                let same_chain = previous.as_ref().is_some_and(|(f, t, c, _)| {
                    (*f, t.as_str(), c.as_str()) == (family, table, chain)
                });
                let appended = match previous.as_ref().filter(|_| same_chain) {
                    None => true,
                    Some((_, _, _, p)) => match (p, handle) {
                        (None, _) => true,
                        (Some(p), Some(h)) => h > *p,
                        (Some(_), None) => false,
                    },
                };
                let before = if same_chain {
                    previous.as_ref().and_then(|p| p.3)
                } else {
                    None
                };
                previous = Some((
                    family,
                    table.to_string(),
                    chain.to_string(),
                    handle.or(before),
                ));
                on(Some(NftEvent::Rule {
                    op,
                    family,
                    table,
                    chain,
                    handle,
                    appended,
                    jump,
                    verdict,
                    fingerprint,
                }))
            }
            Some(e) => on(Some(e)),
            None => {}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use plumb_os::netlink::build::*;

    fn nfmsg(msg: u16, flags: u16, family: u8, attrs: &[Vec<u8>]) -> Vec<u8> {
        let mut payload = vec![family, 0, 0, 0];
        payload.extend(attrs.concat());
        message((SUBSYS_NFTABLES << 8) | msg, flags, &payload)
    }

    /// A rule as the kernel sends it: `-p tcp -m recent --set ... -j DNAT`, with a
    /// counter, in `family`; `packets` in its counter, `mask_tail` in the bytes of
    /// the recent match's mask IPv4 does not read, `port` in its comparison.
    fn recent_rule(
        op: u16,
        family: u8,
        handle: u64,
        packets: u64,
        mask_tail: u8,
        port: u16,
    ) -> Vec<u8> {
        let expr = |name: &str, data: Vec<u8>| nested(1, &[str_attr(1, name), nested(2, &[data])]);
        let mut info = vec![0u8; 228];
        info[10..17].copy_from_slice(b"KUBE-SE");
        info[212..216].fill(0xff);
        info[216..228].fill(mask_tail);
        let exprs = nested(
            4,
            &[
                expr("cmp", attr(3, &port.to_be_bytes())),
                nested(
                    1,
                    &[
                        str_attr(1, "match"),
                        nested(
                            2,
                            &[
                                str_attr(1, "recent"),
                                attr(2, &1u32.to_be_bytes()),
                                attr(3, &info),
                            ],
                        ),
                    ],
                ),
                expr("counter", attr(2, &packets.to_be_bytes())),
                expr("target", str_attr(1, "DNAT")),
            ],
        );
        nfmsg(
            op,
            NLM_F_APPEND,
            family,
            &[
                str_attr(1, "nat"),
                str_attr(2, "KUBE-SEP-X"),
                attr(3, &handle.to_be_bytes()),
                exprs,
            ],
        )
    }

    fn fingerprint_of(buf: &[u8]) -> u64 {
        match &decode(buf)[..] {
            [NftMessage::Rule { fingerprint, .. }] => *fingerprint,
            other => panic!("{other:?}"),
        }
    }

    /// The same rule deleted (with its counters) and added again (new handle, zero
    /// counters, the recent mask written as iptables-save prints it) has the same
    /// fingerprint; another port, or the mask's tail in IPv6 (where it is read), does
    /// not.
    #[test]
    fn a_rule_written_again_has_the_same_fingerprint() {
        let deleted = fingerprint_of(&recent_rule(DELRULE, 2, 7, 1234, 0xff, 80));
        assert_eq!(
            deleted,
            fingerprint_of(&recent_rule(NEWRULE, 2, 99, 0, 0, 80))
        );
        assert_ne!(
            deleted,
            fingerprint_of(&recent_rule(NEWRULE, 2, 99, 0, 0, 81))
        );
        assert_ne!(
            fingerprint_of(&recent_rule(NEWRULE, 10, 7, 0, 0xff, 80)),
            fingerprint_of(&recent_rule(NEWRULE, 10, 7, 0, 0, 80))
        );
        assert_eq!(
            fingerprint_of(&recent_rule(NEWRULE, 10, 7, 0, 0xff, 80)),
            fingerprint_of(&recent_rule(DELRULE, 10, 8, 5, 0xff, 80))
        );
    }

    #[test]
    fn decodes_chain_rule_and_gen() {
        let jump = nested(
            4,
            &[nested(
                1,
                &[
                    str_attr(1, "immediate"),
                    nested(
                        2,
                        &[
                            attr(1, &0u32.to_be_bytes()),
                            nested(
                                2,
                                &[nested(
                                    2,
                                    &[
                                        attr(1, &(-3i32 as u32).to_be_bytes()),
                                        str_attr(2, "KUBE-SERVICES"),
                                    ],
                                )],
                            ),
                        ],
                    ),
                ],
            )],
        );
        let buf = [
            nfmsg(
                DELCHAIN,
                0,
                2,
                &[str_attr(1, "nat"), str_attr(3, "KUBE-SVC-X")],
            ),
            nfmsg(
                NEWRULE,
                NLM_F_APPEND,
                2,
                &[
                    str_attr(1, "nat"),
                    str_attr(2, "PREROUTING"),
                    attr(3, &9u64.to_be_bytes()),
                    jump,
                ],
            ),
            nfmsg(
                NEWCHAIN,
                0,
                2,
                &[
                    str_attr(1, "filter"),
                    str_attr(3, "FORWARD"),
                    nested(4, &[attr(1, &2u32.to_be_bytes())]),
                    attr(5, &0u32.to_be_bytes()),
                ],
            ),
            nfmsg(
                NEWGEN,
                0,
                0,
                &[
                    attr(1, &19u32.to_be_bytes()),
                    attr(2, &4211u32.to_be_bytes()),
                    str_attr(3, "venAgent"),
                ],
            ),
        ]
        .concat();
        let msgs = decode(&buf);
        assert_eq!(
            msgs[0],
            NftMessage::Chain {
                op: Op::Del,
                family: 2,
                table: "nat".into(),
                name: "KUBE-SVC-X".into(),
                hook: None,
                policy: None
            }
        );
        let NftMessage::Rule {
            op,
            chain,
            handle,
            appended,
            summary,
            ..
        } = &msgs[1]
        else {
            panic!("{:?}", msgs[1])
        };
        assert_eq!(
            (*op, chain.as_str(), *handle, *appended),
            (Op::New, "PREROUTING", Some(9), true)
        );
        assert_eq!(summary.jump.as_deref(), Some("KUBE-SERVICES"));
        assert!(matches!(
            &msgs[2],
            NftMessage::Chain {
                hook: Some(2),
                policy: Some(0),
                ..
            }
        ));
        let mut b = Batcher::default();
        let batches = b.push(msgs, SystemTime::UNIX_EPOCH);
        assert_eq!(batches.len(), 1);
        assert_eq!(batches[0].generation, 19);
        assert_eq!(batches[0].pid, Some(4211));
        assert_eq!(batches[0].comm.as_deref(), Some("venAgent"));
        assert_eq!(batches[0].messages.len(), 3);
    }

    #[test]
    fn a_cut_datagram_is_told_apart() {
        let jump = nested(
            4,
            &[nested(
                1,
                &[str_attr(1, "immediate"), nested(2, &[attr(1, &[0; 64])])],
            )],
        );
        let rule = nfmsg(
            DELRULE,
            0,
            2,
            &[
                str_attr(1, "nat"),
                str_attr(2, "KUBE-SEP-ABC"),
                attr(3, &7u64.to_be_bytes()),
                jump,
            ],
        );
        let buf = [rule.clone(), rule].concat();
        // The listener's decoder says whether the datagram ended on a message boundary
        // (a cut one means lost notifications), after handing over the whole messages.
        let mut whole = 0;
        assert!(decode_each(&buf, &mut |_| whole += 1));
        assert_eq!(whole, 2);
        let mut before_cut = 0;
        assert!(!decode_each(&buf[..buf.len() - 8], &mut |_| before_cut += 1));
        assert_eq!(before_cut, 1);
    }

    #[test]
    fn other_subsystems_and_garbage_are_ignored() {
        assert!(decode(&message(0x0100, 0, &[1, 2, 3, 4])).is_empty());
        assert!(decode(&message(SUBSYS_NFTABLES << 8, 0, &[])).is_empty());
        assert!(decode(b"garbage").is_empty());
    }

    #[test]
    fn batcher_bounds_memory() {
        let mut b = Batcher::new(2);
        let m = || NftMessage::Other { kind: 9 };
        assert!(
            b.push(vec![m(), m(), m()], SystemTime::UNIX_EPOCH)
                .is_empty()
        );
        let out = b.push(
            vec![NftMessage::Gen {
                id: 1,
                pid: None,
                comm: None,
            }],
            SystemTime::UNIX_EPOCH,
        );
        assert_eq!(out[0].messages.len(), 2);
    }
}
